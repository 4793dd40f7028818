//! The queue of waiters on the nodes: fairness across processes.
//!
//! A caller of [`lock`](crate::Redlock::lock) that finds the lock held does
//! not retry blind: it waits in a queue kept *on each node*, next to the lock
//! key, and is served in about the order it arrived, whichever client or
//! machine it runs in.
//!
//! # The mechanism
//!
//! For a lock key `K`, each node keeps `K:quorlock-queue`, a sorted set of
//! waiter ids by *ticket*. A waiter id is its client's *liveness key*
//! (`<key prefix>quorlock-client:<client id>`), a dot and a number, and an
//! entry is *live* while that key exists on the node: one heartbeat per
//! client and node keeps it (see `session.rs`), so a client's waiters cost
//! the nodes nothing while they wait, however many there are. Every round
//! of a waiting `lock` call runs one script per node (`scripts::WAIT`),
//! which first marks the caller's client live, then either takes the lock
//! or queues the waiter:
//!
//! - It sets `K` (`SET PX`, as a plain Redlock round) only when `K` is
//!   absent and the caller is the queue's first live entry (or the queue is
//!   empty), or when `K` holds the caller's *reservation*. Otherwise it puts
//!   the caller in the queue (or keeps it there), and a free `K` goes to the
//!   first live waiter as a reservation.
//! - Finding the first live waiter drops the entries before it whose client
//!   is dead (its liveness key gone): each entry is dropped once, so the
//!   work is O(log n) per call over time, and a dead client's hundreds of
//!   entries go at the first look after its key expired.
//! - A release (`scripts::RELEASE`, token-checked) does not just
//!   delete `K` when someone waits: it replaces our token with a reservation
//!   for the first live waiter, `quorlock-next:<waiter id>`, that lives as
//!   long as that waiter's client's liveness key, and publishes the waiter id
//!   and `K` on the channel of that waiter's client (see `notify.rs`): one
//!   process hears it, and in it only that waiter acts on it: no herd, of
//!   tasks or of processes. Its claim round starts when the first node told
//!   it so; each node gets the claim as soon as it told (or [`CLAIM_GRACE`]
//!   after the round started), and the round wins once a quorum granted, as
//!   any round.
//! - Waiters do not poll. What no release announces (a holder whose key
//!   expired, a reservation for a waiter that died or did not claim, a
//!   foreign client's release) is found by the heartbeat's *checks* of the
//!   keys its client waits on, which settle the key as a release would (a
//!   free key or a void reservation goes to the first live waiter, with a
//!   notification), at the key's `PTTL` and at least every
//!   `session::MAX_CHECK`, one second, or every `session::FIRST_MAX_CHECK`,
//!   five seconds, where a waiter of the client leads the queue behind a
//!   quorlock holder, whose release then notifies that waiter itself (see
//!   `session.rs`).
//! - Tickets: a new waiter joins each node at "last ticket there + 1"; the
//!   client takes the highest ticket any node gave and, if the nodes
//!   differed, writes it to every node with its next round. From then on
//!   the waiter sorts the same way on every node (ties broken by waiter id,
//!   as sorted sets do), so the nodes' heads agree once they hold the same
//!   entries. A waiter whose join overlapped nobody's sorts after every
//!   waiter already queued on a quorum: first come, first served.
//! - The mark: while waiters are queued behind a quorlock holder on a node,
//!   that node's value is the holder's token followed by `+`
//!   ([`MARK`](crate::request::MARK)). A waiter's queue script marks the
//!   holder when it queues there, a heartbeat check marks it too, and a
//!   claim that leaves others queued sets its token marked at once. So a
//!   release that finds its token *unmarked* knows nobody waits there and
//!   deletes the key, the plain compare-and-delete; a marked one hands the
//!   key on. Only values of quorlock's form (`q` and 32 hex digits) are
//!   marked: a foreign client compares its whole value and would no longer
//!   recognise its lock. A holder that took the key without the queue
//!   script while waiters were queued (a `SET NX` in the instant between a
//!   reservation's expiry and the next check) is marked at the next check;
//!   released before it, it deletes the key, and the check hands it on.
//! - Leaving: a call that gives up, wins, or whose future is dropped removes
//!   its entry in the background (and passes on a reservation made for it).
//!   Should that not reach a node, the entry stays while its client lives,
//!   until a release hands it the lock: the client then hears of a handoff
//!   to a waiter it no longer has and takes it out there. (With
//!   notifications off the client hears nothing: such an entry holds that
//!   node's queue until its client ends.)
//! - A queue lives `QUEUE_LIFETIME` (60 s) after the last round or check that
//!   touched it: only a queue nobody waits on any more expires.
//! - Each client has at most [`JOIN_ROUNDS_IN_FLIGHT`] joins (and
//!   [`CLAIM_ROUNDS_IN_FLIGHT`] claims, [`LOOK_ROUNDS_IN_FLIGHT`] of them
//!   on a mere chance of a handoff) under way: the thousands of callers
//!   of a flash sale join in waves rather than queue thousands of scripts
//!   on each node at one instant, and a hand-over's claim never waits for a
//!   join. Of the calls of one client on one key, only one makes the plain
//!   `SET NX` first round at a time: while it is under way the key counts
//!   as taken ([`Busy`]), and the others join (in waves) at once.
//!
//! # Why it cannot break mutual exclusion
//!
//! The queue only ever *withholds* a grant. A node sets `K` to a token only
//! when `K` is absent or holds a reservation, never over another token, so
//! each node holds at most one token at a time, exactly as with `SET NX`;
//! a reservation is not a token (no token starts with `quorlock-next:`, and
//! the extend and release scripts compare whole tokens), so it grants
//! nothing to anyone until a claim turns it into a token. The liveness keys
//! and the heartbeat's checks only decide which waiter is first: a check
//! writes a reservation only where the key is free or holds a reservation,
//! and marks only a token that is there, as the queue script does. The mark changes
//! no holder: a marked value `T+` is accepted only by the holder of `T`
//! (no token contains a `+`, so no other token is `T+`), it is written only
//! over a value `T` that is already there with its remaining TTL, and
//! nobody is granted over it, marked or not. Acquisition still
//! needs a quorum of nodes holding our token within the validity window,
//! and two quorums intersect: two valid holders would need one node holding
//! two tokens. Clients that know nothing of the queue (rslock, node-redlock,
//! redsync on the same key with `key_prefix("")`) see a reservation as a
//! held key and keep out, and their own `SET NX` still excludes quorlock:
//! a foreign holder's key is a token like any other. Their releases delete
//! the key without handing it on; queued waiters then take it at their next
//! refresh round.
//!
//! # Why nodes that disagree cannot stop the lock
//!
//! Nodes disagree when a join missed some (a timeout, a node restarted
//! empty), when tickets are not yet written back, or when a client's
//! liveness key expired on one node's clock and not yet on another's. None
//! of it lasts:
//!
//! - A node that lost a client's liveness key (restarted, or the client was
//!   cut off or stalled past [`WAITER_LIFETIME`]) may have dropped its
//!   entries: the client's next heartbeat there finds the key gone and every
//!   waiter of the client makes a round there, which queues it again under
//!   its ticket. A waiter whose round was answered by too few nodes but
//!   queued somewhere waits for its handoff there; its claim round queues it
//!   on the others, under its ticket, so at its place.
//! - The entries of a dead client (SIGKILLed, partitioned) stop counting at
//!   most [`WAITER_LIFETIME`] after its last heartbeat, and a reservation for
//!   one of its waiters ends at the same moment; the next check by a live
//!   client (at that reservation's `PTTL`) then hands the key on to the
//!   first live waiter. A dropped `lock` future leaves at once.
//! - A round that won some nodes but not a quorum gives them back and keeps
//!   its place: the cleanup puts the waiter back under its ticket and hands
//!   the key on to the node's first waiter, who is the same on every node
//!   once the entries agree.
//! - A reservation for a waiter that is no longer first (its client died,
//!   or it sorted behind another) is void: the next round or check there
//!   passes it on.
//! - An entry whose leave did not reach its node is taken out when a
//!   handoff names it (see "Leaving" above), or goes with its client.
//!
//! So once every live waiter's entry is on every answering node with its
//! final ticket (one round after the last disturbance), the waiter with the
//! lowest ticket that reaches a quorum is first on all of them and takes
//! the lock when its holder lets go or expires. Progress needs what Redlock
//! always needs, a quorum that answers; a waiter that reaches only a
//! minority can block only nodes it reaches, and only until its patience
//! runs out (it then leaves).
//!
//! The scripts name the queue key and the liveness keys themselves rather
//! than taking them as `KEYS`: every Redlock node is a standalone server
//! holding all of them (a Redis Cluster is not a set of Redlock nodes), and
//! a call then carries one key.
//!
//! # Costs
//!
//! Uncontended, a lock is one `SET NX` per node to take and one script call
//! to give back; the release script settles "our key, nobody
//! waits" (our token unmarked) with the commands of a plain
//! compare-and-delete, `GET` and `DEL`, before any of the queue's Lua is
//! defined. A waiter costs a round to join (two when the nodes gave it
//! different tickets), one to claim, and its release hands on; nothing while
//! it waits. Its client's heartbeat costs one call per node every
//! [`REFRESH_INTERVAL`] while it has waiters, plus one check per key it
//! waits on every `session::MAX_CHECK` at most (`FIRST_MAX_CHECK` where its
//! waiter leads the queue behind a quorlock holder). Notifications come on one
//! pub/sub connection per node and client. The scripts' work is O(log n) in
//! the queue's length (a sorted set's insert and its first entry). A client
//! remembers which keys its last `lock` call found taken ([`Busy`]); the
//! next call on such a key skips the `SET NX` round that would be refused
//! and joins at once (a hint only: the queue script takes a free lock just
//! as `SET NX` does).
//!
//! # The files
//!
//! `entries.rs`, the queue's keys, lifetimes and a waiter's entry as a
//! release treats it ([`entries::Place`]); `busy.rs`, the memory of keys
//! this client found taken; `waiter.rs`, a `lock` call's place in the
//! queue, which leaves it however the call ends, and its wait for a
//! handoff.

pub(crate) mod busy;
pub(crate) mod entries;
pub(crate) mod waiter;

//! Standing: whether a node's votes count toward a quorum now, and if not,
//! why. One concept, [`NotCounted`], covers every vote that does not count:
//!
//! - **unchecked**: no connection to the node has passed its check yet (it
//!   is down, or the check is under way);
//! - **unresponsive**: its last call timed out and it has not answered a
//!   probe since; it is not even asked (one more request would only pile up
//!   behind a frozen server: see `node/`);
//! - **recovering**: the server behind it changed (it restarted, or a
//!   replica took over as primary: a failover) and may have lost keys; it
//!   *is* asked (so that it learns the locks taken meanwhile, and its keys
//!   are released like any other), but its grants do not count until the
//!   grace has passed since it came back.
//!
//! Not counting a vote can only withhold a lock, never grant one.
//!
//! # The check on every connection
//!
//! Every connection to a node, the first and each one after a break, is
//! checked before any call may use it (`connection/` runs the check as the
//! last step of connecting, within the connect timeout). One round trip asks
//! `INFO server` (`run_id`, `uptime_in_seconds`), `INFO replication`
//! (`master_replid`, `master_replid2`), `ROLE`, `CONFIG GET appendonly`,
//! `CONFIG GET appendfsync`, and `SMEMBERS` of the node's *record* (the
//! incarnations, of any node of the lock, whose votes have counted: the key
//! prefix followed by [`RECORD_SUFFIX`] and `:v2`; and their bare `run_id`s
//! under the key prefix followed by [`RECORD_SUFFIX`], the record that
//! clients from before incarnations read and write, so that clients of both
//! kinds can share the nodes during an upgrade), and `SADD`s to that record
//! the incarnations this client knows to count, with the client's `SCRIPT
//! LOAD`s. The node is judged from the answers.
//!
//! An **incarnation** is a server's `run_id` with its replication id
//! (`run_id/master_replid`, see [`Identity::incarnation`]): a restart gives
//! a new `run_id`, and a promotion of a replica to primary a new
//! `master_replid` (the one it had becomes its `master_replid2`), so a
//! server that serves as primary without a break keeps one incarnation, and
//! any change of the server behind a node, a failover back to the same
//! server included, is a new one. A change of server breaks the
//! connection (the old server died, or the address moved), so no reply of
//! a new server reaches a round before its incarnation has been judged; the
//! connection's end starts a new connection at once (see `connection/`),
//! so the change is seen without waiting for a call.
//!
//! **Recording.** A node judged to count does not count at once: its
//! incarnation is first added to its own record (before the connection is
//! handed out), then to every other node's (a task, each node bounded by the
//! connect timeout; a client's first lock waits for it); only then do its
//! votes count. So every incarnation whose votes ever counted is in the
//! record of every node that the client reached meanwhile, and of every
//! node that client checks later.
//!
//! The same checks find misconfigurations: the same server listed twice
//! (two URLs, one `run_id`) would cast two votes and count twice in the
//! quorum size; a replica cannot hold a lock and loses what it replicates on
//! failover. Either refuses locking with [`Error::Misconfigured`].
//!
//! **A node that refuses a check command** (an ACL user without the
//! permission, a renamed command, a proxy that lacks it) *is counted*, with a
//! warning that names the node and its reply: it answers, so it can hold a
//! lock, and refusing it would make such deployments unusable. What is lost
//! is the check: without `INFO` no duplicate, and no restart, is detected on
//! that node; without `CONFIG` the node is taken as not durable; a refused
//! record leaves its incarnations unrecorded there.
//!
//! # Restarts and failovers: the judgment
//!
//! A node is *durable* when it runs `appendonly yes` with `appendfsync
//! always`: every acknowledged `SET` is on disk before the reply, so a
//! restart keeps its keys with their expiry. A server is *promoted* when
//! its `master_replid2` is set: it took over a replication history (a
//! replica made primary, or a primary that reloaded a snapshot with its
//! replication id), so it may lack writes that the server it replaced
//! acknowledged, whatever its own persistence, and its uptime says nothing
//! of how long it has served as primary. `G`, the grace, is
//! `max(restart_grace, the longest TTL this client has used)` plus the
//! drift allowance on it. `restart_grace` zero switches the protection off.
//!
//! On each check the node is judged ([`judge`], a pure function), in this
//! order:
//! 1. durable, not promoted (and durable nodes trusted, the default): it
//!    counts;
//! 2. the incarnation this client knew: it counts, or goes on recovering
//!    from when its recovery began;
//! 3. another incarnation than the one this client knew: *recovering*,
//!    **whatever its uptime**. Its grace runs from its start (its uptime)
//!    after a restart, and from this check after a promotion: no server
//!    reports when it was promoted, and the old primary may have granted
//!    locks until the moment it was replaced. The locks this client holds
//!    on the node are told ([`ServerChanges`]);
//! 4. first met by this client, its own incarnation is in its record (a
//!    client judged this very incarnation to count, by these rules), or,
//!    never promoted, its `run_id` is (a never-promoted server keeps its
//!    replication id for life): it counts;
//! 5. first met, promoted, unrecorded: *recovering*, from this check;
//! 6. first met, never promoted, up for at least `G` (`uptime_in_seconds`,
//!    less its one second of slack, see below): it counts; a lock it may
//!    have lost in a restart has expired;
//! 7. first met, young and unrecorded, in strict mode: *recovering*;
//! 8. otherwise it waits (for at most half the connect timeout) until
//!    every node's first check has read its node, and is *recovering* if
//!    some record it read holds an incarnation that no node it read has
//!    now (an incarnation that counted is gone: this node may be the one
//!    that lost its data, or it restarted from a snapshot that recorded
//!    its old incarnation); else it counts. Nodes that lost nothing (a
//!    brand-new set, a node that starts late, a client over more nodes than
//!    another, many clients meeting a new set at once) leave only current
//!    incarnations in the records, so nothing waits.
//!
//! A recovering node counts again by itself once `G` has passed since it
//! came back and it has been recorded (a task of its connection does both,
//! then logs it); no rebuild is needed. After a restart, the time it came
//! back is taken as the reply's arrival minus its uptime less one second:
//! Redis reports uptime as a difference of whole-second wall-clock
//! readings, which can exceed the true uptime by almost a second, so this
//! is never earlier than the true start, and the grace is never cut short.
//!
//! # Safety argument
//!
//! *Assumes*: every client of these nodes uses TTLs of at most `G` (each
//! client's own longest TTL is covered by itself; longer TTLs of *other*
//! clients need `restart_grace` set); clocks run at rates within the drift
//! factor, and a node's wall clock does not step forward unseen (which would
//! also expire its keys early, and inflate its uptime: `clock.rs` holds back
//! a node whose clock is seen to step); a node loses keys only by
//! a change of server (a restart, a promotion), not by `FLUSHALL` or
//! eviction; a node judged durable keeps every acknowledged write; one
//! address leads to one primary at a time (the old primary is gone, or
//! unreachable through it, once the address moved); a server that takes
//! over an address as primary is a promoted replica (or the old server
//! restarted), not an unrelated primary that has run on its own.
//!
//! *Claim*: a counted grant for lock `B` is never given by a node that lost
//! the key of a lock `A` still valid. Say node `n`'s incarnation `r` granted
//! `A` at `t_A` (counted), and `n`'s server changed at `R > t_A` to
//! incarnation `r'`, which lacks the key and granted `B` at `t_B < t_A +
//! ttl ≤ R + G`.
//! - If `B`'s client knew `r`: the incarnation changed (rule 3). After a
//!   restart, `r'` started after `r` stopped, so its start is after `t_A`;
//!   after a promotion, the check that saw it came after `R`. Either way
//!   `n` counts only from later than `t_A + G`.
//! - If it first met `n` after `R` and `r'` is promoted: `r'` is not in its
//!   own record unless a client judged it by these same rules (rule 4, by
//!   induction on the judgments), so rule 5 holds it back from the first
//!   check, after `R`.
//! - If it first met `n` after a restart: `n` is younger than `G` (rule 6
//!   does not apply), not durable, and its own record does not hold `r'`
//!   unless a client judged it, so rule 7 or 8 decides: `n` counts only if
//!   no record `B`'s client read holds a vanished incarnation. But `r`
//!   counted, so it was recorded on every node `A`'s client (or whichever
//!   client first judged `r`) reached when recording it, and carried to
//!   every node that client checked later; `r` is gone now, so any such
//!   node that kept its data, and that `B`'s client reads, shows it
//!   vanished. Hence `B`'s client counts `n` only if it read none of them
//!   at its first contact.
//!
//! Two holders at once therefore need, besides the lost key, one of these
//! **limits**, which strict mode (or durable nodes) closes for restarts:
//! - a client that first meets the nodes while every node that recorded the
//!   lost incarnation is down, emptied, or was unreachable when it was
//!   recorded, cannot tell a restarted node from a new one;
//! - with **one node** there is no other node to remember: a client that
//!   never met it before counts a restarted one, so only strict mode or
//!   persistence protects the single-node lock against a restart. (A
//!   promoted one is held back by rule 5, with one node too.)
//!
//! What stays **uncovered**: a server that never was a replica and has run
//! as a primary on its own, put behind a node's address (its uptime is
//! taken as its time serving, and a fresh client finds nothing to hold it
//! back by on one node); a server swapped behind a proxy that keeps the
//! client's connection open (no check runs: the swap is seen only if the
//! connection breaks); two primaries serving one address at once (a split
//! brain); a server that does not answer `INFO` (no change can be seen).
//!
//! Records only grow (one entry per incarnation that counted), so an
//! incarnation that is gone stays "vanished": a node added to the set
//! afterwards, or one down when a fresh client meets the others, waits the
//! grace once. That errs on the side of withholding.
//!
//! When nodes disagree (one recovering, others not), each node's standing
//! only removes its own vote: the quorum is still a majority of *all*
//! nodes, so a lock needs a quorum of nodes that count.
//!
//! # A Redis Cluster node
//!
//! A cluster node's connection is one reading of its topology with a
//! connection to every primary (see `shards.rs`), and its check reads each
//! primary as above and judges them as **one server**: its `run_id` and
//! replication id are every primary's, sorted by `run_id` and joined; it is
//! promoted if any primary is, durable if all are, as old as its youngest
//! primary, a replica if any primary answers as one; its record is the
//! union of what the primaries hold (the record keys share one slot, on one
//! primary). So the rules above apply unchanged, and any change of any
//! primary (a restart, a promotion, a primary added or replaced) is a
//! change of the node's incarnation: the whole node recovers, and the locks
//! held on it are told.
//!
//! *Assumes*, besides the above: every server whose reply counts was checked
//! on the connection the reply came on. It holds because a command goes only
//! to a primary of the connection's topology, and a redirection (`MOVED`,
//! `ASK`) is followed only to such a primary; a redirection elsewhere fails
//! the call and makes the link connect again, reading the topology and
//! checking every primary before any reply counts. A slot that moves between
//! checked primaries (a resharding) moves its keys with their expiry
//! (`MIGRATE`), so no lock is lost by it.
//!
//! *Claim*: as above, with the cluster as the server: a lock whose key was
//! on primary `p` of the node is lost only if `p` (or the server serving its
//! slot) changed, which changes the node's incarnation. The cost is
//! coarseness: a failover of one primary holds back the slots of the others
//! too, for the grace.
//!
//! *Uncovered*, besides the above: a primary cut off in a minority
//! partition that a client still reaches while the majority promoted its
//! replica (two primaries for one slot until `cluster-node-timeout` makes
//! the old one refuse writes: a split brain).
//!
//! # Timing
//!
//! The first call of a client waits until every node's first check has ended
//! (each is bounded by the connect timeout), or until the caller's acquire
//! deadline. Checks run as tasks of their own, so a caller that stops
//! waiting does not cut them short; a check whose task is dropped (its
//! runtime shut down) leaves its node unchecked, and the next lock call
//! checks it again.
//!
//! # The files
//!
//! From the bottom up: `judge.rs`, the judgment above as a pure function
//! (with a test per rule); `identity.rs`, what a check reads of a server
//! and what it shows misconfigured; `record.rs`, the record's keys and
//! the errands the standings send the nodes; `table.rs`, the table of
//! every node's standing that rounds read; `recovery.rs`, a node's way
//! back to counting (recording, the end of a grace); `clock_hold.rs`, the
//! holding back of a node whose clock stepped; `first_contact.rs`, the
//! first check of every node before a client's first lock; `check.rs`,
//! the check of each connection.

mod answers;
mod check;
mod clock_hold;
mod evidence;
mod first_contact;
mod identity;
mod judge;
mod mark;
mod mark_check;
mod mark_watch;
mod record;
mod recovery;
mod settings;
mod table;

pub(crate) use judge::RestartPolicy;
pub(crate) use record::{Errand, RECORD_SUFFIX, RecordKeys, Recorder};
pub(crate) use table::{NotReady, Standings};

//! Standing: whether a node's votes count toward a quorum now, and if not,
//! why. One concept, [`NotCounted`], covers every vote that does not count:
//!
//! - **unchecked**: no connection to the node has passed its check yet (it
//!   is down, or the check is under way);
//! - **unresponsive**: its last call timed out and it has not answered a
//!   probe since; it is not even asked (one more request would only pile up
//!   behind a frozen server: see `node/`);
//! - **recovering**: the server behind it changed (it restarted, or a
//!   replica took over as primary: a failover), or its data went (its data
//!   mark, below, is gone or replaced: [`NotCounted::DataLost`]), and it
//!   may have lost keys; it *is* asked (so that it learns the locks taken
//!   meanwhile, and its keys are released like any other), but its grants
//!   do not count until the grace has passed since that was first seen.
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
//! kinds can share the nodes during an upgrade), then the data's part
//! (`evidence.rs`: the read of its data mark, made in the same step where
//! there is none, `SMEMBERS` of the record of marks that counted, `INFO
//! memory`, the merge of the node set's settings; all below), `TIME`, the notes of clock steps, and `SADD`s to the records
//! of the incarnations and marks this client knows to count, with the
//! client's `SCRIPT LOAD`s. The node is judged from the answers: by what
//! its server says of itself (the rules below), then by its data mark.
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
//! failover; a node whose memory policy can evict keys (a `maxmemory` with
//! any `maxmemory-policy` but `noeviction`, from `INFO memory`: the
//! `volatile-*` policies evict keys with a TTL, lock keys first) loses a
//! held lock's key with nothing to show it, unless
//! [`allow_eviction`](crate::RedlockBuilder::allow_eviction) takes it at
//! that risk. Each refuses locking with [`Error::Misconfigured`], naming the
//! nodes and the setting.
//!
//! **A node that refuses a check command** (an ACL user without the
//! permission, a renamed command, a proxy that lacks it: `NOPERM`, `ERR
//! unknown command`, see `answers.rs`) *is counted*, with a
//! warning that names the node and its reply: it answers, so it can hold a
//! lock, and refusing it would make such deployments unusable. Any other
//! error in a check's answers (`LOADING` from a server still loading its
//! data after a restart, which answers `PING`, `INFO` and `TIME` but no
//! command on keys; `BUSY`; a lost connection) is no refusal: it fails the
//! check, which is tried again on a new connection. Taken for a refusal, it
//! would leave the node counting without its data mark, its later losses
//! of data unseen. What is lost
//! is the check: without `INFO` no duplicate, and no restart, is detected on
//! that node (its data mark still shows a loss of its data); without
//! `CONFIG` the node is taken as not durable; without `INFO memory` its
//! eviction policy is unknown; a refused record leaves its incarnations
//! unrecorded there; a refused mark leaves the node judged by its server
//! alone.
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
//! `max(restart_grace, the longest TTL this client has used, the longest
//! grace any client recorded on the nodes)` plus the drift allowance on it
//! (see "Settings of the node set"). `restart_grace` zero switches the
//! protection off, the data mark with it.
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
//! Where the node has a data mark (below), the mark's judgment follows and
//! decides, and a grace runs from when the mark says.
//!
//! # Safety argument
//!
//! *Assumes*: every client of these nodes uses TTLs of at most `G` (each
//! client's own longest TTL is covered by itself; longer TTLs of *other*
//! clients need `restart_grace` set); clocks run at rates within the drift
//! factor, and a node's wall clock does not step forward unseen (which would
//! also expire its keys early, and inflate its uptime: `clock.rs` holds back
//! a node whose clock is seen to step); a node loses keys only by
//! a change of server (a restart, a promotion) or with its data mark (see
//! "Evidence in the data": `FLUSHALL`, an empty restart, a resync), not by
//! eviction (refused, see above); a node judged durable keeps every
//! acknowledged write, or comes back without its mark; one
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
//! # Evidence in the data: the data mark
//!
//! A server's word about itself is not evidence about its data: the keys go
//! while `run_id`, replication ids and `appendonly` stay (`FLUSHALL`, an
//! empty disk under a durable configuration, `REPLICAOF` another server on
//! connections that stay open), and the word changes while nothing was lost
//! (a primary restarted from its own snapshot reports `master_replid2`). So
//! each node carries a **data mark**, a key without a TTL under the key
//! prefix followed by [`RECORD_SUFFIX`] and `:mark`, that goes when the
//! node's data goes: `id born since inc_since incarnation` (`mark.rs`), a
//! random 64-bit id first, then times by the node's own clock (ms): when
//! the mark was made, since when a possible loss under it is waited out
//! (0: none), when the server incarnation it vouches for was written.
//!
//! **Read with every grant.** Every vote that can grant a new key reads the
//! mark's id after its grant, in the same request or batch (`GETRANGE` of
//! its first 16 bytes, before the clock's reading: `witness.rs`, `batch.rs`;
//! no round trip is added), and the background reading reads it with each
//! node's clock about once a second (`mark_watch.rs`). A grant counts only
//! where the id read after it is the one this client's check took; any
//! other answer (no mark, another id, a key of another type) makes that
//! vote and every later one not count at once, tells the locks held on the
//! node ([`LostReason::DataLost`](crate::LostReason::DataLost)), and checks
//! the node again on a new connection.
//!
//! **Read, or made, at every check**, in one script: where the node has no
//! mark, the read makes a clean one at once (nothing to wait out, vouching
//! for the server there), so that no client reads a node without a mark
//! after another did. Otherwise a client that read a node just before
//! another made its mark, and another node's record just after the other
//! recorded it, would take that mark for one that vanished, and hold back a
//! node that lost nothing (seen: clients meeting a new set moments apart,
//! `clients_meeting_a_new_set_moments_apart_keep_counting_it`). A mark the
//! read made is judged as none there.
//!
//! **Judged at every check** (`judge_mark` in `mark.rs`, a pure function,
//! after the identity rules; `mark_check.rs` puts in place the mark it asks
//! for, by compare and set: where another client wrote first, the check
//! judges what it wrote). In this order:
//! - D1. the mark this client knew is gone or replaced: the data went;
//! - D2. another node carries the same mark: one took the other's data;
//! - D3. the mark is missing, or younger than `G` and in no record of marks
//!   that counted (the set under [`RECORD_SUFFIX`] and `:marks`, kept as the
//!   records of incarnations are, and read from every node once every first
//!   check has read its node), while some record holds a mark that no node
//!   has now: this node may be the one that lost it;
//!
//!   in these three, the node is *recovering* ([`NotCounted::DataLost`]):
//!   under a new mark whose grace starts now, or under the mark another
//!   client already made for the loss (made for a loss, within its grace,
//!   for the server there now), whose grace binds this client too;
//! - D4. no mark and nothing lost (a brand-new node): the clean mark the
//!   read made stands, and the node counts, unless the identity rules hold
//!   it (then the mark's grace starts now) or strict mode does (this
//!   client's own hold: the mark stays clean for the others);
//! - D5. the server changed since the mark vouched for it: a durable one
//!   whose mark counted on these nodes (known, or recorded: not one brought
//!   with another server's data) counts, the mark now vouching for it (a
//!   grace it holds goes on); any
//!   other, and any node the identity rules hold back for what they read (a
//!   change seen, a promotion, an incarnation that counted gone: not strict
//!   mode's own hold), is held back from now, written in the mark (`since`,
//!   `inc_since` and the incarnation), unless the mark already holds a grace
//!   started for this very server (`since ≥ inc_since`): then that grace
//!   decides, and once it is over the node counts, however many clients
//!   meet it for the first time afterwards;
//! - D6. a grace the mark holds that has not ended binds this client (another
//!   client saw something); in strict mode a mark younger than `G` in no
//!   record is held back by this client; otherwise the node counts.
//!
//! **The earliest sight, written by the node's clock.** A grace that starts
//! at a check is written into the mark as the node's `TIME` at that check,
//! so every client, one that lives for a single CLI call included, counts it
//! from the first client's sight, not its own. Where the node's clock reads
//! behind the lower median of the other nodes' and this client's (a server
//! started before NTP's first step), it is written that much later, so that
//! a clock set right afterwards does not cut the grace short.
//!
//! *Assumes*, besides the above: a node's data and its mark go together
//! (every way a node loses its keys, but eviction and a server change that
//! keeps the mark, takes the mark too: `FLUSHALL`/`FLUSHDB`, an empty start
//! whatever the configuration, a resync from another server, the mark's own
//! eviction under `allkeys-*`); a node's clock does not step forward unseen
//! between the writing of a grace's start and its end (`clock.rs` holds a
//! stepped node back, and its notes hold it back for fresh clients).
//!
//! *Claim*: a counted grant for lock `B` is never given by a node `n` whose
//! data went after it granted lock `A`, still valid. `A`'s grant counted, so
//! its witness read `n`'s mark `m` after it; the loss, after that, took `m`.
//! `B`'s grant counts only if its witness read the mark its client's check
//! of `n` took, so that check came after the loss and read a mark other than
//! `m`, or none. If `B`'s client knew `m`, D1 held `n` back from that check.
//! If not: `m` counted, so it was recorded on every node `A`'s client reached
//! (as incarnations are, above), and D3 holds a missing or young unrecorded
//! mark back while any record `B`'s client read holds `m`; a mark older than
//! `G` was not made after the loss unless a grace of `G` was written in it
//! (D1–D3 write one), and the grace of a mark written after the loss runs
//! from after the loss. Either way `n` counts for `B` only from at least `G`
//! after the loss, after `A`'s validity. When the grant's witness read the
//! mark before the loss (the loss came between `A`'s witness and `B`'s
//! check), the same holds: only the loss's time matters.
//!
//! *Limits*, as for the identity rules: a client whose first contact comes
//! after every node that recorded `m` lost its data or is down (every node
//! emptied at once looks like a new set), and a **single node** met by a
//! fresh client after it lost its data, are counted (strict mode holds such
//! a node back; a client that knew the mark does not count it).
//!
//! What stays **uncovered** by the mark: a snapshot restart that kept the
//! mark but lost later keys (the identity rules' job: a new `run_id`); a VM
//! or disk rolled back with its data (mark and server as they were, keys
//! lost since); a key evicted while its mark stays (eviction is refused
//! unless allowed); a grace started by a short-lived client just before the
//! node's clock stepped forward, with no long-lived client reading the node
//! to see the step; a node whose ACL refuses the mark's key (judged by its
//! server alone, with a warning); a Redis Cluster node (its keys live on
//! several primaries: no one mark covers them; the identity rules apply).
//!
//! # Settings of the node set
//!
//! The clock tolerance and the grace change what a lock's validity means,
//! so they are the node set's, not one client's: every check merges this
//! client's tolerance and grace into a hash on the node (the key prefix,
//! [`RECORD_SUFFIX`] and `:settings`: the smallest and the largest tolerance
//! in use, the longest grace; `settings.rs`), and reads what is there. A
//! client **shortens every validity by the largest tolerance** it has read
//! (or its own, if larger), **judges clock steps by the smallest**, and holds
//! nodes back for the longest grace. *Claim*: no client counts a step that a
//! holder's validity was not shortened by. Two clients `h` (holding) and `j`
//! (judging) that share a node each merged their tolerance there before
//! their first lock; one of the two merges came second and read the other's:
//! if `h`'s, `h` shortens by at least `j`'s tolerance; if `j`'s, `j` judges by
//! at most `h`'s. A client with clocks not watched (tolerance zero) records
//! none, and judges nothing. Settings only grow (or, the smallest tolerance,
//! shrink): to change the tolerance everywhere, delete the key once no client
//! uses the old value (see `docs/operations.md`).
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
//! From the bottom up: `answers.rs`, reading a check's answers; `mark.rs`,
//! the data mark and its judgment as a pure function (with a test per
//! rule); `record.rs`, the records' and the mark's keys and the errands the
//! standings send the nodes; `evidence.rs`, what a check reads of the data
//! (the mark, the record of marks, the memory policy, the settings);
//! `identity.rs`, what a check reads of a server and what it shows
//! misconfigured; `judge.rs`, the identity rules as a pure function (with a
//! test per rule); `settings.rs`, the node set's settings as read;
//! `table.rs`, the table of every node's standing that rounds read;
//! `recovery.rs`, a node's way back to counting (recording, the end of a
//! grace); `clock_hold.rs`, the holding back of a node whose clock stepped;
//! `first_contact.rs`, the first check of every node before a client's
//! first lock; `check.rs`, the check of each connection, with
//! `mark_check.rs`, its judgment by the mark; `mark_watch.rs`, the mark
//! read with every grant.

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

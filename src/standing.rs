//! Standing: whether a node's votes count toward a quorum now, and if not,
//! why. One concept, [`NotCounted`], covers every vote that does not count:
//!
//! - **unchecked**: no connection to the node has passed its check yet (it
//!   is down, or the check is under way);
//! - **unresponsive**: its last call timed out and it has not answered a
//!   probe since; it is not even asked (one more request would only pile up
//!   behind a frozen server: see `node.rs`);
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
//! checked before any call may use it (`connection.rs` runs the check as the
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
//! connection's end starts a new connection at once (see `connection.rs`),
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

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use redis::{RedisError, RedisResult, Value};
use tokio::sync::Notify;

use crate::answer::{NodeError, NodeErrorKind, NotCounted};
use crate::changes::{Change, ServerChanges};
use crate::clock::{self, Epoch, History, Lead, Reading, Seen};
use crate::connection::Connection;
use crate::quorum;
use crate::tasks;

/// What follows the key prefix in the key of each node's *record*: a set of
/// the `run_id`s of the node incarnations, on any node of the lock, whose
/// votes have counted (see the module docs). A resource whose key would be
/// the record's is refused.
pub(crate) const RECORD_SUFFIX: &str = "quorlock-incarnations";

/// What follows [`RECORD_SUFFIX`] in the key of the record of incarnations
/// (`run_id/master_replid`). The record under [`RECORD_SUFFIX`] itself holds
/// their bare `run_id`s: clients from before incarnations read it, and would
/// take every entry of the new form as an incarnation that is gone.
const INCARNATIONS_TAIL: &str = ":v2";

/// What follows [`RECORD_SUFFIX`] in the key of the notes of clock steps.
const CLOCK_STEPS_TAIL: &str = ":clock-steps";

/// The keys of each node's record (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct RecordKeys {
    /// Incarnations, `run_id/master_replid`.
    pub(crate) incarnations: Arc<[u8]>,
    /// Their bare `run_id`s (and those that older clients recorded).
    pub(crate) run_ids: Arc<[u8]>,
    /// The notes of clock steps (see `clock.rs`): a hash of `run_id`s, each
    /// with the time on this node until which that node is held back.
    pub(crate) clock_steps: Arc<[u8]>,
}

impl RecordKeys {
    /// The record keys under `key_prefix`; `slotted` (see `cluster.rs`),
    /// with the suffix in braces unless the prefix has a hash tag, so that
    /// both keys live in one slot.
    pub(crate) fn new(key_prefix: &[u8], slotted: bool) -> Self {
        let mut run_ids = key_prefix.to_vec();
        let tagged = slotted && crate::cluster::hash_tag(key_prefix).is_none();
        if tagged {
            run_ids.push(b'{');
        }
        run_ids.extend_from_slice(RECORD_SUFFIX.as_bytes());
        if tagged {
            run_ids.push(b'}');
        }
        let mut incarnations = run_ids.clone();
        incarnations.extend_from_slice(INCARNATIONS_TAIL.as_bytes());
        let mut clock_steps = run_ids.clone();
        clock_steps.extend_from_slice(CLOCK_STEPS_TAIL.as_bytes());
        RecordKeys {
            incarnations: incarnations.into(),
            run_ids: run_ids.into(),
            clock_steps: clock_steps.into(),
        }
    }

    /// The commands that record `incarnations` on a node: each in the
    /// record of incarnations, its `run_id` in the record of `run_id`s.
    pub(crate) fn adds(&self, incarnations: &[impl AsRef<str>]) -> [redis::Cmd; 2] {
        let mut full = redis::cmd("SADD");
        full.arg(&*self.incarnations);
        let mut bare = redis::cmd("SADD");
        bare.arg(&*self.run_ids);
        for incarnation in incarnations {
            full.arg(incarnation.as_ref());
            bare.arg(run_id_of(incarnation.as_ref()));
        }
        [full, bare]
    }
}

/// How long a recovering node's recording waits before it tries again
/// after a failure.
const RECORD_RETRY: Duration = Duration::from_secs(1);

/// The restart options of a client (see [`RedlockBuilder::restart_grace`](crate::RedlockBuilder::restart_grace)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RestartPolicy {
    /// Zero: restarts are not tracked.
    pub(crate) grace: Duration,
    pub(crate) trust_durable: bool,
    pub(crate) strict: bool,
    pub(crate) drift_factor: f64,
    /// The clock tolerance (see `clock.rs`); zero: clocks are not watched.
    pub(crate) clock_tolerance: Duration,
}

/// What one check of a node read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Identity {
    /// The server's `run_id`: two nodes with one run_id are one server.
    pub(crate) run_id: Option<String>,
    /// The first element of `ROLE`: `master`, `slave` or `sentinel`.
    pub(crate) role: Option<String>,
    /// `uptime_in_seconds`.
    pub(crate) uptime: Option<Duration>,
    /// `master_replid` (`INFO replication`): a new one at every start and
    /// every promotion of a replica.
    pub(crate) replid: Option<String>,
    /// `master_replid2` is set: the server took over a replication history
    /// (a replica promoted to primary, or a primary that reloaded a snapshot
    /// with its replication id), so it may lack writes acknowledged by the
    /// server it replaced.
    pub(crate) promoted: bool,
    /// The major of `redis_version` (Valkey reports its Redis-compatible one).
    pub(crate) major_version: Option<u32>,
    /// `appendonly yes` with `appendfsync always` (false when unknown).
    pub(crate) durable: bool,
    /// The node's record: the `run_id`s of incarnations that counted.
    pub(crate) record: Vec<String>,
    /// The check commands the node refused, each with its reply (`ROLE: ERR
    /// unknown command…`, a renamed command; `NOPERM …`, an ACL user).
    pub(crate) refused: Vec<String>,
    /// A server of a Redis Cluster named as a server of its own (`INFO
    /// cluster`): it would answer `MOVED` for most keys.
    pub(crate) cluster_enabled: bool,
    /// Its clock, as the check read it (`TIME`).
    pub(crate) clock: Option<Reading>,
    /// Its notes of clock steps still running when read: `run_id`s, each
    /// with until when (on this client's clock: the note's time left, by the
    /// node's clock, after the reply came) the node with that `run_id` is
    /// held back. A deadline, so that a note read long ago is not taken as
    /// running still.
    pub(crate) clock_notes: Vec<(String, Instant)>,
}

impl Identity {
    /// The incarnation: the `run_id`, and the replication id where known
    /// (`run_id/replid`). It changes with every restart and every promotion
    /// of a replica, and not while one server keeps serving as primary.
    pub(crate) fn incarnation(&self) -> Option<String> {
        let run_id = self.run_id.as_ref()?;
        Some(match &self.replid {
            Some(replid) => format!("{run_id}/{replid}"),
            None => run_id.clone(),
        })
    }
}

/// Whether `recorded` (an entry of a record) names an incarnation in
/// `current`: the same, or the bare `run_id` an older client recorded.
fn is_current(recorded: &str, current: &[&str]) -> bool {
    current.iter().any(|incarnation| {
        *incarnation == recorded
            || incarnation
                .strip_prefix(recorded)
                .is_some_and(|rest| rest.starts_with('/'))
    })
}

const COUNTS: u8 = 0;
const UNCHECKED: u8 = 1;
const RECOVERING: u8 = 2;
/// Judged to count; its `run_id` is being recorded on the other nodes first.
const RECORDING: u8 = 3;

/// A recovering node's restart or failover.
#[derive(Debug, Clone)]
struct Recovery {
    run_id: String,
    /// What its record gets once it counts (see [`Identity::incarnation`]).
    incarnation: String,
    previous_run_id: Option<String>,
    why: &'static str,
    /// When it came back, on this client's clock (never before the truth):
    /// from its uptime after a restart; when this client saw it, after a
    /// promotion (whose time no server reports).
    came_back: Instant,
    /// Held back for a clock step (see `clock.rs`) that put it ahead by
    /// about this much, rather than for a change of server.
    clock: Option<Duration>,
}

/// One node's standing.
#[derive(Debug)]
struct Slot {
    /// [`COUNTS`], [`UNCHECKED`], [`RECOVERING`] or [`RECORDING`]: read by
    /// every round.
    state: AtomicU8,
    /// A call timed out and the probe started then has not had an answer.
    skipped: AtomicBool,
    /// Everything else: read only when the node does not count, or by checks.
    detail: Mutex<Detail>,
    /// The node's recent clock readings (see `clock.rs`).
    clock: Mutex<History>,
}

#[derive(Debug, Default)]
struct Detail {
    /// The last check's answers.
    identity: Option<Identity>,
    /// The first check ended: the connection it made is ready, or it failed.
    attempted: bool,
    /// A check has read the node, or a connection to it failed: what the
    /// rule for young unrecorded nodes (rule 5) waits for.
    heard: bool,
    /// A first check runs as a task (see [`Standings::ensure`]).
    checking: bool,
    /// Why the last connection attempt failed, if it did.
    failure: Option<NodeErrorKind>,
    recovery: Option<Recovery>,
    /// Bumped by each check, so that a stale recovery task stands down.
    generation: u64,
    /// The incarnation this client recorded on the other nodes.
    recorded: Option<String>,
    /// A recovery ended and its node is being recorded: logged once it counts.
    left_recovery: Option<String>,
}

/// How long a node that reported `uptime_in_seconds` surely has been up.
/// Redis computes it as the difference of two whole-second wall-clock
/// readings (`server.unixtime - server.stat_starttime`), so a server started
/// at 12.9 s reports 1 at 13.1 s: the true uptime is more than the reported
/// one less a second, and may be less than the reported one.
fn surely_up_for(uptime: Duration) -> Duration {
    uptime.saturating_sub(Duration::from_secs(1))
}

/// When a node that reported `uptime` in a reply read at `read_at` came
/// back, at the latest: the true start is earlier (see [`surely_up_for`]),
/// so a grace counted from here is never cut short.
fn came_back(read_at: Instant, uptime: Duration) -> Instant {
    read_at
        .checked_sub(surely_up_for(uptime))
        .unwrap_or(read_at)
}

/// What the standings ask of one node, through the nodes (which they do
/// not know).
#[derive(Debug, Clone)]
pub(crate) enum Errand {
    /// Record an incarnation (`SADD` to its record).
    Record(Arc<str>),
    /// Note that the node with this `run_id` is held back for `hold_ms`
    /// for a clock step (see `clock.rs`).
    NoteClockStep { run_id: Arc<str>, hold_ms: u64 },
    /// Read its clock (`TIME`) into its history, if it is connected: the
    /// background reading.
    ReadClock,
}

/// Runs an [`Errand`] on node `j`, bounded by the connect timeout.
pub(crate) type RecordFn = dyn Fn(usize, Errand) -> futures::future::BoxFuture<'static, Result<(), NodeError>>
    + Send
    + Sync;

/// A [`RecordFn`], shared.
#[derive(Clone)]
pub(crate) struct Recorder(pub(crate) Arc<RecordFn>);

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Recorder")
    }
}

/// Why [`Standings::ensure`] did not let a lock call go on.
#[derive(Debug)]
pub(crate) enum NotReady {
    /// The nodes are misconfigured: locking is refused.
    Misconfigured(String),
    /// The caller's deadline passed before every node's first check ended;
    /// the nodes not yet checked, with why.
    DeadlinePassed(Vec<NodeError>),
}

/// The standing of every node of a client, and what its checks need.
#[derive(Debug)]
pub(crate) struct Standings {
    slots: Vec<Slot>,
    names: Vec<Arc<str>>,
    /// Notified whenever a first check ends.
    ended: Notify,
    /// Notified whenever a skipped node answers again.
    unskipped: Notify,
    all_attempted: AtomicBool,
    all_heard: AtomicBool,
    misconfigured: OnceLock<String>,
    policy: RestartPolicy,
    /// The longest TTL (ms) this client has used.
    longest_ttl_ms: AtomicU64,
    record_keys: RecordKeys,
    /// The scripts loaded on each node with its check.
    scripts: &'static [&'static str],
    node_timeout: Duration,
    connect_timeout: Duration,
    /// Records a `run_id` on node `j` (set once the nodes are built).
    recorder: OnceLock<Recorder>,
    /// The servers that changed under locks this client may hold.
    changes: Arc<ServerChanges>,
    /// Per node, whether the server behind it moves in failovers (a
    /// Sentinel node): a replica there is passed over, not refused.
    follows_failovers: Vec<bool>,
    /// The client's monotonic clock as a number (see `clock.rs`).
    epoch: Epoch,
    /// The background reading of the nodes' clocks was started.
    watching: AtomicBool,
    me: Weak<Standings>,
}

impl Standings {
    pub(crate) fn new(
        names: Vec<Arc<str>>,
        follows_failovers: Vec<bool>,
        policy: RestartPolicy,
        record_keys: RecordKeys,
        scripts: &'static [&'static str],
        node_timeout: Duration,
        connect_timeout: Duration,
    ) -> Arc<Self> {
        let changes = Arc::new(ServerChanges::new(names.clone()));
        Arc::new_cyclic(|me| Standings {
            slots: names
                .iter()
                .map(|_| Slot {
                    state: AtomicU8::new(UNCHECKED),
                    skipped: AtomicBool::new(false),
                    detail: Mutex::new(Detail::default()),
                    clock: Mutex::new(History::default()),
                })
                .collect(),
            names,
            ended: Notify::new(),
            unskipped: Notify::new(),
            all_attempted: AtomicBool::new(false),
            all_heard: AtomicBool::new(false),
            misconfigured: OnceLock::new(),
            policy,
            longest_ttl_ms: AtomicU64::new(0),
            record_keys,
            scripts,
            node_timeout,
            connect_timeout,
            recorder: OnceLock::new(),
            changes,
            follows_failovers,
            epoch: Epoch::now(),
            watching: AtomicBool::new(false),
            me: me.clone(),
        })
    }

    /// The keys of each node's record.
    pub(crate) fn record_keys(&self) -> RecordKeys {
        self.record_keys.clone()
    }

    /// Gives the standings the way to record a `run_id` on a node.
    pub(crate) fn set_recorder(&self, recorder: Recorder) {
        let _ = self.recorder.set(recorder);
    }

    /// Node `index`'s name (`host:port`).
    pub(crate) fn name(&self, index: usize) -> &str {
        &self.names[index]
    }

    /// Notes a TTL this client uses: the grace covers the longest.
    pub(crate) fn note_ttl(&self, ttl_ms: u64) {
        // Read first: every lock call comes here, and the longest TTL
        // almost never grows, so the shared line is only written when it does.
        if ttl_ms > self.longest_ttl_ms.load(Ordering::Relaxed) {
            self.longest_ttl_ms.fetch_max(ttl_ms, Ordering::Relaxed);
        }
    }

    /// `G`: the restart grace, at least the longest TTL this client has
    /// used, plus the drift allowance on it. Zero: protection off.
    fn grace(&self) -> Duration {
        if self.policy.grace.is_zero() {
            return Duration::ZERO;
        }
        self.clock_grace()
    }

    /// How long a node whose clock stepped is held back: `G` as for a
    /// restart, and with the restart protection off, the longest TTL used
    /// with its drift allowance.
    fn clock_grace(&self) -> Duration {
        let longest = Duration::from_millis(self.longest_ttl_ms.load(Ordering::Relaxed));
        let grace = self.policy.grace.max(longest);
        grace.saturating_add(quorum::drift(grace, self.policy.drift_factor))
    }

    /// When `recovery` ends: its grace after it came back.
    fn ends(&self, recovery: &Recovery) -> Instant {
        let grace = match recovery.clock {
            Some(_) => self.clock_grace(),
            None => self.grace(),
        };
        recovery.came_back + grace
    }

    fn detail(&self, index: usize) -> std::sync::MutexGuard<'_, Detail> {
        // Every update is a few assignments that cannot panic halfway:
        // poisoning is ignored.
        tasks::lock(&self.slots[index].detail)
    }

    /// Whether node `index`'s grants count now: `Ok`, or the error that says
    /// why not. The usual case is one atomic load.
    pub(crate) fn vote_counts(&self, index: usize) -> Result<(), NodeError> {
        match self.not_counted(index) {
            None => Ok(()),
            Some(reason) => Err(NodeError::new(
                self.names[index].clone(),
                NodeErrorKind::NotCounted(Arc::new(reason)),
            )),
        }
    }

    /// Why node `index`'s votes do not count now, if they do not.
    pub(crate) fn not_counted(&self, index: usize) -> Option<NotCounted> {
        let slot = &self.slots[index];
        if slot.skipped.load(Ordering::Acquire) {
            return Some(NotCounted::Unresponsive {
                timeout: self.node_timeout,
            });
        }
        if slot.state.load(Ordering::Acquire) == COUNTS {
            return None;
        }
        let detail = self.detail(index);
        // Read again under the lock: a check may have just ended.
        match slot.state.load(Ordering::Acquire) {
            COUNTS => None,
            RECOVERING => detail.recovery.as_ref().map(|recovery| {
                let ends = self.ends(recovery);
                if let Some(ahead) = recovery.clock {
                    return NotCounted::ClockStepped {
                        ahead,
                        why: recovery.why.to_owned(),
                        counts_in: ends.saturating_duration_since(Instant::now()),
                    };
                }
                NotCounted::Recovering {
                    run_id: recovery.run_id.clone(),
                    previous_run_id: recovery.previous_run_id.clone(),
                    why: recovery.why.to_owned(),
                    counts_in: ends.saturating_duration_since(Instant::now()),
                }
            }),
            RECORDING => Some(NotCounted::Unchecked {
                reason: "its run_id is being recorded on the other nodes".to_owned(),
            }),
            _ => Some(NotCounted::Unchecked {
                reason: match &detail.failure {
                    Some(failure) => failure.to_string(),
                    None if detail.checking => "its check is under way".to_owned(),
                    None => "no check has ended yet".to_owned(),
                },
            }),
        }
    }

    /// Whether node `index` is skipped (unresponsive): its votes are not asked.
    pub(crate) fn is_skipped(&self, index: usize) -> bool {
        self.slots[index].skipped.load(Ordering::Acquire)
    }

    /// Marks node `index` skipped; `false` if it already was (a probe is
    /// on its way).
    pub(crate) fn skip(&self, index: usize) -> bool {
        !self.slots[index].skipped.swap(true, Ordering::AcqRel)
    }

    /// Ends the skipping of node `index` (its probe ended).
    pub(crate) fn unskip(&self, index: usize) {
        self.slots[index].skipped.store(false, Ordering::Release);
        self.unskipped.notify_waiters();
    }

    /// Waits until at least `quorum` nodes are not skipped (a round could
    /// then win), or until `deadline`. A round before that would fail
    /// without asking a node.
    ///
    /// Cancel safe.
    pub(crate) async fn askable(&self, quorum: usize, deadline: std::time::Instant) {
        loop {
            let unskipped = self.unskipped.notified();
            tokio::pin!(unskipped);
            // Registered before the count: an unskip after it wakes us.
            unskipped.as_mut().enable();
            let askable = (0..self.slots.len()).filter(|&index| !self.is_skipped(index));
            if askable.count() >= quorum {
                return;
            }
            tokio::select! {
                _ = unskipped => {}
                _ = tokio::time::sleep_until(deadline.into()) => return,
            }
        }
    }

    /// Checks a new connection to node `index` before any call uses it (see
    /// the module docs): reads, judges, and records the incarnation of a
    /// node that counts. A server that changed while this client knew it is
    /// noted as a change ([`ServerChanges`]), so that the locks it may have
    /// lost are told. Returns the server's major version, where known. Only
    /// a failure to get any answer is an error: the connection is then not
    /// used.
    pub(crate) async fn check(
        &self,
        index: usize,
        mut connection: Connection,
    ) -> Result<Option<u32>, NodeErrorKind> {
        let started = Instant::now();
        let identity = self.read(index, &connection).await?;
        self.primary_or_failing_over(index, &identity)?;
        let read_at = Instant::now();
        let name = &self.names[index];
        let known = self.record_read(index, &identity);
        let incarnation = identity.incarnation().unwrap_or_default();
        let run_id = identity.run_id.clone().unwrap_or_default();
        if may_have_lost_keys(&identity, known.as_deref(), self.policy.trust_durable) {
            self.changes.changed(index, Change::Server(run_id.clone()));
        }
        let recovery = self.detail(index).recovery.clone();
        let verdict = self
            .verdict(&identity, known.as_deref(), recovery.as_ref(), started)
            .await;
        let clock_hold = match &verdict {
            Verdict::Recovering { .. } => {
                self.restart_clock(index, &identity);
                None
            }
            _ => self.clock_at_check(index, &identity, started).await,
        };
        let Verdict::Recovering {
            why,
            previous,
            since,
        } = verdict
        else {
            if !incarnation.is_empty() && !identity.record.contains(&incarnation) {
                record_incarnation(&mut connection, &self.record_keys, &incarnation, name).await?;
            }
            match clock_hold {
                None => self.counts(index, incarnation),
                Some(hold) => self.hold_clock(index, hold),
            }
            return Ok(identity.major_version);
        };
        let recovery = Recovery {
            run_id,
            incarnation,
            previous_run_id: known
                .as_deref()
                .map(|known| run_id_of(known).to_owned())
                .or(previous),
            why,
            came_back: match since {
                Since::Start => identity.uptime.map_or(read_at, |up| came_back(read_at, up)),
                Since::Seen => read_at,
                Since::Kept(at) => at,
            },
            // A hold kept on a new connection stays what it was.
            clock: match since {
                Since::Kept(_) => recovery.and_then(|recovery| recovery.clock),
                _ => None,
            },
        };
        self.recovering(index, connection, recovery);
        Ok(identity.major_version)
    }

    /// The judgment of a check that read `identity` (see [`judge`]), with
    /// rule 8 asked of the records.
    async fn verdict(
        &self,
        identity: &Identity,
        known: Option<&str>,
        recovery: Option<&Recovery>,
        started: Instant,
    ) -> Verdict {
        let facts = Facts {
            identity,
            known,
            recovery,
            grace: self.grace(),
            policy: self.policy,
        };
        match judge(&facts) {
            Verdict::AskRecords => self.ask_records(started).await,
            verdict => verdict,
        }
    }

    /// Whether clocks are watched (a tolerance is set).
    pub(crate) fn clock_on(&self) -> bool {
        !self.policy.clock_tolerance.is_zero()
    }

    /// The most node `index`'s wall clock can read now (µs since the Unix
    /// epoch) by its latest reading kept, if it did not step since; `None`
    /// without a reading in the window or with clocks not watched. An
    /// estimate to aim at (see [`Lead::node_clock_at_most`]).
    pub(crate) fn node_clock_at_most(&self, index: usize) -> Option<i64> {
        if !self.clock_on() {
            return None;
        }
        let latest = tasks::lock(&self.slots.get(index)?.clock).latest()?;
        Some(latest.node_clock_at_most(self.epoch, Instant::now()))
    }

    /// The clock tolerance in µs.
    fn tolerance_us(&self) -> i64 {
        i64::try_from(self.policy.clock_tolerance.as_micros()).unwrap_or(i64::MAX)
    }

    /// What `lead` shows against node `index`'s history (see `clock.rs`).
    fn see(&self, index: usize, lead: Lead) -> Seen {
        let window = self.clock_grace();
        tasks::lock(&self.slots[index].clock).see(lead, self.tolerance_us(), window)
    }

    /// A server that changed behind node `index`: its clock's history
    /// starts again from this check's reading.
    fn restart_clock(&self, index: usize, identity: &Identity) {
        if let Some(reading) = identity.clock.filter(|_| self.clock_on()) {
            let lead = self.epoch.lead(&reading);
            tasks::lock(&self.slots[index].clock).restart(lead);
        }
    }

    /// The clock's part of a check (see `clock.rs`): a hold still running,
    /// a step seen against the history, a first look (after every node's
    /// first check has read its node, for at most half the connect timeout
    /// from `started`), or a note that holds the node back.
    async fn clock_at_check(
        &self,
        index: usize,
        identity: &Identity,
        started: Instant,
    ) -> Option<ClockHold> {
        let reading = identity.clock.filter(|_| self.clock_on())?;
        if let Some(running) = self.clock_hold_running(index) {
            return Some(running);
        }
        let lead = self.epoch.lead(&reading);
        match self.see(index, lead) {
            Seen::Stepped { by_us } => Some(ClockHold::seen(by_us, STEP_SEEN)),
            Seen::Unwatched => {
                if !self.all_heard.load(Ordering::Acquire) {
                    self.wait_for_first_reads(started + self.connect_timeout / 2)
                        .await;
                }
                self.first_look(index, lead)
                    .or_else(|| self.noted_hold(index, identity))
            }
            Seen::Steady | Seen::Unsure { .. } => self.noted_hold(index, identity),
        }
    }

    /// Node `index`'s clock hold under way, if one is, to keep on a new
    /// connection.
    fn clock_hold_running(&self, index: usize) -> Option<ClockHold> {
        let detail = self.detail(index);
        let recovery = detail.recovery.as_ref()?;
        let ahead = recovery.clock?;
        (self.slots[index].state.load(Ordering::Acquire) == RECOVERING).then_some(ClockHold {
            ahead,
            why: recovery.why,
            came_back: recovery.came_back,
            seen_here: false,
        })
    }

    /// A first look at node `index`'s clock (see `clock.rs`): held back if
    /// `lead` is ahead of the lower median of the other nodes' latest leads
    /// and this client's wall clock by more than the tolerance. Its history
    /// starts from `lead` either way.
    fn first_look(&self, index: usize, lead: Lead) -> Option<ClockHold> {
        let window = self.clock_grace();
        let others: Vec<i64> = (0..self.slots.len())
            .filter(|&other| other != index)
            .filter_map(|other| self.latest_lead(other))
            .filter(|other| lead.at.saturating_duration_since(other.at) <= window)
            .map(|other| other.mid())
            .collect();
        let ahead_us = clock::ahead_of_others(&lead, &others, self.epoch.own_lead());
        tasks::lock(&self.slots[index].clock).restart(lead);
        // Not noted on the nodes: a first look compares with this client's
        // own wall clock too, and a client whose clock is wrong must not
        // hold the node back for every other client.
        (ahead_us > self.tolerance_us()).then(|| ClockHold {
            seen_here: false,
            ..ClockHold::seen(ahead_us, FIRST_LOOK)
        })
    }

    /// Node `index`'s latest lead: its history's, or its last check's.
    fn latest_lead(&self, index: usize) -> Option<Lead> {
        let kept = tasks::lock(&self.slots[index].clock).latest();
        let checked = (self.detail(index).identity.as_ref())
            .and_then(|identity| identity.clock)
            .map(|reading| self.epoch.lead(&reading));
        match (kept, checked) {
            (Some(kept), Some(checked)) if checked.at > kept.at => Some(checked),
            (kept, checked) => kept.or(checked),
        }
    }

    /// A hold of node `index` (which read `identity`) that a note on some
    /// node asks for: the latest deadline a note read holds its `run_id`
    /// back to. The node's own notes count only where it is the only node:
    /// they are kept by the clock that stepped, so a clock set right again
    /// makes them run 30 s long after a 30 s step.
    fn noted_hold(&self, index: usize, identity: &Identity) -> Option<ClockHold> {
        let run_id = identity.run_id.as_deref()?;
        let now = Instant::now();
        let alone = self.slots.len() == 1;
        let until = (0..self.slots.len())
            .filter(|&node| alone || node != index)
            .filter_map(|node| {
                let detail = self.detail(node);
                let notes = &detail.identity.as_ref()?.clock_notes;
                notes
                    .iter()
                    .filter(|(noted, _)| noted == run_id)
                    .map(|(_, until)| *until)
                    .max()
            })
            .max()
            .filter(|until| *until > now)?;
        let left = until - now;
        let grace = self.clock_grace();
        let came_back = match left.checked_sub(grace) {
            Some(beyond) => now + beyond,
            None => now.checked_sub(grace - left).unwrap_or(now),
        };
        Some(ClockHold {
            ahead: Duration::ZERO,
            why: NOTED,
            came_back,
            seen_here: false,
        })
    }

    /// What a vote's reading of node `index`'s clock (`TIME`, pipelined
    /// after the vote) shows (see `clock.rs`): `Err` with why the vote does
    /// not count if the clock stepped (the node is then held back) or may
    /// have. Also fed with the background readings.
    pub(crate) fn see_clock(&self, index: usize, reading: &Reading) -> Result<(), NotCounted> {
        if !self.clock_on() {
            return Ok(());
        }
        let lead = self.epoch.lead(reading);
        let hold = match self.see(index, lead) {
            Seen::Steady => return Ok(()),
            Seen::Unsure { by_us } => {
                return Err(NotCounted::ClockUnsure {
                    ahead_at_most: micros(by_us),
                    round_trip: reading.received.saturating_duration_since(reading.sent),
                });
            }
            Seen::Stepped { by_us } => ClockHold::seen(by_us, STEP_SEEN),
            Seen::Unwatched => match self.first_look(index, lead) {
                None => return Ok(()),
                Some(hold) => hold,
            },
        };
        self.hold_clock(index, hold);
        Err(self
            .not_counted(index)
            .unwrap_or_else(|| NotCounted::Unchecked {
                reason: "its clock stepped".to_owned(),
            }))
    }

    /// Holds node `index` back for a clock step (see `clock.rs`): its
    /// grants do not count until the grace has passed since `hold` came
    /// back (a recovery that ends later stays); the locks held on it are
    /// told; a step this client saw is noted on every node.
    fn hold_clock(&self, index: usize, hold: ClockHold) {
        let (run_id, incarnation) = {
            let detail = self.detail(index);
            let identity = detail.identity.as_ref();
            (
                identity.and_then(|identity| identity.run_id.clone()),
                identity.and_then(Identity::incarnation),
            )
        };
        let recovery = Recovery {
            run_id: run_id.clone().unwrap_or_default(),
            incarnation: incarnation.unwrap_or_default(),
            previous_run_id: None,
            why: hold.why,
            came_back: hold.came_back,
            clock: Some(hold.ahead),
        };
        let ends = self.ends(&recovery);
        self.changes.changed(index, Change::Clock(hold.ahead));
        if hold.seen_here
            && let Some(run_id) = run_id
        {
            let hold_ms = ends.saturating_duration_since(Instant::now()).as_millis();
            self.note_everywhere(run_id, u64::try_from(hold_ms).unwrap_or(u64::MAX));
        }
        let later = self
            .detail(index)
            .recovery
            .as_ref()
            .map(|now| self.ends(now));
        if self.slots[index].state.load(Ordering::Acquire) == RECOVERING
            && later.is_some_and(|later| later >= ends)
        {
            return; // a recovery under way ends later
        }
        let generation = self.settle(index, Some(recovery.clone()), None, RECOVERING);
        tracing::warn!(
            node = %self.names[index],
            ahead_ms = u64::try_from(hold.ahead.as_millis()).unwrap_or(u64::MAX),
            why = hold.why,
            held_ms = u64::try_from(ends.saturating_duration_since(Instant::now()).as_millis())
                .unwrap_or(u64::MAX),
            "node's clock stepped forward, which expires keys early: its grants do not count \
             until the grace has passed"
        );
        tasks::spawn(end_clock_hold(self.me.clone(), index, generation, recovery));
    }

    /// Notes on every node that the node with `run_id` is held back for
    /// `hold_ms` (a task; each node bounded by the connect timeout).
    fn note_everywhere(&self, run_id: String, hold_ms: u64) {
        let Some(recorder) = self.recorder.get().cloned() else {
            return;
        };
        let run_id: Arc<str> = run_id.into();
        let notes = (0..self.slots.len()).map(move |node| {
            let errand = Errand::NoteClockStep {
                run_id: run_id.clone(),
                hold_ms,
            };
            (recorder.0)(node, errand)
        });
        let notes: Vec<_> = notes.collect();
        tasks::spawn(async move {
            for err in futures::future::join_all(notes)
                .await
                .into_iter()
                .filter_map(Result::err)
            {
                tracing::warn!(error = %err, "noting a clock step on a node failed");
            }
        });
    }

    /// Starts the background reading of the nodes' clocks (once; see
    /// `clock.rs`), as a task that ends with the client.
    fn start_clock_watch(&self) {
        if self.clock_on() && !self.watching.swap(true, Ordering::AcqRel) {
            tasks::spawn(watch_clocks(self.me.clone()));
        }
    }

    /// Whether node `index` has had no clock reading kept for half of
    /// [`WATCH_EVERY`]: read at each sweep then, so that no node goes
    /// unread for much longer than one.
    fn needs_reading(&self, index: usize) -> bool {
        let latest = tasks::lock(&self.slots[index].clock).latest();
        latest.is_none_or(|lead| lead.at.elapsed() >= WATCH_EVERY / 2)
    }

    /// A server that answers as a replica, where the node follows failovers
    /// or this client knew a primary there, is a failover under way (or an
    /// address that leads to a replica now): the connection is not used,
    /// and the next attempt asks again. At a fixed node's first check it is
    /// a misconfiguration instead (see [`misconfiguration`]).
    fn primary_or_failing_over(
        &self,
        index: usize,
        identity: &Identity,
    ) -> Result<(), NodeErrorKind> {
        let Some(role) = identity.role.as_deref().filter(|role| *role != "master") else {
            return Ok(());
        };
        let known = self.detail(index).identity.is_some();
        if !(known || self.follows_failovers.get(index).copied().unwrap_or(false)) {
            return Ok(());
        }
        let failure = NodeErrorKind::NotPrimary {
            role: role.to_owned(),
        };
        self.record_failure(index, failure.clone());
        Err(failure)
    }

    /// Reads node `index`'s identity on `connection`, warning of each check
    /// command it refused; a failure to get any answer is recorded.
    async fn read(&self, index: usize, connection: &Connection) -> Result<Identity, NodeErrorKind> {
        // What this client knows to count goes onto every node it checks.
        let counting = self.counting_incarnations();
        let identity = read_identity(connection, &self.record_keys, &counting, self.scripts)
            .await
            .map_err(|err| {
                let failure = NodeErrorKind::Redis(Arc::new(err));
                self.record_failure(index, failure.clone());
                failure
            })?;
        for refusal in &identity.refused {
            tracing::warn!(
                node = %self.names[index],
                %refusal,
                "node check: the node refused a check command; it counts, without what that \
                 command checks (INFO, ROLE: duplicates, replicas, restarts, failovers; \
                 TIME: clock steps)"
            );
        }
        Ok(identity)
    }

    /// The server changes of this client's nodes, for the locks it holds.
    pub(crate) fn changes(&self) -> &Arc<ServerChanges> {
        &self.changes
    }

    /// The incarnations of the nodes whose votes count for this client.
    fn counting_incarnations(&self) -> Vec<String> {
        (0..self.slots.len())
            .filter(|&i| self.slots[i].state.load(Ordering::Acquire) == COUNTS)
            .filter_map(|i| self.detail(i).identity.as_ref()?.incarnation())
            .collect()
    }

    /// Waits while node `index`'s `run_id` is being recorded on the other
    /// nodes, for at most the connect timeout.
    async fn wait_recorded(&self, index: usize) {
        let deadline = Instant::now() + self.connect_timeout;
        loop {
            let ended = self.ended.notified();
            let mut ended = std::pin::pin!(ended);
            ended.as_mut().enable();
            if self.slots[index].state.load(Ordering::Acquire) != RECORDING {
                return;
            }
            if tokio::time::timeout_at(deadline.into(), ended)
                .await
                .is_err()
            {
                return;
            }
        }
    }

    /// Node `index` (`incarnation`, in its own record) counts once it is
    /// in every other node's record too: a task records it there.
    fn counts(&self, index: usize, incarnation: String) {
        let generation = self.settle(index, None, None, RECORDING);
        // Recorded already, or nothing to record (INFO refused).
        let recorded =
            incarnation.is_empty() || self.detail(index).recorded.as_deref() == Some(&incarnation);
        if recorded
            || !tasks::spawn(record_everywhere(
                self.me.clone(),
                index,
                generation,
                incarnation,
            ))
        {
            self.settle(index, None, Some(generation), COUNTS);
        }
    }

    /// Node `index` is recovering from a restart or failover: a task of its connection
    /// lets it count again once the grace has passed (see [`end_recovery`]).
    fn recovering(&self, index: usize, connection: Connection, recovery: Recovery) {
        let generation = self.settle(index, Some(recovery.clone()), None, RECOVERING);
        let grace_left = self
            .ends(&recovery)
            .saturating_duration_since(Instant::now());
        tracing::warn!(
            node = %self.names[index],
            run_id = %recovery.run_id,
            previous_run_id = recovery.previous_run_id.as_deref().unwrap_or("unknown"),
            why = recovery.why,
            grace_left_ms = u64::try_from(grace_left.as_millis()).unwrap_or(u64::MAX),
            "node recovering from a restart or failover: its grants do not count until the grace \
             has passed"
        );
        tasks::spawn(end_recovery(
            self.me.clone(),
            index,
            generation,
            connection,
            recovery,
        ));
    }

    /// Records a check's read; returns the incarnation this client knew
    /// before.
    fn record_read(&self, index: usize, identity: &Identity) -> Option<String> {
        let known = {
            let mut detail = self.detail(index);
            let known = detail.identity.as_ref().and_then(Identity::incarnation);
            detail.identity = Some(identity.clone());
            detail.failure = None;
            known
        };
        self.heard(index);
        let reason = {
            let identities: Vec<Option<Identity>> = (0..self.slots.len())
                .map(|i| self.detail(i).identity.clone())
                .collect();
            misconfiguration(&self.names, &identities)
        };
        if let Some(reason) = reason
            && self.misconfigured.set(reason.clone()).is_ok()
        {
            tracing::error!(%reason, "misconfigured lock nodes: locking is refused");
        }
        known
    }

    /// Records a failed connection attempt (or check) of node `index`.
    pub(crate) fn record_failure(&self, index: usize, failure: NodeErrorKind) {
        let first = {
            let mut detail = self.detail(index);
            detail.failure = Some(failure.clone());
            !detail.heard
        };
        // Warned once; a node that stays down is tried again at each call.
        if first {
            tracing::warn!(
                node = %self.names[index],
                error = %failure,
                "node check failed: the node's grants do not count until it is checked"
            );
        }
        self.heard(index);
    }

    /// A check of node `index` read it, or connecting to it failed.
    fn heard(&self, index: usize) {
        self.first(index, |detail| &mut detail.heard, &self.all_heard);
    }

    /// Node `index`'s first check ended: its connection is ready (or failed).
    fn first_check_ended(&self, index: usize) {
        self.first(index, |detail| &mut detail.attempted, &self.all_attempted);
    }

    /// Sets a node's `flag`; the first time, sets `all` once every node's
    /// is set, and wakes the waiters.
    fn first(&self, index: usize, flag: fn(&mut Detail) -> &mut bool, all: &AtomicBool) {
        if std::mem::replace(flag(&mut self.detail(index)), true) {
            return;
        }
        if (0..self.slots.len()).all(|i| *flag(&mut self.detail(i))) {
            all.store(true, Ordering::Release);
        }
        self.ended.notify_waiters();
    }

    /// Stores a verdict (`state`, and the recovery of a recovering node), as
    /// a new check (`generation` `None`) or as a later step of check
    /// `generation` (ignored if a newer check replaced it); returns the
    /// generation. A node that left recovery is logged here, once it counts.
    fn settle(
        &self,
        index: usize,
        recovery: Option<Recovery>,
        generation: Option<u64>,
        state: u8,
    ) -> u64 {
        let (generation, left) = {
            let mut detail = self.detail(index);
            match generation {
                Some(generation) if generation != detail.generation => return detail.generation,
                Some(_) => {}
                None => detail.generation += 1,
            }
            match (&recovery, detail.recovery.take()) {
                (None, Some(old)) => detail.left_recovery = Some(old.run_id),
                (Some(_), _) => detail.left_recovery = None,
                (None, None) => {}
            }
            detail.recovery = recovery;
            if state == COUNTS {
                detail.recorded = detail.identity.as_ref().and_then(Identity::incarnation);
            }
            self.slots[index].state.store(state, Ordering::Release);
            let left = if state == COUNTS {
                detail.left_recovery.take()
            } else {
                None
            };
            (detail.generation, left)
        };
        if state == COUNTS {
            self.ended.notify_waiters();
        }
        if let Some(run_id) = left {
            tracing::warn!(
                node = %self.names[index],
                %run_id,
                "node recovered: the restart grace has passed; its grants count again"
            );
        }
        generation
    }

    /// Rule 8 of the module docs, for a node first met, young, never
    /// promoted and unrecorded: waits (for at most half the connect timeout
    /// from `started`) until every node's first check has read its node;
    /// *recovering* if some record holds an incarnation that no node has
    /// now.
    async fn ask_records(&self, started: Instant) -> Verdict {
        self.wait_for_first_reads(started + self.connect_timeout / 2)
            .await;
        let identities: Vec<Identity> = (0..self.slots.len())
            .filter_map(|i| self.detail(i).identity.clone())
            .collect();
        let current: Vec<String> = identities
            .iter()
            .filter_map(Identity::incarnation)
            .collect();
        let current: Vec<&str> = current.iter().map(String::as_str).collect();
        let recorded = identities
            .iter()
            .flat_map(|identity| identity.record.iter().map(String::as_str));
        match vanished(recorded, &current) {
            None => Verdict::Counts,
            Some(gone) => Verdict::Recovering {
                why: "an incarnation that counted is gone from the nodes: this young, \
                      unrecorded node may be the one that lost its data",
                previous: Some(run_id_of(gone).to_owned()),
                since: Since::Start,
            },
        }
    }

    /// Waits until every node's first check ended, or until `deadline`.
    async fn wait_for_first_reads(&self, deadline: Instant) {
        loop {
            let ended = self.ended.notified();
            let mut ended = std::pin::pin!(ended);
            ended.as_mut().enable();
            if self.all_heard.load(Ordering::Acquire) {
                return;
            }
            if tokio::time::timeout_at(deadline.into(), ended)
                .await
                .is_err()
            {
                return;
            }
        }
    }

    /// Starts a first check of every node whose first check has not ended,
    /// then waits until each has ended (at once after the first call), or
    /// until `deadline`. `connect(index)` connects to node `index`, which
    /// checks it; it runs as a task, so the checks go on without the caller.
    ///
    /// Cancel safe: the checks go on without the caller.
    pub(crate) async fn ensure<F, Fut>(
        &self,
        connect: F,
        deadline: Option<Instant>,
    ) -> Result<(), NotReady>
    where
        F: Fn(usize) -> Fut,
        Fut: std::future::Future<Output = Result<(), NodeErrorKind>> + Send + 'static,
    {
        if !self.all_attempted.load(Ordering::Acquire) {
            loop {
                let ended = self.ended.notified();
                let mut ended = std::pin::pin!(ended);
                ended.as_mut().enable();
                // Again on every wake-up: a check whose runtime ended left
                // its node unchecked.
                self.start_first_checks(&connect);
                if self.all_attempted.load(Ordering::Acquire) {
                    break;
                }
                let woke = match deadline {
                    Some(deadline) => tokio::time::timeout_at(deadline.into(), ended)
                        .await
                        .is_ok(),
                    None => {
                        ended.await;
                        true
                    }
                };
                if !woke {
                    return Err(NotReady::DeadlinePassed(self.unchecked()));
                }
            }
        }
        match self.misconfigured.get() {
            Some(reason) => Err(NotReady::Misconfigured(reason.clone())),
            None => Ok(()),
        }
    }

    /// Starts, as tasks of the current runtime, a first check of each node
    /// whose first check has not ended and is not running.
    pub(crate) fn start_first_checks<F, Fut>(&self, connect: &F)
    where
        F: Fn(usize) -> Fut,
        Fut: std::future::Future<Output = Result<(), NodeErrorKind>> + Send + 'static,
    {
        if !tasks::has_runtime() {
            return;
        }
        self.start_clock_watch();
        for index in 0..self.slots.len() {
            {
                let mut detail = self.detail(index);
                if detail.attempted || detail.checking {
                    continue;
                }
                detail.checking = true;
            }
            let under_way = CheckUnderWay {
                standings: self.me.clone(),
                index,
            };
            let connecting = connect(index);
            tasks::spawn(async move {
                let under_way = under_way;
                let outcome = connecting.await;
                if let Some(standings) = under_way.standings.upgrade() {
                    match outcome {
                        // The first lock counts the node: wait for its record.
                        Ok(()) => standings.wait_recorded(under_way.index).await,
                        Err(failure) => standings.record_failure(under_way.index, failure),
                    }
                    standings.first_check_ended(under_way.index);
                }
            });
        }
    }

    /// The nodes whose first check has not ended, each with why.
    fn unchecked(&self) -> Vec<NodeError> {
        (0..self.slots.len())
            .filter(|&i| !self.detail(i).attempted)
            .filter_map(|i| self.vote_counts(i).err())
            .collect()
    }
}

/// A first check running as a task; when it ends, however it ends, its node
/// is no longer "being checked" (a dropped task leaves it to the next call).
struct CheckUnderWay {
    standings: Weak<Standings>,
    index: usize,
}

impl Drop for CheckUnderWay {
    fn drop(&mut self) {
        if let Some(standings) = self.standings.upgrade() {
            standings.detail(self.index).checking = false;
            standings.ended.notify_waiters();
        }
    }
}

/// A check's verdict.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Counts,
    Recovering {
        why: &'static str,
        /// The `run_id` it is taken to have replaced, where known.
        previous: Option<String>,
        /// From when its grace runs.
        since: Since,
    },
    /// Rule 8: what the other nodes' records say decides
    /// ([`Standings::ask_records`]).
    AskRecords,
}

/// From when a recovering node's grace runs.
#[derive(Debug, PartialEq, Eq)]
enum Since {
    /// Its start, from its uptime: a restart (the old server was gone
    /// before the new one started on its port).
    Start,
    /// This check's reply: a promotion, whose time no server reports (the
    /// old primary may have granted locks until the moment it was replaced).
    Seen,
    /// The recovery under way (the same incarnation, on a new connection).
    Kept(Instant),
}

/// A clock hold to start or keep (see `clock.rs`).
#[derive(Debug, Clone, Copy)]
struct ClockHold {
    /// How far ahead the clock stepped, about (zero: told by a note).
    ahead: Duration,
    why: &'static str,
    /// From when its grace runs.
    came_back: Instant,
    /// This client saw the step against its own readings of the node (it
    /// notes it on the nodes).
    seen_here: bool,
}

impl ClockHold {
    /// A step of `by_us` this client saw now.
    fn seen(by_us: i64, why: &'static str) -> ClockHold {
        ClockHold {
            ahead: micros(by_us),
            why,
            came_back: Instant::now(),
            seen_here: true,
        }
    }
}

/// A step seen against this client's own readings of the node.
const STEP_SEEN: &str = "its clock ran ahead of this client's since an earlier reading";
/// A step seen at a first look.
const FIRST_LOOK: &str = "first look: ahead of the other nodes' clocks and this client's";
/// A step another client saw.
const NOTED: &str = "a note on the nodes: another client saw it step";

/// `us` microseconds (zero if negative).
fn micros(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

/// What the judgment of one check reads.
struct Facts<'a> {
    identity: &'a Identity,
    /// The incarnation this client knew from its last check, if any.
    known: Option<&'a str>,
    /// The node's recovery under way, if any.
    recovery: Option<&'a Recovery>,
    /// `G`.
    grace: Duration,
    policy: RestartPolicy,
}

/// The judgment of the module docs (rules 1 to 8), a pure function of what
/// the check read and what this client knew; rule 8 is left to
/// [`Standings::ask_records`].
fn judge(facts: &Facts<'_>) -> Verdict {
    let identity = facts.identity;
    let (Some(incarnation), Some(uptime)) = (identity.incarnation(), identity.uptime) else {
        return Verdict::Counts; // INFO refused: no restart can be seen
    };
    let durable = identity.durable && facts.policy.trust_durable && !identity.promoted;
    if facts.grace.is_zero() || durable {
        return Verdict::Counts;
    }
    if facts.known == Some(incarnation.as_str()) {
        // Still recovering from a change this client saw, on a new connection.
        return match facts.recovery {
            Some(recovery) if recovery.incarnation == incarnation => Verdict::Recovering {
                why: recovery.why,
                previous: recovery.previous_run_id.clone(),
                since: Since::Kept(recovery.came_back),
            },
            _ => Verdict::Counts,
        };
    }
    if facts.known.is_some() {
        return changed(identity.promoted);
    }
    // First met.
    // A never-promoted server keeps its replication id for life: its
    // `run_id` alone (as older clients recorded it) names its incarnation.
    let run_id = identity.run_id.as_deref().unwrap_or_default();
    if identity.record.contains(&incarnation)
        || (!identity.promoted && identity.record.iter().any(|entry| entry == run_id))
    {
        return Verdict::Counts; // a client judged this incarnation to count
    }
    if identity.promoted {
        return Verdict::Recovering {
            why: "a replica promoted to primary (a failover) that no client has recorded \
                  as counting yet",
            previous: None,
            since: Since::Seen,
        };
    }
    if surely_up_for(uptime) >= facts.grace {
        return Verdict::Counts;
    }
    if facts.policy.strict {
        return Verdict::Recovering {
            why: "younger than the grace at first contact (strict mode)",
            previous: None,
            since: Since::Start,
        };
    }
    Verdict::AskRecords
}

/// Rule 4: the incarnation changed while this client knew the node.
fn changed(promoted: bool) -> Verdict {
    if promoted {
        Verdict::Recovering {
            why: "a replica took over as primary while this client knew the node (a failover)",
            previous: None,
            since: Since::Seen,
        }
    } else {
        Verdict::Recovering {
            why: "its run_id changed while this client knew it",
            previous: None,
            since: Since::Start,
        }
    }
}

/// Whether a check that read `identity`, of a node whose incarnation this
/// client knew as `known`, shows a server that may have lost the keys of
/// the locks held on it: a new incarnation that is not a restarted durable
/// server.
fn may_have_lost_keys(identity: &Identity, known: Option<&str>, trust_durable: bool) -> bool {
    let Some(known) = known else {
        return false;
    };
    let durable = identity.durable && trust_durable && !identity.promoted;
    identity.incarnation().is_some_and(|now| now != known) && !durable
}

/// The `run_id` of an incarnation (`run_id/replid`, or a bare `run_id`).
fn run_id_of(incarnation: &str) -> &str {
    incarnation.split('/').next().unwrap_or(incarnation)
}

/// The first incarnation recorded on some node (`recorded`) that is no
/// node's current one (`current`): an incarnation that counted and is gone.
fn vanished<'a>(recorded: impl Iterator<Item = &'a str>, current: &[&str]) -> Option<&'a str> {
    recorded
        .into_iter()
        .find(|recorded| !is_current(recorded, current))
}

/// A recovering node's end of recovery, as a task of its connection: once
/// the grace has passed since it came back, records it and lets its
/// votes count, unless a newer check replaced this one. A connection that
/// fails ends the task; the next connection's check judges the node again.
async fn end_recovery(
    weak: Weak<Standings>,
    index: usize,
    generation: u64,
    mut connection: Connection,
    recovery: Recovery,
) {
    loop {
        // The grace grows with the longest TTL used: read it each time.
        let Some(ends) = weak.upgrade().map(|standings| standings.ends(&recovery)) else {
            return;
        };
        if Instant::now() < ends {
            tokio::time::sleep_until(ends.into()).await;
            continue;
        }
        let Some(standings) = weak.upgrade() else {
            return;
        };
        if standings.detail(index).generation != generation {
            return;
        }
        let name = standings.names[index].clone();
        let written = tokio::time::timeout(
            standings.connect_timeout,
            record_incarnation(
                &mut connection,
                &standings.record_keys,
                &recovery.incarnation,
                &name,
            ),
        )
        .await;
        match written {
            Ok(Ok(())) => {
                let generation = standings.settle(index, None, Some(generation), RECORDING);
                drop(standings);
                record_everywhere(weak, index, generation, recovery.incarnation).await;
                return;
            }
            Ok(Err(NodeErrorKind::Redis(err))) if crate::connection::is_broken(&err) => return,
            _ => {}
        }
        drop(standings);
        tokio::time::sleep(RECORD_RETRY).await;
    }
}

/// A clock hold's end, as a task: once the grace has passed since the step
/// was seen, records the node on every node and lets its votes count,
/// unless a newer check or hold replaced this one.
async fn end_clock_hold(weak: Weak<Standings>, index: usize, generation: u64, recovery: Recovery) {
    loop {
        let Some(ends) = weak.upgrade().map(|standings| standings.ends(&recovery)) else {
            return;
        };
        if Instant::now() >= ends {
            break;
        }
        tokio::time::sleep_until(ends.into()).await;
    }
    let generation = match weak.upgrade() {
        Some(standings) if standings.detail(index).generation == generation => {
            standings.settle(index, None, Some(generation), RECORDING)
        }
        _ => return,
    };
    record_on(weak, index, generation, recovery.incarnation, Whom::All).await;
}

/// How often the background reading reads a node's clock, at most (a node
/// read by a vote meanwhile is not read again).
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// The background reading of the nodes' clocks (see `clock.rs`): every
/// [`WATCH_EVERY`], each connected node not read since is read. Ends with
/// the client.
async fn watch_clocks(weak: Weak<Standings>) {
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        let Some(standings) = weak.upgrade() else {
            return;
        };
        let Some(recorder) = standings.recorder.get().cloned() else {
            continue;
        };
        let reads: Vec<_> = (0..standings.slots.len())
            .filter(|&index| standings.needs_reading(index))
            .map(|index| (recorder.0)(index, Errand::ReadClock))
            .collect();
        drop(standings);
        for err in futures::future::join_all(reads)
            .await
            .into_iter()
            .filter_map(Result::err)
        {
            tracing::debug!(error = %err, "a background clock reading failed");
        }
    }
}

/// Records node `index`'s `run_id` on every other node (each bounded by the
/// connect timeout; a node that cannot be reached learns it from the next
/// check of a client that knows it), then lets its votes count, unless a
/// newer check replaced check `generation`.
async fn record_everywhere(
    standings: Weak<Standings>,
    index: usize,
    generation: u64,
    run_id: String,
) {
    record_on(standings, index, generation, run_id, Whom::Others).await;
}

/// Which nodes [`record_on`] records on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Whom {
    /// Every node but the one recorded (its own record holds it already).
    Others,
    /// Every node.
    All,
}

/// Records node `index`'s `run_id` on the nodes `whom` names (see
/// [`record_everywhere`]), then lets its votes count.
async fn record_on(
    standings: Weak<Standings>,
    index: usize,
    generation: u64,
    run_id: String,
    whom: Whom,
) {
    let Some((recorder, nodes)) = standings
        .upgrade()
        .map(|standings| (standings.recorder.get().cloned(), standings.slots.len()))
    else {
        return;
    };
    let run_id: Arc<str> = run_id.into();
    let outcomes = match recorder {
        Some(recorder) => {
            let records = (0..nodes)
                .filter(|&other| whom == Whom::All || other != index)
                .map(|other| (recorder.0)(other, Errand::Record(run_id.clone())));
            futures::future::join_all(records).await
        }
        None => Vec::new(),
    };
    if let Some(standings) = standings.upgrade() {
        for err in outcomes.into_iter().filter_map(Result::err) {
            tracing::debug!(error = %err, "recording an incarnation failed on a node");
        }
        standings.settle(index, None, Some(generation), COUNTS);
    }
}

/// Records `incarnation` (see [`RecordKeys::adds`]) on a node's own
/// connection. A node that refuses it (an ACL) is left without it, with a
/// warning: it still counts.
async fn record_incarnation(
    connection: &mut Connection,
    keys: &RecordKeys,
    incarnation: &str,
    name: &str,
) -> Result<(), NodeErrorKind> {
    let mut pipe = redis::pipe();
    for add in keys.adds(&[incarnation]) {
        pipe.add_command(add);
    }
    match pipe.query_async::<Value>(connection).await {
        Ok(_) => Ok(()),
        Err(err) if err.code().is_some() => {
            tracing::warn!(
                node = %name,
                error = %err,
                "node check: the node refused to record its run_id; it counts, but a client \
                 meeting the nodes later may not see that it restarted"
            );
            Ok(())
        }
        Err(err) => Err(NodeErrorKind::Redis(Arc::new(err))),
    }
}

/// The check's round trip (see [`check_pipeline`]), read. A command the
/// node refuses leaves that part unknown (a refused `INFO` or `ROLE` is
/// listed in [`Identity::refused`]; a refused `SCRIPT LOAD` only costs the
/// `NOSCRIPT` fallback later); only a failure to get any answer is an
/// error.
async fn read_identity(
    connection: &Connection,
    record_keys: &RecordKeys,
    counting: &[String],
    scripts: &'static [&'static str],
) -> Result<Identity, RedisError> {
    let reads = connection
        .servers()
        .into_iter()
        .map(|(address, mut server)| async move {
            let identity = read_server(&mut server, record_keys, counting, scripts).await?;
            Ok::<_, RedisError>((address, identity))
        });
    let mut identities = futures::future::try_join_all(reads).await?;
    match identities.as_slice() {
        [(None, _)] => Ok(identities
            .pop()
            .map(|(_, identity)| identity)
            .unwrap_or_default()),
        _ => Ok(combine(identities)),
    }
}

/// The node's clock from its answer to the check's `TIME`, sent and
/// answered when; a refusal is noted in `refused` (its grants count without
/// a clock watch, see `clock.rs`).
fn read_time(
    answer: Option<RedisResult<Value>>,
    refused: &mut Vec<String>,
    (sent, received): (Instant, Instant),
) -> Option<Reading> {
    match answer? {
        Ok(time) => Reading::from_reply(&time, sent, received),
        Err(err) => {
            refusal(refused, "TIME (its clock is not watched)", &err);
            None
        }
    }
}

/// One server's identity, read with the check's round trip.
async fn read_server(
    connection: &mut redis::aio::MultiplexedConnection,
    record_keys: &RecordKeys,
    counting: &[String],
    scripts: &'static [&'static str],
) -> Result<Identity, RedisError> {
    let pipe = check_pipeline(record_keys, counting, scripts);
    let sent = Instant::now();
    let mut answers = pipe
        .query_async::<Vec<RedisResult<Value>>>(connection)
        .await?
        .into_iter();
    let received = Instant::now();
    let mut identity = Identity::default();
    match answers.next() {
        Some(Ok(info)) => read_info(&mut identity, info),
        Some(Err(err)) => refusal(&mut identity.refused, "INFO server", &err),
        None => {}
    }
    match answers.next() {
        Some(Ok(info)) => read_replication(&mut identity, info),
        Some(Err(err)) => refusal(&mut identity.refused, "INFO replication", &err),
        None => {}
    }
    if let Some(Ok(info)) = answers.next() {
        let info = redis::from_redis_value::<String>(info).unwrap_or_default();
        identity.cluster_enabled = info_field(&info, "cluster_enabled:").as_deref() == Some("1");
    }
    match answers.next() {
        Some(Ok(Value::Array(role))) => {
            identity.role = match role.first() {
                Some(Value::BulkString(bytes)) => Some(String::from_utf8_lossy(bytes).into_owned()),
                Some(Value::SimpleString(text)) => Some(text.clone()),
                _ => None,
            };
        }
        Some(Ok(_)) | None => {}
        Some(Err(err)) => refusal(&mut identity.refused, "ROLE", &err),
    }
    let appendonly = config_value(answers.next());
    let appendfsync = config_value(answers.next());
    identity.durable =
        appendonly.as_deref() == Some("yes") && appendfsync.as_deref() == Some("always");
    identity.record = read_record(answers.next());
    identity.record.extend(read_record(answers.next()));
    identity.clock = read_time(answers.next(), &mut identity.refused, (sent, received));
    if let (Some(Ok(notes)), Some(clock)) = (answers.next(), identity.clock) {
        identity.clock_notes = read_clock_notes(notes, clock.node_us / 1000)
            .into_iter()
            .filter_map(|(run_id, left_ms)| {
                let left = Duration::from_millis(u64::try_from(left_ms).ok()?);
                Some((run_id, received.checked_add(left)?))
            })
            .collect();
    }
    for loaded in answers {
        if let Err(err) = loaded {
            tracing::debug!(error = %err, "SCRIPT LOAD refused: scripts load on first use");
        }
    }
    Ok(identity)
}

/// The check's round trip: `INFO server`, `INFO replication`, `INFO
/// cluster`, `ROLE`,
/// `CONFIG GET` of the persistence settings, `SMEMBERS` of both records,
/// then the records of the incarnations this client knows to count
/// (`counting`), and the `SCRIPT LOAD` of `scripts`.
fn check_pipeline(
    record_keys: &RecordKeys,
    counting: &[String],
    scripts: &'static [&'static str],
) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.ignore_errors()
        .cmd("INFO")
        .arg("server")
        .cmd("INFO")
        .arg("replication")
        .cmd("INFO")
        .arg("cluster")
        .cmd("ROLE")
        .cmd("CONFIG")
        .arg("GET")
        .arg("appendonly")
        .cmd("CONFIG")
        .arg("GET")
        .arg("appendfsync")
        .cmd("SMEMBERS")
        .arg(&*record_keys.incarnations)
        .cmd("SMEMBERS")
        .arg(&*record_keys.run_ids)
        .cmd("TIME")
        .cmd("HGETALL")
        .arg(&*record_keys.clock_steps);
    if !counting.is_empty() {
        for add in record_keys.adds(counting) {
            pipe.add_command(add).ignore();
        }
    }
    for code in scripts {
        pipe.cmd("SCRIPT").arg("LOAD").arg(*code);
    }
    pipe
}

/// The notes of clock steps in the reply to `HGETALL` (a RESP2 array of
/// fields and values, or a RESP3 map): each `run_id` with how long it is
/// held back after `now_ms` (the node's time, ms).
fn read_clock_notes(reply: Value, now_ms: i64) -> Vec<(String, i64)> {
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    };
    let pairs: Vec<(Value, Value)> = match reply {
        Value::Map(pairs) => pairs,
        Value::Array(items) => {
            let mut items = items.into_iter();
            std::iter::from_fn(|| Some((items.next()?, items.next()?))).collect()
        }
        _ => Vec::new(),
    };
    pairs
        .iter()
        .filter_map(|(run_id, until)| {
            let until_ms = text(until)?.parse::<i64>().ok()?;
            Some((text(run_id)?, until_ms.saturating_sub(now_ms)))
        })
        .collect()
}

/// The entries in the reply to `SMEMBERS` of a record (none if it failed).
fn read_record(answer: Option<RedisResult<Value>>) -> Vec<String> {
    match answer {
        Some(Ok(Value::Array(items) | Value::Set(items))) => items
            .iter()
            .filter_map(|item| match item {
                Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
                _ => None,
            })
            .collect(),
        Some(Err(err)) => {
            tracing::debug!(error = %err, "the record could not be read: taken as empty");
            Vec::new()
        }
        _ => Vec::new(),
    }
}

/// The value of `name` (`"run_id:"`) in an `INFO` reply's text.
fn info_field(info: &str, name: &str) -> Option<String> {
    info.lines()
        .find_map(|line| line.strip_prefix(name))
        .map(|value| value.trim().to_owned())
}

/// Reads the replication ids from the reply to `INFO replication`: a
/// `master_replid2` of zeros means no replication history was taken over.
fn read_replication(identity: &mut Identity, info: Value) {
    let info = redis::from_redis_value::<String>(info).unwrap_or_default();
    identity.replid = info_field(&info, "master_replid:");
    identity.promoted = info_field(&info, "master_replid2:")
        .is_some_and(|replid2| replid2.bytes().any(|byte| byte != b'0'));
}

/// Reads `run_id`, uptime and version from the reply to `INFO server`.
fn read_info(identity: &mut Identity, info: Value) {
    let info = redis::from_redis_value::<String>(info).unwrap_or_default();
    let field = |name: &str| info_field(&info, name);
    identity.run_id = field("run_id:");
    identity.uptime = field("uptime_in_seconds:")
        .and_then(|secs| secs.parse::<u64>().ok())
        .map(Duration::from_secs);
    identity.major_version =
        field("redis_version:").and_then(|version| version.split('.').next()?.parse().ok());
}

/// The value of a one-parameter `CONFIG GET` (RESP2 array or RESP3 map).
fn config_value(answer: Option<RedisResult<Value>>) -> Option<String> {
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    };
    match answer? {
        Ok(Value::Array(items)) => items.get(1).and_then(text),
        Ok(Value::Map(pairs)) => pairs.first().and_then(|(_, value)| text(value)),
        Ok(_) => None,
        Err(err) => {
            tracing::debug!(error = %err, "CONFIG GET refused: the node is taken as not durable");
            None
        }
    }
}

/// The identity of a Redis Cluster node, from each primary's (with its
/// address), as one server's: one incarnation made of every primary's
/// (sorted by `run_id`, so that a resharding that keeps the servers keeps
/// it), so that a change of any primary is a change of the node; promoted
/// if any is; durable if all are; the shortest uptime; a role other than
/// `master` if any primary answers so; every record's entries (each
/// record lives on the primary of its slot).
fn combine(mut servers: Vec<(Option<String>, Identity)>) -> Identity {
    servers.sort_by(|(_, a), (_, b)| a.run_id.cmp(&b.run_id));
    let all = |field: fn(&Identity) -> Option<&String>| -> Option<String> {
        let parts: Option<Vec<&String>> = servers
            .iter()
            .map(|(_, identity)| field(identity))
            .collect();
        parts.map(|parts| {
            parts
                .iter()
                .map(|part| part.as_str())
                .collect::<Vec<_>>()
                .join(",")
        })
    };
    let identities = || servers.iter().map(|(_, identity)| identity);
    let mut record: Vec<String> = identities()
        .flat_map(|identity| identity.record.clone())
        .collect();
    record.sort();
    record.dedup();
    Identity {
        run_id: all(|identity| identity.run_id.as_ref()),
        replid: all(|identity| identity.replid.as_ref()),
        role: identities()
            .filter_map(|identity| identity.role.clone())
            .find(|role| role != "master")
            .or_else(|| identities().find_map(|identity| identity.role.clone())),
        uptime: identities().filter_map(|identity| identity.uptime).min(),
        promoted: identities().any(|identity| identity.promoted),
        major_version: identities()
            .filter_map(|identity| identity.major_version)
            .min(),
        durable: identities().all(|identity| identity.durable),
        record,
        // Its primaries are read as one clock (see `clock.rs`).
        clock: identities().find_map(|identity| identity.clock),
        clock_notes: identities()
            .flat_map(|identity| identity.clock_notes.clone())
            .collect(),
        refused: servers
            .iter()
            .flat_map(|(address, identity)| {
                let address = address.as_deref().unwrap_or_default();
                identity
                    .refused
                    .iter()
                    .map(move |refusal| format!("{address}: {refusal}"))
            })
            .collect(),
        cluster_enabled: false,
    }
}

/// Notes a check command the node refused, with its reply.
fn refusal(refused: &mut Vec<String>, command: &str, err: &RedisError) {
    let reply = match (err.code(), err.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => err.to_string(),
    };
    refused.push(format!("{command}: {reply}"));
}

/// The first misconfiguration among the nodes' last checks, in words.
fn misconfiguration(names: &[Arc<str>], identities: &[Option<Identity>]) -> Option<String> {
    let known: Vec<(usize, &Identity)> = identities
        .iter()
        .enumerate()
        .filter_map(|(index, identity)| identity.as_ref().map(|identity| (index, identity)))
        .collect();
    for &(index, identity) in &known {
        if identity.cluster_enabled {
            return Some(format!(
                "node {} is a server of a Redis Cluster: name the cluster as one node, \
                 redis+cluster://{}",
                names[index], names[index]
            ));
        }
        if let Some(role) = identity.role.as_deref().filter(|role| *role != "master") {
            return Some(format!(
                "node {} is a {role} (ROLE), not an independent master",
                names[index]
            ));
        }
    }
    for (position, &(index, identity)) in known.iter().enumerate() {
        let Some(run_id) = &identity.run_id else {
            continue;
        };
        if let Some(&(other, _)) = known[position + 1..]
            .iter()
            .find(|(_, other)| other.run_id.as_ref() == Some(run_id))
        {
            return Some(format!(
                "nodes {} and {} are the same server (one run_id): its vote would count twice",
                names[index], names[other]
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);
    const GRACE: Duration = Duration::from_secs(60);

    /// A server as a check reads it: `run_id` `r`, replication id `x`, up
    /// for `up` seconds, not durable, not promoted, with an empty record.
    fn server(up: u64) -> Identity {
        Identity {
            run_id: Some("r".into()),
            replid: Some("x".into()),
            uptime: Some(Duration::from_secs(up)),
            role: Some("master".into()),
            ..Identity::default()
        }
    }

    fn policy() -> RestartPolicy {
        RestartPolicy {
            grace: GRACE,
            trust_durable: true,
            strict: false,
            drift_factor: 0.01,
            clock_tolerance: Duration::from_millis(100),
        }
    }

    fn verdict(identity: &Identity, known: Option<&str>, strict: bool) -> Verdict {
        judge(&Facts {
            identity,
            known,
            recovery: None,
            grace: GRACE,
            policy: RestartPolicy { strict, ..policy() },
        })
    }

    fn why(verdict: &Verdict) -> &'static str {
        match verdict {
            Verdict::Recovering { why, .. } => why,
            _ => "",
        }
    }

    /// The judgment, rule by rule (see the module docs).
    #[test]
    fn the_judgment_rule_by_rule() {
        let young = server(5);
        let old = server(3_600);
        let promoted = |up| Identity {
            promoted: true,
            ..server(up)
        };
        // 1. Durable counts, unless it took over a replication history.
        let durable = Identity {
            durable: true,
            ..young.clone()
        };
        assert_eq!(verdict(&durable, Some("other/y"), false), Verdict::Counts);
        let durable_promoted = Identity {
            durable: true,
            ..promoted(3_600)
        };
        assert_ne!(verdict(&durable_promoted, None, false), Verdict::Counts);
        // 2. The incarnation this client knew, not recovering: counts.
        assert_eq!(verdict(&young, Some("r/x"), false), Verdict::Counts);
        // 3. Changed while known: a restart from its start, whatever its age
        //    (an old one has long passed its grace); a promotion from now.
        let restarted = verdict(&old, Some("q/w"), false);
        assert!(matches!(
            restarted,
            Verdict::Recovering {
                since: Since::Start,
                ..
            }
        ));
        let failed_over = verdict(&promoted(3_600), Some("q/w"), false);
        assert!(matches!(
            failed_over,
            Verdict::Recovering {
                since: Since::Seen,
                ..
            }
        ));
        assert!(why(&failed_over).contains("failover"));
        // A promotion of the same server (a failback) changes its replid.
        let failed_back = verdict(&promoted(3_600), Some("r/old"), false);
        assert!(matches!(
            failed_back,
            Verdict::Recovering {
                since: Since::Seen,
                ..
            }
        ));
        // 4. First met, in its own record: counts, promoted or not.
        let recorded = |identity: Identity| Identity {
            record: vec!["r/x".into()],
            ..identity
        };
        assert_eq!(
            verdict(&recorded(young.clone()), None, true),
            Verdict::Counts
        );
        assert_eq!(verdict(&recorded(promoted(9)), None, true), Verdict::Counts);
        // Its bare run_id (an older client's entry) does not vouch for a promotion.
        let bare = Identity {
            record: vec!["r".into()],
            ..promoted(3_600)
        };
        assert!(matches!(
            verdict(&bare, None, false),
            Verdict::Recovering { .. }
        ));
        // 5. First met, promoted, unrecorded: recovering from now, however old.
        let promoted_old = verdict(&promoted(3_600), None, false);
        assert!(matches!(
            promoted_old,
            Verdict::Recovering {
                since: Since::Seen,
                ..
            }
        ));
        // 6. First met, up for the grace, never promoted: counts.
        assert_eq!(verdict(&old, None, true), Verdict::Counts);
        // 7. Young and unrecorded, strict: recovering from its start.
        let strict = verdict(&young, None, true);
        assert!(matches!(
            strict,
            Verdict::Recovering {
                since: Since::Start,
                ..
            }
        ));
        // 8. Otherwise the records decide.
        assert_eq!(verdict(&young, None, false), Verdict::AskRecords);
        // No INFO: nothing can be seen; grace zero: protection off.
        let blind = Identity {
            run_id: None,
            ..young.clone()
        };
        assert_eq!(verdict(&blind, Some("q/w"), true), Verdict::Counts);
        let off = judge(&Facts {
            identity: &promoted(1),
            known: Some("q/w"),
            recovery: None,
            grace: Duration::ZERO,
            policy: policy(),
        });
        assert_eq!(off, Verdict::Counts);
    }

    /// Notes of clock steps read as RESP2 (field, value, …) and RESP3 (a
    /// map), each as how long it holds its node back after the node's now;
    /// a value that is no number is left out.
    #[test]
    fn clock_notes_read_as_time_left() {
        let bulk = |text: &str| Value::BulkString(text.as_bytes().to_vec());
        let resp2 = Value::Array(vec![
            bulk("run-a"),
            bulk("1000500"),
            bulk("run-b"),
            bulk("999000"),
            bulk("run-c"),
            bulk("soon"),
        ]);
        assert_eq!(
            read_clock_notes(resp2, 1_000_000),
            [("run-a".to_owned(), 500), ("run-b".to_owned(), -1000)]
        );
        let resp3 = Value::Map(vec![(bulk("run-a"), bulk("1000500"))]);
        assert_eq!(
            read_clock_notes(resp3, 1_000_000),
            [("run-a".to_owned(), 500)]
        );
        assert!(read_clock_notes(Value::Nil, 0).is_empty());
    }

    /// A recovery under way goes on, from when it began, on a new connection.
    #[test]
    fn a_recovery_under_way_keeps_its_start() {
        let at = Instant::now();
        let recovery = Recovery {
            run_id: "r".into(),
            incarnation: "r/x".into(),
            previous_run_id: Some("q".into()),
            why: "a failover",
            came_back: at,
            clock: None,
        };
        let identity = Identity {
            promoted: true,
            ..server(3_600)
        };
        let facts = Facts {
            identity: &identity,
            known: Some("r/x"),
            recovery: Some(&recovery),
            grace: GRACE,
            policy: policy(),
        };
        assert_eq!(
            judge(&facts),
            Verdict::Recovering {
                why: "a failover",
                previous: Some("q".into()),
                since: Since::Kept(at),
            }
        );
    }

    /// Keys may be lost by a change of server this client saw, unless it is
    /// a restarted durable server.
    #[test]
    fn a_changed_server_may_have_lost_keys_unless_durable() {
        let old = server(3_600);
        assert!(may_have_lost_keys(&old, Some("q/w"), true));
        assert!(!may_have_lost_keys(&old, Some("r/x"), true));
        assert!(!may_have_lost_keys(&old, None, true));
        let durable = Identity {
            durable: true,
            ..old.clone()
        };
        assert!(!may_have_lost_keys(&durable, Some("q/w"), true));
        assert!(may_have_lost_keys(&durable, Some("q/w"), false));
        let promoted = Identity {
            promoted: true,
            ..durable
        };
        assert!(may_have_lost_keys(&promoted, Some("q/w"), true));
    }

    /// The chaos run's finding: a server 0.2 s old can report an uptime of
    /// 1 s; the grace must still run from no earlier than its true start.
    #[test]
    fn a_reported_uptime_may_exceed_the_true_one_by_almost_a_second() {
        let read_at = Instant::now() + Duration::from_secs(10);
        let true_start = read_at - Duration::from_millis(200);
        let reported = SECOND; // unixtime 13 - starttime 12
        assert!(came_back(read_at, reported) >= true_start);
        assert_eq!(came_back(read_at, Duration::ZERO), read_at);
        assert_eq!(came_back(read_at, 5 * SECOND), read_at - 4 * SECOND);
        assert_eq!(surely_up_for(Duration::ZERO), Duration::ZERO);
        assert_eq!(surely_up_for(61 * SECOND), 60 * SECOND);
    }

    /// Evidence of a lost incarnation is a recorded `run_id` that no node has
    /// now; recorded `run_id`s that are all current (nodes met in any order,
    /// by any clients) are none.
    #[test]
    fn a_recorded_run_id_that_no_node_has_is_a_vanished_incarnation() {
        // An older client's bare run_id names the incarnation of that run_id.
        assert_eq!(
            vanished(["r0", "r2/x"].into_iter(), &["r0/a", "r2/x"]),
            None
        );
        assert_eq!(vanished(["r0/b"].into_iter(), &["r0/a"]), Some("r0/b"));
        assert_eq!(vanished(["r"].into_iter(), &["r0/a"]), Some("r"));
        let current = ["r0", "r1b", "r2"];
        assert_eq!(vanished(["r0", "r2"].into_iter(), &current), None);
        assert_eq!(vanished(std::iter::empty(), &current), None);
        assert_eq!(
            vanished(["r0", "r1", "r2"].into_iter(), &current),
            Some("r1")
        );
    }

    /// A cluster is judged as one server made of its primaries: any
    /// primary's change (a restart, a promotion) changes its incarnation;
    /// the order the topology lists them in does not.
    #[test]
    fn a_cluster_is_one_incarnation_of_all_its_primaries() {
        let primary = |run_id: &str, up: u64| Identity {
            run_id: Some(run_id.into()),
            replid: Some(format!("x{run_id}")),
            uptime: Some(Duration::from_secs(up)),
            role: Some("master".into()),
            durable: true,
            record: vec![format!("seen-by-{run_id}")],
            ..Identity::default()
        };
        let at = |address: &str, identity: Identity| (Some(address.to_owned()), identity);
        let both = combine(vec![
            at("h:1", primary("b", 50)),
            at("h:2", primary("a", 90)),
        ]);
        assert_eq!(both.incarnation().as_deref(), Some("a,b/xa,xb"));
        assert_eq!(both.uptime, Some(Duration::from_secs(50)));
        assert!(both.durable && !both.promoted && !both.cluster_enabled);
        assert_eq!(both.record, ["seen-by-a", "seen-by-b"]);
        let reordered = combine(vec![
            at("h:2", primary("a", 90)),
            at("h:1", primary("b", 50)),
        ]);
        assert_eq!(reordered.incarnation(), both.incarnation());
        let failed_over = combine(vec![
            at("h:2", primary("a", 90)),
            at(
                "h:3",
                Identity {
                    promoted: true,
                    durable: false,
                    ..primary("c", 500)
                },
            ),
        ]);
        assert_ne!(failed_over.incarnation(), both.incarnation());
        assert!(failed_over.promoted && !failed_over.durable);
        let demoted = combine(vec![
            at("h:2", primary("a", 90)),
            at(
                "h:1",
                Identity {
                    role: Some("slave".into()),
                    ..primary("b", 50)
                },
            ),
        ]);
        assert_eq!(demoted.role.as_deref(), Some("slave"));
    }
}

//! [`RedlockBuilder`]'s options for judging the nodes (see `standing/`):
//! how long a node that may have lost keys is held back, how far a clock
//! may step unseen, whether durable nodes and nodes that evict are taken,
//! strict mode, and replicas' acknowledgements.

use std::time::Duration;

use super::builder::RedlockBuilder;

impl RedlockBuilder {
    /// How long a node that may have lost its keys (a restart, a failover,
    /// its data gone: see `docs/operations.md`) does not count toward a
    /// quorum, from when that was first seen, by any client (the time is
    /// written on the node): the "delayed restart" that Redlock's safety
    /// needs, enforced by the client (see the crate docs, "Restarts"). Such
    /// a node is *recovering*: it is asked, so it learns the locks taken
    /// meanwhile, but its grants do not count until the grace has passed;
    /// then it counts again by itself.
    ///
    /// The grace must be at least the longest TTL that **any** client of
    /// these nodes uses (with auto-extension, the TTL of each extension, not
    /// the whole hold). Each client covers its own longest TTL by itself, and
    /// records its grace on the nodes (the grace is `max(restart_grace,
    /// longest TTL used, the longest grace recorded)` plus the drift
    /// allowance), so the option matters where other clients use longer TTLs
    /// and have not met the nodes yet. Longer costs nothing while nodes run, and, with three
    /// or more nodes, one restarted node costs no availability either: the
    /// others still make a quorum. Shorter than another client's TTL is
    /// unsafe. Zero switches the protection off (the behaviour of other
    /// Redlock clients: an immediate restart without persistence can grant a
    /// second holder; no data mark is kept or read either). Default: [`DEFAULT_RESTART_GRACE`](Self::DEFAULT_RESTART_GRACE), 60 s, which covers
    /// the TTLs of the CLI (10 s by default), of the Redis docs' examples and
    /// of most uses; at most [`Redlock::MAX_TTL`](crate::Redlock::MAX_TTL).
    pub fn restart_grace(mut self, grace: Duration) -> Self {
        self.config.restart_grace = grace;
        self
    }

    /// How far a node's wall clock may step forward unseen. Redis expires
    /// keys by its wall clock, so a node whose clock steps forward (NTP
    /// stepping instead of slewing, a resumed VM) loses its keys early.
    /// The client reads every node's clock (`TIME`, pipelined with each
    /// acquisition, and once a second in the background) and compares it
    /// with its own monotonic clock and with the other nodes: a node whose
    /// clock surely ran ahead by more than the tolerance has *stepped*, and
    /// its grants do not count for the restart grace (see
    /// [`restart_grace`](Self::restart_grace), and the safety argument in
    /// the crate docs, "Clock steps"). A vote whose reading cannot rule out
    /// such a step (a round trip too long to tell) does not count either.
    ///
    /// Every lock's validity is shortened by the tolerance, since a smaller
    /// step goes unseen, so a TTL must exceed it. The tolerance is the node
    /// set's: every client records its own on the nodes, shortens its
    /// validities by the largest recorded and judges steps by the smallest
    /// (a client of 1 s among clients of 100 ms judges by 100 ms, and all
    /// lose 1 s of validity; see `docs/operations.md` to change it). A reading is as precise as
    /// its round trip: a vote counts only if the reply after it, with the
    /// most precise earlier reading, leaves no room for a step beyond the
    /// tolerance ([`NotCounted::ClockUnsure`](crate::NotCounted::ClockUnsure)
    /// otherwise). The default,
    /// [`DEFAULT_CLOCK_TOLERANCE`](Self::DEFAULT_CLOCK_TOLERANCE) (100 ms),
    /// suits the default [node timeout](Self::node_timeout) (50 ms: a
    /// reply within it is precise enough); with a longer node timeout
    /// (nodes far away), raise the tolerance above twice the timeout. NTP
    /// steps a clock only when it is off by more than 128 ms, and slews it
    /// otherwise. Zero switches the watch off
    /// (no `TIME` is sent, and validity is not shortened): a step forward
    /// can then grant a second holder. At most 1 hour.
    pub fn clock_tolerance(mut self, tolerance: Duration) -> Self {
        self.config.clock_tolerance = tolerance;
        self
    }

    /// Whether a node that runs `appendonly yes` with `appendfsync always`
    /// counts at once after a restart: every acknowledged write is on disk
    /// before the reply, so the keys survive with their expiry. Off, such a
    /// node waits the grace too (for operators who do not trust the disk, or
    /// who change the settings at restart). A node whose settings cannot be
    /// read (`CONFIG` refused) is never taken as durable, and a durable one
    /// that comes back without the data mark it had (an empty disk) has lost
    /// its data whatever its settings say. Default: on.
    pub fn trust_durable_nodes(mut self, on: bool) -> Self {
        self.config.trust_durable_nodes = on;
        self
    }

    /// Strict mode: a node that is already younger than the grace when this
    /// client first meets it, and not durable, is held back too, whatever
    /// the nodes' records say. Off (the default), such a node counts when
    /// its own record holds its `run_id`, or when no record holds a
    /// `run_id` that no node has now (nothing that counted is gone: a
    /// brand-new set of nodes, so the quick start does not wait), and is held
    /// back otherwise (it may be the node that lost its data). On, it closes
    /// the two gaps the default leaves: a client that first meets the nodes
    /// while every node that remembers the lost incarnation is down, and a
    /// single node, which has no other node to remember it. A node met
    /// without a data mark, or with one younger than the grace that no
    /// record holds, is held back likewise (by this client: the mark it
    /// makes holds no other client back). The cost: a fresh set of nodes
    /// makes the first locks wait the grace. Default: off.
    pub fn strict_restarts(mut self, on: bool) -> Self {
        self.config.strict_restarts = on;
        self
    }

    /// Whether to take nodes whose memory policy can evict keys: a
    /// `maxmemory` limit with any `maxmemory-policy` but `noeviction`
    /// (`INFO memory`, read at every check; the `volatile-*` policies,
    /// ElastiCache's default among them, evict keys with a TTL: lock keys
    /// first). An evicted key of a held lock is granted again while its
    /// holder is valid, and nothing shows it. Off (the default), locking
    /// over such a node is refused with
    /// [`Error::Misconfigured`](crate::Error::Misconfigured) naming the
    /// node and the setting; on, such nodes are taken at that risk (see
    /// `docs/operations.md`). A node that refuses `INFO memory` is taken,
    /// with a warning.
    pub fn allow_eviction(mut self, on: bool) -> Self {
        self.config.allow_eviction = on;
        self
    }

    /// A grant (an acquisition, an extension, a fencing write-back) counts
    /// only once `replicas` of the node's replicas acknowledged it: quorlock
    /// sends `WAIT replicas <node timeout>` on the connection that made the
    /// grant, and a node whose replicas did not acknowledge in time is a
    /// failed vote for that round (`NodeErrorKind::ReplicasBehind`). Default:
    /// 0, off.
    ///
    /// **What it buys, precisely.** A counted key is on the primary and on
    /// at least `replicas` replicas. A failover to one of those replicas
    /// keeps the key, so the promoted server refuses other clients the lock
    /// while the holder is valid, also where quorlock cannot see the change
    /// of server (a proxy that keeps the connection open, a server that
    /// refuses `INFO`). It does **not** let the holder keep its lock through
    /// a failover: quorlock cannot tell whether the promoted replica was one
    /// that acknowledged, so the failover rule still holds the new primary
    /// back for the grace and tells the holder (`LostReason::ServerChanged`).
    /// Nor is `WAIT` a guarantee by itself: a replica that acknowledged can
    /// still lose the key (it restarts), and Sentinel may promote one that
    /// did not.
    ///
    /// **What it costs.** One round trip more per grant, and the time the
    /// replicas take to acknowledge, during which the node's connection
    /// (shared by the client's calls) answers nothing else; a node without
    /// enough connected replicas grants nothing. See docs/benchmarks.md.
    ///
    /// On a Redis Cluster node, `WAIT` goes to every primary and the fewest
    /// acknowledgements count: every primary needs `replicas` replicas.
    pub fn replica_acks(mut self, replicas: u32) -> Self {
        self.config.replica_acks = replicas;
        self
    }
}

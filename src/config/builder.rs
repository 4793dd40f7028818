//! [`RedlockBuilder`]: the options of a client, each with its default as an
//! associated constant and its range, checked into a [`Config`].

use std::time::Duration;

use redis::{Client, ConnectionAddr};

use super::options::{self, Config};
use super::url::open_url;
use crate::error::BuildError;
use crate::target::Target;

#[derive(Debug)]
enum Nodes {
    Urls(Vec<String>),
    Clients(Vec<Client>),
}

/// Builds a [`Redlock`](crate::Redlock) with options other than the defaults.
///
/// Made by [`Redlock::builder`](crate::Redlock::builder) (from URLs) or [`RedlockBuilder::from_clients`]
/// (from `redis::Client`s you configured yourself, e.g. for TLS). Nothing is
/// checked or connected until [`build`](RedlockBuilder::build).
///
/// # Options
///
/// | builder method | default | meaning |
/// |---|---|---|
/// | `retry_count(n)` | 10 | with `retry_delay`, a `lock` call's patience: `n × delay` from the call (2 s), however often it is woken; 0 makes `lock` one round like `try_lock`. Without it, an `acquire_timeout` alone bounds the wait |
/// | `acquire_timeout(d)` | none | a `lock` call's patience, counted from the call (the shorter, if `retry_count` is set too; at most 1 h); no round starts after it; a round under way may finish (≤ 2 × node timeout, 3 × with fencing). A fresh client's first contact counts against it too |
/// | `retry_delay(d)` | 200 ms | pause between rounds when too few nodes answered (a waiter for a held lock waits in the queue instead); the unit of the patience |
/// | `retry_jitter(d)` | 100 ms | each pause drawn uniformly from `delay ± jitter` |
/// | `node_timeout(d)` | 50 ms | bound on every call to one connected node; a timeout is a vote against, and the node is skipped by votes until it answers a `PING` |
/// | `connect_timeout(d)` | 1 s | bound on connecting to one node (TCP, TLS, `AUTH`, setup commands) including its check (one round trip, two when the node's run_id is recorded); separate, so that a node 30 ms or more away can be reached at all |
/// | `drift_factor(f)` | 0.01 | validity is reduced by `ttl × f + 2 ms`; must be in `[0, 1)` |
/// | `key_prefix(p)` | `quorlock:` | prepended to the resource name to form the key |
/// | `auto_extend(b)` | on | `run`/`with_lock` extend the lock about a third of the TTL before it expires |
/// | `max_hold(d)` | 60 s | automatic extension never carries a lock past `d` from its acquisition |
/// | `renew_when_left(d)` | a third of the TTL | automatic extension starts when `d` of validity is left (at most three quarters of the TTL) |
/// | `max_extensions(n)` | none | at most `n` automatic extensions per lock |
/// | `release_notifications(b)` | on | a waiting `lock` listens (pub/sub) for the release that hands the lock on to it and claims it at once; off, it makes a round every 250 ms (or its retry delay if shorter) to find out, which costs the nodes a round per waiter |
/// | `queueing(b)` | on | a waiting `lock` takes a place in a fair queue on the nodes and is handed the lock in turn; off, it polls (a round every jittered retry delay), as rslock, node-redlock and redsync do: for keys shared with those clients (`key_prefix("")`), which know nothing of the queue and would otherwise rarely get the lock |
/// | `fencing(b)` | off | fencing tokens (an `INCR` pipelined with each `SET`; one more round trip only when the nodes' counters differ) |
/// | `fencing_counter_key(k)` | `quorlock-fencing-counter` | each node's fencing counter (only the key: `fencing(true)` turns fencing on, in either order) |
/// | `restart_grace(d)` | 60 s | a node whose server changed (a restart without durable data, a failover) or whose data went (its data mark gone: `FLUSHALL`, an empty restart, a resync) does not count for this long after that was first seen, by any client (at least the longest TTL this client used, and the longest grace any client recorded on the nodes); must cover every client's TTL; 0: off (see `docs/operations.md`) |
/// | `clock_tolerance(d)` | 100 ms | a node whose wall clock ran ahead by more than this (a clock step, which expires its keys early) does not count for the restart grace; set it above twice the round trip to the nodes; a property of the node set: every client shortens its validities by the largest tolerance recorded on the nodes and judges steps by the smallest; 0: off (see `docs/operations.md`) |
/// | `trust_durable_nodes(b)` | on | a node with `appendonly yes` + `appendfsync always` counts at once after a restart (not after a failover) |
/// | `replica_acks(n)` | 0 (off) | a grant counts only once `n` of the node's replicas acknowledged it (`WAIT`); the key then survives a failover to one of them, but the holder is still told and the new primary still held back (see the method's docs); one round trip more per grant |
/// | `strict_restarts(b)` | off | also hold back nodes that are younger than the grace when first met, and nodes met without their data mark |
/// | `allow_eviction(b)` | off | take nodes whose memory policy can evict keys (`maxmemory` with a policy other than `noeviction`); off, locking over such a node is refused (`Error::Misconfigured`) |
///
/// TTLs are rounded down to whole milliseconds; valid TTLs leave some validity
/// after the drift allowance (3 ms or more with the default drift) and are at most
/// 365 days. Everything invalid is a `[`BuildError`](crate::BuildError)` (when building) or an [`Error`](crate::Error) (when locking), never a panic.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// # fn main() -> Result<(), quorlock::BuildError> {
/// let redlock = quorlock::Redlock::builder([
///     "redis://127.0.0.1:7001",
///     "redis://127.0.0.1:7002",
///     "redis://127.0.0.1:7003",
/// ])
/// .acquire_timeout(Duration::from_secs(5))
/// .node_timeout(Duration::from_millis(20))
/// .key_prefix("orders:")
/// .build()?;
/// assert_eq!(redlock.quorum(), 2);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct RedlockBuilder {
    nodes: Nodes,
    pub(super) config: Config,
}

impl RedlockBuilder {
    /// Default retries after the first round when no acquire timeout is set.
    pub const DEFAULT_RETRY_COUNT: u32 = options::DEFAULT_RETRY_COUNT;
    /// Default pause between rounds, before jitter.
    pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(200);
    /// Default jitter: each pause is drawn uniformly from `delay ± jitter`.
    pub const DEFAULT_RETRY_JITTER: Duration = Duration::from_millis(100);
    /// Default bound on each call to one node.
    pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(50);
    /// Default bound on connecting to one node, including its check.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
    /// Default clock-drift factor: 1% of the TTL (plus 2 ms).
    pub const DEFAULT_DRIFT_FACTOR: f64 = 0.01;
    /// Default prefix put before every resource name to form the Redis key.
    pub const DEFAULT_KEY_PREFIX: &'static str = "quorlock:";
    /// Default longest time [`LockGuard::run`](crate::LockGuard::run) keeps a
    /// lock by extending it, counted from acquisition.
    pub const DEFAULT_MAX_HOLD: Duration = Duration::from_secs(60);
    /// Default [restart grace](Self::restart_grace): how long a node that
    /// restarted without durable data does not count, at least. Each client
    /// also covers the longest TTL it has used itself.
    pub const DEFAULT_RESTART_GRACE: Duration = Duration::from_secs(60);
    /// Default [clock tolerance](Self::clock_tolerance): the largest step of
    /// a node's clock that is not held against it, and what every lock's
    /// validity is shortened by.
    pub const DEFAULT_CLOCK_TOLERANCE: Duration = Duration::from_millis(100);
    /// Default key of each node's fencing counter (one per node, shared by
    /// all resources), used with [`fencing`](Self::fencing) on.
    pub const DEFAULT_FENCING_COUNTER_KEY: &'static str = options::DEFAULT_FENCING_COUNTER_KEY;

    pub(crate) fn from_urls<I, S>(urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        RedlockBuilder {
            nodes: Nodes::Urls(
                urls.into_iter()
                    .map(|url| url.as_ref().to_owned())
                    .collect(),
            ),
            config: Config::default(),
        }
    }

    /// A builder over clients you created yourself: one `redis::Client` per
    /// independent node (TLS settings, credentials, RESP version are theirs).
    pub fn from_clients<I>(clients: I) -> Self
    where
        I: IntoIterator<Item = Client>,
    {
        RedlockBuilder {
            nodes: Nodes::Clients(clients.into_iter().collect()),
            config: Config::default(),
        }
    }

    /// With [`retry_delay`](Self::retry_delay), how long [`Redlock::lock`](crate::Redlock::lock)
    /// waits: its patience is `retry_count × retry_delay` from the call (2 s
    /// with the defaults), however often it is woken meanwhile; with an
    /// [`acquire_timeout`](Self::acquire_timeout) too, the shorter of the
    /// two. Rounds are not counted: a waiting call makes one whenever the
    /// lock is handed to it (with notifications off, one every
    /// [`Redlock::REFRESH_INTERVAL`](crate::Redlock::REFRESH_INTERVAL) at
    /// most).
    ///
    /// Default: 10 ([`DEFAULT_RETRY_COUNT`](Self::DEFAULT_RETRY_COUNT)); with an acquire timeout set and
    /// no retry count, the timeout alone bounds the wait. Zero makes `lock`
    /// behave like `try_lock` (one round, no queue).
    pub fn retry_count(mut self, retries: u32) -> Self {
        self.config.retry_count = Some(retries);
        self
    }

    /// The longest [`Redlock::lock`](crate::Redlock::lock) waits, counted from the call (its
    /// patience; see [`retry_count`](Self::retry_count)). No round starts
    /// after it; one round already under way may finish (at most twice the
    /// [`node_timeout`](Self::node_timeout) later, three times with
    /// [fencing](Self::fencing)). At most an hour. Default: none (retry
    /// count × retry delay bounds the wait).
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.config.acquire_timeout = Some(timeout);
        self
    }

    /// The pause between rounds when too few nodes answered (a waiter whose
    /// lock is held elsewhere waits in the queue instead), before jitter;
    /// and, with [`retry_count`](Self::retry_count), the measure of a `lock`
    /// call's patience. Default: 200 ms.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.config.retry_delay = delay;
        self
    }

    /// The jitter on each pause: drawn uniformly from `delay ± jitter` (not
    /// below zero), so that competing clients do not retry in step.
    /// Default: 100 ms.
    pub fn retry_jitter(mut self, jitter: Duration) -> Self {
        self.config.retry_jitter = jitter;
        self
    }

    /// The bound on every call to one node once it is connected. A node that
    /// does not answer in time counts as a vote against, and is skipped by
    /// later rounds until it answers a `PING`. Keep it small next to your
    /// TTLs, but above the round trip to your nodes. Default: 50 ms; must be
    /// above zero.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.config.node_timeout = timeout;
        self
    }

    /// The bound on connecting to one node (TCP, TLS, `AUTH`, the connection's
    /// setup commands) including its check (`INFO`, `ROLE`, `CONFIG GET`,
    /// the nodes' records: see the crate docs), which every new connection passes
    /// before any call uses it. Separate from the
    /// [`node_timeout`](Self::node_timeout), because connecting takes several
    /// round trips: over a 30 ms link, a fresh client could never connect
    /// within a 50 ms call bound. A call made while its node is still
    /// connecting waits for it within its own node timeout. The
    /// [`acquire_timeout`](Self::acquire_timeout) bounds a first lock's wait
    /// for first contact too. Default: 1 s; must be above zero.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout;
        self
    }

    /// The clock-drift factor: each lock's validity is reduced by
    /// `ttl * factor + 2 ms` on top of the time the round took. Must lie in
    /// `[0, 1)`. Default: 0.01.
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.config.drift_factor = factor;
        self
    }

    /// The prefix put before each resource name to form its Redis key.
    /// Default: `quorlock:`.
    pub fn key_prefix(mut self, prefix: impl AsRef<[u8]>) -> Self {
        self.config.key_prefix = prefix.as_ref().into();
        self
    }

    /// Whether [`LockGuard::run`](crate::LockGuard::run) and
    /// [`Redlock::with_lock`](crate::Redlock::with_lock) extend the lock while the work runs. Off, the work
    /// is cancelled when the first validity ends. Default: on.
    pub fn auto_extend(mut self, on: bool) -> Self {
        self.config.auto_extend = on;
        self
    }

    /// The longest time automatic extension keeps a lock, counted from its
    /// acquisition: no extension is made that would carry the lock past it.
    /// Default: 60 s.
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.config.max_hold = max_hold;
        self
    }

    /// How much of a held lock's validity is left when automatic extension
    /// (`run`, `with_lock`, `keep_alive`) extends it: at most three
    /// quarters of the lock's TTL, so that each extension leaves time
    /// before the next. Default: a third of the TTL. An extension retried
    /// after a failure waits a twentieth of the TTL (at least the node
    /// timeout) between tries, whatever this says.
    ///
    /// Extending earlier leaves more time to retry before the validity
    /// ends; the `quorlock` tool extends `grace + ttl / 4` before the end,
    /// so that an extension comes before it would stop CMD.
    pub fn renew_when_left(mut self, left: Duration) -> Self {
        self.config.renew_when_left = Some(left);
        self
    }

    /// The most automatic extensions made for one lock. Default: no limit
    /// other than [`max_hold`](Self::max_hold).
    pub fn max_extensions(mut self, extensions: u32) -> Self {
        self.config.max_extensions = Some(extensions);
        self
    }

    /// Whether the metrics of the `metrics` feature carry a `resource` label
    /// with the resource name (of a lock on several resources, the names
    /// joined by commas). Default: off, since every name becomes a series
    /// of its own in the metrics backend, without bound; turn it on only
    /// for a small, fixed set of names. Without the `metrics` feature it
    /// does nothing.
    pub fn metrics_resource_label(mut self, on: bool) -> Self {
        self.config.metrics_resource_label = on;
        self
    }

    /// Whether a waiting `lock` call listens for the release that hands the
    /// lock on to it (pub/sub on each node, one connection per node and
    /// client) and claims it at once. Handoffs are published either way.
    /// Default: on. Off, a waiter learns of its turn at its next round, which
    /// it makes after its jittered retry delay, or
    /// [`Redlock::REFRESH_INTERVAL`](crate::Redlock::REFRESH_INTERVAL) if
    /// that is shorter: a round per waiter, a cost on the nodes that grows
    /// with the waiters (on, waiting costs nothing per waiter).
    pub fn release_notifications(mut self, on: bool) -> Self {
        self.config.release_notifications = on;
        self
    }

    /// Whether a waiting [`Redlock::lock`](crate::Redlock::lock) takes a
    /// place in the fair queue on the nodes (see the crate docs) and is
    /// handed the lock in its turn. Default: on.
    ///
    /// Off, a waiting `lock` polls: it makes a plain round (`SET NX` on
    /// every node) every jittered [`retry_delay`](Self::retry_delay) until
    /// its patience runs out, as rslock, node-redlock and redsync do. Use
    /// it where quorlock shares keys with those clients
    /// ([`key_prefix("")`](Self::key_prefix), see `docs/operations.md`,
    /// "Sharing locks with other Redlock clients"): they know nothing of
    /// the queue, and while quorlock callers queue, a quorlock release
    /// hands the lock to the next of them, so the other clients, which
    /// only poll, rarely find it free. Polling, each client gets the lock
    /// about as often as it asks. What it costs: no order among waiters, a
    /// round per waiter every retry delay, and a lock that changes hands
    /// only as fast as the waiters poll. Turn it off in every quorlock
    /// client on those keys: beside quorlock clients that queue, one that
    /// polls rarely finds the lock free either. The lock's safety is the
    /// same (a polling round is the plain round that
    /// [`Redlock::try_lock`](crate::Redlock::try_lock) makes; the run with
    /// every fault in `tests/chaos.rs` has half its processes poll).
    pub fn queueing(mut self, on: bool) -> Self {
        self.config.queueing = on;
        self
    }

    /// Fencing tokens: each lock gets a number larger than every earlier
    /// holder's, from [`LockGuard::fencing_token`](crate::LockGuard::fencing_token).
    /// Costs an `INCR` pipelined with each acquisition's `SET`, and one more
    /// round trip (the write-back) when the granting nodes' counters differ: when
    /// several clients lock on the same nodes, or a node missed some
    /// acquisitions; one client's counters stay together, and one node never
    /// needs it. Off by default, and then no extra command is sent. Each node keeps one counter
    /// under [`DEFAULT_FENCING_COUNTER_KEY`](Self::DEFAULT_FENCING_COUNTER_KEY)
    /// (or [`fencing_counter_key`](Self::fencing_counter_key): the two
    /// options are independent, in any order).
    pub fn fencing(mut self, on: bool) -> Self {
        self.config.fencing = on;
        self
    }

    /// The key of each node's fencing counter, instead of
    /// [`DEFAULT_FENCING_COUNTER_KEY`](Self::DEFAULT_FENCING_COUNTER_KEY).
    /// It only names the key: [`fencing`](Self::fencing) switches fencing
    /// on, whichever is called first. With fencing on, no resource may map
    /// to this key. Must not be empty.
    pub fn fencing_counter_key(mut self, key: impl AsRef<[u8]>) -> Self {
        self.config.fencing_counter_key = key.as_ref().into();
        self
    }

    /// Checks the options and opens the URLs: the clients and the
    /// [`Config`] to build the engine on.
    pub(crate) fn validate(self) -> Result<(Vec<Target>, Config), BuildError> {
        let mut config = self.config;
        config.check()?;
        let targets = match self.nodes {
            Nodes::Clients(clients) => clients
                .into_iter()
                .map(|client| Target::Fixed(Box::new(client)))
                .collect(),
            Nodes::Urls(urls) => urls
                .iter()
                .map(|url| open_url(url))
                .collect::<Result<Vec<_>, _>>()?,
        };
        if targets.is_empty() {
            return Err(BuildError::NoNodes);
        }
        config.slotted = targets
            .iter()
            .any(|target| matches!(target, Target::Cluster(_)));
        if config.slotted {
            config.check_slotted()?;
        }
        for target in &targets {
            if let Target::Fixed(client) = target
                && let ConnectionAddr::Tcp(_, 0) | ConnectionAddr::TcpTls { port: 0, .. } =
                    client.get_connection_info().addr()
            {
                return Err(BuildError::InvalidUrl {
                    url: client.get_connection_info().addr().to_string(),
                    reason: "port 0 is not a port a server listens on".into(),
                });
            }
        }
        Ok((targets, config))
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            retry_count: None,
            acquire_timeout: None,
            retry_delay: RedlockBuilder::DEFAULT_RETRY_DELAY,
            retry_jitter: RedlockBuilder::DEFAULT_RETRY_JITTER,
            node_timeout: RedlockBuilder::DEFAULT_NODE_TIMEOUT,
            connect_timeout: RedlockBuilder::DEFAULT_CONNECT_TIMEOUT,
            drift_factor: RedlockBuilder::DEFAULT_DRIFT_FACTOR,
            key_prefix: RedlockBuilder::DEFAULT_KEY_PREFIX.as_bytes().into(),
            auto_extend: true,
            max_hold: RedlockBuilder::DEFAULT_MAX_HOLD,
            renew_when_left: None,
            max_extensions: None,
            metrics_resource_label: false,
            slotted: false,
            fencing: false,
            fencing_counter_key: RedlockBuilder::DEFAULT_FENCING_COUNTER_KEY
                .as_bytes()
                .into(),
            release_notifications: true,
            queueing: true,
            restart_grace: RedlockBuilder::DEFAULT_RESTART_GRACE,
            clock_tolerance: RedlockBuilder::DEFAULT_CLOCK_TOLERANCE,
            trust_durable_nodes: true,
            replica_acks: 0,
            strict_restarts: false,
            allow_eviction: false,
        }
    }
}

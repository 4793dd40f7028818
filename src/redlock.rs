//! [`Redlock`]: the public client, a thin face over the engine
//! (`engine.rs`): it checks the call's input and forwards to acquiring
//! (`acquire.rs`), the engine's status, or the background work. Making a
//! client ([`RedlockBuilder::build`]) is here too: it is the one step that
//! needs both the options and the engine.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::Client;

use crate::acquire::{RwSide, Waits, acquire, acquire_rw};
use crate::config::RedlockBuilder;
use crate::election::{self, Leader, LeaderEvent, Leadership};
use crate::engine::{self, Engine};
use crate::error::{BuildError, Error, Result};
use crate::guard::LockGuard;
use crate::quorum;
use crate::request;
use crate::semaphore::Semaphore;
use crate::sets::acquire_all;
use crate::standing;
use crate::status::{LockStatus, RwStatus};

/// A distributed lock client over N independent Redis nodes.
///
/// Cheap to clone (an `Arc` inside); clones share the node connections. See
/// the [crate docs](crate) for the algorithm and its guarantees.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use quorlock::Redlock;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let redlock = Redlock::new([
///     "redis://127.0.0.1:7001",
///     "redis://127.0.0.1:7002",
///     "redis://127.0.0.1:7003",
/// ])?;
/// let guard = redlock.lock("stock:item-42", Duration::from_secs(10)).await?;
/// // ... the critical section ...
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Redlock {
    engine: Arc<Engine>,
}

impl Redlock {
    /// The longest TTL accepted: one year. Longer values are almost
    /// certainly a unit mistake, and refusing them keeps every `Instant`
    /// addition in range.
    pub const MAX_TTL: Duration = quorum::MAX_TTL;

    /// The longest resource name accepted, in bytes.
    pub const MAX_RESOURCE_LEN: usize = engine::MAX_RESOURCE_LEN;

    /// The most resources one [`lock_all`](Self::lock_all) call takes
    /// (after duplicates are dropped): each round's script checks and sets
    /// every key on each node at once, and a node runs nothing else
    /// meanwhile.
    pub const MAX_RESOURCES: usize = engine::MAX_RESOURCES;

    /// How long a client's liveness key on a node outlives its last
    /// heartbeat (see `session.rs`): the places of a client's waiters in the
    /// queues live while it does, so a client that died, with however many
    /// waiters, stops blocking the others within this time and one
    /// [`REFRESH_INTERVAL`](Self::REFRESH_INTERVAL).
    pub const WAITER_LIFETIME: Duration = crate::queue::entries::WAITER_LIFETIME;

    /// How often a client with waiting `lock` calls renews its liveness key
    /// on each node (one heartbeat per client, not per waiter), and the
    /// shortest time between its checks of a key its waiters wait on; with
    /// [`release_notifications`](crate::RedlockBuilder::release_notifications)
    /// off, also how often a waiting call makes a round.
    pub const REFRESH_INTERVAL: Duration = crate::queue::entries::REFRESH_INTERVAL;

    /// What follows the key prefix in the keys of each node's *record*: a
    /// set of the `run_id`s of the node incarnations, on any node of the
    /// lock, whose votes have counted, and beside it (this suffix and `:v2`)
    /// the set of those incarnations as `run_id/master_replid` (see the crate
    /// docs, "Restarts and failovers"). A resource whose key would start
    /// with this suffix is refused.
    pub const RECORD_SUFFIX: &'static str = standing::RECORD_SUFFIX;

    /// A client over the nodes at `urls` (`redis://`, `rediss://`,
    /// `redis+unix://`, `redis+sentinel://` for a Sentinel-managed
    /// primary: see [`SentinelNode`](crate::SentinelNode), or
    /// `redis+cluster://` for a Redis Cluster), with the default
    /// options. One URL gives the classic
    /// single-instance lock (quorum 1).
    ///
    /// # Errors
    ///
    /// As [`RedlockBuilder::build`]: no URLs, or one that does not parse.
    pub fn new<I, S>(urls: I) -> Result<Self, BuildError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::builder(urls).build()
    }

    /// A builder over the nodes at `urls`, to set options before
    /// [`build`](RedlockBuilder::build).
    pub fn builder<I, S>(urls: I) -> RedlockBuilder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        RedlockBuilder::from_urls(urls)
    }

    /// A client over `redis::Client`s you configured yourself (TLS, custom
    /// credentials), with the default options. Use
    /// [`RedlockBuilder::from_clients`] to change them.
    ///
    /// # Errors
    ///
    /// As [`RedlockBuilder::build`].
    pub fn from_clients<I>(clients: I) -> Result<Self, BuildError>
    where
        I: IntoIterator<Item = Client>,
    {
        RedlockBuilder::from_clients(clients).build()
    }

    /// How many nodes the lock spans.
    pub fn node_count(&self) -> usize {
        self.engine.nodes.len()
    }

    /// How many nodes must grant a lock: `node_count() / 2 + 1`.
    pub fn quorum(&self) -> usize {
        quorum::quorum(self.engine.nodes.len())
    }

    /// The Redis key that holds the lock on `resource`: the key prefix followed
    /// by the resource name.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`] for an empty name or one longer than
    /// [`MAX_RESOURCE_LEN`](Self::MAX_RESOURCE_LEN).
    pub fn key(&self, resource: impl AsRef<[u8]>) -> Result<Vec<u8>> {
        Ok(self.engine.key(resource.as_ref())?.to_vec())
    }

    /// Asks every node what it holds for `resource`: free, held (token prefix
    /// and remaining TTL) or failed; whether a quorum holds it; and, for a
    /// node whose votes do not count now (recovering from a restart, say),
    /// why. A fresh client first checks every node (as its first lock
    /// would, bounded by the connect timeout); then each node is given the
    /// connect timeout to answer.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`], [`Error::NoRuntime`]. Node failures are
    /// part of the status, not errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn status(&self, resource: impl AsRef<[u8]>) -> Result<LockStatus> {
        let key = self.engine.key(resource.as_ref())?;
        Error::ensure_runtime()?;
        Ok(self.engine.status(key).await)
    }

    /// What every node holds for the read-write lock on `resource` (see
    /// [`read`](Self::read)): its writer, a waiting writer's intent, and how
    /// many readers each node has whose hold has not ended.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`] for an invalid name; [`Error::NoRuntime`]
    /// outside a tokio runtime. Nodes that fail are shown as failed.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn rw_status(&self, resource: impl AsRef<[u8]>) -> Result<RwStatus> {
        let key = self.engine.key(resource.as_ref())?;
        Error::ensure_runtime()?;
        let keys = request::RwKeys::of(&key);
        let writer = self.engine.status(keys.write.clone()).await;
        let intent = self.engine.status(keys.intent.clone()).await;
        let counts = self.engine.count_readers(keys.read.clone()).await;
        let names = writer.nodes.iter().map(|node| node.node.clone());
        Ok(RwStatus {
            readers: names.zip(counts).collect(),
            quorum: writer.quorum,
            writer,
            intent,
        })
    }

    /// Takes the lock on `resource` for `ttl`, waiting for it until the
    /// call's patience has passed: `retry_count × retry_delay` from the call
    /// (2 s with the defaults), or the acquire timeout when one is set (the
    /// shorter, when both are). A caller that finds the lock held waits in a
    /// queue on the nodes and is served in about the order it came, among
    /// the callers of every client (see the [crate docs](crate)). A client's
    /// first call first checks every node (first contact, bounded by the
    /// connect timeout and the patience).
    ///
    /// Each round asks all nodes in parallel and succeeds when a quorum granted
    /// it and validity is left after the round's duration and the drift
    /// allowance. A failed round is released on every node before the next.
    /// The TTL is rounded down to whole milliseconds.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`], [`Error::InvalidTtl`] before any round;
    /// [`Error::Misconfigured`] from first contact; then, from the last round,
    /// [`Error::Contended`] (held elsewhere), [`Error::Unavailable`] (too few
    /// nodes answered, or their grants did not count: a node recovering from
    /// a restart, say; [`Error::not_counted`] says which and why) or
    /// [`Error::NoValidity`] (the round outlasted the TTL). With `attempts`
    /// 0, no round was made: `Unavailable` when the patience ran out during
    /// first contact.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in the sense that matters for a lock: if the future is
    /// dropped, no guard exists, and a round in flight finishes in the
    /// background (every node answers or times out, so that none of its
    /// `SET`s lands later) and is then released on every node; the call's
    /// place in the queue is given up at once, so that it blocks no one.
    /// [`flush`](Self::flush) waits for that; a runtime that shuts down first
    /// cuts it short, and the keys then expire by their TTL.
    pub async fn lock(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<LockGuard> {
        let waits = Waits::as_configured(&self.engine.config);
        acquire(&self.engine, resource.as_ref(), ttl, waits).await
    }

    /// Makes one round for the lock on `resource`, without retrying and
    /// without joining the queue of waiters (a lock handed on to a waiter is
    /// not free for it).
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock), after a single round.
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock).
    pub async fn try_lock(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<LockGuard> {
        acquire(&self.engine, resource.as_ref(), ttl, Waits::No).await
    }

    /// Takes the locks on every one of `resources` at once, all or none, as
    /// one lock: one guard, with one TTL, extended and released together.
    ///
    /// The first round runs one script per node that sets every key only
    /// when none of them is taken there (held, by any lock of this or
    /// another client, or handed on to a waiter), and wins as a
    /// [`lock`](Self::lock) round does: a quorum of such all-or-nothing
    /// grants, with validity left. When it is lost (released on every
    /// node), the call waits in the queue of each resource in turn, as
    /// `lock` does, in byte order of the keys whatever order they were
    /// named in, holding the ones it has (kept alive) while it waits for
    /// the next; holding them all, it turns them into the one lock in one
    /// more round, all or none on each node. So a set is served in its turn
    /// among the callers queued for any of its resources, and no two
    /// callers can deadlock: every set takes its resources in one order.
    /// While it waits, the resources it already has are held (their own
    /// waiters wait behind it), and a caller that holds one of the
    /// resources itself must not call this (it would wait for itself until
    /// its patience ends). How it works and why it is safe: the `sets`
    /// module's docs. A plain [`lock`](Self::lock) on one of the resources
    /// and this lock exclude each other, since they use the same key.
    ///
    /// With fencing on, the guard's
    /// [`fencing_token`](LockGuard::fencing_token) is larger than the token
    /// of every earlier holder of any of its resources (the steps of the
    /// wait are not fenced).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`] when no resource is named, more than
    /// [`MAX_RESOURCES`](Self::MAX_RESOURCES) are, or any name is invalid,
    /// and, when a node is a Redis Cluster, when the resources' keys are
    /// not all in one slot (give them one hash tag: `{order:42}:items`,
    /// `{order:42}:payment`); otherwise those of [`lock`](Self::lock).
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock): if the future is dropped, no guard exists,
    /// a round in flight finishes in the background and is released, and
    /// the resources held while it waited are released and its places in
    /// the queues left, in the background.
    pub async fn lock_all<I, R>(&self, resources: I, ttl: Duration) -> Result<LockGuard>
    where
        I: IntoIterator<Item = R>,
        R: AsRef<[u8]>,
    {
        let waits = Waits::as_configured(&self.engine.config);
        let resources: Vec<R> = resources.into_iter().collect();
        let names: Vec<&[u8]> = resources.iter().map(AsRef::as_ref).collect();
        acquire_all(&self.engine, &names, ttl, waits).await
    }

    /// Makes one round for the locks on every one of `resources` at once,
    /// all or none (as [`lock_all`](Self::lock_all)), without retrying.
    ///
    /// # Errors
    ///
    /// As [`lock_all`](Self::lock_all), after a single round.
    ///
    /// # Cancel safety
    ///
    /// As [`lock_all`](Self::lock_all).
    pub async fn try_lock_all<I, R>(&self, resources: I, ttl: Duration) -> Result<LockGuard>
    where
        I: IntoIterator<Item = R>,
        R: AsRef<[u8]>,
    {
        let resources: Vec<R> = resources.into_iter().collect();
        let names: Vec<&[u8]> = resources.iter().map(AsRef::as_ref).collect();
        acquire_all(&self.engine, &names, ttl, Waits::No).await
    }

    /// Takes a read hold of the read-write lock on `resource`: any number of
    /// readers hold it together, and no writer while one does.
    ///
    /// A read-write lock on a resource is a lock of its own, apart from the
    /// plain lock ([`lock`](Self::lock)) on the same name: its keys are the
    /// resource's key followed by `:quorlock-write` (the writer's token),
    /// `:quorlock-read` (the readers: each reader's entry ends on its own,
    /// so readers with different TTLs neither extend nor shorten each other)
    /// and `:quorlock-intent` (a waiting writer). Each round runs one script
    /// per node, granted there only when no writer holds the lock and no
    /// writer waits; a quorum of grants with validity left wins, as for the
    /// plain lock. The guard's `extend`, `unlock`, `run`, `forget` and Drop
    /// act on this reader's entry only.
    ///
    /// A reader has no fencing token ([`LockGuard::fencing_token`] is
    /// `None`): readers do not write, and one that must, takes the write
    /// hold.
    ///
    /// The call does not queue: a refused round is followed by another
    /// after the jittered retry delay until the call's patience ends (as for
    /// `lock`). While a writer waits, new readers are refused (see
    /// [`write`](Self::write)).
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock): [`Error::Contended`] when a writer held the
    /// lock, or waited, on every attempt.
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock).
    pub async fn read(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<LockGuard> {
        let waits = Waits::as_configured(&self.engine.config);
        acquire_rw(&self.engine, resource.as_ref(), ttl, waits, RwSide::Read).await
    }

    /// Makes one round for a read hold (as [`read`](Self::read)).
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read), after a single round.
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock).
    pub async fn try_read(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<LockGuard> {
        acquire_rw(
            &self.engine,
            resource.as_ref(),
            ttl,
            Waits::No,
            RwSide::Read,
        )
        .await
    }

    /// Takes the write hold of the read-write lock on `resource` (see
    /// [`read`](Self::read)): granted on a node only when no writer holds
    /// the lock there and no reader's hold is left; a quorum of grants with
    /// validity left wins.
    ///
    /// **No writer starvation.** A refused round leaves the writer's
    /// *intent* on each node that refused it (unless another writer's
    /// intent is there), and no new reader is granted on a node with an
    /// intent. Once a quorum of nodes holds it, no reader can win a round,
    /// so the writer waits at most for the readers already in: the longest
    /// remaining hold among them (their TTL, unless they keep extending),
    /// then one retry delay. The intent lives for
    /// [`WAITER_LIFETIME`](Self::WAITER_LIFETIME) or three retry delays,
    /// whichever is longer, and each round of the writer renews it; a
    /// writer that died stops blocking readers when it expires, and a call
    /// that ends (won, given up or dropped) removes it from every node in
    /// the background. A writer whose intent came second waits behind the
    /// first (a [`try_write`](Self::try_write) is refused while an intent is there).
    ///
    /// With fencing on, the guard's token is larger than every earlier
    /// writer's of this resource (and than every plain lock's token taken
    /// before it from the same counter).
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock).
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock); the intent is removed in the background.
    pub async fn write(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<LockGuard> {
        let waits = Waits::as_configured(&self.engine.config);
        acquire_rw(&self.engine, resource.as_ref(), ttl, waits, RwSide::Write).await
    }

    /// Makes one round for the write hold (as [`write`](Self::write)),
    /// leaving no intent.
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write), after a single round.
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock).
    pub async fn try_write(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<LockGuard> {
        acquire_rw(
            &self.engine,
            resource.as_ref(),
            ttl,
            Waits::No,
            RwSide::Write,
        )
        .await
    }

    /// Takes the lock (as [`lock`](Self::lock)), runs `work` under it (as
    /// [`LockGuard::run`]: extended while it runs, cancelled if the lock is
    /// lost), then releases it.
    ///
    /// If the work finishes but the release cannot be confirmed, the work's
    /// output is still returned (its effects happened) and a warning is logged;
    /// keys left behind expire by their TTL.
    ///
    /// # Errors
    ///
    /// Those of [`lock`](Self::lock); then [`Error::LockLost`] if the lock was
    /// lost while `work` ran (the work was dropped at that moment).
    ///
    /// # Cancel safety
    ///
    /// Dropping this future drops `work` and releases the lock in the background.
    pub async fn with_lock<F>(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        work: F,
    ) -> Result<F::Output>
    where
        F: Future,
    {
        let mut guard = self.lock(resource, ttl).await?;
        let outcome = guard.run(work).await;
        if let Err(err) = guard.unlock().await {
            tracing::warn!(error = %err, "release after with_lock failed");
        }
        outcome
    }
}

/// Semaphores (see `semaphore.rs` for the safety argument).
impl Redlock {
    /// The counting semaphore `name` with `permits` permits: at most that
    /// many holders of a [`Permit`](crate::Permit) at once, across every
    /// process, each permit a lock of its own (with `lost`, `keep_alive`
    /// and `run`); waiters queue fairly; a dead holder's permit comes back
    /// within its TTL. Every client of one semaphore must give the same
    /// `permits`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`] for a bad name, or `permits` of 0 or
    /// more than 1,024.
    pub fn semaphore(&self, name: impl AsRef<[u8]>, permits: u32) -> Result<Semaphore> {
        Semaphore::new(self.engine.clone(), name.as_ref(), permits)
    }
}

/// Leader election (see `election.rs` for the safety argument).
impl Redlock {
    /// Campaigns in the election `name` until this caller leads, then
    /// returns its [`Leadership`]: a held lock on `name` (with `ttl`), whose
    /// fencing token is the leader's **term**, higher than every earlier
    /// leader's, and whose `identity` (a host name, an address: what
    /// [`leader`](Self::leader) will tell) is published on the nodes.
    ///
    /// Callers wait in the queue on the nodes, fairly across processes, for
    /// as long as it takes; a standby takes over when the leader resigns
    /// at once, and when it dies within the leader's TTL. Keep the leadership
    /// with [`keep_alive`](LockGuard::keep_alive), and stop leading the
    /// moment [`lost`](LockGuard::lost) resolves (or run the work under
    /// [`run`](LockGuard::run)): a leader paused past its lease is no
    /// longer the leader, and its term is below the next leader's. Pass the
    /// term to what the leader writes to, so that it refuses a deposed
    /// leader (see `examples/fenced_storage.rs`).
    ///
    /// The term is the lock's fencing token whatever this client's
    /// [`fencing`](RedlockBuilder::fencing) setting; the fencing counter is
    /// shared with this client's other fenced locks.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`] for a bad name or an `identity` that is
    /// empty or longer than 1,024 bytes; [`Error::InvalidTtl`] as
    /// [`lock`](Self::lock); [`Error::Misconfigured`] when the nodes are.
    /// Nodes that fail or refuse only make it wait longer.
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock): dropped, no leadership exists, its place in
    /// the queue is given up and whatever a round in flight set is
    /// released.
    pub async fn campaign(
        &self,
        name: impl AsRef<[u8]>,
        identity: impl AsRef<str>,
        ttl: Duration,
    ) -> Result<Leadership> {
        election::campaign(&self.engine, name.as_ref(), identity.as_ref(), ttl).await
    }

    /// Who leads the election `name` now: the leader's identity, term and
    /// remaining lease as a quorum of nodes vouches for them, or `None`
    /// when nobody leads (or a change of leader is under way).
    ///
    /// A snapshot, for operators and standbys: the leader it names may have
    /// lost since. A leader knows it leads only from its own
    /// [`Leadership`]. Each node's answer is waited for up to the node
    /// timeout (after the client's first contact); a node slower than that
    /// counts as silent.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`] for a bad name; [`Error::Unavailable`]
    /// when too few nodes answered to tell.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn leader(&self, name: impl AsRef<[u8]>) -> Result<Option<Leader>> {
        election::leader(&self.engine, name.as_ref()).await
    }

    /// The changes of leader of the election `name`, as
    /// [`leader`](Self::leader) sees them every `every` (at least 1 ms):
    /// [`LeaderEvent::Elected`] when a leader is found (the first look
    /// included), [`LeaderEvent::Lost`] when it no longer leads, always
    /// before the next leader's `Elected`. A look that fails yields its
    /// error, and the stream goes on. It never ends; drop it to stop.
    ///
    /// A term that begins and ends between two looks is not seen.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`] for a bad name (at once, not in the
    /// stream).
    pub fn observe(
        &self,
        name: impl AsRef<[u8]>,
        every: Duration,
    ) -> Result<futures::stream::BoxStream<'static, Result<LeaderEvent>>> {
        let name = name.as_ref();
        self.engine.key(name)?;
        let every = every.max(Duration::from_millis(1));
        Ok(election::observe(self.engine.clone(), name.to_vec(), every))
    }
}

impl Redlock {
    /// Waits until the work this client does in the background has finished:
    /// the release of a guard dropped without [`unlock`](LockGuard::unlock),
    /// the cleanup of a `lock` call dropped mid-round (which releases what
    /// its round set), a release that timed out and finishes late, and calls
    /// still under way when a round was decided.
    ///
    /// A tokio runtime that shuts down cancels its tasks, and a release cut
    /// short leaves its key until the TTL, keeping everyone else from the
    /// lock. Await this before the runtime ends (the end of `main`, of a
    /// test, of a command-line tool's run). Each task is bounded (by the node
    /// timeout, and a release that timed out by 10 s more), so this returns;
    /// bound it yourself if you cannot wait that long.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the background work goes on.
    pub async fn flush(&self) {
        self.engine.background.idle().await;
    }
}

impl RedlockBuilder {
    /// Validates the options and makes the client. It does not connect: each
    /// node is connected on first use, so nodes that are down now are used
    /// once they come up.
    ///
    /// # Errors
    ///
    /// [`BuildError::NoNodes`], [`BuildError::InvalidUrl`] (unparsable,
    /// unknown scheme, port 0), [`BuildError::InvalidDriftFactor`],
    /// [`BuildError::InvalidOption`] (a zero per-node timeout, a delay over
    /// an hour, an empty fencing counter key).
    pub fn build(self) -> std::result::Result<Redlock, BuildError> {
        let (clients, config) = self.validate()?;
        Ok(Redlock {
            engine: Engine::new(clients, config),
        })
    }
}

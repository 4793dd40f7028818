//! The client itself ([`Redlock`]): made from URLs, clients or a builder
//! ([`RedlockBuilder::build`](crate::RedlockBuilder::build), the one step that needs both the options
//! and the engine), its limits as associated constants, its nodes, the
//! status of a lock, and [`flush`](Redlock::flush).

use std::sync::Arc;
use std::time::Duration;

use redis::Client;

use crate::answer::Answer;
use crate::config::RedlockBuilder;
use crate::engine::To;
use crate::engine::{self, Engine};
use crate::error::{BuildError, Error, Result};
use crate::queue::entries::Place;
use crate::quorum;
use crate::request;
use crate::request::{LockId, Reached};
use crate::round::Until;
use crate::standing;
use crate::status::{LockStatus, RwStatus, TokenRelease};

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
    pub(super) engine: Arc<Engine>,
}

impl Redlock {
    /// The longest TTL accepted: one year. Longer values are almost
    /// certainly a unit mistake, and refusing them keeps every `Instant`
    /// addition in range.
    pub const MAX_TTL: Duration = quorum::MAX_TTL;

    /// The longest resource name accepted, in bytes.
    pub const MAX_RESOURCE_LEN: usize = engine::MAX_RESOURCE_LEN;

    /// The longest token [`unlock_token`](Self::unlock_token) accepts, in
    /// bytes (quorlock's own are 33; other Redlock clients' are shorter).
    pub const MAX_TOKEN_LEN: usize = 1024;

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
    /// As [`RedlockBuilder::build`](crate::RedlockBuilder::build): no URLs, or one that does not parse.
    pub fn new<I, S>(urls: I) -> Result<Self, BuildError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::builder(urls).build()
    }

    /// A builder over the nodes at `urls`, to set options before
    /// [`build`](crate::RedlockBuilder::build).
    pub fn builder<I, S>(urls: I) -> RedlockBuilder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        RedlockBuilder::from_urls(urls)
    }

    /// A client over `redis::Client`s you configured yourself (TLS, custom
    /// credentials), with the default options. Use
    /// [`RedlockBuilder::from_clients`](crate::RedlockBuilder::from_clients) to change them.
    ///
    /// # Errors
    ///
    /// As [`RedlockBuilder::build`](crate::RedlockBuilder::build).
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
    /// [`Error::InvalidResource`](crate::Error::InvalidResource) for an empty name or one longer than
    /// [`MAX_RESOURCE_LEN`](Self::MAX_RESOURCE_LEN).
    pub fn key(&self, resource: impl AsRef<[u8]>) -> Result<Vec<u8>> {
        Ok(self.engine.key(resource.as_ref())?.to_vec())
    }

    /// Releases the lock on `resource` held under `token` (see
    /// [`LockGuard::token`](crate::LockGuard::token)), from any process: a
    /// job runner that hands the token to a worker, an operator who clears
    /// the lock of a holder that is gone. Each node deletes the key only
    /// where it holds this token, and hands the lock on to the first waiter
    /// where one queues, as a release by the holder does; where another
    /// token holds it, nothing is changed. For a lock taken by
    /// [`lock`](Self::lock), [`try_lock`](Self::try_lock) or
    /// [`with_lock`](Self::with_lock) (one resource): read-write locks,
    /// locks on several resources and permits keep their keys elsewhere.
    ///
    /// What it found: [`TokenRelease::Released`] (on how many nodes),
    /// `HeldByOther`, `NotHeld`, or `Unknown` where nodes did not answer.
    /// Where none released it, a status round (as
    /// [`status`](Self::status)) tells the other cases apart. A fresh client
    /// first checks every node, bounded by the connect timeout.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`](crate::Error::InvalidResource),
    /// [`Error::InvalidToken`](crate::Error::InvalidToken) (empty, or longer
    /// than [`MAX_TOKEN_LEN`](Self::MAX_TOKEN_LEN)),
    /// [`Error::NoRuntime`](crate::Error::NoRuntime). Node failures are
    /// part of the answer, not errors.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped after the release went out, it may have
    /// released the lock on some nodes without saying so.
    pub async fn unlock_token(
        &self,
        resource: impl AsRef<[u8]>,
        token: &str,
    ) -> Result<TokenRelease> {
        let key = self.engine.key(resource.as_ref())?;
        if token.is_empty() || token.len() > Self::MAX_TOKEN_LEN {
            let reason = "a token is 1 to Redlock::MAX_TOKEN_LEN bytes";
            return Err(Error::InvalidToken { reason });
        }
        Error::ensure_runtime()?;
        // A fresh client's nodes are connected and checked first: a release
        // round is bounded by the node timeout alone.
        let deadline = std::time::Instant::now() + self.engine.config.connect_timeout;
        let _ = self.engine.first_contact(Some(deadline)).await;
        let lock = LockId::plain(key.clone(), Arc::from(token));
        let mut round = (self.engine)
            .release(&lock, Place::NoEntry, Reached::NONE, To::All, Until::All)
            .await;
        let (votes, _) = round.tally();
        if votes.granted > 0 {
            return Ok(TokenRelease::Released {
                nodes: votes.granted,
            });
        }
        let refused: Vec<bool> = (round.take_answers().iter())
            .map(|answer| matches!(answer, Some(Answer::Refused(_))))
            .collect();
        let status = self.engine.status(key).await;
        Ok(TokenRelease::after_refusal(&status, &refused, token))
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
    /// [`Error::InvalidResource`](crate::Error::InvalidResource), [`Error::NoRuntime`](crate::Error::NoRuntime). Node failures are
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
    /// [`Error::InvalidResource`](crate::Error::InvalidResource) for an invalid name; [`Error::NoRuntime`](crate::Error::NoRuntime)
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
}

impl Redlock {
    /// Waits until the work this client does in the background has finished:
    /// the release of a guard dropped without [`unlock`](crate::LockGuard::unlock),
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
    /// [`BuildError::NoNodes`](crate::BuildError::NoNodes), [`BuildError::InvalidUrl`](crate::BuildError::InvalidUrl) (unparsable,
    /// unknown scheme, port 0), [`BuildError::InvalidDriftFactor`](crate::BuildError::InvalidDriftFactor),
    /// [`BuildError::InvalidOption`](crate::BuildError::InvalidOption) (a zero per-node timeout, a delay over
    /// an hour, an empty fencing counter key).
    pub fn build(self) -> std::result::Result<Redlock, BuildError> {
        let (clients, config) = self.validate()?;
        Ok(Redlock {
            engine: Engine::new(clients, config),
        })
    }
}

//! What [`Redlock`] builds on the plain lock: semaphores and leader
//! election (each with its safety argument in its own module).

use std::time::Duration;

use super::client::Redlock;
use crate::election::{self, Leader, LeaderEvent, Leadership};
use crate::error::Result;
use crate::semaphore::Semaphore;

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
    /// [`Error::InvalidResource`](crate::Error::InvalidResource) for a bad name, or `permits` of 0 or
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
    /// with [`keep_alive`](crate::LockGuard::keep_alive), and stop leading the
    /// moment [`lost`](crate::LockGuard::lost) resolves (or run the work under
    /// [`run`](crate::LockGuard::run)): a leader paused past its lease is no
    /// longer the leader, and its term is below the next leader's. Pass the
    /// term to what the leader writes to, so that it refuses a deposed
    /// leader (see `examples/fenced_storage.rs`).
    ///
    /// The term is the lock's fencing token whatever this client's
    /// [`fencing`](crate::RedlockBuilder::fencing) setting; the fencing counter is
    /// shared with this client's other fenced locks.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`](crate::Error::InvalidResource) for a bad name or an `identity` that is
    /// empty or longer than 1,024 bytes; [`Error::InvalidTtl`](crate::Error::InvalidTtl) as
    /// [`lock`](Self::lock); [`Error::Misconfigured`](crate::Error::Misconfigured) when the nodes are.
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
    /// [`Error::InvalidResource`](crate::Error::InvalidResource) for a bad name; [`Error::Unavailable`](crate::Error::Unavailable)
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
    /// [`LeaderEvent::Elected`](crate::LeaderEvent::Elected) when a leader is found (the first look
    /// included), [`LeaderEvent::Lost`](crate::LeaderEvent::Lost) when it no longer leads, always
    /// before the next leader's `Elected`. A look that fails yields its
    /// error, and the stream goes on. It never ends; drop it to stop.
    ///
    /// A term that begins and ends between two looks is not seen.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`](crate::Error::InvalidResource) for a bad name (at once, not in the
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

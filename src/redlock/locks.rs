//! The lock calls of [`Redlock`]: the plain lock (waiting, or one round),
//! the lock on several resources, the read-write lock, and the lock held
//! while a future runs.

use std::future::Future;
use std::time::Duration;

use super::client::Redlock;
use crate::acquire::{RwSide, Waits, acquire, acquire_rw};
use crate::error::Result;
use crate::guard::LockGuard;
use crate::sets::acquire_all;

impl Redlock {
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
    /// [`Error::InvalidResource`](crate::Error::InvalidResource), [`Error::InvalidTtl`](crate::Error::InvalidTtl) before any round;
    /// [`Error::Misconfigured`](crate::Error::Misconfigured) from first contact; then, from the last round,
    /// [`Error::Contended`](crate::Error::Contended) (held elsewhere), [`Error::Unavailable`](crate::Error::Unavailable) (too few
    /// nodes answered, or their grants did not count: a node recovering from
    /// a restart, say; [`Error::not_counted`](crate::Error::not_counted) says which and why) or
    /// [`Error::NoValidity`](crate::Error::NoValidity) (the round outlasted the TTL). With `attempts`
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
    /// [`fencing_token`](crate::LockGuard::fencing_token) is larger than the token
    /// of every earlier holder of any of its resources (the steps of the
    /// wait are not fenced).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`](crate::Error::InvalidResource) when no resource is named, more than
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
    /// so readers with different TTLs neither extend nor shorten each other),
    /// `:quorlock-intent` (a waiting writer) and `:quorlock-writers` (the
    /// writers' gate, see [`write`](Self::write)). Each round runs one script
    /// per node, granted there only when no writer holds the lock and no
    /// writer waits; a quorum of grants with validity left wins, as for the
    /// plain lock. The guard's `extend`, `unlock`, `run`, `forget` and Drop
    /// act on this reader's entry only.
    ///
    /// A reader has no fencing token ([`LockGuard::fencing_token`](crate::LockGuard::fencing_token) is
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
    /// As [`lock`](Self::lock): [`Error::Contended`](crate::Error::Contended) when a writer held the
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
    /// **Writers take turns.** A writer refused at its first round queues
    /// at the lock's *writers' gate* (a plain lock on the resource's key
    /// followed by `:quorlock-writers`), fairly across processes; only the
    /// writer holding the gate goes on (see `acquire/writers.rs`), so that
    /// many writers at once do not split the nodes between them.
    ///
    /// **No writer starvation.** The gate holder's refused round leaves its
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
    /// As [`lock`](Self::lock); the intent is removed and the gate
    /// released in the background.
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
    /// [`LockGuard::run`](crate::LockGuard::run): extended while it runs, cancelled if the lock is
    /// lost), then releases it.
    ///
    /// If the work finishes but the release cannot be confirmed, the work's
    /// output is still returned (its effects happened) and a warning is logged;
    /// keys left behind expire by their TTL.
    ///
    /// # Errors
    ///
    /// Those of [`lock`](Self::lock); then [`Error::LockLost`](crate::Error::LockLost) if the lock was
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

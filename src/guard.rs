//! [`LockGuard`]: a held lock; extend, unlock, run work under it; Drop fallback.
//!
//! The guard's validity is a [`Lease`] it shares with the keeper that
//! extends it and with its [`lost`](LockGuard::lost) futures; `lease.rs`
//! argues why a guard is never valid after its keys.

use std::fmt;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::answer::NodeError;
use crate::engine::{Engine, To};
use crate::error::{Error, LostReason, Result, show_resources};
use crate::lease::{self, Ending, Keeping, Lease};
use crate::queue::entries::Place;
use crate::quorum::Unlocked;
use crate::request::{LockId, Reached};
use crate::round::Until;
use crate::tasks;
use crate::tasks::Left;

/// A held lock.
///
/// Owned (`Send + Sync + 'static`): it can move into tasks. Release it with
/// [`unlock`](Self::unlock); a guard dropped without `unlock` (or
/// [`forget`](Self::forget)) releases in the background on the current tokio
/// runtime, or, outside a runtime, lets the keys expire by their TTL.
///
/// A guard does not stop time: check [`remaining`](Self::remaining), run the
/// work under [`run`](Self::run), which cancels it when the lock is lost, or
/// have the guard extend itself ([`keep_alive`](Self::keep_alive)) and wait
/// for [`lost`](Self::lost) beside the work.
#[must_use = "dropping the guard releases the lock right away"]
pub struct LockGuard {
    engine: Arc<Engine>,
    lock: LockId,
    /// The validity, shared with the keeper and the `lost` futures.
    lease: Arc<Lease>,
    /// Whether Drop still has to release the keys.
    armed: bool,
    /// The fencing token, with fencing on.
    fencing_token: Option<u64>,
    /// The nodes that the winning round reached (a release goes out there
    /// at once, see `Reached`).
    reached: Reached,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the token: whoever reads logs must not be able to release the lock.
        f.debug_struct("LockGuard")
            .field("resource", &self.shown_resource())
            .field("valid_until", &self.valid_until())
            .field("remaining", &self.remaining())
            .field("extensions", &self.extensions())
            .field("fencing_token", &self.fencing_token)
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    /// The guard of `lock`, won with `lease` by a round that `reached`
    /// those nodes, with its fencing token. Armed: it releases the keys
    /// when dropped without `unlock`.
    pub(crate) fn acquired(
        engine: Arc<Engine>,
        lock: LockId,
        lease: Arc<Lease>,
        reached: Reached,
        fencing_token: Option<u64>,
    ) -> Self {
        LockGuard {
            engine,
            lock,
            lease,
            armed: true,
            fencing_token,
            reached,
        }
    }

    /// The lock's identity on the nodes (its key and token).
    pub(crate) fn lock_id(&self) -> &LockId {
        &self.lock
    }

    /// Stops the keeper ([`keep_alive`](Self::keep_alive)) without
    /// releasing: the guard still releases the keys when dropped.
    pub(crate) fn stop_keeping(&self) {
        self.lease.end((LostReason::Released, None));
    }

    pub(crate) fn shown_resource(&self) -> String {
        show_resources(&self.resources().collect::<Vec<_>>())
    }

    /// The resource name this lock is on (of a lock on several resources,
    /// the first in byte order: see [`resources`](Self::resources)).
    pub fn resource(&self) -> &[u8] {
        self.engine.config.resource_of(&self.lock.key)
    }

    /// Every resource name this lock is on, in byte order, none twice: one
    /// for [`lock`](crate::Redlock::lock), each one named to
    /// [`lock_all`](crate::Redlock::lock_all).
    pub fn resources(&self) -> impl Iterator<Item = &[u8]> {
        let config = &self.engine.config;
        self.lock.keys().map(move |key| config.resource_of(key))
    }

    /// The Redis key that holds the lock on each node (prefix + resource; of
    /// a lock on several resources, the first of its keys; of a read-write
    /// lock, the key that its writer's, readers' and intent keys start with).
    pub fn key(&self) -> &[u8] {
        &self.lock.key
    }

    /// The TTL of the last successful acquisition or extension, in whole milliseconds.
    pub fn ttl(&self) -> Duration {
        self.lease.read(|v| v.ttl.duration)
    }

    /// When the lock was acquired (the start of the winning round).
    pub fn acquired_at(&self) -> Instant {
        self.lease.acquired_at()
    }

    /// The instant (monotonic clock) until which the lock is valid:
    /// `round start + ttl - drift`, moved on by each successful extension.
    pub fn valid_until(&self) -> Instant {
        self.lease.read(|v| v.valid_until)
    }

    /// The validity left: zero once it ran out or an extension showed the lock lost.
    pub fn remaining(&self) -> Duration {
        self.lease.remaining(self.engine.standings.changes())
    }

    /// Whether the lock is still valid (see [`remaining`](Self::remaining)).
    pub fn is_valid(&self) -> bool {
        !self.remaining().is_zero()
    }

    /// The fencing token of this lock, with fencing on
    /// ([`RedlockBuilder::fencing`](crate::RedlockBuilder::fencing)); `None`
    /// with it off.
    ///
    /// It is larger than the token of every earlier holder of this resource
    /// (see the [crate docs](crate#fencing-tokens) for the argument and its
    /// assumptions). Pass it with every write to the protected resource, and
    /// have the resource reject a write whose token is lower than the highest
    /// it has seen: a holder that paused past its validity is then refused.
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }

    /// The lock's token: the random value that marks the lock's keys as this
    /// holder's. It is a secret: whoever has it can release the lock from
    /// any process ([`Redlock::unlock_token`](crate::Redlock::unlock_token)),
    /// so hand it only to whom may do that (a worker that finishes the job,
    /// an operator), never to logs. This guard still extends and releases
    /// as before; a release by the token elsewhere ends the lock for it as
    /// for anyone (its next extension is refused).
    pub fn token(&self) -> &str {
        &self.lock.token
    }

    /// How many successful extensions this guard has made.
    pub fn extensions(&self) -> u32 {
        self.lease.read(|v| v.extensions)
    }

    /// Resets the lock's remaining life to `ttl` from now, on a quorum of nodes.
    ///
    /// Succeeds iff a quorum extended it and the round finished before both
    /// the current validity and the new one ended; the new validity is
    /// `round start + ttl - drift`.
    ///
    /// An extension *resets* the keys' TTL on every node it reaches (it does
    /// not add to it), so it can also shorten them, and a node may act on it
    /// even when the round fails or this future is dropped. So from the
    /// moment the requests are sent, [`valid_until`](Self::valid_until) is at
    /// most `round start + ttl - drift` (it never grows on failure), and only
    /// a successful round raises it. Nothing is ever deleted by an extension.
    ///
    /// One extension round runs at a time: beside a keeper
    /// ([`keep_alive`](Self::keep_alive)), this call waits for the keeper's
    /// round under way, and its TTL becomes the one the keeper extends to.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTtl`]; [`Error::LockLost`] with
    /// [`LostReason::Expired`] (validity already over, or the round finished
    /// too late), [`LostReason::ExtensionRefused`] (a quorum no longer holds
    /// our token; the guard then reports zero remaining) or
    /// [`LostReason::Unreachable`] (too few nodes answered; the lock may still
    /// be held until `valid_until`, and a retry may succeed).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if dropped, the guard's validity is what it was, capped
    /// at `start + ttl - drift` as above (nodes that received the request may
    /// have reset their key to `ttl`).
    pub async fn extend(&mut self, ttl: Duration) -> Result<()> {
        let ttl = self.engine.ttl(ttl)?;
        Error::ensure_runtime()?;
        let span = tracing::debug_span!("quorlock.extend", resource = %self.shown_resource(), ttl_ms = ttl.millis);
        let extension = tasks::in_span!(
            span,
            (self.lease).extend(&self.engine, &self.lock, Some(ttl))
        );
        extension.map_err(|(reason, source)| self.lost_error(reason, source))
    }

    fn lost_error(&self, reason: LostReason, source: Option<NodeError>) -> Error {
        lost_error(self.shown_resource(), (reason, source))
    }

    /// Releases the lock on every node (a token-checked delete) and consumes
    /// the guard. It returns once a quorum confirmed the release, or else once
    /// every node answered (each bounded by the per-node timeout). A client
    /// has at most 64 unlocks under way at a time; more wait for their
    /// turn, so that thousands of locks released at one instant are answered
    /// within the per-node timeout rather than reported unconfirmed.
    ///
    /// # Errors
    ///
    /// [`Error::ReleaseUnconfirmed`] when so many nodes failed to answer that
    /// keys left on them could still keep others from a quorum until their
    /// TTL. Nodes that did not answer keep our key until its TTL either way.
    /// A lock that had already expired is `Ok(Unlocked::Expired)`, not an error.
    ///
    /// # Cancel safety
    ///
    /// If dropped before it finishes, the guard's Drop sends the release again
    /// in the background; the lock is released either way (or expires).
    pub async fn unlock(mut self) -> Result<Unlocked> {
        Error::ensure_runtime()?;
        // A keeper stops before the release goes out.
        self.lease.end((LostReason::Released, None));
        let span = tracing::debug_span!("quorlock.unlock", resource = %self.shown_resource());
        let _permit = crate::engine::lane_permit(&self.engine.unlocks, None).await;
        let mut round = tasks::in_span!(
            span.clone(),
            (self.engine).release(
                &self.lock,
                Place::NoEntry,
                self.reached,
                To::All,
                Until::QuorumOrAll
            )
        );
        self.armed = false;
        let (votes, last_error) = round.tally();
        span.in_scope(|| round.log("release round"));
        match votes.release_outcome() {
            Some(Unlocked::Released) => Ok(Unlocked::Released),
            Some(Unlocked::Expired) => {
                self.lease.note_loss(&LostReason::Expired);
                tracing::warn!(resource = %self.shown_resource(), "lock had expired before its release");
                Ok(Unlocked::Expired)
            }
            None => {
                self.lease.meter().release_unconfirmed();
                tracing::warn!(resource = %self.shown_resource(), %votes, "release unconfirmed");
                Err(Error::ReleaseUnconfirmed {
                    resource: self.shown_resource(),
                    votes,
                    source: last_error,
                })
            }
        }
    }

    /// Gives the guard up without releasing: the keys expire by their TTL.
    /// A keeper ([`keep_alive`](Self::keep_alive)) stops, and
    /// [`lost`](Self::lost) futures resolve with [`LostReason::Released`].
    pub fn forget(mut self) {
        self.armed = false;
    }

    /// Has the guard keep the lock extended in the background until it is
    /// unlocked, dropped or forgotten, or lost: about a third of the TTL
    /// before the validity would end, within the configured
    /// [`max_hold`](crate::RedlockBuilder::max_hold) and
    /// [`max_extensions`](crate::RedlockBuilder::max_extensions) (whether or
    /// not [`auto_extend`](crate::RedlockBuilder::auto_extend) is on: this
    /// call is the opt-in), retrying a failed extension until the validity
    /// ends. It is the keeper [`run`](Self::run) uses, on a task of its own.
    ///
    /// Pair it with [`lost`](Self::lost), which tells the moment the lock
    /// can no longer be trusted. Calling it again does nothing. The keeper
    /// is not one of [`Redlock::flush`](crate::Redlock::flush)'s background
    /// tasks: it ends with the guard.
    ///
    /// # Errors
    ///
    /// [`Error::NoRuntime`] outside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(redlock: quorlock::Redlock) -> quorlock::Result<()> {
    /// use std::time::Duration;
    ///
    /// let guard = redlock.lock("report", Duration::from_secs(10)).await?;
    /// guard.keep_alive()?;
    /// let lost = guard.lost();
    /// tokio::select! {
    ///     biased;
    ///     err = lost => eprintln!("stop writing: {err}"),
    ///     _ = tokio::time::sleep(Duration::from_secs(30)) => {} // the work
    /// }
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn keep_alive(&self) -> Result<()> {
        Error::ensure_runtime()?;
        if self.lease.mark_kept() {
            let keeper = lease::keep_in_background(
                self.lease.clone(),
                self.engine.clone(),
                self.lock.clone(),
            );
            tasks::spawn(keeper);
        }
        Ok(())
    }

    /// A future that resolves, with [`Error::LockLost`], the moment this
    /// lock can no longer be trusted: its validity ran out
    /// ([`LostReason::Expired`], or the last extension's failure:
    /// [`LostReason::Unreachable`], or [`LostReason::LimitReached`]), a
    /// quorum refused an extension ([`LostReason::ExtensionRefused`]), or
    /// the guard was unlocked, dropped or forgotten ([`LostReason::Released`]).
    ///
    /// It tells the loss by itself (a timer on the validity, woken by every
    /// change to it), so it works with or without a keeper: without
    /// [`keep_alive`](Self::keep_alive) or [`run`](Self::run) nothing extends
    /// the lock, and it resolves when the TTL's validity ends. Owned
    /// (`Send + 'static`), so it can go to another task or into `select!`
    /// beside the work; take as many as you like.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    pub fn lost(&self) -> impl Future<Output = Error> + Send + 'static {
        let wait = self.lease.lost(self.engine.standings.changes().clone());
        let resource = self.shown_resource();
        async move { lost_error(resource, wait.await) }
    }

    /// Runs `work` while the lock is held and returns its output.
    ///
    /// With auto-extension on (the default), the lock is extended about a third
    /// of the TTL before it would expire, as long as the configured maximum
    /// hold time and extension count allow; a failed extension is retried
    /// until the validity ends. The moment the validity ends without a
    /// successful extension, or an extension shows a quorum no longer holds
    /// the lock, `work` is dropped (cancelled) and the error says why.
    ///
    /// This is [`lost`](Self::lost) raced against `work`, with the keeper
    /// of [`keep_alive`](Self::keep_alive) run inline (unless one already
    /// runs in the background, or auto-extension is off).
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] with [`LostReason::Expired`],
    /// [`LostReason::ExtensionRefused`], [`LostReason::Unreachable`] or
    /// [`LostReason::LimitReached`].
    ///
    /// # Cancel safety
    ///
    /// Dropping this future drops `work`; the guard stays held with the
    /// validity of its last successful extension.
    pub async fn run<F: Future>(&mut self, work: F) -> Result<F::Output> {
        Error::ensure_runtime()?;
        let work = pin!(work);
        let keeping = if self.engine.config.auto_extend && !self.lease.read(|v| v.kept) {
            Keeping::Extends
        } else {
            Keeping::Watches
        };
        let keeper = async {
            self.lease.keep(&self.engine, &self.lock, keeping).await;
            // The end is in the lease, for `lost` to tell.
            std::future::pending::<std::convert::Infallible>().await
        };
        let lost = self.lease.lost(self.engine.standings.changes().clone());
        tokio::select! {
            biased;
            (reason, source) = lost => Err(self.lost_error(reason, source)),
            never = keeper => match never {},
            output = work => Ok(output),
        }
    }
}

/// The error that tells `ending` of the lock on `resource`, logged.
fn lost_error(resource: String, (reason, source): Ending) -> Error {
    if reason != LostReason::Released {
        tracing::warn!(%resource, %reason, "lock lost");
    }
    Error::LockLost {
        resource,
        reason,
        source,
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // A keeper stops; `lost` futures tell the release.
        self.lease.end((LostReason::Released, None));
        if !self.armed {
            return;
        }
        let (engine, lock, reached) = (self.engine.clone(), self.lock.clone(), self.reached);
        let release = async move {
            engine
                .release(&lock, Place::NoEntry, reached, To::All, Until::QuorumOrAll)
                .await;
        };
        let left = Left::Keys {
            call: "lock guard",
            resource: &|| self.shown_resource(),
        };
        self.engine.background.spawn_or_leave(release, left);
    }
}

//! [`LockGuard`]: a held lock; extend, unlock, run work under it; Drop fallback.
//!
//! ## Why a guard is never valid after its keys
//!
//! A guard claims the lock until `valid_until`. That claim is safe while at
//! least a quorum of nodes keeps our key until then: any other client's
//! `SET NX` needs a quorum, and two quorums share a node, which holds our key.
//!
//! - **Acquire**: every node that granted set its key at or after the round's
//!   `start`, with TTL `ttl`; so each keeps it until at least `start + ttl`,
//!   and `valid_until = start + ttl - drift` is before that on every clock
//!   whose rate differs from ours by less than the drift factor.
//! - **Extend** (the extend script resets our key's TTL to the new `ttl`,
//!   on whichever nodes it reaches, whether or not the round succeeds, and
//!   even if the caller gives up): before any request goes out,
//!   `valid_until` drops to `min(valid_until, start + ttl - drift)`. Every
//!   node that resets the key does so after `start`, so it keeps the key
//!   until at least `start + ttl`; every node the request has not reached
//!   keeps its old expiry, which was already covered. So the capped claim
//!   holds whatever each node did. Only a round in which a quorum extended
//!   our key, and that ended before both the capped and the new validity,
//!   raises `valid_until` to `start + ttl - drift` (the quorum then has our
//!   key until at least `start + ttl`).
//! - **Nodes that disagree**: a node that refuses (our key is gone there)
//!   or fails does not count; when refusals alone rule out a quorum, the
//!   guard is marked lost at once (`remaining()` is zero), since another
//!   client may then hold the lock.

use std::fmt;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::OptionFuture;
use tracing::Instrument;

use crate::answer::NodeError;
use crate::engine::{Engine, To};
use crate::error::{Error, LostReason, Result, show_resources};
use crate::queue::Place;
use crate::quorum::{Ttl, Unlocked};
use crate::request::LockId;
use crate::round::{Round, Until};

/// A held lock.
///
/// Owned (`Send + Sync + 'static`): it can move into tasks. Release it with
/// [`unlock`](Self::unlock); a guard dropped without `unlock` (or
/// [`forget`](Self::forget)) releases in the background on the current tokio
/// runtime, or, outside a runtime, lets the keys expire by their TTL.
///
/// A guard does not stop time: check [`remaining`](Self::remaining) or run the
/// work under [`run`](Self::run), which cancels it when the lock is lost.
#[must_use = "dropping the guard releases the lock right away"]
pub struct LockGuard {
    engine: Arc<Engine>,
    lock: LockId,
    /// The resource name's length: the end of the key.
    resource_len: usize,
    ttl: Ttl,
    acquired_at: Instant,
    valid_until: Instant,
    extensions: u32,
    /// Set when an extension showed that a quorum no longer holds our token.
    lost: bool,
    /// Whether Drop still has to release the keys.
    armed: bool,
    /// The fencing token, with fencing on.
    fencing_token: Option<u64>,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the token: whoever reads logs must not be able to release the lock.
        f.debug_struct("LockGuard")
            .field("resource", &self.shown_resource())
            .field("valid_until", &self.valid_until)
            .field("remaining", &self.remaining())
            .field("extensions", &self.extensions)
            .field("fencing_token", &self.fencing_token)
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    /// The guard of `lock` (on a resource `resource_len` bytes long), won
    /// by a round that started at `start`, with its fencing token. Armed:
    /// it releases the keys when dropped without `unlock`.
    pub(crate) fn acquired(
        engine: Arc<Engine>,
        lock: LockId,
        resource_len: usize,
        ttl: Ttl,
        start: Instant,
        fencing_token: Option<u64>,
    ) -> Self {
        LockGuard {
            engine,
            lock,
            resource_len,
            ttl,
            acquired_at: start,
            valid_until: ttl.valid_until(start),
            extensions: 0,
            lost: false,
            armed: true,
            fencing_token,
        }
    }

    pub(crate) fn shown_resource(&self) -> String {
        show_resources(&self.resources().collect::<Vec<_>>())
    }

    /// The resource name this lock is on (of a lock on several resources,
    /// the first in byte order: see [`resources`](Self::resources)).
    pub fn resource(&self) -> &[u8] {
        let prefix_len = self.lock.key.len() - self.resource_len;
        &self.lock.key[prefix_len..]
    }

    /// Every resource name this lock is on, in byte order, none twice: one
    /// for [`lock`](crate::Redlock::lock), each one named to
    /// [`lock_all`](crate::Redlock::lock_all).
    pub fn resources(&self) -> impl Iterator<Item = &[u8]> {
        let prefix_len = self.lock.key.len() - self.resource_len;
        self.lock.keys().map(move |key| &key[prefix_len..])
    }

    /// The Redis key that holds the lock on each node (prefix + resource; of
    /// a lock on several resources, the first of its keys; of a read-write
    /// lock, the key that its writer's, readers' and intent keys start with).
    pub fn key(&self) -> &[u8] {
        &self.lock.key
    }

    /// The TTL of the last successful acquisition or extension, in whole milliseconds.
    pub fn ttl(&self) -> Duration {
        self.ttl.duration
    }

    /// When the lock was acquired (the start of the winning round).
    pub fn acquired_at(&self) -> Instant {
        self.acquired_at
    }

    /// The instant (monotonic clock) until which the lock is valid:
    /// `round start + ttl - drift`, moved on by each successful extension.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// The validity left: zero once it ran out or an extension showed the lock lost.
    pub fn remaining(&self) -> Duration {
        if self.lost {
            return Duration::ZERO;
        }
        self.valid_until.saturating_duration_since(Instant::now())
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

    /// How many successful extensions this guard has made.
    pub fn extensions(&self) -> u32 {
        self.extensions
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
        if self.lost || Instant::now() >= self.valid_until {
            return Err(self.lost_error(LostReason::Expired, None));
        }
        let start = self.begin_extension(ttl);
        let round = self.engine.extend(&self.lock, ttl).instrument(span).await;
        self.apply_extension(round, start, ttl)
            .map_err(|(reason, source)| self.lost_error(reason, source))
    }

    /// Notes that an extension to `ttl` is about to be sent, and returns its
    /// start. Every node it reaches resets our key to `ttl` from about now,
    /// so the validity drops to `start + ttl - drift` if that is sooner, and
    /// stays there unless the round succeeds (see [`apply_extension`]).
    ///
    /// [`apply_extension`]: Self::apply_extension
    fn begin_extension(&mut self, ttl: Ttl) -> Instant {
        let start = Instant::now();
        self.valid_until = self.valid_until.min(ttl.valid_until(start));
        start
    }

    /// Takes in an extension round that started at `start` (after
    /// [`begin_extension`](Self::begin_extension)). It is applied only if a
    /// quorum extended our key and the round ended before the validity the
    /// guard had (already capped at the new one), and before the new one.
    fn apply_extension(
        &mut self,
        mut round: Round,
        start: Instant,
        ttl: Ttl,
    ) -> std::result::Result<(), (LostReason, Option<NodeError>)> {
        let (votes, last_error) = round.tally();
        let finished = Instant::now();
        round.log("extend round");
        if votes.has_quorum() {
            let new_valid_until = ttl.valid_until(start);
            if finished < self.valid_until && finished < new_valid_until {
                self.valid_until = new_valid_until;
                self.ttl = ttl;
                self.extensions = self.extensions.saturating_add(1);
                return Ok(());
            }
            return Err((LostReason::Expired, last_error));
        }
        if votes.refusals_rule_out_quorum() {
            self.lost = true;
            // Another client may hold the lock now: this one's validity ends.
            self.valid_until = self.valid_until.min(finished);
            return Err((LostReason::ExtensionRefused { votes }, last_error));
        }
        Err((LostReason::Unreachable { votes }, last_error))
    }

    fn lost_error(&self, reason: LostReason, source: Option<NodeError>) -> Error {
        tracing::warn!(resource = %self.shown_resource(), %reason, "lock lost");
        Error::LockLost {
            resource: self.shown_resource(),
            reason,
            source,
        }
    }

    /// Releases the lock on every node (a token-checked delete) and consumes
    /// the guard. It returns once a quorum confirmed the release, or else once
    /// every node answered (each bounded by the per-node timeout).
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
        let span = tracing::debug_span!("quorlock.unlock", resource = %self.shown_resource());
        let mut round = self
            .engine
            .release(&self.lock, Place::None, To::All, Until::QuorumOrAll)
            .instrument(span.clone())
            .await;
        self.armed = false;
        let (votes, last_error) = round.tally();
        span.in_scope(|| round.log("release round"));
        match votes.release_outcome() {
            Some(Unlocked::Released) => Ok(Unlocked::Released),
            Some(Unlocked::Expired) => {
                tracing::warn!(resource = %self.shown_resource(), "lock had expired before its release");
                Ok(Unlocked::Expired)
            }
            None => {
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
    pub fn forget(mut self) {
        self.armed = false;
    }

    /// Whether automatic extension may extend at `at` without breaking the limits.
    fn may_extend_at(&self, at: Instant) -> bool {
        let config = &self.engine.config;
        let under_count = config
            .max_extensions
            .is_none_or(|max| self.extensions < max);
        let held_by_then = at.saturating_duration_since(self.acquired_at) + self.ttl.duration;
        under_count && held_by_then <= config.max_hold
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
        let mut work = pin!(work);
        let auto_extend = self.engine.config.auto_extend;
        let retry_pause = (self.ttl.duration / 20).max(self.engine.config.node_timeout);
        let mut extension: Option<Extension> = None;
        let mut retry_at: Option<Instant> = None;
        let mut last_failure: Option<(LostReason, Option<NodeError>)> = None;
        loop {
            if self.lost {
                let (reason, source) = last_failure.take().unwrap_or((LostReason::Expired, None));
                return Err(self.lost_error(reason, source));
            }
            let valid_until = self.valid_until;
            let renew_at = retry_at.unwrap_or_else(|| {
                valid_until
                    .checked_sub(self.ttl.duration / 3)
                    .unwrap_or(valid_until)
            });
            let can_extend = auto_extend && extension.is_none() && self.may_extend_at(renew_at);
            tokio::select! {
                biased;
                _ = tokio::time::sleep_until(valid_until.into()) => {
                    return Err(self.ran_out(last_failure.take(), renew_at));
                }
                Some((round, start)) = OptionFuture::from(extension.as_mut()), if extension.is_some() => {
                    extension = None;
                    let ttl = self.ttl;
                    last_failure = self.apply_extension(round, start, ttl).err();
                    retry_at = last_failure.is_some().then(|| Instant::now() + retry_pause);
                }
                output = &mut work => return Ok(output),
                _ = tokio::time::sleep_until(renew_at.into()), if can_extend => {
                    extension = Some(self.start_extension());
                }
            }
        }
    }

    /// The error when `run`'s validity ran out: the last extension's
    /// failure, or why no extension was made.
    fn ran_out(
        &self,
        last_failure: Option<(LostReason, Option<NodeError>)>,
        renew_at: Instant,
    ) -> Error {
        let (reason, source) = last_failure.unwrap_or_else(|| {
            if self.engine.config.auto_extend && !self.may_extend_at(renew_at) {
                (LostReason::LimitReached, None)
            } else {
                (LostReason::Expired, None)
            }
        });
        self.lost_error(reason, source)
    }

    /// Starts an automatic extension to the guard's TTL (its validity is
    /// capped at once: see [`begin_extension`](Self::begin_extension)).
    fn start_extension(&mut self) -> Extension {
        let (engine, lock, ttl) = (self.engine.clone(), self.lock.clone(), self.ttl);
        let start = self.begin_extension(ttl);
        Box::pin(async move { (engine.extend(&lock, ttl).await, start) })
    }
}

/// An extension round under way in [`LockGuard::run`], with its start.
type Extension = Pin<Box<dyn Future<Output = (Round, Instant)> + Send>>;

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (engine, lock) = (self.engine.clone(), self.lock.clone());
        let release = async move {
            engine
                .release(&lock, Place::None, To::All, Until::QuorumOrAll)
                .await;
        };
        if !self.engine.background.spawn(release) {
            tracing::warn!(
                resource = %self.shown_resource(),
                "lock guard dropped outside a tokio runtime; its keys expire by their ttl"
            );
        }
    }
}

//! [`Lease`]: a held lock's validity, shared by its guard, by the keeper
//! that extends it ([`Lease::keep`]: inside [`LockGuard::run`], or in the
//! background after [`LockGuard::keep_alive`]) and by the futures that wait
//! for its loss ([`LockGuard::lost`]).
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
//!   `valid_until` drops to `min(valid_until, start + ttl - drift)`
//!   ([`Lease::begin_extension`]). Every node that resets the key does so
//!   after `start`, so it keeps the key until at least `start + ttl`; every
//!   node the request has not reached keeps its old expiry, which was
//!   already covered. So the capped claim holds whatever each node did. Only
//!   a round in which a quorum extended our key, and that ended before both
//!   the capped and the new validity, raises `valid_until` to `start + ttl -
//!   drift` (the quorum then has our key until at least `start + ttl`).
//! - **One extension at a time.** The argument above takes the rounds one by
//!   one: a round to a long TTL that ended after another, later round to a
//!   shorter one had reached some nodes would raise the validity past what
//!   those nodes keep. So every extension round (the keeper's and
//!   [`LockGuard::extend`]'s) holds the lease's `extending` mutex from its
//!   cap to its outcome.
//! - **Nodes that disagree**: a node that refuses (our key is gone there)
//!   or fails does not count; when refusals alone rule out a quorum, the
//!   lease ends at once (`remaining()` is zero), since another client may
//!   then hold the lock.
//!
//! ## When the loss is told
//!
//! [`Lease::lost`] resolves the moment the lease can no longer be trusted:
//! when it ended (refused, or released by its holder), or when the clock
//! reaches `valid_until`. It reads the clock under the lease's lock, and an
//! extension applies its outcome under the same lock, with the time it
//! ended read there: so an extension applied after the loss was told
//! finished after `valid_until` and is refused, and a loss is never told
//! for a lease that an extension had already renewed. The keeper is not
//! needed for the loss to be told: a keeper held up (a busy runtime) delays
//! only the renewal.
//!
//! The lease's lock is a plain mutex and its watchers wait on one `Notify`,
//! woken after each change they must see: a watcher makes its `Notified`
//! before it reads the validity, so a change made after the read wakes it.
//! One `Notify` rather than a `tokio::sync::watch` channel: a channel's
//! notifiers are taken at every change and again when the lease is
//! dropped, a cost on every lock + unlock, where usually nobody watches.
//!
//! [`LockGuard::run`]: crate::LockGuard::run
//! [`LockGuard::keep_alive`]: crate::LockGuard::keep_alive
//! [`LockGuard::lost`]: crate::LockGuard::lost
//! [`LockGuard::extend`]: crate::LockGuard::extend

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::answer::NodeError;
use crate::changes::{Holding, ServerChanges};
use crate::config::Config;
use crate::engine::Engine;
use crate::error::LostReason;
use crate::meter::Meter;
use crate::quorum::Ttl;
use crate::request::LockId;
use crate::round::Round;

/// Why a lease ended, with the last node error behind it.
pub(crate) type Ending = (LostReason, Option<NodeError>);

/// A held lock's validity and the lock on its extensions.
#[derive(Debug)]
pub(crate) struct Lease {
    validity: Mutex<Validity>,
    /// Woken after every change that a watcher ([`Lease::lost`],
    /// [`Lease::keep`]) must see.
    changed: Notify,
    /// Held by each extension round from its cap to its outcome.
    extending: tokio::sync::Mutex<()>,
    acquired_at: Instant,
    meter: Meter,
    /// Set once the loss was counted in the metrics.
    loss_noted: AtomicBool,
    /// The nodes that hold the lock, to tell when their servers changed.
    holding: Holding,
}

/// What a lease knows at one moment.
#[derive(Debug)]
pub(crate) struct Validity {
    /// The TTL of the last successful acquisition or extension.
    pub(crate) ttl: Ttl,
    /// Until when the lock is valid, unless `ended` says otherwise.
    pub(crate) valid_until: Instant,
    /// Successful extensions so far.
    pub(crate) extensions: u32,
    /// Why the lease ended before `valid_until`: refused, or released.
    pub(crate) ended: Option<Ending>,
    /// What to tell if `valid_until` passes: the last failed extension, or
    /// the limit that stopped the keeper (else: expired).
    pub(crate) on_expiry: Option<Ending>,
    /// Whether a keeper runs in the background.
    pub(crate) kept: bool,
}

/// A lease's holders, and the client's server changes to read them by.
#[derive(Clone, Copy)]
struct Watch<'a> {
    holding: &'a Holding,
    changes: &'a ServerChanges,
}

impl Validity {
    /// What ended the lease at `now`, if it has ended: its end, the change
    /// of too many of its holders' servers (see `changes.rs`), or its expiry.
    fn ending_at(&self, now: Instant, watch: Watch<'_>) -> Option<Ending> {
        if let Some(ending) = &self.ended {
            return Some(ending.clone());
        }
        if let Some(reason) = watch.holding.lost(watch.changes) {
            return Some((reason, None));
        }
        (now >= self.valid_until)
            .then(|| (self.on_expiry.clone()).unwrap_or((LostReason::Expired, None)))
    }
}

impl Lease {
    /// The lease of a lock won by a round that started at `start`, held on
    /// the nodes of `holding`.
    pub(crate) fn new(ttl: Ttl, start: Instant, meter: Meter, holding: Holding) -> Self {
        let validity = Mutex::new(Validity {
            ttl,
            valid_until: ttl.valid_until(start),
            extensions: 0,
            ended: None,
            on_expiry: None,
            kept: false,
        });
        Lease {
            validity,
            changed: Notify::new(),
            extending: tokio::sync::Mutex::new(()),
            acquired_at: start,
            meter,
            loss_noted: AtomicBool::new(false),
            holding,
        }
    }

    /// The lock's metrics.
    pub(crate) fn meter(&self) -> &Meter {
        &self.meter
    }

    /// Counts the loss of the lock for `reason` in the metrics, once
    /// however many learn of it (a release is not a loss).
    pub(crate) fn note_loss(&self, reason: &LostReason) {
        if *reason != LostReason::Released && !self.loss_noted.swap(true, Ordering::Relaxed) {
            self.meter.lost(reason);
        }
    }

    /// When the lock was acquired.
    pub(crate) fn acquired_at(&self) -> Instant {
        self.acquired_at
    }

    /// Reads the validity.
    pub(crate) fn read<R>(&self, read: impl FnOnce(&Validity) -> R) -> R {
        read(&crate::tasks::lock(&self.validity))
    }

    /// Changes the validity under the lease's lock; `change` says whether
    /// the watchers must be woken.
    fn change(&self, change: impl FnOnce(&mut Validity) -> bool) {
        // Every change is a few assignments that cannot panic halfway:
        // poisoning is ignored.
        let wake = change(&mut crate::tasks::lock(&self.validity));
        if wake {
            self.changed.notify_waiters();
        }
    }

    /// The holders of the lease, read by the client's `changes`.
    fn watch<'a>(&'a self, changes: &'a ServerChanges) -> Watch<'a> {
        Watch {
            holding: &self.holding,
            changes,
        }
    }

    /// The validity left: zero once it ran out or the lease ended (`changes`:
    /// the client's server changes).
    pub(crate) fn remaining(&self, changes: &ServerChanges) -> Duration {
        self.read(|v| {
            let now = Instant::now();
            match v.ending_at(now, self.watch(changes)) {
                Some(_) => Duration::ZERO,
                None => v.valid_until.saturating_duration_since(now),
            }
        })
    }

    /// Ends the lease for `ending`, unless it has ended already: the keeper
    /// stops, and [`lost`](Self::lost) futures resolve.
    pub(crate) fn end(&self, ending: Ending) {
        self.change(|v| {
            let first = v.ended.is_none();
            if first {
                v.ended = Some(ending);
            }
            first
        });
    }

    /// Marks the lease as kept by a background keeper; `false` if it was already.
    pub(crate) fn mark_kept(&self) -> bool {
        // Nobody waits for this change: no wake-up.
        let mut first = false;
        self.change(|v| {
            first = !v.kept;
            v.kept = true;
            false
        });
        first
    }

    /// Resolves with why the lease ended, the moment it ends (see the module
    /// docs). Owned: it holds the lease.
    pub(crate) fn lost(
        self: &Arc<Self>,
        changes: Arc<ServerChanges>,
    ) -> impl Future<Output = Ending> + Send + 'static {
        let lease = self.clone();
        async move {
            loop {
                // Made before the read: a change after it wakes this.
                let changed = lease.changed.notified();
                let noted = changes.noted.notified();
                let valid_until = match lease.check(&changes) {
                    Ok(ending) => {
                        lease.note_loss(&ending.0);
                        return ending;
                    }
                    Err(valid_until) => valid_until,
                };
                tokio::select! {
                    biased;
                    () = changed => {}
                    () = noted => {}
                    () = tokio::time::sleep_until(valid_until.into()) => {}
                }
            }
        }
    }

    /// The lease's end, read with the clock under the lease's lock, if it
    /// has ended; else until when it is valid.
    fn check(&self, changes: &ServerChanges) -> Result<Ending, Instant> {
        self.read(|v| {
            v.ending_at(Instant::now(), self.watch(changes))
                .ok_or(v.valid_until)
        })
    }

    /// One extension round to `ttl`: caps the validity, asks every node,
    /// applies the outcome; all under the `extending` mutex. `ttl: None`
    /// extends to the lease's own TTL, read under the mutex.
    ///
    /// Cancel safe: dropped, the validity stays capped (see the module docs).
    pub(crate) async fn extend(
        &self,
        engine: &Engine,
        lock: &LockId,
        ttl: Option<Ttl>,
    ) -> Result<(), Ending> {
        let _one_at_a_time = self.extending.lock().await;
        let ttl = ttl.unwrap_or_else(|| self.read(|v| v.ttl));
        let changes = engine.standings.changes();
        let start = self.begin_extension(ttl, changes)?;
        let round = engine.extend(lock, ttl).await;
        self.apply_extension(round, start, ttl, changes)
    }

    /// Notes that an extension to `ttl` is about to be sent, and returns its
    /// start; `Err` if the lease already ended. Every node it reaches resets
    /// our key to `ttl` from about now, so the validity drops to `start + ttl
    /// - drift` if that is sooner, and stays there unless the round succeeds.
    fn begin_extension(&self, ttl: Ttl, changes: &ServerChanges) -> Result<Instant, Ending> {
        let mut outcome = Err((LostReason::Expired, None));
        self.change(|v| {
            let start = Instant::now();
            if let Some(ending) = v.ending_at(start, self.watch(changes)) {
                outcome = Err(ending);
                return false;
            }
            outcome = Ok(start);
            let capped = v.valid_until.min(ttl.valid_until(start));
            let changed = capped != v.valid_until;
            v.valid_until = capped;
            changed
        });
        outcome
    }

    /// Takes in an extension round that started at `start` (after
    /// [`begin_extension`](Self::begin_extension)). It is applied only if a
    /// quorum extended our key and the round ended before the validity the
    /// lease had (already capped at the new one), and before the new one.
    fn apply_extension(
        &self,
        mut round: Round,
        start: Instant,
        ttl: Ttl,
        changes: &ServerChanges,
    ) -> Result<(), Ending> {
        let (votes, last_error) = round.tally();
        round.log("extend round");
        let mut outcome = Ok(());
        self.change(|v| {
            // Read here, under the lease's lock: see "When the loss is told".
            let finished = Instant::now();
            if let Some(ending) = v.ending_at(finished, self.watch(changes)) {
                outcome = Err(ending);
            } else if votes.has_quorum() {
                let new_valid_until = ttl.valid_until(start);
                if finished < new_valid_until {
                    v.valid_until = new_valid_until;
                    v.ttl = ttl;
                    v.extensions = v.extensions.saturating_add(1);
                    v.on_expiry = None;
                } else {
                    outcome = Err((LostReason::Expired, last_error));
                }
            } else if votes.refusals_rule_out_quorum() {
                self.note_loss(&LostReason::ExtensionRefused { votes });
                // Another client may hold the lock now: this lease ends.
                let ending = (LostReason::ExtensionRefused { votes }, last_error);
                v.valid_until = v.valid_until.min(finished);
                v.ended = Some(ending.clone());
                outcome = Err(ending);
            } else {
                let failure = (LostReason::Unreachable { votes }, last_error);
                v.on_expiry = Some(failure.clone());
                outcome = Err(failure);
            }
            // Counted before the change wakes anyone who watches the lease.
            self.meter.extension(match &outcome {
                Ok(()) => "extended",
                Err((LostReason::ExtensionRefused { .. }, _)) => "refused",
                Err((LostReason::Unreachable { .. }, _)) => "unreachable",
                Err(_) => "late",
            });
            true
        });
        outcome
    }

    /// Keeps the lease extended until it ends: when the validity left falls
    /// to the configured lead ([`Config::renew_lead`]: a third of the TTL
    /// by default), as long as `config`'s maximum hold
    /// time and extension count allow, retrying a failed extension after a
    /// pause. Returns once the lease ended (released, refused, or run out);
    /// its end is in the lease for [`lost`](Self::lost) to tell. With
    /// [`Keeping::Watches`] it only waits for the end.
    ///
    /// Cancel safe: dropped, it leaves the lease as it was (capped, if an
    /// extension was under way).
    pub(crate) async fn keep(&self, engine: &Engine, lock: &LockId, keeping: Keeping) {
        let extend = keeping == Keeping::Extends;
        let mut retry_at: Option<Instant> = None;
        loop {
            // Made before the read: a change after it wakes this.
            let changed = self.changed.notified();
            let changes = engine.standings.changes();
            let noted = changes.noted.notified();
            let read = self.read(|v| {
                if let Some((reason, _)) = v.ending_at(Instant::now(), self.watch(changes)) {
                    return Err(reason);
                }
                let renew_at = retry_at.unwrap_or_else(|| {
                    let lead = engine.config.renew_lead(v.ttl.duration);
                    (v.valid_until.checked_sub(lead)).unwrap_or(v.valid_until)
                });
                let allowed = self.may_extend_at(&engine.config, v, renew_at);
                Ok((v.valid_until, renew_at, extend && allowed))
            });
            let (valid_until, renew_at, can_extend) = match read {
                Ok(read) => read,
                Err(reason) => {
                    self.note_loss(&reason);
                    return;
                }
            };
            if extend && !can_extend {
                self.change(|v| {
                    v.on_expiry.get_or_insert((LostReason::LimitReached, None));
                    false
                });
            }
            tokio::select! {
                biased;
                _ = tokio::time::sleep_until(valid_until.into()) => {}
                () = changed => {}
                () = noted => {}
                _ = tokio::time::sleep_until(renew_at.into()), if can_extend => {
                    let round = self.extend(engine, lock, None);
                    let outcome = tokio::select! {
                        biased;
                        // The validity ran out with the round under way.
                        _ = tokio::time::sleep_until(valid_until.into()) => continue,
                        outcome = round => outcome,
                    };
                    let pause = self.read(|v| v.ttl.duration / 20).max(engine.config.node_timeout);
                    retry_at = outcome.is_err().then(|| Instant::now() + pause);
                }
            }
        }
    }

    /// Whether the keeper may extend at `at` without breaking `config`'s limits.
    fn may_extend_at(&self, config: &Config, v: &Validity, at: Instant) -> bool {
        let under_count = config.max_extensions.is_none_or(|max| v.extensions < max);
        let held_by_then = at.saturating_duration_since(self.acquired_at) + v.ttl.duration;
        under_count && held_by_then <= config.max_hold
    }
}

/// What a keeper ([`Lease::keep`]) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keeping {
    /// Extends the lease as the options allow.
    Extends,
    /// Only waits for the lease's end (auto-extension off, or another
    /// keeper already extends it).
    Watches,
}

/// A background keeper: keeps `lease` extended until it ends.
pub(crate) async fn keep_in_background(lease: Arc<Lease>, engine: Arc<Engine>, lock: LockId) {
    lease.keep(&engine, &lock, Keeping::Extends).await;
}

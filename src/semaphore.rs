//! A counting semaphore over the quorum: [`Semaphore`], from
//! [`Redlock::semaphore`]; at most `permits` holders of a [`Permit`] at
//! once, across every process.
//!
//! Counting holders on each node is unsound: with two permits and three
//! nodes, holders granted on {A, B}, {B, C} and {A, C} leave every node at
//! two while three hold a permit. Here each permit is a **slot**, a plain
//! lock of its own (the key of the semaphore's name followed by
//! `:quorlock-permit-<i>`, for `i` below `permits`), and a permit is a held
//! slot. Waiters queue at the semaphore's **gate** (a plain lock,
//! `:quorlock-gate`): the caller at the head of the queue holds the gate
//! and takes the first slot that is free (trying them from a random one,
//! a few at a time, one round each), then lets the gate go to the next
//! waiter; while none is free it keeps the gate and waits in the queues of
//! the slots (of up to 16; with more, it also tries them all after each
//! retry delay), so that a release hands it the slot at once. Only the
//! caller at the gate waits on slots: the nodes see one waiter per slot,
//! however many callers queue at the gate.
//!
//! # Safety
//!
//! *Never more than `permits` valid holders.* A valid permit is a valid
//! lock on one slot, and the mutex's argument (`acquire/`, `lease.rs`)
//! gives each slot at most one valid holder: each needed a quorum of nodes
//! that set the slot's key while it was absent, and two quorums share a
//! node. There are `permits` slots, so there are at most `permits` valid
//! permits. It assumes what the mutex assumes (independent nodes, clock
//! drift within the drift factor, keys kept for their TTL on the nodes that
//! count; restarted, failed-over and clock-stepped nodes held back as
//! `standing/` and `clock.rs` say), slot by slot. Nodes that disagree
//! about a slot (one holds it for one caller, another for another) only
//! withhold that slot: no one wins it without a quorum. Every client of
//! one semaphore must give the same `permits`: a client told more slots
//! uses slots the others do not count (the count is the callers' contract,
//! as the TTL is).
//!
//! *A dead holder's permit comes back* when its slot's key expires, within
//! its TTL; a dead gate holder's gate, within the TTL it asked for.
//!
//! *Fairness* comes from the gate's queue (see `queue/`): callers take
//! slots in the order they reached the gate, across processes. The gate
//! only orders callers: it grants nothing, and a caller that goes around
//! it ([`Semaphore::try_acquire`]) is still bound by the slots.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use rand::RngExt;

use crate::acquire::{Fencing, How, Waits, acquire_key};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::quorum::Unlocked;
use crate::request::{GATE_SUFFIX, PERMIT_INFIX, suffixed};

/// The most permits a semaphore may have.
pub(crate) const MAX_PERMITS: u32 = 1024;

/// How many slots a caller tries at once.
const TRIED_AT_ONCE: usize = 4;

/// In the queues of how many slots the caller at the gate waits at once.
const QUEUED_SLOTS: usize = 16;

/// A counting semaphore: at most [`permits`](Self::permits) holders of a
/// [`Permit`] at once, over the quorum. From [`Redlock::semaphore`](crate::Redlock::semaphore);
/// cheap to clone. See `src/semaphore.rs` for the safety argument.
#[derive(Debug, Clone)]
pub struct Semaphore {
    engine: Arc<Engine>,
    name: Arc<[u8]>,
    gate: Arc<[u8]>,
    slots: Arc<[Arc<[u8]>]>,
}

/// A held permit of a [`Semaphore`]: the lock on one of its slots.
///
/// It dereferences to its [`LockGuard`]: [`lost`](LockGuard::lost),
/// [`keep_alive`](LockGuard::keep_alive), [`run`](LockGuard::run),
/// [`is_valid`](LockGuard::is_valid) and the rest work as for any lock.
/// Dropped without [`release`](Self::release), it is released in the
/// background, as a guard is.
#[derive(Debug)]
#[must_use = "dropping the permit gives it back right away"]
pub struct Permit {
    guard: LockGuard,
    slot: u32,
}

impl Permit {
    fn of(guard: LockGuard, slot: usize) -> Self {
        let slot = u32::try_from(slot).unwrap_or(u32::MAX);
        Permit { guard, slot }
    }

    /// Which of the semaphore's slots this permit holds (below
    /// [`Semaphore::permits`]).
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// Gives the permit back, as [`LockGuard::unlock`] does.
    ///
    /// Cancel safety: as [`LockGuard::unlock`].
    pub async fn release(self) -> Result<Unlocked> {
        self.guard.unlock().await
    }

    /// Gives the permit up without releasing it: it comes back when its
    /// TTL ends (see [`LockGuard::forget`]).
    pub fn forget(self) {
        self.guard.forget();
    }
}

impl std::ops::Deref for Permit {
    type Target = LockGuard;

    fn deref(&self) -> &LockGuard {
        &self.guard
    }
}

impl std::ops::DerefMut for Permit {
    fn deref_mut(&mut self) -> &mut LockGuard {
        &mut self.guard
    }
}

impl Semaphore {
    /// The semaphore `name` with `permits` slots, on `engine`'s nodes.
    pub(crate) fn new(engine: Arc<Engine>, name: &[u8], permits: u32) -> Result<Self> {
        if permits == 0 || permits > MAX_PERMITS {
            return Err(Error::InvalidResource {
                reason: format!("a semaphore has 1 to {MAX_PERMITS} permits, not {permits}"),
            });
        }
        let key = engine.key(name)?;
        let slots = (0..permits)
            .map(|slot| suffixed(&key, &format!("{PERMIT_INFIX}{slot}")))
            .collect();
        Ok(Semaphore {
            gate: suffixed(&key, GATE_SUFFIX),
            name: name.into(),
            slots,
            engine,
        })
    }

    /// How many holders it admits at once.
    pub fn permits(&self) -> u32 {
        u32::try_from(self.slots.len()).unwrap_or(u32::MAX)
    }

    /// Takes a permit for `ttl`: waits in the queue at the semaphore's gate
    /// (fairly, across processes), then for a free slot, within the
    /// client's patience, as [`lock`](crate::Redlock::lock) waits.
    ///
    /// # Errors
    ///
    /// As [`lock`](crate::Redlock::lock): [`Error::Contended`] when no slot
    /// came free within the patience, [`Error::Unavailable`] when too few
    /// nodes answered, [`Error::InvalidTtl`].
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](crate::Redlock::lock): dropped, no permit exists, the
    /// place at the gate is given up, and whatever a round in flight set is
    /// released in the background.
    pub async fn acquire(&self, ttl: Duration) -> Result<Permit> {
        let config = &self.engine.config;
        if config.retries() == 0 {
            return self.try_acquire(ttl).await;
        }
        let patience = config.patience();
        let deadline = Instant::now() + patience;
        let how = How::waiting(patience, Fencing::AsConfigured);
        let gate = acquire_key(&self.engine, self.gate.clone(), &self.name, ttl, how).await?;
        // Held while slots are busy, maybe past its TTL; dropped when this
        // returns, the gate goes to the next waiter in the background.
        gate.keep_alive()?;
        match self.try_acquire(ttl).await {
            Err(err) if is_busy(&err) => {}
            taken => return taken,
        }
        self.wait_for_slot(ttl, deadline).await
    }

    /// With every slot busy: waits in the queues of up to [`QUEUED_SLOTS`]
    /// slots at once (a release hands a slot to its first waiter at once),
    /// and, where there are more slots, tries them all after each retry
    /// delay; the first slot won is the permit, and the other calls leave
    /// their queues as they are dropped.
    async fn wait_for_slot(&self, ttl: Duration, deadline: Instant) -> Result<Permit> {
        let patience = deadline.saturating_duration_since(Instant::now());
        let count = self.slots.len();
        let first = rand::rng().random_range(0..count);
        let mut waits: Vec<BoxFuture<'_, Result<Permit>>> = (0..count.min(QUEUED_SLOTS))
            .map(|n| {
                let slot = (first + n) % count;
                let key = self.slots[slot].clone();
                let how = How::waiting(patience, Fencing::AsConfigured);
                let waited = acquire_key(&self.engine, key, &self.name, ttl, how);
                waited
                    .map(move |guard| guard.map(|guard| Permit::of(guard, slot)))
                    .boxed()
            })
            .collect();
        if count > QUEUED_SLOTS {
            waits.push(self.poll_slots(ttl, deadline).boxed());
        }
        loop {
            let (taken, _, others) = futures::future::select_all(waits).await;
            match taken {
                Err(err) if is_busy(&err) && !others.is_empty() => waits = others,
                taken => return taken,
            }
        }
    }

    /// Tries every slot after each retry delay until one is won or the
    /// deadline passes.
    async fn poll_slots(&self, ttl: Duration, deadline: Instant) -> Result<Permit> {
        let config = &self.engine.config;
        loop {
            config.sleep_retry_pause(Duration::MAX, deadline).await;
            match self.try_acquire(ttl).await {
                Err(err) if is_busy(&err) && Instant::now() < deadline => {}
                taken => return taken,
            }
        }
    }

    /// Takes a permit for `ttl` if a slot is free now: one round on each
    /// slot tried (a few at once, from a random one), without waiting at
    /// the gate, so it may pass callers that wait there.
    ///
    /// # Errors
    ///
    /// [`Error::Contended`] when every slot is held; otherwise as
    /// [`try_lock`](crate::Redlock::try_lock).
    ///
    /// # Cancel safety
    ///
    /// As [`try_lock`](crate::Redlock::try_lock).
    pub async fn try_acquire(&self, ttl: Duration) -> Result<Permit> {
        let count = self.slots.len();
        let first = rand::rng().random_range(0..count);
        let order: Vec<usize> = (0..count).map(|n| (first + n) % count).collect();
        let mut last = None;
        for chunk in order.chunks(TRIED_AT_ONCE) {
            let tries = chunk.iter().map(|&slot| {
                let how = How::plain(&self.engine, Waits::No);
                let key = self.slots[slot].clone();
                async move {
                    (
                        slot,
                        acquire_key(&self.engine, key, &self.name, ttl, how).await,
                    )
                }
            });
            // The first slot won is kept; others won with it are released
            // in the background as their guards drop.
            let mut won = None;
            for (slot, tried) in futures::future::join_all(tries).await {
                match tried {
                    Ok(guard) if won.is_none() => won = Some((slot, guard)),
                    Ok(_) => {}
                    Err(err) if !is_busy(&err) => return Err(err),
                    Err(err) => last = Some(err),
                }
            }
            if let Some((slot, guard)) = won {
                return Ok(Permit::of(guard, slot));
            }
        }
        Err(last.unwrap_or(Error::InvalidResource {
            reason: "a semaphore without slots".into(),
        }))
    }
}

/// Whether `err` says a slot is busy (held) or could not be taken for lack
/// of answers, as opposed to a mistake in the call.
fn is_busy(err: &Error) -> bool {
    matches!(
        err,
        Error::Contended { .. } | Error::Unavailable { .. } | Error::NoValidity { .. }
    )
}

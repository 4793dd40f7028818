//! Acquiring: the loop behind `lock` and `try_lock`, as named steps. Each
//! attempt **takes its turn** (a plain `SET NX`, or its place in the queue on
//! the nodes, or a claim of a lock handed on to it), makes one **round**,
//! **fences** a won round (with fencing on), or **cleans up** a lost one
//! (releases what it set, keeps or gives up its place in the queue) and
//! **pauses** until its next turn or until its patience ends.
//!
//! A round in flight is an [`InFlight`]: a private guard that releases what
//! the round set if the call is dropped mid-round. It becomes a
//! [`LockGuard`] only when the round wins. A `lock` call's place in the
//! queue is a [`Waiting`], which leaves the queue however the call ends.
//!
//! What may grant a lock here is only the quorum of a round (and of its
//! fencing write-back): the queue, the notifications and the memory of busy
//! keys only choose which correct round to make and when (see `queue/`).
//!
//!
//! The read-write lock's keys and safety argument are in `rw.rs`, a
//! waiting writer's turn in `writers.rs`; locks on
//! several resources take their turn as `sets.rs` describes, and a `lock`
//! call's place in the queue is `queue/waiter.rs`.
//!
//! # The files
//!
//! The entry points here ([`acquire`], [`acquire_key`], [`acquire_rw`]);
//! `how.rs`, how a call waits and whether it is fenced; `start.rs`, the
//! checks and metrics around a call; `acquisition.rs`, the loop as named
//! steps; `in_flight.rs`, a round in flight; `rw.rs`, the read-write lock;
//! `writers.rs`, a waiting writer's turn.

mod acquisition;
mod how;
mod in_flight;
mod rw;
mod start;
mod writers;

use std::sync::Arc;
use std::time::Duration;

use crate::engine::Engine;
use crate::error::Result;
use crate::guard::LockGuard;
use crate::request::{RwKeys, Shape};
pub(crate) use acquisition::retry_delay;
pub(crate) use how::{Fencing, How, Metered, RwSide, Waits, Wanted};
pub(crate) use start::{acquire_metered, acquire_with_meter, kind};

/// Takes the lock on `resource`: one round for `try_lock`
/// ([`Waits::No`]), or, for `lock`, waiting in the queue on the nodes until
/// the call's patience ends (see `Redlock::lock`).
pub(crate) async fn acquire(
    engine: &Arc<Engine>,
    resource: &[u8],
    ttl: Duration,
    waits: Waits,
) -> Result<LockGuard> {
    let key = engine.key(resource)?;
    let resources = std::slice::from_ref(&resource);
    let how = How::plain(engine, waits);
    acquire_metered(engine, resources, Wanted::new(key, Shape::One), ttl, how).await
}

/// The plain lock on `key`, a key of the crate's own beside a resource's
/// (a leader's lock, a semaphore's gate or permit), named `resource` in
/// errors and logs: as [`acquire`], waiting and fenced as `how` says.
pub(crate) async fn acquire_key(
    engine: &Arc<Engine>,
    key: Arc<[u8]>,
    resource: &[u8],
    ttl: Duration,
    how: How,
) -> Result<LockGuard> {
    let resources = std::slice::from_ref(&resource);
    acquire_metered(engine, resources, Wanted::new(key, Shape::One), ttl, how).await
}

/// Takes a read hold or the write hold (`side`) of the read-write lock on
/// `resource`: one round ([`Waits::No`]), or rounds after the
/// jittered retry delay until the call's patience ends; a waiting writer
/// takes its turn at the writers' gate (`writers.rs`) and leaves its intent
/// on the nodes that refused it, so that no new reader is granted there
/// meanwhile (see `Redlock::write`).
pub(crate) async fn acquire_rw(
    engine: &Arc<Engine>,
    resource: &[u8],
    ttl: Duration,
    waits: Waits,
    side: RwSide,
) -> Result<LockGuard> {
    let key = engine.key(resource)?;
    let resources = std::slice::from_ref(&resource);
    let keys = RwKeys::of(&key);
    let shape = match side {
        RwSide::Write if waits == Waits::WithPatience => {
            return writers::write_in_turn(engine, resource, key, ttl).await;
        }
        RwSide::Write => Shape::Write {
            keys,
            intent: None,
            intent_ms: engine.config.intent_ms(),
        },
        RwSide::Read => Shape::Read(keys),
    };
    acquire_metered(
        engine,
        resources,
        Wanted::new(key, shape),
        ttl,
        How::plain(engine, waits),
    )
    .await
}

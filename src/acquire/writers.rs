//! A waiting writer of a read-write lock takes its turn at the writers'
//! gate: one round first (the first round a waiting writer always made:
//! unfenced, a plain `SET NX` that leaves no intent; fenced, the write
//! script, whose intent the call's end removes); refused, it queues at the
//! gate (a plain lock on the lock's key followed by `:quorlock-writers`,
//! fairly across processes), and only the writer holding the gate makes
//! the rounds that leave an intent.
//!
//! Why: a refused writer's round leaves its intent on each node that
//! refused it unless another writer's is there, and a node with another
//! writer's intent refuses it. Many writers at once left their intents
//! scattered, two on some nodes, two on others, one on the fifth: each was
//! then refused wherever another's intent stood, so no writer could win
//! a quorum, and each round renewed them (80 writers in 4 processes: 8
//! writes in 60 s, every other call failed at its patience). With one
//! writer at a time leaving an intent, its intent spreads to every node
//! that refused it, readers stop coming in there, and it wins once the
//! readers already in have left.
//!
//! # Safety
//!
//! The gate grants nothing: the write hold is still won only by a round's
//! quorum of grants with validity left (`rw.rs`), and a writer that skips
//! the gate (its first round, a [`try_write`](crate::Redlock::try_write),
//! an older client without the gate) is bound by the same rounds. The gate
//! only decides which writer leaves an intent, so it can only make writers
//! wait, never let two holders in. A gate holder that dies leaves the gate
//! for its TTL (the write's), as a dead plain holder does; a holder that
//! waits longer keeps it alive.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::how::{Fencing, How, Metered, Waits, Wanted};
use super::start::{acquire_with_meter, kind};
use crate::engine::Engine;
use crate::error::{Result, show_resources};
use crate::guard::LockGuard;
use crate::meter::Meter;
use crate::request::{RwKeys, Shape, WRITERS_SUFFIX, new_token, suffixed};

/// Takes the write hold of the read-write lock whose key is `key` (on
/// `resource`), waiting within the client's patience: one round; refused
/// or short of a quorum, a turn at the writers' gate, then rounds that
/// leave an intent until the patience ends (see the module docs). One
/// call for the metrics.
pub(crate) async fn write_in_turn(
    engine: &Arc<Engine>,
    resource: &[u8],
    key: Arc<[u8]>,
    ttl: Duration,
) -> Result<LockGuard> {
    let called = Instant::now();
    let resources = std::slice::from_ref(&resource);
    let keys = RwKeys::of(&key);
    let shape = |intent| Shape::Write {
        keys: keys.clone(),
        intent,
        intent_ms: engine.config.intent_ms(),
    };
    let label = engine.config.metrics_resource_label;
    let meter = Meter::new(
        kind(&shape(None)),
        label.then(|| show_resources(resources).into()),
    );
    let metered = || Metered::new(called, meter.clone());
    // With an intent id, as every waiting writer's first round: unfenced,
    // it runs no script (`Request::FirstWrite`), and leaves no intent.
    let once = Wanted::new(key.clone(), shape(Some(new_token())));
    let first = How::plain(engine, Waits::No);
    let taken = match acquire_with_meter(engine, resources, once, ttl, first, metered()).await {
        Err(err) if err.is_contended() || err.is_unavailable() => {
            in_turn(
                engine,
                resources,
                &key,
                shape(Some(new_token())),
                ttl,
                called,
                &meter,
            )
            .await
        }
        taken => taken,
    };
    match &taken {
        Ok(_) => meter.acquired(called),
        Err(err) => meter.failed(err),
    }
    taken
}

/// The writer's turn at the gate, then its rounds with an intent (`shape`)
/// for what is left of the patience since `called`.
async fn in_turn(
    engine: &Arc<Engine>,
    resources: &[&[u8]],
    key: &Arc<[u8]>,
    shape: Shape,
    ttl: Duration,
    called: Instant,
    meter: &Meter,
) -> Result<LockGuard> {
    let deadline = called + engine.config.patience();
    let left = || deadline.saturating_duration_since(Instant::now());
    let metered = || Metered::new(Instant::now(), meter.clone());
    let gate = Wanted::new(suffixed(key, WRITERS_SUFFIX), Shape::One);
    let how = How::waiting(left(), Fencing::Never);
    let gate = acquire_with_meter(engine, resources, gate, ttl, how, metered()).await?;
    // Held while the writer waits for the readers in, maybe past its TTL;
    // dropped when this returns, it goes to the next writer in the
    // background.
    gate.keep_alive()?;
    let wanted = Wanted::new(key.clone(), shape);
    let how = How::waiting(left(), Fencing::AsConfigured);
    acquire_with_meter(engine, resources, wanted, ttl, how, metered()).await
}

//! The start of every acquire call: its deadline, the first contact with
//! the nodes, its span and metrics, and the [`Acquisition`] it runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::acquisition::Acquisition;
use super::how::{How, Metered, Wanted};
use super::rw::Intent;
use crate::answer::Answer;
use crate::engine::Engine;
use crate::error::{Error, Result, show_resources};
use crate::guard::LockGuard;
use crate::meter::Meter;
use crate::queue::waiter::Waiting;
use crate::quorum::Votes;
use crate::request::{LockId, Shape};
use crate::standing::NotReady;
use crate::tasks;

/// The start shared by [`acquire`](super::acquire),
/// [`acquire_rw`](super::acquire_rw) and a lock on several resources
/// (`sets.rs`), measured: the lock `wanted`; `how` how it waits and
/// whether it is fenced.
pub(crate) async fn acquire_metered(
    engine: &Arc<Engine>,
    resources: &[&[u8]],
    wanted: Wanted,
    ttl: Duration,
    how: How,
) -> Result<LockGuard> {
    let called = Instant::now();
    let resource_label = engine.config.metrics_resource_label;
    let meter = Meter::new(
        kind(&wanted.shape),
        resource_label.then(|| show_resources(resources).into()),
    );
    let metered = Metered::new(called, meter.clone());
    let taken = acquire_with_meter(engine, resources, wanted, ttl, how, metered).await;
    match &taken {
        Ok(_) => meter.acquired(called),
        Err(err) => meter.failed(err),
    }
    taken
}

/// The `kind` label of a lock's metrics.
pub(crate) fn kind(shape: &Shape) -> &'static str {
    match shape {
        Shape::One => "lock",
        Shape::All(_) => "lock_all",
        Shape::Read(_) => "read",
        Shape::Write { .. } => "write",
    }
}

/// [`acquire_metered`] without the call's own metrics: for a call made and
/// measured as `metered` says (the guard carries its meter).
pub(crate) async fn acquire_with_meter(
    engine: &Arc<Engine>,
    resources: &[&[u8]],
    wanted: Wanted,
    ttl: Duration,
    how: How,
    metered: Metered,
) -> Result<LockGuard> {
    let Wanted { key, shape } = wanted;
    let Metered { called, meter } = metered;
    let config = &engine.config;
    let waits = how.patience.is_some();
    let deadline = match how.patience {
        Some(patience) => {
            Some((called.checked_add(patience)).unwrap_or_else(|| called + config.patience()))
        }
        None => config
            .acquire_timeout
            .and_then(|timeout| called.checked_add(timeout)),
    };
    // Refused at once, before any contact.
    let checked = engine.ttl(ttl)?;
    let first = !engine.standings.first_checks_ended();
    Error::ensure_runtime()?;
    first_contact(engine, resources, deadline).await?;
    // A client's first call takes it again once the first checks read the
    // clock tolerances in use on the nodes, the largest of which shortens
    // every validity (see `standing/`).
    let ttl = if first { engine.ttl(ttl)? } else { checked };
    let span = tracing::debug_span!("quorlock.lock", resource = %show_resources(resources), ttl_ms = ttl.millis);
    // Only a plain lock queues (unless queueing is off); the others retry.
    let queues = waits && config.queueing && matches!(shape, Shape::One);
    let intent = match &shape {
        Shape::Write {
            keys,
            intent: Some(id),
            ..
        } => Some(Intent {
            engine: engine.clone(),
            entry: LockId::plain(keys.intent.clone(), id.clone()),
            left: false,
        }),
        _ => None,
    };
    let acquisition = Acquisition {
        engine,
        waiting: queues.then(|| Waiting::new(engine, &key)),
        retries: waits && !queues,
        intent,
        key,
        shape,
        resources,
        ttl,
        deadline,
        attempt: 0,
        claiming: false,
        meter,
        fencing: how.fencing,
        gathers: how.gathers,
    };
    tasks::in_span!(span, acquisition.run())
}

/// A client's first call waits for its first checks of the nodes; no round
/// starts after the deadline.
async fn first_contact(
    engine: &Engine,
    resources: &[&[u8]],
    deadline: Option<Instant>,
) -> Result<()> {
    match engine.first_contact(deadline).await {
        Ok(()) => Ok(()),
        Err(NotReady::Misconfigured(reason)) => Err(Error::Misconfigured { reason }),
        Err(NotReady::DeadlinePassed(unchecked)) => {
            let mut votes = Votes::new(engine.nodes.len());
            for err in &unchecked {
                votes.record(&Answer::Failed(err.clone()));
            }
            Err(Error::Unavailable {
                resource: show_resources(resources),
                votes,
                attempts: 0,
                source: unchecked.last().cloned(),
                not_counted: unchecked.into_boxed_slice(),
                failed: Box::default(),
            })
        }
    }
}

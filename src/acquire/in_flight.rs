//! A round in flight ([`InFlight`]): a private guard that releases what
//! the round set if the call is dropped mid-round, and becomes a
//! [`LockGuard`](crate::LockGuard) only when the round wins.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::answer::Answer;
use crate::engine::{Engine, To};
use crate::error::show_resource;
use crate::queue::entries::Place;
use crate::request::{LockId, Reached};
use crate::round::{Round, Until};
use crate::tasks::Left;

/// One acquire round in flight and the lock it asked for. Until it is won
/// or released, dropping it (the `lock` call was cancelled mid-round) leaves
/// a background task that waits for every node's answer to the round, so
/// that no `SET` (or queue entry) of it can land afterwards, and then
/// releases the key on every node, and takes the waiter out of the queue.
pub(super) struct InFlight {
    pub(super) engine: Arc<Engine>,
    pub(super) lock: LockId,
    pub(super) round: Round,
    /// When the round started: its validity counts from here.
    pub(super) start: Instant,
    /// The client's server changes before the round started.
    pub(super) changes_before: u64,
    /// How long the round took to be decided.
    pub(super) decided_after: Duration,
    /// Won (a guard took over the keys) or released.
    pub(super) settled: bool,
    /// The waiter whose round this is, for a `lock` call.
    pub(super) waiter: Option<Arc<str>>,
}

impl InFlight {
    /// Releases a round that did not win. Every node answers the round (or
    /// times out) first, so that no `SET` of it can land after the release
    /// reached its node. The release goes to every node that did not refuse
    /// (one that timed out may still have set the key; one that refused
    /// cannot have, nor one skipped, to which the round was never sent: a
    /// release there would only queue behind the calls that made it slow,
    /// and keep its probe from getting an answer), with `place` for the
    /// waiter's entry, and this returns
    /// once the nodes that granted have answered it (each bounded by the
    /// per-node timeout); the others answer in the background.
    pub(super) async fn release_lost_round(&mut self, place: Place) {
        self.round.collect(Until::All).await;
        let send_to = self
            .round
            .nodes(|answer| !answer.is_some_and(Answer::did_nothing));
        if !send_to.is_empty() {
            let granted = self
                .round
                .nodes(|answer| answer.is_some_and(Answer::is_granted));
            let to = To::Only(&send_to);
            // Every node answered or failed: the release waits only where
            // one failed (its vote may still be gathering).
            let reached = self.round.reached();
            self.engine
                .release(&self.lock, place, reached, to, Until::Answered(granted))
                .await;
        }
        self.settled = true;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let stragglers = self.round.take_pending();
        let (engine, lock) = (self.engine.clone(), self.lock.clone());
        let place = self.waiter.take().map_or(Place::NoEntry, Place::Leave);
        let cleanup = async move {
            stragglers.await;
            engine
                .release(&lock, place, Reached::NONE, To::All, Until::All)
                .await;
        };
        let left = Left::Keys {
            call: "lock call",
            resource: &|| show_resource(&self.lock.key),
        };
        self.engine.background.spawn_or_leave(cleanup, left);
    }
}

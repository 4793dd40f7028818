//! A node's way to counting: recorded on every node first, and after a
//! restart or failover, once the grace has passed since it came back.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::judge::Recovery;
use super::record::{Counted, Errand, record_incarnation};
use super::table::{Standings, State};
use crate::answer::NodeErrorKind;
use crate::connection::Connection;
use crate::tasks;

/// How long a recovering node's recording waits before it tries again
/// after a failure.
pub(super) const RECORD_RETRY: Duration = Duration::from_secs(1);

/// A recovering node's end of recovery, as a task of its connection: once
/// the grace has passed since it came back, records it and lets its
/// votes count, unless a newer check replaced this one. A connection that
/// fails ends the task; the next connection's check judges the node again.
pub(super) async fn end_recovery(
    weak: Weak<Standings>,
    index: usize,
    generation: u64,
    mut connection: Connection,
    recovery: Recovery,
) {
    loop {
        // The grace grows with the longest TTL used: read it each time.
        let Some(ends) = weak.upgrade().map(|standings| standings.ends(&recovery)) else {
            return;
        };
        if Instant::now() < ends {
            tokio::time::sleep_until(ends.into()).await;
            continue;
        }
        let Some(standings) = weak.upgrade() else {
            return;
        };
        if standings.detail(index).generation != generation {
            return;
        }
        let name = standings.names[index].clone();
        let written = tokio::time::timeout(
            standings.connect_timeout,
            record_incarnation(
                &mut connection,
                &standings.record_keys,
                &recovery.incarnation,
                recovery.mark.as_deref(),
                &name,
            ),
        )
        .await;
        match written {
            Ok(Ok(())) => {
                let generation = standings.settle(index, None, Some(generation), State::Recording);
                drop(standings);
                let counted = Counted {
                    incarnation: recovery.incarnation,
                    mark: recovery.mark,
                };
                record_everywhere(weak, index, generation, counted).await;
                return;
            }
            Ok(Err(NodeErrorKind::Redis(err))) if crate::connection::is_broken(&err) => return,
            _ => {}
        }
        drop(standings);
        tokio::time::sleep(RECORD_RETRY).await;
    }
}

/// Records node `index`'s incarnation and mark on every other node (each
/// bounded by the connect timeout; a node that cannot be reached learns it
/// from the next check of a client that knows it), then lets its votes
/// count, unless a newer check replaced check `generation`.
pub(super) async fn record_everywhere(
    standings: Weak<Standings>,
    index: usize,
    generation: u64,
    counted: Counted,
) {
    record_on(standings, index, generation, counted, Whom::Others).await;
}

/// Which nodes [`record_on`] records on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Whom {
    /// Every node but the one recorded (its own record holds it already).
    Others,
    /// Every node.
    All,
}

/// Records node `index`'s incarnation and mark on the nodes `whom` names
/// (see [`record_everywhere`]), then lets its votes count.
pub(super) async fn record_on(
    standings: Weak<Standings>,
    index: usize,
    generation: u64,
    counted: Counted,
    whom: Whom,
) {
    let Some((recorder, nodes)) = standings
        .upgrade()
        .map(|standings| (standings.recorder.get().cloned(), standings.slots.len()))
    else {
        return;
    };
    let incarnation: Arc<str> = counted.incarnation.into();
    let mark: Option<Arc<str>> = counted.mark.map(Into::into);
    let outcomes = match recorder {
        Some(recorder) => {
            let records = (0..nodes)
                .filter(|&other| whom == Whom::All || other != index)
                .map(|other| {
                    let errand = Errand::Record {
                        incarnation: incarnation.clone(),
                        mark: mark.clone(),
                    };
                    (recorder.0)(other, errand)
                });
            futures::future::join_all(records).await
        }
        None => Vec::new(),
    };
    if let Some(standings) = standings.upgrade() {
        for err in outcomes.into_iter().filter_map(Result::err) {
            tracing::debug!(error = %err, "recording an incarnation failed on a node");
        }
        standings.settle(index, None, Some(generation), State::Counts);
    }
}

impl Standings {
    /// Waits while node `index`'s `run_id` is being recorded on the other
    /// nodes, for at most the connect timeout.
    pub(super) async fn wait_recorded(&self, index: usize) {
        let deadline = Instant::now() + self.connect_timeout;
        tasks::wait_until(&self.ended, Some(deadline), || {
            self.slots[index].state() != State::Recording
        })
        .await;
    }

    /// Node `index` (`incarnation` and `mark`, in its own record) counts
    /// once it is in every other node's record too: a task records it there.
    pub(super) fn counts(&self, index: usize, incarnation: String, mark: Option<String>) {
        let generation = self.settle(index, None, None, State::Recording);
        let counted = Counted { incarnation, mark };
        // Recorded already, or nothing to record (INFO and the mark refused).
        let recorded = (counted.incarnation.is_empty() && counted.mark.is_none())
            || self.detail(index).recorded.as_ref() == Some(&counted);
        if recorded
            || !tasks::spawn(record_everywhere(
                self.me.clone(),
                index,
                generation,
                counted,
            ))
        {
            self.settle(index, None, Some(generation), State::Counts);
        }
    }

    /// Node `index` is recovering from a restart or failover: a task of its connection
    /// lets it count again once the grace has passed (see [`end_recovery`]).
    pub(super) fn recovering(&self, index: usize, connection: Connection, recovery: Recovery) {
        let generation = self.settle(index, Some(recovery.clone()), None, State::Recovering);
        let grace_left = self
            .ends(&recovery)
            .saturating_duration_since(Instant::now());
        tracing::warn!(
            node = %self.names[index],
            run_id = %recovery.run_id,
            previous_run_id = recovery.previous_run_id.as_deref().unwrap_or("unknown"),
            why = recovery.why,
            grace_left_ms = u64::try_from(grace_left.as_millis()).unwrap_or(u64::MAX),
            "node recovering from a restart, a failover or a loss of data: its grants do not count \
             until the grace has passed"
        );
        tasks::spawn(end_recovery(
            self.me.clone(),
            index,
            generation,
            connection,
            recovery,
        ));
    }
}

//! The first check of every node, before a client's first lock call goes
//! on, and rule 8 of the judgment, which asks the records every first check
//! read.

use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::identity::Identity;
use super::judge::{Judgment, Since, vanished};
use super::record::run_id_of;
use super::table::{NotReady, Standings};
use crate::answer::NodeErrorKind;
use crate::tasks;

/// A first check running as a task; when it ends, however it ends, its node
/// is no longer "being checked" (a dropped task leaves it to the next call).
pub(super) struct CheckUnderWay {
    pub(super) standings: Weak<Standings>,
    pub(super) index: usize,
}

impl Drop for CheckUnderWay {
    fn drop(&mut self) {
        if let Some(standings) = self.standings.upgrade() {
            standings.detail(self.index).checking = false;
            standings.ended.notify_waiters();
        }
    }
}

impl Standings {
    /// Rule 8 of the module docs, for a node first met, young, never
    /// promoted and unrecorded: waits (for at most half the connect timeout
    /// from `started`) until every node's first check has read its node;
    /// *recovering* if some record holds an incarnation that no node has
    /// now.
    pub(super) async fn ask_records(&self, started: Instant) -> Judgment {
        self.wait_for_first_reads(started + self.connect_timeout / 2)
            .await;
        let identities: Vec<Identity> = (0..self.slots.len())
            .filter_map(|i| self.detail(i).identity.clone())
            .collect();
        let current: Vec<String> = identities
            .iter()
            .filter_map(Identity::incarnation)
            .collect();
        let current: Vec<&str> = current.iter().map(String::as_str).collect();
        let recorded = identities
            .iter()
            .flat_map(|identity| identity.record.iter().map(String::as_str));
        match vanished(recorded, &current) {
            None => Judgment::Counts,
            Some(gone) => Judgment::Recovering {
                why: "an incarnation that counted is gone from the nodes: this young, \
                      unrecorded node may be the one that lost its data",
                previous: Some(run_id_of(gone).to_owned()),
                since: Since::Start,
                lost: false,
            },
        }
    }

    /// Whether every node's first check has ended (a client's first lock
    /// call waits for it: see [`ensure`](Self::ensure)).
    pub(crate) fn first_checks_ended(&self) -> bool {
        self.all_attempted.load(Ordering::Acquire)
    }

    /// Starts a first check of every node whose first check has not ended,
    /// then waits until each has ended (at once after the first call), or
    /// until `deadline`. `connect(index)` connects to node `index`, which
    /// checks it; it runs as a task, so the checks go on without the caller.
    ///
    /// Cancel safe: the checks go on without the caller.
    pub(crate) async fn ensure<F, Fut>(
        &self,
        connect: F,
        deadline: Option<Instant>,
    ) -> Result<(), NotReady>
    where
        F: Fn(usize) -> Fut,
        Fut: std::future::Future<Output = Result<(), NodeErrorKind>> + Send + 'static,
    {
        let all_checked = self.all_attempted.load(Ordering::Acquire)
            || tasks::wait_until(&self.ended, deadline, || {
                // Again on every wake-up: a check whose runtime ended left
                // its node unchecked.
                self.start_first_checks(&connect);
                self.all_attempted.load(Ordering::Acquire)
            })
            .await;
        if !all_checked {
            return Err(NotReady::DeadlinePassed(self.unchecked()));
        }
        match self.misconfigured.get() {
            Some(reason) => Err(NotReady::Misconfigured(reason.clone())),
            None => Ok(()),
        }
    }

    /// Starts, as tasks of the current runtime, a first check of each node
    /// whose first check has not ended and is not running.
    pub(crate) fn start_first_checks<F, Fut>(&self, connect: &F)
    where
        F: Fn(usize) -> Fut,
        Fut: std::future::Future<Output = Result<(), NodeErrorKind>> + Send + 'static,
    {
        if !tasks::has_runtime() {
            return;
        }
        self.start_clock_watch();
        for index in 0..self.slots.len() {
            {
                let mut detail = self.detail(index);
                if detail.attempted || detail.checking {
                    continue;
                }
                detail.checking = true;
            }
            let under_way = CheckUnderWay {
                standings: self.me.clone(),
                index,
            };
            let connecting = connect(index);
            tasks::spawn(async move {
                let under_way = under_way;
                let outcome = connecting.await;
                if let Some(standings) = under_way.standings.upgrade() {
                    match outcome {
                        // The first lock counts the node: wait for its record.
                        Ok(()) => standings.wait_recorded(under_way.index).await,
                        Err(failure) => standings.record_failure(under_way.index, failure),
                    }
                    standings.first_check_ended(under_way.index);
                }
            });
        }
    }
}

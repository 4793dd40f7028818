//! Holding back a node whose clock stepped forward (the rule and its
//! safety argument are in `clock.rs`): the clock's part of a check, the
//! readings that votes and the background watch feed in, and the hold's
//! end.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::identity::Identity;
use super::judge::Recovery;
use super::record::Counted;
use super::record::Errand;
use super::recovery::{Whom, record_on};
use super::table::{Standings, State};
use crate::answer::NotCounted;
use crate::changes::Change;
use crate::clock::{self, Lead, Reading, Seen};
use crate::tasks;

/// A clock hold to start or keep (see `clock.rs`).
#[derive(Debug, Clone, Copy)]
pub(super) struct ClockHold {
    /// How far ahead the clock stepped, about (zero: told by a note).
    pub(super) ahead: Duration,
    pub(super) why: &'static str,
    /// From when its grace runs.
    pub(super) came_back: Instant,
    /// This client saw the step against its own readings of the node (it
    /// notes it on the nodes).
    pub(super) seen_here: bool,
}

impl ClockHold {
    /// A step of `by_us` this client saw now.
    pub(super) fn seen(by_us: i64, why: &'static str) -> ClockHold {
        ClockHold {
            ahead: micros(by_us),
            why,
            came_back: Instant::now(),
            seen_here: true,
        }
    }
}

/// A step seen against this client's own readings of the node.
pub(super) const STEP_SEEN: &str = "its clock ran ahead of this client's since an earlier reading";

/// A step seen at a first look.
pub(super) const FIRST_LOOK: &str =
    "first look: ahead of the other nodes' clocks and this client's";

/// A step another client saw.
pub(super) const NOTED: &str = "a note on the nodes: another client saw it step";

/// `us` microseconds (zero if negative).
pub(super) fn micros(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

/// A clock hold's end, as a task: once the grace has passed since the step
/// was seen, records the node on every node and lets its votes count,
/// unless a newer check or hold replaced this one.
pub(super) async fn end_clock_hold(
    weak: Weak<Standings>,
    index: usize,
    generation: u64,
    recovery: Recovery,
) {
    loop {
        let Some(ends) = weak.upgrade().map(|standings| standings.ends(&recovery)) else {
            return;
        };
        if Instant::now() >= ends {
            break;
        }
        tokio::time::sleep_until(ends.into()).await;
    }
    let generation = match weak.upgrade() {
        Some(standings) if standings.detail(index).generation == generation => {
            standings.settle(index, None, Some(generation), State::Recording)
        }
        _ => return,
    };
    let counted = Counted {
        incarnation: recovery.incarnation,
        mark: recovery.mark,
    };
    record_on(weak, index, generation, counted, Whom::All).await;
}

/// How often the background reading reads a node's clock, at most (a node
/// read by a vote meanwhile is not read again).
pub(super) const WATCH_EVERY: Duration = Duration::from_secs(1);

/// The background reading of the nodes' clocks (see `clock.rs`) and data
/// marks (`mark_watch.rs`): every [`WATCH_EVERY`], each connected node not
/// read since is read; and each Sentinel node's Sentinels are asked which
/// primary they name (`Errand::FollowSentinels`). Ends with the client.
pub(super) async fn watch_clocks(weak: Weak<Standings>) {
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        let Some(standings) = weak.upgrade() else {
            return;
        };
        let Some(recorder) = standings.recorder.get().cloned() else {
            continue;
        };
        let reads: Vec<_> = (0..standings.slots.len())
            .filter(|&index| standings.needs_reading(index))
            .map(|index| (recorder.0)(index, Errand::ReadClock))
            .chain(
                (0..standings.slots.len())
                    .filter(|&index| standings.follows_failovers.get(index) == Some(&true))
                    .map(|index| (recorder.0)(index, Errand::FollowSentinels)),
            )
            .collect();
        drop(standings);
        for err in futures::future::join_all(reads)
            .await
            .into_iter()
            .filter_map(Result::err)
        {
            tracing::debug!(error = %err, "a background clock reading failed");
        }
    }
}

impl Standings {
    /// Whether clocks are watched (a tolerance is set).
    pub(crate) fn clock_on(&self) -> bool {
        !self.policy.clock_tolerance.is_zero()
    }

    /// The clock tolerance that shortens this client's validities: the
    /// largest in use on the nodes (see `settings.rs`).
    pub(crate) fn validity_tolerance(&self) -> Duration {
        let own = match self.clock_on() {
            true => self.policy.clock_tolerance,
            false => Duration::ZERO,
        };
        self.settings.validity(own)
    }

    /// The clock tolerance steps are judged by, µs: the smallest in use on
    /// the nodes (see `settings.rs`).
    pub(super) fn tolerance_us(&self) -> i64 {
        self.settings.judge_us(self.policy.clock_tolerance)
    }

    /// The most node `index`'s wall clock can read now (µs since the Unix
    /// epoch) by its latest reading kept, if it did not step since; `None`
    /// without a reading in the window or with clocks not watched. An
    /// estimate to aim at (see [`Lead::node_clock_at_most`]).
    pub(crate) fn node_clock_at_most(&self, index: usize) -> Option<i64> {
        if !self.clock_on() {
            return None;
        }
        let latest = tasks::lock(&self.slots.get(index)?.clock).latest()?;
        Some(latest.node_clock_at_most(self.epoch, Instant::now()))
    }

    /// What `lead` shows against node `index`'s history (see `clock.rs`).
    pub(super) fn see(&self, index: usize, lead: Lead) -> Seen {
        let window = self.clock_grace();
        tasks::lock(&self.slots[index].clock).see(lead, self.tolerance_us(), window)
    }

    /// A server that changed behind node `index`: its clock's history
    /// starts again from this check's reading.
    pub(super) fn restart_clock(&self, index: usize, identity: &Identity) {
        if let Some(reading) = identity.clock.filter(|_| self.clock_on()) {
            let lead = self.epoch.lead(&reading);
            tasks::lock(&self.slots[index].clock).restart(lead);
        }
    }

    /// The clock's part of a check (see `clock.rs`): a hold still running,
    /// a step seen against the history, a first look (after every node's
    /// first check has read its node, for at most half the connect timeout
    /// from `started`), or a note that holds the node back.
    pub(super) async fn clock_at_check(
        &self,
        index: usize,
        identity: &Identity,
        started: Instant,
    ) -> Option<ClockHold> {
        let reading = identity.clock.filter(|_| self.clock_on())?;
        if let Some(running) = self.clock_hold_running(index) {
            return Some(running);
        }
        let lead = self.epoch.lead(&reading);
        match self.see(index, lead) {
            Seen::Stepped { by_us } => Some(ClockHold::seen(by_us, STEP_SEEN)),
            Seen::Unwatched => {
                if !self.all_heard.load(Ordering::Acquire) {
                    self.wait_for_first_reads(started + self.connect_timeout / 2)
                        .await;
                }
                self.first_look(index, lead)
                    .or_else(|| self.noted_hold(index, identity))
            }
            Seen::Steady | Seen::Unsure { .. } => self.noted_hold(index, identity),
        }
    }

    /// Node `index`'s clock hold under way, if one is, to keep on a new
    /// connection.
    pub(super) fn clock_hold_running(&self, index: usize) -> Option<ClockHold> {
        let detail = self.detail(index);
        let recovery = detail.recovery.as_ref()?;
        let ahead = recovery.clock?;
        (self.slots[index].state() == State::Recovering).then_some(ClockHold {
            ahead,
            why: recovery.why,
            came_back: recovery.came_back,
            seen_here: false,
        })
    }

    /// A first look at node `index`'s clock (see `clock.rs`): held back if
    /// `lead` is ahead of the lower median of the other nodes' latest leads
    /// and this client's wall clock by more than the tolerance. Its history
    /// starts from `lead` either way.
    pub(super) fn first_look(&self, index: usize, lead: Lead) -> Option<ClockHold> {
        let ahead_us = self.ahead_of_others(index, lead);
        tasks::lock(&self.slots[index].clock).restart(lead);
        // Not noted on the nodes: a first look compares with this client's
        // own wall clock too, and a client whose clock is wrong must not
        // hold the node back for every other client.
        (ahead_us > self.tolerance_us()).then(|| ClockHold {
            seen_here: false,
            ..ClockHold::seen(ahead_us, FIRST_LOOK)
        })
    }

    /// How far node `index`'s `lead` is ahead (negative: behind) of the
    /// lower median of the other nodes' latest leads in the window and
    /// this client's wall clock, µs (see `clock.rs`, a first look).
    pub(super) fn ahead_of_others(&self, index: usize, lead: Lead) -> i64 {
        let window = self.clock_grace();
        let others: Vec<i64> = (0..self.slots.len())
            .filter(|&other| other != index)
            .filter_map(|other| self.latest_lead(other))
            .filter(|other| lead.at.saturating_duration_since(other.at) <= window)
            .map(|other| other.mid())
            .collect();
        clock::ahead_of_others(&lead, &others, self.epoch.own_lead())
    }

    /// How far node `index`'s clock, read as `lead`, is behind the others'
    /// and this client's (see [`ahead_of_others`](Self::ahead_of_others)),
    /// µs; 0 where it is not. A grace that starts now, written on the node
    /// by its own clock, starts this much later: a clock behind that is
    /// set right later would otherwise cut the grace short by as much.
    pub(super) fn behind_others_us(&self, index: usize, lead: Lead) -> i64 {
        self.ahead_of_others(index, lead).saturating_neg().max(0)
    }

    /// Node `index`'s latest lead: its history's, or its last check's.
    pub(super) fn latest_lead(&self, index: usize) -> Option<Lead> {
        let kept = tasks::lock(&self.slots[index].clock).latest();
        let checked = (self.detail(index).identity.as_ref())
            .and_then(|identity| identity.clock)
            .map(|reading| self.epoch.lead(&reading));
        match (kept, checked) {
            (Some(kept), Some(checked)) if checked.at > kept.at => Some(checked),
            (kept, checked) => kept.or(checked),
        }
    }

    /// A hold of node `index` (which read `identity`) that a note on some
    /// node asks for: the latest deadline a note read holds its `run_id`
    /// back to. The node's own notes count only where it is the only node:
    /// they are kept by the clock that stepped, so a clock set right again
    /// makes them run 30 s long after a 30 s step.
    pub(super) fn noted_hold(&self, index: usize, identity: &Identity) -> Option<ClockHold> {
        let run_id = identity.run_id.as_deref()?;
        let now = Instant::now();
        let alone = self.slots.len() == 1;
        let until = (0..self.slots.len())
            .filter(|&node| alone || node != index)
            .filter_map(|node| {
                let detail = self.detail(node);
                let notes = &detail.identity.as_ref()?.clock_notes;
                notes
                    .iter()
                    .filter(|(noted, _)| noted == run_id)
                    .map(|(_, until)| *until)
                    .max()
            })
            .max()
            .filter(|until| *until > now)?;
        let left = until - now;
        let grace = self.clock_grace();
        let came_back = match left.checked_sub(grace) {
            Some(beyond) => now + beyond,
            None => now.checked_sub(grace - left).unwrap_or(now),
        };
        Some(ClockHold {
            ahead: Duration::ZERO,
            why: NOTED,
            came_back,
            seen_here: false,
        })
    }

    /// What a vote's reading of node `index`'s clock (`TIME`, pipelined
    /// after the vote) shows (see `clock.rs`): `Err` with why the vote does
    /// not count if the clock stepped (the node is then held back) or may
    /// have. Also fed with the background readings.
    pub(crate) fn see_clock(&self, index: usize, reading: &Reading) -> Result<(), NotCounted> {
        if !self.clock_on() {
            return Ok(());
        }
        let lead = self.epoch.lead(reading);
        let hold = match self.see(index, lead) {
            Seen::Steady => return Ok(()),
            Seen::Unsure { by_us } => {
                return Err(NotCounted::ClockUnsure {
                    ahead_at_most: micros(by_us),
                    round_trip: reading.received.saturating_duration_since(reading.sent),
                });
            }
            Seen::Stepped { by_us } => ClockHold::seen(by_us, STEP_SEEN),
            Seen::Unwatched => match self.first_look(index, lead) {
                None => return Ok(()),
                Some(hold) => hold,
            },
        };
        self.hold_clock(index, hold);
        Err(self
            .not_counted(index)
            .unwrap_or_else(|| NotCounted::Unchecked {
                reason: "its clock stepped".to_owned(),
            }))
    }

    /// Holds node `index` back for a clock step (see `clock.rs`): its
    /// grants do not count until the grace has passed since `hold` came
    /// back (a recovery that ends later stays); the locks held on it are
    /// told; a step this client saw is noted on every node.
    pub(super) fn hold_clock(&self, index: usize, hold: ClockHold) {
        let (run_id, incarnation) = {
            let detail = self.detail(index);
            let identity = detail.identity.as_ref();
            (
                identity.and_then(|identity| identity.run_id.clone()),
                identity.and_then(Identity::incarnation),
            )
        };
        let recovery = Recovery {
            run_id: run_id.clone().unwrap_or_default(),
            incarnation: incarnation.unwrap_or_default(),
            previous_run_id: None,
            why: hold.why,
            came_back: hold.came_back,
            clock: Some(hold.ahead),
            lost: false,
            mark: self.detail(index).mark.as_ref().map(|mark| mark.id.clone()),
        };
        let ends = self.ends(&recovery);
        self.changes.changed(index, Change::Clock(hold.ahead));
        if hold.seen_here
            && let Some(run_id) = run_id
        {
            let hold_ms = ends.saturating_duration_since(Instant::now()).as_millis();
            self.note_everywhere(run_id, u64::try_from(hold_ms).unwrap_or(u64::MAX));
        }
        let later = self
            .detail(index)
            .recovery
            .as_ref()
            .map(|now| self.ends(now));
        if self.slots[index].state() == State::Recovering
            && later.is_some_and(|later| later >= ends)
        {
            return; // a recovery under way ends later
        }
        let generation = self.settle(index, Some(recovery.clone()), None, State::Recovering);
        tracing::warn!(
            node = %self.names[index],
            ahead_ms = u64::try_from(hold.ahead.as_millis()).unwrap_or(u64::MAX),
            why = hold.why,
            held_ms = u64::try_from(ends.saturating_duration_since(Instant::now()).as_millis())
                .unwrap_or(u64::MAX),
            "node's clock stepped forward, which expires keys early: its grants do not count \
             until the grace has passed"
        );
        tasks::spawn(end_clock_hold(self.me.clone(), index, generation, recovery));
    }

    /// Notes on every node that the node with `run_id` is held back for
    /// `hold_ms` (a task; each node bounded by the connect timeout).
    pub(super) fn note_everywhere(&self, run_id: String, hold_ms: u64) {
        let Some(recorder) = self.recorder.get().cloned() else {
            return;
        };
        let run_id: Arc<str> = run_id.into();
        let notes = (0..self.slots.len()).map(move |node| {
            let errand = Errand::NoteClockStep {
                run_id: run_id.clone(),
                hold_ms,
            };
            (recorder.0)(node, errand)
        });
        let notes: Vec<_> = notes.collect();
        tasks::spawn(async move {
            for err in futures::future::join_all(notes)
                .await
                .into_iter()
                .filter_map(Result::err)
            {
                tracing::warn!(error = %err, "noting a clock step on a node failed");
            }
        });
    }

    /// Starts the background reading of the nodes' clocks (once; see
    /// `clock.rs`), as a task that ends with the client.
    pub(super) fn start_clock_watch(&self) {
        // The data marks are read with the clocks (see `mark_watch.rs`).
        let watched = self.clock_on() || !self.policy.grace.is_zero();
        if watched && !self.watching.swap(true, Ordering::AcqRel) {
            tasks::spawn(watch_clocks(self.me.clone()));
        }
    }

    /// Whether node `index` has had no clock reading kept for half of
    /// [`WATCH_EVERY`]: read at each sweep then, so that no node goes
    /// unread for much longer than one.
    pub(super) fn needs_reading(&self, index: usize) -> bool {
        let latest = tasks::lock(&self.slots[index].clock).latest();
        latest.is_none_or(|lead| lead.at.elapsed() >= WATCH_EVERY / 2)
    }
}

//! The table of every node's standing ([`Standings`]): one atomic state per
//! node that every round reads, the detail behind it, and the grace.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::identity::Identity;
use super::judge::{Recovery, RestartPolicy};
use super::mark::Mark;
use super::record::{Counted, RecordKeys, Recorder};
use super::settings::SetSettings;
use crate::answer::{NodeError, NodeErrorKind, NotCounted};
use crate::changes::ServerChanges;
use crate::clock::{Epoch, History};
use crate::quorum;
use crate::tasks;

/// One node's standing.
#[derive(Debug)]
pub(super) struct Slot {
    /// A [`State`], as its `u8`: read by every round.
    pub(super) state: AtomicU8,
    /// A call timed out and the probe started then has not had an answer.
    pub(super) skipped: AtomicBool,
    /// Everything else: read only when the node does not count, or by checks.
    pub(super) detail: Mutex<Detail>,
    /// The node's recent clock readings (see `clock.rs`).
    pub(super) clock: Mutex<History>,
    /// The id of its data mark that its grants must read after them (see
    /// `mark.rs`), as its 64 bits, where `marked`.
    pub(super) mark_id: AtomicU64,
    /// Whether its grants read its mark (not: a cluster, a node that
    /// refuses it, the restart protection off).
    pub(super) marked: AtomicBool,
}

/// Where a node stands: read by every round, as one atomic load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum State {
    /// Its grants count.
    Counts = 0,
    /// No connection to it has passed its check yet.
    Unchecked = 1,
    /// Its server changed, or its clock stepped: its grants do not count
    /// until the grace has passed.
    Recovering = 2,
    /// Judged to count; its incarnation is being recorded on the other
    /// nodes first.
    Recording = 3,
}

impl Slot {
    /// The node's state now.
    pub(super) fn state(&self) -> State {
        match self.state.load(Ordering::Acquire) {
            0 => State::Counts,
            2 => State::Recovering,
            3 => State::Recording,
            _ => State::Unchecked,
        }
    }

    /// Sets the node's state.
    pub(super) fn set_state(&self, state: State) {
        self.state.store(state as u8, Ordering::Release);
    }
}

#[derive(Debug, Default)]
pub(super) struct Detail {
    /// The last check's answers.
    pub(super) identity: Option<Identity>,
    /// The first check ended: the connection it made is ready, or it failed.
    pub(super) attempted: bool,
    /// A check has read the node, or a connection to it failed: what the
    /// rule for young unrecorded nodes (rule 8) waits for.
    pub(super) heard: bool,
    /// A first check runs as a task (see [`Standings::ensure`]).
    pub(super) checking: bool,
    /// Why the last connection attempt failed, if it did.
    pub(super) failure: Option<NodeErrorKind>,
    pub(super) recovery: Option<Recovery>,
    /// Bumped by each check, so that a stale recovery task stands down.
    pub(super) generation: u64,
    /// The incarnation and mark this client recorded on the other nodes.
    pub(super) recorded: Option<Counted>,
    /// A recovery ended and its node is being recorded: logged once it counts.
    pub(super) left_recovery: Option<String>,
    /// The data mark this client last took for the node's (see `mark.rs`).
    pub(super) mark: Option<Mark>,
}

/// Why [`Standings::ensure`] did not let a lock call go on.
#[derive(Debug)]
pub(crate) enum NotReady {
    /// The nodes are misconfigured: locking is refused.
    Misconfigured(String),
    /// The caller's deadline passed before every node's first check ended;
    /// the nodes not yet checked, with why.
    DeadlinePassed(Vec<NodeError>),
}

/// The standing of every node of a client, and what its checks need.
#[derive(Debug)]
pub(crate) struct Standings {
    pub(super) slots: Vec<Slot>,
    pub(super) names: Vec<Arc<str>>,
    /// Notified whenever a first check ends.
    pub(super) ended: Notify,
    /// Notified whenever a skipped node answers again.
    pub(super) unskipped: Notify,
    pub(super) all_attempted: AtomicBool,
    pub(super) all_heard: AtomicBool,
    pub(super) misconfigured: OnceLock<String>,
    pub(super) policy: RestartPolicy,
    /// The longest TTL (ms) this client has used.
    pub(super) longest_ttl_ms: AtomicU64,
    pub(super) record_keys: RecordKeys,
    /// The scripts loaded on each node with its check.
    pub(super) scripts: &'static [&'static str],
    pub(super) node_timeout: Duration,
    pub(super) connect_timeout: Duration,
    /// Records a `run_id` on node `j` (set once the nodes are built).
    pub(super) recorder: OnceLock<Recorder>,
    /// The servers that changed under locks this client may hold.
    pub(super) changes: Arc<ServerChanges>,
    /// Per node, whether the server behind it moves in failovers (a
    /// Sentinel node): a replica there is passed over, not refused.
    pub(super) follows_failovers: Vec<bool>,
    /// The client's monotonic clock as a number (see `clock.rs`).
    pub(super) epoch: Epoch,
    /// The background reading of the nodes' clocks was started.
    pub(super) watching: AtomicBool,
    /// The settings of the node set, as read (see `settings.rs`).
    pub(super) settings: SetSettings,
    pub(super) me: Weak<Standings>,
}

impl Standings {
    pub(crate) fn new(
        names: Vec<Arc<str>>,
        follows_failovers: Vec<bool>,
        policy: RestartPolicy,
        record_keys: RecordKeys,
        scripts: &'static [&'static str],
        node_timeout: Duration,
        connect_timeout: Duration,
    ) -> Arc<Self> {
        let changes = Arc::new(ServerChanges::new(names.clone()));
        Arc::new_cyclic(|me| Standings {
            slots: names
                .iter()
                .map(|_| Slot {
                    state: AtomicU8::new(State::Unchecked as u8),
                    skipped: AtomicBool::new(false),
                    detail: Mutex::new(Detail::default()),
                    clock: Mutex::new(History::default()),
                    mark_id: AtomicU64::new(0),
                    marked: AtomicBool::new(false),
                })
                .collect(),
            names,
            ended: Notify::new(),
            unskipped: Notify::new(),
            all_attempted: AtomicBool::new(false),
            all_heard: AtomicBool::new(false),
            misconfigured: OnceLock::new(),
            policy,
            longest_ttl_ms: AtomicU64::new(0),
            record_keys,
            scripts,
            node_timeout,
            connect_timeout,
            recorder: OnceLock::new(),
            changes,
            follows_failovers,
            epoch: Epoch::now(),
            watching: AtomicBool::new(false),
            settings: SetSettings::new(),
            me: me.clone(),
        })
    }

    /// The keys of each node's record.
    pub(crate) fn record_keys(&self) -> RecordKeys {
        self.record_keys.clone()
    }

    /// Gives the standings the way to record a `run_id` on a node.
    pub(crate) fn set_recorder(&self, recorder: Recorder) {
        let _ = self.recorder.set(recorder);
    }

    /// Node `index`'s name (`host:port`).
    pub(crate) fn name(&self, index: usize) -> &str {
        &self.names[index]
    }

    /// Notes a TTL this client uses: the grace covers the longest.
    pub(crate) fn note_ttl(&self, ttl_ms: u64) {
        // Read first: every lock call comes here, and the longest TTL
        // almost never grows, so the shared line is only written when it does.
        if ttl_ms > self.longest_ttl_ms.load(Ordering::Relaxed) {
            self.longest_ttl_ms.fetch_max(ttl_ms, Ordering::Relaxed);
        }
    }

    /// `G`: the restart grace, at least the longest TTL this client has
    /// used, plus the drift allowance on it. Zero: protection off.
    pub(super) fn grace(&self) -> Duration {
        if self.policy.grace.is_zero() {
            return Duration::ZERO;
        }
        self.clock_grace()
    }

    /// How long a node whose clock stepped is held back: `G` as for a
    /// restart, and with the restart protection off, the longest TTL used
    /// with its drift allowance.
    pub(super) fn clock_grace(&self) -> Duration {
        let grace = self.own_grace().max(self.settings.grace());
        grace.saturating_add(quorum::drift(grace, self.policy.drift_factor))
    }

    /// This client's own grace, before the drift allowance: the restart
    /// grace, at least its longest TTL (what it records on the nodes).
    pub(super) fn own_grace(&self) -> Duration {
        let longest = Duration::from_millis(self.longest_ttl_ms.load(Ordering::Relaxed));
        self.policy.grace.max(longest)
    }

    /// When `recovery` ends: its grace after it came back.
    pub(super) fn ends(&self, recovery: &Recovery) -> Instant {
        let grace = match recovery.clock {
            Some(_) => self.clock_grace(),
            None => self.grace(),
        };
        recovery.came_back + grace
    }

    pub(super) fn detail(&self, index: usize) -> std::sync::MutexGuard<'_, Detail> {
        // Every update is a few assignments that cannot panic halfway:
        // poisoning is ignored.
        tasks::lock(&self.slots[index].detail)
    }

    /// Whether node `index`'s grants count now: `Ok`, or the error that says
    /// why not. The usual case is one atomic load.
    pub(crate) fn vote_counts(&self, index: usize) -> Result<(), NodeError> {
        match self.not_counted(index) {
            None => Ok(()),
            Some(reason) => Err(NodeError::new(
                self.names[index].clone(),
                NodeErrorKind::NotCounted(Arc::new(reason)),
            )),
        }
    }

    /// Why node `index`'s votes do not count now, if they do not.
    pub(crate) fn not_counted(&self, index: usize) -> Option<NotCounted> {
        let slot = &self.slots[index];
        if slot.skipped.load(Ordering::Acquire) {
            return Some(NotCounted::Unresponsive {
                timeout: self.node_timeout,
            });
        }
        if slot.state() == State::Counts {
            return None;
        }
        let detail = self.detail(index);
        // Read again under the lock: a check may have just ended.
        match slot.state() {
            State::Counts => None,
            State::Recovering => detail.recovery.as_ref().map(|recovery| {
                let ends = self.ends(recovery);
                let counts_in = ends.saturating_duration_since(Instant::now());
                if let Some(ahead) = recovery.clock {
                    return NotCounted::ClockStepped {
                        ahead,
                        why: recovery.why.to_owned(),
                        counts_in,
                    };
                }
                if recovery.lost {
                    return NotCounted::DataLost {
                        why: recovery.why.to_owned(),
                        counts_in,
                    };
                }
                NotCounted::Recovering {
                    run_id: recovery.run_id.clone(),
                    previous_run_id: recovery.previous_run_id.clone(),
                    why: recovery.why.to_owned(),
                    counts_in,
                }
            }),
            State::Recording => Some(NotCounted::Unchecked {
                reason: "its run_id is being recorded on the other nodes".to_owned(),
            }),
            State::Unchecked => Some(NotCounted::Unchecked {
                reason: match &detail.failure {
                    Some(failure) => failure.to_string(),
                    None if detail.checking => "its check is under way".to_owned(),
                    None => "no check has ended yet".to_owned(),
                },
            }),
        }
    }

    /// Whether node `index` is skipped (unresponsive): its votes are not asked.
    pub(crate) fn is_skipped(&self, index: usize) -> bool {
        self.slots[index].skipped.load(Ordering::Acquire)
    }

    /// Marks node `index` skipped; `false` if it already was (a probe is
    /// on its way).
    pub(crate) fn skip(&self, index: usize) -> bool {
        !self.slots[index].skipped.swap(true, Ordering::AcqRel)
    }

    /// Ends the skipping of node `index` (its probe ended).
    pub(crate) fn unskip(&self, index: usize) {
        self.slots[index].skipped.store(false, Ordering::Release);
        self.unskipped.notify_waiters();
    }

    /// Waits until at least `quorum` nodes are not skipped (a round could
    /// then win), or until `deadline`. A round before that would fail
    /// without asking a node.
    ///
    /// Cancel safe.
    pub(crate) async fn askable(&self, quorum: usize, deadline: Instant) {
        tasks::wait_until(&self.unskipped, Some(deadline), || {
            let askable = (0..self.slots.len()).filter(|&index| !self.is_skipped(index));
            askable.count() >= quorum
        })
        .await;
    }

    /// The server changes of this client's nodes, for the locks it holds.
    pub(crate) fn changes(&self) -> &Arc<ServerChanges> {
        &self.changes
    }

    /// The incarnations of the nodes whose votes count for this client.
    pub(super) fn counting_incarnations(&self) -> Vec<String> {
        (0..self.slots.len())
            .filter(|&i| self.slots[i].state() == State::Counts)
            .filter_map(|i| self.detail(i).identity.as_ref()?.incarnation())
            .collect()
    }

    /// The ids of the data marks of the nodes whose votes count for this
    /// client.
    pub(super) fn counting_marks(&self) -> Vec<String> {
        (0..self.slots.len())
            .filter(|&i| self.slots[i].state() == State::Counts)
            .filter_map(|i| Some(self.detail(i).mark.as_ref()?.id.clone()))
            .collect()
    }

    /// Records a failed connection attempt (or check) of node `index`.
    pub(crate) fn record_failure(&self, index: usize, failure: NodeErrorKind) {
        let first = {
            let mut detail = self.detail(index);
            detail.failure = Some(failure.clone());
            !detail.heard
        };
        // Warned once; a node that stays down is tried again at each call.
        if first {
            tracing::warn!(
                node = %self.names[index],
                error = %failure,
                "node check failed: the node's grants do not count until it is checked"
            );
        }
        self.heard(index);
    }

    /// A check of node `index` read it, or connecting to it failed.
    pub(super) fn heard(&self, index: usize) {
        self.mark_first(index, |detail| &mut detail.heard, &self.all_heard);
    }

    /// Node `index`'s first check ended: its connection is ready (or failed).
    pub(super) fn first_check_ended(&self, index: usize) {
        self.mark_first(index, |detail| &mut detail.attempted, &self.all_attempted);
    }

    /// Sets a node's `flag`; the first time, sets `all` once every node's
    /// is set, and wakes the waiters.
    pub(super) fn mark_first(
        &self,
        index: usize,
        flag: fn(&mut Detail) -> &mut bool,
        all: &AtomicBool,
    ) {
        if std::mem::replace(flag(&mut self.detail(index)), true) {
            return;
        }
        if (0..self.slots.len()).all(|i| *flag(&mut self.detail(i))) {
            all.store(true, Ordering::Release);
        }
        self.ended.notify_waiters();
    }

    /// Stores a verdict (`state`, and the recovery of a recovering node), as
    /// a new check (`generation` `None`) or as a later step of check
    /// `generation` (ignored if a newer check replaced it); returns the
    /// generation. A node that left recovery is logged here, once it counts.
    pub(super) fn settle(
        &self,
        index: usize,
        recovery: Option<Recovery>,
        generation: Option<u64>,
        state: State,
    ) -> u64 {
        let (generation, left) = {
            let mut detail = self.detail(index);
            match generation {
                Some(generation) if generation != detail.generation => return detail.generation,
                Some(_) => {}
                None => detail.generation += 1,
            }
            match (&recovery, detail.recovery.take()) {
                (None, Some(old)) => detail.left_recovery = Some(old.run_id),
                (Some(_), _) => detail.left_recovery = None,
                (None, None) => {}
            }
            detail.recovery = recovery;
            if state == State::Counts {
                detail.recorded = Some(Counted {
                    incarnation: (detail.identity.as_ref())
                        .and_then(Identity::incarnation)
                        .unwrap_or_default(),
                    mark: detail.mark.as_ref().map(|mark| mark.id.clone()),
                });
            }
            self.slots[index].set_state(state);
            let left = if state == State::Counts {
                detail.left_recovery.take()
            } else {
                None
            };
            (detail.generation, left)
        };
        if state == State::Counts {
            self.ended.notify_waiters();
        }
        if let Some(run_id) = left {
            tracing::warn!(
                node = %self.names[index],
                %run_id,
                "node recovered: the restart grace has passed; its grants count again"
            );
        }
        generation
    }

    /// Waits until every node's first check ended, or until `deadline`.
    pub(super) async fn wait_for_first_reads(&self, deadline: Instant) {
        tasks::wait_until(&self.ended, Some(deadline), || {
            self.all_heard.load(Ordering::Acquire)
        })
        .await;
    }

    /// The nodes whose first check has not ended, each with why.
    pub(super) fn unchecked(&self) -> Vec<NodeError> {
        (0..self.slots.len())
            .filter(|&i| !self.detail(i).attempted)
            .filter_map(|i| self.vote_counts(i).err())
            .collect()
    }
}

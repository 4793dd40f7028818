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
//! keys only choose which correct round to make and when (see `queue.rs`).
//!
//! Locks on several resources take their turn as `sets.rs` describes.
//!
//! # Read-write locks
//!
//! A read-write lock on a resource uses three keys beside the resource's
//! key, on each node: the writer's key (a string: the writer's token, with
//! its TTL), the readers' set (each reader's token, scored by the time on
//! the node's clock at which its hold ends; the set's own TTL covers the
//! latest end) and a waiting writer's intent (a string with a short TTL).
//! A reader's round (`scripts::READ`) is granted on a node only when neither
//! the writer's key nor an intent exists there; a writer's round
//! (`scripts::WRITE`) only when the writer's key is absent and no reader's
//! hold is left (ended entries are dropped first, by the node's clock).
//! Either wins as the mutex does: a quorum of grants, validity left. A
//! reader's first round runs no script where the node allows it: it adds
//! its entry, with an end it aims by the node's clock, then looks for the
//! writer's key and the intent, and checks its aim against the node's
//! clock read after (`read_round.rs`, with its safety argument); a reader
//! refused there retries by the script, which leaves nothing behind.
//!
//! Why a writer and another holder are never both valid: each needed a
//! quorum, and two quorums share a node `n`. Whichever reached `n` second
//! found the other's entry there — a writer finds a reader's entry until
//! its end, which is at least the reader's round start plus its TTL on any
//! clock within the drift bound, past the reader's validity; a reader or a
//! writer finds the writer's key until its TTL, likewise — and was refused
//! at `n`; a grant at `n` could only come after that entry ended, when the
//! earlier holder's validity was already over. Two readers may share, as
//! they should. Readers do not touch each other's entries: a reader's
//! extension (`READ_EXTEND`) renews only its own entry, and only while it
//! has not ended, and raises the set's TTL, never lowers it; a release
//! (a plain `ZREM`) removes only its own entry (ended or not: it then
//! reports the hold released, where the entry was still there). A writer's extension and
//! release are the plain lock's scripts on the writer's key. It assumes
//! what the mutex assumes. Nodes that disagree (a reader's entry on one, a
//! writer's key on another) only withhold grants.
//!
//! A waiting writer's first round (unfenced) runs no script: it sets the
//! writer's key (`SET NX PX`) and then, pipelined, asks whether the
//! readers' set or an intent exists (`EXISTS`); it is granted on a node
//! only where it set the key and neither exists, and where it set the key
//! but found one, the node deletes the key again (token-checked) before it
//! answers. Why that is as safe as the script: a reader's round adds its
//! entry no later than it looks for the writer's key (the read script does
//! both in one step; a reader's first round adds it, then looks: see
//! `read_round.rs`). If the reader looked at a node before the writer's
//! `SET`, its entry was there before the writer's `EXISTS` (after its
//! `SET`), which finds it (until the reader released it or it ended, after
//! the reader's validity) and the writer is refused there; if after, the
//! reader finds the writer's key and is refused there. Two writers
//! exclude each other by `SET NX`. A writer's key set by a refused first
//! round lives only until that delete, or, if the node failed to answer,
//! until the round's cleanup or its TTL; meanwhile it only withholds
//! readers there. Ended entries of readers that died are not pruned by the
//! first round (it counts the set as it is): it is refused, and the next
//! round, the script, prunes them.
//!
//! The intent only withholds: a waiting writer's refused round leaves it
//! (unless another writer's is there), and while it exists no reader is
//! granted on that node. It lives for the waiter lifetime or three retry
//! delays, renewed by each round of the writer, and the call's end removes
//! it from every node ([`Intent`]). Once it is on a quorum, no reader can
//! win, so the writer waits only for the readers already in. The cost is on
//! the readers' side: writers that wait all the time keep readers out
//! (writers are preferred).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::RngExt;

use crate::answer::Answer;
use crate::changes::Holding;
use crate::engine::{Engine, To};
use crate::error::{Error, Result, show_resource, show_resources};
use crate::guard::LockGuard;
use crate::lease::Lease;
use crate::meter::{self, Meter};
use crate::notify::{Gates, Listening};
use crate::queue::{self, Place};
use crate::quorum::{self, Ttl, Votes};
use crate::request::{LockId, Request, RwKeys, Shape, new_token};
use crate::round::{NodeSet, Round, Until};
use crate::session::Watching;
use crate::standing::NotReady;
use crate::tasks;

/// Takes the lock on `resource`: one round for `try_lock` (`waits` false),
/// or, for `lock`, waiting in the queue on the nodes until the call's
/// patience ends (see `Redlock::lock`).
pub(crate) async fn acquire(
    engine: &Arc<Engine>,
    resource: &[u8],
    ttl: Duration,
    waits: bool,
) -> Result<LockGuard> {
    let key = engine.key(resource)?;
    let resources = std::slice::from_ref(&resource);
    let how = How::plain(engine, waits);
    start(engine, resources, (key, Shape::One), ttl, how).await
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
    start(engine, resources, (key, Shape::One), ttl, how).await
}

/// How a call acquires.
#[derive(Debug, Clone)]
pub(crate) struct How {
    /// How long it waits in the queue (`None`: one round, or rounds within
    /// the acquire timeout; see `Redlock::try_lock`).
    patience: Option<Duration>,
    /// Whether its lock is fenced.
    fencing: Fencing,
    /// For a lock on several resources gathered from the caller's plain
    /// locks on each (see `sets.rs`): their tokens, in the order of its keys.
    gathers: Option<Arc<[Arc<str>]>>,
}

/// Whether a call's lock is fenced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fencing {
    /// As the client's [`fencing`](crate::RedlockBuilder::fencing) says.
    AsConfigured,
    /// Always: a leader's term is its fencing token (see `election.rs`).
    Always,
    /// Never: a step towards a lock on several resources, which is fenced
    /// (as configured) when gathered (see `sets.rs`).
    Never,
}

impl How {
    /// A call that waits with the client's patience (`waits`) or makes one
    /// round, fenced as the client says.
    pub(crate) fn plain(engine: &Engine, waits: bool) -> Self {
        How {
            patience: waits.then(|| engine.config.patience()),
            fencing: Fencing::AsConfigured,
            gathers: None,
        }
    }

    /// A call that waits in the queue for up to `patience`, fenced as
    /// `fencing` says.
    pub(crate) fn waiting(patience: Duration, fencing: Fencing) -> Self {
        How {
            patience: Some(patience),
            fencing,
            gathers: None,
        }
    }

    /// One round that gathers a lock on several resources from the
    /// caller's plain locks on each, whose tokens are `held` (see `sets.rs`).
    pub(crate) fn gathering(held: Arc<[Arc<str>]>) -> Self {
        How {
            patience: None,
            fencing: Fencing::AsConfigured,
            gathers: Some(held),
        }
    }
}

/// Takes a read hold (`write` false) or the write hold of the read-write
/// lock on `resource`: one round (`waits` false), or rounds after the
/// jittered retry delay until the call's patience ends; a waiting writer
/// leaves its intent on the nodes that refused it, so that no new reader is
/// granted there meanwhile (see `Redlock::write`).
pub(crate) async fn acquire_rw(
    engine: &Arc<Engine>,
    resource: &[u8],
    ttl: Duration,
    waits: bool,
    write: bool,
) -> Result<LockGuard> {
    let key = engine.key(resource)?;
    let resources = std::slice::from_ref(&resource);
    let keys = RwKeys::of(&key);
    let shape = if write {
        Shape::Write {
            keys,
            intent: waits.then(new_token),
            intent_ms: engine.config.intent_ms(),
        }
    } else {
        Shape::Read(keys)
    };
    start(
        engine,
        resources,
        (key, shape),
        ttl,
        How::plain(engine, waits),
    )
    .await
}

/// The start shared by [`acquire`], [`acquire_rw`] and a lock on several
/// resources (`sets.rs`): the lock's key (the first of several) is
/// checked, and `shape` says what kind of lock it is; `how` how it waits
/// and whether it is fenced.
pub(crate) async fn start(
    engine: &Arc<Engine>,
    resources: &[&[u8]],
    (key, shape): (Arc<[u8]>, Shape),
    ttl: Duration,
    how: How,
) -> Result<LockGuard> {
    let called = Instant::now();
    let resource_label = engine.config.metrics_resource_label;
    let meter = Meter::new(
        kind(&shape),
        resource_label.then(|| show_resources(resources).into()),
    );
    let taken = take(
        engine,
        resources,
        (key, shape),
        ttl,
        how,
        (called, meter.clone()),
    )
    .await;
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

/// [`start`] without the metrics, for a call made at `called`, with the
/// guard's metrics in `meter`.
pub(crate) async fn take(
    engine: &Arc<Engine>,
    resources: &[&[u8]],
    (key, shape): (Arc<[u8]>, Shape),
    ttl: Duration,
    how: How,
    (called, meter): (Instant, Meter),
) -> Result<LockGuard> {
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
    let ttl = engine.ttl(ttl)?;
    Error::ensure_runtime()?;
    first_contact(engine, resources, deadline).await?;
    let span = tracing::debug_span!("quorlock.lock", resource = %show_resources(resources), ttl_ms = ttl.millis);
    // Only a plain lock queues; the others retry.
    let queues = waits && matches!(shape, Shape::One);
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

/// One `lock` or `try_lock` call under way.
struct Acquisition<'a> {
    engine: &'a Arc<Engine>,
    /// The lock's key (of a lock on several resources, its first).
    key: Arc<[u8]>,
    /// What kind of lock it is.
    shape: Shape,
    /// The resource names, for errors and logs.
    resources: &'a [&'a [u8]],
    ttl: Ttl,
    /// No round starts after it; `None`: one round (`try_lock`).
    deadline: Option<Instant>,
    /// A `lock` call's place in the queue; `None` for `try_lock` and for a
    /// lock on several resources.
    waiting: Option<Waiting>,
    /// Whether a lost round is followed by another after the jittered retry
    /// delay, without a queue (`lock_all`, `read`, `write`).
    retries: bool,
    /// A waiting writer's intent, removed from every node once the call ends.
    intent: Option<Intent>,
    attempt: u32,
    /// Set when a handoff notification ended the wait: the next round is a
    /// claim, sent to each node once it notified.
    claiming: bool,
    /// The lock's metrics, for its guard.
    meter: Meter,
    /// Whether the lock is fenced.
    fencing: Fencing,
    /// The tokens of the caller's plain locks that its rounds gather into a
    /// lock on several resources (see `sets.rs`).
    gathers: Option<Arc<[Arc<str>]>>,
}

impl Acquisition<'_> {
    /// Attempts until one wins or the patience ends.
    async fn run(mut self) -> Result<LockGuard> {
        loop {
            self.attempt = self.attempt.saturating_add(1);
            let mut in_flight = self.round().await;
            let won = in_flight.round.votes.has_quorum()
                && self.ttl.validity_after(in_flight.decided_after).is_some();
            let fence_failure = if won {
                match self.fence(&mut in_flight).await {
                    Ok(fencing_token) => return Ok(self.won(in_flight, fencing_token)),
                    Err(failure) => Some(failure),
                }
            } else {
                None
            };
            let error = self.clean_up(&mut in_flight, fence_failure).await;
            self.pause(error).await?;
        }
    }

    /// The fencing counter's key for `key`, where this lock is fenced (the
    /// client's fencing, or a leader's term).
    fn counter_key(&self, key: &[u8]) -> Option<Arc<[u8]>> {
        let fenced = match self.fencing {
            Fencing::AsConfigured => self.engine.config.fencing,
            Fencing::Always => true,
            Fencing::Never => false,
        };
        (self.engine.config).counter_key_when(key, fenced)
    }

    /// Takes this attempt's turn: the request for the round, and for a
    /// claim, the gates that send it to each node once it notified.
    ///
    /// A caller's first round is a plain `SET NX`: free when nobody waits (a
    /// lock with waiters is held or handed on, never absent, so it does not
    /// jump the queue); the queue script from the second round on, or from
    /// the first when this client's last call found the key taken or
    /// another call of it is making its plain first round there (`Busy`).
    fn take_turn(&mut self, lock: LockId) -> (Request, Option<Gates>) {
        let (ttl_ms, counter_key) = (self.ttl.millis, self.counter_key(&lock.key));
        let claiming = std::mem::take(&mut self.claiming);
        let (gates, queued) = match &mut self.waiting {
            Some(waiting) => waiting.turn(claiming),
            None => (None, None),
        };
        // A waiting writer's first round, unfenced, goes without a script
        // (see "Read-write locks" above); its later rounds prune the ended
        // readers and leave the intent.
        let first_write = self.attempt == 1
            && counter_key.is_none()
            && matches!(
                &self.shape,
                Shape::Write {
                    intent: Some(_),
                    ..
                }
            );
        // A reader's first round likewise (see `read_round.rs`); a reader
        // refused by a writer retries by the script, which leaves nothing.
        let first_read = self.attempt == 1 && matches!(&self.shape, Shape::Read(_));
        let request = match (queued, &self.gathers) {
            (_, Some(held)) => Request::Gather {
                lock,
                ttl_ms,
                counter_key,
                held: held.clone(),
            },
            (None, None) if first_write => Request::FirstWrite { lock, ttl_ms },
            (None, None) if first_read => Request::FirstRead { lock, ttl_ms },
            (None, None) => Request::Acquire {
                lock,
                ttl_ms,
                counter_key,
            },
            (Some((waiter, ticket)), None) => Request::Wait {
                lock,
                ttl_ms,
                counter_key,
                waiter,
                ticket,
            },
        };
        (request, gates)
    }

    /// Makes one round, until it is decided. Dropped mid-round (the call
    /// cancelled), the round finishes in the background and then releases
    /// whatever it set.
    async fn round(&mut self) -> InFlight {
        let lock = LockId::fresh(&self.key, &self.shape);
        let (request, gates) = self.take_turn(lock.clone());
        // Before the start: the wait for a permit is not the round's. It
        // ends at the call's deadline: the round then goes without one.
        let permit = match (&request, self.deadline) {
            (Request::Wait { .. }, Some(deadline)) => {
                let engine = &self.engine;
                let lane = match &gates {
                    Some(gates) if gates.told() => &engine.claim_rounds,
                    Some(_) => &engine.look_rounds,
                    None => &engine.join_rounds,
                };
                crate::engine::lane_permit(lane, Some(deadline)).await
            }
            _ => None,
        };
        let start = Instant::now();
        let to = gates.as_ref().map_or(To::All, To::Gated);
        let waiter = match &request {
            Request::Wait { waiter, .. } => Some(waiter.clone()),
            _ => None,
        };
        let mut in_flight = InFlight {
            // Read before the round is sent: see `changes.rs`.
            changes_before: self.engine.standings.changes().now(),
            engine: self.engine.clone(),
            round: self.engine.ask(&request, to),
            lock,
            start,
            decided_after: Duration::ZERO,
            settled: false,
            waiter,
        };
        in_flight.round.collect(Until::Decided).await;
        drop(permit);
        if let Some(gates) = &gates {
            gates.close();
        }
        in_flight.decided_after = start.elapsed();
        meter::round("acquire", in_flight.decided_after);
        let (elapsed, votes) = (in_flight.decided_after, in_flight.round.votes);
        if let Some(intent) = &mut self.intent {
            // A refusal may have left the intent; the call's end removes it.
            intent.left |= votes.refused > 0 || votes.failed > 0;
        }
        tracing::debug!(
            attempt = self.attempt,
            granted = votes.granted,
            refused = votes.refused,
            failed = votes.failed,
            quorum = votes.quorum,
            elapsed_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
            "acquire round"
        );
        if self.attempt == 1 && self.waiting.is_some() {
            // What the next call's first round should be (see `Busy`).
            if votes.has_quorum() {
                self.engine.busy.note(&self.key, false);
            } else if votes.refused > 0 {
                self.engine.busy.note(&self.key, true);
            }
        }
        in_flight
    }

    /// With fencing on, completes a won round: the fencing token `T` is the
    /// highest counter the granting nodes returned. A node whose counted
    /// grant returned `T` itself already holds a counter of at least `T`
    /// beside our key (its `INCR` came right after our `SET`); every
    /// other granting node gets a write-back (`counter = max(counter, T)`,
    /// only while the node still holds our key). Succeeds with `Some(T)` if
    /// those two together make a quorum and validity is left; `Ok(None)` with
    /// fencing off (no round trip). When a quorum of grants returned `T` (one
    /// client's rounds reach every node in the same order, so its nodes'
    /// counters move together, and at one node always), no write-back is
    /// sent at all.
    async fn fence(
        &self,
        in_flight: &mut InFlight,
    ) -> std::result::Result<Option<u64>, FenceFailure> {
        let Some(counter_key) = self.counter_key(&in_flight.lock.key) else {
            return Ok(None);
        };
        // A reader has no fencing token (see `Redlock::read`).
        if matches!(self.shape, Shape::Read(_)) {
            return Ok(None);
        }
        // A won round's counted grants carry counters: the quorum guarantees one.
        let fencing_token = in_flight.round.highest_counter().unwrap_or(0);
        let request = Request::WriteBack {
            lock: in_flight.lock.clone(),
            counter_key: counter_key.clone(),
            fencing_token,
        };
        let at_token = in_flight.round.counted_at(fencing_token);
        // Nodes that did not grant are not part of the holding set.
        let behind = in_flight.round.nodes(|answer| {
            answer.is_some_and(Answer::is_granted)
                && !matches!(answer, Some(Answer::Granted(Some(counter))) if *counter == fencing_token)
        });
        let mut round = self.engine.ask(
            &request,
            To::Settled {
                ask: &behind,
                done: &at_token,
            },
        );
        round.collect(Until::Decided).await;
        let elapsed = in_flight.start.elapsed();
        tracing::debug!(
            at_token = round.votes.granted.min(at_token.len()),
            written_back = round.votes.granted.saturating_sub(at_token.len()),
            quorum = round.votes.quorum,
            "fencing write-back"
        );
        let valid = self.ttl.validity_after(elapsed).is_some();
        if round.votes.has_quorum() && valid && fencing_token > 0 {
            Ok(Some(fencing_token))
        } else {
            Err(FenceFailure { round, elapsed })
        }
    }

    /// The round won: a waiter that joined the queue leaves it where its
    /// entry may remain, and a guard takes over the keys.
    fn won(&mut self, mut in_flight: InFlight, fencing_token: Option<u64>) -> LockGuard {
        if let Some(waiting) = self.waiting.take().filter(|waiting| waiting.joined) {
            waiting.won(in_flight.round.finish_later());
        }
        in_flight.settled = true;
        let holding = Holding::new(
            in_flight.round.counted_grants(),
            in_flight.changes_before,
            in_flight.round.votes.quorum,
        );
        LockGuard::acquired(
            self.engine.clone(),
            in_flight.lock.clone(),
            Lease::new(self.ttl, in_flight.start, self.meter.clone(), holding),
            fencing_token,
        )
    }

    /// The round is lost: releases what it set and returns why it failed.
    /// A waiter keeps its place: the highest ticket a node gave it is its
    /// ticket from now on, and a node that gave another (or set the key)
    /// learns it next round.
    async fn clean_up(&mut self, in_flight: &mut InFlight, fenced: Option<FenceFailure>) -> Error {
        let elapsed = in_flight.decided_after;
        // Every node's answer (or timeout) first, as the release needs
        // anyway: the tickets of the nodes that answered after the round
        // was decided count too. Left out, a later node's higher ticket
        // was never written back, and that node sorted the waiter behind
        // others until its claim: heads that differ, claims that split.
        in_flight.round.collect(Until::All).await;
        let (highest, agree) = in_flight.round.tickets();
        let granted = in_flight.round.votes.granted;
        let place = match &mut self.waiting {
            Some(waiting) if waiting.joined => waiting.keep_place(highest, agree, granted),
            Some(waiting) => {
                // The plain first round found the lock taken: join now.
                waiting.rewrite = true;
                Place::None
            }
            None => Place::None,
        };
        in_flight.release(place).await;
        match fenced {
            Some(mut fenced) => failure(
                self.resources,
                &mut fenced.round,
                fenced.elapsed,
                self.attempt,
            ),
            None => failure(self.resources, &mut in_flight.round, elapsed, self.attempt),
        }
    }

    /// Waits before the next attempt: for a handoff (the lock is held
    /// elsewhere) or the jittered retry delay (too few nodes answered);
    /// `Err(error)` when no attempt may follow.
    async fn pause(&mut self, error: Error) -> Result<()> {
        let Some(deadline) = self.deadline else {
            return Err(error);
        };
        if Instant::now() >= deadline || (self.waiting.is_none() && !self.retries) {
            return Err(error);
        }
        // A waiter queued on some node waits for its handoff even when too
        // few nodes answered: the nodes that queued it will hand it the
        // lock, and its claim round queues it on the others (under its
        // ticket) too. A blind retry would only add to the load that made
        // the nodes slow.
        let handoff =
            |waiting: &Waiting| error.is_contended() || (error.is_unavailable() && waiting.queued);
        if let Some(waiting) = self.waiting.as_mut().filter(|waiting| handoff(waiting)) {
            // Grants that did not count (a node recovering from a restart or
            // failover) leave the reservations standing: waiting for them
            // would claim again at once, round after round, for the whole
            // grace. The retry delay paces those claims.
            if !error.not_counted().is_empty() {
                retry_delay(&self.engine.config, deadline).await;
            }
            if !std::mem::take(&mut waiting.rewrite) {
                let listening = waiting.listening.as_mut();
                self.claiming = await_handoff(&self.engine.config, listening, deadline).await;
            }
        } else {
            retry_delay(&self.engine.config, deadline).await;
            // While too few nodes may be asked (they timed out and have not
            // answered their probe since), a round would fail at once: wait
            // for one to answer instead of spinning rounds that only cost
            // the client's CPU, which slows the nodes' answers further.
            let quorum = quorum::quorum(self.engine.nodes.len());
            self.engine.standings.askable(quorum, deadline).await;
        }
        // No round starts after the deadline.
        if Instant::now() >= deadline {
            return Err(error);
        }
        Ok(())
    }
}

/// Sleeps for the jittered retry delay, or until `deadline`.
pub(crate) async fn retry_delay(config: &crate::config::Config, deadline: Instant) {
    let unit = rand::rng().random::<f64>();
    let delay = quorum::jittered(config.retry_delay, config.retry_jitter, unit);
    tokio::time::sleep_until((Instant::now() + delay).min(deadline).into()).await;
}

/// Waits until a node told this waiter that it reserved the lock for it
/// (`true`: the next round is a claim, sent to each node once it told, or
/// [`CLAIM_GRACE`](queue::CLAIM_GRACE) after the round started), or until
/// `deadline` (`false`). The waiter makes no round meanwhile: its place
/// lives with its client's session, and what no release announces (a key
/// that expired, a foreign release, a dead waiter ahead) the session's
/// checks hand on to it with a notification (see `session.rs`). Without
/// notifications it waits for its next refresh round, after the jittered
/// retry delay or [`REFRESH_INTERVAL`](queue::REFRESH_INTERVAL), whichever
/// is shorter.
async fn await_handoff(
    config: &crate::config::Config,
    listening: Option<&mut Listening>,
    deadline: Instant,
) -> bool {
    let Some(listening) = listening else {
        let unit = rand::rng().random::<f64>();
        let refresh = quorum::jittered(config.retry_delay, config.retry_jitter, unit)
            .min(queue::REFRESH_INTERVAL);
        tokio::time::sleep_until((Instant::now() + refresh).min(deadline).into()).await;
        return false;
    };
    loop {
        if listening.reserved() > 0 {
            return true;
        }
        tokio::select! {
            _ = listening.changed() => {}
            _ = tokio::time::sleep_until(deadline.into()) => return false,
        }
    }
}

/// Why a fenced acquisition failed after its quorum: the write-back round's
/// outcome and how long everything took.
struct FenceFailure {
    round: Round,
    elapsed: Duration,
}

/// The error for a failed acquire round.
fn failure(resources: &[&[u8]], round: &mut Round, elapsed: Duration, attempts: u32) -> Error {
    let (votes, last_error) = round.tally();
    let not_counted = round.take_not_counted();
    let failed = round.take_failed();
    let resource = show_resources(resources);
    if votes.has_quorum() {
        Error::NoValidity {
            resource,
            votes,
            elapsed,
            attempts,
        }
    } else if votes.failures_rule_out_quorum() {
        Error::Unavailable {
            resource,
            votes,
            attempts,
            source: last_error,
            not_counted,
            failed,
        }
    } else {
        Error::Contended {
            resource,
            votes,
            attempts,
            source: last_error,
            not_counted,
            failed,
        }
    }
}

/// A `lock` call's place in the queue on the nodes. Dropped (the call ends
/// without the lock: it gave up, or its future was dropped), it leaves the
/// queue on every node in the background.
struct Waiting {
    engine: Arc<Engine>,
    key: Arc<[u8]>,
    /// The waiter id, made when it is first needed (a call whose first
    /// round wins never needs one).
    waiter: Option<Arc<str>>,
    /// The ticket every node should hold for this waiter; 0 before any gave one.
    ticket: u64,
    listening: Option<Listening>,
    /// The session's interest in the lock key while the waiter is queued:
    /// its heartbeat keeps the waiter's entry live and checks the key.
    watching: Option<Watching>,
    /// Whether a round of this waiter went out (so that nodes may queue it).
    joined: bool,
    /// Whether a node answered its last round by queueing it.
    queued: bool,
    /// Before the call's first round, which is a plain `SET NX` unless the
    /// key is busy (see `queue::Busy`).
    first: bool,
    /// Set when nodes hold other tickets than `ticket`: the next round goes
    /// at once, to write it.
    rewrite: bool,
}

impl Waiting {
    fn new(engine: &Arc<Engine>, key: &Arc<[u8]>) -> Self {
        Waiting {
            engine: engine.clone(),
            key: key.clone(),
            waiter: None,
            ticket: 0,
            listening: None,
            watching: None,
            joined: false,
            queued: false,
            first: true,
            rewrite: false,
        }
    }

    /// The waiter id, listening (with notifications on) for handoffs to it
    /// from before its first round in the queue: one that came between
    /// that round's answer and a later start would be missed until its
    /// reservation expired and a check handed the key on again.
    fn join(&mut self) -> &Arc<str> {
        if self.listening.is_none() && self.engine.config.release_notifications {
            let waiter = self.id().clone();
            self.listening = Some(self.engine.notifications.listen(&waiter));
        }
        self.id()
    }

    /// The waiter id.
    fn id(&mut self) -> &Arc<str> {
        let engine = &self.engine;
        let key = &self.key;
        self.waiter.get_or_insert_with(|| {
            engine
                .notifications
                .new_waiter(&engine.session.live_key(key))
        })
    }

    /// The waiter's part of its next turn: the gates of a claim (when
    /// `claiming`, with notifications on), and its id and ticket when the
    /// round is one in the queue (every round but a plain first one).
    fn turn(&mut self, claiming: bool) -> (Option<Gates>, Option<(Arc<str>, u64)>) {
        // The handoffs seen so far, forgotten: this round's outcome replaces them.
        let gates = self.listening.as_mut().and_then(|listening| {
            let notified = listening.take();
            claiming.then(|| Gates::new(listening, notified, Instant::now() + queue::CLAIM_GRACE))
        });
        // Of this client's calls on one key, one makes the plain first
        // round at a time: the key counts as taken while it is under way,
        // so that the others join the queue (in waves) instead of sending
        // a burst of `SET NX` that the holder's nodes would refuse.
        if std::mem::replace(&mut self.first, false) && !self.engine.busy.is_busy(&self.key) {
            self.engine.busy.note(&self.key, true);
            return (gates, None);
        }
        self.joined = true;
        if self.watching.is_none() {
            self.watching = Some(self.engine.session.watch(&self.key));
        }
        (gates, Some((self.join().clone(), self.ticket)))
    }

    /// The waiter's entry in the queue, to leave it: the key, with the
    /// waiter id as the token; `None` before it had an id.
    fn entry(&self) -> Option<LockId> {
        let waiter = self.waiter.clone()?;
        Some(LockId::plain(self.key.clone(), waiter))
    }

    /// After a lost round in the queue, in which the nodes that queued the
    /// waiter gave it at most ticket `highest` (all the same one: `agree`)
    /// and `granted` nodes set the key: the place to keep on the nodes.
    fn keep_place(&mut self, highest: Option<u64>, agree: bool, granted: usize) -> Place {
        self.queued = highest.is_some();
        let ticket = self.ticket.max(highest.unwrap_or(0));
        self.rewrite =
            highest.is_some_and(|high| !agree || high != ticket) || (ticket == 0 && granted > 0);
        self.ticket = ticket;
        Place::Keep(self.id().clone(), ticket)
    }

    /// The lock is ours: the grants removed our entry on the nodes that
    /// granted; once the round's last answers are in (`answers`), the other
    /// nodes (queued, failed, slow) drop it in the background.
    fn won(mut self, answers: impl Future<Output = Vec<Option<Answer>>> + Send + 'static) {
        self.joined = false;
        let Some(entry) = self.entry() else {
            return;
        };
        let engine = self.engine.clone();
        let leave = async move {
            let answers = answers.await;
            let send_to = NodeSet::of(&answers, |answer| !answer.is_some_and(Answer::is_granted));
            if !send_to.is_empty() {
                leave(&engine, &entry, To::Only(&send_to)).await;
            }
        };
        if !self.engine.background.spawn(leave) {
            tracing::debug!("lock call ended outside a tokio runtime: its queue entries expire");
        }
    }
}

/// Takes a waiter out of the queue (`entry`: the key, and the waiter id as
/// the token) on the nodes `to` names, passing on a reservation made for it.
async fn leave(engine: &Engine, entry: &LockId, to: To<'_>) {
    // The waiter id is never a token: only a reservation for it matches.
    let place = Place::Leave(entry.token.clone());
    engine.release(entry, place, to, Until::All).await;
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if !self.joined {
            return;
        }
        let Some(entry) = self.entry() else {
            return;
        };
        let engine = self.engine.clone();
        let leave = async move { leave(&engine, &entry, To::All).await };
        if !self.engine.background.spawn(leave) {
            tracing::debug!("lock call ended outside a tokio runtime: its queue entries expire");
        }
    }
}

/// A waiting writer's intent (see `Redlock::write`): once a round of the
/// call was refused (or failed) anywhere, the call's end, however it ends,
/// removes the intent from every node in the background (where it is still
/// ours: a compare-and-delete), so that readers need not wait for its TTL.
struct Intent {
    engine: Arc<Engine>,
    /// The intent key, with the writer's intent id as the token.
    entry: LockId,
    /// Whether a round may have left it on a node.
    left: bool,
}

impl Drop for Intent {
    fn drop(&mut self) {
        if !self.left {
            return;
        }
        let (engine, entry) = (self.engine.clone(), self.entry.clone());
        let remove = async move {
            engine
                .release(&entry, Place::None, To::All, Until::All)
                .await;
        };
        if !self.engine.background.spawn(remove) {
            tracing::debug!("write call ended outside a tokio runtime: its intent expires");
        }
    }
}

/// One acquire round in flight and the lock it asked for. Until it is won
/// or released, dropping it (the `lock` call was cancelled mid-round) leaves
/// a background task that waits for every node's answer to the round, so
/// that no `SET` (or queue entry) of it can land afterwards, and then
/// releases the key on every node, and takes the waiter out of the queue.
struct InFlight {
    engine: Arc<Engine>,
    lock: LockId,
    round: Round,
    /// When the round started: its validity counts from here.
    start: Instant,
    /// The client's server changes before the round started.
    changes_before: u64,
    /// How long the round took to be decided.
    decided_after: Duration,
    /// Won (a guard took over the keys) or released.
    settled: bool,
    /// The waiter whose round this is, for a `lock` call.
    waiter: Option<Arc<str>>,
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
    async fn release(&mut self, place: Place) {
        self.round.collect(Until::All).await;
        let send_to = self
            .round
            .nodes(|answer| !answer.is_some_and(Answer::did_nothing));
        if !send_to.is_empty() {
            let granted = self
                .round
                .nodes(|answer| answer.is_some_and(Answer::is_granted));
            let to = To::Only(&send_to);
            self.engine
                .release(&self.lock, place, to, Until::Answered(granted))
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
        let place = self.waiter.take().map_or(Place::None, Place::Leave);
        let cleanup = async move {
            stragglers.await;
            engine.release(&lock, place, To::All, Until::All).await;
        };
        if !self.engine.background.spawn(cleanup) {
            tracing::warn!(
                resource = %show_resource(&self.lock.key),
                "lock call dropped outside a tokio runtime; keys its round set expire by their ttl"
            );
        }
    }
}

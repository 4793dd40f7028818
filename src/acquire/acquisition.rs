//! One acquire call under way ([`Acquisition`]), as named steps: take the
//! turn, make the round, fence it, or clean it up and pause.
//!
//! # Fencing
//!
//! With fencing on, a won round is *fenced* before it becomes a guard
//! ([`Acquisition::fence`]): its token is made larger than every earlier
//! holder's.
//!
//! **How.** Each node keeps one counter (not one per resource). The
//! acquisition's `SET NX` goes with an `INCR` of the counter, pipelined in the
//! same request (the queue script does both in one step); a refused `SET`
//! increments it too, which is harmless, since counters need only grow. A
//! counter the node lost (restarted without persistence: missing, so `INCR`
//! gives 1, or small after a few refused rounds) is seeded from the server's
//! `TIME` in microseconds before it makes a token: a grant whose counter is
//! below 2^40 asks the seed script for `max(counter, TIME)` plus one, while
//! our key is there. The token `T` is the highest counter among the granting
//! nodes. Before the guard is returned, every granting node
//! whose own counter was below `T` gets a write-back, `counter = max(counter,
//! T)`, done only while the node's key still holds our lock token; a node whose
//! grant returned `T` itself needs none (its counter reached `T` by the `INCR`
//! that followed our `SET`, while our key was there). Nodes that refuse the write-back leave the
//! holding set; below a quorum the acquisition fails and is released. When a
//! quorum of grants returned `T` already (one client's rounds reach all nodes
//! in the same order, so their counters move together; one node always), no
//! write-back is sent at all. The validity is checked again after the
//! write-back.
//!
//! **Why tokens increase.** Let holder A get token `T_A`: a quorum `W_A` of
//! nodes either returned `T_A` with their grant or took A's write-back, so
//! each node in `W_A` had a counter ≥ `T_A` while it held A's key. Let B be a later holder of the resource, granted by
//! a quorum `G_B`. Two quorums of the same N nodes share at least one node
//! `n`. At `n`, B's `SET NX` succeeded, so A's key was gone there, so A's
//! grant or write-back (done while A's key was there) came first: `n`'s counter was
//! already ≥ `T_A` when B's script incremented it. Hence the counter B got
//! from `n` is > `T_A`, and `T_B`, a maximum that includes it, is > `T_A`.
//!
//! The `INCR` is not atomic with the `SET` before it: our key could leave
//! node `n` between the two only by expiring, and a key that expires before
//! the `INCR`'s reply leaves the round no validity (the drift bound of the
//! lock itself), so a holder's counter on `n` was always taken while its key
//! was there.
//!
//! **Assumptions.** The argument needs node `n` to keep its counter between
//! A's write-back and B's acquisition. A node that restarts without
//! persistence loses it and reseeds from its clock: tokens still increase as
//! long as a node's clock (in µs) is ahead of the largest token handed out,
//! that is, as long as counters grow by fewer than one per microsecond and the
//! nodes' clocks do not step back or differ by more than the time since the
//! counters were seeded. It also relies on the same rules as the lock itself
//! (independent masters; a restarted node held back for the restart grace,
//! kept down for a TTL, or persistent).
//!
//! **Not covered.** The token protects only a resource that checks it. It
//! does not order holders of *different* resources, and it says nothing about
//! a holder that keeps running without writing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::how::Fencing;
use super::in_flight::InFlight;
use super::rw::Intent;
use crate::answer::Answer;
use crate::changes::Holding;
use crate::engine::{Engine, To};
use crate::error::{Error, Result, show_resources};
use crate::guard::LockGuard;
use crate::lease::Lease;
use crate::meter::{self, Meter};
use crate::notify::Gates;
use crate::queue::entries::Place;
use crate::queue::waiter::{Waiting, await_handoff};
use crate::quorum::{self, Ttl};
use crate::request::{LockId, Request, Shape};
use crate::round::{Round, Until};

/// One `lock` or `try_lock` call under way.
pub(super) struct Acquisition<'a> {
    pub(super) engine: &'a Arc<Engine>,
    /// The lock's key (of a lock on several resources, its first).
    pub(super) key: Arc<[u8]>,
    /// What kind of lock it is.
    pub(super) shape: Shape,
    /// The resource names, for errors and logs.
    pub(super) resources: &'a [&'a [u8]],
    pub(super) ttl: Ttl,
    /// No round starts after it; `None`: one round (`try_lock`).
    pub(super) deadline: Option<Instant>,
    /// A `lock` call's place in the queue; `None` for `try_lock` and for a
    /// lock on several resources.
    pub(super) waiting: Option<Waiting>,
    /// Whether a lost round is followed by another after the jittered retry
    /// delay, without a queue (`lock_all`, `read`, `write`).
    pub(super) retries: bool,
    /// A waiting writer's intent, removed from every node once the call ends.
    pub(super) intent: Option<Intent>,
    pub(super) attempt: u32,
    /// Set when a handoff notification ended the wait: the next round is a
    /// claim, sent to each node once it notified.
    pub(super) claiming: bool,
    /// The lock's metrics, for its guard.
    pub(super) meter: Meter,
    /// Whether the lock is fenced.
    pub(super) fencing: Fencing,
    /// The tokens of the caller's plain locks that its rounds gather into a
    /// lock on several resources (see `sets.rs`).
    pub(super) gathers: Option<Arc<[Arc<str>]>>,
}

impl Acquisition<'_> {
    /// Attempts until one wins or the patience ends.
    ///
    /// The steps after a lost round are boxed: the clean-up, with its
    /// release, is nearly twice a round's size and the pause about as
    /// large, and unboxed they would make every call's future, moved and
    /// kept by every caller, that much larger for what only a lost round
    /// runs.
    pub(super) async fn run(mut self) -> Result<LockGuard> {
        loop {
            self.attempt = self.attempt.saturating_add(1);
            let mut in_flight = self.round().await;
            let won = in_flight.round.votes.has_quorum()
                && self.ttl.validity_after(in_flight.decided_after).is_some();
            let fence_failure = if won {
                match self.fence(&mut in_flight).await {
                    Ok(fencing_token) => return Ok(self.won(&mut in_flight, fencing_token)),
                    Err(failure) => Some(failure),
                }
            } else {
                None
            };
            let error = Box::pin(self.clean_up(&mut in_flight, fence_failure)).await;
            Box::pin(self.pause(error)).await?;
        }
    }

    /// The fencing counter's key for `key`, where this lock is fenced (the
    /// client's fencing, or a leader's term).
    pub(super) fn counter_key(&self, key: &[u8]) -> Option<Arc<[u8]>> {
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
    pub(super) fn take_turn(&mut self, lock: LockId) -> (Request, Option<Gates>) {
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
    pub(super) async fn round(&mut self) -> InFlight {
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
    pub(super) async fn fence(
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
            To::Remaining {
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
    pub(super) fn won(
        &mut self,
        in_flight: &mut InFlight,
        fencing_token: Option<u64>,
    ) -> LockGuard {
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
            Arc::new(Lease::new(
                self.ttl,
                in_flight.start,
                self.meter.clone(),
                holding,
            )),
            in_flight.round.reached(),
            fencing_token,
        )
    }

    /// The round is lost: releases what it set and returns why it failed.
    /// A waiter keeps its place: the highest ticket a node gave it is its
    /// ticket from now on, and a node that gave another (or set the key)
    /// learns it next round.
    pub(super) async fn clean_up(
        &mut self,
        in_flight: &mut InFlight,
        fenced: Option<FenceFailure>,
    ) -> Error {
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
                Place::NoEntry
            }
            None => Place::NoEntry,
        };
        in_flight.release_lost_round(place).await;
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
    pub(super) async fn pause(&mut self, error: Error) -> Result<()> {
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
///
/// Cancel safety: cancel safe (it only sleeps).
pub(crate) async fn retry_delay(config: &crate::config::Config, deadline: Instant) {
    config.sleep_retry_pause(Duration::MAX, deadline).await;
}

/// Why a fenced acquisition failed after its quorum: the write-back round's
/// outcome and how long everything took.
pub(super) struct FenceFailure {
    pub(super) round: Round,
    pub(super) elapsed: Duration,
}

/// The error for a failed acquire round.
pub(super) fn failure(
    resources: &[&[u8]],
    round: &mut Round,
    elapsed: Duration,
    attempts: u32,
) -> Error {
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

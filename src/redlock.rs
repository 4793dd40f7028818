//! [`Redlock`]: the client, its rounds to all nodes, and the acquire loop.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use redis::Client;
use tracing::Instrument;

use crate::background::Background;
use crate::builder::{Config, RedlockBuilder};
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::node::Node;
use crate::notify::{Listening, Notifications};
use crate::queue::{self, Place};
use crate::quorum::{self, MAX_TTL, Votes};
use crate::round::{Answer, Round, Until};
use crate::standing::{NotReady, Standings};
use crate::status::LockStatus;
use futures::FutureExt;

/// The longest resource name accepted, in bytes.
pub const MAX_RESOURCE_LEN: usize = 64 * 1024;

/// How many characters of a resource name errors and logs show.
const SHOWN_RESOURCE_CHARS: usize = 128;

/// A distributed lock client over N independent Redis nodes.
///
/// Cheap to clone (an `Arc` inside); clones share the node connections. See
/// the [crate docs](crate) for the algorithm and its guarantees.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use quorlock::Redlock;
///
/// # async fn demo() -> Result<(), quorlock::Error> {
/// let redlock = Redlock::new([
///     "redis://127.0.0.1:7001",
///     "redis://127.0.0.1:7002",
///     "redis://127.0.0.1:7003",
/// ])?;
/// let guard = redlock.lock("stock:item-42", Duration::from_secs(10)).await?;
/// // ... the critical section ...
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Redlock {
    inner: Arc<Inner>,
}

/// What every clone of a [`Redlock`] and every guard shares.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) nodes: Arc<[Node]>,
    pub(crate) config: Config,
    /// Whose votes count (see `standing.rs`).
    pub(crate) standings: Arc<Standings>,
    notifications: Arc<Notifications>,
    /// Which keys `lock` last found taken.
    busy: queue::Busy,
    /// Releases and straggling calls that run after their caller moved on.
    pub(crate) background: Background,
}

/// A TTL checked against the limits, in whole milliseconds, with its drift allowance.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ttl {
    pub(crate) ttl: Duration,
    pub(crate) millis: u64,
    pub(crate) drift: Duration,
}

impl Redlock {
    /// A client over the nodes at `urls` (`redis://`, `rediss://` or
    /// `redis+unix://`), with the default options. One URL gives the classic
    /// single-instance lock (quorum 1).
    ///
    /// # Errors
    ///
    /// As [`RedlockBuilder::build`]: no URLs, or one that does not parse.
    pub fn new<I, S>(urls: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::builder(urls).build()
    }

    /// A builder over the nodes at `urls`, to set options before
    /// [`build`](RedlockBuilder::build).
    pub fn builder<I, S>(urls: I) -> RedlockBuilder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        RedlockBuilder::from_urls(urls)
    }

    /// A client over `redis::Client`s you configured yourself (TLS, custom
    /// credentials), with the default options. Use
    /// [`RedlockBuilder::from_clients`] to change them.
    ///
    /// # Errors
    ///
    /// As [`RedlockBuilder::build`].
    pub fn from_clients<I>(clients: I) -> Result<Self>
    where
        I: IntoIterator<Item = Client>,
    {
        RedlockBuilder::from_clients(clients).build()
    }

    pub(crate) fn from_parts(
        nodes: Vec<Node>,
        config: Config,
        background: Background,
        standings: Arc<Standings>,
    ) -> Self {
        let notifications = Arc::new(Notifications::new(
            nodes.iter().map(|node| node.client().clone()).collect(),
            config.connect_timeout,
            new_token(),
        ));
        let nodes: Arc<[Node]> = nodes.into();
        let record_key = standings.record_key();
        let weak = Arc::downgrade(&nodes);
        standings.set_recorder(crate::standing::Recorder(Arc::new(move |index, run_id| {
            let (weak, record_key) = (weak.clone(), record_key.clone());
            async move {
                match weak.upgrade() {
                    Some(nodes) => nodes[index].record_incarnation(record_key, run_id).await,
                    None => Ok(()),
                }
            }
            .boxed()
        })));
        Redlock {
            inner: Arc::new(Inner {
                nodes,
                config,
                standings,
                notifications,
                busy: queue::Busy::new(),
                background,
            }),
        }
    }

    /// How many nodes the lock spans.
    pub fn node_count(&self) -> usize {
        self.inner.nodes.len()
    }

    /// How many nodes must grant a lock: `node_count() / 2 + 1`.
    pub fn quorum(&self) -> usize {
        quorum::quorum(self.inner.nodes.len())
    }

    /// The Redis key that holds the lock on `resource`: the key prefix followed
    /// by the resource name.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`] for an empty name or one longer than
    /// [`MAX_RESOURCE_LEN`].
    pub fn key(&self, resource: impl AsRef<[u8]>) -> Result<Vec<u8>> {
        Ok(self.inner.key_for(resource.as_ref())?.to_vec())
    }

    /// Asks every node what it holds for `resource`: free, held (token prefix
    /// and remaining TTL) or failed; whether a quorum holds it; and, for a
    /// node whose votes do not count now (recovering from a restart, say),
    /// why. A fresh client first checks every node (as its first lock
    /// would, bounded by the connect timeout); then each node is given the
    /// connect timeout to answer.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`], [`Error::NoRuntime`]. Node failures are
    /// part of the status, not errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn status(&self, resource: impl AsRef<[u8]>) -> Result<LockStatus> {
        let key = self.inner.key_for(resource.as_ref())?;
        Error::ensure_runtime()?;
        // A fresh client's first checks (and their recording) end first, so
        // that the standings shown are settled. Misconfigured nodes and
        // nodes that did not answer in time are shown as they are.
        let inner = &self.inner;
        let deadline = Instant::now() + inner.config.connect_timeout;
        let _ = inner
            .standings
            .ensure(|index| inner.nodes[index].connect(), Some(deadline))
            .await;
        let answers = futures::future::join_all(self.inner.nodes.iter().map(|node| {
            let name = node.name().to_owned();
            node.inspect(key.clone()).map(move |answer| (name, answer))
        }))
        .await;
        let standings = &self.inner.standings;
        let not_counted = (0..self.inner.nodes.len()).map(|index| standings.not_counted(index));
        Ok(LockStatus::from_answers(answers, self.quorum()).with_standing(not_counted))
    }

    /// Takes the lock on `resource` for `ttl`, waiting for it until the
    /// call's patience has passed: `retry_count × retry_delay` from the call
    /// (2 s with the defaults), or the acquire timeout when one is set (the
    /// shorter, when both are). A caller that finds the lock held waits in a
    /// queue on the nodes and is served in about the order it came, among
    /// the callers of every client (see the [crate docs](crate)). A client's
    /// first call first checks every node (first contact, bounded by the
    /// connect timeout and the patience).
    ///
    /// Each round asks all nodes in parallel and succeeds when a quorum granted
    /// it and validity is left after the round's duration and the drift
    /// allowance. A failed round is released on every node before the next.
    /// The TTL is rounded down to whole milliseconds.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`], [`Error::InvalidTtl`] before any round;
    /// [`Error::Misconfigured`] from first contact; then, from the last round,
    /// [`Error::Contended`] (held elsewhere), [`Error::Unavailable`] (too few
    /// nodes answered, or their grants did not count: a node recovering from
    /// a restart, say; [`Error::not_counted`] says which and why) or
    /// [`Error::NoValidity`] (the round outlasted the TTL). With `attempts`
    /// 0, no round was made: `Unavailable` when the patience ran out during
    /// first contact.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in the sense that matters for a lock: if the future is
    /// dropped, no guard exists, and a round in flight finishes in the
    /// background (every node answers or times out, so that none of its
    /// `SET`s lands later) and is then released on every node; the call's
    /// place in the queue is given up at once, so that it blocks no one.
    /// [`flush`](Self::flush) waits for that; a runtime that shuts down first
    /// cuts it short, and the keys then expire by their TTL.
    pub async fn lock(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<LockGuard> {
        self.inner
            .acquire(resource.as_ref(), ttl, self.inner.config.retries())
            .await
    }

    /// Makes one round for the lock on `resource`, without retrying and
    /// without joining the queue of waiters (a lock handed on to a waiter is
    /// not free for it).
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock), after a single round.
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock).
    pub async fn try_lock(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<LockGuard> {
        self.inner.acquire(resource.as_ref(), ttl, 0).await
    }

    /// Takes the lock (as [`lock`](Self::lock)), runs `work` under it (as
    /// [`LockGuard::run`]: extended while it runs, cancelled if the lock is
    /// lost), then releases it.
    ///
    /// If the work finishes but the release cannot be confirmed, the work's
    /// output is still returned (its effects happened) and a warning is logged;
    /// keys left behind expire by their TTL.
    ///
    /// # Errors
    ///
    /// Those of [`lock`](Self::lock); then [`Error::LockLost`] if the lock was
    /// lost while `work` ran (the work was dropped at that moment).
    ///
    /// # Cancel safety
    ///
    /// Dropping this future drops `work` and releases the lock in the background.
    pub async fn with_lock<F>(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        work: F,
    ) -> Result<F::Output>
    where
        F: Future,
    {
        let mut guard = self.lock(resource, ttl).await?;
        let outcome = guard.run(work).await;
        if let Err(err) = guard.unlock().await {
            tracing::warn!(error = %err, "release after with_lock failed");
        }
        outcome
    }
}

impl Redlock {
    /// Waits until the work this client does in the background has finished:
    /// the release of a guard dropped without [`unlock`](LockGuard::unlock),
    /// the cleanup of a `lock` call dropped mid-round (which releases what
    /// its round set), a release that timed out and finishes late, and calls
    /// still under way when a round was decided.
    ///
    /// A tokio runtime that shuts down cancels its tasks, and a release cut
    /// short leaves its key until the TTL, keeping everyone else from the
    /// lock. Await this before the runtime ends (the end of `main`, of a
    /// test, of a command-line tool's run). Each task is bounded (by the node
    /// timeout, and a release that timed out by 10 s more), so this returns;
    /// bound it yourself if you cannot wait that long.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the background work goes on.
    pub async fn flush(&self) {
        self.inner.background.idle().await;
    }
}

impl Inner {
    /// Checks a TTL and returns it in whole milliseconds with its drift.
    pub(crate) fn check_ttl(&self, ttl: Duration) -> Result<Ttl> {
        let whole = quorum::whole_millis(ttl);
        let invalid = |reason| Err(Error::InvalidTtl { ttl, reason });
        if whole.is_zero() {
            return invalid("must be at least 1 ms");
        }
        if whole > MAX_TTL {
            return invalid("must be at most 365 days");
        }
        let drift = quorum::drift(whole, self.config.drift_factor);
        if quorum::validity(whole, Duration::ZERO, drift).is_none() {
            return invalid("too short to leave any validity after the clock-drift allowance");
        }
        let millis = u64::try_from(whole.as_millis()).unwrap_or(u64::MAX);
        // The restart grace covers the longest TTL this client uses.
        self.standings.note_ttl(millis);
        Ok(Ttl {
            ttl: whole,
            millis,
            drift,
        })
    }

    /// The Redis key for `resource`: prefix followed by the name.
    pub(crate) fn key_for(&self, resource: &[u8]) -> Result<Arc<[u8]>> {
        if resource.is_empty() {
            return Err(Error::InvalidResource {
                reason: "the name is empty".into(),
            });
        }
        if resource.len() > MAX_RESOURCE_LEN {
            return Err(Error::InvalidResource {
                reason: format!(
                    "the name is {} bytes, more than the {MAX_RESOURCE_LEN} allowed",
                    resource.len()
                ),
            });
        }
        let prefix = &self.config.key_prefix;
        let mut key = Vec::with_capacity(prefix.len() + resource.len());
        key.extend_from_slice(prefix);
        key.extend_from_slice(resource);
        if self.config.fencing_counter_key.as_deref() == Some(&key[..]) {
            return Err(Error::InvalidResource {
                reason: "its key is the fencing counter's".into(),
            });
        }
        if key[prefix.len()..] == *crate::standing::RECORD_SUFFIX.as_bytes() {
            return Err(Error::InvalidResource {
                reason: "its key is the nodes' record's (see `RECORD_SUFFIX`)".into(),
            });
        }
        if queue::is_queue_key(&key) {
            return Err(Error::InvalidResource {
                reason: "its key ends like the keys of a lock's queue \
                         (`:quorlock-queue`, `:quorlock-alive`)"
                    .into(),
            });
        }
        Ok(key.into())
    }

    /// Starts one acquire round on every node. A caller of `lock` (a
    /// `waiter` with its ticket, 0 before it has one) runs the queue script,
    /// which takes the lock only when it is free for this waiter and queues
    /// it otherwise (see `queue.rs`); `try_lock` runs `SET NX GET PX`. With
    /// fencing on, either also returns the node's incremented counter.
    /// Grants of nodes whose votes do not count (see `standing.rs`) do not count.
    fn start_acquire_round(
        self: &Arc<Self>,
        key: &Arc<[u8]>,
        ttl: Ttl,
        waiter: Option<(&Arc<str>, u64)>,
        gates: Option<Gates>,
    ) -> AcquireRound {
        let token = new_token();
        let counter_key = &self.config.fencing_counter_key;
        let round = match (waiter, counter_key) {
            (Some((waiter, ticket)), _) => Round::start(
                self.nodes.iter().enumerate().map(|(index, node)| {
                    let call = node.wait_turn(
                        key.clone(),
                        counter_key.clone(),
                        token.clone(),
                        ttl.millis,
                        waiter.clone(),
                        ticket,
                    );
                    // A claim goes to each node once it told us (the call,
                    // and its timeout, start when polled).
                    let gate = gates.as_ref().map(|gates| gates.node(index));
                    async move {
                        if let Some(gate) = gate {
                            gate.await;
                        }
                        call.await
                    }
                }),
                &self.background,
            ),
            (None, None) => Round::start(
                self.nodes
                    .iter()
                    .map(|node| node.acquire(key.clone(), token.clone(), ttl.millis)),
                &self.background,
            ),
            (None, Some(counter_key)) => Round::start(
                self.nodes.iter().map(|node| {
                    node.acquire_fenced(key.clone(), counter_key.clone(), token.clone(), ttl.millis)
                }),
                &self.background,
            ),
        }
        .counting(&self.standings);
        AcquireRound {
            inner: self.clone(),
            key: key.clone(),
            token,
            round,
            settled: false,
            waiter: waiter.map(|(waiter, _)| waiter.clone()),
        }
    }

    /// The extend script on every node; decided early. As in acquisition,
    /// grants of nodes not yet checked do not count.
    pub(crate) async fn extend_round(&self, key: &Arc<[u8]>, token: &Arc<str>, ttl: Ttl) -> Round {
        let calls = self
            .nodes
            .iter()
            .map(|node| node.extend(key.clone(), token.clone(), ttl.millis));
        let mut round = Round::start(calls, &self.background).counting(&self.standings);
        round.collect(Until::Decided).await;
        round
    }

    /// The release script, sent to every node (or only to those marked in
    /// `send_to`). Returns when `until` says so; the other nodes get the
    /// request in the background. Where the key held our token, the node
    /// hands it on to its first waiter (see `queue.rs`); `place` says what
    /// becomes of a waiter's own entry.
    pub(crate) async fn release_round(
        &self,
        key: &Arc<[u8]>,
        token: &Arc<str>,
        until: Until,
        place: Place,
        send_to: Option<&[bool]>,
    ) -> Round {
        let calls = self.nodes.iter().enumerate().map(|(index, node)| {
            let call = send_to
                .is_none_or(|send_to| send_to[index])
                .then(|| node.release(key.clone(), token.clone(), place.clone()));
            async move {
                match call {
                    Some(call) => call.await,
                    None => Ok(false),
                }
            }
        });
        let mut round = Round::start(calls, &self.background);
        round.collect(until).await;
        round
    }

    /// The acquire loop behind `lock` (`retries` > 0) and `try_lock` (0).
    /// A caller of `lock` waits in the queue on the nodes (see `queue.rs`)
    /// from its first round on, until its patience ends.
    async fn acquire(
        self: &Arc<Self>,
        resource: &[u8],
        ttl: Duration,
        retries: u32,
    ) -> Result<LockGuard> {
        let called = Instant::now();
        let deadline = if retries == 0 {
            self.config
                .acquire_timeout
                .and_then(|timeout| called.checked_add(timeout))
        } else {
            Some(called + self.config.patience())
        };
        let key = self.key_for(resource)?;
        let ttl = self.check_ttl(ttl)?;
        Error::ensure_runtime()?;
        match self
            .standings
            .ensure(|index| self.nodes[index].connect(), deadline)
            .await
        {
            Ok(()) => {}
            Err(NotReady::Misconfigured(reason)) => return Err(Error::Misconfigured { reason }),
            // No round may start after the deadline.
            Err(NotReady::DeadlinePassed(unchecked)) => {
                let mut votes = Votes::new(self.nodes.len());
                for _ in &unchecked {
                    votes.record(None);
                }
                return Err(Error::Unavailable {
                    resource: show_resource(resource),
                    votes,
                    attempts: 0,
                    source: unchecked.last().cloned(),
                    not_counted: unchecked.into_boxed_slice(),
                });
            }
        }
        let span = tracing::debug_span!("quorlock.lock", resource = %show_resource(resource), ttl_ms = ttl.millis);
        async move {
            // A caller of `lock` waits in the queue as this waiter; its entry
            // goes when the call ends, however it ends.
            let mut waiting = (retries > 0).then(|| Waiting {
                inner: self.clone(),
                key: key.clone(),
                waiter: None,
                ticket: 0,
                listening: None,
                joined: false,
                first: !self.busy.is_busy(&key),
                rewrite: false,
            });
            let mut attempt: u32 = 0;
            // Set when a handoff notification ended the wait: the next
            // round is a claim, sent to each node once it notified.
            let mut claiming = false;
            loop {
                attempt = attempt.saturating_add(1);
                // The handoffs seen so far, forgotten: this round's outcome replaces them.
                let gates = waiting
                    .as_mut()
                    .and_then(|w| w.listening.as_mut())
                    .map(|listening| (listening.take(), &*listening))
                    .filter(|_| std::mem::take(&mut claiming))
                    .map(|(notified, listening)| {
                        Gates::new(listening, notified, Instant::now() + queue::CLAIM_GRACE)
                    });
                // Dropped mid-round (this future cancelled), `acquiring` finishes
                // in the background and then releases whatever it set.
                let start = Instant::now();
                // A caller's first round is a plain `SET NX`: free when
                // nobody waits (a lock with waiters is held or handed on,
                // never absent, so it does not jump the queue); the queue
                // script from the second round on, or from the first when
                // this client's last call found the key taken (`Busy`).
                let queued = waiting.as_mut().and_then(|waiting| {
                    let first = std::mem::replace(&mut waiting.first, false);
                    waiting.joined |= !first;
                    let ticket = waiting.ticket;
                    (!first).then(|| (waiting.join(), ticket))
                });
                let mut acquiring = self.start_acquire_round(&key, ttl, queued, gates);
                acquiring.round.collect(Until::Decided).await;
                let elapsed = start.elapsed();
                let votes = acquiring.round.votes;
                tracing::debug!(
                    attempt,
                    granted = votes.granted,
                    refused = votes.refused,
                    failed = votes.failed,
                    quorum = votes.quorum,
                    elapsed_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
                    "acquire round"
                );
                if attempt == 1 && waiting.is_some() {
                    // What the next call's first round should be (see `Busy`).
                    if votes.has_quorum() {
                        self.busy.note(&key, false);
                    } else if votes.refused > 0 {
                        self.busy.note(&key, true);
                    }
                }
                let validity = quorum::validity(ttl.ttl, elapsed, ttl.drift);
                let failure = if votes.has_quorum() && validity.is_some() {
                    let highest = acquiring.round.highest_counter();
                    match self
                        .fence(
                            &key,
                            &acquiring.token,
                            &acquiring.round.answers,
                            highest,
                            start,
                            ttl,
                        )
                        .await
                    {
                        Ok(fencing_token) => {
                            // A waiter that joined the queue leaves it where
                            // its entry may remain.
                            if let Some(waiting) = waiting.take().filter(|w| w.joined) {
                                waiting.won(acquiring.round.finish_later());
                            }
                            return Ok(acquiring.won(resource.len(), ttl, start, fencing_token));
                        }
                        Err(failure) => Some(failure),
                    }
                } else {
                    None
                };
                // The round is lost. A waiter keeps its place: the highest
                // ticket a node gave it is its ticket from now on, and a node
                // that gave another (or set the key) learns it next round.
                let (highest, agree) = acquiring.round.tickets();
                let place = match &mut waiting {
                    Some(waiting) if waiting.joined => {
                        let ticket = waiting.ticket.max(highest.unwrap_or(0));
                        waiting.rewrite = highest.is_some_and(|high| !agree || high != ticket)
                            || (ticket == 0 && votes.granted > 0);
                        waiting.ticket = ticket;
                        Place::Keep(waiting.id().clone(), ticket)
                    }
                    Some(waiting) => {
                        // The plain first round found the lock taken: join now.
                        waiting.rewrite = true;
                        Place::None
                    }
                    None => Place::None,
                };
                acquiring.release(place).await;
                let failure = match failure {
                    Some(failure) => failure.into_error(resource, attempt),
                    None => acquire_failure(resource, &mut acquiring.round, elapsed, attempt),
                };
                let (Some(waiting), Some(deadline)) = (&mut waiting, deadline) else {
                    return Err(failure);
                };
                if Instant::now() >= deadline {
                    return Err(failure);
                }
                if failure.is_contended() {
                    if !std::mem::take(&mut waiting.rewrite) {
                        claiming = self
                            .await_handoff(waiting.listening.as_mut(), deadline)
                            .await;
                    }
                } else {
                    // Too few nodes answered, or too slowly: pause before the next round.
                    let unit = rand::rng().random::<f64>();
                    let delay =
                        quorum::jittered(self.config.retry_delay, self.config.retry_jitter, unit);
                    tokio::time::sleep_until((Instant::now() + delay).min(deadline).into()).await;
                }
                // No round starts after the deadline.
                if Instant::now() >= deadline {
                    return Err(failure);
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Waits until a node told this waiter that it reserved the lock for it
    /// (`true`: the next round is a claim, sent to each node once it told,
    /// or [`CLAIM_GRACE`](queue::CLAIM_GRACE) after the round started),
    /// until its next refresh round is due, or until `deadline` (`false`).
    /// Without notifications it waits for the refresh round alone, which
    /// comes after the jittered retry delay if that is shorter.
    async fn await_handoff(&self, listening: Option<&mut Listening>, deadline: Instant) -> bool {
        let refresh = match listening {
            Some(_) => queue::REFRESH_INTERVAL,
            None => {
                let unit = rand::rng().random::<f64>();
                quorum::jittered(self.config.retry_delay, self.config.retry_jitter, unit)
                    .min(queue::REFRESH_INTERVAL)
            }
        };
        let wake = (Instant::now() + refresh).min(deadline);
        let Some(listening) = listening else {
            tokio::time::sleep_until(wake.into()).await;
            return false;
        };
        loop {
            if listening.reserved() > 0 {
                return true;
            }
            tokio::select! {
                _ = listening.changed() => {}
                _ = tokio::time::sleep_until(wake.into()) => return false,
            }
        }
    }

    /// With fencing on, completes a won acquire round (`won`: its answers):
    /// the fencing token `T` is the highest counter the granting nodes
    /// returned (`highest_counter`), written back to
    /// every granting node (`counter = max(counter, T)`, only while the node
    /// still holds our key). Succeeds with `Some(T)` if a quorum took the
    /// write-back and validity is left; `Ok(None)` with fencing off (no
    /// round trip).
    async fn fence(
        &self,
        key: &Arc<[u8]>,
        token: &Arc<str>,
        won: &[Answer],
        highest_counter: Option<u64>,
        start: Instant,
        ttl: Ttl,
    ) -> std::result::Result<Option<u64>, FenceFailure> {
        let Some(counter_key) = &self.config.fencing_counter_key else {
            return Ok(None);
        };
        // A won round's counted grants carry counters: the quorum guarantees one.
        let fencing_token = highest_counter.unwrap_or(0);
        let calls = self.nodes.iter().zip(won).map(|(node, answer)| {
            let write_back = (*answer == Answer::Granted).then(|| {
                node.fence_write_back(
                    key.clone(),
                    counter_key.clone(),
                    token.clone(),
                    fencing_token,
                )
            });
            async move {
                match write_back {
                    Some(write_back) => write_back.await,
                    // Not granting: not part of the holding set.
                    None => Ok(false),
                }
            }
        });
        let mut round = Round::start(calls, &self.background).counting(&self.standings);
        round.collect(Until::Decided).await;
        let elapsed = start.elapsed();
        tracing::debug!(
            written_back = round.votes.granted,
            quorum = round.votes.quorum,
            "fencing write-back"
        );
        let valid = quorum::validity(ttl.ttl, elapsed, ttl.drift).is_some();
        if round.votes.has_quorum() && valid && fencing_token > 0 {
            Ok(Some(fencing_token))
        } else {
            Err(FenceFailure { round, elapsed })
        }
    }
}

/// When each call of a claim round goes: once its node told the waiter that
/// it reserved the lock for it, or at `until`, whichever comes first.
struct Gates {
    reserved: tokio::sync::watch::Receiver<u64>,
    /// The nodes that told before the round (bit `i`: node `i`).
    notified: u64,
    until: Instant,
}

impl Gates {
    fn new(listening: &Listening, notified: u64, until: Instant) -> Self {
        Gates {
            reserved: listening.watcher(),
            notified,
            until,
        }
    }

    /// Waits until node `index` told, or until `until`.
    fn node(&self, index: usize) -> impl Future<Output = ()> + Send + 'static {
        let bit = 1u64 << index.min(63);
        let told = self.notified & bit != 0;
        let (mut reserved, until) = (self.reserved.clone(), self.until);
        async move {
            if told {
                return;
            }
            let told = reserved.wait_for(|nodes| nodes & bit != 0);
            let _ = tokio::time::timeout_at(until.into(), told).await;
        }
    }
}

/// Why a fenced acquisition failed after its quorum: the write-back round's
/// outcome and how long everything took.
struct FenceFailure {
    round: Round,
    elapsed: Duration,
}

impl FenceFailure {
    fn into_error(mut self, resource: &[u8], attempts: u32) -> Error {
        acquire_failure(resource, &mut self.round, self.elapsed, attempts)
    }
}

/// A `lock` call's place in the queue on the nodes. Dropped (the call ends
/// without the lock: it gave up, or its future was dropped), it leaves the
/// queue on every node in the background.
struct Waiting {
    inner: Arc<Inner>,
    key: Arc<[u8]>,
    /// The waiter id, made when it is first needed (a call whose first
    /// round wins never needs one).
    waiter: Option<Arc<str>>,
    /// The ticket every node should hold for this waiter; 0 before any gave one.
    ticket: u64,
    listening: Option<Listening>,
    /// Whether a round of this waiter went out (so that nodes may queue it).
    joined: bool,
    /// Before the call's first round, which is a plain `SET NX`.
    first: bool,
    /// Set when nodes hold other tickets than `ticket`: the next round goes
    /// at once, to write it.
    rewrite: bool,
}

impl Waiting {
    /// The waiter id, listening (with notifications on) for handoffs to it
    /// from before its first round in the queue: one that came between
    /// that round's answer and a later start would be missed until the
    /// next refresh round.
    fn join(&mut self) -> &Arc<str> {
        if self.listening.is_none() && self.inner.config.release_notifications {
            let waiter = self.id().clone();
            self.listening = Some(self.inner.notifications.listen(&waiter));
        }
        self.id()
    }

    /// The waiter id.
    fn id(&mut self) -> &Arc<str> {
        let notifications = &self.inner.notifications;
        self.waiter
            .get_or_insert_with(|| notifications.new_waiter())
    }

    /// The lock is ours: the grants removed our entry on the nodes that
    /// granted; once the round's last answers are in (`answers`), the other
    /// nodes (queued, failed, slow) drop it in the background.
    fn won(mut self, answers: impl Future<Output = Vec<Answer>> + Send + 'static) {
        self.joined = false;
        let (inner, key) = (self.inner.clone(), self.key.clone());
        let Some(waiter) = self.waiter.clone() else {
            return;
        };
        let leave = async move {
            let send_to: Vec<bool> = answers
                .await
                .iter()
                .map(|answer| *answer != Answer::Granted)
                .collect();
            if send_to.iter().any(|&send| send) {
                leave(&inner, &key, &waiter, Some(&send_to)).await;
            }
        };
        if !self.inner.background.spawn(leave) {
            tracing::debug!("lock call ended outside a tokio runtime: its queue entries expire");
        }
    }

    /// Leaves the queue on every node, in the background.
    fn leave_all(&self) {
        let (inner, key) = (self.inner.clone(), self.key.clone());
        let Some(waiter) = self.waiter.clone() else {
            return;
        };
        let leave = async move { leave(&inner, &key, &waiter, None).await };
        if !self.inner.background.spawn(leave) {
            tracing::debug!("lock call ended outside a tokio runtime: its queue entries expire");
        }
    }
}

/// Takes `waiter` out of the queue on every node (or those in `send_to`),
/// passing on a reservation made for it.
async fn leave(inner: &Inner, key: &Arc<[u8]>, waiter: &Arc<str>, send_to: Option<&[bool]>) {
    // The waiter id is never a token: only a reservation for it matches.
    inner
        .release_round(
            key,
            waiter,
            Until::All,
            Place::Leave(waiter.clone()),
            send_to,
        )
        .await;
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.joined {
            self.leave_all();
        }
    }
}

/// One acquire round and the token it asked for. Until it is won or
/// released, dropping it (the `lock` call was cancelled mid-round) leaves a
/// background task that waits for every node's answer to the round, so that
/// no `SET` (or queue entry) of it can land afterwards, and then releases
/// the key on every node, and takes the waiter out of the queue.
struct AcquireRound {
    inner: Arc<Inner>,
    key: Arc<[u8]>,
    token: Arc<str>,
    round: Round,
    /// Won (a guard took over the keys) or released.
    settled: bool,
    /// The waiter whose round this is, for a `lock` call.
    waiter: Option<Arc<str>>,
}

impl AcquireRound {
    /// The lock is ours: a guard takes over releasing the keys.
    fn won(
        mut self,
        resource_len: usize,
        ttl: Ttl,
        start: Instant,
        fencing_token: Option<u64>,
    ) -> LockGuard {
        self.settled = true;
        LockGuard::acquired(
            self.inner.clone(),
            self.key.clone(),
            resource_len,
            self.token.clone(),
            ttl,
            start,
            fencing_token,
        )
    }

    /// Releases a round that did not win. Every node answers the round (or
    /// times out) first, so that no `SET` of it can land after the release
    /// reached its node. The release goes to every node that did not refuse
    /// (one that timed out may still have set the key; one that refused
    /// cannot have), with `place` for the waiter's entry, and this returns
    /// once the nodes that granted have answered it (each bounded by the
    /// per-node timeout); the others answer in the background.
    async fn release(&mut self, place: Place) {
        self.round.collect(Until::All).await;
        let answers = &self.round.answers;
        let send_to: Vec<bool> = answers
            .iter()
            .map(|answer| *answer != Answer::Refused)
            .collect();
        if send_to.iter().any(|&send| send) {
            let awaited = answers
                .iter()
                .map(|answer| *answer == Answer::Granted)
                .collect();
            self.inner
                .release_round(
                    &self.key,
                    &self.token,
                    Until::Answered(awaited),
                    place,
                    Some(&send_to),
                )
                .await;
        }
        self.settled = true;
    }
}

impl Drop for AcquireRound {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let stragglers = self.round.take_pending();
        let (inner, key, token) = (self.inner.clone(), self.key.clone(), self.token.clone());
        let place = self.waiter.take().map_or(Place::None, Place::Leave);
        let cleanup = async move {
            stragglers.await;
            inner
                .release_round(&key, &token, Until::All, place, None)
                .await;
        };
        if !self.inner.background.spawn(cleanup) {
            tracing::warn!(
                resource = %show_resource(&self.key),
                "lock call dropped outside a tokio runtime; keys its round set expire by their ttl"
            );
        }
    }
}

/// The error for a failed acquire round.
fn acquire_failure(resource: &[u8], round: &mut Round, elapsed: Duration, attempts: u32) -> Error {
    let votes = round.votes;
    let last_error = round.last_error.take();
    let not_counted = round.take_not_counted();
    let resource = show_resource(resource);
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
        }
    } else {
        Error::Contended {
            resource,
            votes,
            attempts,
            source: last_error,
            not_counted,
        }
    }
}

/// A fresh lock token: a UUID v4, 122 random bits from the OS CSPRNG.
fn new_token() -> Arc<str> {
    let mut text = uuid::Uuid::encode_buffer();
    Arc::from(&*uuid::Uuid::new_v4().simple().encode_lower(&mut text))
}

/// A resource name for errors and logs: lossy UTF-8, cut to 128 characters.
pub(crate) fn show_resource(resource: &[u8]) -> String {
    let text = String::from_utf8_lossy(resource);
    if text.chars().count() <= SHOWN_RESOURCE_CHARS {
        text.into_owned()
    } else {
        let mut cut: String = text.chars().take(SHOWN_RESOURCE_CHARS).collect();
        cut.push('…');
        cut
    }
}

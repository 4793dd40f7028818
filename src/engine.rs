//! The engine: what every clone of a client and every guard share (the
//! nodes, the configuration, whose votes count, the notifications, the
//! background work), and the one way to ask the nodes: [`Engine::ask`] sends
//! one [`Request`] to every node (or some) in parallel and tallies the
//! answers in a [`Round`]. Extending, releasing, fencing, acquiring and
//! status are requests; nothing else talks to the nodes for a lock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;

use crate::answer::Answer;
use crate::cluster;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::meter;
use crate::node::{Node, Timeouts};
use crate::notify::{Gates, Notifications};
use crate::queue::entries::{self as queue, Place};
use crate::quorum::{self, Ttl};
use crate::request::{GATE_SUFFIX, INTENT_SUFFIX, LEADER_SUFFIX, PERMIT_INFIX, READ_SUFFIX};
use crate::request::{LockId, Reached, Request, new_token};
use crate::request::{WRITE_SUFFIX, WRITERS_SUFFIX};
use crate::round::{NodeSet, Round, Until};
use crate::session::{self, LiveKeys, Session};
use crate::standing::{self, NotReady, RestartPolicy, Standings};
use crate::status::LockStatus;
use crate::target::Target;
use crate::tasks::Background;

/// How long a release's calls that its round stopped waiting for go on in
/// the background (the round waits up to the per-node timeout).
pub(crate) const RELEASE_LINGER: Duration = Duration::from_secs(10);

/// The longest resource name accepted, in bytes.
pub(crate) const MAX_RESOURCE_LEN: usize = 64 * 1024;

/// The most resources of one lock on several resources.
pub(crate) const MAX_RESOURCES: usize = 64;

/// Which nodes a request goes to, and when.
#[derive(Clone, Copy)]
pub(crate) enum To<'a> {
    /// Every node, at once.
    All,
    /// The nodes in the set, at once; the others answer "no" without being asked.
    Only(&'a NodeSet),
    /// The nodes in `ask`, at once; those in `done` answer "yes" without
    /// being asked (they already did what the request asks: a fencing
    /// write-back to a node whose counter is the token); the others "no".
    Remaining { ask: &'a NodeSet, done: &'a NodeSet },
    /// Every node, each once its gate opens (a claim round: see `notify.rs`);
    /// a node whose gate opens after [`Gates::close`] is not asked.
    Gated(&'a Gates),
}

/// The most `unlock` rounds one client has in flight at once; more wait
/// for their turn. Thousands of locks released at one instant would
/// otherwise queue thousands of scripts on each node: the last ones answer
/// after the per-node timeout (an unlock that did release reports
/// [`ReleaseUnconfirmed`](crate::Error::ReleaseUnconfirmed)), and the nodes
/// are skipped until they answer a probe, so the waiters' claims fail too.
/// With this bound, releases of thousands of locks at once are confirmed
/// and their waiters served (the measurements: docs/benchmarks.md,
/// "Later the same day: pacing"). (The number is in `LockGuard::unlock`'s
/// docs.)
pub(crate) const UNLOCKS_IN_FLIGHT: usize = 64;

/// A permit of `lane`, one of the client's bounds on rounds in flight: at
/// once when one is free, else when one frees up, or at `deadline` without
/// one (the round then goes anyway: a call's patience is not spent
/// waiting for its turn). `None` also if the lane was closed (never).
///
/// Cancel safe: a permit not yet granted is never taken.
pub(crate) async fn lane_permit(
    lane: &tokio::sync::Semaphore,
    deadline: Option<Instant>,
) -> Option<tokio::sync::SemaphorePermit<'_>> {
    if let Ok(permit) = lane.try_acquire() {
        return Some(permit);
    }
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline.into(), lane.acquire())
            .await
            .ok()
            .and_then(Result::ok),
        None => lane.acquire().await.ok(),
    }
}

/// What every clone of a [`Redlock`](crate::Redlock) and every guard share.
#[derive(Debug)]
pub(crate) struct Engine {
    pub(crate) nodes: Arc<[Node]>,
    pub(crate) config: Config,
    /// Whose votes count (see `standing/`).
    pub(crate) standings: Arc<Standings>,
    pub(crate) notifications: Arc<Notifications>,
    /// This client's liveness on the nodes, for its waiters (see `session.rs`).
    pub(crate) session: Arc<Session>,
    /// Which keys `lock` last found taken.
    pub(crate) busy: crate::queue::busy::Busy,
    /// Permits for the client's joins in flight (see
    /// [`queue::JOIN_ROUNDS_IN_FLIGHT`]).
    pub(crate) join_rounds: tokio::sync::Semaphore,
    /// Permits for the client's claims in flight that a handoff message
    /// started (see [`queue::CLAIM_ROUNDS_IN_FLIGHT`]).
    pub(crate) claim_rounds: tokio::sync::Semaphore,
    /// Permits for the client's claims in flight on a node that may have
    /// handed it on unheard (see [`queue::LOOK_ROUNDS_IN_FLIGHT`]).
    pub(crate) look_rounds: tokio::sync::Semaphore,
    /// Permits for the client's `unlock` rounds in flight (see
    /// [`UNLOCKS_IN_FLIGHT`]).
    pub(crate) unlocks: tokio::sync::Semaphore,
    /// Releases and straggling calls that run after their caller moved on.
    pub(crate) background: Background,
}

impl Engine {
    /// The engine over `clients`, one per node, with checked options.
    /// Nothing is connected yet.
    pub(crate) fn new(clients: Vec<Target>, config: Config) -> Arc<Engine> {
        let background = Background::default();
        let standings = standings(&clients, &config);
        if clients.len().is_multiple_of(2) {
            tracing::warn!(
                nodes = clients.len(),
                quorum = quorum::quorum(clients.len()),
                "an even number of lock nodes tolerates no more failures than one node fewer"
            );
        }
        let client_id = new_token();
        let live_keys = LiveKeys::new(config.key_prefix.clone(), client_id.clone(), config.slotted);
        let waiter_marker = format!("{}{client_id}.", session::CLIENT_KEY_INFIX);
        let notifications = Arc::new(Notifications::new(
            clients.clone(),
            config.connect_timeout,
            client_id,
            &waiter_marker,
        ));
        let nodes: Arc<[Node]> = clients
            .into_iter()
            .enumerate()
            .map(|(index, client)| {
                let timeouts = Timeouts {
                    call: config.node_timeout,
                    connect: config.connect_timeout,
                };
                Node::new(
                    client,
                    timeouts,
                    config.replica_acks,
                    standings.clone(),
                    index,
                )
            })
            .collect();
        standings.set_recorder(recorder(&nodes, standings.record_keys()));
        let session = Session::new(live_keys, nodes.clone(), notifications.clone());
        Arc::new_cyclic(|engine| {
            notifications.set_orphaned(orphaned(engine.clone()));
            Engine {
                nodes,
                config,
                standings,
                notifications,
                session,
                busy: crate::queue::busy::Busy::new(),
                join_rounds: tokio::sync::Semaphore::new(queue::JOIN_ROUNDS_IN_FLIGHT),
                claim_rounds: tokio::sync::Semaphore::new(queue::CLAIM_ROUNDS_IN_FLIGHT),
                look_rounds: tokio::sync::Semaphore::new(queue::LOOK_ROUNDS_IN_FLIGHT),
                unlocks: tokio::sync::Semaphore::new(UNLOCKS_IN_FLIGHT),
                background,
            }
        })
    }

    /// Checks a TTL and returns it in whole milliseconds with its drift.
    pub(crate) fn ttl(&self, ttl: std::time::Duration) -> Result<Ttl> {
        // The largest clock tolerance in use on the nodes (see `standing/`).
        let tolerance = self.standings.validity_tolerance();
        let checked = Ttl::new(ttl, self.config.drift_factor, tolerance)
            .map_err(|reason| Error::InvalidTtl { ttl, reason })?;
        // The restart grace covers the longest TTL this client uses.
        self.standings.note_ttl(checked.millis);
        Ok(checked)
    }

    /// The Redis key for `resource`: prefix followed by the name (in the
    /// slotted layout, the name in braces unless it has a hash tag: see
    /// `cluster.rs`).
    pub(crate) fn key(&self, resource: &[u8]) -> Result<Arc<[u8]>> {
        let invalid = |reason: String| Err(Error::InvalidResource { reason });
        if resource.is_empty() {
            return invalid("the name is empty".into());
        }
        if resource.len() > MAX_RESOURCE_LEN {
            return invalid(format!(
                "the name is {} bytes, more than the {MAX_RESOURCE_LEN} allowed",
                resource.len()
            ));
        }
        let prefix = &self.config.key_prefix;
        let key: Arc<[u8]> = if self.config.slotted {
            match cluster::slotted_key(prefix, resource) {
                Ok(key) => key.into(),
                Err(reason) => return invalid(reason),
            }
        } else {
            concat(prefix, resource)
        };
        match self.clash(&key) {
            Some(reason) => invalid(reason.into()),
            None => Ok(key),
        }
    }

    /// Why `key` cannot be a lock's key, if it cannot: it is (or is named
    /// like) a key of the client's own, a fencing counter, a record, a
    /// read-write lock's key, a queue or a liveness key.
    fn clash(&self, key: &[u8]) -> Option<&'static str> {
        let (prefix, slotted) = (&self.config.key_prefix, self.config.slotted);
        if self
            .config
            .counter_key(key)
            .is_some_and(|counter| *counter == *key)
        {
            return Some("its key is the fencing counter's");
        }
        // Where a client's liveness key (and, slotted, a fencing counter)
        // would start: the prefix, and slotted the key's tag.
        // (Borrowed where it can be: this runs on every lock call.)
        let start: std::borrow::Cow<'_, [u8]> = if slotted {
            cluster::live_key_start(prefix, key).into()
        } else {
            std::borrow::Cow::Borrowed(&prefix[..])
        };
        let after_start = key.strip_prefix(&*start).unwrap_or_default();
        if slotted && after_start.starts_with(cluster::FENCE_INFIX.as_bytes()) {
            return Some("its key is like a fencing counter's (`quorlock-fence` after the tag)");
        }
        if after_start.starts_with(session::CLIENT_KEY_INFIX.as_bytes()) {
            return Some(
                "its key is like a client's liveness key (`quorlock-client:` after the prefix)",
            );
        }
        let name = &key[prefix.len()..];
        let record = standing::RECORD_SUFFIX.as_bytes();
        if name.starts_with(record)
            || (slotted && name.get(1..).is_some_and(|name| name.starts_with(record)))
        {
            return Some("its key is the nodes' record's (see `Redlock::RECORD_SUFFIX`)");
        }
        if [WRITE_SUFFIX, READ_SUFFIX, INTENT_SUFFIX, WRITERS_SUFFIX]
            .iter()
            .any(|suffix| key.ends_with(suffix.as_bytes()))
        {
            return Some(
                "its key ends like the keys of a read-write lock \
                 (`:quorlock-write`, `:quorlock-read`, `:quorlock-intent`, `:quorlock-writers`)",
            );
        }
        if key.ends_with(LEADER_SUFFIX.as_bytes()) {
            return Some("its key ends like a leader's record (`:quorlock-leader`)");
        }
        if key.ends_with(GATE_SUFFIX.as_bytes()) || is_permit_key(key) {
            return Some(
                "its key ends like a semaphore's gate or slot \
                 (`:quorlock-gate`, `:quorlock-permit-` and a number)",
            );
        }
        if queue::is_queue_key(key) {
            return Some("its key ends like the key of a lock's queue (`:quorlock-queue`)");
        }
        None
    }

    /// Sends `request` to the nodes `to` names, each call bounded; the
    /// round tallies the answers as they come (a vote's grant counts only
    /// where the node's vote counts). Await [`Round::collect`] for them.
    pub(crate) fn ask(&self, request: &Request, to: To<'_>) -> Round {
        let calls = self.nodes.iter().enumerate().map(|(index, node)| match to {
            To::All => node.send(request),
            To::Only(nodes) if nodes.contains(index) => node.send(request),
            // Not asked: not part of the set, so a "no" from it.
            To::Only(_) => unasked(Answer::Refused(None)),
            To::Remaining { ask, .. } if ask.contains(index) => node.send(request),
            To::Remaining { done, .. } if done.contains(index) => unasked(Answer::Granted(None)),
            To::Remaining { .. } => unasked(Answer::Refused(None)),
            To::Gated(gates) => {
                // A claim goes to each node once it told us (the call, and
                // its timeout, start when polled), unless the round was
                // decided before: then it is not sent, a "no".
                let (gate, call) = (gates.node(index), node.send(request));
                gate.then(|open| {
                    if open {
                        call
                    } else {
                        unasked(Answer::Refused(None))
                    }
                })
                .boxed()
            }
        });
        let standings = request.is_vote().then_some(&self.standings);
        // A release's calls have no timer of their own (see `release`).
        let linger = matches!(request, Request::Release { .. }).then_some(RELEASE_LINGER);
        Round::over(calls, &self.background, standings, linger)
    }

    /// Waits until every node had its first check (and a node that counts
    /// was recorded), or until `deadline`.
    pub(crate) async fn first_contact(
        &self,
        deadline: Option<Instant>,
    ) -> std::result::Result<(), NotReady> {
        let nodes = &self.nodes;
        self.standings
            .ensure(|index| nodes[index].connect(), deadline)
            .await
    }

    /// The extend script on every node; decided early.
    pub(crate) async fn extend(&self, lock: &LockId, ttl: Ttl) -> Round {
        let request = Request::Extend {
            lock: lock.clone(),
            ttl_ms: ttl.millis,
        };
        let timer = meter::Timer::start();
        let mut round = self.ask(&request, To::All);
        round.collect(Until::Decided).await;
        timer.round("extend");
        round
    }

    /// The release script, sent to the nodes `to` names. Returns when
    /// `until` says so, or once the per-node timeout has passed: a node that
    /// has not answered by then counts as timed out (and is skipped by votes
    /// until it answers a `PING`, as after a vote's timeout). Calls still
    /// under way finish in the background, for up to [`RELEASE_LINGER`]:
    /// the one timer of the round bounds them all. Where the key held our
    /// token, the node hands it on to its first waiter (see `queue/`);
    /// `place` says what becomes of a waiter's own entry. On the nodes that
    /// the round which set the keys `reached`, the release goes out at
    /// once; on the others, after the node's batches gathered before it
    /// (see `Batches::sent`).
    pub(crate) async fn release(
        &self,
        lock: &LockId,
        place: Place,
        reached: Reached,
        to: To<'_>,
        until: Until,
    ) -> Round {
        let request = Request::Release {
            lock: lock.clone(),
            place,
            reached,
        };
        let timer = meter::Timer::start();
        let mut round = self.ask(&request, to);
        let answered = tokio::time::timeout(self.config.node_timeout, round.collect(until));
        if answered.await.is_err() {
            round.time_out(|index| self.nodes[index].timed_out());
        }
        timer.round("release");
        round
    }

    /// Each node's count of the readers of a read-write lock whose hold
    /// has not ended (`key`: the readers' set), in node order; `None` where
    /// the node did not answer. Each call is bounded by the connect timeout.
    pub(crate) async fn count_readers(&self, key: Arc<[u8]>) -> Vec<Option<u64>> {
        let mut round = self.ask(&Request::CountReaders { key }, To::All);
        round.collect(Until::All).await;
        (round.take_answers().into_iter())
            .map(|answer| match answer {
                Some(Answer::Granted(count)) => count,
                _ => None,
            })
            .collect()
    }

    /// What every node holds under `key`, and why a node's votes do not
    /// count, where they do not. A fresh client's first checks end first
    /// (bounded by the connect timeout), so that the standings shown are
    /// settled.
    pub(crate) async fn status(&self, key: Arc<[u8]>) -> LockStatus {
        let deadline = Instant::now() + self.config.connect_timeout;
        // Misconfigured nodes and nodes that did not answer in time are
        // shown as they are.
        let refused = match self.first_contact(Some(deadline)).await {
            Err(NotReady::Misconfigured(reason)) => Some(reason),
            _ => None,
        };
        let mut round = self.ask(&Request::Inspect { key }, To::All);
        round.collect(Until::All).await;
        // Every node answered (or timed out): `Until::All`.
        let answers = (self.nodes.iter().zip(round.take_answers()))
            .filter_map(|(node, answer)| Some((node.name().to_owned(), answer?)))
            .collect();
        let not_counted = (0..self.nodes.len()).map(|index| self.standings.not_counted(index));
        LockStatus::from_answers(answers, quorum::quorum(self.nodes.len()))
            .with_standing(not_counted, refused)
    }
}

/// Whether `key` ends like a semaphore's slot: [`PERMIT_INFIX`] and digits.
fn is_permit_key(key: &[u8]) -> bool {
    let digits = key.iter().rev().take_while(|b| b.is_ascii_digit()).count();
    digits > 0 && key[..key.len() - digits].ends_with(PERMIT_INFIX.as_bytes())
}

/// `prefix` followed by `resource`, in an `Arc`: one allocation for the
/// usual short key, copied by slices (collecting the bytes one by one cost
/// more than the rest of making a key).
fn concat(prefix: &[u8], resource: &[u8]) -> Arc<[u8]> {
    const SHORT: usize = 128;
    let len = prefix.len() + resource.len();
    if len > SHORT {
        return [prefix, resource].concat().into();
    }
    let mut key = [0; SHORT];
    key[..prefix.len()].copy_from_slice(prefix);
    key[prefix.len()..len].copy_from_slice(resource);
    Arc::from(&key[..len])
}

/// The answer of a node that is not asked, as a node call of the round.
fn unasked(answer: Answer) -> futures::future::BoxFuture<'static, Answer> {
    futures::future::ready(answer).boxed()
}

/// What a client does with a handoff to one of its waiters that no longer
/// listens (see `notify.rs`): the waiter leaves the queue on that node, in
/// the background, passing the reservation on.
fn orphaned(engine: std::sync::Weak<Engine>) -> crate::notify::Orphaned {
    Arc::new(move |index, key, waiter| {
        let Some(engine) = engine.upgrade() else {
            return;
        };
        let entry = LockId::plain(key, waiter.clone());
        let leave = {
            let engine = engine.clone();
            async move {
                let node = NodeSet::only(index, engine.nodes.len());
                let place = Place::Leave(waiter);
                engine
                    .release(&entry, place, Reached::NONE, To::Only(&node), Until::All)
                    .await;
            }
        };
        engine.background.spawn(leave);
    })
}

/// The standings of the nodes at `targets`.
fn standings(targets: &[Target], config: &Config) -> Arc<Standings> {
    Standings::new(
        targets.iter().map(Target::name).collect(),
        targets.iter().map(Target::follows_failovers).collect(),
        RestartPolicy {
            grace: config.restart_grace,
            trust_durable: config.trust_durable_nodes,
            strict: config.strict_restarts,
            allow_eviction: config.allow_eviction,
            drift_factor: config.drift_factor,
            clock_tolerance: config.clock_tolerance,
        },
        standing::RecordKeys::new(&config.key_prefix, config.slotted),
        crate::scripts::for_client(config.fencing),
        config.node_timeout,
        config.connect_timeout,
    )
}

/// How the standings run their errands on a node (record a node's
/// `run_id`, note a clock step, read a clock: see `standing/`), through
/// the nodes, which the standings do not know.
fn recorder(nodes: &Arc<[Node]>, keys: standing::RecordKeys) -> standing::Recorder {
    let weak = Arc::downgrade(nodes);
    standing::Recorder(Arc::new(move |index, errand| {
        let (weak, keys) = (weak.clone(), keys.clone());
        async move {
            match weak.upgrade() {
                Some(nodes) => nodes[index].errand(keys, errand).await,
                None => Ok(()),
            }
        }
        .boxed()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_the_prefix_then_the_resource_short_or_long() {
        for len in [0, 1, 100, 120, 121, 200, 70_000] {
            let resource = vec![b'r'; len];
            let key = concat(b"quorlock:", &resource);
            assert_eq!(key.len(), 9 + len);
            assert_eq!(&key[..9], b"quorlock:");
            assert!(key[9..].iter().all(|&b| b == b'r'), "{len}");
        }
        assert_eq!(&*concat(b"", b"abc"), b"abc");
    }

    /// Every node call is one boxed future (`Node::send`), two per lock and
    /// unlock on each node: above 1 KiB a box misses glibc's per-thread
    /// cache (1,032 bytes at most) and costs the allocator several times
    /// more each time (docs/benchmarks.md, "2026-12-05 (evening)"). This
    /// keeps the acquisition's and the release's box under it.
    #[tokio::test]
    async fn a_node_calls_box_fits_the_allocators_thread_cache() {
        let (targets, config) = crate::RedlockBuilder::from_urls(["redis://127.0.0.1:1"])
            .validate()
            .expect("a client");
        let engine = Engine::new(targets, config);
        let key: Arc<[u8]> = Arc::from(&b"quorlock:sized"[..]);
        let lock = LockId::plain(key, Arc::from("token"));
        let requests = [
            Request::Acquire {
                lock: lock.clone(),
                ttl_ms: 10_000,
                counter_key: None,
            },
            Request::Release {
                lock,
                place: Place::NoEntry,
                reached: Reached::NONE,
            },
        ];
        for request in &requests {
            let call = engine.nodes[0].send(request);
            let size = std::mem::size_of_val(&*call);
            assert!(size <= 1024, "a node call's box is {size} bytes");
        }
    }
}

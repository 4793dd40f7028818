//! One Redis node: its connection (`connection/`) and the lock operations,
//! each bounded: votes and releases by the per-node timeout, the
//! status reads by the connect timeout (as is connecting, with the node's
//! check: see `connection/` and `standing/`).
//!
//! A node whose call timed out is *skipped* by votes (an immediate vote
//! against, instead of one more request piling up behind a frozen server)
//! until it answers a `PING`. Skipped and "a probe is running" are one state,
//! set only by the task that probes and cleared when that task ends, however
//! it ends (an answer, or its runtime shutting down): a skipped node always
//! has a probe on the way.
//!
//! # The files
//!
//! [`Node`] here, the face the engine uses; below it, in the order a call
//! flows: `wire.rs`, what each request sends (the commands and scripts)
//! and how long it may take; `exchange.rs`, one exchange on the node's
//! connection with its fallbacks (`NOSCRIPT`, `SET NX` before Redis 7.0,
//! a lost fencing counter, replicas' acknowledgements); `send.rs`, the
//! commands on their way: alone, pipelined with a clock reading, or
//! batched with the node's other votes (`batch.rs`); `reply.rs`, how a
//! reply reads as an answer; `probe.rs`, the probe of a node that timed
//! out, and the node's place in the standings.

mod exchange;
mod probe;
mod reply;
mod send;
mod wire;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use redis::Value;

use crate::answer::{Answer, NodeError, NodeErrorKind, NotCounted};
use crate::batch::{Batches, Witnessed};
use crate::clock::Reading;
use crate::connection::{self, Connection, Link};
use crate::request::Request;
use crate::scripts;
use crate::standing::{Errand, RecordKeys, Standings};
use crate::target::Target;
use exchange::NodeCore;
use probe::{StandingRef, timed_out};
use reply::{Exchanged, Reply, unexpected};
use wire::{Call, Purpose, evalsha, plan, script};

/// What a heartbeat's check of one lock key found (see `session.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Checked {
    /// How long nothing there needs a look, in ms: the `PTTL` of a quorlock
    /// holder or a reservation, 0 for anything else.
    pub(crate) wait_ms: i64,
    /// A quorlock holder holds the key and the queue's first entry is a
    /// waiter of this client: the holder's release hands the key on to it
    /// and notifies it.
    pub(crate) first: bool,
}

/// One node of the lock. Each call clones its one `Arc` (the node's own, so
/// calls to different nodes touch different reference counts).
#[derive(Debug)]
pub(crate) struct Node {
    shared: Arc<NodeCore>,
}

/// A node's bounds: the per-node timeout of its calls, and the connect
/// timeout (connecting with the node's check, status reads).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub(crate) call: Duration,
    pub(crate) connect: Duration,
}

impl Node {
    /// Node `index` of a client whose standings are `standings`: every new
    /// connection to it passes the standings' check first. A grant counts
    /// once `replica_acks` replicas acknowledged it (0: at once).
    pub(crate) fn new(
        target: Target,
        timeouts: Timeouts,
        replica_acks: u32,
        standings: Arc<Standings>,
        index: usize,
    ) -> Self {
        let legacy_set: Arc<AtomicBool> = Arc::default();
        let check: connection::Check = {
            let (standings, legacy_set) = (standings.clone(), legacy_set.clone());
            Arc::new(move |connection| {
                check(standings.clone(), index, connection, legacy_set.clone()).boxed()
            })
        };
        let name = standings.name(index).into();
        let standing = Arc::new(StandingRef { standings, index });
        let link = Link::new(target, timeouts.connect, check);
        let batches = Batches::new(
            {
                let standing = standing.clone();
                Box::new(move |witnessed| standing.judge(witnessed))
            },
            {
                let link = link.clone();
                Box::new(move || link.busy())
            },
            {
                let standing = standing.clone();
                Box::new(move || standing.asks())
            },
        );
        Node {
            shared: Arc::new(NodeCore {
                name,
                link,
                timeout: timeouts.call,
                connect_timeout: timeouts.connect,
                legacy_set,
                reads_scripted: AtomicBool::new(false),
                standing,
                replica_acks,
                batches,
            }),
        }
    }

    /// Connects (which checks the node) unless connected; for the first
    /// checks of a client.
    pub(crate) fn connect(
        &self,
    ) -> impl Future<Output = Result<(), NodeErrorKind>> + Send + 'static {
        let link = self.shared.link.clone();
        async move { link.connection().await.map(drop) }
    }

    /// Sends `request` to this node; the answer comes within the call's
    /// bound (the per-node timeout; the connect timeout for a read).
    ///
    /// The call is one future of one type for every request, built in its
    /// box rather than wrapped, so that a lock + unlock cycle does not copy
    /// nested futures per node.
    pub(crate) fn send(&self, request: &Request) -> BoxFuture<'static, Answer> {
        let (purpose, call, reply) = plan(request);
        // A vote that can grant a new key reads the node's witness (its
        // data mark and clock) after it, in the same request (see
        // `batch.rs`).
        let witnessed = matches!(
            request,
            Request::Acquire { .. }
                | Request::Wait { .. }
                | Request::FirstWrite { .. }
                | Request::FirstRead { .. }
                | Request::Gather { .. }
        ) && self.shared.standing.witnesses();
        // A release waits for the batches gathered before it, except where
        // the round that set its keys reached the node (see `Reached`).
        let after_batches = match request {
            Request::Release { reached, .. } => !reached.contains(self.shared.standing.index),
            _ => true,
        };
        // Outside the task's cooperative budget (tokio's): a call's first
        // poll queues its request on the connection (see `Round::collect`),
        // which a spent budget would put off to a later poll, after requests
        // of other tasks made since (a release of the lock, say).
        Box::pin(tokio::task::unconstrained(self.call(
            purpose,
            call,
            reply,
            witnessed,
            after_batches,
        )))
    }

    /// Runs `errand` of the standings on this node (see [`Errand`]), bounded
    /// by the connect timeout.
    pub(crate) fn errand(
        &self,
        keys: RecordKeys,
        errand: Errand,
    ) -> BoxFuture<'static, Result<(), NodeError>> {
        match errand {
            Errand::Record { incarnation, mark } => {
                self.record_incarnation(keys, incarnation, mark).boxed()
            }
            Errand::NoteClockStep { run_id, hold_ms } => {
                let mut cmd = evalsha(&scripts::CLOCK_NOTE, 1, 2);
                cmd.arg(&*keys.clock_steps).arg(&*run_id).arg(hold_ms);
                let call = script(cmd, &scripts::CLOCK_NOTE);
                self.call(Purpose::Read, call, Reply::Any, false, true)
                    .map(|answer| match answer {
                        Answer::Failed(err) | Answer::Unsent(err) => Err(err),
                        _ => Ok(()),
                    })
                    .boxed()
            }
            Errand::ReadClock => self.read_clock().boxed(),
            Errand::Recheck => {
                self.shared.link.reconnect();
                futures::future::ready(Ok(())).boxed()
            }
            Errand::FollowSentinels => {
                let shared = self.shared.clone();
                async move {
                    if shared.link.primary_moved().await {
                        tracing::warn!(
                            node = %shared.name,
                            "the Sentinels name another primary than the one in use (a \
                             failover it did not see): connecting to it, which checks it"
                        );
                    }
                    Ok(())
                }
                .boxed()
            }
        }
    }

    /// Reads the node's witness (its data mark and its clock, `TIME`), if
    /// the node is connected: the background reading (see `clock.rs`).
    fn read_clock(&self) -> impl Future<Output = Result<(), NodeError>> + Send + 'static {
        let shared = self.shared.clone();
        async move {
            let Some(handle) = shared.link.ready() else {
                return Ok(());
            };
            let mut connection = handle.connection;
            let mut asks = shared.standing.asks();
            asks.clock = true;
            if !matches!(connection, Connection::One(_)) {
                asks.mark = None;
            }
            let shape = asks.shape();
            let mut pipeline = redis::Pipeline::with_capacity(shape.len());
            pipeline.ignore_errors();
            asks.add_to(&mut pipeline, || redis::cmd("TIME"));
            let sent = std::time::Instant::now();
            let read = pipeline.query_async::<Value>(&mut connection);
            let reply = match tokio::time::timeout(shared.connect_timeout, read).await {
                Ok(Ok(reply)) => reply,
                Ok(Err(err)) => {
                    let kind = NodeErrorKind::Redis(Arc::new(err));
                    return Err(NodeError::new(shared.name.clone(), kind));
                }
                Err(_) => {
                    let kind = NodeErrorKind::Timeout(shared.connect_timeout);
                    return Err(NodeError::new(shared.name.clone(), kind));
                }
            };
            let received = std::time::Instant::now();
            let Value::Array(mut replies) = reply else {
                return Err(unexpected(shared.name.clone(), &reply));
            };
            let (time, mark) = shape.take(&mut replies);
            let witnessed = Witnessed {
                reading: time.and_then(|time| Reading::from_reply(&time, sent, received)),
                mark,
            };
            // What it shows is acted on inside (held back, noted, told).
            let _ = shared.standing.judge(&witnessed);
            Ok(())
        }
    }

    /// Records `incarnation` in the node's record of incarnations that
    /// counted, and `mark` in its record of data marks (see `standing/`),
    /// each command bounded by the connect timeout.
    pub(crate) fn record_incarnation(
        &self,
        keys: RecordKeys,
        incarnation: Arc<str>,
        mark: Option<Arc<str>>,
    ) -> impl Future<Output = Result<(), NodeError>> + Send + 'static {
        let mut cmds: Vec<redis::Cmd> = match incarnation.is_empty() {
            true => Vec::new(),
            false => keys.adds(&[&*incarnation]).into(),
        };
        cmds.extend(keys.add_marks(mark.as_slice()));
        let calls = cmds.into_iter().map(|cmd| {
            let call = Call::Command { cmd, script: None };
            self.call(Purpose::Read, call, Reply::Any, false, true)
        });
        futures::future::join_all(calls).map(|answers| {
            match answers.into_iter().find_map(|answer| match answer {
                Answer::Failed(err) => Some(err),
                _ => None,
            }) {
                Some(err) => Err(err),
                None => Ok(()),
            }
        })
    }

    /// The client's heartbeat on this node (`scripts::HEARTBEAT`, see
    /// `session.rs`): keeps `live_key` for `lifetime_ms` and checks `keys`.
    /// Returns whether the liveness key was still there and, per key, what
    /// the check found ([`Checked`]). Bounded by the connect timeout (it is
    /// background work); a slow node is not marked skipped by it.
    ///
    /// Cancel safe: dropped, the call goes on only as far as the request was
    /// written.
    pub(crate) fn heartbeat(
        &self,
        live_key: &[u8],
        lifetime_ms: u64,
        keys: &[Arc<[u8]>],
    ) -> impl Future<Output = Result<(bool, Vec<Checked>), NodeError>> + Send + 'static {
        let mut cmd = evalsha(&scripts::HEARTBEAT, keys.len(), 2);
        for key in keys {
            cmd.arg(&**key);
        }
        cmd.arg(live_key).arg(lifetime_ms);
        let (call, sent) = (script(cmd, &scripts::HEARTBEAT), keys.len());
        let shared = self.shared.clone();
        async move {
            let name = shared.name.clone();
            let bound = shared.connect_timeout;
            let reply = match tokio::time::timeout(bound, shared.exchange(&call)).await {
                Ok(Ok(Exchanged { reply, .. })) => reply,
                Ok(Err(kind)) => return Err(NodeError::new(name, kind)),
                Err(_) => return Err(NodeError::new(name, NodeErrorKind::Timeout(bound))),
            };
            let numbers: Option<Vec<i64>> = match &reply {
                Value::Array(items) => items
                    .iter()
                    .map(|item| match item {
                        Value::Int(number) => Some(*number),
                        _ => None,
                    })
                    .collect(),
                _ => None,
            };
            match numbers.as_deref() {
                Some([alive, checks @ ..]) if checks.len() == 2 * sent => {
                    let (waits, firsts) = checks.split_at(sent);
                    let checked = waits.iter().zip(firsts).map(|(&wait_ms, &first)| Checked {
                        wait_ms,
                        first: first == 1,
                    });
                    Ok((*alive == 1, checked.collect()))
                }
                _ => Err(unexpected(name, &reply)),
            }
        }
    }

    /// `host:port` of this node.
    pub(crate) fn name(&self) -> &str {
        &self.shared.name
    }

    /// A call of a round to this node ran out of the per-node timeout: the
    /// node is skipped by votes until it answers a `PING` (as when a call's
    /// own timer fires); returns the call's error.
    pub(crate) fn timed_out(&self) -> NodeError {
        let shared = &self.shared;
        timed_out(&shared.standing, shared.link.clone(), shared.timeout);
        NodeError::new(shared.name.clone(), NodeErrorKind::Timeout(shared.timeout))
    }

    /// Runs `call` on this node's connection (connecting first if needed),
    /// bounded by the per-node timeout (the connect timeout for
    /// [`Purpose::Read`]; a [`Purpose::Cleanup`] by its round), and reads
    /// the reply as `reply` says.
    ///
    /// A [`Purpose::Cleanup`] goes out after the node's batches gathered
    /// before it, unless `after_batches` is false (see `Batches::sent`).
    /// A [`Purpose::Vote`] is not sent to a skipped node. A
    /// [`Purpose::Cleanup`] has no timer of its own: its round waits for it
    /// up to the per-node timeout, then leaves it to finish in the
    /// background (the `redis` crate skips a queued request whose caller
    /// went away, and a release must not be lost to a busy connection). So
    /// a release costs no second box for its request and no timer per node.
    fn call(
        &self,
        purpose: Purpose,
        call: Call,
        reply: Reply,
        timed: bool,
        after_batches: bool,
    ) -> impl Future<Output = Answer> + Send + 'static {
        let skipped = purpose == Purpose::Vote
            && (self.shared.standing.standings).is_skipped(self.shared.standing.index);
        let shared = self.shared.clone();
        async move {
            if skipped {
                let reason = NotCounted::Unresponsive {
                    timeout: shared.timeout,
                };
                let kind = NodeErrorKind::NotCounted(Arc::new(reason));
                return Answer::Unsent(NodeError::new(shared.name.clone(), kind));
            }
            let timeout = if purpose == Purpose::Read {
                shared.connect_timeout
            } else {
                shared.timeout
            };
            // Read only where a grant waits for its replicas.
            let started = (shared.replica_acks > 0).then(std::time::Instant::now);
            let exchange = async {
                // A release goes out after the votes batched before it (see
                // `Batches::sent`); boxed, as it rarely waits.
                if purpose == Purpose::Cleanup
                    && after_batches
                    && let Some(last) = shared.batches.unsent()
                {
                    Box::pin(shared.batches.sent(last)).await;
                }
                let exchanged = shared.exchange_with(&call, timed).await?;
                let answer = shared.answer(exchanged, reply);
                match started {
                    // Boxed: every call's future (one type for all) stays
                    // the size it is without the option.
                    Some(started) if purpose == Purpose::Vote && answer.is_granted() => {
                        Box::pin(shared.acknowledged(answer, started + timeout)).await
                    }
                    _ => Ok(answer),
                }
            };
            let answer = if purpose == Purpose::Cleanup {
                Ok(exchange.await)
            } else {
                tokio::time::timeout(timeout, exchange).await
            };
            let name = &shared.name;
            match answer {
                Ok(Ok(answer)) => answer,
                Ok(Err(kind)) => Answer::Failed(NodeError::new(name.clone(), kind)),
                Err(_) => {
                    if purpose != Purpose::Read {
                        timed_out(&shared.standing, shared.link.clone(), timeout);
                    }
                    Answer::Failed(NodeError::new(
                        name.clone(),
                        NodeErrorKind::Timeout(timeout),
                    ))
                }
            }
        }
    }
}

/// Checks a new connection to node `index` (see `standing/`). Before
/// Redis 7.0, `SET NX GET` is refused: such a node starts with `SET NX PX`
/// rather than pay a refused round trip.
async fn check(
    standings: Arc<Standings>,
    index: usize,
    connection: Connection,
    legacy_set: Arc<AtomicBool>,
) -> Result<(), NodeErrorKind> {
    let major = standings.check(index, connection).await?;
    if major.is_some_and(|major| major < 7) {
        legacy_set.store(true, Ordering::Relaxed);
    }
    Ok(())
}

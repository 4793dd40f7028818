//! One Redis node: its connection (`connection.rs`) and the lock operations,
//! each bounded: votes and releases by the per-node timeout, the
//! status reads by the connect timeout (as is connecting, with the node's
//! check: see `connection.rs` and `standing.rs`).
//!
//! A node whose call timed out is *skipped* by votes (an immediate vote
//! against, instead of one more request piling up behind a frozen server)
//! until it answers a `PING`. Skipped and "a probe is running" are one state,
//! set only by the task that probes and cleared when that task ends, however
//! it ends (an answer, or its runtime shutting down): a skipped node always
//! has a probe on the way.

use std::future::Future;

use futures::FutureExt;
use futures::future::BoxFuture;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::{Cmd, ErrorKind, RedisError, Script, ServerErrorKind, Value};

use crate::answer::{Answer, NodeError, NodeErrorKind, NotCounted};
use crate::batch::{Batches, Commands, Expiry, Judged, Landed};
use crate::clock::Reading;
use crate::connection::{self, Connection, Link};
use crate::queue::{self, Place};
use crate::read_round::{self, Outcome};
use crate::request::{LockId, Request, RwKeys, Shape};
use crate::scripts;
use crate::standing::{Errand, RecordKeys, Standings};
use crate::target::Target;
use crate::tasks;

/// What a call is for, which decides its bound and how it treats a slow node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    /// Asks for a vote (acquire, extend, fencing write-back): skipped while
    /// the node is unresponsive.
    Vote,
    /// Removes our key (release): always sent, and not bounded here but by
    /// its round (see `Engine::release`), which leaves it to finish in the
    /// background.
    Cleanup,
    /// Only reads (status): bounded by the connect
    /// timeout, since a fresh client may have to connect first; a timeout
    /// does not mark the node unresponsive.
    Read,
}

/// How long the primary of a Sentinel node may go without answering a
/// probe before the node is connected again, through the Sentinels.
const SILENT_PRIMARY: Duration = Duration::from_secs(1);

/// A call timed out: skip node `index` and probe it with `PING` (each
/// bounded by `timeout`) until it answers. Without a runtime to probe on, the
/// node is not skipped. A Sentinel or cluster node silent for
/// [`SILENT_PRIMARY`] is connected again (through the Sentinels or the
/// topology, which may name another primary by then), once per such span.
fn timed_out(standing: &Arc<Standing>, link: Arc<Link>, timeout: Duration) {
    if !tasks::has_runtime() {
        return;
    }
    if !standing.standings.skip(standing.index) {
        return; // a probe is on its way
    }
    let probe = Probe {
        standing: standing.clone(),
    };
    tracing::debug!(node = %probe.name(), "node timed out: skipped until it answers a PING");
    tasks::spawn(async move {
        let probe = probe;
        let mut silent_since = std::time::Instant::now();
        loop {
            let ping = async {
                let handle = link.connection().await?;
                let mut connection = handle.connection;
                redis::cmd("PING")
                    .query_async::<Value>(&mut connection)
                    .await
                    .map_err(|err| NodeErrorKind::Redis(Arc::new(err)))
            };
            // Any answer, even an error, shows the node is not frozen.
            if tokio::time::timeout(timeout, ping).await.is_ok() {
                break;
            }
            // A primary that Sentinels manage and that went silent (frozen,
            // or cut off) may have been replaced: connect again, to the one
            // the Sentinels (or the cluster's topology) name now; once per
            // second of silence, so that a connection that takes longer to
            // make than a probe's wait (a cluster's: every primary, checked)
            // is not dropped as soon as it is made.
            if link.follows_failovers() && silent_since.elapsed() >= SILENT_PRIMARY {
                link.reconnect();
                silent_since = std::time::Instant::now();
            }
            tokio::time::sleep(timeout).await;
        }
        tracing::debug!(node = %probe.name(), "node answers again");
    });
}

/// The running probe of a skipped node: its end, however it comes, ends the
/// skipping.
struct Probe {
    standing: Arc<Standing>,
}

impl Standing {
    /// What a reading of the node's clock says of the grants before it (see
    /// `Standings::see_clock`).
    fn judge(&self, reading: &Reading) -> Judged {
        (self.standings.see_clock(self.index, reading)).map_err(Arc::new)
    }
}

impl Probe {
    fn name(&self) -> String {
        self.standing.standings.name(self.standing.index).to_owned()
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.standing.standings.unskip(self.standing.index);
    }
}

/// One node's place in its client's [`Standings`], in the node's own
/// [`Shared`] (a call clones that one `Arc`, not the `Standings` that all
/// nodes share), and in the probe of a skipped node.
#[derive(Debug)]
struct Standing {
    standings: Arc<Standings>,
    index: usize,
}

/// One node of the lock. Each call clones its one `Arc` (the node's own, so
/// calls to different nodes touch different reference counts).
#[derive(Debug)]
pub(crate) struct Node {
    shared: Arc<Shared>,
}

/// What a node's calls share.
#[derive(Debug)]
struct Shared {
    /// `host:port` (or the socket path), for errors and logs; never credentials.
    name: Arc<str>,
    link: Arc<Link>,
    timeout: Duration,
    connect_timeout: Duration,
    /// Set once the server refused `SET NX GET` (Redis < 7.0).
    legacy_set: Arc<AtomicBool>,
    /// Set once the server refused a reader's round without a script (see
    /// `read_round.rs`): its rounds run the script from then on.
    reads_scripted: AtomicBool,
    /// Whether its votes count (in the standings of all the client's nodes).
    standing: Arc<Standing>,
    /// How many replicas must acknowledge a grant before it counts (0: off).
    replica_acks: u32,
    /// The node's timed votes, sent in batches (see `batch.rs`).
    batches: Arc<Batches>,
}

/// One exchange with a node.
enum Call {
    /// One command; `script` is the script it runs by `EVALSHA` (loaded,
    /// and the command sent again, on `NOSCRIPT`).
    Command {
        cmd: Cmd,
        script: Option<&'static Script>,
    },
    /// `SET key token NX GET PX ttl` (`SET NX PX` before Redis 7.0), and
    /// with `counter_key` an `INCR` of the fencing counter right after it,
    /// in the same request (see [`fenced`]); or, for a writer's first
    /// round (`check`), on the writer's key, with an `EXISTS` of the
    /// readers' set and the intent right after it (see [`first_write`]).
    /// Built when sent, so that the fallback costs nothing until a node
    /// needs it.
    Acquire {
        lock: LockId,
        ttl_ms: u64,
        counter_key: Option<Arc<[u8]>>,
        check: Option<Arc<RwKeys>>,
    },
    /// A reader's round: for the `first` of its call, four plain commands
    /// where the node allows it (see `read_round.rs`); else the read
    /// script, which also drops the ended entries first where `prune`.
    /// Built when sent, as it aims its entry's end by the node's clock at
    /// that moment.
    Read {
        lock: LockId,
        keys: Arc<RwKeys>,
        ttl_ms: u64,
        first: bool,
        prune: bool,
    },
}

/// How a node's reply to a [`Call`] reads as an [`Answer`].
#[derive(Debug, Clone, Copy)]
enum Reply {
    /// `SET NX GET` (nil: set) or `SET NX` (OK: set).
    SetNx,
    /// `SET NX GET` (or `SET NX`) and the counter's `INCR`, pipelined.
    Fenced,
    /// A writer's first round: `SET NX GET` (or `SET NX`) on the writer's
    /// key and the `EXISTS` of the readers' set and the intent, pipelined:
    /// granted when it set the key and neither exists.
    FirstWrite,
    /// The queue script: `{1, counter}` (granted; `counter` only with
    /// fencing on) or `{0, ticket}` (queued).
    Queued { fenced: bool },
    /// The all-or-nothing acquire script of a lock on several resources:
    /// `{1, counter}` (granted; `counter` only with fencing on) or `{0, 0}`.
    AllOrNone { fenced: bool },
    /// A script's 1 (yes) or 0 (no).
    YesNo,
    /// The inspect script: `{token, pttl}` or nil.
    Holds,
    /// Any reply will do (a record's `SADD`).
    Any,
    /// A count (of readers): `Granted` with the count, whatever it is.
    Count,
}

impl Reply {
    /// The answer in `reply`, which came from the legacy command when
    /// `legacy`; `Err` with the reply when the protocol does not allow it.
    fn read(self, reply: Value, legacy: bool) -> Result<Answer, Value> {
        let answer = match (self, reply) {
            // With GET: nil means the key was absent and is now ours.
            (Reply::SetNx, Value::Nil) if !legacy => Answer::Granted(None),
            (Reply::SetNx, Value::Okay) if legacy => Answer::Granted(None),
            (Reply::SetNx, Value::BulkString(_)) if !legacy => Answer::Refused(None),
            (Reply::SetNx, Value::Nil) => Answer::Refused(None),
            (Reply::Fenced, Value::Array(items)) => match (items.as_slice(), legacy) {
                ([Value::Nil, Value::Int(counter)], false)
                | ([Value::Okay, Value::Int(counter)], true)
                    if *counter > 0 =>
                {
                    Answer::Granted(u64::try_from(*counter).ok())
                }
                ([Value::BulkString(_), Value::Int(_)], false)
                | ([Value::Nil, Value::Int(_)], true) => Answer::Refused(None),
                _ => return Err(Value::Array(items)),
            },
            (Reply::FirstWrite, Value::Array(items)) => match (items.as_slice(), legacy) {
                ([Value::Nil, Value::Int(0)], false) | ([Value::Okay, Value::Int(0)], true) => {
                    Answer::Granted(None)
                }
                ([Value::Nil | Value::BulkString(_), Value::Int(_)], false)
                | ([Value::Nil | Value::Okay, Value::Int(_)], true) => Answer::Refused(None),
                _ => return Err(Value::Array(items)),
            },
            (Reply::Queued { fenced }, Value::Array(items)) => match items.as_slice() {
                [Value::Int(1), _] if !fenced => Answer::Granted(None),
                [Value::Int(1), Value::Int(counter)] if *counter > 0 => {
                    Answer::Granted(u64::try_from(*counter).ok())
                }
                [Value::Int(0), Value::Int(ticket)] if *ticket > 0 => {
                    Answer::Refused(Some(ticket.unsigned_abs()))
                }
                _ => return Err(Value::Array(items)),
            },
            (Reply::AllOrNone { fenced }, Value::Array(items)) => match items.as_slice() {
                [Value::Int(1), _] if !fenced => Answer::Granted(None),
                [Value::Int(1), Value::Int(counter)] if *counter > 0 => {
                    Answer::Granted(u64::try_from(*counter).ok())
                }
                [Value::Int(0), Value::Int(0)] => Answer::Refused(None),
                _ => return Err(Value::Array(items)),
            },
            (Reply::YesNo, Value::Int(1)) | (Reply::Any, _) => Answer::Granted(None),
            (Reply::Count, Value::Int(count)) if count >= 0 => {
                Answer::Granted(u64::try_from(count).ok())
            }
            (Reply::YesNo, Value::Int(0)) | (Reply::Holds, Value::Nil) => Answer::Refused(None),
            (Reply::Holds, Value::Array(items)) => match items.as_slice() {
                // A foreign value need not be UTF-8; ours always is.
                [Value::BulkString(token), Value::Int(pttl_ms)] => Answer::Holds {
                    token: crate::request::unmarked(&String::from_utf8_lossy(token)).to_owned(),
                    pttl_ms: *pttl_ms,
                },
                _ => return Err(Value::Array(items)),
            },
            (_, reply) => return Err(reply),
        };
        Ok(answer)
    }
}

impl Node {
    /// Node `index` of a client whose standings are `standings`: every new
    /// connection to it passes the standings' check first. A grant counts
    /// once `replica_acks` replicas acknowledged it (0: at once).
    pub(crate) fn new(
        target: Target,
        (timeout, connect_timeout): (Duration, Duration),
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
        let standing = Arc::new(Standing { standings, index });
        let link = Link::new(target, connect_timeout, check);
        let batches = Batches::new(
            {
                let standing = standing.clone();
                Box::new(move |reading| standing.judge(reading))
            },
            {
                let link = link.clone();
                Box::new(move || link.busy())
            },
        );
        Node {
            shared: Arc::new(Shared {
                name,
                link,
                timeout,
                connect_timeout,
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
    /// The call is one future of one type for every request (built in its
    /// box, not wrapped: a lock + unlock cycle used to copy four kilobytes of
    /// nested futures per node).
    pub(crate) fn send(&self, request: &Request) -> BoxFuture<'static, Answer> {
        let (purpose, call, reply) = plan(request);
        // A vote that can grant a new key reads the node's clock after it,
        // in the same request (see `clock.rs`).
        let timed = matches!(
            request,
            Request::Acquire { .. }
                | Request::Wait { .. }
                | Request::FirstWrite { .. }
                | Request::FirstRead { .. }
                | Request::Gather { .. }
        ) && self.shared.standing.standings.clock_on();
        Box::pin(self.call(purpose, call, reply, timed))
    }

    /// Runs `errand` of the standings on this node (see [`Errand`]), bounded
    /// by the connect timeout.
    pub(crate) fn errand(
        &self,
        keys: RecordKeys,
        errand: Errand,
    ) -> BoxFuture<'static, Result<(), NodeError>> {
        match errand {
            Errand::Record(incarnation) => self.record_incarnation(keys, incarnation).boxed(),
            Errand::NoteClockStep { run_id, hold_ms } => {
                let mut cmd = evalsha(&scripts::CLOCK_NOTE, 1, 2);
                cmd.arg(&*keys.clock_steps).arg(&*run_id).arg(hold_ms);
                let call = script(cmd, &scripts::CLOCK_NOTE);
                self.call(Purpose::Read, call, Reply::Any, false)
                    .map(|answer| match answer {
                        Answer::Failed(err) | Answer::Unsent(err) => Err(err),
                        _ => Ok(()),
                    })
                    .boxed()
            }
            Errand::ReadClock => self.read_clock().boxed(),
        }
    }

    /// Reads the node's clock (`TIME`) into its history, if the node is
    /// connected (the background reading, see `clock.rs`).
    fn read_clock(&self) -> impl Future<Output = Result<(), NodeError>> + Send + 'static {
        let shared = self.shared.clone();
        async move {
            let Some(handle) = shared.link.ready() else {
                return Ok(());
            };
            let mut connection = handle.connection;
            let sent = std::time::Instant::now();
            let cmd = redis::cmd("TIME");
            let time = cmd.query_async::<Value>(&mut connection);
            let reply = match tokio::time::timeout(shared.connect_timeout, time).await {
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
            if let Some(reading) = Reading::from_reply(&reply, sent, received) {
                let standing = &shared.standing;
                // A step is acted on inside (held back, noted, told).
                let _ = standing.standings.see_clock(standing.index, &reading);
            }
            Ok(())
        }
    }

    /// Records `incarnation` in the node's record of incarnations that
    /// counted (see `standing.rs`), each command bounded by the connect
    /// timeout.
    pub(crate) fn record_incarnation(
        &self,
        keys: RecordKeys,
        incarnation: Arc<str>,
    ) -> impl Future<Output = Result<(), NodeError>> + Send + 'static {
        let calls = keys.adds(&[&*incarnation]).map(|cmd| {
            let call = Call::Command { cmd, script: None };
            self.call(Purpose::Read, call, Reply::Any, false)
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
    /// Returns whether the liveness key was still there and, per key, how
    /// long nothing there needs a look (ms). Bounded by the connect timeout
    /// (it is background work); a slow node is not marked skipped by it.
    ///
    /// Cancel safe: dropped, the call goes on only as far as the request was
    /// written.
    pub(crate) fn heartbeat(
        &self,
        live_key: &[u8],
        lifetime_ms: u64,
        keys: &[Arc<[u8]>],
    ) -> impl Future<Output = Result<(bool, Vec<i64>), NodeError>> + Send + 'static {
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
                Some([alive, waits @ ..]) if waits.len() == sent => {
                    Ok((*alive == 1, waits.to_vec()))
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

impl Shared {
    /// A grant, once `replica_acks` of the node's replicas acknowledged it
    /// (`WAIT`, on the connection that made it, ending a little before the
    /// call's `deadline`, so that a slow acknowledgement is an answer and
    /// not a timeout that would mark the node unresponsive); with fewer, a
    /// failure that says so.
    async fn acknowledged(
        &self,
        granted: Answer,
        deadline: std::time::Instant,
    ) -> Result<Answer, NodeErrorKind> {
        let mut connection = self.link.connection().await?.connection;
        // Three quarters of what is left, at least 1 ms (`WAIT` with 0
        // would block until the replicas answer, however long).
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let timeout_ms = u64::try_from((left * 3 / 4).as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let acknowledged: i64 = redis::cmd("WAIT")
            .arg(self.replica_acks)
            .arg(timeout_ms)
            .query_async(&mut connection)
            .await
            .map_err(|err| NodeErrorKind::Redis(Arc::new(err)))?;
        if acknowledged >= i64::from(self.replica_acks) {
            return Ok(granted);
        }
        let kind = NodeErrorKind::ReplicasBehind {
            acknowledged: u32::try_from(acknowledged).unwrap_or(0),
            wanted: self.replica_acks,
        };
        Ok(Answer::Failed(NodeError::new(self.name.clone(), kind)))
    }

    /// The answer in `exchanged`, read as `reply`, with what the node's
    /// clock, read after it (if it was), showed.
    fn answer(&self, exchanged: Exchanged, reply: Reply) -> Answer {
        let answer = (reply.read(exchanged.reply, exchanged.legacy))
            .unwrap_or_else(|value| Answer::Failed(unexpected(self.name.clone(), &value)));
        match exchanged.clock {
            Clock::Unread => answer,
            Clock::Read(reading) => self.clock_checked(answer, self.standing.judge(&reading)),
            Clock::Judged(judged) => self.clock_checked(answer, judged),
        }
    }

    /// A vote's `answer` with what the node's clock, read after it, showed
    /// (`judged`, see `clock.rs`): a grant of a node whose clock stepped, or
    /// may have, does not count.
    fn clock_checked(&self, answer: Answer, judged: Judged) -> Answer {
        match judged {
            Err(reason) if answer.is_granted() => {
                let kind = NodeErrorKind::NotCounted(reason);
                Answer::Failed(NodeError::new(self.name.clone(), kind))
            }
            _ => answer,
        }
    }

    /// Runs `call` on the link's connection (connecting first if needed),
    /// with its fallbacks; a call that shows the connection broken marks it
    /// so. The reply comes with whether the legacy command gave it.
    async fn exchange(&self, call: &Call) -> Result<Exchanged, NodeErrorKind> {
        self.exchange_with(call, false).await
    }

    /// [`exchange`](Self::exchange), `timed`: with the node's clock read
    /// after the call, in the same request (see `clock.rs`).
    async fn exchange_with(&self, call: &Call, timed: bool) -> Result<Exchanged, NodeErrorKind> {
        let handle = self.link.connection().await?;
        let id = handle.id();
        let mut connection = handle.connection;
        let outstanding = self.link.outstanding();
        let answer = self.fallbacks(&mut connection, call, timed).await;
        drop(outstanding);
        if let Err(err) = &answer
            && connection::is_broken(err)
        {
            self.link.broken(id);
        }
        answer.map_err(|err| NodeErrorKind::Redis(Arc::new(err)))
    }

    /// `call`'s request, and its fallback where the node refuses it: the
    /// script loaded on `NOSCRIPT` (a node that restarted, or ran `SCRIPT
    /// FLUSH`), `SET NX` instead of `SET NX GET` before Redis 7.0; a fenced
    /// grant whose counter the node had lost is seeded ([`seeded`]).
    async fn fallbacks(
        &self,
        connection: &mut Connection,
        call: &Call,
        timed: bool,
    ) -> Result<Exchanged, RedisError> {
        let (lock, ttl_ms, counter_key, check) = match call {
            Call::Command { cmd, script } if timed => {
                return Box::pin(run_timed(connection, cmd, *script, &self.batches)).await;
            }
            Call::Command { cmd, script } => {
                return run(connection, cmd, *script)
                    .await
                    .map(|reply| Exchanged::plain(reply, false));
            }
            Call::Read {
                lock,
                keys,
                ttl_ms,
                first,
                prune,
            } => {
                let read = ReadCall {
                    token: &lock.token,
                    keys,
                    ttl_ms: *ttl_ms,
                    scripted: !*first || *prune,
                    prune: *prune,
                };
                return Box::pin(self.read_hold(connection, read, timed)).await;
            }
            Call::Acquire {
                lock,
                ttl_ms,
                counter_key,
                check,
            } => (lock, *ttl_ms, counter_key.as_deref(), check.as_deref()),
        };
        let acquired = AcquireCall {
            lock,
            key: check.map_or(&lock.key, |keys| &keys.write),
            ttl_ms,
            counter_key,
            check,
            timed: timed.then_some(&self.batches),
        };
        match (counter_key, check) {
            (None, None) => self.acquire(connection, &acquired).await,
            (_, Some(keys)) => {
                let exchanged = Box::pin(self.acquire(connection, &acquired)).await?;
                Box::pin(first_write(connection, lock, keys, exchanged)).await
            }
            // Boxed: the pipeline and the seeding would make every node
            // call's future (one type for all requests) a third larger.
            (Some(counter_key), None) => {
                let mut exchanged = Box::pin(self.acquire(connection, &acquired)).await?;
                let legacy = exchanged.legacy;
                let seeding = seeded(connection, lock, counter_key, exchanged.reply, legacy);
                exchanged.reply = Box::pin(seeding).await?;
                Ok(exchanged)
            }
        }
    }

    /// [`acquire`], with `SET NX GET` first unless this node refused it
    /// before; its reply, with whether the legacy `SET NX` gave it.
    async fn acquire(
        &self,
        connection: &mut Connection,
        call: &AcquireCall<'_>,
    ) -> Result<Exchanged, RedisError> {
        let legacy = self.legacy_set.load(Ordering::Relaxed);
        match acquire(connection, call, !legacy).await {
            Err(err) if !legacy && is_syntax_error(&err) => {
                tracing::debug!("SET NX GET refused (Redis < 7.0): using SET NX on this node");
                self.legacy_set.store(true, Ordering::Relaxed);
                let exchanged = acquire(connection, call, false).await;
                exchanged.map(|exchanged| Exchanged {
                    legacy: true,
                    ..exchanged
                })
            }
            exchanged => exchanged.map(|exchanged| Exchanged {
                legacy,
                ..exchanged
            }),
        }
    }
}

impl Shared {
    /// A reader's round (see [`Call::Read`]): without a script where the
    /// node allows it, else (and where that missed, or the node refused
    /// it) the read script.
    async fn read_hold(
        &self,
        connection: &mut Connection,
        read: ReadCall<'_>,
        timed: bool,
    ) -> Result<Exchanged, RedisError> {
        if let Some(node_clock_us) = self.read_aim(connection, &read, timed) {
            let ends_ms = read_round::aim(node_clock_us, read.ttl_ms);
            match read_unscripted(connection, &self.batches, &read, ends_ms).await {
                Ok(Some(exchanged)) => return Ok(exchanged),
                Ok(None) => tracing::debug!(
                    node = %self.name,
                    "a reader's entry was aimed short of the node's clock: the read script decides"
                ),
                Err(err) if matches!(err.kind(), ErrorKind::Server(_)) => {
                    // `ERR`: the commands or their flags are unknown there.
                    if err.code() == Some("ERR") {
                        tracing::debug!(
                            node = %self.name,
                            "a reader's round without a script refused ({err}): \
                             the read script from now on"
                        );
                        self.reads_scripted.store(true, Ordering::Relaxed);
                    }
                }
                Err(err) => return Err(err),
            }
        }
        let cmd = read_script(read.keys, read.token, read.ttl_ms, read.prune);
        if timed {
            Box::pin(run_timed(
                connection,
                &cmd,
                Some(&scripts::READ),
                &self.batches,
            ))
            .await
        } else {
            let reply = run(connection, &cmd, Some(&scripts::READ)).await?;
            Ok(Exchanged::plain(reply, false))
        }
    }

    /// The most the node's clock reads now (µs since the Unix epoch), to aim
    /// a reader's round without a script at, where the node allows one: a
    /// single server (not a cluster) of Redis 7.0 or later that has not
    /// refused one, its clock read after the round (`timed`) and read
    /// before, for a round not `scripted`.
    fn read_aim(&self, connection: &Connection, read: &ReadCall<'_>, timed: bool) -> Option<i64> {
        let allowed = timed
            && !read.scripted
            && matches!(connection, Connection::One(_))
            && !self.legacy_set.load(Ordering::Relaxed)
            && !self.reads_scripted.load(Ordering::Relaxed);
        let standing = &self.standing;
        allowed
            .then(|| standing.standings.node_clock_at_most(standing.index))
            .flatten()
    }
}

/// A reader's round, as [`Call::Read`] asks it.
#[derive(Clone, Copy)]
struct ReadCall<'a> {
    token: &'a str,
    keys: &'a RwKeys,
    ttl_ms: u64,
    /// The script decides, wherever the node is: not the first round of
    /// its call (a reader that waits behind a writer retries by the
    /// script, which leaves nothing where it is refused), or one that
    /// prunes.
    scripted: bool,
    prune: bool,
}

/// A reader's round without a script (see `read_round.rs`) on a single
/// server, its entry ending at `ends_ms`: the answer (`1` granted, `0`
/// refused) with the node's clock read after it, or `None` where the aim
/// missed. A refused or missed round's entry is taken back (`ZREM`) first;
/// a server's error in reply to any of its commands is the error, once the
/// entry is taken back.
async fn read_unscripted(
    connection: &mut Connection,
    batches: &Arc<Batches>,
    read: &ReadCall<'_>,
    ends_ms: i64,
) -> Result<Option<Exchanged>, RedisError> {
    let commands = read_round::commands(read.keys, read.token, ends_ms, read.ttl_ms);
    let landed = match &*connection {
        Connection::One(one) if batches.busy() => batches.send(commands, None, one).await,
        _ => read_alone(connection, commands).await,
    };
    let landed = match landed {
        Ok(landed) => landed,
        Err(err) => {
            // Best effort: where the connection broke, the round's cleanup
            // takes the entry back.
            let _ = run(connection, &read_round::undo(read.keys, read.token), None).await;
            return Err(err);
        }
    };
    let outcome = read_round::verdict(&landed.reply, landed.reading.as_ref(), ends_ms, read.ttl_ms);
    if outcome != Some(Outcome::Granted) {
        run(connection, &read_round::undo(read.keys, read.token), None).await?;
    }
    let clock = match (landed.clock, landed.reading) {
        (Some(judged), _) => Clock::Judged(judged),
        (None, Some(reading)) => Clock::Read(reading),
        (None, None) => Clock::Unread,
    };
    let answer = |granted: bool| Exchanged {
        reply: Value::Int(i64::from(granted)),
        legacy: false,
        clock,
    };
    match outcome {
        Some(Outcome::Granted) => Ok(Some(answer(true))),
        Some(Outcome::Refused) => Ok(Some(answer(false))),
        Some(Outcome::Missed) => Ok(None),
        None => Err(RedisError::from((
            ErrorKind::Parse,
            "a reader's round had replies its commands cannot give",
        ))),
    }
}

/// [`read_unscripted`]'s `commands` in a request of their own, with `TIME`
/// pipelined after them: their replies, with the reading (not judged yet).
async fn read_alone(connection: &mut Connection, commands: Commands) -> Result<Landed, RedisError> {
    let Commands(first, then) = commands;
    let mut pipeline = redis::Pipeline::with_capacity(2 + then.len());
    pipeline.ignore_errors().add_command(first);
    for then in then {
        pipeline.add_command(then);
    }
    pipeline.cmd("TIME");
    let sent = std::time::Instant::now();
    let reply: Value = pipeline.query_async(connection).await?;
    let received = std::time::Instant::now();
    let Value::Array(mut items) = reply else {
        return Err(RedisError::from((
            ErrorKind::Parse,
            "a pipeline's replies missing",
        )));
    };
    let time = items.pop();
    if let Some(Value::ServerError(err)) =
        (items.iter()).find(|item| matches!(item, Value::ServerError(_)))
    {
        return Err(RedisError::from(err.clone()));
    }
    Ok(Landed {
        reply: Value::Array(items),
        clock: None,
        reading: time.and_then(|time| Reading::from_reply(&time, sent, received)),
    })
}

/// What `request` sends, how long it may take, and how its reply reads.
fn plan(request: &Request) -> (Purpose, Call, Reply) {
    match request {
        Request::Acquire {
            lock,
            ttl_ms,
            counter_key,
        } => acquire_plan(lock, *ttl_ms, counter_key),
        Request::Wait {
            lock,
            ttl_ms,
            counter_key,
            waiter,
            ticket,
        } => {
            let fenced = counter_key.is_some();
            let call = wait(lock, *ttl_ms, counter_key.as_deref(), waiter, *ticket);
            (Purpose::Vote, call, Reply::Queued { fenced })
        }
        Request::Gather {
            lock,
            ttl_ms,
            counter_key,
            held,
        } => gather(lock, *ttl_ms, counter_key.as_deref(), held),
        Request::FirstWrite { lock, ttl_ms } => first_write_plan(lock, *ttl_ms),
        Request::FirstRead { lock, ttl_ms } => match &lock.shape {
            Shape::Read(keys) => (
                Purpose::Vote,
                read_call(lock, keys, *ttl_ms, true),
                Reply::YesNo,
            ),
            _ => acquire_plan(lock, *ttl_ms, &None),
        },
        Request::Extend { lock, ttl_ms } => (Purpose::Vote, extension(lock, *ttl_ms), Reply::YesNo),
        Request::WriteBack {
            lock,
            counter_key,
            fencing_token,
        } => {
            let call = write_back(lock, counter_key, *fencing_token);
            (Purpose::Vote, call, Reply::YesNo)
        }
        // Always sent: a node that was slow may still hold our key.
        Request::Release { lock, place } => (Purpose::Cleanup, release(lock, place), Reply::YesNo),
        Request::CountReaders { key } => read(&scripts::COUNT_READERS, key, Reply::Count),
        Request::Record {
            lock,
            record,
            value,
        } => {
            let mut cmd = evalsha(&scripts::RECORD, 2, 2);
            cmd.arg(&*lock.key)
                .arg(&**record)
                .arg(&*lock.token)
                .arg(&**value);
            let call = script(cmd, &scripts::RECORD);
            // Always sent, as a release: a withdrawal must reach every node.
            (Purpose::Cleanup, call, Reply::YesNo)
        }
        Request::Inspect { key } => read(&scripts::INSPECT, key, Reply::Holds),
    }
}

/// A read (status) of `key` by `read_script`, whose reply reads as `reply`.
fn read(read_script: &'static Script, key: &[u8], reply: Reply) -> (Purpose, Call, Reply) {
    let mut cmd = evalsha(read_script, 1, 0);
    cmd.arg(key);
    (Purpose::Read, script(cmd, read_script), reply)
}

/// What a [`Request::FirstWrite`] sends (a [`Call::Acquire`] on the
/// writer's key, checked), and how its reply reads.
fn first_write_plan(lock: &LockId, ttl_ms: u64) -> (Purpose, Call, Reply) {
    let check = match &lock.shape {
        Shape::Write { keys, .. } => Some(keys.clone()),
        _ => None,
    };
    let call = Call::Acquire {
        lock: lock.clone(),
        ttl_ms,
        counter_key: None,
        check,
    };
    (Purpose::Vote, call, Reply::FirstWrite)
}

/// What a [`Request::Acquire`] sends, by the lock's shape, and how its
/// reply reads.
fn acquire_plan(
    lock: &LockId,
    ttl_ms: u64,
    counter_key: &Option<Arc<[u8]>>,
) -> (Purpose, Call, Reply) {
    let fenced = counter_key.is_some();
    match &lock.shape {
        Shape::One => {
            let reply = if fenced { Reply::Fenced } else { Reply::SetNx };
            (Purpose::Vote, acquisition(lock, ttl_ms, counter_key), reply)
        }
        Shape::All(_) => {
            let call = acquire_all(lock, ttl_ms, counter_key.as_deref());
            (Purpose::Vote, call, Reply::AllOrNone { fenced })
        }
        Shape::Read(keys) => (
            Purpose::Vote,
            read_call(lock, keys, ttl_ms, false),
            Reply::YesNo,
        ),
        Shape::Write {
            keys,
            intent,
            intent_ms,
        } => {
            let mut cmd = evalsha(&scripts::WRITE, 3 + usize::from(fenced), 4);
            cmd.arg(&*keys.write).arg(&*keys.read).arg(&*keys.intent);
            if let Some(counter_key) = counter_key {
                cmd.arg(&**counter_key);
            }
            cmd.arg(&*lock.token)
                .arg(ttl_ms)
                .arg(intent.as_deref().unwrap_or(""))
                .arg(*intent_ms);
            (
                Purpose::Vote,
                script(cmd, &scripts::WRITE),
                Reply::AllOrNone { fenced },
            )
        }
    }
}

/// The extend script's call, by the lock's shape: a plain lock's (on a
/// writer's key too), the one that extends several keys all or none, or a
/// reader's.
fn extension(lock: &LockId, ttl_ms: u64) -> Call {
    let (extend, key): (&'static Script, &[u8]) = match &lock.shape {
        Shape::All(_) => {
            let mut cmd = evalsha(&scripts::EXTEND_ALL, lock.key_count(), 2);
            for key in lock.keys() {
                cmd.arg(key);
            }
            cmd.arg(&*lock.token).arg(ttl_ms);
            return script(cmd, &scripts::EXTEND_ALL);
        }
        Shape::Read(keys) => (&scripts::READ_EXTEND, &keys.read),
        Shape::One => (&scripts::EXTEND, &lock.key),
        Shape::Write { keys, .. } => (&scripts::EXTEND, &keys.write),
    };
    let mut cmd = evalsha(extend, 1, 2);
    cmd.arg(key).arg(&*lock.token).arg(ttl_ms);
    script(cmd, extend)
}

/// The fencing write-back script's call.
fn write_back(lock: &LockId, counter_key: &[u8], fencing_token: u64) -> Call {
    let mut cmd = evalsha(&scripts::FENCE_WRITE_BACK, 2, 2);
    // A reader has no fencing token, so no write-back: its key is not a string.
    cmd.arg(lock.held_key().unwrap_or(&lock.key))
        .arg(counter_key)
        .arg(&*lock.token)
        .arg(fencing_token);
    script(cmd, &scripts::FENCE_WRITE_BACK)
}

/// The release's call: the release script (of a lock on several
/// resources: the script that releases them all, with no waiter's place:
/// such a lock never waits in a queue itself; its steps do, as plain
/// locks), or for a reader a plain `ZREM` of its entry.
fn release(lock: &LockId, place: &Place) -> Call {
    match &lock.shape {
        Shape::One => {
            let mut cmd = evalsha(&scripts::RELEASE, 1, 4);
            cmd.arg(&*lock.key).arg(&*lock.token);
            place_args(&mut cmd, place);
            script(cmd, &scripts::RELEASE)
        }
        Shape::All(_) => {
            let mut cmd = evalsha(&scripts::RELEASE_ALL, lock.key_count(), 1);
            for key in lock.keys() {
                cmd.arg(key);
            }
            cmd.arg(&*lock.token);
            script(cmd, &scripts::RELEASE_ALL)
        }
        // A reader's entry is its own: a plain `ZREM` (1: it was there).
        Shape::Read(keys) => {
            let mut cmd = Cmd::with_capacity(3, 128);
            cmd.arg("ZREM").arg(&*keys.read).arg(&*lock.token);
            Call::Command { cmd, script: None }
        }
        Shape::Write { keys, .. } => {
            let mut cmd = evalsha(&scripts::RELEASE, 1, 1);
            cmd.arg(&*keys.write).arg(&*lock.token);
            script(cmd, &scripts::RELEASE)
        }
    }
}

/// The all-or-nothing acquire script's call for a lock on several
/// resources, with the fencing counter's key last when fencing is on.
fn acquire_all(lock: &LockId, ttl_ms: u64, counter_key: Option<&[u8]>) -> Call {
    let keys = lock.key_count();
    let mut cmd = evalsha(
        &scripts::ACQUIRE_ALL,
        keys + usize::from(counter_key.is_some()),
        3,
    );
    for key in lock.keys() {
        cmd.arg(key);
    }
    if let Some(counter_key) = counter_key {
        cmd.arg(counter_key);
    }
    cmd.arg(&*lock.token).arg(ttl_ms).arg(keys);
    script(cmd, &scripts::ACQUIRE_ALL)
}

/// What a [`Request::Gather`] sends (the gather script, with the fencing
/// counter's key last among the keys when fencing is on), and how its
/// reply reads.
fn gather(
    lock: &LockId,
    ttl_ms: u64,
    counter_key: Option<&[u8]>,
    held: &[Arc<str>],
) -> (Purpose, Call, Reply) {
    let keys = lock.key_count();
    let mut cmd = evalsha(
        &scripts::GATHER,
        keys + usize::from(counter_key.is_some()),
        3 + held.len(),
    );
    for key in lock.keys() {
        cmd.arg(key);
    }
    if let Some(counter_key) = counter_key {
        cmd.arg(counter_key);
    }
    cmd.arg(&*lock.token).arg(ttl_ms).arg(keys);
    for token in held {
        cmd.arg(&**token);
    }
    let fenced = counter_key.is_some();
    let call = script(cmd, &scripts::GATHER);
    (Purpose::Vote, call, Reply::AllOrNone { fenced })
}

/// The call of a [`Request::Acquire`].
fn acquisition(lock: &LockId, ttl_ms: u64, counter_key: &Option<Arc<[u8]>>) -> Call {
    Call::Acquire {
        lock: lock.clone(),
        ttl_ms,
        counter_key: counter_key.clone(),
        check: None,
    }
}

/// The queue script's call for a [`Request::Wait`].
fn wait(lock: &LockId, ttl_ms: u64, counter_key: Option<&[u8]>, waiter: &str, ticket: u64) -> Call {
    let keys = 1 + usize::from(counter_key.is_some());
    let mut cmd = evalsha(&scripts::WAIT, keys, 5);
    cmd.arg(&*lock.key);
    if let Some(counter_key) = counter_key {
        cmd.arg(counter_key);
    }
    cmd.arg(&*lock.token)
        .arg(ttl_ms)
        .arg(waiter)
        .arg(ticket)
        .arg(queue::lifetime_ms());
    script(cmd, &scripts::WAIT)
}

/// A reader's round (see [`Call::Read`]); `first`: the first of its call.
fn read_call(lock: &LockId, keys: &Arc<RwKeys>, ttl_ms: u64, first: bool) -> Call {
    Call::Read {
        lock: lock.clone(),
        keys: keys.clone(),
        ttl_ms,
        first,
        // One round in 16 drops the ended entries (see `scripts::READ`).
        prune: rand::random::<u8>() < 16,
    }
}

/// The read script's command for a reader's round (see [`Call::Read`]).
fn read_script(keys: &RwKeys, token: &str, ttl_ms: u64, prune: bool) -> Cmd {
    let mut cmd = evalsha(&scripts::READ, 3, 3);
    cmd.arg(&*keys.read)
        .arg(&*keys.write)
        .arg(&*keys.intent)
        .arg(token)
        .arg(ttl_ms)
        .arg(if prune { "1" } else { "0" });
    cmd
}

/// A script's call.
fn script(cmd: Cmd, script: &'static Script) -> Call {
    Call::Command {
        cmd,
        script: Some(script),
    }
}

/// Runs `cmd`; when it runs `script` (by `EVALSHA`) and the node does not
/// know it (`NOSCRIPT`), loads it and runs `cmd` again.
async fn run(
    connection: &mut Connection,
    cmd: &Cmd,
    script: Option<&Script>,
) -> Result<Value, RedisError> {
    match (cmd.query_async(connection).await, script) {
        (Err(err), Some(script)) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            script.prepare_invoke().load_async(connection).await?;
            cmd.query_async(connection).await
        }
        (reply, _) => reply,
    }
}

/// `SET key token NX GET PX ttl_ms` (`with_get`; else `SET NX PX`), and with
/// `counter_key` the counter's `INCR` pipelined after it. Unlike a bare `SET
/// NX`, `SET NX GET` reports a key of another type under the lock name
/// (`WRONGTYPE`) instead of passing it for another holder; servers older
/// than Redis 7.0 refuse `NX` with `GET`, and for them the node uses `SET
/// NX PX` from then on.
async fn acquire(
    connection: &mut Connection,
    call: &AcquireCall<'_>,
    with_get: bool,
) -> Result<Exchanged, RedisError> {
    let (set, counter) = acquire_commands(call, with_get);
    match (call.timed, &*connection) {
        (Some(batches), Connection::One(one)) if batches.busy() => {
            let commands = Commands(set, counter.into_iter().collect());
            // `SET NX GET` answers nil when it set the key.
            let expiry = with_get.then(|| Expiry {
                key: call.key.clone(),
                ttl_ms: call.ttl_ms,
            });
            Ok(Exchanged::landed(
                batches.send(commands, expiry, one).await?,
            ))
        }
        (timed, _) => {
            let reading = timed.map(|_| clock_reading(call.key, with_get));
            let request = acquire_request(set, counter, reading);
            let sent = std::time::Instant::now();
            let reply = request.query(connection).await?;
            match timed {
                Some(_) => timed_reply(reply, call, sent, std::time::Instant::now()),
                None => Ok(Exchanged::plain(reply, false)),
            }
        }
    }
}

/// What [`acquire`] asks: the `SET`, and the counter's `INCR` where fencing
/// is on, or a writer's first round's `EXISTS` of the readers' set and the
/// intent.
fn acquire_commands(call: &AcquireCall<'_>, with_get: bool) -> (Cmd, Option<Cmd>) {
    let AcquireCall {
        lock,
        key,
        ttl_ms,
        counter_key,
        check,
        ..
    } = *call;
    let mut set = Cmd::with_capacity(7, 16 + key.len() + lock.token.len());
    set.arg("SET").arg(&**key).arg(&*lock.token).arg("NX");
    if with_get {
        set.arg("GET");
    }
    set.arg("PX").arg(ttl_ms);
    let counter = counter_key.map(|counter_key| {
        let mut incr = Cmd::with_capacity(2, 4 + counter_key.len());
        incr.arg("INCR").arg(counter_key);
        incr
    });
    let exists = check.map(|keys| {
        let mut exists = Cmd::with_capacity(3, 8 + keys.read.len() + keys.intent.len());
        exists.arg("EXISTS").arg(&*keys.read).arg(&*keys.intent);
        exists
    });
    (set, counter.or(exists))
}

/// What [`acquire`] sends where it does not batch: `set`, with `counter`
/// and the clock `reading` pipelined after it where there are.
fn acquire_request(set: Cmd, counter: Option<Cmd>, reading: Option<Cmd>) -> Sent {
    if counter.is_none() && reading.is_none() {
        return Sent::One(set);
    }
    let mut pipeline = redis::Pipeline::with_capacity(3);
    pipeline.add_command(set);
    if let Some(counter) = counter {
        pipeline.add_command(counter);
    }
    if let Some(reading) = reading {
        // Errors come back as replies, read by [`timed_reply`] (a refused
        // `SET` keeps its own kind).
        pipeline.ignore_errors().add_command(reading);
    }
    Sent::Pipelined(pipeline)
}

/// The command that reads the node's clock after an unbatched acquisition
/// of `lock`: with `SET NX GET` (Redis 7.0 and later), the key's absolute
/// expiry (`PEXPIRETIME`, one integer), which tells the node's clock at the
/// grant plus the TTL; before 7.0, `TIME`.
fn clock_reading(key: &[u8], with_get: bool) -> Cmd {
    if with_get {
        let mut cmd = redis::cmd("PEXPIRETIME");
        cmd.arg(key);
        cmd
    } else {
        redis::cmd("TIME")
    }
}

/// A timed acquisition's reply (see [`acquire_request`]): the `SET`'s (with
/// the counter's), and the node's clock at the grant. A refused `SET` (a
/// replica's `READONLY`, `SET NX GET` before 7.0) is the call's error, as
/// the node said it; a refused reading only leaves the clock unread, and a
/// refusal needs none.
fn timed_reply(
    reply: Value,
    call: &AcquireCall<'_>,
    sent: std::time::Instant,
    received: std::time::Instant,
) -> Result<Exchanged, RedisError> {
    let unexpected = || RedisError::from((ErrorKind::Parse, "a pipelined clock reading missing"));
    let Value::Array(mut items) = reply else {
        return Err(unexpected());
    };
    let time = items.pop().ok_or_else(unexpected)?;
    if let Some(Value::ServerError(err)) =
        (items.iter()).find(|item| matches!(item, Value::ServerError(_)))
    {
        return Err(RedisError::from(err.clone()));
    }
    // `SET NX GET` answers nil when it set the key.
    let set_it = matches!(items.first(), Some(Value::Nil));
    let second = call.counter_key.is_some() || call.check.is_some();
    let reply = match (second, items.pop()) {
        (false, Some(reply)) if items.is_empty() => reply,
        (true, Some(second)) => {
            items.push(second);
            Value::Array(items)
        }
        _ => return Err(unexpected()),
    };
    let clock = Reading::after_grant(&time, set_it.then_some(call.ttl_ms), sent, received);
    Ok(Exchanged {
        reply,
        legacy: false,
        clock: clock.map_or(Clock::Unread, Clock::Read),
    })
}

/// What a [`Call::Acquire`] sends.
#[derive(Clone, Copy)]
struct AcquireCall<'a> {
    lock: &'a LockId,
    /// The key `SET` sets: the lock's, or a writer's.
    key: &'a Arc<[u8]>,
    ttl_ms: u64,
    counter_key: Option<&'a [u8]>,
    /// A writer's first round: the keys whose existence refuses it.
    check: Option<&'a RwKeys>,
    /// With the node's clock read after it (see `clock.rs`): batched with
    /// the node's other timed votes while it is busy, except on a cluster;
    /// else in its own request.
    timed: Option<&'a Arc<Batches>>,
}

/// A node's reply to a call.
struct Exchanged {
    reply: Value,
    /// The legacy command (`SET NX` before Redis 7.0) gave it.
    legacy: bool,
    /// The node's clock, read after the call (a timed call).
    clock: Clock,
}

/// The node's clock, as a call read it.
enum Clock {
    /// Not read (an untimed call, or a node that did not tell its time).
    Unread,
    /// Read after the call, not judged yet.
    Read(Reading),
    /// Read after the call's batch, and judged (see `batch.rs`).
    Judged(Judged),
}

impl Exchanged {
    fn plain(reply: Value, legacy: bool) -> Self {
        Exchanged {
            reply,
            legacy,
            clock: Clock::Unread,
        }
    }

    fn landed(landed: Landed) -> Self {
        Exchanged {
            reply: landed.reply,
            legacy: false,
            clock: landed.clock.map_or(Clock::Unread, Clock::Judged),
        }
    }
}

/// [`run`], with the node's clock read after `cmd` (in a batch while the
/// node is busy, see `batch.rs`; else, and on a cluster, in its own
/// request): the reply, with the reading. A server's error in reply to
/// `cmd` is the error.
async fn run_timed(
    connection: &mut Connection,
    cmd: &Cmd,
    script: Option<&Script>,
    batches: &Arc<Batches>,
) -> Result<Exchanged, RedisError> {
    let mut loaded = false;
    loop {
        let landed = match &*connection {
            Connection::One(one) if batches.busy() => {
                batches
                    .send(Commands(cmd.clone(), Vec::new()), None, one)
                    .await
            }
            _ => return run_timed_alone(connection, cmd, script).await,
        };
        match (landed, script) {
            (Err(err), Some(script))
                if !loaded && err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
            {
                script.prepare_invoke().load_async(connection).await?;
                loaded = true;
            }
            (landed, _) => return landed.map(Exchanged::landed),
        }
    }
}

/// [`run_timed`] in a request of its own: `TIME` pipelined after `cmd`.
async fn run_timed_alone(
    connection: &mut Connection,
    cmd: &Cmd,
    script: Option<&Script>,
) -> Result<Exchanged, RedisError> {
    let mut pipeline = redis::Pipeline::with_capacity(2);
    pipeline
        .ignore_errors()
        .add_command(cmd.clone())
        .cmd("TIME");
    let mut loaded = false;
    loop {
        let sent = std::time::Instant::now();
        let reply: Value = pipeline.query_async(connection).await?;
        let received = std::time::Instant::now();
        let (reply, time) = match reply {
            Value::Array(mut items) if items.len() == 2 => {
                let time = items.pop();
                (items.pop(), time)
            }
            _ => (None, None),
        };
        match (reply, script) {
            (Some(Value::ServerError(err)), Some(script))
                if !loaded && err.kind() == Some(ServerErrorKind::NoScript) =>
            {
                script.prepare_invoke().load_async(connection).await?;
                loaded = true;
            }
            (Some(Value::ServerError(err)), _) => return Err(RedisError::from(err)),
            (Some(reply), _) => {
                let clock = time.and_then(|time| Reading::from_reply(&time, sent, received));
                return Ok(Exchanged {
                    reply,
                    legacy: false,
                    clock: clock.map_or(Clock::Unread, Clock::Read),
                });
            }
            (None, _) => {
                return Err(RedisError::from((
                    ErrorKind::Parse,
                    "a pipelined TIME without its reply",
                )));
            }
        }
    }
}

/// A command, or commands pipelined in one request.
enum Sent {
    One(Cmd),
    Pipelined(redis::Pipeline),
}

impl Sent {
    async fn query(&self, connection: &mut Connection) -> Result<Value, RedisError> {
        match self {
            Sent::One(cmd) => cmd.query_async(connection).await,
            Sent::Pipelined(pipeline) => pipeline.query_async(connection).await,
        }
    }
}

/// A writer's first round (see `Redlock::write`), once its `SET` and
/// `EXISTS` came back: where the `SET` set the writer's key but the readers'
/// set or an intent exists, the round is refused there, and what it set is
/// given back at once (the plain release script, token-checked) before the
/// answer, so that a refusal leaves nothing behind; an error in doing so is
/// the call's error (the round's cleanup then releases it again).
async fn first_write(
    connection: &mut Connection,
    lock: &LockId,
    keys: &RwKeys,
    exchanged: Exchanged,
) -> Result<Exchanged, RedisError> {
    let set_it = match &exchanged.reply {
        Value::Array(items) => match (items.as_slice(), exchanged.legacy) {
            ([Value::Nil, Value::Int(found)], false) | ([Value::Okay, Value::Int(found)], true) => {
                *found > 0
            }
            _ => false,
        },
        _ => false,
    };
    if set_it {
        let mut cmd = evalsha(&scripts::RELEASE, 1, 1);
        cmd.arg(&*keys.write).arg(&*lock.token);
        run(connection, &cmd, Some(&scripts::RELEASE)).await?;
    }
    Ok(exchanged)
}

/// A fenced acquisition's reply, `[set, counter]`. A grant whose counter was
/// lost on the node (below [`scripts::UNSEEDED_BELOW`]: the node restarted without
/// persistence, and `INCR` started again from 1) is seeded: the seed script
/// raises the counter to the server's clock in µs, while our key is still
/// there, and its counter replaces the small one; without our key (0) the
/// reply reads as refused.
async fn seeded(
    connection: &mut Connection,
    lock: &LockId,
    counter_key: &[u8],
    reply: Value,
    legacy: bool,
) -> Result<Value, RedisError> {
    let Value::Array(mut items) = reply else {
        return Ok(reply);
    };
    let granted = match items.first() {
        Some(Value::Nil) => !legacy,
        Some(Value::Okay) => legacy,
        _ => false,
    };
    let unseeded =
        matches!(items.get(1), Some(Value::Int(counter)) if *counter < scripts::UNSEEDED_BELOW);
    if !(granted && unseeded && items.len() == 2) {
        return Ok(Value::Array(items));
    }
    let mut cmd = evalsha(&scripts::FENCE_SEED, 2, 1);
    cmd.arg(&*lock.key).arg(counter_key).arg(&*lock.token);
    match run(connection, &cmd, Some(&scripts::FENCE_SEED)).await? {
        Value::Int(counter) if counter > 0 => items[1] = Value::Int(counter),
        Value::Int(0) => {
            items[0] = if legacy {
                Value::Nil
            } else {
                Value::BulkString(Vec::new())
            };
        }
        other => return Ok(other),
    }
    Ok(Value::Array(items))
}

/// Checks a new connection to node `index` (see `standing.rs`). Before
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

/// The release script's arguments for a waiter's entry (none for `Place::None`).
fn place_args(cmd: &mut Cmd, place: &Place) {
    match place {
        Place::None => {}
        Place::Keep(waiter, ticket) => {
            cmd.arg(&**waiter).arg(*ticket).arg(queue::lifetime_ms());
        }
        Place::Leave(waiter) => {
            cmd.arg(&**waiter).arg(-1).arg(queue::lifetime_ms());
        }
    }
}

/// The start of `EVALSHA` for `script` with `keys` keys, room reserved for
/// them and `args` more arguments: the caller adds the keys, then the
/// arguments. One command, built in place (the `redis` crate's
/// `ScriptInvocation` first copies each key and argument into a vector of
/// its own, five allocations more per release).
fn evalsha(script: &Script, keys: usize, args: usize) -> Cmd {
    // A key prefix, a resource name and a token: ample for most calls.
    const TYPICAL_BYTES: usize = 160;
    let mut cmd = Cmd::with_capacity(3 + keys + args, TYPICAL_BYTES);
    cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys);
    cmd
}

/// Whether `err` is the syntax error with which a server older than Redis
/// 7.0 refuses `SET NX GET`.
fn is_syntax_error(err: &RedisError) -> bool {
    err.code() == Some("ERR") && err.detail().is_some_and(|detail| detail.contains("syntax"))
}

/// The error for a reply the protocol does not allow.
fn unexpected(node: Arc<str>, reply: &Value) -> NodeError {
    NodeError::new(node, NodeErrorKind::UnexpectedReply(format!("{reply:?}")))
}

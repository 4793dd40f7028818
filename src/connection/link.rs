//! One node's link ([`Link`]): its connection as calls get it, one attempt
//! at a time, the pause after a failure, and the replacement of a
//! connection that broke or closed.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use redis::{AsyncConnectionConfig, RedisError};
use tokio::sync::oneshot;

use super::coalescing::{Outstanding, Traffic};
use super::dial::{connect, connect_cluster, connect_failure};
use crate::answer::NodeErrorKind;
use crate::shards::Connection;
use crate::target::Target;

/// How long a failed connection attempt answers calls with its error before
/// the next attempt is made.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Room in a connection's queue of requests (the `redis` crate's, 50 by
/// default): as many as a semaphore counts, so that a request is in the
/// queue when its future is first polled. Where a request has to wait for
/// room, it takes its place in the queue only when its task runs again,
/// and requests of tasks woken in another order go out in that order: a
/// release could then reach a node before the `SET` of its own lock, find
/// nothing, and leave the key until its TTL (a batch's vote, which the
/// release waits for, counts as sent once its first poll has handed it to
/// the connection; see `batch.rs`). The queue grows only as fast as calls
/// are made, each bounded by its timeout.
const QUEUE_ROOM: usize = tokio::sync::Semaphore::MAX_PERMITS;

/// The longest pause between the attempts that follow a closed connection.
pub(super) const RECONNECT_PAUSE_MAX: Duration = Duration::from_secs(2);

/// Why no connection could be had.
pub(super) type Failure = NodeErrorKind;

pub(super) type Attempt = Shared<BoxFuture<'static, Result<Connection, Failure>>>;

/// The check a new connection passes before any call uses it.
pub(crate) type Check =
    Arc<dyn Fn(Connection) -> BoxFuture<'static, Result<(), Failure>> + Send + Sync>;

/// Where a node's connection stands.
pub(super) enum State {
    /// None, and no attempt under way: the next call makes one.
    Idle,
    /// The last attempt failed at `at`.
    Failed { at: Instant, failure: Failure },
    /// Attempt `id` is under way.
    Connecting { id: u64, attempt: Attempt },
    /// Attempt `id` made this connection. Dropping `_alive` ends the
    /// attempt's task, which otherwise stays to notice when its runtime (and
    /// with it the connection's driver task) ends.
    Ready {
        id: u64,
        connection: Connection,
        _alive: oneshot::Sender<()>,
    },
}

/// One node's connection (see the module docs).
pub(crate) struct Link {
    pub(super) target: Target,
    pub(super) connect_timeout: Duration,
    pub(super) check: Check,
    /// The last attempt's id, and the state.
    pub(super) state: Mutex<(u64, State)>,
    /// Handed to attempt tasks, so that they can record their outcome.
    pub(super) me: Weak<Link>,
    /// The link's calls, for its driver (see [`Coalescing`]).
    pub(super) traffic: Arc<Traffic>,
    /// The address the last connection of a Sentinel node went to, as the
    /// Sentinels named it then (see [`primary_moved`](Self::primary_moved)).
    pub(super) named: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

/// A connection handed to a call, with the attempt that made it, so that a
/// call that finds it broken drops that one and not a newer one.
pub(crate) struct Handle {
    pub(crate) connection: Connection,
    pub(super) id: u64,
}

impl Handle {
    /// The attempt that made the connection.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

impl Link {
    pub(crate) fn new(target: Target, connect_timeout: Duration, check: Check) -> Arc<Self> {
        Arc::new_cyclic(|me| Link {
            target,
            connect_timeout,
            check,
            state: Mutex::new((0, State::Idle)),
            me: me.clone(),
            traffic: Arc::default(),
            named: Arc::default(),
        })
    }

    /// Whether the Sentinels of a Sentinel node, asked now, name another
    /// primary than the one the connection in use goes to (a failover it
    /// did not see: an old primary cut off from its Sentinels keeps serving
    /// the clients that still reach it); if so, the connection is dropped
    /// and made again, to the primary they name, whose check judges it.
    /// `false` for other nodes, with no connection, or when no Sentinel
    /// answers.
    ///
    /// Cancel safe: it only reads until it drops the connection.
    pub(crate) async fn primary_moved(&self) -> bool {
        if !matches!(self.target, Target::Sentinel(_)) || self.ready().is_none() {
            return false;
        }
        let Ok(client) = self.target.resolve(self.connect_timeout).await else {
            return false;
        };
        let named = client.get_connection_info().addr().to_string();
        let moved = crate::tasks::lock(&self.named)
            .as_ref()
            .is_some_and(|current| *current != named);
        if moved {
            self.reconnect();
        }
        moved
    }

    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, (u64, State)> {
        // Every update replaces the state in one assignment: poisoning
        // cannot leave it half written.
        crate::tasks::lock(&self.state)
    }

    /// The connection if there is one ready, without connecting.
    pub(crate) fn ready(&self) -> Option<Handle> {
        match &self.state().1 {
            State::Ready { id, connection, .. } => Some(Handle {
                connection: connection.clone(),
                id: *id,
            }),
            _ => None,
        }
    }

    /// The connection, connecting first if there is none (sharing an attempt
    /// under way). Not bounded here: the caller bounds its own wait, and the
    /// attempt is bounded by the connect timeout.
    pub(crate) async fn connection(&self) -> Result<Handle, Failure> {
        let (id, attempt, launch) = {
            let mut state = self.state();
            match &state.1 {
                State::Ready { id, connection, .. } => {
                    return Ok(Handle {
                        connection: connection.clone(),
                        id: *id,
                    });
                }
                State::Connecting { id, attempt } => (*id, attempt.clone(), None),
                State::Failed { at, failure } if at.elapsed() < RETRY_PAUSE => {
                    return Err(failure.clone());
                }
                State::Idle | State::Failed { .. } => {
                    let (id, attempt, launch) = self.start_attempt(&mut state)?;
                    (id, attempt, Some(launch))
                }
            }
        };
        if let Some(launch) = launch {
            launch.run();
        }
        let connection = attempt.await?;
        Ok(Handle { connection, id })
    }

    /// Counts a call under way until the guard is dropped; made before the
    /// call's command is queued on the connection (see
    /// [`Traffic::outstanding`]).
    pub(crate) fn outstanding(&self) -> Outstanding<'_> {
        self.traffic.outstanding()
    }

    /// Whether calls other than the caller's own are under way on the link
    /// (a caller counts itself with [`outstanding`](Self::outstanding)
    /// first).
    pub(crate) fn busy(&self) -> bool {
        self.traffic.busy()
    }

    /// Whether the server behind the node moves in failovers (a Sentinel
    /// node).
    pub(crate) fn follows_failovers(&self) -> bool {
        self.target.follows_failovers()
    }

    /// Drops the connection in use, if any, and connects again at once: for
    /// a node whose server went silent and may have been replaced. What was
    /// queued on the old connection is lost with it.
    pub(crate) fn reconnect(&self) {
        let current = match &self.state().1 {
            State::Ready { id, .. } => Some(*id),
            _ => None,
        };
        if let Some(id) = current {
            self.broken(id);
        }
    }

    /// Drops the connection that attempt `attempt` made (a [`Handle::id`])
    /// after a call found it broken, and starts a new attempt at once.
    pub(crate) fn broken(&self, attempt: u64) {
        let (launch, _old) = {
            let mut state = self.state();
            if !matches!(state.1, State::Ready { id, .. } if id == attempt) {
                return;
            }
            let old = std::mem::replace(&mut state.1, State::Idle);
            // Without a runtime the next call connects instead.
            (self.start_attempt(&mut state).ok(), old)
        };
        if let Some((_, _, launch)) = launch {
            launch.run();
        }
    }

    /// The connection that attempt `attempt` made has closed (its driver
    /// ended: the server went away, or the link dropped it): if it is still
    /// the link's, a task connects again at once, and on failure again and
    /// again, pausing longer each time up to [`RECONNECT_PAUSE_MAX`], until a
    /// connection is made or the link is dropped. So the new server behind
    /// the node is checked without waiting for a call, and a change of
    /// server (a restart, a failover) is told to the locks it may have lost
    /// at once (see `changes.rs`).
    pub(super) fn closed(&self, attempt: u64) {
        if !matches!(self.state().1, State::Ready { id, .. } if id == attempt) {
            return;
        }
        self.broken(attempt);
        let link = self.me.clone();
        crate::tasks::spawn(async move {
            let mut pause = RETRY_PAUSE;
            loop {
                let Some(current) = link.upgrade() else {
                    return;
                };
                if current.connection().await.is_ok() {
                    return;
                }
                drop(current);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RECONNECT_PAUSE_MAX);
            }
        });
    }

    /// Records a connection attempt as under way and returns it, with its
    /// task to start on the current runtime once the state is unlocked
    /// ([`Launch::run`]): a runtime that is shutting down drops a new task
    /// at once, in `spawn`, and the task's drop locks the state.
    pub(super) fn start_attempt(
        &self,
        state: &mut (u64, State),
    ) -> Result<(u64, Attempt, Launch), Failure> {
        if !crate::tasks::has_runtime() {
            return Err(NodeErrorKind::NoRuntime);
        }
        state.0 += 1;
        let id = state.0;
        let target = self.target.clone();
        let timeout = self.connect_timeout;
        let check = self.check.clone();
        let traffic = self.traffic.clone();
        let named = self.named.clone();
        let closed = closed_by(self.me.clone(), id);
        let attempt: Attempt = async move {
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(None)
                .set_pipeline_buffer_size(QUEUE_ROOM);
            let connect = async {
                let connection = match &target {
                    Target::Cluster(seeds) => {
                        connect_cluster(seeds, &config, traffic, closed, timeout).await?
                    }
                    _ => connect_one(&target, &config, traffic, closed, &named, timeout).await?,
                };
                check(connection.clone()).await?;
                Ok(connection)
            };
            match tokio::time::timeout(timeout, connect).await {
                Ok(outcome) => outcome,
                Err(_) => Err(NodeErrorKind::ConnectTimeout(timeout)),
            }
        }
        .boxed()
        .shared();
        state.1 = State::Connecting {
            id,
            attempt: attempt.clone(),
        };
        let settle = Settle {
            link: self.me.clone(),
            id,
        };
        let driven = attempt.clone();
        // The connection's driver task runs on this runtime too ([`connect`],
        // or the `redis` crate, spawns it where the attempt is polled): this task stays
        // while the connection is in use, so that its end, with the runtime,
        // is noticed and the dead connection dropped.
        let task = async move {
            let mut settle = settle;
            let outcome = driven.await;
            let (alive, replaced) = oneshot::channel();
            let connected = outcome.is_ok();
            settle.record(outcome, alive);
            if connected {
                let _ = replaced.await;
            }
        }
        .boxed();
        Ok((id, attempt, Launch { task }))
    }

    /// Records how attempt `id` ended, unless a newer one replaced it.
    pub(super) fn settle(
        &self,
        id: u64,
        outcome: Result<Connection, Failure>,
        alive: oneshot::Sender<()>,
    ) {
        let mut state = self.state();
        if !matches!(state.1, State::Connecting { id: current, .. } if current == id) {
            return;
        }
        state.1 = match outcome {
            Ok(connection) => State::Ready {
                id,
                connection,
                _alive: alive,
            },
            Err(failure) => State::Failed {
                at: Instant::now(),
                failure,
            },
        };
    }

    /// Attempt `id`'s task ended before the attempt did, or while its
    /// connection was in use: its runtime shut down, and the connection (or
    /// the attempt) with it.
    pub(super) fn abandoned(&self, id: u64) {
        let mut state = self.state();
        let current = match &state.1 {
            State::Connecting { id, .. } | State::Ready { id, .. } => Some(*id),
            State::Idle | State::Failed { .. } => None,
        };
        if current == Some(id) {
            let old = std::mem::replace(&mut state.1, State::Idle);
            // What the old state owned goes once the state is unlocked.
            drop(state);
            drop(old);
        }
    }
}

/// A connection attempt's task, to start once the link's state is unlocked.
pub(super) struct Launch {
    pub(super) task: futures::future::BoxFuture<'static, ()>,
}

impl Launch {
    /// Starts the task (on a runtime that is shutting down, it is dropped
    /// at once and the attempt is abandoned).
    pub(super) fn run(self) {
        crate::tasks::spawn(self.task);
    }
}

/// An attempt's task: records the attempt's outcome, and if the task is
/// dropped first, or later while the connection is in use, tells the link.
pub(super) struct Settle {
    pub(super) link: Weak<Link>,
    pub(super) id: u64,
}

impl Settle {
    pub(super) fn record(
        &mut self,
        outcome: Result<Connection, Failure>,
        alive: oneshot::Sender<()>,
    ) {
        if let Some(link) = self.link.upgrade() {
            link.settle(self.id, outcome, alive);
        }
    }
}

impl Drop for Settle {
    fn drop(&mut self) {
        if let Some(link) = self.link.upgrade() {
            link.abandoned(self.id);
        }
    }
}

/// What runs when the connection of `link`'s attempt `id` closes (for a
/// cluster: any primary's, or its topology turned out stale).
pub(super) fn closed_by(link: Weak<Link>, id: u64) -> impl Fn() + Clone + Send + Sync + 'static {
    move || {
        if let Some(link) = link.upgrade() {
            link.closed(id);
        }
    }
}

/// Whether a call's error means the connection itself is unusable (closed,
/// reset, or its stream out of step), rather than a reply from the node;
/// or that the server behind it is no longer a primary (`READONLY`: it was
/// demoted in a failover), so that the next call connects again, to
/// whichever server the node leads to now, and checks it.
pub(crate) fn is_broken(err: &RedisError) -> bool {
    err.is_unrecoverable_error() || err.code() == Some("READONLY")
}

/// Connects to a node that is one server (a fixed one, or the primary its
/// Sentinels name now, noted in `named`).
async fn connect_one(
    target: &Target,
    config: &AsyncConnectionConfig,
    traffic: Arc<Traffic>,
    closed: impl FnOnce() + Send + 'static,
    named: &Mutex<Option<String>>,
    timeout: Duration,
) -> Result<Connection, NodeErrorKind> {
    let client = target.resolve(timeout).await?;
    let connection = connect(&client, config, traffic, closed)
        .await
        .map_err(|err| connect_failure(err, timeout))?;
    *crate::tasks::lock(named) = Some(client.get_connection_info().addr().to_string());
    Ok(Connection::One(connection))
}

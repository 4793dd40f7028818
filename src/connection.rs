//! One node's connection: a multiplexed connection shared by every call,
//! created on first use and replaced when it breaks.
//!
//! - **Checked before use.** Connecting ends with the node's check (see
//!   `standing.rs`): a connection is handed to calls only after the check
//!   judged the server behind it, so no reply of a restarted server is
//!   counted before its restart was seen.
//! - **Its own bound.** Connecting (TCP, TLS, `AUTH`, the client's setup
//!   commands, the check) is bounded by the connect timeout, not by the per-node call
//!   timeout, so a node across a slow link can be reached at all. The attempt
//!   runs as a task of its own: a call that gives up waiting for it (its own
//!   timeout) does not cut it short.
//! - **One attempt at a time.** Concurrent calls share the attempt under way.
//! - **Every failure is retried.** A failed attempt, whatever its reason
//!   (refused, timed out, a wrong password), is kept for [`RETRY_PAUSE`]: calls
//!   in that window get its error at once; the next call after it tries
//!   again. So a node that comes back, or whose password is fixed, is used
//!   again within moments, without rebuilding the client.
//! - **Broken connections are replaced.** A call that finds the connection
//!   closed or corrupt (an I/O or protocol error, also the closed channel of
//!   a connection whose driver task died with its runtime) drops it, and a
//!   new attempt starts at once on the caller's runtime.
//! - **Runtimes end.** The connection's driver task runs on the runtime that
//!   connected it. The attempt's own task stays on that runtime while the
//!   connection is in use; when it is dropped (the runtime shut down, and the
//!   driver with it), a drop guard leaves the link idle, so the next call, on
//!   whatever runtime, connects again instead of failing on a dead
//!   connection. Nor does an attempt cut short that way stay "connecting".

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, RedisError};
use tokio::sync::oneshot;

use crate::answer::NodeErrorKind;

/// How long a failed connection attempt answers calls with its error before
/// the next attempt is made.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Why no connection could be had.
type Failure = NodeErrorKind;

type Attempt = Shared<BoxFuture<'static, Result<MultiplexedConnection, Failure>>>;

/// The check a new connection passes before any call uses it.
pub(crate) type Check =
    Arc<dyn Fn(MultiplexedConnection) -> BoxFuture<'static, Result<(), Failure>> + Send + Sync>;

/// Where a node's connection stands.
enum State {
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
        connection: MultiplexedConnection,
        _alive: oneshot::Sender<()>,
    },
}

/// One node's connection (see the module docs).
pub(crate) struct Link {
    client: Client,
    connect_timeout: Duration,
    check: Check,
    /// The last attempt's id, and the state.
    state: Mutex<(u64, State)>,
    /// Handed to attempt tasks, so that they can record their outcome.
    me: Weak<Link>,
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
    pub(crate) connection: MultiplexedConnection,
    id: u64,
}

impl Handle {
    /// The attempt that made the connection.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

impl Link {
    pub(crate) fn new(client: Client, connect_timeout: Duration, check: Check) -> Arc<Self> {
        Arc::new_cyclic(|me| Link {
            client,
            connect_timeout,
            check,
            state: Mutex::new((0, State::Idle)),
            me: me.clone(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, (u64, State)> {
        // Every update replaces the state in one assignment: poisoning
        // cannot leave it half written.
        crate::tasks::lock(&self.state)
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

    /// Records a connection attempt as under way and returns it, with its
    /// task to start on the current runtime once the state is unlocked
    /// ([`Launch::run`]): a runtime that is shutting down drops a new task
    /// at once, in `spawn`, and the task's drop locks the state.
    fn start_attempt(&self, state: &mut (u64, State)) -> Result<(u64, Attempt, Launch), Failure> {
        if !crate::tasks::has_runtime() {
            return Err(NodeErrorKind::NoRuntime);
        }
        state.0 += 1;
        let id = state.0;
        let client = self.client.clone();
        let timeout = self.connect_timeout;
        let check = self.check.clone();
        let attempt: Attempt = async move {
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(None);
            let connect = async {
                let connection = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .map_err(|err| connect_failure(err, timeout))?;
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
        // The connection's driver task runs on this runtime too (the `redis`
        // crate spawns it where the attempt is polled): this task stays
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
    fn settle(
        &self,
        id: u64,
        outcome: Result<MultiplexedConnection, Failure>,
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
    fn abandoned(&self, id: u64) {
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
struct Launch {
    task: futures::future::BoxFuture<'static, ()>,
}

impl Launch {
    /// Starts the task (on a runtime that is shutting down, it is dropped
    /// at once and the attempt is abandoned).
    fn run(self) {
        crate::tasks::spawn(self.task);
    }
}

/// An attempt's task: records the attempt's outcome, and if the task is
/// dropped first, or later while the connection is in use, tells the link.
struct Settle {
    link: Weak<Link>,
    id: u64,
}

impl Settle {
    fn record(
        &mut self,
        outcome: Result<MultiplexedConnection, Failure>,
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

/// The failure of a connection attempt that got an error.
fn connect_failure(err: RedisError, timeout: Duration) -> Failure {
    if err.is_timeout() {
        NodeErrorKind::ConnectTimeout(timeout)
    } else {
        NodeErrorKind::Redis(Arc::new(err))
    }
}

/// Whether a call's error means the connection itself is unusable (closed,
/// reset, or its stream out of step), rather than a reply from the node.
pub(crate) fn is_broken(err: &RedisError) -> bool {
    err.is_unrecoverable_error()
}

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
//!   new attempt starts at once on the caller's runtime. A `redis://` or
//!   `unix://` connection that closes (its driver ends) is replaced without
//!   waiting for a call, by attempts that go on, each after a longer pause
//!   (up to 2 s), until one connects: so a new server behind the node (a
//!   restart, a failover) is checked, and the locks held there are told,
//!   at once.
//! - **Runtimes end.** The connection's driver task runs on the runtime that
//!   connected it. The attempt's own task stays on that runtime while the
//!   connection is in use; when it is dropped (the runtime shut down, and the
//!   driver with it), a drop guard leaves the link idle, so the next call, on
//!   whatever runtime, connects again instead of failing on a dead
//!   connection. Nor does an attempt cut short that way stay "connecting".
//! - **Writes coalesced.** The connection's driver task (the `redis`
//!   crate's: it writes the commands that calls queue on the connection and
//!   hands the replies back) is spawned here, for `redis://` and `unix://`
//!   nodes, behind [`Coalescing`]: woken while other calls are under way on
//!   the link, it lets the tasks already waiting on its worker run first (up
//!   to [`BATCH`] more calls), so that the commands they queue go out in one
//!   write. Without it, tokio's multi-thread scheduler runs a freshly woken
//!   task next (its "LIFO slot"), so the driver wrote each command as soon
//!   as its caller queued it: one system call per command, on the client and
//!   on the server. With 64 concurrent lock + unlock cycles on one node, the
//!   client's CPU per cycle falls by about 40 % and the server's by about
//!   30 % (see the README's performance section). A lone caller's command
//!   goes out at once. `rediss://` nodes connect through the
//!   `redis` crate, which spawns its own driver: their writes are not
//!   coalesced.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, ConnectionAddr, RedisError};
use tokio::sync::oneshot;

use crate::answer::NodeErrorKind;
pub(crate) use crate::shards::Connection;
use crate::shards::Shards;
use crate::target::{ClusterSeeds, Target};

/// How long a failed connection attempt answers calls with its error before
/// the next attempt is made.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// The longest pause between the attempts that follow a closed connection.
const RECONNECT_PAUSE_MAX: Duration = Duration::from_secs(2);

/// Why no connection could be had.
type Failure = NodeErrorKind;

type Attempt = Shared<BoxFuture<'static, Result<Connection, Failure>>>;

/// The check a new connection passes before any call uses it.
pub(crate) type Check =
    Arc<dyn Fn(Connection) -> BoxFuture<'static, Result<(), Failure>> + Send + Sync>;

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
        connection: Connection,
        _alive: oneshot::Sender<()>,
    },
}

/// One node's connection (see the module docs).
pub(crate) struct Link {
    target: Target,
    connect_timeout: Duration,
    check: Check,
    /// The last attempt's id, and the state.
    state: Mutex<(u64, State)>,
    /// Handed to attempt tasks, so that they can record their outcome.
    me: Weak<Link>,
    /// The link's calls, for its driver (see [`Coalescing`]).
    traffic: Arc<Traffic>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

/// A call under way on a link: counted in its [`Traffic`] until dropped.
/// Borrowed, not an `Arc`: no reference count moves per call.
pub(crate) struct Outstanding<'a>(&'a Traffic);

impl Drop for Outstanding<'_> {
    fn drop(&mut self) {
        self.0.outstanding.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How many calls a yielding driver lets queue before the call that makes
/// them that many wakes it at once (see [`Coalescing`]).
const BATCH: usize = 16;

/// A link's calls, as its driver sees them (see [`Coalescing`]).
#[derive(Debug, Default)]
pub(crate) struct Traffic {
    /// Calls under way: queued on the connection, not yet answered.
    outstanding: AtomicUsize,
    /// Calls made since the driver last ran.
    queued: AtomicUsize,
    /// The driver, while it yields: the call that makes [`BATCH`] calls
    /// queued wakes it.
    parked: Mutex<Option<std::task::Waker>>,
}

/// A connection handed to a call, with the attempt that made it, so that a
/// call that finds it broken drops that one and not a newer one.
pub(crate) struct Handle {
    pub(crate) connection: Connection,
    id: u64,
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
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, (u64, State)> {
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
    /// call's command is queued on the connection. The call that makes
    /// [`BATCH`] calls queued since the driver last ran wakes a yielding
    /// driver (see [`Coalescing`]).
    pub(crate) fn outstanding(&self) -> Outstanding<'_> {
        let traffic = &self.traffic;
        traffic.outstanding.fetch_add(1, Ordering::Relaxed);
        if traffic.queued.fetch_add(1, Ordering::Relaxed) + 1 >= BATCH
            && let Some(driver) = crate::tasks::lock(&traffic.parked).take()
        {
            driver.wake();
        }
        Outstanding(traffic)
    }

    /// Whether calls other than the caller's own are under way on the link
    /// (a caller counts itself with [`outstanding`](Self::outstanding)
    /// first).
    pub(crate) fn busy(&self) -> bool {
        self.traffic.outstanding.load(Ordering::Relaxed) > 1
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
    fn closed(&self, attempt: u64) {
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
    fn start_attempt(&self, state: &mut (u64, State)) -> Result<(u64, Attempt, Launch), Failure> {
        if !crate::tasks::has_runtime() {
            return Err(NodeErrorKind::NoRuntime);
        }
        state.0 += 1;
        let id = state.0;
        let target = self.target.clone();
        let timeout = self.connect_timeout;
        let check = self.check.clone();
        let traffic = self.traffic.clone();
        let closed = closed_by(self.me.clone(), id);
        let attempt: Attempt = async move {
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(None);
            let connect = async {
                let connection = match &target {
                    Target::Cluster(seeds) => {
                        connect_cluster(seeds, &config, traffic, closed, timeout).await?
                    }
                    _ => {
                        let client = target.resolve(timeout).await?;
                        let connection = connect(&client, &config, traffic, closed)
                            .await
                            .map_err(|err| connect_failure(err, timeout))?;
                        Connection::One(connection)
                    }
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
    fn settle(&self, id: u64, outcome: Result<Connection, Failure>, alive: oneshot::Sender<()>) {
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
    fn record(&mut self, outcome: Result<Connection, Failure>, alive: oneshot::Sender<()>) {
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
fn closed_by(link: Weak<Link>, id: u64) -> impl Fn() + Clone + Send + Sync + 'static {
    move || {
        if let Some(link) = link.upgrade() {
            link.closed(id);
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
/// reset, or its stream out of step), rather than a reply from the node;
/// or that the server behind it is no longer a primary (`READONLY`: it was
/// demoted in a failover), so that the next call connects again, to
/// whichever server the node leads to now, and checks it.
pub(crate) fn is_broken(err: &RedisError) -> bool {
    err.is_unrecoverable_error() || err.code() == Some("READONLY")
}

/// A connection to every primary of the cluster that `seeds` lead to, as
/// one reading of its topology names them, each made as [`connect`] makes
/// one (all at once); `closed` runs when any of them closes, or when a
/// redirection shows the topology stale.
async fn connect_cluster(
    seeds: &ClusterSeeds,
    config: &AsyncConnectionConfig,
    traffic: Arc<Traffic>,
    closed: impl Fn() + Clone + Send + Sync + 'static,
    timeout: Duration,
) -> Result<Connection, Failure> {
    let topology = seeds.topology(timeout).await?;
    let unserved = topology.unserved();
    if unserved > 0 {
        tracing::warn!(
            unserved,
            "the cluster's topology leaves slots without a primary: locks there fail until \
             they are served"
        );
    }
    let connects = topology.primaries.iter().map(|(host, port)| {
        let client = seeds.client(host.clone(), *port);
        let (traffic, closed) = (traffic.clone(), closed.clone());
        async move {
            connect(&client?, config, traffic, closed)
                .await
                .map_err(|err| connect_failure(err, timeout))
        }
    });
    let connections = futures::future::try_join_all(connects).await?;
    let stale = Box::new(closed);
    Ok(Connection::Cluster(Arc::new(Shards::new(
        topology,
        connections,
        stale,
    ))))
}

/// A multiplexed connection to `client`'s server, its driver task spawned
/// here, [`Coalescing`], for a `redis://` or `unix://` node; a `rediss://`
/// node's through the `redis` crate, which spawns its driver itself.
///
/// The same connection the `redis` crate makes: a client built from a URL
/// has the default TCP settings, of which only `TCP_NODELAY` (off) applies
/// to a plain socket, and the handshake (`AUTH`, `SELECT`, the protocol) is
/// the crate's own, in `MultiplexedConnection::new_with_config`.
/// `closed` runs when the driver of such a connection ends (a `rediss://`
/// connection's end is seen only by the next call on it).
async fn connect(
    client: &Client,
    config: &AsyncConnectionConfig,
    traffic: Arc<Traffic>,
    closed: impl FnOnce() + Send + 'static,
) -> Result<MultiplexedConnection, RedisError> {
    let info = client.get_connection_info();
    let (connection, driver) = match info.addr() {
        ConnectionAddr::Tcp(host, port) => {
            let stream = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
            stream.set_nodelay(info.tcp_settings().nodelay())?;
            multiplexed(info, stream, config).await?
        }
        #[cfg(unix)]
        ConnectionAddr::Unix(path) => {
            let stream = tokio::net::UnixStream::connect(path).await?;
            multiplexed(info, stream, config).await?
        }
        _ => {
            return client
                .get_multiplexed_async_connection_with_config(config)
                .await;
        }
    };
    // The attempt runs as a task: a runtime is there.
    let driven = async move {
        Coalescing::new(driver, traffic).await;
        closed();
    };
    if !crate::tasks::spawn(driven) {
        return Err(std::io::Error::other("no tokio runtime to run the connection on").into());
    }
    Ok(connection)
}

/// A connection's driver task, as the `redis` crate makes it.
type Driver = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The `redis` crate's multiplexed connection over `stream` (its handshake
/// with the node included), and its driver, not yet spawned.
async fn multiplexed<S>(
    info: &redis::ConnectionInfo,
    stream: S,
    config: &AsyncConnectionConfig,
) -> Result<(MultiplexedConnection, Driver), RedisError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (connection, driver) =
        MultiplexedConnection::new_with_config(info.redis_settings(), stream, config.clone())
            .await?;
    Ok((connection, Box::pin(driver)))
}

/// A connection's driver task that yields before it writes, while other
/// calls are under way on the link, so that it writes their commands
/// together (see the module docs):
///
/// - Woken with at most one call under way (a lone caller), it runs at once.
/// - Woken with more, it yields: it asks the runtime to wake it when the
///   worker runs out of other tasks (tokio's `yield_now`: the runtime wakes
///   such tasks before its worker parks, and at each of its maintenance
///   ticks, by default every 61 polls of other tasks), and leaves its
///   waker in the link's [`Traffic`]. It runs at the first of: that wake,
///   any other wake (a reply arrived: the socket's), or the call that makes
///   [`BATCH`] calls queued since it last ran (which wakes it, so that it
///   runs right after that call's task).
///   The bound keeps the server busy while the client makes the next
///   calls: one write for all would leave each side idle while the other
///   works.
///
/// Nothing here decides a vote: the calls and their timers are the
/// driver's own, and a command written later only leaves its round less
/// validity (which counts from before the command was queued). The driver
/// ends when every handle of the connection is dropped (its channel
/// closes) or the connection fails.
pub(crate) struct Coalescing {
    driver: Driver,
    traffic: Arc<Traffic>,
    /// Whether it yielded since it last ran: the next poll runs the driver.
    yielded: bool,
}

impl Coalescing {
    /// `driver`, coalescing the calls that `traffic` counts.
    pub(crate) fn new(driver: Driver, traffic: Arc<Traffic>) -> Self {
        Coalescing {
            driver,
            traffic,
            yielded: false,
        }
    }
}

impl Future for Coalescing {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if !self.yielded && self.traffic.outstanding.load(Ordering::Relaxed) > 1 {
            self.yielded = true;
            *crate::tasks::lock(&self.traffic.parked) = Some(cx.waker().clone());
            // Its first poll asks for the deferred wake and is pending;
            // dropping it after does not take the request back.
            let mut later = std::pin::pin!(tokio::task::yield_now());
            let _ = later.as_mut().poll(cx);
            return Poll::Pending;
        }
        self.traffic.queued.store(0, Ordering::Relaxed);
        // Its waker is left only by a yield: no lock otherwise (a lone
        // caller's wake).
        if std::mem::take(&mut self.yielded) {
            crate::tasks::lock(&self.traffic.parked).take();
        }
        self.driver.as_mut().poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::task::Waker;

    /// A driver that counts its polls and keeps its waker, like a driver
    /// with nothing to do.
    struct Idle {
        polls: Arc<AtomicUsize>,
        waker: Arc<Mutex<Option<Waker>>>,
    }

    impl Future for Idle {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            *crate::tasks::lock(&self.waker) = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    /// A task that is always ready to run: it wakes itself at every poll.
    struct Spin(Arc<AtomicBool>);

    impl Future for Spin {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.0.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    /// A driver that yields with other calls under way, on a worker that
    /// never runs out of tasks (a spinning task), and with nothing else to
    /// wake it (no reply coming, fewer than `BATCH` calls), still runs: the
    /// runtime's deferred wake, at its maintenance tick, is what brings it
    /// back. Each wake yields again, and each time the driver runs.
    #[test]
    fn a_yielding_driver_runs_on_a_worker_that_is_never_idle() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let traffic = Arc::new(Traffic::default());
        traffic.outstanding.store(2, Ordering::SeqCst);
        let (polls, waker) = (Arc::new(AtomicUsize::new(0)), Arc::default());
        let stop = Arc::new(AtomicBool::new(false));
        let spinner = runtime.spawn(Spin(stop.clone()));
        let driver = Idle {
            polls: polls.clone(),
            waker: Arc::clone(&waker),
        };
        runtime.spawn(Coalescing::new(Box::pin(driver), traffic.clone()));
        let reached = |count: usize| {
            let deadline = Instant::now() + Duration::from_secs(5);
            while polls.load(Ordering::SeqCst) < count && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            polls.load(Ordering::SeqCst) >= count
        };
        assert!(reached(1), "the yielding driver never ran");
        for count in 2..=5 {
            let woken = crate::tasks::lock(&waker)
                .take()
                .expect("the driver's waker");
            woken.wake();
            assert!(reached(count), "the driver did not run after wake {count}");
        }
        stop.store(true, Ordering::SeqCst);
        runtime.block_on(spinner).expect("spinner");
    }

    /// Counts its wakes.
    struct Wakes(AtomicUsize);

    impl futures::task::ArcWake for Wakes {
        fn wake_by_ref(arc_self: &Arc<Self>) {
            arc_self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The call that makes `BATCH` calls queued since the driver last ran
    /// wakes a yielding driver, once; the calls before it do not, and a
    /// call's end takes it out of the calls under way.
    #[test]
    fn the_batch_th_call_wakes_a_yielding_driver() {
        let client = Client::open("redis://127.0.0.1:1").expect("url");
        let check: Check = Arc::new(|_| async { Ok(()) }.boxed());
        let link = Link::new(
            Target::Fixed(Box::new(client)),
            Duration::from_secs(1),
            check,
        );
        let wakes = Arc::new(Wakes(AtomicUsize::new(0)));
        *crate::tasks::lock(&link.traffic.parked) = Some(futures::task::waker(wakes.clone()));
        let mut calls: Vec<Outstanding> = (1..BATCH).map(|_| link.outstanding()).collect();
        assert_eq!(wakes.0.load(Ordering::SeqCst), 0);
        calls.push(link.outstanding());
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
        calls.push(link.outstanding());
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1, "woken once");
        assert_eq!(link.traffic.outstanding.load(Ordering::SeqCst), BATCH + 1);
        drop(calls);
        assert_eq!(link.traffic.outstanding.load(Ordering::SeqCst), 0);
    }
}

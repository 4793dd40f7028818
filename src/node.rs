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

use redis::aio::MultiplexedConnection;
use redis::{Client, Cmd, ErrorKind, FromRedisValue, RedisError, Script, ServerErrorKind, Value};

use crate::answer::{Answer, NodeError, NodeErrorKind, NotCounted};
use crate::connection::{self, Link};
use crate::queue::{self, Place};
use crate::request::{LockId, Request};
use crate::scripts;
use crate::standing::Standings;
use crate::tasks::{self, Background};

/// How long a cleanup call that timed out keeps going in the background.
const CLEANUP_LINGER: Duration = Duration::from_secs(10);

/// What a call is for, which decides its bound and how it treats a slow node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    /// Asks for a vote (acquire, extend, fencing write-back): skipped while
    /// the node is unresponsive.
    Vote,
    /// Removes our key (release): always sent, finished in the background
    /// after a timeout.
    Cleanup,
    /// Only reads (status): bounded by the connect
    /// timeout, since a fresh client may have to connect first; a timeout
    /// does not mark the node unresponsive.
    Read,
}

/// A call timed out: skip node `index` and probe it with `PING` (each
/// bounded by `timeout`) until it answers. Without a runtime to probe on, the
/// node is not skipped.
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

/// One node's place in its client's [`Standings`]. Each node has its own
/// (`Arc`), so that calls to different nodes, cloning it, do not all count
/// references on one shared cache line.
#[derive(Debug)]
struct Standing {
    standings: Arc<Standings>,
    index: usize,
}

/// One node of the lock. Cheap to share: calls clone the connection handle.
#[derive(Debug)]
pub(crate) struct Node {
    /// `host:port` (or the socket path), for errors and logs; never credentials.
    name: Arc<str>,
    link: Arc<Link>,
    timeout: Duration,
    connect_timeout: Duration,
    /// Set once the server refused `SET NX GET` (Redis < 7.0).
    legacy_set: Arc<AtomicBool>,
    /// Whether its votes count (in the standings of all the client's nodes).
    standing: Arc<Standing>,
    /// Where releases that timed out finish.
    background: Background,
}

impl Node {
    /// Node `index` of a client whose standings are `standings`: every new
    /// connection to it passes the standings' check first.
    pub(crate) fn new(
        client: Client,
        timeout: Duration,
        connect_timeout: Duration,
        background: Background,
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
        Node {
            name: standings.name(index).into(),
            link: Link::new(client, connect_timeout, check),
            timeout,
            connect_timeout,
            legacy_set,
            standing: Arc::new(Standing { standings, index }),
            background,
        }
    }

    /// The name a node of `client` goes by: `host:port` (or the socket
    /// path), never credentials.
    pub(crate) fn name_of(client: &Client) -> Arc<str> {
        client.get_connection_info().addr().to_string().into()
    }

    /// Connects (which checks the node) unless connected; for the first
    /// checks of a client.
    pub(crate) fn connect(
        &self,
    ) -> impl Future<Output = Result<(), NodeErrorKind>> + Send + 'static {
        let link = self.link.clone();
        async move { link.connection().await.map(drop) }
    }

    /// Runs `call` on this node's connection (connecting first if needed),
    /// bounded by the per-node timeout (the connect timeout for
    /// [`Purpose::Read`]).
    ///
    /// A [`Purpose::Vote`] is not sent to a skipped node. A [`Purpose::Cleanup`]
    /// that times out is not dropped but finishes in the background (for up
    /// to [`CLEANUP_LINGER`]): the `redis` crate skips a queued request whose
    /// caller went away, and a release must not be lost to a busy connection.
    fn bounded<T, F, Fut>(
        &self,
        kind: Purpose,
        call: F,
    ) -> impl Future<Output = Result<T, NodeError>> + Send + 'static
    where
        F: FnOnce(MultiplexedConnection) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, RedisError>> + Send + 'static,
        T: Send + 'static,
    {
        let skipped =
            kind == Purpose::Vote && self.standing.standings.is_skipped(self.standing.index);
        let name = self.name.clone();
        let timeout = if kind == Purpose::Read {
            self.connect_timeout
        } else {
            self.timeout
        };
        let (link, standing) = (self.link.clone(), self.standing.clone());
        let background = self.background.clone();
        async move {
            if skipped {
                let reason = NotCounted::Unresponsive { timeout };
                return Err(NodeError::new(
                    name,
                    NodeErrorKind::NotCounted(Arc::new(reason)),
                ));
            }
            let work = on_link(link.clone(), call);
            let answer = if kind == Purpose::Cleanup {
                let mut pending = Box::pin(work);
                let answer = tokio::time::timeout(timeout, &mut pending).await;
                if answer.is_err() {
                    background.spawn(tokio::time::timeout(CLEANUP_LINGER, pending));
                }
                answer
            } else {
                tokio::time::timeout(timeout, work).await
            };
            match answer {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(kind)) => Err(NodeError::new(name, kind)),
                Err(_) => {
                    if kind != Purpose::Read {
                        timed_out(&standing, link, timeout);
                    }
                    Err(NodeError::new(name, NodeErrorKind::Timeout(timeout)))
                }
            }
        }
    }

    /// Sends `request` to this node; the answer comes within the call's
    /// bound (the per-node timeout; the connect timeout for a read).
    pub(crate) fn send(&self, request: &Request) -> BoxFuture<'static, Answer> {
        match request {
            Request::Acquire {
                lock,
                ttl_ms,
                counter_key: None,
            } => self
                .acquire(lock.clone(), *ttl_ms)
                .map(Answer::from)
                .boxed(),
            Request::Acquire {
                lock,
                ttl_ms,
                counter_key: Some(counter_key),
            } => self
                .acquire_fenced(lock.clone(), counter_key.clone(), *ttl_ms)
                .boxed(),
            Request::Wait {
                lock,
                ttl_ms,
                counter_key,
                waiter,
                ticket,
            } => self
                .wait_turn(
                    lock.clone(),
                    *ttl_ms,
                    counter_key.clone(),
                    waiter.clone(),
                    *ticket,
                )
                .boxed(),
            Request::Extend { lock, ttl_ms } => self
                .script(&scripts::EXTEND, Purpose::Vote, lock, None, Some(*ttl_ms))
                .map(Answer::from)
                .boxed(),
            Request::WriteBack {
                lock,
                counter_key,
                fencing_token,
            } => self
                .script(
                    &scripts::FENCE_WRITE_BACK,
                    Purpose::Vote,
                    lock,
                    Some(counter_key.clone()),
                    Some(*fencing_token),
                )
                .map(Answer::from)
                .boxed(),
            Request::Release { lock, place } => self
                .release(lock.clone(), place.clone())
                .map(Answer::from)
                .boxed(),
            Request::Inspect { key } => self.inspect(key.clone()).boxed(),
        }
    }

    /// `SET key token NX GET PX ttl_ms`: `Ok(true)` when set, `Ok(false)` when
    /// the key exists. Unlike a bare `SET NX`, a key of another type under the
    /// lock name is reported (`WRONGTYPE`) instead of passing for another
    /// holder. Servers older than Redis 7.0 refuse `NX` with `GET`; for them
    /// the node falls back to `SET NX PX` from then on.
    fn acquire(
        &self,
        lock: LockId,
        ttl_ms: u64,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + 'static {
        let name = self.name.clone();
        let legacy = self.legacy_set.clone();
        let call = self.bounded(Purpose::Vote, move |mut connection| async move {
            let set = |with_get: bool| {
                let mut cmd = redis::cmd("SET");
                cmd.arg(&*lock.key).arg(&*lock.token).arg("NX");
                if with_get {
                    cmd.arg("GET");
                }
                cmd.arg("PX").arg(ttl_ms);
                cmd
            };
            if !legacy.load(Ordering::Relaxed) {
                match set(true).query_async::<Value>(&mut connection).await {
                    Err(err) if is_syntax_error(&err) => {
                        tracing::debug!(
                            "SET NX GET refused (Redis < 7.0): using SET NX on this node"
                        );
                        legacy.store(true, Ordering::Relaxed);
                    }
                    answer => return answer.map(|value| (value, true)),
                }
            }
            set(false)
                .query_async::<Value>(&mut connection)
                .await
                .map(|value| (value, false))
        });
        async move {
            match call.await? {
                // With GET: nil means the key was absent and is now ours.
                (Value::Nil, true) | (Value::Okay, false) => Ok(true),
                (Value::BulkString(_), true) | (Value::Nil, false) => Ok(false),
                (other, _) => Err(unexpected(name, &other)),
            }
        }
    }

    /// The fenced acquire script: granted with the node's incremented
    /// fencing counter when set; refused when the key exists.
    fn acquire_fenced(
        &self,
        lock: LockId,
        counter_key: Arc<[u8]>,
        ttl_ms: u64,
    ) -> impl Future<Output = Answer> + Send + 'static {
        let name = self.name.clone();
        let call = self.bounded(Purpose::Vote, move |mut connection| async move {
            let mut cmd = evalsha(&scripts::ACQUIRE_FENCED, 2, 2);
            cmd.arg(&*lock.key)
                .arg(&*counter_key)
                .arg(&*lock.token)
                .arg(ttl_ms);
            invoke::<Value>(&mut connection, &scripts::ACQUIRE_FENCED, &cmd).await
        });
        async move {
            match call.await {
                Ok(Value::Int(0)) => Answer::Refused(None),
                Ok(Value::Int(counter)) if counter > 0 => {
                    Answer::Granted(u64::try_from(counter).ok())
                }
                Ok(other) => Answer::Failed(unexpected(name, &other)),
                Err(err) => Answer::Failed(err),
            }
        }
    }

    /// The release script: `Ok(true)` when the key held our token (it is
    /// then handed on to the first waiter, or deleted). `place` says what
    /// becomes of a waiter's entry (see [`Place`]).
    fn release(
        &self,
        lock: LockId,
        place: Place,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + 'static {
        let name = self.name.clone();
        // Always sent: a node that was slow may still hold our key.
        let call = self.bounded(Purpose::Cleanup, move |mut connection| async move {
            let mut cmd = evalsha(&scripts::RELEASE, 1, 4);
            cmd.arg(&*lock.key).arg(&*lock.token);
            place_args(&mut cmd, &place);
            invoke::<Value>(&mut connection, &scripts::RELEASE, &cmd).await
        });
        async move { yes_or_no(name, call.await?) }
    }

    /// One waiting round on this node (the queue script): granted (with the
    /// fencing counter when `counter_key` is given), or queued under the
    /// ticket the node answers. `ticket` 0 joins at the back.
    fn wait_turn(
        &self,
        lock: LockId,
        ttl_ms: u64,
        counter_key: Option<Arc<[u8]>>,
        waiter: Arc<str>,
        ticket: u64,
    ) -> impl Future<Output = Answer> + Send + 'static {
        let name = self.name.clone();
        let fenced = counter_key.is_some();
        let call = self.bounded(Purpose::Vote, move |mut connection| async move {
            let keys = 1 + usize::from(counter_key.is_some());
            let mut cmd = evalsha(&scripts::WAIT, keys, 5);
            cmd.arg(&*lock.key);
            if let Some(counter_key) = &counter_key {
                cmd.arg(&**counter_key);
            }
            cmd.arg(&*lock.token)
                .arg(ttl_ms)
                .arg(&*waiter)
                .arg(ticket)
                .arg(queue::lifetime_ms());
            invoke::<(i64, i64)>(&mut connection, &scripts::WAIT, &cmd).await
        });
        async move {
            match call.await {
                Ok((1, _)) if !fenced => Answer::Granted(None),
                Ok((1, counter)) if counter > 0 => Answer::Granted(u64::try_from(counter).ok()),
                Ok((0, ticket)) if ticket > 0 => Answer::Refused(Some(ticket.unsigned_abs())),
                Ok((granted, number)) => Answer::Failed(unexpected(
                    name,
                    &Value::Array(vec![Value::Int(granted), Value::Int(number)]),
                )),
                Err(err) => Answer::Failed(err),
            }
        }
    }

    /// Adds `run_id` to the node's record of incarnations that counted
    /// (`SADD`), bounded by the connect timeout (see `standing.rs`).
    pub(crate) fn record_incarnation(
        &self,
        record_key: Arc<[u8]>,
        run_id: Arc<str>,
    ) -> impl Future<Output = Result<(), NodeError>> + Send + 'static {
        let call = self.bounded(Purpose::Read, move |mut connection| async move {
            redis::cmd("SADD")
                .arg(&*record_key)
                .arg(&*run_id)
                .query_async::<Value>(&mut connection)
                .await
        });
        call.map(|answer| answer.map(drop))
    }

    /// The holder's token and remaining TTL (ms) of `key`: `Holds`, or
    /// `Refused` when the key is absent.
    fn inspect(&self, key: Arc<[u8]>) -> impl Future<Output = Answer> + Send + 'static {
        let call = self.bounded(Purpose::Read, move |mut connection| async move {
            let mut cmd = evalsha(&scripts::INSPECT, 1, 0);
            cmd.arg(&*key);
            invoke::<Option<(Vec<u8>, i64)>>(&mut connection, &scripts::INSPECT, &cmd).await
        });
        // A foreign value need not be UTF-8; ours always is.
        call.map(|answer| match answer {
            Ok(Some((token, pttl_ms))) => Answer::Holds {
                token: String::from_utf8_lossy(&token).into_owned(),
                pttl_ms,
            },
            Ok(None) => Answer::Refused(None),
            Err(err) => Answer::Failed(err),
        })
    }

    /// `host:port` of this node.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Runs a script that answers 1 (yes) or 0 (no) with `KEYS` = the
    /// lock's key (and `second_key`), and `ARGV` = its token, then `number`
    /// if given.
    fn script(
        &self,
        script: &'static redis::Script,
        kind: Purpose,
        lock: &LockId,
        second_key: Option<Arc<[u8]>>,
        number: Option<u64>,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + 'static {
        let name = self.name.clone();
        let lock = lock.clone();
        let call = self.bounded(kind, move |mut connection| async move {
            let keys = 1 + usize::from(second_key.is_some());
            let mut cmd = evalsha(script, keys, 2);
            cmd.arg(&*lock.key);
            if let Some(key) = &second_key {
                cmd.arg(&**key);
            }
            cmd.arg(&*lock.token);
            if let Some(number) = number {
                cmd.arg(number);
            }
            invoke::<Value>(&mut connection, script, &cmd).await
        });
        async move { yes_or_no(name, call.await?) }
    }
}

/// Checks a new connection to node `index` (see `standing.rs`). Before
/// Redis 7.0, `SET NX GET` is refused: such a node starts with `SET NX PX`
/// rather than pay a refused round trip.
async fn check(
    standings: Arc<Standings>,
    index: usize,
    connection: MultiplexedConnection,
    legacy_set: Arc<AtomicBool>,
) -> Result<(), NodeErrorKind> {
    let major = standings.check(index, connection).await?;
    if major.is_some_and(|major| major < 7) {
        legacy_set.store(true, Ordering::Relaxed);
    }
    Ok(())
}

/// Runs `call` on `link`'s connection (connecting first if needed); a call
/// that shows the connection broken marks it so.
async fn on_link<T, F, Fut>(link: Arc<Link>, call: F) -> Result<T, NodeErrorKind>
where
    F: FnOnce(MultiplexedConnection) -> Fut,
    Fut: Future<Output = Result<T, RedisError>>,
{
    let handle = link.connection().await?;
    let answer = call(handle.connection.clone()).await;
    if let Err(err) = &answer
        && connection::is_broken(err)
    {
        link.broken(&handle);
    }
    answer.map_err(|err| NodeErrorKind::Redis(Arc::new(err)))
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

/// Runs `cmd`, an [`evalsha`] of `script`; a node that does not know the
/// script (`NOSCRIPT`: it restarted, or `SCRIPT FLUSH` ran) is given it
/// (`SCRIPT LOAD`) and asked again, as the `redis` crate's invocation does.
async fn invoke<T: FromRedisValue>(
    connection: &mut MultiplexedConnection,
    script: &Script,
    cmd: &Cmd,
) -> Result<T, RedisError> {
    match cmd.query_async(connection).await {
        Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            script.prepare_invoke().load_async(connection).await?;
            cmd.query_async(connection).await
        }
        answer => answer,
    }
}

/// Whether `err` is the syntax error with which a server older than Redis
/// 7.0 refuses `SET NX GET`.
fn is_syntax_error(err: &RedisError) -> bool {
    err.code() == Some("ERR") && err.detail().is_some_and(|detail| detail.contains("syntax"))
}

/// A script's 1 (yes) or 0 (no).
fn yes_or_no(node: Arc<str>, reply: Value) -> Result<bool, NodeError> {
    match reply {
        Value::Int(1) => Ok(true),
        Value::Int(0) => Ok(false),
        other => Err(unexpected(node, &other)),
    }
}

/// The error for a reply the protocol does not allow.
fn unexpected(node: Arc<str>, reply: &Value) -> NodeError {
    NodeError::new(node, NodeErrorKind::UnexpectedReply(format!("{reply:?}")))
}

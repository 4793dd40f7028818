//! One Redis node: a lazily created, self-reconnecting multiplexed connection,
//! and the three lock operations, each bounded by the per-node timeout.

use std::future::Future;

use futures::FutureExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, RedisError, Value};

use crate::error::{NodeError, NodeErrorKind};
use crate::round::Reply;
use crate::scripts;

/// How long a cleanup call that timed out keeps going in the background.
const CLEANUP_LINGER: Duration = Duration::from_secs(10);

/// What a call is for, which decides how it treats a slow node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    /// Asks for a vote (acquire, extend, fencing write-back): skipped while
    /// the node is unresponsive.
    Vote,
    /// Removes our key (release): always sent, finished in the background
    /// after a timeout.
    Cleanup,
    /// Only reads (first-contact identity, status).
    Read,
}

/// What a node said it is at first contact.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Identity {
    /// The server's `run_id`: two nodes with one run_id are one server.
    pub(crate) run_id: Option<String>,
    /// The first element of `ROLE`: `master`, `slave` or `sentinel`.
    pub(crate) role: Option<String>,
}

/// Whether a node answers in time, shared with its probe.
#[derive(Debug, Default)]
struct Health {
    /// The last call timed out and no probe has been answered since.
    unresponsive: AtomicBool,
    /// A probe task is running.
    probing: AtomicBool,
}

impl Health {
    /// Marks the node unresponsive and starts probing it with `PING` (each
    /// bounded by `timeout`) until it answers.
    fn timed_out(
        self: &Arc<Self>,
        connection: ConnectionManager,
        timeout: Duration,
        name: &Arc<str>,
    ) {
        self.unresponsive.store(true, Ordering::Relaxed);
        if self.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.probing.store(false, Ordering::Release);
            return;
        };
        tracing::debug!(node = %name, "node timed out: skipped until it answers a PING");
        let health = self.clone();
        let name = name.clone();
        runtime.spawn(async move {
            let mut connection = connection;
            let ping = redis::cmd("PING");
            loop {
                let answer = ping.query_async::<Value>(&mut connection);
                // Any answer, even an error, shows the node is not frozen.
                if tokio::time::timeout(timeout, answer).await.is_ok() {
                    break;
                }
                tokio::time::sleep(timeout).await;
            }
            tracing::debug!(node = %name, "node answers again");
            health.unresponsive.store(false, Ordering::Relaxed);
            health.probing.store(false, Ordering::Release);
        });
    }
}

/// One node of the lock. Cheap to share: calls clone the connection handle.
#[derive(Debug)]
pub(crate) struct Node {
    /// `host:port` (or the socket path), for errors and logs; never credentials.
    name: Arc<str>,
    client: Client,
    /// Created on first use, inside the runtime (creating it spawns a task).
    connection: OnceLock<ConnectionManager>,
    timeout: Duration,
    /// Set once the server refused `SET NX GET` (Redis < 7.0).
    legacy_set: Arc<AtomicBool>,
    health: Arc<Health>,
}

impl Node {
    pub(crate) fn new(client: Client, timeout: Duration) -> Self {
        let name: Arc<str> = client.get_connection_info().addr().to_string().into();
        Node {
            name,
            client,
            connection: OnceLock::new(),
            timeout,
            legacy_set: Arc::default(),
            health: Arc::default(),
        }
    }

    fn error(&self, kind: NodeErrorKind) -> NodeError {
        NodeError::new(self.name.clone(), kind)
    }

    fn redis_error(&self, err: RedisError) -> NodeError {
        self.error(NodeErrorKind::Redis(Arc::new(err)))
    }

    /// The node's connection, created on first use. One per node, shared by all
    /// calls; it reconnects by itself after the node went away.
    fn connection(&self) -> Result<ConnectionManager, NodeError> {
        if let Some(connection) = self.connection.get() {
            return Ok(connection.clone());
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(self.error(NodeErrorKind::NoRuntime));
        }
        // One connection attempt per call: a node that is down answers each
        // call with an error at once (a vote against), and the next call tries
        // to connect again, so a node that comes back is used again.
        let config = ConnectionManagerConfig::new()
            .set_number_of_retries(0)
            .set_connection_timeout(Some(self.timeout.max(Duration::from_secs(1))))
            .set_response_timeout(None);
        let created = ConnectionManager::new_lazy_with_config(self.client.clone(), config)
            .map_err(|err| self.redis_error(err))?;
        Ok(self.connection.get_or_init(|| created).clone())
    }

    /// Runs `call` on this node's connection, bounded by the per-node timeout.
    ///
    /// A [`Call::Vote`] is not sent to a node whose last call timed out and
    /// that has not answered a probe since: an immediate vote against,
    /// instead of one more request piling up behind a frozen server.
    /// A [`Call::Cleanup`] that times out is not dropped but finishes in the
    /// background (for up to [`CLEANUP_LINGER`]): the `redis` crate skips a
    /// queued request whose caller went away, and a release must not be lost
    /// to a busy connection.
    fn bounded<T, F, Fut>(
        &self,
        kind: Call,
        call: F,
    ) -> impl Future<Output = Result<T, NodeError>> + Send + 'static
    where
        F: FnOnce(ConnectionManager) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, RedisError>> + Send + 'static,
        T: Send + 'static,
    {
        let connection = if kind == Call::Vote && self.health.unresponsive.load(Ordering::Relaxed) {
            Err(self.error(NodeErrorKind::Unresponsive(self.timeout)))
        } else {
            self.connection()
        };
        let name = self.name.clone();
        let timeout = self.timeout;
        let health = self.health.clone();
        async move {
            let connection = connection?;
            let answer = if kind == Call::Cleanup {
                let mut pending = Box::pin(call(connection.clone()));
                let answer = tokio::time::timeout(timeout, &mut pending).await;
                if answer.is_err()
                    && let Ok(runtime) = tokio::runtime::Handle::try_current()
                {
                    runtime.spawn(tokio::time::timeout(CLEANUP_LINGER, pending));
                }
                answer
            } else {
                tokio::time::timeout(timeout, call(connection.clone())).await
            };
            match answer {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(err)) => Err(NodeError::new(name, NodeErrorKind::Redis(Arc::new(err)))),
                Err(_) => {
                    health.timed_out(connection, timeout, &name);
                    Err(NodeError::new(name, NodeErrorKind::Timeout(timeout)))
                }
            }
        }
    }

    /// `SET key token NX GET PX ttl_ms`: `Ok(true)` when set, `Ok(false)` when
    /// the key exists. Unlike a bare `SET NX`, a key of another type under the
    /// lock name is reported (`WRONGTYPE`) instead of passing for another
    /// holder. Servers older than Redis 7.0 refuse `NX` with `GET`; for them
    /// the node falls back to `SET NX PX` from then on.
    pub(crate) fn acquire(
        &self,
        key: Arc<[u8]>,
        token: Arc<str>,
        ttl_ms: u64,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + 'static {
        let name = self.name.clone();
        let legacy = self.legacy_set.clone();
        let call = self.bounded(Call::Vote, move |mut connection| async move {
            let set = |with_get: bool| {
                let mut cmd = redis::cmd("SET");
                cmd.arg(&*key).arg(&*token).arg("NX");
                if with_get {
                    cmd.arg("GET");
                }
                cmd.arg("PX").arg(ttl_ms);
                cmd
            };
            if !legacy.load(Ordering::Relaxed) {
                match set(true).query_async::<Value>(&mut connection).await {
                    Err(err)
                        if err.code() == Some("ERR")
                            && err.detail().is_some_and(|d| d.contains("syntax")) =>
                    {
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

    /// The fenced acquire script: `Ok(Reply::Granted(Some(counter)))` when set,
    /// with the node's incremented fencing counter; `Ok(Reply::Refused)` when
    /// the key exists.
    pub(crate) fn acquire_fenced(
        &self,
        key: Arc<[u8]>,
        counter_key: Arc<[u8]>,
        token: Arc<str>,
        ttl_ms: u64,
    ) -> impl Future<Output = Result<Reply, NodeError>> + Send + 'static {
        let name = self.name.clone();
        let call = self.bounded(Call::Vote, move |mut connection| async move {
            scripts::ACQUIRE_FENCED
                .key(&*key)
                .key(&*counter_key)
                .arg(&*token)
                .arg(ttl_ms)
                .invoke_async::<Value>(&mut connection)
                .await
        });
        async move {
            match call.await? {
                Value::Int(0) => Ok(Reply::Refused),
                Value::Int(counter) if counter > 0 => {
                    Ok(Reply::Granted(u64::try_from(counter).ok()))
                }
                other => Err(unexpected(name, &other)),
            }
        }
    }

    /// The fencing write-back: `Ok(true)` when our key was there and the
    /// node's counter is now at least `fencing_token`.
    pub(crate) fn fence_write_back(
        &self,
        key: Arc<[u8]>,
        counter_key: Arc<[u8]>,
        token: Arc<str>,
        fencing_token: u64,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + 'static {
        self.script(
            &scripts::FENCE_WRITE_BACK,
            Call::Vote,
            [key, counter_key],
            token,
            Some(fencing_token),
        )
    }

    /// The extend script: `Ok(true)` when our key's TTL was reset to `ttl_ms`.
    pub(crate) fn extend(
        &self,
        key: Arc<[u8]>,
        token: Arc<str>,
        ttl_ms: u64,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + 'static {
        self.script(&scripts::EXTEND, Call::Vote, [key], token, Some(ttl_ms))
    }

    /// The release script: `Ok(true)` when our key was deleted. With
    /// `announce`, a deletion is published to clients waiting for the key.
    pub(crate) fn release(
        &self,
        key: Arc<[u8]>,
        token: Arc<str>,
        announce: bool,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + 'static {
        // Always sent: a node that was slow may still hold our key.
        self.script(
            &scripts::RELEASE,
            Call::Cleanup,
            [key],
            token,
            announce.then_some(1),
        )
    }

    /// The holder's token and remaining TTL (ms) of `key`, or `None` when absent.
    pub(crate) fn inspect(
        &self,
        key: Arc<[u8]>,
    ) -> impl Future<Output = Result<Option<(String, i64)>, NodeError>> + Send + 'static {
        let call = self.bounded(Call::Read, move |mut connection| async move {
            scripts::INSPECT
                .key(&*key)
                .invoke_async::<Option<(Vec<u8>, i64)>>(&mut connection)
                .await
        });
        // A foreign value need not be UTF-8; ours always is.
        call.map(|answer| {
            answer.map(|held| {
                held.map(|(token, pttl)| (String::from_utf8_lossy(&token).into_owned(), pttl))
            })
        })
    }

    /// What the node says it is: its `run_id` (`INFO server`) and whether
    /// `ROLE` calls it a master. A server that refuses both (an ACL user
    /// without the permission) gives an identity with neither known.
    pub(crate) fn identify(
        &self,
    ) -> impl Future<Output = Result<Identity, NodeError>> + Send + 'static {
        let name = self.name.clone();
        let call = self.bounded(Call::Read, move |mut connection| async move {
            let answer = redis::pipe()
                .cmd("INFO")
                .arg("server")
                .cmd("ROLE")
                .query_async::<(String, Vec<Value>)>(&mut connection)
                .await;
            match answer {
                Ok((info, role)) => Ok(Some((info, role))),
                Err(err) if err.code() == Some("NOPERM") => Ok(None),
                Err(err) => Err(err),
            }
        });
        async move {
            let Some((info, role)) = call.await? else {
                tracing::warn!(node = %name, "not permitted to run INFO/ROLE: duplicate and replica checks skipped for this node");
                return Ok(Identity::default());
            };
            let run_id = info
                .lines()
                .find_map(|line| line.strip_prefix("run_id:"))
                .map(|id| id.trim().to_owned());
            let role = match role.first() {
                Some(Value::BulkString(bytes)) => Some(String::from_utf8_lossy(bytes).into_owned()),
                Some(Value::SimpleString(text)) => Some(text.clone()),
                _ => None,
            };
            Ok(Identity { run_id, role })
        }
    }

    /// The node's `redis::Client`, for connections other than the lock's own
    /// (the pub/sub connection of release notifications).
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// `host:port` of this node.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Runs a script that answers 1 (yes) or 0 (no) with `KEYS` = `keys`
    /// and `ARGV` = the token, then `number` if given.
    fn script<const KEYS: usize>(
        &self,
        script: &'static redis::Script,
        kind: Call,
        keys: [Arc<[u8]>; KEYS],
        token: Arc<str>,
        number: Option<u64>,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + 'static {
        let name = self.name.clone();
        let call = self.bounded(kind, move |mut connection| async move {
            let mut invocation = script.prepare_invoke();
            for key in &keys {
                invocation.key(&**key);
            }
            invocation.arg(&*token);
            if let Some(number) = number {
                invocation.arg(number);
            }
            invocation.invoke_async::<Value>(&mut connection).await
        });
        async move {
            match call.await? {
                Value::Int(1) => Ok(true),
                Value::Int(0) => Ok(false),
                other => Err(unexpected(name, &other)),
            }
        }
    }
}

/// The error for a reply the protocol does not allow.
fn unexpected(node: Arc<str>, reply: &Value) -> NodeError {
    NodeError::new(node, NodeErrorKind::UnexpectedReply(format!("{reply:?}")))
}

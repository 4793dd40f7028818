//! Replicated primaries: a replica of a test server (`--replicaof`), its
//! promotion (`REPLICAOF NO ONE`), and the `INFO` fields that tests wait on.
//! Every wait is on a condition the server reports, never a fixed sleep.

use std::time::{Duration, Instant};

use super::RedisServer;

impl RedisServer {
    /// Starts a replica of `primary` and waits until its link is up and
    /// the first sync has ended.
    pub fn start_replica_of(primary: &RedisServer) -> RedisServer {
        let port = primary.port().to_string();
        let mut args = vec!["--replicaof", "127.0.0.1", &port];
        // The primary's password is the replica's too, for its link and
        // for its own clients (after a promotion).
        if let Some(password) = primary.password() {
            args.extend(["--masterauth", password, "--requirepass", password]);
        }
        let replica = RedisServer::start_with(&args);
        replica.wait_first_sync();
        replica
    }

    /// Waits until this replica's link is up and its first sync has ended.
    fn wait_first_sync(&self) {
        self.wait_for(
            "replication",
            "master_link_status",
            "up",
            "the replica's first sync",
        );
    }

    /// Starts a replica of `primary` inside `host` of a test network
    /// (`netns.rs`) and waits until its first sync has ended.
    pub fn start_replica_in(host: &super::netns::Host, primary: &RedisServer) -> RedisServer {
        let port = primary.port().to_string();
        let replica = RedisServer::start_in(host, &["--replicaof", primary.address(), &port]);
        replica.wait_first_sync();
        replica
    }

    /// One field of `INFO section` (`None` if the server does not report it).
    pub fn info_field(&self, section: &str, field: &str) -> Option<String> {
        let info: String = redis::cmd("INFO")
            .arg(section)
            .query(&mut self.connection())
            .ok()?;
        let prefix = format!("{field}:");
        info.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .map(|value| value.trim().to_owned())
    }

    /// Waits (for at most 20 s) until `INFO section` reports `field` as
    /// `value`; panics naming `what` otherwise.
    pub fn wait_for(&self, section: &str, field: &str, value: &str, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let now = self.info_field(section, field);
            if now.as_deref() == Some(value) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: {field} is {now:?}, not {value:?}, after 20 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until the server reports an uptime of at least `at_least`
    /// (whole seconds, as `INFO` counts them).
    pub fn wait_up_for(&self, at_least: Duration) {
        let deadline = Instant::now() + at_least + Duration::from_secs(20);
        loop {
            let up = self
                .info_field("server", "uptime_in_seconds")
                .and_then(|secs| secs.parse::<u64>().ok())
                .unwrap_or(0);
            if up >= at_least.as_secs() {
                return;
            }
            assert!(Instant::now() < deadline, "uptime stuck at {up} s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until this replica holds `key` (replicated from its primary).
    pub fn wait_replicated(&self, key: &[u8]) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.exists(key) {
            assert!(
                Instant::now() < deadline,
                "the key did not reach the replica"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Whether the server holds `key` (of any type).
    pub fn exists(&self, key: &[u8]) -> bool {
        redis::cmd("EXISTS")
            .arg(key)
            .query::<i64>(&mut self.connection())
            .is_ok_and(|n| n > 0)
    }

    /// Cuts this replica's link to its primary for good while it stays a
    /// replica: a wrong `masterauth`, and its link killed on `primary`; it
    /// cannot reconnect, so nothing the primary writes from now on reaches
    /// it, and a failover can promote it.
    pub fn cut_link_from(&self, primary: &RedisServer) {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("masterauth")
            .arg("not-the-password")
            .query(&mut self.connection())
            .expect("CONFIG SET masterauth");
        let _: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("replica")
            .query(&mut primary.connection())
            .expect("CLIENT KILL TYPE replica");
        self.wait_for("replication", "master_link_status", "down", "the cut link");
    }

    /// A replica that was promoted starts as a primary when restarted: its
    /// `--replicaof` (and the primary's address after it) is dropped from
    /// its arguments. (Restarted with them, it would come back as a replica
    /// of its old primary.)
    pub fn keep_primary_on_restart(&mut self) {
        if let Some(at) = self.extra_args.iter().position(|arg| arg == "--replicaof") {
            self.extra_args
                .drain(at..(at + 3).min(self.extra_args.len()));
        }
    }

    /// Makes this replica a primary (`REPLICAOF NO ONE`), cutting its link:
    /// what its primary writes from now on does not reach it.
    pub fn promote(&self) {
        let _: () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query(&mut self.connection())
            .expect("REPLICAOF NO ONE");
        self.wait_for("replication", "role", "master", "the promotion");
    }
}

/// Waits (for at most `limit`) for `lost`, a holder's `lost()` taken before
/// a failover, and checks that it told of the change of server before the
/// holder's validity ended at `valid_until`.
pub async fn told_of_failover(
    lost: impl std::future::Future<Output = quorlock::Error>,
    valid_until: Instant,
    limit: Duration,
) {
    let lost = tokio::time::timeout(limit, lost)
        .await
        .expect("the holder is told");
    println!("holder told: {lost}");
    assert!(
        matches!(
            lost.lost_reason(),
            Some(quorlock::LostReason::ServerChanged { .. })
        ),
        "{lost}"
    );
    assert!(Instant::now() < valid_until, "told only at its expiry");
}

/// Checks that `client` (`who`, in messages) is refused `resource`, with
/// one node named as recovering from a restart or failover.
pub async fn refused_while_recovering(
    client: &quorlock::Redlock,
    resource: &str,
    ttl: Duration,
    who: &str,
) {
    let err = client
        .lock(resource, ttl)
        .await
        .expect_err("a second holder");
    println!("{who}, refused: {err}");
    assert_eq!(super::recovering_nodes(&err).len(), 1, "{who}: {err}");
}

//! Faults in which a server's word about itself and its data part ways:
//! an empty restart whatever its persistence settings, a restart from its
//! own snapshot, a resync from another server on the connections clients
//! keep open, `FLUSHALL`, and memory that evicts. Every wait is on a
//! condition the server reports, never a fixed sleep.

use super::RedisServer;

/// The files a server's directory keeps across an empty restart: its log,
/// and the clock shim's offset.
const KEPT: [&str; 2] = ["server.log", "clock-offset-ms"];

impl RedisServer {
    /// Kills the process (SIGKILL), empties its data directory (the
    /// append-only files, the snapshot) and starts it again on the same
    /// port with the same options: a container that came back without its
    /// volume, a replaced disk. A durable configuration comes back empty.
    pub fn restart_empty(&mut self) {
        self.kill();
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                if KEPT.iter().any(|kept| name == *kept) {
                    continue;
                }
                let path = entry.path();
                let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
            }
        }
        self.spawn_again();
    }

    /// `SHUTDOWN SAVE`, then the server started again from the snapshot it
    /// wrote: the maintenance restart of a primary. A primary that has had
    /// a replica saves its replication id in the snapshot and reports it as
    /// `master_replid2` when it comes back, as a promoted replica does.
    pub fn restart_from_snapshot(&mut self) {
        // The server closes the connection as it exits: no reply to read.
        let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN")
            .arg("SAVE")
            .query(&mut self.connection());
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
        self.spawn_again();
    }

    /// `REPLICAOF source`, until the first sync has replaced this server's
    /// data with `source`'s, then `REPLICAOF NO ONE`: the resync and
    /// promotion of an operator's mistake or of a failover gone wrong. The
    /// server keeps its `run_id` and its clients' connections; its
    /// replication id changes.
    pub fn resync_from(&self, source: &RedisServer) {
        let _: () = redis::cmd("REPLICAOF")
            .arg(source.address())
            .arg(source.port())
            .query(&mut self.connection())
            .expect("REPLICAOF");
        self.wait_for("replication", "master_link_status", "up", "the resync");
        self.wait_for(
            "replication",
            "master_sync_in_progress",
            "0",
            "the resync's end",
        );
        self.promote();
    }

    /// `FLUSHALL`: every key gone, the server the same.
    pub fn flushall(&self) {
        let _: () = redis::cmd("FLUSHALL")
            .query(&mut self.connection())
            .expect("FLUSHALL");
    }

    /// `used_memory` as `INFO memory` reports it, in bytes.
    pub fn used_memory(&self) -> u64 {
        self.info_field("memory", "used_memory")
            .and_then(|bytes| bytes.parse().ok())
            .expect("INFO memory used_memory")
    }

    /// Writes keys of `value_len` bytes (with a TTL of a minute, so that
    /// the `volatile-*` policies may evict them too) until `key` is gone,
    /// evicted to make room; panics if it is still there after `at_most`
    /// writes.
    pub fn fill_until_evicted(&self, key: &[u8], value_len: usize, at_most: usize) {
        let value = "x".repeat(value_len);
        let mut connection = self.connection();
        for i in 0..at_most {
            let _: redis::RedisResult<()> = redis::cmd("SET")
                .arg(format!("filler:{i}"))
                .arg(&value)
                .arg("EX")
                .arg(60)
                .query(&mut connection);
            if i % 16 == 0 && !self.exists(key) {
                return;
            }
        }
        panic!("the key was not evicted after {at_most} writes");
    }
}

/// The arguments that give a server an ACL user `name` with password
/// `password` allowed every command but `INFO` on every key and channel (a
/// managed service's restricted user, say), the default user left as it
/// is for the test's own connections.
pub fn user_without_info(name: &str, password: &str) -> Vec<String> {
    vec![
        "--user".to_owned(),
        name.to_owned(),
        "on".to_owned(),
        format!(">{password}"),
        "~*".to_owned(),
        "&*".to_owned(),
        "+@all".to_owned(),
        "-info".to_owned(),
    ]
}

/// `redis://name:password@127.0.0.1:PORT` for `server`.
pub fn url_as(server: &RedisServer, name: &str, password: &str) -> String {
    format!("redis://{name}:{password}@127.0.0.1:{}", server.port())
}

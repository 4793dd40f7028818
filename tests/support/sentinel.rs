//! Redis Sentinel: three Sentinels (`redis-server <conf> --sentinel`, of the
//! server under test) watching one primary, on free loopback ports, with
//! short detection times so that a failover (made by killing the primary)
//! ends within seconds. Every wait is on what the Sentinels report.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{RedisServer, free_port, server_binary};

/// The master name the Sentinels watch.
pub const MASTER: &str = "mymaster";

/// One Sentinel process. Killed when dropped.
pub struct Sentinel {
    port: u16,
    dir: PathBuf,
    child: Child,
}

impl Sentinel {
    /// Starts a Sentinel watching `primary` (reached with `password`, if
    /// any) as [`MASTER`], with a quorum of 2, and waits until it answers.
    pub fn start(primary: &RedisServer, password: Option<&str>) -> Sentinel {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("quorlock-sentinel-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("sentinel dir");
        let mut conf = format!(
            "port {port}\nbind 127.0.0.1\ndir {}\n\
             sentinel monitor {MASTER} 127.0.0.1 {} 2\n\
             sentinel down-after-milliseconds {MASTER} 1000\n\
             sentinel failover-timeout {MASTER} 10000\n\
             sentinel parallel-syncs {MASTER} 1\n",
            dir.display(),
            primary.port()
        );
        if let Some(password) = password {
            conf.push_str(&format!("sentinel auth-pass {MASTER} {password}\n"));
        }
        let conf_path = dir.join("sentinel.conf");
        std::fs::write(&conf_path, conf).expect("write sentinel.conf");
        let log = std::fs::File::create(dir.join("sentinel.log")).expect("sentinel log");
        let child = Command::new(server_binary())
            .arg(&conf_path)
            .arg("--sentinel")
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|err| panic!("start {} --sentinel: {err}", server_binary()));
        let sentinel = Sentinel { port, dir, child };
        let deadline = Instant::now() + Duration::from_secs(10);
        while sentinel.primary_port().is_none() {
            assert!(Instant::now() < deadline, "the Sentinel did not answer");
            std::thread::sleep(Duration::from_millis(20));
        }
        sentinel
    }

    /// `host:port` of this Sentinel.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn connection(&self) -> Option<redis::Connection> {
        redis::Client::open(format!("redis://{}", self.address()))
            .ok()?
            .get_connection_with_timeout(Duration::from_secs(1))
            .ok()
    }

    /// The port of the primary this Sentinel names now.
    pub fn primary_port(&self) -> Option<u16> {
        let (_host, port): (String, String) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(MASTER)
            .query(&mut self.connection()?)
            .ok()?;
        port.parse().ok()
    }

    /// How many replicas of the primary this Sentinel knows.
    pub fn replicas(&self) -> usize {
        let Some(mut connection) = self.connection() else {
            return 0;
        };
        redis::cmd("SENTINEL")
            .arg("REPLICAS")
            .arg(MASTER)
            .query::<Vec<redis::Value>>(&mut connection)
            .map_or(0, |replicas| replicas.len())
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Three Sentinels watching one primary.
pub struct Sentinels(pub Vec<Sentinel>);

impl Sentinels {
    /// Three Sentinels watching `primary`; waits until each knows
    /// `replicas` replicas of it (a failover needs one to promote).
    pub fn start(primary: &RedisServer, password: Option<&str>, replicas: usize) -> Sentinels {
        let sentinels = Sentinels((0..3).map(|_| Sentinel::start(primary, password)).collect());
        let deadline = Instant::now() + Duration::from_secs(30);
        while sentinels
            .0
            .iter()
            .any(|sentinel| sentinel.replicas() < replicas)
        {
            assert!(
                Instant::now() < deadline,
                "the Sentinels did not discover the replicas"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        sentinels
    }

    /// `redis+sentinel://[:password@]s1,s2,s3/mymaster`.
    pub fn url(&self, password: Option<&str>) -> String {
        let auth = password.map_or_else(String::new, |password| format!(":{password}@"));
        let hosts: Vec<String> = self.0.iter().map(Sentinel::address).collect();
        format!("redis+sentinel://{auth}{}/{MASTER}", hosts.join(","))
    }

    /// Waits (for at most 60 s) until every Sentinel names the server on
    /// `port` as the primary: the failover ended.
    pub fn wait_primary(&self, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self
            .0
            .iter()
            .any(|sentinel| sentinel.primary_port() != Some(port))
        {
            assert!(Instant::now() < deadline, "no failover to port {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

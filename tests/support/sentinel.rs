//! Redis Sentinel: three Sentinels (`redis-server <conf> --sentinel`, of the
//! server under test) watching one primary, on free loopback ports, with
//! short detection times so that a failover (made by killing the primary)
//! ends within seconds: down after 1 s, and a failover timeout of 3 s (a
//! Sentinel election that splits is tried again after twice that; with the
//! default 3 minutes, or even 10 s, a split vote outlasts a test's locks). Every wait is on what the Sentinels report.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::netns::Host;
use super::{RedisServer, free_port, server_binary};

/// The master name the Sentinels watch.
pub const MASTER: &str = "mymaster";

/// One Sentinel process. Killed when dropped.
pub struct Sentinel {
    /// The address it listens on: 127.0.0.1, or its host's.
    ip: String,
    port: u16,
    dir: PathBuf,
    child: Child,
}

impl Sentinel {
    /// Starts a Sentinel watching `primary` (reached with `password`, if
    /// any) as [`MASTER`], with a quorum of 2, and waits until it answers.
    /// It takes the primary as down after 1 s without an answer.
    pub fn start(primary: &RedisServer, password: Option<&str>) -> Sentinel {
        Sentinel::start_with(primary, password, Duration::from_secs(1))
    }

    /// [`start`](Self::start), taking the primary as down after `down_after`.
    pub fn start_with(
        primary: &RedisServer,
        password: Option<&str>,
        down_after: Duration,
    ) -> Sentinel {
        Sentinel::launch(None, primary, password, down_after)
    }

    /// [`start_with`](Self::start_with), inside `host` of a test network
    /// (`netns.rs`), listening on its address.
    pub fn start_in(host: &Host, primary: &RedisServer, down_after: Duration) -> Sentinel {
        Sentinel::launch(Some(host), primary, None, down_after)
    }

    fn launch(
        host: Option<&Host>,
        primary: &RedisServer,
        password: Option<&str>,
        down_after: Duration,
    ) -> Sentinel {
        let port = free_port();
        let ip = host.map_or_else(|| "127.0.0.1".to_owned(), |host| host.ip.to_string());
        let dir =
            std::env::temp_dir().join(format!("quorlock-sentinel-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("sentinel dir");
        let mut conf = format!(
            "port {port}\nbind {ip}\ndir {}\nprotected-mode no\n\
             sentinel monitor {MASTER} {} {} 2\n\
             sentinel down-after-milliseconds {MASTER} {}\n\
             sentinel failover-timeout {MASTER} 3000\n\
             sentinel parallel-syncs {MASTER} 1\n",
            dir.display(),
            primary.address(),
            primary.port(),
            down_after.as_millis()
        );
        if let Some(password) = password {
            conf.push_str(&format!("sentinel auth-pass {MASTER} {password}\n"));
        }
        let conf_path = dir.join("sentinel.conf");
        std::fs::write(&conf_path, conf).expect("write sentinel.conf");
        let log = std::fs::File::create(dir.join("sentinel.log")).expect("sentinel log");
        let mut command = match host {
            Some(host) => host.command(server_binary()),
            None => Command::new(server_binary()),
        };
        let child = command
            .arg(&conf_path)
            .arg("--sentinel")
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|err| panic!("start {} --sentinel: {err}", server_binary()));
        let sentinel = Sentinel {
            ip,
            port,
            dir,
            child,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while sentinel.primary_port().is_none() {
            assert!(Instant::now() < deadline, "the Sentinel did not answer");
            std::thread::sleep(Duration::from_millis(20));
        }
        sentinel
    }

    /// `host:port` of this Sentinel.
    pub fn address(&self) -> String {
        format!("{}:{}", self.ip, self.port)
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

    /// Whether this Sentinel knows the server on `port` as a healthy
    /// replica (flags `slave`, link up): one it could promote.
    pub fn knows_replica(&self, port: u16) -> bool {
        let Some(mut connection) = self.connection() else {
            return false;
        };
        let replicas: Vec<Vec<String>> = redis::cmd("SENTINEL")
            .arg("REPLICAS")
            .arg(MASTER)
            .query(&mut connection)
            .unwrap_or_default();
        replicas.iter().any(|fields| {
            let field = |name: &str| {
                fields
                    .chunks(2)
                    .find(|pair| pair[0] == name)
                    .and_then(|pair| pair.get(1))
                    .map(String::as_str)
            };
            field("port") == Some(&port.to_string())
                && field("flags") == Some("slave")
                && field("master-link-status") == Some("ok")
        })
    }

    /// Forces a failover now (`SENTINEL FAILOVER`), without waiting for the
    /// primary to be taken as down.
    pub fn force_failover(&self) -> Result<(), String> {
        let mut connection = self.connection().ok_or("the Sentinel does not answer")?;
        redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(MASTER)
            .query::<()>(&mut connection)
            .map_err(|err| err.to_string())
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
        Sentinels::start_with(primary, password, replicas, Duration::from_secs(1))
    }

    /// [`start`](Self::start), the Sentinels taking the primary as down
    /// after `down_after`.
    pub fn start_with(
        primary: &RedisServer,
        password: Option<&str>,
        replicas: usize,
        down_after: Duration,
    ) -> Sentinels {
        let sentinels = Sentinels(
            (0..3)
                .map(|_| Sentinel::start_with(primary, password, down_after))
                .collect(),
        );
        sentinels.wait_replicas(replicas);
        sentinels
    }

    /// Three Sentinels, one in each of `hosts` (`netns.rs`), watching
    /// `primary`; waits until each knows `replicas` replicas of it.
    pub fn start_in(
        hosts: &[Host],
        primary: &RedisServer,
        replicas: usize,
        down_after: Duration,
    ) -> Sentinels {
        let sentinels = Sentinels(
            hosts
                .iter()
                .map(|host| Sentinel::start_in(host, primary, down_after))
                .collect(),
        );
        sentinels.wait_replicas(replicas);
        sentinels
    }

    /// Waits (for at most 30 s) until each Sentinel knows `replicas`
    /// replicas of the primary.
    fn wait_replicas(&self, replicas: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.0.iter().any(|sentinel| sentinel.replicas() < replicas) {
            assert!(
                Instant::now() < deadline,
                "the Sentinels did not discover the replicas"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Has the first Sentinel that takes it force a failover (`SENTINEL
    /// FAILOVER`), then waits until every Sentinel names the server on
    /// `port` as the primary.
    pub fn fail_over_to(&self, port: u16) -> Result<(), String> {
        let mut forced = Err(String::from("no Sentinel"));
        for sentinel in &self.0 {
            forced = sentinel.force_failover();
            if forced.is_ok() {
                break;
            }
        }
        forced.map_err(|err| format!("SENTINEL FAILOVER: {err}"))?;
        self.wait_primary(port);
        Ok(())
    }

    /// `redis+sentinel://[:password@]s1,s2,s3/mymaster`.
    pub fn url(&self, password: Option<&str>) -> String {
        let auth = password.map_or_else(String::new, |password| format!(":{password}@"));
        let hosts: Vec<String> = self.0.iter().map(Sentinel::address).collect();
        format!("redis+sentinel://{auth}{}/{MASTER}", hosts.join(","))
    }

    /// Waits (for at most 60 s) until every Sentinel knows the server on
    /// `port` as a replica it could promote.
    pub fn wait_replica(&self, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.0.iter().any(|sentinel| !sentinel.knows_replica(port)) {
            assert!(
                Instant::now() < deadline,
                "the Sentinels never knew replica {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
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

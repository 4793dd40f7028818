//! Redis Cluster: K primaries (and replicas) of the server under test, each
//! started with `--cluster-enabled yes` on a free loopback port, joined as
//! `redis-cli --cluster create` joins them: a config epoch per node, the
//! slots split evenly among the primaries (`CLUSTER ADDSLOTS`), every node
//! met (`CLUSTER MEET`), each replica attached (`CLUSTER REPLICATE`). Every
//! wait is on what the nodes report (`CLUSTER INFO`, `CLUSTER NODES`,
//! `INFO replication`), never a fixed sleep. A node takes another as failed
//! after 1 s (`cluster-node-timeout`), and a replica may take over however
//! long its link was down (`cluster-replica-validity-factor 0`), so that a
//! failover made by killing a primary ends within seconds.

use std::time::{Duration, Instant};

use super::RedisServer;

/// A cluster's slots.
const SLOTS: u16 = 16384;

/// A Redis Cluster of test servers. Killed when dropped.
pub struct Cluster {
    /// The primaries, in the order of their slots (the first serves slot 0).
    pub primaries: Vec<RedisServer>,
    /// Per primary, its replicas.
    pub replicas: Vec<Vec<RedisServer>>,
}

impl Cluster {
    /// A cluster of `primaries` primaries with `replicas` replicas each.
    pub fn start(primaries: usize, replicas: usize) -> Cluster {
        Cluster::start_with(primaries, replicas, &[])
    }

    /// [`start`](Self::start), every node with `extra_args` too
    /// (`["--requirepass", "x"]` also sets each replica's `masterauth`).
    pub fn start_with(primaries: usize, replicas: usize, extra_args: &[&str]) -> Cluster {
        assert!(primaries > 0, "a cluster needs a primary");
        let mut args: Vec<String> = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "1000",
            "--cluster-replica-validity-factor",
            "0",
        ]
        .iter()
        .chain(extra_args)
        .map(|arg| arg.to_string())
        .collect();
        if let Some(at) = extra_args.iter().position(|arg| *arg == "--requirepass") {
            args.extend(["--masterauth".to_owned(), extra_args[at + 1].to_owned()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let start = |_| RedisServer::start_with(&args);
        let cluster = Cluster {
            primaries: (0..primaries).map(start).collect(),
            replicas: (0..primaries)
                .map(|_| (0..replicas).map(start).collect())
                .collect(),
        };
        cluster.join();
        cluster
    }

    /// Every node, primaries first.
    pub fn nodes(&self) -> impl Iterator<Item = &RedisServer> {
        self.primaries.iter().chain(self.replicas.iter().flatten())
    }

    fn join(&self) {
        for (epoch, node) in self.nodes().enumerate() {
            command(
                node,
                &["CLUSTER", "SET-CONFIG-EPOCH", &(epoch + 1).to_string()],
            );
        }
        let count = self.primaries.len();
        let per = usize::from(SLOTS).div_ceil(count);
        for (index, primary) in self.primaries.iter().enumerate() {
            let first = index * per;
            let last = ((index + 1) * per).min(usize::from(SLOTS));
            let mut add = redis::cmd("CLUSTER");
            add.arg("ADDSLOTS");
            for slot in first..last {
                add.arg(slot);
            }
            let _: () = add
                .query(&mut primary.connection())
                .expect("CLUSTER ADDSLOTS");
        }
        let first_port = self.primaries[0].port().to_string();
        for node in self.nodes().skip(1) {
            command(node, &["CLUSTER", "MEET", "127.0.0.1", &first_port]);
        }
        let total = self.nodes().count();
        for node in self.nodes() {
            wait_until(Duration::from_secs(30), "every node met", || {
                cluster_nodes(node).lines().count() == total
            });
        }
        for (primary, replicas) in self.primaries.iter().zip(&self.replicas) {
            let id = node_id(primary);
            for replica in replicas {
                command(replica, &["CLUSTER", "REPLICATE", &id]);
            }
        }
        self.wait_ok();
        for replica in self.replicas.iter().flatten() {
            replica.wait_for(
                "replication",
                "master_link_status",
                "up",
                "a cluster replica's first sync",
            );
        }
    }

    /// Waits until every running node reports `cluster_state:ok` and
    /// knows every slot served.
    pub fn wait_ok(&self) {
        for node in self.nodes().filter(|node| node.is_running()) {
            wait_until(Duration::from_secs(30), "cluster_state:ok", || {
                let info = cluster_info(node);
                info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384")
            });
        }
    }

    /// `redis+cluster://` naming every primary (with the password, if any).
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes()
            .map(|node| format!("127.0.0.1:{}", node.port()))
            .collect();
        match self.primaries[0].password() {
            Some(password) => format!("redis+cluster://:{password}@{}", hosts.join(",")),
            None => format!("redis+cluster://{}", hosts.join(",")),
        }
    }

    /// The slot of `key`, as the cluster computes it.
    pub fn slot(&self, key: &[u8]) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.primaries[0].connection())
            .expect("CLUSTER KEYSLOT")
    }

    /// The index of the primary that was given `key`'s slot.
    pub fn primary_of(&self, key: &[u8]) -> usize {
        let per = usize::from(SLOTS).div_ceil(self.primaries.len());
        usize::from(self.slot(key)) / per
    }

    /// Starts moving `slot` from primary `from` to primary `to` (as
    /// `redis-cli --cluster reshard` does): the slot importing on `to`,
    /// migrating on `from`, and every key of it moved (`MIGRATE`, which
    /// keeps their TTLs). Until [`end_migration`](Self::end_migration),
    /// `from` answers `ASK` for the keys it no longer has.
    pub fn migrate_keys(&self, slot: u16, from: usize, to: usize) {
        let (source, target) = (&self.primaries[from], &self.primaries[to]);
        let slot = slot.to_string();
        command(
            target,
            &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &node_id(source)],
        );
        command(
            source,
            &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &node_id(target)],
        );
        let keys: Vec<Vec<u8>> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(&slot)
            .arg(1000)
            .query(&mut source.connection())
            .expect("CLUSTER GETKEYSINSLOT");
        if keys.is_empty() {
            return;
        }
        let mut migrate = redis::cmd("MIGRATE");
        migrate
            .arg("127.0.0.1")
            .arg(target.port())
            .arg("")
            .arg(0)
            .arg(5000);
        if let Some(password) = source.password() {
            migrate.arg("AUTH").arg(password);
        }
        migrate.arg("KEYS").arg(&keys);
        let _: redis::Value = migrate.query(&mut source.connection()).expect("MIGRATE");
    }

    /// Ends a migration: `slot` belongs to primary `to` on every primary,
    /// and the running nodes agree the cluster is whole.
    pub fn end_migration(&self, slot: u16, to: usize) {
        let owner = node_id(&self.primaries[to]);
        let slot = slot.to_string();
        for primary in self.primaries.iter().filter(|node| node.is_running()) {
            command(primary, &["CLUSTER", "SETSLOT", &slot, "NODE", &owner]);
        }
        self.wait_ok();
    }

    /// Waits until `replica` has taken over as a primary (a failover) and
    /// the running nodes agree the cluster is whole again.
    pub fn wait_promoted(&self, replica: &RedisServer) {
        replica.wait_for("replication", "role", "master", "the cluster failover");
        self.wait_ok();
    }
}

/// The value of `key` on `node`, a primary or a replica (`READONLY` first:
/// a cluster replica redirects reads otherwise).
pub fn get(node: &RedisServer, key: &[u8]) -> Option<Vec<u8>> {
    let mut connection = node.connection();
    let _: () = redis::cmd("READONLY")
        .query(&mut connection)
        .expect("READONLY");
    redis::cmd("GET")
        .arg(key)
        .query(&mut connection)
        .expect("GET")
}

/// How many keys `node` holds in `slot` (`CLUSTER COUNTKEYSINSLOT`, which
/// no node redirects).
pub fn keys_in_slot(node: &RedisServer, slot: u16) -> i64 {
    redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut node.connection())
        .expect("CLUSTER COUNTKEYSINSLOT")
}

/// Runs one command on `node`, which must accept it.
fn command(node: &RedisServer, args: &[&str]) {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    let _: redis::Value = cmd
        .query(&mut node.connection())
        .unwrap_or_else(|err| panic!("{args:?} on port {}: {err}", node.port()));
}

fn cluster_nodes(node: &RedisServer) -> String {
    redis::cmd("CLUSTER")
        .arg("NODES")
        .query(&mut node.connection())
        .unwrap_or_default()
}

fn cluster_info(node: &RedisServer) -> String {
    redis::cmd("CLUSTER")
        .arg("INFO")
        .query(&mut node.connection())
        .unwrap_or_default()
}

fn node_id(node: &RedisServer) -> String {
    redis::cmd("CLUSTER")
        .arg("MYID")
        .query(&mut node.connection())
        .expect("CLUSTER MYID")
}

fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

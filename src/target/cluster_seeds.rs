//! A Redis Cluster as one node ([`ClusterSeeds`]): the cluster nodes its
//! URL names, the topology any of them tells, and a client per primary.

use std::sync::Arc;
use std::time::Duration;

use redis::{Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Value};

use super::first_answer::first_answer;
use crate::answer::NodeErrorKind;
use crate::cluster::Topology;

/// A Redis Cluster as one node: the cluster nodes named in its URL (any of
/// them, primary or replica, tells the topology) and how to connect to
/// each primary once one of them named it.
#[derive(Debug)]
pub(crate) struct ClusterSeeds {
    /// One client per node named, with the data nodes' credentials.
    pub(super) seeds: Vec<Client>,
    /// The other nodes the last topology read named (primaries and
    /// replicas): asked too, so that the node outlives the ones its URL
    /// names.
    pub(super) learned: std::sync::Mutex<Vec<Client>>,
    /// The credentials; the address is set per primary.
    pub(super) data: ConnectionInfo,
    pub(super) name: Arc<str>,
}

/// The URL scheme of a Redis Cluster node.
pub(crate) const CLUSTER_SCHEME: &str = "redis+cluster://";

impl ClusterSeeds {
    /// Parses a `redis+cluster://[user:password@]host:port[,host:port…][/]`
    /// URL: the nodes that tell the topology, and the data nodes'
    /// credentials (the same on every primary).
    pub(crate) fn parse(url: &str) -> Result<Self, String> {
        let rest = url
            .strip_prefix(CLUSTER_SCHEME)
            .ok_or_else(|| format!("a Redis Cluster URL starts with {CLUSTER_SCHEME}"))?;
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        if !(path.is_empty() || path == "0") {
            return Err(format!(
                "a Redis Cluster has database 0 only, and its URL no path (got /{path})"
            ));
        }
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (format!("{userinfo}@"), hosts),
            None => (String::new(), authority),
        };
        let seeds = hosts
            .split(',')
            .map(|host| {
                if host.is_empty() {
                    return Err("an empty cluster node address".to_owned());
                }
                Client::open(format!("redis://{userinfo}{host}"))
                    .map_err(|err| format!("cluster node address {host:?}: {err}"))
            })
            .collect::<Result<Vec<Client>, String>>()?;
        let data = format!("redis://{userinfo}127.0.0.1:1")
            .into_connection_info()
            .map_err(|err| format!("the cluster's credentials: {err}"))?;
        let first = hosts.split(',').next().unwrap_or_default();
        Ok(ClusterSeeds {
            seeds,
            learned: std::sync::Mutex::default(),
            data,
            name: format!("cluster@{first}").into(),
        })
    }

    /// The client of the primary at `host:port`, with the URL's credentials.
    pub(crate) fn client(&self, host: String, port: u16) -> Result<Client, NodeErrorKind> {
        let info = self.data.clone().set_addr(ConnectionAddr::Tcp(host, port));
        Client::open(info).map_err(|err| NodeErrorKind::Redis(Arc::new(err)))
    }

    /// The topology as the first node to answer `CLUSTER SLOTS` tells it:
    /// the nodes of the URL and those the last topology read named, all
    /// asked at once, each within `timeout`. Fails, saying what each node
    /// answered, when none does. Remembers the nodes the topology names.
    ///
    /// Cancel safe: it only reads (and replaces the nodes it remembers).
    pub(crate) async fn topology(&self, timeout: Duration) -> Result<Topology, NodeErrorKind> {
        let mut asked = self.seeds.clone();
        asked.extend(crate::tasks::lock(&self.learned).iter().cloned());
        let topology = self.read_topology(&asked, timeout).await?;
        let named = |client: &Client| client.get_connection_info().addr().to_string();
        let known: Vec<String> = self.seeds.iter().map(named).collect();
        let learned = topology
            .nodes
            .iter()
            .filter_map(|(host, port)| self.client(host.clone(), *port).ok())
            .filter(|client| !known.contains(&named(client)))
            .collect();
        *crate::tasks::lock(&self.learned) = learned;
        Ok(topology)
    }

    /// The topology as the first of `nodes` to answer `CLUSTER SLOTS`
    /// tells it (see [`topology`](Self::topology)).
    async fn read_topology(
        &self,
        nodes: &[Client],
        timeout: Duration,
    ) -> Result<Topology, NodeErrorKind> {
        first_answer(nodes, timeout, |seed| async move {
            let host = match seed.get_connection_info().addr() {
                ConnectionAddr::Tcp(host, _) => host.clone(),
                _ => String::new(),
            };
            let mut connection = seed
                .get_multiplexed_async_connection()
                .await
                .map_err(|err| err.to_string())?;
            let reply: Value = redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query_async(&mut connection)
                .await
                .map_err(|err| err.to_string())?;
            Topology::parse(&reply, &host)
        })
        .await
        .map_err(|answers| {
            NodeErrorKind::Cluster(format!(
                "no cluster node told the topology ({})",
                answers.join("; ")
            ))
        })
    }
}

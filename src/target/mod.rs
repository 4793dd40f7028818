//! Where a node is ([`Target`]): a fixed address (a `redis://`,
//! `rediss://` or `unix://` URL, or a `redis::Client`), a primary that
//! Redis Sentinel manages, named by its Sentinels and its master name
//! (`redis+sentinel://`, `sentinel.rs`), or a Redis Cluster reached
//! through its seed nodes (`redis+cluster://`, `cluster_seeds.rs`). Both
//! ask several servers at once and take the first answer
//! (`first_answer.rs`).

mod cluster_seeds;
mod first_answer;
mod sentinel;

use std::sync::Arc;
use std::time::Duration;

use redis::Client;

use crate::answer::NodeErrorKind;
pub(crate) use cluster_seeds::{CLUSTER_SCHEME, ClusterSeeds};
pub use sentinel::SentinelNode;
pub(crate) use sentinel::{SENTINEL_SCHEME, Sentinels};

/// Where one node is.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// One address.
    Fixed(Box<Client>),
    /// The primary that Sentinels name.
    Sentinel(Arc<Sentinels>),
    /// A Redis Cluster, reached through its seed nodes.
    Cluster(Arc<ClusterSeeds>),
}

impl Target {
    /// The name the node goes by: `host:port` (or the socket path) of a
    /// fixed one; `<master-name>@<first Sentinel>` of a Sentinel one.
    pub(crate) fn name(&self) -> Arc<str> {
        match self {
            Target::Fixed(client) => client.get_connection_info().addr().to_string().into(),
            Target::Sentinel(sentinels) => sentinels.name.clone(),
            Target::Cluster(seeds) => seeds.name.clone(),
        }
    }

    /// Whether the servers behind the node move in failovers (a Sentinel
    /// node, a cluster): one that answers as a replica is passed over, not
    /// refused.
    pub(crate) fn follows_failovers(&self) -> bool {
        matches!(self, Target::Sentinel(_) | Target::Cluster(_))
    }

    /// The client to connect with now: a fixed node's own; a Sentinel
    /// node's primary, as the Sentinels name it (each asked within
    /// `timeout`).
    ///
    /// Cancel safe: it only reads.
    pub(crate) async fn resolve(&self, timeout: Duration) -> Result<Client, NodeErrorKind> {
        match self {
            Target::Fixed(client) => Ok((**client).clone()),
            Target::Sentinel(sentinels) => sentinels.primary(timeout).await,
            Target::Cluster(seeds) => {
                let topology = seeds.topology(timeout).await?;
                let (host, port) = topology.primaries.first().cloned().unwrap_or_default();
                seeds.client(host, port)
            }
        }
    }
}

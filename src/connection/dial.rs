//! One connection attempt: a multiplexed connection to a server, its
//! driver spawned behind [`Coalescing`](super::coalescing::Coalescing), or
//! one to every primary of a Redis Cluster.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, ConnectionAddr, RedisError};

use super::coalescing::{Coalescing, Driver, Traffic};
use crate::answer::NodeErrorKind;
use crate::shards::{Connection, Shards};
use crate::target::ClusterSeeds;

/// The failure of a connection attempt that got an error.
pub(super) fn connect_failure(err: RedisError, timeout: Duration) -> NodeErrorKind {
    if err.is_timeout() {
        NodeErrorKind::ConnectTimeout(timeout)
    } else {
        NodeErrorKind::Redis(Arc::new(err))
    }
}

/// A connection to every primary of the cluster that `seeds` lead to, as
/// one reading of its topology names them, each made as [`connect`] makes
/// one (all at once); `closed` runs when any of them closes, or when a
/// redirection shows the topology stale.
pub(super) async fn connect_cluster(
    seeds: &ClusterSeeds,
    config: &AsyncConnectionConfig,
    traffic: Arc<Traffic>,
    closed: impl Fn() + Clone + Send + Sync + 'static,
    timeout: Duration,
) -> Result<Connection, NodeErrorKind> {
    let topology = seeds.topology(timeout).await?;
    let unserved = topology.unserved();
    if unserved > 0 {
        tracing::warn!(
            unserved,
            "the cluster's topology leaves slots without a primary: locks there fail until \
             they are served"
        );
    }
    let connects = topology.primaries.iter().map(|(host, port)| {
        let client = seeds.client(host.clone(), *port);
        let (traffic, closed) = (traffic.clone(), closed.clone());
        async move {
            connect(&client?, config, traffic, closed)
                .await
                .map_err(|err| connect_failure(err, timeout))
        }
    });
    let connections = futures::future::try_join_all(connects).await?;
    let stale = Box::new(closed);
    Ok(Connection::Cluster(Arc::new(Shards::new(
        topology,
        connections,
        stale,
    ))))
}

/// A multiplexed connection to `client`'s server, its driver task spawned
/// here, [`Coalescing`], for a `redis://` or `unix://` node; a `rediss://`
/// node's through the `redis` crate, which spawns its driver itself.
///
/// The same connection the `redis` crate makes: a client built from a URL
/// has the default TCP settings, of which only `TCP_NODELAY` (off) applies
/// to a plain socket, and the handshake (`AUTH`, `SELECT`, the protocol) is
/// the crate's own, in `MultiplexedConnection::new_with_config`.
/// `closed` runs when the driver of such a connection ends (a `rediss://`
/// connection's end is seen only by the next call on it).
pub(super) async fn connect(
    client: &Client,
    config: &AsyncConnectionConfig,
    traffic: Arc<Traffic>,
    closed: impl FnOnce() + Send + 'static,
) -> Result<MultiplexedConnection, RedisError> {
    let info = client.get_connection_info();
    let (connection, driver) = match info.addr() {
        ConnectionAddr::Tcp(host, port) => {
            let stream = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
            stream.set_nodelay(info.tcp_settings().nodelay())?;
            multiplexed(info, stream, config).await?
        }
        #[cfg(unix)]
        ConnectionAddr::Unix(path) => {
            let stream = tokio::net::UnixStream::connect(path).await?;
            multiplexed(info, stream, config).await?
        }
        _ => {
            return client
                .get_multiplexed_async_connection_with_config(config)
                .await;
        }
    };
    // The attempt runs as a task: a runtime is there.
    let driven = async move {
        Coalescing::new(driver, traffic).await;
        closed();
    };
    if !crate::tasks::spawn(driven) {
        return Err(std::io::Error::other("no tokio runtime to run the connection on").into());
    }
    Ok(connection)
}

/// The `redis` crate's multiplexed connection over `stream` (its handshake
/// with the node included), and its driver, not yet spawned.
pub(super) async fn multiplexed<S>(
    info: &redis::ConnectionInfo,
    stream: S,
    config: &AsyncConnectionConfig,
) -> Result<(MultiplexedConnection, Driver), RedisError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (connection, driver) =
        MultiplexedConnection::new_with_config(info.redis_settings(), stream, config.clone())
            .await?;
    Ok((connection, Box::pin(driver)))
}

//! One connection attempt: a multiplexed connection to a server, its
//! driver spawned behind [`Coalescing`](super::coalescing::Coalescing), or
//! one to every primary of a Redis Cluster.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, ConnectionAddr, RedisError};

use super::coalescing::{Coalescing, Driver, Traffic};
use super::handshake;
use super::pipelined::Pipelined;
use super::server::Server;
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

/// A connection to `client`'s server, its driver task spawned here behind
/// [`Coalescing`]: quorlock's own ([`Pipelined`]) for a `redis://` or
/// `unix://` node that speaks RESP2, with the handshake the `redis` crate
/// makes (`AUTH`, `SELECT`, the library's name); the `redis` crate's
/// multiplexed connection for a `rediss://` node (which that crate
/// connects, spawning its driver itself) or one configured for RESP3.
///
/// Of the `redis` crate's default TCP settings only `TCP_NODELAY` (off)
/// applies to a plain socket; it is kept. `closed` runs when the driver
/// of a connection spawned here ends (a `rediss://` connection's end is
/// seen only by the next call on it).
pub(super) async fn connect(
    client: &Client,
    config: &AsyncConnectionConfig,
    traffic: Arc<Traffic>,
    closed: impl FnOnce() + Send + 'static,
) -> Result<Server, RedisError> {
    let info = client.get_connection_info();
    let settings = info.redis_settings();
    let resp2 = !settings.protocol().supports_resp3();
    let (connection, driver) = match info.addr() {
        ConnectionAddr::Tcp(host, port) => {
            let stream = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
            stream.set_nodelay(info.tcp_settings().nodelay())?;
            match resp2 {
                true => own(stream, settings.db()),
                false => redis_crate(settings, stream, config).await?,
            }
        }
        #[cfg(unix)]
        ConnectionAddr::Unix(path) => {
            let stream = tokio::net::UnixStream::connect(path).await?;
            match resp2 {
                true => own(stream, settings.db()),
                false => redis_crate(settings, stream, config).await?,
            }
        }
        _ => {
            let connection = client.get_multiplexed_async_connection_with_config(config);
            return Ok(Server::Redis(connection.await?));
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
    if let Server::Own(connection) = &connection {
        handshake::handshake(&mut connection.clone(), settings).await?;
    }
    Ok(connection)
}

/// quorlock's own connection over `stream` to database `db`, and its
/// driver, not yet spawned (nor the handshake made).
fn own<S>(stream: S, db: i64) -> (Server, Driver)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (connection, driver) = Pipelined::new(stream, db);
    (Server::Own(connection), driver)
}

/// The `redis` crate's multiplexed connection over `stream` (its handshake
/// with the node included), and its driver, not yet spawned.
async fn redis_crate<S>(
    settings: &redis::RedisConnectionInfo,
    stream: S,
    config: &AsyncConnectionConfig,
) -> Result<(Server, Driver), RedisError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (connection, driver) =
        MultiplexedConnection::new_with_config(settings, stream, config.clone()).await?;
    Ok((Server::Redis(connection), Box::pin(driver)))
}

//! A node's connection as its calls use it: to one server, or to every
//! primary of a Redis Cluster, each command routed to the primary that
//! serves the slot of its key (see `cluster.rs`).
//!
//! # Routing and redirections
//!
//! A cluster connection is made from one reading of the topology
//! (`CLUSTER SLOTS`), with a connection to every primary it names, each
//! checked with the others as one node (see `standing/`). A command goes
//! to the primary of its key's slot; a command that names no key (`PING`,
//! `SCRIPT LOAD`, `WAIT`) goes to every primary.
//!
//! - `MOVED` to a primary of this connection (a slot moved in a
//!   resharding): the command is sent there, and the link connects again,
//!   to read the topology anew.
//! - `ASK` to a primary of this connection (a slot being migrated, the key
//!   already moved): `ASKING` and the command are sent there, together.
//! - A pipeline's redirection (an acquisition's `SET` with `TIME`, a
//!   fenced one's `INCR` too) is followed in the same way, to a primary of
//!   this connection: after an `ASK`, with `ASKING` before each command
//!   that names a key.
//! - `MOVED` or `ASK` to a server this connection does not have (a replica
//!   promoted in a failover, a primary added): the command fails, and the
//!   link connects again. **A server's reply counts only once the server
//!   was checked**: it joins the node through a new connection, whose
//!   check sees the change of server and holds the node back as after a
//!   failover. Following such a redirection at once would count the grants
//!   of a promoted replica that lost the keys of locks still valid.
//!
//! Any primary's connection that closes closes the node's connection (the
//! link connects again, to every primary, and checks them all).

use std::sync::Arc;

use futures::FutureExt;
use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, ServerErrorKind, Value};

use crate::cluster::{self, Topology};
use crate::connection::server::Server;

/// A node's connection (see the module docs).
#[derive(Clone)]
pub(crate) enum Connection {
    /// To one server.
    One(Server),
    /// To every primary of a cluster.
    Cluster(Arc<Shards>),
}

/// What the link does when a cluster connection's topology is out of date:
/// it connects again.
pub(crate) type Stale = Box<dyn Fn() + Send + Sync>;

/// The primaries of a cluster, each with its connection, and which serves
/// which slot.
pub(crate) struct Shards {
    topology: Topology,
    /// Per primary of the topology, in its order.
    connections: Vec<Server>,
    stale: Stale,
}

impl Shards {
    /// The cluster as `topology` tells it, with a connection to each of its
    /// primaries (in its order).
    pub(crate) fn new(topology: Topology, connections: Vec<Server>, stale: Stale) -> Self {
        Shards {
            topology,
            connections,
            stale,
        }
    }
}

impl Connection {
    /// Every server of the connection with its address: the one, or every
    /// primary.
    pub(crate) fn servers(&self) -> Vec<(Option<String>, Server)> {
        match self {
            Connection::One(connection) => vec![(None, connection.clone())],
            Connection::Cluster(shards) => shards
                .topology
                .primaries
                .iter()
                .zip(&shards.connections)
                .map(|((host, port), connection)| {
                    (Some(format!("{host}:{port}")), connection.clone())
                })
                .collect(),
        }
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::One(connection) => connection.req_packed_command(cmd),
            Connection::Cluster(shards) => shards.command(cmd).boxed(),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::One(connection) => connection.req_packed_commands(pipeline, offset, count),
            Connection::Cluster(shards) => shards.pipeline(pipeline, offset, count).boxed(),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::One(connection) => connection.get_db(),
            // A cluster has database 0 only.
            Connection::Cluster(_) => 0,
        }
    }
}

/// The redirection (`MOVED`, `ASK`) a reply is, if it is one: a server's
/// error comes back as a value, which the caller turns into an error.
fn redirection(reply: &Value) -> Option<RedisError> {
    match reply {
        Value::ServerError(error)
            if matches!(
                error.kind(),
                Some(ServerErrorKind::Moved | ServerErrorKind::Ask)
            ) =>
        {
            Some(RedisError::from(error.clone()))
        }
        _ => None,
    }
}

/// Whether a reply is a `MOVED`: the slot's owner changed for good.
fn is_moved(reply: &Value) -> bool {
    matches!(reply, Value::ServerError(error) if error.kind() == Some(ServerErrorKind::Moved))
}

impl Shards {
    /// The connection to the primary of `key`'s slot.
    fn route(&self, key: &[u8]) -> Result<Server, RedisError> {
        let slot = cluster::slot(key);
        match self.topology.primary_of(slot) {
            Some(index) => Ok(self.connections[index].clone()),
            None => Err(RedisError::from((
                ErrorKind::Server(ServerErrorKind::ClusterDown),
                "no primary serves the slot in the topology this connection read",
                format!("slot {slot}"),
            ))),
        }
    }

    /// Runs `cmd` on the primary of its key's slot, following a redirection
    /// to a primary of this connection; a keyless command on every primary.
    async fn command(&self, cmd: &Cmd) -> Result<Value, RedisError> {
        let Some(key) = cluster::route_key(cmd) else {
            return self
                .everywhere(
                    |mut connection| async move { connection.req_packed_command(cmd).await },
                )
                .await;
        };
        let mut connection = self.route(key)?;
        let reply = connection.req_packed_command(cmd).await?;
        match redirection(&reply) {
            Some(err) => self.redirected(err, cmd).await,
            None => Ok(reply),
        }
    }

    /// Runs `pipeline` on the primary of its first key's slot (a keyless
    /// one on every primary), following a redirection to a primary of this
    /// connection. A `MOVED` marks the topology stale; an `ASK` (a slot
    /// being migrated) does not.
    async fn pipeline(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> Result<Vec<Value>, RedisError> {
        let key = pipeline.cmd_iter().find_map(cluster::route_key);
        let reply = match key {
            None => {
                return self
                    .everywhere(|mut connection| async move {
                        connection
                            .req_packed_commands(pipeline, offset, count)
                            .await
                            .map(Value::Array)
                    })
                    .await
                    .map(|reply| match reply {
                        Value::Array(items) => items,
                        other => vec![other],
                    });
            }
            Some(key) => {
                let mut connection = self.route(key)?;
                connection
                    .req_packed_commands(pipeline, offset, count)
                    .await
            }
        };
        let replies = reply?;
        if replies.iter().any(is_moved) {
            (self.stale)();
        }
        match replies.iter().find_map(redirection) {
            Some(err) => Ok(self
                .redirected_pipeline(&err, pipeline, offset, count)
                .await?
                .unwrap_or(replies)),
            None => Ok(replies),
        }
    }

    /// `pipeline` again where the redirection `err` sends it, if that is a
    /// primary of this connection (after an `ASK`, with `ASKING` before
    /// each command that names a key); `None` where it is not followed.
    async fn redirected_pipeline(
        &self,
        err: &RedisError,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> Result<Option<Vec<Value>>, RedisError> {
        let Some((address, _)) = err.redirect_node() else {
            return Ok(None);
        };
        let Some(index) = self
            .topology
            .primaries
            .iter()
            .position(|(host, port)| format!("{host}:{port}") == address)
        else {
            (self.stale)();
            return Ok(None);
        };
        let mut connection = self.connections[index].clone();
        if err.kind() != ErrorKind::Server(ServerErrorKind::Ask) {
            let replies = connection.req_packed_commands(pipeline, offset, count);
            return replies.await.map(Some);
        }
        if offset != 0 || count != pipeline.len() {
            return Ok(None); // a transaction: not sent here
        }
        let mut asking = redis::pipe();
        asking.ignore_errors();
        for cmd in pipeline.cmd_iter() {
            if cluster::route_key(cmd).is_some() {
                asking.cmd("ASKING").ignore();
            }
            asking.add_command(cmd.clone());
        }
        match asking.query_async::<Value>(&mut connection).await? {
            Value::Array(replies) => Ok(Some(replies)),
            _ => Ok(None),
        }
    }

    /// `cmd` again where the redirection `err` sends it, if that is a
    /// primary of this connection; the topology is stale either way after
    /// a `MOVED`, and after an `ASK` to a server this connection lacks.
    async fn redirected(&self, err: RedisError, cmd: &Cmd) -> Result<Value, RedisError> {
        let Some((address, _)) = err.redirect_node() else {
            return Err(err);
        };
        let ask = err.kind() == ErrorKind::Server(ServerErrorKind::Ask);
        let known = self
            .topology
            .primaries
            .iter()
            .position(|(host, port)| format!("{host}:{port}") == address);
        if !ask || known.is_none() {
            (self.stale)();
        }
        let Some(index) = known else {
            return Err(err);
        };
        let mut connection = self.connections[index].clone();
        if !ask {
            return connection.req_packed_command(cmd).await;
        }
        let mut asking = redis::pipe();
        asking.cmd("ASKING").ignore().add_command(cmd.clone());
        let mut replies: Vec<Value> = asking.query_async(&mut connection).await?;
        replies
            .pop()
            .ok_or_else(|| RedisError::from((ErrorKind::Client, "no reply after ASKING")))
    }

    /// Runs `call` on every primary at once: the first error (a failed
    /// exchange, or else a server's error reply), or else the replies
    /// combined, the least where all are numbers (`WAIT`: the replicas that
    /// acknowledged on every primary), else the first.
    async fn everywhere<F, Fut>(&self, call: F) -> Result<Value, RedisError>
    where
        F: Fn(Server) -> Fut,
        Fut: std::future::Future<Output = Result<Value, RedisError>>,
    {
        let replies =
            futures::future::try_join_all(self.connections.iter().cloned().map(call)).await?;
        if let Some(error) = replies
            .iter()
            .find(|reply| matches!(reply, Value::ServerError(_)))
        {
            return Ok(error.clone());
        }
        let least = replies
            .iter()
            .map(|reply| match reply {
                Value::Int(number) => Some(*number),
                _ => None,
            })
            .collect::<Option<Vec<i64>>>()
            .and_then(|numbers| numbers.into_iter().min());
        match least {
            Some(least) => Ok(Value::Int(least)),
            None => replies.into_iter().next().ok_or_else(|| {
                RedisError::from((ErrorKind::Client, "a cluster without primaries"))
            }),
        }
    }
}

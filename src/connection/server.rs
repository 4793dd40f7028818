//! One server's connection ([`Server`]): quorlock's own over a plain socket
//! speaking RESP2 (`pipelined.rs`), the `redis` crate's for TLS and RESP3.

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::pipelined::Pipelined;

/// A connection to one server, shared by every call (clones share it).
#[derive(Clone, Debug)]
pub(crate) enum Server {
    /// quorlock's own: a `redis://` or `unix://` node over RESP2.
    Own(Pipelined),
    /// The `redis` crate's: a `rediss://` node, or one that asks for RESP3.
    Redis(MultiplexedConnection),
}

impl ConnectionLike for Server {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Server::Own(connection) => connection.req_packed_command(cmd),
            Server::Redis(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Server::Own(connection) => connection.req_packed_commands(pipeline, offset, count),
            Server::Redis(connection) => connection.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Server::Own(connection) => connection.get_db(),
            Server::Redis(connection) => connection.get_db(),
        }
    }
}

//! One node's connection: a multiplexed connection shared by every call,
//! created on first use and replaced when it breaks. To a `redis://` or
//! `unix://` server it is quorlock's own (`pipelined.rs`: RESP2, the same
//! handshake, the `redis` crate's command and reply types, less work per
//! call); to a `rediss://` server, or one configured for RESP3, the
//! `redis` crate's (`server.rs`).
//!
//! - **Checked before use.** Connecting ends with the node's check (see
//!   `standing/`): a connection is handed to calls only after the check
//!   judged the server behind it, so no reply of a restarted server is
//!   counted before its restart was seen.
//! - **Its own bound.** Connecting (TCP, TLS, `AUTH`, the client's setup
//!   commands, the check) is bounded by the connect timeout, not by the per-node call
//!   timeout, so a node across a slow link can be reached at all. The attempt
//!   runs as a task of its own: a call that gives up waiting for it (its own
//!   timeout) does not cut it short.
//! - **One attempt at a time.** Concurrent calls share the attempt under way.
//! - **Every failure is retried.** A failed attempt, whatever its reason
//!   (refused, timed out, a wrong password), is kept for [`RETRY_PAUSE`]: calls
//!   in that window get its error at once; the next call after it tries
//!   again. So a node that comes back, or whose password is fixed, is used
//!   again within moments, without rebuilding the client.
//! - **Broken connections are replaced.** A call that finds the connection
//!   closed or corrupt (an I/O or protocol error, also the closed channel of
//!   a connection whose driver task died with its runtime) drops it, and a
//!   new attempt starts at once on the caller's runtime. A `redis://` or
//!   `unix://` connection that closes (its driver ends) is replaced without
//!   waiting for a call, by attempts that go on, each after a longer pause
//!   (up to 2 s), until one connects: so a new server behind the node (a
//!   restart, a failover) is checked, and the locks held there are told,
//!   at once.
//! - **Runtimes end.** The connection's driver task runs on the runtime that
//!   connected it. The attempt's own task stays on that runtime while the
//!   connection is in use; when it is dropped (the runtime shut down, and the
//!   driver with it), a drop guard leaves the link idle, so the next call, on
//!   whatever runtime, connects again instead of failing on a dead
//!   connection. Nor does an attempt cut short that way stay "connecting".
//! - **Writes coalesced.** The connection's driver task (it writes the
//!   commands that calls queue on the connection and hands the replies
//!   back) is spawned here, for `redis://` and `unix://`
//!   nodes, behind [`Coalescing`](coalescing::Coalescing): woken while other calls are under way on
//!   the link, it lets the tasks already waiting on its worker run first (up
//!   to [`BATCH`](coalescing::BATCH) more calls), so that the commands they queue go out in one
//!   write. Without it, tokio's multi-thread scheduler runs a freshly woken
//!   task next (its "LIFO slot"), so the driver would write each command as
//!   soon as its caller queued it: one system call per command, on the
//!   client and on the server; coalesced, both spend far less CPU per lock
//!   and unlock under concurrency (the measurements: docs/benchmarks.md). A
//!   lone caller's command goes out at once. `rediss://` nodes connect
//!   through the `redis` crate, which spawns its own driver: their writes
//!   are not coalesced.

//!
//! # The files
//!
//! `link.rs`, the link ([`Link`]): its states, one attempt at a time, the
//! pause after a failure, the replacement of a broken connection; `dial.rs`,
//! one attempt: a server's connection, or every primary of a cluster;
//! `server.rs`, one server's connection, quorlock's own (`pipelined.rs`,
//! reading replies with `resp.rs`, its handshake in `handshake.rs`) or the
//! `redis` crate's;
//! `coalescing.rs`, the driver that lets the calls under way queue before
//! it writes.

mod coalescing;
mod dial;
mod handshake;
mod link;
mod pipelined;
mod resp;
pub(crate) mod server;

pub(crate) use crate::shards::Connection;
pub(crate) use link::{Check, Link, is_broken};

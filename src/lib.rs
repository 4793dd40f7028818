//! # quorlock
//!
//! Distributed locks over N independent Redis nodes: the
//! [Redlock](https://redis.io/docs/latest/develop/use/patterns/distributed-locks/)
//! algorithm, done carefully, for tokio. With one node it is the classic
//! single-instance Redis lock, with the same API.
//!
//! ## Quick start
//!
//! ```no_run
//! use std::time::Duration;
//! use quorlock::Redlock;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let redlock = Redlock::new([
//!     "redis://127.0.0.1:7001",
//!     "redis://127.0.0.1:7002",
//!     "redis://127.0.0.1:7003",
//! ])?;
//!
//! // Lock, work, unlock.
//! let guard = redlock.lock("stock:item-42", Duration::from_secs(10)).await?;
//! // ... read-check-write the stock ...
//! guard.unlock().await?;
//!
//! // Or let quorlock extend the lock while the work runs, and cancel the work
//! // if the lock is lost.
//! let sold = redlock
//!     .with_lock("stock:item-42", Duration::from_secs(10), async { 1 })
//!     .await?;
//! # let _ = sold;
//! # Ok(())
//! # }
//! ```
//!
//! ## The kinds of lock
//!
//! - The lock on one resource: [`Redlock::lock`] waits in a fair queue on
//!   the nodes, [`Redlock::try_lock`] makes one round,
//!   [`Redlock::with_lock`] runs a future under the lock; the held lock is a
//!   [`LockGuard`] ([`keep_alive`](LockGuard::keep_alive),
//!   [`lost`](LockGuard::lost), [`run`](LockGuard::run),
//!   [`extend`](LockGuard::extend), [`unlock`](LockGuard::unlock)). Another
//!   process that has its [`token`](LockGuard::token) can release it with
//!   [`Redlock::unlock_token`] ([`TokenRelease`] says what it found).
//! - Several resources at once, all or none: [`Redlock::lock_all`].
//! - Readers and writers: [`Redlock::read`], [`Redlock::write`].
//! - At most n holders: [`Redlock::semaphore`] and its [`Permit`]s.
//! - One leader: [`Redlock::campaign`] and its [`Leadership`],
//!   [`Redlock::leader`], [`Redlock::observe`].
//!
//! ```no_run
//! use std::time::Duration;
//! use futures::StreamExt;
//! use quorlock::{LeaderEvent, Redlock};
//!
//! # async fn demo(redlock: Redlock) -> Result<(), Box<dyn std::error::Error>> {
//! // Waits until this process leads "scheduler"; the leadership is a lock.
//! let mut leadership = redlock.campaign("scheduler", "host-7", Duration::from_secs(10)).await?;
//! leadership.keep_alive()?;
//! let term = leadership.term(); // pass it to every write, to fence a deposed leader
//! leadership.run(async { /* lead */ }).await?;
//! leadership.resign().await?;
//!
//! // Who leads, and every change (losses included).
//! let now = redlock.leader("scheduler").await?;
//! let mut changes = redlock.observe("scheduler", Duration::from_millis(100))?;
//! if let Some(Ok(LeaderEvent::Elected(leader))) = changes.next().await {
//!     println!("{} leads, term {}", leader.identity, leader.term);
//! }
//!
//! // At most 3 holders at once, across every process.
//! let api = redlock.semaphore("partner-api", 3)?;
//! let permit = api.acquire(Duration::from_secs(10)).await?;
//! // ... call the partner's API ...
//! permit.release().await?;
//! # let _ = (term, now);
//! # Ok(())
//! # }
//! ```
//!
//! How each works, and why it is safe:
//! [docs/design.md](https://github.com/quorlock/quorlock/blob/main/docs/design.md).
//!
//! ## Nodes
//!
//! A node is one place that holds keys, named by its URL:
//! `redis://` / `rediss://` / `unix://` (a standalone server),
//! `redis+sentinel://[user:password@]host:port[,host:port…]/<master-name>`
//! (a Sentinel-managed primary, followed through failovers; or
//! [`SentinelNode`]), or `redis+cluster://[user:password@]host:port[,host:port…]`
//! (a Redis Cluster: each lock lives on the primary of its slot, and
//! [`Redlock::lock_all`] needs resources of one hash tag). Give 3 or 5
//! independent nodes for a lock that survives node failures, or one. What
//! each deployment guarantees, restarts, failovers and clock steps as an
//! operator sees them:
//! [docs/operations.md](https://github.com/quorlock/quorlock/blob/main/docs/operations.md).
//!
//! ## Guarantees
//!
//! - **Mutual exclusion while valid**: two guards for one resource are never
//!   valid at once, provided the nodes are independent masters, keep their
//!   keys for their TTL or restart as [restarts](#limits-what-redlock-does-not-protect-against)
//!   allow, the clocks of the nodes and the client run at rates that differ
//!   by less than the drift factor, and a node's clock that steps forward is
//!   seen (see [`RedlockBuilder::clock_tolerance`]).
//! - **Liveness with a majority**: locks can be taken while a majority of
//!   nodes answers; keys expire by TTL, so a crashed holder blocks no one for
//!   longer than its TTL, and a crashed *client* with queued waiters for
//!   [`Redlock::WAITER_LIFETIME`] and a [`Redlock::REFRESH_INTERVAL`] (about
//!   1.25 s).
//! - **Fairness**: `lock` callers of every client, in every process, are
//!   served in about the order they came, and a flash sale of thousands of
//!   waiters costs the nodes what a few cost.
//! - **No guard you should not trust**: [`LockGuard::remaining`] is measured
//!   on the monotonic clock from the *start* of the winning round; work run by
//!   [`LockGuard::run`] is cancelled when it reaches zero without an extension.
//!   An extension that may have shortened the keys (it resets their TTL on
//!   every node it reaches, even if it fails or is cancelled) caps the
//!   validity at once; only a successful one raises it.
//! - **Nothing left behind**: a `lock` call dropped mid-round finishes its
//!   round in the background and releases what it set; [`Redlock::flush`]
//!   waits for such background releases before a runtime ends.
//! - **Restarts, failovers, losses of data and clock steps held back**: a
//!   node whose server changed (a restart without durable data, a promoted
//!   replica), whose data went whatever its server says (its data mark gone
//!   or replaced: a `FLUSHALL`, an empty restart, a resync) or whose clock
//!   stepped forward does not count until every lock it may have lost has
//!   expired, counted from the first sight by any client ([`NotCounted`]),
//!   and the locks held on it are told at once ([`LostReason::ServerChanged`],
//!   [`LostReason::DataLost`], [`LostReason::ClockStepped`]). A node whose
//!   memory policy can evict lock keys is refused
//!   ([`RedlockBuilder::allow_eviction`]).
//!
//! ## Limits: what Redlock does not protect against
//!
//! - **Pauses**: a holder that stops (GC, swap, SIGSTOP) past its validity and
//!   then writes is no longer protected; nothing in a lease can stop that.
//!   Use [fencing tokens](#fencing-tokens) where the protected store can
//!   check them.
//! - **Node restarts without persistence** are held back as long as every
//!   client's TTL is within the [restart grace](RedlockBuilder::restart_grace).
//!   What the default cannot see: a client that first meets the nodes while
//!   every node that remembers them is down or emptied, and a single node,
//!   which no other node remembers. [Strict mode](RedlockBuilder::strict_restarts)
//!   closes both; so does keeping restarted nodes down for the longest TTL
//!   (delayed restart). A node rolled back with its data (a VM snapshot) is
//!   not seen.
//! - **Even node counts** work but tolerate no more failures than one node
//!   fewer; a warning is logged at build.
//! - **Single node** (one URL): the lock is as available as that node; a
//!   failover to a replica that lacks the lock makes it unavailable for the
//!   grace instead of handing it to a second holder.
//! - **Redis Cluster**: a failover (or a restart, or a new primary) of any
//!   primary holds the whole cluster node back for the grace, not only the
//!   slots of that primary; `rediss+cluster://` (TLS) is not supported.
//! - **Clock steps** that no client sees: a step forward and back between
//!   two readings of the node, or a step that a client meeting the node for
//!   the first time cannot tell from the other nodes. Run NTP in slewing
//!   mode all the same.
//!
//! ## Fencing tokens
//!
//! With [`RedlockBuilder::fencing`] on, every lock carries a
//! [fencing token](LockGuard::fencing_token): a number larger than that of
//! every earlier holder of the resource. Pass it with each write to the
//! protected resource, and have the resource refuse a write whose token is
//! lower than the highest it has seen: a holder that paused past its lease
//! and comes back is refused, which no lease alone can do
//! (`examples/fenced_storage.rs`). It costs an `INCR` pipelined with each
//! `SET`, and one more round trip only when the nodes' counters differ. It
//! protects only a resource that checks it, and does not order holders of
//! different resources.
//!
//! ## Metrics
//!
//! With the `metrics` feature, quorlock reports through the
//! [`metrics`](https://docs.rs/metrics) crate's facade: install the exporter
//! you use (`metrics-exporter-prometheus`, an OpenTelemetry bridge) at
//! start-up, and these appear:
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `quorlock_acquisitions_total` | counter | `kind` | locks taken |
//! | `quorlock_acquire_failures_total` | counter | `kind`, `reason` | calls that took no lock: `contended`, `unavailable`, `no_validity`, `misconfigured`, `invalid_input`, `no_runtime` |
//! | `quorlock_acquire_wait_seconds` | histogram | `kind` | from the call to the lock, of calls that took it |
//! | `quorlock_round_seconds` | histogram | `round` | one round to its decision: `acquire`, `extend`, `release` |
//! | `quorlock_extensions_total` | counter | `kind`, `outcome` | `extended`, `refused` (a quorum no longer holds the lock), `unreachable` (too few answers), `late` (after the validity) |
//! | `quorlock_locks_lost_total` | counter | `kind`, `reason` | held locks lost, once each, when quorlock learns of it: `extension_refused`, `expired`, `unreachable`, `limit_reached`, `server_changed`, `clock_stepped`, `data_lost` |
//! | `quorlock_releases_unconfirmed_total` | counter | `kind` | `unlock` calls that returned `ReleaseUnconfirmed` |
//! | `quorlock_nodes_not_counted_total` | counter | `reason` | node answers in rounds that did not count: `unchecked`, `unresponsive` (skipped, not asked), `recovering` (after a restart or failover), `data_lost` (its data mark went: a loss of data), `clock_stepped` (its clock stepped forward), `clock_unsure` (a reply too slow to rule a step out) |
//! | `quorlock_notifications_received_total` | counter | | handoff notifications that reached a waiter |
//!
//! `kind` is `lock` (`lock`, `try_lock`, `with_lock`), `lock_all`, `read` or
//! `write`. Resource names are **not** labels by default: every name would
//! become a series of its own, without bound. For a small, fixed set of
//! names, [`RedlockBuilder::metrics_resource_label`] adds a `resource` label
//! (a set's names joined by commas). A loss is counted once, however many
//! `lost()` futures, keepers or releases learn of it. Without the feature,
//! nothing is recorded and no `metrics` dependency is built.
//!
//! Tracing: spans `quorlock.lock`, `quorlock.extend`, `quorlock.unlock` with
//! the resource (never the token); `debug!` per round (attempt, votes,
//! quorum, elapsed), `trace!` per failed node, `warn!` for a lost lock, an
//! unconfirmed release, or a node held back. The library installs no
//! subscriber.
//!
//! ## Features
//!
//! - `tls`: `rediss://` nodes, with rustls (ring as its crypto provider);
//!   the system's CA store or `SSL_CERT_FILE` decides trust, or pass your
//!   own `redis::Client`s to [`Redlock::from_clients`].
//! - `metrics`: the metrics above.
//! - `cli`: the `quorlock` command-line tool, a distributed `flock`
//!   (`cargo install quorlock --features cli`; see
//!   [docs/cli.md](https://github.com/quorlock/quorlock/blob/main/docs/cli.md)).
//!   The library's API is the same with or without it.
//!
//! No feature is on by default. All are documented here and built on
//! docs.rs.
//!
//! ## A tour of the source
//!
//! In the order a lock call's data flows through the files (each file uses
//! only files below it: `scripts/check-structure.sh` checks that there is
//! no import circle, and that no file is over 500 lines before its tests).
//! A folder's `mod.rs` holds the concept's docs and lists its files.
//!
//! 1. `redlock/`: [`Redlock`], the public client, a thin face: `client.rs`
//!    makes it (from URLs, clients or [`RedlockBuilder::build`]) and holds
//!    its limits, `locks.rs` its lock calls, `roles.rs` semaphores and
//!    election, which `semaphore.rs` ([`Semaphore`], [`Permit`]) and
//!    `election.rs` ([`Leadership`], [`Leader`], [`LeaderEvent`]) build on
//!    the plain lock, each with its safety argument.
//! 2. `config/`: [`RedlockBuilder`] (`builder.rs`: each option, its default
//!    and range), checked into the `Config` the engine runs on
//!    (`options.rs`; [`BuildError`] when one is wrong), and the nodes' URLs
//!    (`url.rs`).
//! 3. `engine.rs`: what every clone and guard share (nodes, configuration,
//!    standings, notifications, background work) and the one way to ask the
//!    nodes: send one request to every node and tally the answers.
//! 4. `acquire/`: the acquire call (`mod.rs`): how it waits and whether it
//!    is fenced (`how.rs`), its start and metrics (`start.rs`), the loop as
//!    named steps with the fencing argument (`acquisition.rs`), a round in
//!    flight (`in_flight.rs`), and the read-write lock with its argument
//!    (`rw.rs`); beside it, `sets.rs` (several resources) and
//!    `read_round.rs` (a reader's first round without a script), each with
//!    its argument.
//! 5. `guard.rs`: [`LockGuard`], the held lock; `lease.rs`: the validity a
//!    guard, its keeper and its `lost` futures share, and why a guard is
//!    never valid after its keys.
//! 6. `request.rs`: what a round asks each node, and the lock's identity
//!    (key and token).
//! 7. `round.rs`: one parallel round, tallied as answers arrive, ended as
//!    soon as its outcome is known; stragglers finish in the background.
//! 8. `node/`: one node (`mod.rs`): what each request sends (`wire.rs`),
//!    the exchange with its fallbacks (`exchange.rs`), the commands alone,
//!    pipelined or batched (`send.rs`, with `batch.rs`: a node's votes in
//!    one pipeline with one witness, whose votes wait for their replies in
//!    its `landing.rs`, and `witness.rs`: what a vote reads of the node
//!    after its grant, its data mark and its clock), the reply
//!    read as an answer (`reply.rs`), the probe of a node that timed out
//!    (`probe.rs`).
//!    Below it: `target/`, where a node is (`mod.rs`: an address;
//!    `sentinel.rs`: a Sentinel-managed primary; `cluster_seeds.rs`: a
//!    cluster's seed nodes; `first_answer.rs`: asking several at once);
//!    `connection/`, its connection (`link.rs`: the link and its states;
//!    `dial.rs`: one attempt; `server.rs`: one server's connection, our own
//!    (`pipelined.rs`, with the RESP2 reader `resp.rs`) or the `redis`
//!    crate's; `coalescing.rs`: coalesced writes);
//!    `shards.rs`, that connection to one server or to every primary of a
//!    cluster; `cluster.rs`, slots and hash tags.
//! 9. `standing/`: whose votes count ([`NotCounted`]) and the check every
//!    connection passes, with the restart, failover and data argument: the
//!    pure judgments, by the server's word (`judge.rs`) and by the node's
//!    data mark (`mark.rs`), what a check reads of the server
//!    (`identity.rs`) and of the data (`evidence.rs`, with `answers.rs`),
//!    the records and the mark's keys (`record.rs`), the node set's
//!    settings (`settings.rs`), the table rounds read (`table.rs`), the way
//!    back to counting (`recovery.rs`), a clock's hold (`clock_hold.rs`),
//!    first contact (`first_contact.rs`), the check (`check.rs`), the mark's
//!    part of it (`mark_check.rs`) and the mark read with every grant
//!    (`mark_watch.rs`).
//!    `clock.rs`: the nodes' clocks and the rule, with its argument, that
//!    holds back a node whose clock stepped; `changes.rs`: the changes that
//!    tell a held lock at once that its keys may be gone.
//! 10. `session.rs`: the client's liveness on the nodes, which keeps all its
//!     waiters' places; `queue/`: the queue of waiters on the nodes, with
//!     its argument (`entries.rs`, `busy.rs`, `waiter.rs`: a `lock` call's
//!     place); `notify.rs`: the handoff notifications.
//! 11. `scripts/`: the Lua, with the parts the scripts share in `mod.rs`,
//!     and a file per kind of lock: `lock.rs` (the plain lock and its
//!     queue), `sets.rs`, `rw.rs`, `fencing.rs`, `records.rs` (a leader's
//!     record, the notes of clock steps, the data mark, the node set's
//!     settings).
//! 12. At the bottom, used by all: `answer.rs` (a node's answer,
//!     [`NodeError`]), `quorum.rs` (the pure arithmetic: quorum, drift,
//!     validity, jitter, [`Votes`], [`Unlocked`]), `error.rs` ([`enum@Error`],
//!     `lost.rs` ([`LostReason`]), `status.rs` ([`LockStatus`],
//!     [`TokenRelease`]), `meter.rs` (the
//!     metrics) and `tasks.rs` (spawning, waiting, the counted background
//!     work).
//!
#![warn(missing_docs)]
// [`Error`] is about 150 bytes: a failed acquisition carries each failed and
// each not-counted node with why, which is what a user needs to see. An
// acquisition makes network round trips, so moving it costs nothing
// measurable, and boxing its parts would change the public fields.
#![allow(clippy::result_large_err)]

mod answer;
mod batch;
mod changes;
mod clock;
mod cluster;
mod landing;
mod meter;
mod quorum;
mod tasks;
mod witness;

mod connection;
mod error;
mod lost;
mod node;
mod notify;
mod queue;
mod read_round;
mod request;
mod round;
mod scripts;
mod session;
mod shards;
mod standing;
mod status;
mod target;

mod acquire;
mod config;
mod election;
mod engine;
mod guard;
mod lease;
mod redlock;
mod semaphore;
mod sets;

pub use answer::{NodeError, NodeErrorKind, NotCounted};
pub use config::RedlockBuilder;
pub use election::{Leader, LeaderEvent, Leadership};
pub use error::{BuildError, Error, LostReason, Result};
pub use guard::LockGuard;
pub use quorum::{Unlocked, Votes};
pub use redlock::Redlock;
pub use semaphore::{Permit, Semaphore};
pub use status::{LockStatus, NodeState, NodeStatus, RwStatus, TokenRelease};
pub use target::SentinelNode;

#[cfg(test)]
mod bounds {
    //! Compile-time checks that the public types can move across tasks.
    fn assert_send_sync_static<T: Send + Sync + 'static>() {}
    fn assert_send<T: Send>(_: &T) {}

    #[test]
    fn public_types_are_send_sync_static() {
        assert_send_sync_static::<crate::Redlock>();
        assert_send_sync_static::<crate::LockGuard>();
        assert_send_sync_static::<crate::Error>();
    }

    #[allow(dead_code, clippy::let_underscore_future)]
    async fn futures_are_send(redlock: crate::Redlock, mut guard: crate::LockGuard) {
        let resource = "bounds";
        let ttl = std::time::Duration::from_secs(1);
        assert_send(&redlock.lock(resource, ttl));
        assert_send(&redlock.try_lock(resource, ttl));
        assert_send(&redlock.with_lock(resource, ttl, async {}));
        assert_send(&guard.extend(ttl));
        assert_send(&guard.run(async {}));
        let lost = guard.lost();
        assert_send(&lost);
        let _: &(dyn std::future::Future<Output = crate::Error> + Send + 'static) = &lost;
        assert_send(&guard.unlock());
    }
}

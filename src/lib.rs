//! # quorlock
//!
//! Distributed locks over N independent Redis nodes: the
//! [Redlock](https://redis.io/docs/latest/develop/use/patterns/distributed-locks/)
//! algorithm, done carefully, for tokio. With one node it is the classic
//! single-instance Redis lock, with the same API.
//!
//! ## A tour
//!
//! In the order a lock call's data flows through the files:
//!
//! 1. `redlock.rs`: [`Redlock`], the public client, a thin face: it checks
//!    the call's input and forwards ([`lock`](Redlock::lock),
//!    [`try_lock`](Redlock::try_lock), [`with_lock`](Redlock::with_lock),
//!    several resources at once with [`lock_all`](Redlock::lock_all), a
//!    read-write lock with [`read`](Redlock::read) and
//!    [`write`](Redlock::write), [`status`](Redlock::status),
//!    [`flush`](Redlock::flush)), and makes a client from a builder
//!    ([`RedlockBuilder::build`]). Beside it, built on the plain lock:
//!    `election.rs`, leader election ([`campaign`](Redlock::campaign) and
//!    its [`Leadership`], [`leader`](Redlock::leader),
//!    [`observe`](Redlock::observe)), and `semaphore.rs`, the counting
//!    [`Semaphore`] and its [`Permit`]s; each with its safety argument.
//! 2. `config.rs`: [`RedlockBuilder`], the options with their defaults as
//!    associated constants, checked into the `Config` the engine runs on
//!    ([`BuildError`] when one is wrong).
//! 3. `engine.rs`: what every clone and guard share (nodes, configuration,
//!    standings, notifications, background work) and the one way to ask the
//!    nodes: send one request to every node and tally the answers.
//! 4. `acquire.rs`: the acquire loop as named steps: take the turn, make
//!    the round, fence it, or clean it up and pause. A round in flight is a
//!    private guard that becomes a [`LockGuard`] only when it wins. Its
//!    docs hold the safety argument of the read-write lock. Beside it,
//!    `sets.rs`: the lock on several resources, taken at once or by waiting
//!    in the queue of each and gathering, with its safety argument.
//! 5. `guard.rs`: [`LockGuard`], the held lock: [`extend`](LockGuard::extend),
//!    [`unlock`](LockGuard::unlock), [`forget`](LockGuard::forget),
//!    [`keep_alive`](LockGuard::keep_alive) and [`lost`](LockGuard::lost)
//!    (extension in the background, and the signal that the lock can no
//!    longer be trusted), and [`run`](LockGuard::run), the timeout guard
//!    that cancels work when the lock is lost; `lease.rs`: the validity
//!    they share, the keeper that extends it, and the argument for why a
//!    guard is never valid after its keys.
//! 6. `request.rs`: what a round asks each node (acquire, wait in the
//!    queue, extend, fencing write-back, release, inspect) and the lock's
//!    identity (key and token).
//! 7. `round.rs`: one parallel round, tallied as answers arrive, ended as
//!    soon as its outcome is known; stragglers finish in the background.
//! 8. `node.rs`: one node's calls, each bounded by the per-node timeout, and
//!    the probe of a node that timed out; `target.rs`: where a node is (an
//!    address, a Sentinel-managed primary resolved at each connection,
//!    [`SentinelNode`], or a Redis Cluster's seed nodes); `connection.rs`:
//!    its connection (the connect timeout, reconnects); `shards.rs`: that
//!    connection as calls use it, to one server or to every primary of a
//!    cluster, with slot routing and redirections; `cluster.rs`: slots,
//!    hash tags, the slotted key layout and the topology; `standing.rs`:
//!    whose votes count
//!    ([`NotCounted`]: unchecked, unresponsive, recovering from a restart
//!    or failover) and the check every connection passes, with the restart
//!    and failover safety argument; `clock.rs`: the nodes' clocks, read
//!    with every acquisition, and the rule (with its safety argument) that
//!    holds back a node whose clock stepped forward
//!    ([`NotCounted::ClockStepped`]); `changes.rs`: the changes of server or
//!    clock that tell a held lock at once that its keys may be gone
//!    ([`LostReason::ServerChanged`], [`LostReason::ClockStepped`]);
//!    `scripts.rs`: the Lua.
//! 9. `session.rs`: the client's liveness on the nodes, whose heartbeat
//!    keeps all its waiters' places and checks the keys they wait on;
//!    `queue.rs`: the queue of waiters on the nodes (fairness across
//!    processes), with its safety argument; `notify.rs`: the handoff
//!    notifications that wake the next waiter.
//! 10. At the bottom, used by all: `answer.rs` (a node's answer,
//!     [`NodeError`]), `quorum.rs` (the pure arithmetic: quorum, drift,
//!     validity, jitter, [`Votes`], [`Unlocked`]), `error.rs` ([`enum@Error`],
//!     [`LostReason`]), `status.rs` ([`LockStatus`]) and `tasks.rs`
//!     (spawning, the counted background work).
//!
//! Each file uses only files below it in the import order
//! (`scripts/check-structure.sh` checks that there is no circle).
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
//! ## One leader, or n holders, at a time
//!
//! Built on the plain lock, each with its safety argument in its module:
//! leader election, where the leader's term is its lock's fencing token
//! (higher than every earlier leader's) and standbys wait in the fair
//! queue; and a counting semaphore whose permits are each a lock on one of
//! its slots.
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
//! ## Features
//!
//! - `tls`: `rediss://` nodes, with rustls (ring as its crypto provider);
//!   the system's CA store or `SSL_CERT_FILE` decides trust, or pass your
//!   own `redis::Client`s to [`Redlock::from_clients`].
//! - `metrics`: metrics through the `metrics` crate's facade (bring your
//!   own exporter); the README lists the names and labels, and
//!   [`RedlockBuilder::metrics_resource_label`] opts in to a resource label.
//! - `cli`: the `quorlock` command-line tool, a distributed `flock`
//!   (`cargo install quorlock --features cli`). The library's API is the
//!   same with or without it.
//!
//! No feature is on by default. All are documented here and built on
//! docs.rs.
//!
//! ## The algorithm
//!
//! One acquire round:
//! 1. draw a token: `q` and a UUID v4 in hex (122 random bits from a CSPRNG
//!    seeded by the OS);
//! 2. note the start on the monotonic clock;
//! 3. send `SET key token NX GET PX ttl` (the `GET` makes a key of the wrong
//!    type an error instead of a holder; before Redis 7.0, `SET NX PX`), or
//!    for a `lock` call that waits, the queue's acquire script (see
//!    "fairness" below), to **all nodes in parallel**, each call bounded by the per-node timeout;
//!    an error or timeout is a vote against;
//! 4. stop as soon as the outcome is known: `N / 2 + 1` votes for, or too many
//!    against for that to be possible (stragglers still get their request);
//! 5. validity = `ttl - elapsed - drift`, drift = `ttl * drift_factor + 2 ms`,
//!    computed without underflow;
//! 6. the lock is held iff a quorum granted it and validity is left; the guard
//!    records `valid_until = start + ttl - drift`;
//! 7. otherwise release on every node that did not refuse (a node that
//!    answered no cannot have set the key; one that timed out may have) and,
//!    for `lock`, wait in the queue and go again, until the call's patience
//!    is spent.
//!
//! ## Fairness across processes
//!
//! A `lock` call that finds the lock held waits in a queue kept on the nodes
//! themselves, so that callers of every client, in every process, are served
//! in about the order they came, and a release wakes only the next waiter.
//! The acquire script sets the key only when it is free *for this waiter*
//! (absent and the waiter first in the node's queue, or holding a
//! reservation for it); a release hands the key on to the first waiter as a
//! reservation and publishes its id on that waiter's client's own channel
//! (only its process hears it). The queue only ever withholds a grant:
//! no node ever sets the key over another token, so mutual exclusion rests
//! on the quorum alone. Waiting costs the nodes nothing per waiter: an
//! entry lives while its *client* does, kept by one heartbeat per client
//! and node (`session.rs`), so a flash sale of thousands of waiters is
//! served at the pace of a few. A client that dies stops blocking the
//! others within [`Redlock::WAITER_LIFETIME`] and a heartbeat interval; a `lock` future
//! that is dropped leaves at once. `queue.rs` has the mechanism and its
//! safety and liveness argument.
//!
//! A `lock` call's **patience** is time: it gives up once
//! `retry_count × retry_delay` has passed since the call (2 s with the
//! defaults), or the [acquire timeout](RedlockBuilder::acquire_timeout) when
//! one is set (the shorter of the two when both are), however often it was
//! woken meanwhile. `try_lock` makes one round and does not queue.
//!
//! Release and extension are Lua scripts that act only while the key holds our
//! token, run on every node. A failed extension never deletes the lock.
//!
//! Every connection to a node is checked before any call uses it (its
//! `run_id`, uptime, `ROLE`, persistence settings and record, within the
//! [connect timeout](RedlockBuilder::connect_timeout)): the same server
//! listed twice, or a replica at first contact, is refused with
//! [`Error::Misconfigured`] (a replica where a primary was, or on a Sentinel
//! node, is a failover under way: that node is asked again); a
//! node that answers but refuses the commands counts, with a warning (see
//! `standing.rs` for the policy and why).
//!
//! ## Restarts and failovers
//!
//! A node restarted without persistence comes back empty and would grant a
//! lock a quorum still holds; a replica promoted after its primary died may
//! lack the last locks (replication is asynchronous). quorlock holds such a
//! node back, whatever its uptime: one whose incarnation (`run_id` and
//! replication id) changed while the client knew it, one promoted
//! (`master_replid2` set) that no client recorded yet, or one young and not
//! in its own record while some node's record names an incarnation that is
//! gone (each node records the incarnations that counted), is
//! *recovering*, unless it is durable (`appendonly yes` with `appendfsync
//! always`) and was never promoted. A lock held on it is told at once
//! ([`LostReason::ServerChanged`]). It is asked for its vote, but its grant does not
//! count until the [restart grace](RedlockBuilder::restart_grace) (60 s,
//! and at least the client's longest TTL) has passed since it came back;
//! then it counts again by itself. A brand-new set of nodes counts at once.
//! [`RedlockBuilder::strict_restarts`] also holds back nodes young at first
//! contact; `restart_grace(Duration::ZERO)` switches the protection off. The
//! safety argument, its assumptions and its gaps are in `standing.rs`.
//!
//! A node may be a **Sentinel-managed primary**,
//! `redis+sentinel://[user:password@]host:port[,host:port…]/<master-name>`
//! (or [`SentinelNode`]): the client asks the Sentinels for the primary at
//! each connection and follows it through failovers without a rebuild.
//!
//! A node may be a **Redis Cluster**,
//! `redis+cluster://[user:password@]host:port[,host:port…]`: each lock lives
//! on the primary of its slot, and every key of one lock in that slot (the
//! client lays its keys out by hash tag: the key of `orders` is
//! `<prefix>{orders}`; see `cluster.rs`). The cluster is checked as one
//! server made of its primaries, so a failover of any of them holds the node
//! back for the grace. [`Redlock::lock_all`] then needs resources of one
//! slot (one hash tag); others are refused with [`Error::InvalidResource`].
//!
//! ## Guarantees
//!
//! - **Mutual exclusion while valid**: two guards for one resource are never
//!   valid at once, provided the nodes are independent masters, keep their
//!   keys for their TTL or restart as "restarts" above says, the clocks
//!   of the nodes and the client run at rates that differ by less than the
//!   drift factor, and a node's clock that steps forward is seen as "clock
//!   steps" below says.
//! - **Liveness with a majority**: locks can be taken while a majority of
//!   nodes answers; keys expire by TTL, so a crashed holder blocks no one for
//!   longer than its TTL.
//! - **No guard you should not trust**: [`LockGuard::remaining`] is measured
//!   on the monotonic clock from the *start* of the winning round; work run by
//!   [`LockGuard::run`] is cancelled when it reaches zero without an extension.
//!   An extension that may have shortened the keys (it resets their TTL on
//!   every node it reaches, even if it fails or is cancelled) caps the
//!   validity at once; only a successful one raises it (the argument is in
//!   `guard.rs`).
//! - **Nothing left behind**: a `lock` call dropped mid-round finishes its
//!   round in the background and releases what it set; [`Redlock::flush`]
//!   waits for such background releases before a runtime ends.
//!
//! ## Limits: what Redlock does not protect against
//!
//! - **Pauses**: a holder that stops (GC, swap, SIGSTOP) past its validity and
//!   then writes is no longer protected; nothing in a lease can stop that.
//!   Use [fencing tokens](#fencing-tokens) where the protected store can
//!   check them.
//! - **Node restarts without persistence** are held back (see "restarts"
//!   above) as long as every client's TTL is within the restart grace. What
//!   the default cannot see: a client that first meets the nodes while every
//!   node that remembers them is down or emptied, and a single node, which
//!   no other node remembers. Strict mode, or `appendonly yes` with
//!   `appendfsync always`, closes both; so does keeping restarted nodes down
//!   for the longest TTL (delayed restart).
//! - **Even node counts** work but tolerate no more failures than one node
//!   fewer; a warning is logged at build.
//! - **Single node** (one URL): the lock is as available as that node; a
//!   failover to a replica that lacks the lock makes it unavailable for the
//!   grace instead of handing it to a second holder.
//! - **Redis Cluster**: a failover (or a restart, or a new primary) of any
//!   primary holds the whole cluster node back for the grace, not only the
//!   slots of that primary; `rediss+cluster://` (TLS) is not supported yet.
//! - **Clock steps** that no client sees: a step forward and back between
//!   two readings of the node, or a step that a client meeting the node for
//!   the first time cannot tell from the other nodes (see "clock steps").
//!   Run NTP in slewing mode all the same.

//! ## Clock steps
//!
//! Redis expires keys by its wall clock, so a node whose clock steps
//! forward (NTP stepping instead of slewing, a resumed VM, an administrator)
//! loses its keys early, and would grant a lock whose key a valid holder
//! still counts on. quorlock reads every node's clock (`TIME`, pipelined
//! after each batch of acquisitions sent to a node at once, in each
//! connection's check, and once a second in the background: no extra round
//! trip on the lock path) and compares it
//! with its own monotonic clock and with the other nodes. A node whose clock
//! ran ahead by more than the
//! [clock tolerance](RedlockBuilder::clock_tolerance) (100 ms by default)
//! is held back for the restart grace, like a restarted node
//! ([`NotCounted::ClockStepped`], shown by [`Redlock::status`] and `quorlock
//! status`); the locks held on it are told
//! ([`LostReason::ClockStepped`]); and the step is noted on every node, so
//! that a client meeting the nodes later holds it back too. A client meeting
//! a node for the first time compares its clock with the other nodes' and
//! its own wall clock: a node ahead of them by more than the tolerance is
//! held back. Every lock's validity is shortened by the tolerance, which a
//! smaller step may take unseen. The rule, its safety argument, its
//! detection window and what it leaves uncovered are in `clock.rs`. A node
//! whose clock stays ahead of the others' (a clock never set right) is held
//! back by each client that meets it, for the grace from then: set it right.
//!
//! ## Fencing tokens
//!
//! With [`RedlockBuilder::fencing`] on, every lock carries a
//! [fencing token](LockGuard::fencing_token): a number larger than that of
//! every earlier holder of the resource. Pass it with each write to the
//! protected resource, and have the resource refuse a write whose token is
//! lower than the highest it has seen: a holder that paused past its lease and
//! comes back is refused, which no lease alone can do (`examples/fenced_storage.rs`).
//!
//! **How.** Each node keeps one counter (not one per resource). The
//! acquisition's `SET NX` goes with an `INCR` of the counter, pipelined in the
//! same request (the queue script does both in one step); a refused `SET`
//! increments it too, which is harmless, since counters need only grow. A
//! counter the node lost (restarted without persistence: missing, so `INCR`
//! gives 1, or small after a few refused rounds) is seeded from the server's
//! `TIME` in microseconds before it makes a token: a grant whose counter is
//! below 2^40 asks the seed script for `max(counter, TIME)` plus one, while
//! our key is there. The token `T` is the highest counter among the granting
//! nodes. Before the guard is returned, every granting node
//! whose own counter was below `T` gets a write-back, `counter = max(counter,
//! T)`, done only while the node's key still holds our lock token; a node whose
//! grant returned `T` itself needs none (its counter reached `T` by the `INCR`
//! that followed our `SET`, while our key was there). Nodes that refuse the write-back leave the
//! holding set; below a quorum the acquisition fails and is released. When a
//! quorum of grants returned `T` already (one client's rounds reach all nodes
//! in the same order, so their counters move together; one node always), no
//! write-back is sent at all. The validity is checked again after the
//! write-back.
//!
//! **Why tokens increase.** Let holder A get token `T_A`: a quorum `W_A` of
//! nodes either returned `T_A` with their grant or took A's write-back, so
//! each node in `W_A` had a counter ≥ `T_A` while it held A's key. Let B be a later holder of the resource, granted by
//! a quorum `G_B`. Two quorums of the same N nodes share at least one node
//! `n`. At `n`, B's `SET NX` succeeded, so A's key was gone there, so A's
//! grant or write-back (done while A's key was there) came first: `n`'s counter was
//! already ≥ `T_A` when B's script incremented it. Hence the counter B got
//! from `n` is > `T_A`, and `T_B`, a maximum that includes it, is > `T_A`.
//!
//! The `INCR` is not atomic with the `SET` before it: our key could leave
//! node `n` between the two only by expiring, and a key that expires before
//! the `INCR`'s reply leaves the round no validity (the drift bound of the
//! lock itself), so a holder's counter on `n` was always taken while its key
//! was there.
//!
//! **Assumptions.** The argument needs node `n` to keep its counter between
//! A's write-back and B's acquisition. A node that restarts without
//! persistence loses it and reseeds from its clock: tokens still increase as
//! long as a node's clock (in µs) is ahead of the largest token handed out,
//! that is, as long as counters grow by fewer than one per microsecond and the
//! nodes' clocks do not step back or differ by more than the time since the
//! counters were seeded. It also relies on the same rules as the lock itself
//! (independent masters; a restarted node held back for the restart grace,
//! kept down for a TTL, or persistent).
//!
//! **Not covered.** The token protects only a resource that checks it. It
//! does not order holders of *different* resources, and it says nothing about
//! a holder that keeps running without writing.
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
mod meter;
mod quorum;
mod tasks;

mod connection;
mod error;
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
pub use status::{LockStatus, NodeState, NodeStatus, RwStatus};
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

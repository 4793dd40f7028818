//! The chaos harness, shared by `tests/chaos.rs` (a short run in the suite)
//! and `examples/chaos.rs` (the full run): worker **processes**, each with
//! [`Plan::tasks`] tasks (3, or hundreds of waiters), compete for one
//! resource on 5 nodes while a fault injector freezes, kills and (after at
//! least the TTL) restarts a minority of nodes, and once takes a majority
//! down. Each critical section checks a separate Redis "checker" (see
//! `checker.rs`): on entry, no other holder whose validity has not ended
//! may be inside (an overlap); one that outlived its validity inside is an
//! overstay.
//!
//! With [`Restarts::Immediate`], the minority faults are instead the
//! Redlock hazard itself: two nodes are frozen (so holders hold a bare
//! quorum of the other three), one of those three is killed and restarted
//! empty at once, and the frozen two are thawed. The holder inside its
//! critical section at the restart stays in it (while the checker's
//! `chaos:hold-on` is set, and never past its validity) until well after the
//! thaw, as a long critical section would. Without the restart protection
//! (`Plan::protected` false), a second holder can then take the lock on the
//! restarted and the thawed nodes.
//!
//! With [`Restarts::ClockSteps`], the minority faults are the clock-step
//! hazard: two nodes are frozen, the wall clock of one of the other three
//! (behind the test support's clock shim) steps 30 s forward, which expires
//! the holder's key there, and the frozen two are thawed while the holder
//! stays in its critical section; 3 s later the clock is set right again
//! (a step back). Without the clock watch, a second holder can take the lock
//! on the stepped and the thawed nodes.
//!
//! With [`Restarts::DataLoss`], the minority faults are losses of data
//! that the servers do not tell (`data_loss.rs`): two nodes frozen, a third
//! emptied by `FLUSHALL`, by an empty restart though it is configured
//! durable, or by an in-place resync from an empty server, the holder of
//! the moment inside across it. Without the restart protection (and with
//! it, the data mark), a second holder can take the lock on the emptied and
//! the thawed nodes.
//!
//! With `CHAOS_DEBUG` set, the workers log quorlock's warnings to stderr,
//! and each overlap with the lock's status as the entering worker sees it.
#![allow(dead_code)]

pub mod checker;
mod data_loss;
mod failovers;
mod mixed;
mod mixed_worker;
mod partitions;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use quorlock::Redlock;
use rand::RngExt;
use redis::AsyncCommands;

use crate::support::RedisServer;
use crate::support::clock::{Clock, ClockServer};

pub const RESOURCE: &str = "chaos:resource";
pub const TTL: Duration = Duration::from_secs(1);
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(1);
pub const NODE_TIMEOUT: Duration = Duration::from_millis(50);
/// A call may overrun the acquire timeout by the round in flight (and its
/// cleanup), each bounded by the node timeout, and by the scheduling of its
/// task on a loaded 2-core machine.
pub const DEADLINE_SLACK: Duration = Duration::from_millis(300);
/// The same with hundreds of tasks per worker process, whose scheduling
/// takes longer (188 ms seen in a debug build).
pub const WAITERS_DEADLINE_SLACK: Duration = Duration::from_secs(1);

/// How big a run is.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub workers: usize,
    /// Tasks that lock in each worker process.
    pub tasks: usize,
    /// Each `lock` call's patience (its acquire timeout).
    pub patience: Duration,
    /// How long past its patience a failed call may end.
    pub slack: Duration,
    /// Locks with fencing tokens, and checks that they strictly increase.
    pub fencing: bool,
    pub acquisitions: u64,
    /// Give up (and fail) after this long.
    pub limit: Duration,
    /// How the minority faults restart a killed node.
    pub restarts: Restarts,
    /// How long each critical section lasts (besides the checker's calls).
    pub hold: Duration,
    /// Critical sections last while the injector's `chaos:hold-on` is set
    /// (immediate restarts), within their validity.
    pub hold_on_signal: bool,
    /// Whether the workers keep the restart protection on (with a grace of
    /// the TTL); off, `restart_grace(0)`, as other Redlock clients behave.
    pub protected: bool,
    /// The TTL of every lock.
    pub ttl: Duration,
    /// The run with every fault (`mixed.rs`) injects each kind of fault
    /// at least this often, and a majority outage after each round of
    /// every kind; 0: no fault at all (the baseline).
    pub episodes_per_kind: u64,
}

/// How the minority faults restart a killed node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restarts {
    /// Down for longer than the TTL, then restarted empty: safe without the
    /// protection (the Redis docs' "delayed restart").
    Delayed,
    /// Killed and restarted empty at once, while two other nodes are frozen.
    Immediate,
    /// The nodes are three Sentinel groups; a fault is a lossy failover (the
    /// replica's link cut, the primary killed, the replica promoted) while
    /// another group's primary is frozen (see `failovers.rs`).
    Failovers,
    /// Two nodes frozen, a third's clock stepped 30 s forward, then set
    /// right 3 s later (see the module docs).
    ClockSteps,
    /// Two nodes frozen, a third losing its data with its server unchanged
    /// (see `data_loss.rs`).
    DataLoss,
    /// Every node, worker and the checker a host of its own in a test
    /// network; the faults are silent cuts and lossy links (see
    /// `partitions.rs`).
    Partitions,
    /// Every fault above, drawn at random, on every primitive (see
    /// `mixed.rs`).
    Mixed,
}

impl Plan {
    /// The suite's and the example's default run: delayed restarts, no
    /// added hold in the critical section, protection on.
    pub fn delayed(workers: usize, fencing: bool, acquisitions: u64, limit: Duration) -> Self {
        Plan {
            workers,
            tasks: TASKS_PER_WORKER,
            patience: ACQUIRE_TIMEOUT,
            slack: DEADLINE_SLACK,
            fencing,
            acquisitions,
            limit,
            restarts: Restarts::Delayed,
            hold: Duration::ZERO,
            hold_on_signal: false,
            protected: true,
            ttl: TTL,
            episodes_per_kind: 1,
        }
    }

    /// Immediate restarts without persistence, 1 ms critical sections, the
    /// one at a restart held across it.
    pub fn immediate(workers: usize, acquisitions: u64, limit: Duration, protected: bool) -> Self {
        Plan {
            workers,
            tasks: TASKS_PER_WORKER,
            patience: ACQUIRE_TIMEOUT,
            slack: DEADLINE_SLACK,
            fencing: false,
            acquisitions,
            limit,
            restarts: Restarts::Immediate,
            hold: Duration::from_millis(1),
            hold_on_signal: true,
            protected,
            ttl: TTL,
            episodes_per_kind: 1,
        }
    }

    /// Lossy failovers of three Sentinel groups, 1 ms critical sections, the
    /// one at a failover held across it; a TTL of 3 s, so that a holder is
    /// still valid when the promoted replica starts to serve.
    pub fn failovers(workers: usize, acquisitions: u64, limit: Duration, protected: bool) -> Self {
        Plan {
            restarts: Restarts::Failovers,
            ttl: Duration::from_secs(3),
            patience: Duration::from_secs(3),
            slack: WAITERS_DEADLINE_SLACK,
            ..Plan::immediate(workers, acquisitions, limit, protected)
        }
    }
}

impl Plan {
    /// Clock steps (see the module docs), 1 ms critical sections, the one
    /// at a step held across it.
    pub fn clock_steps(
        workers: usize,
        acquisitions: u64,
        limit: Duration,
        protected: bool,
    ) -> Self {
        Plan {
            restarts: Restarts::ClockSteps,
            ..Plan::immediate(workers, acquisitions, limit, protected)
        }
    }

    /// Losses of data the servers do not tell (see `data_loss.rs`), 1 ms
    /// critical sections, the one at a loss held across it.
    pub fn data_loss(workers: usize, acquisitions: u64, limit: Duration, protected: bool) -> Self {
        Plan {
            restarts: Restarts::DataLoss,
            ..Plan::immediate(workers, acquisitions, limit, protected)
        }
    }

    /// Partitions and lossy links (see `partitions.rs`), 1 ms critical
    /// sections, the holder's held across its cut; fencing tokens checked.
    pub fn partitions(workers: usize, acquisitions: u64, limit: Duration) -> Self {
        Plan {
            restarts: Restarts::Partitions,
            fencing: true,
            ..Plan::immediate(workers, acquisitions, limit, true)
        }
    }

    /// Every fault at random (see `mixed.rs`) for `acquisitions` faulted
    /// acquisitions and `per_kind` episodes of each kind of fault at
    /// least, `tasks` tasks per worker process taking every
    /// primitive with a patience of 5 s, 1 ms critical sections, the ones
    /// at a fault held across it; a TTL of 3 s, so that a holder is still
    /// valid when a promoted replica starts to serve; fencing tokens
    /// checked.
    pub fn mixed(
        (workers, tasks): (usize, usize),
        (acquisitions, per_kind): (u64, u64),
        limit: Duration,
        protected: bool,
    ) -> Self {
        Plan {
            restarts: Restarts::Mixed,
            episodes_per_kind: per_kind,
            fencing: true,
            ttl: Duration::from_secs(3),
            ..Plan::immediate(workers, acquisitions, limit, protected)
                .with_waiters(tasks, Duration::from_secs(5))
        }
    }

    /// The same run with `tasks` tasks per worker process, each `lock`
    /// call waiting up to `patience`: hundreds of waiters per process
    /// queue on the lock under the faults.
    pub fn with_waiters(self, tasks: usize, patience: Duration) -> Self {
        Plan {
            tasks,
            patience,
            slack: WAITERS_DEADLINE_SLACK,
            ..self
        }
    }
}

/// What a run found.
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub acquisitions: u64,
    pub overlaps: u64,
    /// Entries while an earlier holder was still inside but past its
    /// validity, or after the entrant's own had ended (a stalled process:
    /// not covered by a lease, nor counted as an overlap of two valid
    /// holders; see `checker.rs`).
    pub overstays: u64,
    pub failed_calls: u64,
    pub longest_failed_call: Duration,
    pub granted_during_outage: u64,
    pub freezes: u64,
    pub kills: u64,
    pub majority_outages: u64,
    /// Lossy failovers of a Sentinel group.
    pub failovers: u64,
    /// Steps of a node's clock 30 s forward.
    pub clock_steps: u64,
    /// Losses of data by `FLUSHALL`, by an empty restart of a durable node,
    /// by an in-place resync (see `data_loss.rs`).
    pub data_losses: [u64; 3],
    /// Partitions by kind: a holder cut off, a minority cut off, asymmetric
    /// reach, lossy links (see `partitions.rs`).
    pub partitions: [u64; 4],
    /// Episodes of each kind of fault of the run with every fault, in the
    /// order of `mixed::Fault::ALL`.
    pub mixed_faults: [u64; 12],
    /// The overlaps seen during (or right after) each kind of fault of that
    /// run.
    pub overlaps_by_fault: [u64; 12],
    /// The calls that failed during (or right after) each kind of fault of
    /// that run.
    pub failed_by_fault: [u64; 12],
    /// Episodes of that run with a lossy link on top.
    pub overlaid_losses: u64,
    /// Per primitive of that run: acquisitions, overlaps, failed calls.
    pub primitives: mixed_worker::Tallies,
    /// The longest wait for an acquisition after a partition healed.
    pub longest_unavailable_after_heal: Duration,
    /// Acquisitions made while a minority of nodes was frozen or down.
    pub acquired_during_minority_faults: u64,
    /// Fencing tokens not larger than the previous holder's.
    pub fencing_violations: u64,
    pub resumed_after_recovery: Option<Duration>,
    pub elapsed: Duration,
}

impl Report {
    pub fn print(&self, plan: &Plan) {
        let nodes = match plan.restarts {
            Restarts::Failovers => "3 Sentinel groups",
            _ => "5 nodes",
        };
        println!(
            "chaos: {} worker processes x {} tasks, {nodes}, {:.1} s, \
             {:?}, hold {:?}, TTL {:?}, restart and failover protection {}",
            plan.workers,
            plan.tasks,
            self.elapsed.as_secs_f64(),
            plan.restarts,
            plan.hold,
            plan.ttl,
            if plan.protected { "on" } else { "off" }
        );
        println!("  acquisitions            {}", self.acquisitions);
        println!("  overlaps                {}", self.overlaps);
        if self.overstays > 0 {
            println!(
                "  overstays               {} (a holder inside, or the entrant, past its validity)",
                self.overstays
            );
        }
        let restart = match plan.restarts {
            Restarts::Mixed => {
                mixed::print(self);
                "none"
            }
            Restarts::Delayed => "delayed",
            Restarts::Immediate => "immediate",
            Restarts::ClockSteps => {
                println!(
                    "  faults injected         {} clock steps of 30 s forward, each with 2 nodes \
                     frozen ({} freezes), {} majority outage",
                    self.clock_steps, self.freezes, self.majority_outages
                );
                "delayed"
            }
            Restarts::DataLoss => {
                let [flushes, empty, resyncs] = self.data_losses;
                println!(
                    "  faults injected         {} losses of data ({flushes} FLUSHALL, {empty} \
                     empty restarts of durable nodes, {resyncs} in-place resyncs), each with 2 \
                     nodes frozen ({} freezes), {} majority outage",
                    flushes + empty + resyncs,
                    self.freezes,
                    self.majority_outages
                );
                "delayed"
            }
            Restarts::Partitions => {
                let [holder, minority, asymmetric, loss] = self.partitions;
                println!(
                    "  faults injected         {} partitions ({holder} holders cut from a \
                     majority, {minority} minorities cut off, {asymmetric} asymmetric splits, \
                     {loss} lossy links), {} majority outage",
                    holder + minority + asymmetric + loss,
                    self.majority_outages
                );
                println!(
                    "  longest unavailability  {:?} after a heal",
                    self.longest_unavailable_after_heal
                );
                "none"
            }
            Restarts::Failovers => {
                println!(
                    "  faults injected         {} lossy failovers of 3 Sentinel groups, each \
                     with another group's primary frozen",
                    self.failovers
                );
                println!(
                    "  acquired during faults  {}",
                    self.acquired_during_minority_faults
                );
                println!("  failed lock calls       {}", self.failed_calls);
                return;
            }
        };
        if !matches!(
            plan.restarts,
            Restarts::ClockSteps | Restarts::DataLoss | Restarts::Partitions | Restarts::Mixed
        ) {
            println!(
                "  faults injected         {} ({} freezes, {} kills with {restart} restart, {} majority outage)",
                self.freezes + self.kills + self.majority_outages,
                self.freezes,
                self.kills,
                self.majority_outages
            );
        }
        println!(
            "  acquired during faults  {} (with 1-2 nodes frozen, down or cut off)",
            self.acquired_during_minority_faults
        );
        if plan.fencing {
            println!(
                "  fencing tokens          {} not above the previous holder's",
                self.fencing_violations
            );
        }
        println!("  failed lock calls       {}", self.failed_calls);
        println!(
            "  longest failed call     {:?} (deadline {:?})",
            self.longest_failed_call, plan.patience
        );
        println!("  granted during outage   {}", self.granted_during_outage);
        match self.resumed_after_recovery {
            Some(after) => {
                println!("  locking resumed         {after:?} after the majority came back")
            }
            None => println!("  locking resumed         never"),
        }
    }

    /// Every property the run must show; the first one broken, in words.
    pub fn check(&self, plan: &Plan) -> Result<(), String> {
        if self.overlaps != 0 {
            return Err(format!("{} overlaps", self.overlaps));
        }
        if self.fencing_violations != 0 {
            return Err(format!(
                "{} fencing tokens did not increase",
                self.fencing_violations
            ));
        }
        if self.acquisitions < plan.acquisitions {
            return Err(format!(
                "only {} acquisitions of {}",
                self.acquisitions, plan.acquisitions
            ));
        }
        if self.granted_during_outage != 0 {
            return Err(format!(
                "{} locks granted with the majority down",
                self.granted_during_outage
            ));
        }
        if self.longest_failed_call > plan.patience + plan.slack {
            return Err(format!("a failed call took {:?}", self.longest_failed_call));
        }
        if plan.restarts == Restarts::Mixed {
            return self.check_mixed(plan);
        }
        if plan.restarts == Restarts::Failovers {
            if self.failovers < FAILOVERS {
                return Err(format!("only {} failovers", self.failovers));
            }
            if self.acquired_during_minority_faults == 0 {
                return Err("no acquisitions while a group failed over".into());
            }
            return Ok(());
        }
        if self.majority_outages == 0 || self.resumed_after_recovery.is_none() {
            return Err("locking did not resume after the majority outage".into());
        }
        if plan.restarts == Restarts::ClockSteps && self.clock_steps == 0 {
            return Err("no clock steps were injected".into());
        }
        if plan.restarts == Restarts::Partitions {
            if self.partitions.contains(&0) {
                return Err(format!(
                    "not every kind of partition: {:?}",
                    self.partitions
                ));
            }
            return match self.acquired_during_minority_faults {
                0 => Err("no acquisitions during the partitions".into()),
                _ => Ok(()),
            };
        }
        if plan.restarts == Restarts::DataLoss && self.data_losses.contains(&0) {
            return Err(format!(
                "not every kind of data loss: {:?}",
                self.data_losses
            ));
        }
        let kills_expected = !matches!(plan.restarts, Restarts::ClockSteps | Restarts::DataLoss);
        if self.freezes == 0 || (self.kills == 0 && kills_expected) {
            return Err("no minority faults were injected".into());
        }
        if self.acquired_during_minority_faults == 0 {
            return Err("no acquisitions while a minority was faulty".into());
        }
        Ok(())
    }
}

impl Report {
    /// What only the run with every fault must show besides the common
    /// properties: its outage and recovery, every kind of fault, every
    /// primitive acquired.
    fn check_mixed(&self, plan: &Plan) -> Result<(), String> {
        if plan.episodes_per_kind == 0 {
            return Ok(());
        }
        if self.majority_outages == 0 || self.resumed_after_recovery.is_none() {
            return Err("locking did not resume after the majority outage".into());
        }
        if self.mixed_faults.contains(&0) {
            return Err(format!("not every kind of fault: {:?}", self.mixed_faults));
        }
        if let Some(never) = mixed_worker::Primitive::ALL
            .iter()
            .find(|p| self.primitives[**p as usize][0] == 0)
        {
            return Err(format!("no {} were acquired", never.name()));
        }
        Ok(())
    }
}

type AnyError = Box<dyn std::error::Error + Send + Sync>;

/// The worker process: `--chaos-worker CHECKER_URL NODE_URL...`. Locks until
/// the checker's `stop` key is set, then prints its tally.
pub async fn worker(checker: &str, nodes: &[String]) -> Result<(), AnyError> {
    if std::env::var_os("CHAOS_DEBUG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .try_init();
    }
    let checker = redis::Client::open(checker)?
        .get_multiplexed_async_connection()
        .await?;
    type Settings = (
        Option<i64>,
        Option<u64>,
        Option<usize>,
        Option<u64>,
        Option<i64>,
        Option<i64>,
    );
    let (fencing, hold_us, tasks, patience_ms, unprotected, hold_on_signal): Settings =
        redis::pipe()
            .get("chaos:fencing")
            .get("chaos:hold-us")
            .get("chaos:tasks")
            .get("chaos:patience-ms")
            .get("chaos:unprotected")
            .get("chaos:hold-on-signal")
            .query_async(&mut checker.clone())
            .await?;
    let ttl_ms: Option<u64> = checker.clone().get("chaos:ttl-ms").await?;
    let ttl = ttl_ms.map_or(TTL, Duration::from_millis);
    let hold = Hold {
        base: Duration::from_micros(hold_us.unwrap_or(0)),
        on_signal: hold_on_signal.is_some(),
        ttl,
    };
    // The grace covers the TTL, the longest any worker uses.
    let grace = if unprotected.is_some() {
        Duration::ZERO
    } else {
        ttl
    };
    let mixed: Option<i64> = checker.clone().get("chaos:mixed").await?;
    // In the run with every fault, every other worker process polls (see
    // `mixed_worker.rs`).
    let polling = match mixed {
        Some(_) => {
            checker
                .clone()
                .incr::<_, _, i64>("chaos:workers-started", 1)
                .await?
                % 2
                == 0
        }
        None => false,
    };
    let redlock = Redlock::builder(nodes)
        .queueing(!polling)
        .restart_grace(grace)
        .clock_tolerance(if unprotected.is_some() {
            Duration::ZERO
        } else {
            quorlock::RedlockBuilder::DEFAULT_CLOCK_TOLERANCE
        })
        .fencing(fencing.is_some())
        .node_timeout(NODE_TIMEOUT)
        .acquire_timeout(patience_ms.map_or(ACQUIRE_TIMEOUT, Duration::from_millis))
        .retry_delay(Duration::from_millis(10))
        .retry_jitter(Duration::from_millis(10))
        .build()?;
    let patience = patience_ms.map_or(ACQUIRE_TIMEOUT, Duration::from_millis);
    let tasks: Vec<_> = (0..tasks.unwrap_or(TASKS_PER_WORKER))
        .map(|_| {
            let (redlock, checker) = (redlock.clone(), checker.clone());
            tokio::spawn(async move {
                if mixed.is_some() {
                    mixed_worker::task(redlock, checker, hold, patience, polling).await
                } else {
                    let tally = worker_task(redlock, checker, hold).await?;
                    Ok((tally, mixed_worker::Tallies::default()))
                }
            })
        })
        .collect();
    let mut tally = Tally::default();
    let mut tallies = mixed_worker::Tallies::default();
    for task in tasks {
        let (one, by_primitive) = task.await??;
        tally.add(&one);
        for (sum, one) in tallies
            .iter_mut()
            .flatten()
            .zip(by_primitive.iter().flatten())
        {
            *sum += one;
        }
    }
    redlock.flush().await;
    println!(
        "chaos-tally {} {} {} {} {} {} {}",
        tally.acquisitions,
        tally.overlaps,
        tally.overstays,
        tally.failed,
        tally.granted_during_outage,
        tally.longest_failed.as_micros(),
        tally.fencing_violations
    );
    if mixed.is_some() {
        let fields: Vec<String> = tallies.iter().flatten().map(u64::to_string).collect();
        println!("chaos-primitives {}", fields.join(" "));
    }
    Ok(())
}

/// How long a worker's critical sections last.
#[derive(Debug, Clone, Copy)]
struct Hold {
    base: Duration,
    /// Also while the injector's `chaos:hold-on` is set.
    on_signal: bool,
    /// The TTL of each lock.
    ttl: Duration,
}

impl Hold {
    /// The critical section's hold: its base, then, while the injector's
    /// `chaos:hold-on` is set, on across an injected fault within the
    /// validity of `guard` (even when `lost` told of a changed server: work
    /// under way may not stop at once, which the nodes must cover).
    async fn inside(
        &self,
        checker: &mut redis::aio::MultiplexedConnection,
        guard: &quorlock::LockGuard,
    ) -> Result<(), AnyError> {
        if !self.base.is_zero() {
            tokio::time::sleep(self.base).await;
        }
        while self.on_signal
            && Instant::now() + HOLD_MARGIN < guard.valid_until()
            && checker
                .get::<_, Option<i64>>("chaos:hold-on")
                .await?
                .is_some()
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    }
}

/// A critical section held across a restart ends this long before its
/// validity does: an overlap must be one of two valid holders.
const HOLD_MARGIN: Duration = Duration::from_millis(100);

/// How many failovers a failover run makes at least.
pub const FAILOVERS: u64 = 4;

/// The tasks that lock in each worker process.
pub const TASKS_PER_WORKER: usize = 3;

/// What one task of a worker saw.
#[derive(Default)]
struct Tally {
    acquisitions: u64,
    overlaps: u64,
    overstays: u64,
    failed: u64,
    granted_during_outage: u64,
    longest_failed: Duration,
    fencing_violations: u64,
}

impl Tally {
    /// Adds `other`'s counts to this one.
    fn add(&mut self, other: &Tally) {
        self.acquisitions += other.acquisitions;
        self.overlaps += other.overlaps;
        self.overstays += other.overstays;
        self.failed += other.failed;
        self.granted_during_outage += other.granted_during_outage;
        self.longest_failed = self.longest_failed.max(other.longest_failed);
        self.fencing_violations += other.fencing_violations;
    }
}

/// One task of a worker: locks until the checker's `stop` key is set.
async fn worker_task(
    redlock: Redlock,
    mut checker: redis::aio::MultiplexedConnection,
    hold: Hold,
) -> Result<Tally, AnyError> {
    let mut tally = Tally::default();
    // Inside the critical section: the token must exceed the last holder's.
    let fence_check = redis::Script::new(mixed_worker::FENCE_CHECK);
    loop {
        let Some(outage) = go_on(&mut checker).await? else {
            break;
        };
        let started = Instant::now();
        match redlock.lock(RESOURCE, hold.ttl).await {
            Ok(guard) => {
                // The outage flag is set after the majority went down and
                // cleared before it comes back: set both before and after the
                // call, the whole call fell inside the outage.
                let still_out: Option<i64> = checker.get("chaos:outage").await?;
                if outage && still_out.is_some() {
                    tally.granted_during_outage += 1;
                }
                let holder = checker::holder_id();
                let valid_until = checker::now_us()
                    + u64::try_from(guard.remaining().as_micros()).unwrap_or(u64::MAX);
                let entry = checker::enter(&mut checker, &holder, valid_until).await?;
                tally.overlaps += entry.overlaps;
                tally.overstays += entry.overstays + entry.late;
                if entry.overlaps > 0 && std::env::var_os("CHAOS_DEBUG").is_some() {
                    let status = redlock.status(RESOURCE).await?;
                    tracing::error!(
                        "overlap: worker {} entered with {:?} of validity left\n{status}",
                        std::process::id(),
                        guard.remaining()
                    );
                }
                if let Some(token) = guard.fencing_token() {
                    let increased: i64 = fence_check
                        .key("chaos:last-token")
                        .arg(token)
                        .invoke_async(&mut checker)
                        .await?;
                    if increased != 1 {
                        tally.fencing_violations += 1;
                    }
                }
                hold.inside(&mut checker, &guard).await?;
                checker::leave(&mut checker, &holder).await?;
                let _: i64 = checker.incr("chaos:acquired", 1).await?;
                tally.acquisitions += 1;
                let _ = guard.unlock().await;
            }
            Err(_) => {
                tally.failed += 1;
                tally.longest_failed = tally.longest_failed.max(started.elapsed());
            }
        }
    }
    Ok(tally)
}

/// Whether a worker's task goes on (`None` once the injector set
/// `chaos:stop`), and whether a majority outage is under way now.
async fn go_on(checker: &mut redis::aio::MultiplexedConnection) -> Result<Option<bool>, AnyError> {
    let (stop, outage): (Option<i64>, Option<i64>) = redis::pipe()
        .get("chaos:stop")
        .get("chaos:outage")
        .query_async(checker)
        .await?;
    Ok(stop.is_none().then_some(outage.is_some()))
}

/// Runs the coordinator: servers, workers started from `exe` with
/// `worker_args` before the worker's own arguments, and the fault injector.
pub async fn run(
    plan: Plan,
    exe: &std::path::Path,
    worker_args: &[&str],
) -> Result<Report, AnyError> {
    match plan.restarts {
        Restarts::Failovers => return failovers::run(plan, exe, worker_args).await,
        Restarts::Partitions => return partitions::run(plan, exe, worker_args).await,
        Restarts::Mixed => return mixed::run(plan, exe, worker_args).await,
        _ => {}
    }
    let (mut nodes, clocks): (Vec<RedisServer>, Vec<Clock>) = match plan.restarts {
        Restarts::ClockSteps => (0..5).map(|_| ClockServer::start().into_parts()).unzip(),
        Restarts::DataLoss => (
            (0..5)
                .map(|_| RedisServer::start_with(&data_loss::DURABLE))
                .collect(),
            Vec::new(),
        ),
        _ => ((0..5).map(|_| RedisServer::start()).collect(), Vec::new()),
    };
    // The empty server the data-loss faults resync from.
    let empty = RedisServer::start();
    let checker_server = RedisServer::start();
    let mut checker = configure(&checker_server, &plan).await?;
    let node_urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let workers = start_workers(&plan, exe, worker_args, &checker_server, &node_urls)?;
    let mut report = Report::default();
    let started = Instant::now();
    let mut rng = rand::rng();
    let acquired = |checker: &mut redis::aio::MultiplexedConnection| {
        let mut checker = checker.clone();
        async move {
            checker
                .get::<_, Option<u64>>("chaos:acquired")
                .await
                .map(Option::unwrap_or_default)
        }
    };
    let outage_at = plan.acquisitions / 2;
    let mut outage_done = false;
    let mut minority_faults: u32 = 0;
    let mut result = Ok(());
    // The run does not end before its majority outage: a fast run (hundreds
    // of waiters, a release build) can pass its acquisitions between two
    // minority faults.
    while !outage_done || acquired(&mut checker).await? < plan.acquisitions {
        if started.elapsed() > plan.limit {
            result = Err(format!("the run passed its limit of {:?}", plan.limit));
            break;
        }
        if !outage_done && acquired(&mut checker).await? >= outage_at {
            // Majority outage: three nodes killed; every lock must fail.
            for node in &mut nodes[..3] {
                node.kill();
            }
            let _: () = checker.set("chaos:outage", 1).await?;
            tokio::time::sleep(Duration::from_secs(2)).await;
            let _: () = checker.del("chaos:outage").await?;
            let before = acquired(&mut checker).await?;
            // Down for 2 s > TTL: a delayed restart.
            for node in &mut nodes[..3] {
                node.restart();
            }
            let recovered = Instant::now();
            while acquired(&mut checker).await? == before
                && recovered.elapsed() < Duration::from_secs(30)
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if acquired(&mut checker).await? > before {
                report.resumed_after_recovery = Some(recovered.elapsed());
            }
            report.majority_outages += 1;
            outage_done = true;
            continue;
        }
        if plan.restarts == Restarts::ClockSteps {
            step_a_clock(&mut nodes, &clocks, &mut checker, &mut report).await?;
            continue;
        }
        if plan.restarts == Restarts::DataLoss {
            data_loss::lose_data(&mut nodes, &empty, &mut checker, &mut report).await?;
            continue;
        }
        if plan.restarts == Restarts::Immediate {
            // The hazard: under a bare quorum that includes node r, r
            // killed and restarted empty at once.
            let hazard = BareQuorum::run(&mut nodes, &mut checker, &mut report, |nodes, r| {
                nodes[r].restart()
            })
            .await?;
            report.kills += 1;
            tokio::time::sleep(hazard.after / 2).await;
            hazard.end(&mut checker, &mut report).await?;
            continue;
        }
        // A minority fault: one or two nodes, frozen or killed.
        let count = rng.random_range(1..=2);
        let first = rng.random_range(0..5);
        let victims: Vec<usize> = (0..count).map(|i| (first + i) % 5).collect();
        // Freezes and kills take turns, so that every run has both (drawn
        // at random, a short run could get only one kind).
        let freeze = minority_faults.is_multiple_of(2);
        minority_faults += 1;
        for &v in &victims {
            if freeze {
                nodes[v].pause();
            } else {
                nodes[v].kill();
            }
        }
        let before = acquired(&mut checker).await?;
        if freeze {
            report.freezes += victims.len() as u64;
            tokio::time::sleep(Duration::from_millis(rng.random_range(200..800))).await;
        } else {
            report.kills += victims.len() as u64;
            // Delayed restart: down for longer than the TTL.
            tokio::time::sleep(TTL + Duration::from_millis(rng.random_range(100..500))).await;
        }
        report.acquired_during_minority_faults += acquired(&mut checker).await? - before;
        for &v in &victims {
            if freeze {
                nodes[v].resume();
            } else {
                nodes[v].restart();
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..400))).await;
    }
    collect(&mut checker, workers, &mut report).await?;
    report.elapsed = started.elapsed();
    result?;
    Ok(report)
}

/// A hazard's frame under a bare quorum: nodes f1 and f2 frozen (so
/// holders hold a bare quorum of the other three), then, while the holder
/// of the moment stays in its critical section, `fault` done to node `r`,
/// one of those three; f1 and f2 thawed right after; the holder let go
/// 400 ms later.
pub(super) struct BareQuorum {
    /// The acquisitions before the fault.
    pub(super) before: u64,
    /// A random pause, 100 to 300 ms, for the caller's wait after it.
    pub(super) after: Duration,
}

impl BareQuorum {
    /// Runs the frame (see [`BareQuorum`]) with `fault`, given the nodes
    /// and `r`.
    pub(super) async fn run(
        nodes: &mut [RedisServer],
        checker: &mut redis::aio::MultiplexedConnection,
        report: &mut Report,
        fault: impl FnOnce(&mut [RedisServer], usize),
    ) -> Result<BareQuorum, AnyError> {
        let (first, pause_ms, after_ms) = {
            let mut rng = rand::rng();
            (
                rng.random_range(0..5),
                rng.random_range(100..300),
                rng.random_range(100..300),
            )
        };
        let (r, f1, f2) = (first, (first + 1) % 5, (first + 2) % 5);
        nodes[f1].pause();
        nodes[f2].pause();
        let before = acquired_so_far(checker).await?;
        tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        // The holder of the moment stays in its critical section.
        let _: () = checker.set("chaos:hold-on", 1).await?;
        tokio::time::sleep(Duration::from_millis(10)).await;
        fault(nodes, r);
        nodes[f1].resume();
        nodes[f2].resume();
        report.freezes += 2;
        tokio::time::sleep(Duration::from_millis(400)).await;
        let _: () = checker.del("chaos:hold-on").await?;
        Ok(BareQuorum {
            before,
            after: Duration::from_millis(after_ms),
        })
    }

    /// Counts the acquisitions since the fault as made during it, then
    /// waits the grace (the TTL) out before the next fault, so that a
    /// quorum of counted nodes remains.
    pub(super) async fn end(
        self,
        checker: &mut redis::aio::MultiplexedConnection,
        report: &mut Report,
    ) -> Result<(), AnyError> {
        report.acquired_during_minority_faults += acquired_so_far(checker).await? - self.before;
        tokio::time::sleep(TTL + self.after).await;
        Ok(())
    }
}

/// The acquisitions the workers have counted on the checker.
async fn acquired_so_far(checker: &mut redis::aio::MultiplexedConnection) -> Result<u64, AnyError> {
    let acquired: Option<u64> = checker.get("chaos:acquired").await?;
    Ok(acquired.unwrap_or_default())
}

/// The clock-step hazard (see the module docs): under a bare quorum, node
/// r's clock stepped 30 s forward while the holder of the moment stays
/// inside; r's clock set right 3 s later (every client has read it by
/// then).
async fn step_a_clock(
    nodes: &mut [RedisServer],
    clocks: &[Clock],
    checker: &mut redis::aio::MultiplexedConnection,
    report: &mut Report,
) -> Result<(), AnyError> {
    let mut stepped = None;
    let hazard = BareQuorum::run(nodes, checker, report, |_, r| {
        clocks[r].set_offset(30_000);
        stepped = Some(clocks[r].clone());
    })
    .await?;
    report.clock_steps += 1;
    tokio::time::sleep(Duration::from_secs(3)).await;
    if let Some(clock) = stepped {
        tokio::task::spawn_blocking(move || clock.set_offset(0)).await?;
    }
    hazard.end(checker, report).await
}

/// Connects to the checker and writes `plan`'s settings there, where the
/// workers read them.
async fn configure(
    checker_server: &RedisServer,
    plan: &Plan,
) -> Result<redis::aio::MultiplexedConnection, AnyError> {
    let mut checker = redis::Client::open(checker_server.url())?
        .get_multiplexed_async_connection()
        .await?;
    let micros = |duration: Duration| u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
    let millis = |duration: Duration| u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    let mut pipe = redis::pipe();
    pipe.set("chaos:hold-us", micros(plan.hold))
        .set("chaos:tasks", plan.tasks)
        .set("chaos:patience-ms", millis(plan.patience))
        .set("chaos:ttl-ms", millis(plan.ttl));
    for (on, key) in [
        (plan.fencing, "chaos:fencing"),
        (!plan.protected, "chaos:unprotected"),
        (plan.hold_on_signal, "chaos:hold-on-signal"),
        (plan.restarts == Restarts::Mixed, "chaos:mixed"),
    ] {
        if on {
            pipe.set(key, 1);
        }
    }
    let _: () = pipe.query_async(&mut checker).await?;
    Ok(checker)
}

/// Starts the worker processes: `exe worker_args CHECKER_URL NODE_URL...`.
fn start_workers(
    plan: &Plan,
    exe: &std::path::Path,
    worker_args: &[&str],
    checker: &RedisServer,
    node_urls: &[String],
) -> Result<Vec<Child>, AnyError> {
    start_workers_with(plan, worker_args, checker, node_urls, |_| Command::new(exe))
}

/// [`start_workers`], each worker's command (`exe`, run where it should
/// be) made by `command` from its number.
fn start_workers_with(
    plan: &Plan,
    worker_args: &[&str],
    checker: &RedisServer,
    node_urls: &[String],
    mut command: impl FnMut(usize) -> Command,
) -> Result<Vec<Child>, AnyError> {
    let mut workers: Vec<Child> = Vec::new();
    for number in 0..plan.workers {
        workers.push(
            command(number)
                .args(worker_args)
                .arg(checker.url())
                .args(node_urls)
                .stdout(Stdio::piped())
                .spawn()?,
        );
    }
    Ok(workers)
}

/// Stops the workers and adds their tallies to `report`.
async fn collect(
    checker: &mut redis::aio::MultiplexedConnection,
    workers: Vec<Child>,
    report: &mut Report,
) -> Result<(), AnyError> {
    let _: () = checker.set("chaos:stop", 1).await?;
    // Wait for every worker before judging any, so none is left behind.
    let mut outputs = Vec::new();
    for worker in workers {
        outputs.push(tokio::task::spawn_blocking(move || worker.wait_with_output()).await?);
    }
    for output in outputs {
        let output = output?;
        let text = String::from_utf8_lossy(&output.stdout);
        let line = text
            .lines()
            .find_map(|line| line.strip_prefix("chaos-tally "))
            .ok_or_else(|| format!("a worker printed no tally ({})", output.status))?;
        let fields: Vec<u64> = line
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        let [
            acquisitions,
            overlaps,
            overstays,
            failed,
            granted,
            longest_us,
            fencing,
        ] = fields[..]
        else {
            return Err(format!("bad tally {line:?}").into());
        };
        if let Some(line) = text
            .lines()
            .find_map(|line| line.strip_prefix("chaos-primitives "))
        {
            let fields = line
                .split_whitespace()
                .filter_map(|f| f.parse::<u64>().ok());
            for (sum, one) in report.primitives.iter_mut().flatten().zip(fields) {
                *sum += one;
            }
        }
        report.acquisitions += acquisitions;
        report.overlaps += overlaps;
        report.overstays += overstays;
        report.failed_calls += failed;
        report.granted_during_outage += granted;
        report.fencing_violations += fencing;
        report.longest_failed_call = report
            .longest_failed_call
            .max(Duration::from_micros(longest_us));
    }
    Ok(())
}

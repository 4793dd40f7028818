//! The chaos run with every fault: five nodes in a test network
//! (`support/netns.rs`), each node, worker process, the checker and an
//! empty server a host of its own. Nodes 0 and 1 run `appendonly yes` with
//! `appendfsync always` (durable, as their operator believes), nodes 2 and
//! 3 without persistence, and node 4 is a Sentinel group (a primary, a
//! replica and three Sentinels, each in a host, named by its
//! `redis+sentinel://` URL); nodes 0-3 run behind the clock shim. Each
//! worker process runs hundreds of tasks that take plain locks, sets,
//! read and write holds, semaphore permits and a leadership
//! (`mixed_worker.rs`), all checked on the checker.
//!
//! The injector draws faults at random (in rounds of every kind, each in
//! a shuffled order, until each came the plan's number of times), one
//! episode at a time, each with a chance of one in three of a lossy link
//! (5-20 %) to one more node on top (lossy to every host but the test
//! process, whose restarts and waits are the control plane; a lost SYN
//! of its own would stall a wait for seconds):
//! - **freezes** (SIGSTOP) of one or two nodes, for 0.2-0.8 s;
//! - **kills** of one or two nodes, restarted after more than the TTL
//!   (empty, or from their append-only file where durable);
//! - under a bare quorum (two other nodes frozen, the holders of the moment
//!   inside across the fault, as `BareQuorum` in `mod.rs` does it): an
//!   **immediate empty restart** of a node without persistence, an **empty
//!   restart of a durable node**, a **clock step** of 30 s forward (set
//!   right once the grace after it is over, 3.5 s or more later), a
//!   **`FLUSHALL`**, an **in-place resync** from the
//!   empty server, and a **lossy failover** of the Sentinel group (its
//!   replica's link cut first, its primary killed and the replica
//!   promoted);
//! - **partitions** (`partitions.rs`): the holder of the moment cut from
//!   three nodes for its validity, one or two nodes cut off, asymmetric
//!   reach, lossy links to one to three nodes;
//!
//! and after each round of twelve episodes, a majority cut off from every
//! worker for 2 s, in which no lock may be granted. The acquisitions made
//! during the episodes are the run's **faulted acquisitions**; the run ends
//! when they reach the plan's number and every kind of fault (and the
//! outage) has come the plan's `episodes_per_kind` times. With 0, the run
//! is the baseline: the same load without a fault, until the workers made
//! the plan's number of acquisitions. After each heal, the time until the
//! next acquisition is the unavailability the heal left.

use std::time::{Duration, Instant};

use rand::RngExt;
use rand::seq::SliceRandom;
use redis::AsyncCommands;

use super::data_loss::DURABLE;
use super::partitions::Partition::{Asymmetric, HolderCut, Loss, MinorityCut};
use super::partitions::{self, Network, unavailable_after_heal};
use super::{AnyError, Plan, Report, acquired_so_far, collect, configure, start_workers_with};
use crate::support::RedisServer;
use crate::support::clock::{Clock, ClockServer};
use crate::support::netns::{Host, Net};
use crate::support::sentinel::Sentinels;

/// The kinds of fault (see the module docs), in the order of their counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Freeze,
    DelayedRestart,
    ImmediateRestart,
    DurableEmptied,
    ClockStep,
    Flushall,
    Resync,
    Failover,
    HolderCut,
    MinorityCut,
    Asymmetric,
    Loss,
}

impl Fault {
    pub const ALL: [Fault; 12] = [
        Fault::Freeze,
        Fault::DelayedRestart,
        Fault::ImmediateRestart,
        Fault::DurableEmptied,
        Fault::ClockStep,
        Fault::Flushall,
        Fault::Resync,
        Fault::Failover,
        Fault::HolderCut,
        Fault::MinorityCut,
        Fault::Asymmetric,
        Fault::Loss,
    ];

    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Freeze => "freezes",
            Fault::DelayedRestart => "kills, restarted after the TTL",
            Fault::ImmediateRestart => "immediate empty restarts",
            Fault::DurableEmptied => "empty restarts of durable nodes",
            Fault::ClockStep => "clock steps of 30 s",
            Fault::Flushall => "FLUSHALLs",
            Fault::Resync => "in-place resyncs",
            Fault::Failover => "lossy Sentinel failovers",
            Fault::HolderCut => "holders cut from a majority",
            Fault::MinorityCut => "minorities cut off",
            Fault::Asymmetric => "asymmetric splits",
            Fault::Loss => "lossy links",
        }
    }
}

/// The durable nodes, the ones without persistence, and the Sentinel
/// group's.
const DURABLE_NODES: [usize; 2] = [0, 1];
const VOLATILE_NODES: [usize; 2] = [2, 3];
const GROUP: usize = 4;

/// Node 4: a Sentinel group whose hosts stay with their servers.
struct Group {
    primary: (Host, RedisServer),
    replica: (Host, RedisServer),
    sentinels: Sentinels,
}

/// The run's network and servers.
struct World {
    net: Net,
    /// Nodes 0-3, with their hosts and clocks.
    plain: Vec<(Host, RedisServer, Clock)>,
    group: Group,
    /// The server the resyncs replicate from.
    empty: RedisServer,
    workers: Vec<Host>,
}

impl World {
    fn start(workers: usize) -> World {
        let net = Net::new();
        let plain = (0..4)
            .map(|n| {
                let host = net.host();
                let args: &[&str] = if DURABLE_NODES.contains(&n) {
                    &DURABLE
                } else {
                    &[]
                };
                let (server, clock) = ClockServer::start_in(&host, args).into_parts();
                (host, server, clock)
            })
            .collect();
        let (primary_host, replica_host) = (net.host(), net.host());
        let primary = RedisServer::start_in(&primary_host, &[]);
        let replica = RedisServer::start_replica_in(&replica_host, &primary);
        let sentinel_hosts: Vec<Host> = (0..3).map(|_| net.host()).collect();
        // Down only after 60 s: freezes and cuts never fail it over.
        let sentinels = Sentinels::start_in(&sentinel_hosts, &primary, 1, Duration::from_secs(60));
        let empty = RedisServer::start_in(&net.host(), &[]);
        let workers = (0..workers).map(|_| net.host()).collect();
        World {
            net,
            plain,
            group: Group {
                primary: (primary_host, primary),
                replica: (replica_host, replica),
                sentinels,
            },
            empty,
            workers,
        }
    }

    fn urls(&self) -> Vec<String> {
        let mut urls: Vec<String> = self.plain.iter().map(|(_, s, _)| s.url()).collect();
        urls.push(self.group.sentinels.url(None));
        urls
    }

    /// Node `n`'s server (the group's primary for node 4).
    fn server(&mut self, n: usize) -> &mut RedisServer {
        match n {
            GROUP => &mut self.group.primary.1,
            n => &mut self.plain[n].1,
        }
    }

    /// Node `n`'s host (the group primary's for node 4).
    fn host(&self, n: usize) -> &Host {
        match n {
            GROUP => &self.group.primary.0,
            n => &self.plain[n].0,
        }
    }
}

impl Network for World {
    fn net(&self) -> &Net {
        &self.net
    }

    fn node(&self, n: usize) -> &Host {
        self.host(n)
    }

    fn workers(&self) -> &[Host] {
        &self.workers
    }
}

/// Runs the plan with every fault (see the module docs).
pub async fn run(
    plan: Plan,
    exe: &std::path::Path,
    worker_args: &[&str],
) -> Result<Report, AnyError> {
    let mut world = tokio::task::block_in_place(|| World::start(plan.workers));
    let checker_server = RedisServer::start_in(&world.net.host(), &[]);
    let mut checker = configure(&checker_server, &plan).await?;
    let urls = world.urls();
    let workers = start_workers_with(&plan, worker_args, &checker_server, &urls, |w| {
        world.workers[w].command(exe)
    })?;
    let pids: Vec<u32> = workers.iter().map(std::process::Child::id).collect();
    let mut report = Report::default();
    let started = Instant::now();
    let mut result = Ok(());
    let mut order = Vec::new();
    let per_kind = plan.episodes_per_kind;
    let episodes = |report: &Report| report.mixed_faults.iter().sum::<u64>();
    // The baseline: the same load without a fault.
    while per_kind == 0 && acquired_so_far(&mut checker).await? < plan.acquisitions {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    while per_kind > 0 && report.acquired_during_minority_faults < plan.acquisitions
        || report.mixed_faults.iter().any(|&n| n < per_kind)
        || report.majority_outages < per_kind
    {
        if started.elapsed() > plan.limit {
            result = Err(format!("the run passed its limit of {:?}", plan.limit));
            break;
        }
        let kinds = Fault::ALL.len() as u64;
        if episodes(&report) >= kinds * (report.majority_outages + 1) {
            majority_outage(&world, &mut checker, &mut report).await?;
            continue;
        }
        let fault = next_fault(&mut order, &report, per_kind);
        let before = acquired_so_far(&mut checker).await?;
        let (overlaps_before, failed_before) = so_far(&mut checker).await?;
        if rand::rng().random_range(0..3) == 0 {
            let (n, percent) = (
                rand::rng().random_range(0..5),
                rand::rng().random_range(5..=20),
            );
            world.net.loss_beside_control(world.host(n), percent);
            report.overlaid_losses += 1;
        }
        episode(fault, &mut world, &pids, &plan, &mut checker).await?;
        report.mixed_faults[fault as usize] += 1;
        world.net.heal();
        report.acquired_during_minority_faults += acquired_so_far(&mut checker).await? - before;
        unavailable_after_heal(&mut checker, &mut report).await?;
        let (overlaps, failed) = so_far(&mut checker).await?;
        report.overlaps_by_fault[fault as usize] += overlaps - overlaps_before;
        report.failed_by_fault[fault as usize] += failed - failed_before;
    }
    collect(&mut checker, workers, &mut report).await?;
    report.elapsed = started.elapsed();
    result?;
    Ok(report)
}

/// The overlaps the workers have found so far, and their failed calls.
async fn so_far(checker: &mut redis::aio::MultiplexedConnection) -> Result<(u64, u64), AnyError> {
    let (overlaps, failed): (Option<u64>, Option<u64>) = redis::pipe()
        .get("chaos:overlaps")
        .get("chaos:failed")
        .query_async(checker)
        .await?;
    Ok((overlaps.unwrap_or_default(), failed.unwrap_or_default()))
}

/// The next fault: rounds of every kind not yet injected `per_kind`
/// times, each round in a shuffled order, then any kind at random.
fn next_fault(order: &mut Vec<Fault>, report: &Report, per_kind: u64) -> Fault {
    let mut rng = rand::rng();
    if order.is_empty() {
        *order = (Fault::ALL.iter())
            .filter(|fault| report.mixed_faults[**fault as usize] < per_kind)
            .copied()
            .collect();
        order.shuffle(&mut rng);
    }
    order
        .pop()
        .unwrap_or_else(|| Fault::ALL[rng.random_range(0..Fault::ALL.len())])
}

/// One episode of `fault`, left in place for its time; the caller heals
/// the network.
async fn episode(
    fault: Fault,
    world: &mut World,
    pids: &[u32],
    plan: &Plan,
    checker: &mut redis::aio::MultiplexedConnection,
) -> Result<(), AnyError> {
    let (order, lasts, count) = {
        let mut rng = rand::rng();
        let mut order: Vec<usize> = (0..5).collect();
        order.shuffle(&mut rng);
        let lasts = Duration::from_millis(rng.random_range(200..800));
        (order, lasts, rng.random_range(1..=2))
    };
    match fault {
        Fault::Freeze => {
            for &n in &order[..count] {
                world.server(n).pause();
            }
            tokio::time::sleep(lasts).await;
            for &n in &order[..count] {
                world.server(n).resume();
            }
        }
        Fault::DelayedRestart => {
            block(|| order[..count].iter().for_each(|&n| world.server(n).kill()));
            tokio::time::sleep(plan.ttl + lasts).await;
            block(|| {
                order[..count]
                    .iter()
                    .for_each(|&n| world.server(n).restart())
            });
        }
        Fault::ImmediateRestart | Fault::DurableEmptied => {
            let nodes = match fault {
                Fault::ImmediateRestart => VOLATILE_NODES,
                _ => DURABLE_NODES,
            };
            let r = nodes[rand::rng().random_range(0..2)];
            under_bare_quorum(world, r, checker, plan, |world| {
                world.server(r).restart_empty()
            })
            .await?;
        }
        Fault::ClockStep => step_a_clock(world, checker, plan).await?,
        Fault::Flushall => {
            let r = order[0];
            under_bare_quorum(world, r, checker, plan, |world| world.server(r).flushall()).await?;
        }
        Fault::Resync => {
            let r = VOLATILE_NODES[rand::rng().random_range(0..2)];
            under_bare_quorum(world, r, checker, plan, |world| {
                world.plain[r].1.resync_from(&world.empty)
            })
            .await?;
        }
        Fault::Failover => fail_over(world, checker, plan).await?,
        Fault::HolderCut => partitions::fault(HolderCut, world, pids, plan, checker).await?,
        Fault::MinorityCut => partitions::fault(MinorityCut, world, pids, plan, checker).await?,
        Fault::Asymmetric => partitions::fault(Asymmetric, world, pids, plan, checker).await?,
        Fault::Loss => partitions::fault(Loss, world, pids, plan, checker).await?,
    }
    Ok(())
}

/// Runs `f`, which blocks (a server's start, a wait on its state), off the
/// runtime's timers.
fn block<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// The hazard's frame (`BareQuorum` in `mod.rs`) over this run's nodes:
/// two nodes other than `r` frozen, `fault` done to `r` while the holders
/// of the moment stay inside, the two thawed, the grace waited out.
async fn under_bare_quorum(
    world: &mut World,
    r: usize,
    checker: &mut redis::aio::MultiplexedConnection,
    plan: &Plan,
    fault: impl FnOnce(&mut World),
) -> Result<(), AnyError> {
    let (frozen, pause_ms, after_ms) = {
        let mut rng = rand::rng();
        let mut others: Vec<usize> = (0..5).filter(|&n| n != r).collect();
        others.shuffle(&mut rng);
        (
            [others[0], others[1]],
            rng.random_range(100..300),
            rng.random_range(100..300),
        )
    };
    for n in frozen {
        world.server(n).pause();
    }
    tokio::time::sleep(Duration::from_millis(pause_ms)).await;
    let _: () = checker.set("chaos:hold-on", 1).await?;
    tokio::time::sleep(Duration::from_millis(10)).await;
    block(|| {
        fault(world);
        for n in frozen {
            world.server(n).resume();
        }
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    let _: () = checker.del("chaos:hold-on").await?;
    // The grace (the TTL), so that a quorum of counted nodes remains.
    tokio::time::sleep(plan.ttl + Duration::from_millis(after_ms)).await;
    Ok(())
}

/// A clock step of 30 s forward on one of nodes 0-3 under a bare quorum,
/// set right at least 3 s later (every client has read it by then): once
/// the frame's grace is over.
async fn step_a_clock(
    world: &mut World,
    checker: &mut redis::aio::MultiplexedConnection,
    plan: &Plan,
) -> Result<(), AnyError> {
    let r = rand::rng().random_range(0..4);
    let clock = world.plain[r].2.clone();
    let stepped = clock.clone();
    under_bare_quorum(world, r, checker, plan, move |_| stepped.set_offset(30_000)).await?;
    tokio::time::sleep(Duration::from_secs(3).saturating_sub(plan.ttl)).await;
    block(|| clock.set_offset(0));
    Ok(())
}

/// A lossy failover of node 4 under a bare quorum: the replica's link cut
/// (once the Sentinels could promote it), then, with the holders inside,
/// its primary killed and the replica promoted; a new replica joins in the
/// old primary's host.
async fn fail_over(
    world: &mut World,
    checker: &mut redis::aio::MultiplexedConnection,
    plan: &Plan,
) -> Result<(), AnyError> {
    let group = &world.group;
    block(|| {
        group.sentinels.wait_replica(group.replica.1.port());
        group.replica.1.cut_link_from(&group.primary.1);
    });
    let mut promoted = Ok(());
    under_bare_quorum(world, GROUP, checker, plan, |world| {
        promoted = promote(&mut world.group);
    })
    .await?;
    promoted
}

/// Kills the group's primary, has the Sentinels promote the replica, and
/// starts a new replica in the old primary's host.
fn promote(group: &mut Group) -> Result<(), AnyError> {
    group.primary.1.kill();
    group.sentinels.fail_over_to(group.replica.1.port())?;
    group.replica.1.keep_primary_on_restart();
    let host = group.primary.0.clone();
    let replica = RedisServer::start_replica_in(&host, &group.replica.1);
    let old = std::mem::replace(&mut group.replica, (host, replica));
    group.primary = old;
    Ok(())
}

/// Three nodes cut off from every worker for 2 s: no lock may be granted
/// meanwhile (the checker's `chaos:outage`, see the worker).
async fn majority_outage(
    world: &World,
    checker: &mut redis::aio::MultiplexedConnection,
    report: &mut Report,
) -> Result<(), AnyError> {
    let workers: Vec<usize> = (0..world.workers.len()).collect();
    world.cut(&workers, &[0, 2, GROUP]);
    let _: () = checker.set("chaos:outage", 1).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _: () = checker.del("chaos:outage").await?;
    world.net.heal();
    report.majority_outages += 1;
    let healed = Instant::now();
    unavailable_after_heal(checker, report).await?;
    let resumed = report.resumed_after_recovery.unwrap_or_default();
    report.resumed_after_recovery = Some(resumed.max(healed.elapsed()));
    Ok(())
}

/// Prints what only this run reports.
pub fn print(report: &Report) {
    let faults: u64 = report.mixed_faults.iter().sum();
    println!(
        "  faults injected         {faults} episodes, {} of them with a lossy link on top, \
         and {} majority outages of 2 s (\"locking resumed\": the longest wait after one):",
        report.overlaid_losses, report.majority_outages
    );
    println!("    {:<32}episodes / failed calls / overlaps", "");
    for fault in Fault::ALL {
        let n = fault as usize;
        println!(
            "    {:<32}{} / {} / {}",
            fault.name(),
            report.mixed_faults[n],
            report.failed_by_fault[n],
            report.overlaps_by_fault[n]
        );
    }
    println!("  by primitive            acquisitions / overlaps / failed calls");
    for primitive in super::mixed_worker::Primitive::ALL {
        let [acquired, overlaps, failed] = report.primitives[primitive as usize];
        println!(
            "    {:<32}{acquired} / {overlaps} / {failed}",
            primitive.name()
        );
    }
    println!(
        "  faulted acquisitions    {} (made during an episode)",
        report.acquired_during_minority_faults
    );
    println!(
        "  longest unavailability  {:?} after a heal",
        report.longest_unavailable_after_heal
    );
}

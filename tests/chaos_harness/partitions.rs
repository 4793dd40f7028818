//! The chaos run over a network (`support/netns.rs`): every node, every
//! worker process and the checker a host of its own; the faults are cuts
//! that drop packets without a reset, and lossy links. The checker is never
//! cut. In turn:
//! - **a holder cut off**: the holder of the moment (found on the checker)
//!   stays in its critical section, within its validity, while its host is
//!   cut from three of the five nodes; the others contend on all five;
//! - **a minority cut off**: one or two nodes cut from every host;
//! - **asymmetric**: half the workers reach nodes `a, b, c` only, the other
//!   half `c, d, e` only (each side a bare majority, one node shared);
//! - **lossy links**: 5 to 20 % of the packets of one to three nodes
//!   dropped each way;
//!
//! each for 0.3 to 1.5 s (the holder's cut for its validity), then healed;
//! once in the run, a majority cut off from every worker for 2 s, during
//! which no lock may be granted. After each heal, the time until the next
//! acquisition is the unavailability the heal left.

use std::time::{Duration, Instant};

use rand::RngExt;
use rand::seq::SliceRandom;
use redis::AsyncCommands;

use super::{
    AnyError, Plan, Report, acquired_so_far, checker, collect, configure, start_workers_with,
};
use crate::support::RedisServer;
use crate::support::netns::{Host, Net};

/// The kinds of fault, in the order the run takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partition {
    HolderCut,
    MinorityCut,
    Asymmetric,
    Loss,
}

impl Partition {
    const ALL: [Partition; 4] = [
        Partition::HolderCut,
        Partition::MinorityCut,
        Partition::Asymmetric,
        Partition::Loss,
    ];
}

/// The run's network: the nodes', workers' and checker's hosts.
struct Hosts {
    net: Net,
    nodes: Vec<Host>,
    workers: Vec<Host>,
}

/// A network of five nodes and some workers that partitions are made in
/// (this run's, and the run with every fault's, `mixed.rs`).
pub(super) trait Network {
    /// The test network.
    fn net(&self) -> &Net;
    /// Node `n`'s host now.
    fn node(&self, n: usize) -> &Host;
    /// The worker hosts.
    fn workers(&self) -> &[Host];

    /// Cuts each worker host in `workers` from each node in `nodes`.
    fn cut(&self, workers: &[usize], nodes: &[usize]) {
        for &w in workers {
            for &n in nodes {
                self.net().cut(&self.workers()[w], self.node(n));
            }
        }
    }
}

impl Network for Hosts {
    fn net(&self) -> &Net {
        &self.net
    }

    fn node(&self, n: usize) -> &Host {
        &self.nodes[n]
    }

    fn workers(&self) -> &[Host] {
        &self.workers
    }
}

/// Runs the partition plan (see the module docs).
pub async fn run(
    plan: Plan,
    exe: &std::path::Path,
    worker_args: &[&str],
) -> Result<Report, AnyError> {
    let net = Net::new();
    let (node_hosts, nodes) = net.servers(5);
    let checker_server = RedisServer::start_in(&net.host(), &[]);
    let worker_hosts: Vec<Host> = (0..plan.workers).map(|_| net.host()).collect();
    let hosts = Hosts {
        net,
        nodes: node_hosts,
        workers: worker_hosts,
    };
    let mut checker = configure(&checker_server, &plan).await?;
    let node_urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let workers = start_workers_with(&plan, worker_args, &checker_server, &node_urls, |w| {
        hosts.workers[w].command(exe)
    })?;
    let pids: Vec<u32> = workers.iter().map(std::process::Child::id).collect();
    let mut report = Report::default();
    let started = Instant::now();
    let mut result = Ok(());
    let mut turn = 0;
    while report.majority_outages == 0
        || acquired_so_far(&mut checker).await? < plan.acquisitions
        || report.partitions.contains(&0)
    {
        if started.elapsed() > plan.limit {
            result = Err(format!("the run passed its limit of {:?}", plan.limit));
            break;
        }
        if report.majority_outages == 0
            && acquired_so_far(&mut checker).await? >= plan.acquisitions / 2
        {
            majority_outage(&hosts, &mut checker, &mut report).await?;
            continue;
        }
        let kind = Partition::ALL[turn % Partition::ALL.len()];
        turn += 1;
        let before = acquired_so_far(&mut checker).await?;
        fault(kind, &hosts, &pids, &plan, &mut checker).await?;
        report.partitions[kind as usize] += 1;
        report.acquired_during_minority_faults += acquired_so_far(&mut checker).await? - before;
        hosts.net.heal();
        unavailable_after_heal(&mut checker, &mut report).await?;
    }
    collect(&mut checker, workers, &mut report).await?;
    report.elapsed = started.elapsed();
    drop(nodes);
    result?;
    Ok(report)
}

/// One fault of `kind` (see the module docs), left in place for its time;
/// the caller heals it. `pids` are the workers' process ids, in the order
/// of their hosts.
pub(super) async fn fault(
    kind: Partition,
    hosts: &impl Network,
    pids: &[u32],
    plan: &Plan,
    checker: &mut redis::aio::MultiplexedConnection,
) -> Result<(), AnyError> {
    let (mut order, lasts, count, percent) = {
        let mut rng = rand::rng();
        let mut order: Vec<usize> = (0..5).collect();
        order.shuffle(&mut rng);
        (
            order,
            Duration::from_millis(rng.random_range(300..1500)),
            rng.random_range(1..=2),
            rng.random_range(5..=20),
        )
    };
    let net = hosts.net();
    match kind {
        Partition::HolderCut => {
            // The holder of the moment stays inside while cut off.
            let _: () = checker.set("chaos:hold-on", 1).await?;
            tokio::time::sleep(Duration::from_millis(10)).await;
            let holder = holder_of_the_moment(checker, pids)
                .await?
                .unwrap_or(order[0] % pids.len());
            order.truncate(3);
            hosts.cut(&[holder], &order);
            tokio::time::sleep(plan.ttl + Duration::from_millis(200)).await;
            let _: () = checker.del("chaos:hold-on").await?;
        }
        Partition::MinorityCut => {
            for &n in &order[..count] {
                net.isolate(hosts.node(n));
            }
            tokio::time::sleep(lasts).await;
        }
        Partition::Asymmetric => {
            let (even, odd): (Vec<usize>, Vec<usize>) =
                (0..hosts.workers().len()).partition(|w| w % 2 == 0);
            hosts.cut(&even, &order[3..]);
            hosts.cut(&odd, &order[..2]);
            tokio::time::sleep(lasts).await;
        }
        Partition::Loss => {
            for &n in &order[..count + 1] {
                net.loss(hosts.node(n), percent);
            }
            tokio::time::sleep(lasts).await;
        }
    }
    Ok(())
}

/// The worker (its index in `pids`) of a holder inside any critical
/// section now (every set of holders on the checker).
async fn holder_of_the_moment(
    checker: &mut redis::aio::MultiplexedConnection,
    pids: &[u32],
) -> Result<Option<usize>, AnyError> {
    let mut places: Vec<String> = checker.keys(format!("{}:*", checker::INSIDE)).await?;
    places.push(checker::INSIDE.to_owned());
    for place in places {
        let inside: Vec<String> = checker.zrange(&place, 0, -1).await?;
        let found = inside
            .iter()
            .filter_map(|holder| holder.split('.').next()?.parse::<u32>().ok())
            .find_map(|pid| pids.iter().position(|&p| p == pid));
        if found.is_some() {
            return Ok(found);
        }
    }
    Ok(None)
}

/// Three nodes cut off from every worker for 2 s: no lock may be granted
/// meanwhile (the checker's `chaos:outage`, see the worker).
async fn majority_outage(
    hosts: &Hosts,
    checker: &mut redis::aio::MultiplexedConnection,
    report: &mut Report,
) -> Result<(), AnyError> {
    let workers: Vec<usize> = (0..hosts.workers.len()).collect();
    hosts.cut(&workers, &[0, 1, 2]);
    let _: () = checker.set("chaos:outage", 1).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _: () = checker.del("chaos:outage").await?;
    hosts.net.heal();
    report.majority_outages += 1;
    let healed = Instant::now();
    unavailable_after_heal(checker, report).await?;
    report.resumed_after_recovery = Some(healed.elapsed());
    Ok(())
}

/// Waits (up to 30 s) for the next acquisition after a heal, and keeps the
/// longest such wait.
pub(super) async fn unavailable_after_heal(
    checker: &mut redis::aio::MultiplexedConnection,
    report: &mut Report,
) -> Result<(), AnyError> {
    let healed = Instant::now();
    let before = acquired_so_far(checker).await?;
    while acquired_so_far(checker).await? == before && healed.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    report.longest_unavailable_after_heal =
        report.longest_unavailable_after_heal.max(healed.elapsed());
    Ok(())
}

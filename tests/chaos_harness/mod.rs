//! The chaos harness, shared by `tests/chaos.rs` (a short run in the suite)
//! and `examples/chaos.rs` (the full run): worker **processes**, each with
//! [`TASKS_PER_WORKER`] tasks, compete for one
//! resource on 5 nodes while a fault injector freezes, kills and (after at
//! least the TTL) restarts a minority of nodes, and once takes a majority
//! down. Each critical section checks a separate Redis "checker": `INCR` on
//! entry must return 1, `DECR` on exit.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use quorlock::Redlock;
use rand::Rng;
use redis::AsyncCommands;

use crate::support::RedisServer;

pub const RESOURCE: &str = "chaos:resource";
pub const TTL: Duration = Duration::from_secs(1);
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(1);
pub const NODE_TIMEOUT: Duration = Duration::from_millis(50);
/// A call may overrun the acquire timeout by the round in flight.
pub const DEADLINE_SLACK: Duration = Duration::from_millis(300);

/// How big a run is.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub workers: usize,
    /// Locks with fencing tokens, and checks that they strictly increase.
    pub fencing: bool,
    pub acquisitions: u64,
    /// Give up (and fail) after this long.
    pub limit: Duration,
}

/// What a run found.
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub acquisitions: u64,
    pub overlaps: u64,
    pub failed_calls: u64,
    pub longest_failed_call: Duration,
    pub granted_during_outage: u64,
    pub freezes: u64,
    pub kills: u64,
    pub majority_outages: u64,
    /// Acquisitions made while a minority of nodes was frozen or down.
    pub acquired_during_minority_faults: u64,
    /// Fencing tokens not larger than the previous holder's.
    pub fencing_violations: u64,
    pub resumed_after_recovery: Option<Duration>,
    pub elapsed: Duration,
}

impl Report {
    pub fn print(&self, plan: &Plan) {
        println!(
            "chaos: {} worker processes x {TASKS_PER_WORKER} tasks, 5 nodes, {:.1} s",
            plan.workers,
            self.elapsed.as_secs_f64()
        );
        println!("  acquisitions            {}", self.acquisitions);
        println!("  overlaps                {}", self.overlaps);
        println!(
            "  faults injected         {} ({} freezes, {} kills with delayed restart, {} majority outage)",
            self.freezes + self.kills + self.majority_outages,
            self.freezes,
            self.kills,
            self.majority_outages
        );
        println!(
            "  acquired during faults  {} (with 1-2 nodes frozen or down)",
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
            "  longest failed call     {:?} (deadline {ACQUIRE_TIMEOUT:?})",
            self.longest_failed_call
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
        if self.longest_failed_call > ACQUIRE_TIMEOUT + DEADLINE_SLACK {
            return Err(format!("a failed call took {:?}", self.longest_failed_call));
        }
        if self.majority_outages == 0 || self.resumed_after_recovery.is_none() {
            return Err("locking did not resume after the majority outage".into());
        }
        if self.freezes == 0 || self.kills == 0 {
            return Err("no minority faults were injected".into());
        }
        if self.acquired_during_minority_faults == 0 {
            return Err("no acquisitions while a minority was faulty".into());
        }
        Ok(())
    }
}

type AnyError = Box<dyn std::error::Error + Send + Sync>;

/// The worker process: `--chaos-worker CHECKER_URL NODE_URL...`. Locks until
/// the checker's `stop` key is set, then prints its tally.
pub async fn worker(checker: &str, nodes: &[String]) -> Result<(), AnyError> {
    let checker = redis::Client::open(checker)?
        .get_multiplexed_async_connection()
        .await?;
    let fencing: Option<i64> = checker.clone().get("chaos:fencing").await?;
    let redlock = Redlock::builder(nodes)
        .fencing(fencing.is_some())
        .node_timeout(NODE_TIMEOUT)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .retry_delay(Duration::from_millis(10))
        .retry_jitter(Duration::from_millis(10))
        .build()?;
    let tasks: Vec<_> = (0..TASKS_PER_WORKER)
        .map(|_| tokio::spawn(worker_task(redlock.clone(), checker.clone())))
        .collect();
    let mut tally = Tally::default();
    for task in tasks {
        let one = task.await??;
        tally.acquisitions += one.acquisitions;
        tally.overlaps += one.overlaps;
        tally.failed += one.failed;
        tally.granted_during_outage += one.granted_during_outage;
        tally.longest_failed = tally.longest_failed.max(one.longest_failed);
        tally.fencing_violations += one.fencing_violations;
    }
    redlock.flush().await;
    println!(
        "chaos-tally {} {} {} {} {} {}",
        tally.acquisitions,
        tally.overlaps,
        tally.failed,
        tally.granted_during_outage,
        tally.longest_failed.as_micros(),
        tally.fencing_violations
    );
    Ok(())
}

/// The tasks that lock in each worker process.
pub const TASKS_PER_WORKER: usize = 3;

/// What one task of a worker saw.
#[derive(Default)]
struct Tally {
    acquisitions: u64,
    overlaps: u64,
    failed: u64,
    granted_during_outage: u64,
    longest_failed: Duration,
    fencing_violations: u64,
}

/// One task of a worker: locks until the checker's `stop` key is set.
async fn worker_task(
    redlock: Redlock,
    mut checker: redis::aio::MultiplexedConnection,
) -> Result<Tally, AnyError> {
    let mut tally = Tally::default();
    // Inside the critical section: the token must exceed the last holder's.
    let fence_check = redis::Script::new(
        r#"local last = tonumber(redis.call("get", KEYS[1]) or "0")
if tonumber(ARGV[1]) <= last then return 0 end
redis.call("set", KEYS[1], ARGV[1])
return 1"#,
    );
    loop {
        let (stop, outage): (Option<i64>, Option<i64>) = redis::pipe()
            .get("chaos:stop")
            .get("chaos:outage")
            .query_async(&mut checker)
            .await?;
        if stop.is_some() {
            break;
        }
        let started = Instant::now();
        match redlock.lock(RESOURCE, TTL).await {
            Ok(guard) => {
                // The outage flag is set after the majority went down and
                // cleared before it comes back: set both before and after the
                // call, the whole call fell inside the outage.
                let still_out: Option<i64> = checker.get("chaos:outage").await?;
                if outage.is_some() && still_out.is_some() {
                    tally.granted_during_outage += 1;
                }
                let holders: i64 = checker.incr("chaos:holders", 1).await?;
                if holders != 1 {
                    tally.overlaps += 1;
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
                let _: i64 = checker.decr("chaos:holders", 1).await?;
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

/// Runs the coordinator: servers, workers started from `exe` with
/// `worker_args` before the worker's own arguments, and the fault injector.
pub async fn run(
    plan: Plan,
    exe: &std::path::Path,
    worker_args: &[&str],
) -> Result<Report, AnyError> {
    let mut nodes: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let checker_server = RedisServer::start();
    let mut checker = redis::Client::open(checker_server.url())?
        .get_multiplexed_async_connection()
        .await?;
    let node_urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    if plan.fencing {
        let _: () = checker.set("chaos:fencing", 1).await?;
    }
    let mut workers: Vec<Child> = Vec::new();
    for _ in 0..plan.workers {
        workers.push(
            Command::new(exe)
                .args(worker_args)
                .arg(checker_server.url())
                .args(&node_urls)
                .stdout(Stdio::piped())
                .spawn()?,
        );
    }
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
    while acquired(&mut checker).await? < plan.acquisitions {
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
        let [acquisitions, overlaps, failed, granted, longest_us, fencing] = fields[..] else {
            return Err(format!("bad tally {line:?}").into());
        };
        report.acquisitions += acquisitions;
        report.overlaps += overlaps;
        report.failed_calls += failed;
        report.granted_during_outage += granted;
        report.fencing_violations += fencing;
        report.longest_failed_call = report
            .longest_failed_call
            .max(Duration::from_micros(longest_us));
    }
    report.elapsed = started.elapsed();
    result?;
    Ok(report)
}

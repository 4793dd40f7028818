//! Scale out: the many-resources workload (each task locks and unlocks
//! resources of its own, so every lock goes to the primary of its slot) on
//! one node that is a Redis Cluster of 1, 2 and 3 primaries (and, as the
//! baseline, on one standalone server named by `redis://`). Worker
//! processes (this binary again, with `--worker`) of 64 tasks each run for
//! a few seconds; the figures are medians of several runs with their spread
//! (min to max), the throughput's ratio to one primary, how busy the
//! busiest primary was (its CPU time over the run's, from `INFO cpu`), and
//! the servers' capacity: the throughput over the busiest primary's share
//! of a core, what the cluster serves before its busiest primary is full.
//! With a core for each primary and enough for the clients, throughput
//! grows with K as the capacity does; where the machine has fewer (the
//! clients then use what the primaries leave), the capacity shows how the
//! primaries split the load.
//!
//! ```text
//! cargo run --release --example scale_out [RUNS] [WORKERS]
//! ```
//!
//! It needs `redis-server` on PATH (scripts/test.sh installs it).

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use quorlock::Redlock;
use support::cluster::Cluster;

const TTL: Duration = Duration::from_secs(10);
const TASKS: usize = 64;
const SECONDS: u64 = 3;

type AnyError = Box<dyn std::error::Error + Send + Sync>;

/// One worker process: `TASKS` tasks lock and unlock resources of their
/// own on `url` for `SECONDS`; prints the cycles made.
async fn worker(url: &str, id: &str) -> Result<(), AnyError> {
    let redlock = Redlock::new([url])?;
    redlock.lock("scale:warm-up", TTL).await?.unlock().await?;
    let end = Instant::now() + Duration::from_secs(SECONDS);
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let redlock = redlock.clone();
            let id = id.to_owned();
            tokio::spawn(async move {
                let mut cycles = 0u64;
                while Instant::now() < end {
                    let resource = format!("scale:{id}:{task}:{cycles}");
                    let guard = redlock.lock(resource, TTL).await?;
                    guard.unlock().await?;
                    cycles += 1;
                }
                Ok::<u64, quorlock::Error>(cycles)
            })
        })
        .collect();
    let mut cycles = 0;
    for task in tasks {
        cycles += task.await??;
    }
    println!("{cycles}");
    Ok(())
}

/// A primary's CPU time so far (user and system), from `INFO cpu`.
fn cpu_seconds(server: &support::RedisServer) -> f64 {
    ["used_cpu_user", "used_cpu_sys"]
        .iter()
        .filter_map(|field| server.info_field("cpu", field)?.parse::<f64>().ok())
        .sum()
}

/// One run on a cluster of `primaries` primaries (0: the baseline, one
/// standalone server named by `redis://`): cycles per second, and each
/// primary's share of a core over the run.
fn run(
    exe: &std::path::Path,
    primaries: usize,
    workers: usize,
) -> Result<(f64, Vec<f64>), AnyError> {
    let (cluster, standalone);
    let (url, servers): (String, Vec<&support::RedisServer>) = if primaries == 0 {
        standalone = support::RedisServer::start();
        (standalone.url(), vec![&standalone])
    } else {
        cluster = Cluster::start(primaries, 0);
        (cluster.url(), cluster.primaries.iter().collect())
    };
    let cpu_before: Vec<f64> = servers.iter().map(|server| cpu_seconds(server)).collect();
    let started = Instant::now();
    let children: Vec<_> = (0..workers)
        .map(|id| {
            Command::new(exe)
                .args(["--worker", &url, &id.to_string()])
                .stdout(Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let mut cycles = 0u64;
    for child in children {
        let output = child.wait_with_output()?;
        if !output.status.success() {
            return Err(format!("a worker failed: {}", output.status).into());
        }
        cycles += String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse::<u64>()?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let busy = servers
        .iter()
        .zip(cpu_before)
        .map(|(primary, before)| (cpu_seconds(primary) - before) / elapsed)
        .collect();
    Ok((cycles as f64 / f64::from(u32::try_from(SECONDS)?), busy))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() -> Result<(), AnyError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, url, id] = args.as_slice()
        && flag == "--worker"
    {
        return tokio::runtime::Runtime::new()?.block_on(worker(url, id));
    }
    let runs: usize = args.first().map_or(Ok(3), |runs| runs.parse())?;
    let workers: usize = args.get(1).map_or(Ok(2), |workers| workers.parse())?;
    let exe = std::env::current_exe()?;
    println!(
        "scale out: {workers} worker processes x {TASKS} tasks, distinct resources, \
         {SECONDS} s per run, {runs} runs per cluster; {} cores",
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    let (mut single, mut single_capacity) = (None, None);
    for primaries in 0..=3 {
        let mut rates = Vec::new();
        let mut busiest = Vec::new();
        let mut capacities = Vec::new();
        for _ in 0..runs {
            let (rate, busy) = run(&exe, primaries, workers)?;
            let most = busy.iter().copied().fold(0.0, f64::max);
            rates.push(rate);
            busiest.push(most);
            // What the cluster would serve with its busiest primary on a
            // full core of its own (the others are less busy).
            capacities.push(rate / most.max(f64::EPSILON));
        }
        let spread = |values: &[f64]| {
            (
                values.iter().copied().fold(f64::MAX, f64::min),
                values.iter().copied().fold(0.0, f64::max),
            )
        };
        let ((low, high), (cap_low, cap_high)) = (spread(&rates), spread(&capacities));
        let (rate, capacity) = (median(&mut rates), median(&mut capacities));
        if primaries == 0 {
            println!(
                "standalone (redis://, the baseline): {rate:.0} locks/s [{low:.0} – {high:.0}]; \
                 the server {:.0} % of a core; capacity {capacity:.0} locks/s",
                median(&mut busiest) * 100.0
            );
            continue;
        }
        let base = *single.get_or_insert(rate);
        let cap_base = *single_capacity.get_or_insert(capacity);
        println!(
            "K = {primaries}: {rate:>7.0} locks/s [{low:.0} – {high:.0}] = {:.2} x one primary; \
             busiest primary {:.0} % of a core; servers' capacity {capacity:.0} locks/s \
             [{cap_low:.0} – {cap_high:.0}] = {:.2} x one primary (target {:.1})",
            rate / base,
            median(&mut busiest) * 100.0,
            capacity / cap_base,
            0.7 * primaries as f64,
        );
    }
    Ok(())
}

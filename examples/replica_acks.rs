//! What `replica_acks` (a grant counts once the node's replicas
//! acknowledged it: `WAIT`) costs, on one primary with one replica on
//! loopback: sequential lock + unlock latency, and the throughput of 64
//! tasks on distinct resources, with the option off and at 1, alternating,
//! several runs each; prints medians with their spread (min to max).
//!
//! ```text
//! cargo run --release --example replica_acks [RUNS]
//! ```
//!
//! It needs `redis-server` on PATH (scripts/test.sh installs it).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use quorlock::Redlock;
use support::RedisServer;

const TTL: Duration = Duration::from_secs(10);
const LATENCY_CYCLES: usize = 2_000;
const TASKS: usize = 64;
const THROUGHPUT_FOR: Duration = Duration::from_secs(2);

/// Mean lock + unlock latency (µs) of sequential cycles.
async fn latency(redlock: &Redlock) -> f64 {
    let started = Instant::now();
    for i in 0..LATENCY_CYCLES {
        let guard = redlock
            .lock(format!("acks:latency:{i}"), TTL)
            .await
            .expect("lock");
        guard.unlock().await.expect("unlock");
    }
    started.elapsed().as_secs_f64() * 1e6 / LATENCY_CYCLES as f64
}

/// Lock + unlock cycles per second of `TASKS` tasks on distinct resources.
async fn throughput(redlock: &Redlock) -> f64 {
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let redlock = redlock.clone();
            tokio::spawn(async move {
                let mut cycles = 0u64;
                while started.elapsed() < THROUGHPUT_FOR {
                    let resource = format!("acks:throughput:{task}:{cycles}");
                    let guard = redlock.lock(resource, TTL).await.expect("lock");
                    guard.unlock().await.expect("unlock");
                    cycles += 1;
                }
                cycles
            })
        })
        .collect();
    let mut cycles = 0;
    for task in tasks {
        cycles += task.await.expect("task");
    }
    cycles as f64 / started.elapsed().as_secs_f64()
}

/// `median (min–max)` of `values`.
fn summary(values: &mut [f64]) -> String {
    values.sort_by(f64::total_cmp);
    format!(
        "{:.0} ({:.0}-{:.0})",
        values[values.len() / 2],
        values[0],
        values[values.len() - 1]
    )
}

fn main() {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(5);
    let runtime = support::runtime().expect("tokio runtime");
    let primary = RedisServer::start();
    let _replica = RedisServer::start_replica_of(&primary);
    let mut figures = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
    runtime.block_on(async {
        for _ in 0..runs {
            for (at, acks) in [0, 1].into_iter().enumerate() {
                let redlock = Redlock::builder([primary.url()])
                    .replica_acks(acks)
                    .build()
                    .expect("client");
                support::lock_once(&redlock, "acks:first-contact", TTL).await;
                figures[at][0].push(latency(&redlock).await);
                figures[at][1].push(throughput(&redlock).await);
            }
        }
    });
    println!("one primary, one replica, loopback; {runs} runs each, median (min-max)");
    println!(
        "{:<16} {:>24} {:>28}",
        "replica_acks", "lock+unlock latency µs", "cycles/s, 64 tasks"
    );
    for (at, name) in ["0 (off)", "1 (WAIT 1)"].into_iter().enumerate() {
        let [latencies, rates] = &mut figures[at];
        println!(
            "{name:<16} {:>24} {:>28}",
            summary(latencies),
            summary(rates)
        );
    }
}

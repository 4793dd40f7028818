//! Fairness across OS processes: 4 worker processes × 4 tasks share one
//! lock (each process gets at least a quarter of its fair share, no call
//! gives up; a separate checker Redis sees no overlap), over five servers
//! and over one Redis Cluster node, and a queued waiter SIGKILLed in its own
//! process stops blocking the others within its entry's lifetime. This test
//! re-executes its own binary as the workers, so it has its own `main`
//! (harness = false). `examples/contention.rs` gives the figures.

mod support;

use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use quorlock::Redlock;

const TTL: Duration = Duration::from_secs(10);
const TESTS: [&str; 3] = [
    "four_processes_of_four_tasks_share_the_lock",
    "four_processes_share_a_lock_on_a_redis_cluster",
    "a_sigkilled_waiter_stops_blocking_within_its_lifetime",
];

use support::harness::AnyError;

/// One worker process: `tasks` tasks lock, `INCR` the checker (it must read
/// 1), hold 1 ms, `DECR`, unlock, for `seconds`. Prints
/// `acquisitions failed overlaps`.
async fn fair_worker(
    tasks: usize,
    seconds: u64,
    checker: &str,
    nodes: &[String],
) -> Result<(), AnyError> {
    let redlock = Redlock::new(nodes)?;
    let checker = redis::Client::open(checker)?
        .get_multiplexed_async_connection()
        .await?;
    // First contact before the clock starts.
    redlock.lock("fair:warm-up", TTL).await?.unlock().await?;
    let end = Instant::now() + Duration::from_secs(seconds);
    let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (redlock, mut checker, counts) = (redlock.clone(), checker.clone(), counts.clone());
        handles.push(tokio::spawn(async move {
            while Instant::now() < end {
                match redlock.lock("fair:one", TTL).await {
                    Ok(guard) => {
                        if !support::checked_hold(&mut checker, Duration::from_millis(1)).await {
                            counts[2].fetch_add(1, Ordering::Relaxed);
                        }
                        let _ = guard.unlock().await;
                        counts[0].fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        counts[1].fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for handle in handles {
        handle.await?;
    }
    redlock.flush().await;
    support::harness::report(&*counts);
    Ok(())
}

/// A worker that queues for `fair:killed` and waits (to be SIGKILLed).
async fn queued_waiter(nodes: &[String]) -> Result<(), AnyError> {
    let redlock = Redlock::builder(nodes)
        .acquire_timeout(Duration::from_secs(60))
        .build()?;
    let guard = redlock.lock("fair:killed", TTL).await?;
    println!("acquired");
    guard.unlock().await?;
    Ok(())
}

fn four_processes_of_four_tasks_share_the_lock(exe: &std::path::Path) -> Result<(), AnyError> {
    let servers = support::servers(6);
    share_fairly(exe, &servers[0].url(), &support::urls(&servers[1..]))
}

/// The same over one node that is a Redis Cluster of 3 primaries: the
/// queue, its liveness keys and its notifications in the lock's slot.
fn four_processes_share_a_lock_on_a_redis_cluster(exe: &std::path::Path) -> Result<(), AnyError> {
    let checker = support::RedisServer::start();
    let cluster = support::cluster::Cluster::start(3, 0);
    share_fairly(exe, &checker.url(), &[cluster.url()])
}

/// 4 worker processes × 4 tasks on `nodes`, checked by `checker`: no
/// overlap, no call gives up, each process gets at least a quarter of its
/// fair share.
fn share_fairly(exe: &std::path::Path, checker: &str, nodes: &[String]) -> Result<(), AnyError> {
    let workers: Vec<_> = (0..4)
        .map(|_| {
            Command::new(exe)
                .args(["--fair-worker", "4", "3", checker])
                .args(nodes)
                .stdout(Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let mut acquisitions = Vec::new();
    let (mut overlaps, mut failures) = (0, 0);
    for worker in workers {
        let output = worker.wait_with_output()?;
        let text = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            return Err(format!("worker failed: {} {text}", output.status).into());
        }
        let [acquired, failed, overlapped] = support::harness::counts::<3>(&text)?;
        println!("  worker: {acquired} acquisitions, {failed} failed calls");
        acquisitions.push(acquired);
        overlaps += overlapped;
        failures += failed;
    }
    let total: u64 = acquisitions.iter().sum();
    let fair = total / 4;
    if overlaps > 0 {
        return Err(format!("{overlaps} overlaps").into());
    }
    // Each call waits for at most 2 s (the default patience); served in
    // turn behind 15 others holding about a millisecond each, none runs out.
    if failures > 0 {
        return Err(format!("{failures} lock calls gave up").into());
    }
    if total < 100 {
        return Err(format!("only {total} acquisitions in all").into());
    }
    if let Some(low) = acquisitions.iter().find(|&&n| n * 4 < fair) {
        return Err(
            format!("a process got {low}, under a quarter of its fair share {fair}").into(),
        );
    }
    Ok(())
}

fn a_sigkilled_waiter_stops_blocking_within_its_lifetime(
    exe: &std::path::Path,
    runtime: &tokio::runtime::Runtime,
) -> Result<(), AnyError> {
    let servers = support::servers(3);
    let nodes = support::urls(&servers);
    let queue_len = |redlock: &Redlock| -> Vec<i64> {
        support::queue_lengths(&servers, &redlock.key("fair:killed").unwrap_or_default())
    };
    runtime.block_on(async {
        let holder = Redlock::new(&nodes)?;
        let guard = holder.lock("fair:killed", TTL).await?;
        let mut doomed = Command::new(exe)
            .arg("--queued-waiter")
            .args(&nodes)
            .stdout(Stdio::null())
            .spawn()?;
        let queued = |count: i64| {
            let holder = holder.clone();
            let queue_len = &queue_len;
            async move {
                support::eventually(Duration::from_secs(10), || {
                    queue_len(&holder).iter().all(|&n| n == count)
                })
                .await
            }
        };
        if !queued(1).await {
            return Err(
                format!("the doomed waiter did not queue: {:?}", queue_len(&holder)).into(),
            );
        }
        let next = Redlock::builder(&nodes)
            .acquire_timeout(Duration::from_secs(30))
            .build()?;
        let waiting = tokio::spawn({
            let next = next.clone();
            async move {
                next.lock("fair:killed", TTL)
                    .await
                    .map(|guard| (guard, Instant::now()))
            }
        });
        if !queued(2).await {
            return Err(
                format!("the second waiter did not queue: {:?}", queue_len(&holder)).into(),
            );
        }
        doomed.kill()?;
        doomed.wait()?;
        // The lock goes to the dead waiter's reservation first.
        let released = Instant::now();
        guard.unlock().await?;
        let (guard, got) = tokio::time::timeout(Duration::from_secs(30), waiting).await???;
        let waited = got - released;
        println!("  served {waited:?} after the release, behind a SIGKILLed waiter");
        guard.unlock().await?;
        let bound = Redlock::WAITER_LIFETIME + Redlock::REFRESH_INTERVAL + Duration::from_secs(1);
        if waited > bound {
            return Err(format!("served after {waited:?}, more than {bound:?}").into());
        }
        Ok(())
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = support::runtime().expect("tokio runtime");
    match args.first().map(String::as_str) {
        Some("--fair-worker") => {
            let outcome = match &args[1..] {
                [tasks, seconds, checker, nodes @ ..] => match (tasks.parse(), seconds.parse()) {
                    (Ok(tasks), Ok(seconds)) => {
                        runtime.block_on(fair_worker(tasks, seconds, checker, nodes))
                    }
                    _ => Err("bad TASKS or SECONDS".into()),
                },
                _ => Err("--fair-worker TASKS SECONDS CHECKER NODE...".into()),
            };
            return support::harness::exit("fair worker", outcome);
        }
        Some("--queued-waiter") => {
            let outcome = runtime.block_on(queued_waiter(&args[1..]));
            return support::harness::exit("queued waiter", outcome);
        }
        _ => {}
    }
    let exe = std::env::current_exe().expect("own executable");
    support::harness::run_tests(&args, &TESTS, |name| match name {
        "four_processes_of_four_tasks_share_the_lock" => {
            four_processes_of_four_tasks_share_the_lock(&exe)
        }
        "four_processes_share_a_lock_on_a_redis_cluster" => {
            four_processes_share_a_lock_on_a_redis_cluster(&exe)
        }
        _ => a_sigkilled_waiter_stops_blocking_within_its_lifetime(&exe, &runtime),
    })
}

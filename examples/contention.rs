//! Contention across processes: P worker processes (this executable, re-run
//! as workers), each with T tasks, compete for one resource on 5 real
//! `redis-server` nodes for S seconds, with default options. Each holder
//! `INCR`s a key on a separate checker Redis (it must read 1), works 1 ms,
//! `DECR`s it and unlocks. Prints, per process, its acquisitions and failed
//! `lock` calls, and over all of them the wait (call to guard) percentiles and
//! the overlaps seen by the checker.
//!
//! ```text
//! cargo run --release --example contention [PROCESSES] [TASKS] [SECONDS]   # default 4 4 5
//! ```
//!
//! It needs `redis-server` on PATH (scripts/test.sh installs it).

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const RESOURCE: &str = "contention:one";
const HOLD: Duration = Duration::from_millis(1);
const TTL: Duration = Duration::from_secs(10);

/// What one worker process reports: counts, then every wait in µs.
#[derive(Default)]
struct Tally {
    acquisitions: u64,
    failed: u64,
    overlaps: u64,
    waits_us: Vec<u64>,
}

async fn worker(args: &[String]) -> Result<Tally, String> {
    let [tasks, seconds, start_ms, checker, nodes @ ..] = args else {
        return Err("worker arguments: TASKS SECONDS START_MS CHECKER NODE...".into());
    };
    let tasks: usize = tasks.parse().map_err(|_| "bad TASKS")?;
    let seconds: u64 = seconds.parse().map_err(|_| "bad SECONDS")?;
    let start_ms: u128 = start_ms.parse().map_err(|_| "bad START_MS")?;
    let redlock = quorlock::Redlock::new(nodes).map_err(|err| err.to_string())?;
    let checker = redis::Client::open(checker.as_str()).map_err(|err| err.to_string())?;
    let checker = checker
        .get_multiplexed_async_connection()
        .await
        .map_err(|err| err.to_string())?;
    // First contact before the clock starts, as a long-running service has.
    redlock
        .lock(format!("{RESOURCE}:warm-up:{}", std::process::id()), TTL)
        .await
        .map_err(|err| err.to_string())?
        .unlock()
        .await
        .map_err(|err| err.to_string())?;
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|err| err.to_string())?
        .as_millis();
    tokio::time::sleep(Duration::from_millis(
        u64::try_from(start_ms.saturating_sub(now_ms)).unwrap_or(0),
    ))
    .await;
    let end = Instant::now() + Duration::from_secs(seconds);
    let (acquisitions, failed, overlaps) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (redlock, mut checker) = (redlock.clone(), checker.clone());
        let (acquisitions, failed, overlaps) =
            (acquisitions.clone(), failed.clone(), overlaps.clone());
        handles.push(tokio::spawn(async move {
            let mut waits = Vec::new();
            while Instant::now() < end {
                let asked = Instant::now();
                match redlock.lock(RESOURCE, TTL).await {
                    Ok(guard) => {
                        waits.push(u64::try_from(asked.elapsed().as_micros()).unwrap_or(u64::MAX));
                        let inside: i64 = redis::cmd("INCR")
                            .arg("holders")
                            .query_async(&mut checker)
                            .await
                            .unwrap_or(-1);
                        if inside != 1 {
                            overlaps.fetch_add(1, Ordering::Relaxed);
                        }
                        tokio::time::sleep(HOLD).await;
                        let _: redis::RedisResult<i64> = redis::cmd("DECR")
                            .arg("holders")
                            .query_async(&mut checker)
                            .await;
                        let _ = guard.unlock().await;
                        acquisitions.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            waits
        }));
    }
    let mut tally = Tally::default();
    for handle in handles {
        tally
            .waits_us
            .extend(handle.await.map_err(|err| err.to_string())?);
    }
    redlock.flush().await;
    tally.acquisitions = acquisitions.load(Ordering::Relaxed);
    tally.failed = failed.load(Ordering::Relaxed);
    tally.overlaps = overlaps.load(Ordering::Relaxed);
    Ok(tally)
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)] as f64 / 1000.0
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = match support::runtime() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("contention: {err}");
            return ExitCode::FAILURE;
        }
    };
    if args.first().map(String::as_str) == Some("--worker") {
        return match runtime.block_on(worker(&args[1..])) {
            Ok(tally) => {
                println!("{} {} {}", tally.acquisitions, tally.failed, tally.overlaps);
                let waits: Vec<String> = tally.waits_us.iter().map(u64::to_string).collect();
                println!("{}", waits.join(" "));
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("contention worker: {err}");
                ExitCode::FAILURE
            }
        };
    }
    let number = |index: usize, default: u64| {
        args.get(index)
            .map_or(Ok(default), |text| text.parse::<u64>())
            .ok()
            .filter(|&n| n > 0)
    };
    let (Some(processes), Some(tasks), Some(seconds)) = (number(0, 4), number(1, 4), number(2, 5))
    else {
        eprintln!("usage: contention [PROCESSES] [TASKS] [SECONDS]");
        return ExitCode::from(2);
    };
    let servers = support::servers(6);
    let checker = servers[0].url();
    let nodes = support::urls(&servers[1..]);
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(err) => {
            eprintln!("contention: {err}");
            return ExitCode::FAILURE;
        }
    };
    let start_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|now| now.as_millis() + 2_000)
        .unwrap_or(0);
    let children: Vec<_> = (0..processes)
        .map(|_| {
            std::process::Command::new(&exe)
                .arg("--worker")
                .args([tasks.to_string(), seconds.to_string(), start_ms.to_string()])
                .arg(&checker)
                .args(&nodes)
                .stdout(Stdio::piped())
                .spawn()
        })
        .collect();
    println!(
        "{processes} processes x {tasks} tasks, {seconds} s, one resource on 5 nodes, {} ms holds",
        HOLD.as_millis()
    );
    println!("process  acquisitions  failed calls");
    let (mut total, mut failed, mut overlaps, mut waits) = (0, 0, 0, Vec::new());
    for (index, child) in children.into_iter().enumerate() {
        let output = match child.and_then(|child| child.wait_with_output()) {
            Ok(output) if output.status.success() => output,
            Ok(output) => {
                eprintln!("contention: worker {index} failed: {}", output.status);
                return ExitCode::FAILURE;
            }
            Err(err) => {
                eprintln!("contention: worker {index}: {err}");
                return ExitCode::FAILURE;
            }
        };
        let text = String::from_utf8_lossy(&output.stdout);
        let mut lines = text.lines();
        let counts: Vec<u64> = lines
            .next()
            .unwrap_or_default()
            .split(' ')
            .filter_map(|n| n.parse().ok())
            .collect();
        let [acquired, failures, overlapped] = counts[..] else {
            eprintln!("contention: worker {index} printed {text:?}");
            return ExitCode::FAILURE;
        };
        waits.extend(
            lines
                .next()
                .unwrap_or_default()
                .split(' ')
                .filter_map(|n| n.parse::<u64>().ok()),
        );
        println!("{index:>7}  {acquired:>12}  {failures:>12}");
        total += acquired;
        failed += failures;
        overlaps += overlapped;
    }
    waits.sort_unstable();
    println!(
        "total {total} acquisitions, {failed} failed calls, {overlaps} overlaps; wait p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        percentile(&waits, 0.5),
        percentile(&waits, 0.99),
        percentile(&waits, 1.0)
    );
    if overlaps > 0 {
        println!("FAILED: two holders at once");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

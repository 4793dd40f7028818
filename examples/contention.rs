//! Contention across processes: P worker processes (this executable, re-run
//! as workers), each with T tasks, compete for one resource on 5 real
//! `redis-server` nodes for S seconds, with default options. Each holder
//! `INCR`s a key on a separate checker Redis (it must read 1), works 1 ms,
//! `DECR`s it and unlocks. Prints, per client, its acquisitions and failed
//! `lock` calls, and over all of them the wait (call to guard) percentiles,
//! the requests the nodes received per acquisition and the overlaps seen by
//! the checker.
//!
//! ```text
//! cargo run --release --example contention [PROCESSES] [TASKS] [SECONDS] [CLIENT]
//! ```
//!
//! Defaults: 4 4 5 quorlock. `TASKS` may be a `+`-separated list (`2+1`):
//! that many clients in each process, each with its own connections, as
//! separate processes would have. `CLIENT` is `quorlock` (default options)
//! or `rslock` (its default 3 retries, with a 5 ms retry delay).
//!
//! Requests per acquisition: the lock's own requests to the nodes (from
//! `INFO commandstats`: `EVALSHA`, `EVAL`, `PING`, `SUBSCRIBE`,
//! `UNSUBSCRIBE`, and for rslock its direct `SET`s; commands that scripts run
//! inside are not requests; quorlock's direct `SET`s, one per node in each
//! call's first round, cannot be told apart from its scripts' and are added
//! as 5 per call), over all nodes, per acquisition. An
//! uncontended quorlock cycle is 2 per node: 10 on 5 nodes.
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
/// rslock's retry delay here (its default is 200 ms).
const RSLOCK_RETRY_DELAY: Duration = Duration::from_millis(5);

/// One lock client of a worker process.
#[derive(Clone)]
enum Client {
    Quorlock(quorlock::Redlock),
    Rslock(Arc<rslock::LockManager>),
}

enum Held {
    Quorlock(quorlock::LockGuard),
    Rslock(rslock::Lock),
}

impl Client {
    fn new(kind: &str, nodes: &[String]) -> Result<Client, String> {
        match kind {
            "quorlock" => quorlock::Redlock::new(nodes)
                .map(Client::Quorlock)
                .map_err(|err| err.to_string()),
            "rslock" => {
                let mut manager = rslock::LockManager::new(nodes.to_vec());
                manager.set_retry(3, RSLOCK_RETRY_DELAY);
                Ok(Client::Rslock(Arc::new(manager)))
            }
            other => Err(format!("unknown client {other:?}: quorlock or rslock")),
        }
    }

    async fn lock(&self, resource: &str) -> Option<Held> {
        match self {
            Client::Quorlock(redlock) => redlock.lock(resource, TTL).await.ok().map(Held::Quorlock),
            Client::Rslock(manager) => manager.lock(resource, TTL).await.ok().map(Held::Rslock),
        }
    }

    async fn unlock(&self, held: Held) {
        match (self, held) {
            (_, Held::Quorlock(guard)) => {
                let _ = guard.unlock().await;
            }
            (Client::Rslock(manager), Held::Rslock(lock)) => manager.unlock(&lock).await,
            (Client::Quorlock(_), Held::Rslock(_)) => {}
        }
    }

    async fn flush(&self) {
        if let Client::Quorlock(redlock) = self {
            redlock.flush().await;
        }
    }
}

/// What one client of a worker reports: counts, then every wait in µs.
#[derive(Default)]
struct Tally {
    acquisitions: u64,
    failed: u64,
    overlaps: u64,
    waits_us: Vec<u64>,
}

async fn run_client(
    client: Client,
    tasks: usize,
    end: Instant,
    checker: redis::aio::MultiplexedConnection,
) -> Result<Tally, String> {
    let (acquisitions, failed, overlaps) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (client, mut checker) = (client.clone(), checker.clone());
        let (acquisitions, failed, overlaps) =
            (acquisitions.clone(), failed.clone(), overlaps.clone());
        handles.push(tokio::spawn(async move {
            let mut waits = Vec::new();
            while Instant::now() < end {
                let asked = Instant::now();
                match client.lock(RESOURCE).await {
                    Some(held) => {
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
                        client.unlock(held).await;
                        acquisitions.fetch_add(1, Ordering::Relaxed);
                    }
                    None => {
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
    client.flush().await;
    tally.acquisitions = acquisitions.load(Ordering::Relaxed);
    tally.failed = failed.load(Ordering::Relaxed);
    tally.overlaps = overlaps.load(Ordering::Relaxed);
    Ok(tally)
}

async fn worker(args: &[String]) -> Result<Vec<Tally>, String> {
    let [kind, tasks, seconds, start_ms, checker, nodes @ ..] = args else {
        return Err("worker arguments: CLIENT TASKS SECONDS START_MS CHECKER NODE...".into());
    };
    let tasks = parse_tasks(tasks).ok_or("bad TASKS")?;
    let seconds: u64 = seconds.parse().map_err(|_| "bad SECONDS")?;
    let start_ms: u128 = start_ms.parse().map_err(|_| "bad START_MS")?;
    let checker = redis::Client::open(checker.as_str()).map_err(|err| err.to_string())?;
    let checker = checker
        .get_multiplexed_async_connection()
        .await
        .map_err(|err| err.to_string())?;
    let mut clients = Vec::new();
    for _ in &tasks {
        let client = Client::new(kind, nodes)?;
        // First contact before the clock starts, as a long-running service has.
        let warm_up = format!("{RESOURCE}:warm-up:{}", std::process::id());
        let held = client.lock(&warm_up).await.ok_or("warm-up lock failed")?;
        client.unlock(held).await;
        clients.push(client);
    }
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|err| err.to_string())?
        .as_millis();
    tokio::time::sleep(Duration::from_millis(
        u64::try_from(start_ms.saturating_sub(now_ms)).unwrap_or(0),
    ))
    .await;
    let end = Instant::now() + Duration::from_secs(seconds);
    let runs: Vec<_> = clients
        .into_iter()
        .zip(&tasks)
        .map(|(client, &tasks)| tokio::spawn(run_client(client, tasks, end, checker.clone())))
        .collect();
    let mut tallies = Vec::new();
    for run in runs {
        tallies.push(run.await.map_err(|err| err.to_string())??);
    }
    Ok(tallies)
}

/// `4` or `2+1`: the tasks of each client in one process.
fn parse_tasks(text: &str) -> Option<Vec<usize>> {
    let tasks: Option<Vec<usize>> = text
        .split('+')
        .map(|n| n.parse().ok().filter(|&n| n > 0))
        .collect();
    tasks.filter(|tasks| !tasks.is_empty())
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)] as f64 / 1000.0
}

/// The lock's own requests the nodes received (see the module docs).
fn requests(nodes: &[support::RedisServer], kind: &str) -> u64 {
    let calls = support::command_calls(nodes);
    let mut counted = vec!["evalsha", "eval", "ping", "subscribe", "unsubscribe"];
    if kind == "rslock" {
        counted.push("set");
    }
    counted
        .iter()
        .map(|name| calls.get(*name).copied().unwrap_or(0))
        .sum()
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
            Ok(tallies) => {
                for tally in tallies {
                    println!("{} {} {}", tally.acquisitions, tally.failed, tally.overlaps);
                    let waits: Vec<String> = tally.waits_us.iter().map(u64::to_string).collect();
                    println!("{}", waits.join(" "));
                }
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("contention worker: {err}");
                ExitCode::FAILURE
            }
        };
    }
    let processes = args
        .first()
        .map_or(Some(4), |text| text.parse::<u64>().ok());
    let tasks = args.get(1).map_or("4", String::as_str);
    let seconds = args.get(2).map_or(Some(5), |text| text.parse::<u64>().ok());
    let kind = args.get(3).map_or("quorlock", String::as_str);
    let (Some(processes @ 1..), Some(task_list), Some(seconds @ 1..), "quorlock" | "rslock") =
        (processes, parse_tasks(tasks), seconds, kind)
    else {
        eprintln!("usage: contention [PROCESSES] [TASKS|T1+T2..] [SECONDS] [quorlock|rslock]");
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
                .args(["--worker", kind, tasks])
                .args([seconds.to_string(), start_ms.to_string()])
                .arg(&checker)
                .args(&nodes)
                .stdout(Stdio::piped())
                .spawn()
        })
        .collect();
    // The counts start after the workers' warm-up (which is before the start).
    std::thread::sleep(Duration::from_millis(1_500));
    support::reset_stats(&servers[1..]);
    println!(
        "{kind}: {processes} processes x {tasks} tasks, {seconds} s, one resource on 5 nodes, {} ms holds",
        HOLD.as_millis()
    );
    println!("process  client  acquisitions  failed calls");
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
        for client in 0..task_list.len() {
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
            println!("{index:>7}  {client:>6}  {acquired:>12}  {failures:>12}");
            total += acquired;
            failed += failures;
            overlaps += overlapped;
        }
    }
    let mut requests = requests(&servers[1..], kind);
    if kind == "quorlock" {
        requests += 5 * (total + failed);
    }
    waits.sort_unstable();
    println!(
        "total {total} acquisitions, {failed} failed calls, {overlaps} overlaps; wait p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {:.1} requests per acquisition",
        percentile(&waits, 0.5),
        percentile(&waits, 0.99),
        percentile(&waits, 1.0),
        requests as f64 / total.max(1) as f64
    );
    if overlaps > 0 {
        println!("FAILED: two holders at once");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

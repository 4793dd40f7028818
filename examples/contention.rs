//! Contention across processes: P worker processes (this executable, re-run
//! as workers), each with T tasks, compete for one resource on 5 real
//! `redis-server` nodes for S seconds, with default options. Each holder
//! `INCR`s a key on a separate checker Redis (it must read 1), works 1 ms
//! (a blocking sleep, as exact as the OS makes it), `DECR`s it and unlocks. Prints, per client, its acquisitions and failed
//! `lock` calls, and over all of them the wait (call to guard) percentiles,
//! the requests the nodes received per acquisition and the overlaps seen by
//! the checker.
//!
//! ```text
//! cargo run --release --example contention [--data PATH] [--runs R] [PROCESSES] [TASKS] [SECONDS] [CLIENT]
//! ```
//!
//! `--data PATH` appends each run's raw figures (each client's
//! acquisitions, each acquisition's wait) to PATH, for `examples/plots.rs`.
//!
//! Defaults: 4 4 5 quorlock. `TASKS` may be a `+`-separated list (`2+1`):
//! that many clients in each process, each with its own connections, as
//! separate processes would have. `CLIENT` is `quorlock` (default options)
//! or `rslock` (its default 3 retries, with a 5 ms retry delay). `--runs R`
//! repeats the run R times on fresh servers and ends with the medians and
//! their spread (max − min over the median): one run on a shared machine
//! varies by 7–16 %.
//!
//! Requests per acquisition: the lock's own requests to the nodes (from
//! `INFO commandstats`: `EVALSHA`, `EVAL`, `PING`, `SUBSCRIBE`,
//! `UNSUBSCRIBE`, and for rslock its direct `SET`s; commands that scripts run
//! inside are not requests; quorlock's direct `SET`s, one per node in a
//! call's first round unless the client found the key taken last time (or
//! another of its calls on the key is making its first round),
//! cannot be told apart from the `SET`s its scripts run and are counted as 5
//! for every call: for quorlock the figure is an upper bound), over all
//! nodes, per acquisition. An
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
                        if !support::checked_hold(&mut checker, HOLD).await {
                            overlaps.fetch_add(1, Ordering::Relaxed);
                        }
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

/// One run's figures, over all clients.
struct Summary {
    acquisitions: u64,
    failed: u64,
    /// The fewest and most acquisitions of one client.
    share_min: u64,
    share_max: u64,
    wait_p50_ms: f64,
    wait_p99_ms: f64,
    wait_max_ms: f64,
    requests_per_acquisition: f64,
}

/// The settings of a run.
struct Setup<'a> {
    processes: u64,
    tasks: &'a str,
    clients_per_process: usize,
    seconds: u64,
    kind: &'a str,
    /// `--data PATH`: where each run's raw figures are appended.
    data: Option<&'a std::path::Path>,
}

/// One run on fresh servers: prints each client's counts and the run's
/// totals; an overlap is an error.
fn run_once(setup: &Setup<'_>) -> Result<Summary, String> {
    let servers = support::servers(6);
    let checker = servers[0].url();
    let nodes = support::urls(&servers[1..]);
    let exe = std::env::current_exe().map_err(|err| err.to_string())?;
    let start_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|now| now.as_millis() + 2_000)
        .unwrap_or(0);
    let children: Vec<_> = (0..setup.processes)
        .map(|_| {
            std::process::Command::new(&exe)
                .args(["--worker", setup.kind, setup.tasks])
                .args([setup.seconds.to_string(), start_ms.to_string()])
                .arg(&checker)
                .args(&nodes)
                .stdout(Stdio::piped())
                .spawn()
        })
        .collect();
    // The counts start after the workers' warm-up (which is before the start).
    std::thread::sleep(Duration::from_millis(1_500));
    support::reset_stats(&servers[1..]);
    println!("process  client  acquisitions  failed calls");
    let (mut total, mut failed, mut overlaps, mut waits) = (0, 0, 0, Vec::new());
    let (mut share_min, mut share_max) = (u64::MAX, 0);
    let mut shares = Vec::new();
    for (index, child) in children.into_iter().enumerate() {
        let output = match child.and_then(|child| child.wait_with_output()) {
            Ok(output) if output.status.success() => output,
            Ok(output) => return Err(format!("worker {index} failed: {}", output.status)),
            Err(err) => return Err(format!("worker {index}: {err}")),
        };
        let text = String::from_utf8_lossy(&output.stdout);
        let mut lines = text.lines();
        for client in 0..setup.clients_per_process {
            let counts: Vec<u64> = lines
                .next()
                .unwrap_or_default()
                .split(' ')
                .filter_map(|n| n.parse().ok())
                .collect();
            let [acquired, failures, overlapped] = counts[..] else {
                return Err(format!("worker {index} printed {text:?}"));
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
            share_min = share_min.min(acquired);
            share_max = share_max.max(acquired);
            shares.push(acquired);
        }
    }
    let mut requests = requests(&servers[1..], setup.kind);
    if setup.kind == "quorlock" {
        // At most one plain SET round per call (see the module docs).
        requests += 5 * (total + failed);
    }
    waits.sort_unstable();
    let summary = Summary {
        acquisitions: total,
        failed,
        share_min,
        share_max,
        wait_p50_ms: percentile(&waits, 0.5),
        wait_p99_ms: percentile(&waits, 0.99),
        wait_max_ms: percentile(&waits, 1.0),
        requests_per_acquisition: requests as f64 / total.max(1) as f64,
    };
    println!(
        "total {total} acquisitions, {failed} failed calls, {overlaps} overlaps; wait p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {}{:.1} requests per acquisition",
        summary.wait_p50_ms,
        summary.wait_p99_ms,
        summary.wait_max_ms,
        if setup.kind == "quorlock" {
            "at most "
        } else {
            ""
        },
        summary.requests_per_acquisition
    );
    if overlaps > 0 {
        return Err("FAILED: two holders at once".into());
    }
    if let Some(path) = setup.data {
        write_data(path, setup, (&shares, failed), &waits)
            .map_err(|err| format!("cannot write {}: {err}", path.display()))?;
    }
    Ok(summary)
}

/// Appends one run's raw figures to `path`, for `examples/plots.rs`:
/// `run KIND PROCESSES TASKS SECONDS`, `shares` (each client's
/// acquisitions), `failed` (the `lock` calls that gave up), `waits` (each
/// acquisition's wait, µs).
fn write_data(
    path: &std::path::Path,
    setup: &Setup<'_>,
    (shares, failed): (&[u64], u64),
    waits: &[u64],
) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let line = |values: &[u64]| -> String {
        values
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(" ")
    };
    writeln!(
        file,
        "run {} {} {} {}",
        setup.kind, setup.processes, setup.tasks, setup.seconds
    )?;
    writeln!(file, "shares {}", line(shares))?;
    writeln!(file, "failed {failed}")?;
    writeln!(file, "waits {}", line(waits))
}

/// The median of `values` and the spread (max − min) over it.
fn median(mut values: Vec<f64>) -> (f64, f64) {
    values.sort_by(f64::total_cmp);
    let Some(&middle) = values.get(values.len() / 2) else {
        return (0.0, 0.0);
    };
    let spread = values.last().unwrap_or(&middle) - values.first().unwrap_or(&middle);
    (middle, if middle > 0.0 { spread / middle } else { 0.0 })
}

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
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
    let mut runs = Some(1);
    let mut data: Option<std::path::PathBuf> = None;
    if args.first().map(String::as_str) == Some("--data") {
        data = args.get(1).map(std::path::PathBuf::from);
        args.drain(..2.min(args.len()));
    }
    if args.first().map(String::as_str) == Some("--runs") {
        runs = args.get(1).and_then(|text| text.parse::<usize>().ok());
        args.drain(..2.min(args.len()));
    }
    let processes = args
        .first()
        .map_or(Some(4), |text| text.parse::<u64>().ok());
    let tasks = args.get(1).map_or("4", String::as_str);
    let seconds = args.get(2).map_or(Some(5), |text| text.parse::<u64>().ok());
    let kind = args.get(3).map_or("quorlock", String::as_str);
    let (
        Some(runs @ 1..),
        Some(processes @ 1..),
        Some(task_list),
        Some(seconds @ 1..),
        "quorlock" | "rslock",
    ) = (runs, processes, parse_tasks(tasks), seconds, kind)
    else {
        eprintln!(
            "usage: contention [--data PATH] [--runs R] [PROCESSES] [TASKS|T1+T2..] [SECONDS] [quorlock|rslock]"
        );
        return ExitCode::from(2);
    };
    let setup = Setup {
        processes,
        tasks,
        clients_per_process: task_list.len(),
        seconds,
        kind,
        data: data.as_deref(),
    };
    let mut summaries = Vec::new();
    for run in 1..=runs {
        println!(
            "{kind}: {processes} processes x {tasks} tasks, {seconds} s, one resource on 5 nodes, {} ms holds (run {run} of {runs})",
            HOLD.as_millis()
        );
        match run_once(&setup) {
            Ok(summary) => summaries.push(summary),
            Err(err) => {
                eprintln!("contention: {err}");
                return ExitCode::FAILURE;
            }
        }
    }
    if runs > 1 {
        let of = |figure: fn(&Summary) -> f64| median(summaries.iter().map(figure).collect());
        let show = |(value, spread): (f64, f64), digits: usize| {
            format!("{value:.digits$} (spread {:.0} %)", spread * 100.0)
        };
        println!(
            "median of {runs} runs: {kind} {processes} x {tasks}: acquisitions {}; per client min {} max {}; failed calls {}; wait p50 {} p99 {} max {} ms; requests per acquisition {}",
            show(of(|s| s.acquisitions as f64), 0),
            show(of(|s| s.share_min as f64), 0),
            show(of(|s| s.share_max as f64), 0),
            show(of(|s| s.failed as f64), 0),
            show(of(|s| s.wait_p50_ms), 1),
            show(of(|s| s.wait_p99_ms), 1),
            show(of(|s| s.wait_max_ms), 1),
            show(of(|s| s.requests_per_acquisition), 1),
        );
    }
    ExitCode::SUCCESS
}

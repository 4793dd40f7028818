//! The flash-sale workload, shared by `tests/flash_sale.rs` and
//! `examples/flash_sale.rs`: P worker processes (the calling executable,
//! re-run with a flag) of T tasks each, every task wanting **one**
//! acquisition of one lock, all starting at the same wall-clock instant.
//! Each holder `INCR`s a checker Redis (it must read 1), works 1 ms,
//! `DECR`s it and unlocks. The parent reads each worker's counts and
//! waits, and the nodes' commands and CPU over the sale.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::RedisServer;
use super::harness::AnyError;

/// How long each holder works.
pub const HOLD: Duration = Duration::from_millis(1);
const TTL: Duration = Duration::from_secs(10);

/// What one sale's workers saw, and what it cost node 0.
#[derive(Debug, Default)]
pub struct Sale {
    /// Calls that got the lock.
    pub served: u64,
    /// Calls that gave up (or failed).
    pub failed: u64,
    /// Holders the checker saw beside another.
    pub overlaps: u64,
    /// Each served call's wait, call to guard.
    pub waits: Vec<Duration>,
    /// From the common start to the last worker's end.
    pub elapsed: Duration,
    /// Node 0's commands during the sale (`INFO commandstats`, the
    /// commands scripts ran included).
    pub node_commands: u64,
    /// Node 0's CPU (user + system) during the sale.
    pub node_cpu: Duration,
    /// Node 0's calls per command during the sale.
    pub node_calls: std::collections::BTreeMap<String, u64>,
    /// Keys that expired on node 0 during the sale (`INFO stats`): a
    /// client's liveness key that lapsed, a reservation nobody claimed.
    pub node_expired: u64,
}

impl std::fmt::Display for Sale {
    /// One line: what was served, how fast, the waits, node 0's cost.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} served, {} failed, {} overlaps in {:.1?}: {:.0}/s; wait p50 {:.0?} p99 {:.0?} \
             max {:.0?}; node 0 {:.1} commands, {:.0?} CPU per served call, {} keys expired",
            self.served,
            self.failed,
            self.overlaps,
            self.elapsed,
            self.served_per_second(),
            self.wait_percentile(50.0),
            self.wait_percentile(99.0),
            self.wait_percentile(100.0),
            self.commands_per_served(),
            self.cpu_per_served(),
            self.node_expired,
        )
    }
}

impl Sale {
    /// Served calls per second of the sale.
    pub fn served_per_second(&self) -> f64 {
        self.served as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Node 0's commands per served call.
    pub fn commands_per_served(&self) -> f64 {
        self.node_commands as f64 / self.served.max(1) as f64
    }

    /// Node 0's CPU per served call.
    pub fn cpu_per_served(&self) -> Duration {
        self.node_cpu / u32::try_from(self.served.max(1)).unwrap_or(u32::MAX)
    }

    /// The `p`-th percentile (0–100) of the waits.
    pub fn wait_percentile(&self, p: f64) -> Duration {
        let mut waits = self.waits.clone();
        waits.sort();
        if waits.is_empty() {
            return Duration::ZERO;
        }
        let index = ((waits.len() - 1) as f64 * p / 100.0).round() as usize;
        waits[index.min(waits.len() - 1)]
    }
}

/// Runs a sale: `processes` copies of `exe` with `flag` (which must call
/// [`worker_main`] with the arguments after it), `tasks` tasks each, on
/// `nodes` (node 0 measured), the checker Redis `checker`, each call's
/// patience `patience`.
pub fn run(
    exe: &std::path::Path,
    flag: &str,
    (processes, tasks): (usize, usize),
    patience: Duration,
    nodes: &[RedisServer],
    checker: &RedisServer,
) -> Result<Sale, AnyError> {
    let urls = super::urls(nodes);
    // Time for every worker to start and make first contact.
    let start_at = SystemTime::now() + Duration::from_millis(1_500 + 100 * processes as u64);
    let start_ms = start_at.duration_since(UNIX_EPOCH)?.as_millis().to_string();
    let workers: Vec<_> = (0..processes)
        .map(|_| {
            Command::new(exe)
                .arg(flag)
                .args([
                    &tasks.to_string(),
                    &patience.as_millis().to_string(),
                    &start_ms,
                ])
                .arg(checker.url())
                .args(&urls)
                .stdout(Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    // Stats from just before the start: the workers' first contact is not the sale's.
    let until_start = start_at
        .duration_since(SystemTime::now())
        .unwrap_or_default();
    std::thread::sleep(until_start.saturating_sub(Duration::from_millis(50)));
    super::reset_stats(&nodes[..1]);
    let cpu_before = node_cpu(&nodes[0]);
    let expired_before = node_stat(&nodes[0], "expired_keys");
    let mut sale = Sale::default();
    for worker in workers {
        let output = worker.wait_with_output()?;
        let text = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            return Err(format!("worker failed: {} {text}", output.status).into());
        }
        let mut lines = text.lines();
        let [served, failed, overlaps, elapsed_us] =
            super::harness::counts::<4>(lines.next().unwrap_or_default())?;
        sale.served += served;
        sale.failed += failed;
        sale.overlaps += overlaps;
        sale.elapsed = sale.elapsed.max(Duration::from_micros(elapsed_us));
        let waits = lines.next().unwrap_or_default().split_whitespace();
        sale.waits.extend(
            waits
                .filter_map(|us| us.parse().ok())
                .map(Duration::from_micros),
        );
    }
    sale.node_calls = super::command_calls(&nodes[..1]);
    sale.node_commands = sale.node_calls.values().sum();
    sale.node_cpu = node_cpu(&nodes[0]).saturating_sub(cpu_before);
    sale.node_expired = node_stat(&nodes[0], "expired_keys").saturating_sub(expired_before);
    Ok(sale)
}

/// A counter of a node's `INFO stats` (0 when it cannot be read).
pub fn node_stat(node: &RedisServer, name: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query(&mut node.connection())
        .unwrap_or_default();
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0)
}

/// A node's CPU so far (user + system, `INFO cpu`).
pub fn node_cpu(node: &RedisServer) -> Duration {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query(&mut node.connection())
        .unwrap_or_default();
    let seconds: f64 = info
        .lines()
        .filter(|line| line.starts_with("used_cpu_sys:") || line.starts_with("used_cpu_user:"))
        .filter_map(|line| line.split_once(':')?.1.trim().parse::<f64>().ok())
        .sum();
    Duration::from_secs_f64(seconds)
}

/// This process's CPU so far (user + system, all threads), from
/// `/proc/self/stat` in clock ticks of 10 ms (Linux's fixed `USER_HZ`);
/// zero where it cannot be read.
pub fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which is in parentheses: the
    // 12th and 13th of them are utime and stime.
    let ticks: u64 = stat
        .rsplit_once(')')
        .map(|(_, fields)| {
            fields
                .split_whitespace()
                .skip(11)
                .take(2)
                .filter_map(|field| field.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

/// A worker process: `TASKS PATIENCE_MS START_AT_MS CHECKER NODE...`.
/// Prints `served failed overlaps elapsed_us`, then each served call's wait
/// in µs on one line.
pub async fn worker_main(args: &[String]) -> Result<(), AnyError> {
    let [tasks, patience, start_at, checker, nodes @ ..] = args else {
        return Err("TASKS PATIENCE_MS START_AT_MS CHECKER NODE...".into());
    };
    let tasks: usize = tasks.parse()?;
    let patience = Duration::from_millis(patience.parse()?);
    let start_at = UNIX_EPOCH + Duration::from_millis(start_at.parse()?);
    let redlock = quorlock::Redlock::builder(nodes)
        .acquire_timeout(patience)
        .build()?;
    let checker = redis::Client::open(checker.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    // First contact before the sale.
    redlock.lock("sale:warm-up", TTL).await?.unlock().await?;
    let until = start_at
        .duration_since(SystemTime::now())
        .unwrap_or_default();
    tokio::time::sleep(until).await;
    let started = Instant::now();
    let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (redlock, mut checker, counts) = (redlock.clone(), checker.clone(), counts.clone());
            tokio::spawn(async move {
                let called = Instant::now();
                match redlock.lock("sale:item-42", TTL).await {
                    Ok(guard) => {
                        let waited = called.elapsed();
                        if !super::checked_hold(&mut checker, HOLD).await {
                            counts[2].fetch_add(1, Ordering::Relaxed);
                        }
                        let _ = guard.unlock().await;
                        counts[0].fetch_add(1, Ordering::Relaxed);
                        Some(waited)
                    }
                    Err(_) => {
                        counts[1].fetch_add(1, Ordering::Relaxed);
                        None
                    }
                }
            })
        })
        .collect();
    let mut waits = Vec::new();
    for handle in handles {
        waits.extend(handle.await?);
    }
    let elapsed = started.elapsed();
    redlock.flush().await;
    let [served, failed, overlaps] = [0, 1, 2].map(|i| counts[i].load(Ordering::Relaxed));
    println!("{served} {failed} {overlaps} {}", elapsed.as_micros());
    let waits: Vec<String> = waits.iter().map(|w| w.as_micros().to_string()).collect();
    println!("{}", waits.join(" "));
    Ok(())
}

/// The child processes that the flash-sale workloads re-run their own
/// executable as: `--sale-worker` ([`worker_main`]) and `--holder`
/// (`handover::holder_main`). `None` when `args` asks for neither.
pub fn child(args: &[String], runtime: &tokio::runtime::Runtime) -> Option<std::process::ExitCode> {
    let (flag, rest) = args.split_first()?;
    match flag.as_str() {
        "--sale-worker" => Some(super::harness::exit(
            "sale worker",
            runtime.block_on(worker_main(rest)),
        )),
        "--holder" => Some(super::harness::exit(
            "holder",
            runtime.block_on(super::handover::holder_main(rest)),
        )),
        _ => None,
    }
}

//! The oversell demo, across processes.
//!
//! A stock of 100 items lives in its own Redis (the "database"). Worker
//! processes, started from this same executable, buy one item at a time with a
//! plain read-check-write (`GET`, compare, `SET`), as a service without a lock
//! would. Three rounds:
//!
//! 1. no lock: the workers oversell;
//! 2. quorlock over 5 nodes: exactly 100 are sold;
//! 3. quorlock over 5 nodes, 2 of them killed in the middle of the round:
//!    still exactly 100;
//! 4. (with `--sentinel`) quorlock over one Sentinel-managed primary, the
//!    Redis most teams run, killed in the middle of the round: the
//!    Sentinels promote its replica, the lock follows through the same URL,
//!    holds the new primary back for the restart grace (it may have lost
//!    keys), and still exactly 100 are sold.
//!
//! It exits non-zero if a locked round sells anything but the stock.
//! `scripts/demo.sh` starts the servers and runs it:
//!
//! ```text
//! inventory [--workers N] [--sentinel SENTINEL_URL PRIMARY_URL] DATABASE_URL NODE_URL x5
//! ```

use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use quorlock::Redlock;
use redis::AsyncCommands;

const STOCK: i64 = 100;
const RESOURCE: &str = "inventory:item-42";
const TTL: Duration = Duration::from_secs(2);
/// A round that has not finished by then is reported as failed.
const ROUND_LIMIT: Duration = Duration::from_secs(60);
/// How long a node whose server changed (a restart, a failover) is held
/// back: short for the demo (the default, 60 s, covers the longest TTL that
/// other clients of the nodes may use).
const RESTART_GRACE: Duration = Duration::from_secs(5);

/// What one worker reports: items sold, lock acquisitions, failed lock calls.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    sold: u64,
    acquisitions: u64,
    failures: u64,
}

impl Tally {
    fn to_line(self) -> String {
        format!(
            "tally sold={} acquisitions={} failures={}",
            self.sold, self.acquisitions, self.failures
        )
    }

    fn parse(line: &str) -> Option<Tally> {
        let mut tally = Tally::default();
        let rest = line.strip_prefix("tally ")?;
        for field in rest.split_whitespace() {
            let (name, value) = field.split_once('=')?;
            let value: u64 = value.parse().ok()?;
            match name {
                "sold" => tally.sold = value,
                "acquisitions" => tally.acquisitions = value,
                "failures" => tally.failures = value,
                _ => return None,
            }
        }
        Some(tally)
    }

    fn add(&mut self, other: Tally) {
        self.sold += other.sold;
        self.acquisitions += other.acquisitions;
        self.failures += other.failures;
    }
}

fn usage() -> ExitCode {
    eprintln!(
        "usage: inventory [--workers N] [--sentinel SENTINEL_URL PRIMARY_URL] DATABASE_URL \
         NODE_URL [NODE_URL...]"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("inventory: {err}");
            return ExitCode::FAILURE;
        }
    };
    if args.first().map(String::as_str) == Some("--worker") {
        // --worker MODE DATABASE_URL [NODE_URL...]
        if args.len() < 3 {
            return usage();
        }
        let locked = args[1] == "lock";
        return match runtime.block_on(worker(locked, &args[2], &args[3..])) {
            Ok(tally) => {
                println!("{}", tally.to_line());
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("inventory worker: {err}");
                ExitCode::FAILURE
            }
        };
    }
    let mut workers = 8;
    if args.first().map(String::as_str) == Some("--workers") {
        match args.get(1).and_then(|n| n.parse::<usize>().ok()) {
            Some(n) if n >= 1 => workers = n,
            _ => return usage(),
        }
        args.drain(..2);
    }
    let mut sentinel = None;
    if args.first().map(String::as_str) == Some("--sentinel") {
        if args.len() < 3 {
            return usage();
        }
        sentinel = Some((args[1].clone(), args[2].clone()));
        args.drain(..3);
    }
    if args.len() < 2 {
        return usage();
    }
    let mut rounds = vec![
        Plan::new("no lock", &[], &[]),
        Plan::new("quorlock", &args[1..], &[]),
        Plan::new(
            "quorlock, 2 nodes killed",
            &args[1..],
            &args[1..3.min(args.len())],
        ),
    ];
    if let Some((sentinel_url, primary)) = &sentinel {
        rounds.push(Plan::new(
            "Sentinel, primary killed",
            std::slice::from_ref(sentinel_url),
            std::slice::from_ref(primary),
        ));
    }
    match runtime.block_on(coordinate(workers, &args[0], &rounds)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("inventory: {err}");
            ExitCode::FAILURE
        }
    }
}

type AnyError = Box<dyn std::error::Error + Send + Sync>;

/// One worker process: buys until the stock is gone, under the lock over
/// `nodes` (none: without a lock).
async fn worker(locked: bool, database: &str, nodes: &[String]) -> Result<Tally, AnyError> {
    let mut store = redis::Client::open(database)?
        .get_multiplexed_async_connection()
        .await?;
    let redlock = if locked {
        let redlock = Redlock::builder(nodes)
            // A hot lock shared by several processes: retry soon, with
            // jitter, and give up on one call after 5 s.
            .retry_delay(Duration::from_millis(5))
            .retry_jitter(Duration::from_millis(5))
            .acquire_timeout(Duration::from_secs(5))
            .restart_grace(RESTART_GRACE)
            .build()?;
        Some(redlock)
    } else {
        None
    };
    let started = Instant::now();
    let mut tally = Tally::default();
    loop {
        if started.elapsed() > ROUND_LIMIT {
            return Err("the round took too long".into());
        }
        let guard = match &redlock {
            Some(redlock) => match redlock.lock(RESOURCE, TTL).await {
                Ok(guard) => {
                    tally.acquisitions += 1;
                    Some(guard)
                }
                Err(err) => {
                    eprintln!("inventory worker: {err}");
                    tally.failures += 1;
                    continue;
                }
            },
            None => None,
        };
        // The read-check-write of a service that trusts its lock.
        let stock: i64 = store.get("stock").await?;
        let sold = if stock > 0 {
            // The service is slow between its read and its write.
            tokio::time::sleep(Duration::from_millis(2)).await;
            let _: () = store.set("stock", stock - 1).await?;
            tally.sold += 1;
            true
        } else {
            false
        };
        if let Some(guard) = guard
            && let Err(err) = guard.unlock().await
        {
            // The sale is done; keys left on silent nodes expire by their TTL.
            eprintln!("inventory worker: {err}");
        }
        if !sold {
            return Ok(tally);
        }
    }
}

/// One round to run: its lock nodes (none: no lock), and the nodes to kill
/// once a third of the stock is sold.
struct Plan {
    name: &'static str,
    nodes: Vec<String>,
    kill: Vec<String>,
}

impl Plan {
    fn new(name: &'static str, nodes: &[String], kill: &[String]) -> Self {
        Plan {
            name,
            nodes: nodes.to_vec(),
            kill: kill.to_vec(),
        }
    }
}

/// One row of the table.
struct Row {
    name: &'static str,
    nodes: usize,
    workers: usize,
    tally: Tally,
    elapsed: Duration,
    stock_left: i64,
}

/// Runs the rounds and prints the table; true if the locked rounds sold
/// exactly the stock.
async fn coordinate(workers: usize, database: &str, rounds: &[Plan]) -> Result<bool, AnyError> {
    let exe = std::env::current_exe()?;
    let mut store = redis::Client::open(database)?
        .get_multiplexed_async_connection()
        .await?;
    let mut rows = Vec::new();
    for Plan { name, nodes, kill } in rounds {
        let (name, locked) = (*name, !nodes.is_empty());
        let _: () = store.set("stock", STOCK).await?;
        println!(
            "round {}: {name}, {workers} worker processes ...",
            rows.len() + 1
        );
        let started = Instant::now();
        let mut children = Vec::new();
        for _ in 0..workers {
            children.push(
                Command::new(&exe)
                    .arg("--worker")
                    .arg(if locked { "lock" } else { "none" })
                    .arg(database)
                    .args(nodes)
                    .stdout(Stdio::piped())
                    .spawn()?,
            );
        }
        if !kill.is_empty() {
            // Kill the nodes once about a third of the stock is gone.
            loop {
                let stock: i64 = store.get("stock").await?;
                if stock <= STOCK * 2 / 3 || started.elapsed() > ROUND_LIMIT {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            for url in kill {
                shutdown(url).await;
                println!(
                    "  killed lock node {url} with {} items left",
                    store.get::<_, i64>("stock").await?
                );
            }
        }
        // Wait for every worker before judging any, so none is left behind.
        let mut outputs = Vec::new();
        for child in children {
            outputs.push(tokio::task::spawn_blocking(move || child.wait_with_output()).await?);
        }
        let mut tally = Tally::default();
        for output in outputs {
            let output = output?;
            if !output.status.success() {
                return Err(format!("a worker failed: {}", output.status).into());
            }
            let text = String::from_utf8_lossy(&output.stdout);
            let worker = text
                .lines()
                .find_map(Tally::parse)
                .ok_or("a worker printed no tally")?;
            tally.add(worker);
        }
        let stock_left: i64 = store.get("stock").await?;
        rows.push(Row {
            name,
            nodes: if locked { nodes.len() } else { 0 },
            workers,
            tally,
            elapsed: started.elapsed(),
            stock_left,
        });
    }

    println!();
    println!(
        "{:<5} {:<28} {:>10} {:>7} {:>5} {:>8} {:>9} {:>12} {:>13}",
        "round",
        "lock",
        "lock nodes",
        "buyers",
        "sold",
        "oversold",
        "time",
        "acquisitions",
        "lock failures"
    );
    let mut correct = true;
    for (index, row) in rows.iter().enumerate() {
        let sold = i64::try_from(row.tally.sold).unwrap_or(i64::MAX);
        let oversold = (sold - STOCK).max(0);
        let locked = row.nodes > 0;
        if locked && (sold != STOCK || row.stock_left != 0) {
            correct = false;
        }
        println!(
            "{:<5} {:<28} {:>10} {:>7} {:>5} {:>8} {:>8.2}s {:>12} {:>13}",
            index + 1,
            row.name,
            if locked {
                row.nodes.to_string()
            } else {
                "-".into()
            },
            row.workers,
            row.tally.sold,
            oversold,
            row.elapsed.as_secs_f64(),
            if locked {
                row.tally.acquisitions.to_string()
            } else {
                "-".into()
            },
            if locked {
                row.tally.failures.to_string()
            } else {
                "-".into()
            },
        );
    }
    println!();
    if correct {
        println!("the locked rounds sold exactly {STOCK}: no oversell");
    } else {
        println!("FAILED: a locked round sold something other than the stock of {STOCK}");
    }
    Ok(correct)
}

/// Kills a Redis node with `SHUTDOWN NOSAVE` (it answers by closing the connection).
async fn shutdown(url: &str) {
    if let Ok(client) = redis::Client::open(url)
        && let Ok(mut connection) = client.get_multiplexed_async_connection().await
    {
        let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN")
            .arg("NOSAVE")
            .query_async(&mut connection)
            .await;
    }
}

//! The "many resources" workload, shared by `tests/flash_sale.rs` and
//! `examples/flash_sale.rs`: one client holds R locks, another has one
//! waiting `lock` call per resource, and all R are released at once.
//!
//! The holder is a process of its own (the calling executable, re-run with
//! a flag that calls [`holder_main`]), as a holder on another machine is:
//! its releases and the waiters' claims share the machine's cores as two
//! processes do, not one runtime's task queue. (Measured both ways, the
//! hand-over's figures did not change: docs/benchmarks.md, session 55.)

use std::process::Stdio;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::RedisServer;
use super::harness::AnyError;

const TTL: Duration = Duration::from_secs(10);

/// How long the holder may take to lock every resource, or to release
/// them once told: a bound against a hang, not a figure.
const HOLDER_BOUND: Duration = Duration::from_secs(300);

/// What one "many resources" run saw: one client held `resources` locks,
/// another had one waiting `lock` call per resource, and all were released
/// at once.
#[derive(Debug, Default)]
pub struct Handover {
    /// Waiters that acquired.
    pub acquired: usize,
    /// The waiters' errors, by message.
    pub errors: std::collections::BTreeMap<String, usize>,
    /// From the start of the release to each acquisition.
    pub delays: Vec<Duration>,
    /// How long the holder's release of all took, as the holder measured
    /// it (from the word to release to the last node's confirmation).
    pub release_took: Duration,
    /// Releases that a node did not confirm in time (they still reach it).
    pub unconfirmed: usize,
    /// The nodes' CPU (all of them together) from the start of the release
    /// to the last waiter's end.
    pub nodes_cpu: Duration,
    /// The waiting client's process's CPU over the same time.
    pub waiter_cpu: Duration,
    /// Node 0's calls per command over the same time (the commands scripts
    /// ran included; see [`super::command_calls`]).
    pub node_calls: std::collections::BTreeMap<String, u64>,
}

impl Handover {
    /// The `p`-th percentile (0–100) of the delays.
    pub fn delay_percentile(&self, p: f64) -> Duration {
        let mut delays = self.delays.clone();
        delays.sort();
        let index = ((delays.len().max(1) - 1) as f64 * p / 100.0).round() as usize;
        delays.get(index).copied().unwrap_or_default()
    }
}

/// The CPU of all `nodes` so far.
fn nodes_cpu(nodes: &[RedisServer]) -> Duration {
    nodes.iter().map(super::sale::node_cpu).sum()
}

/// The names of the `resources` locks handed over.
fn names(resources: usize) -> Vec<String> {
    (0..resources).map(|n| format!("sale:many-{n}")).collect()
}

/// The next line the holder prints, within [`HOLDER_BOUND`].
async fn holder_line(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
) -> Result<String, AnyError> {
    match tokio::time::timeout(HOLDER_BOUND, lines.next_line()).await {
        Ok(Ok(Some(line))) => Ok(line),
        Ok(Ok(None)) => Err("the holder process ended early (its errors are above)".into()),
        Ok(Err(err)) => Err(format!("reading the holder process: {err}").into()),
        Err(_) => Err(format!("the holder process said nothing in {HOLDER_BOUND:?}").into()),
    }
}

/// Has a holder process (`exe` with `flag`, which must call
/// [`holder_main`] with the arguments after it) hold `resources` locks on
/// `nodes`, has `waiter` (made by the caller with its options) wait on
/// each, waits until the last one is queued on every node, then has the
/// holder release all at once.
pub async fn handover(
    exe: &std::path::Path,
    flag: &str,
    nodes: &[RedisServer],
    waiter: quorlock::Redlock,
    resources: usize,
) -> Result<Handover, AnyError> {
    let mut holder = tokio::process::Command::new(exe)
        .arg(flag)
        .arg(resources.to_string())
        .args(super::urls(nodes))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let (Some(mut word), Some(said)) = (holder.stdin.take(), holder.stdout.take()) else {
        return Err("the holder process has no pipes".into());
    };
    let mut said = BufReader::new(said).lines();
    let line = holder_line(&mut said).await?;
    if line != "held" {
        return Err(format!("the holder process said {line:?}, not \"held\"").into());
    }
    super::lock_once(&waiter, "sale:warm-up", TTL).await;
    let names = names(resources);
    let calls: Vec<_> = names
        .iter()
        .map(|name| {
            let (waiter, name) = (waiter.clone(), name.clone());
            tokio::spawn(async move { waiter.lock(&name, TTL).await.map(|_| Instant::now()) })
        })
        .collect();
    let last = waiter.key(names.last().map(String::as_str).unwrap_or_default())?;
    let joined = super::eventually(Duration::from_secs(30), || {
        super::queue_lengths(nodes, &last).iter().all(|&n| n == 1)
    });
    if !joined.await {
        return Err("the last waiter did not queue on every node in 30 s".into());
    }
    let first = nodes.first().ok_or("a hand-over needs nodes")?;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut first.connection())?;
    let cpu_before = (nodes_cpu(nodes), super::sale::process_cpu());
    let released = Instant::now();
    word.write_all(b"release\n").await?;
    word.flush().await?;
    let mut handover = Handover::default();
    for call in calls {
        match call.await? {
            Ok(got) => {
                handover.acquired += 1;
                handover
                    .delays
                    .push(got.saturating_duration_since(released));
            }
            Err(err) => *handover.errors.entry(err.to_string()).or_default() += 1,
        }
    }
    handover.nodes_cpu = nodes_cpu(nodes).saturating_sub(cpu_before.0);
    handover.waiter_cpu = super::sale::process_cpu().saturating_sub(cpu_before.1);
    handover.node_calls = super::command_calls(std::slice::from_ref(first));
    let line = holder_line(&mut said).await?;
    let [took_us, unconfirmed] = super::harness::counts::<2>(
        line.strip_prefix("released ")
            .ok_or_else(|| format!("the holder process said {line:?}"))?,
    )?;
    handover.release_took = Duration::from_micros(took_us);
    handover.unconfirmed = usize::try_from(unconfirmed)?;
    let status = tokio::time::timeout(HOLDER_BOUND, holder.wait()).await??;
    if !status.success() {
        return Err(format!("the holder process failed: {status}").into());
    }
    waiter.flush().await;
    Ok(handover)
}

/// The holder process: `RESOURCES NODE...`. Locks every resource (64 at a
/// time), prints `held`, waits for a line on its standard input, then
/// releases all at once and prints `released <µs> <unconfirmed>`: how long
/// the release of all took and how many releases a node did not confirm in
/// time (they still reach it).
pub async fn holder_main(args: &[String]) -> Result<(), AnyError> {
    let [resources, nodes @ ..] = args else {
        return Err("RESOURCES NODE...".into());
    };
    let holder = quorlock::Redlock::new(nodes)?;
    let names = names(resources.parse()?);
    let locked: Vec<_> = futures::stream::iter(&names)
        .map(|name| holder.lock(name, TTL))
        .buffer_unordered(64)
        .collect()
        .await;
    let guards = locked.into_iter().collect::<Result<Vec<_>, _>>()?;
    println!("held");
    let mut word = String::new();
    BufReader::new(tokio::io::stdin())
        .read_line(&mut word)
        .await?;
    let release = Instant::now();
    let releases: Vec<_> = guards
        .into_iter()
        .map(|guard| tokio::spawn(guard.unlock()))
        .collect();
    let mut unconfirmed = 0;
    for release in releases {
        unconfirmed += usize::from(release.await?.is_err());
    }
    println!("released {} {unconfirmed}", release.elapsed().as_micros());
    holder.flush().await;
    Ok(())
}

//! The benchmark: quorlock (defaults) against rslock (defaults) and `floor`,
//! the least any correct client costs (one parallel round of `SET NX PX` to
//! all nodes, one parallel round of the release script by `EVALSHA`, one
//! multiplexed connection per node, nothing else), on the same servers, in one
//! run. `scripts/bench.sh` starts the servers and runs it:
//!
//! ```text
//! bench [--quick] [--json PATH] [--layout NAME] URL x5   (BENCH_REDIS_DIR: the servers' pidfile dir)
//! bench --summarize [--json PATH] FILE...    medians and spreads of several runs
//! bench --profile [N CLIENT SECONDS] URL x5  one client's throughput, for a profiler
//!   (CLIENT: quorlock, quorlock-read, quorlock-write, rslock or floor)
//! ```
//!
//! Workloads at N = 1, 3, 5 nodes: latency (sequential lock + unlock of
//! distinct resources), throughput (64 tasks), contended (8 tasks, one
//! resource, 1 ms holds), each also with fencing on (quorlock only), heap
//! allocations and requests (counted by the nodes' `MONITOR`) per
//! uncontended cycle; at N = 5: latency with one node frozen (SIGSTOP); peak
//! RSS. Prints one table with the ratios quorlock / floor and quorlock /
//! rslock, and writes JSON lines, tagged with `--layout` (how the script
//! pinned the processes); `--summarize` turns several runs into medians.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::future::join_all;
use rand::RngExt;

/// Counts heap allocations, to report allocations per cycle.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: defers every call to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

type AnyError = Box<dyn std::error::Error + Send + Sync>;
const TTL: Duration = Duration::from_secs(10);

/// The three implementations, behind one interface.
#[derive(Clone)]
enum Client {
    Quorlock(quorlock::Redlock),
    /// quorlock's read hold of a read-write lock (in the quorlock column).
    QuorlockRead(quorlock::Redlock),
    /// quorlock's write hold of a read-write lock (in the quorlock column).
    QuorlockWrite(quorlock::Redlock),
    Rslock(rslock::LockManager),
    Floor(Arc<Floor>),
}

enum Held {
    Quorlock(quorlock::LockGuard),
    Rslock(rslock::Lock),
    Floor(Vec<u8>, String),
}

impl Client {
    fn name(&self) -> &'static str {
        match self {
            Client::Quorlock(_) | Client::QuorlockRead(_) | Client::QuorlockWrite(_) => "quorlock",
            Client::Rslock(_) => "rslock",
            Client::Floor(_) => "floor",
        }
    }

    /// One lock call as the implementation does it by default (with retries);
    /// `None` if it failed.
    async fn lock(&self, resource: &str) -> Option<Held> {
        match self {
            Client::Quorlock(redlock) => redlock.lock(resource, TTL).await.ok().map(Held::Quorlock),
            Client::QuorlockRead(redlock) => {
                redlock.read(resource, TTL).await.ok().map(Held::Quorlock)
            }
            Client::QuorlockWrite(redlock) => {
                redlock.write(resource, TTL).await.ok().map(Held::Quorlock)
            }
            Client::Rslock(manager) => manager.lock(resource, TTL).await.ok().map(Held::Rslock),
            Client::Floor(floor) => floor
                .lock(resource)
                .await
                .map(|(key, token)| Held::Floor(key, token)),
        }
    }

    async fn unlock(&self, held: Held) {
        match (self, held) {
            (_, Held::Quorlock(guard)) => {
                let _ = guard.unlock().await;
            }
            (Client::Rslock(manager), Held::Rslock(lock)) => manager.unlock(&lock).await,
            (Client::Floor(floor), Held::Floor(key, token)) => floor.unlock(&key, &token).await,
            _ => {}
        }
    }
}

/// The floor: one parallel round to lock, one to release.
struct Floor {
    connections: Vec<redis::aio::MultiplexedConnection>,
    release: redis::Script,
}

impl Floor {
    async fn connect(urls: &[String]) -> Result<Floor, AnyError> {
        let mut connections = Vec::new();
        for url in urls {
            connections.push(
                redis::Client::open(url.as_str())?
                    .get_multiplexed_async_connection()
                    .await?,
            );
        }
        Ok(Floor {
            connections,
            release: redis::Script::new(
                r#"if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end"#,
            ),
        })
    }

    async fn try_lock(&self, key: &[u8], token: &str) -> bool {
        let votes = join_all(self.connections.iter().map(|connection| {
            let mut connection = connection.clone();
            async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg(token)
                    .arg("NX")
                    .arg("PX")
                    .arg(TTL.as_millis() as u64)
                    .query_async::<Option<String>>(&mut connection)
                    .await
                    .ok()
                    .flatten()
                    .is_some()
            }
        }))
        .await;
        votes.into_iter().filter(|granted| *granted).count() > self.connections.len() / 2
    }

    /// Polls every 0-1 ms until it holds the lock (a give-up after 2 s).
    async fn lock(&self, resource: &str) -> Option<(Vec<u8>, String)> {
        let key = format!("floor:{resource}").into_bytes();
        // 128 bits from the thread's CSPRNG, no system call: the least a
        // random token costs (quorlock's own tokens cost the same).
        let token = format!("{:032x}", rand::random::<u128>());
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            if self.try_lock(&key, &token).await {
                return Some((key, token));
            }
            self.unlock(&key, &token).await;
            if Instant::now() > deadline {
                return None;
            }
            let pause = rand::rng().random_range(0..1000);
            tokio::time::sleep(Duration::from_micros(pause)).await;
        }
    }

    async fn unlock(&self, key: &[u8], token: &str) {
        join_all(self.connections.iter().map(|connection| {
            let mut connection = connection.clone();
            let mut invocation = self.release.prepare_invoke();
            invocation.key(key).arg(token);
            async move {
                let _ = invocation.invoke_async::<i64>(&mut connection).await;
            }
        }))
        .await;
    }
}

async fn clients(urls: &[String], contended: bool) -> Result<Vec<Client>, AnyError> {
    let mut builder = quorlock::Redlock::builder(urls);
    if contended {
        // The 2 s deadline of the contended workload; every other option default.
        builder = builder.acquire_timeout(Duration::from_secs(2));
    }
    Ok(vec![
        Client::Quorlock(builder.build()?),
        Client::Rslock(rslock::LockManager::new(urls.to_vec())),
        Client::Floor(Arc::new(Floor::connect(urls).await?)),
    ])
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[(((sorted.len() - 1) as f64) * p).round() as usize]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Figures by (workload, nodes, metric) for each implementation.
#[derive(Default)]
struct Table {
    rows: BTreeMap<(usize, String, usize, String), BTreeMap<&'static str, f64>>,
    order: usize,
}

impl Table {
    fn put(
        &mut self,
        workload: &str,
        nodes: usize,
        metric: &str,
        implementation: &'static str,
        value: f64,
    ) {
        let existing = self
            .rows
            .keys()
            .find(|(_, w, n, m)| w == workload && *n == nodes && m == metric)
            .cloned();
        let key = existing.unwrap_or_else(|| {
            self.order += 1;
            (self.order, workload.to_owned(), nodes, metric.to_owned())
        });
        self.rows
            .entry(key)
            .or_default()
            .insert(implementation, value);
    }
}

/// Workload 1 (and 4): sequential lock + unlock of distinct resources, the
/// three implementations interleaved cycle by cycle.
async fn latency(
    table: &mut Table,
    clients: &[Client],
    nodes: usize,
    cycles: usize,
    workload: &str,
) {
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); clients.len()];
    for cycle in 0..cycles {
        for (index, client) in clients.iter().enumerate() {
            let resource = format!("bench:latency:{cycle}");
            let started = Instant::now();
            if let Some(held) = client.lock(&resource).await {
                client.unlock(held).await;
                samples[index].push(started.elapsed());
            }
        }
    }
    for (client, mut samples) in clients.iter().zip(samples) {
        samples.sort();
        let mean = samples
            .iter()
            .sum::<Duration>()
            .checked_div(samples.len() as u32)
            .unwrap_or_default();
        table.put(
            workload,
            nodes,
            "p50 µs",
            client.name(),
            micros(percentile(&samples, 0.5)),
        );
        table.put(
            workload,
            nodes,
            "p99 µs",
            client.name(),
            micros(percentile(&samples, 0.99)),
        );
        table.put(workload, nodes, "mean µs", client.name(), micros(mean));
    }
}

/// Workload 2: 64 tasks, each lock + unlock of its own resources.
/// How many slices each client's throughput window is cut into; the clients
/// take turns slice by slice (q, r, f, q, r, f, ...), so that the machine
/// speeding up or slowing down during a run (here by 10 % and more within
/// seconds) weighs on every client alike instead of on whichever ran then.
const THROUGHPUT_SLICES: u32 = 6;

/// The throughput of each client, put under its workload's name: `duration`
/// each, in [`THROUGHPUT_SLICES`] turns.
async fn throughput(
    table: &mut Table,
    clients: &[(&Client, &str)],
    nodes: usize,
    duration: Duration,
) {
    let slice = duration / THROUGHPUT_SLICES;
    let mut totals = vec![(0u64, Duration::ZERO); clients.len()];
    for round in 0..THROUGHPUT_SLICES {
        for ((client, _), total) in clients.iter().zip(&mut totals) {
            let (cycles, elapsed) = throughput_slice(client, slice, round).await;
            total.0 += cycles;
            total.1 += elapsed;
        }
    }
    for ((client, workload), (cycles, elapsed)) in clients.iter().zip(totals) {
        let rate = cycles as f64 / elapsed.as_secs_f64();
        table.put(workload, nodes, "cycles/s", client.name(), rate);
    }
}

/// 64 tasks locking and unlocking resources of their own for `slice`: the
/// cycles done and the time they took.
async fn throughput_slice(client: &Client, slice: Duration, round: u32) -> (u64, Duration) {
    let cycles = Arc::new(AtomicU64::new(0));
    let stop = Instant::now() + slice;
    let tasks: Vec<_> = (0..64)
        .map(|task| {
            let (client, cycles) = (client.clone(), cycles.clone());
            tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < stop {
                    let resource = format!("bench:throughput:{round}:{task}:{n}");
                    if let Some(held) = client.lock(&resource).await {
                        client.unlock(held).await;
                        cycles.fetch_add(1, Ordering::Relaxed);
                    }
                    n += 1;
                }
            })
        })
        .collect();
    let started = Instant::now();
    join_all(tasks).await;
    (cycles.load(Ordering::Relaxed), started.elapsed())
}

/// Commands run on the nodes so far (`INFO commandstats`, without INFO itself).
async fn commands_run(urls: &[String]) -> Result<u64, AnyError> {
    let mut total = 0;
    for url in urls {
        let mut connection = redis::Client::open(url.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut connection)
            .await?;
        for line in stats
            .lines()
            .filter(|line| line.starts_with("cmdstat_") && !line.starts_with("cmdstat_info"))
        {
            if let Some(calls) = line
                .split("calls=")
                .nth(1)
                .and_then(|rest| rest.split(',').next())
            {
                total += calls.parse::<u64>().unwrap_or(0);
            }
        }
    }
    Ok(total)
}

/// One node's `MONITOR` stream, counted on a thread of its own: the requests
/// clients send (a command a script runs shows as `[0 lua]` and is not one).
struct Monitor {
    stream: std::net::TcpStream,
    counter: std::thread::JoinHandle<u64>,
}

impl Monitor {
    fn start(url: &str) -> Result<Monitor, AnyError> {
        use std::io::BufRead;
        let address = url.trim_start_matches("redis://").trim_end_matches('/');
        let mut stream = std::net::TcpStream::connect(address)?;
        stream.write_all(b"MONITOR\r\n")?;
        let mut reader = std::io::BufReader::new(stream.try_clone()?);
        let mut ok = String::new();
        reader.read_line(&mut ok)?;
        if !ok.starts_with("+OK") {
            return Err(format!("MONITOR refused: {ok}").into());
        }
        let counter = std::thread::spawn(move || {
            let mut requests = 0;
            for line in reader.lines() {
                let Ok(line) = line else { break };
                if !line.contains(" [0 lua] ") {
                    requests += 1;
                }
            }
            requests
        });
        Ok(Monitor { stream, counter })
    }

    fn stop(self) -> u64 {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        self.counter.join().unwrap_or(0)
    }
}

/// Requests sent to the nodes per uncontended lock + unlock cycle (counted
/// by the nodes' `MONITOR`), and the commands the nodes ran for them (their
/// `INFO commandstats`, which counts what scripts run too).
async fn requests(
    table: &mut Table,
    clients: &[Client],
    urls: &[String],
    cycles: usize,
    workload: &str,
) -> Result<(), AnyError> {
    let nodes = urls.len();
    for client in clients {
        let resources: Vec<String> = (0..cycles)
            .map(|cycle| format!("bench:requests:{cycle}"))
            .collect();
        // Warm: connected, scripts loaded.
        if let Some(held) = client.lock("bench:requests:warm").await {
            client.unlock(held).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let monitors = urls
            .iter()
            .map(|url| Monitor::start(url))
            .collect::<Result<Vec<_>, _>>()?;
        let before = commands_run(urls).await?;
        for resource in &resources {
            if let Some(held) = client.lock(resource).await {
                client.unlock(held).await;
            }
        }
        // Stragglers (a release's last nodes) land.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let after = commands_run(urls).await?;
        // `commands_run` itself sent one INFO per node each time.
        let seen: u64 = monitors.into_iter().map(Monitor::stop).sum();
        let sent = seen.saturating_sub(2 * nodes as u64);
        let name = client.name();
        table.put(
            workload,
            nodes,
            "requests/cycle",
            name,
            sent as f64 / cycles as f64,
        );
        table.put(
            workload,
            nodes,
            "commands/cycle",
            name,
            (after - before) as f64 / cycles as f64,
        );
    }
    Ok(())
}

/// A precise 1 ms hold (tokio's timer rounds to whole milliseconds and more).
async fn hold_one_ms() {
    let _ = tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(1))).await;
}

/// Workload 3: 8 tasks, one resource, 1 ms holds.
async fn contended(
    table: &mut Table,
    clients: &[Client],
    urls: &[String],
    duration: Duration,
) -> Result<(), AnyError> {
    let nodes = urls.len();
    for client in clients {
        let before = commands_run(urls).await?;
        let last_release = Arc::new(std::sync::Mutex::new(None::<Instant>));
        let stop = Instant::now() + duration;
        let started = Instant::now();
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (client, last_release) = (client.clone(), last_release.clone());
                tokio::spawn(async move {
                    let (mut waits, mut handoffs, mut failed) = (Vec::new(), Vec::new(), 0u64);
                    while Instant::now() < stop {
                        let asked = Instant::now();
                        match client.lock("bench:contended").await {
                            Some(held) => {
                                let acquired = Instant::now();
                                waits.push(acquired - asked);
                                if let Some(released) =
                                    *last_release.lock().unwrap_or_else(|p| p.into_inner())
                                {
                                    handoffs.push(acquired.saturating_duration_since(released));
                                }
                                hold_one_ms().await;
                                *last_release.lock().unwrap_or_else(|p| p.into_inner()) =
                                    Some(Instant::now());
                                client.unlock(held).await;
                            }
                            None => failed += 1,
                        }
                    }
                    (waits, handoffs, failed)
                })
            })
            .collect();
        let results = join_all(tasks).await;
        let elapsed = started.elapsed();
        let after = commands_run(urls).await?;
        let (mut waits, mut handoffs, mut failed, mut counts) =
            (Vec::new(), Vec::new(), 0, Vec::new());
        for result in results {
            let (w, h, f) = result?;
            counts.push(w.len());
            waits.extend(w);
            handoffs.extend(h);
            failed += f;
        }
        waits.sort();
        handoffs.sort();
        let acquisitions = waits.len().max(1);
        let name = client.name();
        table.put(
            "contended",
            nodes,
            "acquisitions/s",
            name,
            waits.len() as f64 / elapsed.as_secs_f64(),
        );
        table.put(
            "contended",
            nodes,
            "wait p50 ms",
            name,
            percentile(&waits, 0.5).as_secs_f64() * 1e3,
        );
        table.put(
            "contended",
            nodes,
            "wait p99 ms",
            name,
            percentile(&waits, 0.99).as_secs_f64() * 1e3,
        );
        table.put(
            "contended",
            nodes,
            "wait max ms",
            name,
            waits.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
        );
        table.put(
            "contended",
            nodes,
            "handoff p50 ms",
            name,
            percentile(&handoffs, 0.5).as_secs_f64() * 1e3,
        );
        table.put(
            "contended",
            nodes,
            "per-task min",
            name,
            counts.iter().copied().min().unwrap_or(0) as f64,
        );
        table.put(
            "contended",
            nodes,
            "per-task max",
            name,
            counts.iter().copied().max().unwrap_or(0) as f64,
        );
        table.put("contended", nodes, "failed calls", name, failed as f64);
        table.put(
            "contended",
            nodes,
            "commands/acq",
            name,
            (after - before) as f64 / acquisitions as f64,
        );
    }
    Ok(())
}

/// Heap allocations per uncontended lock + unlock cycle.
async fn allocations(
    table: &mut Table,
    clients: &[Client],
    nodes: usize,
    cycles: usize,
    workload: &str,
) {
    for client in clients {
        for warm in 0..20 {
            if let Some(held) = client.lock(&format!("bench:alloc:warm:{warm}")).await {
                client.unlock(held).await;
            }
        }
        let resources: Vec<String> = (0..cycles)
            .map(|cycle| format!("bench:alloc:{cycle}"))
            .collect();
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        for resource in &resources {
            if let Some(held) = client.lock(resource).await {
                client.unlock(held).await;
            }
        }
        let per_cycle = (ALLOCATIONS.load(Ordering::Relaxed) - before) as f64 / cycles as f64;
        table.put(workload, nodes, "allocs/cycle", client.name(), per_cycle);
    }
}

fn peak_rss_kib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmHWM:"))
                .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0.0)
}

fn signal(pid_file: &std::path::Path, signal: &str) -> Result<(), AnyError> {
    let pid = std::fs::read_to_string(pid_file)?;
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.trim())
        .status()?;
    if !status.success() {
        return Err(format!("kill -{signal} failed").into());
    }
    Ok(())
}

fn print(table: &Table, layout: &str, json: &mut impl Write) -> std::io::Result<()> {
    println!(
        "{:<16} {:>2} {:<15} {:>12} {:>12} {:>12} {:>9} {:>9}",
        "workload", "N", "metric", "quorlock", "rslock", "floor", "q/floor", "q/rslock"
    );
    let ratio = |a: Option<&f64>, b: Option<&f64>| match (a, b) {
        (Some(a), Some(b)) if *b != 0.0 => format!("{:.2}", a / b),
        _ => "-".into(),
    };
    let cell = |v: Option<&f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
    for ((_, workload, nodes, metric), values) in &table.rows {
        let (q, r, f) = (
            values.get("quorlock"),
            values.get("rslock"),
            values.get("floor"),
        );
        println!(
            "{workload:<16} {nodes:>2} {metric:<15} {:>12} {:>12} {:>12} {:>9} {:>9}",
            cell(q),
            cell(r),
            cell(f),
            ratio(q, f),
            ratio(q, r)
        );
        let field = |v: Option<&f64>| v.map_or("null".into(), |v| format!("{v:.3}"));
        writeln!(
            json,
            "{{\"layout\":\"{layout}\",\"workload\":\"{workload}\",\"nodes\":{nodes},\"metric\":\"{metric}\",\"quorlock\":{},\"rslock\":{},\"floor\":{}}}",
            field(q),
            field(r),
            field(f)
        )?;
    }
    Ok(())
}

/// `--profile N CLIENT SECONDS`: only one client's throughput at N nodes, for
/// a profiler to watch (defaults: 5, quorlock, 5).
async fn profile(args: &[String], urls: &[String]) -> Result<(), AnyError> {
    let nodes: usize = args.first().and_then(|n| n.parse().ok()).unwrap_or(5);
    let name = args.get(1).map_or("quorlock", String::as_str);
    let seconds: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5.0);
    let urls = &urls[..nodes.clamp(1, urls.len())];
    let chosen: Vec<Client> = match name {
        // The read-write lock's holds.
        "quorlock-read" => vec![Client::QuorlockRead(quorlock::Redlock::new(urls)?)],
        "quorlock-write" => vec![Client::QuorlockWrite(quorlock::Redlock::new(urls)?)],
        _ => clients(urls, false)
            .await?
            .into_iter()
            .filter(|c| c.name() == name)
            .collect(),
    };
    let mut table = Table::default();
    let window = Duration::from_secs_f64(seconds);
    let chosen: Vec<(&Client, &str)> = chosen.iter().map(|c| (c, "throughput")).collect();
    throughput(&mut table, &chosen, nodes, window).await;
    print(&table, "", &mut std::io::sink())?;
    Ok(())
}

/// The value of `name` in one of our JSON lines (a string without quotes,
/// a number, or `null`).
fn json_field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let start = line.find(&format!("\"{name}\":"))? + name.len() + 3;
    let rest = &line[start..];
    match rest.strip_prefix('"') {
        Some(text) => text.split('"').next(),
        None => rest.split([',', '}']).next(),
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// The median over runs of `a`'s value over `b`'s in the same run (the
/// values are in file order, one per run); `None` unless both have the same
/// runs. With the throughput taken in turns, this is the ratio least moved
/// by the machine's speed drifting between runs.
fn run_ratio(values: &BTreeMap<&'static str, Vec<f64>>, a: &str, b: &str) -> Option<f64> {
    let (a, b) = (values.get(a)?, values.get(b)?);
    if a.len() != b.len() || a.is_empty() {
        return None;
    }
    let mut ratios: Vec<f64> = a
        .iter()
        .zip(b)
        .filter(|(_, b)| **b != 0.0)
        .map(|(a, b)| a / b)
        .collect();
    (ratios.len() == a.len()).then(|| median(&mut ratios))
}

/// `--summarize [--json OUT] FILE...`: the medians of several runs' JSON
/// lines (by layout, workload, N and metric), each with its spread (max -
/// min, as a percentage of the median), the ratios of the medians, and the
/// median of each run's own ratio ([`run_ratio`]).
fn summarize(files: &[String], json_path: Option<&str>) -> Result<(), AnyError> {
    type Key = (String, String, usize, String);
    let mut order: Vec<Key> = Vec::new();
    let mut runs: BTreeMap<Key, BTreeMap<&'static str, Vec<f64>>> = BTreeMap::new();
    for file in files {
        for line in std::fs::read_to_string(file)?.lines() {
            let text = |name| json_field(line, name).unwrap_or_default().to_owned();
            let key = (
                text("layout"),
                text("workload"),
                text("nodes").parse().unwrap_or(0),
                text("metric"),
            );
            if !runs.contains_key(&key) {
                order.push(key.clone());
            }
            let values = runs.entry(key).or_default();
            for name in ["quorlock", "rslock", "floor"] {
                if let Some(value) = json_field(line, name).and_then(|v| v.parse().ok()) {
                    values.entry(name).or_default().push(value);
                }
            }
        }
    }
    let mut json: Box<dyn Write> = match json_path {
        Some(path) => Box::new(std::fs::File::create(path)?),
        None => Box::new(std::io::sink()),
    };
    let mut medians: BTreeMap<Key, BTreeMap<&'static str, f64>> = BTreeMap::new();
    let mut layout_shown = None;
    for key in &order {
        let (layout, workload, nodes, metric) = key;
        if layout_shown != Some(layout) {
            println!("\n== layout: {layout} (median of the runs; spread = (max - min) / median;");
            println!(
                "   q/floor, q/rslock: of the medians; in runs: the median of each run's own ratio)"
            );
            println!(
                "{:<20} {:>2} {:<15} {:>18} {:>18} {:>18} {:>7} {:>8} {:>7} {:>8}",
                "workload",
                "N",
                "metric",
                "quorlock",
                "rslock",
                "floor",
                "q/floor",
                "q/rslock",
                "in runs",
                "in runs"
            );
            layout_shown = Some(layout);
        }
        let mut cells = Vec::new();
        let mut fields = Vec::new();
        for name in ["quorlock", "rslock", "floor"] {
            let mut values = runs[key].get(name).cloned().unwrap_or_default();
            if values.is_empty() {
                cells.push("-".to_owned());
                fields.push(format!("\"{name}\":null"));
                continue;
            }
            let (low, high) = values
                .iter()
                .fold((f64::MAX, f64::MIN), |(l, h), v| (l.min(*v), h.max(*v)));
            let mid = median(&mut values);
            let spread = if mid != 0.0 {
                (high - low) / mid * 100.0
            } else {
                0.0
            };
            medians.entry(key.clone()).or_default().insert(name, mid);
            cells.push(format!("{mid:.1} ±{spread:.0}%"));
            fields.push(format!(
                "\"{name}\":{mid:.3},\"{name}_spread_pct\":{spread:.1},\"{name}_runs\":{}",
                values.len()
            ));
        }
        let m = &medians.get(key).cloned().unwrap_or_default();
        let ratio = |a: &str, b: &str| match (m.get(a), m.get(b)) {
            (Some(a), Some(b)) if *b != 0.0 => format!("{:.2}", a / b),
            _ => "-".into(),
        };
        let in_runs = |b: &str| run_ratio(&runs[key], "quorlock", b);
        let show = |r: Option<f64>| r.map_or("-".into(), |r| format!("{r:.2}"));
        println!(
            "{workload:<20} {nodes:>2} {metric:<15} {:>18} {:>18} {:>18} {:>7} {:>8} {:>7} {:>8}",
            cells[0],
            cells[1],
            cells[2],
            ratio("quorlock", "floor"),
            ratio("quorlock", "rslock"),
            show(in_runs("floor")),
            show(in_runs("rslock")),
        );
        for (b, r) in [("floor", in_runs("floor")), ("rslock", in_runs("rslock"))] {
            if let Some(r) = r {
                fields.push(format!("\"quorlock_{b}_in_runs\":{r:.3}"));
            }
        }
        writeln!(
            json,
            "{{\"layout\":\"{layout}\",\"workload\":\"{workload}\",\"nodes\":{nodes},\"metric\":\"{metric}\",{}}}",
            fields.join(",")
        )?;
    }
    // The price of fencing in throughput, from the medians.
    for ((layout, workload, nodes, metric), values) in &medians {
        if workload != "throughput, fenced" {
            continue;
        }
        let plain = (
            layout.clone(),
            "throughput".to_owned(),
            *nodes,
            metric.clone(),
        );
        if let (Some(fenced), Some(unfenced)) = (
            values.get("quorlock"),
            medians.get(&plain).and_then(|v| v.get("quorlock")),
        ) {
            println!(
                "layout {layout}, N = {nodes}: fenced / unfenced throughput {:.2}",
                fenced / unfenced
            );
        }
    }
    Ok(())
}

async fn run(quick: bool, urls: &[String], json_path: &str, layout: &str) -> Result<(), AnyError> {
    let redis_dir = std::env::var("BENCH_REDIS_DIR").ok();
    let (cycles, window) = if quick {
        (50, Duration::from_millis(300))
    } else {
        (3000, Duration::from_secs(3))
    };
    let mut table = Table::default();
    for nodes in [1, 3, 5] {
        let urls = &urls[..nodes];
        let set = clients(urls, false).await?;
        eprintln!("N = {nodes}: latency");
        // Warm up: connect, load the scripts, fill the allocator's caches.
        latency(
            &mut Table::default(),
            &set,
            nodes,
            cycles.min(200),
            "latency",
        )
        .await;
        latency(&mut table, &set, nodes, cycles, "latency").await;
        // The price of fencing: the same latency workload with fencing on
        // (quorlock only; the ratio is to the same run's floor).
        let fenced = [Client::Quorlock(
            quorlock::Redlock::builder(urls).fencing(true).build()?,
        )];
        latency(
            &mut Table::default(),
            &fenced,
            nodes,
            cycles.min(200),
            "latency",
        )
        .await;
        latency(&mut table, &fenced, nodes, cycles, "latency, fenced").await;
        if let Some(floor) = table
            .rows
            .iter()
            .find(|((_, w, n, m), _)| w == "latency" && *n == nodes && m == "p50 µs")
            .and_then(|(_, v)| v.get("floor").copied())
        {
            table.put("latency, fenced", nodes, "p50 µs", "floor", floor);
        }
        // The read-write lock's two holds, beside the plain lock.
        let plain = quorlock::Redlock::builder(urls).build()?;
        let rw = [
            (Client::QuorlockRead(plain.clone()), "read"),
            (Client::QuorlockWrite(plain), "write"),
        ];
        for (client, kind) in &rw {
            let one = std::slice::from_ref(client);
            latency(
                &mut Table::default(),
                one,
                nodes,
                cycles.min(200),
                "latency",
            )
            .await;
            latency(&mut table, one, nodes, cycles, &format!("latency, {kind}")).await;
        }
        eprintln!("N = {nodes}: throughput");
        // Fenced and the read-write holds beside unfenced, in turns with the others.
        let rw_workloads: Vec<(&Client, String)> = rw
            .iter()
            .map(|(client, kind)| (client, format!("throughput, {kind}")))
            .collect();
        let both = (set.iter().map(|c| (c, "throughput")))
            .chain(fenced.iter().map(|c| (c, "throughput, fenced")))
            .chain(rw_workloads.iter().map(|(c, w)| (*c, w.as_str())))
            .collect::<Vec<_>>();
        throughput(&mut table, &both, nodes, window).await;
        eprintln!("N = {nodes}: allocations, requests");
        let alloc_cycles = cycles.min(1000);
        allocations(&mut table, &set, nodes, alloc_cycles, "uncontended").await;
        allocations(
            &mut table,
            &fenced,
            nodes,
            alloc_cycles,
            "uncontended, fenced",
        )
        .await;
        let request_cycles = cycles.min(200);
        requests(&mut table, &set, urls, request_cycles, "uncontended").await?;
        requests(
            &mut table,
            &fenced,
            urls,
            request_cycles,
            "uncontended, fenced",
        )
        .await?;
        eprintln!("N = {nodes}: contended");
        let contended_set = clients(urls, true).await?;
        contended(&mut table, &contended_set, urls, window).await?;
    }
    let set = clients(&urls[..5], false).await?;
    // Warm (connected, first checks done) before a node freezes.
    latency(&mut Table::default(), &set, 5, 20, "warm-up").await;
    match &redis_dir {
        Some(dir) => {
            let port = urls[4].rsplit(':').next().unwrap_or_default();
            let pid_file = std::path::Path::new(dir).join(port).join("redis.pid");
            eprintln!("N = 5: frozen node");
            signal(&pid_file, "STOP")?;
            // quorlock decides without the frozen node: enough cycles for a
            // p99. The others wait out their ~500 ms response timeout twice
            // per cycle, so they get a few.
            let frozen = "frozen node";
            latency(
                &mut table,
                &set[..1],
                5,
                if quick { 50 } else { 2000 },
                frozen,
            )
            .await;
            latency(&mut table, &set[1..], 5, if quick { 2 } else { 10 }, frozen).await;
            signal(&pid_file, "CONT")?;
        }
        None => eprintln!("BENCH_REDIS_DIR not set: the frozen-node workload is skipped"),
    }
    table.put("process", 0, "peak RSS KiB", "quorlock", peak_rss_kib());
    let mut json = std::fs::File::create(json_path)?;
    print(&table, layout, &mut json)?;
    println!("(JSON lines in {json_path})");
    Ok(())
}

fn main() -> std::process::ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let take = |args: &mut Vec<String>, flag: &str| -> Option<String> {
        let at = args.iter().position(|a| a == flag)?;
        (at + 1 < args.len()).then(|| {
            args.remove(at);
            args.remove(at)
        })
    };
    let json = take(&mut args, "--json");
    let layout = take(&mut args, "--layout").unwrap_or_else(|| "unpinned".to_owned());
    if args.first().map(String::as_str) == Some("--summarize") {
        return match summarize(&args[1..], json.as_deref()) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("bench: {err}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let quick = args.first().map(String::as_str) == Some("--quick");
    let profiling = args.first().map(String::as_str) == Some("--profile");
    let mut profile_args = Vec::new();
    if quick || profiling {
        args.remove(0);
    }
    if profiling {
        while args.first().is_some_and(|a| !a.starts_with("redis")) {
            profile_args.push(args.remove(0));
        }
    }
    if args.len() < 5 {
        eprintln!(
            "usage: bench [--quick] [--json PATH] [--layout NAME] URL URL URL URL URL\n       \
             bench --profile [N CLIENT SECONDS] URL x5\n       \
             bench --summarize [--json PATH] FILE..."
        );
        return std::process::ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("bench: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let json = json.unwrap_or_else(|| "bench.jsonl".to_owned());
    let outcome = if profiling {
        runtime.block_on(profile(&profile_args, &args))
    } else {
        runtime.block_on(run(quick, &args, &json, &layout))
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("bench: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

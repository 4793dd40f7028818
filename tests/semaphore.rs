//! The counting semaphore (`Redlock::semaphore`) against real servers:
//! three permits admit three holders on distinct slots and refuse a
//! fourth; a forgotten (dead) holder's permit comes back within its TTL;
//! bad input is refused. Across OS processes, 4 processes of 4 tasks on a
//! semaphore of 3 over five nodes never have more than 3 valid holders (each
//! holder reports the end of its validity, on the wall clock the processes
//! share, to a separate checker Redis, which counts the holders whose
//! validity has not ended) while the test kills a process that holds a
//! permit, freezes a node and restarts another; the shares are fair, and the
//! dead holder's slot is taken again within its TTL. The multi-process test
//! re-executes this binary as its workers, so this file has its own `main`
//! (harness = false).

mod support;

use std::collections::BTreeMap;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use quorlock::{Error, Redlock};
use support::harness::{Outcome, check};

/// Milliseconds since the Unix epoch: the clock the processes share.
fn wall_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// Three permits: three holders on three distinct slots; a fourth
/// `try_acquire` is refused as contended, and succeeds once one is given
/// back.
async fn three_permits_admit_three() -> Outcome {
    let nodes = support::servers(3);
    let redlock = support::builder(&nodes).build()?;
    let semaphore = redlock.semaphore("sem:three", 3)?;
    check(semaphore.permits() == 3, "three permits")?;
    let ttl = Duration::from_secs(5);
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(semaphore.acquire(ttl).await?);
    }
    let mut slots: Vec<u32> = held.iter().map(|permit| permit.slot()).collect();
    slots.sort_unstable();
    check(slots == [0, 1, 2], format!("slots {slots:?}"))?;
    let fourth = semaphore.try_acquire(ttl).await;
    check(
        fourth.as_ref().is_err_and(Error::is_contended),
        format!("a fourth permit: {fourth:?}"),
    )?;
    // Another client takes the one slot given back.
    let other = support::builder(&nodes)
        .build()?
        .semaphore("sem:three", 3)?;
    let given_back = held.remove(1);
    let slot = given_back.slot();
    given_back.release().await?;
    let again = other.try_acquire(ttl).await?;
    check(
        again.slot() == slot,
        format!("slot {} for {slot}", again.slot()),
    )?;
    again.release().await?;
    for permit in held {
        permit.release().await?;
    }
    Ok(())
}

/// A holder that dies (its permit forgotten, neither released nor
/// extended) gives its permit back when the TTL ends: a waiter on the
/// semaphore of one takes it within the TTL and a round or two.
async fn a_dead_holders_permit_comes_back_within_its_ttl() -> Outcome {
    let nodes = support::servers(3);
    let redlock = support::builder(&nodes)
        .acquire_timeout(Duration::from_secs(10))
        .build()?;
    let semaphore = redlock.semaphore("sem:dead", 1)?;
    let ttl = Duration::from_millis(600);
    let dead = semaphore.acquire(ttl).await?;
    let waiter = semaphore.clone();
    let waiting = tokio::spawn(async move { waiter.acquire(ttl).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let died = Instant::now();
    dead.forget();
    let permit = tokio::time::timeout(Duration::from_secs(10), waiting).await???;
    let took = died.elapsed();
    println!("  the waiter got the permit {took:?} after its holder died (TTL {ttl:?})");
    check(
        took <= ttl + Duration::from_millis(1500),
        format!("after {took:?}"),
    )?;
    permit.release().await?;
    Ok(())
}

/// Bad counts and names are refused before anything is sent.
async fn bad_input_is_refused() -> Outcome {
    let nodes = support::servers(1);
    let redlock = support::builder(&nodes).build()?;
    for permits in [0, 1025] {
        let made = redlock.semaphore("sem:bad", permits);
        check(
            matches!(made, Err(Error::InvalidResource { .. })),
            format!("{permits} permits: {made:?}"),
        )?;
    }
    for name in ["sem:x:quorlock-gate", "sem:x:quorlock-permit-2"] {
        let locked = redlock.try_lock(name, Duration::from_secs(1)).await;
        check(
            matches!(locked, Err(Error::InvalidResource { .. })),
            format!("a lock named {name}: {locked:?}"),
        )?;
    }
    let fine = redlock
        .try_lock("sem:x:quorlock-permit-", Duration::from_secs(1))
        .await?;
    fine.unlock().await?;
    Ok(())
}

const TTL: Duration = Duration::from_millis(400);
const TTL_MS: u64 = 400;
const PERMITS: u32 = 3;

/// Notes holder `ARGV[1]` as valid until `ARGV[2]` (wall ms) in the sorted
/// set `KEYS[1]`, counts the holders valid after `ARGV[3]` (now), and keeps
/// the highest count in `KEYS[2]`; returns the count.
const ENTER: &str = r#"redis.call("zadd", KEYS[1], ARGV[2], ARGV[1])
local live = redis.call("zcount", KEYS[1], "(" .. ARGV[3], "+inf")
if live > tonumber(redis.call("get", KEYS[2]) or "0") then
    redis.call("set", KEYS[2], live)
end
return live"#;

/// One worker process: `tasks` tasks for `seconds`, each taking a permit
/// (TTL 400 ms, kept alive), holding it 50–150 ms while reporting, every
/// 20 ms, its validity's end to the checker (which counts the valid
/// holders), then giving it back. Prints `pid acquisitions failed`.
async fn worker(tasks: usize, seconds: u64, checker: &str, nodes: &[String]) -> Outcome {
    let redlock = Redlock::builder(nodes)
        .node_timeout(Duration::from_millis(50))
        .acquire_timeout(Duration::from_secs(10))
        .build()?;
    let semaphore = redlock.semaphore("sem:shared", PERMITS)?;
    let checker = redis::Client::open(checker)?
        .get_multiplexed_async_connection()
        .await?;
    let (base, base_wall) = (Instant::now(), wall_ms());
    let end = Instant::now() + Duration::from_secs(seconds);
    let counts = Arc::new([0, 0].map(AtomicU64::new));
    let mut handles = Vec::new();
    for task in 0..tasks {
        let (semaphore, mut checker, counts) = (semaphore.clone(), checker.clone(), counts.clone());
        handles.push(tokio::spawn(async move {
            let enter = redis::Script::new(ENTER);
            let mut n = 0u64;
            while Instant::now() < end {
                let Ok(permit) = semaphore.acquire(TTL).await else {
                    counts[1].fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                n += 1;
                let id = format!("{}:{task}:{n}:{}", std::process::id(), permit.slot());
                let _ = permit.keep_alive();
                let _: redis::RedisResult<()> = redis::cmd("RPUSH")
                    .arg("starts")
                    .arg(format!(
                        "{} {} {}",
                        permit.slot(),
                        wall_ms(),
                        std::process::id()
                    ))
                    .query_async(&mut checker)
                    .await;
                let until =
                    Instant::now() + Duration::from_millis(50 + rand::random::<u64>() % 100);
                while Instant::now() < until && permit.is_valid() {
                    let since = permit.valid_until().saturating_duration_since(base);
                    let valid_to = base_wall + u64::try_from(since.as_millis()).unwrap_or(0);
                    let _: redis::RedisResult<i64> = enter
                        .key("live")
                        .key("top")
                        .arg(&id)
                        .arg(valid_to)
                        .arg(wall_ms())
                        .invoke_async(&mut checker)
                        .await;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                // It stops acting now.
                let _: redis::RedisResult<i64> = redis::cmd("ZREM")
                    .arg("live")
                    .arg(&id)
                    .query_async(&mut checker)
                    .await;
                let _ = permit.release().await;
                counts[0].fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for handle in handles {
        handle.await?;
    }
    redlock.flush().await;
    print!("{} ", std::process::id());
    support::harness::report(&*counts);
    Ok(())
}

/// The holder entries on the checker that are still valid: `(pid, slot)`.
fn valid_holders(
    checker: &support::RedisServer,
) -> Result<Vec<(u32, u32)>, support::harness::AnyError> {
    let now = wall_ms();
    let live: Vec<String> = redis::cmd("ZRANGEBYSCORE")
        .arg("live")
        .arg(format!("({now}"))
        .arg("+inf")
        .query(&mut checker.connection())?;
    Ok(live
        .iter()
        .filter_map(|id| {
            let parts: Vec<&str> = id.split(':').collect();
            Some((parts.first()?.parse().ok()?, parts.last()?.parse().ok()?))
        })
        .collect())
}

/// Four processes of four tasks on a semaphore of 3 over five nodes, for 8
/// s: the test kills a process while it holds a permit, then freezes one
/// node past the TTL and restarts another. The checker never counts more
/// than 3 valid holders; each surviving process gets at least 0.8 × the
/// mean of their acquisitions; the dead holder's slot is taken again within
/// the TTL and a round or two.
fn never_more_than_three_across_processes(exe: &std::path::Path) -> Outcome {
    let mut servers = support::servers(6);
    let checker = servers.remove(0);
    let nodes = support::urls(&servers);
    let workers: Vec<Child> = (0..4)
        .map(|_| {
            Command::new(exe)
                .args(["--worker", "4", "8", &checker.url()])
                .args(&nodes)
                .stdout(Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    std::thread::sleep(Duration::from_millis(2000));
    let pids: Vec<u32> = workers.iter().map(Child::id).collect();
    let mut victim = None;
    let started = Instant::now();
    while victim.is_none() && started.elapsed() < Duration::from_secs(3) {
        victim = valid_holders(&checker)?
            .into_iter()
            .find(|(pid, _)| pids.contains(pid));
    }
    let (killed, slot) = victim.ok_or("no holder to kill")?;
    let killed_at = wall_ms();
    Command::new("kill")
        .args(["-KILL", &killed.to_string()])
        .status()?;
    std::thread::sleep(Duration::from_millis(1000));
    servers[0].pause();
    std::thread::sleep(TTL + Duration::from_millis(200));
    servers[0].resume();
    std::thread::sleep(Duration::from_millis(500));
    servers[1].restart();
    let mut shares = Vec::new();
    for worker in workers {
        let pid = worker.id();
        let output = worker.wait_with_output()?;
        if pid == killed {
            continue;
        }
        let text = String::from_utf8_lossy(&output.stdout);
        check(
            output.status.success(),
            format!("worker failed: {} {text}", output.status),
        )?;
        let [_, acquired, failed] = support::harness::counts::<3>(&text)?;
        println!("  worker {pid}: {acquired} permits, {failed} failed calls");
        shares.push(acquired);
    }
    let mut connection = checker.connection();
    let top: u64 = redis::cmd("GET").arg("top").query(&mut connection)?;
    let starts: Vec<String> = redis::cmd("LRANGE")
        .arg("starts")
        .arg(0)
        .arg(-1)
        .query(&mut connection)?;
    println!(
        "  {} permits taken, at most {top} valid holders at once",
        starts.len()
    );
    check(
        top <= u64::from(PERMITS),
        format!("{top} valid holders at once"),
    )?;
    check(
        top == u64::from(PERMITS),
        format!("never {PERMITS} holders at once: {top}"),
    )?;
    let mean = shares.iter().sum::<u64>() as f64 / shares.len().max(1) as f64;
    let least = shares.iter().copied().min().unwrap_or(0);
    check(
        least as f64 >= 0.8 * mean,
        format!("shares {shares:?}: the least below 0.8 x the mean"),
    )?;
    // The killed holder's slot, taken again by another process.
    let mut taken: BTreeMap<u64, u32> = BTreeMap::new();
    for line in &starts {
        let fields: Vec<u64> = line
            .split(' ')
            .filter_map(|field| field.parse().ok())
            .collect();
        if let [again, at, pid] = fields[..]
            && again == u64::from(slot)
            && at >= killed_at
            && pid != u64::from(killed)
        {
            taken.insert(at, 0);
        }
    }
    let back = taken.keys().next().map(|at| at - killed_at);
    println!(
        "  the dead holder's slot {slot} was taken again {back:?} ms after the kill (TTL {TTL:?})"
    );
    check(
        back.is_some_and(|back| back <= TTL_MS + 1500),
        format!("slot {slot} back after {back:?} ms"),
    )
}

const TESTS: [&str; 4] = [
    "three_permits_admit_three",
    "a_dead_holders_permit_comes_back_within_its_ttl",
    "bad_input_is_refused",
    "never_more_than_three_across_processes",
];

fn run(name: &str, exe: &std::path::Path, runtime: &tokio::runtime::Runtime) -> Outcome {
    let test: std::pin::Pin<Box<dyn std::future::Future<Output = Outcome>>> = match name {
        "three_permits_admit_three" => Box::pin(three_permits_admit_three()),
        "a_dead_holders_permit_comes_back_within_its_ttl" => {
            Box::pin(a_dead_holders_permit_comes_back_within_its_ttl())
        }
        "bad_input_is_refused" => Box::pin(bad_input_is_refused()),
        _ => return never_more_than_three_across_processes(exe),
    };
    support::harness::block_on_within(runtime, Duration::from_secs(60), test)
}

fn main() -> ExitCode {
    support::harness::main_with_workers(
        &TESTS,
        &|args| Box::pin(worker(args.tasks, args.seconds, args.checker, args.nodes)),
        run,
    )
}

//! Read-write locks against real servers: readers share (8 readers in 4
//! processes hold together while no writer gets in), readers and writers in
//! several processes never overlap while minority nodes are frozen and
//! killed (a checker Redis counts both), a writer is not starved by a
//! continuous stream of readers, and, in one process, what each script
//! promises: independent reader TTLs, exclusion, a dead writer's intent
//! expiring, a writer's token, names kept for the lock's own keys. The
//! multi-process tests re-execute this binary as their workers, so this
//! file has its own `main` (harness = false).

mod support;

use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use quorlock::{Error, Redlock};
use support::RedisServer;
use support::harness::{AnyError, Outcome, check};

const TTL: Duration = Duration::from_secs(10);

/// A client for the workers: short retry delays, a long patience.
fn worker_client(nodes: &[String]) -> Result<Redlock, AnyError> {
    Ok(Redlock::builder(nodes)
        .node_timeout(Duration::from_millis(200))
        .retry_delay(Duration::from_millis(5))
        .retry_jitter(Duration::from_millis(5))
        .acquire_timeout(Duration::from_secs(10))
        .build()?)
}

/// The critical section on the checker: a reader counts itself in `readers`
/// and sees no writer; a writer counts itself in `writers`, alone, and sees
/// no reader. Holds `hold`, counts itself out. Whether all was as it must be.
async fn checked_hold(
    checker: &mut redis::aio::MultiplexedConnection,
    write: bool,
    hold: Duration,
) -> bool {
    let (mine, other) = if write {
        ("writers", "readers")
    } else {
        ("readers", "writers")
    };
    let inside: i64 = redis::cmd("INCR")
        .arg(mine)
        .query_async(checker)
        .await
        .unwrap_or(-1);
    let others: i64 = redis::cmd("GET")
        .arg(other)
        .query_async::<Option<i64>>(checker)
        .await
        .ok()
        .flatten()
        .unwrap_or(0);
    tokio::task::block_in_place(|| std::thread::sleep(hold));
    let _: redis::RedisResult<i64> = redis::cmd("DECR").arg(mine).query_async(checker).await;
    others == 0 && (!write || inside == 1) && inside >= 1
}

/// One worker process: `tasks` tasks take read (`role` "read") or write
/// holds of `rw:one` for `seconds`, or until all workers together made
/// `target` acquisitions (0: no target), each checked. Prints
/// `acquisitions failed violations`.
async fn worker(
    role: &str,
    (tasks, seconds, target): (usize, u64, i64),
    checker: &str,
    nodes: &[String],
) -> Outcome {
    let redlock = worker_client(nodes)?;
    let write = role == "write";
    let checker = redis::Client::open(checker)?
        .get_multiplexed_async_connection()
        .await?;
    redlock.lock("rw:warm-up", TTL).await?.unlock().await?;
    let end = Instant::now() + Duration::from_secs(seconds);
    let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (redlock, mut checker, counts) = (redlock.clone(), checker.clone(), counts.clone());
        handles.push(tokio::spawn(async move {
            while Instant::now() < end {
                let held = if write {
                    redlock.write("rw:one", TTL).await
                } else {
                    redlock.read("rw:one", TTL).await
                };
                let Ok(guard) = held else {
                    counts[1].fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let hold = Duration::from_millis(if write { 1 } else { 3 });
                if !checked_hold(&mut checker, write, hold).await {
                    counts[2].fetch_add(1, Ordering::Relaxed);
                }
                let _ = guard.unlock().await;
                counts[0].fetch_add(1, Ordering::Relaxed);
                // All workers together stop at `target` acquisitions (0: no target).
                let all: i64 = redis::cmd("INCR")
                    .arg("acquired")
                    .query_async(&mut checker)
                    .await
                    .unwrap_or(0);
                if target > 0 && all >= target {
                    break;
                }
                // A writer thinks between writes: writers that always wait
                // keep their intent up and readers out (see `Redlock::write`).
                if write {
                    tokio::time::sleep(Duration::from_millis(20)).await;
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

/// A process of two readers of `rw:share`: each holds its read hold until
/// the checker counts 8 readers (all four processes' readers at once), then
/// lets go.
async fn sharing_readers(checker: &str, nodes: &[String]) -> Outcome {
    let redlock = worker_client(nodes)?;
    let checker = redis::Client::open(checker)?
        .get_multiplexed_async_connection()
        .await?;
    let mut handles = Vec::new();
    for _ in 0..2 {
        let (redlock, mut checker) = (redlock.clone(), checker.clone());
        handles.push(tokio::spawn(async move {
            let guard = redlock.read("rw:share", Duration::from_secs(30)).await?;
            let _: i64 = redis::cmd("INCR")
                .arg("sharing")
                .query_async(&mut checker)
                .await?;
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                let together: i64 = redis::cmd("GET")
                    .arg("sharing")
                    .query_async(&mut checker)
                    .await?;
                if together >= 8 {
                    break;
                }
                if Instant::now() > deadline {
                    return Err::<(), AnyError>(format!("only {together} readers together").into());
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            let _: i64 = redis::cmd("INCR")
                .arg("leaving")
                .query_async(&mut checker)
                .await?;
            guard.unlock().await?;
            Ok(())
        }));
    }
    for handle in handles {
        handle.await??;
    }
    redlock.flush().await;
    Ok(())
}

/// Spawns this binary as a worker with `args`, then the node URLs.
fn spawn(exe: &std::path::Path, args: &[&str], nodes: &[String]) -> std::io::Result<Child> {
    Command::new(exe)
        .args(args)
        .args(nodes)
        .stdout(Stdio::piped())
        .spawn()
}

/// 8 readers in 4 processes hold `rw:share` together (the checker counts all
/// 8 at once), and no writer gets in meanwhile; then one does.
fn eight_readers_in_four_processes_hold_together(
    exe: &std::path::Path,
    runtime: &tokio::runtime::Runtime,
) -> Outcome {
    let servers = support::servers(4);
    let nodes = support::urls(&servers[1..]);
    let checker = servers[0].url();
    let mut readers: Vec<Child> = (0..4)
        .map(|_| spawn(exe, &["--sharing-readers", &checker], &nodes))
        .collect::<Result<_, _>>()?;
    let writer = worker_client(&nodes)?;
    let mut refused = 0;
    let count = |name: &str| -> redis::RedisResult<i64> {
        let value: Option<i64> = redis::cmd("GET")
            .arg(name)
            .query(&mut servers[0].connection())?;
        Ok(value.unwrap_or(0))
    };
    runtime.block_on(async {
        // From when all 8 are in until the first begins to leave: no writer.
        let started = Instant::now();
        while count("sharing")? < 8 {
            check(
                started.elapsed() < Duration::from_secs(60),
                "the 8 readers never held together",
            )?;
            check(
                readers.iter_mut().all(|r| matches!(r.try_wait(), Ok(None))),
                "a reader process ended early",
            )?;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        while count("leaving")? == 0 {
            match writer.try_write("rw:share", TTL).await {
                Err(Error::Contended { .. }) => refused += 1,
                other => {
                    if count("leaving")? == 0 {
                        return Err::<(), AnyError>(
                            format!("a writer while 8 readers held: {other:?}").into(),
                        );
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        check(
            refused >= 3,
            format!("only {refused} write attempts while they held"),
        )
    })?;
    for reader in readers {
        let output = reader.wait_with_output()?;
        check(
            output.status.success(),
            format!("a reader process failed: {}", output.status),
        )?;
    }
    println!("  8 readers held together; {refused} write attempts refused meanwhile");
    runtime.block_on(async {
        writer.write("rw:share", TTL).await?.unlock().await?;
        Ok(())
    })
}

/// Waits for a worker process of `role` and reads its counts
/// (`acquisitions failed violations`); it must have ended well and
/// acquired at least once.
fn worker_counts(role: &str, worker: Child) -> Result<[u64; 3], AnyError> {
    let output = worker.wait_with_output()?;
    let text = String::from_utf8_lossy(&output.stdout);
    check(
        output.status.success(),
        format!("{role} worker failed: {} {text}", output.status),
    )?;
    let [acquired, failed, violated] = support::harness::counts::<3>(&text)?;
    println!("  {role}: {acquired} acquisitions, {failed} failed calls, {violated} violations");
    check(acquired > 0, format!("a {role} process got nothing"))?;
    Ok([acquired, failed, violated])
}

/// Readers (3 processes x 4 tasks) and writers (2 processes x 1 task, each
/// pausing 20 ms between writes) on 5 nodes until they made 2,500
/// acquisitions together (at most 60 s), while minority nodes are frozen
/// (SIGSTOP) and killed and restarted, one minority at a time, again and
/// again: the checker never sees a writer with anyone else; every process
/// progresses.
fn readers_and_writers_never_overlap_under_faults(
    exe: &std::path::Path,
    runtime: &tokio::runtime::Runtime,
) -> Outcome {
    let mut servers = support::servers(6);
    let nodes = support::urls(&servers[1..]);
    let checker = servers[0].url();
    let roles = ["read", "read", "read", "write", "write"];
    let mut workers: Vec<Child> = roles
        .iter()
        .map(|role| {
            let tasks = if *role == "read" { "4" } else { "1" };
            spawn(
                exe,
                &["--worker", role, tasks, "60", "2500", &checker],
                &nodes,
            )
        })
        .collect::<Result<_, _>>()?;
    // Faults, one minority at a time, over and over until the workers end.
    let running = |workers: &mut [Child]| {
        workers
            .iter_mut()
            .any(|worker| matches!(worker.try_wait(), Ok(None)))
    };
    let mut rounds = 0;
    runtime.block_on(async {
        let pause = |d| tokio::time::sleep(Duration::from_millis(d));
        while running(&mut workers) {
            rounds += 1;
            pause(1000).await;
            servers[1].pause();
            pause(1000).await;
            servers[1].resume();
            servers[2].kill();
            pause(1000).await;
            servers[2].restart();
            servers[3].pause();
            servers[4].pause();
            pause(1000).await;
            servers[3].resume();
            servers[4].resume();
        }
    });
    println!("  {rounds} rounds of faults");
    let (mut total, mut violations) = (0, 0);
    for (role, worker) in roles.iter().zip(workers) {
        let [acquired, _, violated] = worker_counts(role, worker)?;
        total += acquired;
        violations += violated;
    }
    println!("  {total} acquisitions in all");
    check(violations == 0, format!("{violations} violations"))?;
    check(total >= 2500, format!("only {total} acquisitions"))
}

/// 80 writers (4 processes x 20 tasks, each thinking 20 ms between
/// writes) on one read-write lock until they made 400 write holds together
/// (at most 60 s): every writer is served within its 10 s patience, every
/// process gets some, and the checker never sees two writers together. (Writers whose intents split across the nodes, each
/// refused where another's is, served almost none: 13 writes in 30 s
/// among 67 writers in the chaos run with every fault.)
fn many_writers_in_four_processes_are_all_served(
    exe: &std::path::Path,
    _runtime: &tokio::runtime::Runtime,
) -> Outcome {
    let servers = support::servers(6);
    let nodes = support::urls(&servers[1..]);
    let checker = servers[0].url();
    let roles = ["write"; 4];
    let workers: Vec<Child> = roles
        .iter()
        .map(|role| {
            spawn(
                exe,
                &["--worker", role, "20", "60", "400", &checker],
                &nodes,
            )
        })
        .collect::<Result<_, _>>()?;
    let (mut writes, mut failed_writes, mut violations) = (0, 0, 0);
    for (role, worker) in roles.iter().zip(workers) {
        let [acquired, failed, violated] = worker_counts(role, worker)?;
        writes += acquired;
        failed_writes += failed;
        violations += violated;
    }
    check(violations == 0, format!("{violations} violations"))?;
    check(
        failed_writes == 0,
        format!("{failed_writes} write calls failed ({writes} served)"),
    )?;
    check(writes >= 300, format!("only {writes} write holds"))
}

/// A continuous stream of overlapping readers (3 processes x 3 tasks, each
/// holding 3 ms) does not keep a writer out: once its intent is on the
/// nodes, it gets in within the readers' holds and a retry delay (bounded
/// here generously by 2 s; the figure is printed).
fn a_writer_is_not_starved_by_readers(
    exe: &std::path::Path,
    runtime: &tokio::runtime::Runtime,
) -> Outcome {
    let servers = support::servers(4);
    let nodes = support::urls(&servers[1..]);
    let checker = servers[0].url();
    let readers: Vec<Child> = (0..3)
        .map(|_| spawn(exe, &["--worker", "read", "3", "5", "0", &checker], &nodes))
        .collect::<Result<_, _>>()?;
    let writer = worker_client(&nodes)?;
    let waits = runtime.block_on(async {
        writer.lock("rw:warm-up", TTL).await?.unlock().await?;
        // Let the stream of readers start.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let mut waits = Vec::new();
        for _ in 0..5 {
            let asked = Instant::now();
            let guard = writer.write("rw:one", TTL).await?;
            waits.push(asked.elapsed());
            guard.unlock().await?;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok::<_, AnyError>(waits)
    })?;
    for reader in readers {
        let output = reader.wait_with_output()?;
        let text = String::from_utf8_lossy(&output.stdout);
        check(output.status.success(), format!("reader failed: {text}"))?;
        println!("  readers: {}", text.trim());
    }
    let longest = waits.iter().max().copied().unwrap_or_default();
    println!("  the writer waited {waits:?} among the readers");
    check(
        longest < Duration::from_secs(2),
        format!("a writer waited {longest:?}"),
    )
}

/// A reader's first round runs no script on Redis 7.0 and later (see
/// `read_round.rs`): 32 read holds, one after another, on 3 nodes run the
/// read script only in the rounds that prune (one in 16) and leave nothing
/// behind, nor does a reader refused beside a writer; a short reader's set, joined by a long reader, lives as long as
/// the long one (`PEXPIREAT GT`), and a set made by a reader has an expiry
/// (`PEXPIRE NX`). Before 7.0 every round is the script.
async fn a_readers_first_round_runs_no_script() -> Outcome {
    const HOLDS: u64 = 32;
    let nodes = support::servers(3);
    let redlock = support::builder(&nodes).build()?;
    let readers = [redlock.key("t:p")?, b":quorlock-read".to_vec()].concat();
    redlock.read("t:warm-up", TTL).await?.unlock().await?;
    support::reset_stats(&nodes);
    for _ in 0..HOLDS {
        redlock.read("t:p", TTL).await?.unlock().await?;
    }
    let calls = support::command_calls(&nodes);
    let count = |name: &str| calls.get(name).copied().unwrap_or(0);
    let (scripts, pexpireat) = (count("evalsha"), count("pexpireat"));
    if support::is_redis_before_7() {
        support::adapted(
            "a_readers_first_round_runs_no_script",
            "Redis before 7.0 has no PEXPIRE NX or GT: every reader's round is the script",
        );
        check(
            scripts >= HOLDS * 3,
            format!("{scripts} scripts: {calls:?}"),
        )?;
    } else {
        // A round on a node that has not answered yet may be skipped; one
        // in 16 prunes (the script).
        check(
            pexpireat >= HOLDS * 3 / 2 && scripts <= HOLDS * 3 / 4,
            format!("{pexpireat} rounds without a script, {scripts} with: {calls:?}"),
        )?;
    }
    for node in &nodes {
        check(node.pttl(&readers) == -2, "a released reader's set is gone")?;
    }
    // Refused by a writer, a reader's round takes its entry back.
    let writer = redlock.write("t:p", TTL).await?;
    let refused = redlock.try_read("t:p", TTL).await;
    check(
        matches!(refused, Err(Error::Contended { .. })),
        format!("a reader beside a writer: {refused:?}"),
    )?;
    for node in &nodes {
        check(node.pttl(&readers) == -2, "a refused reader left its entry")?;
    }
    writer.unlock().await?;
    let short = redlock.read("t:p", Duration::from_secs(2)).await?;
    let long = redlock.read("t:p", Duration::from_secs(60)).await?;
    // A node that holds both (under load, a round may skip one).
    let both = nodes.iter().find(|node| {
        redis::cmd("ZCARD")
            .arg(&readers)
            .query::<i64>(&mut node.connection())
            .is_ok_and(|n| n == 2)
    });
    let node = both.ok_or("no node holds both readers")?;
    let pttl = node.pttl(&readers);
    check(
        (50_000..=61_000).contains(&pttl),
        format!("the set lives as long as the long reader, and no longer: {pttl}"),
    )?;
    long.unlock().await?;
    short.unlock().await?;
    Ok(())
}

/// Each reader's entry ends on its own: a short reader's release or extension
/// leaves a long reader's end alone, and the set lives as long as the latest.
async fn reader_holds_end_on_their_own() -> Outcome {
    let nodes = support::servers(3);
    let redlock = support::builder(&nodes).build()?;
    let readers = [redlock.key("t:r")?, b":quorlock-read".to_vec()].concat();
    let long = redlock.read("t:r", Duration::from_secs(60)).await?;
    let mut short = redlock.read("t:r", Duration::from_secs(2)).await?;
    let ends = |node: &RedisServer| -> Vec<i64> {
        redis::cmd("ZRANGE")
            .arg(&readers)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query::<Vec<(String, i64)>>(&mut node.connection())
            .unwrap_or_default()
            .into_iter()
            .map(|(_, end)| end)
            .collect()
    };
    // A node that holds both entries (under load, a round may skip one).
    let node = nodes
        .iter()
        .find(|node| ends(node).len() == 2)
        .ok_or("no node holds both readers")?;
    let before = ends(node);
    short.extend(Duration::from_secs(1)).await?;
    let after = ends(node);
    check(
        after.iter().max() == before.iter().max(),
        format!("the long reader's end unchanged: {before:?} -> {after:?}"),
    )?;
    let pttl = node.pttl(&readers);
    check(
        pttl > 50_000,
        format!("the set lives as long as the long reader: {pttl}"),
    )?;
    short.unlock().await?;
    check(
        support::eventually(Duration::from_secs(5), || ends(node).len() == 1).await,
        "the short reader left alone",
    )?;
    check(
        long.remaining() > Duration::from_secs(50),
        "the long reader still holds",
    )?;
    long.unlock().await?;
    check(
        support::eventually(Duration::from_secs(5), || {
            nodes.iter().all(|node| ends(node).is_empty())
        })
        .await,
        "no reader left",
    )
}

/// A writer excludes readers and writers; a reader excludes writers; a plain
/// lock on the same name is another lock.
async fn writers_and_readers_exclude_each_other() -> Outcome {
    let nodes = support::servers(3);
    let redlock = support::builder(&nodes).build()?;
    // Each outcome must be a refusal because the lock is held.
    let refused = |outcome: quorlock::Result<quorlock::LockGuard>, what: &str| {
        let held = matches!(outcome, Err(Error::Contended { .. }));
        check(held, format!("{what}: {outcome:?}"))
    };
    let writer = redlock.write("t:x", TTL).await?;
    refused(redlock.try_read("t:x", TTL).await, "read under a writer")?;
    refused(redlock.try_write("t:x", TTL).await, "write under a writer")?;
    let plain = redlock.try_lock("t:x", TTL).await?;
    plain.unlock().await?;
    writer.unlock().await?;
    let reader = redlock.try_read("t:x", TTL).await?;
    refused(redlock.try_write("t:x", TTL).await, "write under a reader")?;
    let second = redlock.try_read("t:x", TTL).await?;
    reader.unlock().await?;
    second.unlock().await?;
    redlock.try_write("t:x", TTL).await?.unlock().await?;
    Ok(())
}

/// A writer's intent keeps new readers out; one that nobody renews (its
/// writer died) stops blocking them when it expires; a `write` call that
/// gives up removes its intent from every node.
async fn a_writers_intent_blocks_readers_until_it_ends() -> Outcome {
    let nodes = support::servers(3);
    let redlock = support::builder(&nodes)
        .retry_delay(Duration::from_millis(20))
        .acquire_timeout(Duration::from_millis(400))
        .build()?;
    let intent = [redlock.key("t:i")?, b":quorlock-intent".to_vec()].concat();
    for node in &nodes {
        node.set_px(&intent, "a-dead-writer", 500);
    }
    let read = redlock.try_read("t:i", TTL).await;
    check(
        matches!(read, Err(Error::Contended { .. })),
        format!("read under an intent: {read:?}"),
    )?;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let reader = redlock.try_read("t:i", TTL).await?;
    // A writer that gives up behind this reader leaves no intent.
    let write = redlock.write("t:i", TTL).await;
    check(
        matches!(write, Err(Error::Contended { .. })),
        format!("write under a reader: {write:?}"),
    )?;
    redlock.flush().await;
    check(
        nodes.iter().all(|node| node.get(&intent).is_none()),
        "the intent was removed",
    )?;
    redlock.try_read("t:i", TTL).await?.unlock().await?;
    reader.unlock().await?;
    Ok(())
}

/// A waiting writer's first round sets the writer's key and only then
/// looks for readers and intents (no script): where it finds a reader it is
/// refused and gives back what it set before it answers, so a writer that
/// gives up behind a reader leaves no writer's key on any node (here one
/// node has no reader, where its rounds are granted and released), and the
/// reader still holds and extends.
async fn a_writers_first_round_gives_back_what_a_reader_refused() -> Outcome {
    let nodes = support::servers(3);
    let redlock = support::builder(&nodes)
        .retry_delay(Duration::from_millis(20))
        .acquire_timeout(Duration::from_millis(400))
        .build()?;
    let key = redlock.key("t:f")?;
    let [writer_key, readers] =
        [":quorlock-write", ":quorlock-read"].map(|suffix| [&key, suffix.as_bytes()].concat());
    let mut reader = redlock.read("t:f", TTL).await?;
    redis::cmd("DEL")
        .arg(&readers)
        .query::<()>(&mut nodes[2].connection())?;
    let write = redlock.write("t:f", TTL).await;
    check(
        matches!(write, Err(Error::Contended { .. })),
        format!("write under a reader: {write:?}"),
    )?;
    redlock.flush().await;
    let left: Vec<_> = nodes.iter().map(|node| node.get(&writer_key)).collect();
    check(
        left.iter().all(Option::is_none),
        format!("no writer's key left: {left:?}"),
    )?;
    reader.extend(TTL).await?;
    reader.unlock().await?;
    redlock.write("t:f", TTL).await?.unlock().await?;
    Ok(())
}

/// With fencing on, each writer's token is above the last; a reader has none.
async fn writers_get_rising_fencing_tokens() -> Outcome {
    let nodes = support::servers(3);
    let redlock = support::builder(&nodes).fencing(true).build()?;
    let mut last = 0;
    for _ in 0..3 {
        let writer = redlock.write("t:f", TTL).await?;
        let token = writer.fencing_token().ok_or("a writer has a token")?;
        check(token > last, format!("{token} above {last}"))?;
        last = token;
        writer.unlock().await?;
        let reader = redlock.read("t:f", TTL).await?;
        check(reader.fencing_token().is_none(), "a reader has none")?;
        reader.unlock().await?;
    }
    Ok(())
}

/// `rw_status` shows each node's live readers, the writer and a waiting
/// writer's intent.
async fn the_status_shows_readers_writers_and_intent() -> Outcome {
    let nodes = support::servers(3);
    let redlock = support::builder(&nodes).build()?;
    let free = redlock.rw_status("t:s").await?;
    check(
        free.no_readers() && free.writer.is_free() && free.intent.is_free(),
        format!("free: {free}"),
    )?;
    let readers = [
        redlock.read("t:s", TTL).await?,
        redlock.read("t:s", TTL).await?,
    ];
    let read = redlock.rw_status("t:s").await?;
    check(
        read.readers.iter().all(|(_, count)| *count == Some(2))
            && read.readers_on_quorum()
            && read.writer.is_free(),
        format!("two readers: {read}"),
    )?;
    // A writer that waits behind them leaves its intent.
    let waiting = redlock.clone();
    let writer = tokio::spawn(async move { waiting.write("t:s", TTL).await });
    let mut shown = false;
    for _ in 0..100 {
        if redlock.rw_status("t:s").await?.intent.is_held() {
            shown = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    check(shown, "the waiting writer's intent was never shown")?;
    for reader in readers {
        reader.unlock().await?;
    }
    let writer = writer.await??;
    let written = redlock.rw_status("t:s").await?;
    check(
        written.writer.is_held() && written.no_readers(),
        format!("a writer: {written}"),
    )?;
    writer.unlock().await?;
    Ok(())
}

/// Names whose keys would be a read-write lock's own keys are refused.
async fn names_of_the_locks_own_keys_are_refused() -> Outcome {
    let nodes = support::servers(1);
    let redlock = support::builder(&nodes).build()?;
    for name in [
        "a:quorlock-write",
        "a:quorlock-read",
        "a:quorlock-intent",
        "a:quorlock-writers",
    ] {
        let plain = redlock.try_lock(name, TTL).await;
        check(
            matches!(plain, Err(Error::InvalidResource { .. })),
            format!("{name}: {plain:?}"),
        )?;
    }
    Ok(())
}

const TESTS: [&str; 12] = [
    "many_writers_in_four_processes_are_all_served",
    "reader_holds_end_on_their_own",
    "the_status_shows_readers_writers_and_intent",
    "writers_and_readers_exclude_each_other",
    "a_writers_intent_blocks_readers_until_it_ends",
    "writers_get_rising_fencing_tokens",
    "names_of_the_locks_own_keys_are_refused",
    "eight_readers_in_four_processes_hold_together",
    "a_writer_is_not_starved_by_readers",
    "readers_and_writers_never_overlap_under_faults",
    "a_writers_first_round_gives_back_what_a_reader_refused",
    "a_readers_first_round_runs_no_script",
];

type Test = std::pin::Pin<Box<dyn std::future::Future<Output = Outcome>>>;

fn run(name: &str, exe: &std::path::Path, runtime: &tokio::runtime::Runtime) -> Outcome {
    let limit = Duration::from_secs(120);
    let bounded = |test: Test| {
        runtime.block_on(async {
            tokio::time::timeout(limit, test)
                .await
                .unwrap_or_else(|_| Err(format!("not done in {limit:?}").into()))
        })
    };
    match name {
        "reader_holds_end_on_their_own" => bounded(Box::pin(reader_holds_end_on_their_own())),
        "the_status_shows_readers_writers_and_intent" => {
            bounded(Box::pin(the_status_shows_readers_writers_and_intent()))
        }
        "writers_and_readers_exclude_each_other" => {
            bounded(Box::pin(writers_and_readers_exclude_each_other()))
        }
        "a_writers_intent_blocks_readers_until_it_ends" => {
            bounded(Box::pin(a_writers_intent_blocks_readers_until_it_ends()))
        }
        "writers_get_rising_fencing_tokens" => {
            bounded(Box::pin(writers_get_rising_fencing_tokens()))
        }
        "a_writers_first_round_gives_back_what_a_reader_refused" => bounded(Box::pin(
            a_writers_first_round_gives_back_what_a_reader_refused(),
        )),
        "a_readers_first_round_runs_no_script" => {
            bounded(Box::pin(a_readers_first_round_runs_no_script()))
        }
        "names_of_the_locks_own_keys_are_refused" => {
            bounded(Box::pin(names_of_the_locks_own_keys_are_refused()))
        }
        "eight_readers_in_four_processes_hold_together" => {
            eight_readers_in_four_processes_hold_together(exe, runtime)
        }
        "a_writer_is_not_starved_by_readers" => a_writer_is_not_starved_by_readers(exe, runtime),
        "many_writers_in_four_processes_are_all_served" => {
            many_writers_in_four_processes_are_all_served(exe, runtime)
        }
        _ => readers_and_writers_never_overlap_under_faults(exe, runtime),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = support::runtime().expect("tokio runtime");
    match args.first().map(String::as_str) {
        Some("--worker") => {
            let outcome = match &args[1..] {
                [role, tasks, seconds, target, checker, nodes @ ..] => {
                    match (tasks.parse(), seconds.parse(), target.parse()) {
                        (Ok(tasks), Ok(seconds), Ok(target)) => {
                            runtime.block_on(worker(role, (tasks, seconds, target), checker, nodes))
                        }
                        _ => Err("bad TASKS, SECONDS or TARGET".into()),
                    }
                }
                _ => Err("--worker ROLE TASKS SECONDS TARGET CHECKER NODE...".into()),
            };
            return support::harness::exit("worker", outcome);
        }
        Some("--sharing-readers") => {
            let outcome = match &args[1..] {
                [checker, nodes @ ..] => runtime.block_on(sharing_readers(checker, nodes)),
                _ => Err("--sharing-readers CHECKER NODE...".into()),
            };
            return support::harness::exit("sharing readers", outcome);
        }
        _ => {}
    }
    let exe = std::env::current_exe().expect("own executable");
    support::harness::run_tests(&args, &TESTS, |name| run(name, &exe, &runtime))
}

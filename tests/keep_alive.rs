//! A guard that keeps itself extended in the background
//! (`LockGuard::keep_alive`) and tells its holder the moment the lock can no
//! longer be trusted (`LockGuard::lost`), against real servers: a kept lock
//! outlives its TTL and keeps others out; the loss is told for a refusal,
//! for nodes that stopped answering (no sooner than the validity's end), for
//! the TTL without a keeper, for the hold limits and for the release; a
//! manual extension goes beside the keeper. Across OS processes, holders
//! whose work outlasts the TTL by far never overlap (a separate checker
//! Redis counts them) while a node is frozen now and then. The
//! multi-process test re-executes this binary as its workers, so this file
//! has its own `main` (harness = false).

mod support;

use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use quorlock::{Error, LostReason, Redlock};
use support::harness::{Outcome, check};

/// The reason of a `LockLost` error, or a test failure.
fn reason(err: &Error) -> Result<LostReason, support::harness::AnyError> {
    err.lost_reason()
        .cloned()
        .ok_or_else(|| format!("not a LockLost error: {err}").into())
}

/// Whether `lost` is still pending after `wait`.
async fn still_pending(lost: impl std::future::Future<Output = Error>, wait: Duration) -> bool {
    tokio::time::timeout(wait, lost).await.is_err()
}

/// A kept lock outlives several TTLs without `run`, keeps another client
/// out, and its `lost` futures stay pending; unlocking tells them
/// `Released`, and the keys are gone.
async fn a_kept_lock_outlives_its_ttl() -> Outcome {
    let nodes = support::servers(5);
    let redlock = support::builder(&nodes).build()?;
    let other = support::builder(&nodes).build()?;
    let ttl = Duration::from_millis(300);
    let guard = redlock.lock("kept:long", ttl).await?;
    guard.keep_alive()?;
    guard.keep_alive()?; // a second call adds no second keeper
    let lost = guard.lost();
    let watcher = tokio::spawn(guard.lost()); // Send + 'static
    check(
        still_pending(guard.lost(), Duration::from_millis(1200)).await,
        "lost resolved while the keeper kept the lock",
    )?;
    check(guard.is_valid(), "valid after four TTLs")?;
    check(
        guard.extensions() >= 3,
        format!("extended {} times", guard.extensions()),
    )?;
    let refused = other.try_lock("kept:long", ttl).await;
    check(
        refused.as_ref().is_err_and(Error::is_contended),
        format!("another client is kept out: {refused:?}"),
    )?;
    let key = redlock.key("kept:long")?;
    guard.unlock().await?;
    for err in [lost.await, watcher.await?] {
        check(
            reason(&err)? == LostReason::Released,
            format!("after unlock: {err}"),
        )?;
    }
    check(
        support::holders(&nodes, &key).iter().all(Option::is_none),
        "the keys are released",
    )?;
    other.try_lock("kept:long", ttl).await?.unlock().await?;
    Ok(())
}

/// A kept lock whose keys another holder took on every node: the next
/// extension is refused by the quorum, `lost` tells `ExtensionRefused`
/// within the validity, and the guard reports zero remaining.
async fn a_refusal_is_told_at_once() -> Outcome {
    let nodes = support::servers(3);
    let redlock = support::builder(&nodes).build()?;
    let ttl = Duration::from_millis(900);
    let guard = redlock.lock("kept:taken", ttl).await?;
    let first_validity = guard.valid_until();
    guard.keep_alive()?;
    let key = redlock.key("kept:taken")?;
    for node in &nodes {
        node.set_px(&key, "someone-else", 60_000);
    }
    let err = guard.lost().await;
    check(
        matches!(reason(&err)?, LostReason::ExtensionRefused { .. }),
        format!("told: {err}"),
    )?;
    check(
        Instant::now() < first_validity,
        "told at the first extension, before the validity ran out",
    )?;
    check(guard.remaining().is_zero(), "zero remaining once refused")?;
    check(!guard.is_valid(), "not valid once refused")?;
    drop(guard);
    redlock.flush().await;
    check(
        (nodes.iter()).all(|node| node.get(&key) == Some(b"someone-else".to_vec())),
        "the other holder's keys are left alone",
    )
}

/// A kept lock on three nodes, two of them frozen: the extensions get no
/// quorum, and `lost` tells `Unreachable` once the validity ends, not
/// before; the guard's validity then is over.
async fn unreachable_nodes_are_told_at_the_validity_end() -> Outcome {
    let nodes = support::servers(3);
    let redlock = support::builder(&nodes)
        .node_timeout(Duration::from_millis(50))
        .build()?;
    let ttl = Duration::from_millis(600);
    let guard = redlock.lock("kept:frozen", ttl).await?;
    guard.keep_alive()?;
    nodes[1].pause();
    nodes[2].pause();
    let started = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await;
    let told_at = Instant::now();
    nodes[1].resume();
    nodes[2].resume();
    let err = err.map_err(|_| "lost not told within 5 s")?;
    check(
        matches!(reason(&err)?, LostReason::Unreachable { .. }),
        format!("told: {err}"),
    )?;
    check(
        told_at >= guard.valid_until(),
        format!(
            "told {:?} before the validity's end",
            guard.valid_until().saturating_duration_since(told_at)
        ),
    )?;
    check(
        told_at.duration_since(started) < ttl + Duration::from_secs(1),
        format!("told late: {:?}", told_at.duration_since(started)),
    )?;
    check(!guard.is_valid(), "the validity is over")
}

/// Without a keeper nothing extends the lock: `lost` tells `Expired` at
/// the end of the TTL's validity.
async fn without_a_keeper_the_ttl_is_told() -> Outcome {
    let nodes = support::servers(3);
    let redlock = support::builder(&nodes).build()?;
    let guard = redlock
        .lock("kept:none", Duration::from_millis(400))
        .await?;
    let err = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .map_err(|_| "lost not told within 5 s")?;
    check(reason(&err)? == LostReason::Expired, format!("told: {err}"))?;
    check(
        Instant::now() >= guard.valid_until(),
        "not before the validity's end",
    )?;
    check(guard.extensions() == 0, "nothing extended the lock")
}

/// `max_hold` bounds a kept lock: the keeper stops extending, and `lost`
/// tells `LimitReached` when the last validity ends.
async fn the_hold_limit_ends_a_kept_lock() -> Outcome {
    let nodes = support::servers(3);
    let redlock = support::builder(&nodes)
        .max_hold(Duration::from_millis(900))
        .build()?;
    let guard = redlock
        .lock("kept:limit", Duration::from_millis(300))
        .await?;
    guard.keep_alive()?;
    let err = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .map_err(|_| "lost not told within 5 s")?;
    check(
        reason(&err)? == LostReason::LimitReached,
        format!("told: {err}"),
    )?;
    let held = Instant::now().duration_since(guard.acquired_at());
    check(
        held <= Duration::from_millis(900) + Duration::from_millis(200),
        format!("held {held:?}, past max_hold"),
    )?;
    check(guard.extensions() >= 1, "extended within the limit")
}

/// A manual extension beside the keeper: it succeeds, its TTL becomes the
/// lease's, and the keeper goes on with that TTL.
async fn a_manual_extension_goes_beside_the_keeper() -> Outcome {
    let nodes = support::servers(3);
    let redlock = support::builder(&nodes).build()?;
    let mut guard = redlock
        .lock("kept:manual", Duration::from_millis(300))
        .await?;
    guard.keep_alive()?;
    tokio::time::sleep(Duration::from_millis(250)).await;
    guard.extend(Duration::from_millis(1500)).await?;
    check(
        guard.ttl() == Duration::from_millis(1500),
        format!("ttl {:?}", guard.ttl()),
    )?;
    let after_manual = guard.extensions();
    tokio::time::sleep(Duration::from_millis(1400)).await;
    check(guard.is_valid(), "still valid")?;
    check(
        guard.extensions() > after_manual,
        "the keeper extended again",
    )?;
    let key = redlock.key("kept:manual")?;
    let pttl = nodes[0].pttl(&key);
    check(
        pttl > 300,
        format!("the keeper uses the new TTL: pttl {pttl}"),
    )?;
    guard.unlock().await?;
    Ok(())
}

/// `run` on a kept guard: the work outlasts the TTL, with the background
/// keeper as the only one.
async fn run_on_a_kept_guard() -> Outcome {
    let nodes = support::servers(3);
    let redlock = support::builder(&nodes).auto_extend(false).build()?;
    let mut guard = redlock.lock("kept:run", Duration::from_millis(300)).await?;
    guard.keep_alive()?; // extends even with auto_extend off
    let output = guard
        .run(tokio::time::sleep(Duration::from_millis(1000)))
        .await;
    check(output.is_ok(), format!("run: {output:?}"))?;
    check(guard.extensions() >= 2, "the keeper extended")?;
    guard.unlock().await?;
    Ok(())
}

const TTL: Duration = Duration::from_millis(150);
const HOLD: Duration = Duration::from_millis(300);

/// One worker process: `tasks` tasks, for `seconds`, each lock with a
/// 150 ms TTL, `keep_alive`, and hold for 300 ms (twice the TTL) on the
/// checker, the work raced against `lost`. Prints `acquisitions lost
/// overlaps failed`.
async fn worker(tasks: usize, seconds: u64, checker: &str, nodes: &[String]) -> Outcome {
    let redlock = Redlock::builder(nodes)
        .node_timeout(Duration::from_millis(30))
        .acquire_timeout(Duration::from_secs(10))
        .build()?;
    let checker = redis::Client::open(checker)?
        .get_multiplexed_async_connection()
        .await?;
    let warm_up = format!("kept:warm-up:{}", std::process::id());
    support::lock_once(&redlock, &warm_up, TTL).await;
    let end = Instant::now() + Duration::from_secs(seconds);
    let counts = Arc::new([0, 0, 0, 0].map(AtomicU64::new));
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (redlock, mut checker, counts) = (redlock.clone(), checker.clone(), counts.clone());
        handles.push(tokio::spawn(async move {
            while Instant::now() < end {
                let Ok(guard) = redlock.lock("kept:shared", TTL).await else {
                    counts[3].fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                if guard.keep_alive().is_err() {
                    counts[3].fetch_add(1, Ordering::Relaxed);
                }
                // The critical section, on the checker: this holder must be
                // the only one inside from its start to its end.
                let inside: i64 = redis::cmd("INCR")
                    .arg("holders")
                    .query_async(&mut checker)
                    .await
                    .unwrap_or(-1);
                tokio::select! {
                    biased;
                    err = guard.lost() => {
                        eprintln!("  lost: {err}");
                        counts[1].fetch_add(1, Ordering::Relaxed);
                    }
                    _ = tokio::time::sleep(HOLD) => {}
                }
                let at_end: i64 = redis::cmd("GET")
                    .arg("holders")
                    .query_async(&mut checker)
                    .await
                    .unwrap_or(-1);
                let _: redis::RedisResult<i64> = redis::cmd("DECR")
                    .arg("holders")
                    .query_async(&mut checker)
                    .await;
                if inside != 1 || at_end != 1 {
                    counts[2].fetch_add(1, Ordering::Relaxed);
                }
                let _ = guard.unlock().await;
                counts[0].fetch_add(1, Ordering::Relaxed);
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

/// Three processes of three tasks on five nodes hold one resource for twice
/// its TTL each time, kept by `keep_alive`, while the test freezes one node
/// at a time (a quorum stays). No two holders overlap on the checker, few
/// holds are lost (each loss is told, and its holder stops; the workers
/// print why), and every process gets the lock.
fn kept_holds_across_processes_never_overlap(exe: &std::path::Path) -> Outcome {
    let mut servers = support::servers(6);
    let checker = servers.remove(0);
    let nodes = support::urls(&servers);
    let workers: Vec<_> = (0..3)
        .map(|_| {
            Command::new(exe)
                .args(["--worker", "3", "5", &checker.url()])
                .args(&nodes)
                .stdout(Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    // One node frozen at a time, for 400 ms in each second.
    let started = Instant::now();
    let mut frozen = 0;
    while started.elapsed() < Duration::from_millis(4500) {
        std::thread::sleep(Duration::from_millis(600));
        let node = &servers[frozen % servers.len()];
        node.pause();
        std::thread::sleep(Duration::from_millis(400));
        node.resume();
        frozen += 1;
    }
    let (mut total, mut least, mut lost, mut overlaps) = (0, u64::MAX, 0, 0);
    for worker in workers {
        let output = worker.wait_with_output()?;
        let text = String::from_utf8_lossy(&output.stdout);
        check(
            output.status.success(),
            format!("worker failed: {} {text}", output.status),
        )?;
        let [acquired, lost_here, overlapped, failed] = support::harness::counts::<4>(&text)?;
        println!(
            "  worker: {acquired} holds, {lost_here} lost, {overlapped} overlaps, {failed} failed calls"
        );
        total += acquired;
        least = least.min(acquired);
        lost += lost_here;
        overlaps += overlapped;
    }
    println!("  {total} holds of 2 TTLs each, {frozen} freezes");
    check(overlaps == 0, format!("{overlaps} overlaps"))?;
    // A hold won on exactly a quorum, one of whose nodes is then frozen,
    // cannot be extended (an extension renews only keys that hold our
    // token): `lost` tells it, and the holder stops. That is rare; a
    // keeper that did not extend would lose every hold.
    check(
        lost * 4 <= total,
        format!("{lost} of {total} holds lost with a quorum up"),
    )?;
    check(least >= 2, format!("a process got {least} holds"))
}

const TESTS: [&str; 8] = [
    "a_kept_lock_outlives_its_ttl",
    "a_refusal_is_told_at_once",
    "unreachable_nodes_are_told_at_the_validity_end",
    "without_a_keeper_the_ttl_is_told",
    "the_hold_limit_ends_a_kept_lock",
    "a_manual_extension_goes_beside_the_keeper",
    "run_on_a_kept_guard",
    "kept_holds_across_processes_never_overlap",
];

fn run(name: &str, exe: &std::path::Path, runtime: &tokio::runtime::Runtime) -> Outcome {
    let test: std::pin::Pin<Box<dyn std::future::Future<Output = Outcome>>> = match name {
        "a_kept_lock_outlives_its_ttl" => Box::pin(a_kept_lock_outlives_its_ttl()),
        "a_refusal_is_told_at_once" => Box::pin(a_refusal_is_told_at_once()),
        "unreachable_nodes_are_told_at_the_validity_end" => {
            Box::pin(unreachable_nodes_are_told_at_the_validity_end())
        }
        "without_a_keeper_the_ttl_is_told" => Box::pin(without_a_keeper_the_ttl_is_told()),
        "the_hold_limit_ends_a_kept_lock" => Box::pin(the_hold_limit_ends_a_kept_lock()),
        "a_manual_extension_goes_beside_the_keeper" => {
            Box::pin(a_manual_extension_goes_beside_the_keeper())
        }
        "run_on_a_kept_guard" => Box::pin(run_on_a_kept_guard()),
        _ => return kept_holds_across_processes_never_overlap(exe),
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

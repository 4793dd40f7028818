//! The timeout guard: `LockGuard::run` and `Redlock::with_lock` extend the lock
//! while work runs, and drop the work the moment the lock is lost.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use quorlock::{Error, LostReason, Unlocked};
use support::{builder, eventually, held_everywhere, holders, servers};

/// Work that sets `done` only if it runs to completion.
async fn work(duration: Duration, done: Arc<AtomicBool>) -> &'static str {
    tokio::time::sleep(duration).await;
    done.store(true, Ordering::SeqCst);
    "finished"
}

/// Work longer than the TTL completes, because the lock is extended meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_longer_than_the_ttl_completes_with_auto_extension() {
    let nodes = servers(5);
    let redlock = builder(&nodes).build().unwrap();
    let ttl = Duration::from_millis(600);
    let mut guard = redlock.lock("guard:long", ttl).await.unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let output = guard
        .run(work(Duration::from_millis(2000), done.clone()))
        .await
        .unwrap();
    assert_eq!(output, "finished");
    assert!(done.load(Ordering::SeqCst));
    assert!(
        guard.extensions() >= 3,
        "extended {} times",
        guard.extensions()
    );
    assert!(guard.is_valid());
    assert_eq!(guard.unlock().await.unwrap(), Unlocked::Released);
}

/// `with_lock` runs the work under the lock, returns its output and releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_returns_the_output_and_releases() {
    let nodes = servers(3);
    let redlock = builder(&nodes).build().unwrap();
    let key = redlock.key("guard:with").unwrap();
    let output = redlock
        .with_lock("guard:with", Duration::from_millis(500), async {
            tokio::time::sleep(Duration::from_millis(900)).await;
            42
        })
        .await
        .unwrap();
    assert_eq!(output, 42);
    assert!(
        eventually(Duration::from_secs(1), || holders(&nodes, &key)
            .iter()
            .all(Option::is_none))
        .await,
        "released after the work"
    );
}

/// Work under a lock whose majority is killed midway is cancelled no later
/// than the end of the validity, and the error says the nodes were unreachable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn majority_lost_midway_cancels_the_work_with_the_reason() {
    let nodes = servers(5);
    let redlock = builder(&nodes).build().unwrap();
    let ttl = Duration::from_millis(1500);
    let mut guard = redlock.lock("guard:majority", ttl).await.unwrap();
    let valid_until = guard.valid_until();
    let done = Arc::new(AtomicBool::new(false));
    let mut nodes = nodes;
    let killer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        for node in &mut nodes[..3] {
            node.kill();
        }
        nodes
    });
    let err = guard
        .run(work(Duration::from_secs(10), done.clone()))
        .await
        .unwrap_err();
    let returned = Instant::now();
    let _nodes = killer.await.unwrap();
    assert!(!done.load(Ordering::SeqCst), "the work was cancelled");
    assert!(
        matches!(err.lost_reason(), Some(LostReason::Unreachable { votes }) if votes.failed >= 3),
        "got {err}"
    );
    assert!(
        std::error::Error::source(&err).is_some(),
        "the node error is the source"
    );
    // Cancelled at the end of the validity (which the keys outlive by the drift).
    assert!(
        returned >= valid_until,
        "no earlier than validity without a refusal"
    );
    assert!(
        returned < valid_until + Duration::from_millis(300),
        "cancelled {:?} after validity ended",
        returned - valid_until
    );
}

/// With auto-extension off, work that outlasts the validity is cancelled when
/// the validity ends, and the error says the lock expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_auto_extension_work_past_validity_is_cancelled() {
    let nodes = servers(3);
    let redlock = builder(&nodes).auto_extend(false).build().unwrap();
    let mut guard = redlock
        .lock("guard:noextend", Duration::from_millis(500))
        .await
        .unwrap();
    let valid_until = guard.valid_until();
    let done = Arc::new(AtomicBool::new(false));
    let err = guard
        .run(work(Duration::from_secs(5), done.clone()))
        .await
        .unwrap_err();
    let returned = Instant::now();
    assert!(!done.load(Ordering::SeqCst));
    assert_eq!(err.lost_reason(), Some(&LostReason::Expired), "got {err}");
    assert!(returned >= valid_until && returned < valid_until + Duration::from_millis(300));
    assert_eq!(guard.extensions(), 0);
}

/// Short work under auto-extension off completes normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_within_validity_completes_without_extension() {
    let nodes = servers(3);
    let redlock = builder(&nodes).auto_extend(false).build().unwrap();
    let mut guard = redlock
        .lock("guard:short", Duration::from_secs(2))
        .await
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    guard
        .run(work(Duration::from_millis(100), done.clone()))
        .await
        .unwrap();
    assert!(done.load(Ordering::SeqCst));
    guard.unlock().await.unwrap();
}

/// When another holder has the keys, the next extension is refused by the
/// quorum and the work is cancelled at once, before the validity ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_extension_cancels_the_work_at_once() {
    let nodes = servers(3);
    let redlock = builder(&nodes).build().unwrap();
    let ttl = Duration::from_millis(900);
    let mut guard = redlock.lock("guard:stolen", ttl).await.unwrap();
    let key = guard.key().to_vec();
    assert!(held_everywhere(&nodes, &key, Duration::from_secs(1)).await);
    for node in &nodes {
        node.set_px(&key, "thief", 10_000);
    }
    let valid_until = guard.valid_until();
    let done = Arc::new(AtomicBool::new(false));
    let err = guard
        .run(work(Duration::from_secs(10), done.clone()))
        .await
        .unwrap_err();
    assert!(
        Instant::now() < valid_until,
        "cancelled before the validity ended"
    );
    assert!(
        matches!(err.lost_reason(), Some(LostReason::ExtensionRefused { .. })),
        "got {err}"
    );
    assert!(!done.load(Ordering::SeqCst));
    for node in &nodes {
        assert_eq!(
            node.get(&key).as_deref(),
            Some(&b"thief"[..]),
            "the other holder's key stays"
        );
    }
}

/// The maximum hold time bounds automatic extension: the work is cancelled
/// when the last allowed validity ends, with `LimitReached`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_bounds_automatic_extension() {
    let nodes = servers(3);
    let redlock = builder(&nodes)
        .max_hold(Duration::from_millis(1500))
        .build()
        .unwrap();
    let started = Instant::now();
    let err = redlock
        .with_lock("guard:maxhold", Duration::from_millis(600), async {
            tokio::time::sleep(Duration::from_secs(10)).await;
        })
        .await
        .unwrap_err();
    let held = started.elapsed();
    assert_eq!(
        err.lost_reason(),
        Some(&LostReason::LimitReached),
        "got {err}"
    );
    assert!(
        held <= Duration::from_millis(1500) + Duration::from_millis(300),
        "held {held:?}"
    );
    assert!(
        held >= Duration::from_millis(900),
        "it was extended at least once: {held:?}"
    );
}

/// The extension count bounds automatic extension too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_extensions_bounds_automatic_extension() {
    let nodes = servers(3);
    let redlock = builder(&nodes).max_extensions(2).build().unwrap();
    let mut guard = redlock
        .lock("guard:maxext", Duration::from_millis(400))
        .await
        .unwrap();
    let err = guard
        .run(tokio::time::sleep(Duration::from_secs(10)))
        .await
        .unwrap_err();
    assert_eq!(
        err.lost_reason(),
        Some(&LostReason::LimitReached),
        "got {err}"
    );
    assert_eq!(guard.extensions(), 2);
}

/// A lock lost before `run` starts is reported without running the work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_on_an_expired_guard_does_not_start_the_work() {
    let nodes = servers(1);
    let redlock = builder(&nodes).auto_extend(false).build().unwrap();
    let mut guard = redlock
        .lock("guard:late", Duration::from_millis(300))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let done = Arc::new(AtomicBool::new(false));
    let err = guard
        .run(work(Duration::ZERO, done.clone()))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LockLost { .. }));
    assert!(
        !done.load(Ordering::SeqCst),
        "work must not run without the lock"
    );
}

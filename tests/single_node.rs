//! Single-node mode: one URL gives the classic single-instance lock (quorum 1)
//! with the same API and the same behaviours.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use quorlock::{LostReason, Redlock, Unlocked};
use support::{RedisServer, eventually};

const TTL: Duration = Duration::from_secs(10);

fn single(server: &RedisServer) -> quorlock::RedlockBuilder {
    Redlock::builder([server.url()]).node_timeout(Duration::from_millis(200))
}

/// Lock, contention, unlock, relock on one node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_node_locks_contends_and_releases() {
    let server = RedisServer::start();
    let redlock = single(&server).build().unwrap();
    assert_eq!((redlock.node_count(), redlock.quorum()), (1, 1));
    let guard = redlock.try_lock("single:a", TTL).await.unwrap();
    assert!(server.get(guard.key()).is_some());
    let err = redlock.try_lock("single:a", TTL).await.unwrap_err();
    assert!(err.is_contended(), "got {err}");
    let key = guard.key().to_vec();
    assert_eq!(guard.unlock().await.unwrap(), Unlocked::Released);
    assert_eq!(server.get(&key), None);
    redlock
        .try_lock("single:a", TTL)
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
}

/// Extension, and a foreign key left alone by extend and unlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_node_extends_and_never_touches_a_foreign_key() {
    let server = RedisServer::start();
    let redlock = single(&server).build().unwrap();
    let ttl = Duration::from_millis(400);
    let mut guard = redlock.try_lock("single:b", ttl).await.unwrap();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        guard.extend(ttl).await.unwrap();
    }
    assert!(guard.is_valid() && guard.remaining() < ttl);
    server.set_px(guard.key(), "other", 5_000);
    let err = guard.extend(ttl).await.unwrap_err();
    assert!(matches!(
        err.lost_reason(),
        Some(LostReason::ExtensionRefused { .. })
    ));
    let key = guard.key().to_vec();
    assert_eq!(guard.unlock().await.unwrap(), Unlocked::Expired);
    assert_eq!(server.get(&key).as_deref(), Some(&b"other"[..]));
}

/// The timeout guard on one node: extended while the work runs; the work is
/// cancelled when the node dies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_node_runs_work_and_cancels_it_when_the_node_dies() {
    let mut server = RedisServer::start();
    let redlock = single(&server).build().unwrap();
    let out = redlock
        .with_lock("single:c", Duration::from_millis(400), async {
            tokio::time::sleep(Duration::from_millis(1000)).await;
            7
        })
        .await
        .unwrap();
    assert_eq!(out, 7);

    let mut guard = redlock
        .lock("single:c", Duration::from_millis(800))
        .await
        .unwrap();
    let valid_until = guard.valid_until();
    server.kill();
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    let err = guard
        .run(async move {
            tokio::time::sleep(Duration::from_secs(10)).await;
            flag.store(true, Ordering::SeqCst);
        })
        .await
        .unwrap_err();
    assert!(
        matches!(err.lost_reason(), Some(LostReason::Unreachable { .. })),
        "got {err}"
    );
    assert!(!done.load(Ordering::SeqCst));
    assert!(Instant::now() < valid_until + Duration::from_millis(300));
}

/// With its one node down, `lock` fails with `Unavailable` within its deadline,
/// and works again once the node is back, without a new client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_node_down_is_unavailable_then_recovers() {
    let mut server = RedisServer::start();
    let redlock = single(&server)
        .acquire_timeout(Duration::from_millis(600))
        .build()
        .unwrap();
    server.kill();
    let started = Instant::now();
    let err = redlock.lock("single:d", TTL).await.unwrap_err();
    assert!(err.is_unavailable(), "got {err}");
    assert!(started.elapsed() < Duration::from_millis(1200));
    server.spawn().unwrap();
    let mut recovered = None;
    for _ in 0..20 {
        if let Ok(guard) = redlock.try_lock("single:d", TTL).await {
            recovered = Some(guard);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let guard = recovered.expect("locks again after the node came back");
    guard.unlock().await.unwrap();
}

/// A dropped guard releases in the background on one node too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_node_dropped_guard_is_released() {
    let server = RedisServer::start();
    let redlock = single(&server).build().unwrap();
    let guard = redlock.try_lock("single:e", TTL).await.unwrap();
    let key = guard.key().to_vec();
    drop(guard);
    assert!(eventually(Duration::from_secs(2), || server.get(&key).is_none()).await);
}

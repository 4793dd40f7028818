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

/// The server's count of reads from its clients (`INFO stats`).
fn reads_processed(server: &RedisServer) -> u64 {
    let stats: String = redis::cmd("INFO")
        .arg("stats")
        .query(&mut server.connection())
        .expect("INFO stats");
    stats
        .lines()
        .find_map(|line| line.strip_prefix("total_reads_processed:"))
        .and_then(|count| count.trim().parse().ok())
        .expect("total_reads_processed in INFO stats")
}

/// Concurrent calls on one worker share writes (see `connection/`): 64
/// tasks locking and unlocking at once reach the server in far fewer reads
/// than commands. Without the coalescing, tokio's LIFO slot ran the
/// connection's driver after each call, one write (and one server read)
/// per command. Every lock is still taken and released.
#[test]
fn concurrent_calls_on_one_worker_share_writes() {
    const TASKS: usize = 64;
    const CYCLES: usize = 50;
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let redlock = single(&server).build().unwrap();
    runtime.block_on(support::lock_once(&redlock, "share:warm-up", TTL));
    let before = reads_processed(&server);
    let released = runtime.block_on(async {
        let tasks: Vec<_> = (0..TASKS)
            .map(|task| {
                let redlock = redlock.clone();
                tokio::spawn(async move {
                    let mut released = 0;
                    for cycle in 0..CYCLES {
                        let resource = format!("share:{task}:{cycle}");
                        let guard = redlock.try_lock(&resource, TTL).await.unwrap();
                        if guard.unlock().await.unwrap() == Unlocked::Released {
                            released += 1;
                        }
                    }
                    released
                })
            })
            .collect();
        let mut released = 0;
        for task in tasks {
            released += task.await.unwrap();
        }
        released
    });
    let reads = reads_processed(&server) - before;
    let commands = (2 * TASKS * CYCLES) as u64;
    println!("{reads} server reads for {commands} commands");
    assert_eq!(released, TASKS * CYCLES);
    assert!(
        reads * 3 < commands,
        "{reads} reads for {commands} commands: writes not shared"
    );
}

/// A node named by its Unix socket (`redis+unix://`): its connection is made
/// and driven by quorlock as a TCP node's (see `connection/`); locks are
/// taken, contended and released, by one caller and by 16 at once.
#[test]
fn a_unix_socket_node_locks_and_releases() {
    let dir = support::Scratch::new("unix");
    let socket = dir.join(format!("redis-{}.sock", support::free_port()));
    let socket_arg = socket.to_str().expect("utf-8 temp dir").to_owned();
    let server = RedisServer::start_with(&["--unixsocket", &socket_arg, "--unixsocketperm", "700"]);
    let runtime = support::runtime().expect("runtime");
    let redlock = Redlock::builder([format!("redis+unix://{socket_arg}")])
        .build()
        .unwrap();
    runtime.block_on(async {
        let guard = redlock.try_lock("unix:a", TTL).await.unwrap();
        assert!(server.get(guard.key()).is_some());
        let err = redlock.try_lock("unix:a", TTL).await.unwrap_err();
        assert!(err.is_contended(), "got {err}");
        assert_eq!(guard.unlock().await.unwrap(), Unlocked::Released);
        let tasks: Vec<_> = (0..16)
            .map(|task| {
                let redlock = redlock.clone();
                tokio::spawn(async move {
                    for cycle in 0..20 {
                        let resource = format!("unix:{task}:{cycle}");
                        let guard = redlock.try_lock(&resource, TTL).await.unwrap();
                        assert_eq!(guard.unlock().await.unwrap(), Unlocked::Released);
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
    drop(server);
}

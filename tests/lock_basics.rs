//! The lock's basic behaviours on five real nodes: hold, contend, release,
//! extend, and the rules that keep other holders' keys safe.

mod support;

use std::time::{Duration, Instant};

use quorlock::{Error, LostReason, Unlocked};
use support::{builder, eventually, held_everywhere, holders, proxies, proxy_urls, servers, urls};

const TTL: Duration = Duration::from_secs(10);

/// A held lock sits on every node under one token; a second `try_lock` is
/// contended; after `unlock` no node holds the key and the lock is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_lock_is_on_every_node_and_excludes_a_second_holder() {
    let nodes = servers(5);
    let redlock = builder(&nodes).build().unwrap();
    let guard = redlock.try_lock("basics:held", TTL).await.unwrap();
    assert_eq!(guard.key(), b"quorlock:basics:held");
    assert_eq!(guard.resource(), b"basics:held");

    // Stragglers finish in the background; all five get the key.
    assert!(
        eventually(Duration::from_secs(2), || holders(&nodes, guard.key())
            .iter()
            .all(Option::is_some))
        .await
    );
    let values = holders(&nodes, guard.key());
    let token = values[0].clone().unwrap();
    assert!(
        values.iter().all(|v| v.as_ref() == Some(&token)),
        "one token on every node"
    );
    assert!(token.len() >= 32, "token carries at least 122 random bits");
    assert!(guard.remaining() > Duration::from_secs(9) && guard.remaining() < TTL);

    let err = redlock.try_lock("basics:held", TTL).await.unwrap_err();
    assert!(err.is_contended(), "expected contention, got {err}");
    let votes = err.votes().unwrap();
    assert_eq!(votes.granted, 0);
    assert_eq!(votes.quorum, 3);

    let key = guard.key().to_vec();
    assert_eq!(guard.unlock().await.unwrap(), Unlocked::Released);
    // `unlock` returns once a quorum confirmed; the rest follow at once.
    assert!(
        eventually(Duration::from_secs(1), || holders(&nodes, &key)
            .iter()
            .all(Option::is_none))
        .await,
        "no node keeps the key"
    );
    let again = redlock.try_lock("basics:held", TTL).await.unwrap();
    assert_eq!(again.unlock().await.unwrap(), Unlocked::Released);
}

/// With the key held under a foreign token on 3 of 5 nodes, `try_lock` fails
/// and the 2 other nodes hold no key of ours afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_round_leaves_nothing_behind() {
    let nodes = servers(5);
    let redlock = builder(&nodes).build().unwrap();
    let key = redlock.key("basics:foreign").unwrap();
    for node in &nodes[..3] {
        node.set_px(&key, "foreign", 10_000);
    }
    let err = redlock.try_lock("basics:foreign", TTL).await.unwrap_err();
    assert!(err.is_contended(), "got {err}");
    assert_eq!(err.votes().unwrap().refused, 3);
    for node in &nodes[..3] {
        assert_eq!(node.get(&key).as_deref(), Some(&b"foreign"[..]));
    }
    for node in &nodes[3..] {
        assert_eq!(node.get(&key), None, "the losing round was released");
    }
}

/// `extend` and `unlock` never touch a key that holds another token: the
/// failed extension leaves the other holder's key, and the guard reports the
/// lock as lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_and_unlock_never_touch_a_foreign_key() {
    let nodes = servers(5);
    let redlock = builder(&nodes).build().unwrap();
    let mut guard = redlock.try_lock("basics:taken", TTL).await.unwrap();
    let key = guard.key().to_vec();
    // Our keys vanished (say, expired) and another holder took them everywhere.
    assert!(held_everywhere(&nodes, &key, Duration::from_secs(2)).await);
    for node in &nodes {
        node.set_px(&key, "other-holder", 5_000);
    }

    let err = guard.extend(TTL).await.unwrap_err();
    assert!(
        matches!(err.lost_reason(), Some(LostReason::ExtensionRefused { .. })),
        "got {err}"
    );
    assert!(!guard.is_valid(), "a refused extension shows the lock lost");
    assert_eq!(guard.remaining(), Duration::ZERO);
    for node in &nodes {
        assert_eq!(node.get(&key).as_deref(), Some(&b"other-holder"[..]));
        let ttl = node.pttl(&key);
        assert!(
            ttl > 0 && ttl <= 5_000,
            "the other holder's TTL is untouched: {ttl}"
        );
    }

    assert_eq!(guard.unlock().await.unwrap(), Unlocked::Expired);
    for node in &nodes {
        assert_eq!(node.get(&key).as_deref(), Some(&b"other-holder"[..]));
    }
}

/// `extend` keeps a lock past its first TTL; the remaining validity stays below
/// the TTL and shrinks between extensions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_keeps_the_lock_past_its_first_ttl() {
    let nodes = servers(5);
    let redlock = builder(&nodes).build().unwrap();
    let ttl = Duration::from_millis(600);
    let mut guard = redlock.try_lock("basics:extend", ttl).await.unwrap();
    let first_valid_until = guard.valid_until();
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(1500) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        guard.extend(ttl).await.unwrap();
        let after = guard.remaining();
        assert!(after < ttl, "remaining {after:?} must stay below the ttl");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(guard.remaining() < after, "remaining validity shrinks");
    }
    assert!(guard.valid_until() > first_valid_until + Duration::from_millis(900));
    assert!(guard.extensions() >= 4);
    // Still held on the nodes, past the first TTL.
    let held = holders(&nodes, guard.key())
        .iter()
        .filter(|v| v.is_some())
        .count();
    assert!(held >= 3, "held on {held} nodes");
    assert!(
        redlock
            .try_lock("basics:extend", ttl)
            .await
            .unwrap_err()
            .is_contended()
    );
    assert_eq!(guard.unlock().await.unwrap(), Unlocked::Released);
}

/// A round that takes longer than the TTL (nodes slowed by `DEBUG SLEEP`)
/// returns no guard, and releases what it set. (The clock watch is off:
/// with it, replies this slow leave the nodes' clock readings too imprecise
/// to count at all, see `clock.rs`; this test is about the validity.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_slower_than_the_ttl_returns_no_guard() {
    let nodes = servers(3);
    let redlock = quorlock::Redlock::builder(support::urls(&nodes))
        .node_timeout(Duration::from_secs(2))
        .clock_tolerance(Duration::ZERO)
        .build()
        .unwrap();
    // Connect first, so the sleep below delays the round, not the handshake.
    redlock
        .try_lock("basics:warm", TTL)
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();

    let sleepers: Vec<_> = nodes[..2]
        .iter()
        .map(|node| node.debug_sleep(0.4))
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let result = redlock
        .try_lock("basics:slow", Duration::from_millis(200))
        .await;
    let elapsed = started.elapsed();
    let err = result.unwrap_err();
    assert!(matches!(err, Error::NoValidity { .. }), "got {err}");
    assert!(
        err.votes().unwrap().has_quorum(),
        "the quorum granted, too late"
    );
    assert!(
        elapsed >= Duration::from_millis(200),
        "the round took {elapsed:?}"
    );
    for sleeper in sleepers {
        sleeper.join().unwrap();
    }
    let key = redlock.key("basics:slow").unwrap();
    assert!(
        holders(&nodes, &key).iter().all(Option::is_none),
        "released after the late round"
    );
}

/// A guard dropped without `unlock` inside a runtime releases in the
/// background: the key is gone from all nodes shortly after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_guard_releases_in_the_background() {
    let nodes = servers(5);
    let redlock = builder(&nodes).build().unwrap();
    let guard = redlock.try_lock("basics:dropped", TTL).await.unwrap();
    let key = guard.key().to_vec();
    assert!(held_everywhere(&nodes, &key, Duration::from_secs(2)).await);
    drop(guard);
    assert!(
        eventually(Duration::from_secs(2), || holders(&nodes, &key)
            .iter()
            .all(Option::is_none))
        .await,
        "the dropped guard's keys were released"
    );
    redlock
        .try_lock("basics:dropped", TTL)
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
}

/// `forget` leaves the keys to expire by their TTL instead of releasing them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgotten_guard_leaves_the_key_to_expire() {
    let nodes = servers(3);
    let redlock = builder(&nodes).build().unwrap();
    let guard = redlock
        .try_lock("basics:forget", Duration::from_millis(500))
        .await
        .unwrap();
    let key = guard.key().to_vec();
    guard.forget();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(holders(&nodes, &key).iter().filter(|v| v.is_some()).count() >= 2);
    assert!(
        redlock
            .try_lock("basics:forget", TTL)
            .await
            .unwrap_err()
            .is_contended()
    );
    assert!(
        eventually(Duration::from_secs(3), || holders(&nodes, &key)
            .iter()
            .all(Option::is_none))
        .await
    );
    redlock
        .try_lock("basics:forget", TTL)
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
}

/// `lock` waits for a lock that another client releases, and gives up with a
/// contention error once its patience (retry count × retry delay) is spent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_retries_until_the_holder_releases() {
    let nodes = servers(3);
    let redlock = builder(&nodes)
        .retry_delay(Duration::from_millis(20))
        .retry_jitter(Duration::from_millis(10))
        .retry_count(100)
        .build()
        .unwrap();
    let other = builder(&nodes)
        .retry_count(2)
        .retry_delay(Duration::from_millis(10))
        .build()
        .unwrap();
    let guard = redlock.try_lock("basics:wait", TTL).await.unwrap();
    // First contact (checking the nodes) is bounded by the patience too; done
    // before the patience is measured, so that a loaded machine's slow first
    // checks do not end the 20 ms patience before any round.
    other
        .try_lock("basics:warm-up", TTL)
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();

    let started = Instant::now();
    let err = other.lock("basics:wait", TTL).await.unwrap_err();
    match err {
        Error::Contended { attempts, .. } => assert!(attempts >= 1),
        other => panic!("expected contention, got {other}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(20));

    let waiter = tokio::spawn({
        let redlock = redlock.clone();
        async move { redlock.lock("basics:wait", TTL).await }
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    guard.unlock().await.unwrap();
    let second = waiter.await.unwrap().unwrap();
    assert_eq!(second.unlock().await.unwrap(), Unlocked::Released);
}

/// A custom key prefix and binary (non-UTF-8) resource names are stored as given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_prefix_and_binary_resource_names() {
    let nodes = servers(1);
    let redlock = builder(&nodes).key_prefix("app:").build().unwrap();
    let resource: &[u8] = &[0xff, 0x00, b'x', 0xfe];
    let guard = redlock.try_lock(resource, TTL).await.unwrap();
    assert_eq!(guard.key(), b"app:\xff\x00x\xfe");
    assert!(nodes[0].get(guard.key()).is_some());
    guard.unlock().await.unwrap();
}

/// A `lock` call dropped while its round is in flight (the `SET`s reached the
/// nodes, their replies had not come back) leaves no key behind: the round is
/// finished in the background and then released on every node, and
/// `Redlock::flush` waits for that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_dropped_mid_round_releases_what_its_round_set() {
    let nodes = servers(3);
    let proxies = proxies(&nodes, Duration::ZERO);
    let redlock = quorlock::Redlock::builder(proxy_urls(&proxies))
        .node_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    redlock
        .lock("basics:cancelled", TTL)
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    for proxy in &proxies {
        proxy.delay_replies(Duration::from_millis(500));
    }
    let key = redlock.key("basics:cancelled").unwrap();
    {
        let lock = redlock.lock("basics:cancelled", TTL);
        let mut lock = std::pin::pin!(lock);
        let landed = async {
            while holders(&nodes, &key).iter().any(Option::is_none) {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        };
        tokio::select! {
            _ = &mut lock => panic!("the round should still wait for its replies"),
            _ = landed => {}
        }
        // Dropped here, mid-round.
    }
    tokio::time::timeout(Duration::from_secs(10), redlock.flush())
        .await
        .expect("the cleanup finishes");
    assert!(
        holders(&nodes, &key).iter().all(Option::is_none),
        "keys left behind: {:?}",
        nodes.iter().map(|node| node.pttl(&key)).collect::<Vec<_>>()
    );
}

/// A runtime that shuts down while a dropped guard's release is in flight
/// (the end of `main`) returns: the release may find its connection gone
/// and start a new one on a runtime that is shutting down, which cancels the
/// new task at once. Each runtime gets 20 s; one that hangs fails the test.
#[test]
fn a_runtime_shutting_down_during_a_release_returns() {
    let nodes = servers(3);
    let urls = support::urls(&nodes);
    for round in 0..30 {
        let (done, finished) = std::sync::mpsc::channel();
        let urls = urls.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let redlock = quorlock::Redlock::new(&urls).unwrap();
                let resource = format!("basics:shutdown:{round}");
                let guard = redlock.lock(resource, TTL).await.unwrap();
                drop(guard); // released in the background, cut short below
            });
            drop(runtime);
            let _ = done.send(());
        });
        assert!(
            finished.recv_timeout(Duration::from_secs(20)).is_ok(),
            "runtime {round} did not shut down"
        );
    }
}

/// Many tasks of one client taking and releasing locks of their own at once
/// (so that a node's votes go out in batches): once every `unlock` has
/// returned `Released` and the client's background work is done, no key of
/// theirs is left on any node (a release that overtook its own `SET` on a
/// node would leave that key there for its TTL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_locks_leave_no_key_behind_under_concurrency() {
    const TASKS: usize = 32;
    const CYCLES: usize = 60;
    let nodes = servers(3);
    let redlock = quorlock::Redlock::builder(urls(&nodes))
        .node_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let redlock = redlock.clone();
            tokio::spawn(async move {
                for cycle in 0..CYCLES {
                    let name = format!("leak:{task}:{cycle}");
                    let guard = redlock.lock(&name, Duration::from_secs(60)).await.unwrap();
                    assert_eq!(guard.unlock().await.unwrap(), quorlock::Unlocked::Released);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    redlock.flush().await;
    let left: Vec<(usize, Vec<String>)> = nodes
        .iter()
        .enumerate()
        .map(|(index, node)| {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg("quorlock:leak:*")
                .query(&mut node.connection())
                .unwrap();
            (index, keys)
        })
        .filter(|(_, keys)| !keys.is_empty())
        .collect();
    assert!(left.is_empty(), "keys left after their release: {left:?}");
}

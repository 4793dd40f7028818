//! Node failures: a minority down is survived, a majority down fails fast with
//! the votes, and nodes that come (back) up are used without rebuilding.

mod support;

use std::time::{Duration, Instant};

use quorlock::{Redlock, Unlocked};
use support::{RedisServer, builder, holders, servers, urls};

const TTL: Duration = Duration::from_secs(10);

/// 5 nodes with 2 killed: lock and unlock still work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_survives_a_minority_outage() {
    let mut nodes = servers(5);
    let redlock = builder(&nodes).build().unwrap();
    nodes[0].kill();
    nodes[3].kill();
    for _ in 0..5 {
        let guard = redlock.lock("failures:minority", TTL).await.unwrap();
        let held = holders(&nodes, guard.key())
            .iter()
            .filter(|v| v.is_some())
            .count();
        assert_eq!(held, 3, "held on the three live nodes");
        assert_eq!(guard.unlock().await.unwrap(), Unlocked::Released);
    }
}

/// 5 nodes with 3 killed: `lock` fails with the votes and the last node error,
/// and returns within its configured deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn majority_outage_fails_within_the_deadline_with_the_votes() {
    let mut nodes = servers(5);
    let redlock = builder(&nodes)
        .acquire_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    for node in &mut nodes[..3] {
        node.kill();
    }
    let started = Instant::now();
    let err = redlock.lock("failures:majority", TTL).await.unwrap_err();
    let elapsed = started.elapsed();
    assert!(err.is_unavailable(), "got {err}");
    let votes = err.votes().unwrap();
    // Decided as soon as three failures ruled out the quorum.
    assert_eq!((votes.failed, votes.quorum), (3, 3));
    assert!(votes.failures_rule_out_quorum());
    let source = std::error::Error::source(&err).expect("the last node error is the source");
    assert!(
        source.to_string().contains("127.0.0.1:"),
        "names the node: {source}"
    );
    // The deadline is 1 s; a round in flight may add at most 2 x 200 ms.
    assert!(elapsed < Duration::from_millis(1600), "took {elapsed:?}");
    assert!(
        elapsed > Duration::from_millis(500),
        "it did retry: {elapsed:?}"
    );
    // A failed round that a live node granted is given back before the next
    // round; what the call left when it gave up (its place in the queue, a
    // reservation for it) goes in the background, which `flush` waits for.
    redlock.flush().await;
    let key = redlock.key("failures:majority").unwrap();
    assert!(
        holders(&nodes, &key).iter().all(Option::is_none),
        "failed rounds were released: {:?}",
        holders(&nodes, &key)
    );
}

/// A node that is down when the client is built does not stop it from being
/// built or from locking with the majority, and is used once it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_down_at_build_is_used_once_it_starts() {
    let mut nodes = servers(2);
    nodes.push(RedisServer::reserved());
    let redlock = Redlock::builder(urls(&nodes))
        .node_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let guard = redlock.lock("failures:late", TTL).await.unwrap();
    guard.unlock().await.unwrap();

    nodes[2].spawn().unwrap();
    assert!(
        support::lock_until_held_on(&redlock, "failures:late", &nodes[2]).await,
        "the late node never received a lock"
    );
}

/// A node killed and started again on the same port is reconnected to by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_node_is_reconnected() {
    let mut nodes = servers(3);
    let redlock = builder(&nodes).build().unwrap();
    redlock
        .lock("failures:restart", TTL)
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    nodes[1].restart();
    assert!(
        support::lock_until_held_on(&redlock, "failures:restart", &nodes[1]).await,
        "the restarted node was never used again"
    );
}

/// A frozen node (SIGSTOP) is a vote against after the per-node timeout; the
/// round is decided by the others without waiting for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_node_does_not_stall_the_round() {
    let nodes = servers(5);
    let redlock = Redlock::builder(urls(&nodes))
        .node_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    redlock
        .lock("failures:frozen", TTL)
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    nodes[4].pause();
    let started = Instant::now();
    for _ in 0..10 {
        let guard = redlock.lock("failures:frozen", TTL).await.unwrap();
        guard.unlock().await.ok();
    }
    // Without early decisions every lock would wait the 5 s node timeout.
    let locking = started.elapsed();
    nodes[4].resume();
    assert!(
        locking < Duration::from_secs(4),
        "10 locks took {locking:?}"
    );
}

/// `unlock` with nodes gone: released where it was held among the nodes that
/// answered, while the silent ones are too few to block a quorum; unconfirmed
/// when a majority is silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_with_nodes_gone_reports_what_it_can_know() {
    let mut nodes = servers(5);
    let redlock = builder(&nodes).build().unwrap();

    let guard = redlock.lock("failures:unlock", TTL).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // One live node lost our key (say, a late release of the previous holder),
    // and two nodes died.
    let _: () = redis::Commands::del(&mut nodes[2].connection(), guard.key()).unwrap();
    nodes[0].kill();
    nodes[1].kill();
    assert_eq!(guard.unlock().await.unwrap(), Unlocked::Released);
    let key = redlock.key("failures:unlock").unwrap();
    assert!(nodes[2..].iter().all(|node| node.get(&key).is_none()));

    let guard = redlock.lock("failures:unlock", TTL).await.unwrap();
    nodes[2].kill();
    let err = guard.unlock().await.unwrap_err();
    assert!(
        matches!(err, quorlock::Error::ReleaseUnconfirmed { .. }),
        "got {err}"
    );
    assert_eq!(err.votes().unwrap().failed, 3);
}

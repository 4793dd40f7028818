//! Restarts. The Redis docs' rule: a node restarted without persistence must
//! stay down for at least the longest TTL ("delayed restart"), or it may grant
//! a lock that a quorum still holds. These tests show the hazard and both safe
//! settings: a delayed restart, and `appendonly yes` + `appendfsync always`.

mod support;

use std::time::{Duration, Instant};

use quorlock::Redlock;
use support::{RedisServer, servers, urls};

fn client(nodes: &[RedisServer]) -> Redlock {
    Redlock::builder(urls(nodes))
        .node_timeout(Duration::from_millis(200))
        .build()
        .unwrap()
}

/// Holder A takes the lock while node 2 is down, so it holds nodes 0 and 1.
async fn holder_on_nodes_0_and_1(nodes: &mut [RedisServer], ttl: Duration) -> quorlock::LockGuard {
    nodes[2].kill();
    let a = client(nodes)
        .try_lock("restarts:resource", ttl)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(nodes[0].get(a.key()).is_some() && nodes[1].get(a.key()).is_some());
    a
}

/// The hazard: node 1 restarts at once without persistence and comes back
/// empty; with node 2 back too, a second client takes the lock while the
/// first holder's lock is still valid. Two holders at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn immediate_restart_without_persistence_allows_a_second_holder() {
    let mut nodes = servers(3);
    let a = holder_on_nodes_0_and_1(&mut nodes, Duration::from_secs(10)).await;
    nodes[1].restart();
    nodes[2].spawn().unwrap();
    let b = client(&nodes)
        .try_lock("restarts:resource", Duration::from_secs(10))
        .await;
    let b = b.expect("the documented hazard: the emptied node grants a second holder");
    assert!(
        a.is_valid() && b.is_valid(),
        "two valid holders of one lock at once"
    );
    println!(
        "hazard shown: holder A valid for {:?} more, holder B valid for {:?}",
        a.remaining(),
        b.remaining()
    );
}

/// Safe setting 1, delayed restart: node 1 stays down for the TTL before it
/// restarts empty; no second holder is granted while the first is valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_restart_grants_no_second_holder_while_the_first_is_valid() {
    let mut nodes = servers(3);
    let ttl = Duration::from_millis(1500);
    let a = holder_on_nodes_0_and_1(&mut nodes, ttl).await;
    nodes[1].kill();
    nodes[2].spawn().unwrap();
    let b_client = client(&nodes);
    let down_since = Instant::now();
    let mut granted_while_a_valid = 0;
    let mut b = None;
    while b.is_none() {
        // Node 1 comes back, empty, only after the TTL.
        if !nodes[1].is_running() && down_since.elapsed() >= ttl {
            nodes[1].spawn().unwrap();
        }
        if let Ok(guard) = b_client.try_lock("restarts:resource", ttl).await {
            if a.is_valid() {
                granted_while_a_valid += 1;
            }
            b = Some(guard);
        }
        assert!(
            down_since.elapsed() < Duration::from_secs(10),
            "B never got the lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        granted_while_a_valid, 0,
        "no second holder while the first was valid"
    );
    assert!(!a.is_valid());
}

/// Safe setting 2, persistence: with `appendonly yes` and `appendfsync
/// always`, node 1 restarts at once and still holds the key, so the second
/// client is refused while the first holder is valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_with_appendfsync_always_keeps_the_lock() {
    let aof = ["--appendonly", "yes", "--appendfsync", "always"];
    let mut nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_with(&aof)).collect();
    let a = holder_on_nodes_0_and_1(&mut nodes, Duration::from_secs(10)).await;
    nodes[1].restart(); // SIGKILL, then start on the same port and directory
    assert!(
        nodes[1].get(a.key()).is_some(),
        "the key survived the crash"
    );
    nodes[2].spawn().unwrap();
    let err = client(&nodes)
        .try_lock("restarts:resource", Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(err.is_contended(), "got {err}");
    assert!(a.is_valid());
}

//! Faults and hostile nodes: frozen, slow, misbehaving and misconfigured
//! nodes. Each failing node is a vote against, named in the error; a
//! misconfiguration is refused at first contact.

mod support;

use std::time::{Duration, Instant};

use quorlock::{Error, Redlock};
use redis::Commands;
use support::{RedisServer, servers, urls};

const TTL: Duration = Duration::from_secs(10);

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

async fn lock_unlock_latencies(redlock: &Redlock, cycles: usize) -> Vec<Duration> {
    let mut latencies = Vec::with_capacity(cycles);
    for cycle in 0..cycles {
        let started = Instant::now();
        let guard = redlock
            .lock(format!("faults:latency:{cycle}"), TTL)
            .await
            .unwrap();
        guard.unlock().await.unwrap();
        latencies.push(started.elapsed());
    }
    latencies.sort();
    latencies
}

/// With 1 of 5 nodes frozen (SIGSTOP), lock and unlock still succeed, and
/// their latency stays near the healthy case: rounds are decided without the
/// straggler. The per-node timeout is 1 s here, so any wait on the frozen node
/// would show as a second. p50/p99 are printed both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_frozen_node_of_five_does_not_slow_lock_and_unlock() {
    let nodes = servers(5);
    let redlock = Redlock::builder(urls(&nodes))
        .node_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    lock_unlock_latencies(&redlock, 50).await; // connect and warm up
    let healthy = lock_unlock_latencies(&redlock, 300).await;
    nodes[2].pause();
    let frozen = lock_unlock_latencies(&redlock, 300).await;
    nodes[2].resume();
    let (h50, h99) = (percentile(&healthy, 0.5), percentile(&healthy, 0.99));
    let (f50, f99) = (percentile(&frozen, 0.5), percentile(&frozen, 0.99));
    println!(
        "lock+unlock, 5 nodes, 300 cycles: healthy p50 {h50:?} p99 {h99:?}; 1 frozen p50 {f50:?} p99 {f99:?}"
    );
    assert!(
        f99 < Duration::from_millis(500),
        "a cycle waited on the frozen node: p99 {f99:?}"
    );
}

/// With 3 of 5 nodes frozen, `lock` fails within its deadline, reporting
/// timeouts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_frozen_nodes_of_five_fail_within_the_deadline() {
    let nodes = servers(5);
    let redlock = Redlock::builder(urls(&nodes))
        .node_timeout(Duration::from_millis(100))
        .acquire_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    redlock
        .lock("faults:frozen3", TTL)
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    for node in &nodes[..3] {
        node.pause();
    }
    let started = Instant::now();
    let result = redlock.lock("faults:frozen3", TTL).await;
    let elapsed = started.elapsed();
    for node in &nodes[..3] {
        node.resume();
    }
    let err = result.unwrap_err();
    assert!(err.is_unavailable(), "got {err}");
    let source = std::error::Error::source(&err).unwrap().to_string();
    assert!(
        source.contains("no answer within 100ms"),
        "a timeout is reported: {source}"
    );
    // Deadline 1 s; the last round in flight adds at most 2 x 100 ms.
    assert!(elapsed < Duration::from_millis(1500), "took {elapsed:?}");
}

/// A node slowed by `DEBUG SLEEP` past the per-node timeout is a vote
/// against, reported as a timeout that names the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_node_is_a_vote_against() {
    let nodes = servers(3);
    let redlock = Redlock::builder(urls(&nodes))
        .node_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    redlock
        .try_lock("faults:slow", TTL)
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let sleepers: Vec<_> = nodes[..2]
        .iter()
        .map(|node| node.debug_sleep(0.5))
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let err = redlock.try_lock("faults:slow", TTL).await.unwrap_err();
    assert!(err.is_unavailable(), "got {err}");
    let votes = err.votes().unwrap();
    assert_eq!(votes.failed, 2);
    let source = std::error::Error::source(&err).unwrap().to_string();
    assert!(source.contains("no answer within 100ms"), "{source}");
    let slow_ports = [nodes[0].port(), nodes[1].port()];
    assert!(
        std::error::Error::source(&err)
            .and_then(|source| source.downcast_ref::<quorlock::NodeError>())
            .is_some_and(quorlock::NodeError::is_timeout),
        "{err:?}"
    );
    assert!(
        slow_ports
            .iter()
            .any(|port| source.contains(&format!("127.0.0.1:{port}"))),
        "{source}"
    );
    for sleeper in sleepers {
        sleeper.join().unwrap();
    }
    // Until they answer a probe, the slow nodes are skipped (a vote against
    // without waiting); once the sleep is over they are used again.
    let started = Instant::now();
    redlock
        .lock("faults:slow2", TTL)
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
}

/// The lock of `redlock` on `resource` fails on a single misbehaving `node`
/// with an error naming the node and containing `reply`.
async fn assert_single_node_error(
    redlock: &Redlock,
    resource: &str,
    node: &RedisServer,
    reply: &str,
) {
    let err = redlock.try_lock(resource, TTL).await.unwrap_err();
    assert!(err.is_unavailable(), "got {err}");
    let source = std::error::Error::source(&err)
        .expect("node error")
        .to_string();
    assert!(
        source.contains(&format!("127.0.0.1:{}", node.port())),
        "names the node: {source}"
    );
    assert!(
        source.contains(reply),
        "carries the reply {reply}: {source}"
    );
}

/// A key of the wrong type under the lock name is a vote against whose error
/// names the node and the WRONGTYPE reply; the other nodes still make a quorum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_type_key_is_a_vote_against_naming_the_node() {
    let nodes = servers(3);
    let redlock = support::builder(&nodes).build().unwrap();
    let key = redlock.key("faults:wrongtype").unwrap();
    let _: () = nodes[0].connection().rpush(&key, "not a lock").unwrap();
    // Two healthy nodes still make the quorum of 2.
    redlock
        .try_lock("faults:wrongtype", TTL)
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let single = support::builder(&nodes[..1]).build().unwrap();
    if support::is_redis_before_7() {
        // No `SET NX GET` before Redis 7.0: `SET NX` answers nil for any
        // existing key, so the foreign key reads as another holder's lock.
        let err = single.try_lock("faults:wrongtype", TTL).await.unwrap_err();
        assert!(err.is_contended(), "got {err}");
        support::adapted(
            "faults::wrong_type_key_is_a_vote_against_naming_the_node",
            "no SET NX GET: the foreign key is a refusal (contended), not a WRONGTYPE error",
        );
    } else {
        assert_single_node_error(&single, "faults:wrongtype", &nodes[0], "WRONGTYPE").await;
    }
    let kind: String = redis::cmd("TYPE")
        .arg(&key)
        .query(&mut nodes[0].connection())
        .unwrap();
    assert_eq!(kind, "list", "the foreign key is left alone");
}

/// A node that needs a password and got none answers NOAUTH: a vote against
/// naming the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_without_its_password_is_a_vote_against() {
    let node = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let single = support::builder(std::slice::from_ref(&node))
        .build()
        .unwrap();
    assert_single_node_error(&single, "faults:noauth", &node, "NOAUTH").await;
}

/// A node out of memory (`maxmemory` reached with `noeviction`) refuses the
/// write: a vote against naming the node and its OOM reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_out_of_memory_is_a_vote_against() {
    let node = RedisServer::start();
    let single = support::builder(std::slice::from_ref(&node))
        .build()
        .unwrap();
    single
        .try_lock("faults:oom", TTL)
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("noeviction")
        .query(&mut node.connection())
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .query(&mut node.connection())
        .unwrap();
    assert_single_node_error(&single, "faults:oom", &node, "OOM").await;
}

/// A node turned into a read-only replica after first contact refuses the
/// write: a vote against naming the node and its READONLY reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_turned_replica_is_a_vote_against() {
    let primary = RedisServer::start();
    let node = RedisServer::start();
    let single = support::builder(std::slice::from_ref(&node))
        .build()
        .unwrap();
    single
        .try_lock("faults:readonly", TTL)
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(primary.port())
        .query(&mut node.connection())
        .unwrap();
    assert_single_node_error(&single, "faults:readonly", &node, "READONLY").await;
}

/// The same server listed twice (two URLs, two databases: the keys would not
/// even collide) is refused at first contact, naming both URLs' address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_server_listed_twice_is_refused() {
    let nodes = servers(2);
    let urls = vec![
        format!("{}/0", nodes[0].url()),
        format!("{}/1", nodes[0].url()),
        nodes[1].url(),
    ];
    let redlock = Redlock::new(urls).unwrap();
    let err = redlock.lock("faults:twice", TTL).await.unwrap_err();
    assert!(err.is_misconfigured(), "got {err}");
    assert!(err.to_string().contains("same server"), "{err}");
    assert!(
        err.to_string().contains(&nodes[0].port().to_string()),
        "{err}"
    );
    let key = redlock.key("faults:twice").unwrap();
    assert!(
        nodes[0].get(&key).is_none() && nodes[1].get(&key).is_none(),
        "nothing was locked"
    );
    // It stays refused.
    assert!(matches!(
        redlock.try_lock("faults:twice", TTL).await,
        Err(Error::Misconfigured { .. })
    ));
}

/// A node that is a replica is refused at first contact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_in_the_node_list_is_refused() {
    let primary = RedisServer::start();
    let replica =
        RedisServer::start_with(&["--replicaof", "127.0.0.1", &primary.port().to_string()]);
    let others = servers(2);
    let redlock = Redlock::new([others[0].url(), others[1].url(), replica.url()]).unwrap();
    let err = redlock.lock("faults:replica", TTL).await.unwrap_err();
    assert!(err.is_misconfigured(), "got {err}");
    assert!(
        err.to_string()
            .contains(&format!("127.0.0.1:{}", replica.port())),
        "{err}"
    );
    assert!(err.to_string().contains("slave"), "{err}");
}

/// A node unreachable at first contact is checked later, in the background,
/// once it answers: a duplicate that comes up late is still found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_checked_when_it_comes_up_later() {
    let nodes = servers(2);
    let mut late = RedisServer::reserved();
    let redlock = Redlock::builder([
        nodes[0].url(),
        nodes[1].url(),
        late.url(),
        format!("{}/3", nodes[0].url()),
    ])
    .node_timeout(Duration::from_millis(200))
    .build()
    .unwrap();
    // The duplicate is found at once, whatever the late node does.
    assert!(
        redlock
            .try_lock("faults:late", TTL)
            .await
            .unwrap_err()
            .is_misconfigured()
    );
    late.spawn().unwrap();

    // Without a duplicate: the late node is checked when it comes up, and used.
    let redlock = Redlock::builder([nodes[0].url(), nodes[1].url(), late.url()])
        .node_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    late.kill();
    redlock
        .lock("faults:late", TTL)
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    late.spawn().unwrap();
    assert!(
        support::lock_until_held_on(&redlock, "faults:late", &late).await,
        "the late node was checked and used"
    );
}

/// A password in the URL works against `--requirepass`, and an ACL user's
/// name and password against a server with that user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_and_acl_users_in_urls() {
    let with_password = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let with_user = RedisServer::start_with(&[
        "--user", "locker", "on", ">pa55", "~*", "&*", "+@all", "--user", "default", "off",
    ]);
    let urls = [
        format!("redis://:s3cret@127.0.0.1:{}", with_password.port()),
        format!("redis://locker:pa55@127.0.0.1:{}", with_user.port()),
    ];
    for url in urls {
        let redlock = Redlock::new([url.as_str()]).unwrap();
        let guard = redlock.try_lock("faults:auth", TTL).await.unwrap();
        assert_eq!(guard.unlock().await.unwrap(), quorlock::Unlocked::Released);
        let err = Redlock::new([url.replace("s3cret", "wrong").replace("pa55", "wrong")])
            .unwrap()
            .try_lock("faults:auth", TTL)
            .await
            .unwrap_err();
        assert!(
            err.is_unavailable(),
            "a wrong password is a failed node: {err}"
        );
        let source = std::error::Error::source(&err).unwrap().to_string();
        assert!(source.contains("authentication failed"), "{source}");
        // The message itself names the node and why it could not be used.
        let shown = err.to_string();
        let node = url.rsplit('@').next().unwrap_or_default();
        assert!(
            shown.contains(&format!("failed: node {node}")) && shown.contains("authentication"),
            "{shown}"
        );
        assert_eq!(err.failed().len(), 1, "{err:?}");
    }
}

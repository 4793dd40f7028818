//! A node judged by its data, not only by what its server says of itself.
//! Each test is one way the two part ways in production: a durable node
//! back empty, a resync on open connections, an uptime inflated by a clock
//! step, clients with different clock tolerances, `FLUSHALL`, eviction and
//! an ACL user without `INFO`. Each runs the hazard's sequence: holder A on
//! a bare quorum (nodes 0 and 1 of 3: node 2 held by another client's
//! short key when A locks), the fault on node 1, then client B (a fresh
//! one, and one that knew the nodes) tries the lock while A is valid.
//! "Two holders" means a grant to B while A's validity has not ended.

mod support;

use std::time::{Duration, Instant};

use quorlock::{Error, LockGuard, LostReason, Redlock, RedlockBuilder};
use support::clock::{Clock, ClockServer};
use support::data_faults::{url_as, user_without_info};
use support::{RedisServer, lock_once, urls};

const RESOURCE: &str = "data:resource";
const TTL: Duration = Duration::from_secs(10);

fn builder(urls: Vec<String>) -> RedlockBuilder {
    Redlock::builder(urls).node_timeout(Duration::from_millis(200))
}

fn client(nodes: &[RedisServer]) -> Redlock {
    builder(urls(nodes)).build().unwrap()
}

/// Holder A takes the lock on nodes 0 and 1: node 2 is held by another
/// client's key for 300 ms, which is gone (expired) when this returns.
async fn holder_on_nodes_0_and_1(nodes: &[RedisServer], a_client: &Redlock) -> LockGuard {
    let key = a_client.key(RESOURCE).unwrap();
    nodes[2].set_px(&key, "another-client", 300);
    let a = a_client.try_lock(RESOURCE, TTL).await.unwrap();
    assert!(nodes[0].get(&key).is_some() && nodes[1].get(&key).is_some());
    let expired = Instant::now() + Duration::from_secs(5);
    while nodes[2].get(&key).is_some() {
        assert!(Instant::now() < expired, "node 2's short key never expired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a
}

/// B's tries, every 100 ms for `over`: each must be refused while A is
/// valid. Returns the last error.
async fn refused_while_a_is_valid(b: &Redlock, a: &LockGuard, over: Duration, who: &str) -> Error {
    let until = Instant::now() + over;
    let mut last = None;
    while Instant::now() < until && Instant::now() < a.valid_until() {
        match b.try_lock(RESOURCE, TTL).await {
            Ok(guard) => {
                let a_left = a.valid_until().saturating_duration_since(Instant::now());
                let _ = guard.unlock().await;
                panic!("{who}: two holders: B got the lock with A valid for {a_left:?} more");
            }
            Err(err) => last = Some(err),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let err = last.expect("B tried while A was valid");
    println!("{who}: refused: {err}");
    err
}

/// Waits for `lost` (A's `lost()`), which must tell that node 1's data or
/// server changed before A's validity ends.
async fn told(a: &LockGuard, lost: impl std::future::Future<Output = Error>) {
    let lost = tokio::time::timeout(Duration::from_secs(5), lost)
        .await
        .expect("A is told within 5 s, not at its expiry");
    println!("A told: {lost}");
    assert!(
        matches!(
            lost.lost_reason(),
            Some(LostReason::DataLost { .. } | LostReason::ServerChanged { .. })
        ),
        "{lost}"
    );
    assert!(Instant::now() < a.valid_until());
}

/// The hazard's sequence with `fault` done to node 1: a client that knew
/// the nodes (made by `make`, as every client here), holder A, the fault;
/// then the client that knew them and a fresh one are refused while A is
/// valid, and A is told.
async fn no_second_holder_after(
    nodes: &mut [RedisServer],
    make: impl Fn(&[RedisServer]) -> Redlock,
    fault: impl FnOnce(&mut RedisServer),
) {
    let knew = make(nodes);
    lock_once(&knew, RESOURCE, TTL).await;
    let a_client = make(nodes);
    let a = holder_on_nodes_0_and_1(nodes, &a_client).await;
    let lost = a.lost();
    fault(&mut nodes[1]);
    assert!(nodes[1].get(a.key()).is_none(), "node 1 lost A's key");
    refused_while_a_is_valid(&knew, &a, Duration::from_secs(2), "a client that knew it").await;
    let fresh = make(nodes);
    refused_while_a_is_valid(&fresh, &a, Duration::from_secs(1), "a fresh client").await;
    told(&a, lost).await;
}

/// 1. A node configured durable (`appendonly yes`, `appendfsync always`)
/// comes back with an empty data directory: its configuration says it
/// kept every key, its data says it kept none. No second holder, for a
/// client that knew the node and for a fresh one, and A is told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_node_back_empty_gives_no_second_holder() {
    let aof = ["--appendonly", "yes", "--appendfsync", "always"];
    let mut nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_with(&aof)).collect();
    no_second_holder_after(&mut nodes, client, RedisServer::restart_empty).await;
}

/// The control: with durable nodes trusted off, the same sequence gives no
/// second holder already (the restart alone holds the node back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_node_back_empty_with_durable_nodes_not_trusted() {
    let aof = ["--appendonly", "yes", "--appendfsync", "always"];
    let mut nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_with(&aof)).collect();
    let untrusting = |urls: Vec<String>| builder(urls).trust_durable_nodes(false).build().unwrap();
    let a_client = untrusting(urls(&nodes));
    let a = holder_on_nodes_0_and_1(&nodes, &a_client).await;
    nodes[1].restart_empty();
    let fresh = untrusting(urls(&nodes));
    refused_while_a_is_valid(&fresh, &a, Duration::from_secs(1), "a fresh client").await;
}

/// 2. Node 1 resyncs from an empty server (`REPLICAOF`, which replaces its
/// data) and is made a primary again (`REPLICAOF NO ONE`), all on the
/// connections its clients keep open: its `run_id` stays, no check runs.
/// The client that knew it is refused, and A is told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resync_on_open_connections_gives_no_second_holder() {
    let nodes = support::servers(3);
    let empty = RedisServer::start();
    let knew = client(&nodes);
    lock_once(&knew, RESOURCE, TTL).await;
    let a_client = client(&nodes);
    let a = holder_on_nodes_0_and_1(&nodes, &a_client).await;
    let lost = a.lost();
    let run_id = nodes[1].info_field("server", "run_id");
    nodes[1].resync_from(&empty);
    assert_eq!(nodes[1].info_field("server", "run_id"), run_id);
    assert!(
        nodes[1].get(a.key()).is_none(),
        "node 1's data was replaced"
    );
    refused_while_a_is_valid(&knew, &a, Duration::from_secs(2), "a client that knew it").await;
    told(&a, lost).await;
}

/// 3. Node 1 restarts empty with its clock 20 s behind, is seen so by the
/// clients that knew it, then its clock is set right (a server started
/// before NTP's first step): its uptime now reads 20 s more than it ran,
/// longer than the grace. A fresh client, and the one that knew it, are
/// refused while A is valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uptime_inflated_by_a_clock_step_gives_no_second_holder() {
    let grace = Duration::from_secs(10);
    let (mut nodes, clocks): (Vec<RedisServer>, Vec<Clock>) =
        (0..3).map(|_| ClockServer::start().into_parts()).unzip();
    let make = |nodes: &[RedisServer]| builder(urls(nodes)).restart_grace(grace).build().unwrap();
    let knew = make(&nodes);
    lock_once(&knew, RESOURCE, TTL).await;
    let a_client = make(&nodes);
    let a = holder_on_nodes_0_and_1(&nodes, &a_client).await;
    clocks[1].write_offset(-20_000);
    nodes[1].restart_empty();
    clocks[1].set_offset(-20_000);
    // The clients that knew node 1 see it back before its clock is set right.
    let seen = Instant::now() + Duration::from_secs(5);
    while a_client
        .status(RESOURCE)
        .await
        .unwrap()
        .nodes
        .get(1)
        .is_none_or(|node| node.not_counted.is_none())
    {
        assert!(Instant::now() < seen, "A's client never saw node 1 back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    clocks[1].set_offset(0);
    let up: u64 = nodes[1]
        .info_field("server", "uptime_in_seconds")
        .and_then(|up| up.parse().ok())
        .unwrap();
    assert!(up >= grace.as_secs(), "uptime reads {up} s");
    refused_while_a_is_valid(&make(&nodes), &a, Duration::from_secs(1), "a fresh client").await;
    refused_while_a_is_valid(&knew, &a, Duration::from_secs(1), "a client that knew it").await;
}

/// 4. Clients with different clock tolerances: A keeps the default
/// (100 ms); B1, which met the nodes before A, and B2, after, use 1 s (as
/// for distant nodes). Node 0's clock steps 800 ms forward under A's
/// bare quorum, which expires A's key there 800 ms early: more than A's
/// validity was shortened by its own tolerance, less than B's. Neither B
/// gets the lock while A is valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_with_different_clock_tolerances_give_no_second_holder() {
    let ttl = Duration::from_secs(2);
    let (nodes, clocks): (Vec<RedisServer>, Vec<Clock>) =
        (0..3).map(|_| ClockServer::start().into_parts()).unzip();
    let tolerant = |nodes: &[RedisServer]| {
        builder(urls(nodes))
            .clock_tolerance(Duration::from_secs(1))
            .build()
            .unwrap()
    };
    let b1 = tolerant(&nodes);
    lock_once(&b1, RESOURCE, ttl).await;
    let a_client = client(&nodes);
    let key = a_client.key(RESOURCE).unwrap();
    nodes[2].set_px(&key, "another-client", 300);
    let a = a_client.try_lock(RESOURCE, ttl).await.unwrap();
    let b2 = tolerant(&nodes);
    lock_once(&b2, "data:other", ttl).await;
    let clock = clocks[0].clone();
    tokio::task::spawn_blocking(move || clock.set_offset(800))
        .await
        .unwrap();
    let mut tries = 0;
    while Instant::now() < a.valid_until() {
        for (who, b) in [("B1", &b1), ("B2", &b2)] {
            if let Ok(guard) = b.try_lock(RESOURCE, ttl).await {
                let a_left = a.valid_until().saturating_duration_since(Instant::now());
                assert!(
                    a_left.is_zero(),
                    "two holders: {who} got the lock with A valid for {a_left:?} more \
                     (node 0's key there: {:?})",
                    nodes[0].get(&key)
                );
                let _ = guard.unlock().await;
            }
            tries += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(tries > 10, "only {tries} tries");
}

/// 5a. `FLUSHALL` on node 1: every key gone, its server the same. No
/// second holder, for a client that knew the node and for a fresh one, and
/// A is told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushall_gives_no_second_holder() {
    let mut nodes = support::servers(3);
    no_second_holder_after(&mut nodes, client, |node| node.flushall()).await;
}

/// 5b. A node whose memory policy evicts keys (`maxmemory` with
/// `allkeys-lru`, or `volatile-lru`, ElastiCache's default, which evicts
/// keys with a TTL: lock keys first) is refused by default, with an error
/// that names the setting; `allow_eviction(true)` takes it, and the
/// eviction of a held lock's key then gives a second holder (shown with
/// `volatile-lru`, which never evicts the data mark, a key without a TTL;
/// `allkeys-lru` may evict the mark too, which is then seen).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_evicts_is_refused_unless_allowed() {
    for policy in ["allkeys-lru", "volatile-lru"] {
        let mut nodes = support::servers(3);
        let probe = RedisServer::start();
        let limit = (probe.used_memory() + 2 * 1024 * 1024).to_string();
        drop(probe);
        nodes[1] = RedisServer::start_with(&["--maxmemory", &limit, "--maxmemory-policy", policy]);
        let err = client(&nodes)
            .try_lock(RESOURCE, TTL)
            .await
            .expect_err("a node that evicts lock keys is refused");
        println!("{policy}: refused: {err}");
        assert!(matches!(err, Error::Misconfigured { .. }), "{err}");
        assert!(err.to_string().contains("maxmemory-policy"), "{err}");
        assert!(err.to_string().contains(policy), "{err}");

        if policy != "volatile-lru" {
            continue;
        }
        let allowing = |urls: Vec<String>| builder(urls).allow_eviction(true).build().unwrap();
        let a_client = allowing(urls(&nodes));
        let a = holder_on_nodes_0_and_1(&nodes, &a_client).await;
        nodes[1].fill_until_evicted(a.key(), 10_000, 100_000);
        let b = allowing(urls(&nodes))
            .try_lock(RESOURCE, TTL)
            .await
            .expect("the documented hazard: the evicted key is granted again");
        assert!(Instant::now() < a.valid_until() && b.is_valid());
        println!("{policy}: allowed: the eviction gave a second holder, as documented");
    }
}

/// 6. An ACL user that may not run `INFO` (a managed service's restricted
/// user): no server change can be read, but node 1's empty restart is
/// still seen, by a client that knew it and by a fresh one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_restart_is_seen_without_info() {
    let acl = user_without_info("locker", "secret");
    let acl: Vec<&str> = acl.iter().map(String::as_str).collect();
    let mut nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_with(&acl)).collect();
    let as_locker = |nodes: &[RedisServer]| {
        let urls = nodes.iter().map(|n| url_as(n, "locker", "secret"));
        builder(urls.collect()).build().unwrap()
    };
    no_second_holder_after(&mut nodes, as_locker, RedisServer::restart_empty).await;
}

/// What a status shows of each new reason: a node that lost its data,
/// for the client that knew it and for a fresh one (`NotCounted::DataLost`),
/// and a set refused for a node that evicts (`LockStatus::refused`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_shows_a_loss_of_data_and_a_refusal() {
    let nodes = support::servers(3);
    let knew = client(&nodes);
    lock_once(&knew, RESOURCE, TTL).await;
    nodes[1].flushall();
    for (who, redlock) in [
        ("the client that knew it", &knew),
        ("a fresh client", &client(&nodes)),
    ] {
        // The client that knew it sees the loss at its next reading of the
        // node (a grant there, or the background reading within a second).
        let seen = Instant::now() + Duration::from_secs(5);
        let status = loop {
            let status = redlock.status(RESOURCE).await.unwrap();
            if status.nodes[1].not_counted.is_some() || Instant::now() > seen {
                break status;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        println!("{who}:\n{status}");
        let reason = status.nodes[1].not_counted.as_ref();
        assert!(
            reason.is_some_and(quorlock::NotCounted::is_data_lost),
            "{who}: {status}"
        );
        assert!(
            status
                .to_string()
                .contains("recovering from a loss of data"),
            "{status}"
        );
        assert!(status.refused.is_none());
    }

    let mut nodes = support::servers(3);
    nodes[0] =
        RedisServer::start_with(&["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"]);
    let status = client(&nodes).status(RESOURCE).await.unwrap();
    println!("{status}");
    let refused = status.refused.as_deref().unwrap_or_default();
    assert!(refused.contains("maxmemory-policy allkeys-lru"), "{status}");
    assert!(
        status.to_string().starts_with("locking refused: "),
        "{status}"
    );
}

/// With clocks not watched (`clock_tolerance(0)`), the background reading
/// still reads every node's data mark: a holder is told of a `FLUSHALL`
/// under it within seconds, with no grant on the node to show it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_is_told_of_a_loss_with_clocks_not_watched() {
    let nodes = support::servers(3);
    let a_client = builder(urls(&nodes))
        .clock_tolerance(Duration::ZERO)
        .build()
        .unwrap();
    let a = holder_on_nodes_0_and_1(&nodes, &a_client).await;
    let lost = a.lost();
    nodes[1].flushall();
    told(&a, lost).await;
}

/// Clients meeting a brand-new set moments apart, each over links of its
/// own with other delays to each node (0 to 25 ms each way), as processes
/// starting together on several machines do: each reads some nodes before,
/// and some after, the others made their marks and recorded them. None may
/// take a node whose mark another client just made for one that lost its
/// data (which would hold nodes back for the grace): every first lock
/// succeeds, no node is held back, and every second lock succeeds. Over 4
/// fresh sets.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clients_meeting_a_new_set_moments_apart_keep_counting_it() {
    use rand::RngExt;
    for set in 0..4 {
        let nodes = support::servers(5);
        let links: Vec<Vec<support::DelayProxy>> = (0..10)
            .map(|_| {
                let mut rng = rand::rng();
                (nodes.iter())
                    .map(|node| {
                        let one_way = Duration::from_millis(rng.random_range(0..25));
                        support::DelayProxy::start(node.port(), one_way)
                    })
                    .collect()
            })
            .collect();
        let clients: Vec<Redlock> = (links.iter())
            .map(|proxies| builder(support::proxy_urls(proxies)).build().unwrap())
            .collect();
        let first = clients.iter().enumerate().map(|(i, redlock)| async move {
            tokio::time::sleep(Duration::from_millis(5 * i as u64)).await;
            let guard = redlock.try_lock(format!("fresh:{i}"), TTL).await;
            (i, guard.map(drop))
        });
        for (i, outcome) in futures::future::join_all(first).await {
            outcome.unwrap_or_else(|err| panic!("set {set}, client {i}, first lock: {err}"));
        }
        for (i, redlock) in clients.iter().enumerate() {
            redlock.flush().await;
            let status = redlock.status("fresh:status").await.unwrap();
            assert!(
                status.nodes.iter().all(|node| node.not_counted.is_none()),
                "set {set}, client {i}:\n{status}"
            );
            lock_once(redlock, &format!("fresh:{i}:again"), TTL).await;
        }
    }
}

/// A node checked while it loads its data after a restart (its append-only
/// file) answers every check command `LOADING`. That is not the node
/// refusing a command (an ACL's refusal, which the check does without): a
/// check that took it so would let the node count without its data mark,
/// and a later loss of its data would go unseen. Client C first meets the
/// nodes while node 1 loads (for about 4 s); once node 1 counts for C,
/// `FLUSHALL` on node 1 under holder A must still keep C from the lock
/// while A is valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_checked_while_it_loads_still_shows_a_later_loss() {
    let mut nodes = support::servers(3);
    // Durable, and slow to load: 40,000 keys at 0.1 ms each, answering
    // (LOADING) after each 1,024 commands of its append-only file.
    nodes[1] = RedisServer::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--key-load-delay",
        "100",
    ]);
    let mut fill = redis::pipe();
    for i in 0..40_000 {
        fill.set(format!("filler:{i}"), "x").ignore();
    }
    let _: () = fill.query(&mut nodes[1].connection()).unwrap();
    let node_1 = nodes[1].url();
    let mut node = std::mem::replace(&mut nodes[1], RedisServer::reserved());
    node.kill();
    let restarted = tokio::task::spawn_blocking(move || {
        node.spawn_again();
        node
    });
    // PING is answered while a server loads; GET is not.
    let loading = || {
        redis::Client::open(node_1.as_str())
            .and_then(|client| client.get_connection_with_timeout(Duration::from_millis(500)))
            .and_then(|mut connection| {
                redis::cmd("GET")
                    .arg("filler:0")
                    .query::<String>(&mut connection)
            })
            .is_err_and(|err| err.code() == Some("LOADING"))
    };
    let loading_seen = support::eventually(Duration::from_secs(10), loading);
    assert!(loading_seen.await, "node 1 never answered LOADING");
    // C meets the nodes now: its check of node 1 is answered LOADING.
    let c = builder(vec![nodes[0].url(), node_1.clone(), nodes[2].url()])
        .build()
        .unwrap();
    let loading_until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < loading_until {
        if let Ok(guard) = c.try_lock("data:while-loading", TTL).await {
            let _ = guard.unlock().await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        loading(),
        "node 1 loaded in under a second: too fast to be met loading"
    );
    nodes[1] = restarted.await.unwrap();
    let loaded = support::eventually(Duration::from_secs(10), || !loading());
    assert!(loaded.await, "node 1 still loading");
    let counts_again = Instant::now() + Duration::from_secs(15);
    loop {
        let status = c.status(RESOURCE).await.unwrap();
        if !status.to_string().contains("does not count") || Instant::now() > counts_again {
            println!("C's view of the nodes:\n{status}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let a_client = client(&nodes);
    let a = holder_on_nodes_0_and_1(&nodes, &a_client).await;
    nodes[1].flushall();
    refused_while_a_is_valid(
        &c,
        &a,
        Duration::from_secs(2),
        &format!("a client that met node 1 ({node_1}) while it loaded"),
    )
    .await;
}

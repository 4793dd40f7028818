//! The queue of waiters on the nodes: first come first served across
//! clients, waiters that go away stop blocking, nodes that disagree about the
//! queue do not stop the lock, and a `lock` call's patience is time. (The
//! multi-process fairness runs are in `tests/fairness.rs`.)

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use quorlock::Redlock;
use support::{RedisServer, builder, eventually, holders, servers};

const TTL: Duration = Duration::from_secs(10);
/// Generous: these bound hangs, not speed.
const PATIENT: Duration = Duration::from_secs(30);

fn patient_client(nodes: &[RedisServer]) -> Redlock {
    builder(nodes).acquire_timeout(PATIENT).build().unwrap()
}

/// How many waiters each node has queued for `resource`.
fn queued(nodes: &[RedisServer], redlock: &Redlock, resource: &str) -> Vec<i64> {
    let mut queue = redlock.key(resource).unwrap();
    queue.extend_from_slice(b":quorlock-queue");
    nodes
        .iter()
        .map(|node| {
            if !node.is_running() {
                return -1;
            }
            redis::cmd("ZCARD")
                .arg(&queue)
                .query(&mut node.connection())
                .unwrap_or(-1)
        })
        .collect()
}

/// Waits until every running node in `on` queues `count` waiters.
async fn wait_queued(
    nodes: &[RedisServer],
    on: &[usize],
    redlock: &Redlock,
    resource: &str,
    count: i64,
) {
    let reached = eventually(Duration::from_secs(10), || {
        let queued = queued(nodes, redlock, resource);
        on.iter().all(|&index| queued[index] == count)
    })
    .await;
    assert!(
        reached,
        "expected {count} queued on nodes {on:?}, got {:?}",
        queued(nodes, redlock, resource)
    );
}

/// Counts holders in memory: never more than one at a time.
#[derive(Clone, Default)]
struct Holders {
    inside: Arc<AtomicUsize>,
    overlaps: Arc<AtomicUsize>,
}

impl Holders {
    async fn hold(&self, redlock: &Redlock, resource: &str, for_: Duration) -> Instant {
        let guard = redlock.lock(resource, TTL).await.expect("lock");
        let got = Instant::now();
        if self.inside.fetch_add(1, Ordering::SeqCst) != 0 {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        tokio::time::sleep(for_).await;
        self.inside.fetch_sub(1, Ordering::SeqCst);
        guard.unlock().await.expect("unlock");
        got
    }
}

/// Waiters of three clients that queue one after the other get the lock in
/// that order when it is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_different_clients_are_served_in_arrival_order() {
    let nodes = servers(3);
    let holder = patient_client(&nodes);
    let guard = holder.lock("queue:order", TTL).await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for (index, name) in ["a", "b", "c", "d"].into_iter().enumerate() {
        let client = patient_client(&nodes);
        let order = order.clone();
        waiters.push(tokio::spawn({
            let client = client.clone();
            async move {
                let guard = client.lock("queue:order", TTL).await.unwrap();
                order.lock().unwrap().push(name);
                tokio::time::sleep(Duration::from_millis(5)).await;
                guard.unlock().await.unwrap();
            }
        }));
        wait_queued(&nodes, &[0, 1, 2], &client, "queue:order", index as i64 + 1).await;
    }
    guard.unlock().await.unwrap();
    for waiter in waiters {
        tokio::time::timeout(PATIENT, waiter)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(*order.lock().unwrap(), ["a", "b", "c", "d"]);
    wait_queued(&nodes, &[0, 1, 2], &holder, "queue:order", 0).await;
}

/// A waiter whose `lock` future is dropped leaves the queue at once: the
/// waiter behind it gets the released lock without waiting for the dropped
/// one's entry to expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_lock_call_leaves_the_queue_at_once() {
    let nodes = servers(3);
    let holder = patient_client(&nodes);
    let guard = holder.lock("queue:dropped", TTL).await.unwrap();
    let first = patient_client(&nodes);
    let dropped = tokio::spawn({
        let first = first.clone();
        async move { first.lock("queue:dropped", TTL).await.map(drop) }
    });
    wait_queued(&nodes, &[0, 1, 2], &holder, "queue:dropped", 1).await;
    let second = patient_client(&nodes);
    let waiting = tokio::spawn({
        let second = second.clone();
        async move {
            let guard = second.lock("queue:dropped", TTL).await.unwrap();
            let got = Instant::now();
            guard.unlock().await.unwrap();
            got
        }
    });
    wait_queued(&nodes, &[0, 1, 2], &holder, "queue:dropped", 2).await;
    dropped.abort();
    wait_queued(&nodes, &[0, 1, 2], &holder, "queue:dropped", 1).await;
    let released = Instant::now();
    guard.unlock().await.unwrap();
    let got = tokio::time::timeout(PATIENT, waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(
        got - released < Redlock::WAITER_LIFETIME / 2,
        "served {:?} after the release",
        got - released
    );
}

/// An entry lost on one node (deleted behind the client's back), a node
/// restarted empty while waiters queue, and a frozen node: every waiter
/// still gets the lock, one at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_that_disagree_about_the_queue_do_not_stop_the_lock() {
    let mut nodes = servers(5);
    let holders = Holders::default();
    let holder = patient_client(&nodes);
    let guard = holder.lock("queue:disagree", TTL).await.unwrap();
    let clients: Vec<Redlock> = (0..4).map(|_| patient_client(&nodes)).collect();
    let mut waiters = Vec::new();
    for (index, client) in clients.iter().enumerate() {
        let (client, holders) = (client.clone(), holders.clone());
        waiters.push(tokio::spawn(async move {
            for _ in 0..3 {
                holders
                    .hold(&client, "queue:disagree", Duration::from_millis(10))
                    .await;
            }
        }));
        wait_queued(
            &nodes,
            &[0, 1, 2, 3, 4],
            &holder,
            "queue:disagree",
            index as i64 + 1,
        )
        .await;
    }
    // The first waiter's entry is lost on node 0; node 1 restarts empty
    // (it also loses the holder's key); node 2 freezes.
    let mut queue = holder.key("queue:disagree").unwrap();
    queue.extend_from_slice(b":quorlock-queue");
    let first: Vec<Vec<u8>> = redis::cmd("ZRANGE")
        .arg(&queue)
        .arg(0)
        .arg(0)
        .query(&mut nodes[0].connection())
        .unwrap();
    let _: i64 = redis::cmd("ZREM")
        .arg(&queue)
        .arg(&first[0])
        .query(&mut nodes[0].connection())
        .unwrap();
    nodes[1].restart();
    nodes[2].pause();
    tokio::time::sleep(Duration::from_millis(100)).await;
    guard.unlock().await.unwrap();
    let all = async {
        for waiter in waiters {
            waiter.await.unwrap();
        }
    };
    let finished = tokio::time::timeout(Duration::from_secs(60), all).await;
    nodes[2].resume();
    assert!(finished.is_ok(), "waiters stuck");
    assert_eq!(holders.overlaps.load(Ordering::SeqCst), 0);
}

/// A `lock` call under continuous contention (a holder that knows nothing
/// of the queue keeps the key and announces a "release" every 20 ms, as a
/// busy lock wakes waiters) gives up only once its patience, retry count ×
/// retry delay, has passed: wake-ups are not retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_under_continuous_contention_waits_its_whole_patience() {
    let nodes = servers(3);
    let (retries, delay) = (5, Duration::from_millis(100));
    let patience = delay * retries;
    let redlock = builder(&nodes)
        .retry_count(retries)
        .retry_delay(delay)
        .build()
        .unwrap();
    let key = redlock.key("queue:patience").unwrap();
    for node in &nodes {
        node.set_px(&key, "foreign-holder", 60_000);
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = std::thread::spawn({
        let (urls, key, stop) = (support::urls(&nodes), key.clone(), stop.clone());
        move || {
            let mut connections: Vec<redis::Connection> = urls
                .iter()
                .map(|url| {
                    redis::Client::open(url.as_str())
                        .unwrap()
                        .get_connection()
                        .unwrap()
                })
                .collect();
            let mut turn = 0u64;
            while !stop.load(Ordering::SeqCst) {
                turn += 1;
                for connection in &mut connections {
                    let _: () = redis::pipe()
                        .cmd("SET")
                        .arg(&key)
                        .arg(format!("foreign-holder-{turn}"))
                        .arg("PX")
                        .arg(60_000)
                        .ignore()
                        .cmd("PUBLISH")
                        .arg(&key)
                        .arg("released")
                        .ignore()
                        .query(connection)
                        .unwrap();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    });
    let started = Instant::now();
    let outcome = redlock.lock("queue:patience", TTL).await;
    let waited = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    churn.join().unwrap();
    let err = outcome.expect_err("the key never came free");
    assert!(err.is_contended(), "got {err}");
    assert!(
        waited >= patience && waited < patience + Duration::from_secs(2),
        "gave up after {waited:?}, patience {patience:?}"
    );
    // The acquire timeout is the patience when set.
    let timeout = Duration::from_millis(300);
    let timed = builder(&nodes).acquire_timeout(timeout).build().unwrap();
    let started = Instant::now();
    assert!(
        timed
            .lock("queue:patience", TTL)
            .await
            .unwrap_err()
            .is_contended()
    );
    let waited = started.elapsed();
    assert!(
        waited >= timeout && waited < timeout + Duration::from_secs(2),
        "gave up after {waited:?}"
    );
    timed.flush().await;
    redlock.flush().await;
    wait_queued(&nodes, &[0, 1, 2], &redlock, "queue:patience", 0).await;
}

/// Locking a resource whose key would be another lock's queue, or a
/// client's liveness key, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_keys_are_not_resources() {
    let nodes = servers(1);
    let redlock = builder(&nodes).build().unwrap();
    for resource in ["stock:quorlock-queue", "quorlock-client:q0123"] {
        let err = redlock.try_lock(resource, TTL).await.unwrap_err();
        assert!(
            matches!(err, quorlock::Error::InvalidResource { .. }),
            "got {err}"
        );
    }
}

/// A client that found a key taken joins the queue in its next call's first
/// round (no `SET NX` that would be refused); when that round finds the lock
/// free it takes it all the same, and the call after goes back to `SET NX`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_found_taken_is_joined_at_once_next_time() {
    let nodes = servers(3);
    let (holder, waiter) = (patient_client(&nodes), patient_client(&nodes));
    let resource = "queue:busy-hint";
    let held = holder.lock(resource, TTL).await.unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move { waiter.lock(resource, TTL).await }
    });
    wait_queued(&nodes, &[0, 1, 2], &waiter, resource, 1).await;
    held.unlock().await.unwrap();
    let won = waiting.await.unwrap().unwrap();
    let key = won.key().to_vec();
    won.unlock().await.unwrap();
    // The holder's release may reach a node after the waiter won without
    // it: it hands the key on there, and the waiter's leave (or its client,
    // told of the handoff) passes it on; both before the counts below. A
    // handoff notification that reaches the waiter's client later still
    // makes it send one more leave, which the counts can catch (seen about
    // once in 400 runs with the cores busy): no state on the nodes shows it.
    holder.flush().await;
    assert!(
        eventually(Duration::from_secs(5), || nodes
            .iter()
            .all(|node| node.get(&key).is_none()))
        .await,
        "every node let the key go"
    );
    waiter.flush().await;

    // The lock is free and nobody waits. The waiter's client remembers the
    // key as taken: its first round is the queue script, and it is granted.
    support::reset_stats(&nodes);
    let guard = waiter.lock(resource, TTL).await.unwrap();
    waiter.flush().await; // a round's last answers come in the background
    let calls = support::command_calls(&nodes);
    assert_eq!(calls.get("evalsha").copied(), Some(3), "{calls:?}");
    assert_eq!(calls.get("zrange").copied(), Some(3), "{calls:?}");
    guard.unlock().await.unwrap();
    waiter.flush().await;

    // Found free: the next call is a plain `SET NX` again.
    support::reset_stats(&nodes);
    let guard = waiter.lock(resource, TTL).await.unwrap();
    waiter.flush().await;
    let calls = support::command_calls(&nodes);
    assert_eq!(calls.get("set").copied(), Some(3), "{calls:?}");
    assert_eq!(calls.get("evalsha"), None, "{calls:?}");
    guard.unlock().await.unwrap();
}

/// A client that knows nothing of the queue (rslock, on the same key with
/// `key_prefix("")`) still excludes and is excluded: its lock keeps quorlock
/// waiters out, its release (a plain delete, no handoff) lets the queued
/// waiter in at its refresh round, and neither a quorlock holder nor a
/// reservation for a quorlock waiter lets it in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_the_queue_still_excludes_and_is_excluded() {
    let nodes = servers(3);
    let urls = support::urls(&nodes);
    let quorlock = builder(&nodes)
        .key_prefix("")
        .acquire_timeout(PATIENT)
        .build()
        .unwrap();
    let mut foreign = rslock::LockManager::new(urls.clone());
    foreign.set_retry(1, Duration::from_millis(1));
    let resource = "interop:stock";

    // Foreign holder: the quorlock caller queues, and gets the lock once
    // the foreign release deleted the key.
    let held = foreign
        .lock(resource, TTL)
        .await
        .expect("rslock takes a free key");
    let waiting = tokio::spawn({
        let quorlock = quorlock.clone();
        async move { quorlock.lock(resource, TTL).await }
    });
    wait_queued(&nodes, &[0, 1, 2], &quorlock, resource, 1).await;
    assert!(!waiting.is_finished(), "quorlock got a key rslock holds");
    assert!(
        (nodes.iter()).all(|node| node.get(resource.as_bytes()).as_deref() == Some(&held.val[..])),
        "a waiter left the foreign holder's value as it was"
    );
    foreign.unlock(&held).await;
    let guard = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the queued waiter took the freed key")
        .unwrap()
        .unwrap();

    // Quorlock holder, with a waiter of another client that polls
    // (notifications off): rslock is refused while quorlock holds, and
    // while the key is handed on to the waiter.
    assert!(
        foreign.lock(resource, TTL).await.is_err(),
        "rslock got a held key"
    );
    let polling = builder(&nodes)
        .key_prefix("")
        .release_notifications(false)
        .retry_delay(Duration::from_secs(1))
        .acquire_timeout(PATIENT)
        .build()
        .unwrap();
    let next = tokio::spawn({
        let polling = polling.clone();
        async move { polling.lock(resource, TTL).await }
    });
    wait_queued(&nodes, &[0, 1, 2], &quorlock, resource, 1).await;
    guard.unlock().await.unwrap();
    assert!(
        foreign.lock(resource, TTL).await.is_err(),
        "rslock got a reserved key"
    );
    let next = next.await.unwrap().unwrap();
    assert!(
        foreign.lock(resource, TTL).await.is_err(),
        "rslock got a held key"
    );
    next.unlock().await.unwrap();
    // Free and nobody waits: rslock takes it again.
    let again = foreign
        .lock(resource, TTL)
        .await
        .expect("rslock takes the free key");
    foreign.unlock(&again).await;
}

/// Every node's value for `key`, as text (`-` where a node has none).
fn values(nodes: &[RedisServer], key: &[u8]) -> Vec<String> {
    holders(nodes, key)
        .into_iter()
        .map(|value| value.map_or("-".into(), |v| String::from_utf8_lossy(&v).into_owned()))
        .collect()
}

/// The value at least two of three nodes hold, if any.
fn held_by_two(values: &[String]) -> Option<&String> {
    let two = |v: &&String| v.as_str() != "-" && values.iter().filter(|w| w == v).count() >= 2;
    values.iter().find(two)
}

/// While waiters are queued behind a holder, each node marks the holder's
/// value (its token and `+`), so that a release with nobody waiting is a
/// plain compare-and-delete and one with waiters hands the key on. The mark
/// comes with the first waiter, the holder extends and releases through it,
/// a waiter granted while others still wait is marked at once, and the last
/// one, with nobody behind it, is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_with_waiters_is_marked_and_hands_on() {
    let nodes = servers(3);
    let clients: Vec<Redlock> = (0..3).map(|_| patient_client(&nodes)).collect();
    let resource = "marked:stock";
    let key = clients[0].key(resource).unwrap();
    let mut held = clients[0].lock(resource, TTL).await.unwrap();
    let first = values(&nodes, &key);
    assert!(
        first
            .iter()
            .all(|v| v == &first[0] && v.len() == 33 && v.starts_with('q')),
        "one unmarked token on every node: {first:?}"
    );

    let mut waiting = Vec::new();
    for (index, client) in clients.iter().enumerate().skip(1) {
        let client = client.clone();
        waiting.push(tokio::spawn(
            async move { client.lock(resource, TTL).await },
        ));
        wait_queued(&nodes, &[0, 1, 2], &clients[0], resource, index as i64).await;
    }
    let marked: Vec<String> = first.iter().map(|v| format!("{v}+")).collect();
    assert_eq!(
        values(&nodes, &key),
        marked,
        "the waiters marked the holder"
    );
    held.extend(TTL).await.expect("a marked holder extends");
    assert_eq!(values(&nodes, &key), marked, "extending keeps the mark");
    held.unlock().await.expect("a marked holder releases");

    let mut waiting = waiting.into_iter();
    let second = handed_on(waiting.next(), "the first waiter").await;
    // The claim round won at a quorum; a claim to the other node is not
    // sent once the round is decided, and that node's reservation may pass
    // on to the next waiter: look at the value a quorum holds.
    let now = values(&nodes, &key);
    let second_value = held_by_two(&now);
    assert!(
        second_value.is_some_and(|v| v.len() == 34 && v.ends_with('+') && !marked.contains(v)),
        "granted with a waiter behind it: marked at once: {now:?}"
    );
    second.unlock().await.unwrap();
    let third = handed_on(waiting.next(), "the second waiter").await;
    let last = values(&nodes, &key);
    assert!(
        held_by_two(&last).is_some_and(|v| v.len() == 33 && second_value != Some(v)),
        "nobody behind the last waiter: unmarked: {last:?}"
    );
    assert_eq!(queued(&nodes, &clients[0], resource), vec![0, 0, 0]);
    third.unlock().await.unwrap();
    // A reservation the last winner's round did not claim goes when its
    // entry leaves, in the background.
    let empty = || values(&nodes, &key) == vec!["-"; 3];
    assert!(
        eventually(Duration::from_secs(5), empty).await,
        "nothing left behind: {:?}",
        values(&nodes, &key)
    );
}

/// The guard of a waiting `lock` call, which must get the lock within 5 s.
async fn handed_on(
    waiting: Option<tokio::task::JoinHandle<quorlock::Result<quorlock::LockGuard>>>,
    who: &str,
) -> quorlock::LockGuard {
    let waiting = waiting.expect("a waiting call");
    match tokio::time::timeout(Duration::from_secs(5), waiting).await {
        Ok(Ok(Ok(guard))) => guard,
        other => panic!("{who} did not get the key handed on: {other:?}"),
    }
}

/// A client whose waiters first waited on a runtime that has since shut
/// down keeps its next waiter's place alive on a new runtime: its heartbeat
/// starts again, so its liveness key outlives `WAITER_LIFETIME` while the
/// call waits (without a heartbeat it is gone 1 s after the last round).
#[test]
fn the_heartbeat_starts_again_on_a_new_runtime() {
    let nodes = servers(1);
    let holder_runtime = support::runtime().expect("runtime");
    let holder = builder(&nodes).build().unwrap();
    let guard = holder_runtime
        .block_on(holder.lock("queue:runtimes", TTL))
        .unwrap();
    let waiter = patient_client(&nodes);
    let key = holder.key("queue:runtimes").unwrap();
    let queued = |count: i64| support::queue_lengths(&nodes, &key) == [count];
    let live_keys = || -> usize {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("quorlock:quorlock-client:*")
            .query(&mut nodes[0].connection())
            .unwrap_or_default();
        keys.len()
    };
    for round in 0..2 {
        let runtime = support::runtime().expect("runtime");
        runtime.block_on(async {
            let waiting = tokio::spawn({
                let waiter = waiter.clone();
                async move { waiter.lock("queue:runtimes", TTL).await.map(drop) }
            });
            assert!(
                eventually(Duration::from_secs(10), || queued(1)).await,
                "runtime {round}: the waiter did not queue"
            );
            tokio::time::sleep(Redlock::WAITER_LIFETIME * 2).await;
            assert_eq!(
                live_keys(),
                1,
                "runtime {round}: the waiting client's liveness key is gone"
            );
            waiting.abort();
            let _ = waiting.await;
            waiter.flush().await;
        });
        // The runtime shuts down with the client's heartbeat loops on it.
        drop(runtime);
        let left = std::time::Instant::now();
        while !queued(0) && left.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    holder_runtime.block_on(guard.unlock()).unwrap();
}

/// Each node's queue for `resource`, waiter ids in order (empty where the
/// node is not running).
fn queue_orders(nodes: &[RedisServer], redlock: &Redlock, resource: &str) -> Vec<Vec<String>> {
    let mut queue = redlock.key(resource).unwrap();
    queue.extend_from_slice(b":quorlock-queue");
    nodes
        .iter()
        .map(|node| {
            redis::cmd("ZRANGE")
                .arg(&queue)
                .arg(0)
                .arg(-1)
                .query(&mut node.connection())
                .unwrap_or_default()
        })
        .collect()
}

/// Two clients' bursts of waiters, one client's requests reaching two of
/// the five nodes late (as under load): it joins first on three nodes and
/// after the other client on those two. Once all are queued, every node
/// holds them in one order, so the nodes hand the lock to the same waiter.
/// A join round is decided by the first three nodes; the tickets of the two
/// that answered after it count too. Ignored, those nodes kept sorting the
/// late client's waiters after the others until their claims, and the
/// nodes' heads differed (claims split, hand-overs were retried).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_joins_leaves_every_node_with_one_order() {
    const PER_CLIENT: usize = 100;
    let nodes = servers(5);
    let resource = "queue:burst";
    let holder = patient_client(&nodes);
    let held = holder.lock(resource, TTL).await.unwrap();
    let slow = support::proxies(&nodes[3..], Duration::ZERO);
    let mut slow_urls = support::urls(&nodes[..3]);
    slow_urls.extend(support::proxy_urls(&slow));
    let late = Redlock::builder(slow_urls)
        .node_timeout(Duration::from_millis(500))
        .acquire_timeout(PATIENT)
        .build()
        .unwrap();
    // First contact, and its notification connections (opened when a call
    // of it first waits), before the requests are slowed.
    let warm_up = holder.lock("queue:burst-warm-up", TTL).await.unwrap();
    let waited = tokio::spawn({
        let late = late.clone();
        async move { late.lock("queue:burst-warm-up", TTL).await?.unlock().await }
    });
    wait_queued(&nodes, &[0, 1, 2, 3, 4], &holder, "queue:burst-warm-up", 1).await;
    warm_up.unlock().await.unwrap();
    waited.await.unwrap().unwrap();
    for proxy in &slow {
        proxy.delay_requests(Duration::from_millis(150));
    }
    // One task per client polls all of its calls: they start at once.
    let burst = |client: &Redlock| {
        let calls = (0..PER_CLIENT).map(|_| {
            let client = client.clone();
            async move { client.lock(resource, TTL).await?.unlock().await }
        });
        tokio::spawn(futures::future::join_all(calls))
    };
    let first = burst(&late);
    wait_queued(&nodes, &[0, 1, 2], &holder, resource, PER_CLIENT as i64).await;
    let second = burst(&patient_client(&nodes));
    let all = (2 * PER_CLIENT) as i64;
    wait_queued(&nodes, &[0, 1, 2, 3, 4], &holder, resource, all).await;
    // Ticket write-backs follow the joins: wait for them, not a time (a
    // bound 50 times what they take on a loaded machine).
    let agree = eventually(Duration::from_secs(5), || {
        let orders = queue_orders(&nodes, &holder, resource);
        orders.iter().all(|order| *order == orders[0])
    })
    .await;
    let orders = queue_orders(&nodes, &holder, resource);
    let differ: Vec<usize> = (1..orders.len())
        .filter(|&index| orders[index] != orders[0])
        .collect();
    let heads: Vec<Option<&String>> = orders.iter().map(|order| order.first()).collect();
    assert!(
        agree,
        "nodes {differ:?} order the waiters unlike node 0; heads: {heads:?}"
    );
    for proxy in &slow {
        proxy.delay_requests(Duration::ZERO);
    }
    held.unlock().await.unwrap();
    for waiter in [first, second] {
        let calls = tokio::time::timeout(PATIENT, waiter)
            .await
            .unwrap()
            .unwrap();
        assert!(calls.iter().all(Result::is_ok), "{calls:?}");
    }
}

/// A client's many calls on a key that it does not know is taken make one
/// plain `SET NX` round between them: while one is under way the key
/// counts as taken, and the others join the queue (a bounded number at a
/// time) instead of sending hundreds of `SET NX` that the holder's nodes
/// would only refuse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_calls_on_a_taken_key_make_one_plain_round() {
    const CALLS: usize = 200;
    let nodes = servers(3);
    let resource = "queue:burst-of-calls";
    let (holder, waiter) = (patient_client(&nodes), patient_client(&nodes));
    let held = holder.lock(resource, TTL).await.unwrap();
    support::reset_stats(&nodes);
    // One task polls them all: every call starts before any round of
    // them could have come back.
    let calls = (0..CALLS).map(|_| {
        let waiter = waiter.clone();
        async move { waiter.lock(resource, TTL).await?.unlock().await }
    });
    let all = tokio::spawn(futures::future::join_all(calls));
    wait_queued(&nodes, &[0, 1, 2], &waiter, resource, CALLS as i64).await;
    waiter.flush().await;
    // Every queue round marks its client live with one `SET` inside the
    // script: the `SET`s beyond the scripts' are the plain rounds.
    let calls = support::command_calls(&nodes[..1]);
    let plain = calls.get("set").copied().unwrap_or(0) as i64
        - calls.get("evalsha").copied().unwrap_or(0) as i64;
    assert!(plain <= 3, "{plain} plain SET rounds on node 0: {calls:?}");
    held.unlock().await.unwrap();
    let all = tokio::time::timeout(PATIENT, all).await.unwrap().unwrap();
    assert!(all.iter().all(Result::is_ok), "{all:?}");
}

/// How many lock keys the heartbeats checked on `node` while `wait` ran:
/// the keys of every `EVALSHA` the node ran meanwhile (counted by its slow
/// log, set to log every command), when nothing but heartbeats runs
/// scripts there.
async fn keys_checked(node: &RedisServer, wait: impl std::future::Future<Output = ()>) -> usize {
    log_every_command(node);
    wait.await;
    let mut connection = node.connection();
    let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query(&mut connection)
        .unwrap();
    log.iter()
        .filter_map(|entry| {
            let redis::Value::Array(fields) = entry else {
                return None;
            };
            let args: Vec<String> = redis::from_redis_value(fields.get(3)?.clone()).ok()?;
            let evalsha = args.first()?.eq_ignore_ascii_case("evalsha");
            evalsha
                .then(|| args.get(2)?.parse::<usize>().ok())
                .flatten()
        })
        .sum()
}

/// Empties `node`'s slow log and has it log every command from now on.
fn log_every_command(node: &RedisServer) {
    let mut connection = node.connection();
    // One parameter per `CONFIG SET`: Redis 6.2 takes no more.
    for (parameter, value) in [
        ("slowlog-log-slower-than", 0),
        ("slowlog-max-len", 1_000_000),
    ] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(parameter)
            .arg(value)
            .query(&mut connection)
            .unwrap();
    }
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query(&mut connection)
        .unwrap();
}

/// Whether `node`'s slow log holds an `EVALSHA` naming `key`.
fn slow_log_has_key(node: &RedisServer, key: &[u8]) -> bool {
    let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query(&mut node.connection())
        .unwrap_or_default();
    let key = String::from_utf8_lossy(key);
    log.iter().any(|entry| {
        let redis::Value::Array(fields) = entry else {
            return false;
        };
        let args: Vec<String> = fields
            .get(3)
            .and_then(|args| redis::from_redis_value(args.clone()).ok())
            .unwrap_or_default();
        args.first()
            .is_some_and(|cmd| cmd.eq_ignore_ascii_case("evalsha"))
            && args.iter().any(|arg| *arg == key)
    })
}

/// A release hands the key on to the queue's first waiter and notifies its
/// client, so a client whose waiter is first needs no look at a key that a
/// quorlock holder holds before the holder's expiry (and at most every
/// `FIRST_MAX_CHECK`, 5 s): 100 keys held for a minute, each with one waiter of
/// one client, cost the node fewer than 2 checks per key in 3 s (a check
/// every second would be 3). The waiters are then served by the releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_first_in_the_queues_does_not_check_held_keys_every_second() {
    const KEYS: usize = 100;
    let nodes = servers(1);
    let holder = builder(&nodes).build().unwrap();
    let waiter = patient_client(&nodes);
    let names: Vec<String> = (0..KEYS).map(|n| format!("checks:{n}")).collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(holder.lock(name, Duration::from_secs(60)).await.unwrap());
    }
    let calls: Vec<_> = names
        .iter()
        .map(|name| {
            let (waiter, name) = (waiter.clone(), name.clone());
            tokio::spawn(async move { waiter.lock(&name, TTL).await })
        })
        .collect();
    for name in &names {
        wait_queued(&nodes, &[0], &waiter, name, 1).await;
    }
    let checked = keys_checked(&nodes[0], tokio::time::sleep(Duration::from_secs(3))).await;
    println!("  {checked} checks of {KEYS} held keys in 3 s");
    assert!(
        checked < 2 * KEYS,
        "{checked} checks of {KEYS} keys in 3 s: the first waiter's client checks held keys every second"
    );
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    for call in calls {
        let served = tokio::time::timeout(PATIENT, call).await;
        assert!(
            matches!(served, Ok(Ok(Ok(_)))),
            "a waiter was not served: {served:?}"
        );
    }
}

/// The rarer case the longer checks leave: a holder's key deleted by hand
/// on every node (no release, so nobody is notified) while the only waiter,
/// first in the queue, checks the key every 5 s at most. The waiter is
/// still served, within that check interval, a heartbeat and a margin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_waiter_is_served_when_the_held_key_is_deleted_by_hand() {
    let nodes = servers(3);
    let holder = builder(&nodes).build().unwrap();
    let waiter = patient_client(&nodes);
    let resource = "checks:deleted";
    let _held = holder
        .lock(resource, Duration::from_secs(60))
        .await
        .unwrap();
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.lock(resource, TTL).await })
    };
    wait_queued(&nodes, &[0, 1, 2], &waiter, resource, 1).await;
    let key = waiter.key(resource).unwrap();
    // Deleted once every node's heartbeat checked the key (and so knows
    // the waiter leads its queue): the next check is seconds away.
    for node in &nodes {
        log_every_command(node);
    }
    let checked = || nodes.iter().all(|node| slow_log_has_key(node, &key));
    assert!(
        eventually(Duration::from_secs(10), checked).await,
        "not every node checked the key in 10 s"
    );
    for node in &nodes {
        let _: () = redis::cmd("DEL")
            .arg(&key)
            .query(&mut node.connection())
            .unwrap();
    }
    let deleted = Instant::now();
    let bound = Duration::from_secs(5) + Redlock::REFRESH_INTERVAL + Duration::from_secs(2);
    let served = tokio::time::timeout(PATIENT, waiting).await;
    let waited = deleted.elapsed();
    println!("  served {waited:?} after the key was deleted by hand");
    assert!(
        matches!(served, Ok(Ok(Ok(_)))),
        "the waiter was not served: {served:?}"
    );
    assert!(
        waited <= bound,
        "served after {waited:?}, more than {bound:?}"
    );
}

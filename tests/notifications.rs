//! Handoff notifications across clients: a `lock` call waiting for a lock
//! that another client holds claims it as soon as that client's release
//! hands it on, not after its retry delay; when no notification comes (the
//! holder's key just expires), the waiter's refresh round still gets it the
//! lock.

mod support;

use std::time::{Duration, Instant};

use quorlock::Redlock;
use support::{servers, urls};

const TTL: Duration = Duration::from_secs(10);

/// A second client with a 5 s retry delay gets the lock within moments of the
/// first client's release: only the release notification explains that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_in_another_client_is_woken_by_the_release() {
    let nodes = servers(3);
    let holder = Redlock::new(urls(&nodes)).unwrap();
    let waiter = Redlock::builder(urls(&nodes))
        .retry_delay(Duration::from_secs(5))
        .retry_jitter(Duration::ZERO)
        .acquire_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    for round in 0..3 {
        let guard = holder.lock("notify:resource", TTL).await.unwrap();
        let waiting = tokio::spawn({
            let waiter = waiter.clone();
            async move {
                let guard = waiter.lock("notify:resource", TTL).await;
                (guard, Instant::now())
            }
        });
        // Long enough for the waiter to fail once and subscribe.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let released = Instant::now();
        guard.unlock().await.unwrap();
        let (guard, acquired) = waiting.await.unwrap();
        let after = acquired.duration_since(released);
        println!("round {round}: the waiter got the lock {after:?} after the release");
        assert!(
            after < Duration::from_secs(2),
            "woken by the release, not the 5 s timer: {after:?}"
        );
        guard.unwrap().unlock().await.unwrap();
    }
}

/// With no release to announce (the holder's key expires), the waiter still
/// gets the lock through its retry timer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_release_the_retry_timer_still_works() {
    let nodes = servers(3);
    let holder = Redlock::new(urls(&nodes)).unwrap();
    let waiter = Redlock::builder(urls(&nodes))
        .retry_delay(Duration::from_millis(100))
        .acquire_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    holder
        .lock("notify:expiring", Duration::from_millis(600))
        .await
        .unwrap()
        .forget();
    let started = Instant::now();
    let guard = waiter.lock("notify:expiring", TTL).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "not before the key expired"
    );
    guard.unlock().await.unwrap();
}

/// With release notifications off, the waiter polls: it gets the lock at its
/// next refresh round (every `REFRESH_INTERVAL` at most), not at the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_notifications_off_the_waiter_polls() {
    let nodes = servers(3);
    let holder = Redlock::new(urls(&nodes)).unwrap();
    let waiter = Redlock::builder(urls(&nodes))
        .release_notifications(false)
        .retry_delay(Duration::from_secs(1))
        .retry_jitter(Duration::ZERO)
        .acquire_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let guard = holder.lock("notify:polling", TTL).await.unwrap();
    let waiting = tokio::spawn(async move {
        let guard = waiter.lock("notify:polling", TTL).await;
        (guard, Instant::now())
    });
    // Release just after the waiter's first round queued it.
    let mut queue = guard.key().to_vec();
    queue.extend_from_slice(b":quorlock-queue");
    let queued = support::eventually(Duration::from_secs(10), || {
        nodes.iter().all(|node| {
            redis::cmd("ZCARD")
                .arg(&queue)
                .query::<i64>(&mut node.connection())
                .is_ok_and(|queued| queued == 1)
        })
    })
    .await;
    assert!(queued, "the waiter did not queue");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let released = Instant::now();
    guard.unlock().await.unwrap();
    let (guard, acquired) = waiting.await.unwrap();
    let after = acquired.duration_since(released);
    assert!(
        after >= Duration::from_millis(100) && after <= quorlock::Redlock::REFRESH_INTERVAL * 4,
        "it waited for its refresh round: {after:?}"
    );
    guard.unwrap().unlock().await.unwrap();
}

/// A handoff is published on the channel of the waiter's own client, which
/// only that client's connection hears: a release wakes one process, not
/// every process with a waiter for the key. Two waiting clients, two
/// handoffs, watched on one node by a pattern subscriber.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_reaches_only_the_waiters_client() {
    let nodes = servers(3);
    let patient = || {
        Redlock::builder(urls(&nodes))
            .acquire_timeout(Duration::from_secs(30))
            .build()
            .unwrap()
    };
    let (holder, first, second) = (patient(), patient(), patient());
    let resource = "notify:one-process";
    let mut queue = holder.key(resource).unwrap();
    queue.extend_from_slice(b":quorlock-queue");
    let queued = |count: i64| {
        let queue = queue.clone();
        let nodes = &nodes;
        support::eventually(Duration::from_secs(10), move || {
            nodes.iter().all(|node| {
                redis::cmd("ZCARD")
                    .arg(&queue)
                    .query::<i64>(&mut node.connection())
                    .is_ok_and(|queued| queued == count)
            })
        })
    };
    // Everything published on node 0, from before the first handoff.
    let (published, heard) = std::sync::mpsc::channel::<(String, String, i64)>();
    let url = nodes[0].url();
    std::thread::spawn(move || {
        let client = redis::Client::open(url).unwrap();
        let mut connection = client.get_connection().unwrap();
        let mut counter = client.get_connection().unwrap();
        let mut pubsub = connection.as_pubsub();
        pubsub.psubscribe("*").unwrap();
        while let Ok(message) = pubsub.get_message() {
            let channel: String = message.get_channel().unwrap();
            let payload: String = message.get_payload().unwrap();
            let (_, listeners): (String, i64) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(&channel)
                .query(&mut counter)
                .unwrap();
            if published.send((channel, payload, listeners)).is_err() {
                return;
            }
        }
    });
    let subscribed = support::eventually(Duration::from_secs(10), || {
        redis::cmd("PUBSUB")
            .arg("NUMPAT")
            .query::<i64>(&mut nodes[0].connection())
            .is_ok_and(|patterns| patterns == 1)
    })
    .await;
    assert!(subscribed, "the pattern subscriber is not in place");

    let held = holder.lock(resource, TTL).await.unwrap();
    let spawn_waiter = |client: &Redlock| {
        let client = client.clone();
        tokio::spawn(async move { client.lock(resource, TTL).await })
    };
    let first_waiting = spawn_waiter(&first);
    assert!(queued(1).await, "the first waiter did not queue");
    let second_waiting = spawn_waiter(&second);
    assert!(queued(2).await, "the second waiter did not queue");
    held.unlock().await.unwrap();
    for waiting in [first_waiting, second_waiting] {
        waiting.await.unwrap().unwrap().unlock().await.unwrap();
    }

    let messages: Vec<_> = std::iter::from_fn(|| heard.recv_timeout(Duration::from_secs(2)).ok())
        .take(2)
        .collect();
    assert_eq!(
        messages.len(),
        2,
        "one handoff message per waiter: {messages:?}"
    );
    for (channel, payload, listeners) in &messages {
        // `<waiter id> <lock key>`; a waiter id is its client's liveness key
        // (`<prefix>quorlock-client:<client id>`), a dot and a number.
        let (waiter, key) = payload.split_once(' ').unwrap_or_default();
        assert_eq!(
            key.as_bytes(),
            &holder.key(resource).unwrap()[..],
            "{payload}"
        );
        let client = waiter
            .split_once("quorlock-client:")
            .and_then(|(_, rest)| rest.split('.').next())
            .unwrap_or_default();
        assert_eq!(
            channel,
            &format!("quorlock-wake:{client}"),
            "published on the channel of the waiter's client"
        );
        // The waiter's client, and our pattern subscriber (not counted by NUMSUB).
        assert_eq!(
            *listeners, 1,
            "{channel} is heard by one client: {messages:?}"
        );
    }
    assert_ne!(
        messages[0].0, messages[1].0,
        "two clients, two channels: {messages:?}"
    );
}

/// A waiting client's notification connection (its pub/sub connection to
/// each node) is asked `PING` every second to find a silent one; one that
/// answers stays open: after 5 s of waiting, each node has one pub/sub
/// connection, at least 4 s old, that has run `PING`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_connection_that_answers_stays_open() {
    let nodes = servers(3);
    let holder = Redlock::new(urls(&nodes)).unwrap();
    let waiter = Redlock::builder(urls(&nodes))
        .acquire_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let guard = holder.lock("notify:kept", TTL).await.unwrap();
    let waiting = tokio::spawn(async move { waiter.lock("notify:kept", TTL).await });
    tokio::time::sleep(Duration::from_secs(5)).await;
    for node in &nodes {
        let clients: String = redis::cmd("CLIENT")
            .arg("LIST")
            .arg("TYPE")
            .arg("pubsub")
            .query(&mut node.connection())
            .unwrap();
        let ages: Vec<u64> = clients
            .lines()
            .filter_map(|line| {
                line.split_whitespace()
                    .find_map(|field| field.strip_prefix("age="))?
                    .parse()
                    .ok()
            })
            .collect();
        assert!(
            ages.len() == 1 && ages[0] >= 4,
            "pub/sub connections on a node, by age: {ages:?}\n{clients}"
        );
    }
    let pings = support::command_calls(&nodes)
        .get("ping")
        .copied()
        .unwrap_or(0);
    assert!(pings >= 6, "{pings} PINGs on the nodes in 5 s");
    guard.unlock().await.unwrap();
    waiting.await.unwrap().unwrap().unlock().await.unwrap();
}

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
        after >= Duration::from_millis(100) && after <= quorlock::REFRESH_INTERVAL * 4,
        "it waited for its refresh round: {after:?}"
    );
    guard.unwrap().unlock().await.unwrap();
}

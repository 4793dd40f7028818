//! Extension and the guard's validity: an extension resets the keys' TTL on
//! every node it reaches, so from the moment it is sent the guard may be
//! valid for no longer than the new TTL; only a round that succeeds in time
//! raises the validity again.

mod support;

use std::time::{Duration, Instant};

use quorlock::{LostReason, Redlock};
use support::{DelayProxy, RedisServer, eventually, held_everywhere, proxies, proxy_urls, servers};

const LONG: Duration = Duration::from_secs(10);
const SHORT: Duration = Duration::from_millis(200);

/// Three nodes, each behind a delaying proxy (no delay yet).
fn nodes_behind_proxies() -> (Vec<RedisServer>, Vec<DelayProxy>) {
    let nodes = servers(3);
    let proxies = proxies(&nodes, Duration::ZERO);
    (nodes, proxies)
}

/// A client over the proxies with a per-node timeout of `timeout`.
/// A client whose node timeout is `timeout`. The clock watch is off: the
/// proxies delay replies by hundreds of ms, which leaves a clock reading too
/// imprecise for the default tolerance (see `clock.rs`); these tests are
/// about extensions.
fn client(proxies: &[DelayProxy], timeout: Duration) -> Redlock {
    Redlock::builder(proxy_urls(proxies))
        .node_timeout(timeout)
        .clock_tolerance(Duration::ZERO)
        .build()
        .unwrap()
}

/// Takes `resource` for `ttl` after loading the extend script on every node
/// (a node answering `NOSCRIPT` late would never run the extension), and
/// waits until every node holds the key.
async fn lock_everywhere(
    redlock: &Redlock,
    nodes: &[RedisServer],
    resource: &str,
    ttl: Duration,
) -> quorlock::LockGuard {
    let mut warm_up = redlock
        .lock(format!("{resource}:warm-up"), LONG)
        .await
        .unwrap();
    warm_up.extend(LONG).await.unwrap();
    let key = warm_up.key().to_vec();
    assert!(
        eventually(Duration::from_secs(2), || nodes
            .iter()
            .all(|node| node.pttl(&key) > 5_000))
        .await,
        "every node ran the extend script"
    );
    warm_up.unlock().await.unwrap();
    let guard = redlock.lock(resource, ttl).await.unwrap();
    let key = guard.key().to_vec();
    assert!(
        held_everywhere(nodes, &key, Duration::from_secs(2)).await,
        "every node holds the key"
    );
    guard
}

/// Delays the replies of the first two proxies: their nodes act on each
/// request at once, but answer late (what a node busy with `DEBUG SLEEP`
/// looks like, without the guesswork about when its sleep began).
fn slow_replies_on_two(proxies: &[DelayProxy], delay: Duration) {
    for proxy in &proxies[..2] {
        proxy.delay_replies(delay);
    }
}

/// Tries `resource` with `other` until it succeeds (at most 3 s) and returns
/// whether `guard` claimed to be valid at that moment.
async fn guard_valid_when_other_locks(
    other: &Redlock,
    resource: &str,
    guard: &quorlock::LockGuard,
) -> bool {
    let started = Instant::now();
    loop {
        if let Ok(stolen) = other.try_lock(resource, LONG).await {
            let valid = guard.is_valid();
            stolen.unlock().await.unwrap();
            return valid;
        }
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "the other client never got the lock"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The field report: two of three nodes answer 250 ms late (there it was
/// `DEBUG SLEEP 0.25`), so `extend(200 ms)` of a 10 s lock ends after the new
/// validity and fails, yet every node ran `PEXPIRE 200`. The guard must then be valid for at most the 200 ms from
/// the extension's start, so another client that takes the lock afterwards
/// never meets a guard that still claims it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_extension_to_a_shorter_ttl_leaves_no_valid_guard() {
    let (nodes, proxies) = nodes_behind_proxies();
    let x = client(&proxies, Duration::from_secs(1));
    let mut guard = lock_everywhere(&x, &nodes, "extension:late", LONG).await;
    slow_replies_on_two(&proxies, Duration::from_millis(250));
    let start = Instant::now();
    let err = guard.extend(SHORT).await.unwrap_err();
    assert_eq!(
        err.lost_reason(),
        Some(&LostReason::Expired),
        "the round ended after the new validity: {err}"
    );
    assert!(
        guard.valid_until() <= start + SHORT,
        "validity capped at the new ttl: {:?} left",
        guard.remaining()
    );
    let other = client(&proxies, Duration::from_millis(500));
    assert!(
        !guard_valid_when_other_locks(&other, "extension:late", &guard).await,
        "two valid holders: X still claims {:?}",
        guard.remaining()
    );
    drop(proxies);
}

/// An extension that fails for lack of answers (two nodes time out) may still
/// have reset the keys on those nodes: the guard is capped the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unanswered_extension_caps_the_validity() {
    let (nodes, proxies) = nodes_behind_proxies();
    let x = client(&proxies, Duration::from_millis(100));
    let mut guard = lock_everywhere(&x, &nodes, "extension:unanswered", LONG).await;
    slow_replies_on_two(&proxies, Duration::from_millis(300));
    let start = Instant::now();
    let err = guard.extend(SHORT).await.unwrap_err();
    assert!(
        matches!(err.lost_reason(), Some(LostReason::Unreachable { .. })),
        "got {err}"
    );
    assert!(guard.valid_until() <= start + SHORT);
    let other = client(&proxies, Duration::from_millis(500));
    assert!(!guard_valid_when_other_locks(&other, "extension:unanswered", &guard).await);
}

/// An `extend` future dropped after its requests went out leaves the guard
/// capped at the new TTL too: the nodes still run the requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_extension_caps_the_validity() {
    let (nodes, proxies) = nodes_behind_proxies();
    let x = client(&proxies, Duration::from_secs(1));
    let mut guard = lock_everywhere(&x, &nodes, "extension:cancelled", LONG).await;
    slow_replies_on_two(&proxies, Duration::from_millis(300));
    let start = Instant::now();
    assert!(
        tokio::time::timeout(Duration::from_millis(50), guard.extend(SHORT))
            .await
            .is_err(),
        "the extension was still waiting for the slow nodes"
    );
    assert!(
        guard.valid_until() <= start + SHORT,
        "a cancelled extension capped the validity: {:?} left",
        guard.remaining()
    );
    let other = client(&proxies, Duration::from_millis(500));
    assert!(!guard_valid_when_other_locks(&other, "extension:cancelled", &guard).await);
}

/// An extension whose replies all arrive after the old validity ended is not
/// applied, although every node extended its key: the guard had no lock to
/// extend by then, as far as it can know.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extension_answered_after_the_old_validity_is_not_applied() {
    let (nodes, proxies) = nodes_behind_proxies();
    let x = client(&proxies, Duration::from_secs(3));
    let mut guard = lock_everywhere(
        &x,
        &nodes,
        "extension:after-old",
        Duration::from_millis(400),
    )
    .await;
    let old_valid_until = guard.valid_until();
    for proxy in &proxies {
        proxy.delay_replies(Duration::from_millis(700));
    }
    let err = guard.extend(LONG).await.unwrap_err();
    assert!(
        Instant::now() > old_valid_until,
        "the replies came after the old validity"
    );
    assert_eq!(err.lost_reason(), Some(&LostReason::Expired), "got {err}");
    assert!(!guard.is_valid(), "{:?} left", guard.remaining());
    assert_eq!(guard.extensions(), 0);
    // The nodes did extend: the keys are there for the full new TTL.
    let key = guard.key().to_vec();
    let pttls: Vec<i64> = nodes.iter().map(|node| node.pttl(&key)).collect();
    assert!(
        pttls.iter().filter(|&&pttl| pttl > 5_000).count() >= 2,
        "{pttls:?}"
    );
    guard.unlock().await.unwrap();
}

/// `renew_when_left` moves the keeper's extension earlier: with 3 s TTLs
/// and 2.25 s of validity left as the lead, the first extension starts
/// about 0.7 s after the acquisition (a validity counts from its round's
/// start, so the difference of two validities is the difference of their
/// starts), where the default (a third of the TTL left) waits about 2 s.
#[tokio::test]
async fn the_keeper_extends_when_the_configured_validity_is_left() {
    let nodes = servers(3);
    let ttl = Duration::from_secs(3);
    let redlock = Redlock::builder(nodes.iter().map(RedisServer::url))
        .renew_when_left(Duration::from_millis(2250))
        .build()
        .unwrap();
    let guard = redlock.lock("keeper-lead", ttl).await.unwrap();
    let first = guard.valid_until();
    guard.keep_alive().unwrap();
    assert!(
        eventually(Duration::from_secs(10), || guard.valid_until() > first).await,
        "the keeper extended at all"
    );
    let started_after = guard.valid_until().saturating_duration_since(first);
    assert!(
        started_after < Duration::from_millis(1300),
        "the first extension started {started_after:?} after the acquisition"
    );
    guard.unlock().await.unwrap();

    let default = Redlock::new(nodes.iter().map(RedisServer::url)).unwrap();
    let guard = default.lock("keeper-lead", ttl).await.unwrap();
    let first = guard.valid_until();
    guard.keep_alive().unwrap();
    // Half the TTL after the round's start: the default keeper waits for a third.
    tokio::time::sleep_until(first.checked_sub(ttl / 2).unwrap().into()).await;
    assert_eq!(
        guard.valid_until(),
        first,
        "the default keeper has not extended yet"
    );
    guard.unlock().await.unwrap();
}

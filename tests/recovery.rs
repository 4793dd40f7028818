//! Liveness and recovery: a fresh client over a slow link, nodes whose
//! first-contact check fails, a connection that failed for a reason other
//! than I/O, and one client used from several tokio runtimes in turn.

mod support;

use std::time::{Duration, Instant};

use quorlock::{Redlock, Unlocked};
use support::{DelayProxy, RedisServer, proxies, proxy_urls, servers, urls};

const TTL: Duration = Duration::from_secs(10);

/// A runtime of its own for one phase of a test, dropped (with every task
/// it runs) at the end of the phase.
fn runtime() -> tokio::runtime::Runtime {
    support::runtime().unwrap()
}

/// Locks and unlocks `resource` (retrying as `lock` does).
async fn cycle(redlock: &Redlock, resource: &str) {
    redlock
        .lock(resource, TTL)
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
}

/// Takes and releases `resource` with one round at a time (50 ms apart)
/// until a round succeeds; panics with `what` and the last error after `limit`.
async fn lock_within(redlock: &Redlock, resource: &str, limit: Duration, what: &str) {
    let started = Instant::now();
    loop {
        match redlock.try_lock(resource, TTL).await {
            Ok(guard) => {
                guard.unlock().await.unwrap();
                return;
            }
            Err(err) => assert!(
                started.elapsed() < limit,
                "{what}: still failing after {:?}: {err}",
                started.elapsed()
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A fresh client with default options locks over links of about 30 ms round
/// trip (each node behind a proxy delaying 15 ms each way): connecting and
/// the first-contact check have their own bound (`connect_timeout`, 1 s),
/// not the 50 ms node timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_client_locks_over_a_30_ms_link_with_defaults() {
    let nodes = servers(3);
    let proxies = proxies(&nodes, Duration::from_millis(15));
    let redlock = Redlock::new(proxy_urls(&proxies)).unwrap();
    let started = Instant::now();
    let guard = redlock
        .try_lock("recovery:slow-link", TTL)
        .await
        .unwrap_or_else(|err| panic!("after {:?}: {err}", started.elapsed()));
    assert_eq!(guard.unlock().await.unwrap(), Unlocked::Released);
}

/// The acquire timeout also bounds a fresh client's first contact: with
/// nodes that answer 400 ms late, a `lock` with a 200 ms acquire timeout
/// returns at about 200 ms, not after the 1 s connect timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_timeout_bounds_the_first_contact() {
    let nodes = servers(3);
    let proxies = proxies(&nodes, Duration::from_millis(200));
    let redlock = Redlock::builder(proxy_urls(&proxies))
        .acquire_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let started = Instant::now();
    let err = redlock
        .lock("recovery:first-contact", TTL)
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(err.is_unavailable(), "got {err}");
    assert!(
        took < Duration::from_millis(600),
        "the first contact ran past the acquire timeout: {took:?}"
    );
}

/// A node that refuses the first-contact commands (`ROLE` renamed away, as
/// some proxies and hardened servers do) is counted, with a warning that
/// names the node and its reply: it answers, so it can hold a lock; only the
/// duplicate and replica checks are lost for it.
#[tokio::test(flavor = "current_thread")]
async fn node_refusing_the_first_contact_check_is_counted_with_a_warning() {
    let (captured, _default) = support::capture_logs(tracing::Level::WARN);

    let node = RedisServer::start_with(&["--rename-command", "ROLE", ""]);
    let redlock = Redlock::new([node.url()]).unwrap();
    let guard = redlock
        .try_lock("recovery:no-role", TTL)
        .await
        .expect("a node without ROLE still counts");
    guard.unlock().await.unwrap();
    let logs = captured.text();
    let warning = logs
        .lines()
        .find(|line| line.contains("WARN") && line.contains(&format!("127.0.0.1:{}", node.port())))
        .unwrap_or_else(|| panic!("no warning naming the node:\n{logs}"));
    assert!(
        warning.contains("unknown command") && warning.contains("ROLE"),
        "the warning carries the node's reply: {warning}"
    );
}

/// A node that refuses `TIME` (renamed away, or an ACL user without it)
/// still counts, without its clock watched for steps, and the check's
/// warning names the node and `TIME` with its reply.
#[tokio::test(flavor = "current_thread")]
async fn node_refusing_time_is_counted_with_a_warning() {
    let (captured, _default) = support::capture_logs(tracing::Level::WARN);

    let node = RedisServer::start_with(&["--rename-command", "TIME", ""]);
    let redlock = Redlock::new([node.url()]).unwrap();
    for _ in 0..3 {
        let guard = redlock
            .try_lock("recovery:no-time", TTL)
            .await
            .expect("a node without TIME still counts");
        guard.unlock().await.unwrap();
    }
    let logs = captured.text();
    let warning = logs
        .lines()
        .find(|line| line.contains("WARN") && line.contains("TIME"))
        .unwrap_or_else(|| panic!("no warning naming TIME:\n{logs}"));
    assert!(
        warning.contains(&format!("127.0.0.1:{}", node.port()))
            && warning.contains("unknown command")
            && warning.contains("clock is not watched"),
        "the warning names the node, TIME and the reply: {warning}"
    );
    assert!(
        !logs.contains("refusal=GET of the data mark"),
        "without TIME the data mark is still read and made (by the client's clock):\n{logs}"
    );
}

/// A node whose check cannot finish does not count, and the failed lock
/// says why in its `source()` instead of a bare "1 failed". Here the node is
/// 200 ms away: connecting takes one round trip, within the 300 ms connect
/// timeout, but the check (part of connecting, see `standing/`) needs a
/// second one, so the connection is never handed to the lock's `SET`, which
/// would fit in the 2 s node timeout. No grant can come from an unchecked
/// connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unchecked_node_is_named_in_the_error() {
    let nodes = servers(2);
    let slow = DelayProxy::start(nodes[1].port(), Duration::from_millis(100));
    let redlock = Redlock::builder([nodes[0].url(), slow.url()])
        .connect_timeout(Duration::from_millis(300))
        .node_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let err = redlock
        .try_lock("recovery:unchecked", TTL)
        .await
        .unwrap_err();
    assert!(err.is_unavailable(), "got {err}");
    let source = std::error::Error::source(&err)
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(
        source.contains(&format!("127.0.0.1:{}", slow.port()))
            && source.contains("could not connect within 300ms"),
        "the source names the unchecked node and why: {source:?}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let key = redlock.key("recovery:unchecked").unwrap();
    assert!(
        nodes[1].get(&key).is_none(),
        "a SET reached the unchecked node"
    );
}

/// A connection refused for a reason other than I/O (a wrong password)
/// recovers by itself once the node accepts it: the same client locks again
/// within about a second of `CONFIG SET requirepass` fixing the mismatch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_refused_for_a_wrong_password_recovers_when_it_is_fixed() {
    let node = RedisServer::start_with(&["--requirepass", "old"]);
    let redlock = Redlock::new([format!("redis://:new@127.0.0.1:{}", node.port())]).unwrap();
    let err = redlock
        .try_lock("recovery:password", TTL)
        .await
        .unwrap_err();
    assert!(err.is_unavailable(), "got {err}");
    let mut admin = redis::Client::open(format!("redis://:old@127.0.0.1:{}", node.port()))
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("new")
        .query(&mut admin)
        .unwrap();
    let fixed = Instant::now();
    lock_within(
        &redlock,
        "recovery:password",
        Duration::from_secs(3),
        "after the fix",
    )
    .await;
    println!(
        "recovered {:?} after the password was fixed",
        fixed.elapsed()
    );
}

/// A node that timed out in one runtime is probed there; if that runtime
/// shuts down with the probe, the node is not skipped forever: in the next
/// runtime it is used again.
#[test]
fn node_skipped_in_a_runtime_that_ended_is_used_in_the_next() {
    let nodes = servers(3);
    let redlock = Redlock::builder(urls(&nodes))
        .node_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    runtime().block_on(async {
        cycle(&redlock, "recovery:probe").await;
        nodes[2].pause();
        // Times out on the frozen node, which is then skipped and probed.
        cycle(&redlock, "recovery:probe").await;
        // Past the timeout: the probe runs (and hangs) when the runtime ends.
        tokio::time::sleep(Duration::from_millis(300)).await;
    });
    nodes[2].resume();
    runtime().block_on(async {
        assert!(
            support::lock_until_held_on(&redlock, "recovery:probe", &nodes[2]).await,
            "the node that timed out in the first runtime is never used again"
        );
    });
}

/// A first-contact re-check that was under way when its runtime shut down
/// does not leave the node "being checked" forever: in the next runtime it is
/// checked again and its grants count.
#[test]
fn first_contact_check_cut_short_by_its_runtime_is_made_again() {
    let mut nodes = servers(3);
    let redlock = Redlock::builder(urls(&nodes))
        .node_timeout(Duration::from_millis(100))
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    nodes[2].pause();
    runtime().block_on(async {
        // First contact: the frozen node does not answer, so it is unchecked.
        cycle(&redlock, "recovery:recheck").await;
        // This lock starts a background re-check, which hangs on the frozen
        // node until the runtime is dropped.
        cycle(&redlock, "recovery:recheck").await;
    });
    nodes[2].resume();
    nodes[0].kill();
    runtime().block_on(async {
        // Nodes 1 and 2 are left: a quorum only if node 2 counts.
        let what = "node 2 never counted";
        lock_within(&redlock, "recovery:recheck", Duration::from_secs(5), what).await;
    });
}

/// The release-notification listeners started in one runtime are started
/// again in the next: a waiter with a 5 s retry delay is still woken by the
/// holder's release.
#[test]
fn release_notifications_work_again_in_the_next_runtime() {
    let nodes = servers(3);
    let holder = Redlock::new(urls(&nodes)).unwrap();
    let waiter = Redlock::builder(urls(&nodes))
        .retry_delay(Duration::from_secs(5))
        .retry_jitter(Duration::ZERO)
        .acquire_timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let handoff = || async {
        let guard = holder.lock("recovery:notify", TTL).await.unwrap();
        let waiting = tokio::spawn({
            let waiter = waiter.clone();
            async move { (waiter.lock("recovery:notify", TTL).await, Instant::now()) }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        let released = Instant::now();
        guard.unlock().await.unwrap();
        let (guard, acquired) = waiting.await.unwrap();
        guard.unwrap().unlock().await.unwrap();
        acquired.duration_since(released)
    };
    let first = runtime().block_on(handoff());
    assert!(first < Duration::from_secs(2), "first runtime: {first:?}");
    let second = runtime().block_on(handoff());
    assert!(
        second < Duration::from_secs(2),
        "woken by the release in the second runtime too, not the 5 s timer: {second:?}"
    );
}

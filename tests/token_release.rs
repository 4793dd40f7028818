//! A lock released by its token from another client (`Redlock::unlock_token`,
//! as a job runner's worker or an operator would), on real servers: what
//! it releases, what it leaves alone, and what it reports.

mod support;

use std::time::{Duration, Instant};

use quorlock::{Error, TokenRelease, Unlocked};
use support::{builder, held_everywhere, holders, servers, urls};

const TTL: Duration = Duration::from_secs(10);

/// Another client with the token releases the lock on every node; the
/// holder's guard then finds it gone (its extension fails, its unlock
/// says it had expired); a second release finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_client_with_the_token_releases_the_lock() {
    let nodes = servers(3);
    let holder = quorlock::Redlock::new(urls(&nodes)).unwrap();
    let other = quorlock::Redlock::new(urls(&nodes)).unwrap();
    let mut guard = holder.lock("token:job", TTL).await.unwrap();
    let key = holder.key("token:job").unwrap();
    // The lock returns on a quorum: the last node's `SET` may follow.
    assert!(
        held_everywhere(&nodes, &key, Duration::from_secs(5)).await,
        "the key reached every node"
    );

    let found = other
        .unlock_token("token:job", guard.token())
        .await
        .unwrap();
    assert_eq!(found, TokenRelease::Released { nodes: 3 });
    assert!(
        holders(&nodes, &key).iter().all(Option::is_none),
        "no key left"
    );
    assert!(other.status("token:job").await.unwrap().is_free());

    assert!(
        guard.extend(TTL).await.is_err(),
        "the holder's extension is refused"
    );
    assert_eq!(guard.unlock().await.unwrap(), Unlocked::Expired);
    let again = other
        .unlock_token("token:job", "q0123456789abcdef0123456789abcdef")
        .await;
    assert_eq!(again.unwrap(), TokenRelease::NotHeld);
}

/// A token that does not hold the lock changes nothing: the holder keeps
/// it on every node, and the answer says another token holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_changes_nothing() {
    let nodes = servers(3);
    let holder = quorlock::Redlock::new(urls(&nodes)).unwrap();
    let other = quorlock::Redlock::new(urls(&nodes)).unwrap();
    let guard = holder.lock("token:kept", TTL).await.unwrap();
    let key = holder.key("token:kept").unwrap();
    assert!(
        held_everywhere(&nodes, &key, Duration::from_secs(5)).await,
        "the key reached every node"
    );
    let before = holders(&nodes, &key);

    // The same first characters (what a status shows), another last one.
    let (start, last) = guard.token().split_at(32);
    let wrong = format!("{start}{}", if last == "0" { "1" } else { "0" });
    assert_ne!(wrong, guard.token());
    let found = other.unlock_token("token:kept", &wrong).await.unwrap();
    assert_eq!(found, TokenRelease::HeldByOther { nodes: 3 });
    assert_eq!(
        holders(&nodes, &key),
        before,
        "every node keeps the holder's token"
    );
    assert_eq!(guard.unlock().await.unwrap(), Unlocked::Released);
}

/// A release by token hands the lock on to the first waiter in the queue,
/// as the holder's own release does: the waiter gets it at once, not at
/// the holder's TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_by_token_hands_the_lock_on_to_a_waiter() {
    let nodes = servers(3);
    let holder = quorlock::Redlock::new(urls(&nodes)).unwrap();
    let waiter = quorlock::Redlock::new(urls(&nodes)).unwrap();
    let other = quorlock::Redlock::new(urls(&nodes)).unwrap();
    let guard = holder.lock("token:queue", TTL).await.unwrap();
    let key = holder.key("token:queue").unwrap();
    let waiting = tokio::spawn(async move { waiter.lock("token:queue", TTL).await });
    // The waiter is queued on every node before the release.
    let queued = support::eventually(Duration::from_secs(5), || {
        support::queue_lengths(&nodes, &key).iter().all(|&n| n == 1)
    });
    assert!(queued.await, "the waiter queued");

    let released = Instant::now();
    let found = other
        .unlock_token("token:queue", guard.token())
        .await
        .unwrap();
    assert_eq!(found, TokenRelease::Released { nodes: 3 });
    let taken = tokio::time::timeout(Duration::from_secs(5), waiting).await;
    let taken = taken.expect("the waiter got the lock well before the TTL");
    let next = taken.unwrap().unwrap();
    assert_ne!(next.token(), guard.token());
    assert!(released.elapsed() < TTL / 2, "{:?}", released.elapsed());
    next.unlock().await.unwrap();
    drop(guard);
}

/// Where no node released it and a node did not answer, the answer says
/// the token may still hold the lock there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_node_makes_the_answer_unknown() {
    let nodes = servers(3);
    let other = builder(&nodes)
        .node_timeout(Duration::from_millis(100))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    // Every node checked before one goes silent.
    other.status("token:silent").await.unwrap();
    nodes[2].pause();
    let found = other
        .unlock_token("token:silent", "q0123456789abcdef0123456789abcdef")
        .await;
    nodes[2].resume();
    assert_eq!(found.unwrap(), TokenRelease::Unknown { unanswered: 1 });
}

/// An empty token, or one longer than the limit, is refused before any
/// node is asked, as the call's input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_out_of_bounds_is_refused() {
    let nodes = servers(1);
    let redlock = quorlock::Redlock::new(urls(&nodes)).unwrap();
    let long = "q".repeat(quorlock::Redlock::MAX_TOKEN_LEN + 1);
    for token in ["", long.as_str()] {
        let err = redlock
            .unlock_token("token:bounds", token)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidToken { .. }), "{err}");
        assert!(err.is_invalid_input());
    }
}

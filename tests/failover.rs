//! Failovers behind a stable address (a managed service's primary endpoint,
//! a proxy that follows the primary). A primary with a replica; the link
//! between them is cut (the replica is promoted early, so nothing the
//! primary writes from then on reaches it); a holder locks on the primary;
//! the primary dies and the address moves to the promoted replica, which is
//! older than the restart grace, as replicas are. It has lost the holder's
//! key: until that key would have expired, its grants must not count, for a
//! client that knew the old primary and for a fresh one, and the holder must
//! learn at once that its key may be gone.

mod support;

use std::time::{Duration, Instant};

use quorlock::{Error, LockGuard, LostReason, Redlock, RedlockBuilder};
use support::{DelayProxy, RedisServer};

const RESOURCE: &str = "failover:resource";
/// The restart grace and the holder's TTL: short, so that a replica older
/// than the grace is quick to have, and long enough that the holder is
/// surely still valid while the others try.
const GRACE: Duration = Duration::from_secs(6);

fn builder(urls: &[String]) -> RedlockBuilder {
    Redlock::builder(urls.to_vec())
        .node_timeout(Duration::from_millis(200))
        .restart_grace(GRACE)
        .acquire_timeout(Duration::from_millis(1500))
}

fn client(urls: &[String]) -> Redlock {
    builder(urls).build().unwrap()
}

/// A primary, its replica (up for longer than the grace, holding what the
/// primary recorded), and a proxy in front of the primary.
struct Pair {
    primary: RedisServer,
    replica: RedisServer,
    proxy: DelayProxy,
}

impl Pair {
    fn start() -> Self {
        let primary = RedisServer::start();
        let replica = RedisServer::start_replica_of(&primary);
        let proxy = DelayProxy::start(primary.port(), Duration::ZERO);
        Pair {
            primary,
            replica,
            proxy,
        }
    }

    /// Once a client has met the primary (its record is written there):
    /// waits until the replica holds the record and is older than the
    /// grace, then cuts the link (promotes the replica).
    fn ready_to_lose(&self, record_key: &[u8]) {
        self.replica.wait_replicated(record_key);
        // `uptime_in_seconds` less its second of slack must reach the grace
        // with its drift allowance.
        self.replica.wait_up_for(GRACE + Duration::from_secs(2));
        self.replica.promote();
    }

    /// The primary dies; the address moves to the promoted replica.
    fn fail_over(&mut self) {
        self.primary.kill();
        self.proxy.switch_to(self.replica.port());
    }
}

fn record_key() -> Vec<u8> {
    b"quorlock:quorlock-incarnations:v2".to_vec()
}

/// Holder A's guard must learn that its key may be gone well before its
/// validity runs out (it is not extended: only the failover can tell it).
async fn lost_at_once(a: &LockGuard) {
    let valid_until = a.valid_until();
    let lost = tokio::time::timeout(GRACE, a.lost())
        .await
        .expect("the holder learns of the loss");
    println!("holder told: {lost}");
    assert!(
        Instant::now() + Duration::from_secs(2) < valid_until,
        "told only near its expiry: {lost}"
    );
    assert!(
        matches!(lost.lost_reason(), Some(LostReason::ServerChanged { .. })),
        "{lost}"
    );
    assert!(!a.is_valid());
}

/// After the failover of node 0: the client that knew the old primary and a
/// fresh one are both refused, naming node 0 as recovering, while holder A
/// (valid until `a_until`) is still valid. Returns the fresh client's error.
async fn both_refused(a_client: &Redlock, urls: &[String], a_until: Instant) -> Error {
    let failed_over = vec![urls[0].replace("redis://", "")];
    let err = a_client
        .lock(RESOURCE, GRACE)
        .await
        .expect_err("the client that knew the old primary: a second holder");
    println!("knew the primary, refused: {err}");
    assert_eq!(support::recovering_nodes(&err), failed_over, "{err}");
    let err = client(urls)
        .lock(RESOURCE, GRACE)
        .await
        .expect_err("a fresh client: a second holder");
    println!("fresh, refused: {err}");
    assert_eq!(support::recovering_nodes(&err), failed_over, "{err}");
    assert!(
        Instant::now() < a_until,
        "the refusals came too late to mean anything"
    );
    err
}

/// `redlock` locks `RESOURCE` again within the grace and some seconds.
async fn locks_again(redlock: &Redlock) {
    let within = GRACE + Duration::from_secs(15);
    let guard = support::locks_again(redlock, RESOURCE, within).await;
    guard.unlock().await.unwrap();
}

/// N = 1: the failover is all that stands between the holder and a second
/// one, and the promoted replica is older than the grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_a_promoted_old_replica_gives_no_second_holder() {
    let mut pair = Pair::start();
    let urls = vec![pair.proxy.url()];
    let a_client = client(&urls);
    support::lock_once(&a_client, "failover:first-contact", Duration::from_secs(1)).await;
    pair.ready_to_lose(&record_key());

    let a = a_client.try_lock(RESOURCE, GRACE).await.unwrap();
    let a_until = a.valid_until();
    pair.fail_over();

    both_refused(&a_client, &urls, a_until).await;
    lost_at_once(&a).await;

    locks_again(&a_client).await;
    locks_again(&client(&urls)).await;
}

/// N = 3, node 0 a replicated primary behind a stable address: A holds nodes
/// 0 and 1 (node 2 was held by a lock that expires just after); node 0
/// fails over to a replica that lost A's key. Nodes 0 and 2 would make a
/// quorum for B: node 0 must not count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_a_promoted_old_replica_gives_no_second_holder() {
    let mut pair = Pair::start();
    let others = [RedisServer::start(), RedisServer::start()];
    let urls = vec![pair.proxy.url(), others[0].url(), others[1].url()];
    let a_client = client(&urls);
    support::lock_once(&a_client, "failover:first-contact", Duration::from_secs(1)).await;
    pair.ready_to_lose(&record_key());

    let key = a_client.key(RESOURCE).unwrap();
    others[1].set_px(&key, "someone-else", 60_000);
    let a = a_client.try_lock(RESOURCE, GRACE).await.unwrap();
    let a_until = a.valid_until();
    let _: () = redis::cmd("DEL")
        .arg(&key)
        .query(&mut others[1].connection())
        .unwrap();
    pair.fail_over();

    let err = both_refused(&a_client, &urls, a_until).await;
    // Reserved by nodes 0 and 2, the waiter claims; node 0's grant does not
    // count, and the claim fails. It must not claim again at once, round
    // after round, for the whole grace (hundreds of rounds a second).
    let attempts = err.attempts().unwrap_or(0);
    assert!(attempts <= 30, "{attempts} rounds in 1.5 s: {err}");
    lost_at_once(&a).await;

    locks_again(&a_client).await;
    locks_again(&client(&urls)).await;
}

/// `replica_acks(1)`: a grant counts once the replica acknowledged it, so
/// the key is on the replica when the guard is returned; with the
/// replica's link cut, no grant counts, and the error names the node and
/// says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_acks_count_a_grant_only_once_a_replica_has_it() {
    let primary = RedisServer::start();
    let replica = RedisServer::start_replica_of(&primary);
    // Generous: a grant's call now includes the replica's acknowledgement,
    // and this is not about speed.
    let redlock = Redlock::builder([primary.url()])
        .node_timeout(Duration::from_secs(1))
        .replica_acks(1)
        .build()
        .unwrap();
    let guard = redlock.try_lock(RESOURCE, GRACE).await.unwrap();
    assert_eq!(
        replica.get(guard.key()),
        primary.get(guard.key()),
        "on the replica when granted"
    );
    guard.unlock().await.unwrap();

    replica.cut_link_from(&primary);
    let err = redlock
        .try_lock(RESOURCE, GRACE)
        .await
        .expect_err("no replica acknowledges");
    println!("{err}");
    assert!(
        err.failed()
            .iter()
            .any(|node| node.to_string().contains("acknowledged the grant (WAIT)")),
        "{err}"
    );
    let key = redlock.key(RESOURCE).unwrap();
    assert!(
        support::eventually(Duration::from_secs(5), || primary.get(&key).is_none()).await,
        "the grant that did not count was released"
    );
}

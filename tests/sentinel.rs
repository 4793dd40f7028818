//! A Sentinel-managed primary as a node, named by a `redis+sentinel://` URL:
//! locks work; a failover that lost the holder's key (the replica's link
//! was cut before the lock) gives no second holder, for the client that
//! knew the old primary and for a fresh one, and tells the holder at once;
//! locks work again through the same URL once the grace has passed. The
//! data nodes and the replication need a password, given in the URL.

mod support;

use std::time::{Duration, Instant};

use quorlock::{Redlock, RedlockBuilder};
use support::RedisServer;
use support::sentinel::Sentinels;

const RESOURCE: &str = "sentinel:resource";
const PASSWORD: &str = "s3cret";
/// The restart grace and the holder's TTL: long enough that the failover
/// (about 2 to 5 s) ends while the holder is valid.
const GRACE: Duration = Duration::from_secs(15);

fn builder(url: &str) -> RedlockBuilder {
    Redlock::builder([url])
        .node_timeout(Duration::from_millis(200))
        .restart_grace(GRACE)
        .acquire_timeout(Duration::from_millis(1500))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lossy_sentinel_failover_gives_no_second_holder_and_locks_work_again() {
    let mut primary =
        RedisServer::start_with(&["--requirepass", PASSWORD, "--masterauth", PASSWORD]);
    let replica = RedisServer::start_replica_of(&primary);
    let sentinels = Sentinels::start(&primary, Some(PASSWORD), 1);
    let url = sentinels.url(Some(PASSWORD));
    let a_client = builder(&url).build().unwrap();
    support::lock_once(&a_client, "sentinel:first-contact", Duration::from_secs(1)).await;
    replica.wait_replicated(b"quorlock:quorlock-incarnations:v2");

    replica.cut_link_from(&primary);
    let a = a_client.try_lock(RESOURCE, GRACE).await.unwrap();
    let a_until = a.valid_until();
    let key = a.key().to_vec();
    assert!(primary.get(&key).is_some() && replica.get(&key).is_none());
    let lost = a.lost();
    primary.kill();
    sentinels.wait_primary(replica.port());
    println!("failed over after {:?}", a.acquired_at().elapsed());

    support::told_of_failover(lost, a_until, GRACE).await;
    support::refused_while_recovering(&a_client, RESOURCE, GRACE, "knew the primary").await;
    let fresh = builder(&url).build().unwrap();
    support::refused_while_recovering(&fresh, RESOURCE, GRACE, "fresh").await;
    assert!(
        Instant::now() < a_until,
        "the refusals came too late to mean anything"
    );

    // Through the same URL, without a rebuild, once the grace has passed.
    let within = GRACE + Duration::from_secs(20);
    let guard = support::locks_again(&a_client, RESOURCE, within).await;
    assert!(replica.get(&key).is_some(), "locked on the new primary");
    guard.unlock().await.unwrap();
}

/// A Sentinel that knows no such master, and Sentinels that are all down,
/// are named in the error, with what each said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_that_name_no_primary_are_named_in_the_error() {
    let primary = RedisServer::start();
    let sentinels = Sentinels::start(&primary, None, 0);
    let hosts: Vec<String> = sentinels.0.iter().map(|s| s.address()).collect();
    let url = format!("redis+sentinel://{}/no-such-master", hosts.join(","));
    let err = builder(&url)
        .build()
        .unwrap()
        .try_lock(RESOURCE, Duration::from_secs(1))
        .await
        .expect_err("no such master");
    println!("{err}");
    let text = err.to_string();
    assert!(
        text.contains("no-such-master") && text.contains("knows no master"),
        "{text}"
    );
}

/// A primary that stops answering without closing its connections (frozen,
/// or cut off by a partition) while the Sentinels promote its replica: the
/// client leaves it for the primary the Sentinels name, and locks again
/// once the promoted one has passed its grace, without the old one coming
/// back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_that_went_silent_is_left_for_the_one_the_sentinels_name() {
    let primary = RedisServer::start();
    let replica = RedisServer::start_replica_of(&primary);
    let sentinels = Sentinels::start(&primary, None, 1);
    let grace = Duration::from_secs(2);
    let redlock = Redlock::builder([sentinels.url(None)])
        .node_timeout(Duration::from_millis(200))
        .restart_grace(grace)
        .build()
        .unwrap();
    support::lock_once(&redlock, "sentinel:first-contact", Duration::from_secs(1)).await;
    primary.pause();
    let err = redlock
        .try_lock(RESOURCE, Duration::from_secs(1))
        .await
        .expect_err("the primary is frozen");
    println!("while frozen: {err}");
    sentinels.wait_primary(replica.port());
    let failed_over = Instant::now();
    let deadline = failed_over + grace + Duration::from_secs(20);
    loop {
        match redlock.try_lock(RESOURCE, Duration::from_secs(1)).await {
            Ok(guard) => {
                assert!(replica.get(guard.key()).is_some(), "on the new primary");
                guard.unlock().await.unwrap();
                break;
            }
            Err(err) => {
                assert!(
                    Instant::now() < deadline,
                    "never left the silent primary: {err}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    println!(
        "locked again {:?} after the failover",
        failed_over.elapsed()
    );
}

//! A Redis Cluster as a node, named by a `redis+cluster://` URL: every key
//! of a lock lives in its resource's slot, so that 1,000 resources spread
//! over every primary lock and unlock; fencing tokens increase; a set of
//! resources in one slot (one hash tag) locks, one across slots is refused
//! with a typed error; read-write locks work; a server of a cluster named
//! as a plain node is refused as a misconfiguration; `replica_acks` waits
//! for the replicas of every primary. A failover inside the
//! cluster that lost the holder's key (its replica's link was cut before
//! the lock) gives no second holder, for a client that knew the cluster and
//! for a fresh one, tells the holder at once, and locks work again through
//! the same URL once the grace has passed. A node whose primary was frozen
//! (a call timed out) is used again within moments of its answering; a
//! cluster outlives the one node its URL names. An election and a
//! semaphore work on a cluster node.

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use quorlock::{Error, Redlock, RedlockBuilder};
use support::cluster::{self, Cluster};

const PASSWORD: &str = "s3cret";
/// The restart grace and the holder's TTL: long enough that the failover
/// (about 2 to 5 s) ends while the holder is valid.
const GRACE: Duration = Duration::from_secs(15);

fn builder(url: &str) -> RedlockBuilder {
    Redlock::builder([url])
        .node_timeout(Duration::from_millis(500))
        .acquire_timeout(Duration::from_secs(5))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_resources_over_every_slot_lock_and_unlock() {
    let cluster = Cluster::start(3, 0);
    let redlock = builder(&cluster.url()).fencing(true).build().unwrap();
    let ttl = Duration::from_secs(10);
    let mut primaries = BTreeSet::new();
    let mut slots = BTreeSet::new();
    for n in 0..1000 {
        let resource = format!("cluster:resource:{n}");
        let key = redlock.key(&resource).unwrap();
        primaries.insert(cluster.primary_of(&key));
        slots.insert(cluster.slot(&key));
        let first = redlock.lock(&resource, ttl).await.unwrap();
        let first_token = first.fencing_token().expect("fencing on");
        // Held where the cluster keeps its slot: another try is refused.
        let held = redlock.try_lock(&resource, ttl).await;
        assert!(
            matches!(held, Err(Error::Contended { .. })),
            "{resource}: {held:?}"
        );
        first.unlock().await.unwrap();
        let second = redlock.lock(&resource, ttl).await.unwrap();
        assert!(second.fencing_token().expect("fencing on") > first_token);
        second.unlock().await.unwrap();
    }
    assert_eq!(primaries.len(), 3, "the resources reached every primary");
    assert!(slots.len() > 900, "{} slots", slots.len());
    for primary in &cluster.primaries {
        let keys: i64 = redis::cmd("DBSIZE")
            .query(&mut primary.connection())
            .unwrap();
        assert!(keys > 0, "each primary holds counters");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sets_lock_in_one_slot_and_are_refused_across_slots() {
    let cluster = Cluster::start(3, 0);
    let redlock = builder(&cluster.url()).build().unwrap();
    let ttl = Duration::from_secs(10);
    let tagged = ["{order:42}:items", "{order:42}:payment"];
    let guard = redlock.lock_all(&tagged, ttl).await.unwrap();
    let member = redlock.try_lock(tagged[1], ttl).await;
    assert!(matches!(member, Err(Error::Contended { .. })), "{member:?}");
    guard.unlock().await.unwrap();
    // A set whose member is held waits in its queue, then gathers.
    let holder = redlock.lock(tagged[1], ttl).await.unwrap();
    let set = tokio::spawn({
        let redlock = redlock.clone();
        async move { redlock.lock_all(&tagged, ttl).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!set.is_finished(), "the set waits for its member");
    holder.unlock().await.unwrap();
    let set = tokio::time::timeout(Duration::from_secs(10), set)
        .await
        .expect("the set is served once its member is released")
        .unwrap()
        .unwrap();
    let member = redlock.try_lock(tagged[0], ttl).await;
    assert!(matches!(member, Err(Error::Contended { .. })), "{member:?}");
    set.unlock().await.unwrap();
    let across = redlock.lock_all(&["cluster:a", "cluster:b"], ttl).await;
    match across {
        Err(Error::InvalidResource { reason }) => {
            assert!(reason.contains("hash tag"), "{reason}");
        }
        other => panic!("a set across slots: {other:?}"),
    }
    let reader = redlock.read("cluster:rw", ttl).await.unwrap();
    let writer = redlock.try_write("cluster:rw", ttl).await;
    assert!(writer.is_err(), "a writer beside a reader: {writer:?}");
    reader.unlock().await.unwrap();
    let writer = redlock.write("cluster:rw", ttl).await.unwrap();
    writer.unlock().await.unwrap();
}

/// A resharding moves a held lock's slot to another primary: while its
/// keys have moved and the slot is still migrating (`ASK`), and after
/// (`MOVED`), the lock stays held (another client is refused, not failed),
/// its holder extends and releases it, and it locks again, on the new
/// primary, with a higher fencing token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_moves_with_its_slot() {
    let cluster = Cluster::start(2, 0);
    let holder = builder(&cluster.url()).fencing(true).build().unwrap();
    let other = builder(&cluster.url()).build().unwrap();
    let resource = "cluster:resharded";
    let key = holder.key(resource).unwrap();
    let (slot, from) = (cluster.slot(&key), cluster.primary_of(&key));
    let to = 1 - from;
    let ttl = Duration::from_secs(10);
    let mut guard = holder.lock(resource, ttl).await.unwrap();
    let token = guard.fencing_token().expect("fencing on");

    cluster.migrate_keys(slot, from, to);
    assert!(
        cluster::keys_in_slot(&cluster.primaries[to], slot) > 0
            && cluster::keys_in_slot(&cluster.primaries[from], slot) == 0,
        "the keys moved"
    );
    let refused = other.try_lock(resource, ttl).await;
    assert!(
        matches!(refused, Err(Error::Contended { .. })),
        "while migrating (ASK): {refused:?}"
    );
    guard
        .extend(ttl)
        .await
        .expect("extended on the new primary (ASK)");

    cluster.end_migration(slot, to);
    let refused = other.try_lock(resource, ttl).await;
    assert!(
        matches!(refused, Err(Error::Contended { .. })),
        "after (MOVED): {refused:?}"
    );
    guard.unlock().await.expect("released on the new primary");
    let again = other.lock(resource, ttl).await.unwrap();
    assert!(
        cluster::get(&cluster.primaries[to], &key).is_some(),
        "held on the new primary"
    );
    again.unlock().await.unwrap();
    let fenced = holder.lock(resource, ttl).await.unwrap();
    assert!(fenced.fencing_token().expect("fencing on") > token);
    fenced.unlock().await.unwrap();
}

/// An election and a semaphore on a cluster node: the leader's record,
/// the semaphore's gate and slots live in their name's slot, so the record
/// script (lock key and record) runs there; the term is a fencing token
/// (fencing off for the client); the semaphore admits its permits only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_and_a_semaphore_on_a_cluster() {
    let cluster = Cluster::start(3, 0);
    let redlock = builder(&cluster.url()).build().unwrap();
    let ttl = Duration::from_secs(5);
    let leadership = redlock.campaign("cluster:elect", "one", ttl).await.unwrap();
    let leader = redlock
        .leader("cluster:elect")
        .await
        .unwrap()
        .expect("a leader");
    assert_eq!(
        (leader.identity.as_str(), leader.term),
        ("one", leadership.term())
    );
    let first = leadership.term();
    leadership.resign().await.unwrap();
    assert!(redlock.leader("cluster:elect").await.unwrap().is_none());
    let again = redlock.campaign("cluster:elect", "two", ttl).await.unwrap();
    assert!(again.term() > first, "terms rise");
    again.resign().await.unwrap();

    let semaphore = redlock.semaphore("cluster:sem", 2).unwrap();
    let (a, b) = (
        semaphore.acquire(ttl).await.unwrap(),
        semaphore.acquire(ttl).await.unwrap(),
    );
    assert_ne!(a.slot(), b.slot());
    let third = semaphore.try_acquire(ttl).await;
    assert!(matches!(third, Err(Error::Contended { .. })), "{third:?}");
    a.release().await.unwrap();
    b.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_server_named_as_a_plain_node_is_refused() {
    let cluster = Cluster::start(1, 0);
    let redlock = builder(&cluster.primaries[0].url()).build().unwrap();
    match redlock.lock("cluster:plain", Duration::from_secs(1)).await {
        Err(Error::Misconfigured { reason }) => {
            assert!(reason.contains("redis+cluster://"), "{reason}");
        }
        other => panic!("a cluster server as a plain node: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lossy_failover_inside_the_cluster_gives_no_second_holder() {
    let mut cluster = Cluster::start_with(3, 1, &["--requirepass", PASSWORD]);
    let url = cluster.url();
    let build = || {
        builder(&url)
            .restart_grace(GRACE)
            .acquire_timeout(Duration::from_millis(1500))
            .build()
            .unwrap()
    };
    let a_client = build();
    let resource = "cluster:failover";
    let key = a_client.key(resource).unwrap();
    let shard = cluster.primary_of(&key);
    support::lock_once(&a_client, resource, Duration::from_secs(1)).await;
    let b_client = build();
    support::lock_once(&b_client, "cluster:first-contact", Duration::from_secs(1)).await;

    cluster.replicas[shard][0].cut_link_from(&cluster.primaries[shard]);
    let a = a_client.try_lock(resource, GRACE).await.unwrap();
    let a_until = a.valid_until();
    let replica = &cluster.replicas[shard][0];
    assert!(cluster::get(&cluster.primaries[shard], &key).is_some());
    assert!(
        cluster::get(replica, &key).is_none(),
        "the key reached the replica"
    );
    let lost = a.lost();
    cluster.primaries[shard].kill();
    cluster.wait_promoted(&cluster.replicas[shard][0]);
    println!("failed over after {:?}", a.acquired_at().elapsed());

    support::told_of_failover(lost, a_until, GRACE).await;
    support::refused_while_recovering(&b_client, resource, GRACE, "knew the cluster").await;
    support::refused_while_recovering(&build(), resource, GRACE, "fresh").await;
    assert!(
        Instant::now() < a_until,
        "the refusals came too late to mean anything"
    );

    // Through the same URL, without a rebuild, once the grace has passed.
    let within = GRACE + Duration::from_secs(20);
    let guard = support::locks_again(&b_client, resource, within).await;
    let promoted = &cluster.replicas[shard][0];
    assert!(
        cluster::get(promoted, &key).is_some(),
        "locked on the new primary"
    );
    guard.unlock().await.unwrap();
}

/// `replica_acks` on a cluster: a grant counts once the replicas of every
/// primary acknowledged (`WAIT` goes to each); with one replica's link cut,
/// no grant counts, and the error says the replicas are behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_acks_wait_for_the_replicas_of_every_primary() {
    let cluster = Cluster::start_with(2, 1, &["--requirepass", PASSWORD]);
    let redlock = builder(&cluster.url()).replica_acks(1).build().unwrap();
    let ttl = Duration::from_secs(5);
    let guard = redlock.lock("cluster:acked", ttl).await.unwrap();
    guard.unlock().await.unwrap();
    cluster.replicas[1][0].cut_link_from(&cluster.primaries[1]);
    let err = redlock
        .try_lock("cluster:acked", ttl)
        .await
        .expect_err("a replica's link is cut");
    println!("{err}");
    assert!(
        err.failed().iter().any(|failed| matches!(
            failed.kind(),
            quorlock::NodeErrorKind::ReplicasBehind { .. }
        )),
        "{err}"
    );
}

/// A primary that stops answering (SIGSTOP) makes a call time out: the
/// cluster node is skipped, and its probe connects again after a second of
/// silence. Once the primary answers again, the node is used again within
/// moments, even where connecting to the cluster (every primary, checked)
/// takes longer than the per-node timeout, as it does on a loaded machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_node_comes_back_after_a_primary_was_frozen() {
    let cluster = Cluster::start(3, 0);
    let redlock = Redlock::builder([cluster.url()])
        .node_timeout(Duration::from_millis(2))
        .acquire_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let ttl = Duration::from_secs(5);
    // A first contact (2 ms is short on a loaded machine: it may take a
    // few rounds, and its release may go unconfirmed).
    let warm_up = support::locks_again(&redlock, "cluster:warm-up", Duration::from_secs(10)).await;
    let _ = warm_up.unlock().await;
    let resource = "cluster:frozen";
    let frozen = cluster.primary_of(&redlock.key(resource).unwrap());
    cluster.primaries[frozen].pause();
    let err = redlock.try_lock(resource, ttl).await.expect_err("frozen");
    println!("while frozen: {err}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    cluster.primaries[frozen].resume();
    let resumed = Instant::now();
    let within = Duration::from_secs(10);
    let guard = support::locks_again(&redlock, resource, within).await;
    println!(
        "locked {:?} after the primary answered again",
        resumed.elapsed()
    );
    guard.unlock().await.unwrap();
}

/// The URL names one node of the cluster, which dies: the client reads the
/// topology from the nodes the cluster told it of (the other primaries, the
/// replica promoted in its place), and locks again once the grace has
/// passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_outlives_the_node_its_url_names() {
    let mut cluster = Cluster::start(3, 1);
    let only = format!("redis+cluster://127.0.0.1:{}", cluster.primaries[0].port());
    let grace = Duration::from_secs(2);
    let redlock = builder(&only).restart_grace(grace).build().unwrap();
    let ttl = Duration::from_secs(1);
    support::lock_once(&redlock, "cluster:first-contact", ttl).await;
    cluster.primaries[0].kill();
    cluster.wait_promoted(&cluster.replicas[0][0]);
    let within = grace + Duration::from_secs(20);
    let guard = support::locks_again(&redlock, "cluster:after", within).await;
    guard.unlock().await.unwrap();
}

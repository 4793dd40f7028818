//! Restarts. A node restarted without persistence comes back empty and may
//! grant a lock that a quorum still holds. quorlock closes this by default: a
//! node that restarted, and whose data is not durable, is *recovering* and
//! its grants do not count until the restart grace has passed since it came
//! back. These tests show the hazard (with the protection off), that the
//! defaults close it, that durable nodes count at once, that a recovering
//! node counts again by itself, and the strict mode.

mod support;

use std::time::{Duration, Instant};

use quorlock::{Error, LockGuard, Redlock, RedlockBuilder};
use support::{RedisServer, lock_once, recovering_nodes, servers, urls};

const RESOURCE: &str = "restarts:resource";

fn builder(nodes: &[RedisServer]) -> RedlockBuilder {
    Redlock::builder(urls(nodes)).node_timeout(Duration::from_millis(200))
}

fn client(nodes: &[RedisServer]) -> Redlock {
    builder(nodes).build().unwrap()
}

/// A client without the restart protection: what every other Redlock client does.
fn unprotected(nodes: &[RedisServer]) -> Redlock {
    builder(nodes)
        .restart_grace(Duration::ZERO)
        .build()
        .unwrap()
}

/// Holder A takes the lock while node 2 is down, so it holds nodes 0 and 1.
async fn holder_on_nodes_0_and_1(
    nodes: &mut [RedisServer],
    a_client: &Redlock,
    ttl: Duration,
) -> LockGuard {
    nodes[2].kill();
    let a = a_client.try_lock(RESOURCE, ttl).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(nodes[0].get(a.key()).is_some() && nodes[1].get(a.key()).is_some());
    a
}

fn node_name(node: &RedisServer) -> String {
    format!("127.0.0.1:{}", node.port())
}

/// The hazard's exact sequence: holder A (`make(nodes)`'s client) on nodes
/// 0 and 1 of 3 (node 2 down), node 1 restarted at once without persistence
/// (it comes back empty), node 2 back; then a second client, another
/// process that never met node 1, tries the lock. Returns A and B's outcome.
async fn the_hazard(
    make: fn(&[RedisServer]) -> Redlock,
) -> (Vec<RedisServer>, LockGuard, Result<LockGuard, Error>) {
    let mut nodes = servers(3);
    let a_client = make(&nodes);
    let a = holder_on_nodes_0_and_1(&mut nodes, &a_client, Duration::from_secs(10)).await;
    nodes[1].restart();
    nodes[2].spawn().unwrap();
    let b = make(&nodes)
        .try_lock(RESOURCE, Duration::from_secs(10))
        .await;
    (nodes, a, b)
}

/// The hazard closed by default: the second client is refused, saying why:
/// node 1 is young and not in its own record, while node 0's record names
/// node 1's old `run_id`, which no node has now, so node 1 is recovering
/// (and so is node 2, young and unrecorded too). The first holder stays the
/// only one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn immediate_restart_without_persistence_grants_no_second_holder_by_default() {
    let (nodes, a, b) = the_hazard(client).await;
    // A's own client may have told A that node 1's server changed (`lost`);
    // A's key is still on node 0 until its validity ends, and A's work may
    // still be under way: no second holder until then.
    let a_until = a.valid_until();
    assert!(Instant::now() < a_until);
    let err = b.expect_err("a second holder while the first is valid");
    println!("second client refused: {err}");
    assert!(err.is_unavailable(), "{err}");
    let recovering = recovering_nodes(&err);
    assert!(
        recovering.contains(&node_name(&nodes[1])),
        "node 1 named as recovering: {err}"
    );
    assert!(
        err.to_string().contains("recovering from a loss of data"),
        "{err}"
    );

    // A `lock` call that waits fails the same way once its patience is
    // spent (long enough for the first checks to end: a shorter one ends
    // during first contact, with "not checked yet" as the reason).
    let err = builder(&nodes)
        .acquire_timeout(Duration::from_millis(1500))
        .build()
        .unwrap()
        .lock(RESOURCE, Duration::from_secs(10))
        .await
        .expect_err("a second holder while the first is valid");
    assert!(!recovering_nodes(&err).is_empty(), "{err}");
    assert!(Instant::now() < a_until);
}

/// The same sequence seen by the first holder's own client: it knew node 1,
/// so the changed `run_id` alone would hold node 1 back, and its data mark,
/// gone with its data, does; and it tells holder A at once that its key on
/// node 1 may be gone (A held a bare quorum).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_knew_the_node_sees_its_run_id_change() {
    let mut nodes = servers(3);
    // `lock`, which retries: the first call on the connection the restart
    // broke fails before the client reconnects.
    let a_client = builder(&nodes)
        .acquire_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let a = holder_on_nodes_0_and_1(&mut nodes, &a_client, Duration::from_secs(10)).await;
    let a_until = a.valid_until();
    nodes[1].restart();
    nodes[2].spawn().unwrap();
    let err = a_client
        .lock(RESOURCE, Duration::from_secs(10))
        .await
        .expect_err("a second holder while the first is valid");
    assert!(
        recovering_nodes(&err).contains(&node_name(&nodes[1])),
        "{err}"
    );
    assert!(err.to_string().contains("data mark is gone"), "{err}");
    assert!(Instant::now() < a_until);
    let lost = tokio::time::timeout(Duration::from_secs(5), a.lost())
        .await
        .expect("A is told at once, not at its expiry");
    assert!(
        matches!(
            lost.lost_reason(),
            Some(
                quorlock::LostReason::ServerChanged { .. } | quorlock::LostReason::DataLost { .. }
            )
        ),
        "{lost}"
    );
    assert!(!a.is_valid());
}

/// The hazard, with the protection switched off (`restart_grace(0)`): the
/// emptied node grants a second holder while the first is still valid. Two
/// holders at once: why the protection exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn immediate_restart_without_protection_allows_a_second_holder() {
    let (_nodes, a, b) = the_hazard(unprotected).await;
    let b = b.expect("the documented hazard: the emptied node grants a second holder");
    // A's client may tell A that node 1 changed (`lost`), but A's validity
    // window is still open, and its work may be under way.
    assert!(
        Instant::now() < a.valid_until() && b.is_valid(),
        "two holders of one lock at once"
    );
    println!(
        "hazard shown: holder A valid for {:?} more, holder B valid for {:?}",
        a.remaining(),
        b.remaining()
    );
}

/// The operator's safe setting without the protection, delayed restart:
/// node 1 stays down for the TTL before it restarts empty; no second holder
/// is granted while the first is valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_restart_grants_no_second_holder_while_the_first_is_valid() {
    let mut nodes = servers(3);
    let ttl = Duration::from_millis(1500);
    let a_client = unprotected(&nodes);
    let a = holder_on_nodes_0_and_1(&mut nodes, &a_client, ttl).await;
    let a_until = a.valid_until();
    nodes[1].kill();
    nodes[2].spawn().unwrap();
    let b_client = unprotected(&nodes);
    let down_since = Instant::now();
    let mut granted_while_a_valid = 0;
    let mut b = None;
    while b.is_none() {
        // Node 1 comes back, empty, only after the TTL.
        if !nodes[1].is_running() && down_since.elapsed() >= ttl {
            nodes[1].spawn().unwrap();
        }
        if let Ok(guard) = b_client.try_lock(RESOURCE, ttl).await {
            if Instant::now() < a_until {
                granted_while_a_valid += 1;
            }
            b = Some(guard);
        }
        assert!(
            down_since.elapsed() < Duration::from_secs(10),
            "B never got the lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        granted_while_a_valid, 0,
        "no second holder while the first was valid"
    );
    assert!(!a.is_valid());
}

/// Persistence, `appendonly yes` with `appendfsync always`: node 1 restarts
/// at once and still holds the key, so the second client is refused while
/// the first holder is valid; and the restarted node counts at once, for the
/// client that saw its `run_id` change and for a fresh one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_node_keeps_the_lock_and_counts_at_once_after_a_restart() {
    let aof = ["--appendonly", "yes", "--appendfsync", "always"];
    let mut nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_with(&aof)).collect();
    let a_client = client(&nodes);
    let a = holder_on_nodes_0_and_1(&mut nodes, &a_client, Duration::from_secs(10)).await;
    nodes[1].restart(); // SIGKILL, then start on the same port and directory
    assert!(
        nodes[1].get(a.key()).is_some(),
        "the key survived the crash"
    );
    nodes[2].spawn().unwrap();
    let err = client(&nodes)
        .try_lock(RESOURCE, Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(err.is_contended(), "got {err}");
    assert!(err.not_counted().is_empty(), "{err}");
    assert!(a.is_valid());
    // The release may miss node 1 (the first call on the connection its
    // restart broke fails): the key is removed by hand.
    let _ = a.unlock().await;
    let _: i64 = redis::cmd("DEL")
        .arg(a_client.key(RESOURCE).unwrap())
        .query(&mut nodes[1].connection())
        .unwrap();

    // With node 0 down, a lock needs nodes 1 and 2: node 1 counts at once.
    nodes[0].kill();
    let fresh = client(&nodes);
    for (who, redlock) in [
        ("the client that knew it", &a_client),
        ("a fresh client", &fresh),
    ] {
        // Broken or refused connections (node 0's; node 2's first) fail
        // until the client connects again, and a new incarnation does not
        // count while its run_id is being recorded on the other nodes (a
        // round trip each, bounded by the 1 s connect timeout: a loaded
        // machine stretched it past three tries). Neither is a grace: the
        // durable node is never recovering, and is granted within 2 s.
        let mut granted = None;
        for _ in 0..14 {
            match redlock.try_lock(RESOURCE, Duration::from_secs(10)).await {
                Ok(guard) => {
                    granted = Some(guard);
                    break;
                }
                Err(err) => {
                    assert!(recovering_nodes(&err).is_empty(), "{who}: {err}");
                    tokio::time::sleep(Duration::from_millis(150)).await;
                }
            }
        }
        let guard = granted.unwrap_or_else(|| panic!("{who}: no lock on nodes 1 and 2"));
        let _ = guard.unlock().await;
    }
}

/// A recovering node, seen by one long-lived client: locks go on while the
/// other nodes make a quorum, fail saying "recovering" while they do not,
/// and succeed on the restarted node once the grace has passed, without a
/// rebuild. The status shows the node as recovering. (`tests/observability.rs`
/// checks the warnings logged when it enters and leaves recovery.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovering_node_counts_again_after_the_grace() {
    let mut nodes = servers(3);
    let grace = Duration::from_secs(2);
    let ttl = Duration::from_millis(500);
    let redlock = builder(&nodes).restart_grace(grace).build().unwrap();
    lock_once(&redlock, RESOURCE, ttl).await;

    // Before the restart: the grace runs from the server's start, which
    // comes later.
    let restarted = Instant::now();
    nodes[1].restart();
    // The other two make a quorum: locking goes on.
    let guard = redlock.lock(RESOURCE, ttl).await.unwrap();
    // The first call on the connection the restart broke may fail
    // before the client reconnects and sees the new run_id.
    let mut status = redlock.status(RESOURCE).await.unwrap();
    while status.nodes[1].not_counted.is_none() && restarted.elapsed() < grace / 2 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        status = redlock.status(RESOURCE).await.unwrap();
    }
    println!("{status}");
    let node_1 = &status.nodes[1];
    assert!(
        node_1
            .not_counted
            .as_ref()
            .is_some_and(quorlock::NotCounted::is_recovering),
        "{status}"
    );
    assert!(
        status
            .to_string()
            .contains("recovering from a loss of data"),
        "{status}"
    );
    assert!(status.nodes[0].not_counted.is_none() && status.nodes[2].not_counted.is_none());
    guard.unlock().await.unwrap();

    // Without node 2, nodes 0 and 1 would be a quorum, but node 1 does
    // not count yet.
    nodes[2].kill();
    let err = redlock
        .try_lock(RESOURCE, ttl)
        .await
        .expect_err("a lock counted on a recovering node");
    assert!(err.is_unavailable(), "{err}");
    assert_eq!(recovering_nodes(&err), vec![node_name(&nodes[1])], "{err}");
    println!("refused while recovering: {err}");

    // Once the grace has passed, node 1 counts again by itself.
    let mut counted_after = None;
    while restarted.elapsed() < grace + Duration::from_secs(10) {
        if let Ok(guard) = redlock.try_lock(RESOURCE, ttl).await {
            counted_after = Some(restarted.elapsed());
            guard.unlock().await.unwrap();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = counted_after.expect("the recovered node never counted again");
    assert!(after >= grace, "counted after {after:?}, before the grace");
    println!("node 1 counted again {after:?} after its restart (grace {grace:?})");
    let status = redlock.status(RESOURCE).await.unwrap();
    assert!(status.nodes[1].not_counted.is_none(), "{status}");
}

/// Fresh nodes: by default the first lock does not wait (a brand-new set's
/// records hold no vanished incarnation); in strict mode the young nodes are held back for the
/// grace, and the error says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_nodes_count_at_once_unless_strict() {
    let nodes = servers(3);
    let strict = builder(&nodes).strict_restarts(true).build().unwrap();
    let err = strict
        .try_lock(RESOURCE, Duration::from_secs(1))
        .await
        .expect_err("strict mode counts young nodes");
    assert_eq!(recovering_nodes(&err).len(), 3, "{err}");
    assert!(err.to_string().contains("strict"), "{err}");

    let started = Instant::now();
    let guard = client(&nodes)
        .try_lock(RESOURCE, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
    guard.unlock().await.unwrap();
}

/// Clients that meet a brand-new set at the same moment (the demo's worker
/// processes starting together) all count every node: what one client
/// records on a node must not make another, which read its own node
/// unrecorded a moment before, take that node for one that lost its data. 16 fresh clients, one
/// resource each, every first lock must succeed; done over 5 fresh sets.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fresh_clients_meeting_a_new_set_together_all_count_it() {
    for set in 0..5 {
        let nodes = servers(5);
        let clients: Vec<Redlock> = (0..16).map(|_| client(&nodes)).collect();
        let locks = clients.iter().enumerate().map(|(i, redlock)| async move {
            redlock
                .try_lock(format!("fresh:{i}"), Duration::from_secs(5))
                .await
        });
        for (i, outcome) in futures::future::join_all(locks)
            .await
            .into_iter()
            .enumerate()
        {
            match outcome {
                Ok(guard) => drop(guard.unlock().await),
                Err(err) => panic!("set {set}, client {i}: {err}"),
            }
        }
    }
}

/// Nothing restarted, so nothing is held back: a client over three fresh
/// nodes counts all three although another client, over node 0 alone, has
/// recorded node 0 first (the benchmark's N = 1, 3, 5 on the same servers;
/// two applications sharing a server); and a node of a fresh set that starts
/// a few seconds after the others counts when it comes (a slow starter).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_that_lost_nothing_count_at_once_however_they_are_met() {
    let nodes = servers(3);
    let one = Redlock::new([nodes[0].url()]).unwrap();
    lock_once(&one, RESOURCE, Duration::from_secs(1)).await;
    let started = Instant::now();
    let all = client(&nodes);
    let guard = all
        .try_lock(RESOURCE, Duration::from_secs(1))
        .await
        .unwrap_or_else(|err| panic!("a superset of a recorded node: {err}"));
    guard.unlock().await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));

    // Node 2 of another fresh set is down when the first client locks, and
    // comes a moment later: young, unrecorded, but nothing that counted is
    // gone, so it counts, for that client and for a fresh one.
    let mut late = servers(3);
    late[2].kill();
    let early = builder(&late)
        .acquire_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    lock_once(&early, RESOURCE, Duration::from_secs(1)).await;
    late[2].spawn().unwrap();
    late[0].kill(); // a lock now needs nodes 1 and 2
    for (who, redlock) in [
        ("the early client", &early),
        ("a fresh client", &client(&late)),
    ] {
        let guard = redlock
            .lock(RESOURCE, Duration::from_secs(1))
            .await
            .unwrap_or_else(|err| panic!("{who}: the late node did not count: {err}"));
        guard.unlock().await.unwrap();
    }
}

/// A node that refuses `INFO` (renamed away) has no `run_id` to record: it
/// counts (the policy for refused checks), and no record gains an empty
/// `run_id`, which later clients would take for a vanished incarnation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_info_counts_and_records_nothing_empty() {
    let mut nodes = servers(2);
    nodes.push(RedisServer::start_with(&["--rename-command", "INFO", ""]));
    let redlock = client(&nodes);
    lock_once(&redlock, RESOURCE, Duration::from_secs(1)).await;
    redlock.flush().await;
    let record = format!("quorlock:{}", quorlock::Redlock::RECORD_SUFFIX);
    for node in &nodes {
        let members: Vec<String> = redis::cmd("SMEMBERS")
            .arg(&record)
            .query(&mut node.connection())
            .unwrap();
        assert!(
            members.iter().all(|member| !member.is_empty()),
            "node {}: {members:?}",
            node.port()
        );
        assert!(!members.is_empty() || node.port() == nodes[2].port());
    }
    // A fresh client still counts all three.
    lock_once(&client(&nodes), RESOURCE, Duration::from_secs(1)).await;
}

/// Clients from before incarnations read the record under
/// `RECORD_SUFFIX` and take any entry that is no node's `run_id` as an
/// incarnation that is gone. So that both kinds can share the nodes during
/// a rolling upgrade, that record holds only bare, current `run_id`s; the
/// incarnations (`run_id/master_replid`) go under `RECORD_SUFFIX:v2`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_record_older_clients_read_holds_only_current_run_ids() {
    let nodes = servers(3);
    let redlock = client(&nodes);
    lock_once(&redlock, RESOURCE, Duration::from_secs(1)).await;
    redlock.flush().await;
    let run_ids: Vec<String> = nodes
        .iter()
        .map(|node| node.info_field("server", "run_id").unwrap())
        .collect();
    let bare = format!("quorlock:{}", quorlock::Redlock::RECORD_SUFFIX);
    let full = format!("{bare}:v2");
    for node in &nodes {
        let members = |key: &str| -> Vec<String> {
            redis::cmd("SMEMBERS")
                .arg(key)
                .query(&mut node.connection())
                .unwrap()
        };
        let mut old = members(&bare);
        old.sort();
        let mut expected = run_ids.clone();
        expected.sort();
        assert_eq!(old, expected, "node {}", node.port());
        let new = members(&full);
        assert_eq!(new.len(), 3, "node {}: {new:?}", node.port());
        assert!(
            new.iter().all(|entry| run_ids
                .iter()
                .any(|id| entry.starts_with(&format!("{id}/")))),
            "{new:?}"
        );
    }
}

//! Nodes whose wall clock steps (issue 29): the test support's clock shim
//! moves a server's wall clock, and Redis expires keys by it. A step
//! forward past a key's TTL expires the key at once; a step back keeps it
//! longer. What quorlock does about it builds on these.

mod support;

use std::time::{Duration, Instant};

use quorlock::{LockGuard, Redlock, RedlockBuilder};
use support::clock::ClockServer;
use support::{RedisServer, eventually, lock_once, servers};

const RESOURCE: &str = "clock:resource";

#[test]
fn a_step_forward_expires_keys_early_and_a_step_back_keeps_them() {
    let node = ClockServer::start();
    node.server.set_px(b"clock:key", "token", 10_000);
    assert!(node.server.pttl(b"clock:key") > 9_000);
    node.set_offset(-30_000);
    assert!(
        node.server.pttl(b"clock:key") > 39_000,
        "a step back keeps the key longer"
    );
    node.set_offset(30_000);
    assert_eq!(
        node.server.pttl(b"clock:key"),
        -2,
        "a step forward expires the key"
    );
    assert!(node.server.get(b"clock:key").is_none());
}

/// The nodes of a clock-step test: node 0 is behind the clock shim, the
/// others are plain servers.
struct Nodes {
    clock: ClockServer,
    others: Vec<RedisServer>,
}

impl Nodes {
    fn start(n: usize) -> Nodes {
        Nodes {
            clock: ClockServer::start(),
            others: servers(n - 1),
        }
    }

    fn urls(&self) -> Vec<String> {
        std::iter::once(self.clock.server.url())
            .chain(self.others.iter().map(RedisServer::url))
            .collect()
    }

    fn quorum(&self) -> usize {
        self.others.len().div_ceil(2) + 1
    }

    fn clock_name(&self) -> String {
        format!("127.0.0.1:{}", self.clock.server.port())
    }
}

fn builder(nodes: &Nodes) -> RedlockBuilder {
    Redlock::builder(nodes.urls())
        .node_timeout(Duration::from_millis(200))
        .restart_grace(Duration::from_secs(3))
}

/// Waits (at most 5 s, less than the TTLs here) for holder A's `lost`
/// and checks that it says a node's clock stepped.
async fn told_its_clock_stepped(lost: impl std::future::Future<Output = quorlock::Error>) {
    let lost = tokio::time::timeout(Duration::from_secs(5), lost)
        .await
        .expect("A is told at once, not at its expiry");
    assert!(
        matches!(
            lost.lost_reason(),
            Some(quorlock::LostReason::ClockStepped { .. })
        ),
        "{lost}"
    );
}

/// Holder A on a bare quorum that includes the clock node: the plain nodes
/// beyond the quorum hold a foreign value until A has locked, then it
/// expires (waited on). Returns A's guard.
async fn holder_on_a_bare_quorum(nodes: &Nodes, a_client: &Redlock) -> LockGuard {
    let key = format!("quorlock:{RESOURCE}");
    let outside = &nodes.others[nodes.quorum() - 1..];
    for node in outside {
        node.set_px(key.as_bytes(), "someone-else", 1_500);
    }
    let a = a_client
        .try_lock(RESOURCE, Duration::from_secs(10))
        .await
        .expect("A locks a bare quorum");
    assert!(
        nodes.clock.server.get(a.key()).is_some(),
        "A holds the clock node"
    );
    for node in outside {
        assert!(
            eventually(Duration::from_secs(5), || node.pttl(key.as_bytes()) == -2).await,
            "the foreign value expires"
        );
    }
    a
}

/// The hazard: A holds a bare quorum including node 0; node 0's clock steps
/// forward 30 s, which expires A's key there. A client that watched node 0
/// before the step, and one that meets the nodes after it, both try the
/// lock: neither may get it while A is valid, and node 0 is named as held
/// back for a clock step.
async fn no_second_holder_after_a_step_forward(n: usize, fencing: bool) {
    let nodes = Nodes::start(n);
    let builder = |nodes: &Nodes| builder(nodes).fencing(fencing);
    let a_client = builder(&nodes).build().unwrap();
    let known = builder(&nodes).build().unwrap();
    lock_once(&known, "clock:warm-up", Duration::from_secs(1)).await;
    let a = holder_on_a_bare_quorum(&nodes, &a_client).await;

    nodes.clock.set_offset(30_000);
    assert!(
        nodes.clock.server.get(a.key()).is_none(),
        "the step expired A's key"
    );
    let fresh = builder(&nodes).build().unwrap();
    for (who, client) in [
        ("a client that knew the node", &known),
        ("a fresh client", &fresh),
    ] {
        let err = client
            .try_lock(RESOURCE, Duration::from_secs(10))
            .await
            .err()
            .unwrap_or_else(|| panic!("{who} got the lock while A is valid (N = {n})"));
        assert!(Instant::now() < a.valid_until(), "A is still valid");
        println!("{who} refused: {err}");
        let stepped: Vec<String> = err
            .not_counted()
            .iter()
            .filter(|node| node.to_string().contains("clock stepped"))
            .map(|node| node.node().to_owned())
            .collect();
        assert_eq!(stepped, [nodes.clock_name()], "{who}: {err}");
    }
    // A's own client reads the node too (in the background, within about
    // a second): A is told that its key there may be gone, before its
    // expiry (10 s).
    told_its_clock_stepped(a.lost()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_forward_on_a_bare_quorum_gives_no_second_holder_with_3_nodes() {
    no_second_holder_after_a_step_forward(3, false).await;
}

/// The same with fencing on (the acquisition pipelines `INCR` too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_forward_gives_no_second_holder_with_fencing_on() {
    no_second_holder_after_a_step_forward(3, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_forward_on_a_bare_quorum_gives_no_second_holder_with_5_nodes() {
    no_second_holder_after_a_step_forward(5, false).await;
}

/// Node 2 (a plain node) holds the resource for someone else for the whole
/// test: every lock then needs node 0, the clock node.
fn locks_need_the_clock_node(nodes: &Nodes) {
    let key = format!("quorlock:{RESOURCE}");
    nodes.others[1].set_px(key.as_bytes(), "someone-else", 120_000);
}

/// A step back keeps keys longer, which only withholds: a client that knew
/// the node and a fresh one both go on locking with it; and a slow drift
/// that stays within the tolerance (80 ms over a second, against 100 ms)
/// does not hold the node back either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_back_and_a_slow_drift_within_the_tolerance_do_not_stop_locking() {
    let nodes = Nodes::start(3);
    locks_need_the_clock_node(&nodes);
    let known = builder(&nodes).build().unwrap();
    lock_once(&known, RESOURCE, Duration::from_secs(2)).await;
    nodes.clock.set_offset(-30_000);
    lock_once(&known, RESOURCE, Duration::from_secs(2)).await;
    let fresh = builder(&nodes).build().unwrap();
    lock_once(&fresh, RESOURCE, Duration::from_secs(2)).await;
    for step in 1..=10 {
        nodes.clock.set_offset(-30_000 + step * 8);
        tokio::time::sleep(Duration::from_millis(100)).await;
        lock_once(&known, RESOURCE, Duration::from_secs(2)).await;
        lock_once(&fresh, RESOURCE, Duration::from_secs(2)).await;
    }
    let status = known.status(RESOURCE).await.unwrap();
    assert!(status.nodes[0].not_counted.is_none(), "{status}");
}

/// A node whose clock stepped is held back for the grace (3 s here, the
/// TTLs being shorter), shown so by `status`, and counts again by itself
/// once the grace has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_clock_stepped_counts_again_after_the_grace() {
    let nodes = Nodes::start(3);
    locks_need_the_clock_node(&nodes);
    let client = builder(&nodes).build().unwrap();
    lock_once(&client, RESOURCE, Duration::from_secs(1)).await;
    nodes.clock.set_offset(30_000);
    let stepped = Instant::now();
    let err = client
        .try_lock(RESOURCE, Duration::from_secs(1))
        .await
        .expect_err("the stepped node is held back");
    assert!(
        err.not_counted()
            .iter()
            .any(|node| node.not_counted().is_some_and(|why| why.is_clock_stepped())),
        "{err}"
    );
    let status = client.status(RESOURCE).await.unwrap();
    println!("{status}");
    let shown = status.nodes[0].not_counted.as_ref().expect("held back");
    assert!(shown.is_clock_stepped(), "{shown}");
    assert!(
        status.to_string().contains("its clock stepped forward"),
        "{status}"
    );
    let guard = support::locks_again(&client, RESOURCE, Duration::from_secs(15)).await;
    let waited = stepped.elapsed();
    assert!(
        waited >= Duration::from_millis(2_900),
        "counted again after {waited:?}"
    );
    assert!(
        nodes.clock.server.get(guard.key()).is_some(),
        "node 0 holds it"
    );
    guard.unlock().await.unwrap();
}

/// `quorlock status`, a fresh client, shows a node whose clock stepped
/// forward as held back, and why.
#[cfg(feature = "cli")]
#[test]
fn the_cli_status_shows_a_node_held_back_for_a_clock_step() {
    let nodes = Nodes::start(3);
    nodes.clock.set_offset(30_000);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_quorlock"))
        .env("QUORLOCK_NODES", nodes.urls().join(","))
        .args(["status", "--resource", RESOURCE])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run quorlock");
    let shown = String::from_utf8_lossy(&out.stdout);
    println!("{shown}");
    let line = shown
        .lines()
        .find(|line| line.starts_with(&nodes.clock_name()))
        .expect("a line for the clock node");
    assert!(
        line.contains("does not count") && line.contains("clock stepped forward by 30"),
        "{line}"
    );
}

/// The notes of clock steps on `node`: `run_id` → until when (ms, the
/// node's clock).
fn clock_notes(node: &RedisServer) -> std::collections::HashMap<String, i64> {
    redis::cmd("HGETALL")
        .arg("quorlock:quorlock-incarnations:clock-steps")
        .query(&mut node.connection())
        .expect("HGETALL")
}

/// A step that a client saw against its own readings is noted on every
/// node (so that clients meeting the nodes later hold the node back too);
/// a first look, which compares with the client's own wall clock, notes
/// nothing: a client whose clock is wrong must not hold a node back for
/// everyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_a_client_saw_is_noted_on_every_node_and_a_first_look_is_not() {
    let nodes = Nodes::start(3);
    nodes.clock.set_offset(30_000);
    let fresh = builder(&nodes).build().unwrap();
    let status = fresh.status(RESOURCE).await.unwrap();
    assert!(
        status.nodes[0]
            .not_counted
            .as_ref()
            .is_some_and(quorlock::NotCounted::is_clock_stepped),
        "{status}"
    );
    // A note would be written by a task within milliseconds: none comes
    // within a second.
    let noted = support::eventually(Duration::from_secs(1), || {
        nodes
            .others
            .iter()
            .any(|node| !clock_notes(node).is_empty())
    })
    .await;
    assert!(!noted, "a first look noted nothing");
    nodes.clock.set_offset(0);
    let known = builder(&nodes).build().unwrap();
    lock_once(&known, "clock:warm-up", Duration::from_secs(1)).await;
    nodes.clock.set_offset(30_000);
    // The known client's background reading sees the step within about a
    // second, and notes it on every node.
    let noted = support::eventually(Duration::from_secs(5), || {
        nodes.others.iter().all(|node| clock_notes(node).len() == 1)
            && clock_notes(&nodes.clock.server).len() == 1
    })
    .await;
    assert!(noted, "the step is noted on every node");
}

/// A note read at first contact holds the node back until it runs out, not
/// again at each later check: after the hold a note asked for has ended,
/// the node's connection is broken (`CLIENT KILL`), and the client that
/// read the note counts the node at once on its new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_note_read_long_ago_does_not_hold_the_node_back_again() {
    let nodes = Nodes::start(3);
    locks_need_the_clock_node(&nodes);
    let known = builder(&nodes).build().unwrap();
    lock_once(&known, "clock:warm-up", Duration::from_secs(1)).await;
    nodes.clock.set_offset(30_000);
    let noted = support::eventually(Duration::from_secs(5), || {
        nodes.others.iter().all(|node| clock_notes(node).len() == 1)
    })
    .await;
    assert!(noted, "the step is noted on every node");
    nodes.clock.set_offset(0);
    let fresh = builder(&nodes).build().unwrap();
    let guard = support::locks_again(&fresh, RESOURCE, Duration::from_secs(15)).await;
    guard.unlock().await.unwrap();
    let _: redis::Value = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query(&mut nodes.clock.server.connection())
        .unwrap();
    let again = Instant::now();
    let guard = support::locks_again(&fresh, RESOURCE, Duration::from_secs(15)).await;
    assert!(
        again.elapsed() < Duration::from_secs(2),
        "held back again by a note that had run out: {:?}",
        again.elapsed()
    );
    guard.unlock().await.unwrap();
}

/// A leader (see `Redlock::campaign`) on a bare quorum that includes node 0,
/// whose clock then steps forward 30 s, past the leader's TTL (6 s, within
/// the 10 s grace): the leader is told at once that it lost (`ClockStepped`),
/// and a standby that campaigns meanwhile leads only after the leader's
/// validity ended (its winning round started after it), with a higher term.
/// Without the clock watch the standby could lead at once, on node 0 (whose
/// step expired the leader's key) and the free plain node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_forward_under_a_leader_gives_no_second_leader() {
    const ELECTION: &str = "clock:election";
    let nodes = Nodes::start(3);
    let ttl = Duration::from_secs(6);
    let builder = |nodes: &Nodes| builder(nodes).restart_grace(Duration::from_secs(10));
    let a_client = builder(&nodes).build().unwrap();
    let standby = builder(&nodes).build().unwrap();
    lock_once(&standby, "clock:warm-up", Duration::from_secs(1)).await;
    let key = a_client.key(ELECTION).unwrap();
    nodes.others[1].set_px(&key, "someone-else", 1_500);
    let a = a_client.campaign(ELECTION, "a", ttl).await.unwrap();
    assert!(
        nodes.clock.server.get(&key).is_some(),
        "A leads on the clock node"
    );
    assert!(
        eventually(Duration::from_secs(5), || nodes.others[1].pttl(&key) == -2).await,
        "the foreign value expires"
    );
    let (a_valid_until, a_term) = (a.valid_until(), a.term());
    let lost = a.lost();
    nodes.clock.set_offset(30_000);
    let b = tokio::spawn(async move { standby.campaign(ELECTION, "b", ttl).await });
    told_its_clock_stepped(lost).await;
    let b = tokio::time::timeout(Duration::from_secs(30), b)
        .await
        .expect("the standby leads in the end")
        .unwrap()
        .unwrap();
    assert!(
        b.acquired_at() >= a_valid_until,
        "B led {:?} before A's validity ended",
        a_valid_until.saturating_duration_since(b.acquired_at())
    );
    assert!(
        b.term() > a_term,
        "terms rise: {} then {}",
        a_term,
        b.term()
    );
    drop(a);
}

/// A reader's first round without a script (see `read_round.rs`) aims its
/// entry's end by the node's clock as last read. On a node whose clock
/// moved 300 ms ahead since (within a tolerance of 1 s, so not a step the
/// client holds it back for), the aim falls short; the round sees it in
/// the node's `TIME` and runs the read script instead: the entry ends at
/// least a TTL after the node's time before the call, never 300 ms early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readers_entry_ends_a_ttl_after_the_nodes_time_when_its_clock_moved() {
    // The clock node alone: its grant is the one that counts.
    let nodes = Nodes::start(1);
    let client = builder(&nodes)
        .clock_tolerance(Duration::from_secs(1))
        .build()
        .unwrap();
    let ttl = Duration::from_secs(5);
    let guard = client.read("clock:warm-up", ttl).await.unwrap();
    guard.unlock().await.unwrap();
    let readers = [client.key("clock:rw").unwrap(), b":quorlock-read".to_vec()].concat();
    for step_ms in [300, 600, 900] {
        nodes.clock.set_offset(step_ms);
        let (secs, micros): (i64, i64) = redis::cmd("TIME")
            .query(&mut nodes.clock.server.connection())
            .unwrap();
        let before_ms = secs * 1000 + micros / 1000;
        let guard = client.read("clock:rw", ttl).await.unwrap();
        let entries: Vec<(String, i64)> = redis::cmd("ZRANGE")
            .arg(&readers)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(&mut nodes.clock.server.connection())
            .unwrap();
        let ends_ms = match entries.as_slice() {
            [(_, ends_ms)] => *ends_ms,
            other => panic!("one reader's entry on the clock node, not {other:?}"),
        };
        assert!(
            ends_ms >= before_ms + 5_000,
            "after a move of {step_ms} ms, the entry ends {} ms short of a TTL after the \
             node's time",
            before_ms + 5_000 - ends_ms
        );
        guard.unlock().await.unwrap();
    }
}

/// Nodes far away: every link delayed 50 ms ± 20 ms each way (a delaying
/// proxy per node), so a round trip is 60-140 ms. A clock reading is as
/// precise as its round trip: with the node timeout raised to 300 ms and
/// the clock tolerance left at 100 ms, most votes were unsure
/// (`NotCounted::ClockUnsure`, whose message says to raise the tolerance)
/// and a single round often failed (1 or 2 nodes of 5 counted, on Redis
/// 7.0 and 6.2). Raised above twice the node timeout, as `clock_tolerance`'s docs
/// say, every node counts: each single round wins. (The default does not
/// follow the node timeout: the tolerance is the node set's, every client
/// shortens its validities by the largest recorded, so one client's long
/// node timeout would cut every other client's validities.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_node_timeout_over_slow_links_counts_every_node() {
    let nodes = servers(5);
    let proxies: Vec<support::DelayProxy> = nodes
        .iter()
        .map(|node| {
            let proxy = support::DelayProxy::start(node.port(), Duration::from_millis(50));
            proxy.jitter(Duration::from_millis(20));
            proxy
        })
        .collect();
    let far = |tolerance: Duration| {
        Redlock::builder(support::proxy_urls(&proxies))
            .node_timeout(Duration::from_millis(300))
            .connect_timeout(Duration::from_secs(3))
            .clock_tolerance(tolerance)
            .build()
            .expect("client")
    };
    let redlock = far(Duration::from_millis(700));
    for round in 0..8 {
        let resource = format!("{RESOURCE}:far:{round}");
        let guard = redlock
            .try_lock(&resource, Duration::from_secs(5))
            .await
            .unwrap_or_else(|err| panic!("round {round}: one round over slow links: {err}"));
        guard.unlock().await.expect("unlock");
    }
}

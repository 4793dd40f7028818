//! Fencing tokens: every holder of a resource gets a larger token than every
//! earlier holder, across node restarts (the `TIME` seed), and a storage that
//! checks tokens rejects a holder that paused past its lease. With fencing
//! off, nothing extra is sent.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use quorlock::Redlock;
use support::{RedisServer, command_calls, reset_stats, servers, urls};

const TTL: Duration = Duration::from_millis(500);

fn fenced(nodes: &[RedisServer]) -> Redlock {
    Redlock::builder(urls(nodes))
        .node_timeout(Duration::from_millis(200))
        .retry_delay(Duration::from_millis(5))
        .retry_jitter(Duration::from_millis(5))
        .acquire_timeout(Duration::from_secs(5))
        .fencing(true)
        .build()
        .unwrap()
}

/// Two clients take turns on one resource 300 times; meanwhile one node is
/// killed and restarted after the TTL (its counter is gone: reseeded from
/// `TIME`), and another is restarted empty while nobody holds the lock. Every
/// token is larger than the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_strictly_increase_across_holders_and_restarts() {
    let mut nodes = servers(5);
    let clients = [fenced(&nodes), fenced(&nodes)];
    let mut last = 0u64;
    for n in 0..300usize {
        match n {
            100 => nodes[1].kill(),
            150 => {
                tokio::time::sleep(TTL).await; // delayed restart
                nodes[1].restart();
            }
            200 => nodes[3].restart(), // nobody holds the lock between iterations
            _ => {}
        }
        let guard = clients[n % 2].lock("fencing:resource", TTL).await.unwrap();
        let token = guard.fencing_token().expect("fencing is on");
        assert!(token > last, "token {token} after {last} at iteration {n}");
        last = token;
        guard.unlock().await.unwrap();
    }
    // Seeded from TIME in microseconds: a token is a recent time, not a count.
    assert!(last > 1_600_000_000_000_000, "seeded from TIME: {last}");
}

/// A toy storage that accepts a write only with a token at least as high as
/// any it has seen.
#[derive(Default)]
struct Storage {
    highest: u64,
    value: Option<&'static str>,
}

impl Storage {
    fn write(&mut self, token: u64, value: &'static str) -> Result<(), String> {
        if token < self.highest {
            return Err(format!("stale token {token} < {}", self.highest));
        }
        self.highest = token;
        self.value = Some(value);
        Ok(())
    }
}

/// Holder A pauses past its validity; B takes the lock and writes; A comes
/// back and its write, with the older token, is rejected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_writer_is_rejected_by_the_storage() {
    let nodes = servers(3);
    let redlock = fenced(&nodes);
    let mut storage = Storage::default();
    let a = redlock
        .lock("fencing:stale", Duration::from_millis(300))
        .await
        .unwrap();
    let token_a = a.fencing_token().unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await; // A pauses past its lease
    assert!(!a.is_valid());
    let b = redlock
        .lock("fencing:stale", Duration::from_secs(5))
        .await
        .unwrap();
    let token_b = b.fencing_token().unwrap();
    assert!(token_b > token_a);
    storage.write(token_b, "B's order").unwrap();
    let rejected = storage.write(token_a, "A's stale order").unwrap_err();
    assert!(rejected.contains("stale"), "{rejected}");
    assert_eq!(storage.value, Some("B's order"));
    b.unlock().await.unwrap();
}

/// Command counts as `command_calls` reports them.
fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

async fn cycles(redlock: &Redlock, phase: &str, n: usize) {
    for i in 0..n {
        let guard = redlock
            .lock(format!("fencing:{phase}:{i}"), Duration::from_secs(5))
            .await
            .unwrap();
        guard.unlock().await.unwrap();
    }
}

/// With fencing off, an uncontended lock + unlock sends one `SET` and one
/// release script per node, nothing more (no queue entry, no notification);
/// with fencing on, an `INCR` of the counter goes with the `SET`, and no
/// write-back follows: one client's rounds reach the nodes in the same order,
/// so every node returns the same counter, which is the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_off_sends_nothing_extra() {
    let nodes = servers(3);
    // A per-node timeout long enough that a loaded machine never skips a
    // node: the counts below assume every node gets every call.
    let plain = Redlock::builder(urls(&nodes))
        .node_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    cycles(&plain, "plain-warm-up", 5).await; // first contact, script loading
    tokio::time::sleep(Duration::from_millis(300)).await;
    reset_stats(&nodes);
    cycles(&plain, "plain", 20).await;
    tokio::time::sleep(Duration::from_millis(300)).await; // stragglers
    let calls = without_witnesses(command_calls(&nodes));
    // The commands the release script runs count too: it reads the key,
    // finds our token unmarked (nobody waits: see `queue/`) and deletes it,
    // the round-trip floor's compare-and-delete.
    let release = [("evalsha", 60), ("get", 60), ("del", 60)];
    let expected = counts(&[&[("set", 60)], &release[..]].concat());
    assert_eq!(
        calls, expected,
        "fencing off: one SET and one release script per node and cycle"
    );

    let fenced = Redlock::builder(urls(&nodes))
        .node_timeout(Duration::from_secs(2))
        .fencing(true)
        .build()
        .unwrap();
    cycles(&fenced, "fenced-warm-up", 5).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Each node seeded its counter from its own clock: they start apart, and
    // write-backs bring them together over the first acquisitions. From one
    // value on, one client's acquisitions keep them together.
    let counter = quorlock::RedlockBuilder::DEFAULT_FENCING_COUNTER_KEY.as_bytes();
    let highest = (nodes.iter())
        .filter_map(|node| node.get(counter))
        .filter_map(|value| String::from_utf8(value).ok()?.parse::<u64>().ok())
        .max()
        .unwrap();
    for node in &nodes {
        redis::cmd("SET")
            .arg(counter)
            .arg(highest)
            .query::<()>(&mut node.connection())
            .unwrap();
    }
    reset_stats(&nodes);
    cycles(&fenced, "fenced", 20).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let calls = without_witnesses(command_calls(&nodes));
    // `SET NX GET` and `INCR` (pipelined) and the release script on every
    // node, no write-back and no other script.
    let expected = counts(&[&[("set", 60), ("incr", 60)], &release[..]].concat());
    assert_eq!(calls, expected, "fencing on: {calls:?}");
}

/// At one node the counter a grant returns is the token: no write-back
/// round, only `SET NX GET` with its `INCR` and the release script, and the
/// tokens still rise by one per holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_fencing_sends_no_write_back() {
    let nodes = servers(1);
    let redlock = Redlock::builder(urls(&nodes))
        .node_timeout(Duration::from_secs(2))
        .fencing(true)
        .build()
        .unwrap();
    cycles(&redlock, "one-warm-up", 5).await; // first contact, seeding
    tokio::time::sleep(Duration::from_millis(300)).await;
    reset_stats(&nodes);
    let mut tokens = Vec::new();
    for i in 0..20 {
        let guard = redlock
            .lock(format!("fencing:one:{i}"), Duration::from_secs(5))
            .await
            .unwrap();
        tokens.push(guard.fencing_token().expect("fencing is on"));
        guard.unlock().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let calls = without_witnesses(command_calls(&nodes));
    let expected = counts(&[
        ("set", 20),
        ("incr", 20),
        ("evalsha", 20),
        ("get", 20),
        ("del", 20),
    ]);
    assert_eq!(calls, expected, "one node, fencing on: {calls:?}");
    assert!(
        tokens.windows(2).all(|pair| pair[1] == pair[0] + 1),
        "one INCR per holder: {tokens:?}"
    );
}

/// Nodes whose counters differ: the token is the highest of the deciding
/// grants, only the nodes behind it get the write-back, and the next
/// holder's token is higher still, also from a quorum without the node ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_behind_the_token_get_the_write_back() {
    let mut nodes = servers(3);
    let redlock = fenced(&nodes);
    cycles(&redlock, "warm-up", 3).await;
    tokio::time::sleep(Duration::from_millis(300)).await; // stragglers
    let counter = quorlock::RedlockBuilder::DEFAULT_FENCING_COUNTER_KEY.as_bytes();
    let read = |node: &RedisServer| -> u64 {
        let value = node.get(counter).expect("a counter on every node");
        String::from_utf8(value).unwrap().parse().unwrap()
    };
    // Nodes 1 and 2 agree (each node seeded its own counter from its clock,
    // and the warm-up need not have brought them together); node 0 runs
    // ahead of them by 1000.
    let behind = nodes.iter().map(read).max().unwrap();
    let ahead = behind + 1000;
    for (node, value) in nodes.iter().zip([ahead, behind, behind]) {
        redis::cmd("SET")
            .arg(counter)
            .arg(value)
            .query::<()>(&mut node.connection())
            .unwrap();
    }
    reset_stats(&nodes);
    let guard = redlock
        .lock("fencing:behind", Duration::from_secs(5))
        .await
        .unwrap();
    let token = guard.fencing_token().unwrap();
    // The round ends at its quorum, so node 0's grant may not be in it: the
    // token is the highest counter among the grants that decided it.
    let at_token = || nodes.iter().filter(|node| read(node) >= token).count();
    assert!(
        at_token() >= 2,
        "a quorum holds the token when the guard comes"
    );
    tokio::time::sleep(Duration::from_millis(300)).await; // stragglers
    let scripts = command_calls(&nodes).get("evalsha").copied().unwrap_or(0);
    // With node 0's grant in the round, the nodes behind it that granted in
    // time get a write-back (one or both); without it, nodes 1 and 2 returned
    // the same counter and none is sent.
    // (The acquisition itself runs no script.)
    if token == ahead + 1 {
        assert!(
            (1..=2).contains(&scripts),
            "a write-back where behind: {scripts}"
        );
    } else {
        assert_eq!(scripts, 0, "nodes 1 and 2 agree: no write-back");
    }
    guard.unlock().await.unwrap();
    // Node 0 (the one ahead) goes: the next quorum is nodes 1 and 2.
    nodes[0].kill();
    let next = redlock
        .lock("fencing:behind", Duration::from_secs(5))
        .await
        .unwrap();
    assert!(next.fencing_token().unwrap() > token, "tokens increase");
    next.unlock().await.unwrap();
}

/// A counter a node lost (restarted empty: missing, or restarted from 1 by the
/// `INCR` that goes with every `SET`, granted or not) is seeded from the
/// node's clock before it makes a token, on either way to the lock: a plain
/// round (`SET NX GET` and `INCR`) and a queued waiter's round (the queue
/// script).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_counter_is_seeded_before_it_makes_a_token() {
    let nodes = servers(3);
    let (a, b) = (fenced(&nodes), fenced(&nodes));
    let counter = quorlock::RedlockBuilder::DEFAULT_FENCING_COUNTER_KEY.as_bytes();
    let set_counters = |value: Option<u64>| {
        for node in &nodes {
            let cmd = match value {
                Some(value) => {
                    let mut cmd = redis::cmd("SET");
                    cmd.arg(counter).arg(value);
                    cmd
                }
                None => {
                    let mut cmd = redis::cmd("DEL");
                    cmd.arg(counter);
                    cmd
                }
            };
            cmd.query::<()>(&mut node.connection()).unwrap();
        }
    };
    let resource = "fencing:seeded";
    let held = a.lock(resource, Duration::from_secs(5)).await.unwrap();
    let first = held.fencing_token().unwrap();
    // Counters restarted and counted up a little by refused rounds.
    set_counters(Some(5));
    let waiting = tokio::spawn({
        let b = b.clone();
        async move { b.lock(resource, Duration::from_secs(5)).await }
    });
    // B's first round is refused (and increments the counters: `INCR` goes
    // with every `SET`); it then waits in the queue and is granted by the
    // queue script once A releases.
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.unlock().await.unwrap();
    let second = waiting.await.unwrap().unwrap();
    let second_token = second.fencing_token().unwrap();
    assert!(second_token > first, "{second_token} after {first}");
    second.unlock().await.unwrap();
    // Counters lost outright: the plain round's `INCR` makes 1, then the seed.
    set_counters(None);
    let third = a.lock(resource, Duration::from_secs(5)).await.unwrap();
    let third_token = third.fencing_token().unwrap();
    assert!(
        third_token > second_token,
        "{third_token} after {second_token}"
    );
    third.unlock().await.unwrap();
}

/// Locking a resource whose key is the fencing counter's is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_counter_key_is_not_a_resource() {
    let nodes = servers(1);
    let redlock = Redlock::builder(urls(&nodes))
        .key_prefix("")
        .fencing(true)
        .build()
        .unwrap();
    let err = redlock
        .try_lock(quorlock::RedlockBuilder::DEFAULT_FENCING_COUNTER_KEY, TTL)
        .await
        .unwrap_err();
    assert!(
        matches!(err, quorlock::Error::InvalidResource { .. }),
        "got {err}"
    );
    assert!(
        Redlock::builder(urls(&nodes))
            .fencing_counter_key("")
            .build()
            .is_err()
    );
}

/// The commands counted, less the clock readings (`PEXPIRETIME` of the key
/// just set, pipelined with each acquisition; `TIME` of the background
/// reading now and then: see `clock.rs`); the test counts the lock's own
/// commands.
/// `calls` less the witnesses read after grants and in the background: the
/// node's clock (`TIME`, or `PEXPIRETIME` of a lone grant's key) and its
/// data mark's id (`GETRANGE`), one of each per witness.
fn without_witnesses(
    mut calls: std::collections::BTreeMap<String, u64>,
) -> std::collections::BTreeMap<String, u64> {
    let clocks = calls.remove("time").unwrap_or(0) + calls.remove("pexpiretime").unwrap_or(0);
    let marks = calls.remove("getrange").unwrap_or(0);
    assert_eq!(marks, clocks, "one mark read per witness: {calls:?}");
    calls
}

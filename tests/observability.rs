//! Observability: tracing spans and events name the resource, never the token.

mod support;

use std::time::Duration;

use support::{builder, servers};

/// Everything quorlock logs at TRACE level during lock, contention, extend,
/// a failed node and unlock carries the resource name but never the token.
/// (One thread, so that background tasks log into the captured subscriber too.)
#[tokio::test(flavor = "current_thread")]
async fn logs_name_the_resource_and_never_the_token() {
    let (captured, _default) = support::capture_logs(tracing::Level::TRACE);

    let mut nodes = servers(3);
    let redlock = builder(&nodes).build().unwrap();
    let mut guard = redlock
        .lock("observed:resource", Duration::from_secs(5))
        .await
        .unwrap();
    let key = guard.key().to_vec();
    assert!(support::eventually(Duration::from_secs(2), || nodes[0].get(&key).is_some()).await);
    let token = String::from_utf8(nodes[0].get(guard.key()).unwrap()).unwrap();
    assert!(
        redlock
            .try_lock("observed:resource", Duration::from_secs(5))
            .await
            .is_err()
    );
    nodes[2].kill();
    guard.extend(Duration::from_secs(5)).await.unwrap();
    let debug = format!("{guard:?}");
    guard.unlock().await.unwrap();

    let logs = captured.text();
    assert!(
        logs.contains("observed:resource"),
        "logs name the resource:\n{logs}"
    );
    assert!(logs.contains("acquire round") && logs.contains("release round"));
    assert!(
        logs.contains("node failed"),
        "the failed node is traced:\n{logs}"
    );
    for text in [&logs, &debug] {
        assert!(!text.contains(&token), "the token leaked:\n{text}");
        // Not even a recognisable part of it.
        for part in token.as_bytes().chunks(12) {
            let part = std::str::from_utf8(part).unwrap();
            if part.len() == 12 {
                assert!(!text.contains(part), "part of the token leaked:\n{text}");
            }
        }
    }
}

/// A node that restarts without persistence is warned about when it enters
/// recovery (node, both run ids, the grace left) and when it leaves it.
#[tokio::test(flavor = "current_thread")]
async fn a_restarted_node_entering_and_leaving_recovery_is_warned_about() {
    let (captured, _default) = support::capture_logs(tracing::Level::WARN);
    let mut nodes = servers(3);
    let grace = Duration::from_millis(1500);
    let redlock = builder(&nodes).restart_grace(grace).build().unwrap();
    let ttl = Duration::from_millis(500);
    support::lock_once(&redlock, "observed:restart", ttl).await;
    nodes[1].restart();
    let restarted = std::time::Instant::now();
    let recovered = support::eventually(grace + Duration::from_secs(10), || {
        captured.text().contains("node recovered")
    });
    // Calls reconnect to node 1 (and check it) until it has recovered.
    let calls = async {
        loop {
            let _ = redlock.status("observed:restart").await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::select! {
        recovered = recovered => assert!(recovered, "no \"recovered\" warning:\n{}", captured.text()),
        () = calls => unreachable!(),
    }
    assert!(restarted.elapsed() >= grace);
    let logs = captured.text();
    let entered = logs
        .lines()
        .find(|line| line.contains("node recovering from a restart"))
        .unwrap_or_else(|| panic!("no \"recovering\" warning:\n{logs}"));
    let node = format!("127.0.0.1:{}", nodes[1].port());
    for field in [
        node.as_str(),
        "run_id=",
        "previous_run_id=",
        "grace_left_ms=",
        // It came back empty: its data mark is gone.
        "data mark is gone",
    ] {
        assert!(entered.contains(field), "{field} missing from: {entered}");
    }
}

/// An even number of nodes is allowed, with a warning in the log.
#[test]
fn an_even_number_of_nodes_is_warned_about() {
    let (captured, _default) = support::capture_logs(tracing::Level::WARN);
    let four: Vec<String> = (1..=4)
        .map(|i| format!("redis://127.0.0.1:{}", 7000 + i))
        .collect();
    let redlock = quorlock::Redlock::new(&four).unwrap();
    assert_eq!(redlock.quorum(), 3);
    let three = quorlock::Redlock::new(&four[..3]).unwrap();
    assert_eq!(three.quorum(), 2);
    let logs = captured.text();
    assert_eq!(
        logs.matches("even number of lock nodes").count(),
        1,
        "{logs}"
    );
    assert!(logs.contains("WARN"), "{logs}");
}

//! Validation: bad options and bad input get typed errors, never a panic, and
//! never disturb a lock already held.

mod support;

use std::time::Duration;

use quorlock::{BuildError, Error, Redlock};
use support::{RedisServer, builder, servers};

const URL: &str = "redis://127.0.0.1:6390";

/// An empty node list is refused.
#[test]
fn no_nodes_is_refused() {
    let err = Redlock::new(Vec::<String>::new()).unwrap_err();
    assert!(matches!(err, BuildError::NoNodes), "got {err}");
    let err = Redlock::from_clients(Vec::new()).unwrap_err();
    assert!(matches!(err, BuildError::NoNodes));
}

/// Unparsable URLs, unknown schemes and port 0 are refused, with any password masked.
#[test]
fn bad_urls_are_refused_with_the_password_masked() {
    for url in [
        "not a url",
        "http://127.0.0.1:6379",
        "redis://:hunter2@127.0.0.1:notaport",
        "redis://127.0.0.1:0",
        "",
        "redis+sentinel://:hunter2@127.0.0.1:26379",
        "redis+sentinel://:hunter2@127.0.0.1:26379/m?password=x",
        "rediss+sentinel://:hunter2@127.0.0.1:26379/m",
        "redis+cluster://:hunter2@127.0.0.1:7000/3",
        "redis+cluster://:hunter2@127.0.0.1:7000,,127.0.0.1:7001",
        "rediss+cluster://:hunter2@127.0.0.1:7000",
    ] {
        let err = Redlock::new([URL, url]).unwrap_err();
        assert!(
            matches!(err, BuildError::InvalidUrl { .. }),
            "{url:?} gave {err}"
        );
        assert!(
            !err.to_string().contains("hunter2"),
            "password shown: {err}"
        );
    }
}

/// A Redis Cluster URL with a database says a cluster has only 0; what the
/// slotted key layout cannot serve is refused (a key prefix with a `{`
/// that opens no hash tag, one fencing counter for every resource); a
/// Sentinel URL without a master name says what is missing.
#[test]
fn cluster_and_incomplete_sentinel_urls_say_why() {
    let err = Redlock::new(["redis+cluster://127.0.0.1:7000/2"]).unwrap_err();
    assert!(err.to_string().contains("database 0 only"), "{err}");
    let cluster = "redis+cluster://127.0.0.1:7000,127.0.0.1:7001";
    assert!(Redlock::new([cluster]).is_ok());
    let err = Redlock::builder([cluster])
        .key_prefix("app{")
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("hash tag"), "{err}");
    assert!(
        Redlock::builder([cluster])
            .key_prefix("{app}:")
            .build()
            .is_ok()
    );
    let err = Redlock::builder([cluster])
        .fencing_counter_key("my-counter")
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("fencing counter"), "{err}");
    let err = Redlock::new(["redis+sentinel://127.0.0.1:26379"]).unwrap_err();
    assert!(err.to_string().contains("master name"), "{err}");
    let ok = Redlock::new(["redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster"]);
    assert!(ok.is_ok(), "{ok:?}");
}

/// A drift factor outside [0, 1), or NaN, is refused.
#[test]
fn drift_factor_outside_zero_one_is_refused() {
    for factor in [-0.1, 1.0, 1.5, f64::NAN, f64::INFINITY] {
        let err = Redlock::builder([URL])
            .drift_factor(factor)
            .build()
            .unwrap_err();
        assert!(
            matches!(err, BuildError::InvalidDriftFactor { .. }),
            "{factor} gave {err}"
        );
    }
    assert!(Redlock::builder([URL]).drift_factor(0.0).build().is_ok());
    assert!(Redlock::builder([URL]).drift_factor(0.5).build().is_ok());
}

/// The option a builder is refused for (`InvalidOption`), or what else it
/// did.
fn refused_option(builder: quorlock::RedlockBuilder) -> Result<&'static str, String> {
    match builder.build() {
        Err(BuildError::InvalidOption { option, .. }) => Ok(option),
        Err(other) => Err(format!("refused otherwise: {other}")),
        Ok(_) => Err("built".to_owned()),
    }
}

/// Out-of-range timing options are refused.
#[test]
fn out_of_range_timings_are_refused() {
    let builder = || Redlock::builder([URL]);
    assert_eq!(
        refused_option(builder().node_timeout(Duration::ZERO)),
        Ok("node_timeout")
    );
    assert_eq!(
        refused_option(builder().retry_delay(Duration::MAX)),
        Ok("retry_delay")
    );
    // Huge retry counts and zero are fine.
    assert!(builder().retry_count(u32::MAX).build().is_ok());
    assert!(builder().retry_count(0).build().is_ok());
    // A keeper that would extend only when nothing is left.
    assert_eq!(
        refused_option(builder().renew_when_left(Duration::ZERO)),
        Ok("renew_when_left")
    );
    assert!(
        builder()
            .renew_when_left(Duration::from_secs(3600))
            .build()
            .is_ok(),
        "a lead longer than a TTL is capped per lock, not refused"
    );
}

/// TTLs of zero, too short to leave validity, or absurdly long are refused
/// before any round; a lock already held is unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_ttls_are_refused_and_held_locks_are_unaffected() {
    let nodes = servers(3);
    let redlock = builder(&nodes).build().unwrap();
    let mut held = redlock
        .lock("validation:held", Duration::from_secs(10))
        .await
        .unwrap();
    for ttl in [
        Duration::ZERO,
        Duration::from_micros(999),
        Duration::from_millis(1),
        Duration::from_millis(2),
        Duration::from_millis(u64::MAX),
        Duration::MAX,
    ] {
        for result in [
            redlock.lock("validation:ttl", ttl).await.map(drop),
            redlock.try_lock("validation:ttl", ttl).await.map(drop),
            redlock.with_lock("validation:ttl", ttl, async {}).await,
            held.extend(ttl).await,
        ] {
            let err = result.unwrap_err();
            assert!(
                matches!(err, Error::InvalidTtl { .. }),
                "{ttl:?} gave {err}"
            );
        }
    }
    // 3 ms is the shortest TTL that leaves validity with the default drift.
    redlock
        .try_lock("validation:ttl", Duration::from_millis(3))
        .await
        .map(drop)
        .ok();
    assert!(held.is_valid());
    held.extend(Duration::from_secs(10)).await.unwrap();
    assert_eq!(held.unlock().await.unwrap(), quorlock::Unlocked::Released);
}

/// Empty and oversized resource names are refused; the longest allowed and
/// binary names work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_resource_names_are_refused() {
    let server = RedisServer::start();
    let redlock = builder(std::slice::from_ref(&server)).build().unwrap();
    let ttl = Duration::from_secs(5);
    let huge = vec![b'x'; 1024 * 1024];
    for name in [&b""[..], &huge[..], &huge[..Redlock::MAX_RESOURCE_LEN + 1]] {
        let err = redlock.try_lock(name, ttl).await.unwrap_err();
        assert!(matches!(err, Error::InvalidResource { .. }), "got {err}");
        assert!(
            err.to_string().len() < 200,
            "the message does not repeat the name"
        );
        assert!(matches!(
            redlock.lock(name, ttl).await,
            Err(Error::InvalidResource { .. })
        ));
        assert!(matches!(
            redlock.key(name),
            Err(Error::InvalidResource { .. })
        ));
    }
    let longest = redlock
        .try_lock(&huge[..Redlock::MAX_RESOURCE_LEN], ttl)
        .await
        .unwrap();
    longest.unlock().await.unwrap();
}

/// Used outside a tokio runtime, the client reports an error instead of panicking.
#[test]
fn outside_a_runtime_the_error_says_so() {
    let redlock = Redlock::new([URL]).unwrap();
    let ttl = Duration::from_secs(1);
    let results = futures::executor::block_on(async {
        [
            redlock.try_lock("validation:rt", ttl).await.map(drop),
            redlock.lock("validation:rt", ttl).await.map(drop),
            redlock.with_lock("validation:rt", ttl, async {}).await,
        ]
    });
    for result in results {
        let err = result.unwrap_err();
        assert!(matches!(err, Error::NoRuntime), "got {err}");
        assert!(err.to_string().contains("tokio runtime"));
    }
}

/// Unlocking and extending a guard whose key was deleted by hand: a typed
/// outcome, no panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_whose_key_was_deleted_by_hand() {
    let nodes = servers(3);
    let redlock = builder(&nodes).build().unwrap();
    let mut guard = redlock
        .try_lock("validation:deleted", Duration::from_secs(10))
        .await
        .unwrap();
    let key = guard.key().to_vec();
    assert!(
        support::eventually(Duration::from_secs(2), || support::holders(&nodes, &key)
            .iter()
            .all(Option::is_some))
        .await
    );
    for node in &nodes {
        let _: () = redis::Commands::del(&mut node.connection(), guard.key()).unwrap();
    }
    let err = guard.extend(Duration::from_secs(10)).await.unwrap_err();
    assert!(err.is_lock_lost(), "got {err}");
    assert_eq!(guard.unlock().await.unwrap(), quorlock::Unlocked::Expired);
}

/// Unreachable nodes (a closed loopback port) are failed votes: `lock` fails
/// with `Unavailable` within its deadline, and a lock held elsewhere is
/// unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_nodes_fail_within_the_deadline() {
    let nodes = servers(1);
    let redlock = builder(&nodes).build().unwrap();
    let held = redlock
        .lock("validation:unreachable", Duration::from_secs(10))
        .await
        .unwrap();
    let closed = support::free_port();
    let unreachable = Redlock::builder([
        format!("redis://127.0.0.1:{closed}"),
        format!("redis://127.0.0.1:{closed}/1"),
        nodes[0].url(),
    ])
    .acquire_timeout(Duration::from_millis(500))
    .build()
    .unwrap();
    let started = std::time::Instant::now();
    let err = unreachable
        .lock("validation:unreachable", Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(err.is_unavailable() || err.is_contended(), "got {err}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    assert!(held.is_valid());
    assert_eq!(held.unlock().await.unwrap(), quorlock::Unlocked::Released);
}

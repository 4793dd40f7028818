//! The metrics of the `metrics` feature, read through a recorder of this
//! test's own (installed as the global recorder of this test binary),
//! against real servers: acquisitions and their wait, failures by reason,
//! rounds, extensions and their outcomes, a loss counted once, unconfirmed
//! releases, nodes not counted, notifications, and the opt-in resource
//! label. Tests run in parallel on one recorder, so each names its own
//! resources (and reads them through the resource label), and the metrics
//! without it are read as increases.
#![cfg(feature = "metrics")]

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use quorlock::{LostReason, Redlock};
use support::{RedisServer, builder, servers};

/// A histogram's samples.
#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

/// Every counter and histogram by `name{label=value,...}`, labels sorted.
#[derive(Default)]
struct Recorded {
    counters: Mutex<BTreeMap<String, Arc<AtomicU64>>>,
    histograms: Mutex<BTreeMap<String, Arc<Samples>>>,
}

/// The recorder: a handle on the shared [`Recorded`].
struct Shared(Arc<Recorded>);

fn show(key: &Key) -> String {
    let mut labels: Vec<String> = key
        .labels()
        .map(|label| format!("{}={}", label.key(), label.value()))
        .collect();
    labels.sort();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl Recorder for Shared {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut counters = self.0.counters.lock().unwrap();
        Counter::from_arc(counters.entry(show(key)).or_default().clone())
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let mut histograms = self.0.histograms.lock().unwrap();
        Histogram::from_arc(histograms.entry(show(key)).or_default().clone())
    }
}

/// The recorder of this binary, installed on first use.
fn recorded() -> &'static Arc<Recorded> {
    static RECORDED: OnceLock<Arc<Recorded>> = OnceLock::new();
    RECORDED.get_or_init(|| {
        let recorded = Arc::new(Recorded::default());
        metrics::set_global_recorder(Shared(recorded.clone()))
            .unwrap_or_else(|_| panic!("another global recorder"));
        recorded
    })
}

/// A counter's value (0 if never registered).
fn counter(name: &str) -> u64 {
    let counters = recorded().counters.lock().unwrap();
    counters.get(name).map_or(0, |c| c.load(Ordering::Relaxed))
}

/// A histogram's samples so far.
fn samples(name: &str) -> Vec<f64> {
    let histograms = recorded().histograms.lock().unwrap();
    histograms
        .get(name)
        .map(|h| h.0.lock().unwrap().clone())
        .unwrap_or_default()
}

/// Every counter whose name and labels contain `part`.
fn counters_with(part: &str) -> BTreeMap<String, u64> {
    let counters = recorded().counters.lock().unwrap();
    (counters.iter())
        .filter(|(name, _)| name.contains(part))
        .map(|(name, c)| (name.clone(), c.load(Ordering::Relaxed)))
        .collect()
}

/// A client of `nodes` whose metrics carry the resource label.
fn labelled(nodes: &[RedisServer]) -> Redlock {
    recorded();
    builder(nodes).metrics_resource_label(true).build().unwrap()
}

/// A lock and its release: one acquisition with its wait, an acquire and
/// a release round; a `try_lock` meanwhile fails as contended. Without the
/// opt-in, no resource label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_failures_and_rounds() {
    let nodes = servers(3);
    let redlock = labelled(&nodes);
    let rounds_before = samples("quorlock_round_seconds{round=acquire}").len();
    let releases_before = samples("quorlock_round_seconds{round=release}").len();
    let guard = redlock
        .lock("m:basic", Duration::from_secs(5))
        .await
        .unwrap();
    let contended = redlock.try_lock("m:basic", Duration::from_secs(5)).await;
    assert!(contended.is_err());
    guard.unlock().await.unwrap();
    assert_eq!(
        counter("quorlock_acquisitions_total{kind=lock,resource=m:basic}"),
        1
    );
    assert_eq!(
        counter("quorlock_acquire_failures_total{kind=lock,reason=contended,resource=m:basic}"),
        1
    );
    let waits = samples("quorlock_acquire_wait_seconds{kind=lock,resource=m:basic}");
    assert!(
        waits.len() == 1 && waits[0] > 0.0 && waits[0] < 5.0,
        "{waits:?}"
    );
    assert!(samples("quorlock_round_seconds{round=acquire}").len() >= rounds_before + 2);
    assert!(samples("quorlock_round_seconds{round=release}").len() > releases_before);

    // The default: the kind, no resource.
    let plain = builder(&nodes).build().unwrap();
    let before = counter("quorlock_acquisitions_total{kind=read}");
    plain
        .read("m:unlabelled", Duration::from_secs(5))
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    assert!(counter("quorlock_acquisitions_total{kind=read}") > before);
    assert!(
        counters_with("m:unlabelled").is_empty(),
        "no resource label by default"
    );
}

/// Nodes that are down: the call fails as unavailable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_nodes_are_a_failure_reason() {
    let mut nodes = servers(3);
    let redlock = labelled(&nodes);
    support::lock_once(&redlock, "m:warm", Duration::from_secs(1)).await;
    nodes[0].kill();
    nodes[1].kill();
    let failed = redlock.try_lock("m:down", Duration::from_secs(1)).await;
    assert!(failed.is_err_and(|err| err.is_unavailable()));
    assert_eq!(
        counter("quorlock_acquire_failures_total{kind=lock,reason=unavailable,resource=m:down}"),
        1
    );
}

/// Extensions by outcome, and a loss counted once however many learn of it:
/// a manual extension succeeds; then another holder takes the keys, the
/// keeper's extension is refused, and two `lost` futures tell it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extensions_and_a_loss_counted_once() {
    let nodes = servers(3);
    let redlock = labelled(&nodes);
    let mut guard = redlock
        .lock("m:extended", Duration::from_millis(900))
        .await
        .unwrap();
    guard.extend(Duration::from_millis(900)).await.unwrap();
    assert_eq!(
        counter("quorlock_extensions_total{kind=lock,outcome=extended,resource=m:extended}"),
        1
    );
    let key = redlock.key("m:extended").unwrap();
    for node in &nodes {
        node.set_px(&key, "someone-else", 60_000);
    }
    guard.keep_alive().unwrap();
    let (first, second) = tokio::join!(guard.lost(), guard.lost());
    for err in [first, second] {
        assert!(matches!(
            err.lost_reason(),
            Some(LostReason::ExtensionRefused { .. })
        ));
    }
    assert_eq!(
        counter("quorlock_extensions_total{kind=lock,outcome=refused,resource=m:extended}"),
        1
    );
    assert_eq!(
        counter(
            "quorlock_locks_lost_total{kind=lock,reason=extension_refused,resource=m:extended}"
        ),
        1,
        "{:?}",
        counters_with("m:extended")
    );
    drop(guard);
    assert_eq!(
        counters_with(
            "quorlock_locks_lost_total{kind=lock,reason=extension_refused,resource=m:extended}"
        )
        .values()
        .sum::<u64>(),
        1,
        "a release after the loss is no second loss"
    );
}

/// A lock left to run out, told by `lost`: one loss, `expired`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lock_is_one_loss() {
    let nodes = servers(3);
    let redlock = labelled(&nodes);
    let guard = redlock
        .lock("m:expired", Duration::from_millis(300))
        .await
        .unwrap();
    let err = guard.lost().await;
    assert_eq!(err.lost_reason(), Some(&LostReason::Expired));
    // The release finds it expired: still one loss.
    let _ = guard.unlock().await;
    assert_eq!(
        counter("quorlock_locks_lost_total{kind=lock,reason=expired,resource=m:expired}"),
        1
    );
}

/// A release that no quorum answered, and a frozen node skipped as
/// unresponsive in the rounds after its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unconfirmed_releases_and_skipped_nodes() {
    let nodes = servers(3);
    let redlock = support::builder(&nodes)
        .metrics_resource_label(true)
        .node_timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    recorded();
    let guard = redlock
        .lock("m:unconfirmed", Duration::from_secs(2))
        .await
        .unwrap();
    for node in &nodes {
        node.pause();
    }
    let released = guard.unlock().await;
    for node in &nodes {
        node.resume();
    }
    assert!(released.is_err(), "{released:?}");
    assert_eq!(
        counter("quorlock_releases_unconfirmed_total{kind=lock,resource=m:unconfirmed}"),
        1
    );
    // Every node timed out: each is skipped until it answers a probe. The
    // next round counts them as not counted (unresponsive) unless a probe
    // came back first; freeze one and try until it shows.
    let before = counter("quorlock_nodes_not_counted_total{reason=unresponsive}");
    nodes[2].pause();
    let mut shown = false;
    for attempt in 0..20 {
        let _ = redlock
            .try_lock(format!("m:skipped:{attempt}"), Duration::from_secs(1))
            .await;
        if counter("quorlock_nodes_not_counted_total{reason=unresponsive}") > before {
            shown = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    nodes[2].resume();
    assert!(shown, "{:?}", counters_with("not_counted"));
}

/// A `lock` call woken by the holder's release: a notification received.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_notification_is_counted() {
    let nodes = servers(3);
    let holder = labelled(&nodes);
    let waiter = labelled(&nodes);
    support::lock_once(&waiter, "m:warm-waiter", Duration::from_secs(1)).await;
    let before = counter("quorlock_notifications_received_total{}");
    let guard = holder
        .lock("m:handoff", Duration::from_secs(5))
        .await
        .unwrap();
    let waiting = tokio::spawn(async move {
        waiter
            .lock("m:handoff", Duration::from_secs(5))
            .await
            .map(|guard| guard.forget())
    });
    tokio::time::sleep(Duration::from_millis(300)).await; // the waiter queues
    guard.unlock().await.unwrap();
    waiting.await.unwrap().unwrap();
    assert!(
        counter("quorlock_notifications_received_total{}") > before,
        "{:?}",
        counters_with("notifications")
    );
}

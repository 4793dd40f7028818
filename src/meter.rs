//! Metrics, with the `metrics` feature, through the [`metrics`] crate's
//! facade: the application installs the recorder (a Prometheus or
//! OpenTelemetry exporter) and quorlock only reports. Without the feature
//! every function here is empty and compiles away.
//!
//! The names, types and labels are listed in the crate docs ("Metrics").

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, LostReason};

/// What a lock is, for the `kind` label, and its resource, when resource
/// labels are on.
#[derive(Debug, Clone, Default)]
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) struct Meter {
    kind: &'static str,
    resource: Option<Arc<str>>,
}

impl Meter {
    /// A lock of `kind`; with `resource` named only when labels are on.
    pub(crate) fn new(kind: &'static str, resource: Option<Arc<str>>) -> Self {
        Meter { kind, resource }
    }

    /// The labels of this lock's metrics, and `extra`.
    #[cfg(feature = "metrics")]
    fn labels(&self, extra: &[(&'static str, &'static str)]) -> Vec<metrics::Label> {
        let mut labels = vec![metrics::Label::from_static_parts("kind", self.kind)];
        if let Some(resource) = &self.resource {
            labels.push(metrics::Label::new("resource", resource.to_string()));
        }
        labels.extend(
            (extra.iter()).map(|(name, value)| metrics::Label::from_static_parts(name, value)),
        );
        labels
    }

    /// A lock taken by a call made at `called`.
    pub(crate) fn acquired(&self, called: Instant) {
        #[cfg(feature = "metrics")]
        {
            metrics::counter!("quorlock_acquisitions_total", self.labels(&[])).increment(1);
            metrics::histogram!("quorlock_acquire_wait_seconds", self.labels(&[]))
                .record(called.elapsed().as_secs_f64());
        }
        #[cfg(not(feature = "metrics"))]
        let _ = called;
    }

    /// A call that took no lock, for `err`.
    pub(crate) fn failed(&self, err: &Error) {
        #[cfg(feature = "metrics")]
        {
            let reason = match err {
                Error::Contended { .. } => "contended",
                Error::Unavailable { .. } => "unavailable",
                Error::NoValidity { .. } => "no_validity",
                Error::Misconfigured { .. } => "misconfigured",
                Error::NoRuntime => "no_runtime",
                _ if err.is_invalid_input() => "invalid_input",
                _ => "other",
            };
            let labels = self.labels(&[("reason", reason)]);
            metrics::counter!("quorlock_acquire_failures_total", labels).increment(1);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = err;
    }

    /// An extension round's outcome.
    pub(crate) fn extension(&self, outcome: &'static str) {
        #[cfg(feature = "metrics")]
        {
            let labels = self.labels(&[("outcome", outcome)]);
            metrics::counter!("quorlock_extensions_total", labels).increment(1);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = outcome;
    }

    /// A held lock lost, for `reason` (a release is not a loss).
    pub(crate) fn lost(&self, reason: &LostReason) {
        #[cfg(feature = "metrics")]
        {
            let reason = match reason {
                LostReason::ExtensionRefused { .. } => "extension_refused",
                LostReason::Unreachable { .. } => "unreachable",
                LostReason::LimitReached => "limit_reached",
                LostReason::ServerChanged { .. } => "server_changed",
                LostReason::ClockStepped { .. } => "clock_stepped",
                LostReason::DataLost { .. } => "data_lost",
                LostReason::Released => return,
                _ => "expired",
            };
            let labels = self.labels(&[("reason", reason)]);
            metrics::counter!("quorlock_locks_lost_total", labels).increment(1);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = reason;
    }

    /// An `unlock` that returned `ReleaseUnconfirmed`.
    pub(crate) fn release_unconfirmed(&self) {
        #[cfg(feature = "metrics")]
        metrics::counter!("quorlock_releases_unconfirmed_total", self.labels(&[])).increment(1);
    }
}

/// Times a round, for [`Timer::round`]; without the `metrics` feature it
/// holds nothing and reads no clock.
pub(crate) struct Timer {
    #[cfg(feature = "metrics")]
    started: Instant,
}

impl Timer {
    /// Starts timing.
    pub(crate) fn start() -> Self {
        Timer {
            #[cfg(feature = "metrics")]
            started: Instant::now(),
        }
    }

    /// The round of `round` (`extend`, `release`) timed, decided now.
    pub(crate) fn round(self, round: &'static str) {
        #[cfg(feature = "metrics")]
        self::round(round, self.started.elapsed());
        #[cfg(not(feature = "metrics"))]
        let _ = round;
    }
}

/// One round of `round` (`acquire`, `extend`, `release`), decided after `took`.
pub(crate) fn round(round: &'static str, took: Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("quorlock_round_seconds", "round" => round).record(took.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (round, took);
}

/// A node's answer in a round that did not count, for `reason`.
pub(crate) fn not_counted(reason: &crate::answer::NotCounted) {
    #[cfg(feature = "metrics")]
    {
        use crate::answer::NotCounted;
        let reason = match reason {
            NotCounted::Unchecked { .. } => "unchecked",
            NotCounted::Unresponsive { .. } => "unresponsive",
            NotCounted::Recovering { .. } => "recovering",
            NotCounted::ClockStepped { .. } => "clock_stepped",
            NotCounted::DataLost { .. } => "data_lost",
            NotCounted::ClockUnsure { .. } => "clock_unsure",
        };
        metrics::counter!("quorlock_nodes_not_counted_total", "reason" => reason).increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = reason;
}

/// A handoff notification that reached a waiter.
pub(crate) fn notification_received() {
    #[cfg(feature = "metrics")]
    metrics::counter!("quorlock_notifications_received_total").increment(1);
}

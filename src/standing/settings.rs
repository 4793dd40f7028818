//! The settings that are the node set's, not one client's (see the module
//! docs, "Settings of the node set"): every check records this client's
//! clock tolerance and grace on its node and reads what the other clients
//! recorded there; a client shortens every validity by the largest
//! tolerance in use, judges clock steps by the smallest, and holds nodes
//! back for the longest grace.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::evidence::Settings;

/// The node set's settings as this client has read them: each only grows
/// (or, the smallest tolerance, shrinks) as checks read more.
#[derive(Debug)]
pub(super) struct SetSettings {
    /// The smallest clock tolerance in use, µs (`u64::MAX`: none read).
    judge_us: AtomicU64,
    /// The largest clock tolerance in use, µs.
    validity_us: AtomicU64,
    /// The longest grace in use, ms.
    grace_ms: AtomicU64,
}

impl SetSettings {
    pub(super) fn new() -> Self {
        SetSettings {
            judge_us: AtomicU64::new(u64::MAX),
            validity_us: AtomicU64::new(0),
            grace_ms: AtomicU64::new(0),
        }
    }

    /// Merges the settings a check read (recorded by the clients of the
    /// node set, this one's included).
    pub(super) fn merge(&self, read: Option<Settings>) {
        let Some(read) = read else {
            return;
        };
        if read.tolerance_min_us > 0 {
            self.judge_us
                .fetch_min(read.tolerance_min_us, Ordering::AcqRel);
        }
        self.validity_us
            .fetch_max(read.tolerance_max_us, Ordering::AcqRel);
        self.grace_ms.fetch_max(read.grace_max_ms, Ordering::AcqRel);
    }

    /// The tolerance that shortens validities, for a client whose own is
    /// `own` (zero: clocks not watched): the largest in use, so that no
    /// client judges a step smaller than it is (a holder's key expired
    /// early by it expires no earlier than the holder's validity ends).
    pub(super) fn validity(&self, own: Duration) -> Duration {
        let recorded = self.validity_us.load(Ordering::Acquire);
        Duration::from_micros(recorded.max(micros(own)))
    }

    /// The tolerance steps are judged by, µs, for a client whose own is
    /// `own`: the smallest in use.
    pub(super) fn judge_us(&self, own: Duration) -> i64 {
        let recorded = self.judge_us.load(Ordering::Acquire);
        i64::try_from(micros(own).min(recorded)).unwrap_or(i64::MAX)
    }

    /// The longest grace a client of the nodes recorded.
    pub(super) fn grace(&self) -> Duration {
        Duration::from_millis(self.grace_ms.load(Ordering::Acquire))
    }
}

/// `duration` in whole µs.
pub(super) fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn record(low: u64, high: u64, grace: u64) -> Option<Settings> {
        Some(Settings {
            tolerance_min_us: low,
            tolerance_max_us: high,
            grace_max_ms: grace,
        })
    }

    /// A client of 100 ms beside one of 1 s: both shorten by 1 s and judge
    /// by 100 ms; a node with nothing recorded changes neither.
    #[test]
    fn the_smallest_tolerance_judges_and_the_largest_shortens() {
        let seen = SetSettings::new();
        assert_eq!(seen.judge_us(100 * MS), 100_000, "nothing read: its own");
        assert_eq!(seen.validity(100 * MS), 100 * MS);
        seen.merge(record(100_000, 1_000_000, 60_000));
        seen.merge(record(0, 0, 90_000));
        seen.merge(None);
        assert_eq!(seen.judge_us(1000 * MS), 100_000);
        assert_eq!(seen.validity(100 * MS), 1000 * MS);
        assert_eq!(seen.grace(), 90_000 * MS);
        // A client with clocks not watched still shortens by the largest.
        assert_eq!(seen.validity(Duration::ZERO), 1000 * MS);
    }
}

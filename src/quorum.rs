//! Pure quorum and timing arithmetic: no I/O, no clocks read here.
//!
//! Everything the algorithm decides from numbers lives in this module so that it
//! can be tested exhaustively without Redis: the quorum size, how votes are
//! tallied and when a round is decided, the clock-drift allowance, the validity
//! left after a round, the checked TTL, and the jittered retry delay.
//! ([`Answer`] is only read here: which way a node voted.)

use std::fmt;
use std::time::{Duration, Instant};

use crate::answer::Answer;

/// The fixed part of the clock-drift allowance, added to `ttl * drift_factor`.
///
/// It covers the granularity of Redis' own expiry clock (milliseconds).
pub(crate) const DRIFT_FLOOR: Duration = Duration::from_millis(2);

/// The longest TTL accepted: one year. Longer values are almost certainly a
/// unit mistake, and refusing them keeps every `Instant` addition in range.
pub(crate) const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// The number of votes needed out of `nodes`: a strict majority, `nodes / 2 + 1`.
pub(crate) fn quorum(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// The clock-drift allowance for a TTL: `ttl * drift_factor + 2 ms`.
///
/// `drift_factor` must already be validated to lie in `[0, 1)`.
pub(crate) fn drift(ttl: Duration, drift_factor: f64) -> Duration {
    fraction(ttl, drift_factor).saturating_add(DRIFT_FLOOR)
}

/// `duration * factor` for a factor in `[0, 1]`, never panicking: the result
/// is clamped to `[0, duration]`. Float rounding near `Duration::MAX` gives
/// `duration`; a NaN factor gives zero.
fn fraction(duration: Duration, factor: f64) -> Duration {
    match Duration::try_from_secs_f64(duration.as_secs_f64() * factor) {
        Ok(part) => part.min(duration),
        Err(_) if factor > 0.5 => duration,
        Err(_) => Duration::ZERO,
    }
}

/// The validity left after a round: `ttl - elapsed - drift`, or `None` when
/// nothing (or exactly nothing) is left. Never underflows.
pub(crate) fn validity(ttl: Duration, elapsed: Duration, drift: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed)?
        .checked_sub(drift)
        .filter(|left| !left.is_zero())
}

/// A TTL checked against the limits, in whole milliseconds, with its drift
/// allowance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ttl {
    /// Rounded down to whole milliseconds.
    pub(crate) duration: Duration,
    /// The same, as Redis' `PX` takes it.
    pub(crate) millis: u64,
    /// `duration * drift_factor + 2 ms`, plus the clock tolerance.
    pub(crate) drift: Duration,
}

impl Ttl {
    /// Checks `ttl` (rounded down to whole milliseconds) for a client whose
    /// drift factor is `drift_factor` and clock tolerance `clock_tolerance`
    /// (the largest step of a node's clock not seen, see `clock.rs`: it
    /// adds to the allowance); the error says why it is refused.
    pub(crate) fn new(
        ttl: Duration,
        drift_factor: f64,
        clock_tolerance: Duration,
    ) -> Result<Ttl, &'static str> {
        let duration = whole_millis(ttl);
        if duration.is_zero() {
            return Err("must be at least 1 ms");
        }
        if duration > MAX_TTL {
            return Err("must be at most 365 days");
        }
        let drift = drift(duration, drift_factor).saturating_add(clock_tolerance);
        if validity(duration, Duration::ZERO, drift).is_none() {
            return Err(
                "too short to leave any validity after the clock-drift allowance and the clock \
                 tolerance",
            );
        }
        let millis = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        Ok(Ttl {
            duration,
            millis,
            drift,
        })
    }

    /// The validity left after a round that took `elapsed` (see [`validity`]).
    pub(crate) fn validity_after(&self, elapsed: Duration) -> Option<Duration> {
        validity(self.duration, elapsed, self.drift)
    }

    /// Until when keys set at or after `start` with this TTL are surely
    /// still there on every node: `start + ttl - drift`.
    pub(crate) fn valid_until(&self, start: Instant) -> Instant {
        start + (self.duration - self.drift)
    }
}

/// Rounds a TTL down to whole milliseconds, the unit Redis' `PX` takes.
pub(crate) fn whole_millis(ttl: Duration) -> Duration {
    Duration::from_millis(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
}

/// A retry delay of `base ± jitter`, where `unit` is a random number in `[0, 1]`
/// choosing the point in that range (`0` gives `base - jitter`, saturating at
/// zero; `1` gives `base + jitter`).
pub(crate) fn jittered(base: Duration, jitter: Duration, unit: f64) -> Duration {
    let unit = if unit.is_finite() {
        unit.clamp(0.0, 1.0)
    } else {
        0.5
    };
    let low = base.saturating_sub(jitter);
    let high = base.saturating_add(jitter);
    low.saturating_add(fraction(high - low, unit))
}

/// The tally of one round: how many nodes granted the request, refused it, or
/// failed to answer (an error or a timeout), out of how many, against what quorum.
///
/// A failure counts as a vote against: it can never help reach the quorum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Votes {
    /// Nodes that granted the request (set, extended or deleted our key).
    pub granted: usize,
    /// Nodes that answered no (the key was absent or held under another token).
    pub refused: usize,
    /// Nodes that answered with an error or did not answer within the per-node
    /// timeout, or whose grant did not count ([`Error::not_counted`](crate::Error::not_counted)
    /// lists those, with why).
    pub failed: usize,
    /// Nodes asked.
    pub nodes: usize,
    /// Votes needed for the request to succeed.
    pub quorum: usize,
}

impl Votes {
    /// An empty tally for a round over `nodes` nodes.
    pub(crate) fn new(nodes: usize) -> Self {
        Votes {
            granted: 0,
            refused: 0,
            failed: 0,
            nodes,
            quorum: quorum(nodes),
        }
    }

    /// Counts one node's answer.
    pub(crate) fn record(&mut self, answer: &Answer) {
        match answer {
            Answer::Granted(_) | Answer::Holds { .. } => self.granted += 1,
            Answer::Refused(_) => self.refused += 1,
            Answer::Failed(_) | Answer::Unsent(_) => self.failed += 1,
        }
    }

    /// Whether the granting nodes make a quorum.
    pub fn has_quorum(&self) -> bool {
        self.granted >= self.quorum
    }

    /// Nodes that have not answered yet.
    pub fn pending(&self) -> usize {
        self.nodes
            .saturating_sub(self.granted + self.refused + self.failed)
    }

    /// Whether the quorum can no longer be reached, whatever the pending nodes say.
    pub fn quorum_impossible(&self) -> bool {
        self.granted + self.pending() < self.quorum
    }

    /// Whether the outcome is known: the quorum is reached or can no longer be.
    pub fn is_decided(&self) -> bool {
        self.has_quorum() || self.quorum_impossible()
    }

    /// Whether the failed nodes alone rule out a quorum, so that the outcome says
    /// nothing about other holders: the nodes are unavailable rather than contended.
    pub fn failures_rule_out_quorum(&self) -> bool {
        self.nodes.saturating_sub(self.failed) < self.quorum
    }

    /// Whether the refusing nodes alone rule out a quorum: for an extension or
    /// a release, too few nodes can still hold our token for it to be a lock.
    pub fn refusals_rule_out_quorum(&self) -> bool {
        self.nodes.saturating_sub(self.refused) < self.quorum
    }

    /// What a release round says about the lock it released; `None`: too
    /// many nodes were silent to tell.
    pub(crate) fn release_outcome(&self) -> Option<Unlocked> {
        if self.has_quorum() {
            Some(Unlocked::Released)
        } else if self.refusals_rule_out_quorum() {
            Some(Unlocked::Expired)
        } else if self.granted > 0 && !self.failures_rule_out_quorum() {
            // Deleted everywhere it was held among the nodes that answered;
            // the silent ones are too few to keep others from a quorum.
            Some(Unlocked::Released)
        } else {
            None
        }
    }
}

/// How a successful [`LockGuard::unlock`](crate::LockGuard::unlock) ended:
/// what its release round's votes say.
///
/// Not `#[non_exhaustive]`: a release either freed the lock or found it
/// gone, and code that matches on it should not need a catch-all arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unlocked {
    /// The release removed our token from a quorum of nodes, or from every
    /// node that held it among those that answered while too few stayed silent
    /// to block anyone: the lock is free for others.
    Released,
    /// Too few nodes still held our token: the lock had already expired (or
    /// been deleted) before the release. Not an error of the caller's making,
    /// but a sign the critical section outlived its lock.
    Expired,
}

impl fmt::Display for Votes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} granted, {} refused, {} failed of {} nodes, quorum {}",
            self.granted, self.refused, self.failed, self.nodes, self.quorum
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// `Some(true)` granted, `Some(false)` refused, `None` failed.
    pub(super) fn answer(vote: Option<bool>) -> Answer {
        match vote {
            Some(granted) => Answer::yes_or_no(granted),
            None => Answer::Failed(crate::answer::NodeError::new(
                "node".into(),
                crate::answer::NodeErrorKind::Timeout(MS),
            )),
        }
    }

    #[test]
    fn quorum_is_a_strict_majority() {
        assert_eq!(quorum(1), 1);
        assert_eq!(quorum(2), 2);
        assert_eq!(quorum(3), 2);
        assert_eq!(quorum(4), 3);
        assert_eq!(quorum(5), 3);
        assert_eq!(quorum(7), 4);
        for n in 1..200 {
            assert!(2 * quorum(n) > n, "two quorums of {n} must intersect");
            assert!(quorum(n) <= n);
        }
    }

    #[test]
    fn drift_is_proportional_plus_two_ms() {
        assert_eq!(drift(Duration::from_secs(10), 0.01), 102 * MS);
        assert_eq!(drift(Duration::from_secs(10), 0.0), 2 * MS);
        assert!(drift(MAX_TTL, 0.999) < MAX_TTL);
        assert!(
            drift(Duration::MAX, 0.999) > MAX_TTL,
            "no panic near Duration::MAX"
        );
        assert_eq!(drift(Duration::from_secs(1), f64::NAN), 2 * MS);
    }

    #[test]
    fn validity_subtracts_elapsed_and_drift() {
        let ttl = Duration::from_secs(10);
        assert_eq!(validity(ttl, 8 * MS, 102 * MS), Some(9890 * MS));
    }

    #[test]
    fn validity_never_underflows() {
        assert_eq!(validity(10 * MS, 20 * MS, 2 * MS), None);
        assert_eq!(
            validity(10 * MS, 8 * MS, 2 * MS),
            None,
            "exactly zero left is no validity"
        );
        assert_eq!(validity(3 * MS, Duration::ZERO, 5 * MS), None);
        assert_eq!(validity(Duration::ZERO, Duration::MAX, Duration::MAX), None);
    }

    #[test]
    fn whole_millis_rounds_down_and_saturates() {
        assert_eq!(whole_millis(Duration::from_micros(1999)), MS);
        assert_eq!(whole_millis(Duration::from_micros(999)), Duration::ZERO);
        assert_eq!(whole_millis(Duration::MAX), Duration::from_millis(u64::MAX));
    }

    #[test]
    fn jitter_spans_base_plus_minus_jitter() {
        let base = 200 * MS;
        let jitter = 100 * MS;
        assert_eq!(jittered(base, jitter, 0.0), 100 * MS);
        assert_eq!(jittered(base, jitter, 1.0), 300 * MS);
        assert_eq!(jittered(base, jitter, 0.5), 200 * MS);
        assert_eq!(jittered(base, jitter, f64::NAN), 200 * MS);
        assert_eq!(
            jittered(10 * MS, 100 * MS, 0.0),
            Duration::ZERO,
            "saturates at zero"
        );
        assert_eq!(jittered(Duration::MAX, Duration::MAX, 1.0), Duration::MAX);
    }

    #[test]
    fn a_round_is_decided_as_soon_as_the_outcome_is_known() {
        let mut votes = Votes::new(5);
        votes.record(&answer(Some(true)));
        votes.record(&answer(Some(true)));
        assert!(!votes.is_decided());
        votes.record(&answer(Some(true)));
        assert!(votes.has_quorum() && votes.is_decided());

        let mut votes = Votes::new(5);
        votes.record(&answer(Some(false)));
        votes.record(&answer(None));
        assert!(!votes.is_decided());
        votes.record(&answer(Some(false)));
        assert!(votes.quorum_impossible() && votes.is_decided());
        assert!(!votes.failures_rule_out_quorum());
    }

    #[test]
    fn failures_alone_can_rule_out_the_quorum() {
        let mut votes = Votes::new(5);
        for vote in [Some(true), Some(true), None, None, None] {
            votes.record(&answer(vote));
        }
        assert!(!votes.has_quorum());
        assert!(votes.failures_rule_out_quorum());
        assert_eq!(
            votes.to_string(),
            "2 granted, 0 refused, 3 failed of 5 nodes, quorum 3"
        );
    }

    fn tally(answers: &[Option<bool>]) -> Votes {
        let mut votes = Votes::new(answers.len());
        for &vote in answers {
            votes.record(&answer(vote));
        }
        votes
    }

    #[test]
    fn release_outcomes_follow_from_the_votes() {
        let (yes, no, failed) = (Some(true), Some(false), None);
        let outcome = |answers: &[Option<bool>]| tally(answers).release_outcome();
        assert_eq!(
            outcome(&[yes, yes, yes, no, failed]),
            Some(Unlocked::Released)
        );
        // Two nodes gone, one had lost our key: released where it was held.
        assert_eq!(
            outcome(&[yes, yes, no, failed, failed]),
            Some(Unlocked::Released)
        );
        assert_eq!(outcome(&[yes, no, no, no, failed]), Some(Unlocked::Expired));
        assert_eq!(outcome(&[no]), Some(Unlocked::Expired));
        assert_eq!(outcome(&[yes, yes, failed, failed, failed]), None);
        assert_eq!(outcome(&[failed]), None);
    }

    #[test]
    fn refusals_can_rule_out_the_quorum() {
        assert!(
            tally(&[Some(false), Some(false), Some(false), None, None]).refusals_rule_out_quorum()
        );
        assert!(!tally(&[Some(false), Some(false), None, None, None]).refusals_rule_out_quorum());
    }

    #[test]
    fn single_node_quorum_is_one() {
        let mut votes = Votes::new(1);
        votes.record(&answer(Some(true)));
        assert!(votes.has_quorum());
        let mut votes = Votes::new(1);
        votes.record(&answer(None));
        assert!(votes.quorum_impossible() && votes.failures_rule_out_quorum());
    }

    mod properties {
        use super::super::*;
        use super::answer;
        use proptest::prelude::*;

        fn duration() -> impl Strategy<Value = Duration> {
            prop_oneof![
                (0u64..100_000).prop_map(Duration::from_millis),
                any::<u64>().prop_map(Duration::from_millis),
                (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
            ]
        }

        proptest! {
            #[test]
            fn two_quorums_always_intersect(nodes in 1usize..10_000) {
                let q = quorum(nodes);
                prop_assert!(q <= nodes);
                prop_assert!(2 * q > nodes);
                prop_assert!(2 * (q - 1) <= nodes, "the quorum is the smallest majority");
            }

            #[test]
            fn validity_is_ttl_minus_elapsed_minus_drift_or_none(
                ttl in duration(), elapsed in duration(), drift in duration()
            ) {
                match validity(ttl, elapsed, drift) {
                    Some(left) => {
                        prop_assert!(!left.is_zero());
                        prop_assert_eq!(Some(left + elapsed + drift), Some(ttl));
                    }
                    None => prop_assert!(
                        elapsed.checked_add(drift).is_none_or(|spent| spent >= ttl)
                    ),
                }
            }

            #[test]
            fn validity_shrinks_as_time_passes(ttl in duration(), a in duration(), b in duration(), factor in 0.0f64..1.0) {
                let drift = drift(ttl, factor);
                let (early, late) = if a <= b { (a, b) } else { (b, a) };
                prop_assert!(validity(ttl, late, drift) <= validity(ttl, early, drift));
            }

            #[test]
            fn drift_stays_within_ttl_share_plus_floor(ttl in duration(), factor in 0.0f64..1.0) {
                let drift = drift(ttl, factor);
                prop_assert!(drift >= DRIFT_FLOOR.min(ttl.saturating_add(DRIFT_FLOOR)));
                prop_assert!(drift <= ttl.saturating_add(DRIFT_FLOOR));
            }

            #[test]
            fn jitter_stays_in_its_range(base in duration(), jitter in duration(), unit in any::<f64>()) {
                let delay = jittered(base, jitter, unit);
                prop_assert!(delay >= base.saturating_sub(jitter));
                prop_assert!(delay <= base.saturating_add(jitter));
            }

            #[test]
            fn a_decided_round_stays_decided(answers in proptest::collection::vec(proptest::option::of(any::<bool>()), 1..16)) {
                let mut votes = Votes::new(answers.len());
                let mut decided_as = None;
                for vote in answers {
                    votes.record(&answer(vote));
                    if let Some(outcome) = decided_as {
                        prop_assert_eq!(votes.has_quorum(), outcome, "a decision never flips");
                    } else if votes.is_decided() {
                        decided_as = Some(votes.has_quorum());
                    }
                }
                prop_assert!(votes.is_decided(), "every answer in: decided");
                prop_assert!(!(votes.has_quorum() && votes.failures_rule_out_quorum()));
            }
        }
    }
}

//! Clock steps: a node whose wall clock jumps forward is held back like a
//! node that lost its keys.
//!
//! Redis expires keys by its wall clock (a `PX` TTL becomes an absolute
//! time when the command runs). When a node's clock steps forward (NTP
//! stepping instead of slewing, a resumed VM, an administrator), every key
//! there expires early, and the node grants a lock whose key a valid holder
//! still counts on. Fencing tokens answer pauses and the restart grace
//! answers restarts; this module answers steps.
//!
//! # What the client sees
//!
//! Every node's clock is read in requests the client sends anyway:
//! pipelined after every vote that can grant a new key, in the check of
//! every connection, and by a background `TIME` once a second of a node not
//! read otherwise. The votes a client sends a node at about the same moment
//! go out together, with one `TIME` at the end of the batch, which ran after
//! every grant in it (`batch.rs`); on a cluster, each acquisition reads
//! `PEXPIRETIME` of its key (its absolute expiry, which less the TTL is the
//! node's clock at the grant) and each script `TIME`, in its own request.
//! A reading costs a node about what `PING` does. A reading is the node's time with the moments
//! the request went out and its reply came back, on the client's monotonic
//! clock; it bounds the node's *lead* (its wall clock less the client's
//! monotonic clock) to an interval as wide as the round trip ([`Lead`]).
//!
//! # The rule
//!
//! Per node, the client keeps a short history of leads over the last `G`
//! (the restart grace: the longest TTL any lock of the nodes is taken to
//! have): up to [`SAMPLES`] readings whose round trip was at most half the
//! tolerance `T`, spaced over the window, and the latest of them. Each new
//! reading is compared with every lead kept ([`History::see`]), allowing a
//! rate of [`RATE_PPM`] between the clocks over the span between them:
//!
//! - the node's clock **surely** ran ahead of the client's by more than `T`
//!   since a kept reading (the least the leads allow exceeds `T`): it
//!   **stepped**. Its votes do not count for `G` from this reading, as after
//!   a restart ([`NotCounted::ClockStepped`](crate::NotCounted::ClockStepped)):
//!   every key it held when it stepped has expired by then, whatever its
//!   clock says. The locks this client holds on it are told
//!   ([`LostReason::ClockStepped`](crate::LostReason::ClockStepped)), the
//!   client writes a *note* of the step on every node (below), and its
//!   history starts again from this reading;
//! - it **may** have run ahead by more than `T` (the most the leads allow
//!   exceeds `T`, the least does not: the round trips are too wide to tell):
//!   this vote does not count
//!   ([`NotCounted::ClockUnsure`](crate::NotCounted::ClockUnsure)), nothing
//!   is held back;
//! - otherwise the vote counts. A clock that ran *behind* (a step back)
//!   keeps keys longer, which only withholds: it counts.
//!
//! A client with no reading of a node in the window (its first contact, or a
//! node it could not read for `G`) cannot tell a step from its own clock. It
//! takes **a first look** ([`ahead_of_others`]): the node's lead against the
//! lower median of the other nodes' latest leads and the client's own wall
//! clock. A node ahead of that by more than `T` is taken to have stepped, and
//! held back for `G` from then (by this client only: it writes no note,
//! since the comparison takes in its own wall clock, which may be the one
//! that is wrong). At a connection's check the client also
//! reads every node's **notes**: a client that saw a node step wrote on every
//! node, as that node's own time, until when the stepped node is held back;
//! a node that some note holds back is held back until then (notes on the
//! stepped node itself count only for a single node: they are kept by the
//! clock that stepped). So a fresh
//! client is held back by what another client saw, even after the stepped
//! clock was set right again.
//!
//! The first check of each node waits (at most half the connect timeout)
//! until every node's first check has read its node, so that a first look
//! compares the nodes with each other, not with the first one read alone.
//!
//! # Safety argument
//!
//! *Assumes*: clocks run at rates within [`RATE_PPM`] of each other between
//! steps; no lock's TTL is longer than `G` (as for restarts); a node's
//! `TIME` runs after the vote it follows (one connection, commands in
//! order).
//!
//! *Claim*: a vote that counts was not granted on a key that a step expired
//! early by more than `T`. Say lock `A`'s key was set on node `n` at `k`
//! and `n`'s clock stepped forward by `Δ > T` at `z > k`, so that `n`
//! granted `B` at `v > z` while `A` was valid (`v < k + G`). `B`'s client
//! read `n`'s clock after the grant (the `TIME` at the end of the grant's
//! batch, or pipelined after it).
//! - If it had a reading `r` of `n` between its last step back and `z`, kept
//!   within the window (the history keeps the latest reading; the window is
//!   `G`), the lead grew by `Δ` between `r` and `v`: the reading at `v`
//!   (or an earlier one after `z`, which held `n` back for `G` from then)
//!   shows it surely, or may show it: `B`'s vote does not count.
//! - If it had none, its first look compares `n` with the other nodes and
//!   its own clock; `n` counts only if it is not ahead of their lower median
//!   by more than `T`, or no note holds it back.
//!
//! A step of at most `T` is not seen: every lock's validity is shortened by
//! `T` ([`RedlockBuilder::clock_tolerance`](crate::RedlockBuilder::clock_tolerance)),
//! so a key expired early by at most `T` expires no earlier than its lock's
//! validity ends.
//!
//! *Detection window*: a client that reads a node sees a step at its next
//! reading of it: a vote's own reading, or the background one within a
//! second. The holder of a lock is a client that reads the node, so a step
//! under a held lock is noted on the nodes about a second after it at most.
//!
//! *Uncovered*:
//! - a step forward and a step back that no client reads between (each
//!   reading is compared with the readings before it);
//! - a client without a reading of the node in the window, before any note
//!   was written: a step that leaves the node's clock within `T` of the
//!   lower median of the other nodes and its own clock (a lagging clock set
//!   right by a step, several nodes stepping together, a single node whose
//!   client's wall clock stepped with it);
//! - the nodes of a Redis Cluster node are read as one clock: its
//!   primaries must agree within `T`.
//!
//! *Costs*: no extra round trip: one `TIME` at the end of each batch of
//! votes sent to a node together (`batch.rs`), or `PEXPIRETIME` of its key
//! in the request of a lone acquisition; one `TIME` in each check, and at most one a second per node from an idle
//! client. A node whose clock stays ahead of the others' (never set right)
//! is held back by every client that first meets it, for `G` from then: it
//! withholds, and the warning names it.
//! A node that refuses `TIME` (an ACL) counts without its clock watched.
//!
//! When nodes disagree (one held back, others not), each node's standing
//! only removes its own vote: a lock still needs a majority of all nodes.

use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::Value;

/// How many readings a node's history keeps, spaced over the window.
pub(crate) const SAMPLES: usize = 32;

/// The rate two clocks may differ by between steps, in parts per million:
/// NTP's limit for slewing a clock (500 ppm).
pub(crate) const RATE_PPM: i64 = 500;

/// One reading of a node's clock: what `TIME` answered, in microseconds
/// since the Unix epoch, and when its request went out and its reply came
/// back on this client's monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reading {
    /// The node's wall clock, µs since the Unix epoch (at most
    /// `resolution_us` below the truth).
    pub(crate) node_us: i64,
    /// How coarse `node_us` is: 0 for `TIME` (µs), 999 for a time in ms.
    pub(crate) resolution_us: i64,
    /// When the request went out.
    pub(crate) sent: Instant,
    /// When the reply came back.
    pub(crate) received: Instant,
}

impl Reading {
    /// The reading in a reply to `TIME` (`[seconds, microseconds]`, as
    /// strings or integers), or `None` for anything else.
    pub(crate) fn from_reply(reply: &Value, sent: Instant, received: Instant) -> Option<Reading> {
        let Value::Array(parts) = reply else {
            return None;
        };
        let number = |value: &Value| match value {
            Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?.parse::<i64>().ok(),
            Value::Int(number) => Some(*number),
            _ => None,
        };
        match parts.as_slice() {
            [secs, micros] => Some(Reading {
                node_us: number(secs)?
                    .checked_mul(1_000_000)?
                    .checked_add(number(micros)?)?,
                resolution_us: 0,
                sent,
                received,
            }),
            _ => None,
        }
    }

    /// The reading in `reply` to the command that read the node's clock
    /// after a grant: `PEXPIRETIME` of the key that the grant set, whose
    /// TTL is `set_ttl_ms` (`None` when the grant did not set it: another
    /// holder's expiry tells nothing, and a refusal needs no reading), or
    /// `TIME`.
    pub(crate) fn after_grant(
        reply: &Value,
        set_ttl_ms: Option<u64>,
        sent: Instant,
        received: Instant,
    ) -> Option<Reading> {
        match (reply, set_ttl_ms) {
            (Value::Int(expires_ms), Some(ttl_ms)) => {
                Reading::from_expiry(*expires_ms, ttl_ms, sent, received)
            }
            (Value::Int(_), None) => None,
            (time, _) => Reading::from_reply(time, sent, received),
        }
    }

    /// The reading that a key's absolute expiry (`PEXPIRETIME`, ms) gives,
    /// for a key just set with a TTL of `ttl_ms`: the node's clock when it
    /// set it. `None` for a key without an expiry (negative).
    pub(crate) fn from_expiry(
        expires_ms: i64,
        ttl_ms: u64,
        sent: Instant,
        received: Instant,
    ) -> Option<Reading> {
        let set_ms = expires_ms.checked_sub(i64::try_from(ttl_ms).ok()?)?;
        (expires_ms >= 0).then_some(Reading {
            node_us: set_ms.checked_mul(1000)?,
            resolution_us: 999,
            sent,
            received,
        })
    }
}

/// The client's monotonic clock as a number: microseconds since its epoch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Epoch(Instant);

impl Epoch {
    /// An epoch at the current instant.
    pub(crate) fn now() -> Epoch {
        Epoch(Instant::now())
    }

    /// `at` in µs since the epoch (negative before it).
    fn micros(self, at: Instant) -> i64 {
        match at.checked_duration_since(self.0) {
            Some(after) => i64::try_from(after.as_micros()).unwrap_or(i64::MAX),
            None => -i64::try_from(self.0.duration_since(at).as_micros()).unwrap_or(i64::MAX),
        }
    }

    /// The lead a reading bounds.
    pub(crate) fn lead(self, reading: &Reading) -> Lead {
        Lead {
            lo: reading.node_us - self.micros(reading.received),
            hi: reading.node_us + reading.resolution_us - self.micros(reading.sent),
            at: reading.received,
        }
    }

    /// This client's own wall clock's lead over its monotonic clock, µs.
    pub(crate) fn own_lead(self) -> i64 {
        let now = Instant::now();
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| {
                i64::try_from(since.as_micros()).unwrap_or(i64::MAX)
            });
        wall - self.micros(now)
    }
}

/// How far a node's wall clock is ahead of the client's monotonic clock, in
/// µs: at least `lo`, at most `hi` (the reading came somewhere within the
/// round trip), as of `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lead {
    pub(crate) lo: i64,
    pub(crate) hi: i64,
    pub(crate) at: Instant,
}

impl Lead {
    /// The middle of the interval: the estimate a first look compares.
    pub(crate) fn mid(&self) -> i64 {
        self.lo + (self.hi - self.lo) / 2
    }

    /// The width of the interval: the round trip, µs.
    fn width(&self) -> i64 {
        self.hi - self.lo
    }

    /// The most the node's wall clock can read at `now` (µs since the Unix
    /// epoch) by this lead, if it did not step forward since: `hi` plus the
    /// client's monotonic time at `now` (on `epoch`), plus [`RATE_PPM`] of
    /// the span since the lead was read. An estimate to aim at, never a
    /// bound that safety rests on: a step forward since the reading puts
    /// the node's clock beyond it (see `node/`, a reader's round without
    /// a script, which checks what it aimed at against a reading taken after).
    pub(crate) fn node_clock_at_most(&self, epoch: Epoch, now: Instant) -> i64 {
        let span_us =
            i64::try_from(now.saturating_duration_since(self.at).as_micros()).unwrap_or(i64::MAX);
        let allowance = span_us / (1_000_000 / RATE_PPM);
        self.hi
            .saturating_add(epoch.micros(now))
            .saturating_add(allowance)
    }
}

/// What a reading shows against a node's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// No step beyond the tolerance is possible: the vote counts.
    Steady,
    /// The clock may have run ahead by more than the tolerance, by up to
    /// `by_us`; the round trips are too wide to tell. The vote does not
    /// count; nothing is held back.
    Unsure { by_us: i64 },
    /// The clock surely ran ahead by more than the tolerance: by about
    /// `by_us` (the middle of what the leads allow).
    Stepped { by_us: i64 },
    /// No reading of the node in the window: a first look decides.
    Unwatched,
}

/// One node's recent leads (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct History {
    /// Precise leads, oldest first, spaced over the window.
    samples: VecDeque<Lead>,
}

impl History {
    /// Compares `lead` with every lead kept in the last `window`, allowing
    /// [`RATE_PPM`] over each span and `tolerance_us`, and keeps it if it is
    /// precise; a step starts the history again from `lead`.
    pub(crate) fn see(&mut self, lead: Lead, tolerance_us: i64, window: Duration) -> Seen {
        if let Some(oldest) = lead.at.checked_sub(window) {
            while self.samples.front().is_some_and(|kept| kept.at < oldest) {
                self.samples.pop_front();
            }
        }
        if self.samples.is_empty() {
            return Seen::Unwatched;
        }
        let (mut surely, mut maybe, mut middle) = (i64::MIN, i64::MIN, 0);
        for kept in &self.samples {
            let span_us = i64::try_from(lead.at.saturating_duration_since(kept.at).as_micros())
                .unwrap_or(i64::MAX);
            let allowance = span_us / (1_000_000 / RATE_PPM);
            let least = lead.lo - kept.hi - allowance;
            if least > surely {
                surely = least;
                middle = lead.mid() - kept.mid();
            }
            maybe = maybe.max(lead.hi - kept.lo - allowance);
        }
        if surely > tolerance_us {
            self.restart(lead);
            return Seen::Stepped { by_us: middle };
        }
        if maybe > tolerance_us {
            return Seen::Unsure { by_us: maybe };
        }
        self.keep(lead, tolerance_us, window);
        Seen::Steady
    }

    /// Starts the history again from `lead`, kept whatever its precision
    /// (a first look, a step).
    pub(crate) fn restart(&mut self, lead: Lead) {
        self.samples.clear();
        self.samples.push_back(lead);
    }

    /// The latest lead kept, if any.
    pub(crate) fn latest(&self) -> Option<Lead> {
        self.samples.back().copied()
    }

    /// Keeps `lead` if its round trip was at most half the tolerance: as a
    /// new sample once the last is a window's share old, else in the last
    /// one's place (the latest reading is always kept).
    fn keep(&mut self, lead: Lead, tolerance_us: i64, window: Duration) {
        if lead.width() > tolerance_us / 2 {
            return;
        }
        let spacing = window / u32::try_from(SAMPLES).unwrap_or(u32::MAX);
        let len = self.samples.len();
        match self.samples.back_mut() {
            Some(last) if len > 1 && lead.at.saturating_duration_since(last.at) < spacing => {
                *last = lead;
            }
            _ => {
                if len >= SAMPLES {
                    self.samples.pop_front();
                }
                self.samples.push_back(lead);
            }
        }
    }
}

/// A first look (see the module docs): how far `lead`'s middle is ahead of
/// the lower median of `others` (the other nodes' latest leads' middles)
/// and `own` (the client's wall clock's lead), µs; negative: behind.
pub(crate) fn ahead_of_others(lead: &Lead, others: &[i64], own: i64) -> i64 {
    let mut references: Vec<i64> = others.iter().copied().chain([own]).collect();
    references.sort_unstable();
    let lower_median = references[(references.len() - 1) / 2];
    lead.mid() - lower_median
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOLERANCE_US: i64 = 100_000;
    const WINDOW: Duration = Duration::from_secs(30);

    /// A lead of `lead_ms` (±`width_us / 2`) at `at_ms` after `start`.
    fn lead(start: Instant, at_ms: u64, lead_ms: i64, width_us: i64) -> Lead {
        let mid = lead_ms * 1000;
        Lead {
            lo: mid - width_us / 2,
            hi: mid + width_us / 2,
            at: start + Duration::from_millis(at_ms),
        }
    }

    #[test]
    fn a_reading_is_seconds_and_microseconds() {
        let now = Instant::now();
        let reply = Value::Array(vec![
            Value::BulkString(b"1700000000".to_vec()),
            Value::BulkString(b"250000".to_vec()),
        ]);
        let reading = Reading::from_reply(&reply, now, now).expect("a reading");
        assert_eq!(reading.node_us, 1_700_000_000_250_000);
        assert_eq!(Reading::from_reply(&Value::Nil, now, now), None);
        let short = Value::Array(vec![Value::Int(1)]);
        assert_eq!(Reading::from_reply(&short, now, now), None);
    }

    #[test]
    fn the_lead_spans_the_round_trip() {
        let epoch = Epoch::now();
        let sent = Instant::now() + Duration::from_millis(10);
        let received = sent + Duration::from_millis(4);
        let lead = epoch.lead(&Reading {
            node_us: 50_000,
            resolution_us: 0,
            sent,
            received,
        });
        assert_eq!(lead.hi - lead.lo, 4_000);
        assert_eq!(lead.hi, 50_000 - 10_000);
    }

    #[test]
    fn the_most_a_clock_reads_later_is_its_lead_plus_the_time_since_and_the_rate() {
        let epoch = Epoch::now();
        let sent = Instant::now() + Duration::from_millis(10);
        let lead = epoch.lead(&Reading {
            node_us: 1_700_000_000_000_000,
            resolution_us: 0,
            sent,
            received: sent + Duration::from_millis(4),
        });
        // Read at `sent`: at most the node's time then.
        assert_eq!(lead.node_clock_at_most(epoch, sent), 1_700_000_000_000_000);
        // 10 s after the reply: 10 s later, the round trip and 500 ppm of 10 s.
        let later = lead.at + Duration::from_secs(10);
        assert_eq!(
            lead.node_clock_at_most(epoch, later),
            1_700_000_000_000_000 + 10_000_000 + 4_000 + 5_000
        );
    }

    #[test]
    fn a_key_set_with_a_ttl_tells_the_clock_at_its_setting_to_the_millisecond() {
        let now = Instant::now();
        let reading = Reading::from_expiry(1_700_000_010_000, 10_000, now, now).expect("a reading");
        assert_eq!(reading.node_us, 1_700_000_000_000_000);
        assert_eq!(reading.resolution_us, 999);
        assert_eq!(Reading::from_expiry(-1, 10_000, now, now), None);
        assert_eq!(Reading::from_expiry(-2, 10_000, now, now), None);
    }

    #[test]
    fn after_a_grant_only_the_expiry_of_a_key_it_set_is_read() {
        let now = Instant::now();
        let expiry = Value::Int(1_700_000_010_000);
        let set = Reading::after_grant(&expiry, Some(10_000), now, now).expect("a reading");
        assert_eq!(set.node_us, 1_700_000_000_000_000);
        assert_eq!(
            Reading::after_grant(&expiry, None, now, now),
            None,
            "another's key"
        );
        let time = Value::Array(vec![Value::Int(1_700_000_000), Value::Int(7)]);
        let read = Reading::after_grant(&time, None, now, now).expect("a reading");
        assert_eq!(read.node_us, 1_700_000_000_000_007);
    }

    #[test]
    fn a_first_reading_is_unwatched_then_the_history_holds() {
        let start = Instant::now();
        let mut history = History::default();
        let first = lead(start, 0, 5, 200);
        assert_eq!(history.see(first, TOLERANCE_US, WINDOW), Seen::Unwatched);
        history.restart(first);
        let steady = lead(start, 1000, 5, 200);
        assert_eq!(history.see(steady, TOLERANCE_US, WINDOW), Seen::Steady);
    }

    #[test]
    fn a_step_forward_beyond_the_tolerance_is_seen_and_restarts_the_history() {
        let start = Instant::now();
        let mut history = History::default();
        history.restart(lead(start, 0, 0, 200));
        let stepped = lead(start, 1000, 30_000, 200);
        match history.see(stepped, TOLERANCE_US, WINDOW) {
            Seen::Stepped { by_us } => assert!((by_us - 30_000_000).abs() < 1_000, "{by_us}"),
            other => panic!("{other:?}"),
        }
        // From the new clock on, steady again.
        let after = lead(start, 2000, 30_000, 200);
        assert_eq!(history.see(after, TOLERANCE_US, WINDOW), Seen::Steady);
    }

    #[test]
    fn a_step_back_and_a_drift_within_the_tolerance_count() {
        let start = Instant::now();
        let mut history = History::default();
        history.restart(lead(start, 0, 0, 200));
        // A drift of 80 ms over 8 s: 10 ms a second, within 100 ms.
        for second in 1..=8 {
            let drifted = lead(
                start,
                second * 1000,
                i64::try_from(second).unwrap() * 10,
                200,
            );
            assert_eq!(history.see(drifted, TOLERANCE_US, WINDOW), Seen::Steady);
        }
        let back = lead(start, 9000, -30_000, 200);
        assert_eq!(history.see(back, TOLERANCE_US, WINDOW), Seen::Steady);
    }

    #[test]
    fn small_steps_that_add_up_beyond_the_tolerance_are_seen() {
        let start = Instant::now();
        let mut history = History::default();
        history.restart(lead(start, 0, 0, 200));
        let mut seen = Seen::Steady;
        for step in 1..=5 {
            // 40 ms each, a second apart: each within the tolerance.
            let at = lead(start, step * 1000, i64::try_from(step).unwrap() * 40, 200);
            seen = history.see(at, TOLERANCE_US, WINDOW);
            if seen != Seen::Steady {
                break;
            }
        }
        assert!(matches!(seen, Seen::Stepped { .. }), "{seen:?}");
    }

    #[test]
    fn a_step_back_then_forward_is_seen_against_the_reading_between() {
        let start = Instant::now();
        let mut history = History::default();
        history.restart(lead(start, 0, 0, 200));
        let back = lead(start, 100, -30_000, 200);
        assert_eq!(history.see(back, TOLERANCE_US, WINDOW), Seen::Steady);
        let forward = lead(start, 200, 0, 200);
        assert!(matches!(
            history.see(forward, TOLERANCE_US, WINDOW),
            Seen::Stepped { .. }
        ));
    }

    #[test]
    fn wide_round_trips_leave_a_step_unsure_and_are_not_kept() {
        let start = Instant::now();
        let mut history = History::default();
        history.restart(lead(start, 0, 0, 200));
        // 80 ms ahead, read with a 60 ms round trip: between 50 and 110 ms.
        let wide = lead(start, 1000, 80, 60_000);
        assert!(matches!(
            history.see(wide, TOLERANCE_US, WINDOW),
            Seen::Unsure { .. }
        ));
        assert_eq!(history.latest().map(|kept| kept.at), Some(start));
    }

    #[test]
    fn readings_older_than_the_window_are_forgotten() {
        let start = Instant::now();
        let mut history = History::default();
        history.restart(lead(start, 0, 0, 200));
        let late = lead(start, 31_000, 30_000, 200);
        assert_eq!(history.see(late, TOLERANCE_US, WINDOW), Seen::Unwatched);
    }

    #[test]
    fn the_history_keeps_at_most_its_samples() {
        let start = Instant::now();
        let mut history = History::default();
        history.restart(lead(start, 0, 0, 200));
        for at in 1..200 {
            history.see(lead(start, at * 1000 / 8, 0, 200), TOLERANCE_US, WINDOW);
        }
        assert!(history.samples.len() <= SAMPLES);
    }

    #[test]
    fn a_first_look_compares_with_the_lower_median() {
        let start = Instant::now();
        let ahead = lead(start, 0, 30_000, 200);
        assert_eq!(ahead_of_others(&ahead, &[0, 0], 0), 30_000_000);
        // Two nodes stepped together against one and the client: the lower
        // median is the unstepped clock.
        assert_eq!(ahead_of_others(&ahead, &[30_000_000, 0], 0), 30_000_000);
        // One node: the client's own clock decides.
        assert_eq!(ahead_of_others(&ahead, &[], 30_000_000), 0);
        let behind = lead(start, 0, -5_000, 200);
        assert!(ahead_of_others(&behind, &[0, 0], 0) < 0);
    }
}

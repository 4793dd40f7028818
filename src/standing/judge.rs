//! The judgment of a check (rules 1 to 8 of the [module docs](super)): a
//! pure function of what the check read and what this client knew, and the
//! small rules it rests on (when a server came back, whether an
//! incarnation is gone).

use std::time::{Duration, Instant};

use super::identity::Identity;
use super::record::is_current;

/// The restart options of a client (see [`RedlockBuilder::restart_grace`](crate::RedlockBuilder::restart_grace)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RestartPolicy {
    /// Zero: restarts are not tracked.
    pub(crate) grace: Duration,
    pub(crate) trust_durable: bool,
    pub(crate) strict: bool,
    /// Nodes that may evict keys are taken (see `evidence.rs`).
    pub(crate) allow_eviction: bool,
    pub(crate) drift_factor: f64,
    /// The clock tolerance (see `clock.rs`); zero: clocks are not watched.
    pub(crate) clock_tolerance: Duration,
}

/// A recovering node's restart or failover.
#[derive(Debug, Clone)]
pub(super) struct Recovery {
    pub(super) run_id: String,
    /// What its record gets once it counts (see [`Identity::incarnation`]).
    pub(super) incarnation: String,
    pub(super) previous_run_id: Option<String>,
    pub(super) why: &'static str,
    /// When it came back, on this client's clock (never before the truth):
    /// from its uptime after a restart; when this client saw it, after a
    /// promotion (whose time no server reports).
    pub(super) came_back: Instant,
    /// Held back for a clock step (see `clock.rs`) that put it ahead by
    /// about this much, rather than for a change of server.
    pub(super) clock: Option<Duration>,
    /// Its data went (see `mark.rs`), rather than its server changed.
    pub(super) lost: bool,
    /// Its data mark's id, recorded with the incarnation once it counts.
    pub(super) mark: Option<String>,
}

/// How long a node that reported `uptime_in_seconds` surely has been up.
/// Redis computes it as the difference of two whole-second wall-clock
/// readings (`server.unixtime - server.stat_starttime`), so a server started
/// at 12.9 s reports 1 at 13.1 s: the true uptime is more than the reported
/// one less a second, and may be less than the reported one.
pub(super) fn surely_up_for(uptime: Duration) -> Duration {
    uptime.saturating_sub(Duration::from_secs(1))
}

/// When a node that reported `uptime` in a reply read at `read_at` came
/// back, at the latest: the true start is earlier (see [`surely_up_for`]),
/// so a grace counted from here is never cut short.
pub(super) fn came_back(read_at: Instant, uptime: Duration) -> Instant {
    read_at
        .checked_sub(surely_up_for(uptime))
        .unwrap_or(read_at)
}

/// Rule 7's reason: a hold that strict mode asks of this client, not one
/// that anything the check read asks (so not written in the node's data
/// mark for other clients: see `mark.rs`).
pub(super) const STRICT_YOUNG: &str = "younger than the grace at first contact (strict mode)";

/// A check's verdict.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Judgment {
    Counts,
    Recovering {
        why: &'static str,
        /// The `run_id` it is taken to have replaced, where known.
        previous: Option<String>,
        /// From when its grace runs.
        since: Since,
        /// Its data went (see `mark.rs`), rather than its server changed.
        lost: bool,
    },
    /// Rule 8: what the other nodes' records say decides
    /// ([`Standings::ask_records`]).
    AskRecords,
}

/// From when a recovering node's grace runs.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Since {
    /// Its start, from its uptime: a restart (the old server was gone
    /// before the new one started on its port).
    Start,
    /// This check's reply: a promotion, whose time no server reports (the
    /// old primary may have granted locks until the moment it was replaced).
    Seen,
    /// The recovery under way (the same incarnation, on a new connection).
    Kept(Instant),
    /// This moment: what the node's data mark says (see `mark.rs`).
    At(Instant),
}

/// What the judgment of one check reads.
pub(super) struct Facts<'a> {
    pub(super) identity: &'a Identity,
    /// The incarnation this client knew from its last check, if any.
    pub(super) known: Option<&'a str>,
    /// The node's recovery under way, if any.
    pub(super) recovery: Option<&'a Recovery>,
    /// `G`.
    pub(super) grace: Duration,
    pub(super) policy: RestartPolicy,
}

/// The judgment of the module docs (rules 1 to 8), a pure function of what
/// the check read and what this client knew; rule 8 is left to
/// [`Standings::ask_records`].
pub(super) fn judge(facts: &Facts<'_>) -> Judgment {
    let identity = facts.identity;
    let (Some(incarnation), Some(uptime)) = (identity.incarnation(), identity.uptime) else {
        return Judgment::Counts; // INFO refused: no restart can be seen
    };
    let durable = identity.durable && facts.policy.trust_durable && !identity.promoted;
    if facts.grace.is_zero() || durable {
        return Judgment::Counts;
    }
    if facts.known == Some(incarnation.as_str()) {
        // Still recovering from a change this client saw, on a new connection.
        return match facts.recovery {
            Some(recovery) if recovery.incarnation == incarnation => Judgment::Recovering {
                why: recovery.why,
                previous: recovery.previous_run_id.clone(),
                since: Since::Kept(recovery.came_back),
                lost: recovery.lost,
            },
            _ => Judgment::Counts,
        };
    }
    if facts.known.is_some() {
        return changed(identity.promoted);
    }
    // First met.
    // A never-promoted server keeps its replication id for life: its
    // `run_id` alone (as older clients recorded it) names its incarnation.
    let run_id = identity.run_id.as_deref().unwrap_or_default();
    if identity.record.contains(&incarnation)
        || (!identity.promoted && identity.record.iter().any(|entry| entry == run_id))
    {
        return Judgment::Counts; // a client judged this incarnation to count
    }
    if identity.promoted {
        return Judgment::Recovering {
            why: "a replica promoted to primary (a failover) that no client has recorded \
                  as counting yet",
            previous: None,
            since: Since::Seen,
            lost: false,
        };
    }
    if surely_up_for(uptime) >= facts.grace {
        return Judgment::Counts;
    }
    if facts.policy.strict {
        return Judgment::Recovering {
            why: STRICT_YOUNG,
            previous: None,
            since: Since::Start,
            lost: false,
        };
    }
    Judgment::AskRecords
}

/// Rule 3: the incarnation changed while this client knew the node.
pub(super) fn changed(promoted: bool) -> Judgment {
    if promoted {
        Judgment::Recovering {
            why: "a replica took over as primary while this client knew the node (a failover)",
            previous: None,
            since: Since::Seen,
            lost: false,
        }
    } else {
        Judgment::Recovering {
            why: "its run_id changed while this client knew it",
            previous: None,
            since: Since::Start,
            lost: false,
        }
    }
}

/// Whether a check that read `identity`, of a node whose incarnation this
/// client knew as `known`, shows a server that may have lost the keys of
/// the locks held on it: a new incarnation that is not a restarted durable
/// server.
pub(super) fn may_have_lost_keys(
    identity: &Identity,
    known: Option<&str>,
    trust_durable: bool,
) -> bool {
    let Some(known) = known else {
        return false;
    };
    let durable = identity.durable && trust_durable && !identity.promoted;
    identity.incarnation().is_some_and(|now| now != known) && !durable
}

/// The first incarnation recorded on some node (`recorded`) that is no
/// node's current one (`current`): an incarnation that counted and is gone.
pub(super) fn vanished<'a>(
    recorded: impl Iterator<Item = &'a str>,
    current: &[&str],
) -> Option<&'a str> {
    recorded
        .into_iter()
        .find(|recorded| !is_current(recorded, current))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);
    const GRACE: Duration = Duration::from_secs(60);

    /// A server as a check reads it: `run_id` `r`, replication id `x`, up
    /// for `up` seconds, not durable, not promoted, with an empty record.
    fn server(up: u64) -> Identity {
        Identity {
            run_id: Some("r".into()),
            replid: Some("x".into()),
            uptime: Some(Duration::from_secs(up)),
            role: Some("master".into()),
            ..Identity::default()
        }
    }

    /// [`server`], promoted.
    fn promoted(up: u64) -> Identity {
        Identity {
            promoted: true,
            ..server(up)
        }
    }

    /// `identity` with `entries` in its own record.
    fn recorded(identity: Identity, entries: &[&str]) -> Identity {
        Identity {
            record: entries.iter().map(|&entry| entry.to_owned()).collect(),
            ..identity
        }
    }

    fn policy() -> RestartPolicy {
        RestartPolicy {
            grace: GRACE,
            trust_durable: true,
            strict: false,
            allow_eviction: false,
            drift_factor: 0.01,
            clock_tolerance: Duration::from_millis(100),
        }
    }

    /// How a node is judged, with no recovery under way.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Mode {
        Lenient,
        Strict,
    }

    fn judged(identity: &Identity, known: Option<&str>, mode: Mode) -> Judgment {
        judge(&Facts {
            identity,
            known,
            recovery: None,
            grace: GRACE,
            policy: RestartPolicy {
                strict: mode == Mode::Strict,
                ..policy()
            },
        })
    }

    /// What a table row expects.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Expect {
        Counts,
        /// Recovering, its grace from its start (a restart).
        FromStart,
        /// Recovering, its grace from this check (a promotion).
        FromNow,
        /// Recovering, from either.
        Recovering,
        AskRecords,
    }

    fn matches(verdict: &Judgment, expect: Expect) -> bool {
        match (verdict, expect) {
            (Judgment::Counts, Expect::Counts) | (Judgment::AskRecords, Expect::AskRecords) => true,
            (Judgment::Recovering { since, .. }, Expect::FromStart) => *since == Since::Start,
            (Judgment::Recovering { since, .. }, Expect::FromNow) => *since == Since::Seen,
            (Judgment::Recovering { .. }, Expect::Recovering) => true,
            _ => false,
        }
    }

    /// One row of a rule's table: what the check read, the incarnation this
    /// client knew, the mode, and the verdict expected.
    type Row = (&'static str, Identity, Option<&'static str>, Mode, Expect);

    fn check_rows(rows: &[Row]) {
        for (what, identity, known, mode, expect) in rows {
            let got = judged(identity, *known, *mode);
            assert!(
                matches(&got, *expect),
                "{what}: {got:?}, expected {expect:?}"
            );
        }
    }

    /// Rule 1: durable counts, unless it took over a replication history.
    #[test]
    fn rule_1_a_durable_node_counts_unless_promoted() {
        let durable = |identity: Identity| Identity {
            durable: true,
            ..identity
        };
        check_rows(&[
            (
                "durable, young, changed",
                durable(server(5)),
                Some("other/y"),
                Mode::Lenient,
                Expect::Counts,
            ),
            (
                "durable and promoted",
                durable(promoted(3_600)),
                None,
                Mode::Lenient,
                Expect::Recovering,
            ),
        ]);
    }

    /// Rule 2: the incarnation this client knew, not recovering, counts.
    #[test]
    fn rule_2_the_known_incarnation_counts() {
        check_rows(&[(
            "known, young",
            server(5),
            Some("r/x"),
            Mode::Lenient,
            Expect::Counts,
        )]);
    }

    /// Rule 3: changed while known: a restart recovers from its start,
    /// whatever its age (an old one has long passed its grace); a promotion
    /// from now, a failback to the same server (a new replid) included.
    #[test]
    fn rule_3_a_changed_incarnation_recovers_whatever_its_uptime() {
        check_rows(&[
            (
                "restarted, old",
                server(3_600),
                Some("q/w"),
                Mode::Lenient,
                Expect::FromStart,
            ),
            (
                "failed over",
                promoted(3_600),
                Some("q/w"),
                Mode::Lenient,
                Expect::FromNow,
            ),
            (
                "failed back",
                promoted(3_600),
                Some("r/old"),
                Mode::Lenient,
                Expect::FromNow,
            ),
        ]);
        let failed_over = judged(&promoted(3_600), Some("q/w"), Mode::Lenient);
        assert!(
            matches!(failed_over, Judgment::Recovering { why, .. } if why.contains("failover"))
        );
    }

    /// Rule 4: first met and in its own record, it counts, promoted or not;
    /// a bare `run_id` (an older client's entry) does not vouch for a
    /// promotion.
    #[test]
    fn rule_4_a_recorded_incarnation_counts_at_first_contact() {
        check_rows(&[
            (
                "recorded, young",
                recorded(server(5), &["r/x"]),
                None,
                Mode::Strict,
                Expect::Counts,
            ),
            (
                "recorded, promoted",
                recorded(promoted(9), &["r/x"]),
                None,
                Mode::Strict,
                Expect::Counts,
            ),
            (
                "bare run_id, promoted",
                recorded(promoted(3_600), &["r"]),
                None,
                Mode::Lenient,
                Expect::Recovering,
            ),
        ]);
    }

    /// Rule 5: first met, promoted, unrecorded: recovering from now, however old.
    #[test]
    fn rule_5_an_unrecorded_promotion_recovers_from_now() {
        check_rows(&[(
            "promoted, old",
            promoted(3_600),
            None,
            Mode::Lenient,
            Expect::FromNow,
        )]);
    }

    /// Rule 6: first met, up for the grace, never promoted: counts.
    #[test]
    fn rule_6_a_node_older_than_the_grace_counts() {
        check_rows(&[(
            "old, strict",
            server(3_600),
            None,
            Mode::Strict,
            Expect::Counts,
        )]);
    }

    /// Rule 7: young and unrecorded, in strict mode: recovering from its start.
    #[test]
    fn rule_7_strict_mode_holds_a_young_unrecorded_node_back() {
        check_rows(&[(
            "young, strict",
            server(5),
            None,
            Mode::Strict,
            Expect::FromStart,
        )]);
    }

    /// Rule 8: otherwise the records decide.
    #[test]
    fn rule_8_otherwise_the_records_decide() {
        check_rows(&[(
            "young, lenient",
            server(5),
            None,
            Mode::Lenient,
            Expect::AskRecords,
        )]);
    }

    /// No INFO: nothing can be seen; grace zero: protection off.
    #[test]
    fn without_info_or_grace_a_node_counts() {
        let blind = Identity {
            run_id: None,
            ..server(5)
        };
        check_rows(&[("no INFO", blind, Some("q/w"), Mode::Strict, Expect::Counts)]);
        let off = judge(&Facts {
            identity: &promoted(1),
            known: Some("q/w"),
            recovery: None,
            grace: Duration::ZERO,
            policy: policy(),
        });
        assert_eq!(off, Judgment::Counts);
    }

    /// A recovery under way goes on, from when it began, on a new connection.
    #[test]
    fn a_recovery_under_way_keeps_its_start() {
        let at = Instant::now();
        let recovery = Recovery {
            run_id: "r".into(),
            incarnation: "r/x".into(),
            previous_run_id: Some("q".into()),
            why: "a failover",
            came_back: at,
            clock: None,
            lost: false,
            mark: None,
        };
        let identity = promoted(3_600);
        let facts = Facts {
            identity: &identity,
            known: Some("r/x"),
            recovery: Some(&recovery),
            grace: GRACE,
            policy: policy(),
        };
        assert_eq!(
            judge(&facts),
            Judgment::Recovering {
                why: "a failover",
                previous: Some("q".into()),
                since: Since::Kept(at),
                lost: false,
            }
        );
    }

    /// Keys may be lost by a change of server this client saw, unless it is
    /// a restarted durable server.
    #[test]
    fn a_changed_server_may_have_lost_keys_unless_durable() {
        let old = server(3_600);
        assert!(may_have_lost_keys(&old, Some("q/w"), true));
        assert!(!may_have_lost_keys(&old, Some("r/x"), true));
        assert!(!may_have_lost_keys(&old, None, true));
        let durable = Identity {
            durable: true,
            ..old.clone()
        };
        assert!(!may_have_lost_keys(&durable, Some("q/w"), true));
        assert!(may_have_lost_keys(&durable, Some("q/w"), false));
        let promoted = Identity {
            promoted: true,
            ..durable
        };
        assert!(may_have_lost_keys(&promoted, Some("q/w"), true));
    }

    /// The chaos run's finding: a server 0.2 s old can report an uptime of
    /// 1 s; the grace must still run from no earlier than its true start.
    #[test]
    fn a_reported_uptime_may_exceed_the_true_one_by_almost_a_second() {
        let read_at = Instant::now() + Duration::from_secs(10);
        let true_start = read_at - Duration::from_millis(200);
        let reported = SECOND; // unixtime 13 - starttime 12
        assert!(came_back(read_at, reported) >= true_start);
        assert_eq!(came_back(read_at, Duration::ZERO), read_at);
        assert_eq!(came_back(read_at, 5 * SECOND), read_at - 4 * SECOND);
        assert_eq!(surely_up_for(Duration::ZERO), Duration::ZERO);
        assert_eq!(surely_up_for(61 * SECOND), 60 * SECOND);
    }

    /// Evidence of a lost incarnation is a recorded `run_id` that no node has
    /// now; recorded `run_id`s that are all current (nodes met in any order,
    /// by any clients) are none.
    #[test]
    fn a_recorded_run_id_that_no_node_has_is_a_vanished_incarnation() {
        // An older client's bare run_id names the incarnation of that run_id.
        assert_eq!(
            vanished(["r0", "r2/x"].into_iter(), &["r0/a", "r2/x"]),
            None
        );
        assert_eq!(vanished(["r0/b"].into_iter(), &["r0/a"]), Some("r0/b"));
        assert_eq!(vanished(["r"].into_iter(), &["r0/a"]), Some("r"));
        let current = ["r0", "r1b", "r2"];
        assert_eq!(vanished(["r0", "r2"].into_iter(), &current), None);
        assert_eq!(vanished(std::iter::empty(), &current), None);
        assert_eq!(
            vanished(["r0", "r1", "r2"].into_iter(), &current),
            Some("r1")
        );
    }
}

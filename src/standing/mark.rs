//! The data mark (see the module docs, "Evidence in the data"): a value
//! quorlock keeps on each node, which goes when the node's data goes, read
//! with every grant; and the judgment of a check by it, a pure function of
//! what the check read and what this client knew (with a test per rule).

use std::time::{SystemTime, UNIX_EPOCH};

use crate::witness::MARK_ID_LEN;

/// A node's data mark: `id born since inc_since incarnation`, separated by
/// spaces (times are the node's own, in ms since the Unix epoch); the id,
/// [`MARK_ID_LEN`] hex digits, first, where a grant's witness reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mark {
    /// Random, drawn when the mark is made: a node's data that goes (a
    /// `FLUSHALL`, an empty restart, a resync from another server) takes
    /// its mark with it, and a new one has another id.
    pub(crate) id: String,
    /// When the mark was made.
    pub(crate) born_ms: i64,
    /// When the latest possible loss of keys under it was first seen (a
    /// loss of data, a change of server), from which its grace runs; 0:
    /// none (a new node).
    pub(crate) since_ms: i64,
    /// When `incarnation` was written into it.
    pub(crate) inc_since_ms: i64,
    /// The server incarnation it vouches for (`run_id/replid`, empty where
    /// `INFO` is refused): a server that changed since then may have lost
    /// keys the mark cannot show.
    pub(crate) incarnation: String,
}

impl Mark {
    /// The mark in a node's value, if it is one.
    pub(crate) fn parse(value: &[u8]) -> Option<Mark> {
        let text = std::str::from_utf8(value).ok()?;
        let mut parts = text.splitn(5, ' ');
        let id = parts
            .next()
            .filter(|id| id_bits(id.as_bytes()).is_some())?
            .to_owned();
        let mut number = || parts.next()?.parse::<i64>().ok();
        let (born_ms, since_ms, inc_since_ms) = (number()?, number()?, number()?);
        Some(Mark {
            id,
            born_ms,
            since_ms,
            inc_since_ms,
            incarnation: parts.next().unwrap_or_default().to_owned(),
        })
    }

    /// The value to store.
    pub(crate) fn value(&self) -> String {
        format!(
            "{} {} {} {} {}",
            self.id, self.born_ms, self.since_ms, self.inc_since_ms, self.incarnation
        )
    }

    /// A fresh mark id: 64 random bits in hex.
    pub(crate) fn fresh_id() -> String {
        format!("{:016x}", rand::random::<u64>())
    }

    /// The id's 64 bits.
    pub(crate) fn id_bits(&self) -> Option<u64> {
        id_bits(self.id.as_bytes())
    }
}

/// This client's wall clock, ms since the epoch: the time a mark is judged
/// and made by where the node refuses `TIME`.
pub(crate) fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
        })
}

/// The 64 bits of a mark id (its [`MARK_ID_LEN`] hex digits), as the
/// witness of a grant reads them, if `id` is one.
pub(crate) fn id_bits(id: &[u8]) -> Option<u64> {
    if id.len() != MARK_ID_LEN {
        return None;
    }
    id.iter().try_fold(0u64, |bits, &digit| {
        let value = char::from(digit).to_digit(16)?;
        Some(bits << 4 | u64::from(value))
    })
}

/// What a check read of a node's mark.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum MarkRead {
    /// Not read: a Redis Cluster node (its keys live on several primaries),
    /// or the restart protection off.
    #[default]
    Unread,
    /// The node refused `GET` of it (an ACL), with its reply.
    Refused(String),
    /// There is none.
    Missing,
    /// There was none, and the check's read made this one (its raw value,
    /// and the mark in it): clean (nothing to wait out), vouching for the
    /// server there, made in the same step as the read, so that no other
    /// client reads the node without a mark after this one did.
    Made(Vec<u8>, Mark),
    /// There is one (its raw value, and the mark in it).
    Present(Vec<u8>, Mark),
    /// A value there that is not a mark (written by something else): taken
    /// as a mark replaced.
    Foreign(Vec<u8>),
}

/// What the mark judgment reads (see [`judge_mark`]).
#[derive(Debug)]
pub(super) struct MarkFacts<'a> {
    pub(super) read: &'a MarkRead,
    /// The server's incarnation now (`None`: `INFO` refused).
    pub(super) incarnation: Option<&'a str>,
    /// The mark this client last took for the node's.
    pub(super) known: Option<&'a Mark>,
    /// The mark's id is in a record that a check read: its node counted.
    pub(super) recorded: bool,
    /// A mark id that counted is in a record and on no node now.
    pub(super) vanished: bool,
    /// Another node's mark has this one's id: one resynced from the other.
    pub(super) duplicate: bool,
    /// The identity rules hold the node back for what the check read (a
    /// change of server seen, a promotion, an incarnation that counted
    /// gone), and why: a hold every client keeps (strict mode's is this
    /// client's own, and not here).
    pub(super) identity_holds: Option<&'static str>,
    /// Durable and trusted so, not promoted: a restart keeps its keys.
    pub(super) durable: bool,
    pub(super) strict: bool,
    /// The node's time at the check, ms.
    pub(super) now_ms: i64,
    /// The time to write as the start of a grace seen now: `now_ms`, or
    /// later where the node's clock is behind the others' (see `clock.rs`).
    pub(super) write_ms: i64,
    pub(super) grace_ms: i64,
    /// An id for a new mark.
    pub(super) fresh_id: &'a str,
}

/// A mark to write before the verdict holds: made where there is none
/// (`old` empty), or put in place of `old` (compare and set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct MarkWrite {
    pub(super) old: Vec<u8>,
    pub(super) new: Mark,
}

/// The mark judgment's verdict.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum MarkVerdict {
    /// No mark to judge by: the identity rules alone.
    Blind,
    /// Counts (once `write`, if any, is in place).
    Counts { write: Option<MarkWrite> },
    /// Recovering until `until_ms` (the node's time), once `write`, if
    /// any, is in place; `lost`: the data went (its holders are told).
    Recovering {
        why: &'static str,
        until_ms: i64,
        lost: bool,
        write: Option<MarkWrite>,
    },
}

/// The mark went, or was replaced, since this client read it.
pub(super) const GONE: &str = "its data mark is gone or replaced since this client read it: \
    the node lost its data (FLUSHALL, an empty restart, a resync from another server, eviction)";
/// Two nodes carry one mark.
pub(super) const DUPLICATE: &str =
    "another node carries its data mark: one of them took the other's data (a resync)";
/// A mark that counted is gone.
pub(super) const VANISHED: &str = "a data mark that counted is gone from the nodes: this node, \
    without a mark or with a young one not recorded, may be the one that lost its data";
/// Strict mode, and no mark or a young one that no record holds.
pub(super) const STRICT_NEW: &str =
    "no data mark, or a young one not recorded, at first contact (strict mode)";
/// Another client holds the node back by its mark.
pub(super) const MARKED: &str =
    "its data mark says another client saw it lose keys or change server, within the grace";
/// The server changed since the mark vouched for it.
pub(super) const SERVER_CHANGED: &str =
    "its server changed since its data mark vouched for it (a restart, a promotion)";

/// The judgment of a check by the node's data mark (see the module docs,
/// "Evidence in the data"), given the identity rules' verdict.
pub(super) fn judge_mark(facts: &MarkFacts<'_>) -> MarkVerdict {
    // A mark the read made is judged as none there, and rewritten by
    // compare and set where the verdict needs another.
    let (raw, mark, made) = match facts.read {
        MarkRead::Unread | MarkRead::Refused(_) => return MarkVerdict::Blind,
        MarkRead::Missing => (Vec::new(), None, None),
        MarkRead::Foreign(raw) => (raw.clone(), None, None),
        MarkRead::Made(raw, made) => (raw.clone(), None, Some(made)),
        MarkRead::Present(raw, mark) => (raw.clone(), Some(mark), None),
    };
    if let Some((why, lost)) = loss(facts, mark) {
        return match mark.filter(|mark| adoptable(facts, mark)) {
            Some(mark) => recovering(why, mark.since_ms + facts.grace_ms, lost, None),
            None => {
                let write = MarkWrite {
                    old: raw,
                    new: fresh(facts),
                };
                recovering(why, facts.write_ms + facts.grace_ms, lost, Some(write))
            }
        };
    }
    let Some(mark) = mark else {
        return new_node(facts, raw, made);
    };
    changed_or_held(facts, raw, mark)
}

/// No mark and nothing lost: a new node (or one never marked), under the
/// mark the read `made` (else one made now), held back where the identity
/// rules hold it (for every client: the mark's grace starts now) or in
/// strict mode (for this client: the mark stays clean).
fn new_node(facts: &MarkFacts<'_>, raw: Vec<u8>, made: Option<&Mark>) -> MarkVerdict {
    let until_ms = facts.write_ms + facts.grace_ms;
    let incarnation = facts.incarnation.unwrap_or_default();
    // The mark made must vouch for the server as this client reads it.
    let made = made.filter(|made| made.incarnation == incarnation);
    let clean = made.cloned().unwrap_or_else(|| Mark {
        since_ms: 0,
        ..fresh(facts)
    });
    if let Some(why) = facts.identity_holds {
        let new = Mark {
            since_ms: facts.write_ms,
            inc_since_ms: facts.write_ms,
            ..clean
        };
        return recovering(why, until_ms, false, Some(MarkWrite { old: raw, new }));
    }
    let write = made.is_none().then_some(MarkWrite {
        old: raw,
        new: clean,
    });
    match facts.strict {
        true => recovering(STRICT_NEW, until_ms, false, write),
        false => MarkVerdict::Counts { write },
    }
}

/// Why the data under `mark` (`None`: no mark) may be gone, if it may,
/// and whether it is taken as lost.
fn loss(facts: &MarkFacts<'_>, mark: Option<&Mark>) -> Option<(&'static str, bool)> {
    let young = mark.is_none_or(|mark| mark.born_ms + facts.grace_ms > facts.now_ms);
    match (facts.known, mark) {
        (Some(_), None) => return Some((GONE, true)),
        (Some(known), Some(mark)) if known.id != mark.id => return Some((GONE, true)),
        _ => {}
    }
    if mark.is_some() && facts.duplicate {
        return Some((DUPLICATE, true));
    }
    (young && !facts.recorded && facts.vanished).then_some((VANISHED, true))
}

/// Whether `mark`, which this client did not know, already holds the node
/// back for a loss seen since it was made: made for one, within its grace,
/// for the server there now.
fn adoptable(facts: &MarkFacts<'_>, mark: &Mark) -> bool {
    let new_to_us = facts.known.is_none_or(|known| known.id != mark.id);
    new_to_us
        && !facts.duplicate
        && mark.since_ms >= mark.born_ms
        && mark.since_ms + facts.grace_ms > facts.now_ms
        && vouches_for_now(facts, mark)
}

/// Whether `mark` vouches for the server there now.
fn vouches_for_now(facts: &MarkFacts<'_>, mark: &Mark) -> bool {
    facts.incarnation.unwrap_or_default() == mark.incarnation
}

/// A new mark, made now: its grace runs from now.
fn fresh(facts: &MarkFacts<'_>) -> Mark {
    Mark {
        id: facts.fresh_id.to_owned(),
        born_ms: facts.write_ms,
        since_ms: facts.write_ms,
        inc_since_ms: facts.write_ms,
        incarnation: facts.incarnation.unwrap_or_default().to_owned(),
    }
}

fn recovering(
    why: &'static str,
    until_ms: i64,
    lost: bool,
    write: Option<MarkWrite>,
) -> MarkVerdict {
    MarkVerdict::Recovering {
        why,
        until_ms,
        lost,
        write,
    }
}

/// The data is the mark's: judged by whether its server changed since the
/// mark vouched for it, by the identity rules, and by the grace the mark
/// holds.
fn changed_or_held(facts: &MarkFacts<'_>, raw: Vec<u8>, mark: &Mark) -> MarkVerdict {
    let changed = !vouches_for_now(facts, mark);
    let incarnation = facts.incarnation.unwrap_or_default().to_owned();
    // Its grace was started for this server, since it vouches for it.
    let accounted = !changed && mark.since_ms >= mark.inc_since_ms && mark.since_ms > 0;
    // A durable restart keeps the node's own data: a mark that counted on
    // these nodes, not one brought from elsewhere.
    let own = facts.recorded || facts.known.is_some_and(|known| known.id == mark.id);
    let durable = facts.durable && own;
    if (changed && !durable || facts.identity_holds.is_some()) && !accounted {
        let new = Mark {
            since_ms: facts.write_ms,
            inc_since_ms: facts.write_ms,
            incarnation,
            ..mark.clone()
        };
        let why = match (changed, facts.identity_holds) {
            (false, Some(why)) => why,
            _ => SERVER_CHANGED,
        };
        let write = Some(MarkWrite { old: raw, new });
        return recovering(why, facts.write_ms + facts.grace_ms, false, write);
    }
    // A durable server's restart keeps the data: the mark vouches for the
    // new server from now, and any grace it holds goes on.
    let write = changed.then(|| MarkWrite {
        old: raw,
        new: Mark {
            incarnation,
            inc_since_ms: facts.write_ms,
            ..mark.clone()
        },
    });
    if mark.since_ms > 0 && mark.since_ms + facts.grace_ms > facts.now_ms {
        let why = facts.identity_holds.unwrap_or(MARKED);
        return recovering(why, mark.since_ms + facts.grace_ms, false, write);
    }
    // Strict mode: a mark younger than the grace that no record holds
    // may be a lost one's replacement (for this client only).
    if facts.strict && !facts.recorded && mark.born_ms + facts.grace_ms > facts.now_ms {
        return recovering(STRICT_NEW, mark.born_ms + facts.grace_ms, false, write);
    }
    MarkVerdict::Counts { write }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: i64 = 60_000;
    const NOW: i64 = 1_700_000_000_000;

    fn mark(id: &str, born: i64, since: i64, incarnation: &str) -> Mark {
        Mark {
            id: id.into(),
            born_ms: born,
            since_ms: since,
            inc_since_ms: born,
            incarnation: incarnation.into(),
        }
    }

    fn present(mark: &Mark) -> MarkRead {
        MarkRead::Present(mark.value().into_bytes(), mark.clone())
    }

    /// Facts of a check at `NOW` of server `r/x`, nothing else known.
    fn facts<'a>(read: &'a MarkRead) -> MarkFacts<'a> {
        MarkFacts {
            read,
            incarnation: Some("r/x"),
            known: None,
            recorded: false,
            vanished: false,
            duplicate: false,
            identity_holds: None,
            durable: false,
            strict: false,
            now_ms: NOW,
            write_ms: NOW,
            grace_ms: GRACE,
            fresh_id: "new",
        }
    }

    /// What a row expects.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Expect {
        Counts,
        /// Counts, once a mark is written (made, or its incarnation set).
        CountsWriting,
        /// Recovering for a grace from now, a mark written (a new id where
        /// the data went).
        FromNow {
            lost: bool,
        },
        /// Recovering until the mark's own grace ends, nothing written.
        Adopted,
        Blind,
    }

    fn expect(verdict: &MarkVerdict, facts: &MarkFacts<'_>) -> Expect {
        match verdict {
            MarkVerdict::Blind => Expect::Blind,
            MarkVerdict::Counts { write: None } => Expect::Counts,
            MarkVerdict::Counts { write: Some(_) } => Expect::CountsWriting,
            MarkVerdict::Recovering {
                until_ms,
                lost,
                write: Some(write),
                ..
            } if *until_ms == NOW + GRACE => {
                assert_eq!(write.new.since_ms, NOW);
                // The data went: a new mark; the server changed: the same.
                if *lost {
                    assert_eq!(write.new.id, facts.fresh_id, "{verdict:?}");
                }
                Expect::FromNow { lost: *lost }
            }
            MarkVerdict::Recovering { write: None, .. } => Expect::Adopted,
            other => panic!("unexpected verdict {other:?}"),
        }
    }

    fn check(rows: &[(&str, MarkFacts<'_>, Expect)]) {
        for (what, facts, expected) in rows {
            let verdict = judge_mark(facts);
            assert_eq!(expect(&verdict, facts), *expected, "{what}: {verdict:?}");
        }
    }

    #[test]
    fn a_mark_reads_back_as_written() {
        let written = Mark {
            inc_since_ms: 7,
            ..mark("0123456789abcdef", 5, 6, "run/repl")
        };
        assert_eq!(
            Mark::parse(written.value().as_bytes()),
            Some(written.clone())
        );
        assert_eq!(written.id_bits(), Some(0x0123_4567_89ab_cdef));
        let blind = mark("00000000000000ab", 1, 0, "");
        assert_eq!(Mark::parse(blind.value().as_bytes()), Some(blind));
        assert_eq!(Mark::parse(b"not a mark"), None);
        assert_eq!(
            Mark::parse(b"ab 1 0 1 r/x"),
            None,
            "an id of another length"
        );
        assert_eq!(Mark::parse(b""), None);
        let fresh = Mark::fresh_id();
        assert_eq!(
            id_bits(fresh.as_bytes()).map(|bits| format!("{bits:016x}")),
            Some(fresh)
        );
    }

    /// No mark to read: the identity rules alone.
    #[test]
    fn without_a_mark_to_read_the_identity_rules_decide() {
        let unread = MarkRead::Unread;
        let refused = MarkRead::Refused("NOPERM".into());
        check(&[
            ("unread", facts(&unread), Expect::Blind),
            ("refused", facts(&refused), Expect::Blind),
        ]);
    }

    /// A mark this client knew, gone or replaced: the data went, whatever
    /// the server says (durable, the same run_id); a new mark holds the
    /// node back from now, or one another client made for the loss.
    #[test]
    fn a_known_mark_gone_or_replaced_is_a_loss() {
        let known = mark("old", NOW - 3_600_000, 0, "r/x");
        let missing = MarkRead::Missing;
        let other = present(&mark("other", NOW - 3_600_000, 0, "r/x"));
        let remarked = present(&mark("other", NOW - 1_000, NOW - 1_000, "r/x"));
        let garbage = MarkRead::Foreign(b"junk".to_vec());
        let knowing = |read| MarkFacts {
            known: Some(&known),
            durable: true,
            ..facts(read)
        };
        check(&[
            ("gone", knowing(&missing), Expect::FromNow { lost: true }),
            ("replaced", knowing(&other), Expect::FromNow { lost: true }),
            (
                "not a mark",
                knowing(&garbage),
                Expect::FromNow { lost: true },
            ),
            (
                "another client's loss mark",
                knowing(&remarked),
                Expect::Adopted,
            ),
        ]);
    }

    /// First met: a mark missing, or young and not recorded, where a mark
    /// that counted is gone, may be the lost one; in strict mode a missing
    /// mark is held back too. Nothing gone: a new node counts at once.
    #[test]
    fn first_met_the_records_decide_a_missing_or_young_mark() {
        let missing = MarkRead::Missing;
        let young = present(&mark("young", NOW - 1_000, 0, "r/x"));
        let old = present(&mark("old", NOW - 3_600_000, 0, "r/x"));
        let vanished = |read| MarkFacts {
            vanished: true,
            ..facts(read)
        };
        check(&[
            ("new node", facts(&missing), Expect::CountsWriting),
            (
                "missing, one vanished",
                vanished(&missing),
                Expect::FromNow { lost: true },
            ),
            (
                "young, one vanished",
                vanished(&young),
                Expect::FromNow { lost: true },
            ),
            (
                "young, recorded",
                MarkFacts {
                    recorded: true,
                    ..vanished(&young)
                },
                Expect::Counts,
            ),
            ("old, one vanished", vanished(&old), Expect::Counts),
        ]);
        // Strict mode holds a new node back for this client alone: the mark
        // it makes is clean, for the others.
        let strict = |read| MarkFacts {
            strict: true,
            ..facts(read)
        };
        let verdict = judge_mark(&strict(&missing));
        assert!(
            matches!(&verdict, MarkVerdict::Recovering { until_ms, lost: false, write: Some(write), .. }
                if *until_ms == NOW + GRACE && write.new.since_ms == 0),
            "{verdict:?}"
        );
        check(&[
            ("strict, young", strict(&young), Expect::Adopted),
            ("strict, old", strict(&old), Expect::Counts),
        ]);
    }

    /// A mark the check's read made (there was none) is judged as none
    /// there: kept as it is for a new node, replaced (another id) where a
    /// loss is seen, given a grace (the same id) where the identity rules
    /// hold the node, and held back by this client alone in strict mode.
    #[test]
    fn a_mark_the_read_made_is_judged_as_none_there() {
        let made = mark("0123456789abcdef", NOW, 0, "r/x");
        let read = MarkRead::Made(made.value().into_bytes(), made.clone());
        let known = mark("fedcba9876543210", NOW - 3_600_000, 0, "r/x");
        check(&[
            ("new node", facts(&read), Expect::Counts),
            (
                "a mark this client knew",
                MarkFacts {
                    known: Some(&known),
                    ..facts(&read)
                },
                Expect::FromNow { lost: true },
            ),
            (
                "one vanished",
                MarkFacts {
                    vanished: true,
                    ..facts(&read)
                },
                Expect::FromNow { lost: true },
            ),
            (
                "strict",
                MarkFacts {
                    strict: true,
                    ..facts(&read)
                },
                Expect::Adopted,
            ),
        ]);
        let held = judge_mark(&MarkFacts {
            identity_holds: Some("promoted"),
            ..facts(&read)
        });
        let MarkVerdict::Recovering {
            write: Some(write), ..
        } = held
        else {
            panic!("held back: {held:?}");
        };
        assert_eq!((write.new.id, write.new.since_ms), (made.id.clone(), NOW));
        assert_eq!(write.old, made.value().into_bytes(), "compare and set");
        // Made for another view of the server: rewritten to vouch for it.
        let other = mark("0123456789abcdef", NOW, 0, "r");
        let read = MarkRead::Made(other.value().into_bytes(), other);
        check(&[("made, another view", facts(&read), Expect::CountsWriting)]);
    }

    /// Two nodes with one mark: one took the other's data.
    #[test]
    fn a_mark_on_two_nodes_is_a_loss() {
        let shared = present(&mark("shared", NOW - 3_600_000, 0, "r/x"));
        let duplicate = MarkFacts {
            duplicate: true,
            recorded: true,
            ..facts(&shared)
        };
        check(&[("duplicate", duplicate, Expect::FromNow { lost: true })]);
    }

    /// The server changed since the mark vouched for it: a durable one
    /// counts (the mark now vouches for it); any other is held back from
    /// now, and the mark says so to every client.
    #[test]
    fn a_server_changed_under_its_mark_is_held_back_unless_durable() {
        let before = present(&mark("m", NOW - 3_600_000, 0, "q/w"));
        let durable = MarkFacts {
            durable: true,
            recorded: true,
            ..facts(&before)
        };
        // A durable configuration on another server's data (a mark that never
        // counted here) is no durable restart.
        let brought = MarkFacts {
            recorded: false,
            ..durable
        };
        check(&[
            ("changed", facts(&before), Expect::FromNow { lost: false }),
            ("changed, durable", durable, Expect::CountsWriting),
            (
                "changed, durable, a mark from elsewhere",
                brought,
                Expect::FromNow { lost: false },
            ),
        ]);
        let MarkVerdict::Recovering {
            write: Some(write), ..
        } = judge_mark(&facts(&before))
        else {
            panic!("held back");
        };
        assert_eq!(
            (write.new.id.as_str(), write.new.incarnation.as_str()),
            ("m", "r/x")
        );
    }

    /// The grace a mark holds: another client's start of it binds this
    /// one, for the server it was started for, until it ends; the identity
    /// rules' hold (a promotion first met) is the mark's from then on, so
    /// that every client counts it from the first sight, not its own.
    #[test]
    fn the_grace_in_a_mark_runs_from_the_first_sight() {
        let held = Mark {
            inc_since_ms: NOW - 5_000,
            ..mark("m", NOW - 3_600_000, NOW - 5_000, "r/x")
        };
        let held = present(&held);
        let over = Mark {
            inc_since_ms: NOW - GRACE - 1,
            ..mark("m", NOW - 3_600_000, NOW - GRACE - 1, "r/x")
        };
        let over = present(&over);
        let clean = present(&mark("m", NOW - 3_600_000, 0, "r/x"));
        let promoted = |read| MarkFacts {
            identity_holds: Some("promoted"),
            recorded: true,
            ..facts(read)
        };
        check(&[
            ("held by another client", facts(&held), Expect::Adopted),
            ("a promotion, held", promoted(&held), Expect::Adopted),
            ("a promotion, grace over", promoted(&over), Expect::Counts),
            (
                "a promotion, first seen",
                promoted(&clean),
                Expect::FromNow { lost: false },
            ),
            ("clean", facts(&clean), Expect::Counts),
        ]);
    }

    /// A durable restart's mark keeps its grace running; and a client that
    /// does not trust durable nodes holds the node back from now (the grace
    /// the mark held began before this server).
    #[test]
    fn a_durable_restart_keeps_a_running_grace_and_binds_no_untrusting_client() {
        let running = Mark {
            inc_since_ms: NOW - 5_000,
            ..mark("m", NOW - 3_600_000, NOW - 5_000, "q/w")
        };
        let running = present(&running);
        let confirmed = Mark {
            inc_since_ms: NOW - 1_000,
            ..mark("m", NOW - 3_600_000, NOW - 3_000_000, "r/x")
        };
        let confirmed = present(&confirmed);
        let untrusting = MarkFacts {
            identity_holds: Some("its run_id changed"),
            ..facts(&confirmed)
        };
        let verdict = judge_mark(&MarkFacts {
            durable: true,
            recorded: true,
            ..facts(&running)
        });
        assert!(
            matches!(verdict, MarkVerdict::Recovering { until_ms, write: Some(_), .. } if until_ms == NOW - 5_000 + GRACE),
            "{verdict:?}"
        );
        check(&[("untrusting", untrusting, Expect::FromNow { lost: false })]);
    }
}

//! The data mark's part of a check (see the module docs, "Evidence in the
//! data"): what the other nodes' reads say of this node's mark (recorded,
//! vanished, carried by another node), the judgment by the mark after the
//! identity rules', the mark that verdict needs put in place on the node
//! (compare and set: where another client wrote first, the check judges
//! what it wrote), and the verdict as the check's.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use redis::Value;

use super::identity::Identity;
use super::judge::{Judgment, STRICT_YOUNG, Since};
use super::mark::{
    GONE, MARKED, Mark, MarkFacts, MarkRead, MarkVerdict, MarkWrite, judge_mark, wall_ms,
};
use super::table::Standings;
use crate::answer::NodeErrorKind;
use crate::changes::Change;
use crate::connection::Connection;
use crate::scripts;

/// How many times a check judges a mark that other clients keep
/// rewriting before it gives up (the next connection checks again).
const TRIES: usize = 3;

/// What the other nodes' reads say of a node's mark.
#[derive(Debug, Default)]
struct Seen {
    recorded: bool,
    vanished: bool,
    duplicate: bool,
}

/// The node's time at a check, and when it was read on this client's clock.
#[derive(Debug, Clone, Copy)]
struct NodeNow {
    /// The node's time, ms (this client's wall clock where `TIME` is refused).
    now_ms: i64,
    /// The time a grace seen now starts at, ms: `now_ms`, later where the
    /// node's clock is behind the others' and this client's.
    write_ms: i64,
    /// When it was read.
    at: Instant,
}

impl NodeNow {
    /// The moment on this client's clock that the node's clock reads
    /// `node_ms` (never earlier than it reads it: the reading's time was
    /// its time at the latest when the reply came).
    fn instant(&self, node_ms: i64) -> Instant {
        let ahead = node_ms.saturating_sub(self.now_ms);
        let span = Duration::from_millis(ahead.unsigned_abs());
        match ahead >= 0 {
            true => self.at.checked_add(span).unwrap_or(self.at),
            false => self.at.checked_sub(span).unwrap_or(self.at),
        }
    }
}

/// What a check knew before its mark verdict (see
/// [`Standings::settle_mark`]).
struct Prior {
    now: NodeNow,
    /// The mark this client took for the node's before.
    known: Option<Mark>,
    /// The identity rules' judgment.
    judgment: Judgment,
    /// The identity rules saw a change and told the locks held on the node.
    told: bool,
}

/// The outcome of putting a mark in place.
enum Put {
    /// It is there: its value.
    Done(Vec<u8>),
    /// Another value was there (another client wrote first): the mark as
    /// it is now.
    Found(MarkRead),
}

impl Standings {
    /// The check's judgment by node `index`'s data mark, after the identity
    /// rules' `judgment` (see `mark.rs`): puts the mark the verdict needs
    /// in place on `connection` first, and notes the mark the node's
    /// grants must read from now on. A node without a mark to read keeps
    /// the identity rules' judgment.
    pub(super) async fn judge_by_mark(
        &self,
        index: usize,
        connection: &mut Connection,
        identity: &Identity,
        judgment: Judgment,
        started: Instant,
    ) -> Result<Judgment, NodeErrorKind> {
        let mut read = identity.evidence.mark.clone();
        if matches!(read, MarkRead::Unread | MarkRead::Refused(_)) {
            self.expect_mark(index, None);
            return Ok(judgment);
        }
        let now = self.node_now(index, identity);
        let grace_ms = i64::try_from(self.grace().as_millis()).unwrap_or(i64::MAX);
        // Strict mode's own hold is this client's, not every client's.
        let holds = match &judgment {
            Judgment::Recovering { why, .. } if *why != STRICT_YOUNG => Some(*why),
            _ => None,
        };
        let incarnation = identity.incarnation();
        for _ in 0..TRIES {
            let seen = self
                .marks_seen_waiting(index, &read, now, grace_ms, started)
                .await;
            let known = self.detail(index).mark.clone();
            let fresh_id = Mark::fresh_id();
            let facts = MarkFacts {
                read: &read,
                incarnation: incarnation.as_deref(),
                known: known.as_ref(),
                recorded: seen.recorded,
                vanished: seen.vanished,
                duplicate: seen.duplicate,
                identity_holds: holds,
                durable: identity.durable && self.policy.trust_durable && !identity.promoted,
                strict: self.policy.strict,
                now_ms: now.now_ms,
                write_ms: now.write_ms,
                grace_ms,
                fresh_id: &fresh_id,
            };
            let verdict = judge_mark(&facts);
            let value = match verdict_write(&verdict) {
                None => raw(&read),
                Some(write) => match put_mark(connection, &self.record_keys.mark, write).await? {
                    Put::Done(value) => value,
                    Put::Found(found) => {
                        read = found;
                        continue;
                    }
                },
            };
            let prior = Prior {
                now,
                known,
                judgment,
                told: holds.is_some(),
            };
            return Ok(self.settle_mark(index, verdict, &value, prior));
        }
        Err(NodeErrorKind::UnexpectedReply(
            "its data mark kept changing while it was checked".to_owned(),
        ))
    }

    /// The node's time at the check that read `identity` of node `index`.
    fn node_now(&self, index: usize, identity: &Identity) -> NodeNow {
        let Some(reading) = identity.clock else {
            let wall = wall_ms();
            return NodeNow {
                now_ms: wall,
                write_ms: wall,
                at: Instant::now(),
            };
        };
        let now_ms = reading.node_us / 1000;
        let behind_ms = self.behind_others_us(index, self.epoch.lead(&reading)) / 1000;
        NodeNow {
            now_ms,
            write_ms: now_ms.saturating_add(behind_ms),
            at: reading.received,
        }
    }

    /// What the other nodes' reads say of node `index`'s mark as `read`,
    /// once every node's first check has read its node (for at most half
    /// the connect timeout from `started`) where the records decide: a
    /// mark missing, or young and not recorded.
    async fn marks_seen_waiting(
        &self,
        index: usize,
        read: &MarkRead,
        now: NodeNow,
        grace_ms: i64,
        started: Instant,
    ) -> Seen {
        let (id, young) = match read {
            MarkRead::Present(_, mark) | MarkRead::Made(_, mark) => {
                (Some(mark.id.as_str()), mark.born_ms + grace_ms > now.now_ms)
            }
            _ => (None, true),
        };
        let seen = self.marks_seen(index, id);
        if young && !seen.recorded {
            self.wait_for_first_reads(started + self.connect_timeout / 2)
                .await;
            return self.marks_seen(index, id);
        }
        seen
    }

    /// What the nodes' last reads say of node `index`'s mark `id`: whether
    /// a record holds it, whether a record holds a mark that no node has
    /// now, whether another node has it.
    fn marks_seen(&self, index: usize, id: Option<&str>) -> Seen {
        let mut recorded = BTreeSet::new();
        let mut current: Vec<String> = id.into_iter().map(str::to_owned).collect();
        let mut duplicate = false;
        for node in 0..self.slots.len() {
            let detail = self.detail(node);
            if let Some(identity) = &detail.identity {
                recorded.extend(identity.evidence.mark_record.iter().cloned());
            }
            if node == index {
                continue;
            }
            let theirs = (detail.mark.as_ref().map(|mark| mark.id.clone()))
                .or_else(|| Some(detail.identity.as_ref()?.evidence.mark_id()?.to_owned()));
            if let Some(theirs) = theirs {
                duplicate |= id == Some(theirs.as_str());
                current.push(theirs);
            }
        }
        Seen {
            recorded: id.is_some_and(|id| recorded.contains(id)),
            vanished: recorded.iter().any(|mark| !current.contains(mark)),
            duplicate,
        }
    }

    /// Takes the mark (its value `value`, in place) as node `index`'s, and
    /// the mark verdict as the check's (strict mode's own hold, in the
    /// identity rules' `judgment`, stays). Where this client knew the node
    /// (`known`: its mark before), the locks held on it are told of a loss
    /// of data, and of a hold the mark asks anew (one another client saw),
    /// unless the identity rules saw a change and told them (`told`).
    fn settle_mark(
        &self,
        index: usize,
        verdict: MarkVerdict,
        value: &[u8],
        prior: Prior,
    ) -> Judgment {
        let Prior {
            now,
            known,
            judgment,
            told,
        } = prior;
        let mark = Mark::parse(value);
        self.expect_mark(index, mark.as_ref().and_then(Mark::id_bits));
        let since_before = known.as_ref().map(|known| known.since_ms);
        self.detail(index).mark = mark.clone();
        match verdict {
            MarkVerdict::Blind => judgment,
            MarkVerdict::Counts { .. } => match judgment {
                Judgment::Recovering { why, .. } if why == STRICT_YOUNG => judgment,
                _ => Judgment::Counts,
            },
            MarkVerdict::Recovering {
                why,
                until_ms,
                lost,
                ..
            } => {
                let held_anew = mark.as_ref().map(|mark| mark.since_ms) != since_before;
                if known.is_some() && lost {
                    self.changes.changed(index, Change::Data(GONE));
                } else if known.is_some() && held_anew && !told {
                    self.changes.changed(index, Change::Data(MARKED));
                }
                let ends = now.instant(until_ms);
                let came_back = ends.checked_sub(self.grace()).unwrap_or(now.at);
                Judgment::Recovering {
                    why,
                    previous: None,
                    since: Since::At(came_back),
                    lost,
                }
            }
        }
    }
}

/// The mark a verdict needs in place, if any.
fn verdict_write(verdict: &MarkVerdict) -> Option<&MarkWrite> {
    match verdict {
        MarkVerdict::Counts { write } | MarkVerdict::Recovering { write, .. } => write.as_ref(),
        MarkVerdict::Blind => None,
    }
}

/// The value a read found (empty where none).
fn raw(read: &MarkRead) -> Vec<u8> {
    match read {
        MarkRead::Present(raw, _) | MarkRead::Made(raw, _) | MarkRead::Foreign(raw) => raw.clone(),
        _ => Vec::new(),
    }
}

/// Puts `write` in place at `key` (the mark script: only where the value is
/// still the one `write` replaces).
async fn put_mark(
    connection: &mut Connection,
    key: &[u8],
    write: &MarkWrite,
) -> Result<Put, NodeErrorKind> {
    let new = write.new.value();
    let reply: Value = redis::cmd("EVAL")
        .arg(scripts::MARK_CODE)
        .arg(1)
        .arg(key)
        .arg(&write.old)
        .arg(&new)
        .query_async(connection)
        .await
        .map_err(|err| NodeErrorKind::Redis(std::sync::Arc::new(err)))?;
    match reply {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(1), _] => Ok(Put::Done(new.into_bytes())),
            [Value::Int(0), found] => {
                let mut refused = Vec::new();
                Ok(Put::Found(super::evidence::read_mark(
                    Ok(found.clone()),
                    &mut refused,
                )))
            }
            _ => Err(NodeErrorKind::UnexpectedReply(format!("{items:?}"))),
        },
        other => Err(NodeErrorKind::UnexpectedReply(format!("{other:?}"))),
    }
}

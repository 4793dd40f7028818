//! Leader election over the quorum: [`Redlock::campaign`] makes the caller
//! the leader of an election (one name: one leader at a time), and returns
//! its [`Leadership`]; [`Redlock::leader`] tells who leads now;
//! [`Redlock::observe`] is the stream of changes, losses included.
//!
//! A leadership is a held lock on the election's name, taken as
//! [`lock`](Redlock::lock) takes one (waiting in the queue on the nodes, so
//! standbys take over in the order they came, for as long as it takes), and
//! always fenced: its **term** is the lock's fencing token, whatever the
//! client's [`fencing`](crate::RedlockBuilder::fencing) setting. Once its
//! round won, the leader writes its **record** on every node (`token term
//! identity`, under the lock's key followed by `:quorlock-leader`), each
//! node writing it only while its lock key holds the leader's token; the
//! campaign returns once a quorum wrote it and the lock is still valid, and
//! otherwise gives the lock up and campaigns again.
//!
//! # Safety
//!
//! *One leader at a time.* A leadership is a lock: the mutex's argument
//! (`acquire/`, `lease.rs`) carries over unchanged, with its assumptions
//! (independent nodes, clock drift within the drift factor, keys kept for
//! their TTL on the nodes that count; restarts, failovers and clock steps
//! held back as `standing/` and `clock.rs` say). Two leaderships are never
//! both valid: each needed a quorum of nodes that set its key while it was
//! absent, two quorums share a node, and that node held one key at a time.
//! A leader paused past its lease finds its guard invalid when it resumes
//! ([`is_valid`](LockGuard::is_valid), [`lost`](LockGuard::lost),
//! [`run`](LockGuard::run)), whatever it last saw.
//!
//! *Terms rise.* A term is its lock's fencing token: higher than the token of
//! every lock on the name granted before it (the fencing argument in
//! `acquire/`: the granting quorum shares a node with every earlier one,
//! whose counter already passed the earlier tokens). A leader deposed while
//! paused holds a lower term than the leader after it, so a store that keeps
//! the highest term it saw refuses the deposed leader's writes (see
//! `examples/fenced_storage.rs`).
//!
//! *What [`leader`](Redlock::leader) says.* A node vouches for a token when
//! its lock key holds that token and its record starts with it; a leader is
//! named when a quorum of nodes vouch for one token. Two tokens never both
//! have a quorum of keys at once, so one answer never names two leaders. A
//! node writes a record only while the writer's key holds the writer's
//! token, so no node vouches for a leader with another's record. The two
//! reads on a node (key, record) are separate: where they disagree, the lock
//! changed hands between them, so there was a moment without a leader, and
//! that is the answer. Nobody is named when no token has a quorum and the
//! silent nodes could not make one (a change under way, or no leader); when
//! they could, the answer is an error ([`Error::Unavailable`]): too few
//! nodes answered to tell. It is a snapshot: the leader named may have lost
//! since, and only its own guard knows; what it says is for operators and
//! standbys, not a grant.
//!
//! *What [`observe`](Redlock::observe) says.* It asks `leader` at a steady
//! pace and reports each change: the end of the last leader's term
//! ([`LeaderEvent::Lost`]) before the next one's start
//! ([`LeaderEvent::Elected`]). Terms do not overlap, so a new term seen
//! where an old one was means the old one ended in between, and its loss is
//! reported even when no look fell between the two. A term that began and
//! ended between two looks is not seen.
//!
//! The record has no TTL (a leader may lead for weeks through
//! [`keep_alive`](LockGuard::keep_alive)): [`Leadership::resign`] deletes
//! it; a leader that died leaves it until the next leader's replaces it
//! (one small key per election name on each node, like the fencing
//! counter). A stale record vouches for nobody: its token is no longer
//! under the lock key.

use std::collections::VecDeque;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::BoxStream;

use crate::acquire::{Fencing, How, acquire_key};
use crate::answer::{Answer, NodeError};
use crate::engine::{Engine, To};
use crate::error::{Error, Result, show_resource};
use crate::guard::LockGuard;
use crate::quorum::{self, Unlocked, Votes};
use crate::request::{LEADER_SUFFIX, Request, suffixed, unmarked};
use crate::round::Until;

#[cfg(doc)]
use crate::Redlock;

/// The longest identity a leader may give, in bytes.
pub(crate) const MAX_IDENTITY_LEN: usize = 1024;

/// How long a campaign waits in the queue before it looks again: in effect,
/// until it leads or is dropped.
const CAMPAIGN_PATIENCE: Duration = Duration::from_secs(365 * 24 * 3600);

/// The caller's leadership of an election, from [`Redlock::campaign`]: a
/// held, fenced lock on the election's name, with its term and the identity
/// it published.
///
/// It dereferences to its [`LockGuard`]: [`lost`](LockGuard::lost),
/// [`keep_alive`](LockGuard::keep_alive), [`run`](LockGuard::run),
/// [`is_valid`](LockGuard::is_valid) and the rest work as for any lock.
/// Give it up with [`resign`](Self::resign); dropped, it releases the lock
/// in the background as a guard does, and its record stays until the next
/// leader's replaces it.
#[must_use = "dropping the leadership gives it up right away"]
pub struct Leadership {
    guard: LockGuard,
    engine: Arc<Engine>,
    record: Arc<[u8]>,
    identity: Arc<str>,
    term: u64,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("identity", &self.identity)
            .field("term", &self.term)
            .field("guard", &self.guard)
            .finish_non_exhaustive()
    }
}

impl Leadership {
    /// The term: the lock's fencing token, higher than every earlier
    /// leader's. Pass it to the stores the leader writes to, so that they
    /// refuse a deposed leader.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The identity this leader published.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The lock that holds the leadership.
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// Gives the leadership up: deletes its record, then releases the lock
    /// (the next caller in the queue leads next). As
    /// [`LockGuard::unlock`] tells, `Ok` says how many nodes confirmed.
    ///
    /// Cancel safety: dropped before it ends, the lock is still released in
    /// the background (the guard's drop); the record may stay, and vouches
    /// for nobody.
    pub async fn resign(self) -> Result<Unlocked> {
        let Leadership {
            guard,
            engine,
            record,
            ..
        } = self;
        write_record(&engine, &guard, &record, "".into()).await;
        guard.unlock().await
    }
}

impl Leadership {
    /// Gives the leadership up without releasing, as a leader that died
    /// would: the lock expires by its TTL (no standby leads before), a
    /// keeper stops, and the record stays (vouching for nobody once the
    /// lock is gone). See [`LockGuard::forget`].
    pub fn forget(self) {
        self.guard.forget();
    }
}

impl Deref for Leadership {
    type Target = LockGuard;

    fn deref(&self) -> &LockGuard {
        &self.guard
    }
}

impl DerefMut for Leadership {
    fn deref_mut(&mut self) -> &mut LockGuard {
        &mut self.guard
    }
}

/// Who leads an election, as the nodes tell it ([`Redlock::leader`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The identity the leader published.
    pub identity: String,
    /// Its term (its lock's fencing token).
    pub term: u64,
    /// How long a quorum of nodes still holds its lock, at the answer:
    /// without extension, it leads no longer than this.
    pub remaining: Duration,
}

impl Leader {
    /// Whether `other` is the same leadership (same term and identity).
    fn same(&self, other: &Leader) -> bool {
        self.term == other.term && self.identity == other.identity
    }
}

/// A change of leader, from [`Redlock::observe`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaderEvent {
    /// A leader leads (a new term, or the leader found at the first look).
    Elected(Leader),
    /// This leader no longer leads: its lease ended, it resigned, or a newer
    /// term began (as the leader was when last seen).
    Lost(Leader),
}

/// Why an identity cannot be published, if it cannot.
pub(crate) fn check_identity(identity: &str) -> Result<()> {
    let reason = if identity.is_empty() {
        "empty"
    } else if identity.len() > MAX_IDENTITY_LEN {
        "longer than 1024 bytes"
    } else {
        return Ok(());
    };
    Err(Error::InvalidResource {
        reason: format!("the leader's identity is {reason}"),
    })
}

/// Campaigns until the caller leads the election `name`: see
/// [`Redlock::campaign`].
pub(crate) async fn campaign(
    engine: &Arc<Engine>,
    name: &[u8],
    identity: &str,
    ttl: Duration,
) -> Result<Leadership> {
    check_identity(identity)?;
    let key = engine.key(name)?;
    let record = suffixed(&key, LEADER_SUFFIX);
    let identity: Arc<str> = identity.into();
    loop {
        let how = How::waiting(CAMPAIGN_PATIENCE, Fencing::Always);
        let guard = acquire_key(engine, key.clone(), name, ttl, how).await?;
        // Fenced, so a won lock carries its token.
        let Some(term) = guard.fencing_token() else {
            return Err(Error::Misconfigured {
                reason: "a leader's lock came without a fencing token".into(),
            });
        };
        let value = format!("{} {term} {identity}", guard.lock_id().token);
        if write_record(engine, &guard, &record, value.into()).await && guard.is_valid() {
            return Ok(Leadership {
                guard,
                engine: engine.clone(),
                record,
                identity,
                term,
            });
        }
        tracing::warn!(
            election = %show_resource(name),
            term,
            "too few nodes wrote the leader's record: giving the term up and campaigning again"
        );
        write_record(engine, &guard, &record, "".into()).await;
        let _ = guard.unlock().await;
        // Nodes that refuse the record script would otherwise make this a
        // loop of rounds: the retry delay paces it.
        tokio::time::sleep(engine.config.retry_delay).await;
    }
}

/// Writes the leader's record `value` (empty: deletes it) where `guard`'s
/// key holds its token; whether a quorum of nodes did.
async fn write_record(
    engine: &Engine,
    guard: &LockGuard,
    record: &Arc<[u8]>,
    value: Arc<str>,
) -> bool {
    let request = Request::Record {
        lock: guard.lock_id().clone(),
        record: record.clone(),
        value,
    };
    let mut round = engine.ask(&request, To::All);
    let answered = tokio::time::timeout(engine.config.node_timeout, round.collect(Until::Decided));
    if answered.await.is_err() {
        return false;
    }
    round.votes.has_quorum()
}

/// Who leads the election `name`: see [`Redlock::leader`].
pub(crate) async fn leader(engine: &Engine, name: &[u8]) -> Result<Option<Leader>> {
    let key = engine.key(name)?;
    let record = suffixed(&key, LEADER_SUFFIX);
    // Nodes not checked in time are read all the same.
    let _ = (engine.first_contact(Some(Instant::now() + engine.config.connect_timeout))).await;
    let (held, records) = futures::join!(read(engine, key), read(engine, record));
    tally(&held, &records).map_err(|(votes, failed)| Error::Unavailable {
        resource: show_resource(name),
        votes,
        attempts: 1,
        not_counted: Box::default(),
        source: failed.last().cloned(),
        failed: failed.into_boxed_slice(),
    })
}

/// Each node's answer to an inspection of `key`, in node order (`None`:
/// no answer within the node timeout: a node frozen or far away is silent,
/// and does not hold up the answer, which `observe` asks for often).
async fn read(engine: &Engine, key: Arc<[u8]>) -> Vec<Option<Answer>> {
    let mut round = engine.ask(&Request::Inspect { key }, To::All);
    let all = round.collect(Until::All);
    let _ = tokio::time::timeout(engine.config.node_timeout, all).await;
    round.take_answers()
}

/// A record as a node holds it: `token term identity`.
#[derive(Debug, PartialEq)]
struct Record<'a> {
    token: &'a str,
    term: u64,
    identity: &'a str,
}

impl<'a> Record<'a> {
    fn parse(value: &'a str) -> Option<Self> {
        let mut parts = value.splitn(3, ' ');
        let (token, term, identity) = (parts.next()?, parts.next()?, parts.next()?);
        Some(Record {
            token,
            term: term.parse().ok()?,
            identity,
        })
    }
}

/// What the nodes' lock keys (`held`) and records (`records`) say: the
/// leader a quorum vouches for, or nobody when no quorum can; otherwise
/// the votes and the nodes' errors (too few answered to tell).
fn tally(
    held: &[Option<Answer>],
    records: &[Option<Answer>],
) -> std::result::Result<Option<Leader>, (Votes, Vec<NodeError>)> {
    let quorum = quorum::quorum(held.len());
    let mut votes = Votes::new(held.len());
    let mut failed = Vec::new();
    // Each vouching node's record and its key's PTTL.
    let mut vouched: Vec<(Record<'_>, i64)> = Vec::new();
    let mut answered = 0;
    for (key, record) in held.iter().zip(records) {
        let (Some(key), Some(record)) = (key, record) else {
            continue;
        };
        votes.record(key);
        match (key, record) {
            (Answer::Failed(err) | Answer::Unsent(err), _)
            | (_, Answer::Failed(err) | Answer::Unsent(err)) => failed.push(err.clone()),
            (Answer::Holds { token, pttl_ms }, Answer::Holds { token: value, .. }) => {
                answered += 1;
                if let Some(record) = Record::parse(value)
                    && record.token == unmarked(token)
                {
                    vouched.push((record, *pttl_ms));
                }
            }
            _ => answered += 1,
        }
    }
    // The token most nodes vouch for (ties: any; neither has a quorum).
    let best = (vouched.iter()).max_by_key(|(record, _)| {
        (vouched.iter())
            .filter(|(other, _)| other.token == record.token)
            .count()
    });
    let Some((record, _)) = best else {
        return no_leader(answered, 0, quorum, (votes, failed));
    };
    let mut pttls: Vec<i64> = (vouched.iter())
        .filter(|(other, _)| other.token == record.token)
        .map(|(_, pttl)| *pttl)
        .collect();
    if pttls.len() < quorum {
        return no_leader(answered, pttls.len(), quorum, (votes, failed));
    }
    pttls.sort_unstable_by(|a, b| b.cmp(a));
    let remaining = pttls.get(quorum - 1).copied().unwrap_or(0).max(0);
    Ok(Some(Leader {
        identity: record.identity.to_owned(),
        term: record.term,
        remaining: Duration::from_millis(remaining.unsigned_abs()),
    }))
}

/// Nobody leads, when the nodes that did not answer (of those that did,
/// `answered`) could not make the `best` token's vouches a quorum; else
/// the `unknown` error's parts.
fn no_leader(
    answered: usize,
    best: usize,
    quorum: usize,
    unknown: (Votes, Vec<NodeError>),
) -> std::result::Result<Option<Leader>, (Votes, Vec<NodeError>)> {
    let silent = unknown.0.nodes.saturating_sub(answered);
    if best + silent < quorum {
        Ok(None)
    } else {
        Err(unknown)
    }
}

/// The stream behind [`Redlock::observe`]: `leader` every `every`, each
/// change as events.
pub(crate) fn observe(
    engine: Arc<Engine>,
    name: Vec<u8>,
    every: Duration,
) -> BoxStream<'static, Result<LeaderEvent>> {
    let watch = Watch {
        last: None,
        pending: VecDeque::new(),
        looked: false,
    };
    Box::pin(futures::stream::unfold(
        (engine, name, watch),
        move |(engine, name, mut watch)| async move {
            loop {
                if let Some(event) = watch.pending.pop_front() {
                    return Some((event, (engine, name, watch)));
                }
                if watch.looked {
                    tokio::time::sleep(every).await;
                }
                watch.looked = true;
                match leader(&engine, &name).await {
                    Ok(now) => watch.see(now),
                    Err(err) => watch.pending.push_back(Err(err)),
                }
            }
        },
    ))
}

/// What an observer saw last, and the events it has yet to hand out.
struct Watch {
    last: Option<Leader>,
    pending: VecDeque<Result<LeaderEvent>>,
    looked: bool,
}

impl Watch {
    /// A look that found `now` leading: the events of the change, if any.
    fn see(&mut self, now: Option<Leader>) {
        let same = match (&self.last, &now) {
            (Some(last), Some(now)) => last.same(now),
            (None, None) => true,
            _ => false,
        };
        if !same {
            if let Some(last) = self.last.take() {
                self.pending.push_back(Ok(LeaderEvent::Lost(last)));
            }
            if let Some(now) = &now {
                self.pending
                    .push_back(Ok(LeaderEvent::Elected(now.clone())));
            }
        }
        self.last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answer::NodeErrorKind;

    fn holds(value: &str) -> Option<Answer> {
        Some(Answer::Holds {
            token: value.to_owned(),
            pttl_ms: 900,
        })
    }

    fn absent() -> Option<Answer> {
        Some(Answer::Refused(None))
    }

    fn failed() -> Option<Answer> {
        let kind = NodeErrorKind::Timeout(Duration::from_millis(50));
        Some(Answer::Failed(NodeError::new("n:1".into(), kind)))
    }

    #[test]
    fn a_record_is_token_term_identity() {
        let record = Record::parse("qabc 42 host a:1").expect("a record");
        assert_eq!(
            record,
            Record {
                token: "qabc",
                term: 42,
                identity: "host a:1"
            }
        );
        assert_eq!(Record::parse("qabc x id"), None);
        assert_eq!(Record::parse("qabc 42"), None);
    }

    #[test]
    fn a_quorum_that_vouches_names_the_leader() {
        // A token as the client makes it, marked on one node (waiters).
        let token = format!("q{}", "0123456789abcdef".repeat(2));
        let record = format!("{token} 7 one");
        let held = [holds(&format!("{token}+")), holds(&token), absent()];
        let records = [holds(&record), holds(&record), absent()];
        let leader = tally(&held, &records).ok().flatten().expect("a leader");
        assert_eq!((leader.identity.as_str(), leader.term), ("one", 7));
    }

    #[test]
    fn a_stale_record_vouches_for_nobody() {
        // The key changed hands; the old leader's record is still there.
        let held = [holds("qb"), holds("qb"), holds("qb")];
        let records = [holds("qa 7 one"), holds("qa 7 one"), holds("qb 8 two")];
        assert_eq!(tally(&held, &records).ok(), Some(None));
    }

    #[test]
    fn silent_nodes_that_could_make_a_quorum_leave_it_unknown() {
        let held = [holds("qa"), failed(), failed()];
        let records = [holds("qa 7 one"), failed(), failed()];
        assert!(tally(&held, &records).is_err());
        let held = [absent(), absent(), failed()];
        let records = [absent(), absent(), failed()];
        assert_eq!(tally(&held, &records).ok(), Some(None));
    }

    fn leader(term: u64) -> Leader {
        Leader {
            identity: format!("id{term}"),
            term,
            remaining: Duration::from_millis(term),
        }
    }

    fn events(watch: &mut Watch) -> Vec<LeaderEvent> {
        watch
            .pending
            .drain(..)
            .filter_map(|event| event.ok())
            .collect()
    }

    #[test]
    fn a_new_term_is_told_after_the_loss_of_the_last() {
        let mut watch = Watch {
            last: None,
            pending: VecDeque::new(),
            looked: true,
        };
        watch.see(None);
        assert_eq!(events(&mut watch), []);
        watch.see(Some(leader(1)));
        assert_eq!(events(&mut watch), [LeaderEvent::Elected(leader(1))]);
        let mut later = leader(1);
        later.remaining = Duration::ZERO;
        watch.see(Some(later));
        assert_eq!(events(&mut watch), [], "the same term, later");
        watch.see(Some(leader(3)));
        let mut last = leader(1);
        last.remaining = Duration::ZERO;
        assert_eq!(
            events(&mut watch),
            [LeaderEvent::Lost(last), LeaderEvent::Elected(leader(3))]
        );
        watch.see(None);
        assert_eq!(events(&mut watch), [LeaderEvent::Lost(leader(3))]);
    }
}

//! One round: a call to every node in parallel, tallied into [`Votes`] as the
//! answers arrive, ended as soon as the caller's condition holds.
//!
//! Calls still under way when a round ends are not dropped (the `redis` crate
//! may skip a queued request whose future was dropped): they finish in the
//! background, so every node receives its request.

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};

use crate::background::Background;
use crate::error::NodeError;
use crate::quorum::Votes;
use crate::standing::Standings;

/// One node's answer in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// The round ended before this node answered.
    Pending,
    /// The node did what was asked (set, extended or deleted our key).
    Granted,
    /// The node answered no.
    Refused,
    /// An error or no answer within the per-node timeout.
    Failed,
}

/// When a round stops waiting for answers.
#[derive(Debug)]
pub(crate) enum Until {
    /// As soon as the outcome is known: a quorum granted, or no longer can.
    Decided,
    /// Once every node marked `true` answered (or timed out).
    Answered(Vec<bool>),
    /// Once a quorum granted, or every node answered (or timed out).
    QuorumOrAll,
    /// Once every node answered (or timed out).
    All,
}

/// A node's answer to one call that reached it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reply {
    /// Yes, carrying the node's fencing counter where the call returns one.
    Granted(Option<u64>),
    /// No.
    Refused,
    /// No: the lock is not free for this waiter, which is queued under
    /// this ticket.
    Queued(u64),
}

impl From<bool> for Reply {
    fn from(granted: bool) -> Self {
        if granted {
            Reply::Granted(None)
        } else {
            Reply::Refused
        }
    }
}

type Call = BoxFuture<'static, (usize, Result<Reply, NodeError>)>;

/// A round under way or ended. Dropping it leaves its remaining calls to
/// finish in the background.
pub(crate) struct Round {
    /// The tally so far.
    pub(crate) votes: Votes,
    /// Each node's answer so far, by index.
    pub(crate) answers: Vec<Answer>,
    /// The number each node returned, by index: its fencing counter for a
    /// grant, the waiter's ticket for a queued refusal.
    numbers: Vec<Option<u64>>,
    /// The last error a node answered with, if any.
    pub(crate) last_error: Option<NodeError>,
    pending: FuturesUnordered<Call>,
    /// Where calls still under way go when the round is dropped.
    background: Background,
    /// Whose grants count toward the quorum, read as each grant arrives;
    /// `None`: all count (releases).
    standings: Option<Arc<Standings>>,
    /// The grants that did not count: each node, with why (empty, without
    /// allocating, in the usual case).
    not_counted: Vec<(usize, NodeError)>,
}

impl Round {
    /// Starts one call per node (in node order); they run as the round is
    /// awaited, and in `background` after the round is dropped.
    pub(crate) fn start<Fut, R>(
        calls: impl ExactSizeIterator<Item = Fut>,
        background: &Background,
    ) -> Round
    where
        Fut: Future<Output = Result<R, NodeError>> + Send + 'static,
        R: Into<Reply>,
    {
        let nodes = calls.len();
        let pending = calls
            .enumerate()
            .map(|(index, call)| {
                call.map(move |answer| (index, answer.map(Into::into)))
                    .boxed()
            })
            .collect();
        Round {
            votes: Votes::new(nodes),
            answers: vec![Answer::Pending; nodes],
            numbers: vec![None; nodes],
            last_error: None,
            pending,
            background: background.clone(),
            standings: None,
            not_counted: Vec::new(),
        }
    }

    /// Takes the calls still under way, leaving the round without any (so
    /// that its drop leaves nothing to the background): for a caller that
    /// finishes them itself.
    pub(crate) fn take_pending(&mut self) -> impl Future<Output = ()> + Send + 'static {
        std::mem::take(&mut self.pending).for_each(|_| async {})
    }

    /// Takes the calls still under way, for a caller that needs every
    /// node's answer after the round ended: the returned future finishes
    /// them and gives each node's final answer (a grant that does not count
    /// is still `Granted`).
    pub(crate) fn finish_later(&mut self) -> impl Future<Output = Vec<Answer>> + Send + 'static {
        let mut answers = self.answers.clone();
        let mut pending = std::mem::take(&mut self.pending);
        async move {
            while let Some((index, answer)) = pending.next().await {
                answers[index] = match answer {
                    Ok(Reply::Granted(_)) => Answer::Granted,
                    Ok(Reply::Refused | Reply::Queued(_)) => Answer::Refused,
                    Err(_) => Answer::Failed,
                };
            }
            answers
        }
    }

    /// Counts a grant only if the node's vote counts when the grant arrives
    /// (see `standing.rs`). A grant that does not is a failed vote with its
    /// error, though its answer stays `Granted` so that a release reaches it.
    /// Reading the standing on arrival, not at the start, matters: a call
    /// may connect (and check the node) during the round.
    pub(crate) fn counting(mut self, standings: &Arc<Standings>) -> Round {
        self.standings = Some(standings.clone());
        self
    }

    /// Tallies answers until `until` holds or every node has answered.
    pub(crate) async fn collect(&mut self, until: Until) {
        while !self.is_over(&until) {
            let Some((index, answer)) = self.pending.next().await else {
                return;
            };
            self.record(index, answer);
        }
    }

    fn record(&mut self, index: usize, answer: Result<Reply, NodeError>) {
        match answer {
            Ok(Reply::Granted(counter)) => {
                match self.standings.as_ref().map(|s| s.vote_counts(index)) {
                    None | Some(Ok(())) => self.votes.record(Some(true)),
                    Some(Err(not_counted)) => {
                        self.votes.record(None);
                        self.last_error = Some(not_counted.clone());
                        self.not_counted.push((index, not_counted));
                    }
                }
                self.answers[index] = Answer::Granted;
                self.numbers[index] = counter;
            }
            Ok(Reply::Refused) => {
                self.votes.record(Some(false));
                self.answers[index] = Answer::Refused;
            }
            Ok(Reply::Queued(ticket)) => {
                self.votes.record(Some(false));
                self.answers[index] = Answer::Refused;
                self.numbers[index] = Some(ticket);
            }
            Err(err) => {
                tracing::trace!(error = %err, "node failed");
                self.votes.record(None);
                self.answers[index] = Answer::Failed;
                self.last_error = Some(err);
            }
        }
    }

    /// Takes the grants that did not count, each with why, for an error.
    pub(crate) fn take_not_counted(&mut self) -> Box<[NodeError]> {
        std::mem::take(&mut self.not_counted)
            .into_iter()
            .map(|(_, err)| err)
            .collect()
    }

    /// The highest fencing counter among the granting nodes whose grant counts.
    pub(crate) fn highest_counter(&self) -> Option<u64> {
        self.numbers
            .iter()
            .enumerate()
            .filter(|(index, _)| {
                self.answers[*index] == Answer::Granted
                    && !self.not_counted.iter().any(|(node, _)| node == index)
            })
            .filter_map(|(_, counter)| *counter)
            .max()
    }

    /// The tickets that the nodes which queued the waiter gave it: the
    /// highest, and whether they all gave that one.
    pub(crate) fn tickets(&self) -> (Option<u64>, bool) {
        let mut highest: Option<u64> = None;
        let mut agree = true;
        for (answer, number) in self.answers.iter().zip(&self.numbers) {
            if let (Answer::Refused, Some(ticket)) = (answer, *number) {
                agree &= highest.is_none_or(|high| high == ticket);
                highest = Some(highest.map_or(ticket, |high| high.max(ticket)));
            }
        }
        (highest, agree)
    }

    fn is_over(&self, until: &Until) -> bool {
        match until {
            Until::Decided => self.votes.is_decided(),
            Until::Answered(nodes) => self
                .answers
                .iter()
                .zip(nodes)
                .all(|(answer, &wait)| !wait || *answer != Answer::Pending),
            Until::QuorumOrAll => self.votes.has_quorum() || self.pending.is_empty(),
            Until::All => self.pending.is_empty(),
        }
    }
}

impl std::fmt::Debug for Round {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Round")
            .field("votes", &self.votes)
            .field("answers", &self.answers)
            .field("pending", &self.pending.len())
            .finish()
    }
}

impl Drop for Round {
    fn drop(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let pending = self.take_pending();
        self.background.spawn(pending);
    }
}

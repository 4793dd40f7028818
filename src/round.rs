//! One round: a call to every node in parallel, each ending in one
//! [`Answer`], tallied into [`Votes`] as the answers arrive, ended as soon as
//! the caller's condition ([`Until`]) holds.
//!
//! Calls still under way when a round ends are not dropped (the `redis` crate
//! may skip a queued request whose future was dropped): they finish in the
//! background, so every node receives its request. A vote's or a read's call
//! is bounded by its own timer; a release's is not (see `Engine::release`),
//! and the round gives it a bound in the background: its `linger`.

use std::future::{Future, poll_fn};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;

use crate::answer::{Answer, NodeError, NotCounted};
use crate::changes::Holders;
use crate::meter;
use crate::quorum::Votes;
use crate::request::Reached;
use crate::standing::Standings;
use crate::tasks::Background;

/// Some of a client's nodes, by index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeSet(Box<[bool]>);

impl NodeSet {
    /// The nodes whose answer so far (`None`: none yet) passes `test`.
    pub(crate) fn of(answers: &[Option<Answer>], test: impl Fn(Option<&Answer>) -> bool) -> Self {
        NodeSet(answers.iter().map(|answer| test(answer.as_ref())).collect())
    }

    /// Node `index` alone, of `nodes` nodes.
    pub(crate) fn only(index: usize, nodes: usize) -> Self {
        NodeSet((0..nodes).map(|at| at == index).collect())
    }

    /// Whether node `index` is in the set.
    pub(crate) fn contains(&self, index: usize) -> bool {
        self.0.get(index).copied().unwrap_or(false)
    }

    /// How many nodes are in the set.
    pub(crate) fn len(&self) -> usize {
        self.0.iter().filter(|member| **member).count()
    }

    /// Whether no node is in the set.
    pub(crate) fn is_empty(&self) -> bool {
        !self.0.contains(&true)
    }
}

/// When a round stops waiting for answers.
#[derive(Debug)]
pub(crate) enum Until {
    /// As soon as the outcome is known: a quorum granted, or no longer can.
    Decided,
    /// Once every node in the set answered (or timed out).
    Answered(NodeSet),
    /// Once a quorum granted, or every node answered (or timed out).
    QuorumOrAll,
    /// Once every node answered (or timed out).
    All,
}

/// The calls of a round still under way, by node index (`None`: answered).
///
/// A round has a handful of calls, so each wake polls every one still under
/// way, as `futures::join_all` does for small sets, instead of giving each
/// call a waker of its own (`FuturesUnordered`: one more allocation per call,
/// two per node per lock + unlock cycle).
struct Calls {
    slots: PerNode<Option<BoxFuture<'static, Answer>>>,
    left: usize,
}

/// A round's storage per node, in node order: inline for one node (the
/// single-node lock allocates nothing for it per round), else boxed.
enum PerNode<T> {
    One([T; 1]),
    Many(Box<[T]>),
}

impl<T> PerNode<T> {
    /// The `items`, one per node.
    fn of(mut items: impl ExactSizeIterator<Item = T>) -> Self {
        match (items.len(), items.next()) {
            (1, Some(item)) => PerNode::One([item]),
            (_, first) => PerNode::Many(first.into_iter().chain(items).collect()),
        }
    }

    /// None, for a round left without it.
    fn none() -> Self {
        PerNode::Many(Box::default())
    }

    /// The items, as a vector (leaving none).
    fn take(&mut self) -> Vec<T> {
        match std::mem::replace(self, PerNode::none()) {
            PerNode::One(items) => items.into(),
            PerNode::Many(items) => items.into_vec(),
        }
    }
}

impl<T> std::ops::Deref for PerNode<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            PerNode::One(items) => items,
            PerNode::Many(items) => items,
        }
    }
}

impl<T> std::ops::DerefMut for PerNode<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            PerNode::One(items) => items,
            PerNode::Many(items) => items,
        }
    }
}

impl Calls {
    /// Polls the call to node `index`, if still under way: its answer, if it came.
    fn poll_one(&mut self, index: usize, cx: &mut Context<'_>) -> Option<Answer> {
        let call = self.slots.get_mut(index)?.as_mut()?;
        let Poll::Ready(answer) = call.as_mut().poll(cx) else {
            return None;
        };
        self.slots[index] = None;
        self.left -= 1;
        Some(answer)
    }

    fn is_empty(&self) -> bool {
        self.left == 0
    }

    /// Whether the call to node `index` is still under way.
    fn is_under_way(&self, index: usize) -> bool {
        self.slots.get(index).is_some_and(Option::is_some)
    }

    /// Finishes every call, handing each answer to `on_answer`.
    async fn finish(mut self, mut on_answer: impl FnMut(usize, Answer)) {
        poll_fn(|cx| {
            for index in 0..self.slots.len() {
                if let Some(answer) = self.poll_one(index, cx) {
                    on_answer(index, answer);
                }
            }
            if self.is_empty() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }
}

/// A round under way or ended. Dropping it leaves its remaining calls to
/// finish in the background.
pub(crate) struct Round {
    /// The tally so far.
    pub(crate) votes: Votes,
    /// Each node's answer so far, by index (`None`: not yet). A grant that
    /// did not count is still a grant here, so that a release reaches it.
    answers: PerNode<Option<Answer>>,
    /// The last error a node answered with, if any.
    last_error: Option<NodeError>,
    pending: Calls,
    /// Where calls still under way go when the round is dropped.
    background: Background,
    /// How long calls without a timer of their own (a release's) may go on
    /// in the background; `None`: every call is bounded by itself.
    linger: Option<Duration>,
    /// Whose grants count toward the quorum, read as each grant arrives;
    /// `None`: all count (releases, reads).
    standings: Option<Arc<Standings>>,
    /// The grants that did not count: each node, with why (empty, without
    /// allocating, in the usual case).
    not_counted: Vec<(usize, NodeError)>,
    /// The nodes that failed (empty, without allocating, in the usual case).
    failed: Vec<NodeError>,
}

impl Round {
    /// Starts one call per node (in node order); they run as the round is
    /// awaited, and in `background` after the round is dropped. With
    /// `standings`, a grant counts only if the node's vote counts when the
    /// grant arrives (see `standing/`); one that does not is a failed vote
    /// with its error. Reading the standing on arrival, not at the start,
    /// matters: a call may connect (and check the node) during the round.
    pub(crate) fn over(
        calls: impl ExactSizeIterator<Item = BoxFuture<'static, Answer>>,
        background: &Background,
        standings: Option<&Arc<Standings>>,
        linger: Option<Duration>,
    ) -> Round {
        let nodes = calls.len();
        let pending = Calls {
            slots: PerNode::of(calls.map(Some)),
            left: nodes,
        };
        Round {
            votes: Votes::new(nodes),
            answers: PerNode::of((0..nodes).map(|_| None)),
            last_error: None,
            pending,
            background: background.clone(),
            linger,
            standings: standings.cloned(),
            not_counted: Vec::new(),
            failed: Vec::new(),
        }
    }

    /// Takes each node's answer so far, by index (`None`: not yet), for a
    /// round that is over.
    pub(crate) fn take_answers(&mut self) -> Vec<Option<Answer>> {
        self.answers.take()
    }

    /// The nodes whose answer so far passes `test`.
    pub(crate) fn nodes(&self, test: impl Fn(Option<&Answer>) -> bool) -> NodeSet {
        NodeSet::of(&self.answers, test)
    }

    /// The tally and the last node error, for an error or an outcome.
    pub(crate) fn tally(&mut self) -> (Votes, Option<NodeError>) {
        (self.votes, self.last_error.take())
    }

    /// Takes the calls still under way, leaving the round without any (so
    /// that its drop leaves nothing to the background): for a caller that
    /// finishes them itself.
    pub(crate) fn take_pending(&mut self) -> impl Future<Output = ()> + Send + 'static {
        self.take_calls().finish(|_, _| {})
    }

    fn take_calls(&mut self) -> Calls {
        std::mem::replace(
            &mut self.pending,
            Calls {
                slots: PerNode::none(),
                left: 0,
            },
        )
    }

    /// Takes the calls still under way, for a caller that needs every
    /// node's answer after the round ended: the returned future finishes
    /// them and gives each node's final answer (a grant that does not count
    /// is still a grant).
    pub(crate) fn finish_later(
        &mut self,
    ) -> impl Future<Output = Vec<Option<Answer>>> + Send + 'static {
        let mut answers = self.answers.to_vec();
        let pending = self.take_calls();
        async move {
            pending
                .finish(|index, answer| answers[index] = Some(answer))
                .await;
            answers
        }
    }

    /// Tallies answers until `until` holds or every node has answered.
    /// Answers that arrive together are all recorded, also those past the
    /// point where `until` came to hold.
    pub(crate) async fn collect(&mut self, until: Until) {
        poll_fn(|cx| {
            if self.is_over(&until) {
                return Poll::Ready(());
            }
            // Every call is polled, even past the decision: a call's first
            // poll sends its request, which must not wait for the
            // background (a release sent meanwhile would overtake it).
            for index in 0..self.answers.len() {
                if let Some(answer) = self.pending.poll_one(index, cx) {
                    self.record(index, answer);
                }
            }
            if self.is_over(&until) || self.pending.is_empty() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }

    fn record(&mut self, index: usize, answer: Answer) {
        let counted = match &answer {
            Answer::Granted(_) => self.standings.as_ref().map(|s| s.vote_counts(index)),
            // A grant the node's clock reading kept from counting (see
            // `clock.rs`).
            Answer::Failed(err)
                if err
                    .not_counted()
                    .is_some_and(|reason| !matches!(reason, NotCounted::Unresponsive { .. })) =>
            {
                Some(Err(err.clone()))
            }
            _ => None,
        };
        match (counted, &answer) {
            (Some(Err(not_counted)), _) => {
                if let Some(reason) = not_counted.not_counted() {
                    meter::not_counted(reason);
                }
                self.votes.record(&Answer::Failed(not_counted.clone()));
                self.last_error = Some(not_counted.clone());
                self.not_counted.push((index, not_counted));
            }
            (_, Answer::Failed(err) | Answer::Unsent(err)) => {
                if let Some(reason) = err.not_counted() {
                    meter::not_counted(reason);
                }
                tracing::trace!(error = %err, "node failed");
                self.votes.record(&answer);
                self.last_error = Some(err.clone());
                self.failed.push(err.clone());
            }
            _ => self.votes.record(&answer),
        }
        self.answers[index] = Some(answer);
    }

    /// Stops waiting for the calls still under way: each such node's answer
    /// is the error `timed_out(index)` gives, and its call finishes in the
    /// background.
    pub(crate) fn time_out(&mut self, timed_out: impl Fn(usize) -> NodeError) {
        let late: Vec<usize> = (0..self.answers.len())
            .filter(|&index| self.pending.is_under_way(index))
            .collect();
        for index in late {
            self.record(index, Answer::Failed(timed_out(index)));
        }
        self.leave_to_background();
    }

    /// Hands the calls still under way to the background (bounded by the
    /// linger where they have no timer of their own).
    fn leave_to_background(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let pending = self.take_pending();
        match self.linger {
            Some(linger) => self.background.spawn(tokio::time::timeout(linger, pending)),
            None => self.background.spawn(pending),
        };
    }

    /// Takes the nodes that failed, each with its error, for an error.
    pub(crate) fn take_failed(&mut self) -> Box<[NodeError]> {
        std::mem::take(&mut self.failed).into_boxed_slice()
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
        self.counters().map(|(_, counter)| counter).max()
    }

    /// The nodes whose counted grant returned fencing counter `counter`.
    pub(crate) fn counted_at(&self, counter: u64) -> NodeSet {
        let mut at = vec![false; self.answers.len()];
        for (index, _) in self.counters().filter(|(_, c)| *c == counter) {
            at[index] = true;
        }
        NodeSet(at.into())
    }

    /// The nodes that the round's calls reached so far (see [`Reached`]):
    /// a node's yes or no, or a call never sent; not a failure (a timeout
    /// may leave a vote gathering).
    pub(crate) fn reached(&self) -> Reached {
        Reached::of(
            (self.answers.iter().enumerate())
                .filter(|(_, answer)| !matches!(answer, None | Some(Answer::Failed(_))))
                .map(|(index, _)| index),
        )
    }

    /// The nodes whose grant counts: the holders of a won round.
    pub(crate) fn counted_grants(&self) -> Holders {
        let counted = (self.answers.iter().enumerate())
            .filter(|(index, _)| !self.not_counted.iter().any(|(node, _)| node == index))
            .filter(|(_, answer)| answer.as_ref().is_some_and(Answer::is_granted))
            .map(|(index, _)| index);
        Holders::of(counted, self.answers.len())
    }

    /// Each node whose grant counts and carries a fencing counter, with it.
    fn counters(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        (self.answers.iter().enumerate())
            .filter(|(index, _)| !self.not_counted.iter().any(|(node, _)| node == index))
            .filter_map(|(index, answer)| match answer {
                Some(Answer::Granted(Some(counter))) => Some((index, *counter)),
                _ => None,
            })
    }

    /// The tickets that the nodes which queued the waiter gave it: the
    /// highest, and whether they all gave that one.
    pub(crate) fn tickets(&self) -> (Option<u64>, bool) {
        let mut highest: Option<u64> = None;
        let mut agree = true;
        for answer in self.answers.iter() {
            if let Some(Answer::Refused(Some(ticket))) = answer {
                agree &= highest.is_none_or(|high| high == *ticket);
                highest = Some(highest.map_or(*ticket, |high| high.max(*ticket)));
            }
        }
        (highest, agree)
    }

    /// Logs the round's tally (`debug!`), as `what` (`"acquire round"`, …).
    pub(crate) fn log(&self, what: &'static str) {
        let votes = &self.votes;
        tracing::debug!(
            granted = votes.granted,
            refused = votes.refused,
            failed = votes.failed,
            quorum = votes.quorum,
            "{what}"
        );
    }

    fn is_over(&self, until: &Until) -> bool {
        match until {
            Until::Decided => self.votes.is_decided(),
            Until::Answered(nodes) => self
                .answers
                .iter()
                .enumerate()
                .all(|(index, answer)| answer.is_some() || !nodes.contains(index)),
            Until::QuorumOrAll => self.votes.has_quorum() || self.pending.is_empty(),
            Until::All => self.pending.is_empty(),
        }
    }
}

impl std::fmt::Debug for Round {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Round")
            .field("votes", &self.votes)
            .field("answers", &&*self.answers)
            .field("pending", &self.pending.left)
            .finish()
    }
}

impl Drop for Round {
    fn drop(&mut self) {
        self.leave_to_background();
    }
}

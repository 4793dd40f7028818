//! Where a batch's votes wait for their replies ([`Landing`]): one
//! allocation per batch, instead of a channel per vote.
//!
//! A batch's votes join its landing while it gathers; its leader takes them
//! to send ([`Delivery`]), and hands each vote its reply there, where the
//! vote's caller waits. A channel per vote (`oneshot`) costs an allocation
//! and its atomic handshake per vote; worse, a batch's votes land together
//! and their tasks run one after the other, so those allocations come and
//! go in bursts larger than glibc's per-thread cache (7 chunks per size),
//! each burst paying the allocator's slow path (docs/benchmarks.md,
//! "session 53").
//!
//! - A vote's place is the order in which it joined; its reply is put
//!   there, in that order, when the batch lands, and its caller's waker is
//!   woken then.
//! - A delivery that ends without replies (its batch dropped before it
//!   landed: a leader's call that went away outside a tokio runtime, or a
//!   runtime that shut down) ends the landing with none: every vote that
//!   waits gets `None` at once, and none waits for a reply that cannot
//!   come. Dropping a [`Delivery`] is enough, even one never used: the
//!   future of a flight that was never polled drops it too.
//!
//! Cancel safety: a caller that stops waiting leaves its reply to be
//! dropped with the landing; nothing else changes.

use std::future::{Future, poll_fn};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use crate::tasks;

/// A batch's votes `V` while it gathers, then their replies `R`.
pub(crate) struct Landing<V, R> {
    state: Mutex<State<V, R>>,
}

struct State<V, R> {
    /// The votes that joined, until the delivery takes them.
    votes: Vec<V>,
    /// Each vote's reply and waiting caller, by its place.
    slots: Vec<Slot<R>>,
    /// Whether the batch landed, or will not: no reply comes any more.
    over: bool,
}

struct Slot<R> {
    reply: Option<R>,
    waker: Option<Waker>,
}

impl<V, R> Landing<V, R> {
    /// An empty landing, with room for `capacity` votes before it grows.
    pub(crate) fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Landing {
            state: Mutex::new(State {
                votes: Vec::with_capacity(capacity),
                slots: Vec::with_capacity(capacity),
                over: false,
            }),
        })
    }

    /// Adds `vote`; its place, to wait for its reply at.
    pub(crate) fn join(&self, vote: V) -> usize {
        let mut state = tasks::lock(&self.state);
        state.votes.push(vote);
        state.slots.push(Slot {
            reply: None,
            waker: None,
        });
        state.slots.len() - 1
    }

    /// The reply at `place`, once the batch landed; `None` if the batch
    /// ended without replies (or without one for this place).
    ///
    /// Cancel safety: cancel safe (it only waits; the reply stays in its
    /// place, dropped with the landing).
    pub(crate) fn reply(&self, place: usize) -> impl Future<Output = Option<R>> + '_ {
        poll_fn(move |cx| self.poll_reply(place, cx))
    }

    fn poll_reply(&self, place: usize, cx: &mut Context<'_>) -> Poll<Option<R>> {
        let mut state = tasks::lock(&self.state);
        let over = state.over;
        let Some(slot) = state.slots.get_mut(place) else {
            return Poll::Ready(None);
        };
        if let Some(reply) = slot.reply.take() {
            return Poll::Ready(Some(reply));
        }
        if over {
            return Poll::Ready(None);
        }
        match &mut slot.waker {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            waker => *waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

/// A batch's landing, as its leader (or the task that flies the batch for
/// it) holds it: it takes the votes and hands out the replies. Dropped
/// before it did, it ends the landing without replies (see the module
/// docs).
pub(crate) struct Delivery<V, R>(Arc<Landing<V, R>>);

impl<V, R> Delivery<V, R> {
    /// The delivery of `landing`, which no vote joins any more.
    pub(crate) fn of(landing: Arc<Landing<V, R>>) -> Self {
        Delivery(landing)
    }

    /// The votes that joined, in their places' order.
    pub(crate) fn take_votes(&self) -> Vec<V> {
        std::mem::take(&mut tasks::lock(&self.0.state).votes)
    }

    /// Hands `replies` out, in the places' order, and wakes the callers
    /// that wait; a place without one gets `None`. The landing is over.
    pub(crate) fn deliver(self, replies: impl IntoIterator<Item = R>) {
        self.end(replies);
    }

    fn end(&self, replies: impl IntoIterator<Item = R>) {
        let mut state = tasks::lock(&self.0.state);
        if state.over {
            return;
        }
        state.over = true;
        let mut replies = replies.into_iter();
        // Woken under the lock: a wake only schedules the task, which polls
        // (and takes the lock) later.
        for slot in &mut state.slots {
            slot.reply = replies.next();
            if let Some(waker) = slot.waker.take() {
                waker.wake();
            }
        }
    }
}

impl<V, R> Drop for Delivery<V, R> {
    fn drop(&mut self) {
        self.end(std::iter::empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[tokio::test]
    async fn each_vote_gets_the_reply_of_its_place() {
        let landing = Landing::<&str, u32>::new(2);
        let (first, second) = (landing.join("a"), landing.join("b"));
        let waiting = {
            let landing = landing.clone();
            tokio::spawn(async move { landing.reply(second).await })
        };
        tokio::task::yield_now().await;
        let delivery = Delivery::of(landing.clone());
        assert_eq!(delivery.take_votes(), vec!["a", "b"]);
        delivery.deliver([10, 20]);
        assert_eq!(waiting.await.ok().flatten(), Some(20));
        assert_eq!(landing.reply(first).now_or_never(), Some(Some(10)));
        assert_eq!(
            landing.reply(first).now_or_never(),
            Some(None),
            "taken once"
        );
    }

    #[test]
    fn a_delivery_dropped_unused_ends_every_wait_without_a_reply() {
        let landing = Landing::<(), u32>::new(1);
        let place = landing.join(());
        let mut waiting = Box::pin(landing.reply(place));
        assert!((&mut waiting).now_or_never().is_none(), "waits");
        drop(Delivery::of(landing.clone()));
        assert_eq!(futures::executor::block_on(waiting), None);
    }

    #[test]
    fn a_place_without_a_reply_gets_none() {
        let landing = Landing::<(), u32>::new(1);
        let (first, second) = (landing.join(()), landing.join(()));
        Delivery::of(landing.clone()).deliver([1]);
        assert_eq!(landing.reply(first).now_or_never(), Some(Some(1)));
        assert_eq!(landing.reply(second).now_or_never(), Some(None));
    }
}

//! A `lock` call's place in the queue on the nodes ([`Waiting`]): joined
//! when its first round is lost, kept by its client's session while it
//! waits, left on every node however the call ends; and the wait for a
//! handoff between its rounds ([`await_handoff`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use super::entries::{self as queue, Place};
use crate::answer::Answer;
use crate::config::Config;
use crate::engine::{Engine, To};
use crate::notify::{Gates, Listening};
use crate::request::{LockId, Reached};
use crate::round::{NodeSet, Until};
use crate::session::Watching;
use crate::tasks::Left;

/// Waits until a node told this waiter that it reserved the lock for it
/// (`true`: the next round is a claim, sent to each node once it told, or
/// [`CLAIM_GRACE`](queue::CLAIM_GRACE) after the round started), or until
/// `deadline` (`false`). The waiter makes no round meanwhile: its place
/// lives with its client's session, and what no release announces (a key
/// that expired, a foreign release, a dead waiter ahead) the session's
/// checks hand on to it with a notification (see `session.rs`). Without
/// notifications it waits for its next refresh round, after the jittered
/// retry delay or [`REFRESH_INTERVAL`](queue::REFRESH_INTERVAL), whichever
/// is shorter.
pub(crate) async fn await_handoff(
    config: &Config,
    listening: Option<&mut Listening>,
    deadline: Instant,
) -> bool {
    let Some(listening) = listening else {
        config
            .sleep_retry_pause(queue::REFRESH_INTERVAL, deadline)
            .await;
        return false;
    };
    loop {
        if listening.reserved() > 0 {
            return true;
        }
        tokio::select! {
            _ = listening.changed() => {}
            _ = tokio::time::sleep_until(deadline.into()) => return false,
        }
    }
}

/// A `lock` call's place in the queue on the nodes. Dropped (the call ends
/// without the lock: it gave up, or its future was dropped), it leaves the
/// queue on every node in the background.
pub(crate) struct Waiting {
    pub(crate) engine: Arc<Engine>,
    pub(crate) key: Arc<[u8]>,
    /// The waiter id, made when it is first needed (a call whose first
    /// round wins never needs one).
    pub(crate) waiter: Option<Arc<str>>,
    /// The ticket every node should hold for this waiter; 0 before any gave one.
    pub(crate) ticket: u64,
    pub(crate) listening: Option<Listening>,
    /// The session's interest in the lock key while the waiter is queued:
    /// its heartbeat keeps the waiter's entry live and checks the key.
    pub(crate) watching: Option<Watching>,
    /// Whether a round of this waiter went out (so that nodes may queue it).
    pub(crate) joined: bool,
    /// Whether a node answered its last round by queueing it.
    pub(crate) queued: bool,
    /// Before the call's first round, which is a plain `SET NX` unless the
    /// key is busy (see `queue::Busy`).
    pub(crate) first: bool,
    /// Set when nodes hold other tickets than `ticket`: the next round goes
    /// at once, to write it.
    pub(crate) rewrite: bool,
}

impl Waiting {
    pub(crate) fn new(engine: &Arc<Engine>, key: &Arc<[u8]>) -> Self {
        Waiting {
            engine: engine.clone(),
            key: key.clone(),
            waiter: None,
            ticket: 0,
            listening: None,
            watching: None,
            joined: false,
            queued: false,
            first: true,
            rewrite: false,
        }
    }

    /// The waiter id, listening (with notifications on) for handoffs to it
    /// from before its first round in the queue: one that came between
    /// that round's answer and a later start would be missed until its
    /// reservation expired and a check handed the key on again.
    pub(crate) fn join(&mut self) -> &Arc<str> {
        if self.listening.is_none() && self.engine.config.release_notifications {
            let waiter = self.id().clone();
            self.listening = Some(self.engine.notifications.listen(&waiter));
        }
        self.id()
    }

    /// The waiter id.
    pub(crate) fn id(&mut self) -> &Arc<str> {
        let engine = &self.engine;
        let key = &self.key;
        self.waiter.get_or_insert_with(|| {
            engine
                .notifications
                .new_waiter(&engine.session.live_key(key))
        })
    }

    /// The waiter's part of its next turn: the gates of a claim (when
    /// `claiming`, with notifications on), and its id and ticket when the
    /// round is one in the queue (every round but a plain first one).
    pub(crate) fn turn(&mut self, claiming: bool) -> (Option<Gates>, Option<(Arc<str>, u64)>) {
        // The handoffs seen so far, forgotten: this round's outcome replaces them.
        let gates = self.listening.as_mut().and_then(|listening| {
            let notified = listening.take_seen();
            claiming.then(|| Gates::new(listening, notified, Instant::now() + queue::CLAIM_GRACE))
        });
        // Of this client's calls on one key, one makes the plain first
        // round at a time: the key counts as taken while it is under way,
        // so that the others join the queue (in waves) instead of sending
        // a burst of `SET NX` that the holder's nodes would refuse.
        if std::mem::replace(&mut self.first, false) && !self.engine.busy.is_busy(&self.key) {
            self.engine.busy.note(&self.key, true);
            return (gates, None);
        }
        self.joined = true;
        if self.watching.is_none() {
            self.watching = Some(self.engine.session.watch(&self.key));
        }
        (gates, Some((self.join().clone(), self.ticket)))
    }

    /// The waiter's entry in the queue, to leave it: the key, with the
    /// waiter id as the token; `None` before it had an id.
    pub(crate) fn entry(&self) -> Option<LockId> {
        let waiter = self.waiter.clone()?;
        Some(LockId::plain(self.key.clone(), waiter))
    }

    /// After a lost round in the queue, in which the nodes that queued the
    /// waiter gave it at most ticket `highest` (all the same one: `agree`)
    /// and `granted` nodes set the key: the place to keep on the nodes.
    pub(crate) fn keep_place(
        &mut self,
        highest: Option<u64>,
        agree: bool,
        granted: usize,
    ) -> Place {
        self.queued = highest.is_some();
        let ticket = self.ticket.max(highest.unwrap_or(0));
        self.rewrite =
            highest.is_some_and(|high| !agree || high != ticket) || (ticket == 0 && granted > 0);
        self.ticket = ticket;
        Place::Keep(self.id().clone(), ticket)
    }

    /// The lock is ours: the grants removed our entry on the nodes that
    /// granted; once the round's last answers are in (`answers`), the other
    /// nodes (queued, failed, slow) drop it in the background.
    pub(crate) fn won(
        mut self,
        answers: impl Future<Output = Vec<Option<Answer>>> + Send + 'static,
    ) {
        self.joined = false;
        let Some(entry) = self.entry() else {
            return;
        };
        let engine = self.engine.clone();
        let leave = async move {
            let answers = answers.await;
            let send_to = NodeSet::of(&answers, |answer| !answer.is_some_and(Answer::is_granted));
            if !send_to.is_empty() {
                leave(&engine, &entry, To::Only(&send_to)).await;
            }
        };
        self.engine.background.spawn_or_leave(leave, LEFT_IN_QUEUE);
    }
}

/// What a `lock` call that ended outside a runtime leaves.
const LEFT_IN_QUEUE: Left<'static> = Left::Entries {
    call: "lock call",
    what: "its queue entries",
};

/// Takes a waiter out of the queue (`entry`: the key, and the waiter id as
/// the token) on the nodes `to` names, passing on a reservation made for it.
pub(crate) async fn leave(engine: &Engine, entry: &LockId, to: To<'_>) {
    // The waiter id is never a token: only a reservation for it matches.
    let place = Place::Leave(entry.token.clone());
    engine
        .release(entry, place, Reached::NONE, to, Until::All)
        .await;
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if !self.joined {
            return;
        }
        let Some(entry) = self.entry() else {
            return;
        };
        let engine = self.engine.clone();
        let leave = async move { leave(&engine, &entry, To::All).await };
        self.engine.background.spawn_or_leave(leave, LEFT_IN_QUEUE);
    }
}

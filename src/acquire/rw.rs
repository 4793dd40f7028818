//! The read-write lock: its keys on each node, the waiting writer's intent
//! ([`Intent`]), and why a writer and another holder are never both valid.
//!
//! A read-write lock on a resource uses three keys beside the resource's
//! key, on each node: the writer's key (a string: the writer's token, with
//! its TTL), the readers' set (each reader's token, scored by the time on
//! the node's clock at which its hold ends; the set's own TTL covers the
//! latest end) and a waiting writer's intent (a string with a short TTL).
//! A reader's round (`scripts::READ`) is granted on a node only when neither
//! the writer's key nor an intent exists there; a writer's round
//! (`scripts::WRITE`) only when the writer's key is absent and no reader's
//! hold is left (ended entries are dropped first, by the node's clock).
//! Either wins as the mutex does: a quorum of grants, validity left. A
//! reader's first round runs no script where the node allows it: it adds
//! its entry, with an end it aims by the node's clock, then looks for the
//! writer's key and the intent, and checks its aim against the node's
//! clock read after (`read_round.rs`, with its safety argument); a reader
//! refused there retries by the script, which leaves nothing behind.
//!
//! Why a writer and another holder are never both valid: each needed a
//! quorum, and two quorums share a node `n`. Whichever reached `n` second
//! found the other's entry there — a writer finds a reader's entry until
//! its end, which is at least the reader's round start plus its TTL on any
//! clock within the drift bound, past the reader's validity; a reader or a
//! writer finds the writer's key until its TTL, likewise — and was refused
//! at `n`; a grant at `n` could only come after that entry ended, when the
//! earlier holder's validity was already over. Two readers may share, as
//! they should. Readers do not touch each other's entries: a reader's
//! extension (`READ_EXTEND`) renews only its own entry, and only while it
//! has not ended, and raises the set's TTL, never lowers it; a release
//! (a plain `ZREM`) removes only its own entry (ended or not: it then
//! reports the hold released, where the entry was still there). A writer's extension and
//! release are the plain lock's scripts on the writer's key. It assumes
//! what the mutex assumes. Nodes that disagree (a reader's entry on one, a
//! writer's key on another) only withhold grants.
//!
//! A waiting writer's first round (unfenced) runs no script: it sets the
//! writer's key (`SET NX PX`) and then, pipelined, asks whether the
//! readers' set or an intent exists (`EXISTS`); it is granted on a node
//! only where it set the key and neither exists, and where it set the key
//! but found one, the node deletes the key again (token-checked) before it
//! answers. Why that is as safe as the script: a reader's round adds its
//! entry no later than it looks for the writer's key (the read script does
//! both in one step; a reader's first round adds it, then looks: see
//! `read_round.rs`). If the reader looked at a node before the writer's
//! `SET`, its entry was there before the writer's `EXISTS` (after its
//! `SET`), which finds it (until the reader released it or it ended, after
//! the reader's validity) and the writer is refused there; if after, the
//! reader finds the writer's key and is refused there. Two writers
//! exclude each other by `SET NX`. A writer's key set by a refused first
//! round lives only until that delete, or, if the node failed to answer,
//! until the round's cleanup or its TTL; meanwhile it only withholds
//! readers there. Ended entries of readers that died are not pruned by the
//! first round (it counts the set as it is): it is refused, and the next
//! round, the script, prunes them.
//!
//! The intent only withholds: a waiting writer's refused round leaves it
//! (unless another writer's is there), and while it exists no reader is
//! granted on that node. It lives for the waiter lifetime or three retry
//! delays, renewed by each round of the writer, and the call's end removes
//! it from every node ([`Intent`]). Once it is on a quorum, no reader can
//! win, so the writer waits only for the readers already in. The cost is on
//! the readers' side: writers that wait all the time keep readers out
//! (writers are preferred). A waiting writer leaves an intent only once
//! it holds the writers' gate (`writers.rs`), one writer at a time.

use std::sync::Arc;

use crate::engine::{Engine, To};
use crate::queue::entries::Place;
use crate::request::{LockId, Reached};
use crate::round::Until;
use crate::tasks::Left;

/// A waiting writer's intent (see `Redlock::write`): once a round of the
/// call was refused (or failed) anywhere, the call's end, however it ends,
/// removes the intent from every node in the background (where it is still
/// ours: a compare-and-delete), so that readers need not wait for its TTL.
pub(super) struct Intent {
    pub(super) engine: Arc<Engine>,
    /// The intent key, with the writer's intent id as the token.
    pub(super) entry: LockId,
    /// Whether a round may have left it on a node.
    pub(super) left: bool,
}

impl Drop for Intent {
    fn drop(&mut self) {
        if !self.left {
            return;
        }
        let (engine, entry) = (self.engine.clone(), self.entry.clone());
        let remove = async move {
            engine
                .release(&entry, Place::NoEntry, Reached::NONE, To::All, Until::All)
                .await;
        };
        let left = Left::Entries {
            call: "write call",
            what: "its intent",
        };
        self.engine.background.spawn_or_leave(remove, left);
    }
}

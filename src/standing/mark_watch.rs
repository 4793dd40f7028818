//! The data mark read with every grant (see the module docs, "Evidence in
//! the data"): a grant counts only where the id of the node's mark, read
//! after it in the same request or batch, is the one this client's check of
//! the node took; anything else (no mark, another mark, another kind of
//! value) holds the node back at once, tells the locks held on it that its
//! data went, and checks the node again on a new connection. (A mark that
//! another client rewrote under the same id, a grace it holds, is read by
//! the next check.)

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use redis::Value;

use super::judge::Recovery;
use super::mark::{GONE, id_bits};
use super::record::Errand;
use super::table::{Standings, State};
use crate::answer::NotCounted;
use crate::batch::Witnessed;
use crate::changes::Change;
use crate::tasks;

impl Standings {
    /// The key of node `index`'s data mark, where its grants read its id.
    pub(crate) fn mark_key(&self, index: usize) -> Option<Arc<[u8]>> {
        self.is_marked(index).then(|| self.record_keys.mark.clone())
    }

    /// Whether node `index`'s grants read its data mark.
    pub(crate) fn is_marked(&self, index: usize) -> bool {
        self.slots[index].marked.load(Ordering::Acquire)
    }

    /// Notes the id (its bits) of node `index`'s mark that its grants must
    /// read (`None`: they read none).
    pub(super) fn expect_mark(&self, index: usize, id: Option<u64>) {
        let slot = &self.slots[index];
        slot.mark_id.store(id.unwrap_or(0), Ordering::Release);
        slot.marked.store(id.is_some(), Ordering::Release);
    }

    /// What a vote's witness (`witnessed`: read after its grant) shows of
    /// node `index`: `Err` with why the vote does not count if the node's
    /// data mark is not the one its check took (the node is then held
    /// back and checked again), or if its clock stepped or may have (see
    /// [`see_clock`](Self::see_clock)). Also fed with the background
    /// readings.
    pub(crate) fn see_witness(
        &self,
        index: usize,
        witnessed: &Witnessed,
    ) -> Result<(), NotCounted> {
        if let Some(reply) = &witnessed.mark {
            self.see_mark(index, reply)?;
        }
        match &witnessed.reading {
            Some(reading) => self.see_clock(index, reading),
            None => Ok(()),
        }
    }

    /// What `reply`, the id of node `index`'s mark read after a grant,
    /// shows (see the module docs).
    pub(super) fn see_mark(&self, index: usize, reply: &Value) -> Result<(), NotCounted> {
        let slot = &self.slots[index];
        if !slot.marked.load(Ordering::Acquire) {
            return Ok(());
        }
        let expected = slot.mark_id.load(Ordering::Acquire);
        match reply {
            Value::BulkString(id) if id_bits(id) == Some(expected) => Ok(()),
            _ => Err(self.mark_changed(index)),
        }
    }

    /// Node `index`'s mark is not the one its check took: the first to see
    /// it holds the node back from now for the grace (the check on the new
    /// connection judges it anew), tells the locks held on it that its data
    /// went (their keys there may be gone) and has the node checked again.
    /// Returns why its votes do not count.
    pub(super) fn mark_changed(&self, index: usize) -> NotCounted {
        let slot = &self.slots[index];
        // Held back before the mark is no longer read, so that no vote
        // counts in between; one caller tells and checks again.
        if slot.marked.load(Ordering::Acquire) {
            self.hold_for_mark(index);
            if slot.marked.swap(false, Ordering::AcqRel) {
                self.tell_mark_gone(index);
            }
        }
        self.not_counted(index).unwrap_or(NotCounted::DataLost {
            why: GONE.to_owned(),
            counts_in: self.grace(),
        })
    }

    /// Holds node `index` back from now for the grace, its data gone.
    fn hold_for_mark(&self, index: usize) {
        let (run_id, incarnation) = {
            let detail = self.detail(index);
            let identity = detail.identity.as_ref();
            (
                identity.and_then(|identity| identity.run_id.clone()),
                identity.and_then(super::identity::Identity::incarnation),
            )
        };
        let recovery = Recovery {
            run_id: run_id.unwrap_or_default(),
            incarnation: incarnation.unwrap_or_default(),
            previous_run_id: None,
            why: GONE,
            came_back: Instant::now(),
            clock: None,
            lost: true,
            mark: None,
        };
        self.settle(index, Some(recovery), None, State::Recovering);
    }

    /// Tells the locks held on node `index` that its data went, and has it
    /// checked again.
    fn tell_mark_gone(&self, index: usize) {
        self.changes.changed(index, Change::Data(GONE));
        tracing::warn!(
            node = %self.names[index],
            "node's data mark is gone or replaced, read after a grant: it lost its data; its \
             grants do not count; checking it again"
        );
        if let Some(recorder) = self.recorder.get().cloned() {
            let recheck = (recorder.0)(index, Errand::Recheck);
            tasks::spawn(async move {
                let _ = recheck.await;
            });
        }
    }
}

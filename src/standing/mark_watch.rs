//! The data mark read with every grant (see the module docs, "Evidence in
//! the data"): a grant counts only where the node's mark, read after it in
//! the same request or batch, is the one this client's check of the node
//! took; any other value (none, another mark, the same mark rewritten by
//! another client) holds the node back at once, tells the locks held on it
//! where the mark went, and checks the node again on a new connection.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use redis::Value;

use super::judge::Recovery;
use super::mark::{GONE, Mark};
use super::record::Errand;
use super::table::{Standings, State};
use crate::answer::NotCounted;
use crate::batch::Witnessed;
use crate::changes::Change;
use crate::tasks;

/// Another client rewrote the mark (its grace, or the server it vouches
/// for): held back until the check reads it again.
pub(super) const REWRITTEN: &str =
    "its data mark was rewritten by another client since this one's check: checked again";

impl Standings {
    /// The key of node `index`'s data mark, where its grants read it.
    pub(crate) fn mark_key(&self, index: usize) -> Option<Arc<[u8]>> {
        self.is_marked(index).then(|| self.record_keys.mark.clone())
    }

    /// Whether node `index`'s grants read its data mark.
    pub(crate) fn is_marked(&self, index: usize) -> bool {
        self.slots[index].marked.load(Ordering::Acquire)
    }

    /// Notes the value of node `index`'s mark that its grants must read
    /// (`None`: they read none).
    pub(super) fn expect_mark(&self, index: usize, value: Option<&[u8]>) {
        let slot = &self.slots[index];
        *tasks::lock(&slot.mark) = value.map(Arc::from);
        slot.marked.store(value.is_some(), Ordering::Release);
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

    /// What the value `reply` of node `index`'s mark, read after a grant,
    /// shows (see the module docs).
    pub(super) fn see_mark(&self, index: usize, reply: &Value) -> Result<(), NotCounted> {
        let slot = &self.slots[index];
        let same = match &*tasks::lock(&slot.mark) {
            None => return Ok(()),
            Some(expected) => matches!(reply, Value::BulkString(value) if **value == **expected),
        };
        if same {
            return Ok(());
        }
        Err(self.mark_changed(index, reply))
    }

    /// Node `index`'s mark reads `reply` instead of the value its check
    /// took: the first to see it holds the node back from now for the
    /// grace (the check on the new connection judges it anew), tells the
    /// locks held on it where the mark went or was replaced (their keys
    /// there may be gone) and has the node checked again. Returns why its
    /// votes do not count.
    pub(super) fn mark_changed(&self, index: usize, reply: &Value) -> NotCounted {
        let now = match reply {
            Value::BulkString(value) => Mark::parse(value),
            _ => None,
        };
        let known = self.detail(index).mark.clone();
        let lost = match (&known, &now) {
            (Some(known), Some(now)) => known.id != now.id,
            _ => true,
        };
        let why = if lost { GONE } else { REWRITTEN };
        // One caller acts; the others' votes are held back by its verdict.
        if self.slots[index].marked.swap(false, Ordering::AcqRel) {
            self.hold_for_mark(index, why, lost);
        }
        self.not_counted(index).unwrap_or(NotCounted::DataLost {
            why: why.to_owned(),
            counts_in: self.grace(),
        })
    }

    /// Holds node `index` back from now for the grace (`lost`: its data
    /// went), tells the locks held on it where it lost its data, and has
    /// it checked again.
    fn hold_for_mark(&self, index: usize, why: &'static str, lost: bool) {
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
            why,
            came_back: Instant::now(),
            clock: None,
            lost,
            mark: None,
        };
        self.settle(index, Some(recovery), None, State::Recovering);
        self.expect_mark(index, None);
        if lost {
            self.changes.changed(index, Change::Data(why));
        }
        tracing::warn!(
            node = %self.names[index],
            why,
            "node's data mark changed after a grant: its grants do not count; checking it again"
        );
        if let Some(recorder) = self.recorder.get().cloned() {
            let recheck = (recorder.0)(index, Errand::Recheck);
            tasks::spawn(async move {
                let _ = recheck.await;
            });
        }
    }
}

//! A vote's witness: what a vote that can grant a new key reads of the
//! node after its grant, in the same request or batch (see `batch.rs`):
//! the node's data mark (`GET`; see `standing/`), then its clock (`TIME`,
//! or `PEXPIRETIME` of a lone acquisition's key; see `clock.rs`). A node
//! runs a request's commands in order, so both read the node after the
//! grant they vouch for.

use std::sync::Arc;

use redis::{Cmd, Pipeline, Value};

use crate::clock::Reading;

/// What a vote's (or a batch's) witness reads after its grants.
#[derive(Debug, Clone, Default)]
pub(crate) struct Asks {
    /// The key of the node's data mark, to `GET` (see `standing/`).
    pub(crate) mark: Option<Arc<[u8]>>,
    /// The node's clock (`TIME`, or `PEXPIRETIME` of a lone acquisition's
    /// key; see `clock.rs`).
    pub(crate) clock: bool,
}

impl Asks {
    /// Whether it reads anything.
    pub(crate) fn any(&self) -> bool {
        self.clock || self.mark.is_some()
    }

    /// How many commands it adds.
    pub(crate) fn len(&self) -> usize {
        usize::from(self.clock) + usize::from(self.mark.is_some())
    }

    /// Adds the witness to `pipeline`: `GET` of the mark, then `clock`
    /// (the clock's reading), each where asked.
    pub(crate) fn add_to(&self, pipeline: &mut Pipeline, clock: impl FnOnce() -> Cmd) {
        if let Some(mark) = &self.mark {
            pipeline.cmd("GET").arg(&**mark);
        }
        if self.clock {
            pipeline.add_command(clock());
        }
    }

    /// Takes the witness's replies from the end of `replies`: the clock's
    /// and the mark's, each where asked.
    pub(crate) fn take(&self, replies: &mut Vec<Value>) -> (Option<Value>, Option<Value>) {
        let clock = self.clock.then(|| replies.pop()).flatten();
        let mark = self.mark.as_ref().and_then(|_| replies.pop());
        (clock, mark)
    }
}

/// What a witness read: the node's clock (`None`: not read, or no time in
/// its reply) and its mark's value (`None`: not read).
#[derive(Debug, Clone, Default)]
pub(crate) struct Witnessed {
    pub(crate) reading: Option<Reading>,
    pub(crate) mark: Option<Value>,
}

impl Witnessed {
    /// Whether there is anything to judge.
    pub(crate) fn any(&self) -> bool {
        self.reading.is_some() || self.mark.is_some()
    }
}

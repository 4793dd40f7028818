//! A vote's witness: what a vote that can grant a new key reads of the
//! node after its grant, in the same request or batch (see `batch.rs`):
//! the id of the node's data mark (`GETRANGE` of the mark's first
//! [`MARK_ID_LEN`] bytes; see `standing/`), then its clock (`TIME`, or
//! `PEXPIRETIME` of a lone acquisition's key; see `clock.rs`). A node runs a
//! request's commands in order, so both read the node after the grant they
//! vouch for.

use std::sync::Arc;

use redis::{Cmd, Pipeline, Value};

use crate::answer::NotCounted;
use crate::clock::Reading;

/// What a witness of the node says of the grants before it: `Ok` when
/// they count, else why not (see `Standings::see_witness`).
pub(crate) type Judged = Result<(), Arc<NotCounted>>;

/// Judges a witness of the node.
pub(crate) type Judge = Box<dyn Fn(&Witnessed) -> Judged + Send + Sync>;

/// What the votes to a node read after their grants, now.
pub(crate) type Witnesses = Box<dyn Fn() -> Asks + Send + Sync>;

/// How long a data mark's id is: the first bytes of its value (see
/// `standing/`), which a witness reads.
pub(crate) const MARK_ID_LEN: usize = 16;

/// What a vote's (or a batch's) witness reads after its grants.
#[derive(Debug, Clone, Default)]
pub(crate) struct Asks {
    /// The key of the node's data mark, whose id to read (see `standing/`).
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

    /// Which replies it adds, to read them back once the key is gone.
    pub(crate) fn shape(&self) -> Shape {
        Shape {
            mark: self.mark.is_some(),
            clock: self.clock,
        }
    }

    /// Adds the witness to `pipeline`: `GETRANGE` of the mark's id, then
    /// `clock` (the clock's reading), each where asked.
    pub(crate) fn add_to(&self, pipeline: &mut Pipeline, clock: impl FnOnce() -> Cmd) {
        if let Some(mark) = &self.mark {
            let last = MARK_ID_LEN - 1;
            pipeline.cmd("GETRANGE").arg(&**mark).arg(0).arg(last);
        }
        if self.clock {
            pipeline.add_command(clock());
        }
    }
}

/// Which replies a witness adds at the end of a request's (see [`Asks`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) mark: bool,
    pub(crate) clock: bool,
}

impl Shape {
    /// Whether it reads anything.
    pub(crate) fn any(self) -> bool {
        self.clock || self.mark
    }

    /// How many commands it adds.
    pub(crate) fn len(self) -> usize {
        usize::from(self.clock) + usize::from(self.mark)
    }

    /// Takes the witness's replies from the end of `replies`: the clock's
    /// and the mark's, each where asked.
    pub(crate) fn take(self, replies: &mut Vec<Value>) -> (Option<Value>, Option<Value>) {
        let clock = self.clock.then(|| replies.pop()).flatten();
        let mark = self.mark.then(|| replies.pop()).flatten();
        (clock, mark)
    }
}

/// What a witness read: the node's clock (`None`: not read, or no time in
/// its reply) and its mark's id (`None`: not read).
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

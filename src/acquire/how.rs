//! How a call acquires: whether it waits ([`Waits`]), how long, whether
//! its lock is fenced ([`Fencing`]), and what a read-write call asks for
//! ([`RwSide`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::engine::Engine;
use crate::meter::Meter;
use crate::request::Shape;

/// Whether a lock call waits for the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waits {
    /// One round (`try_lock`, and `lock` with `retry_count(0)`).
    No,
    /// Rounds, or a place in the queue, until the client's patience ends.
    WithPatience,
}

impl Waits {
    /// What a waiting call (`lock`, `read`, `write`, `lock_all`) does with
    /// the client's options: no waiting with `retry_count(0)`.
    pub(crate) fn as_configured(config: &Config) -> Self {
        if config.retries() > 0 {
            Waits::WithPatience
        } else {
            Waits::No
        }
    }
}

/// The side of a read-write lock a call takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RwSide {
    /// A read hold, shared with other readers.
    Read,
    /// The write hold, exclusive.
    Write,
}

/// How a call acquires.
#[derive(Debug, Clone)]
pub(crate) struct How {
    /// How long it waits in the queue (`None`: one round, or rounds within
    /// the acquire timeout; see `Redlock::try_lock`).
    pub(super) patience: Option<Duration>,
    /// Whether its lock is fenced.
    pub(super) fencing: Fencing,
    /// For a lock on several resources gathered from the caller's plain
    /// locks on each (see `sets.rs`): their tokens, in the order of its keys.
    pub(super) gathers: Option<Arc<[Arc<str>]>>,
}

/// Whether a call's lock is fenced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fencing {
    /// As the client's [`fencing`](crate::RedlockBuilder::fencing) says.
    AsConfigured,
    /// Always: a leader's term is its fencing token (see `election.rs`).
    Always,
    /// Never: a step towards a lock on several resources, which is fenced
    /// (as configured) when gathered (see `sets.rs`).
    Never,
}

impl How {
    /// A call that waits with the client's patience or makes one round
    /// (`waits`), fenced as the client says.
    pub(crate) fn plain(engine: &Engine, waits: Waits) -> Self {
        How {
            patience: (waits == Waits::WithPatience).then(|| engine.config.patience()),
            fencing: Fencing::AsConfigured,
            gathers: None,
        }
    }

    /// A call that waits in the queue for up to `patience`, fenced as
    /// `fencing` says.
    pub(crate) fn waiting(patience: Duration, fencing: Fencing) -> Self {
        How {
            patience: Some(patience),
            fencing,
            gathers: None,
        }
    }

    /// One round that gathers a lock on several resources from the
    /// caller's plain locks on each, whose tokens are `held` (see `sets.rs`).
    pub(crate) fn gathering(held: Arc<[Arc<str>]>) -> Self {
        How {
            patience: None,
            fencing: Fencing::AsConfigured,
            gathers: Some(held),
        }
    }
}

/// The lock a call asks for: its key (of a lock on several resources, the
/// first in byte order) and what kind of lock it is.
#[derive(Debug, Clone)]
pub(crate) struct Wanted {
    pub(crate) key: Arc<[u8]>,
    pub(crate) shape: Shape,
}

impl Wanted {
    /// The lock of `shape` on `key`.
    pub(crate) fn new(key: Arc<[u8]>, shape: Shape) -> Self {
        Wanted { key, shape }
    }
}

/// When a call was made, and the metrics its guard carries.
#[derive(Debug, Clone)]
pub(crate) struct Metered {
    pub(crate) called: Instant,
    pub(crate) meter: Meter,
}

impl Metered {
    /// A call made at `called`, measured by `meter`.
    pub(crate) fn new(called: Instant, meter: Meter) -> Self {
        Metered { called, meter }
    }
}

//! [`LostReason`]: why a held lock was lost, as its guard, its `lost`
//! futures and [`Error::LockLost`](crate::Error::LockLost) tell it.

use std::fmt;

use crate::quorum::Votes;

/// Why a held lock was lost.
///
/// `#[non_exhaustive]`: new reasons may come.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// The validity ran out without a successful extension (auto-extension off,
    /// or an extension that finished too late).
    Expired,
    /// A quorum of nodes no longer holds our token: the keys expired or were
    /// deleted, and may now belong to another holder.
    ExtensionRefused {
        /// The votes of the refused extension.
        votes: Votes,
    },
    /// Too few nodes answered the extension before the validity ran out.
    Unreachable {
        /// The votes of the last extension attempt.
        votes: Votes,
    },
    /// The configured maximum hold time or number of extensions was reached,
    /// so the lock was left to run out.
    LimitReached,
    /// The server behind a node that holds the lock changed (it restarted,
    /// or a replica took over as its primary: a failover) and may have lost
    /// the lock's key, leaving fewer than a quorum of nodes that surely hold
    /// it. Told as soon as the client sees the change, not at the next
    /// extension.
    ServerChanged {
        /// The node whose change left too few holders (`host:port`).
        node: String,
        /// The new server's `run_id`, where known.
        run_id: String,
    },
    /// The wall clock of a node that held the lock's key stepped forward
    /// (by more than the clock tolerance), which expires keys early: it may
    /// have lost the key, leaving fewer than a quorum of nodes that surely
    /// hold it. Told as soon as the client sees the step.
    ClockStepped {
        /// The node whose step left too few holders (`host:port`).
        node: String,
        /// How far ahead its clock stepped, about (zero where a note another
        /// client wrote told it).
        ahead: std::time::Duration,
    },
    /// A node that held the lock's key lost its data: its data mark (see
    /// [`NotCounted::DataLost`](crate::NotCounted::DataLost)) went or was
    /// replaced (a `FLUSHALL`, an empty restart whatever its persistence
    /// settings, a resync from another server, eviction), leaving fewer
    /// than a quorum of nodes that surely hold it. Told as soon as the
    /// client reads the mark: after its next grant there, or its background
    /// reading within about a second.
    DataLost {
        /// The node whose loss left too few holders (`host:port`).
        node: String,
        /// How the loss was seen, in words.
        why: String,
    },
    /// The holder released the lock, or gave it up: the guard was unlocked,
    /// dropped or forgotten. Only [`LockGuard::lost`](crate::LockGuard::lost)
    /// futures that outlive their guard tell this.
    Released,
}

impl LostReason {
    /// The votes of the extension behind this reason, where there was one.
    pub fn votes(&self) -> Option<&Votes> {
        match self {
            LostReason::ExtensionRefused { votes } | LostReason::Unreachable { votes } => {
                Some(votes)
            }
            _ => None,
        }
    }
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LostReason::Expired => f.write_str("validity ran out without a successful extension"),
            LostReason::ExtensionRefused { votes } => {
                write!(f, "extension refused by the quorum ({votes})")
            }
            LostReason::Unreachable { votes } => {
                write!(f, "too few nodes reachable to extend ({votes})")
            }
            LostReason::LimitReached => f.write_str("maximum hold time or extension count reached"),
            LostReason::ServerChanged { node, run_id } => write!(
                f,
                "the server behind node {node} changed (now run_id {run_id}: a restart or a \
                 failover) and may have lost the key, leaving fewer than a quorum of holders"
            ),
            LostReason::ClockStepped { node, ahead } => write!(
                f,
                "the wall clock of node {node} stepped forward{}, which expires keys early: it \
                 may have lost the key, leaving fewer than a quorum of holders",
                if ahead.is_zero() {
                    " (another client saw it)".to_owned()
                } else {
                    format!(" by {:.1} s", ahead.as_secs_f64())
                }
            ),
            LostReason::DataLost { node, why } => write!(
                f,
                "node {node} lost its data ({why}), and with it the key, leaving fewer than a \
                 quorum of holders"
            ),
            LostReason::Released => f.write_str("released by its holder"),
        }
    }
}

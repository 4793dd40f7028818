//! The errors of the two kinds of call: [`BuildError`] for making a client
//! (the options and the node list are wrong), [`enum@Error`] for using one
//! (taking, extending, releasing a lock), with [`LostReason`].

use std::time::Duration;

use crate::answer::NodeError;
pub use crate::lost::LostReason;
use crate::quorum::Votes;

/// How many characters of a resource name errors and logs show.
const SHOWN_RESOURCE_CHARS: usize = 128;

/// A resource name for errors and logs: lossy UTF-8, cut to 128 characters.
pub(crate) fn show_resource(resource: &[u8]) -> String {
    let text = String::from_utf8_lossy(resource);
    if text.chars().count() <= SHOWN_RESOURCE_CHARS {
        text.into_owned()
    } else {
        let mut cut: String = text.chars().take(SHOWN_RESOURCE_CHARS).collect();
        cut.push('…');
        cut
    }
}

/// Resource names for errors and logs: each as [`show_resource`] shows it,
/// separated by commas (a lock on several resources).
pub(crate) fn show_resources(resources: &[&[u8]]) -> String {
    let shown: Vec<String> = resources.iter().map(|r| show_resource(r)).collect();
    shown.join(", ")
}

/// A `Result` whose error is [`enum@Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a [`Redlock`](crate::Redlock) could not be built: an option or a node
/// URL is wrong. Nothing was connected.
///
/// `#[non_exhaustive]`: a new option may bring a new way to be wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// No Redis node was given.
    #[error("no redis nodes were given")]
    NoNodes,

    /// A node URL could not be parsed or names no usable address (port 0, say).
    /// The URL is shown with any password masked.
    #[error("invalid redis url {url}: {reason}")]
    InvalidUrl {
        /// The URL, with any user info replaced by `***`.
        url: String,
        /// Why it was refused.
        reason: String,
    },

    /// A clock-drift factor outside `[0, 1)` (or NaN).
    #[error("drift factor {value} is outside [0, 1)")]
    InvalidDriftFactor {
        /// The factor that was given.
        value: f64,
    },

    /// Another option was out of range.
    #[error("invalid option {option}: {reason}")]
    InvalidOption {
        /// The builder method that set it.
        option: &'static str,
        /// Why it was refused.
        reason: String,
    },
}

/// Everything that can go wrong when taking, extending or releasing a lock,
/// or asking for its status.
///
/// Messages are lowercase and name the resource (never the lock token). Errors
/// from a round carry the [`Votes`] and, as [`source()`](std::error::Error::source),
/// the last [`NodeError`] seen in that round.
///
/// # The errors, by kind
///
/// Two error types, one per kind of call. Building a client fails with a
/// `quorlock::BuildError`: `NoNodes`, `InvalidUrl` (password masked; port 0
/// refused), `InvalidDriftFactor`, `InvalidOption`; nothing was connected. Using
/// one fails with a `quorlock::Error`. Rounds report their `Votes`
/// (granted / refused / failed of N, quorum) and the last node error as `source()`:
///
/// - `Contended`: held elsewhere (or handed on to an earlier waiter) until the
///   call's patience ran out. `Unavailable`: too many nodes failed, or gave grants
///   that do not count, for a quorum (with `attempts` 0: the acquire timeout
///   passed during a fresh client's first contact). Both list the grants that did
///   not count, with why (`Error::not_counted()`; the message ends `; not counted:
///   node …: its vote does not count: recovering from a restart (…): counts again
///   in 41.3 s`). `NoValidity`: the quorum granted but the round outlasted the TTL.
/// - `LockLost { reason }`: `Expired`, `ExtensionRefused` (a quorum no longer holds
///   our token), `Unreachable` (too few nodes answered), `LimitReached`.
/// - `ReleaseUnconfirmed`: too few nodes answered an `unlock`; keys expire by TTL.
/// - `Misconfigured`: found at a node's check (see below); locking is refused.
/// - The call's input: `InvalidTtl`, `InvalidResource`, `InvalidToken` (`is_invalid_input()`);
///   `NoRuntime` outside tokio.
///
/// Both are `#[non_exhaustive]` (new kinds of lock and options may fail in new
/// ways); `Unlocked` is not (a release freed the lock or found it gone). The
/// limits and defaults are associated constants: `Redlock::MAX_TTL`,
/// `Redlock::MAX_RESOURCE_LEN`, `Redlock::WAITER_LIFETIME`,
/// `Redlock::REFRESH_INTERVAL`, `Redlock::RECORD_SUFFIX`,
/// `LockStatus::TOKEN_PREFIX_LEN`, and `RedlockBuilder::DEFAULT_*`.
///
/// A node error (`NodeError`, the `source()`) names the node and carries its reply
/// as the node said it: `no answer within 50ms`, `WRONGTYPE …` (a key of another
/// type under the lock name), `NOAUTH …` / authentication failed, `OOM …`
/// (`maxmemory` reached with `noeviction`), `READONLY …` (the node became a replica),
/// `could not connect within 1s` (connecting includes the node's check), or `its
/// vote does not count: …` (`NodeError::not_counted()`: not checked yet, skipped
/// as unresponsive, or recovering from a restart, with why). Each is a vote
/// against; the other nodes can still make the quorum.
///
/// `#[non_exhaustive]`: new kinds of lock may fail in ways of their own.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A TTL of zero, one too short to leave any validity after the clock-drift
    /// allowance, or one longer than [`Redlock::MAX_TTL`](crate::Redlock::MAX_TTL).
    #[error("invalid ttl {ttl:?}: {reason}")]
    InvalidTtl {
        /// The TTL that was given.
        ttl: Duration,
        /// Why it was refused.
        reason: &'static str,
    },

    /// The resource name is empty, longer than
    /// [`Redlock::MAX_RESOURCE_LEN`](crate::Redlock::MAX_RESOURCE_LEN), or
    /// maps to a key quorlock keeps for itself.
    #[error("invalid resource name: {reason}")]
    InvalidResource {
        /// Why it was refused.
        reason: String,
    },

    /// A token given to [`Redlock::unlock_token`](crate::Redlock::unlock_token)
    /// is empty or longer than [`Redlock::MAX_TOKEN_LEN`](crate::Redlock::MAX_TOKEN_LEN).
    #[error("invalid token: {reason}")]
    InvalidToken {
        /// Why it was refused.
        reason: &'static str,
    },

    /// The lock is held by someone else (or handed on to an earlier waiter):
    /// enough nodes refused that no quorum was possible, on every attempt
    /// until the call's patience ran out.
    #[error(
        "could not lock {resource}: held elsewhere ({votes}; {attempts} attempt(s)){}{}",
        show_nodes("failed", .failed),
        show_nodes("not counted", .not_counted)
    )]
    Contended {
        /// The resource, shortened for display.
        resource: String,
        /// The votes of the last attempt.
        votes: Votes,
        /// How many rounds were made.
        attempts: u32,
        /// The grants of the last attempt that did not count, each with why
        /// (a node recovering from a restart, say).
        not_counted: Box<[NodeError]>,
        /// The nodes that failed in the last attempt, each with its error
        /// (a wrong password, a timeout, a Sentinel that names no primary).
        failed: Box<[NodeError]>,
        /// The last node error of the last attempt, if any node failed.
        #[source]
        source: Option<NodeError>,
    },

    /// Too many nodes failed (errors or timeouts) or gave grants that do not
    /// count (a node recovering from a restart) for a quorum to be possible.
    #[error(
        "could not lock {resource}: too few nodes answered ({votes}; {attempts} attempt(s)){}{}",
        show_nodes("failed", .failed),
        show_nodes("not counted", .not_counted)
    )]
    Unavailable {
        /// The resource, shortened for display.
        resource: String,
        /// The votes of the last attempt.
        votes: Votes,
        /// How many rounds were made.
        attempts: u32,
        /// The grants (or, before any round, the nodes) of the last attempt
        /// that did not count, each with why.
        not_counted: Box<[NodeError]>,
        /// The nodes that failed in the last attempt, each with its error
        /// (a wrong password, a timeout, a Sentinel that names no primary).
        failed: Box<[NodeError]>,
        /// The last node error of the last attempt.
        #[source]
        source: Option<NodeError>,
    },

    /// A quorum granted the lock, but the round took so long that no validity
    /// was left after subtracting the elapsed time and the drift allowance.
    /// The keys were released again.
    #[error(
        "could not lock {resource}: the round took {elapsed:?}, leaving no validity ({attempts} attempt(s))"
    )]
    NoValidity {
        /// The resource, shortened for display.
        resource: String,
        /// The votes of the last attempt.
        votes: Votes,
        /// How long the last round took.
        elapsed: Duration,
        /// How many rounds were made.
        attempts: u32,
    },

    /// The lock was lost (or could not be kept) while it was held.
    #[error("lock on {resource} lost: {reason}")]
    LockLost {
        /// The resource, shortened for display.
        resource: String,
        /// Why the lock is lost.
        reason: LostReason,
        /// The last node error seen while trying to keep it, if any.
        #[source]
        source: Option<NodeError>,
    },

    /// The nodes are misconfigured: the same server listed twice, a node
    /// that is not an independent master, or a node whose memory policy can
    /// evict lock keys (`maxmemory` with a `maxmemory-policy` other than
    /// `noeviction`; see
    /// [`RedlockBuilder::allow_eviction`](crate::RedlockBuilder::allow_eviction)).
    /// Found at a node's check (first contact, or a new connection); locking
    /// is refused until the client is rebuilt with correct nodes.
    #[error("misconfigured lock nodes: {reason}")]
    Misconfigured {
        /// What is wrong, naming the nodes.
        reason: String,
    },

    /// Called outside a tokio runtime: quorlock's I/O and timers need one.
    #[error("no tokio runtime: quorlock must be used within a tokio runtime")]
    NoRuntime,

    /// `unlock` could not confirm the release: too few nodes answered. Keys left
    /// on the nodes that did not answer expire by their TTL.
    #[error("release of {resource} unconfirmed: {votes}")]
    ReleaseUnconfirmed {
        /// The resource, shortened for display.
        resource: String,
        /// How the nodes answered the release.
        votes: Votes,
        /// The last node error.
        #[source]
        source: Option<NodeError>,
    },
}

impl Error {
    /// [`Error::NoRuntime`] unless called within a tokio runtime.
    pub(crate) fn ensure_runtime() -> Result<()> {
        if crate::tasks::has_runtime() {
            Ok(())
        } else {
            Err(Error::NoRuntime)
        }
    }

    /// Whether the lock is held elsewhere ([`Error::Contended`]).
    pub fn is_contended(&self) -> bool {
        matches!(self, Error::Contended { .. })
    }

    /// Whether too few nodes answered ([`Error::Unavailable`]).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Unavailable { .. })
    }

    /// Whether a held lock was lost ([`Error::LockLost`]).
    pub fn is_lock_lost(&self) -> bool {
        matches!(self, Error::LockLost { .. })
    }

    /// Whether the nodes are misconfigured ([`Error::Misconfigured`]).
    pub fn is_misconfigured(&self) -> bool {
        matches!(self, Error::Misconfigured { .. })
    }

    /// Whether the error comes from validating the call's input (its
    /// resource name, TTL or token), not from the nodes.
    pub fn is_invalid_input(&self) -> bool {
        matches!(
            self,
            Error::InvalidTtl { .. } | Error::InvalidResource { .. } | Error::InvalidToken { .. }
        )
    }

    /// The votes of the last round that did not count toward the quorum,
    /// each with why (see [`NotCounted`](crate::NotCounted)): grants of nodes recovering from a
    /// restart, or not checked yet. Empty when every vote counted.
    pub fn not_counted(&self) -> &[NodeError] {
        match self {
            Error::Contended { not_counted, .. } | Error::Unavailable { not_counted, .. } => {
                not_counted
            }
            _ => &[],
        }
    }

    /// How many rounds the failed acquisition made, for [`Error::Contended`],
    /// [`Error::Unavailable`] and [`Error::NoValidity`].
    pub fn attempts(&self) -> Option<u32> {
        match self {
            Error::Contended { attempts, .. }
            | Error::Unavailable { attempts, .. }
            | Error::NoValidity { attempts, .. } => Some(*attempts),
            _ => None,
        }
    }

    /// The nodes that failed in the last round, each with its error (see
    /// [`Error::Unavailable`]). Empty when none failed.
    pub fn failed(&self) -> &[NodeError] {
        match self {
            Error::Contended { failed, .. } | Error::Unavailable { failed, .. } => failed,
            _ => &[],
        }
    }

    /// The votes of the round behind this error, where there was one.
    pub fn votes(&self) -> Option<&Votes> {
        match self {
            Error::Contended { votes, .. }
            | Error::Unavailable { votes, .. }
            | Error::NoValidity { votes, .. }
            | Error::ReleaseUnconfirmed { votes, .. } => Some(votes),
            Error::LockLost { reason, .. } => reason.votes(),
            _ => None,
        }
    }

    /// Why the lock was lost, for [`Error::LockLost`].
    pub fn lost_reason(&self) -> Option<&LostReason> {
        match self {
            Error::LockLost { reason, .. } => Some(reason),
            _ => None,
        }
    }
}

/// Nodes with why, for an error message: empty, or `; <what>: node a:
/// why; node b: why`.
fn show_nodes(what: &str, nodes: &[NodeError]) -> String {
    let mut shown = String::new();
    for (position, err) in nodes.iter().enumerate() {
        shown.push_str("; ");
        if position == 0 {
            shown.push_str(what);
            shown.push_str(": ");
        }
        shown.push_str(&err.to_string());
    }
    shown
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::LostReason;

    #[test]
    fn a_clock_step_tells_how_far_or_who_saw_it() {
        let seen = LostReason::ClockStepped {
            node: "127.0.0.1:6379".to_owned(),
            ahead: Duration::from_secs(30),
        };
        assert!(
            seen.to_string().contains("stepped forward by 30.0 s"),
            "{seen}"
        );
        let noted = LostReason::ClockStepped {
            node: "127.0.0.1:6379".to_owned(),
            ahead: Duration::ZERO,
        };
        let noted = noted.to_string();
        assert!(
            noted.contains("stepped forward (another client saw it)"),
            "{noted}"
        );
        assert!(!noted.contains("0.0 s"), "{noted}");
    }
}

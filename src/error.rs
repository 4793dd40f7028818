//! The error type: one enum for everything quorlock can report.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::quorum::Votes;
use crate::standing::NotCounted;

/// A `Result` whose error is [`enum@Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong when building a [`Redlock`](crate::Redlock),
/// taking, extending or releasing a lock.
///
/// Messages are lowercase and name the resource (never the lock token). Errors
/// from a round carry the [`Votes`] and, as [`source()`](std::error::Error::source),
/// the last [`NodeError`] seen in that round.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
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

    /// A TTL of zero, one too short to leave any validity after the clock-drift
    /// allowance, or one longer than [`MAX_TTL`](crate::MAX_TTL).
    #[error("invalid ttl {ttl:?}: {reason}")]
    InvalidTtl {
        /// The TTL that was given.
        ttl: Duration,
        /// Why it was refused.
        reason: &'static str,
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

    /// The resource name is empty or longer than [`MAX_RESOURCE_LEN`](crate::MAX_RESOURCE_LEN).
    #[error("invalid resource name: {reason}")]
    InvalidResource {
        /// Why it was refused.
        reason: String,
    },

    /// The lock is held by someone else (or handed on to an earlier waiter):
    /// enough nodes refused that no quorum was possible, on every attempt
    /// until the call's patience ran out.
    #[error(
        "could not lock {resource}: held elsewhere ({votes}; {attempts} attempt(s)){}",
        show_not_counted(.not_counted)
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
        /// The last node error of the last attempt, if any node failed.
        #[source]
        source: Option<NodeError>,
    },

    /// Too many nodes failed (errors or timeouts) or gave grants that do not
    /// count (a node recovering from a restart) for a quorum to be possible.
    #[error(
        "could not lock {resource}: too few nodes answered ({votes}; {attempts} attempt(s)){}",
        show_not_counted(.not_counted)
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

    /// The nodes are misconfigured: the same server listed twice, or a node
    /// that is not an independent master. Found at first contact; locking is
    /// refused until the client is rebuilt with a correct node list.
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
        tokio::runtime::Handle::try_current()
            .map(drop)
            .map_err(|_| Error::NoRuntime)
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

    /// Whether the error comes from validating input or options, not from the nodes.
    pub fn is_invalid_input(&self) -> bool {
        matches!(
            self,
            Error::NoNodes
                | Error::InvalidUrl { .. }
                | Error::InvalidTtl { .. }
                | Error::InvalidDriftFactor { .. }
                | Error::InvalidOption { .. }
                | Error::InvalidResource { .. }
        )
    }

    /// The votes of the last round that did not count toward the quorum,
    /// each with why (see [`NotCounted`]): grants of nodes recovering from a
    /// restart, or not checked yet. Empty when every vote counted.
    pub fn not_counted(&self) -> &[NodeError] {
        match self {
            Error::Contended { not_counted, .. } | Error::Unavailable { not_counted, .. } => {
                not_counted
            }
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

/// Why a held lock was lost.
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
        }
    }
}

/// What went wrong on one node in one round. It counts as a vote against.
#[derive(Debug, Clone, thiserror::Error)]
#[error("node {node}: {kind}")]
pub struct NodeError {
    node: Arc<str>,
    #[source]
    kind: NodeErrorKind,
}

impl NodeError {
    pub(crate) fn new(node: Arc<str>, kind: NodeErrorKind) -> Self {
        NodeError { node, kind }
    }

    /// The node, as `host:port` (never with credentials).
    pub fn node(&self) -> &str {
        &self.node
    }

    /// What happened.
    pub fn kind(&self) -> &NodeErrorKind {
        &self.kind
    }

    /// Whether the node did not answer within the per-node timeout (now, or
    /// last time, so that it was skipped).
    pub fn is_timeout(&self) -> bool {
        matches!(
            self.kind,
            NodeErrorKind::Timeout(_) | NodeErrorKind::ConnectTimeout(_)
        ) || matches!(self.not_counted(), Some(NotCounted::Unresponsive { .. }))
    }

    /// Why the node's vote did not count, where that is the error (see
    /// [`NotCounted`]).
    pub fn not_counted(&self) -> Option<&NotCounted> {
        match &self.kind {
            NodeErrorKind::NotCounted(reason) => Some(&**reason),
            _ => None,
        }
    }

    /// Whether the node's grant did not count because it is recovering from a
    /// restart.
    pub fn is_recovering(&self) -> bool {
        self.not_counted().is_some_and(NotCounted::is_recovering)
    }
}

/// The kinds of [`NodeError`].
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum NodeErrorKind {
    /// No answer within the per-node timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The connection failed or the node answered with an error. Shown as the
    /// node's own reply (`READONLY You can't write…`) where there is one.
    #[error("{}", show_redis_error(.0))]
    Redis(#[from] Arc<redis::RedisError>),
    /// The node answered with something the protocol does not allow.
    #[error("unexpected reply {0}")]
    UnexpectedReply(String),
    /// No connection could be made within the connect timeout.
    #[error("could not connect within {0:?}")]
    ConnectTimeout(Duration),
    /// The node's vote does not count toward a quorum now: not checked yet,
    /// unresponsive (then it was not even asked), or recovering from a
    /// restart (asked, its grant not counted). Says why.
    #[error("its vote does not count: {0}")]
    NotCounted(Arc<NotCounted>),
    /// The call was made outside a tokio runtime.
    #[error("no tokio runtime: quorlock must be used within a tokio runtime")]
    NoRuntime,
}

/// The grants that did not count, for an error message: empty, or `; not
/// counted: node a: why; node b: why`.
fn show_not_counted(not_counted: &[NodeError]) -> String {
    let mut shown = String::new();
    for (position, err) in not_counted.iter().enumerate() {
        shown.push_str(if position == 0 {
            "; not counted: "
        } else {
            "; "
        });
        shown.push_str(&err.to_string());
    }
    shown
}

/// A Redis error as the node said it (`CODE detail`), or as the `redis` crate
/// describes a client-side failure.
fn show_redis_error(err: &redis::RedisError) -> String {
    match (err.code(), err.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => err.to_string(),
    }
}

//! What one node answered one request: [`Answer`], and when it failed,
//! [`NodeError`] with its [`NodeErrorKind`], or, for a vote that does not
//! count, [`NotCounted`]. Every call to a node ends in one `Answer`; rounds
//! tally them into [`Votes`](crate::Votes) as they come.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// One node's answer to one request of a round.
#[derive(Debug, Clone)]
pub(crate) enum Answer {
    /// The node did what was asked (set, extended or deleted our key, wrote
    /// the fencing counter back; for an inspection: it holds a key), with
    /// the number it returned: its fencing counter, where the request
    /// returns one.
    Granted(Option<u64>),
    /// The node answered no (for an inspection: the key is absent), with the
    /// ticket under which a queue holds the waiter, where it queued one.
    Refused(Option<u64>),
    /// An inspection's answer where the key exists: the holder's token and
    /// the key's remaining TTL in milliseconds (negative: none). Tallied as
    /// a grant.
    Holds {
        /// The value under the key (ours are UTF-8; others shown lossily).
        token: String,
        /// `PTTL` of the key.
        pttl_ms: i64,
    },
    /// An error, no answer within the bound, or a grant that did not count.
    Failed(NodeError),
    /// Not asked: the node is skipped (it timed out and has not answered a
    /// `PING` since), so the call was never sent and cannot have changed
    /// anything there. Tallied as a failure.
    Unsent(NodeError),
}

impl Answer {
    /// A yes-or-no answer without a number.
    pub(crate) fn yes_or_no(granted: bool) -> Self {
        if granted {
            Answer::Granted(None)
        } else {
            Answer::Refused(None)
        }
    }

    /// Whether the node did what was asked.
    pub(crate) fn is_granted(&self) -> bool {
        matches!(self, Answer::Granted(_))
    }

    /// Whether the node cannot have done what was asked: it answered no, or
    /// the call was never sent. A round's cleanup need not go there.
    pub(crate) fn did_nothing(&self) -> bool {
        matches!(self, Answer::Refused(_) | Answer::Unsent(_))
    }
}

impl From<Result<bool, NodeError>> for Answer {
    fn from(answer: Result<bool, NodeError>) -> Self {
        match answer {
            Ok(granted) => Answer::yes_or_no(granted),
            Err(err) => Answer::Failed(err),
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
///
/// `#[non_exhaustive]`: the ways a node can fail grow with what quorlock
/// asks of it (and with the `redis` crate).
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
    /// No Sentinel of a Sentinel node named a primary: what each answered
    /// (unreachable, no such master).
    #[error("{0}")]
    Sentinel(String),
    /// No node named in a Redis Cluster node's URL told the cluster's
    /// topology: what each answered (unreachable, not a cluster node, no
    /// slot served yet).
    #[error("{0}")]
    Cluster(String),
    /// The server behind a node that follows failovers (a Sentinel node),
    /// or one this client knew as a primary, answers as a replica: a
    /// failover is under way, or the address leads to a replica now. Not
    /// used; asked again at the next attempt.
    #[error("the server answers as a {role} (ROLE), not a primary: a failover under way?")]
    NotPrimary {
        /// The role it gave (`slave`).
        role: String,
    },
    /// Fewer of the node's replicas than
    /// [`replica_acks`](crate::RedlockBuilder::replica_acks) acknowledged a
    /// grant within the per-node timeout (`WAIT`): the grant does not count.
    #[error("only {acknowledged} of the {wanted} replicas wanted acknowledged the grant (WAIT)")]
    ReplicasBehind {
        /// How many replicas acknowledged.
        acknowledged: u32,
        /// How many were wanted.
        wanted: u32,
    },
    /// The call was made outside a tokio runtime.
    #[error("no tokio runtime: quorlock must be used within a tokio runtime")]
    NoRuntime,
}

/// Why a node's votes do not count toward a quorum now.
///
/// `#[non_exhaustive]`: a new check on the nodes may hold votes back for a
/// reason of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotCounted {
    /// No connection to the node has passed its check yet: no connection
    /// (the reason), or the check is under way.
    Unchecked {
        /// Why not, in words.
        reason: String,
    },
    /// The node's last call timed out and it has not answered a probe since.
    /// It is not asked; it is probed in the background and asked again once
    /// it answers.
    Unresponsive {
        /// The per-node timeout it missed.
        timeout: Duration,
    },
    /// The node restarted and may have lost keys (its data is not durable):
    /// it is asked, but its grants do not count until the restart grace has
    /// passed since it came back.
    Recovering {
        /// The `run_id` of the incarnation that came back.
        run_id: String,
        /// The `run_id` this client knew before, or a vanished one it may replace.
        previous_run_id: Option<String>,
        /// Why it is taken to have restarted, in words.
        why: String,
        /// How long until it counts again (zero: due, being recorded).
        counts_in: Duration,
    },
    /// The node's wall clock stepped forward by more than the clock
    /// tolerance (see
    /// [`RedlockBuilder::clock_tolerance`](crate::RedlockBuilder::clock_tolerance)),
    /// which expires its keys early: it is asked, but its grants do not
    /// count until the restart grace has passed since the step was seen.
    ClockStepped {
        /// How far ahead it stepped, about (zero where a note another client
        /// wrote told it).
        ahead: Duration,
        /// How the step was seen, in words.
        why: String,
        /// How long until it counts again.
        counts_in: Duration,
    },
    /// The node lost its data, or may have: its data mark (a value
    /// quorlock keeps on each node, read after every grant) went or was
    /// replaced (a `FLUSHALL`, an empty restart whatever its persistence
    /// settings, a resync from another server, eviction), or the nodes'
    /// records show a mark that counted gone while this node is new to
    /// them. It is asked, but its grants do not count until the restart
    /// grace has passed since the loss was first seen (by any client: the
    /// time is written on the node), and the locks held on it are told.
    DataLost {
        /// How the loss was seen, in words.
        why: String,
        /// How long until it counts again.
        counts_in: Duration,
    },
    /// The node's clock reading, taken after its vote, cannot rule out a
    /// step forward beyond the clock tolerance: the round trip was too long
    /// to tell (see
    /// [`RedlockBuilder::clock_tolerance`](crate::RedlockBuilder::clock_tolerance)).
    /// This vote does not count; nothing is held back.
    ClockUnsure {
        /// How far ahead the clock may have run, at most.
        ahead_at_most: Duration,
        /// The round trip of the request that read it.
        round_trip: Duration,
    },
}

impl NotCounted {
    /// Whether the node is recovering: its server changed (a restart, a
    /// failover) or its data went, and its grants do not count until the
    /// grace has passed.
    pub fn is_recovering(&self) -> bool {
        matches!(
            self,
            NotCounted::Recovering { .. } | NotCounted::DataLost { .. }
        )
    }

    /// Whether the node lost its data (see [`NotCounted::DataLost`]).
    pub fn is_data_lost(&self) -> bool {
        matches!(self, NotCounted::DataLost { .. })
    }

    /// Whether the node is held back because its clock stepped forward.
    pub fn is_clock_stepped(&self) -> bool {
        matches!(self, NotCounted::ClockStepped { .. })
    }
}

impl fmt::Display for NotCounted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotCounted::Unchecked { reason } => write!(f, "not checked yet ({reason})"),
            NotCounted::Unresponsive { timeout } => write!(
                f,
                "skipped: no answer within {timeout:?} last time, not answered a probe since"
            ),
            NotCounted::Recovering {
                run_id,
                previous_run_id,
                why,
                counts_in,
            } => {
                write!(f, "recovering from a restart or failover ({why}; run_id ")?;
                if let Some(previous) = previous_run_id {
                    write!(f, "{} -> ", short(previous))?;
                }
                write!(
                    f,
                    "{}): counts again in {:.1} s",
                    short(run_id),
                    counts_in.as_secs_f64()
                )
            }
            NotCounted::ClockStepped {
                ahead,
                why,
                counts_in,
            } => write!(
                f,
                "held back: its clock stepped forward{} ({why}), which expires keys early; \
                 counts again in {:.1} s",
                if ahead.is_zero() {
                    String::new()
                } else {
                    format!(" by {:.1} s", ahead.as_secs_f64())
                },
                counts_in.as_secs_f64()
            ),
            NotCounted::DataLost { why, counts_in } => write!(
                f,
                "recovering from a loss of data ({why}): counts again in {:.1} s",
                counts_in.as_secs_f64()
            ),
            NotCounted::ClockUnsure {
                ahead_at_most,
                round_trip,
            } => write!(
                f,
                "its clock may have stepped forward beyond the clock tolerance (by up to {} ms): \
                 its reply took {} ms, too long to tell; raise the clock tolerance above twice \
                 the round trip to the nodes",
                ahead_at_most.as_millis(),
                round_trip.as_millis()
            ),
        }
    }
}

/// The first characters of a `run_id`, enough to tell incarnations apart
/// (of each, for a cluster's: its primaries' `run_id`s joined by commas).
fn short(run_id: &str) -> String {
    run_id
        .split(',')
        .map(|part| part.get(..8).unwrap_or(part))
        .collect::<Vec<_>>()
        .join(",")
}
/// A Redis error as the node said it (`CODE detail`), or as the `redis` crate
/// describes a client-side failure.
fn show_redis_error(err: &redis::RedisError) -> String {
    match (err.code(), err.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => err.to_string(),
    }
}

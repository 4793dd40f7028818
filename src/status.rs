//! [`LockStatus`]: what each node says about a lock, for operators and tools.

use std::fmt;
use std::time::Duration;

use crate::error::NodeError;

/// How many characters of a holder's token a status shows. The whole token is
/// never shown: whoever knows it can release the lock.
pub const TOKEN_PREFIX_LEN: usize = 8;

/// What one node holds for a resource.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum NodeState {
    /// The key is absent.
    Free,
    /// The key is present.
    Held {
        /// The first [`TOKEN_PREFIX_LEN`] characters of the holder's token.
        token_prefix: String,
        /// The key's remaining TTL (`None` if it has none, which quorlock never sets).
        ttl: Option<Duration>,
    },
    /// The node could not be asked.
    Failed(NodeError),
}

/// One node's answer in a [`LockStatus`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeStatus {
    /// The node, as `host:port`.
    pub node: String,
    /// What it holds.
    pub state: NodeState,
}

/// A snapshot of a lock across all nodes, from [`Redlock::status`](crate::Redlock::status).
///
/// It is a snapshot: by the time you read it, the lock may have changed hands.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LockStatus {
    /// Each node's answer, in the order the nodes were given.
    pub nodes: Vec<NodeStatus>,
    /// Votes needed to hold the lock.
    pub quorum: usize,
    /// The token prefix held by at least a quorum of nodes, if any.
    pub holder: Option<String>,
}

/// One node's raw answer: its name, and the holder's full token with the
/// key's PTTL in milliseconds (`None` when the key is absent).
pub(crate) type NodeAnswer = (String, Result<Option<(String, i64)>, NodeError>);

impl LockStatus {
    /// Builds the status from each node's full token (compared whole, shown cut).
    pub(crate) fn from_answers(answers: Vec<NodeAnswer>, quorum: usize) -> Self {
        let mut holder = None;
        for (_, answer) in &answers {
            if let Ok(Some((token, _))) = answer {
                let same = answers
                    .iter()
                    .filter(|(_, other)| matches!(other, Ok(Some((t, _))) if t == token))
                    .count();
                if same >= quorum {
                    holder = Some(prefix(token));
                    break;
                }
            }
        }
        let nodes = answers
            .into_iter()
            .map(|(node, answer)| NodeStatus {
                node,
                state: match answer {
                    Ok(None) => NodeState::Free,
                    Ok(Some((token, pttl))) => NodeState::Held {
                        token_prefix: prefix(&token),
                        ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
                    },
                    Err(err) => NodeState::Failed(err),
                },
            })
            .collect();
        LockStatus {
            nodes,
            quorum,
            holder,
        }
    }

    /// Whether a quorum of nodes holds the key under one token.
    pub fn is_held(&self) -> bool {
        self.holder.is_some()
    }

    /// Whether the answers settle the question: held, or free on enough nodes
    /// that no quorum can hold it.
    pub fn is_known(&self) -> bool {
        let failed = self
            .nodes
            .iter()
            .filter(|status| matches!(status.state, NodeState::Failed(_)))
            .count();
        self.is_held() || self.nodes.len() - failed >= self.quorum
    }
}

fn prefix(token: &str) -> String {
    token.chars().take(TOKEN_PREFIX_LEN).collect()
}

impl fmt::Display for LockStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for status in &self.nodes {
            match &status.state {
                NodeState::Free => writeln!(f, "{:<24} free", status.node)?,
                NodeState::Held { token_prefix, ttl } => match ttl {
                    Some(ttl) => writeln!(
                        f,
                        "{:<24} held by {token_prefix}… ttl {} ms",
                        status.node,
                        ttl.as_millis()
                    )?,
                    None => writeln!(f, "{:<24} held by {token_prefix}… no ttl", status.node)?,
                },
                NodeState::Failed(err) => writeln!(f, "{:<24} error: {}", status.node, err.kind())?,
            }
        }
        match (&self.holder, self.is_known()) {
            (Some(holder), _) => write!(
                f,
                "held by {holder}… on a quorum ({} of {} nodes needed)",
                self.quorum,
                self.nodes.len()
            ),
            (None, true) => write!(
                f,
                "free: no quorum holds it ({} of {} nodes needed)",
                self.quorum,
                self.nodes.len()
            ),
            (None, false) => write!(
                f,
                "unknown: too few nodes answered ({} of {} needed)",
                self.quorum,
                self.nodes.len()
            ),
        }
    }
}

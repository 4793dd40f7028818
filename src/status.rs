//! [`LockStatus`]: what each node says about a lock, for operators and tools.

use std::fmt;
use std::time::Duration;

use crate::answer::{Answer, NodeError, NotCounted};

/// How many characters of a holder's token a status shows. The whole token is
/// never shown: whoever knows it can release the lock.
const TOKEN_PREFIX_LEN: usize = 8;

/// What one node holds for a resource.
///
/// `#[non_exhaustive]`: new kinds of lock may hold resources in other
/// ways (a read-write lock's holds are told by [`RwStatus`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum NodeState {
    /// The key is absent.
    Free,
    /// The key is present.
    Held {
        /// The first [`LockStatus::TOKEN_PREFIX_LEN`] characters of the holder's token;
        /// `next:` and the start of the waiter's id when a release handed the
        /// lock on to the first waiter in the queue, who has yet to claim it.
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
    /// Why its votes do not count toward a quorum now, if they do not (a
    /// node recovering from a restart, say). What it holds is shown all the
    /// same.
    pub not_counted: Option<NotCounted>,
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
    /// Why this client refuses to lock over these nodes, if it does
    /// ([`Error::Misconfigured`](crate::Error::Misconfigured): a node that
    /// may evict lock keys, a replica, one server listed twice). What the
    /// nodes hold is shown all the same.
    pub refused: Option<String>,
    /// Whether no quorum can hold the lock, whatever the silent nodes hold.
    free: bool,
}

impl LockStatus {
    /// How many characters of a holder's token a status shows. The whole
    /// token is never shown: whoever knows it can release the lock.
    pub const TOKEN_PREFIX_LEN: usize = TOKEN_PREFIX_LEN;

    /// Notes, node by node, why votes do not count (in node order), and
    /// why locking is refused, if it is.
    pub(crate) fn with_standing(
        mut self,
        not_counted: impl Iterator<Item = Option<NotCounted>>,
        refused: Option<String>,
    ) -> Self {
        for (status, reason) in self.nodes.iter_mut().zip(not_counted) {
            status.not_counted = reason;
        }
        self.refused = refused;
        self
    }
}

impl LockStatus {
    /// Builds the status from an inspection round's answers, node by node
    /// (`Holds`: the holder's full token, compared whole and shown cut, and
    /// the key's PTTL; `Failed`: the node did not answer; anything else: the
    /// key is absent), with quorum `quorum`.
    ///
    /// The lock is free only if no token can be on a quorum: for the token
    /// seen on the most nodes, those nodes plus every node that did not
    /// answer (each may hold it, or any token never seen) stay below the
    /// quorum.
    pub(crate) fn from_answers(answers: Vec<(String, Answer)>, quorum: usize) -> Self {
        let holds = |answer: &Answer| match answer {
            Answer::Holds { token, .. } => Some(token.clone()),
            _ => None,
        };
        let mut holder = None;
        let mut most_on_one_token = 0;
        for token in answers.iter().filter_map(|(_, answer)| holds(answer)) {
            let same = answers
                .iter()
                .filter(|(_, other)| holds(other).as_ref() == Some(&token))
                .count();
            most_on_one_token = most_on_one_token.max(same);
            if same >= quorum && holder.is_none() {
                holder = Some(prefix(&token));
            }
        }
        let silent = answers
            .iter()
            .filter(|(_, answer)| matches!(answer, Answer::Failed(_) | Answer::Unsent(_)))
            .count();
        let free = holder.is_none() && most_on_one_token + silent < quorum;
        let nodes = answers
            .into_iter()
            .map(|(node, answer)| NodeStatus {
                node,
                state: match answer {
                    Answer::Holds { token, pttl_ms } => NodeState::Held {
                        token_prefix: prefix(&token),
                        ttl: u64::try_from(pttl_ms).ok().map(Duration::from_millis),
                    },
                    Answer::Failed(err) | Answer::Unsent(err) => NodeState::Failed(err),
                    Answer::Granted(_) | Answer::Refused(_) => NodeState::Free,
                },
                not_counted: None,
            })
            .collect();
        LockStatus {
            nodes,
            quorum,
            holder,
            refused: None,
            free,
        }
    }

    /// Whether a quorum of nodes holds the key under one token.
    pub fn is_held(&self) -> bool {
        self.holder.is_some()
    }

    /// Whether no quorum can hold the lock under any token: the nodes that
    /// hold the most common token, together with every node that did not
    /// answer, are fewer than a quorum. A silent node is counted as holding
    /// whatever would make a quorum, since it may.
    pub fn is_free(&self) -> bool {
        self.free
    }

    /// Whether the answers settle the question: held by a quorum, or
    /// [free](Self::is_free).
    pub fn is_known(&self) -> bool {
        self.is_held() || self.is_free()
    }
}

/// What [`Redlock::unlock_token`](crate::Redlock::unlock_token) found: a
/// release of the lock by its token, from a process other than the holder's.
///
/// `#[non_exhaustive]`: a later version may tell more cases apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenRelease {
    /// The token held the lock on `nodes` nodes, and the release removed it
    /// there (handing the lock on to the first waiter in the queue, where
    /// one waits): the lock is no longer the token holder's.
    Released {
        /// The nodes that held the token and released it.
        nodes: usize,
    },
    /// No node holds the lock under this token: `nodes` nodes hold it
    /// under another (another holder's, or a waiter's it was handed on
    /// to). Nothing was changed.
    HeldByOther {
        /// The nodes that hold another token.
        nodes: usize,
    },
    /// No node holds the lock at all (it was released, or expired).
    NotHeld,
    /// No node released it and none shows another holder, but `unanswered`
    /// nodes did not answer (or still show the token after a release that
    /// did not reach them): the token may still hold the lock there until
    /// its TTL. Retry, or wait for the TTL.
    Unknown {
        /// The nodes that did not answer.
        unanswered: usize,
    },
}

impl TokenRelease {
    /// After a release by `token` that no node granted, in which the nodes
    /// `refused` (in node order) answered that they do not hold the token:
    /// what `status`, read next, shows. A node that did not answer the
    /// release and shows the token's first characters (as far as a status
    /// shows them) may hold the token itself.
    pub(crate) fn after_refusal(
        status: &LockStatus,
        refused: &[bool],
        token: &str,
    ) -> TokenRelease {
        let ours = prefix(token);
        let (mut other, mut unanswered) = (0, 0);
        for (index, node) in status.nodes.iter().enumerate() {
            let answered = refused.get(index).copied().unwrap_or(false);
            match &node.state {
                NodeState::Held { token_prefix, .. } if !answered && *token_prefix == ours => {
                    unanswered += 1;
                }
                NodeState::Held { .. } => other += 1,
                NodeState::Failed(_) if !answered => unanswered += 1,
                NodeState::Failed(_) | NodeState::Free => {}
            }
        }
        match (other, unanswered) {
            (0, 0) => TokenRelease::NotHeld,
            (0, unanswered) => TokenRelease::Unknown { unanswered },
            (nodes, _) => TokenRelease::HeldByOther { nodes },
        }
    }
}

/// What a status shows of a key's value: the token's first
/// [`LockStatus::TOKEN_PREFIX_LEN`] characters, or for a lock handed on to a waiter in
/// the queue, `next:` and the first characters of the waiter's id.
fn prefix(token: &str) -> String {
    match token.strip_prefix(crate::queue::entries::RESERVED_PREFIX) {
        Some(waiter) => format!(
            "next:{}",
            waiter.chars().take(TOKEN_PREFIX_LEN).collect::<String>()
        ),
        None => token.chars().take(TOKEN_PREFIX_LEN).collect(),
    }
}

/// A snapshot of a read-write lock across all nodes, from
/// [`Redlock::rw_status`](crate::Redlock::rw_status).
///
/// It is a snapshot: by the time you read it, readers and writers may have
/// come and gone.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RwStatus {
    /// The writer's key, as [`Redlock::status`](crate::Redlock::status)
    /// shows a plain lock's.
    pub writer: LockStatus,
    /// A waiting writer's intent, likewise (held: a writer waits, and new
    /// readers are refused on those nodes).
    pub intent: LockStatus,
    /// Each node's name and its count of readers whose hold has not ended
    /// (`None`: the node did not answer), in node order.
    pub readers: Vec<(String, Option<u64>)>,
    /// Votes needed to hold the lock.
    pub quorum: usize,
}

impl RwStatus {
    /// Whether at least a quorum of nodes has a reader whose hold has not
    /// ended: readers may hold the lock.
    pub fn readers_on_quorum(&self) -> bool {
        let with_readers = (self.readers.iter())
            .filter(|(_, count)| count.is_some_and(|count| count > 0))
            .count();
        with_readers >= self.quorum
    }

    /// Whether no node that answered has a reader, and the silent ones are
    /// too few to make a quorum.
    pub fn no_readers(&self) -> bool {
        let silent = self
            .readers
            .iter()
            .filter(|(_, count)| count.is_none())
            .count();
        let none = (self.readers.iter()).all(|(_, count)| count.is_none_or(|count| count == 0));
        none && silent < self.quorum
    }
}

impl fmt::Display for RwStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "writer:\n{}", self.writer)?;
        writeln!(f, "writer's intent:\n{}", self.intent)?;
        writeln!(f, "readers:")?;
        for (node, count) in &self.readers {
            match count {
                Some(count) => writeln!(f, "{node:<24} {count}")?,
                None => writeln!(f, "{node:<24} error")?,
            }
        }
        if self.readers_on_quorum() {
            write!(f, "readers on a quorum ({} nodes needed)", self.quorum)
        } else if self.no_readers() {
            write!(f, "no readers")
        } else {
            write!(f, "readers on too few nodes to hold it")
        }
    }
}

impl fmt::Display for LockStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(reason) = &self.refused {
            writeln!(f, "locking refused: {reason}")?;
        }
        for status in &self.nodes {
            write!(f, "{:<24} ", status.node)?;
            match &status.state {
                NodeState::Free => write!(f, "free")?,
                NodeState::Held { token_prefix, ttl } => match ttl {
                    Some(ttl) => write!(f, "held by {token_prefix}… ttl {} ms", ttl.as_millis())?,
                    None => write!(f, "held by {token_prefix}… no ttl")?,
                },
                NodeState::Failed(err) => write!(f, "error: {}", err.kind())?,
            }
            match &status.not_counted {
                Some(reason) => writeln!(f, " (does not count: {reason})")?,
                None => writeln!(f)?,
            }
        }
        match (&self.holder, self.is_free()) {
            (Some(holder), _) => write!(
                f,
                "held by {holder}… on a quorum ({} of {} nodes needed)",
                self.quorum,
                self.nodes.len()
            ),
            (None, true) => write!(
                f,
                "free: no quorum can hold it ({} of {} nodes needed)",
                self.quorum,
                self.nodes.len()
            ),
            (None, false) => write!(
                f,
                "unknown: the nodes that did not answer could make a quorum with a holder ({} of {} needed)",
                self.quorum,
                self.nodes.len()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answer::NodeErrorKind;

    fn free(node: &str) -> (String, Answer) {
        (node.to_owned(), Answer::Refused(None))
    }

    fn held(node: &str, token: &str) -> (String, Answer) {
        let token = token.to_owned();
        (
            node.to_owned(),
            Answer::Holds {
                token,
                pttl_ms: 5_000,
            },
        )
    }

    fn failed(node: &str) -> (String, Answer) {
        let error = NodeError::new(
            node.into(),
            NodeErrorKind::Timeout(Duration::from_millis(50)),
        );
        (node.to_owned(), Answer::Failed(error))
    }

    #[test]
    fn a_refused_release_by_token_is_told_by_the_status_after_it() {
        const OURS: &str = "q0123456789abcdef0123456789abcdef";
        // Same first characters, another token: the nodes refused ours.
        const LIKE: &str = "q0123456789abcdef0123456789abcde0";
        let status = |answers| LockStatus::from_answers(answers, 2);
        let all_refused = [true, true, true];
        let like = status(vec![held("a", LIKE), held("b", LIKE), free("c")]);
        assert_eq!(
            TokenRelease::after_refusal(&like, &all_refused, OURS),
            TokenRelease::HeldByOther { nodes: 2 }
        );
        let none = status(vec![free("a"), free("b"), free("c")]);
        assert_eq!(
            TokenRelease::after_refusal(&none, &all_refused, OURS),
            TokenRelease::NotHeld
        );
        // A node that did not answer the release and shows our token's
        // start, and one that answers nothing at all: unknown.
        let silent = status(vec![held("a", OURS), failed("b"), free("c")]);
        assert_eq!(
            TokenRelease::after_refusal(&silent, &[false, false, true], OURS),
            TokenRelease::Unknown { unanswered: 2 }
        );
        // Another holder wins over silence: nothing was ours to release.
        let other = status(vec![held("a", LIKE), failed("b"), free("c")]);
        assert_eq!(
            TokenRelease::after_refusal(&other, &[true, false, true], OURS),
            TokenRelease::HeldByOther { nodes: 1 }
        );
    }

    #[test]
    fn free_only_when_no_quorum_can_hold_it() {
        let status = LockStatus::from_answers(vec![free("a"), free("b"), failed("c")], 2);
        assert!(status.is_free() && status.is_known() && !status.is_held());

        // The field report: X's key deleted on one node, still on another,
        // the third frozen: it may hold X's token too, so X may hold a quorum.
        let status =
            LockStatus::from_answers(vec![free("a"), held("b", "x-token"), failed("c")], 2);
        assert!(!status.is_free() && !status.is_known());
        assert!(status.to_string().contains("unknown"), "{status}");

        // Two different holders of one node each: no token can reach two.
        let status = LockStatus::from_answers(vec![held("a", "x"), held("b", "y"), free("c")], 2);
        assert!(status.is_free());

        let status = LockStatus::from_answers(vec![held("a", "x"), held("b", "x"), failed("c")], 2);
        assert!(status.is_held() && status.is_known() && !status.is_free());

        let status = LockStatus::from_answers(vec![free("a"), failed("b"), failed("c")], 2);
        assert!(!status.is_known());
    }
}

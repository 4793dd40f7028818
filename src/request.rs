//! What a round asks each node: one [`Request`], sent to every node by the
//! engine's one "ask every node" helper and answered by each node with one
//! [`Answer`](crate::answer::Answer). A new kind of lock adds a kind of
//! request here (and its script), not a second way to ask the nodes.

use std::sync::Arc;

use crate::queue::entries::Place;

/// The other keys of a lock on several resources (see [`Shape::All`]).
pub(crate) type OtherKeys = Arc<[Arc<[u8]>]>;

/// What follows a read-write lock's key (the key prefix and the resource
/// name) in the key of its writer: a string, the writer's token, with the
/// lock's TTL, as a plain lock's key.
pub(crate) const WRITE_SUFFIX: &str = ":quorlock-write";
/// What follows a read-write lock's key in the key of its readers: a sorted
/// set of reader tokens by the time, on the node's clock in ms, at which
/// each reader's hold ends; the set's own TTL covers the latest.
pub(crate) const READ_SUFFIX: &str = ":quorlock-read";
/// What follows a read-write lock's key in the key of a waiting writer's
/// intent: the writer's id, with a short TTL that the writer's rounds
/// renew; while it exists, no reader is granted there.
pub(crate) const INTENT_SUFFIX: &str = ":quorlock-intent";
/// What follows a read-write lock's key in the key of its writers' gate: a
/// plain lock whose queue orders the writers that were refused, so that
/// one at a time leaves its intent (see `acquire/rw.rs`).
pub(crate) const WRITERS_SUFFIX: &str = ":quorlock-writers";

/// What follows a leader's lock key (the key prefix and the election's
/// name) in the key of its record: a string, `token term identity`, written
/// by the leader once it won (see `election.rs`), without a TTL.
pub(crate) const LEADER_SUFFIX: &str = ":quorlock-leader";

/// What follows a semaphore's key (the key prefix and its name) in the key
/// of its gate: a plain lock whose queue orders the semaphore's waiters
/// (see `semaphore.rs`).
pub(crate) const GATE_SUFFIX: &str = ":quorlock-gate";
/// What follows a semaphore's key in the keys of its slots, before the
/// slot's number: each a plain lock, one per permit.
pub(crate) const PERMIT_INFIX: &str = ":quorlock-permit-";

/// The keys of a read-write lock on each node: its key (the key prefix and
/// the resource name) followed by [`WRITE_SUFFIX`], [`READ_SUFFIX`] and
/// [`INTENT_SUFFIX`]. Made once per call; every round and node shares them.
#[derive(Debug)]
pub(crate) struct RwKeys {
    /// The writer's key.
    pub(crate) write: Arc<[u8]>,
    /// The readers' set.
    pub(crate) read: Arc<[u8]>,
    /// A waiting writer's intent.
    pub(crate) intent: Arc<[u8]>,
}

impl RwKeys {
    /// The keys of the read-write lock whose key is `key`.
    pub(crate) fn of(key: &[u8]) -> Arc<Self> {
        Arc::new(RwKeys {
            write: suffixed(key, WRITE_SUFFIX),
            read: suffixed(key, READ_SUFFIX),
            intent: suffixed(key, INTENT_SUFFIX),
        })
    }
}

/// `key` followed by `suffix`: a key of the crate's own beside a lock's
/// (in its hash slot, as the suffix follows the braces of a slotted key).
pub(crate) fn suffixed(key: &[u8], suffix: &str) -> Arc<[u8]> {
    [key, suffix.as_bytes()].concat().into()
}

/// Which kind of lock a [`LockId`] is, and so which keys and scripts its
/// rounds use.
#[derive(Debug, Clone)]
pub(crate) enum Shape {
    /// A plain lock: one key, `SET NX`.
    One,
    /// A lock on several resources ([`lock_all`](crate::Redlock::lock_all)):
    /// its other keys, after `key`, in byte order, none twice. One token
    /// holds them all.
    All(OtherKeys),
    /// A reader of the read-write lock on `key` (its entry in the readers'
    /// set), with the lock's keys.
    Read(Arc<RwKeys>),
    /// The writer of the read-write lock on `key`, with the lock's keys,
    /// the id its rounds leave as the writer's intent while it waits
    /// (`None`: one round, no intent), and how long, in ms, an intent lives
    /// after the round that left it.
    Write {
        keys: Arc<RwKeys>,
        intent: Option<Arc<str>>,
        intent_ms: u64,
    },
}

/// The nodes (by index, the first 64) that a round's call reached: their
/// answer came from the node, or the call was never sent (a skipped node).
/// A request sent there afterwards runs after the round's call; a release
/// sent to a node not in the set first waits until the node's batches
/// gathered before it have gone out (see `Batches::sent`), since the
/// round's vote may still be gathering there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Reached(u64);

impl Reached {
    /// No node: every release waits for the batches gathered before it.
    pub(crate) const NONE: Reached = Reached(0);

    /// The nodes `indexes` (those past the 64th left out: a release
    /// there waits).
    pub(crate) fn of(indexes: impl Iterator<Item = usize>) -> Reached {
        Reached(
            indexes
                .filter(|index| *index < 64)
                .fold(0, |set, index| set | 1 << index),
        )
    }

    /// Whether the round's call to node `index` reached it.
    pub(crate) fn contains(self, index: usize) -> bool {
        index < 64 && self.0 & (1 << index) != 0
    }
}

/// One lock's identity on the nodes: its key (its keys, for a lock on
/// several resources) and the token that marks it as ours. They always
/// travel together.
#[derive(Debug, Clone)]
pub(crate) struct LockId {
    /// The Redis key: the key prefix followed by the resource name (of a
    /// lock on several resources, the first of its keys in byte order; of a
    /// read-write lock, the key its writer, readers and intent keys start with).
    pub(crate) key: Arc<[u8]>,
    /// The random token that only this holder knows (a waiter's id, when a
    /// waiter leaves the queue: it matches only a reservation for it).
    pub(crate) token: Arc<str>,
    /// Which kind of lock it is.
    pub(crate) shape: Shape,
}

impl LockId {
    /// A fresh identity for `key` (and the keys or kind `shape` names): a
    /// new random token (see [`new_token`]).
    pub(crate) fn fresh(key: &Arc<[u8]>, shape: &Shape) -> Self {
        LockId {
            key: key.clone(),
            token: new_token(),
            shape: shape.clone(),
        }
    }

    /// A plain lock's identity.
    pub(crate) fn plain(key: Arc<[u8]>, token: Arc<str>) -> Self {
        LockId {
            key,
            token,
            shape: Shape::One,
        }
    }

    /// Every key of a plain lock or a lock on several resources, `key` first.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &[u8]> {
        let others = match &self.shape {
            Shape::All(others) => &others[..],
            _ => &[],
        };
        std::iter::once(&*self.key).chain(others.iter().map(|key| &**key))
    }

    /// How many keys [`keys`](Self::keys) gives.
    pub(crate) fn key_count(&self) -> usize {
        match &self.shape {
            Shape::All(others) => 1 + others.len(),
            _ => 1,
        }
    }

    /// The key that holds our token as a string, as a plain lock's key does
    /// (the extend, release and fencing scripts take it): the lock's key
    /// (the first of several), or a writer's key; `None` for a reader, whose
    /// token is an entry in the readers' set.
    pub(crate) fn held_key(&self) -> Option<&[u8]> {
        match &self.shape {
            Shape::One | Shape::All(_) => Some(&self.key),
            Shape::Write { keys, .. } => Some(&keys.write),
            Shape::Read(_) => None,
        }
    }
}

/// A fresh random token: `q` and a UUID v4 in lowercase hex (122 random
/// bits), 33 characters. The bits come from `rand`'s thread-local generator
/// (ChaCha12, seeded from the OS and reseeded as it goes, a cryptographically
/// secure generator), not from a `getrandom` system call per token, which
/// costs about 5 % of the CPU of an uncontended lock + unlock at one node.
///
/// The `q` tells the queue script a quorlock holder from a foreign one
/// (rslock's 20 random bytes, node-redlock's 32 hex digits, redsync's 24
/// base64 characters): only a quorlock holder accepts its value marked
/// (see [`MARK`]), so only its value is marked.
pub(crate) fn new_token() -> Arc<str> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let uuid = uuid::Builder::from_random_bytes(rand::random()).into_uuid();
    let mut text = [b'q'; TOKEN_LEN];
    // The hex digits written by hand: uuid's formatter takes 40 % of a token.
    for (digits, byte) in text[1..].chunks_exact_mut(2).zip(uuid.into_bytes()) {
        digits[0] = HEX[usize::from(byte >> 4)];
        digits[1] = HEX[usize::from(byte & 0x0f)];
    }
    Arc::from(std::str::from_utf8(&text).expect("a q and hex digits are ASCII"))
}

/// The length of a token: `q` and 32 hex digits.
pub(crate) const TOKEN_LEN: usize = 1 + uuid::fmt::Simple::LENGTH;

/// What a node appends to a quorlock holder's token while waiters are queued
/// behind it there (the queue script marks it, see `queue/`): the release
/// of an unmarked token is a plain compare-and-delete, with no look at the
/// queue. The extend, release and fencing scripts accept our token with or
/// without it; a status reads the token without it ([`unmarked`]).
pub(crate) const MARK: char = '+';

/// A node's value for a lock key, without the waiters' [`MARK`].
pub(crate) fn unmarked(value: &str) -> &str {
    match value.strip_suffix(MARK) {
        Some(token) if token.len() == TOKEN_LEN && token.starts_with('q') => token,
        _ => value,
    }
}

/// What a round asks each node.
#[derive(Debug, Clone)]
pub(crate) enum Request {
    /// Set the key unless it exists: `SET key token NX GET PX ttl` (`SET NX
    /// PX` before Redis 7.0), or with a fencing counter key the fenced
    /// acquire script, which also returns the node's incremented counter.
    Acquire {
        /// The lock to take.
        lock: LockId,
        /// Its TTL in milliseconds.
        ttl_ms: u64,
        /// The fencing counter's key, with fencing on.
        counter_key: Option<Arc<[u8]>>,
    },
    /// A writer's first round, unfenced: `SET NX PX` on the writer's key
    /// and `EXISTS` of the readers' set and the intent, pipelined, with no
    /// script; granted where it set the key and neither exists (elsewhere
    /// the node gives back what it set before it answers). See
    /// `acquire/rw.rs`.
    FirstWrite {
        /// The writer's lock ([`Shape::Write`]).
        lock: LockId,
        /// Its TTL in milliseconds.
        ttl_ms: u64,
    },
    /// A reader's first round: four plain commands, pipelined, with no
    /// script, where the node allows it (see `read_round.rs`); the read
    /// script elsewhere.
    FirstRead {
        /// The reader's lock ([`Shape::Read`]).
        lock: LockId,
        /// Its TTL in milliseconds.
        ttl_ms: u64,
    },
    /// The queue's acquire script: set the key only when it is free for this
    /// waiter, and queue the waiter otherwise (see `queue/`).
    Wait {
        /// The lock to take.
        lock: LockId,
        /// Its TTL in milliseconds.
        ttl_ms: u64,
        /// The fencing counter's key, with fencing on.
        counter_key: Option<Arc<[u8]>>,
        /// The waiter's id.
        waiter: Arc<str>,
        /// The waiter's ticket (0: join at the back).
        ticket: u64,
    },
    /// Rewrite the caller's plain locks on each key of a lock on several
    /// resources to the lock's one token, all or none (the gather script;
    /// see `sets.rs`).
    Gather {
        /// The lock on several resources to take.
        lock: LockId,
        /// Its TTL in milliseconds.
        ttl_ms: u64,
        /// The fencing counter's key, with fencing on.
        counter_key: Option<Arc<[u8]>>,
        /// The token of the caller's plain lock on each key, in the order of
        /// [`LockId::keys`].
        held: Arc<[Arc<str>]>,
    },
    /// Reset our key's TTL (the extend script).
    Extend {
        /// The lock to extend.
        lock: LockId,
        /// The new TTL in milliseconds.
        ttl_ms: u64,
    },
    /// The fencing write-back: `counter = max(counter, token)` while our key
    /// is there.
    WriteBack {
        /// The lock just taken.
        lock: LockId,
        /// The fencing counter's key.
        counter_key: Arc<[u8]>,
        /// The fencing token to write back.
        fencing_token: u64,
    },
    /// Delete our key, or hand it on to the first waiter (the release script).
    Release {
        /// The lock to release.
        lock: LockId,
        /// What becomes of a waiter's own entry.
        place: Place,
        /// The nodes that the round which set the keys reached: there the
        /// release need not wait for the batches gathering before it.
        reached: Reached,
    },
    /// Write `value` to `record` while `lock`'s key holds our token; an
    /// empty `value` deletes the record where it is ours (a leader's record,
    /// see `election.rs`).
    Record {
        /// The lock whose holder writes.
        lock: LockId,
        /// The record's key.
        record: Arc<[u8]>,
        /// What to write: `token term identity`, or empty to withdraw.
        value: Arc<str>,
    },
    /// Read who holds the key and for how long (status).
    Inspect {
        /// The key to read.
        key: Arc<[u8]>,
    },
    /// Count the readers whose hold has not ended in a read-write lock's
    /// readers' set (status).
    CountReaders {
        /// The readers' set.
        key: Arc<[u8]>,
    },
}

impl Request {
    /// Whether the request asks for a vote (grants count only from nodes
    /// whose votes count, and unresponsive nodes are not asked), as opposed
    /// to a release (always sent) or a read.
    pub(crate) fn is_vote(&self) -> bool {
        matches!(
            self,
            Request::Acquire { .. }
                | Request::Wait { .. }
                | Request::FirstWrite { .. }
                | Request::FirstRead { .. }
                | Request::Gather { .. }
                | Request::Extend { .. }
                | Request::WriteBack { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reached_holds_the_nodes_named_and_none_past_the_64th() {
        let reached = Reached::of([0, 2, 63, 64, 100].into_iter());
        let members: Vec<usize> = (0..130).filter(|index| reached.contains(*index)).collect();
        assert_eq!(members, [0, 2, 63]);
        assert!((0..130).all(|index| !Reached::NONE.contains(index)));
    }

    #[test]
    fn tokens_are_distinct_uuid_v4_in_lowercase_hex_after_a_q() {
        let tokens: std::collections::HashSet<Arc<str>> = (0..1000).map(|_| new_token()).collect();
        assert_eq!(tokens.len(), 1000, "no two tokens alike");
        for token in &tokens {
            assert_eq!(token.len(), TOKEN_LEN, "{token}");
            assert_eq!(TOKEN_LEN, 33);
            let hex = token.strip_prefix('q').expect("a q first");
            assert!(
                hex.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            );
            let uuid = uuid::Uuid::parse_str(hex).expect("a UUID");
            assert_eq!(uuid.get_version_num(), 4, "{token}");
        }
    }

    #[test]
    fn only_a_quorlock_token_loses_its_mark() {
        let token = new_token();
        assert_eq!(unmarked(&format!("{token}{MARK}")), &*token);
        assert_eq!(unmarked(&token), &*token);
        // Foreign values, and a reservation, are shown as they are.
        let foreign = "0123456789abcdef0123456789abcdef+";
        assert_eq!(unmarked(foreign), foreign);
        assert_eq!(unmarked("quorlock-next:w.1+"), "quorlock-next:w.1+");
    }
}

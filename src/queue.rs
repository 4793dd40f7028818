//! The queue of waiters on the nodes: fairness across processes.
//!
//! A caller of [`lock`](crate::Redlock::lock) that finds the lock held does
//! not retry blind: it waits in a queue kept *on each node*, next to the lock
//! key, and is served in about the order it arrived, whichever client or
//! machine it runs in.
//!
//! # The mechanism
//!
//! For a lock key `K`, each node keeps `K:quorlock-queue` (a sorted set:
//! waiter id by *ticket*) and `K:quorlock-alive` (a hash: waiter id → until
//! when, on the node's clock, the entry lives). Every round of a waiting
//! `lock` call runs one script per node (`scripts::WAIT`) that either takes
//! the lock or queues the waiter:
//!
//! - It sets `K` (`SET PX`, as a plain Redlock round) only when `K` is
//!   absent and the caller is the queue's first live entry (or the queue is
//!   empty), or when `K` holds the caller's *reservation*. Otherwise it puts
//!   the caller in the queue, or refreshes its entry.
//! - A release (`scripts::RELEASE`, token-checked as before) does not just
//!   delete `K` when someone waits: it replaces our token with a reservation
//!   for the first waiter, `quorlock-next:<waiter id>`, that lives as long
//!   as that waiter's entry, and publishes the waiter id on the channel `K`.
//!   Only that waiter acts on it: no herd. It makes its claim round once a
//!   quorum of nodes told it so (or shortly after the first did).
//! - Tickets: a new waiter joins each node at "last ticket there + 1"; the
//!   client takes the highest ticket any node gave and, if the nodes
//!   differed, writes it to every node with its next round. From then on
//!   the waiter sorts the same way on every node (ties broken by waiter id,
//!   as sorted sets do), so the nodes' heads agree once they hold the same
//!   entries. A waiter whose join overlapped nobody's sorts after every
//!   waiter already queued on a quorum: first come, first served.
//! - Liveness: every entry expires [`WAITER_LIFETIME`] after its last
//!   refresh; a waiting call refreshes it with a round every
//!   [`REFRESH_INTERVAL`] at most (that round also repairs an entry a node
//!   lost, and takes a lock freed without a notification). A call that gives
//!   up, wins, or whose future is dropped removes its entry in the background
//!   (and passes on a reservation made for it).
//!
//! # Why it cannot break mutual exclusion
//!
//! The queue only ever *withholds* a grant. A node sets `K` to a token only
//! when `K` is absent or holds a reservation, never over another token, so
//! each node holds at most one token at a time, exactly as with `SET NX`;
//! a reservation is not a token (no token starts with `quorlock-next:`, and
//! the extend and release scripts compare whole tokens), so it grants
//! nothing to anyone until a claim turns it into a token. Acquisition still
//! needs a quorum of nodes holding our token within the validity window,
//! and two quorums intersect: two valid holders would need one node holding
//! two tokens. Clients that know nothing of the queue (rslock, node-redlock,
//! redsync on the same key with `key_prefix("")`) see a reservation as a
//! held key and keep out, and their own `SET NX` still excludes quorlock:
//! a foreign holder's key is a token like any other. Their releases delete
//! the key without handing it on; queued waiters then take it at their next
//! refresh round.
//!
//! # Why nodes that disagree cannot stop the lock
//!
//! Nodes disagree when a join or refresh missed some (a timeout, a node
//! restarted empty), when tickets are not yet written back, or when an entry
//! expired on one node's clock and not yet on another's. None of it lasts:
//!
//! - A missing or outdated entry is rewritten by the waiter's next round, at
//!   most [`REFRESH_INTERVAL`] later, on every node that answers.
//! - The entry of a dead waiter (SIGKILLed, partitioned) expires at most
//!   [`WAITER_LIFETIME`] after its last refresh, and a reservation for it at
//!   the same moment; the next waiter's refresh round then finds itself
//!   first and takes the lock. A dropped `lock` future leaves at once.
//! - A round that won some nodes but not a quorum gives them back and keeps
//!   its place: the cleanup puts the waiter back under its ticket and hands
//!   the key on to the node's first waiter, who is the same on every node
//!   once the entries agree.
//! - A reservation for a waiter that is no longer first (its entry expired
//!   or sorted behind another) is void: the next round there passes it on.
//!
//! So once every live waiter's entry is on every answering node with its
//! final ticket (one refresh interval after the last disturbance), the
//! waiter with the lowest ticket that reaches a quorum is first on all of
//! them and takes the lock when its holder lets go or expires. Progress
//! needs what Redlock always needs, a quorum that answers; a waiter that
//! reaches only a minority can block only nodes it reaches, and only until
//! its patience runs out (it then leaves).
//!
//! # Costs
//!
//! Uncontended, a lock is one `SET NX` per node to take and one script call
//! to give back, as before. A waiter costs its first round, one to join, one
//! to claim, and a refresh round per [`REFRESH_INTERVAL`] of waiting; its pub/sub
//! notifications come on one shared connection per node and client.

use std::sync::Arc;
use std::time::Duration;

/// How long a waiter's entry lives on a node after its last refresh: the
/// bound on how long a waiter that died (SIGKILL, a lost machine) can keep
/// the waiters behind it from the lock.
pub const WAITER_LIFETIME: Duration = Duration::from_millis(1_000);

/// The longest a waiting `lock` call goes without a round (which refreshes
/// its entry on every node and claims the lock if it is free for it).
pub const REFRESH_INTERVAL: Duration = Duration::from_millis(250);

/// How long a waiter that was told by some nodes, but not yet a quorum, that
/// the lock is reserved for it waits for the others before it claims.
pub(crate) const CLAIM_GRACE: Duration = Duration::from_millis(5);

/// What a lock key holds when a release handed it on to a waiter: this,
/// then the waiter's id (never a token: tokens are 32 hex digits).
pub(crate) const RESERVED_PREFIX: &str = "quorlock-next:";

/// The suffix of the queue's key next to a lock key.
pub(crate) const QUEUE_SUFFIX: &[u8] = b":quorlock-queue";
/// The suffix of the waiter-lifetime hash's key next to a lock key.
pub(crate) const ALIVE_SUFFIX: &[u8] = b":quorlock-alive";

/// The keys of one lock on a node: the lock key, its queue and its waiters'
/// lifetimes.
#[derive(Debug)]
pub(crate) struct LockKeys {
    pub(crate) key: Arc<[u8]>,
    pub(crate) queue: Arc<[u8]>,
    pub(crate) alive: Arc<[u8]>,
}

impl LockKeys {
    pub(crate) fn new(key: Arc<[u8]>) -> Self {
        let with = |suffix: &[u8]| -> Arc<[u8]> { [&key[..], suffix].concat().into() };
        LockKeys {
            queue: with(QUEUE_SUFFIX),
            alive: with(ALIVE_SUFFIX),
            key,
        }
    }
}

/// Whether `key` is one that quorlock keeps beside a lock key (so it must
/// not be a lock key itself).
pub(crate) fn is_queue_key(key: &[u8]) -> bool {
    key.ends_with(QUEUE_SUFFIX) || key.ends_with(ALIVE_SUFFIX)
}

/// The waiter lifetime in whole milliseconds, as the scripts take it.
pub(crate) fn lifetime_ms() -> u64 {
    u64::try_from(WAITER_LIFETIME.as_millis()).unwrap_or(u64::MAX)
}

/// What a node does with a waiter's entry when a round of it is released.
#[derive(Debug, Clone)]
pub(crate) enum Place {
    /// No entry (the release of a held lock).
    None,
    /// The round is lost but the waiter waits on: back in the queue under
    /// this ticket (0: at the back) where the round had set our key.
    Keep(Arc<str>, u64),
    /// The waiter is done waiting: its entry goes, with a reservation for it.
    Leave(Arc<str>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_keys_sit_beside_the_lock_key() {
        let keys = LockKeys::new(b"quorlock:stock".as_slice().into());
        assert_eq!(&keys.queue[..], b"quorlock:stock:quorlock-queue");
        assert_eq!(&keys.alive[..], b"quorlock:stock:quorlock-alive");
        assert!(is_queue_key(&keys.queue) && is_queue_key(&keys.alive));
        assert!(!is_queue_key(&keys.key));
    }

    #[test]
    fn a_waiter_refreshes_well_within_its_lifetime() {
        assert!(REFRESH_INTERVAL * 3 < WAITER_LIFETIME);
        assert!(CLAIM_GRACE < REFRESH_INTERVAL);
    }
}

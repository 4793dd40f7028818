//! The queue's keys and lifetimes on the nodes, and what a release does
//! with a waiter's entry ([`Place`]).

use std::sync::Arc;
use std::time::Duration;

/// How long a client's liveness key lives on a node after its last
/// heartbeat or queue round (see `session.rs`): the bound on how long the
/// waiters of a client that died (SIGKILL, a lost machine, a partition) can
/// keep the waiters behind them from the lock.
pub(crate) const WAITER_LIFETIME: Duration = Duration::from_millis(1_000);

/// How often a client with waiters renews its liveness key on each node
/// (and looks at the checks that are due); with notifications off, also the
/// longest a waiting call goes without a round.
pub(crate) const REFRESH_INTERVAL: Duration = Duration::from_millis(250);

/// How long a claim round's call to a node waits for that node to tell the
/// waiter that it reserved the lock for it before it goes anyway (the
/// round starts when the first node told). Short: with thousands of
/// waiters the nodes often disagree for a while about who is first (a join
/// that missed a node is repaired by the waiter's claim), and a claim that
/// waits for a node that will not tell only delays the hand-over (the flash
/// sale of 10,000 waiters was served faster with 2 ms than with 5 ms: see
/// docs/benchmarks.md, "Waiting at scale"). Longer than the spread of one
/// release's arrival at the nodes on a LAN.
pub(crate) const CLAIM_GRACE: Duration = Duration::from_millis(2);

/// What a lock key holds when a release handed it on to a waiter: this,
/// then the waiter's id (never a token: tokens are `q` and 32 hex digits).
pub(crate) const RESERVED_PREFIX: &str = "quorlock-next:";

/// The most rounds in the queue that are not claims (joins, ticket
/// rewrites, rounds after a failed one) one client has in flight at once;
/// more wait for their turn before they start. A flash sale's thousands of
/// callers joining at once would otherwise queue thousands of scripts on
/// each node at one instant: the hand-overs' calls wait behind them, the
/// last ones run past the per-node timeout, the nodes are skipped, and
/// every waiter's round fails at once and is retried, adding to the load.
/// Joins are not on the hand-over's path, so they can wait: the flash sale
/// of 10,000 waiters was served faster with 8 in flight than with 64, and
/// no faster with 4 (docs/benchmarks.md, "Waiting at scale").
pub(crate) const JOIN_ROUNDS_IN_FLIGHT: usize = 8;

/// The most claim rounds started by a handoff message one client has in
/// flight at once. A claim is a hand-over and never waits behind joins; a
/// client has about one per lock it was told of: one in a flash sale,
/// thousands when thousands of locks it waits on are released at once.
pub(crate) const CLAIM_ROUNDS_IN_FLIGHT: usize = 256;

/// The most claim rounds one client has in flight at once on a node that
/// *may* have handed the lock on unheard: after the client's notification
/// connection to it was (re)opened, or it lost the client's liveness key
/// (see `notify.rs`, `session.rs`), every waiter of the client looks there
/// at once, the burst this bounds. (The flash sale of 10,000 was served no
/// slower with 16 than with 256, whose slow run had such a burst: see
/// docs/benchmarks.md, "Waiting at scale".)
pub(crate) const LOOK_ROUNDS_IN_FLIGHT: usize = 16;

/// The suffix of the queue's key next to a lock key.
pub(crate) const QUEUE_SUFFIX: &[u8] = b":quorlock-queue";

/// How long a queue lives on a node after the last round or check that
/// touched it: its waiters' clients check it far more often (every
/// `session::MAX_CHECK`), so only a queue nobody waits on any more expires,
/// with the entries of dead clients still in it. (The scripts hold the
/// number; a test checks that they agree.)
#[cfg(test)]
pub(crate) const QUEUE_LIFETIME: Duration = Duration::from_secs(60);

/// Whether `key` is one that quorlock keeps beside a lock key (so it must
/// not be a lock key itself).
pub(crate) fn is_queue_key(key: &[u8]) -> bool {
    key.ends_with(QUEUE_SUFFIX)
}

/// The waiter lifetime in whole milliseconds, as the scripts take it.
pub(crate) fn lifetime_ms() -> u64 {
    u64::try_from(WAITER_LIFETIME.as_millis()).unwrap_or(u64::MAX)
}

/// What a node does with a waiter's entry when a round of it is released.
#[derive(Debug, Clone)]
pub(crate) enum Place {
    /// No entry (the release of a held lock).
    NoEntry,
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
    fn queue_keys_are_recognised() {
        assert!(is_queue_key(b"quorlock:stock:quorlock-queue"));
        assert!(!is_queue_key(b"quorlock:stock"));
    }

    #[test]
    fn a_waiter_refreshes_well_within_its_lifetime() {
        assert!(REFRESH_INTERVAL * 3 < WAITER_LIFETIME);
        assert!(CLAIM_GRACE < REFRESH_INTERVAL);
    }
}

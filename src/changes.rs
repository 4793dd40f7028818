//! Server changes: when the server behind a node changed (a restart, or a
//! replica that took over as primary), or its clock stepped forward, so
//! that a held lock whose keys may have gone is told at once
//! ([`Holding::lost`]), not at its next extension.
//!
//! The standings ([`ServerChanges::changed`]) note a change when a check
//! finds a node's incarnation (its `run_id` and replication id) differing
//! from the one this client knew, and the new server may have lost keys (it
//! is not a restarted durable server), and when a node's clock is seen to
//! have stepped forward (see `clock.rs`). Each change takes the next number of
//! a client-wide counter; each node keeps the number of its last change.
//!
//! A lock remembers the nodes whose grants counted for it (its *holders*)
//! and the counter as it was when its round started. A holder whose last
//! change has a higher number may have lost the key; when fewer than a
//! quorum of holders are left, the lock may belong to someone else.
//!
//! # Safety argument
//!
//! This only ever *ends* a lease early; it never makes a lock valid. It
//! assumes what the restart judgment does (see `standing/`): the client
//! sees a change of server on the first connection to the new one, which
//! is checked before any call uses it. The counter is read before the
//! round's first request goes out, so a change noticed while the round was
//! under way counts against it (the grant may have come from the old
//! server). A holder's key can also vanish without a change this client
//! sees (a `FLUSHALL`, a server changed behind a proxy that kept the
//! client's connection open): then the lock is told lost at its next
//! extension or at its expiry.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

use crate::error::LostReason;

/// What changed on a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Change {
    /// The server behind it: a restart or a failover, to this `run_id`.
    Server(String),
    /// Its clock stepped forward, by about this much.
    Clock(std::time::Duration),
    /// Its data went (its data mark went or was replaced), seen so.
    Data(&'static str),
}

/// The server changes of one client's nodes.
#[derive(Debug)]
pub(crate) struct ServerChanges {
    /// How many changes have been noted; the number of the last.
    count: AtomicU64,
    /// Per node, the number of its last change (0: none).
    last: Box<[AtomicU64]>,
    /// Per node, its name and its last change.
    names: Vec<Arc<str>>,
    last_changes: Mutex<Vec<Option<Change>>>,
    /// Woken at each change.
    pub(crate) noted: Notify,
}

impl ServerChanges {
    pub(crate) fn new(names: Vec<Arc<str>>) -> Self {
        ServerChanges {
            count: AtomicU64::new(0),
            last: names.iter().map(|_| AtomicU64::new(0)).collect(),
            last_changes: Mutex::new(vec![None; names.len()]),
            names,
            noted: Notify::new(),
        }
    }

    /// The number of the last change so far: what a round reads before it
    /// starts.
    pub(crate) fn now(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }

    /// Notes that node `index` changed (`change`) and may have lost keys;
    /// wakes every lease watcher.
    pub(crate) fn changed(&self, index: usize, change: Change) {
        if let Some(last) = crate::tasks::lock(&self.last_changes).get_mut(index) {
            *last = Some(change);
        }
        let number = self.count.fetch_add(1, Ordering::AcqRel) + 1;
        if let Some(last) = self.last.get(index) {
            last.store(number, Ordering::Release);
        }
        self.noted.notify_waiters();
    }

    /// Whether node `index` changed after change number `since`.
    fn changed_since(&self, index: usize, since: u64) -> bool {
        self.last
            .get(index)
            .is_some_and(|last| last.load(Ordering::Acquire) > since)
    }

    /// Why a lock whose holder node `index` changed is lost.
    fn describe(&self, index: usize) -> LostReason {
        let node = self
            .names
            .get(index)
            .map_or_else(String::new, |name| name.to_string());
        let change = crate::tasks::lock(&self.last_changes)
            .get(index)
            .cloned()
            .flatten();
        match change {
            Some(Change::Clock(ahead)) => LostReason::ClockStepped { node, ahead },
            Some(Change::Data(why)) => LostReason::DataLost {
                node,
                why: why.to_owned(),
            },
            Some(Change::Server(run_id)) => LostReason::ServerChanged { node, run_id },
            None => LostReason::ServerChanged {
                node,
                run_id: String::new(),
            },
        }
    }
}

/// Some nodes, by index: a bit mask for the first 64 (no allocation per
/// lock), a list beyond.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Holders {
    /// Bit `i` for node `i`.
    Mask(u64),
    /// The indices, for clients of more than 64 nodes.
    List(Box<[usize]>),
}

impl Holders {
    /// The nodes at `indices`, of a client of `nodes` nodes.
    pub(crate) fn of(indices: impl Iterator<Item = usize>, nodes: usize) -> Self {
        if nodes <= 64 {
            Holders::Mask(indices.fold(0, |mask, index| mask | 1 << index))
        } else {
            Holders::List(indices.collect())
        }
    }

    fn len(&self) -> usize {
        match self {
            Holders::Mask(mask) => mask.count_ones() as usize,
            Holders::List(list) => list.len(),
        }
    }

    fn each(&self) -> impl Iterator<Item = usize> + '_ {
        let (mask, list) = match self {
            Holders::Mask(mask) => (*mask, &[][..]),
            Holders::List(list) => (0, &list[..]),
        };
        (0..64)
            .filter(move |index| mask & (1 << index) != 0)
            .chain(list.iter().copied())
    }
}

/// The nodes that hold one lock's keys, as its winning round counted them.
/// It holds no reference to the client's [`ServerChanges`] (one more shared
/// reference count moved by every lock): its readers pass them in.
#[derive(Debug)]
pub(crate) struct Holding {
    holders: Holders,
    /// The change counter before the round started.
    since: u64,
    quorum: usize,
}

impl Holding {
    /// The lock held on `holders` of a client whose quorum is `quorum`, won
    /// by a round that read `since` from the client's changes before it
    /// started.
    pub(crate) fn new(holders: Holders, since: u64, quorum: usize) -> Self {
        Holding {
            holders,
            since,
            quorum,
        }
    }

    /// If too few holders are left unchanged in `changes` (the client's) for
    /// a quorum: why, naming the node whose change left too few. One atomic
    /// load when no server has changed since the round.
    pub(crate) fn lost(&self, changes: &ServerChanges) -> Option<LostReason> {
        if changes.now() <= self.since {
            return None;
        }
        let mut left = self.holders.len();
        for index in self.holders.each() {
            if changes.changed_since(index, self.since) {
                left -= 1;
                if left < self.quorum {
                    return Some(changes.describe(index));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changes(nodes: usize) -> Arc<ServerChanges> {
        let names = (0..nodes).map(|i| Arc::from(format!("n{i}"))).collect();
        Arc::new(ServerChanges::new(names))
    }

    /// A lock held on a bare quorum is lost when one holder changes; held
    /// on more, it survives as long as a quorum of holders is unchanged;
    /// changes before its round, or of nodes that do not hold it, are
    /// not its concern.
    #[test]
    fn a_lock_is_lost_when_too_few_unchanged_holders_are_left() {
        let changes = changes(5);
        changes.changed(0, server("old-change"));
        let since = changes.now();
        let bare = Holding::new(Holders::of(0..3, 5), since, 3);
        let wide = Holding::new(Holders::List([0, 1, 2, 3].into()), since, 3);
        assert_eq!(bare.lost(&changes), None, "a change before the round");
        changes.changed(4, server("r4"));
        assert_eq!(bare.lost(&changes), None, "a node that does not hold it");
        changes.changed(1, server("r1"));
        assert_eq!(bare.lost(&changes), Some(lost("n1", "r1")));
        assert_eq!(wide.lost(&changes), None, "three unchanged holders left");
        changes.changed(3, server("r3"));
        assert_eq!(wide.lost(&changes), Some(lost("n3", "r3")));
    }

    fn server(run_id: &str) -> Change {
        Change::Server(run_id.to_owned())
    }

    fn lost(node: &str, run_id: &str) -> LostReason {
        LostReason::ServerChanged {
            node: node.to_owned(),
            run_id: run_id.to_owned(),
        }
    }

    #[test]
    fn a_clock_step_is_told_as_such() {
        let changes = changes(3);
        let bare = Holding::new(Holders::of(0..2, 3), changes.now(), 2);
        changes.changed(1, Change::Clock(std::time::Duration::from_secs(30)));
        assert_eq!(
            bare.lost(&changes),
            Some(LostReason::ClockStepped {
                node: "n1".to_owned(),
                ahead: std::time::Duration::from_secs(30),
            })
        );
    }

    #[test]
    fn holders_are_a_mask_up_to_64_nodes_and_a_list_beyond() {
        let few = Holders::of([0, 5, 63].into_iter(), 64);
        assert_eq!(few, Holders::Mask(1 | 1 << 5 | 1 << 63));
        assert_eq!(few.each().collect::<Vec<_>>(), [0, 5, 63]);
        let many = Holders::of([2, 70].into_iter(), 71);
        assert_eq!(many.each().collect::<Vec<_>>(), [2, 70]);
        assert_eq!((few.len(), many.len()), (3, 2));
    }
}

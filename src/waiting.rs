//! The waiting room: within one client, callers of `lock` for the same
//! resource wait their turn first-in first-out, and only the one whose turn it
//! is talks to the nodes. Without it, tasks of one process split the votes
//! among themselves (each wins some nodes, none a quorum) and retry blind.
//!
//! The turn passes on as soon as the holder's release has been handed to the
//! node connections: the next caller's acquire then follows the release on
//! the same connection, so a handoff costs one round trip, not a retry delay.
//! Clients in other processes are unaffected: the nodes still decide.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::OwnedMutexGuard;

type Room = Arc<tokio::sync::Mutex<()>>;

/// The turns of one client, by lock key.
#[derive(Debug, Default)]
pub(crate) struct WaitingRoom {
    rooms: Mutex<HashMap<Arc<[u8]>, Room>>,
}

/// The turn to talk to the nodes for one key; passes to the next waiter when dropped.
#[derive(Debug)]
pub(crate) struct Turn {
    waiting: Arc<WaitingRoom>,
    key: Arc<[u8]>,
    held: Option<OwnedMutexGuard<()>>,
}

impl WaitingRoom {
    fn rooms(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<[u8]>, Room>> {
        // Every update is a single insert or remove: a panic elsewhere cannot
        // leave the map half written, so poisoning is ignored.
        self.rooms
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits for the turn on `key`, in arrival order, until `deadline`.
    /// `None` if the deadline passed first.
    ///
    /// Cancel safe: a waiter dropped while queued leaves the queue.
    pub(crate) async fn enter(
        self: &Arc<Self>,
        key: &Arc<[u8]>,
        deadline: Instant,
    ) -> Option<Turn> {
        // Declared first, so dropped last: if this future is dropped or times
        // out, the queue's handle on the room is gone when `turn` cleans up.
        let mut turn = Turn {
            waiting: self.clone(),
            key: key.clone(),
            held: None,
        };
        let room = self.rooms().entry(key.clone()).or_default().clone();
        match tokio::time::timeout_at(deadline.into(), room.lock_owned()).await {
            Ok(held) => {
                turn.held = Some(held);
                Some(turn)
            }
            Err(_) => None,
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        // Pass the turn on first, then forget the room if nobody uses it.
        drop(self.held.take());
        let mut rooms = self.waiting.rooms();
        if rooms
            .get(&self.key)
            .is_some_and(|room| Arc::strong_count(room) == 1)
        {
            rooms.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn turns_pass_in_arrival_order_and_rooms_are_forgotten() {
        let waiting = Arc::new(WaitingRoom::default());
        let key: Arc<[u8]> = b"k".as_slice().into();
        let far = Instant::now() + Duration::from_secs(5);
        let first = waiting.enter(&key, far).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for n in 0..5 {
            let (waiting, key, order) = (waiting.clone(), key.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let turn = waiting.enter(&key, far).await.unwrap();
                order.lock().unwrap().push(n);
                drop(turn);
            }));
            tokio::task::yield_now().await; // queue them in order
        }
        // A waiter with a deadline that passes leaves without the turn.
        let soon = Instant::now() + Duration::from_millis(20);
        assert!(waiting.enter(&key, soon).await.is_none());
        drop(first);
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
        assert!(waiting.rooms().is_empty(), "no room kept for an idle key");
    }
}

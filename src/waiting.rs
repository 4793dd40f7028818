//! The waiting room: within one client, callers of `lock` for the same
//! resource wait their turn first-in first-out, and only the one whose turn it
//! is talks to the nodes. Without it, tasks of one process split the votes
//! among themselves (each wins some nodes, none a quorum) and retry blind.
//!
//! The turn passes on as soon as the holder's release has been handed to the
//! node connections: the next caller's acquire then follows the release on
//! the same connection, so a handoff costs one round trip, not a retry delay.
//! A holder whose lock expired while it kept its guard does not keep the
//! turn: the room knows the holder's validity, and the next waiter goes on
//! once it has passed.
//!
//! The room can only withhold rounds, never grant a lock: the nodes still
//! decide every acquisition (`SET NX` on a quorum), so a caller that goes on
//! without the turn, or a client in another process, is as safe as any.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::Semaphore;

/// One resource's turn and what the room knows of its holder.
#[derive(Debug)]
struct Room {
    /// One permit: the turn. Tokio's semaphore serves waiters in arrival
    /// order. A taken permit is forgotten and given back by the turn's drop,
    /// so that the turn needs no handle of its own beyond the room's.
    turn: Semaphore,
    /// The ticket of the caller that last took the lock through this room,
    /// and until when that lock is valid.
    holder: Mutex<Option<(u64, Instant)>>,
}

impl Default for Room {
    fn default() -> Self {
        Room {
            turn: Semaphore::new(1),
            holder: Mutex::default(),
        }
    }
}

impl Room {
    fn holder(&self) -> std::sync::MutexGuard<'_, Option<(u64, Instant)>> {
        // Each update is one assignment: poisoning cannot leave it half written.
        self.holder
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// When the current holder's lock stops being valid, if one holds it.
    fn holder_valid_until(&self) -> Option<Instant> {
        self.holder().map(|(_, valid_until)| valid_until)
    }
}

/// The turns of one client, by lock key.
#[derive(Debug, Default)]
pub(crate) struct WaitingRoom {
    rooms: Mutex<HashMap<Arc<[u8]>, Arc<Room>>>,
    tickets: AtomicU64,
}

/// The turn to talk to the nodes for one key; passes to the next waiter when
/// dropped.
#[derive(Debug)]
pub(crate) struct Turn {
    waiting: Arc<WaitingRoom>,
    key: Arc<[u8]>,
    room: Arc<Room>,
    ticket: u64,
    /// Whether this turn took the room's permit (not for a caller that went
    /// on because the holder's lock expired).
    held: bool,
}

impl WaitingRoom {
    fn rooms(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<[u8]>, Arc<Room>>> {
        // Every update is a single insert or remove: a panic elsewhere cannot
        // leave the map half written, so poisoning is ignored.
        self.rooms
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits for the turn on `key`, in arrival order, until `deadline`.
    /// `None` if the deadline passed first. If the caller holding the turn
    /// has a lock whose validity ends first, the wait ends then (the turn is
    /// the caller's, though the old holder has not let go).
    ///
    /// Cancel safe: a waiter dropped while queued leaves the queue.
    pub(crate) async fn enter(
        self: &Arc<Self>,
        key: &Arc<[u8]>,
        deadline: Instant,
    ) -> Option<Turn> {
        // The turn owns this waiter's only handle on the room (besides the
        // map's), so that when it is dropped, on any path, it can tell
        // whether anyone else still uses the room.
        let mut turn = Turn {
            waiting: self.clone(),
            key: key.clone(),
            room: self.rooms().entry(key.clone()).or_default().clone(),
            ticket: self.tickets.fetch_add(1, Ordering::Relaxed),
            held: false,
        };
        let room = turn.room.clone();
        let mut queued = std::pin::pin!(room.turn.acquire());
        loop {
            let wake = room
                .holder_valid_until()
                .map_or(deadline, |valid_until| valid_until.min(deadline));
            match tokio::time::timeout_at(wake.into(), &mut queued).await {
                Ok(Ok(permit)) => {
                    permit.forget();
                    turn.held = true;
                    return Some(turn);
                }
                // The semaphore is never closed; were it, there is no turn to wait for.
                Ok(Err(_)) => return Some(turn),
                Err(_) if Instant::now() >= deadline => return None,
                Err(_) => {
                    let expired = room
                        .holder_valid_until()
                        .is_some_and(|valid_until| valid_until <= Instant::now());
                    if expired {
                        return Some(turn);
                    }
                    // Extended, or handed on, meanwhile: wait again.
                }
            }
        }
    }
}

impl Turn {
    /// Records that this turn's caller holds the lock until `valid_until`.
    pub(crate) fn hold_until(&self, valid_until: Instant) {
        *self.room.holder() = Some((self.ticket, valid_until));
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        {
            let mut holder = self.room.holder();
            if holder.is_some_and(|(ticket, _)| ticket == self.ticket) {
                *holder = None;
            }
        }
        // Pass the turn on, then forget the room if nobody else uses it (the
        // map and this turn are its last two handles).
        if std::mem::take(&mut self.held) {
            self.room.turn.add_permits(1);
        }
        let mut rooms = self.waiting.rooms();
        if rooms
            .get(&self.key)
            .is_some_and(|room| Arc::ptr_eq(room, &self.room) && Arc::strong_count(room) == 2)
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

    #[tokio::test]
    async fn a_holder_whose_lock_expired_does_not_keep_the_turn() {
        let waiting = Arc::new(WaitingRoom::default());
        let key: Arc<[u8]> = b"k".as_slice().into();
        let far = Instant::now() + Duration::from_secs(5);
        let holder = waiting.enter(&key, far).await.unwrap();
        holder.hold_until(Instant::now() + Duration::from_millis(50));
        let started = Instant::now();
        let next = waiting
            .enter(&key, far)
            .await
            .expect("the turn after expiry");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(50) && waited < Duration::from_secs(2),
            "{waited:?}"
        );
        // An extension moves the end of the wait on.
        next.hold_until(Instant::now() + Duration::from_millis(30));
        let extend = {
            let next = &next;
            async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                next.hold_until(Instant::now() + Duration::from_millis(100));
            }
        };
        let started = Instant::now();
        let (third, ()) = tokio::join!(waiting.enter(&key, far), extend);
        assert!(third.is_some() && started.elapsed() >= Duration::from_millis(100));
        drop((holder, next, third));
        assert!(waiting.rooms().is_empty());
    }
}

//! A client's session on the nodes: what keeps its waiters' places in the
//! queues alive, at a cost per client, not per waiter (as a ZooKeeper
//! session keeps all of a client's ephemeral nodes, or an etcd lease many
//! keys, with one heartbeat).
//!
//! Each client has a *liveness key* on every node,
//! `<key prefix>quorlock-client:<client id>`, and every waiter id starts
//! with it (the liveness key, a dot, a number). An entry in a queue is live
//! while its client's liveness key exists on that node (see `queue/`).
//! In the slotted layout (a Redis Cluster node, see `cluster.rs`) a script
//! may only touch keys of one slot, so the client has one liveness key per
//! hash tag it waits on, `<key prefix>{<tag>}quorlock-client:<client id>`,
//! beside the queues of that tag, and each is kept as below: the cost is
//! then per client and tag waited on, still nothing per waiter.
//! While any of the client's `lock` calls waits in a queue, one heartbeat
//! loop per node keeps the key for [`WAITER_LIFETIME`], renewing it every
//! [`REFRESH_INTERVAL`]; every queue round of the client renews it too. So a
//! client that dies (SIGKILL, a lost machine, a partition) stops blocking
//! the waiters behind its own within `WAITER_LIFETIME` of its last
//! heartbeat, however many waiters it had: the first script that looks at
//! the queue after that drops all of its entries before the first live one.
//!
//! # Checks: who notices what nobody announces
//!
//! Waiters do not poll. A release hands the key on to the first live waiter
//! and notifies it (`notify.rs`); what no release announces is seen by the
//! heartbeat, which also *checks* the lock keys the client waits on: a key
//! that expired (its holder died), a reservation that expired (the waiter it
//! was for died, or did not claim in time), a key deleted by a client that
//! knows nothing of the queue, an unmarked holder that would release without
//! handing on. A check settles the key as a release would (a free key or a
//! void reservation goes to the queue's first live waiter, with a
//! notification) and says how long nothing there needs a look: the `PTTL`
//! of a quorlock holder or a reservation (their release or claim notifies,
//! their expiry does not), or nothing for a foreign holder. A key is checked
//! again then, but no sooner than [`REFRESH_INTERVAL`] and no later than
//! [`MAX_CHECK`] (one second). A heartbeat call carries up to
//! [`CHECK_BATCH`] keys.
//!
//! Where the check finds a quorlock holder and a waiter of this client
//! first in the queue, the holder's release hands the key on to that very
//! waiter and notifies it: what the one-second look would catch there is a
//! dead waiter ahead, and there is none. The key is checked again at the
//! holder's `PTTL` (its expiry notifies nobody), but no later than
//! [`FIRST_MAX_CHECK`] (five seconds), which keeps the queue's lifetime
//! renewed and bounds two rare cases that then wait longer than a second:
//!
//! - the lock key alone is lost on that node (evicted, or deleted by hand)
//!   while the holder still lives: the free key is settled at the next
//!   check, up to `FIRST_MAX_CHECK` later;
//! - a waiter of another client comes to sort first after the check (a join
//!   that overlapped ours and drew the same ticket, sorted by waiter id; a
//!   ticket written back), and its client dies before the release: the
//!   release reserves the key for it, the reservation ends unannounced
//!   within [`WAITER_LIFETIME`], and the key is settled at our next check.
//!
//! Either way the wait is longer, never unsafe: a check only settles a free
//! key or a void reservation. A client waiting on many held keys, each led
//! by its own waiter (one client's waiters on many resources), so costs the
//! nodes a fifth of the checks.
//!
//! A node that lost the liveness key (restarted, or it expired while the
//! client was cut off or stalled) may have dropped the client's entries:
//! every waiter of the client then makes a round there as if that node had
//! handed it the lock (a claim round, which queues it again under its
//! ticket when the lock is not free for it).
//!
//! # Cost
//!
//! Per client and node, one heartbeat call every `REFRESH_INTERVAL` while it
//! has waiters, plus a check of each lock key it waits on, usually one every
//! `MAX_CHECK` (a held key's `PTTL` is longer), or every `FIRST_MAX_CHECK`
//! where its waiter leads the queue: nothing per waiter. Joining, claiming
//! and leaving stay one round each per waiter; they are the hand-overs
//! themselves.
//!
//! # Safety
//!
//! Nothing here grants a lock or sets a key over a token: a check hands a
//! *free* key (or a reservation nobody may claim) on as a reservation, which
//! is not a token and only withholds, and marks a holder's token, which
//! changes no holder (`queue/` has both arguments). A liveness key only
//! decides which waiter is first; mutual exclusion rests on the quorum.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::node::{Checked, Node};
use crate::notify::Notifications;
use crate::queue::entries::{REFRESH_INTERVAL, WAITER_LIFETIME, lifetime_ms};
use crate::tasks;

/// The longest a client goes without checking a lock key it waits on. At
/// most the [`WAITER_LIFETIME`]: a release that hands the key to a waiter
/// of a client that died makes a reservation that ends within the lifetime,
/// and a live client whose last check came just before that release looks
/// again within this time, so the next live waiter is served within
/// `max(WAITER_LIFETIME, MAX_CHECK)` and one heartbeat interval of the
/// release. (A client whose waiter led the queue at its last check is
/// handed the key by the release itself: see [`FIRST_MAX_CHECK`].)
pub(crate) const MAX_CHECK: Duration = WAITER_LIFETIME;

/// The longest a client goes without checking a lock key that a quorlock
/// holder holds while its own waiter is first in the key's queue there (the
/// holder's release hands the key on to that waiter and notifies it; what
/// no release announces there is the holder's expiry, at the key's `PTTL`,
/// and the rare cases in the module docs). Five times [`MAX_CHECK`], and a
/// small part of the queue's lifetime, which checks renew.
pub(crate) const FIRST_MAX_CHECK: Duration = Duration::from_secs(5);

/// The most lock keys one heartbeat call checks; more go in several calls.
pub(crate) const CHECK_BATCH: usize = 256;

/// What follows the key prefix in a client's liveness key; the client id
/// follows. A resource whose key would start so is refused.
pub(crate) const CLIENT_KEY_INFIX: &str = "quorlock-client:";

/// How a client's liveness keys are named (UTF-8: each starts the ids of
/// the waiters it keeps): one, `<key prefix>quorlock-client:<client id>`;
/// in the slotted layout one per hash tag waited on, the tag in braces
/// after the prefix (see `cluster.rs`).
#[derive(Debug, Clone)]
pub(crate) struct LiveKeys {
    prefix: Arc<[u8]>,
    client_id: Arc<str>,
    /// The one liveness key of the plain layout; `None` slotted.
    plain: Option<Arc<str>>,
}

impl LiveKeys {
    /// The liveness keys of the client `client_id` under `prefix`.
    pub(crate) fn new(prefix: Arc<[u8]>, client_id: Arc<str>, slotted: bool) -> Self {
        let plain = (!slotted).then(|| live_key(&prefix, &client_id));
        LiveKeys {
            prefix,
            client_id,
            plain,
        }
    }

    /// The liveness key that keeps the client's waiters on the lock key
    /// `key`.
    pub(crate) fn of(&self, key: &[u8]) -> Arc<str> {
        match &self.plain {
            Some(plain) => plain.clone(),
            None => live_key(
                &crate::cluster::live_key_start(&self.prefix, key),
                &self.client_id,
            ),
        }
    }
}

/// The liveness key that starts with `start` (the prefix, and slotted a
/// hash tag; written lossily if it is not UTF-8) of the client `client_id`.
fn live_key(start: &[u8], client_id: &str) -> Arc<str> {
    format!(
        "{}{CLIENT_KEY_INFIX}{client_id}",
        String::from_utf8_lossy(start)
    )
    .into()
}

/// One client's session: its liveness keys and the lock keys its waiters
/// wait on.
pub(crate) struct Session {
    live_keys: LiveKeys,
    nodes: Arc<[Node]>,
    notifications: Arc<Notifications>,
    watched: Mutex<Watched>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("live_keys", &self.live_keys)
            .finish()
    }
}

/// The keys waited on, and which nodes' heartbeat loops run.
struct Watched {
    keys: HashMap<Arc<[u8]>, Watch>,
    running: Vec<bool>,
}

/// One lock key waited on.
struct Watch {
    /// The liveness key that keeps its waiters.
    live_key: Arc<str>,
    /// How many of the client's calls wait on it.
    waiters: usize,
    /// When each node's heartbeat checks it next.
    check_at: Vec<Instant>,
}

/// A liveness key in use, with the lock keys it keeps that are due for a
/// check on one node.
type Due = (Arc<str>, Vec<Arc<[u8]>>);

/// A waiting call's interest in its lock key: dropped, the call no longer
/// waits there.
pub(crate) struct Watching {
    session: Arc<Session>,
    key: Arc<[u8]>,
}

impl Session {
    /// The session of the client whose liveness keys are `live_keys`, on
    /// `nodes`.
    pub(crate) fn new(
        live_keys: LiveKeys,
        nodes: Arc<[Node]>,
        notifications: Arc<Notifications>,
    ) -> Arc<Self> {
        let running = vec![false; nodes.len()];
        Arc::new(Session {
            live_keys,
            nodes,
            notifications,
            watched: Mutex::new(Watched {
                keys: HashMap::new(),
                running,
            }),
        })
    }

    /// The liveness key that keeps this client's waiters on `key`.
    pub(crate) fn live_key(&self, key: &[u8]) -> Arc<str> {
        self.live_keys.of(key)
    }

    /// A call starts waiting on `key`: the heartbeat runs (on every node)
    /// and checks `key` from its next beat on.
    pub(crate) fn watch(self: &Arc<Self>, key: &Arc<[u8]>) -> Watching {
        let mut watched = tasks::lock(&self.watched);
        let first_check = Instant::now() + REFRESH_INTERVAL;
        let nodes = self.nodes.len();
        let watch = watched.keys.entry(key.clone()).or_insert_with(|| Watch {
            live_key: self.live_keys.of(key),
            waiters: 0,
            check_at: vec![first_check; nodes],
        });
        watch.waiters += 1;
        if !tasks::has_runtime() {
            return Watching {
                session: self.clone(),
                key: key.clone(),
            };
        }
        // Marked running under the lock, spawned after it: a loop that is
        // never polled (its runtime gone) drops its guard, which takes the
        // lock to mark it not running again.
        let starting: Vec<Running> = (0..nodes)
            .filter(|&index| !std::mem::replace(&mut watched.running[index], true))
            .map(|index| Running {
                session: self.clone(),
                index,
                ended: false,
            })
            .collect();
        drop(watched);
        for running in starting {
            tasks::spawn(beat(running));
        }
        Watching {
            session: self.clone(),
            key: key.clone(),
        }
    }

    /// Every liveness key in use, each with the keys it keeps that node
    /// `index` checks now (due at `now`, maybe none), or `None` when
    /// nothing is waited on any more: the node's loop ends (and is marked
    /// so under the same lock that starts it).
    fn due(&self, index: usize, now: Instant) -> Option<Vec<Due>> {
        let mut watched = tasks::lock(&self.watched);
        if watched.keys.is_empty() {
            watched.running[index] = false;
            return None;
        }
        // Grouped by liveness key: the plain layout has one, shared by every
        // watch (the same `Arc`, found without hashing it again).
        let mut due: Vec<Due> = Vec::new();
        let mut at: HashMap<&str, usize> = HashMap::new();
        for (key, watch) in &watched.keys {
            let same = due
                .last()
                .is_some_and(|(last, _)| Arc::ptr_eq(last, &watch.live_key));
            let group = if same {
                due.len() - 1
            } else {
                *at.entry(&watch.live_key).or_insert_with(|| {
                    due.push((watch.live_key.clone(), Vec::new()));
                    due.len() - 1
                })
            };
            if watch.check_at[index] <= now {
                due[group].1.push(key.clone());
            }
        }
        Some(due)
    }

    /// Schedules node `index`'s next check of `keys`, as the heartbeat's
    /// checks of them found (`None`: it did not answer, check again at the
    /// next beat).
    fn schedule(&self, index: usize, keys: &[Arc<[u8]>], checked: Option<&[Checked]>) {
        let now = Instant::now();
        let mut watched = tasks::lock(&self.watched);
        for (at, key) in keys.iter().enumerate() {
            let Some(watch) = watched.keys.get_mut(key) else {
                continue;
            };
            let next = checked
                .and_then(|checked| checked.get(at))
                .map_or(REFRESH_INTERVAL, next_check);
            watch.check_at[index] = now + next;
        }
    }
}

/// How long after a check the key is checked again: when nothing there
/// needs a look (the check's `PTTL`), but no sooner than
/// [`REFRESH_INTERVAL`] and no later than [`MAX_CHECK`], or
/// [`FIRST_MAX_CHECK`] when the holder's release hands the key on to a
/// waiter of this client.
fn next_check(checked: &Checked) -> Duration {
    let wait = Duration::from_millis(u64::try_from(checked.wait_ms).unwrap_or(0));
    let most = if checked.first {
        FIRST_MAX_CHECK
    } else {
        MAX_CHECK
    };
    wait.clamp(REFRESH_INTERVAL, most)
}

impl Drop for Watching {
    fn drop(&mut self) {
        let mut watched = tasks::lock(&self.session.watched);
        if let Some(watch) = watched.keys.get_mut(&self.key) {
            watch.waiters = watch.waiters.saturating_sub(1);
            if watch.waiters == 0 {
                watched.keys.remove(&self.key);
            }
        }
    }
}

/// Node `index`'s heartbeat loop: every [`REFRESH_INTERVAL`], the
/// liveness key and the checks that are due; ends once nothing is waited
/// on. A node that had lost the liveness key gets a round from every
/// waiter of the client.
///
/// Cancel safe: dropped (its runtime shut down), it marks itself not
/// running, and the next waiting call starts another.
async fn beat(mut running: Running) {
    let (session, index) = (running.session.clone(), running.index);
    let mut ticks = tokio::time::interval(REFRESH_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is at once: the call that started the loop has just
    // made (or is making) a round, which keeps the key.
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let Some(due) = session.due(index, Instant::now()) else {
            running.ended = true;
            return;
        };
        let node = &session.nodes[index];
        let mut lost = false;
        for (live_key, due) in &due {
            lost |= heartbeats(&session, index, live_key, due).await;
        }
        if lost {
            tracing::debug!(
                node = node.name(),
                "the node had lost this client's liveness key: its waiters make a round there"
            );
            session.notifications.possibly_reserved(index);
        }
    }
}

/// The heartbeat calls that keep `live_key` on node `index` and check the
/// keys `due` (at least one call, which keeps the liveness key, and at
/// most [`CHECK_BATCH`] keys in each); whether the node had lost it.
async fn heartbeats(session: &Session, index: usize, live_key: &str, due: &[Arc<[u8]>]) -> bool {
    let node = &session.nodes[index];
    let mut lost = false;
    let chunks = due.chunks(CHECK_BATCH).chain(due.is_empty().then_some(due));
    for keys in chunks {
        match node
            .heartbeat(live_key.as_bytes(), lifetime_ms(), keys)
            .await
        {
            Ok((alive, checked)) => {
                lost |= !alive;
                session.schedule(index, keys, Some(&checked));
            }
            Err(err) => {
                tracing::trace!(node = node.name(), error = %err, "heartbeat failed");
                session.schedule(index, keys, None);
            }
        }
    }
    lost
}

/// A node's heartbeat loop while it runs, made before it is spawned:
/// dropped without having ended by itself (its runtime shut down, even
/// before the loop was first polled), it marks the loop not running, so that
/// the next waiting call starts another.
struct Running {
    session: Arc<Session>,
    index: usize,
    /// Ended by itself ([`Session::due`] marked it not running).
    ended: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.ended {
            tasks::lock(&self.session.watched).running[self.index] = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_is_checked_well_within_its_lifetime() {
        use crate::queue::entries::QUEUE_LIFETIME;
        assert!(REFRESH_INTERVAL * 3 < WAITER_LIFETIME);
        assert!(REFRESH_INTERVAL < MAX_CHECK && MAX_CHECK <= WAITER_LIFETIME);
        assert!(MAX_CHECK * 10 < QUEUE_LIFETIME);
        assert!(MAX_CHECK < FIRST_MAX_CHECK && FIRST_MAX_CHECK * 4 < QUEUE_LIFETIME);
    }

    #[test]
    fn a_key_is_checked_again_when_it_needs_a_look_within_bounds() {
        let after = |wait_ms, first| next_check(&Checked { wait_ms, first });
        // A foreign holder, a free key, a key without expiry: soon.
        assert_eq!(after(0, false), REFRESH_INTERVAL);
        assert_eq!(after(-1, false), REFRESH_INTERVAL);
        assert_eq!(after(-2, true), REFRESH_INTERVAL);
        // A holder or a reservation: at its expiry, within the bound.
        assert_eq!(after(600, false), Duration::from_millis(600));
        assert_eq!(after(10_000, false), MAX_CHECK);
        // A holder whose release hands the key on to our own waiter.
        assert_eq!(after(3_000, true), Duration::from_millis(3_000));
        assert_eq!(after(60_000, true), FIRST_MAX_CHECK);
    }

    #[test]
    fn the_liveness_key_is_the_prefix_the_infix_and_the_id() {
        let plain = LiveKeys::new(b"orders:".as_slice().into(), "q0123".into(), false);
        assert_eq!(&*plain.of(b"orders:a"), "orders:quorlock-client:q0123");
        let slotted = LiveKeys::new(b"orders:".as_slice().into(), "q0123".into(), true);
        assert_eq!(
            &*slotted.of(b"orders:{a}"),
            "orders:{a}quorlock-client:q0123"
        );
    }
}

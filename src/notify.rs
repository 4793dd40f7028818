//! Handoff notifications across clients: when a release hands a lock key on
//! to the first waiter in a node's queue (see `queue.rs`), the script
//! publishes that waiter's id on the channel named after the key. A client
//! with waiters for the key listens on that channel on every node and wakes
//! only the waiter named, noting which nodes reserved the key for it, so it
//! claims as soon as a quorum did. A notification that is missed (a node's
//! subscription not yet in place, a connection lost) costs only time: the
//! waiter's refresh round also claims a lock reserved for it.
//!
//! Each node gets one pub/sub connection, opened by a background task the
//! first time a key is listened for, and reopened (with every channel still
//! wanted) if it breaks. A key's channel is unsubscribed once it has had no
//! listener for [`LINGER`], so that a key contended now and then does not
//! subscribe and unsubscribe with every call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use redis::Client;
use tokio::sync::{mpsc, watch};

/// The pause before reopening a pub/sub connection that failed.
const RECONNECT_PAUSE: Duration = Duration::from_millis(500);

/// How long a key's channel stays subscribed after its last listener left.
const LINGER: Duration = Duration::from_secs(5);

enum Change {
    Subscribe(Arc<[u8]>),
    Unsubscribe(Arc<[u8]>),
}

/// The nodes that reserved a key for one waiter since it last looked: bit
/// `i` for node `i` (nodes past the 64th share the last bit).
type Reserved = watch::Sender<u64>;

struct Wanted {
    /// The listening waiters of this client, by waiter id.
    waiters: HashMap<Arc<str>, Reserved>,
    /// Whether a task will unsubscribe the key once it has been idle for [`LINGER`].
    sweeping: bool,
}

/// The listeners of one client.
pub(crate) struct Notifications {
    clients: Vec<Client>,
    /// How long a node's pub/sub connection may take to open.
    connect_timeout: Duration,
    wanted: Arc<Mutex<HashMap<Arc<[u8]>, Wanted>>>,
    /// One background task per node, started on first use, and again when
    /// the last one ended (its runtime shut down).
    tasks: Vec<Mutex<Option<mpsc::UnboundedSender<Change>>>>,
}

impl std::fmt::Debug for Notifications {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifications")
            .field("nodes", &self.clients.len())
            .finish()
    }
}

/// One waiter's interest in handoffs of one key to it.
pub(crate) struct Listening {
    notifications: Arc<Notifications>,
    key: Arc<[u8]>,
    waiter: Arc<str>,
    reserved: watch::Receiver<u64>,
}

impl Notifications {
    pub(crate) fn new(clients: Vec<Client>, connect_timeout: Duration) -> Self {
        let tasks = clients.iter().map(|_| Mutex::default()).collect();
        Notifications {
            clients,
            connect_timeout,
            wanted: Arc::default(),
            tasks,
        }
    }

    fn wanted(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<[u8]>, Wanted>> {
        // Each update is a single insert, remove or counter change: a panic
        // elsewhere cannot leave the map half written.
        self.wanted
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts listening for handoffs of `key` to `waiter` on every node.
    pub(crate) fn listen(self: &Arc<Self>, key: &Arc<[u8]>, waiter: &Arc<str>) -> Listening {
        let (reserved, first) = {
            let mut wanted = self.wanted();
            let first = !wanted.contains_key(key);
            let entry = wanted.entry(key.clone()).or_insert_with(|| Wanted {
                waiters: HashMap::new(),
                sweeping: false,
            });
            let (sender, receiver) = watch::channel(0);
            entry.waiters.insert(waiter.clone(), sender);
            (receiver, first)
        };
        if first {
            self.send(|| Change::Subscribe(key.clone()));
        }
        Listening {
            notifications: self.clone(),
            key: key.clone(),
            waiter: waiter.clone(),
            reserved,
        }
    }

    /// Sends a change to every node's task, starting a task where there is
    /// none or it ended (a new task subscribes to every wanted key itself).
    fn send(&self, change: impl Fn() -> Change) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for (index, (client, task)) in self.clients.iter().zip(&self.tasks).enumerate() {
            let mut task = task.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if let Some(sender) = task.as_ref()
                && sender.send(change()).is_ok()
            {
                continue;
            }
            // The task is gone with the runtime that ran it, or never started.
            let (sender, receiver) = mpsc::unbounded_channel();
            runtime.spawn(listen_to_node(
                index,
                client.clone(),
                self.connect_timeout,
                self.wanted.clone(),
                receiver,
            ));
            *task = Some(sender);
        }
    }
}

impl Listening {
    /// Forgets the handoffs seen so far (before a round: its own outcome
    /// replaces them).
    pub(crate) fn clear(&mut self) {
        if let Some(entry) = self.notifications.wanted().get(&self.key)
            && let Some(sender) = entry.waiters.get(&self.waiter)
        {
            sender.send_replace(0);
        }
        self.reserved.borrow_and_update();
    }

    /// How many nodes reserved the key for this waiter since [`clear`](Self::clear).
    pub(crate) fn reserved(&mut self) -> usize {
        self.reserved.borrow_and_update().count_ones() as usize
    }

    /// Waits for a handoff notification not yet looked at.
    ///
    /// Cancel safe.
    pub(crate) async fn changed(&mut self) {
        if self.reserved.changed().await.is_err() {
            // The sender is gone (never, while we listen): do not spin.
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        let sweep = {
            let mut wanted = self.notifications.wanted();
            match wanted.get_mut(&self.key) {
                Some(entry) => {
                    entry.waiters.remove(&self.waiter);
                    let idle = entry.waiters.is_empty() && !entry.sweeping;
                    entry.sweeping |= idle;
                    idle
                }
                None => false,
            }
        };
        if !sweep {
            return;
        }
        // Unsubscribe once the key has had no listener for a while.
        let (notifications, key) = (self.notifications.clone(), self.key.clone());
        let sweeper = async move {
            loop {
                tokio::time::sleep(LINGER).await;
                let mut wanted = notifications.wanted();
                let Some(entry) = wanted.get_mut(&key) else {
                    return;
                };
                if entry.waiters.is_empty() {
                    wanted.remove(&key);
                    drop(wanted);
                    notifications.send(|| Change::Unsubscribe(key.clone()));
                    return;
                }
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(sweeper);
            }
            Err(_) => {
                // No runtime: no task runs the connections either.
                self.notifications.wanted().remove(&self.key);
            }
        }
    }
}

/// One node's pub/sub connection (node `index`): applies the changes, marks
/// each message's key as reserved by this node for the waiter it names, and
/// reopens the connection (resubscribing every
/// wanted key) when it breaks. Ends when its client is dropped.
async fn listen_to_node(
    index: usize,
    client: Client,
    connect_timeout: Duration,
    wanted: Arc<Mutex<HashMap<Arc<[u8]>, Wanted>>>,
    mut changes: mpsc::UnboundedReceiver<Change>,
) {
    let wanted_keys = || -> Vec<Arc<[u8]>> {
        wanted
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .keys()
            .cloned()
            .collect()
    };
    loop {
        let pubsub = match tokio::time::timeout(connect_timeout, client.get_async_pubsub()).await {
            Ok(Ok(pubsub)) => pubsub,
            _ => {
                // Drain changes meanwhile; the wanted set is re-read on connect.
                tokio::select! {
                    change = changes.recv() => if change.is_none() { return },
                    _ = tokio::time::sleep(RECONNECT_PAUSE) => {}
                }
                continue;
            }
        };
        let (mut sink, mut messages) = pubsub.split();
        let mut healthy = true;
        for key in wanted_keys() {
            healthy &= sink.subscribe(&*key).await.is_ok();
        }
        while healthy {
            tokio::select! {
                change = changes.recv() => {
                    healthy = match change {
                        None => return,
                        Some(Change::Subscribe(key)) => sink.subscribe(&*key).await.is_ok(),
                        Some(Change::Unsubscribe(key)) => sink.unsubscribe(&*key).await.is_ok(),
                    };
                }
                message = messages.next() => match message {
                    Some(message) => {
                        let bit = 1u64 << index.min(63);
                        if let (Ok(channel), Ok(waiter)) = (
                            message.get_channel::<Vec<u8>>(),
                            message.get_payload::<String>(),
                        ) && let Some(reserved) = wanted
                            .lock()
                            .unwrap_or_else(|poisoned| poisoned.into_inner())
                            .get(&channel[..])
                            .and_then(|entry| entry.waiters.get(waiter.as_str()))
                        {
                            reserved.send_modify(|nodes| *nodes |= bit);
                        }
                    }
                    None => healthy = false,
                },
            }
        }
        tokio::time::sleep(RECONNECT_PAUSE).await;
    }
}

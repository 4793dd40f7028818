//! Release notifications across clients: the release script publishes on a
//! channel named after the lock key when it deletes our key, and a client
//! whose `lock` call is waiting for a key held elsewhere listens on that
//! channel on every node, so it retries as soon as the holder releases
//! instead of sleeping out its retry delay. A notification that is missed (a
//! node's subscription not yet in place, a connection lost) costs only the
//! retry delay: the jittered timer stays as the fallback.
//!
//! Each node gets one pub/sub connection, opened by a background task the
//! first time a key is listened for, and reopened (with every channel still
//! wanted) if it breaks. A key's channel is unsubscribed when its last
//! listener goes away.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use redis::Client;
use tokio::sync::{mpsc, watch};

/// The pause before reopening a pub/sub connection that failed.
const RECONNECT_PAUSE: Duration = Duration::from_millis(500);

enum Change {
    Subscribe(Arc<[u8]>),
    Unsubscribe(Arc<[u8]>),
}

struct Wanted {
    /// Counts the releases seen; listeners watch it.
    releases: watch::Sender<u64>,
    listeners: usize,
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

/// Interest in one key's releases; unsubscribes when the last one is dropped.
pub(crate) struct Listening {
    notifications: Arc<Notifications>,
    key: Arc<[u8]>,
    releases: watch::Receiver<u64>,
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

    /// Starts listening for releases of `key` on every node.
    pub(crate) fn listen(self: &Arc<Self>, key: &Arc<[u8]>) -> Listening {
        let (releases, first) = {
            let mut wanted = self.wanted();
            let entry = wanted.entry(key.clone()).or_insert_with(|| Wanted {
                releases: watch::Sender::new(0),
                listeners: 0,
            });
            entry.listeners += 1;
            (entry.releases.subscribe(), entry.listeners == 1)
        };
        if first {
            self.send(|| Change::Subscribe(key.clone()));
        }
        Listening {
            notifications: self.clone(),
            key: key.clone(),
            releases,
        }
    }

    /// Sends a change to every node's task, starting a task where there is
    /// none or it ended (a new task subscribes to every wanted key itself).
    fn send(&self, change: impl Fn() -> Change) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for (client, task) in self.clients.iter().zip(&self.tasks) {
            let mut task = task.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if let Some(sender) = task.as_ref()
                && sender.send(change()).is_ok()
            {
                continue;
            }
            // The task is gone with the runtime that ran it, or never started.
            let (sender, receiver) = mpsc::unbounded_channel();
            runtime.spawn(listen_to_node(
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
    /// Marks every release so far as seen: [`released`](Self::released) then
    /// waits for the next one, including one that comes before it is called.
    pub(crate) fn mark_seen(&mut self) {
        self.releases.borrow_and_update();
    }

    /// Waits for a release of the key on any node that was not yet seen.
    ///
    /// Cancel safe.
    pub(crate) async fn released(&mut self) {
        if self.releases.changed().await.is_err() {
            // The sender is gone (never, while we listen): do not spin.
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        let last = {
            let mut wanted = self.notifications.wanted();
            match wanted.get_mut(&self.key) {
                Some(entry) if entry.listeners > 1 => {
                    entry.listeners -= 1;
                    false
                }
                Some(_) => {
                    wanted.remove(&self.key);
                    true
                }
                None => false,
            }
        };
        if last {
            let key = self.key.clone();
            self.notifications.send(|| Change::Unsubscribe(key.clone()));
        }
    }
}

/// One node's pub/sub connection: applies the changes, wakes the listeners
/// of each message's key, and reopens the connection (resubscribing every
/// wanted key) when it breaks. Ends when its client is dropped.
async fn listen_to_node(
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
                        if let Ok(channel) = message.get_channel::<Vec<u8>>()
                            && let Some(entry) = wanted
                                .lock()
                                .unwrap_or_else(|poisoned| poisoned.into_inner())
                                .get(&channel[..])
                        {
                            entry.releases.send_modify(|seen| *seen += 1);
                        }
                    }
                    None => healthy = false,
                },
            }
        }
        tokio::time::sleep(RECONNECT_PAUSE).await;
    }
}

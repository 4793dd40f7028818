//! Handoff notifications across clients: when a release hands a lock key on
//! to the first waiter in a node's queue (see `queue/`), the script
//! publishes that waiter's id on the channel of the waiter's *client*,
//! `quorlock-wake:<client id>` (a waiter id starts with its client's
//! liveness key, which ends with the client id; see `session.rs`), as
//! `<waiter id> <lock key>`. So a handoff reaches one connection per node, that of the
//! process whose waiter it is: no process is woken for another's waiter, however
//! many clients wait. The client wakes only the waiter named, noting which
//! nodes reserved the key for it: it claims from the first, sending each
//! node its claim as soon as that node told it. A
//! notification that is missed (the subscription not yet in place, a
//! connection lost) costs only time: the reservation expires with the
//! waiter's client's liveness key at the latest, and a check of the
//! client's heartbeat hands the key on again, with a new notification. A
//! handoff to a waiter of this client that no longer listens (its call
//! ended but its leave did not reach that node) makes the client take that
//! waiter out of the queue there.
//!
//! Each node gets one pub/sub connection per client, opened by a background
//! task the first time one of the client's calls waits, subscribed to the
//! client's channel, reopened if it breaks or goes silent (a `PING` on it
//! every second, unanswered for five: a connection cut without a reset
//! would otherwise look quiet for as long as the cut lasts, and every
//! handoff on it would be lost), and closed when the client is
//! dropped. A waiter listens from before its first round in the queue, and
//! once a connection is (re)subscribed every listening waiter counts that
//! node as possibly reserved for it, so a handoff published while nobody
//! listened costs one claim round, not a wait for the reservation to expire.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{mpsc, watch};

use crate::meter;
use crate::target::Target;
use crate::tasks;

/// The pause before reopening a pub/sub connection that failed.
const RECONNECT_PAUSE: Duration = Duration::from_millis(500);

/// How often a pub/sub connection is asked `PING`, to find a connection
/// that went silent without a reset (a partition): one round trip a second
/// per client and node, whatever the number of waiters.
const PING_INTERVAL: Duration = Duration::from_secs(1);

/// How long a `PING` on a pub/sub connection may go unanswered before the
/// connection is taken as dead and reopened: long enough for a node
/// busy with thousands of waiters, on a loaded machine, to answer, since
/// each reopening makes every waiter of the client claim once (a node that
/// cannot answer a PING in 5 s serves no lock meanwhile either).
const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// The start of a client's channel name; the client id follows. The scripts
/// build the same name from a waiter id (see `scripts/`).
pub(crate) const WAKE_CHANNEL_PREFIX: &str = "quorlock-wake:";

/// The nodes that reserved a key for one waiter since it last looked: bit
/// `i` for node `i` (nodes past the 63rd share bit 62), and [`TOLD`] once a
/// node's handoff message arrived (not only a guess that one may have).
type Reserved = watch::Sender<u64>;

/// The bit of a waiter's [`Reserved`] set when a node's handoff message
/// named it, as opposed to every waiter being told to look at a node
/// (`possibly_reserved`, a (re)subscribed connection).
pub(crate) const TOLD: u64 = 1 << 63;

/// The bit of node `index` in a waiter's [`Reserved`].
fn node_bit(index: usize) -> u64 {
    1 << index.min(62)
}

/// The listening waiters of one client, by waiter id.
type Wanted = Arc<Mutex<HashMap<Arc<str>, Reserved>>>;

/// What the client does with a handoff to a waiter of its own that no
/// longer listens (its call ended, and its leave did not reach that node):
/// it takes the waiter out of the queue on that node. Arguments: the node's
/// index, the lock key, the waiter id.
pub(crate) type Orphaned = Arc<dyn Fn(usize, Arc<[u8]>, Arc<str>) + Send + Sync>;

/// The listeners of one client.
pub(crate) struct Notifications {
    targets: Vec<Target>,
    /// How long a node's pub/sub connection may take to open.
    connect_timeout: Duration,
    /// This client's id: its channel is named after it.
    id: Arc<str>,
    /// What each of its waiter ids has just before its number (the end of
    /// a liveness key of the client, and a dot: see `session.rs`).
    waiter_marker: Arc<str>,
    /// Set once, when the engine is made.
    orphaned: std::sync::OnceLock<Orphaned>,
    /// The number in the next waiter id.
    next_waiter: AtomicU64,
    wanted: Wanted,
    /// One background task per node, started on first use, and again when
    /// the last one ended (its runtime shut down). Nothing is ever sent:
    /// dropping the sender (with the client) ends the task.
    tasks: Vec<Mutex<Option<mpsc::UnboundedSender<()>>>>,
}

impl std::fmt::Debug for Notifications {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifications")
            .field("nodes", &self.targets.len())
            .finish()
    }
}

/// One waiter's interest in handoffs to it.
pub(crate) struct Listening {
    wanted: Wanted,
    waiter: Arc<str>,
    reserved: watch::Receiver<u64>,
}

impl Notifications {
    /// The notifications of a client with id `id`, each of whose waiter
    /// ids has `waiter_marker` just before its number (see `session.rs`),
    /// over the nodes of `clients`.
    pub(crate) fn new(
        targets: Vec<Target>,
        connect_timeout: Duration,
        id: Arc<str>,
        waiter_marker: &str,
    ) -> Self {
        let tasks = targets.iter().map(|_| Mutex::default()).collect();
        Notifications {
            targets,
            connect_timeout,
            id,
            waiter_marker: waiter_marker.into(),
            orphaned: std::sync::OnceLock::new(),
            next_waiter: AtomicU64::new(1),
            wanted: Arc::default(),
            tasks,
        }
    }

    /// A new waiter id: the liveness key that keeps it (`live_key`, which
    /// ends with the waiter marker less its dot), a dot, a number of this
    /// client's. Never a token (tokens have no dot).
    pub(crate) fn new_waiter(&self, live_key: &str) -> Arc<str> {
        let number = self.next_waiter.fetch_add(1, Ordering::Relaxed);
        format!("{live_key}.{number}").into()
    }

    /// Sets what the client does with a handoff to a waiter that no longer
    /// listens (once; later calls change nothing).
    pub(crate) fn set_orphaned(&self, orphaned: Orphaned) {
        let _ = self.orphaned.set(orphaned);
    }

    /// Every listening waiter takes node `index` as possibly reserved for
    /// it, and so makes a round there (a claim round, which queues it
    /// again where the lock is not free for it): the node may have lost
    /// its entry, or a handoff to it.
    pub(crate) fn possibly_reserved(&self, index: usize) {
        mark_all(&self.wanted, index);
    }

    /// Starts listening for handoffs to `waiter` on every node.
    pub(crate) fn listen(&self, waiter: &Arc<str>) -> Listening {
        let (sender, reserved) = watch::channel(0);
        lock(&self.wanted).insert(waiter.clone(), sender);
        self.ensure_tasks();
        Listening {
            wanted: self.wanted.clone(),
            waiter: waiter.clone(),
            reserved,
        }
    }

    /// Starts a node's task where there is none or it ended (with the
    /// runtime that ran it).
    fn ensure_tasks(&self) {
        if !tasks::has_runtime() {
            return;
        }
        for (index, (target, task)) in self.targets.iter().zip(&self.tasks).enumerate() {
            let mut task = tasks::lock(task);
            if task.as_ref().is_some_and(|sender| !sender.is_closed()) {
                continue;
            }
            let (sender, closed) = mpsc::unbounded_channel();
            tasks::spawn(listen_to_node(
                Subscription {
                    index,
                    target: target.clone(),
                    connect_timeout: self.connect_timeout,
                    channel: format!("{WAKE_CHANNEL_PREFIX}{}", self.id),
                    waiter_marker: self.waiter_marker.clone(),
                    orphaned: self.orphaned.get().cloned(),
                },
                self.wanted.clone(),
                closed,
            ));
            *task = Some(sender);
        }
    }
}

/// The map of waiters; each update is a single insert or remove, so a panic
/// elsewhere cannot leave it half written.
fn lock(wanted: &Wanted) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Reserved>> {
    tasks::lock(wanted)
}

impl Listening {
    /// Forgets the handoffs seen so far (before a round: its own outcome
    /// replaces them) and returns them: bit `i` for node `i`.
    pub(crate) fn take_seen(&mut self) -> u64 {
        let seen = lock(&self.wanted)
            .get(&self.waiter)
            .map_or(0, |sender| sender.send_replace(0));
        self.reserved.borrow_and_update();
        seen
    }

    /// A receiver of the handoffs to this waiter from now on (for the
    /// calls of a claim round).
    pub(crate) fn watcher(&self) -> watch::Receiver<u64> {
        self.reserved.clone()
    }

    /// How many nodes reserved the key for this waiter since [`take_seen`](Self::take_seen).
    pub(crate) fn reserved(&mut self) -> usize {
        (*self.reserved.borrow_and_update() & !TOLD).count_ones() as usize
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
        lock(&self.wanted).remove(&self.waiter);
    }
}

/// Every waiter in `wanted` takes node `index` as possibly reserved for it.
fn mark_all(wanted: &Wanted, index: usize) {
    let bit = node_bit(index);
    for reserved in lock(wanted).values() {
        reserved.send_modify(|nodes| *nodes |= bit);
    }
}

/// What one node's pub/sub connection is for.
struct Subscription {
    /// The node's index.
    index: usize,
    target: Target,
    connect_timeout: Duration,
    /// The client's channel.
    channel: String,
    /// What the client's waiter ids have just before their number.
    waiter_marker: Arc<str>,
    /// What to do with a handoff to a waiter that no longer listens.
    orphaned: Option<Orphaned>,
}

impl Subscription {
    /// A handoff message (`<waiter id> <lock key>`): marks the waiter named
    /// as reserved by this node, or, for a waiter of this client that no
    /// longer listens, has it leave the queue there.
    fn deliver(&self, wanted: &Wanted, payload: &[u8]) {
        let Some((waiter, key)) = split_handoff(payload, &self.waiter_marker) else {
            return;
        };
        if let Some(reserved) = lock(wanted).get(waiter) {
            meter::notification_received();
            reserved.send_modify(|nodes| *nodes |= node_bit(self.index) | TOLD);
            return;
        }
        if let Some(orphaned) = &self.orphaned {
            orphaned(self.index, key.into(), waiter.into());
        }
    }
}

/// The waiter id and the lock key of a handoff message, where the waiter is
/// one of the client whose waiter ids have `waiter_marker` (its first
/// occurrence in the message) just before their number.
fn split_handoff<'a>(payload: &'a [u8], waiter_marker: &str) -> Option<(&'a str, &'a [u8])> {
    let marker = waiter_marker.as_bytes();
    let at = payload
        .windows(marker.len())
        .position(|window| window == marker)?;
    let number = &payload[at + marker.len()..];
    let digits = number
        .iter()
        .take_while(|byte| byte.is_ascii_digit())
        .count();
    let (waiter_len, rest) = (at + marker.len() + digits, &number[digits..]);
    let key = rest.strip_prefix(b" ")?;
    let waiter = std::str::from_utf8(&payload[..waiter_len]).ok()?;
    (digits > 0 && !key.is_empty()).then_some((waiter, key))
}

/// One node's pub/sub connection, subscribed to the client's channel:
/// delivers each handoff message, and reopens the connection when it
/// breaks. Ends when its client is dropped (`closed` ends).
async fn listen_to_node(
    subscription: Subscription,
    wanted: Wanted,
    mut closed: mpsc::UnboundedReceiver<()>,
) {
    let Subscription {
        target,
        connect_timeout,
        channel,
        ..
    } = &subscription;
    loop {
        let connected = tokio::time::timeout(*connect_timeout, async {
            let client = target.resolve(*connect_timeout).await.ok()?;
            let mut pubsub = client.get_async_pubsub().await.ok()?;
            pubsub.subscribe(channel).await.ok()?;
            Some(pubsub)
        });
        let pubsub = tokio::select! {
            _ = closed.recv() => return,
            connected = connected => connected,
        };
        if let Ok(Some(pubsub)) = pubsub {
            // Handoffs published while nobody listened (before this
            // connection, or between two) are not lost: every waiter takes
            // this node as possibly reserved for it, and its claim round
            // (which queues it again if not) finds out.
            mark_all(&wanted, subscription.index);
            if deliver_while_alive(&subscription, &wanted, pubsub, &mut closed).await {
                return;
            }
        }
        tokio::select! {
            _ = closed.recv() => return,
            _ = tokio::time::sleep(RECONNECT_PAUSE) => {}
        }
    }
}

/// Delivers the handoff messages of one subscribed connection while it
/// lives: until it breaks, or until a `PING` on it goes unanswered for
/// [`PING_TIMEOUT`] (a connection cut without a reset, which would
/// otherwise look like a quiet one for as long as the cut lasts, every
/// handoff on it lost). Returns `true` when the client is dropped.
async fn deliver_while_alive(
    subscription: &Subscription,
    wanted: &Wanted,
    pubsub: redis::aio::PubSub,
    closed: &mut mpsc::UnboundedReceiver<()>,
) -> bool {
    let (mut sink, mut messages) = pubsub.split();
    loop {
        // A PING every PING_INTERVAL; messages are delivered meanwhile.
        let alive = async {
            tokio::time::sleep(PING_INTERVAL).await;
            let pong = tokio::time::timeout(PING_TIMEOUT, sink.ping::<redis::Value>()).await;
            matches!(pong, Ok(Ok(_)))
        };
        tokio::pin!(alive);
        loop {
            tokio::select! {
                _ = closed.recv() => return true,
                alive = &mut alive => match alive {
                    true => break,
                    false => {
                        tracing::debug!(
                            node = subscription.index,
                            "notification connection silent: reopening it"
                        );
                        return false;
                    }
                },
                message = messages.next() => match message {
                    Some(message) => subscription.deliver(wanted, message.get_payload_bytes()),
                    None => return false,
                },
            }
        }
    }
}

/// When each call of a claim round goes: once its node told the waiter that
/// it reserved the lock for it, or at `until`, whichever comes first; and
/// not at all once the round is decided ([`Gates::close`]).
pub(crate) struct Gates {
    reserved: watch::Receiver<u64>,
    /// The nodes that told before the round (bit `i`: node `i`).
    notified: u64,
    until: std::time::Instant,
    /// Set when the round is decided: a claim not sent by then is not sent.
    closed: Arc<AtomicBool>,
}

impl Gates {
    /// The gates of a claim round of `listening`, whose nodes in `notified`
    /// told before it.
    pub(crate) fn new(listening: &Listening, notified: u64, until: std::time::Instant) -> Self {
        Gates {
            reserved: listening.watcher(),
            notified,
            until,
            closed: Arc::default(),
        }
    }

    /// Waits until node `index` told, or until `until`; `true` if the call
    /// may go then, `false` if the round was decided before.
    pub(crate) fn node(&self, index: usize) -> impl Future<Output = bool> + Send + 'static {
        let bit = node_bit(index);
        let told = self.notified & bit != 0;
        let (mut reserved, until) = (self.reserved.clone(), self.until);
        let closed = self.closed.clone();
        async move {
            if !told {
                let told = reserved.wait_for(|nodes| nodes & bit != 0);
                let _ = tokio::time::timeout_at(until.into(), told).await;
            }
            !closed.load(Ordering::Acquire)
        }
    }

    /// Whether a node's handoff message named the waiter before the round
    /// (rather than every waiter being told to look at a node).
    pub(crate) fn told(&self) -> bool {
        self.notified & TOLD != 0
    }

    /// The round is decided: calls whose gate has not opened are not sent.
    /// Sent later, a claim could reach its node after the release that
    /// follows the round, and leave our key there until its TTL.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MARKER: &str = "quorlock-client:q0123.";

    #[test]
    fn a_handoff_names_the_waiter_and_the_lock_key() {
        let payload = "orders:quorlock-client:q0123.42 orders:stock item 7";
        let (waiter, key) = split_handoff(payload.as_bytes(), MARKER).expect("ours");
        assert_eq!(waiter, "orders:quorlock-client:q0123.42");
        // The key is everything after the first space, spaces and all.
        assert_eq!(key, b"orders:stock item 7");
        // Slotted, the liveness key carries the lock's hash tag, spaces and all.
        let payload = "orders:{a b}quorlock-client:q0123.7 orders:{a b}";
        let (waiter, key) = split_handoff(payload.as_bytes(), MARKER).expect("ours");
        assert_eq!(waiter, "orders:{a b}quorlock-client:q0123.7");
        assert_eq!(key, b"orders:{a b}");
    }

    /// A node's handoff message marks its node and that it told; every
    /// waiter told to look at a node (a (re)opened connection, a lost
    /// liveness key) gets the node only, so that its claim takes the
    /// narrower lane (`queue::LOOK_ROUNDS_IN_FLIGHT`).
    #[test]
    fn a_handoff_message_tells_and_a_guess_only_looks() {
        let live_key = "orders:quorlock-client:q0123";
        let notifications =
            Notifications::new(Vec::new(), Duration::from_secs(1), "q0123".into(), MARKER);
        let waiter = notifications.new_waiter(live_key);
        let mut listening = notifications.listen(&waiter);
        notifications.possibly_reserved(1);
        assert_eq!(listening.reserved(), 1);
        assert_eq!(listening.take_seen(), node_bit(1));
        let subscription = Subscription {
            index: 2,
            target: Target::Fixed(Box::new(
                redis::Client::open("redis://127.0.0.1:1").expect("a client is only a URL"),
            )),
            connect_timeout: Duration::from_secs(1),
            channel: String::new(),
            waiter_marker: notifications.waiter_marker.clone(),
            orphaned: None,
        };
        let message = format!("{waiter} orders:stock");
        subscription.deliver(&notifications.wanted, message.as_bytes());
        assert_eq!(listening.reserved(), 1);
        assert_eq!(listening.take_seen(), node_bit(2) | TOLD);
    }

    #[test]
    fn a_handoff_to_another_client_or_malformed_is_not_ours() {
        const PREFIX: &str = "orders:quorlock-client:q0123.";
        for payload in [
            "orders:quorlock-client:q9999.42 orders:stock".to_owned(),
            format!("{PREFIX} orders:stock"),
            format!("{PREFIX}42"),
            format!("{PREFIX}42 "),
            format!("{PREFIX}42x orders:stock"),
        ] {
            assert!(
                split_handoff(payload.as_bytes(), MARKER).is_none(),
                "{payload:?}"
            );
        }
    }
}

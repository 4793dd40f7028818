//! Tasks and the state they share: [`spawn`] (on the current runtime, if
//! there is one), [`Background`] (the client's counted background work),
//! [`wait_until`] (a condition, woken by a `Notify`) and [`lock`] (a mutex
//! that a panicked task held is still usable).
//!
//! The client's background work: releases of dropped guards and of `lock`
//! calls dropped mid-round, releases that timed out and finish late, and the
//! calls of a round still under way when the round was decided. Each such
//! task is counted while it runs, so that [`Redlock::flush`] can wait for
//! them before a runtime shuts down (a runtime that is dropped cancels its
//! tasks, and a cancelled release leaves its key until the TTL).
//!
//! [`Redlock::flush`]: crate::Redlock::flush

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// Runs `task` on the current tokio runtime, uncounted. Returns `false` (and
/// drops the task) outside a runtime: never a panic, never a blocked thread.
pub(crate) fn spawn<F>(task: F) -> bool
where
    F: Future<Output = ()> + Send + 'static,
{
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(task);
            true
        }
        Err(_) => false,
    }
}

/// Whether this thread runs within a tokio runtime (so that [`spawn`] works).
pub(crate) fn has_runtime() -> bool {
    // A task of a runtime is within it: no handle (an `Arc`) cloned and
    // dropped on every lock and unlock. The runtime's own `block_on` future
    // is not a task: asked for the handle.
    tokio::task::try_id().is_some() || tokio::runtime::Handle::try_current().is_ok()
}

/// Awaits `work` in `span`. A disabled span (no subscriber wants it, the
/// usual case) is not entered and left at every poll of `work`. A macro, not
/// a function: `work`, a whole lock call's future, is awaited where it is
/// made instead of being moved into another future first.
macro_rules! in_span {
    ($span:expr, $work:expr) => {{
        let span: tracing::Span = $span;
        if span.is_disabled() {
            $work.await
        } else {
            tracing::Instrument::instrument($work, span).await
        }
    }};
}
pub(crate) use in_span;

/// Yields once to the tasks already queued to run: the task wakes itself
/// and is pending, which puts it at the back of its worker's run queue, so
/// that every task ready now runs before it does (tokio's `yield_now`
/// instead waits until the worker has nothing left to run and has polled
/// for I/O, which the tasks woken by that poll then extend).
///
/// Cancel safety: cancel safe (it only waits).
pub(crate) async fn yield_to_queue() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if std::mem::replace(&mut yielded, true) {
            return std::task::Poll::Ready(());
        }
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await;
}

/// Locks `mutex`, taking it over from a task that panicked while holding it
/// (the state every holder leaves is valid between statements).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Waits until `done()` holds, checking it again at every notification of
/// `notify`, or until `deadline` (`None`: no deadline); returns whether
/// `done()` held. The wait is registered before each check, so a
/// notification between the check and the wait is not missed.
///
/// Cancel safety: cancel safe (it only waits).
pub(crate) async fn wait_until(
    notify: &Notify,
    deadline: Option<std::time::Instant>,
    mut done: impl FnMut() -> bool,
) -> bool {
    loop {
        let notified = notify.notified();
        let mut notified = std::pin::pin!(notified);
        notified.as_mut().enable();
        if done() {
            return true;
        }
        match deadline {
            Some(deadline) => {
                if tokio::time::timeout_at(deadline.into(), notified)
                    .await
                    .is_err()
                {
                    return false;
                }
            }
            None => notified.await,
        }
    }
}

/// What background work that found no runtime leaves on the nodes, to
/// expire by itself (see [`Background::spawn_or_leave`]).
#[derive(Clone, Copy)]
pub(crate) enum Left<'a> {
    /// Entries that live briefly (queue entries, a writer's intent): worth
    /// a debug line.
    Entries {
        /// The call that ended (`"lock call"`).
        call: &'static str,
        /// What it leaves (`"its queue entries"`).
        what: &'static str,
    },
    /// A lock's keys, until their TTL: worth a warning.
    Keys {
        /// The call or guard that was dropped (`"lock guard"`).
        call: &'static str,
        /// The lock's resource, as errors show it: made only when needed.
        resource: &'a dyn Fn() -> String,
    },
}

/// Counts a client's background tasks. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct Background {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    running: AtomicUsize,
    idle: Notify,
}

/// Held by a running task; its drop (the task's end, however it ends) counts
/// the task out.
struct Running(Arc<Shared>);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Background {
    /// Runs `task` on the current runtime, counted until it ends. Returns
    /// `false` (and drops the task) outside a runtime.
    pub(crate) fn spawn<F>(&self, task: F) -> bool
    where
        F: Future + Send + 'static,
    {
        // Counted from here; outside a runtime the task, and with it
        // `running`, is dropped at once, which counts it out again.
        self.shared.running.fetch_add(1, Ordering::AcqRel);
        let running = Running(self.shared.clone());
        spawn(async move {
            let _running = running;
            task.await;
        })
    }

    /// Runs `task` as counted background work, or, outside a runtime (where
    /// it cannot run), says what is `left` to expire by itself.
    pub(crate) fn spawn_or_leave<F>(&self, task: F, left: Left<'_>)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        if self.spawn(task) {
            return;
        }
        match left {
            Left::Entries { call, what } => {
                tracing::debug!("{call} ended outside a tokio runtime: {what} expire");
            }
            Left::Keys { call, resource } => tracing::warn!(
                resource = %resource(),
                "{call} dropped outside a tokio runtime; its keys expire by their ttl"
            ),
        }
    }

    /// Waits until no counted task runs. Cancel safe.
    pub(crate) async fn idle(&self) {
        let running = &self.shared.running;
        wait_until(&self.shared.idle, None, || {
            running.load(Ordering::Acquire) == 0
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn idle_waits_for_every_task() {
        let background = Background::default();
        background.idle().await;
        let done = Arc::new(AtomicUsize::new(0));
        for millis in [10, 30, 50] {
            let done = done.clone();
            assert!(background.spawn(async move {
                tokio::time::sleep(Duration::from_millis(millis)).await;
                done.fetch_add(1, Ordering::SeqCst);
            }));
        }
        background.idle().await;
        assert_eq!(done.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn outside_a_runtime_nothing_is_spawned() {
        let background = Background::default();
        assert!(!background.spawn(async {}));
        assert_eq!(background.shared.running.load(Ordering::SeqCst), 0);
    }
}

//! The coalescing of a connection's writes ([`Coalescing`]): its driver
//! yields while other calls are under way on the link ([`Traffic`]), so
//! that the commands they queue go out in one write.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

/// A call under way on a link: counted in its [`Traffic`] until dropped.
/// Borrowed, not an `Arc`: no reference count moves per call.
pub(crate) struct Outstanding<'a>(&'a Traffic);

impl Drop for Outstanding<'_> {
    fn drop(&mut self) {
        self.0.outstanding.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How many calls a yielding driver lets queue before the call that makes
/// them that many wakes it at once (see [`Coalescing`]).
pub(super) const BATCH: usize = 16;

/// A link's calls, as its driver sees them (see [`Coalescing`]).
#[derive(Debug, Default)]
pub(crate) struct Traffic {
    /// Calls under way: queued on the connection, not yet answered.
    outstanding: AtomicUsize,
    /// Calls made since the driver last ran.
    queued: AtomicUsize,
    /// The driver, while it yields: the call that makes [`BATCH`] calls
    /// queued wakes it.
    parked: Mutex<Option<std::task::Waker>>,
}

impl Traffic {
    /// Counts a call under way until the guard is dropped. The call that
    /// makes [`BATCH`] calls queued since the driver last ran wakes a
    /// yielding driver (see [`Coalescing`]).
    pub(super) fn outstanding(&self) -> Outstanding<'_> {
        self.outstanding.fetch_add(1, Ordering::Relaxed);
        if self.queued.fetch_add(1, Ordering::Relaxed) + 1 >= BATCH
            && let Some(driver) = crate::tasks::lock(&self.parked).take()
        {
            driver.wake();
        }
        Outstanding(self)
    }

    /// Whether calls other than the caller's own are under way.
    pub(super) fn busy(&self) -> bool {
        self.outstanding.load(Ordering::Relaxed) > 1
    }
}

/// A connection's driver task, as the `redis` crate makes it.
pub(super) type Driver = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A connection's driver task that yields before it writes, while other
/// calls are under way on the link, so that it writes their commands
/// together (see the module docs):
///
/// - Woken with at most one call under way (a lone caller), it runs at once.
/// - Woken with more, it yields: it asks the runtime to wake it when the
///   worker runs out of other tasks (tokio's `yield_now`: the runtime wakes
///   such tasks before its worker parks, and at each of its maintenance
///   ticks, by default every 61 polls of other tasks), and leaves its
///   waker in the link's [`Traffic`]. It runs at the first of: that wake,
///   any other wake (a reply arrived: the socket's), or the call that makes
///   [`BATCH`] calls queued since it last ran (which wakes it, so that it
///   runs right after that call's task).
///   The bound keeps the server busy while the client makes the next
///   calls: one write for all would leave each side idle while the other
///   works.
///
/// Nothing here decides a vote: the calls and their timers are the
/// driver's own, and a command written later only leaves its round less
/// validity (which counts from before the command was queued). The driver
/// ends when every handle of the connection is dropped (its channel
/// closes) or the connection fails.
pub(crate) struct Coalescing {
    pub(super) driver: Driver,
    pub(super) traffic: Arc<Traffic>,
    /// Whether it yielded since it last ran: the next poll runs the driver.
    pub(super) yielded: bool,
}

impl Coalescing {
    /// `driver`, coalescing the calls that `traffic` counts.
    pub(crate) fn new(driver: Driver, traffic: Arc<Traffic>) -> Self {
        Coalescing {
            driver,
            traffic,
            yielded: false,
        }
    }
}

impl Future for Coalescing {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if !self.yielded && self.traffic.outstanding.load(Ordering::Relaxed) > 1 {
            self.yielded = true;
            *crate::tasks::lock(&self.traffic.parked) = Some(cx.waker().clone());
            // Its first poll asks for the deferred wake and is pending;
            // dropping it after does not take the request back.
            let mut later = std::pin::pin!(tokio::task::yield_now());
            let _ = later.as_mut().poll(cx);
            return Poll::Pending;
        }
        self.traffic.queued.store(0, Ordering::Relaxed);
        // Its waker is left only by a yield: no lock otherwise (a lone
        // caller's wake).
        if std::mem::take(&mut self.yielded) {
            crate::tasks::lock(&self.traffic.parked).take();
        }
        self.driver.as_mut().poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::task::Waker;
    use std::time::{Duration, Instant};

    /// A driver that counts its polls and keeps its waker, like a driver
    /// with nothing to do.
    struct Idle {
        polls: Arc<AtomicUsize>,
        waker: Arc<Mutex<Option<Waker>>>,
    }

    impl Future for Idle {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            *crate::tasks::lock(&self.waker) = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    /// A task that is always ready to run: it wakes itself at every poll.
    struct Spin(Arc<AtomicBool>);

    impl Future for Spin {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.0.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    /// A driver that yields with other calls under way, on a worker that
    /// never runs out of tasks (a spinning task), and with nothing else to
    /// wake it (no reply coming, fewer than `BATCH` calls), still runs: the
    /// runtime's deferred wake, at its maintenance tick, is what brings it
    /// back. Each wake yields again, and each time the driver runs.
    #[test]
    fn a_yielding_driver_runs_on_a_worker_that_is_never_idle() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let traffic = Arc::new(Traffic::default());
        traffic.outstanding.store(2, Ordering::SeqCst);
        let (polls, waker) = (Arc::new(AtomicUsize::new(0)), Arc::default());
        let stop = Arc::new(AtomicBool::new(false));
        let spinner = runtime.spawn(Spin(stop.clone()));
        let driver = Idle {
            polls: polls.clone(),
            waker: Arc::clone(&waker),
        };
        runtime.spawn(Coalescing::new(Box::pin(driver), traffic.clone()));
        let reached = |count: usize| {
            let deadline = Instant::now() + Duration::from_secs(5);
            while polls.load(Ordering::SeqCst) < count && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            polls.load(Ordering::SeqCst) >= count
        };
        assert!(reached(1), "the yielding driver never ran");
        for count in 2..=5 {
            let woken = crate::tasks::lock(&waker)
                .take()
                .expect("the driver's waker");
            woken.wake();
            assert!(reached(count), "the driver did not run after wake {count}");
        }
        stop.store(true, Ordering::SeqCst);
        runtime.block_on(spinner).expect("spinner");
    }

    /// Counts its wakes.
    struct Wakes(AtomicUsize);

    impl futures::task::ArcWake for Wakes {
        fn wake_by_ref(arc_self: &Arc<Self>) {
            arc_self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The call that makes `BATCH` calls queued since the driver last ran
    /// wakes a yielding driver, once; the calls before it do not, and a
    /// call's end takes it out of the calls under way.
    #[test]
    fn the_batch_th_call_wakes_a_yielding_driver() {
        let traffic = Traffic::default();
        let wakes = Arc::new(Wakes(AtomicUsize::new(0)));
        *crate::tasks::lock(&traffic.parked) = Some(futures::task::waker(wakes.clone()));
        let mut calls: Vec<Outstanding> = (1..BATCH).map(|_| traffic.outstanding()).collect();
        assert_eq!(wakes.0.load(Ordering::SeqCst), 0);
        calls.push(traffic.outstanding());
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
        calls.push(traffic.outstanding());
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1, "woken once");
        assert_eq!(traffic.outstanding.load(Ordering::SeqCst), BATCH + 1);
        drop(calls);
        assert_eq!(traffic.outstanding.load(Ordering::SeqCst), 0);
    }
}

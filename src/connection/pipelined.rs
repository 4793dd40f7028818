//! quorlock's own multiplexed connection to one server over a plain socket
//! (TCP or Unix), speaking RESP2 ([`Pipelined`]).
//!
//! It does what the `redis` crate's `MultiplexedConnection` does for
//! quorlock's calls, with less work per call: a call's commands are
//! encoded straight into the connection's write buffer when the call is
//! first polled, its reply waits in one shared slot (no channel to a
//! driver, no boxed request), and the driver reads replies with a parser
//! of RESP2 alone (`resp.rs`). The `redis` crate's types stay: commands are
//! its [`Cmd`] and [`Pipeline`], replies its [`Value`], errors its
//! [`RedisError`], so every caller reads the same values either way.
//! `rediss://` (TLS) and RESP3 connections stay the `redis` crate's
//! ([`Server`](super::server::Server)).
//!
//! What callers rely on, and why it holds:
//!
//! - **Order.** A call's commands are in the write buffer, behind every
//!   call first polled before it, the moment it is first polled; the node
//!   runs them in that order and answers in that order, and each reply
//!   goes to the call waiting longest. (A release that must land after
//!   its lock's vote on the same connection relies on this, see
//!   `Batches::sent`.)
//! - **A call that goes away is still sent.** Its commands are already in
//!   the buffer; its replies are read and dropped. A release is never lost
//!   to its caller's timer.
//! - **A broken connection fails every call, never hangs one.** A read or
//!   write error, the server closing the socket, or a reply that is not
//!   RESP2 ends the driver: every call waiting gets an error that
//!   [`is_broken`](super::is_broken) reads as broken (so the link connects
//!   again), and every later call on the handle gets one at once. The
//!   driver also ends once every handle is dropped and no reply is owed.
//!
//! Cancel safety: the futures of [`ConnectionLike`] here are cancel safe in
//! the sense above: dropped after their first poll, the commands still go
//! out and their replies are discarded.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisError, RedisFuture, Value};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::coalescing::Driver;
use super::resp;
use crate::tasks;

/// The replies of one call: one command's, or a pipeline's (those it asked
/// for).
enum Got {
    One(Value),
    Many(Vec<Value>),
}

/// A call's replies, or the connection's error.
type Replies = Result<Got, RedisError>;

/// Where a call's replies wait for it, and its waker.
#[derive(Default)]
struct Slot(Mutex<(Option<Replies>, Option<Waker>)>);

impl Slot {
    /// Hands the call its replies and wakes it.
    fn fill(&self, replies: Replies) {
        let mut slot = tasks::lock(&self.0);
        slot.0 = Some(replies);
        let waker = slot.1.take();
        drop(slot);
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// A call whose replies are owed, in the order its commands went out.
struct Owed {
    /// Replies to read past first (a transaction's `MULTI` and `QUEUED`s).
    skip: usize,
    /// Replies it wants after those.
    count: usize,
    /// Those read so far (a call of one command keeps its one reply in
    /// `one`).
    one: Option<Value>,
    many: Vec<Value>,
    slot: Arc<Slot>,
}

impl Owed {
    /// Takes `reply`; whether the call has all it wants.
    fn take(&mut self, reply: Value) -> bool {
        if self.skip > 0 {
            self.skip -= 1;
        } else if self.count == 1 {
            self.one = Some(reply);
        } else {
            self.many.push(reply);
        }
        self.skip == 0 && (self.one.is_some() || self.many.len() >= self.count)
    }

    /// Hands the call what it took.
    fn answer(self) {
        let got = match self.one {
            Some(one) => Got::One(one),
            None => Got::Many(self.many),
        };
        self.slot.fill(Ok(got));
    }
}

/// The connection's state, shared by its handles and its driver.
struct State {
    /// Commands encoded, not yet handed to the driver.
    out: Vec<u8>,
    owed: VecDeque<Owed>,
    /// The driver's waker, taken by the call that wakes it.
    driver: Option<Waker>,
    /// Why the connection ended, once it has.
    ended: Option<(io::ErrorKind, Arc<str>)>,
}

/// The state and the number of handles (counted apart: a call clones its
/// handle, and must not take the lock for it).
struct Shared {
    state: Mutex<State>,
    handles: AtomicUsize,
}

/// The error a call gets from a connection that ended: an I/O error of a
/// kind the `redis` crate reads as a dropped connection.
fn ended_error(kind: io::ErrorKind, why: &str) -> RedisError {
    RedisError::from(io::Error::new(
        kind,
        format!("the connection to the node ended: {why}"),
    ))
}

/// A handle of a connection; clones share it.
pub(crate) struct Pipelined {
    shared: Arc<Shared>,
    db: i64,
}

impl std::fmt::Debug for Pipelined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipelined").finish_non_exhaustive()
    }
}

impl Clone for Pipelined {
    fn clone(&self) -> Self {
        self.shared.handles.fetch_add(1, Ordering::Relaxed);
        Pipelined {
            shared: self.shared.clone(),
            db: self.db,
        }
    }
}

impl Drop for Pipelined {
    fn drop(&mut self) {
        if self.shared.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The last handle: the driver ends once no reply is owed.
            let driver = tasks::lock(&self.shared.state).driver.take();
            if let Some(driver) = driver {
                driver.wake();
            }
        }
    }
}

impl Pipelined {
    /// A connection over `stream` (already connected, no handshake made:
    /// see `handshake.rs`) to database `db`, and its driver, not yet
    /// spawned.
    pub(crate) fn new<S>(stream: S, db: i64) -> (Pipelined, Driver)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                out: Vec::new(),
                owed: VecDeque::new(),
                driver: None,
                ended: None,
            }),
            handles: AtomicUsize::new(1),
        });
        let drive = Drive {
            shared: shared.clone(),
            stream,
            writing: Vec::new(),
            written: 0,
            read: Vec::new(),
            filled: 0,
            answered: Vec::new(),
        };
        (Pipelined { shared, db }, Box::pin(drive))
    }

    /// Queues the commands that `encode` writes, whose replies are
    /// `skip` to pass and `count` to keep, and wakes the driver.
    fn call(&self, skip: usize, count: usize, encode: impl FnOnce(&mut Vec<u8>)) -> Reply {
        let slot = Arc::new(Slot::default());
        if skip + count == 0 {
            slot.fill(Ok(Got::Many(Vec::new())));
            return Reply(slot);
        }
        let mut state = tasks::lock(&self.shared.state);
        if let Some((kind, why)) = &state.ended {
            let err = ended_error(*kind, why);
            drop(state);
            slot.fill(Err(err));
            return Reply(slot);
        }
        encode(&mut state.out);
        state.owed.push_back(Owed {
            skip,
            count,
            one: None,
            many: Vec::with_capacity(if count > 1 { count } else { 0 }),
            slot: slot.clone(),
        });
        let driver = state.driver.take();
        drop(state);
        if let Some(driver) = driver {
            driver.wake();
        }
        Reply(slot)
    }
}

/// A call's replies, once they are read.
struct Reply(Arc<Slot>);

impl Future for Reply {
    type Output = Replies;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut slot = tasks::lock(&self.0.0);
        if let Some(replies) = slot.0.take() {
            return Poll::Ready(replies);
        }
        match &slot.1 {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            _ => slot.1 = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl ConnectionLike for Pipelined {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let reply = self.call(0, 1, |out| resp::write(cmd, out));
        Box::pin(async move {
            match reply.await? {
                Got::One(value) => Ok(value),
                Got::Many(mut values) => Ok(values.pop().unwrap_or(Value::Nil)),
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let reply = self.call(offset, count, |out| {
            if pipeline.is_transaction() {
                out.extend_from_slice(&pipeline.get_packed_pipeline());
            } else {
                for cmd in pipeline.cmd_iter() {
                    resp::write(cmd, out);
                }
            }
        });
        Box::pin(async move {
            match reply.await? {
                Got::One(value) => Ok(vec![value]),
                Got::Many(values) => Ok(values),
            }
        })
    }

    fn get_db(&self) -> i64 {
        self.db
    }
}

/// The connection's driver: writes what the calls queued, reads the
/// replies and hands each call its own.
struct Drive<S> {
    shared: Arc<Shared>,
    stream: S,
    /// Bytes being written, from `written` on.
    writing: Vec<u8>,
    written: usize,
    /// Bytes read and not yet parsed into replies: `read[..filled]`.
    read: Vec<u8>,
    filled: usize,
    /// The calls answered by one read (kept: no allocation per read).
    answered: Vec<Owed>,
}

/// Why a connection ends when it is no longer used.
const UNUSED: &str = "every handle of it was dropped";

/// How much room a read asks for at least.
const READ_ROOM: usize = 16 * 1024;

impl<S: AsyncRead + AsyncWrite + Unpin> Drive<S> {
    /// Ends the connection: every call owed a reply and every later call
    /// gets an error that says why.
    fn end(&mut self, kind: io::ErrorKind, why: &str) -> Poll<()> {
        // Every ending reads as a dropped connection (see `is_broken`).
        let kind = match kind {
            io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::UnexpectedEof
            | io::ErrorKind::NotConnected => kind,
            _ => io::ErrorKind::ConnectionAborted,
        };
        end(&self.shared.state, kind, why);
        Poll::Ready(())
    }

    /// Writes what is queued, as far as the socket takes it.
    fn write(&mut self, cx: &mut Context<'_>) -> Result<(), io::Error> {
        loop {
            if self.written == self.writing.len() {
                self.writing.clear();
                self.written = 0;
                std::mem::swap(&mut self.writing, &mut tasks::lock(&self.shared.state).out);
                if self.writing.is_empty() {
                    return Ok(());
                }
            }
            match Pin::new(&mut self.stream).poll_write(cx, &self.writing[self.written..]) {
                Poll::Ready(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
                Poll::Ready(Ok(n)) => self.written += n,
                Poll::Ready(Err(err)) => return Err(err),
                // The socket wakes the driver when it takes more.
                Poll::Pending => return Ok(()),
            }
        }
    }

    /// Reads what the socket has; `Ok(false)` once the server closed it.
    fn read(&mut self, cx: &mut Context<'_>) -> Result<bool, io::Error> {
        loop {
            if self.read.len() - self.filled < READ_ROOM / 2 {
                // Zeroed once, as it grows: reads then fill it in place.
                self.read.resize(self.filled + READ_ROOM, 0);
            }
            let mut buf = ReadBuf::new(&mut self.read[self.filled..]);
            match Pin::new(&mut self.stream).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if buf.filled().is_empty() => return Ok(false),
                Poll::Ready(Ok(())) => self.filled += buf.filled().len(),
                Poll::Ready(Err(err)) => return Err(err),
                Poll::Pending => return Ok(true),
            }
        }
    }

    /// Hands each complete reply read to the call it belongs to; whether
    /// the connection is done with (no handle left, no reply owed).
    fn hand_out(&mut self) -> Result<bool, &'static str> {
        let mut at = 0;
        let mut state = tasks::lock(&self.shared.state);
        let outcome = loop {
            let (reply, next) = match resp::reply(&self.read[..self.filled], at) {
                Ok(Some(read)) => read,
                Ok(None) => {
                    let unused = self.shared.handles.load(Ordering::Acquire) == 0;
                    break Ok(unused && state.owed.is_empty());
                }
                Err(resp::Malformed(why)) => break Err(why),
            };
            at = next;
            let Some(call) = state.owed.front_mut() else {
                break Err("a reply no call asked for");
            };
            if call.take(reply)
                && let Some(call) = state.owed.pop_front()
            {
                self.answered.push(call);
            }
        };
        drop(state);
        self.read.copy_within(at..self.filled, 0);
        self.filled -= at;
        for call in self.answered.drain(..) {
            call.answer();
        }
        outcome
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Future for Drive<S> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        {
            let mut state = tasks::lock(&this.shared.state);
            if this.shared.handles.load(Ordering::Acquire) == 0 && state.owed.is_empty() {
                drop(state);
                return this.end(io::ErrorKind::BrokenPipe, UNUSED);
            }
            match &state.driver {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                _ => state.driver = Some(cx.waker().clone()),
            }
        }
        if let Err(err) = this.write(cx) {
            return this.end(err.kind(), &err.to_string());
        }
        match this.read(cx) {
            Ok(true) => {}
            Ok(false) => return this.end(io::ErrorKind::UnexpectedEof, "the server closed it"),
            Err(err) => return this.end(err.kind(), &err.to_string()),
        }
        match this.hand_out() {
            Ok(false) => {}
            Ok(true) => return this.end(io::ErrorKind::BrokenPipe, UNUSED),
            Err(why) => return this.end(io::ErrorKind::ConnectionAborted, why),
        }
        // Pending: the socket wakes it when it can read or write more, a
        // call when it queues commands, the last handle when it goes.
        Poll::Pending
    }
}

impl<S> Drop for Drive<S> {
    /// A driver dropped before it ended (its runtime shut down) fails the
    /// calls still owed replies, and every later call, instead of leaving
    /// them to wait.
    fn drop(&mut self) {
        if tasks::lock(&self.shared.state).ended.is_none() {
            let why = "its driver stopped (its runtime shut down)";
            end(&self.shared.state, io::ErrorKind::BrokenPipe, why);
        }
    }
}

/// Ends the connection of `state` for `why`: every call owed a reply, and
/// every later call, gets an error of `kind` that says so.
fn end(state: &Mutex<State>, kind: io::ErrorKind, why: &str) {
    let mut locked = tasks::lock(state);
    locked.ended = Some((kind, why.into()));
    locked.out = Vec::new();
    let owed = std::mem::take(&mut locked.owed);
    drop(locked);
    for call in owed {
        call.slot.fill(Err(ended_error(kind, why)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    /// A connection over an in-memory pipe, its driver spawned; the far end
    /// plays the server (only the bytes matter here: the suite runs every
    /// other test over real servers).
    fn pair() -> (Pipelined, DuplexStream, tokio::task::JoinHandle<()>) {
        let (near, far) = tokio::io::duplex(64 * 1024);
        let (connection, driver) = Pipelined::new(near, 0);
        (connection, far, tokio::spawn(driver))
    }

    /// Reads from the far end until `want` bytes came.
    async fn requests(far: &mut DuplexStream, want: usize) -> Vec<u8> {
        let mut got = vec![0; want];
        far.read_exact(&mut got).await.expect("the requests");
        got
    }

    fn get(key: &str) -> Cmd {
        let mut cmd = redis::cmd("GET");
        cmd.arg(key);
        cmd
    }

    /// Each call gets its own replies, in the order the calls were first
    /// polled, a pipeline its count, a transaction the replies past its
    /// `MULTI` and `QUEUED`s; a server's error is the reply of its call
    /// alone.
    #[tokio::test]
    async fn replies_go_to_their_calls_in_order() {
        let (connection, mut far, _driver) = pair();
        let (mut one, mut two) = (connection.clone(), connection.clone());
        let (mut three, mut four) = (connection.clone(), connection);
        let (a, b) = (get("a"), get("b"));
        let mut pipeline = redis::pipe();
        pipeline.cmd("GET").arg("c").cmd("GET").arg("d");
        let mut transaction = redis::pipe();
        transaction.atomic().cmd("GET").arg("e");
        let first = one.req_packed_command(&a);
        let second = two.req_packed_commands(&pipeline, 0, 2);
        let third = three.req_packed_command(&b);
        let fourth = four.req_packed_commands(&transaction, 2, 1);
        // Queued at the first poll, in that order.
        let calls = futures::future::join4(first, second, third, fourth);
        let server = async {
            let mut sent = a.get_packed_command();
            sent.extend(pipeline.get_packed_pipeline());
            sent.extend(b.get_packed_command());
            sent.extend(transaction.get_packed_pipeline());
            assert_eq!(requests(&mut far, sent.len()).await, sent);
            let replies = b"$1\r\nA\r\n:3\r\n-ERR no\r\n$-1\r\n+OK\r\n+QUEUED\r\n*1\r\n$1\r\nE\r\n";
            far.write_all(replies).await.expect("replies");
        };
        let ((first, second, third, fourth), ()) = tokio::join!(calls, server);
        assert_eq!(first.ok(), Some(Value::BulkString(b"A".to_vec())));
        let second = second.expect("the pipeline's replies");
        assert_eq!(second[0], Value::Int(3));
        assert!(matches!(second[1], Value::ServerError(_)));
        assert_eq!(third.ok(), Some(Value::Nil));
        assert_eq!(
            fourth.ok(),
            Some(vec![Value::Array(vec![Value::BulkString(b"E".to_vec())])])
        );
    }

    /// A call dropped after its first poll still sends its command; its
    /// reply is read and dropped, and the next call gets its own.
    #[tokio::test]
    async fn a_dropped_call_is_sent_and_its_reply_skipped() {
        let (mut connection, mut far, _driver) = pair();
        let (a, b) = (get("a"), get("b"));
        let mut dropped = connection.req_packed_command(&a);
        assert!(futures::poll!(dropped.as_mut()).is_pending());
        drop(dropped);
        let kept = connection.req_packed_command(&b);
        let server = async {
            let mut sent = a.get_packed_command();
            sent.extend(b.get_packed_command());
            assert_eq!(requests(&mut far, sent.len()).await, sent);
            far.write_all(b":1\r\n:2\r\n").await.expect("replies");
        };
        let (kept, ()) = tokio::join!(kept, server);
        assert_eq!(kept.ok(), Some(Value::Int(2)));
    }

    /// The server closing the socket, or a reply that is not RESP2, fails
    /// every call owed a reply and every later call, with an error that
    /// reads as a broken connection; the driver ends.
    #[tokio::test]
    async fn a_closed_or_garbled_connection_fails_every_call() {
        for ending in [&b""[..], &b"?garbage\r\n"[..]] {
            let (mut connection, mut far, driver) = pair();
            let a = get("a");
            let owed = connection.req_packed_command(&a);
            let server = async {
                requests(&mut far, a.get_packed_command().len()).await;
                far.write_all(ending).await.expect("write");
                if ending.is_empty() {
                    far.shutdown().await.expect("close");
                }
            };
            let (owed, ()) = tokio::join!(owed, server);
            let err = owed.expect_err("the owed call fails");
            assert!(crate::connection::is_broken(&err), "{err}");
            let later = connection.req_packed_command(&a).await;
            assert!(later.is_err_and(|err| crate::connection::is_broken(&err)));
            let ended = tokio::time::timeout(std::time::Duration::from_secs(5), driver).await;
            assert!(ended.is_ok(), "the driver did not end");
        }
    }

    /// The driver ends once the last handle is gone and no reply is owed:
    /// at once when none is, after the reply when one is.
    #[tokio::test]
    async fn the_driver_ends_with_its_last_handle() {
        let bound = std::time::Duration::from_secs(5);
        let (connection, _far, driver) = pair();
        drop(connection);
        assert!(tokio::time::timeout(bound, driver).await.is_ok());

        let (mut connection, mut far, mut driver) = pair();
        let a = get("a");
        let mut owed = connection.req_packed_command(&a);
        assert!(futures::poll!(owed.as_mut()).is_pending());
        drop(owed);
        drop(connection);
        requests(&mut far, a.get_packed_command().len()).await;
        let early = tokio::time::timeout(std::time::Duration::from_millis(50), &mut driver);
        assert!(early.await.is_err(), "ended with a reply owed");
        far.write_all(b":1\r\n").await.expect("reply");
        assert!(tokio::time::timeout(bound, driver).await.is_ok());
    }

    /// A driver dropped before it ended (its runtime shut down) fails the
    /// calls owed replies instead of leaving them to wait.
    #[test]
    fn a_dropped_driver_fails_the_calls_it_owed() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (mut connection, _far) = runtime.block_on(async {
            let (near, far) = tokio::io::duplex(1024);
            let (connection, driver) = Pipelined::new(near, 0);
            tokio::spawn(driver);
            (connection, far)
        });
        let a = get("a");
        let mut owed = connection.req_packed_command(&a);
        runtime.block_on(async { assert!(futures::poll!(owed.as_mut()).is_pending()) });
        drop(runtime);
        // Answered by the drop: ready at its next poll, not left waiting.
        let polled = futures::executor::block_on(async { futures::poll!(owed.as_mut()) });
        match polled {
            Poll::Ready(Err(err)) => assert!(crate::connection::is_broken(&err), "{err}"),
            other => panic!("the owed call was not failed: {other:?}"),
        }
    }
}

//! Witnessed votes to one node, sent together: one reading of the node's
//! data mark and clock per batch.
//!
//! Every vote that can grant a new key must read, after its grant, the
//! node's data mark (see `standing/`) and its clock (see `clock.rs`): its
//! *witness*. Sent one by one, that is more commands per vote for the node
//! to run and more replies for the client to read. The votes that a node's
//! client sends at about the same moment go out instead as one pipeline,
//! the votes' commands in the order they came and one witness at its end
//! (`GET` of the mark, then `TIME`, each where the client reads it):
//!
//! - Only votes sent while other calls are under way on the node's
//!   connection ([`Batches::busy`]) come here; a vote sent alone goes out
//!   at once, with its reading pipelined after it (`node/`).
//! - The first vote to find no batch gathering *leads*: it yields once,
//!   to the back of its worker's run queue (so that the other tasks ready
//!   to run add their votes; not until the worker runs out of tasks, which
//!   would leave the node idle while the client works, then the client
//!   idle while the node does), then takes every vote gathered so far and
//!   sends them, with the witness, on its connection. A vote that finds a
//!   batch gathering joins it and waits for its reply. A batch in flight
//!   does not stop the next one from gathering and leaving.
//! - A node runs a pipeline's commands in order, so the witness at its end
//!   ran after every grant in it: it is judged once (`judge`), and that
//!   verdict is each vote's, exactly as if each vote had read the mark and
//!   the clock in its own request. Nothing is read before a grant that it
//!   vouches for.
//! - Each vote gets its own replies: a server's error in reply to one
//!   vote's command is that vote's error, and the others are not touched.
//!   A connection's error is every vote's error.
//! - A leader that is dropped (its call timed out, or its caller went away)
//!   leaves its batch to a task of its own, which sends it and hands the
//!   other votes their replies; outside a runtime the other votes fail with
//!   an error that says so. No vote waits for a reply that cannot come.
//! - A batch of one acquisition (`SET NX GET`) reads the clock with
//!   `PEXPIRETIME` of its key instead: the key's absolute expiry, less the
//!   TTL, is the node's clock at the grant, one integer to read (and a
//!   refusal needs no reading).
//! - A release sent to the node waits until every batch gathered before it
//!   has gone out ([`Batches::sent`]): a lock's vote on this node may still
//!   be gathering while the other nodes' grants already won its round, and
//!   the release, sent straight on the connection, would otherwise reach
//!   the node first, find nothing, and leave the key the vote then set
//!   there until its TTL. Where the lock's winning round already had the
//!   node's answer (`Reached`), its vote has run there and the release goes
//!   out at once.
//!
//! The batch adds no round trip, and a lone vote does not wait for one: it
//! is not batched (as the connection's driver yields only where other
//! calls are under way, see `connection/`). Only connections to one
//! server batch; a cluster's votes read the clock each in its own request
//! (`node/`).
//!
//! Cancel safety: a vote's commands are sent once it has joined a batch,
//! whether or not its caller still waits.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Instant;

use futures::future::BoxFuture;
use redis::{Cmd, ErrorKind, Pipeline, RedisError, Value};
use tokio::sync::Notify;

use crate::clock::Reading;
use crate::landing::{Delivery, Landing};
use crate::tasks;
pub(crate) use crate::witness::{Asks, Judge, Judged, Shape, Witnessed, Witnesses};

/// Whether other calls are under way to the node (so that other votes may
/// join a batch that waits for them).
pub(crate) type Busy = Box<dyn Fn() -> bool + Send + Sync>;

/// Where a batch goes: a connection to the node.
pub(crate) trait Carrier: Clone + Send + 'static {
    /// Sends `pipeline` and reads its replies (every command's, errors
    /// included).
    fn carry(
        self,
        pipeline: Pipeline,
    ) -> impl Future<Output = Result<Value, RedisError>> + Send + 'static;
}

impl Carrier for crate::connection::server::Server {
    async fn carry(mut self, pipeline: Pipeline) -> Result<Value, RedisError> {
        pipeline.query_async(&mut self).await
    }
}

/// One node's batches of timed votes.
pub(crate) struct Batches {
    /// The batch gathering now, where its votes wait for their replies;
    /// `None` when none is.
    gathering: Mutex<Option<Arc<Flock>>>,
    /// Which batches have gone out (see [`Batches::sent`]).
    progress: Mutex<Progress>,
    /// Told when a batch's pipeline has been handed to the connection.
    sent: Notify,
    judge: Judge,
    busy: Busy,
    witnesses: Witnesses,
}

impl std::fmt::Debug for Batches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batches").finish_non_exhaustive()
    }
}

/// A vote's commands: its first, and those pipelined after it (an
/// acquisition's `SET` with the fencing counter's `INCR`, a reader's `ZADD`
/// with the commands that check it; none for most votes, and then nothing
/// allocated).
pub(crate) struct Commands(pub(crate) Cmd, pub(crate) Vec<Cmd>);

impl Commands {
    fn len(&self) -> usize {
        1 + self.1.len()
    }
}

/// A vote in a batch: its commands (its reply comes in the batch's
/// [`Landing`]).
struct Vote {
    commands: Commands,
    expiry: Option<Expiry>,
}

/// A batch's votes and their replies.
type Flock = Landing<Vote, Result<Landed, RedisError>>;

/// An acquisition's key and TTL: alone in its batch, the vote reads the
/// node's clock from the key's expiry (`PEXPIRETIME`) when its first
/// command (`SET NX GET`) answered nil (set).
#[derive(Debug, Clone)]
pub(crate) struct Expiry {
    pub(crate) key: Arc<[u8]>,
    pub(crate) ttl_ms: u64,
}

/// Room for the votes of a batch gathering: the number that a busy node's
/// batches hold at most, most of the time (12 on average with 64 tasks).
const GATHERING: usize = 16;

/// A vote's reply from its batch.
#[derive(Debug)]
pub(crate) struct Landed {
    /// The reply to its one command, or the array of its commands' replies.
    pub(crate) reply: Value,
    /// The verdict of the witness after it (`None`: nothing was read).
    pub(crate) judged: Option<Judged>,
    /// The clock reading in the witness (`None`: the node did not answer
    /// `TIME` with a time).
    pub(crate) reading: Option<Reading>,
}

impl Batches {
    /// A node's batches, each with the witness `witnesses` asks for, which
    /// `judge` judges; votes are batched while the node is `busy`.
    pub(crate) fn new(judge: Judge, busy: Busy, witnesses: Witnesses) -> Arc<Self> {
        Arc::new(Batches {
            gathering: Mutex::new(None),
            progress: Mutex::new(Progress::default()),
            sent: Notify::new(),
            judge,
            busy,
            witnesses,
        })
    }

    /// What a vote's witness reads now.
    pub(crate) fn asks(&self) -> Asks {
        (self.witnesses)()
    }

    /// Judges a witness of the node.
    pub(crate) fn judge(&self, witnessed: &Witnessed) -> Judged {
        (self.judge)(witnessed)
    }

    /// Whether other calls are under way to the node: a vote is batched
    /// only then.
    pub(crate) fn busy(&self) -> bool {
        (self.busy)()
    }

    /// The number of the last batch begun, if it or one before it has not
    /// gone out yet: what [`sent`](Self::sent) waits for.
    pub(crate) fn unsent(&self) -> Option<u64> {
        let progress = tasks::lock(&self.progress);
        (progress.sent_upto < progress.begun).then_some(progress.begun)
    }

    /// Returns once every batch up to number `last` (see
    /// [`unsent`](Self::unsent)) has gone out: its pipeline handed to the
    /// connection, so that a command sent on the connection after this
    /// lands on the node after its votes. A release waits for the batches
    /// begun before it (see `node/`): a lock's release must not overtake
    /// the vote that set its key on this node, which, batched, waits for
    /// its batch to gather while the other nodes' grants already won the
    /// round. The wait is a batch's gathering (the tasks ready to run when
    /// it began); batches begun later do not hold it.
    ///
    /// Cancel safety: cancel safe (it only waits).
    pub(crate) async fn sent(&self, last: u64) {
        tasks::wait_until(&self.sent, None, || {
            tasks::lock(&self.progress).sent_upto >= last
        })
        .await;
    }

    /// Sends `commands` (one vote: a server's error in reply to any of them
    /// is its error) in the next batch, which the first vote of the batch
    /// sends on its `carrier`; their replies, with the verdict of the clock
    /// reading after them (from the key's `expiry` where the vote is alone
    /// in its batch).
    ///
    /// Cancel safety: once this is first polled the commands are sent,
    /// whether or not it runs to the end.
    pub(crate) async fn send<C: Carrier>(
        self: &Arc<Self>,
        commands: Commands,
        expiry: Option<Expiry>,
        carrier: &C,
    ) -> Result<Landed, RedisError> {
        let (flock, place, leads) = {
            let mut gathering = tasks::lock(&self.gathering);
            // A new batch: numbered as it begins.
            let leads = (gathering.is_none()).then(|| tasks::lock(&self.progress).begin());
            let flock = gathering.get_or_insert_with(|| Landing::new(GATHERING));
            let place = flock.join(Vote { commands, expiry });
            (flock.clone(), place, leads)
        };
        if let Some(number) = leads {
            let mut gathering = Gathering {
                batches: self,
                carrier,
                number,
                gathered: false,
            };
            tasks::yield_to_queue().await;
            let (delivery, unsent) = gathering.gather();
            let flying = fly(self.clone(), carrier.clone(), delivery, unsent);
            let mut flight = Flight(Some(Box::pin(flying)));
            if let Some(flying) = flight.0.as_mut() {
                flying.await;
            }
            flight.0 = None;
        }
        flock.reply(place).await.unwrap_or_else(|| {
            Err(RedisError::from((
                ErrorKind::Io,
                "the batch carrying this vote was dropped before it landed: its leader's call \
                 went away outside a tokio runtime, or the runtime shut down",
            )))
        })
    }
}

/// A batch its leader gathers; dropped before it gathered, the batch flies
/// in a task of its own.
struct Gathering<'a, C: Carrier> {
    batches: &'a Arc<Batches>,
    carrier: &'a C,
    /// The batch's number (see [`Progress`]).
    number: u64,
    gathered: bool,
}

impl<C: Carrier> Gathering<'_, C> {
    /// The votes gathered: the batch, closed to new votes, and unsent
    /// until the [`Unsent`] that comes with it is dropped.
    fn gather(&mut self) -> (Delivery<Vote, Result<Landed, RedisError>>, Unsent) {
        self.gathered = true;
        let flock = tasks::lock(&self.batches.gathering).take();
        let flock = flock.unwrap_or_else(|| Landing::new(0));
        (
            Delivery::of(flock),
            Unsent(self.batches.clone(), self.number),
        )
    }
}

impl<C: Carrier> Drop for Gathering<'_, C> {
    fn drop(&mut self) {
        if !self.gathered {
            let (delivery, unsent) = self.gather();
            let flight = fly(self.batches.clone(), self.carrier.clone(), delivery, unsent);
            // Outside a runtime its delivery drops with it: each vote
            // fails, none waits.
            tasks::spawn(flight);
        }
    }
}

/// A batch on its way, driven by its leader; dropped before it landed, it
/// goes on in a task of its own.
struct Flight(Option<BoxFuture<'static, ()>>);

impl Drop for Flight {
    fn drop(&mut self) {
        if let Some(flying) = self.0.take() {
            // Outside a runtime its delivery drops with it: each vote
            // fails, none waits.
            tasks::spawn(flying);
        }
    }
}

/// Which of a node's batches have gone out. Batches are numbered from 1 as
/// they begin gathering; they go out in that order, except a dropped
/// leader's, which a task of its own sends, maybe after a later one.
#[derive(Debug, Default)]
struct Progress {
    /// The last batch's number.
    begun: u64,
    /// Every batch up to this number has gone out.
    sent_upto: u64,
    /// Batches past `sent_upto` that went out.
    ahead: BTreeSet<u64>,
}

impl Progress {
    /// A new batch's number.
    fn begin(&mut self) -> u64 {
        self.begun += 1;
        self.begun
    }

    /// Batch `number` went out.
    fn sent(&mut self, number: u64) {
        if number != self.sent_upto + 1 {
            self.ahead.insert(number);
            return;
        }
        self.sent_upto = number;
        while self.ahead.remove(&(self.sent_upto + 1)) {
            self.sent_upto += 1;
        }
    }
}

/// A gathered batch (its number) whose pipeline has not been handed to the
/// connection yet; dropped once it has (or once it never will be), it
/// tells [`Batches::sent`].
struct Unsent(Arc<Batches>, u64);

impl Drop for Unsent {
    fn drop(&mut self) {
        tasks::lock(&self.0.progress).sent(self.1);
        self.0.sent.notify_waiters();
    }
}

/// Sends the batch (the votes that joined `delivery`'s landing) on
/// `carrier` with the witness at its end, and hands each vote its replies
/// there; `unsent` is dropped once the pipeline is handed to the
/// connection (the first poll of its request).
async fn fly<C: Carrier>(
    batches: Arc<Batches>,
    carrier: C,
    delivery: Delivery<Vote, Result<Landed, RedisError>>,
    unsent: Unsent,
) {
    let mut votes = delivery.take_votes();
    if votes.is_empty() {
        return;
    }
    let asks = batches.asks();
    let commands = votes.iter().map(|vote| vote.commands.len()).sum::<usize>();
    let shape = asks.shape();
    let mut pipeline = Pipeline::with_capacity(commands + shape.len());
    pipeline.ignore_errors();
    let expiry = match votes.as_mut_slice() {
        [vote] => vote.expiry.take(),
        _ => None,
    };
    let mut waiting = Vec::with_capacity(votes.len());
    for vote in votes {
        waiting.push(vote.commands.len());
        let Commands(first, then) = vote.commands;
        pipeline.add_command(first);
        for then in then {
            pipeline.add_command(then);
        }
    }
    asks.add_to(&mut pipeline, || match &expiry {
        Some(expiry) => {
            let mut cmd = redis::cmd("PEXPIRETIME");
            cmd.arg(&*expiry.key);
            cmd
        }
        None => redis::cmd("TIME"),
    });
    let sent = Instant::now();
    // The first poll hands the pipeline to the connection: outside the
    // task's cooperative budget (tokio's), which, spent, would make that
    // poll return before the pipeline is queued, and a release that waits
    // for this batch could then be queued before it.
    let mut carried = std::pin::pin!(tokio::task::unconstrained(carrier.carry(pipeline)));
    let first = futures::poll!(carried.as_mut());
    drop(unsent);
    let replies = match first {
        Poll::Ready(replies) => replies,
        Poll::Pending => carried.await,
    };
    let received = Instant::now();
    let read = Read {
        shape,
        expiry,
        sent,
        received,
    };
    land(&batches.judge, &waiting, delivery, replies, read);
}

/// How a batch read the node's witness (`shape`): the clock by
/// `PEXPIRETIME` of a lone acquisition's key (`expiry`) or `TIME`, sent
/// and answered when.
struct Read {
    shape: Shape,
    expiry: Option<Expiry>,
    sent: Instant,
    received: Instant,
}

impl Read {
    /// The reading in `reply`, the last of the batch's `replies` (the
    /// others).
    fn reading(&self, reply: Option<Value>, replies: &[Value]) -> Option<Reading> {
        // `SET NX GET` answers nil when it set the key.
        let set_ttl_ms = (self.expiry.as_ref())
            .filter(|_| replies.first() == Some(&Value::Nil))
            .map(|expiry| expiry.ttl_ms);
        Reading::after_grant(&reply?, set_ttl_ms, self.sent, self.received)
    }
}

/// Hands each of the votes (`waiting`: how many commands each sent, in
/// their places' order) its share of `replies`, and the verdict of the
/// clock reading at their end.
fn land(
    judge: &Judge,
    waiting: &[usize],
    delivery: Delivery<Vote, Result<Landed, RedisError>>,
    replies: Result<Value, RedisError>,
    read: Read,
) {
    let commands = waiting.iter().sum::<usize>();
    let mut replies = match replies {
        Ok(Value::Array(replies)) if replies.len() == commands + read.shape.len() => replies,
        Ok(_) => {
            let err = RedisError::from((ErrorKind::Parse, "a batch's replies do not match it"));
            return delivery.deliver(waiting.iter().map(|_| Err(err.clone())));
        }
        Err(err) => return delivery.deliver(waiting.iter().map(|_| Err(err.clone()))),
    };
    let (clock, mark) = read.shape.take(&mut replies);
    let witnessed = Witnessed {
        reading: read.reading(clock, &replies),
        mark,
    };
    let judged = witnessed.any().then(|| judge(&witnessed));
    let reading = witnessed.reading;
    let mut replies = replies.into_iter();
    // A vote whose caller went away leaves its reply unread.
    delivery.deliver(waiting.iter().map(|&count| {
        own(&mut replies, count).map(|reply| Landed {
            reply,
            judged: judged.clone(),
            reading,
        })
    }));
}

/// One vote's reply, from the next `count` of `replies`: the first server
/// error among them, else its one command's reply, or the array of its
/// commands' replies.
fn own(replies: &mut impl Iterator<Item = Value>, count: usize) -> Result<Value, RedisError> {
    let reply = match count {
        1 => replies.next().unwrap_or(Value::Nil),
        _ => Value::Array(replies.take(count).collect()),
    };
    let refused = match &reply {
        Value::ServerError(err) => Some(err),
        Value::Array(items) if count > 1 => items.iter().find_map(|item| match item {
            Value::ServerError(err) => Some(err),
            _ => None,
        }),
        _ => None,
    };
    match refused {
        Some(err) => Err(RedisError::from(err.clone())),
        None => Ok(reply),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use futures::FutureExt;
    use tokio::sync::Notify;

    use super::*;

    /// A carrier that answers each command with its first argument (as an
    /// integer), `-WRONGTYPE` for an argument `bad`, and `TIME` with a
    /// time; or fails every batch. It keeps each batch's commands, and may
    /// hold a batch until `release` is notified.
    #[derive(Clone, Default)]
    struct Mock {
        batches: Arc<Mutex<Vec<Vec<String>>>>,
        broken: bool,
        release: Option<Arc<Notify>>,
    }

    impl Carrier for Mock {
        async fn carry(self, pipeline: Pipeline) -> Result<Value, RedisError> {
            let commands: Vec<String> = (pipeline.cmd_iter())
                .map(|cmd| {
                    let args: Vec<String> = (cmd.args_iter())
                        .map(|arg| match arg {
                            redis::Arg::Simple(arg) => String::from_utf8_lossy(arg).into_owned(),
                            _ => "0".to_owned(),
                        })
                        .collect();
                    args.join(" ")
                })
                .collect();
            tasks::lock(&self.batches).push(commands.clone());
            if let Some(release) = &self.release {
                release.notified().await;
            }
            if self.broken {
                return Err(RedisError::from((ErrorKind::Io, "connection reset")));
            }
            let replies = commands.iter().map(|command| match command.as_str() {
                "TIME" => Value::Array(vec![
                    Value::BulkString(b"1700000000".to_vec()),
                    Value::BulkString(b"5".to_vec()),
                ]),
                "GET bad" => {
                    redis::parse_redis_value(b"-WRONGTYPE not a string\r\n").unwrap_or(Value::Nil)
                }
                // Set: nil; taken: the holder's token.
                "SET free" => Value::Nil,
                "SET taken" => Value::BulkString(b"theirs".to_vec()),
                // Set at 1,700,000,000,000 ms with a TTL of 10 s.
                command if command.starts_with("PEXPIRETIME") => Value::Int(1_700_000_010_000),
                "GETRANGE mark 0 15" => Value::BulkString(b"m1".to_vec()),
                "GETRANGE other-mark 0 15" => Value::BulkString(b"m2".to_vec()),
                command => Value::Int(command[4..].parse().unwrap_or(-1)),
            });
            Ok(Value::Array(replies.collect()))
        }
    }

    fn get(arg: &str) -> Commands {
        let mut cmd = redis::cmd("GET");
        cmd.arg(arg);
        Commands(cmd, Vec::new())
    }

    /// Batches that read the clock, whose judge counts its calls and passes
    /// every witness.
    fn batches(judged: &Arc<AtomicUsize>) -> Arc<Batches> {
        witnessing(judged, None)
    }

    /// [`batches`] that also read the data mark at `mark`; the judge passes
    /// a witness whose mark is `m1`.
    fn witnessing(judged: &Arc<AtomicUsize>, mark: Option<&str>) -> Arc<Batches> {
        let judged = judged.clone();
        let asks = Asks {
            mark: mark.map(|key| key.as_bytes().into()),
            clock: true,
        };
        Batches::new(
            Box::new(move |witnessed| {
                if let Some(reading) = witnessed.reading {
                    assert_eq!(
                        reading.node_us / 1000,
                        1_700_000_000_000,
                        "the node's clock"
                    );
                }
                judged.fetch_add(1, Ordering::SeqCst);
                match &witnessed.mark {
                    Some(Value::BulkString(mark)) if mark != b"m1" => {
                        Err(Arc::new(crate::answer::NotCounted::Unchecked {
                            reason: "another mark".into(),
                        }))
                    }
                    _ => Ok(()),
                }
            }),
            Box::new(|| true),
            Box::new(move || asks.clone()),
        )
    }

    #[tokio::test]
    async fn votes_sent_at_once_go_in_one_batch_with_one_reading_at_its_end() {
        let judged = Arc::new(AtomicUsize::new(0));
        let batches = batches(&judged);
        let mock = Mock::default();
        let votes = (1..=5).map(|n| batches.send(get(&n.to_string()), None, &mock));
        let landed = futures::future::join_all(votes).await;
        for (n, landed) in (1..=5).zip(landed) {
            let landed = landed.expect("each vote its reply");
            assert_eq!(landed.reply, Value::Int(n), "vote {n} got another's reply");
            assert!(matches!(landed.judged, Some(Ok(()))));
        }
        let sent = tasks::lock(&mock.batches).clone();
        assert_eq!(
            sent,
            vec![vec!["GET 1", "GET 2", "GET 3", "GET 4", "GET 5", "TIME"]]
        );
        assert_eq!(judged.load(Ordering::SeqCst), 1, "one reading, judged once");
    }

    /// With the data mark read, a batch ends with `GET` of it before the
    /// clock's reading; both are judged together, once, as each vote's.
    #[tokio::test]
    async fn a_batch_reads_the_data_mark_after_its_grants_and_before_the_clock() {
        let judged = Arc::new(AtomicUsize::new(0));
        for (mark, counted) in [("mark", true), ("other-mark", false)] {
            let batches = witnessing(&judged, Some(mark));
            let mock = Mock::default();
            let (commands, expiry) = set("free");
            let votes = [
                batches.send(get("1"), None, &mock),
                batches.send(commands, expiry, &mock),
            ];
            for landed in futures::future::join_all(votes).await {
                let landed = landed.expect("a reply");
                assert_eq!(matches!(landed.judged, Some(Ok(()))), counted, "{mark}");
            }
            let sent = tasks::lock(&mock.batches).clone();
            let get_mark = format!("GETRANGE {mark} 0 15");
            assert_eq!(sent, vec![vec!["GET 1", "SET free", &get_mark, "TIME"]]);
        }
        assert_eq!(judged.load(Ordering::SeqCst), 2, "one witness per batch");
    }

    /// A batch's leader yields to the tasks ready to run, not until the
    /// worker has nothing left to run: a task that deferred itself to then
    /// (as tokio's `yield_now` does) finds the batch gone out already. With
    /// the leader deferred too, each batch waited for every such task and
    /// for the I/O they bring in, and the node idled meanwhile.
    #[tokio::test(flavor = "current_thread")]
    async fn a_batch_goes_out_before_the_worker_runs_out_of_tasks() {
        let judged = Arc::new(AtomicUsize::new(0));
        let batches = batches(&judged);
        let mock = Mock::default();
        let carried = mock.batches.clone();
        // The vote leads its batch; then the other task defers itself.
        let vote = tokio::spawn(async move { batches.send(get("1"), None, &mock).await });
        let deferred = tokio::spawn(async move {
            tokio::task::yield_now().await;
            tasks::lock(&carried).len()
        });
        assert_eq!(vote.await.ok().map(|landed| landed.is_ok()), Some(true));
        assert_eq!(
            deferred.await.ok(),
            Some(1),
            "the batch went out before the worker ran out of tasks"
        );
    }

    #[test]
    fn batches_out_of_order_count_once_those_before_them_went_out() {
        let mut progress = Progress::default();
        let (one, two, three) = (progress.begin(), progress.begin(), progress.begin());
        assert_eq!((one, two, three), (1, 2, 3));
        progress.sent(two);
        assert_eq!(progress.sent_upto, 0, "batch 1 has not gone out");
        progress.sent(one);
        assert_eq!(progress.sent_upto, 2);
        progress.sent(three);
        assert_eq!(progress.sent_upto, 3);
        assert!(progress.ahead.is_empty());
    }

    #[tokio::test]
    async fn a_wait_for_the_batches_to_go_out_ends_once_they_went_out() {
        let judged = Arc::new(AtomicUsize::new(0));
        let batches = batches(&judged);
        let release = Arc::new(Notify::new());
        let mock = Mock {
            release: Some(release.clone()),
            ..Mock::default()
        };
        assert_eq!(batches.unsent(), None, "nothing gathering");
        let mut vote = std::pin::pin!(batches.send(get("1"), None, &mock));
        // The vote joins a batch, whose leader yields for others to join.
        assert!(futures::poll!(vote.as_mut()).is_pending());
        assert_eq!(batches.unsent(), Some(1), "a batch gathering");
        let mut sent = std::pin::pin!(batches.sent(1));
        assert!(futures::poll!(sent.as_mut()).is_pending());
        // The leader gathers and hands the pipeline over; its reply waits.
        assert!(futures::poll!(vote.as_mut()).is_pending());
        assert_eq!(tasks::lock(&mock.batches).len(), 1, "the batch went out");
        assert!(futures::poll!(sent.as_mut()).is_ready());
        assert_eq!(batches.unsent(), None);
        release.notify_one();
        assert_eq!(vote.await.expect("a reply").reply, Value::Int(1));
    }

    /// A vote of two commands, `GET first` and `GET then`.
    fn two(first: &str, then: &str) -> Commands {
        Commands(get(first).0, vec![get(then).0])
    }

    fn set(key: &str) -> (Commands, Option<Expiry>) {
        let mut cmd = redis::cmd("SET");
        cmd.arg(key);
        let expiry = Expiry {
            key: key.as_bytes().into(),
            ttl_ms: 10_000,
        };
        (Commands(cmd, Vec::new()), Some(expiry))
    }

    #[tokio::test]
    async fn a_lone_acquisition_reads_the_clock_from_its_keys_expiry() {
        let judged = Arc::new(AtomicUsize::new(0));
        let batches = batches(&judged);
        let mock = Mock::default();
        let (commands, expiry) = set("free");
        let landed = batches
            .send(commands, expiry, &mock)
            .await
            .expect("a reply");
        assert_eq!(landed.reply, Value::Nil);
        assert!(matches!(landed.judged, Some(Ok(()))), "{:?}", landed.judged);
        // Refused: another holder's expiry says nothing of the node's clock.
        let (commands, expiry) = set("taken");
        let landed = batches
            .send(commands, expiry, &mock)
            .await
            .expect("a reply");
        assert!(landed.judged.is_none(), "{:?}", landed.judged);
        let sent = tasks::lock(&mock.batches).clone();
        assert_eq!(
            sent,
            vec![
                vec!["SET free", "PEXPIRETIME free"],
                vec!["SET taken", "PEXPIRETIME taken"]
            ]
        );
        assert_eq!(judged.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn acquisitions_in_a_batch_together_read_the_clock_with_time() {
        let batches = batches(&Arc::default());
        let mock = Mock::default();
        let votes = ["free", "taken"].map(|key| {
            let (commands, expiry) = set(key);
            batches.send(commands, expiry, &mock)
        });
        for landed in futures::future::join_all(votes).await {
            let landed = landed.expect("a reply");
            assert!(matches!(landed.judged, Some(Ok(()))), "{:?}", landed.judged);
        }
        let sent = tasks::lock(&mock.batches).clone();
        assert_eq!(sent, vec![vec!["SET free", "SET taken", "TIME"]]);
    }

    #[tokio::test]
    async fn a_refused_command_is_its_own_votes_error_only() {
        let batches = batches(&Arc::default());
        let mock = Mock::default();
        let votes = [get("1"), two("2", "bad"), get("3")]
            .map(|commands| batches.send(commands, None, &mock));
        let [one, two, three] = futures::future::join_all(votes)
            .await
            .try_into()
            .unwrap_or_else(|_| panic!("three replies"));
        assert_eq!(one.map(|landed| landed.reply).ok(), Some(Value::Int(1)));
        let err = two.expect_err("the refused vote fails");
        assert_eq!(err.code(), Some("WRONGTYPE"), "{err}");
        assert_eq!(three.map(|landed| landed.reply).ok(), Some(Value::Int(3)));
    }

    #[tokio::test]
    async fn a_vote_of_several_commands_gets_their_replies_in_an_array() {
        let batches = batches(&Arc::default());
        let mock = Mock::default();
        let landed = batches
            .send(two("7", "8"), None, &mock)
            .await
            .expect("a reply");
        assert_eq!(
            landed.reply,
            Value::Array(vec![Value::Int(7), Value::Int(8)])
        );
    }

    #[tokio::test]
    async fn a_broken_connection_is_every_votes_error() {
        let batches = batches(&Arc::default());
        let mock = Mock {
            broken: true,
            ..Mock::default()
        };
        let votes = (1..=3).map(|n| batches.send(get(&n.to_string()), None, &mock));
        for landed in futures::future::join_all(votes).await {
            let err = landed.expect_err("every vote fails");
            assert_eq!(err.kind(), ErrorKind::Io);
        }
    }

    /// A mock that holds each batch until `release` is notified.
    fn held() -> (Mock, Arc<Notify>) {
        let release = Arc::new(Notify::new());
        let mock = Mock {
            release: Some(release.clone()),
            ..Mock::default()
        };
        (mock, release)
    }

    /// A vote of `GET arg` in a task of its own.
    fn spawned(
        batches: &Arc<Batches>,
        mock: &Mock,
        arg: &'static str,
    ) -> tokio::task::JoinHandle<Result<Landed, RedisError>> {
        let (batches, mock) = (batches.clone(), mock.clone());
        tokio::spawn(async move { batches.send(get(arg), None, &mock).await })
    }

    /// The reply `follower` got, within a bound that catches a hang.
    async fn reply_of(follower: tokio::task::JoinHandle<Result<Landed, RedisError>>) -> Value {
        let landed = tokio::time::timeout(Duration::from_secs(10), follower)
            .await
            .expect("the follower's reply came")
            .expect("the follower's task ran");
        landed.expect("the follower's vote landed").reply
    }

    #[tokio::test]
    async fn a_dropped_leader_leaves_its_batch_to_land_for_the_others() {
        let batches = batches(&Arc::default());
        let (mock, release) = held();
        // The leader gathers (yields); a second vote joins its batch.
        let mut leader = Box::pin(batches.send(get("1"), None, &mock));
        assert!((&mut leader).now_or_never().is_none());
        let follower = spawned(&batches, &mock, "2");
        tokio::task::yield_now().await;
        // Dropped while gathering: the batch goes on without it.
        drop(leader);
        release.notify_one();
        assert_eq!(reply_of(follower).await, Value::Int(2));
        let sent = tasks::lock(&mock.batches).clone();
        assert_eq!(sent, vec![vec!["GET 1", "GET 2", "TIME"]]);
    }

    #[tokio::test]
    async fn a_leader_dropped_in_flight_still_hands_the_others_their_replies() {
        let batches = batches(&Arc::default());
        let (mock, release) = held();
        let leader = spawned(&batches, &mock, "1");
        let follower = spawned(&batches, &mock, "2");
        // Wait until the batch is in flight, then drop its leader.
        while tasks::lock(&mock.batches).is_empty() {
            tokio::task::yield_now().await;
        }
        leader.abort();
        release.notify_one();
        assert_eq!(reply_of(follower).await, Value::Int(2));
        let sent = tasks::lock(&mock.batches).clone();
        assert_eq!(sent, vec![vec!["GET 1", "GET 2", "TIME"]]);
    }

    #[test]
    fn outside_a_runtime_a_dropped_leaders_followers_fail_instead_of_waiting() {
        let batches = batches(&Arc::default());
        let mock = Mock::default();
        let mut leader = Box::pin(batches.send(get("1"), None, &mock));
        let mut follower = Box::pin(batches.send(get("2"), None, &mock));
        assert!((&mut leader).now_or_never().is_none());
        assert!((&mut follower).now_or_never().is_none());
        drop(leader);
        let landed = futures::executor::block_on(follower);
        let err = landed.expect_err("the follower fails");
        assert!(err.to_string().contains("outside a tokio runtime"), "{err}");
    }
}

//! A call's commands on their way to the node: alone, pipelined with the
//! node's witness (its data mark and clock), or batched with its other
//! witnessed votes (`batch.rs`); a reader's round without a script; a
//! fenced grant's seeding and a refused writer's give-back.

use std::sync::Arc;

use redis::{Cmd, ErrorKind, RedisError, Script, ServerErrorKind, Value};

use super::reply::{Exchanged, Witness};
use super::wire::evalsha;
use crate::batch::{Asks, Batches, Commands, Expiry, Landed, Shape, Witnessed};
use crate::clock::Reading;
use crate::connection::Connection;
use crate::read_round::{self, Outcome};
use crate::request::{LockId, RwKeys};
use crate::scripts;

/// A reader's round, as [`Call::Read`] asks it.
#[derive(Clone, Copy)]
pub(super) struct ReadCall<'a> {
    pub(super) token: &'a str,
    pub(super) keys: &'a RwKeys,
    pub(super) ttl_ms: u64,
    /// The script decides, wherever the node is: not the first round of
    /// its call (a reader that waits behind a writer retries by the
    /// script, which leaves nothing where it is refused), or one that
    /// prunes.
    pub(super) scripted: bool,
    pub(super) prune: bool,
}

/// A reader's round without a script (see `read_round.rs`) on a single
/// server, its entry ending at `ends_ms`: the answer (`1` granted, `0`
/// refused) with the node's clock read after it, or `None` where the aim
/// missed. A refused or missed round's entry is taken back (`ZREM`) first;
/// a server's error in reply to any of its commands is the error, once the
/// entry is taken back.
pub(super) async fn read_unscripted(
    connection: &mut Connection,
    batches: &Arc<Batches>,
    read: &ReadCall<'_>,
    ends_ms: i64,
) -> Result<Option<Exchanged>, RedisError> {
    let commands = read_round::commands(read.keys, read.token, ends_ms, read.ttl_ms);
    let landed = match &*connection {
        Connection::One(one) if batches.busy() => batches.send(commands, None, one).await,
        _ => read_alone(connection, commands, batches).await,
    };
    let landed = match landed {
        Ok(landed) => landed,
        Err(err) => {
            // Best effort: where the connection broke, the round's cleanup
            // takes the entry back.
            let _ = run(connection, &read_round::undo(read.keys, read.token), None).await;
            return Err(err);
        }
    };
    let outcome = read_round::verdict(&landed.reply, landed.reading.as_ref(), ends_ms, read.ttl_ms);
    if outcome != Some(Outcome::Granted) {
        run(connection, &read_round::undo(read.keys, read.token), None).await?;
    }
    let witness = landed.judged.map_or(Witness::Unread, Witness::Judged);
    let answer = |granted: bool| Exchanged {
        reply: Value::Int(i64::from(granted)),
        legacy: false,
        witness,
    };
    match outcome {
        Some(Outcome::Granted) => Ok(Some(answer(true))),
        Some(Outcome::Refused) => Ok(Some(answer(false))),
        Some(Outcome::Missed) => Ok(None),
        None => Err(RedisError::from((
            ErrorKind::Parse,
            "a reader's round had replies its commands cannot give",
        ))),
    }
}

/// [`read_unscripted`]'s `commands` in a request of their own, with the
/// witness that `batches` asks for pipelined after them: their replies,
/// with the witness judged and its reading.
pub(super) async fn read_alone(
    connection: &mut Connection,
    commands: Commands,
    batches: &Batches,
) -> Result<Landed, RedisError> {
    let asks = asks_on(batches, connection);
    let shape = asks.shape();
    let Commands(first, then) = commands;
    let mut pipeline = redis::Pipeline::with_capacity(1 + then.len() + shape.len());
    pipeline.ignore_errors().add_command(first);
    for then in then {
        pipeline.add_command(then);
    }
    asks.add_to(&mut pipeline, || redis::cmd("TIME"));
    drop(asks);
    let sent = std::time::Instant::now();
    let reply: Value = pipeline.query_async(connection).await?;
    let received = std::time::Instant::now();
    let Value::Array(mut items) = reply else {
        return Err(RedisError::from((
            ErrorKind::Parse,
            "a pipeline's replies missing",
        )));
    };
    let (time, mark) = shape.take(&mut items);
    if let Some(Value::ServerError(err)) =
        (items.iter()).find(|item| matches!(item, Value::ServerError(_)))
    {
        return Err(RedisError::from(err.clone()));
    }
    let witnessed = Witnessed {
        reading: time.and_then(|time| Reading::from_reply(&time, sent, received)),
        mark,
    };
    Ok(Landed {
        reply: Value::Array(items),
        judged: witnessed.any().then(|| batches.judge(&witnessed)),
        reading: witnessed.reading,
    })
}

/// What a vote's witness reads on `connection` now: as `batches` asks, but
/// not the data mark on a cluster (its keys live on several primaries).
pub(super) fn asks_on(batches: &Batches, connection: &Connection) -> Asks {
    let mut asks = batches.asks();
    if !matches!(connection, Connection::One(_)) {
        asks.mark = None;
    }
    asks
}

/// Runs `cmd`; when it runs `script` (by `EVALSHA`) and the node does not
/// know it (`NOSCRIPT`), loads it and runs `cmd` again.
pub(super) async fn run(
    connection: &mut Connection,
    cmd: &Cmd,
    script: Option<&Script>,
) -> Result<Value, RedisError> {
    match (cmd.query_async(connection).await, script) {
        (Err(err), Some(script)) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            script.prepare_invoke().load_async(connection).await?;
            cmd.query_async(connection).await
        }
        (reply, _) => reply,
    }
}

/// `SET key token NX GET PX ttl_ms` (`with_get`; else `SET NX PX`), and with
/// `counter_key` the counter's `INCR` pipelined after it. Unlike a bare `SET
/// NX`, `SET NX GET` reports a key of another type under the lock name
/// (`WRONGTYPE`) instead of passing it for another holder; servers older
/// than Redis 7.0 refuse `NX` with `GET`, and for them the node uses `SET
/// NX PX` from then on.
pub(super) async fn send_set_nx(
    connection: &mut Connection,
    call: &AcquireCall<'_>,
    with_get: bool,
) -> Result<Exchanged, RedisError> {
    let (set, counter) = acquire_commands(call, with_get);
    match (call.witnessed, &*connection) {
        (Some(batches), Connection::One(one)) if batches.busy() => {
            let commands = Commands(set, counter.into_iter().collect());
            // `SET NX GET` answers nil when it set the key.
            let expiry = with_get.then(|| Expiry {
                key: call.key.clone(),
                ttl_ms: call.ttl_ms,
            });
            Ok(Exchanged::landed(
                batches.send(commands, expiry, one).await?,
            ))
        }
        (witnessed, _) => {
            let asks = witnessed.map_or_else(Asks::default, |batches| asks_on(batches, connection));
            let shape = asks.shape();
            let request =
                acquire_request(set, counter, &asks, || clock_reading(call.key, with_get));
            drop(asks);
            let sent = std::time::Instant::now();
            let reply = request.query(connection).await?;
            match shape.any() {
                true => {
                    let received = std::time::Instant::now();
                    witnessed_reply(reply, call, shape, sent, received)
                }
                false => Ok(Exchanged::plain(reply, false)),
            }
        }
    }
}

/// What [`send_set_nx`] asks: the `SET`, and the counter's `INCR` where fencing
/// is on, or a writer's first round's `EXISTS` of the readers' set and the
/// intent.
pub(super) fn acquire_commands(call: &AcquireCall<'_>, with_get: bool) -> (Cmd, Option<Cmd>) {
    let AcquireCall {
        lock,
        key,
        ttl_ms,
        counter_key,
        check,
        ..
    } = *call;
    let mut set = Cmd::with_capacity(7, 16 + key.len() + lock.token.len());
    set.arg("SET").arg(&**key).arg(&*lock.token).arg("NX");
    if with_get {
        set.arg("GET");
    }
    set.arg("PX").arg(ttl_ms);
    let counter = counter_key.map(|counter_key| {
        let mut incr = Cmd::with_capacity(2, 4 + counter_key.len());
        incr.arg("INCR").arg(counter_key);
        incr
    });
    let exists = check.map(|keys| {
        let mut exists = Cmd::with_capacity(3, 8 + keys.read.len() + keys.intent.len());
        exists.arg("EXISTS").arg(&*keys.read).arg(&*keys.intent);
        exists
    });
    (set, counter.or(exists))
}

/// What [`send_set_nx`] sends where it does not batch: `set`, with
/// `counter` and the witness `asks` (its clock reading by `clock`)
/// pipelined after it where there are.
pub(super) fn acquire_request(
    set: Cmd,
    counter: Option<Cmd>,
    asks: &Asks,
    clock: impl FnOnce() -> Cmd,
) -> Sent {
    if counter.is_none() && !asks.any() {
        return Sent::One(set);
    }
    let mut pipeline = redis::Pipeline::with_capacity(2 + asks.shape().len());
    pipeline.add_command(set);
    if let Some(counter) = counter {
        pipeline.add_command(counter);
    }
    if asks.any() {
        // Errors come back as replies, read by [`witnessed_reply`] (a
        // refused `SET` keeps its own kind).
        pipeline.ignore_errors();
        asks.add_to(&mut pipeline, clock);
    }
    Sent::Pipelined(pipeline)
}

/// The command that reads the node's clock after an unbatched acquisition
/// of `lock`: with `SET NX GET` (Redis 7.0 and later), the key's absolute
/// expiry (`PEXPIRETIME`, one integer), which tells the node's clock at the
/// grant plus the TTL; before 7.0, `TIME`.
pub(super) fn clock_reading(key: &[u8], with_get: bool) -> Cmd {
    if with_get {
        let mut cmd = redis::cmd("PEXPIRETIME");
        cmd.arg(key);
        cmd
    } else {
        redis::cmd("TIME")
    }
}

/// A witnessed acquisition's reply (see [`acquire_request`]): the `SET`'s
/// (with the counter's), and the witness (of `shape`) read after the grant:
/// the node's mark and its clock at the grant. A refused `SET` (a replica's
/// `READONLY`, `SET NX GET` before 7.0) is the call's error, as the node
/// said it; a refused reading only leaves it unread, and a refusal needs
/// none.
pub(super) fn witnessed_reply(
    reply: Value,
    call: &AcquireCall<'_>,
    shape: Shape,
    sent: std::time::Instant,
    received: std::time::Instant,
) -> Result<Exchanged, RedisError> {
    let unexpected = || RedisError::from((ErrorKind::Parse, "a pipelined witness missing"));
    let Value::Array(mut items) = reply else {
        return Err(unexpected());
    };
    if items.len() < 1 + shape.len() {
        return Err(unexpected());
    }
    let (time, mark) = shape.take(&mut items);
    if let Some(Value::ServerError(err)) =
        (items.iter()).find(|item| matches!(item, Value::ServerError(_)))
    {
        return Err(RedisError::from(err.clone()));
    }
    // `SET NX GET` answers nil when it set the key.
    let set_it = matches!(items.first(), Some(Value::Nil));
    let second = call.counter_key.is_some() || call.check.is_some();
    let reply = match (second, items.pop()) {
        (false, Some(reply)) if items.is_empty() => reply,
        (true, Some(second)) => {
            items.push(second);
            Value::Array(items)
        }
        _ => return Err(unexpected()),
    };
    let reading = time.and_then(|time| {
        Reading::after_grant(&time, set_it.then_some(call.ttl_ms), sent, received)
    });
    let witness = match call.witnessed {
        Some(batches) => Witness::judged(batches, &Witnessed { reading, mark }),
        None => Witness::Unread,
    };
    Ok(Exchanged {
        reply,
        legacy: false,
        witness,
    })
}

/// What a [`Call::Acquire`] sends.
#[derive(Clone, Copy)]
pub(super) struct AcquireCall<'a> {
    pub(super) lock: &'a LockId,
    /// The key `SET` sets: the lock's, or a writer's.
    pub(super) key: &'a Arc<[u8]>,
    pub(super) ttl_ms: u64,
    pub(super) counter_key: Option<&'a [u8]>,
    /// A writer's first round: the keys whose existence refuses it.
    pub(super) check: Option<&'a RwKeys>,
    /// With the node's witness read after it (see `batch.rs`): batched
    /// with the node's other witnessed votes while it is busy, except on a
    /// cluster; else in its own request.
    pub(super) witnessed: Option<&'a Arc<Batches>>,
}

/// [`run`], with the node's witness read after `cmd` (in a batch while
/// the node is busy, see `batch.rs`; else, and on a cluster, in its own
/// request): the reply, with the witness. A server's error in reply to
/// `cmd` is the error.
pub(super) async fn run_witnessed(
    connection: &mut Connection,
    cmd: &Cmd,
    script: Option<&Script>,
    batches: &Arc<Batches>,
) -> Result<Exchanged, RedisError> {
    let mut loaded = false;
    loop {
        let landed = match &*connection {
            Connection::One(one) if batches.busy() => {
                batches
                    .send(Commands(cmd.clone(), Vec::new()), None, one)
                    .await
            }
            _ => return run_witnessed_alone(connection, cmd, script, batches).await,
        };
        match (landed, script) {
            (Err(err), Some(script))
                if !loaded && err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
            {
                script.prepare_invoke().load_async(connection).await?;
                loaded = true;
            }
            (landed, _) => return landed.map(Exchanged::landed),
        }
    }
}

/// [`run_witnessed`] in a request of its own: the witness pipelined after
/// `cmd`.
pub(super) async fn run_witnessed_alone(
    connection: &mut Connection,
    cmd: &Cmd,
    script: Option<&Script>,
    batches: &Batches,
) -> Result<Exchanged, RedisError> {
    let asks = asks_on(batches, connection);
    let shape = asks.shape();
    let mut pipeline = redis::Pipeline::with_capacity(1 + shape.len());
    pipeline.ignore_errors().add_command(cmd.clone());
    asks.add_to(&mut pipeline, || redis::cmd("TIME"));
    drop(asks);
    let mut loaded = false;
    loop {
        let sent = std::time::Instant::now();
        let reply: Value = pipeline.query_async(connection).await?;
        let received = std::time::Instant::now();
        let (reply, time, mark) = match reply {
            Value::Array(mut items) if items.len() == 1 + shape.len() => {
                let (time, mark) = shape.take(&mut items);
                (items.pop(), time, mark)
            }
            _ => (None, None, None),
        };
        match (reply, script) {
            (Some(Value::ServerError(err)), Some(script))
                if !loaded && err.kind() == Some(ServerErrorKind::NoScript) =>
            {
                script.prepare_invoke().load_async(connection).await?;
                loaded = true;
            }
            (Some(Value::ServerError(err)), _) => return Err(RedisError::from(err)),
            (Some(reply), _) => {
                let reading = time.and_then(|time| Reading::from_reply(&time, sent, received));
                return Ok(Exchanged {
                    reply,
                    legacy: false,
                    witness: Witness::judged(batches, &Witnessed { reading, mark }),
                });
            }
            (None, _) => {
                return Err(RedisError::from((
                    ErrorKind::Parse,
                    "a pipelined witness without its reply",
                )));
            }
        }
    }
}

/// A command, or commands pipelined in one request.
pub(super) enum Sent {
    One(Cmd),
    Pipelined(redis::Pipeline),
}

impl Sent {
    pub(super) async fn query(&self, connection: &mut Connection) -> Result<Value, RedisError> {
        match self {
            Sent::One(cmd) => cmd.query_async(connection).await,
            Sent::Pipelined(pipeline) => pipeline.query_async(connection).await,
        }
    }
}

/// A writer's first round (see `Redlock::write`), once its `SET` and
/// `EXISTS` came back: where the `SET` set the writer's key but the readers'
/// set or an intent exists, the round is refused there, and what it set is
/// given back at once (the plain release script, token-checked) before the
/// answer, so that a refusal leaves nothing behind; an error in doing so is
/// the call's error (the round's cleanup then releases it again).
pub(super) async fn first_write(
    connection: &mut Connection,
    lock: &LockId,
    keys: &RwKeys,
    exchanged: Exchanged,
) -> Result<Exchanged, RedisError> {
    let set_it = match &exchanged.reply {
        Value::Array(items) => match (items.as_slice(), exchanged.legacy) {
            ([Value::Nil, Value::Int(found)], false) | ([Value::Okay, Value::Int(found)], true) => {
                *found > 0
            }
            _ => false,
        },
        _ => false,
    };
    if set_it {
        let mut cmd = evalsha(&scripts::RELEASE, 1, 1);
        cmd.arg(&*keys.write).arg(&*lock.token);
        run(connection, &cmd, Some(&scripts::RELEASE)).await?;
    }
    Ok(exchanged)
}

/// A fenced acquisition's reply, `[set, counter]`. A grant whose counter was
/// lost on the node (below [`scripts::UNSEEDED_BELOW`]: the node restarted without
/// persistence, and `INCR` started again from 1) is seeded: the seed script
/// raises the counter to the server's clock in µs, while our key is still
/// there, and its counter replaces the small one; without our key (0) the
/// reply reads as refused.
pub(super) async fn seeded(
    connection: &mut Connection,
    lock: &LockId,
    counter_key: &[u8],
    reply: Value,
    legacy: bool,
) -> Result<Value, RedisError> {
    let Value::Array(mut items) = reply else {
        return Ok(reply);
    };
    let granted = match items.first() {
        Some(Value::Nil) => !legacy,
        Some(Value::Okay) => legacy,
        _ => false,
    };
    let unseeded =
        matches!(items.get(1), Some(Value::Int(counter)) if *counter < scripts::UNSEEDED_BELOW);
    if !(granted && unseeded && items.len() == 2) {
        return Ok(Value::Array(items));
    }
    let mut cmd = evalsha(&scripts::FENCE_SEED, 2, 1);
    cmd.arg(&*lock.key).arg(counter_key).arg(&*lock.token);
    match run(connection, &cmd, Some(&scripts::FENCE_SEED)).await? {
        Value::Int(counter) if counter > 0 => items[1] = Value::Int(counter),
        Value::Int(0) => {
            items[0] = if legacy {
                Value::Nil
            } else {
                Value::BulkString(Vec::new())
            };
        }
        other => return Ok(other),
    }
    Ok(Value::Array(items))
}

//! What each request sends a node (its commands and scripts, built in
//! place), how long it may take ([`Purpose`]), and how its reply reads.

use std::sync::Arc;

use redis::{Cmd, Script};

use super::reply::Reply;
use crate::queue::entries::{self as queue, Place};
use crate::request::{LockId, Request, RwKeys, Shape};
use crate::scripts;

/// What a call is for, which decides its bound and how it treats a slow node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Purpose {
    /// Asks for a vote (acquire, extend, fencing write-back): skipped while
    /// the node is unresponsive.
    Vote,
    /// Removes our key (release): always sent, and not bounded here but by
    /// its round (see `Engine::release`), which leaves it to finish in the
    /// background.
    Cleanup,
    /// Only reads (status): bounded by the connect
    /// timeout, since a fresh client may have to connect first; a timeout
    /// does not mark the node unresponsive.
    Read,
}

/// One exchange with a node.
pub(super) enum Call {
    /// One command; `script` is the script it runs by `EVALSHA` (loaded,
    /// and the command sent again, on `NOSCRIPT`).
    Command {
        cmd: Cmd,
        script: Option<&'static Script>,
    },
    /// `SET key token NX GET PX ttl` (`SET NX PX` before Redis 7.0), and
    /// with `counter_key` an `INCR` of the fencing counter right after it,
    /// in the same request (see [`fenced`]); or, for a writer's first
    /// round (`check`), on the writer's key, with an `EXISTS` of the
    /// readers' set and the intent right after it (see [`first_write`]).
    /// Built when sent, so that the fallback costs nothing until a node
    /// needs it.
    Acquire {
        lock: LockId,
        ttl_ms: u64,
        counter_key: Option<Arc<[u8]>>,
        check: Option<Arc<RwKeys>>,
    },
    /// A reader's round: for the `first` of its call, four plain commands
    /// where the node allows it (see `read_round.rs`); else the read
    /// script, which also drops the ended entries first where `prune`.
    /// Built when sent, as it aims its entry's end by the node's clock at
    /// that moment.
    Read {
        lock: LockId,
        keys: Arc<RwKeys>,
        ttl_ms: u64,
        first: bool,
        prune: bool,
    },
}

/// What `request` sends, how long it may take, and how its reply reads.
pub(super) fn plan(request: &Request) -> (Purpose, Call, Reply) {
    match request {
        Request::Acquire {
            lock,
            ttl_ms,
            counter_key,
        } => acquire_plan(lock, *ttl_ms, counter_key),
        Request::Wait {
            lock,
            ttl_ms,
            counter_key,
            waiter,
            ticket,
        } => {
            let fenced = counter_key.is_some();
            let call = wait_call(lock, *ttl_ms, counter_key.as_deref(), waiter, *ticket);
            (Purpose::Vote, call, Reply::Queued { fenced })
        }
        Request::Gather {
            lock,
            ttl_ms,
            counter_key,
            held,
        } => gather(lock, *ttl_ms, counter_key.as_deref(), held),
        Request::FirstWrite { lock, ttl_ms } => first_write_plan(lock, *ttl_ms),
        Request::FirstRead { lock, ttl_ms } => match &lock.shape {
            Shape::Read(keys) => (
                Purpose::Vote,
                read_call(lock, keys, *ttl_ms, true),
                Reply::YesNo,
            ),
            _ => acquire_plan(lock, *ttl_ms, &None),
        },
        Request::Extend { lock, ttl_ms } => (Purpose::Vote, extension(lock, *ttl_ms), Reply::YesNo),
        Request::WriteBack {
            lock,
            counter_key,
            fencing_token,
        } => {
            let call = write_back(lock, counter_key, *fencing_token);
            (Purpose::Vote, call, Reply::YesNo)
        }
        // Always sent: a node that was slow may still hold our key.
        Request::Release { lock, place, .. } => {
            (Purpose::Cleanup, release_call(lock, place), Reply::YesNo)
        }
        Request::CountReaders { key } => status_call(&scripts::COUNT_READERS, key, Reply::Count),
        Request::Record {
            lock,
            record,
            value,
        } => {
            let mut cmd = evalsha(&scripts::RECORD, 2, 2);
            cmd.arg(&*lock.key)
                .arg(&**record)
                .arg(&*lock.token)
                .arg(&**value);
            let call = script(cmd, &scripts::RECORD);
            // Always sent, as a release: a withdrawal must reach every node.
            (Purpose::Cleanup, call, Reply::YesNo)
        }
        Request::Inspect { key } => status_call(&scripts::INSPECT, key, Reply::Holds),
    }
}

/// A read (status) of `key` by `read_script`, whose reply reads as `reply`.
pub(super) fn status_call(
    read_script: &'static Script,
    key: &[u8],
    reply: Reply,
) -> (Purpose, Call, Reply) {
    let mut cmd = evalsha(read_script, 1, 0);
    cmd.arg(key);
    (Purpose::Read, script(cmd, read_script), reply)
}

/// What a [`Request::FirstWrite`] sends (a [`Call::Acquire`] on the
/// writer's key, checked), and how its reply reads.
pub(super) fn first_write_plan(lock: &LockId, ttl_ms: u64) -> (Purpose, Call, Reply) {
    let check = match &lock.shape {
        Shape::Write { keys, .. } => Some(keys.clone()),
        _ => None,
    };
    let call = Call::Acquire {
        lock: lock.clone(),
        ttl_ms,
        counter_key: None,
        check,
    };
    (Purpose::Vote, call, Reply::FirstWrite)
}

/// What a [`Request::Acquire`] sends, by the lock's shape, and how its
/// reply reads.
pub(super) fn acquire_plan(
    lock: &LockId,
    ttl_ms: u64,
    counter_key: &Option<Arc<[u8]>>,
) -> (Purpose, Call, Reply) {
    let fenced = counter_key.is_some();
    match &lock.shape {
        Shape::One => {
            let reply = if fenced { Reply::Fenced } else { Reply::SetNx };
            (
                Purpose::Vote,
                acquire_call(lock, ttl_ms, counter_key),
                reply,
            )
        }
        Shape::All(_) => {
            let call = all_or_none_call(lock, ttl_ms, counter_key.as_deref());
            (Purpose::Vote, call, Reply::AllOrNone { fenced })
        }
        Shape::Read(keys) => (
            Purpose::Vote,
            read_call(lock, keys, ttl_ms, false),
            Reply::YesNo,
        ),
        Shape::Write {
            keys,
            intent,
            intent_ms,
        } => {
            let mut cmd = evalsha(&scripts::WRITE, 3 + usize::from(fenced), 4);
            cmd.arg(&*keys.write).arg(&*keys.read).arg(&*keys.intent);
            if let Some(counter_key) = counter_key {
                cmd.arg(&**counter_key);
            }
            cmd.arg(&*lock.token)
                .arg(ttl_ms)
                .arg(intent.as_deref().unwrap_or(""))
                .arg(*intent_ms);
            (
                Purpose::Vote,
                script(cmd, &scripts::WRITE),
                Reply::AllOrNone { fenced },
            )
        }
    }
}

/// The extend script's call, by the lock's shape: a plain lock's (on a
/// writer's key too), the one that extends several keys all or none, or a
/// reader's.
pub(super) fn extension(lock: &LockId, ttl_ms: u64) -> Call {
    let (extend, key): (&'static Script, &[u8]) = match &lock.shape {
        Shape::All(_) => {
            let mut cmd = evalsha(&scripts::EXTEND_ALL, lock.key_count(), 2);
            for key in lock.keys() {
                cmd.arg(key);
            }
            cmd.arg(&*lock.token).arg(ttl_ms);
            return script(cmd, &scripts::EXTEND_ALL);
        }
        Shape::Read(keys) => (&scripts::READ_EXTEND, &keys.read),
        Shape::One => (&scripts::EXTEND, &lock.key),
        Shape::Write { keys, .. } => (&scripts::EXTEND, &keys.write),
    };
    let mut cmd = evalsha(extend, 1, 2);
    cmd.arg(key).arg(&*lock.token).arg(ttl_ms);
    script(cmd, extend)
}

/// The fencing write-back script's call.
pub(super) fn write_back(lock: &LockId, counter_key: &[u8], fencing_token: u64) -> Call {
    let mut cmd = evalsha(&scripts::FENCE_WRITE_BACK, 2, 2);
    // A reader has no fencing token, so no write-back: its key is not a string.
    cmd.arg(lock.held_key().unwrap_or(&lock.key))
        .arg(counter_key)
        .arg(&*lock.token)
        .arg(fencing_token);
    script(cmd, &scripts::FENCE_WRITE_BACK)
}

/// The release's call: the release script (of a lock on several
/// resources: the script that releases them all, with no waiter's place:
/// such a lock never waits in a queue itself; its steps do, as plain
/// locks), or for a reader a plain `ZREM` of its entry.
pub(super) fn release_call(lock: &LockId, place: &Place) -> Call {
    match &lock.shape {
        Shape::One => {
            let mut cmd = evalsha(&scripts::RELEASE, 1, 4);
            cmd.arg(&*lock.key).arg(&*lock.token);
            place_args(&mut cmd, place);
            script(cmd, &scripts::RELEASE)
        }
        Shape::All(_) => {
            let mut cmd = evalsha(&scripts::RELEASE_ALL, lock.key_count(), 1);
            for key in lock.keys() {
                cmd.arg(key);
            }
            cmd.arg(&*lock.token);
            script(cmd, &scripts::RELEASE_ALL)
        }
        // A reader's entry is its own: a plain `ZREM` (1: it was there).
        Shape::Read(keys) => {
            let mut cmd = Cmd::with_capacity(3, 128);
            cmd.arg("ZREM").arg(&*keys.read).arg(&*lock.token);
            Call::Command { cmd, script: None }
        }
        Shape::Write { keys, .. } => {
            let mut cmd = evalsha(&scripts::RELEASE, 1, 1);
            cmd.arg(&*keys.write).arg(&*lock.token);
            script(cmd, &scripts::RELEASE)
        }
    }
}

/// The all-or-nothing acquire script's call for a lock on several
/// resources, with the fencing counter's key last when fencing is on.
pub(super) fn all_or_none_call(lock: &LockId, ttl_ms: u64, counter_key: Option<&[u8]>) -> Call {
    let keys = lock.key_count();
    let mut cmd = evalsha(
        &scripts::ACQUIRE_ALL,
        keys + usize::from(counter_key.is_some()),
        3,
    );
    for key in lock.keys() {
        cmd.arg(key);
    }
    if let Some(counter_key) = counter_key {
        cmd.arg(counter_key);
    }
    cmd.arg(&*lock.token).arg(ttl_ms).arg(keys);
    script(cmd, &scripts::ACQUIRE_ALL)
}

/// What a [`Request::Gather`] sends (the gather script, with the fencing
/// counter's key last among the keys when fencing is on), and how its
/// reply reads.
pub(super) fn gather(
    lock: &LockId,
    ttl_ms: u64,
    counter_key: Option<&[u8]>,
    held: &[Arc<str>],
) -> (Purpose, Call, Reply) {
    let keys = lock.key_count();
    let mut cmd = evalsha(
        &scripts::GATHER,
        keys + usize::from(counter_key.is_some()),
        3 + held.len(),
    );
    for key in lock.keys() {
        cmd.arg(key);
    }
    if let Some(counter_key) = counter_key {
        cmd.arg(counter_key);
    }
    cmd.arg(&*lock.token).arg(ttl_ms).arg(keys);
    for token in held {
        cmd.arg(&**token);
    }
    let fenced = counter_key.is_some();
    let call = script(cmd, &scripts::GATHER);
    (Purpose::Vote, call, Reply::AllOrNone { fenced })
}

/// The call of a [`Request::Acquire`].
pub(super) fn acquire_call(lock: &LockId, ttl_ms: u64, counter_key: &Option<Arc<[u8]>>) -> Call {
    Call::Acquire {
        lock: lock.clone(),
        ttl_ms,
        counter_key: counter_key.clone(),
        check: None,
    }
}

/// The queue script's call for a [`Request::Wait`].
pub(super) fn wait_call(
    lock: &LockId,
    ttl_ms: u64,
    counter_key: Option<&[u8]>,
    waiter: &str,
    ticket: u64,
) -> Call {
    let keys = 1 + usize::from(counter_key.is_some());
    let mut cmd = evalsha(&scripts::WAIT, keys, 5);
    cmd.arg(&*lock.key);
    if let Some(counter_key) = counter_key {
        cmd.arg(counter_key);
    }
    cmd.arg(&*lock.token)
        .arg(ttl_ms)
        .arg(waiter)
        .arg(ticket)
        .arg(queue::lifetime_ms());
    script(cmd, &scripts::WAIT)
}

/// A reader's round (see [`Call::Read`]); `first`: the first of its call.
pub(super) fn read_call(lock: &LockId, keys: &Arc<RwKeys>, ttl_ms: u64, first: bool) -> Call {
    Call::Read {
        lock: lock.clone(),
        keys: keys.clone(),
        ttl_ms,
        first,
        // One round in 16 drops the ended entries (see `scripts::READ`).
        prune: rand::random::<u8>() < 16,
    }
}

/// The read script's command for a reader's round (see [`Call::Read`]).
pub(super) fn read_script(keys: &RwKeys, token: &str, ttl_ms: u64, prune: bool) -> Cmd {
    let mut cmd = evalsha(&scripts::READ, 3, 3);
    cmd.arg(&*keys.read)
        .arg(&*keys.write)
        .arg(&*keys.intent)
        .arg(token)
        .arg(ttl_ms)
        .arg(if prune { "1" } else { "0" });
    cmd
}

/// A script's call.
pub(super) fn script(cmd: Cmd, script: &'static Script) -> Call {
    Call::Command {
        cmd,
        script: Some(script),
    }
}

/// The release script's arguments for a waiter's entry (none for `Place::NoEntry`).
pub(super) fn place_args(cmd: &mut Cmd, place: &Place) {
    match place {
        Place::NoEntry => {}
        Place::Keep(waiter, ticket) => {
            cmd.arg(&**waiter).arg(*ticket).arg(queue::lifetime_ms());
        }
        Place::Leave(waiter) => {
            cmd.arg(&**waiter).arg(-1).arg(queue::lifetime_ms());
        }
    }
}

/// The start of `EVALSHA` for `script` with `keys` keys, room reserved for
/// them and `args` more arguments: the caller adds the keys, then the
/// arguments. One command, built in place (the `redis` crate's
/// `ScriptInvocation` first copies each key and argument into a vector of
/// its own, five allocations more per release).
pub(super) fn evalsha(script: &Script, keys: usize, args: usize) -> Cmd {
    // A key prefix, a resource name and a token: ample for most calls.
    const TYPICAL_BYTES: usize = 160;
    let mut cmd = Cmd::with_capacity(3 + keys + args, TYPICAL_BYTES);
    cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys);
    cmd
}

//! A reader's round without a script: what it sends and how its replies
//! read (the exchange itself is in `node/`).
//!
//! A reader's grant in one script (`scripts::READ`) costs a node about ten
//! plain commands' worth (`EVALSHA` and five calls, see docs/benchmarks.md).
//! On a node that allows it, a reader's round is instead four plain
//! commands, pipelined, with the node's clock read after them (the `TIME`
//! that every timed vote has, see `clock.rs`):
//!
//! 1. `ZADD readers <end> <token>`: the reader's entry, whose end `<end>` is
//!    a time on the node's clock, *aimed* by the client: the most the node's
//!    clock can read by its latest reading ([`Lead::node_clock_at_most`](crate::clock::Lead::node_clock_at_most)),
//!    plus the TTL, plus [`AIM_MARGIN_MS`] for the time the request takes
//!    to run;
//! 2. `PEXPIRE readers <ttl> NX`: a set that has no expiry (the `ZADD` just
//!    made it) lives the TTL;
//! 3. `PEXPIREAT readers <end> GT`: and at least until `<end>` (never
//!    shorter for the other readers);
//! 4. `EXISTS writer intent`: whether a writer holds the lock or waits.
//!
//! then `TIME`. The round is granted on the node only when `EXISTS` found
//! neither and the entry's end is at least the node's time at `TIME` plus
//! the TTL ([`verdict`]). Where `EXISTS` found one, it is refused; where
//! the aim fell short of the node's clock (a clock that moved since its
//! last reading), it is *missed*. Either way the client removes its entry
//! (`ZREM`, [`undo`]) before the node's answer counts, and a missed round
//! runs the script instead. The set's expiry flags (`NX`, `GT`) need Redis
//! 7.0: older servers, clients that do not read clocks (a clock tolerance
//! of zero), nodes with no reading yet, Redis Cluster nodes and the
//! rounds that prune ended entries (one in 16) run the script.
//!
//! # Safety argument
//!
//! *Assumes* what the script assumes (the mutex's assumptions, and a node
//! runs one connection's commands in order), and that every writer's grant
//! on a node is one step that sets the writer's key or finds a reader's
//! entry whose end has not passed on the node's clock: the write script
//! drops ended entries and is refused by any other; a writer's first round
//! sets its key and then looks for the readers' set (`acquire/rw.rs`).
//!
//! *Claim*: where this round is granted on node `n`, no writer is granted
//! on `n` from the reader's `ZADD` until its hold's validity ended. Say a
//! writer's grant `w` ran on `n`.
//! - `w` before the `ZADD`: the writer's key (or its intent, left by a
//!   refused round before) was on `n` when the `EXISTS` ran after it,
//!   unless it was gone by then (the writer released it or its TTL passed:
//!   that writer's validity was over); found, the round is refused.
//! - `w` after the `ZADD`: the entry is there (only this reader removes it)
//!   with end `E`. The round was granted only if `E ≥ T + ttl`, where `T`
//!   is the node's time at `TIME`, after the `ZADD`. If `w` ran before
//!   `TIME`, the node's clock read at most `T < E`: `w` found the entry and
//!   was refused (a writer's first round found the set). If after, `w`
//!   found the entry unless the node's clock had passed `E ≥ T + ttl`: a TTL
//!   after `TIME`, which ran after the round started, so (with the drift
//!   bound the validity already allows for) after the reader's validity
//!   ended. That is the script's own argument with `T` for the script's
//!   `now`: the script's entry ends at its `now` plus the TTL.
//! - A writer's first round that set its key after the `EXISTS` and looked
//!   for the set after the `ZADD` (as it always does, after its own `SET`)
//!   found it: refused.
//!
//! The set lives at least until `E`, so the entry is not lost to the set's
//! expiry: `PEXPIRE NX` gives a set without an expiry the TTL from the
//! node's now (which precedes `TIME`), and `PEXPIREAT GT` raises any
//! shorter expiry to `E`, so the set expires no earlier than
//! `max(E, now + ttl)`; neither shortens another reader's. A refused or
//! missed round's entry lives only until its `ZREM`, or, if the node did
//! not answer, until the round's cleanup (`ZREM`) or `E`; meanwhile it only
//! withholds writers. An aim too far ahead (a clock read before it stepped
//! back) only makes the entry and the set outlive the hold by as much, if
//! the reader dies without releasing. The aim is never what safety rests
//! on: the check against `TIME` is.
//!
//! Entries are scored on the node's clock, as the script scores them, so
//! readers and writers of every client version read them alike (a rolling
//! upgrade mixes them safely). When nodes disagree (granted on some,
//! refused or missed on others), each node's answer is its own vote: a
//! read hold still needs a quorum of grants.

use redis::{Cmd, Value};

use crate::batch::Commands;
use crate::clock::Reading;
use crate::request::RwKeys;

/// How far past the node's clock plus the TTL a reader's entry is aimed:
/// room for the time between the client's estimate and the node's `TIME`
/// (the round's way to the node, a batch gathering, the commands queued
/// before it). An entry of a reader that dies without releasing outlives
/// its hold by about this much.
pub(crate) const AIM_MARGIN_MS: i64 = 20;

/// What a round without a script came to on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// No writer's key or intent, and the entry ends late enough.
    Granted,
    /// A writer's key or intent is there.
    Refused,
    /// No writer, but the aim fell short of the node's clock (or the node
    /// did not tell its time): the script decides instead.
    Missed,
}

/// The end to give a reader's entry, ms on the node's clock, for a node
/// whose clock reads at most `node_clock_us` (µs since the Unix epoch) now
/// and a hold of `ttl_ms`.
pub(crate) fn aim(node_clock_us: i64, ttl_ms: u64) -> i64 {
    let ttl_ms = i64::try_from(ttl_ms).unwrap_or(i64::MAX);
    node_clock_us
        .div_euclid(1000)
        .saturating_add(1)
        .saturating_add(ttl_ms)
        .saturating_add(AIM_MARGIN_MS)
}

/// The round's four commands (see the module docs) for the reader `token`
/// of the lock whose keys are `keys`, its entry ending at `ends_ms`.
pub(crate) fn commands(keys: &RwKeys, token: &str, ends_ms: i64, ttl_ms: u64) -> Commands {
    let mut zadd = Cmd::with_capacity(4, 32 + keys.read.len() + token.len());
    zadd.arg("ZADD").arg(&*keys.read).arg(ends_ms).arg(token);
    let mut pexpire = Cmd::with_capacity(4, 24 + keys.read.len());
    pexpire
        .arg("PEXPIRE")
        .arg(&*keys.read)
        .arg(ttl_ms)
        .arg("NX");
    let mut pexpireat = Cmd::with_capacity(4, 24 + keys.read.len());
    pexpireat
        .arg("PEXPIREAT")
        .arg(&*keys.read)
        .arg(ends_ms)
        .arg("GT");
    let mut exists = Cmd::with_capacity(3, 16 + keys.write.len() + keys.intent.len());
    exists.arg("EXISTS").arg(&*keys.write).arg(&*keys.intent);
    Commands(zadd, vec![pexpire, pexpireat, exists])
}

/// The command that takes the entry back (a refused or missed round).
pub(crate) fn undo(keys: &RwKeys, token: &str) -> Cmd {
    let mut zrem = Cmd::with_capacity(3, 16 + keys.read.len() + token.len());
    zrem.arg("ZREM").arg(&*keys.read).arg(token);
    zrem
}

/// What the round's `replies` (the four commands' replies, in order) and
/// the node's clock `reading` after them say, for an entry that ends at
/// `ends_ms` and a hold of `ttl_ms`; `None` for replies the commands
/// cannot give.
pub(crate) fn verdict(
    replies: &Value,
    reading: Option<&Reading>,
    ends_ms: i64,
    ttl_ms: u64,
) -> Option<Outcome> {
    let Value::Array(items) = replies else {
        return None;
    };
    let [
        Value::Int(_),
        Value::Int(_),
        Value::Int(_),
        Value::Int(found),
    ] = items.as_slice()
    else {
        return None;
    };
    if *found > 0 {
        return Some(Outcome::Refused);
    }
    let Some(reading) = reading else {
        return Some(Outcome::Missed);
    };
    // The most the node's clock read at `TIME`, µs, plus the TTL.
    let ttl_us = i64::try_from(ttl_ms)
        .unwrap_or(i64::MAX)
        .saturating_mul(1000);
    let needed_us = (reading.node_us)
        .saturating_add(reading.resolution_us)
        .saturating_add(ttl_us);
    Some(if ends_ms.saturating_mul(1000) >= needed_us {
        Outcome::Granted
    } else {
        Outcome::Missed
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use super::*;

    fn keys() -> RwKeys {
        RwKeys {
            write: Arc::from(&b"r:w"[..]),
            read: Arc::from(&b"r:r"[..]),
            intent: Arc::from(&b"r:i"[..]),
        }
    }

    fn replies(found: i64) -> Value {
        Value::Array(vec![
            Value::Int(1),
            Value::Int(1),
            Value::Int(1),
            Value::Int(found),
        ])
    }

    /// A `TIME` reading of `node_ms` on the node's clock.
    fn at(node_ms: i64) -> Reading {
        let now = Instant::now();
        Reading {
            node_us: node_ms * 1000,
            resolution_us: 0,
            sent: now,
            received: now,
        }
    }

    #[test]
    fn the_aim_is_past_the_clock_by_the_ttl_and_the_margin() {
        assert_eq!(
            aim(1_000_000_500, 5_000),
            1_000_000 + 1 + 5_000 + AIM_MARGIN_MS
        );
        assert_eq!(aim(i64::MAX, u64::MAX), i64::MAX);
    }

    #[test]
    fn the_round_is_four_commands_on_the_lock_s_keys() {
        let Commands(first, then) = commands(&keys(), "tok", 7_000, 5_000);
        let show = |cmd: &Cmd| {
            (cmd.args_iter())
                .map(|arg| match arg {
                    redis::Arg::Simple(arg) => String::from_utf8_lossy(arg).into_owned(),
                    _ => "?".to_owned(),
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        let all: Vec<String> = std::iter::once(&first).chain(&then).map(show).collect();
        assert_eq!(
            all,
            [
                "ZADD r:r 7000 tok",
                "PEXPIRE r:r 5000 NX",
                "PEXPIREAT r:r 7000 GT",
                "EXISTS r:w r:i",
            ]
        );
        assert_eq!(show(&undo(&keys(), "tok")), "ZREM r:r tok");
    }

    #[test]
    fn granted_only_without_a_writer_and_with_the_entry_a_ttl_past_the_reading() {
        let ttl_ms = 5_000;
        let granted = verdict(&replies(0), Some(&at(1_000)), 6_000, ttl_ms);
        assert_eq!(granted, Some(Outcome::Granted));
        // A writer's key or intent refuses, whatever the clock.
        let refused = verdict(&replies(1), Some(&at(1_000)), 6_000, ttl_ms);
        assert_eq!(refused, Some(Outcome::Refused));
        let refused = verdict(&replies(2), None, 6_000, ttl_ms);
        assert_eq!(refused, Some(Outcome::Refused));
        // An entry that would end less than a TTL after the node's time.
        let short = verdict(&replies(0), Some(&at(1_001)), 6_000, ttl_ms);
        assert_eq!(short, Some(Outcome::Missed));
        // A reading in ms may be up to 999 µs behind the truth.
        let coarse = Reading {
            resolution_us: 999,
            ..at(1_000)
        };
        let short = verdict(&replies(0), Some(&coarse), 6_000, ttl_ms);
        assert_eq!(short, Some(Outcome::Missed));
        // No reading: cannot tell.
        assert_eq!(
            verdict(&replies(0), None, 6_000, ttl_ms),
            Some(Outcome::Missed)
        );
    }

    #[test]
    fn replies_the_commands_cannot_give_are_none() {
        assert_eq!(verdict(&Value::Int(1), None, 0, 0), None);
        let three = Value::Array(vec![Value::Int(1), Value::Int(1), Value::Int(0)]);
        assert_eq!(verdict(&three, None, 0, 0), None);
        let nil = Value::Array(vec![
            Value::Int(1),
            Value::Int(1),
            Value::Int(1),
            Value::Nil,
        ]);
        assert_eq!(verdict(&nil, None, 0, 0), None);
    }
}

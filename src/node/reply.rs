//! How a node's reply reads: as an [`Answer`] by the kind of call
//! ([`Reply`]), with the node's witness (its data mark and clock) as the
//! call read it ([`Exchanged`]).

use std::sync::Arc;

use redis::{RedisError, Value};

use crate::answer::{Answer, NodeError, NodeErrorKind};
use crate::batch::{Batches, Judged, Landed, Witnessed};

/// How a node's reply to a [`Call`] reads as an [`Answer`].
#[derive(Debug, Clone, Copy)]
pub(super) enum Reply {
    /// `SET NX GET` (nil: set) or `SET NX` (OK: set).
    SetNx,
    /// `SET NX GET` (or `SET NX`) and the counter's `INCR`, pipelined.
    Fenced,
    /// A writer's first round: `SET NX GET` (or `SET NX`) on the writer's
    /// key and the `EXISTS` of the readers' set and the intent, pipelined:
    /// granted when it set the key and neither exists.
    FirstWrite,
    /// The queue script: `{1, counter}` (granted; `counter` only with
    /// fencing on) or `{0, ticket}` (queued).
    Queued { fenced: bool },
    /// The all-or-nothing acquire script of a lock on several resources:
    /// `{1, counter}` (granted; `counter` only with fencing on) or `{0, 0}`.
    AllOrNone { fenced: bool },
    /// A script's 1 (yes) or 0 (no).
    YesNo,
    /// The inspect script: `{token, pttl}` or nil.
    Holds,
    /// Any reply will do (a record's `SADD`).
    Any,
    /// A count (of readers): `Granted` with the count, whatever it is.
    Count,
}

impl Reply {
    /// The answer in `reply`, which came from the legacy command when
    /// `legacy`; `Err` with the reply when the protocol does not allow it.
    pub(super) fn read(self, reply: Value, legacy: bool) -> Result<Answer, Value> {
        let answer = match (self, reply) {
            // With GET: nil means the key was absent and is now ours.
            (Reply::SetNx, Value::Nil) if !legacy => Answer::Granted(None),
            (Reply::SetNx, Value::Okay) if legacy => Answer::Granted(None),
            (Reply::SetNx, Value::BulkString(_)) if !legacy => Answer::Refused(None),
            (Reply::SetNx, Value::Nil) => Answer::Refused(None),
            (Reply::Fenced, Value::Array(items)) => match (items.as_slice(), legacy) {
                ([Value::Nil, Value::Int(counter)], false)
                | ([Value::Okay, Value::Int(counter)], true)
                    if *counter > 0 =>
                {
                    Answer::Granted(u64::try_from(*counter).ok())
                }
                ([Value::BulkString(_), Value::Int(_)], false)
                | ([Value::Nil, Value::Int(_)], true) => Answer::Refused(None),
                _ => return Err(Value::Array(items)),
            },
            (Reply::FirstWrite, Value::Array(items)) => match (items.as_slice(), legacy) {
                ([Value::Nil, Value::Int(0)], false) | ([Value::Okay, Value::Int(0)], true) => {
                    Answer::Granted(None)
                }
                ([Value::Nil | Value::BulkString(_), Value::Int(_)], false)
                | ([Value::Nil | Value::Okay, Value::Int(_)], true) => Answer::Refused(None),
                _ => return Err(Value::Array(items)),
            },
            (Reply::Queued { fenced }, Value::Array(items)) => match items.as_slice() {
                [Value::Int(1), _] if !fenced => Answer::Granted(None),
                [Value::Int(1), Value::Int(counter)] if *counter > 0 => {
                    Answer::Granted(u64::try_from(*counter).ok())
                }
                [Value::Int(0), Value::Int(ticket)] if *ticket > 0 => {
                    Answer::Refused(Some(ticket.unsigned_abs()))
                }
                _ => return Err(Value::Array(items)),
            },
            (Reply::AllOrNone { fenced }, Value::Array(items)) => match items.as_slice() {
                [Value::Int(1), _] if !fenced => Answer::Granted(None),
                [Value::Int(1), Value::Int(counter)] if *counter > 0 => {
                    Answer::Granted(u64::try_from(*counter).ok())
                }
                [Value::Int(0), Value::Int(0)] => Answer::Refused(None),
                _ => return Err(Value::Array(items)),
            },
            (Reply::YesNo, Value::Int(1)) | (Reply::Any, _) => Answer::Granted(None),
            (Reply::Count, Value::Int(count)) if count >= 0 => {
                Answer::Granted(u64::try_from(count).ok())
            }
            (Reply::YesNo, Value::Int(0)) | (Reply::Holds, Value::Nil) => Answer::Refused(None),
            (Reply::Holds, Value::Array(items)) => match items.as_slice() {
                // A foreign value need not be UTF-8; ours always is.
                [Value::BulkString(token), Value::Int(pttl_ms)] => Answer::Holds {
                    token: crate::request::unmarked(&String::from_utf8_lossy(token)).to_owned(),
                    pttl_ms: *pttl_ms,
                },
                _ => return Err(Value::Array(items)),
            },
            (_, reply) => return Err(reply),
        };
        Ok(answer)
    }
}

/// A node's reply to a call.
pub(super) struct Exchanged {
    pub(super) reply: Value,
    /// The legacy command (`SET NX` before Redis 7.0) gave it.
    pub(super) legacy: bool,
    /// The node's witness, read after the call (a witnessed call).
    pub(super) witness: Witness,
}

/// The node's witness (its data mark and clock), as a call read it.
pub(super) enum Witness {
    /// Not read (a call that grants nothing new, or nothing to read).
    Unread,
    /// Read after the call (or its batch), and judged (see `batch.rs`).
    Judged(Judged),
}

impl Witness {
    /// `witnessed`, judged by `batches`' judge where it read anything.
    pub(super) fn judged(batches: &Batches, witnessed: &Witnessed) -> Witness {
        match witnessed.any() {
            true => Witness::Judged(batches.judge(witnessed)),
            false => Witness::Unread,
        }
    }
}

impl Exchanged {
    pub(super) fn plain(reply: Value, legacy: bool) -> Self {
        Exchanged {
            reply,
            legacy,
            witness: Witness::Unread,
        }
    }

    pub(super) fn landed(landed: Landed) -> Self {
        Exchanged {
            reply: landed.reply,
            legacy: false,
            witness: landed.judged.map_or(Witness::Unread, Witness::Judged),
        }
    }
}

/// Whether `err` is the syntax error with which a server older than Redis
/// 7.0 refuses `SET NX GET`.
pub(super) fn is_syntax_error(err: &RedisError) -> bool {
    err.code() == Some("ERR") && err.detail().is_some_and(|detail| detail.contains("syntax"))
}

/// The error for a reply the protocol does not allow.
pub(super) fn unexpected(node: Arc<str>, reply: &Value) -> NodeError {
    NodeError::new(node, NodeErrorKind::UnexpectedReply(format!("{reply:?}")))
}

//! Reading a check's answers: a field of an `INFO` reply, the members of
//! a set, a `CONFIG GET`, and the note of a command the node refused.

use redis::{RedisError, RedisResult, Value};

/// The entries in the reply to `SMEMBERS` of a record (none if it failed).
pub(super) fn read_record(answer: Option<RedisResult<Value>>) -> Vec<String> {
    match answer {
        Some(Ok(Value::Array(items) | Value::Set(items))) => items
            .iter()
            .filter_map(|item| match item {
                Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
                _ => None,
            })
            .collect(),
        Some(Err(err)) => {
            tracing::debug!(error = %err, "the record could not be read: taken as empty");
            Vec::new()
        }
        _ => Vec::new(),
    }
}

/// The value of `name` (`"run_id:"`) in an `INFO` reply's text.
pub(super) fn info_field(info: &str, name: &str) -> Option<String> {
    info.lines()
        .find_map(|line| line.strip_prefix(name))
        .map(|value| value.trim().to_owned())
}

/// The value of a one-parameter `CONFIG GET` (RESP2 array or RESP3 map).
pub(super) fn config_value(answer: Option<RedisResult<Value>>) -> Option<String> {
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    };
    match answer? {
        Ok(Value::Array(items)) => items.get(1).and_then(text),
        Ok(Value::Map(pairs)) => pairs.first().and_then(|(_, value)| text(value)),
        Ok(_) => None,
        Err(err) => {
            tracing::debug!(error = %err, "CONFIG GET refused: the node is taken as not durable");
            None
        }
    }
}

/// Whether `err`, a check command's reply, is an answer the check does
/// without what that command checks:
/// - the node refusing the command: an ACL's `NOPERM`, a command renamed
///   or disabled (`ERR unknown command`, `ERR unknown subcommand`, a
///   proxy's `not allowed` or `disabled`);
/// - a key of another type (`WRONGTYPE`) at a record's place;
/// - on a cluster's primary, a key that lives on another primary (`MOVED`,
///   `ASK`, `CROSSSLOT`: a cluster's records are read from each primary,
///   and its data mark is not read);
/// - a replica's `READONLY` to the mark's write (the check's `ROLE` then
///   refuses the node as a replica).
///
/// Any other error (`LOADING` from a server that is still loading its
/// data, `BUSY`, `MASTERDOWN`, a lost connection, a timeout) says nothing
/// of what the node allows: it fails the check, which is tried again, since
/// a node judged on it would count without what that command checks (its
/// data mark, above all).
pub(super) fn is_refusal(err: &RedisError) -> bool {
    match err.code() {
        Some("NOPERM" | "WRONGTYPE" | "MOVED" | "ASK" | "CROSSSLOT" | "READONLY") => true,
        // Redis before 7.0 wraps an error inside a script in its own
        // `ERR Error running script …: -READONLY …`.
        Some("ERR") => err.detail().is_some_and(|detail| {
            let detail = detail.to_ascii_lowercase();
            [
                "unknown command",
                "unknown subcommand",
                "not allowed",
                "disabled",
                "-readonly",
            ]
            .iter()
            .any(|refusal| detail.contains(refusal))
        }),
        _ => false,
    }
}

/// Notes a check command the node refused, with its reply.
pub(super) fn refusal(refused: &mut Vec<String>, command: &str, err: &RedisError) {
    let reply = match (err.code(), err.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => err.to_string(),
    };
    refused.push(format!("{command}: {reply}"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply_error(text: &str) -> RedisError {
        let reply = format!("-{text}\r\n");
        match redis::parse_redis_value(reply.as_bytes()) {
            Ok(Value::ServerError(err)) => RedisError::from(err),
            other => panic!("not an error reply: {other:?}"),
        }
    }

    /// Only what says the node will not run a command is a refusal; a
    /// server loading its data, busy or without its primary is not.
    #[test]
    fn only_a_refusal_is_taken_for_one() {
        for refusal in [
            "NOPERM this user has no permissions to run the 'info' command",
            "ERR unknown command 'CONFIG', with args beginning with: 'GET' ",
            "ERR unknown subcommand 'GET'. Try CONFIG HELP.",
            "ERR command not allowed",
            "WRONGTYPE Operation against a key holding the wrong kind of value",
            "MOVED 3999 127.0.0.1:6381",
            "CROSSSLOT Keys in request don't hash to the same slot",
            "READONLY You can't write against a read only replica.",
            "ERR Error running script (call to f_ee5b): @user_script:1: @user_script: 1: \
             -READONLY You can't write against a read only replica.",
        ] {
            assert!(is_refusal(&reply_error(refusal)), "{refusal}");
        }
        for failure in [
            "LOADING Redis is loading the dataset in memory",
            "BUSY Redis is busy running a script",
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'",
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "ERR Error running script",
            "CLUSTERDOWN The cluster is down",
        ] {
            assert!(!is_refusal(&reply_error(failure)), "{failure}");
        }
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(!is_refusal(&io));
    }
}

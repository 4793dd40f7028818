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

/// Notes a check command the node refused, with its reply.
pub(super) fn refusal(refused: &mut Vec<String>, command: &str, err: &RedisError) {
    let reply = match (err.code(), err.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => err.to_string(),
    };
    refused.push(format!("{command}: {reply}"));
}

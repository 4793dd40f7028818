//! The scripts that write the crate's records beside a lock: a leader's
//! record, and the notes of clock steps.

use std::sync::LazyLock;

use redis::Script;

/// A leader's record (see `election.rs`): while the lock key `KEYS[1]` holds
/// our token `ARGV[1]` (marked or not), writes `ARGV[2]` to the record
/// `KEYS[2]` (no TTL) and returns 1; an empty `ARGV[2]` instead deletes the
/// record where it starts with our token, whether or not the lock is still
/// ours, and returns 1 when it did. Otherwise 0.
pub(crate) static RECORD: LazyLock<Script> = LazyLock::new(|| Script::new(RECORD_CODE));

pub(super) const RECORD_CODE: &str = r#"if ARGV[2] == "" then
    local record = redis.call("get", KEYS[2])
    if record and string.sub(record, 1, #ARGV[1] + 1) == ARGV[1] .. " " then
        return redis.call("del", KEYS[2])
    end
    return 0
end
local value = redis.call("get", KEYS[1])
if value == ARGV[1] or value == ARGV[1] .. "+" then
    redis.call("set", KEYS[2], ARGV[2])
    return 1
end
return 0"#;

/// A note of a clock step (see `clock.rs`): in the hash `KEYS[1]`, sets the
/// field `ARGV[1]` (the `run_id` of the node whose clock stepped) to this
/// node's time in ms plus `ARGV[2]` (how long that node is held back, ms),
/// unless it holds a later time already, and keeps the hash for at least
/// `ARGV[2]`. Returns 1. Loaded on first use (steps are rare).
pub(crate) static CLOCK_NOTE: LazyLock<Script> = LazyLock::new(|| Script::new(CLOCK_NOTE_CODE));

pub(super) const CLOCK_NOTE_CODE: &str = r#"local now = redis.call("time")
local hold = tonumber(ARGV[2])
local until_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + hold
if tonumber(redis.call("hget", KEYS[1], ARGV[1]) or "0") < until_ms then
    redis.call("hset", KEYS[1], ARGV[1], until_ms)
end
if redis.call("pttl", KEYS[1]) < hold then
    redis.call("pexpire", KEYS[1], hold)
end
return 1"#;

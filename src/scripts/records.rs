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

/// Reads a node's data mark (see `standing/`), making one where there is
/// none, in one step, so that no client reads the node without a mark
/// after another did: `KEYS[1]` the mark, `ARGV[1]` an id for a new one.
/// Returns `{0, value}` where there is one; else sets `KEYS[1]` (no TTL) to
/// a clean mark (`id born 0 born incarnation`, `born` by the node's `TIME`
/// in ms, or `ARGV[2]` (the client's clock, ms) where `TIME` is refused, the
/// incarnation `run_id/master_replid` from `INFO`, empty where `INFO` is
/// refused) and returns `{1, value}`. Sent with `EVAL` in each check.
pub(crate) const MARK_READ_CODE: &str = r#"local value = redis.call("get", KEYS[1])
if value then
    return {0, value}
end
local function field(section, name)
    local info = redis.pcall("info", section)
    if type(info) ~= "string" then
        return nil
    end
    return string.match(info, name .. ":(%w+)")
end
local run_id = field("server", "run_id")
local incarnation = ""
if run_id then
    local replid = field("replication", "master_replid")
    incarnation = replid and (run_id .. "/" .. replid) or run_id
end
local time = redis.pcall("time")
local now = ARGV[2]
if type(time) == "table" and time[2] then
    now = string.format("%d", tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000))
end
value = ARGV[1] .. " " .. now .. " 0 " .. now .. " " .. incarnation
redis.call("set", KEYS[1], value)
return {1, value}"#;

/// Puts a node's data mark in place (see `standing/`): where `KEYS[1]`
/// holds `ARGV[1]` (or nothing, for an empty `ARGV[1]`), sets it to
/// `ARGV[2]` (no TTL) and returns `{1, ARGV[2]}`; else `{0, value}` with
/// what it holds (nil where nothing). Sent with `EVAL` (marks change rarely).
pub(crate) const MARK_CODE: &str = r#"local value = redis.call("get", KEYS[1])
if (not value and ARGV[1] == "") or value == ARGV[1] then
    redis.call("set", KEYS[1], ARGV[2])
    return {1, ARGV[2]}
end
return {0, value}"#;

/// Merges a client's settings into the node set's record (see
/// `standing/`), the hash `KEYS[1]`: `ARGV[1]` its clock tolerance in µs
/// (0: none: nothing recorded), `ARGV[2]` its grace in ms. Keeps the
/// smallest and the largest tolerance and the longest grace, and returns
/// them, `{min, max, grace}` (0 where none). Sent with `EVAL` in each check.
pub(crate) const SETTINGS_CODE: &str = r#"local function merged(field, value, wins)
    local old = tonumber(redis.call("hget", KEYS[1], field) or "")
    if value > 0 and (old == nil or wins(value, old)) then
        redis.call("hset", KEYS[1], field, string.format("%d", value))
        return value
    end
    return old or 0
end
local tolerance, grace = tonumber(ARGV[1]), tonumber(ARGV[2])
return {
    merged("tolerance-min-us", tolerance, function(a, b) return a < b end),
    merged("tolerance-max-us", tolerance, function(a, b) return a > b end),
    merged("grace-max-ms", grace, function(a, b) return a > b end),
}"#;

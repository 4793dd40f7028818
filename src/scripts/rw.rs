//! The read-write lock's scripts: a reader's round and extension, a
//! writer's round, and the count of readers.

/// The Lua of the read-write lock's scripts: `clock_ms()`, the node's clock
/// in ms; `prune(readers, now)`, which drops the readers whose hold ended;
/// `hold(readers, token, now, ttl)`, which makes a reader's hold end at
/// `now + ttl` and the set live at least that long.
macro_rules! rw_lua {
    () => {
        r#"local function clock_ms()
    local time = redis.call("time")
    return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
local function prune(readers, now)
    redis.call("zremrangebyscore", readers, "-inf", now)
end
local function hold(readers, token, now, ttl)
    redis.call("zadd", readers, string.format("%d", now + ttl), token)
    if redis.call("pttl", readers) < ttl then
        redis.call("pexpire", readers, ttl)
    end
end
"#
    };
}

use std::sync::LazyLock;

use redis::Script;

/// Takes a read hold of a read-write lock. `KEYS`: the readers' set, the
/// writer's key, the writers' intent key; `ARGV`: token, TTL in ms, and
/// `1` to drop the ended entries first (the client asks for it now and
/// then, so that entries of readers that died do not pile up while only
/// readers come: writers drop them anyway). Granted (1) only when no writer
/// holds the lock and no writer's intent is there: the reader's entry ends
/// at the node's clock plus the TTL, and the set lives at least that long
/// (never shorter for the other readers). Otherwise 0, and nothing changes.
///
/// Inline, with as few calls as it can: each `redis.call` and each Lua
/// function defined costs a server about as much as a plain command (see
/// docs/benchmarks.md, the read-write lock's cost). A reader's first round
/// runs four plain commands instead where the node allows it
/// (`read_round.rs`); this script is the later rounds', the pruning ones',
/// and every round's where that cannot run.
pub(crate) static READ: LazyLock<Script> = LazyLock::new(|| Script::new(READ_CODE));

pub(super) const READ_CODE: &str = r#"if redis.call("exists", KEYS[2], KEYS[3]) > 0 then
    return 0
end
local time = redis.call("time")
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ttl = tonumber(ARGV[2])
if ARGV[3] == "1" then
    redis.call("zremrangebyscore", KEYS[1], "-inf", now)
end
redis.call("zadd", KEYS[1], now + ttl, ARGV[1])
if redis.call("pttl", KEYS[1]) < ttl then
    redis.call("pexpire", KEYS[1], ttl)
end
return 1"#;

/// Renews a read hold: `KEYS[1]` the readers' set, `ARGV`: token, TTL in
/// ms. Only while our entry is there and its hold has not ended: it now
/// ends at the node's clock plus the TTL (the set lives at least that long),
/// 1; otherwise 0. Other readers' entries are not touched.
pub(crate) static READ_EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(READ_EXTEND_CODE));

pub(super) const READ_EXTEND_CODE: &str = concat!(
    rw_lua!(),
    r#"local now = clock_ms()
local ends = tonumber(redis.call("zscore", KEYS[1], ARGV[1]) or "0")
if ends <= now then
    return 0
end
hold(KEYS[1], ARGV[1], now, tonumber(ARGV[2]))
return 1"#
);

/// Takes the write hold of a read-write lock. `KEYS`: the writer's key, the
/// readers' set, the writers' intent key and, with fencing on, the fencing
/// counter; `ARGV`: token, TTL in ms, the writer's intent id (empty: none),
/// the intent's TTL in ms. Granted only when no writer holds the lock, no
/// reader's hold is left, and no other writer's intent is there: the
/// writer's key is set (`SET PX`), our intent removed, `{1, counter}` (as
/// [`WAIT`] gives it; 0 without fencing). Otherwise `{0, 0}`, and with an
/// intent id the intent is set (or renewed) unless another writer's is
/// there, so that no new reader is granted on this node meanwhile.
///
/// When none of the three keys exists (the common case), it grants at once
/// with two calls; otherwise it drops the ended readers' entries first (by
/// the node's clock) and looks closer. Inline, as [`READ`].
pub(crate) static WRITE: LazyLock<Script> = LazyLock::new(|| Script::new(WRITE_CODE));

pub(super) const WRITE_CODE: &str = concat!(
    r#"local granted = redis.call("exists", KEYS[1], KEYS[2], KEYS[3]) == 0
local ours = false
if not granted then
    local time = redis.call("time")
    local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    redis.call("zremrangebyscore", KEYS[2], "-inf", now)
    local intent = redis.call("get", KEYS[3])
    ours = ARGV[3] ~= "" and intent == ARGV[3]
    if not intent or ours then
        granted = redis.call("exists", KEYS[1], KEYS[2]) == 0
        if not granted and ARGV[3] ~= "" then
            redis.call("set", KEYS[3], ARGV[3], "PX", ARGV[4])
        end
    end
end
if not granted then
    return {0, 0}
end
redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2])
if ours then
    redis.call("del", KEYS[3])
end
if not KEYS[4] then
    return {1, 0}
end
"#,
    counter_lua!(),
    r#"return {1, next_counter(KEYS[4])}"#
);

/// Counts the readers in the readers' set `KEYS[1]` whose hold has not
/// ended on the node's clock. Changes nothing.
pub(crate) static COUNT_READERS: LazyLock<Script> =
    LazyLock::new(|| Script::new(COUNT_READERS_CODE));

pub(super) const COUNT_READERS_CODE: &str = concat!(
    rw_lua!(),
    r#"return redis.call("zcount", KEYS[1], "(" .. clock_ms(), "+inf")"#
);

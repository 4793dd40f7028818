//! The Lua scripts run on every node. Each is invoked by SHA (`EVALSHA`),
//! falling back to `EVAL`-and-load on `NOSCRIPT`. The scripts a client uses
//! are loaded on each node at first contact ([`for_client`]), so that a lock
//! call never pays the fallback's second round trip on a healthy node (over a
//! slow link it would not fit in the node timeout).

use std::sync::LazyLock;

use redis::Script;

/// Deletes `KEYS[1]` only while it holds our token `ARGV[1]`; with an
/// `ARGV[2]` (the release of a held lock, not the cleanup of a lost round), it
/// then publishes on the channel named after the key, so that clients waiting
/// for it retry at once. Returns 1 when it deleted the key, 0 when the key was
/// absent or held under another token.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_CODE));
const RELEASE_CODE: &str = r#"if redis.call("get", KEYS[1]) == ARGV[1] then
    redis.call("del", KEYS[1])
    if ARGV[2] then
        redis.call("publish", KEYS[1], "released")
    end
    return 1
else
    return 0
end"#;

/// Resets the TTL of `KEYS[1]` to `ARGV[2]` milliseconds only while it holds our
/// token `ARGV[1]`. Returns 1 when extended, 0 otherwise. It never deletes.
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_CODE));
const EXTEND_CODE: &str = r#"if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("pexpire", KEYS[1], ARGV[2])
else
    return 0
end"#;

/// Reads `KEYS[1]` and its remaining TTL in one step: `nil` when absent, else
/// `{value, pttl_ms}`. Fails with `WRONGTYPE` when the key is not a string.
pub(crate) static INSPECT: LazyLock<Script> = LazyLock::new(|| Script::new(INSPECT_CODE));
const INSPECT_CODE: &str = r#"local value = redis.call("get", KEYS[1])
if not value then
    return false
end
return {value, redis.call("pttl", KEYS[1])}"#;

/// Fenced acquisition: like `SET KEYS[1] ARGV[1] NX PX ARGV[2]` (reporting a
/// key of the wrong type), and when it sets the key, increments the node's
/// fencing counter `KEYS[2]` and returns it. A missing counter (a node
/// restarted without persistence) is first seeded from the server's `TIME` in
/// microseconds, so that it does not restart from zero. Returns 0 when the
/// key exists.
pub(crate) static ACQUIRE_FENCED: LazyLock<Script> =
    LazyLock::new(|| Script::new(ACQUIRE_FENCED_CODE));
const ACQUIRE_FENCED_CODE: &str = r#"if redis.call("get", KEYS[1]) then
    return 0
end
redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2])
if redis.call("exists", KEYS[2]) == 0 then
    local now = redis.call("time")
    redis.call("set", KEYS[2], tonumber(now[1]) * 1000000 + tonumber(now[2]))
end
return redis.call("incr", KEYS[2])"#;

/// Fencing write-back: only while `KEYS[1]` holds our token `ARGV[1]`, raises
/// the node's counter `KEYS[2]` to at least `ARGV[2]` (the token handed out).
/// Returns 1 when our key was there (the counter is now at least `ARGV[2]`),
/// 0 otherwise.
pub(crate) static FENCE_WRITE_BACK: LazyLock<Script> =
    LazyLock::new(|| Script::new(FENCE_WRITE_BACK_CODE));
const FENCE_WRITE_BACK_CODE: &str = r#"if redis.call("get", KEYS[1]) ~= ARGV[1] then
    return 0
end
local counter = tonumber(redis.call("get", KEYS[2]) or "0")
if counter < tonumber(ARGV[2]) then
    redis.call("set", KEYS[2], ARGV[2])
end
return 1"#;

/// The code of the scripts a client uses (with fencing on or off), for
/// `SCRIPT LOAD` at first contact.
pub(crate) fn for_client(fencing: bool) -> &'static [&'static str] {
    if fencing {
        &[
            RELEASE_CODE,
            EXTEND_CODE,
            ACQUIRE_FENCED_CODE,
            FENCE_WRITE_BACK_CODE,
        ]
    } else {
        &[RELEASE_CODE, EXTEND_CODE]
    }
}

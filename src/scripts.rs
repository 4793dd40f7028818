//! The Lua scripts run on every node. Each is loaded once per process and
//! invoked by SHA (`EVALSHA`), falling back to `EVAL`-and-load on `NOSCRIPT`.

use std::sync::LazyLock;

use redis::Script;

/// Deletes `KEYS[1]` only while it holds our token `ARGV[1]`. Returns 1 when it
/// deleted the key, 0 when the key was absent or held under another token.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("del", KEYS[1])
else
    return 0
end"#,
    )
});

/// Resets the TTL of `KEYS[1]` to `ARGV[2]` milliseconds only while it holds our
/// token `ARGV[1]`. Returns 1 when extended, 0 otherwise. It never deletes.
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("pexpire", KEYS[1], ARGV[2])
else
    return 0
end"#,
    )
});

/// Reads `KEYS[1]` and its remaining TTL in one step: `nil` when absent, else
/// `{value, pttl_ms}`. Fails with `WRONGTYPE` when the key is not a string.
pub(crate) static INSPECT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"local value = redis.call("get", KEYS[1])
if not value then
    return false
end
return {value, redis.call("pttl", KEYS[1])}"#,
    )
});

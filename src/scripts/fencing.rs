//! The fencing scripts: seeding a counter a node lost, and the write-back
//! that makes the next holder's token higher.

use std::sync::LazyLock;

use redis::Script;

/// Below this, a fencing counter was never seeded from a server clock (in
/// µs, about 2^50 today): the node lost it, and `INCR` restarted it from 1.
/// The queue script uses the same bound.
pub(crate) const UNSEEDED_BELOW: i64 = 1 << 40;

/// Seeds a fencing counter the node lost: only while `KEYS[1]` holds our
/// token `ARGV[1]`, raises the counter `KEYS[2]` to the server's `TIME` in
/// microseconds (a node restarted without persistence must not count again
/// from 1), then increments it and returns it. Returns 0 when our key is gone.
/// The fenced acquisition itself is no script: `SET NX GET PX` and `INCR` of
/// the counter, pipelined (see `node/`); this runs only after a grant whose
/// `INCR` found the counter missing.
pub(crate) static FENCE_SEED: LazyLock<Script> = LazyLock::new(|| Script::new(FENCE_SEED_CODE));

pub(super) const FENCE_SEED_CODE: &str = r#"local value = redis.call("get", KEYS[1])
if value ~= ARGV[1] and value ~= ARGV[1] .. "+" then
    return 0
end
local now = redis.call("time")
local seed = tonumber(now[1]) * 1000000 + tonumber(now[2])
if tonumber(redis.call("get", KEYS[2]) or "0") < seed then
    redis.call("set", KEYS[2], seed)
end
return redis.call("incr", KEYS[2])"#;

/// Fencing write-back: only while `KEYS[1]` holds our token `ARGV[1]`, raises
/// the node's counter `KEYS[2]` to at least `ARGV[2]` (the token handed out).
/// Returns 1 when our key was there (the counter is now at least `ARGV[2]`),
/// 0 otherwise.
pub(crate) static FENCE_WRITE_BACK: LazyLock<Script> =
    LazyLock::new(|| Script::new(FENCE_WRITE_BACK_CODE));

pub(super) const FENCE_WRITE_BACK_CODE: &str = r#"local value = redis.call("get", KEYS[1])
if value ~= ARGV[1] and value ~= ARGV[1] .. "+" then
    return 0
end
local counter = tonumber(redis.call("get", KEYS[2]) or "0")
if counter < tonumber(ARGV[2]) then
    redis.call("set", KEYS[2], ARGV[2])
end
return 1"#;

//! The scripts of a lock on several resources: all or none at once, the
//! gathering of a caller's plain locks, and their extension and release.

use std::sync::LazyLock;

use redis::Script;

/// Takes a lock on several resources ([`lock_all`](crate::Redlock::lock_all)),
/// all or nothing: `KEYS[1..n]` (`n` = `ARGV[3]`) are the lock's keys and,
/// with fencing on, `KEYS[n + 1]` the fencing counter; `ARGV`: token, TTL in
/// ms, `n`. Sets every key (`SET PX`) only when none of them exists (a key
/// held, handed on to a waiter, or of another type refuses the whole set):
/// `{1, counter}` (the incremented fencing counter, as [`WAIT`] gives it;
/// 0 without fencing); otherwise it sets nothing: `{0, 0}`.
pub(crate) static ACQUIRE_ALL: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_ALL_CODE));

pub(super) const ACQUIRE_ALL_CODE: &str = concat!(
    counter_lua!(),
    r#"local n = tonumber(ARGV[3])
for i = 1, n do
    if redis.call("exists", KEYS[i]) == 1 then
        return {0, 0}
    end
end
for i = 1, n do
    redis.call("set", KEYS[i], ARGV[1], "PX", ARGV[2])
end
if KEYS[n + 1] then
    return {1, next_counter(KEYS[n + 1])}
end
return {1, 0}"#
);

/// Gathers a lock on several resources from the plain locks the caller
/// holds on each of them (a waiting [`lock_all`](crate::Redlock::lock_all),
/// see `sets.rs`), all or nothing: `KEYS[1..n]` (`n` = `ARGV[3]`) are the
/// lock's keys and, with fencing on, `KEYS[n + 1]` the fencing counter;
/// `ARGV`: the new token, TTL in ms, `n`, then for each key the token of the
/// caller's plain lock on it. Only when every key is absent or holds the
/// caller's token for it (marked or not), sets every key (`SET PX`) to the
/// new token (marked where the old one was, so that its release hands it on
/// to the key's waiters): `{1, counter}` (as [`ACQUIRE_ALL`] gives it);
/// otherwise it sets nothing: `{0, 0}`. A key of another type fails with
/// `WRONGTYPE`.
pub(crate) static GATHER: LazyLock<Script> = LazyLock::new(|| Script::new(GATHER_CODE));

pub(super) const GATHER_CODE: &str = concat!(
    counter_lua!(),
    r#"local n = tonumber(ARGV[3])
local marked = {}
for i = 1, n do
    local value = redis.call("get", KEYS[i])
    local held = ARGV[3 + i]
    if value == held .. "+" then
        marked[i] = "+"
    elseif value and value ~= held then
        return {0, 0}
    end
end
for i = 1, n do
    redis.call("set", KEYS[i], ARGV[1] .. (marked[i] or ""), "PX", ARGV[2])
end
if KEYS[n + 1] then
    return {1, next_counter(KEYS[n + 1])}
end
return {1, 0}"#
);

/// Resets the TTL of every key in `KEYS` (a lock on several resources) to
/// `ARGV[2]` milliseconds only while every one holds our token `ARGV[1]`
/// (marked or not): 1; otherwise it changes none: 0. It never deletes.
pub(crate) static EXTEND_ALL: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_ALL_CODE));

pub(super) const EXTEND_ALL_CODE: &str = r#"for _, key in ipairs(KEYS) do
    local value = redis.call("get", key)
    if value ~= ARGV[1] and value ~= ARGV[1] .. "+" then
        return 0
    end
end
for _, key in ipairs(KEYS) do
    redis.call("pexpire", key, ARGV[2])
end
return 1"#;

/// Gives up our hold on every key in `KEYS` (a lock on several resources)
/// that holds our token `ARGV[1]`, each as [`RELEASE`] does without a
/// waiter: deleted, or handed on to its queue's first live waiter when our
/// token is marked. Returns 1 when every key held our token, 0 otherwise.
pub(crate) static RELEASE_ALL: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_ALL_CODE));

pub(super) const RELEASE_ALL_CODE: &str = concat!(
    queue_lua!(),
    r#"local held = 0
for _, key in ipairs(KEYS) do
    local value = redis.call("get", key)
    if value == ARGV[1] then
        redis.call("del", key)
        held = held + 1
    elseif value == ARGV[1] .. "+" then
        hand_on(key, queue_of(key))
        held = held + 1
    end
end
if held == #KEYS then
    return 1
end
return 0"#
);

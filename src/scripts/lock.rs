//! The plain lock's scripts, with the queue of waiters: a waiter's
//! round (`WAIT`), the release that hands the key on, the extension, the
//! client's heartbeat, and the inspection of a key.

use std::sync::LazyLock;

use redis::Script;

/// Takes the lock for a waiter in the queue, or queues it. `KEYS`: the lock
/// key and, with fencing on, the fencing counter; beside the lock key lives
/// its queue (a sorted set of waiter ids by ticket; an entry is live while
/// its client's liveness key exists). `ARGV`: token, TTL in ms, waiter id,
/// ticket (0: join at the back), the client's liveness lifetime in ms.
///
/// First marks the waiter's client live (this round proves it). Sets the
/// key (`SET PX`) only when it is absent and the waiter is the queue's
/// first live entry (or the queue is empty), or when it holds this
/// waiter's reservation; a reservation for a waiter that is no longer
/// first is void. Granted: `{1, counter}` (the incremented fencing counter,
/// seeded from `TIME` when never seeded: missing, or below 2^40 after an
/// `INCR` on a node that lost it; or 0 without fencing), and the waiter
/// leaves the queue; the token is set marked (`+`) when others are still
/// queued. Otherwise the waiter is put in the queue (or kept there) under
/// its ticket: `{0, ticket}`; a free key (or a void reservation) is handed
/// on to the first live waiter, and a quorlock holder's unmarked token is
/// marked, keeping its TTL. A key of another type fails with `WRONGTYPE`.
pub(crate) static WAIT: LazyLock<Script> = LazyLock::new(|| Script::new(WAIT_CODE));

pub(super) const WAIT_CODE: &str = concat!(
    queue_lua!(),
    counter_lua!(),
    r#"local QUEUE = queue_of(KEYS[1])
local waiter = ARGV[3]
live(waiter, ARGV[5])
local value = redis.call("get", KEYS[1])
local first, left = nil, 0
if not value or is_reservation(value) then
    first, left = head(QUEUE)
    if value and string.sub(value, #reserved_prefix + 1) ~= first then
        value = nil
    end
end
if (not value and (not first or first == waiter)) or value == reserved_prefix .. waiter then
    local token = ARGV[1]
    if first then
        redis.call("zrem", QUEUE, waiter)
        if redis.call("exists", QUEUE) == 1 then
            token = token .. "+"
        end
    end
    redis.call("set", KEYS[1], token, "PX", ARGV[2])
    if KEYS[2] then
        return {1, next_counter(KEYS[2])}
    end
    return {1, 0}
end
if not value then
    reserve(KEYS[1], first, left)
elseif markable(value) then
    mark(KEYS[1], value)
end
return {0, enqueue(QUEUE, waiter, tonumber(ARGV[4]))}"#
);

/// Gives up our hold on `KEYS[1]` (the lock key, beside which lives its
/// queue): only while the key holds our token `ARGV[1]`, it hands the key
/// on to the queue's first live waiter (a reservation that lives as long as
/// that waiter's client's liveness key, published on the channel of the
/// waiter's client, `quorlock-wake:` and the client id, with the waiter id,
/// a space and the lock key as message), or deletes it when nobody waits.
/// Returns 1 when the key held our token, 0 otherwise.
///
/// With a waiter id `ARGV[2]` and `ARGV[3]`: a ticket `>= 0` (the cleanup of
/// a lost round) first puts the waiter back in the queue under that ticket
/// (0: at the back) when the key held our token, so that it keeps its place,
/// and marks its client live for `ARGV[4]` ms; `-1` (the waiter leaves: it
/// gave up, was cancelled or won) removes the waiter from the queue and also
/// hands on a reservation made for it.
///
/// The key may hold our token marked (`ARGV[1]` and `+`: waiters are queued
/// behind us, see `queue/`); the release of our unmarked token (nobody
/// waits) is settled before the shared Lua is even defined: it costs what a
/// plain compare-and-delete costs.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_CODE));

pub(super) const RELEASE_CODE: &str = concat!(
    r#"local value = redis.call("get", KEYS[1])
if not ARGV[2] then
    if value == ARGV[1] then
        redis.call("del", KEYS[1])
        return 1
    end
    if value ~= ARGV[1] .. "+" then
        return 0
    end
end
"#,
    queue_lua!(),
    r#"local QUEUE = queue_of(KEYS[1])
local held = value == ARGV[1] or value == ARGV[1] .. "+"
local ours = held
local waiter = ARGV[2]
if waiter then
    local ticket = tonumber(ARGV[3])
    if ticket < 0 then
        redis.call("zrem", QUEUE, waiter)
        ours = ours or value == reserved_prefix .. waiter
    elseif ours then
        live(waiter, ARGV[4])
        enqueue(QUEUE, waiter, ticket)
    end
end
if ours then
    hand_on(KEYS[1], QUEUE)
end
if held then
    return 1
end
return 0"#
);

/// Resets the TTL of `KEYS[1]` to `ARGV[2]` milliseconds only while it holds our
/// token `ARGV[1]` (marked or not, as all scripts here take it: see
/// [`RELEASE`]). Returns 1 when extended, 0 otherwise. It never deletes.
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_CODE));

pub(super) const EXTEND_CODE: &str = r#"local value = redis.call("get", KEYS[1])
if value == ARGV[1] or value == ARGV[1] .. "+" then
    return redis.call("pexpire", KEYS[1], ARGV[2])
else
    return 0
end"#;

/// A client's heartbeat on one node (see `session.rs`): keeps the client's
/// liveness key `ARGV[1]` for `ARGV[2]` ms (the entries of its waiters live
/// while it does), and checks each lock key in `KEYS` that the client waits
/// on: a free key or a void reservation is handed on to the queue's first
/// live waiter (as a release hands it on), an unmarked quorlock holder with
/// waiters queued is marked (so that its release hands on), and the queue
/// lives on. Returns `{alive, wait..., first...}`: `alive` 1 when the
/// liveness key was still there (0: the node lost it or it expired, and the
/// client's entries there may be gone), then per key how long, in ms,
/// nothing there needs a look: the `PTTL` of a quorlock holder or a
/// reservation (their release or claim notifies, their expiry does not), 0
/// for a foreign holder (its release notifies nobody) or a key free with
/// nobody queued; then per key 1 when a quorlock holder holds it and the
/// queue's first entry is a waiter of this client (its ids start with the
/// liveness key and a dot), else 0: that holder's release hands the key on
/// to this client's waiter and notifies it.
pub(crate) static HEARTBEAT: LazyLock<Script> = LazyLock::new(|| Script::new(HEARTBEAT_CODE));

pub(super) const HEARTBEAT_CODE: &str = concat!(
    queue_lua!(),
    r#"local alive = redis.call("pexpire", ARGV[1], ARGV[2])
if alive == 0 then
    redis.call("set", ARGV[1], "1", "PX", ARGV[2])
end
local checks, firsts = {alive}, {}
local ours = ARGV[1] .. "."
for _, key in ipairs(KEYS) do
    local queue = queue_of(key)
    local value = settle(key, queue)
    local wait, first = 0, 0
    local queued = redis.call("pttl", queue)
    local holder = markable(value) or (value and #value == 34
        and string.find(value, "^q%x+%+$"))
    if holder or is_reservation(value) then
        if markable(value) and queued ~= -2 then
            mark(key, value)
        end
        wait = redis.call("pttl", key)
    end
    if holder and queued ~= -2 then
        local head = redis.call("zrange", queue, 0, 0)[1]
        if head and string.sub(head, 1, #ours) == ours then
            first = 1
        end
    end
    if queued ~= -2 and queued < queue_lifetime / 2 then
        redis.call("pexpire", queue, queue_lifetime)
    end
    checks[#checks + 1] = wait
    firsts[#firsts + 1] = first
end
for _, first in ipairs(firsts) do
    checks[#checks + 1] = first
end
return checks"#
);

/// Reads `KEYS[1]` and its remaining TTL in one step: `nil` when absent, else
/// `{value, pttl_ms}`. Fails with `WRONGTYPE` when the key is not a string.
pub(crate) static INSPECT: LazyLock<Script> = LazyLock::new(|| Script::new(INSPECT_CODE));

pub(super) const INSPECT_CODE: &str = r#"local value = redis.call("get", KEYS[1])
if not value then
    return false
end
return {value, redis.call("pttl", KEYS[1])}"#;

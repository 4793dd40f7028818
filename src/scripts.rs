//! The Lua scripts run on every node. Each is invoked by SHA (`EVALSHA`),
//! falling back to `EVAL`-and-load on `NOSCRIPT`. The scripts a client uses
//! are loaded on each node at first contact ([`for_client`]), so that a lock
//! call never pays the fallback's second round trip on a healthy node (over a
//! slow link it would not fit in the node timeout).

use std::sync::LazyLock;

use redis::Script;

/// The Lua shared by the scripts that touch the queue of waiters (see
/// `queue.rs`): the name of a lock key's queue (beside the lock key, on the
/// same node), a waiter's client's liveness key and client id (from the
/// waiter id: the liveness key, a dot and a number), marking a waiting
/// client live, the queue's first waiter whose client is live (the entries
/// of dead clients before it are dropped), handing a free key on to it,
/// settling a free key or a void reservation, and putting a waiter in the
/// queue.
macro_rules! queue_lua {
    () => {
        r#"local reserved_prefix = "quorlock-next:"
local queue_lifetime = 60000
local function queue_of(key)
    return key .. ":quorlock-queue"
end
local function client_of(waiter)
    return string.match(waiter, "^(.*:(q%x+))%.%d+$")
end
local function live(waiter, lifetime)
    local key = client_of(waiter)
    if key then
        redis.call("set", key, "1", "PX", lifetime)
    end
end
local function head(queue)
    while true do
        local first = redis.call("zrange", queue, 0, 0)[1]
        if not first then
            return nil, 0
        end
        local key = client_of(first)
        if key then
            local left = redis.call("pttl", key)
            if left > 0 then
                return first, left
            end
        end
        redis.call("zrem", queue, first)
    end
end
local function reserve(key, first, left)
    redis.call("set", key, reserved_prefix .. first, "PX", left)
    local _, client = client_of(first)
    redis.call("publish", "quorlock-wake:" .. client, first .. " " .. key)
end
local function hand_on(key, queue)
    local first, left = head(queue)
    if first then
        reserve(key, first, left)
    else
        redis.call("del", key)
    end
end
local function is_reservation(value)
    return value and string.sub(value, 1, #reserved_prefix) == reserved_prefix
end
local function settle(key, queue)
    local value = redis.call("get", key)
    if value and not is_reservation(value) then
        return value
    end
    local first, left = head(queue)
    if value and string.sub(value, #reserved_prefix + 1) == first then
        return value
    end
    if first then
        reserve(key, first, left)
        return reserved_prefix .. first
    end
    if value then
        redis.call("del", key)
    end
    return nil
end
local function enqueue(queue, waiter, ticket)
    if ticket <= 0 then
        local existing = redis.call("zscore", queue, waiter)
        if existing then
            ticket = tonumber(existing)
        else
            local last = redis.call("zrange", queue, -1, -1, "withscores")
            ticket = math.floor(tonumber(last[2] or "0")) + 1
        end
    end
    redis.call("zadd", queue, string.format("%d", ticket), waiter)
    if redis.call("pttl", queue) < queue_lifetime / 2 then
        redis.call("pexpire", queue, queue_lifetime)
    end
    return ticket
end
local function markable(value)
    return value and #value == 33 and string.find(value, "^q%x+$") ~= nil
end
local function mark(key, value)
    local pttl = redis.call("pttl", key)
    if pttl > 0 then
        redis.call("set", key, value .. "+", "PX", pttl)
    end
end
"#
    };
}

/// The Lua of the scripts that take a fencing counter with the lock:
/// `next_counter(key)` increments the counter at `key`, seeded first from
/// the server's `TIME` in µs when never seeded (missing, or below 2^40
/// after an `INCR` on a node that lost it; see `UNSEEDED_BELOW`).
macro_rules! counter_lua {
    () => {
        r#"local function next_counter(key)
    local time = redis.call("time")
    local seed = tonumber(time[1]) * 1000000 + tonumber(time[2])
    if tonumber(redis.call("get", key) or "0") < 1099511627776 then
        redis.call("set", key, seed)
    end
    return redis.call("incr", key)
end
"#
    };
}

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
const WAIT_CODE: &str = concat!(
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
/// behind us, see `queue.rs`); the release of our unmarked token (nobody
/// waits) is settled before the shared Lua is even defined: it costs what a
/// plain compare-and-delete costs.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_CODE));
const RELEASE_CODE: &str = concat!(
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
const EXTEND_CODE: &str = r#"local value = redis.call("get", KEYS[1])
if value == ARGV[1] or value == ARGV[1] .. "+" then
    return redis.call("pexpire", KEYS[1], ARGV[2])
else
    return 0
end"#;

/// Takes a lock on several resources ([`lock_all`](crate::Redlock::lock_all)),
/// all or nothing: `KEYS[1..n]` (`n` = `ARGV[3]`) are the lock's keys and,
/// with fencing on, `KEYS[n + 1]` the fencing counter; `ARGV`: token, TTL in
/// ms, `n`. Sets every key (`SET PX`) only when none of them exists (a key
/// held, handed on to a waiter, or of another type refuses the whole set):
/// `{1, counter}` (the incremented fencing counter, as [`WAIT`] gives it;
/// 0 without fencing); otherwise it sets nothing: `{0, 0}`.
pub(crate) static ACQUIRE_ALL: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_ALL_CODE));
const ACQUIRE_ALL_CODE: &str = concat!(
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
const GATHER_CODE: &str = concat!(
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
const EXTEND_ALL_CODE: &str = r#"for _, key in ipairs(KEYS) do
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
const RELEASE_ALL_CODE: &str = concat!(
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

/// A client's heartbeat on one node (see `session.rs`): keeps the client's
/// liveness key `ARGV[1]` for `ARGV[2]` ms (the entries of its waiters live
/// while it does), and checks each lock key in `KEYS` that the client waits
/// on: a free key or a void reservation is handed on to the queue's first
/// live waiter (as a release hands it on), an unmarked quorlock holder with
/// waiters queued is marked (so that its release hands on), and the queue
/// lives on. Returns `{alive, wait...}`: `alive` 1 when the liveness key
/// was still there (0: the node lost it or it expired, and the client's
/// entries there may be gone), then per key how long, in ms, nothing there
/// needs a look: the `PTTL` of a quorlock holder or a reservation (their
/// release or claim notifies, their expiry does not), 0 for a foreign
/// holder (its release notifies nobody) or a key free with nobody queued.
pub(crate) static HEARTBEAT: LazyLock<Script> = LazyLock::new(|| Script::new(HEARTBEAT_CODE));
const HEARTBEAT_CODE: &str = concat!(
    queue_lua!(),
    r#"local alive = redis.call("pexpire", ARGV[1], ARGV[2])
if alive == 0 then
    redis.call("set", ARGV[1], "1", "PX", ARGV[2])
end
local checks = {alive}
for _, key in ipairs(KEYS) do
    local queue = queue_of(key)
    local value = settle(key, queue)
    local wait = 0
    local queued = redis.call("pttl", queue)
    if markable(value) or is_reservation(value) or (value and #value == 34
        and string.find(value, "^q%x+%+$")) then
        if markable(value) and queued ~= -2 then
            mark(key, value)
        end
        wait = redis.call("pttl", key)
    end
    if queued ~= -2 and queued < queue_lifetime / 2 then
        redis.call("pexpire", queue, queue_lifetime)
    end
    checks[#checks + 1] = wait
end
return checks"#
);

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
const READ_CODE: &str = r#"if redis.call("exists", KEYS[2], KEYS[3]) > 0 then
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
const READ_EXTEND_CODE: &str = concat!(
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
const WRITE_CODE: &str = concat!(
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
const COUNT_READERS_CODE: &str = concat!(
    rw_lua!(),
    r#"return redis.call("zcount", KEYS[1], "(" .. clock_ms(), "+inf")"#
);

/// A leader's record (see `election.rs`): while the lock key `KEYS[1]` holds
/// our token `ARGV[1]` (marked or not), writes `ARGV[2]` to the record
/// `KEYS[2]` (no TTL) and returns 1; an empty `ARGV[2]` instead deletes the
/// record where it starts with our token, whether or not the lock is still
/// ours, and returns 1 when it did. Otherwise 0.
pub(crate) static RECORD: LazyLock<Script> = LazyLock::new(|| Script::new(RECORD_CODE));
const RECORD_CODE: &str = r#"if ARGV[2] == "" then
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

/// Reads `KEYS[1]` and its remaining TTL in one step: `nil` when absent, else
/// `{value, pttl_ms}`. Fails with `WRONGTYPE` when the key is not a string.
pub(crate) static INSPECT: LazyLock<Script> = LazyLock::new(|| Script::new(INSPECT_CODE));
const INSPECT_CODE: &str = r#"local value = redis.call("get", KEYS[1])
if not value then
    return false
end
return {value, redis.call("pttl", KEYS[1])}"#;

/// Below this, a fencing counter was never seeded from a server clock (in
/// µs, about 2^50 today): the node lost it, and `INCR` restarted it from 1.
/// The queue script uses the same bound.
pub(crate) const UNSEEDED_BELOW: i64 = 1 << 40;

/// Seeds a fencing counter the node lost: only while `KEYS[1]` holds our
/// token `ARGV[1]`, raises the counter `KEYS[2]` to the server's `TIME` in
/// microseconds (a node restarted without persistence must not count again
/// from 1), then increments it and returns it. Returns 0 when our key is gone.
/// The fenced acquisition itself is no script: `SET NX GET PX` and `INCR` of
/// the counter, pipelined (see `node.rs`); this runs only after a grant whose
/// `INCR` found the counter missing.
pub(crate) static FENCE_SEED: LazyLock<Script> = LazyLock::new(|| Script::new(FENCE_SEED_CODE));
const FENCE_SEED_CODE: &str = r#"local value = redis.call("get", KEYS[1])
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
const FENCE_WRITE_BACK_CODE: &str = r#"local value = redis.call("get", KEYS[1])
if value ~= ARGV[1] and value ~= ARGV[1] .. "+" then
    return 0
end
local counter = tonumber(redis.call("get", KEYS[2]) or "0")
if counter < tonumber(ARGV[2]) then
    redis.call("set", KEYS[2], ARGV[2])
end
return 1"#;

/// A note of a clock step (see `clock.rs`): in the hash `KEYS[1]`, sets the
/// field `ARGV[1]` (the `run_id` of the node whose clock stepped) to this
/// node's time in ms plus `ARGV[2]` (how long that node is held back, ms),
/// unless it holds a later time already, and keeps the hash for at least
/// `ARGV[2]`. Returns 1. Loaded on first use (steps are rare).
pub(crate) static CLOCK_NOTE: LazyLock<Script> = LazyLock::new(|| Script::new(CLOCK_NOTE_CODE));
const CLOCK_NOTE_CODE: &str = r#"local now = redis.call("time")
local hold = tonumber(ARGV[2])
local until_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + hold
if tonumber(redis.call("hget", KEYS[1], ARGV[1]) or "0") < until_ms then
    redis.call("hset", KEYS[1], ARGV[1], until_ms)
end
if redis.call("pttl", KEYS[1]) < hold then
    redis.call("pexpire", KEYS[1], hold)
end
return 1"#;

/// The code of the scripts a client uses (with fencing on or off), for
/// `SCRIPT LOAD` at first contact: all of [`CLIENT_SCRIPTS`], or all but the
/// fencing scripts at its end.
pub(crate) fn for_client(fencing: bool) -> &'static [&'static str] {
    let fencing_scripts = 2;
    let used = CLIENT_SCRIPTS.len() - if fencing { 0 } else { fencing_scripts };
    &CLIENT_SCRIPTS[..used]
}

/// Every script a client may run by `EVALSHA`, the fencing scripts last.
const CLIENT_SCRIPTS: [&str; 13] = [
    WAIT_CODE,
    RELEASE_CODE,
    HEARTBEAT_CODE,
    EXTEND_CODE,
    ACQUIRE_ALL_CODE,
    GATHER_CODE,
    EXTEND_ALL_CODE,
    RELEASE_ALL_CODE,
    READ_CODE,
    READ_EXTEND_CODE,
    WRITE_CODE,
    FENCE_SEED_CODE,
    FENCE_WRITE_BACK_CODE,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_loads_the_fencing_scripts_only_with_fencing_on() {
        let fenced = [FENCE_SEED_CODE, FENCE_WRITE_BACK_CODE];
        assert_eq!(for_client(true).len(), CLIENT_SCRIPTS.len());
        assert!(fenced.iter().all(|code| for_client(true).contains(code)));
        assert!(!fenced.iter().any(|code| for_client(false).contains(code)));
        assert_eq!(for_client(false).len(), CLIENT_SCRIPTS.len() - fenced.len());
    }

    #[test]
    fn the_scripts_mark_reservations_as_the_client_reads_them() {
        let marked = format!(
            "local reserved_prefix = \"{}\"",
            crate::queue::entries::RESERVED_PREFIX
        );
        assert!(WAIT_CODE.contains(&marked) && RELEASE_CODE.contains(&marked));
    }

    #[test]
    fn the_scripts_publish_on_the_channel_the_client_listens_to() {
        let channel = format!("\"{}\" .. client", crate::notify::WAKE_CHANNEL_PREFIX);
        assert!(WAIT_CODE.contains(&channel) && RELEASE_CODE.contains(&channel));
    }

    #[test]
    fn the_scripts_take_our_token_marked_as_the_client_marks_and_makes_it() {
        use crate::request::{MARK, TOKEN_LEN};
        // Every script that acts on our key accepts the token with the mark.
        let marked = format!("ARGV[1] .. \"{MARK}\"");
        for code in [
            RELEASE_CODE,
            EXTEND_CODE,
            EXTEND_ALL_CODE,
            RELEASE_ALL_CODE,
            FENCE_SEED_CODE,
            FENCE_WRITE_BACK_CODE,
            RECORD_CODE,
        ] {
            assert!(code.contains(&marked), "{code}");
        }
        // The queue script marks only values of our tokens' form.
        let form = format!("#value == {TOKEN_LEN} and string.find(value, \"^q%x+$\")");
        assert!(WAIT_CODE.contains(&form) && WAIT_CODE.contains(&format!("\"{MARK}\"")));
    }

    #[test]
    fn the_queue_script_seeds_counters_below_the_clients_bound() {
        let bound = format!("< {}", UNSEEDED_BELOW);
        assert!(WAIT_CODE.contains(&bound));
    }

    #[test]
    fn the_scripts_name_the_queue_keys_as_the_client_refuses_them() {
        let suffix = String::from_utf8_lossy(crate::queue::entries::QUEUE_SUFFIX);
        let named = format!("return key .. \"{suffix}\"");
        for code in [WAIT_CODE, RELEASE_CODE, RELEASE_ALL_CODE, HEARTBEAT_CODE] {
            assert!(code.contains(&named));
        }
        let lifetime = crate::queue::entries::QUEUE_LIFETIME.as_millis();
        assert!(WAIT_CODE.contains(&format!("local queue_lifetime = {lifetime}\n")));
    }
}

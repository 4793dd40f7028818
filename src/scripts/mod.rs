//! The Lua scripts run on every node. Each is invoked by SHA (`EVALSHA`),
//! falling back to `EVAL`-and-load on `NOSCRIPT`. The scripts a client uses
//! are loaded on each node at first contact ([`for_client`]), so that a lock
//! call never pays the fallback's second round trip on a healthy node (over a
//! slow link it would not fit in the node timeout).
//!
//! # The files
//!
//! The Lua the scripts share, here (`queue_lua!`, `counter_lua!`); then a
//! file per kind of lock: `lock.rs` (the plain lock and its queue),
//! `sets.rs` (several resources), `rw.rs` (read-write), `fencing.rs`, and
//! `records.rs` (a leader's record, the notes of clock steps).

/// The Lua shared by the scripts that touch the queue of waiters (see
/// `queue/`): the name of a lock key's queue (beside the lock key, on the
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

mod fencing;
mod lock;
mod records;
mod rw;
mod sets;

pub(crate) use fencing::{FENCE_SEED, FENCE_WRITE_BACK, UNSEEDED_BELOW};
use fencing::{FENCE_SEED_CODE, FENCE_WRITE_BACK_CODE};
pub(crate) use lock::{EXTEND, HEARTBEAT, INSPECT, RELEASE, WAIT};
use lock::{EXTEND_CODE, HEARTBEAT_CODE, RELEASE_CODE, WAIT_CODE};
pub(crate) use records::{CLOCK_NOTE, MARK_CODE, MARK_READ_CODE, RECORD, SETTINGS_CODE};
pub(crate) use rw::{COUNT_READERS, READ, READ_EXTEND, WRITE};
use rw::{READ_CODE, READ_EXTEND_CODE, WRITE_CODE};
pub(crate) use sets::{ACQUIRE_ALL, EXTEND_ALL, GATHER, RELEASE_ALL};
use sets::{ACQUIRE_ALL_CODE, EXTEND_ALL_CODE, GATHER_CODE, RELEASE_ALL_CODE};

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
    use super::records::RECORD_CODE;
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

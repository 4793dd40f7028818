//! The checker: who is inside the critical section, kept in a separate
//! Redis outside the faults. Each holder enters with the end of its
//! validity (on the machine's wall clock, which every worker process
//! shares) and leaves when it is done; an entry finds, in one script, every
//! holder still inside, and tells apart an **overlap** (the entrant and a
//! holder inside both valid at that instant: two holders) from a holder
//! past its validity on either side: one inside that stalled past its
//! lease (an **overstay**), or an entrant whose validity ended before it
//! came in (a **late entry**: a stall between its grant and its entry).
//! Neither is two valid holders; no lease can prevent them, and fencing
//! tokens are for them.
//!
//! Each holder's end is its own, and the entrant's counts too: a checker
//! that kept one counter of holders and the last entrant's end took both
//! for overlaps (an overstaying holder, then two more holders while it was
//! still inside: the third read the second's end, still running, though
//! the second had left; or an entrant that came in late beside a valid
//! holder).
//!
//! Each resource has its own set of holders inside ([`enter_as`]), and each
//! holder its [`Mode`]: alone (a lock), a reader (beside other readers
//! only) or one of a counted few (a semaphore's permits).

use redis::aio::MultiplexedConnection;

/// The sorted set of the holders inside, each scored by the end of its
/// validity (µs since the Unix epoch).
pub const INSIDE: &str = "chaos:inside";

/// Enters `KEYS[1]` as `ARGV[1]`, valid until `ARGV[2]` (µs), in mode
/// `ARGV[3]` (see [`Mode`]; the member is `ARGV[1] .. "." .. ARGV[3]`):
/// returns `{overlaps, overstays, late}`: where the entrant's validity runs
/// past now (the checker's `TIME`), the holders inside whose validity does
/// too and that the entrant's mode excludes (for a counted mode, those
/// beyond `ARGV[4] - 1`); the holders inside whose validity has ended; and
/// 1 where the entrant's own has.
const ENTER: &str = r#"local time = redis.call("time")
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local valid = tonumber(ARGV[2]) > now
local mode = ARGV[3]
local inside = redis.call("zrange", KEYS[1], 0, -1, "withscores")
local conflicts, overstays = 0, 0
for i = 2, #inside, 2 do
    if tonumber(inside[i]) <= now then
        overstays = overstays + 1
    elseif valid and (mode ~= "r" or string.sub(inside[i - 1], -1) ~= "r") then
        conflicts = conflicts + 1
    end
end
local overlaps = conflicts
if mode == "c" then
    overlaps = math.max(0, conflicts - tonumber(ARGV[4]) + 1)
end
redis.call("zadd", KEYS[1], ARGV[2], ARGV[1] .. "." .. mode)
return {overlaps, overstays, valid and 0 or 1}"#;

/// How a holder shares what it holds: the rule its entry is checked by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Alone: every other valid holder is an overlap (a lock, a set's
    /// member, a writer, a leader, a semaphore's slot).
    Exclusive,
    /// A reader: only valid holders that are not readers are overlaps.
    Reader,
    /// One of at most this many: the valid holders beyond one less are
    /// overlaps (a semaphore's permits).
    Counted(u32),
}

impl Mode {
    /// Its tag in the member's name.
    fn tag(self) -> &'static str {
        match self {
            Mode::Exclusive => "x",
            Mode::Reader => "r",
            Mode::Counted(_) => "c",
        }
    }
}

/// What a holder found inside when it entered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Entry {
    /// Holders inside valid at the instant the entrant, valid too, came
    /// in: each an overlap.
    pub overlaps: u64,
    /// Holders inside past their validity.
    pub overstays: u64,
    /// The entrant's own validity had ended (1) or not (0).
    pub late: u64,
}

/// Enters the critical section as `holder` (unique per acquisition),
/// valid until `valid_until_us` (µs since the Unix epoch), alone.
pub async fn enter(
    checker: &mut MultiplexedConnection,
    holder: &str,
    valid_until_us: u64,
) -> redis::RedisResult<Entry> {
    enter_as(checker, INSIDE, holder, valid_until_us, Mode::Exclusive).await
}

/// Enters the critical section whose holders are kept in `inside`, as
/// `holder` valid until `valid_until_us`, in `mode`.
pub async fn enter_as(
    checker: &mut MultiplexedConnection,
    inside: &str,
    holder: &str,
    valid_until_us: u64,
    mode: Mode,
) -> redis::RedisResult<Entry> {
    let capacity = match mode {
        Mode::Counted(capacity) => capacity,
        _ => 1,
    };
    let (overlaps, overstays, late): (u64, u64, u64) = redis::Script::new(ENTER)
        .key(inside)
        .arg(holder)
        .arg(valid_until_us)
        .arg(mode.tag())
        .arg(capacity)
        .invoke_async(checker)
        .await?;
    Ok(Entry {
        overlaps,
        overstays,
        late,
    })
}

/// Leaves the critical section.
pub async fn leave(checker: &mut MultiplexedConnection, holder: &str) -> redis::RedisResult<()> {
    leave_from(checker, INSIDE, holder, Mode::Exclusive).await
}

/// Leaves the critical section kept in `inside`, entered in `mode`.
pub async fn leave_from(
    checker: &mut MultiplexedConnection,
    inside: &str,
    holder: &str,
    mode: Mode,
) -> redis::RedisResult<()> {
    let _: i64 = redis::cmd("ZREM")
        .arg(inside)
        .arg(format!("{holder}.{}", mode.tag()))
        .query_async(checker)
        .await?;
    Ok(())
}

/// A holder's name, unique across the run: this process's id and the
/// number of its acquisition.
pub fn holder_id() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let number = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}.{number}", std::process::id())
}

/// Microseconds since the Unix epoch on this machine's wall clock.
pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
        })
}

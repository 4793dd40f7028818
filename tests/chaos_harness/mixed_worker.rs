//! A worker task of the run with every fault (`mixed.rs`): each turn it
//! takes one of the primitives, drawn at random, and checks it on the
//! checker, resource by resource:
//! - a plain lock on `m0` or `m1` (alone, token above the last holder's);
//!   half the worker processes take it with `queueing(false)` (they poll
//!   where the others queue, as a fleet does while it migrates from
//!   another Redlock client), and are counted apart;
//! - a set, `lock_all(m0, m1)` (alone on both, token above both);
//! - a read hold of the read-write lock `rw` (beside readers only) or its
//!   write hold (alone, token above the last writer's);
//! - a permit of the semaphore `sem` of [`PERMITS`] (one of at most that
//!   many on `sem`, alone on its slot, token above the slot's last);
//! - the leadership of the election `leader` (alone, term above the last
//!   leader's), campaigned for within the patience.
//!
//! Each holder enters every set of holders it belongs to (`checker.rs`),
//! stays in for the hold (and while the injector's `chaos:hold-on` is set,
//! within its validity), leaves, counts the acquisition and releases.

use std::time::{Duration, Instant};

use quorlock::{LockGuard, Redlock, Semaphore};
use rand::RngExt;
use redis::AsyncCommands;

use super::checker::{self, Mode};
use super::{AnyError, Hold, Tally};

/// The semaphore's permits.
pub const PERMITS: u32 = 3;

/// The primitives, in the order of their tallies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Primitive {
    Lock,
    /// A plain lock by a worker process whose client has `queueing(false)`.
    PolledLock,
    Set,
    Read,
    Write,
    Permit,
    Leader,
}

impl Primitive {
    pub const ALL: [Primitive; 7] = [
        Primitive::Lock,
        Primitive::PolledLock,
        Primitive::Set,
        Primitive::Read,
        Primitive::Write,
        Primitive::Permit,
        Primitive::Leader,
    ];

    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Primitive::Lock => "plain locks",
            Primitive::PolledLock => "plain locks, queue off",
            Primitive::Set => "sets of two",
            Primitive::Read => "read holds",
            Primitive::Write => "write holds",
            Primitive::Permit => "permits",
            Primitive::Leader => "leaderships",
        }
    }

    /// One drawn at random: plain locks a third of the time (polled where
    /// the worker's client does not queue), the others alike.
    fn draw(polling: bool) -> Primitive {
        match rand::rng().random_range(0..9) {
            0..=2 if polling => Primitive::PolledLock,
            0..=2 => Primitive::Lock,
            3 => Primitive::Set,
            4 => Primitive::Read,
            5 => Primitive::Write,
            6 | 7 => Primitive::Permit,
            _ => Primitive::Leader,
        }
    }
}

/// Per primitive: acquisitions, overlaps, failed calls.
pub type Tallies = [[u64; 3]; 7];

/// What a holder holds: released when it is done.
enum Held {
    Guard(LockGuard),
    Permit(quorlock::Permit),
    Leader(quorlock::Leadership),
}

impl Held {
    fn guard(&self) -> &LockGuard {
        match self {
            Held::Guard(guard) => guard,
            Held::Permit(permit) => permit,
            Held::Leader(leadership) => leadership,
        }
    }

    async fn release(self) {
        let _ = match self {
            Held::Guard(guard) => guard.unlock().await,
            Held::Permit(permit) => permit.release().await,
            Held::Leader(leadership) => leadership.resign().await,
        };
    }
}

/// One set of holders a holder enters: its key on the checker, the mode,
/// and whether the holder's token must rise above the last one there.
struct Place {
    inside: String,
    mode: Mode,
    fenced: bool,
}

impl Place {
    fn new(resource: &str, mode: Mode, fenced: bool) -> Place {
        Place {
            inside: format!("{}:{resource}", checker::INSIDE),
            mode,
            fenced,
        }
    }
}

/// Takes `primitive` within `patience`, and the places its holder enters;
/// `None` when the call failed.
async fn take(
    primitive: Primitive,
    redlock: &Redlock,
    semaphore: &Semaphore,
    patience: Duration,
    ttl: Duration,
) -> Option<(Held, Vec<Place>)> {
    let lock = rand::rng().random_range(0..2);
    Some(match primitive {
        Primitive::Lock | Primitive::PolledLock => {
            let guard = redlock.lock(format!("m{lock}"), ttl).await.ok()?;
            let place = Place::new(&format!("m{lock}"), Mode::Exclusive, true);
            (Held::Guard(guard), vec![place])
        }
        Primitive::Set => {
            let guard = redlock.lock_all(["m0", "m1"], ttl).await.ok()?;
            let places = ["m0", "m1"].map(|m| Place::new(m, Mode::Exclusive, true));
            (Held::Guard(guard), places.into())
        }
        Primitive::Read => {
            let guard = redlock.read("rw", ttl).await.ok()?;
            (
                Held::Guard(guard),
                vec![Place::new("rw", Mode::Reader, false)],
            )
        }
        Primitive::Write => {
            let guard = redlock.write("rw", ttl).await.ok()?;
            let place = Place::new("rw", Mode::Exclusive, true);
            (Held::Guard(guard), vec![place])
        }
        Primitive::Permit => {
            let permit = semaphore.acquire(ttl).await.ok()?;
            let slot = format!("sem:slot{}", permit.slot());
            let places = vec![
                Place::new("sem", Mode::Counted(PERMITS), false),
                Place::new(&slot, Mode::Exclusive, true),
            ];
            (Held::Permit(permit), places)
        }
        Primitive::Leader => {
            let identity = checker::holder_id();
            let campaign = redlock.campaign("leader", &identity, ttl);
            let leadership = tokio::time::timeout(patience, campaign).await.ok()?.ok()?;
            let place = Place::new("leader", Mode::Exclusive, true);
            (Held::Leader(leadership), vec![place])
        }
    })
}

/// Inside the critical section: the token must exceed the last holder's of
/// `KEYS[1]`.
pub(super) const FENCE_CHECK: &str = r#"local last = tonumber(redis.call("get", KEYS[1]) or "0")
if tonumber(ARGV[1]) <= last then return 0 end
redis.call("set", KEYS[1], ARGV[1])
return 1"#;

/// One task: takes primitives until the checker's `stop` key is set;
/// `polling`: its client has `queueing(false)`.
pub async fn task(
    redlock: Redlock,
    mut checker: redis::aio::MultiplexedConnection,
    hold: Hold,
    patience: Duration,
    polling: bool,
) -> Result<(Tally, Tallies), AnyError> {
    let semaphore = redlock.semaphore("sem", PERMITS)?;
    let mut tally = Tally::default();
    let mut tallies: Tallies = [[0; 3]; 7];
    loop {
        let Some(outage) = super::go_on(&mut checker).await? else {
            break;
        };
        let primitive = Primitive::draw(polling);
        let counts = &mut tallies[primitive as usize];
        let started = Instant::now();
        let (held, places) = match take(primitive, &redlock, &semaphore, patience, hold.ttl).await {
            Some(taken) => taken,
            None => {
                tally.failed += 1;
                counts[2] += 1;
                let _: i64 = checker.incr("chaos:failed", 1).await?;
                tally.longest_failed = tally.longest_failed.max(started.elapsed());
                continue;
            }
        };
        let still_out: Option<i64> = checker.get("chaos:outage").await?;
        if outage && still_out.is_some() {
            tally.granted_during_outage += 1;
        }
        let overlaps = inside(&mut checker, &held, &places, hold, &mut tally).await?;
        counts[0] += 1;
        counts[1] += overlaps;
        if overlaps > 0 {
            // For the injector, which tells which fault it was.
            let _: i64 = checker.incr("chaos:overlaps", overlaps).await?;
        }
        if overlaps > 0 && std::env::var_os("CHAOS_DEBUG").is_some() {
            tracing::error!(
                "overlap: worker {} entered {primitive:?} ({}) with {:?} of validity left",
                std::process::id(),
                places[0].inside,
                held.guard().remaining()
            );
        }
        held.release().await;
    }
    Ok((tally, tallies))
}

/// The critical section of `held`: enters each place, checks the tokens,
/// holds, leaves, counts the acquisition. Returns the overlaps found.
async fn inside(
    checker: &mut redis::aio::MultiplexedConnection,
    held: &Held,
    places: &[Place],
    hold: Hold,
    tally: &mut Tally,
) -> Result<u64, AnyError> {
    let guard = held.guard();
    let holder = checker::holder_id();
    let valid_until =
        checker::now_us() + u64::try_from(guard.remaining().as_micros()).unwrap_or(u64::MAX);
    let mut overlaps = 0;
    for place in places {
        let entry =
            checker::enter_as(checker, &place.inside, &holder, valid_until, place.mode).await?;
        overlaps += entry.overlaps;
        tally.overstays += entry.overstays + entry.late;
        if !place.fenced {
            continue;
        }
        let increased: i64 = match guard.fencing_token() {
            Some(token) => {
                redis::Script::new(FENCE_CHECK)
                    .key(format!("chaos:last-token:{}", place.inside))
                    .arg(token)
                    .invoke_async(checker)
                    .await?
            }
            None => 0,
        };
        if increased != 1 {
            tally.fencing_violations += 1;
        }
    }
    tally.overlaps += overlaps;
    hold.inside(checker, guard).await?;
    for place in places {
        checker::leave_from(checker, &place.inside, &holder, place.mode).await?;
    }
    let _: i64 = checker.incr("chaos:acquired", 1).await?;
    tally.acquisitions += 1;
    Ok(overlaps)
}

//! The chaos runs' checker (`chaos_harness/checker.rs`), against a real
//! Redis: an overlap is two holders valid at one instant; an overstay a
//! holder still inside after its validity ended; a late entry a holder that
//! comes in after its own ended; no sequence of entries and exits turns one
//! into another. Two of the sequences are ones that the checker before it
//! (one counter of holders and the last entrant's end of validity) took
//! for overlaps: a holder that stalled past its validity, then two more
//! holders while it was still inside; and a holder stalled between its
//! grant and its entry, coming in beside a valid one.

mod chaos_harness;
mod support;

use std::time::Duration;

use chaos_harness::checker::{Entry, Mode, enter, enter_as, holder_id, leave, leave_from, now_us};
use redis::AsyncCommands;
use support::RedisServer;

async fn checker(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// `us` from now, in µs since the Unix epoch.
fn in_us(us: u64) -> u64 {
    now_us() + us
}

/// A holder that stalls past its validity, then two holders after it, one
/// after the other, while it is still inside: two overstays, no overlap.
#[tokio::test]
async fn a_stalled_holder_and_two_more_after_it_are_overstays_not_an_overlap() {
    let server = RedisServer::start();
    let mut checker = checker(&server).await;
    let (a, b, c) = (holder_id(), holder_id(), holder_id());
    let none = Entry::default();
    assert_eq!(enter(&mut checker, &a, in_us(50_000)).await.unwrap(), none);
    // A's validity ends; A stays inside (stalled).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stalled = Entry {
        overstays: 1,
        ..Entry::default()
    };
    assert_eq!(
        enter(&mut checker, &b, in_us(1_000_000)).await.unwrap(),
        stalled
    );
    leave(&mut checker, &b).await.unwrap();
    // B left early, its validity still running: C finds A, not B.
    assert_eq!(
        enter(&mut checker, &c, in_us(1_000_000)).await.unwrap(),
        stalled
    );
    leave(&mut checker, &c).await.unwrap();
    leave(&mut checker, &a).await.unwrap();
}

/// A holder whose validity ended before it came in, beside a valid one:
/// a late entry, no overlap.
#[tokio::test]
async fn a_holder_that_comes_in_after_its_validity_beside_a_valid_one_is_late_not_an_overlap() {
    let server = RedisServer::start();
    let mut checker = checker(&server).await;
    let (valid, late) = (holder_id(), holder_id());
    enter(&mut checker, &valid, in_us(1_000_000)).await.unwrap();
    let entry = enter(&mut checker, &late, now_us() - 1_000).await.unwrap();
    let expected = Entry {
        late: 1,
        ..Entry::default()
    };
    assert_eq!(entry, expected);
    leave(&mut checker, &late).await.unwrap();
    leave(&mut checker, &valid).await.unwrap();
}

/// Two holders valid at once are an overlap, however they entered.
#[tokio::test]
async fn two_valid_holders_inside_are_an_overlap() {
    let server = RedisServer::start();
    let mut checker = checker(&server).await;
    let (a, b) = (holder_id(), holder_id());
    enter(&mut checker, &a, in_us(1_000_000)).await.unwrap();
    let entry = enter(&mut checker, &b, in_us(1_000_000)).await.unwrap();
    assert_eq!(entry.overlaps, 1, "{entry:?}");
    leave(&mut checker, &a).await.unwrap();
    leave(&mut checker, &b).await.unwrap();
    let c = holder_id();
    let alone = enter(&mut checker, &c, in_us(1_000_000)).await.unwrap();
    assert_eq!(alone, Entry::default(), "both left");
}

/// The checker before this one, replayed on the sequences above: `INCR`
/// of one counter of holders, and on a second holder inside, the end of
/// validity that the last entrant wrote. C read B's end (B had left, its
/// validity still running) and counted an overlap where A, inside, had
/// outlived its own; a late entrant read the valid holder's end and counted
/// one where it was itself past its validity. Either is the one overlap a
/// clock-step chaos run reported under load (see `checker.rs`).
#[tokio::test]
async fn the_counter_and_last_end_checker_took_an_overstay_for_an_overlap() {
    let server = RedisServer::start();
    let mut checker = checker(&server).await;
    // What the old checker counted at each entry: an overlap, or not.
    async fn old_enter(checker: &mut redis::aio::MultiplexedConnection, until: u64) -> bool {
        let holders: i64 = checker.incr("holders", 1).await.unwrap();
        let overlap = holders != 1 && {
            let last: Option<u64> = checker.get("valid-until-us").await.unwrap();
            last.is_none_or(|last| now_us() < last)
        };
        let _: () = checker.set("valid-until-us", until).await.unwrap();
        overlap
    }
    async fn old_leave(checker: &mut redis::aio::MultiplexedConnection) {
        let _: i64 = checker.decr("holders", 1).await.unwrap();
    }
    assert!(!old_enter(&mut checker, in_us(50_000)).await, "A");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !old_enter(&mut checker, in_us(1_000_000)).await,
        "B: an overstay"
    );
    old_leave(&mut checker).await;
    assert!(
        old_enter(&mut checker, in_us(1_000_000)).await,
        "C: the old checker's false overlap"
    );
    // And a late entrant beside a valid holder (C, still inside).
    old_leave(&mut checker).await;
    old_leave(&mut checker).await;
    assert!(
        !old_enter(&mut checker, in_us(1_000_000)).await,
        "a valid holder"
    );
    assert!(
        old_enter(&mut checker, now_us() - 1_000).await,
        "a late entry, the old checker's false overlap"
    );
}

/// Readers beside readers are no overlap; a writer beside a valid reader
/// is, and a reader beside a valid writer is.
#[tokio::test]
async fn readers_share_and_exclude_writers() {
    let server = RedisServer::start();
    let mut checker = checker(&server).await;
    let inside = "inside:rw";
    let (r1, r2, w, r3) = (holder_id(), holder_id(), holder_id(), holder_id());
    let until = in_us(1_000_000);
    let none = Entry::default();
    assert_eq!(
        enter_as(&mut checker, inside, &r1, until, Mode::Reader)
            .await
            .unwrap(),
        none
    );
    assert_eq!(
        enter_as(&mut checker, inside, &r2, until, Mode::Reader)
            .await
            .unwrap(),
        none
    );
    let writer = enter_as(&mut checker, inside, &w, until, Mode::Exclusive)
        .await
        .unwrap();
    assert_eq!(writer.overlaps, 2, "a writer beside two readers");
    leave_from(&mut checker, inside, &r1, Mode::Reader)
        .await
        .unwrap();
    leave_from(&mut checker, inside, &r2, Mode::Reader)
        .await
        .unwrap();
    let reader = enter_as(&mut checker, inside, &r3, until, Mode::Reader)
        .await
        .unwrap();
    assert_eq!(reader.overlaps, 1, "a reader beside the writer");
    leave_from(&mut checker, inside, &w, Mode::Exclusive)
        .await
        .unwrap();
    leave_from(&mut checker, inside, &r3, Mode::Reader)
        .await
        .unwrap();
    let alone = enter_as(&mut checker, inside, &w, until, Mode::Exclusive)
        .await
        .unwrap();
    assert_eq!(alone, none, "every holder left");
}

/// With 3 permits, 3 valid holders are no overlap, a fourth is one; an
/// expired fourth inside is an overstay, not an overlap.
#[tokio::test]
async fn a_counted_mode_allows_its_capacity() {
    let server = RedisServer::start();
    let mut checker = checker(&server).await;
    let inside = "inside:sem";
    let three = Mode::Counted(3);
    let until = in_us(1_000_000);
    let expired = holder_id();
    enter_as(&mut checker, inside, &expired, in_us(20_000), three)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (a, b, c, d) = (holder_id(), holder_id(), holder_id(), holder_id());
    for holder in [&a, &b, &c] {
        let entry = enter_as(&mut checker, inside, holder, until, three)
            .await
            .unwrap();
        assert_eq!(entry.overlaps, 0, "{entry:?}");
        assert_eq!(entry.overstays, 1, "{entry:?}");
    }
    let fourth = enter_as(&mut checker, inside, &d, until, three)
        .await
        .unwrap();
    assert_eq!(fourth.overlaps, 1, "{fourth:?}");
    leave_from(&mut checker, inside, &d, three).await.unwrap();
    leave_from(&mut checker, inside, &a, three).await.unwrap();
    let again = enter_as(&mut checker, inside, &d, until, three)
        .await
        .unwrap();
    assert_eq!(again.overlaps, 0, "{again:?}");
}

//! Lock, unlock, `with_lock`, and `keep_alive` with `lost`, against the Redis nodes named on the command
//! line (or in `QUORLOCK_NODES`, comma-separated).
//!
//! ```text
//! cargo run --example basic -- redis://127.0.0.1:7001 redis://127.0.0.1:7002 redis://127.0.0.1:7003
//! ```

mod common;

use std::time::Duration;

use quorlock::{Redlock, Unlocked};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let urls = common::node_urls("basic");

    let redlock = Redlock::builder(&urls)
        .acquire_timeout(Duration::from_secs(5))
        .build()?;
    println!(
        "{} node(s), quorum {}",
        redlock.node_count(),
        redlock.quorum()
    );

    // 1. Lock, work, unlock.
    let guard = redlock
        .lock("example:invoice-7", Duration::from_secs(10))
        .await?;
    println!(
        "locked {:?}, valid for {:?}",
        String::from_utf8_lossy(guard.resource()),
        guard.remaining()
    );
    // A second client cannot take it meanwhile.
    match redlock
        .try_lock("example:invoice-7", Duration::from_secs(10))
        .await
    {
        Err(err) if err.is_contended() => println!("second try_lock: {err}"),
        other => println!("second try_lock: unexpected {other:?}"),
    }
    match guard.unlock().await? {
        Unlocked::Released => println!("released"),
        Unlocked::Expired => println!("it had expired before the release"),
    }

    // 2. Work longer than the TTL under `with_lock`: the lock is extended
    //    while it runs, and the work is cancelled if the lock is lost.
    let total = redlock
        .with_lock("example:report", Duration::from_millis(500), async {
            tokio::time::sleep(Duration::from_millis(1200)).await;
            21 * 2
        })
        .await?;
    println!("with_lock returned {total} after outliving its 500 ms TTL");

    // 3. Work that is not one future: the guard extends itself in the
    //    background, and `lost()` tells the moment it can no longer be
    //    trusted; here the work (three batches) ends first.
    let guard = redlock
        .lock("example:export", Duration::from_millis(500))
        .await?;
    guard.keep_alive()?;
    let lost = guard.lost();
    tokio::pin!(lost);
    for batch in 1..=3 {
        tokio::select! {
            biased;
            err = &mut lost => return Err(err.into()),
            _ = tokio::time::sleep(Duration::from_millis(400)) => println!("batch {batch} written"),
        }
    }
    println!(
        "kept past its 500 ms TTL by {} extension(s)",
        guard.extensions()
    );
    guard.unlock().await?;
    // A `lost` future outliving its guard tells the release.
    println!("and after unlock, lost() says: {}", lost.await);
    Ok(())
}

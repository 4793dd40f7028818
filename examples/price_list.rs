//! A price list read by many and rewritten by one at a time, under a
//! read-write lock: 6 reader tasks read the list's two halves under `read`,
//! 2 writer tasks rewrite both halves (one write after the other, with a
//! pause between) under `write`, and no reader ever sees the halves from
//! two different versions. The list lives in the first node's Redis (a
//! stand-in for your store); the lock runs over every node named on the
//! command line (or in `QUORLOCK_NODES`, comma-separated).
//!
//! ```text
//! cargo run --example price_list -- redis://127.0.0.1:7001 redis://127.0.0.1:7002 redis://127.0.0.1:7003
//! ```

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use quorlock::Redlock;
use redis::AsyncCommands;

type AnyError = Box<dyn std::error::Error + Send + Sync>;

const TTL: Duration = Duration::from_secs(5);

#[tokio::main]
async fn main() -> Result<(), AnyError> {
    let urls = common::node_urls("price_list");
    let first = urls.first().map_or("", String::as_str); // never empty
    let redlock = Redlock::builder(&urls)
        .acquire_timeout(Duration::from_secs(10))
        .build()?;
    let mut store = redis::Client::open(first)?
        .get_multiplexed_async_connection()
        .await?;
    let () = store.set("prices:first-half", 0).await?;
    let () = store.set("prices:second-half", 0).await?;

    let (reads, torn) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let (redlock, mut store) = (redlock.clone(), store.clone());
        let (reads, torn) = (reads.clone(), torn.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..40 {
                let reader = redlock.read("prices", TTL).await?;
                let first: u64 = store.get("prices:first-half").await?;
                let second: u64 = store.get("prices:second-half").await?;
                if first != second {
                    torn.fetch_add(1, Ordering::Relaxed);
                }
                reads.fetch_add(1, Ordering::Relaxed);
                reader.unlock().await?;
            }
            Ok::<_, AnyError>(())
        }));
    }
    for _ in 0..2 {
        let (redlock, mut store) = (redlock.clone(), store.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                let writer = redlock.write("prices", TTL).await?;
                // Two writes with a pause between: a reader without the lock
                // could see the new first half beside the old second half.
                let version: u64 = store.incr("prices:first-half", 1).await?;
                tokio::time::sleep(Duration::from_millis(2)).await;
                let () = store.set("prices:second-half", version).await?;
                writer.unlock().await?;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok::<_, AnyError>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    redlock.flush().await;
    let version: u64 = store.get("prices:second-half").await?;
    let (reads, torn) = (reads.load(Ordering::Relaxed), torn.load(Ordering::Relaxed));
    println!("{reads} reads, {version} rewrites, {torn} torn reads");
    if torn > 0 {
        return Err(format!("{torn} readers saw a half-written list").into());
    }
    Ok(())
}

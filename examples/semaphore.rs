//! A semaphore: eight workers share a partner API that allows three calls
//! at once. Each takes a permit (waiting in the fair queue when all three
//! are taken), calls the API under it, and gives it back; one worker dies
//! holding its permit, which comes back when the permit's TTL ends. The
//! example counts the calls in progress and prints the most it saw at once
//! (never more than three) and each worker's share. Against the Redis nodes
//! named on the command line (or in `QUORLOCK_NODES`, comma-separated).
//!
//! ```text
//! cargo run --example semaphore -- redis://127.0.0.1:7001 redis://127.0.0.1:7002 redis://127.0.0.1:7003
//! ```

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use quorlock::Redlock;

const API: &str = "example:partner-api";
const PERMITS: u32 = 3;
const WORKERS: usize = 8;
const CALLS: usize = 5;
/// How long a permit lives unless renewed: a dead holder's comes back then.
const TTL: Duration = Duration::from_millis(800);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let urls = common::node_urls("semaphore");
    let redlock = Redlock::new(&urls)?;
    let api = redlock.semaphore(API, PERMITS)?;
    // The partner API's side: calls in progress, and the most at once.
    let in_progress = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));

    // One worker takes a permit and dies without giving it back.
    let lost = api.acquire(TTL).await?;
    let dead_slot = lost.slot();
    println!("a worker took slot {dead_slot} and died");
    lost.forget();
    let died = Instant::now();
    // When a worker first got the dead worker's slot, ms after it died.
    let back_ms = Arc::new(AtomicU64::new(0));

    let mut workers = Vec::new();
    for worker in 0..WORKERS {
        let (api, in_progress, most) = (api.clone(), in_progress.clone(), most.clone());
        let back_ms = back_ms.clone();
        workers.push(tokio::spawn(async move {
            for _ in 0..CALLS {
                // Waits, in the queue, for one of the three permits.
                let mut permit = api.acquire(TTL).await?;
                if permit.slot() == dead_slot {
                    let after = u64::try_from(died.elapsed().as_millis()).unwrap_or(u64::MAX);
                    let _ = back_ms.compare_exchange(0, after, Ordering::SeqCst, Ordering::SeqCst);
                }
                // The call runs under the permit: if it were lost (the
                // worker paused past its TTL), the call would be dropped.
                let call = permit.run(async {
                    let now = in_progress.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(60)).await;
                    in_progress.fetch_sub(1, Ordering::SeqCst);
                });
                call.await?;
                permit.release().await?;
            }
            println!("worker {worker}: {CALLS} calls");
            Ok::<(), quorlock::Error>(())
        }));
    }
    for worker in workers {
        worker.await??;
    }
    println!(
        "{} calls by {WORKERS} workers in {:?}; at most {} at once, of {PERMITS} permits",
        WORKERS * CALLS,
        died.elapsed(),
        most.load(Ordering::SeqCst)
    );
    match back_ms.load(Ordering::SeqCst) {
        0 => println!("the dead worker's slot {dead_slot} was not needed again"),
        ms => println!(
            "the dead worker's slot {dead_slot} came back {ms} ms after it died (TTL {TTL:?})"
        ),
    }
    redlock.flush().await;
    if most.load(Ordering::SeqCst) > PERMITS as usize {
        return Err("more calls at once than permits".into());
    }
    Ok(())
}

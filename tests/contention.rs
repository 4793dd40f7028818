//! Contention: many tasks, one resource, five nodes. Never two holders at
//! once, and a read-check-write stock of 100 sells exactly 100.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use quorlock::Redlock;
use redis::AsyncCommands;
use support::{RedisServer, servers, urls};

fn contended_client(nodes: &[RedisServer]) -> Redlock {
    Redlock::builder(urls(nodes))
        .node_timeout(Duration::from_millis(200))
        .retry_delay(Duration::from_millis(2))
        .retry_jitter(Duration::from_millis(2))
        .acquire_timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// 16 tasks take one lock thousands of times: the in-memory holder count
/// never exceeds one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_tasks_never_hold_the_lock_together() {
    const TASKS: usize = 16;
    const PER_TASK: usize = 200;
    let nodes = servers(5);
    let redlock = contended_client(&nodes);
    let holders = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let acquisitions = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (redlock, holders, overlaps, acquisitions) = (
            redlock.clone(),
            holders.clone(),
            overlaps.clone(),
            acquisitions.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..PER_TASK {
                let guard = redlock
                    .lock("contention:one", Duration::from_secs(5))
                    .await
                    .unwrap();
                if holders.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::task::yield_now().await;
                holders.fetch_sub(1, Ordering::SeqCst);
                acquisitions.fetch_add(1, Ordering::SeqCst);
                guard.unlock().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let acquisitions = acquisitions.load(Ordering::SeqCst);
    let overlaps = overlaps.load(Ordering::SeqCst);
    println!("contention: {acquisitions} acquisitions by {TASKS} tasks, {overlaps} overlaps");
    assert_eq!(acquisitions as usize, TASKS * PER_TASK);
    assert_eq!(overlaps, 0);
}

/// Buys one item with read-check-write on the stock kept in `store`; true if sold.
async fn buy_one(store: &mut redis::aio::MultiplexedConnection) -> bool {
    let stock: i64 = store.get("stock").await.unwrap();
    if stock <= 0 {
        return false;
    }
    // A slow service: the window between the read and the write.
    tokio::time::sleep(Duration::from_millis(1)).await;
    let _: () = store.set("stock", stock - 1).await.unwrap();
    true
}

/// 300 buyers across 16 tasks and a stock of 100 in a separate Redis: exactly
/// 100 are sold under the lock, while the same buyers without it oversell.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_of_100_sells_exactly_100_to_300_buyers() {
    const BUYERS: u32 = 300;
    const TASKS: usize = 16;
    let nodes = servers(5);
    let database = RedisServer::start();
    let redlock = contended_client(&nodes);

    for locked in [false, true] {
        let client = redis::Client::open(database.url()).unwrap();
        let mut store = client.get_multiplexed_async_connection().await.unwrap();
        let _: () = store.set("stock", 100).await.unwrap();
        let next_buyer = Arc::new(AtomicU32::new(0));
        let sold = Arc::new(AtomicU32::new(0));
        let mut tasks = Vec::new();
        for _ in 0..TASKS {
            let (redlock, next_buyer, sold, mut store) = (
                redlock.clone(),
                next_buyer.clone(),
                sold.clone(),
                store.clone(),
            );
            tasks.push(tokio::spawn(async move {
                while next_buyer.fetch_add(1, Ordering::SeqCst) < BUYERS {
                    let bought = if locked {
                        let guard = redlock
                            .lock("contention:stock", Duration::from_secs(5))
                            .await
                            .unwrap();
                        let bought = buy_one(&mut store).await;
                        guard.unlock().await.unwrap();
                        bought
                    } else {
                        buy_one(&mut store).await
                    };
                    if bought {
                        sold.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let sold = sold.load(Ordering::SeqCst);
        let stock: i64 = store.get("stock").await.unwrap();
        println!("stock: locked={locked} sold {sold} of 100, stock left {stock}");
        if locked {
            assert_eq!(sold, 100, "the lock sells exactly the stock");
            assert_eq!(stock, 0);
        } else {
            assert!(
                sold > 100,
                "the control without a lock oversells (sold {sold})"
            );
        }
    }
}

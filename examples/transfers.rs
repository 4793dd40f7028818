//! Money transfers between accounts under `lock_all`: each transfer locks
//! both accounts at once (all or none, in whatever order it names them), so
//! that 8 tasks moving money among 4 accounts, in both directions, never
//! lose or make a cent. The balances live in the first node's Redis (a
//! stand-in for your database); the lock runs over every node named on the
//! command line (or in `QUORLOCK_NODES`, comma-separated).
//!
//! ```text
//! cargo run --example transfers -- redis://127.0.0.1:7001 redis://127.0.0.1:7002 redis://127.0.0.1:7003
//! ```

mod common;

use std::time::Duration;

use quorlock::Redlock;
use rand::RngExt;
use redis::AsyncCommands;

const ACCOUNTS: [&str; 4] = ["alice", "bob", "carol", "dave"];
const START: i64 = 1_000;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let urls = common::node_urls("transfers");
    let first = urls.first().map_or("", String::as_str); // never empty
    let redlock = Redlock::builder(&urls)
        .acquire_timeout(Duration::from_secs(10))
        .build()?;
    let mut bank = redis::Client::open(first)?
        .get_multiplexed_async_connection()
        .await?;
    for account in ACCOUNTS {
        let () = bank.set(format!("balance:{account}"), START).await?;
    }

    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (redlock, mut bank) = (redlock.clone(), bank.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                let (from, to, amount) = {
                    let mut rng = rand::rng();
                    let from = rng.random_range(0..ACCOUNTS.len());
                    let to = (from + rng.random_range(1..ACCOUNTS.len())) % ACCOUNTS.len();
                    (ACCOUNTS[from], ACCOUNTS[to], rng.random_range(1..=100))
                };
                // Both accounts, in the order this transfer names them.
                let guard = redlock.lock_all([from, to], Duration::from_secs(5)).await?;
                // Read, check, write: safe because no one else holds either account.
                let balance: i64 = bank.get(format!("balance:{from}")).await?;
                if balance >= amount {
                    let () = bank
                        .set(format!("balance:{from}"), balance - amount)
                        .await?;
                    let other: i64 = bank.get(format!("balance:{to}")).await?;
                    let () = bank.set(format!("balance:{to}"), other + amount).await?;
                }
                guard.unlock().await?;
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let mut total = 0;
    for account in ACCOUNTS {
        let balance: i64 = bank.get(format!("balance:{account}")).await?;
        println!("{account:>6}: {balance}");
        total += balance;
    }
    let expected = START * ACCOUNTS.len() as i64;
    println!("total: {total} (started with {expected})");
    redlock.flush().await;
    if total != expected {
        return Err(format!("money was lost or made: {total} != {expected}").into());
    }
    Ok(())
}

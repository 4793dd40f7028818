//! Fencing tokens against a paused holder.
//!
//! A lease cannot stop a holder that pauses (GC, swap, SIGSTOP) past its
//! validity and then writes. A fencing token can: the storage remembers the
//! highest token it has seen and rejects a write that carries a lower one.
//!
//! Here holder A takes the lock, then "freezes" (a paused task) past its
//! validity; holder B takes the lock and writes; A wakes up and writes with
//! its old token: the storage rejects it. Exits non-zero if it does not.
//!
//! ```text
//! cargo run --example fenced_storage -- redis://127.0.0.1:7001 redis://127.0.0.1:7002 redis://127.0.0.1:7003
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorlock::Redlock;

/// A toy storage that rejects writes carrying a token lower than the highest
/// it has seen.
#[derive(Default)]
struct Storage {
    highest_token: u64,
    balance: i64,
}

impl Storage {
    fn write(&mut self, token: u64, balance: i64) -> Result<(), String> {
        if token < self.highest_token {
            return Err(format!(
                "rejected: token {token} is older than {}",
                self.highest_token
            ));
        }
        self.highest_token = token;
        self.balance = balance;
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let urls: Vec<String> = std::env::args().skip(1).collect();
    if urls.is_empty() {
        eprintln!("usage: fenced_storage REDIS_URL [REDIS_URL...]");
        std::process::exit(2);
    }
    let redlock = Redlock::builder(&urls)
        .fencing(true)
        .acquire_timeout(Duration::from_secs(5))
        .build()?;
    let storage = Arc::new(Mutex::new(Storage::default()));

    // Holder A: takes the lock, reads, then freezes past its 300 ms lease.
    let a = redlock
        .lock("account:42", Duration::from_millis(300))
        .await?;
    let token_a = a.fencing_token().ok_or("fencing is on")?;
    println!("A holds the lock with fencing token {token_a}; A pauses...");
    tokio::time::sleep(Duration::from_millis(500)).await;
    println!("A's lease is over (valid: {})", a.is_valid());

    // Holder B: the lock is free again; B writes.
    let b = redlock.lock("account:42", Duration::from_secs(5)).await?;
    let token_b = b.fencing_token().ok_or("fencing is on")?;
    let written = storage.lock().map_err(|_| "poisoned")?.write(token_b, 100);
    println!("B holds the lock with fencing token {token_b}; B's write: {written:?}");
    b.unlock().await?;

    // A wakes up and writes with its old token.
    let stale = storage.lock().map_err(|_| "poisoned")?.write(token_a, -50);
    println!("A wakes up and writes with token {token_a}: {stale:?}");
    drop(a);

    let balance = storage.lock().map_err(|_| "poisoned")?.balance;
    if written.is_ok() && stale.is_err() && balance == 100 {
        println!("the storage kept B's write (balance {balance}) and refused the paused holder");
        Ok(())
    } else {
        Err("the stale write was not rejected".into())
    }
}

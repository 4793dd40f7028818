//! Leader election: three candidates campaign for one job (say, the one
//! scheduler of a fleet); the leader works under its lease, passing its
//! term to what it writes to, and hands over by resigning; the last one
//! dies without a word and is deposed when its lease ends. An observer
//! prints every change, losses included. Against the Redis nodes named on
//! the command line (or in `QUORLOCK_NODES`, comma-separated).
//!
//! ```text
//! cargo run --example election -- redis://127.0.0.1:7001 redis://127.0.0.1:7002 redis://127.0.0.1:7003
//! ```

mod common;

use std::time::Duration;

use futures::StreamExt;
use quorlock::{LeaderEvent, Redlock};

const ELECTION: &str = "example:scheduler";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let urls = common::node_urls("election");
    let redlock = Redlock::new(&urls)?;

    // Who leads, at every change; `observe` looks every 50 ms.
    let mut changes = redlock.observe(ELECTION, Duration::from_millis(50))?;
    let observer = tokio::spawn(async move {
        let mut seen = 0;
        while let Some(change) = changes.next().await {
            match change {
                Ok(LeaderEvent::Elected(leader)) => {
                    println!("observer: {} leads (term {})", leader.identity, leader.term);
                }
                Ok(LeaderEvent::Lost(leader)) => {
                    println!("observer: {} no longer leads", leader.identity);
                }
                Ok(other) => println!("observer: {other:?}"),
                Err(err) => println!("observer: a look failed: {err}"),
            }
            seen += 1;
            if seen == 6 {
                break;
            }
        }
    });

    // Three candidates; each waits in the queue until it leads.
    let mut candidates = Vec::new();
    for (n, name) in ["scheduler-a", "scheduler-b", "scheduler-c"]
        .into_iter()
        .enumerate()
    {
        let redlock = redlock.clone();
        candidates.push(tokio::spawn(async move {
            // Start in order, so that the queue decides who comes next.
            tokio::time::sleep(Duration::from_millis(100 * n as u64)).await;
            let mut leadership = redlock
                .campaign(ELECTION, name, Duration::from_millis(800))
                .await?;
            leadership.keep_alive()?;
            println!("{name}: leading, term {}", leadership.term());
            // The work runs under the lease: if it is lost, the work is
            // dropped at that moment.
            let term = leadership.term();
            let work = leadership.run(async move {
                // Every write of a leader carries its term; a store that
                // keeps the highest term it saw refuses a deposed leader.
                tokio::time::sleep(Duration::from_millis(600)).await;
                term
            });
            println!("{name}: work done with term {}", work.await?);
            if name == "scheduler-c" {
                // Dies without resigning: the next leader (if any) waits
                // for its lease to end.
                println!("{name}: crashing");
                leadership.forget();
            } else {
                leadership.resign().await?;
                println!("{name}: resigned");
            }
            Ok::<(), quorlock::Error>(())
        }));
    }
    for candidate in candidates {
        candidate.await??;
    }
    tokio::time::timeout(Duration::from_secs(5), observer).await??;
    println!(
        "now: {:?}",
        redlock
            .leader(ELECTION)
            .await?
            .map(|leader| leader.identity)
    );
    redlock.flush().await;
    Ok(())
}

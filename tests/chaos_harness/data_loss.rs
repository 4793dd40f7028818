//! The data-loss hazard (see the module docs): nodes f1 and f2 frozen, so
//! holders hold a bare quorum that includes node r; r loses its data while
//! the holder of the moment stays inside, in turn by `FLUSHALL`, by an empty
//! restart (every node runs `appendonly yes` with `appendfsync always`: its
//! configuration says it keeps every key) and by an in-place resync from an
//! empty server (`REPLICAOF`, then `REPLICAOF NO ONE`, on the connections
//! the clients keep open); f1 and f2 thawed right after; then the grace
//! (the TTL) waited out before the next fault. Without the restart
//! protection, a second holder can take the lock on r and the thawed nodes.

use super::{AnyError, BareQuorum, Report};
use crate::support::RedisServer;

/// How every node of a data-loss run starts: durable, as its operator
/// believes.
pub const DURABLE: [&str; 4] = ["--appendonly", "yes", "--appendfsync", "always"];

/// The ways a node loses its data, in the order the faults take them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    Flushall,
    EmptyRestart,
    Resync,
}

impl Loss {
    /// The `n`th fault's.
    fn nth(n: u64) -> Loss {
        match n % 3 {
            0 => Loss::Flushall,
            1 => Loss::EmptyRestart,
            _ => Loss::Resync,
        }
    }
}

/// One data-loss fault (see the module docs); `empty` is the server the
/// resyncs replicate from.
pub async fn lose_data(
    nodes: &mut [RedisServer],
    empty: &RedisServer,
    checker: &mut redis::aio::MultiplexedConnection,
    report: &mut Report,
) -> Result<(), AnyError> {
    let loss = Loss::nth(report.data_losses.iter().sum());
    let hazard = BareQuorum::run(nodes, checker, report, |nodes, r| match loss {
        Loss::Flushall => nodes[r].flushall(),
        Loss::EmptyRestart => nodes[r].restart_empty(),
        Loss::Resync => nodes[r].resync_from(empty),
    })
    .await?;
    report.data_losses[loss as usize] += 1;
    tokio::time::sleep(hazard.after).await;
    hazard.end(checker, report).await
}

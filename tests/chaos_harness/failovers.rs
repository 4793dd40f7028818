//! The chaos run over three Sentinel groups (a primary, a replica and three
//! Sentinels each), each group one node named by its `redis+sentinel://`
//! URL. A fault is the failover hazard: group `f`'s primary is frozen (so
//! holders hold a bare quorum of the other two groups), group `g`'s replica
//! has its link cut (nothing the primary writes from then on reaches it),
//! the holder of the moment stays in its critical section (until its
//! validity), group `g`'s primary is killed and its replica promoted
//! (`SENTINEL FAILOVER`), and `f` is thawed. The promoted replica lacks the
//! holder's key: without the failover rule, a second client takes the lock
//! on it and on `f`. A new replica then joins `g`, and the groups take
//! turns. The Sentinels take a primary as down only after 60 s, so that the
//! frozen one is not failed over too.

use std::time::{Duration, Instant};

use rand::RngExt;
use redis::AsyncCommands;

use super::{AnyError, FAILOVERS, Plan, Report, collect, configure, start_workers};
use crate::support::RedisServer;
use crate::support::sentinel::Sentinels;

/// One Sentinel group.
struct Group {
    primary: RedisServer,
    replica: RedisServer,
    sentinels: Sentinels,
}

impl Group {
    fn start() -> Group {
        let primary = RedisServer::start();
        let replica = RedisServer::start_replica_of(&primary);
        let sentinels = Sentinels::start_with(&primary, None, 1, Duration::from_secs(60));
        Group {
            primary,
            replica,
            sentinels,
        }
    }

    /// Once the Sentinels could promote the replica, cuts its link: what
    /// the primary writes from now on is lost in the failover.
    fn cut(&self) {
        self.sentinels.wait_replica(self.replica.port());
        self.replica.cut_link_from(&self.primary);
    }

    /// Kills the primary and has the Sentinels promote the replica.
    fn promote(&mut self) -> Result<(), AnyError> {
        self.primary.kill();
        Ok(self.sentinels.fail_over_to(self.replica.port())?)
    }

    /// A new replica of the promoted one; the old primary is gone.
    fn renew(&mut self) {
        let replica = RedisServer::start_replica_of(&self.replica);
        self.primary = std::mem::replace(&mut self.replica, replica);
    }
}

/// Runs the failover plan (see the module docs).
pub async fn run(
    plan: Plan,
    exe: &std::path::Path,
    worker_args: &[&str],
) -> Result<Report, AnyError> {
    // Started side by side: each waits for its Sentinels to find its
    // replica, which they do at their next look at the primary (up to 10 s).
    let starting: Vec<_> = (0..3).map(|_| std::thread::spawn(Group::start)).collect();
    let mut groups = Vec::new();
    for group in starting {
        groups.push(group.join().map_err(|_| "a Sentinel group did not start")?);
    }
    let node_urls: Vec<String> = groups
        .iter()
        .map(|group| group.sentinels.url(None))
        .collect();
    let checker_server = RedisServer::start();
    let mut checker = configure(&checker_server, &plan).await?;
    let workers = start_workers(&plan, exe, worker_args, &checker_server, &node_urls)?;
    let mut report = Report::default();
    let started = Instant::now();
    let mut rng = rand::rng();
    let mut result = Ok(());
    let mut turn = 0;
    loop {
        let acquired: u64 = checker
            .get::<_, Option<u64>>("chaos:acquired")
            .await?
            .unwrap_or(0);
        if acquired >= plan.acquisitions && report.failovers >= FAILOVERS {
            break;
        }
        if started.elapsed() > plan.limit {
            result = Err(format!("the run passed its limit of {:?}", plan.limit));
            break;
        }
        let (g, f) = (turn % 3, (turn + 1) % 3);
        turn += 1;
        groups[g].cut();
        groups[f].primary.pause();
        let before = acquired;
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..300))).await;
        // The holder of the moment stays in its critical section.
        let _: () = checker.set("chaos:hold-on", 1).await?;
        tokio::time::sleep(Duration::from_millis(10)).await;
        let promoted = groups[g].promote();
        groups[f].primary.resume();
        promoted?;
        report.failovers += 1;
        report.freezes += 1;
        tokio::time::sleep(Duration::from_millis(400)).await;
        let _: () = checker.del("chaos:hold-on").await?;
        let now: u64 = checker
            .get::<_, Option<u64>>("chaos:acquired")
            .await?
            .unwrap_or(0);
        report.acquired_during_minority_faults += now - before;
        groups[g].renew();
        // The promoted node counts again after the grace (the TTL) before
        // the next fault, so that a quorum of counted nodes remains.
        tokio::time::sleep(plan.ttl + Duration::from_millis(rng.random_range(100..300))).await;
    }
    collect(&mut checker, workers, &mut report).await?;
    report.elapsed = started.elapsed();
    result?;
    Ok(report)
}

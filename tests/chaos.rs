//! Mutual exclusion under faults, as a test: 4 worker processes of 3 tasks
//! each (and once of 150 tasks each: 600 queued waiters), 5 nodes,
//! a few thousand acquisitions while a fault injector freezes, kills and
//! (delayed-)restarts a minority of nodes, and once takes a majority down;
//! then the same with immediate restarts without persistence (the Redlock
//! hazard: two nodes frozen, a third restarted empty at once, a holder
//! inside its critical section across it), which the restart protection
//! must turn into 0 overlaps; and lossy failovers of three Sentinel groups
//! (`chaos_harness/failovers.rs`), which the failover rule must turn into 0
//! overlaps; steps of a node's clock 30 s forward on a bare quorum, which
//! the clock watch must turn into 0 overlaps; and losses of data that no
//! server tells (`FLUSHALL`, an empty restart of a node configured durable,
//! an in-place resync), which the data mark must turn into 0 overlaps; and
//! silent partitions and lossy links in a test network (a holder cut off
//! from a majority, a minority cut off, asymmetric reach), under which
//! mutual exclusion and fencing tokens must hold; and every one of those
//! faults at random, with lossy links on top, while 4 processes of 100
//! tasks take plain locks, sets, read and write holds, semaphore permits
//! and a leadership (`chaos_harness/mixed.rs`).
//! 0 overlaps; no grant with the majority down; failed calls within their
//! deadline; locking resumes after recovery. (`examples/chaos.rs` is the full
//! run.) This test re-executes its own binary as the workers, so it has its
//! own `main` (harness = false).

mod chaos_harness;
mod support;

use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = support::runtime().expect("tokio runtime");
    if args.first().map(String::as_str) == Some("--chaos-worker") {
        return match runtime.block_on(chaos_harness::worker(&args[1], &args[2..])) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("chaos worker: {err}");
                ExitCode::FAILURE
            }
        };
    }
    // `cargo test` passes harness flags (e.g. --nocapture, a filter): with a
    // filter, only the tests whose names contain it run.
    let filter = args.iter().find(|arg| !arg.starts_with('-'));
    let exe = std::env::current_exe().expect("own executable");
    let (mut ran, mut failed) = (0, 0);
    for (name, plan) in [
        (
            "chaos_minority_faults_never_give_two_holders",
            chaos_harness::Plan::delayed(4, false, 3_000, Duration::from_secs(240)),
        ),
        (
            "chaos_fencing_tokens_increase_under_faults",
            chaos_harness::Plan::delayed(4, true, 2_000, Duration::from_secs(240)),
        ),
        (
            "chaos_immediate_restarts_never_give_two_holders",
            chaos_harness::Plan::immediate(4, 2_000, Duration::from_secs(240), true),
        ),
        (
            "chaos_hundreds_of_waiters_never_give_two_holders",
            chaos_harness::Plan::delayed(4, false, 2_000, Duration::from_secs(240))
                .with_waiters(150, Duration::from_secs(5)),
        ),
        (
            "chaos_lossy_sentinel_failovers_never_give_two_holders",
            chaos_harness::Plan::failovers(4, 300, Duration::from_secs(240), true),
        ),
        (
            "chaos_clock_steps_never_give_two_holders",
            chaos_harness::Plan::clock_steps(4, 2_000, Duration::from_secs(240), true),
        ),
        (
            "chaos_data_losses_never_give_two_holders",
            chaos_harness::Plan::data_loss(4, 2_000, Duration::from_secs(240), true),
        ),
        (
            "chaos_partitions_never_give_two_holders",
            chaos_harness::Plan::partitions(4, 800, Duration::from_secs(240)),
        ),
        (
            "chaos_every_fault_at_once_never_gives_two_holders",
            chaos_harness::Plan::mixed((4, 100), (1_000, 1), Duration::from_secs(240), true),
        ),
    ] {
        if filter.is_some_and(|filter| !name.contains(filter.as_str())) {
            continue;
        }
        ran += 1;
        println!("test {name} ...");
        let outcome = runtime.block_on(chaos_harness::run(plan, &exe, &["--chaos-worker"]));
        match outcome.map_err(|err| err.to_string()).and_then(|report| {
            report.print(&plan);
            report.check(&plan)
        }) {
            Ok(()) => println!("test {name} ... ok"),
            Err(err) => {
                println!("test {name} ... FAILED: {err}");
                failed += 1;
            }
        }
    }
    println!("{} passed, {failed} failed", ran - failed);
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

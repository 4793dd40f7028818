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
//! and a leadership, two of the processes with `queueing(false)` (their
//! plain locks poll where the others' queue; `chaos_harness/mixed.rs`).
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
    if args.first().map(String::as_str) == Some("--chaos-worker") {
        let runtime = support::runtime().expect("tokio runtime");
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
    // Two lanes, each its own thread and runtime, run their plans one after
    // the other, side by side with the other lane's (each plan has its own
    // servers, workers and test network): the nine plans take about half
    // their time in a row. The lanes are balanced by each plan's length.
    // QUORLOCK_CHAOS_LANES=1 runs them all in one lane.
    let lanes: usize = match std::env::var("QUORLOCK_CHAOS_LANES").as_deref() {
        Ok("1") => 1,
        _ => 2,
    };
    let plans: Vec<(usize, &str, chaos_harness::Plan)> = all_plans()
        .into_iter()
        .filter(|(_, name, _)| filter.is_none_or(|filter| name.contains(filter.as_str())))
        .collect();
    let ran = plans.len();
    let printing = std::sync::Mutex::new(());
    let failed: usize = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..lanes)
            .map(|lane| {
                let lane_plans: Vec<_> = plans
                    .iter()
                    .filter(|(of, _, _)| of % lanes == lane)
                    .collect();
                let (exe, printing) = (&exe, &printing);
                scope.spawn(move || run_lane(&lane_plans, exe, printing))
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().unwrap_or(1))
            .sum()
    });
    println!("{} passed, {failed} failed", ran - failed);
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The chaos tests: each one's lane (see `main`), name and plan, in one
/// table (the lanes balanced by the plans' lengths).
fn all_plans() -> [(usize, &'static str, chaos_harness::Plan); 9] {
    use chaos_harness::Plan;
    let limit = Duration::from_secs(240);
    [
        (
            0,
            "chaos_minority_faults_never_give_two_holders",
            Plan::delayed(4, false, 3_000, limit),
        ),
        (
            1,
            "chaos_fencing_tokens_increase_under_faults",
            Plan::delayed(4, true, 2_000, limit),
        ),
        (
            1,
            "chaos_immediate_restarts_never_give_two_holders",
            Plan::immediate(4, 2_000, limit, true),
        ),
        (
            1,
            "chaos_hundreds_of_waiters_never_give_two_holders",
            Plan::delayed(4, false, 2_000, limit).with_waiters(150, Duration::from_secs(5)),
        ),
        (
            1,
            "chaos_lossy_sentinel_failovers_never_give_two_holders",
            Plan::failovers(4, 300, limit, true),
        ),
        (
            1,
            "chaos_clock_steps_never_give_two_holders",
            Plan::clock_steps(4, 2_000, limit, true),
        ),
        (
            1,
            "chaos_data_losses_never_give_two_holders",
            Plan::data_loss(4, 2_000, limit, true),
        ),
        (
            0,
            "chaos_partitions_never_give_two_holders",
            Plan::partitions(4, 800, limit),
        ),
        (
            0,
            "chaos_every_fault_at_once_never_gives_two_holders",
            Plan::mixed((4, 100), (1_000, 1), limit, true),
        ),
    ]
}

/// Runs `plans` one after the other on a runtime of this lane's own; each
/// test's lines are printed together (under `printing`). Returns how many
/// failed.
fn run_lane(
    plans: &[&(usize, &str, chaos_harness::Plan)],
    exe: &std::path::Path,
    printing: &std::sync::Mutex<()>,
) -> usize {
    let runtime = support::runtime().expect("tokio runtime");
    let mut failed = 0;
    for (_, name, plan) in plans {
        println!("test {name} ... (started)");
        let outcome = runtime.block_on(chaos_harness::run(*plan, exe, &["--chaos-worker"]));
        let _printing = printing.lock().unwrap_or_else(|poison| poison.into_inner());
        println!("test {name} ...");
        match outcome.map_err(|err| err.to_string()).and_then(|report| {
            report.print(plan);
            report.check(plan)
        }) {
            Ok(()) => println!("test {name} ... ok"),
            Err(err) => {
                println!("test {name} ... FAILED: {err}");
                failed += 1;
            }
        }
    }
    failed
}

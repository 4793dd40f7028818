//! The full chaos run: 4 worker processes of 3 tasks each (this executable, re-run as
//! workers) compete for one resource on 5 real `redis-server` nodes while a
//! fault injector freezes (SIGSTOP), kills and restarts (after at least the
//! TTL) a minority of nodes, and once takes a majority down for 2 s. Each
//! critical section checks a separate "checker" Redis: on entry, no other
//! holder whose validity has not ended may be inside. With `--fencing`, each holder also checks that its fencing token
//! is larger than the previous holder's. Prints the figures; exits non-zero if
//! any property fails.
//!
//! With `--immediate`, the minority faults are the Redlock restart hazard:
//! two nodes frozen, a third killed and restarted empty at once (no
//! persistence), the two thawed; critical sections last 20 ms. Add
//! `--unprotected` to switch the restart protection off
//! (`restart_grace(0)`, as other Redlock clients behave): the run then
//! counts the overlaps the protection prevents.
//!
//! With `--failovers`, the nodes are three Sentinel groups and the faults
//! are lossy failovers: a replica's link cut, its primary killed and the
//! replica promoted while another group's primary is frozen, the holder of
//! the moment inside its critical section across it (TTL 3 s). With
//! `--unprotected`, the failover rule is off too.
//!
//! With `--clock-steps`, the faults are clock steps: two nodes frozen, the
//! wall clock of a third (behind the test support's clock shim) stepped 30 s
//! forward under the holder of the moment, the two thawed, the clock set
//! right 3 s later. With `--unprotected`, the clock watch (and the restart
//! protection) is off (`clock_tolerance(0)`).
//!
//! With `--data-loss`, the faults are losses of data that no server tells:
//! two nodes frozen, a third emptied under the holder of the moment, in turn
//! by `FLUSHALL`, by an empty restart (every node runs `appendonly yes` with
//! `appendfsync always`) and by an in-place resync from an empty server
//! (`REPLICAOF`, then `REPLICAOF NO ONE`). With `--unprotected`, the restart
//! protection, and with it the data mark, is off (`restart_grace(0)`).
//!
//! With `--partitions` (as root), every node, worker and the checker runs in
//! a network namespace of its own (`tests/support/netns.rs`), and the
//! faults are silent partitions and lossy links: the holder of the moment
//! cut from a majority, a minority cut off, asymmetric reach, 5-20 % loss;
//! fencing tokens are checked.
//!
//! With `--all-faults` (as root), every fault above at random, one episode
//! at a time, each with a chance of one in three of a lossy link on top,
//! and a majority outage after every twelve episodes, on five nodes in a
//! test network (two durable, two without persistence, all four behind the
//! clock shim, and a Sentinel group), 4 worker processes of 150 tasks each
//! taking plain locks, sets, read and write holds, semaphore permits and
//! a leadership (see `tests/chaos_harness/mixed.rs`); ACQUISITIONS counts
//! the acquisitions made during the faults, and every kind of fault comes
//! at least 5 times. With `--unprotected`, the
//! restart, failover and data protections and the clock watch are off: the
//! control, which shows the overlaps they prevent. With `--no-faults`,
//! the same load without a fault, for ACQUISITIONS acquisitions: the
//! baseline of the failed calls (contention alone).
//!
//! ```text
//! cargo run --release --example chaos [--fencing | --partitions | --all-faults [--no-faults] | --immediate | --failovers | --clock-steps | --data-loss [--unprotected]] [ACQUISITIONS]
//! ```
//!
//! The default is 20,000 acquisitions (10,000 faulted ones with
//! `--all-faults`, 5,000 with `--immediate`, `--clock-steps`, `--data-loss`
//! or `--partitions`, 1,000 with `--failovers`).
//!
//! It needs `redis-server` on PATH (scripts/test.sh installs it).

#[path = "../tests/chaos_harness/mod.rs"]
mod chaos_harness;
#[path = "../tests/support/mod.rs"]
mod support;

use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = match support::runtime() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("chaos: {err}");
            return ExitCode::FAILURE;
        }
    };
    if args.first().map(String::as_str) == Some("--chaos-worker") && args.len() >= 3 {
        return match runtime.block_on(chaos_harness::worker(&args[1], &args[2..])) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("chaos worker: {err}");
                ExitCode::FAILURE
            }
        };
    }
    let mut args = args;
    let mut flag = |name: &str| match args.iter().position(|arg| arg == name) {
        Some(at) => {
            args.remove(at);
            true
        }
        None => false,
    };
    let fencing = flag("--fencing");
    let immediate = flag("--immediate");
    let failovers = flag("--failovers");
    let clock_steps = flag("--clock-steps");
    let data_loss = flag("--data-loss");
    let partitions = flag("--partitions");
    let all_faults = flag("--all-faults");
    let no_faults = flag("--no-faults");
    let unprotected = flag("--unprotected");
    let usage = "usage: chaos [--fencing | --partitions | --all-faults [--no-faults] | \
                 --immediate | --failovers | --clock-steps | --data-loss [--unprotected]] \
                 [ACQUISITIONS]";
    let kinds = [
        fencing,
        immediate,
        failovers,
        clock_steps,
        data_loss,
        partitions,
        all_faults,
    ]
    .iter()
    .filter(|on| **on)
    .count();
    let may_be_unprotected = immediate || failovers || clock_steps || data_loss || all_faults;
    if kinds > 1
        || (unprotected && !may_be_unprotected)
        || (no_faults && (!all_faults || unprotected))
        || args.len() > 1
    {
        eprintln!("{usage}");
        return ExitCode::from(2);
    }
    let acquisitions = match args.first().map(|n| n.parse::<u64>()) {
        None if immediate || clock_steps || data_loss || partitions => 5_000,
        None if failovers => 1_000,
        None if all_faults => 10_000,
        None => 20_000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("{usage}");
            return ExitCode::from(2);
        }
    };
    let limit = Duration::from_secs(600);
    let plan = if all_faults {
        let limit = Duration::from_secs(1800);
        let per_kind = if no_faults { 0 } else { 5 };
        chaos_harness::Plan::mixed((4, 150), (acquisitions, per_kind), limit, !unprotected)
    } else if partitions {
        chaos_harness::Plan::partitions(4, acquisitions, limit)
    } else if data_loss {
        chaos_harness::Plan::data_loss(4, acquisitions, limit, !unprotected)
    } else if clock_steps {
        chaos_harness::Plan::clock_steps(4, acquisitions, limit, !unprotected)
    } else if failovers {
        chaos_harness::Plan::failovers(4, acquisitions, limit, !unprotected)
    } else if immediate {
        chaos_harness::Plan::immediate(4, acquisitions, limit, !unprotected)
    } else {
        chaos_harness::Plan::delayed(4, fencing, acquisitions, limit)
    };
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(err) => {
            eprintln!("chaos: {err}");
            return ExitCode::FAILURE;
        }
    };
    let report = match runtime.block_on(chaos_harness::run(plan, &exe, &["--chaos-worker"])) {
        Ok(report) => report,
        Err(err) => {
            eprintln!("chaos: {err}");
            return ExitCode::FAILURE;
        }
    };
    report.print(&plan);
    match report.check(&plan) {
        Ok(()) => {
            println!("all properties held");
            ExitCode::SUCCESS
        }
        Err(err) => {
            println!("FAILED: {err}");
            ExitCode::FAILURE
        }
    }
}

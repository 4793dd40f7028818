//! The runner of the tests that have their own `main` (harness = false):
//! they re-execute their own binary as worker processes, so libtest's
//! runner cannot be theirs.

use std::process::ExitCode;

/// A test's error.
pub type AnyError = Box<dyn std::error::Error + Send + Sync>;

/// What a test (or a worker) returns.
pub type Outcome = Result<(), AnyError>;

/// Fails with `what` unless `condition` holds.
pub fn check(condition: bool, what: impl Into<String>) -> Outcome {
    if condition {
        Ok(())
    } else {
        Err(what.into().into())
    }
}

/// Runs each of `tests` whose name contains the first argument that is not
/// a flag (`cargo test` passes harness flags; a filter that names no test
/// runs nothing), printing each outcome as libtest does; fails if any failed.
pub fn run_tests(
    args: &[String],
    tests: &[&str],
    mut run: impl FnMut(&str) -> Outcome,
) -> ExitCode {
    let filter = args.iter().find(|arg| !arg.starts_with('-'));
    let (mut ran, mut failed) = (0, 0);
    for name in tests {
        if filter.is_some_and(|filter| !name.contains(filter.as_str())) {
            continue;
        }
        ran += 1;
        println!("test {name} ...");
        match run(name) {
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

/// A worker process's arguments, after `--worker`: `TASKS SECONDS CHECKER
/// NODE...`.
pub struct WorkerArgs<'a> {
    pub tasks: usize,
    pub seconds: u64,
    pub checker: &'a str,
    pub nodes: &'a [String],
}

/// Reads `args` (those after `--worker`) as [`WorkerArgs`].
pub fn worker_args(args: &[String]) -> Result<WorkerArgs<'_>, AnyError> {
    match args {
        [tasks, seconds, checker, nodes @ ..] => Ok(WorkerArgs {
            tasks: tasks.parse().map_err(|_| "bad TASKS")?,
            seconds: seconds.parse().map_err(|_| "bad SECONDS")?,
            checker,
            nodes,
        }),
        _ => Err("--worker TASKS SECONDS CHECKER NODE...".into()),
    }
}

/// What a worker process runs, from its [`WorkerArgs`].
pub type Worker =
    dyn for<'a> Fn(
        &'a WorkerArgs<'a>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Outcome> + 'a>>;

/// The `main` of a test binary that re-executes itself as its workers:
/// with `--worker` first, runs `worker` and exits with its outcome;
/// otherwise runs each of `tests` (as [`run_tests`] filters them) with
/// `run`, given this executable and a runtime.
pub fn main_with_workers(
    tests: &[&str],
    worker: &Worker,
    mut run: impl FnMut(&str, &std::path::Path, &tokio::runtime::Runtime) -> Outcome,
) -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = super::runtime().expect("tokio runtime");
    if args.first().map(String::as_str) == Some("--worker") {
        let outcome = worker_args(&args[1..]).and_then(|args| runtime.block_on(worker(&args)));
        return exit("worker", outcome);
    }
    let exe = std::env::current_exe().expect("own executable");
    run_tests(&args, tests, |name| run(name, &exe, &runtime))
}

/// Runs `test` on `runtime`; not done within `limit`, it fails.
pub fn block_on_within(
    runtime: &tokio::runtime::Runtime,
    limit: std::time::Duration,
    test: impl std::future::Future<Output = Outcome>,
) -> Outcome {
    runtime.block_on(async {
        tokio::time::timeout(limit, test)
            .await
            .unwrap_or_else(|_| Err(format!("not done in {limit:?}").into()))
    })
}

/// A worker's outcome as its process's exit code (the error on stderr).
pub fn exit(what: &str, outcome: Outcome) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("{what}: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Prints a worker's counts on one line, separated by spaces, for
/// [`counts`] to read in the parent.
pub fn report(counts: &[std::sync::atomic::AtomicU64]) {
    let shown: Vec<String> = counts
        .iter()
        .map(|count| count.load(std::sync::atomic::Ordering::Relaxed).to_string())
        .collect();
    println!("{}", shown.join(" "));
}

/// A worker's printed counts: `N` numbers separated by white space.
pub fn counts<const N: usize>(text: &str) -> Result<[u64; N], AnyError> {
    let numbers: Vec<u64> = text
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    numbers
        .try_into()
        .map_err(|_| format!("worker printed {text:?}, not {N} numbers").into())
}

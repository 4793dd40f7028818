//! `quorlock`: run a command while holding a distributed lock (a `flock` that
//! spans machines), or show who holds one.
//!
//! ## The kill schedule
//!
//! CMD may work only while the lock is valid. `quorlock run` extends the lock
//! itself and enforces, with `grace` = `min(--grace, ttl / 2)`:
//!
//! - an extension is made when `grace + ttl / 4` of validity is left, and
//!   retried (every `max(ttl / 20, node timeout)`) while it fails for lack
//!   of answers;
//! - **the quorum refuses an extension**, or it comes too late: the lock is
//!   gone, and CMD's whole process group gets SIGKILL at once;
//! - **extensions keep failing**: SIGTERM to the group at `valid_until -
//!   grace`, SIGKILL at `valid_until` (also when `--max-hold` stops the
//!   extensions);
//! - **CMD exits**: what is left of its group gets SIGTERM, then SIGKILL
//!   after the grace (at `valid_until` at the latest), before the lock is
//!   released;
//! - **quorlock dies**: its watchdog kills the group (see `group.rs`).
//!
//! Before exiting, `quorlock` waits (bounded) for the releases it runs in the
//! background, such as the cleanup of an acquire round cut short by a signal.

mod elect;
mod group;
mod json;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use group::Group;
use quorlock::{LockGuard, LostReason, Redlock};
use tokio::signal::unix::{SignalKind, signal};

/// The lock could not be acquired (held elsewhere, nodes unavailable, or `--wait` ran out).
const EXIT_NOT_ACQUIRED: u8 = 75;
/// The lock was lost while CMD ran; CMD was terminated.
const EXIT_LOST: u8 = 76;
/// Bad arguments or options.
const EXIT_USAGE: u8 = 2;
/// CMD was found but could not be executed.
const EXIT_CANNOT_EXECUTE: u8 = 126;
/// CMD was not found.
const EXIT_NOT_FOUND: u8 = 127;

const EXIT_CODES: &str = "\
Exit codes of `run`:
  CMD's own code   CMD ran and exited (128+N if killed by signal N)
  75               the lock could not be acquired (held elsewhere, nodes down, --wait ran out)
  76               the lock was lost, or could not be kept, while CMD ran; CMD was terminated
  126 / 127        CMD could not be executed / was not found
  2                bad arguments
Exit codes of `status`: 0 held by a quorum, 1 free (no quorum can hold it), 75 unknown (the
nodes that did not answer could make a quorum with a holder). With --rw: 0 held by a writer
or by readers on a quorum of nodes, 1 free, 75 otherwise.

CMD runs in a process group of its own. If the quorum refuses an extension (the lock is
gone), the group gets SIGKILL at once; if extensions keep failing, SIGTERM at
valid_until - grace and SIGKILL at valid_until, where grace = min(--grace, ttl/2). When
CMD exits, what is left of its group is terminated before the lock is released; if
quorlock dies, a watchdog kills the group.

Signals: SIGINT, SIGTERM and SIGHUP sent to quorlock are forwarded to CMD's group, and
the lock is released when CMD exits. In a terminal, CMD's group is the foreground group:
Ctrl-C reaches CMD once, and CMD can read the terminal.";

#[derive(Parser, Debug)]
#[command(name = "quorlock", version, about, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Commands,
}

#[derive(Subcommand, Debug)]
enum Commands {
    /// Run CMD while holding the lock on RESOURCE; keep the lock extended while
    /// CMD runs, and release it when CMD exits.
    Run(RunArgs),
    /// Show, for each node, whether it holds RESOURCE (token prefix and TTL),
    /// and whether a quorum does.
    Status(StatusArgs),
    /// Wait until this process leads the election NAME, then run CMD while it
    /// leads (one leader at a time: a standby waits, and takes over within the
    /// TTL when the leader dies); CMD is stopped on loss with the kill schedule
    /// of `run`.
    Elect(elect::ElectArgs),
    /// Show who leads the election NAME (identity, term, lease).
    Leader(elect::LeaderArgs),
    /// Print a completion script for SHELL (bash, zsh, fish, elvish, powershell) to standard
    /// output. Bash: `quorlock completions bash > ~/.local/share/bash-completion/completions/quorlock`.
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
}

#[derive(Args, Debug)]
struct NodeArgs {
    /// A Redis node URL (redis://, rediss://, unix://, redis+sentinel://h1,h2,h3/master, or redis+cluster://h1,h2,h3); repeat
    /// for each independent node. Default: $QUORLOCK_NODES, comma-separated.
    #[arg(
        long = "node",
        value_name = "URL",
        env = "QUORLOCK_NODES",
        value_delimiter = ',',
        required = true
    )]
    nodes: Vec<String>,
    /// Bound on each call to one node once connected.
    #[arg(long, value_name = "DURATION", default_value = "50ms", value_parser = parse_duration)]
    node_timeout: Duration,
    /// Bound on connecting to one node and checking it (first contact).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    connect_timeout: Duration,
    /// Prefix put before RESOURCE to form the Redis key.
    #[arg(long, value_name = "PREFIX", default_value = quorlock::RedlockBuilder::DEFAULT_KEY_PREFIX)]
    key_prefix: String,
    /// How long a node that restarted without durable data does not count (at least the
    /// TTL; set it to the longest TTL any client of these nodes uses). 0 switches it off.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    restart_grace: Duration,
    /// Also hold back nodes that are younger than the grace when first met (see the docs).
    #[arg(long)]
    strict_restarts: bool,
}

#[derive(Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    nodes: NodeArgs,
    /// The resource to lock. Repeat it to lock several resources at once, all or none.
    #[arg(long, required = true)]
    resource: Vec<String>,
    /// Take a read hold of the read-write lock on RESOURCE (shared with other readers).
    #[arg(long, conflicts_with = "write")]
    read: bool,
    /// Take the write hold of the read-write lock on RESOURCE (no readers, no other writer).
    #[arg(long)]
    write: bool,
    /// Lock TTL; the lock is extended about a third of it before expiry. Forms: 500ms, 10s, 2m, 1h.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    ttl: Duration,
    /// How long to wait for the lock; 0 makes one attempt.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    wait: Duration,
    /// Time between SIGTERM and SIGKILL to CMD's group when the lock cannot be kept (capped at ttl/2).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    grace: Duration,
    /// Turn fencing tokens on: CMD gets the lock's token in $QUORLOCK_FENCING_TOKEN, to pass
    /// with each write to a resource that refuses stale tokens. Not with --read: readers have
    /// no token.
    #[arg(long, conflicts_with = "read")]
    fencing: bool,
    /// The longest CMD may hold the lock (extension stops then).
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = parse_duration)]
    max_hold: Duration,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

#[derive(Args, Debug)]
struct StatusArgs {
    #[command(flatten)]
    nodes: NodeArgs,
    /// The resource to inspect.
    #[arg(long)]
    resource: String,
    /// Inspect the read-write lock on RESOURCE (its writer, a waiting writer, its readers).
    #[arg(long)]
    rw: bool,
    /// Print the status as one JSON object (see the README for its fields); the exit code
    /// is the same.
    #[arg(long)]
    json: bool,
}

/// Parses a duration with `humantime` (`500ms`, `10s`, `1.5s`, `2m`,
/// `1h 30m`, `1d`); a bare number is seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let bare_number = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    let with_unit = if bare_number {
        format!("{text}s")
    } else {
        text.to_owned()
    };
    humantime::parse_duration(&with_unit).map_err(|err| {
        format!("{text:?} is not a duration: {err} (examples: 500ms, 10s, 1.5s, 2m, 1h 30m)")
    })
}

fn main() -> ExitCode {
    let mut args = std::env::args();
    if let (Some(_), Some(first), Some(pgid)) = (args.next(), args.next(), args.next())
        && first == group::WATCHDOG_ARG
    {
        return group::watch(&pgid);
    }
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("quorlock: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        match cli.command {
            Commands::Run(args) => run(args).await,
            Commands::Status(args) => status(args).await,
            Commands::Elect(args) => elect::elect(args).await,
            Commands::Leader(args) => elect::leader(args).await,
            Commands::Completions { shell } => {
                let mut command = <Cli as clap::CommandFactory>::command();
                clap_complete::generate(shell, &mut command, "quorlock", &mut std::io::stdout());
                ExitCode::SUCCESS
            }
        }
    })
}

/// The node URLs from pieces split at commas: a piece without a scheme
/// (`host:port`) continues the URL before it, so a Sentinel or cluster
/// URL's host list (`redis+sentinel://h1,h2,h3/master`,
/// `redis+cluster://h1,h2,h3`) stays one URL.
fn join_urls(pieces: &[String]) -> Vec<String> {
    let mut urls: Vec<String> = Vec::new();
    for piece in pieces {
        match urls.last_mut() {
            Some(last) if !piece.contains("://") => {
                last.push(',');
                last.push_str(piece);
            }
            _ => urls.push(piece.clone()),
        }
    }
    urls
}

fn client(
    nodes: &NodeArgs,
    configure: impl FnOnce(quorlock::RedlockBuilder) -> quorlock::RedlockBuilder,
) -> Result<Redlock, ExitCode> {
    let builder = Redlock::builder(join_urls(&nodes.nodes))
        .node_timeout(nodes.node_timeout)
        .connect_timeout(nodes.connect_timeout)
        .key_prefix(&nodes.key_prefix)
        .restart_grace(nodes.restart_grace)
        .strict_restarts(nodes.strict_restarts);
    configure(builder).build().map_err(|err| {
        eprintln!("quorlock: {err}\n\nFor more information, try '--help'.");
        ExitCode::from(EXIT_USAGE)
    })
}

/// What `status` found, and its exit code: 0 held, 1 free, 75 unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Held,
    Free,
    Unknown,
}

impl Verdict {
    fn of(held: bool, free: bool) -> Verdict {
        match (held, free) {
            (true, _) => Verdict::Held,
            (false, true) => Verdict::Free,
            (false, false) => Verdict::Unknown,
        }
    }

    /// A plain lock's: held by a quorum, free when no quorum can hold it.
    fn of_lock(status: &quorlock::LockStatus) -> Verdict {
        Verdict::of(status.is_held(), status.is_free())
    }

    /// As `status --json` names it.
    fn name(self) -> &'static str {
        match self {
            Verdict::Held => "held",
            Verdict::Free => "free",
            Verdict::Unknown => "unknown",
        }
    }

    fn exit_code(self) -> ExitCode {
        match self {
            Verdict::Held => ExitCode::SUCCESS,
            Verdict::Free => ExitCode::from(1),
            Verdict::Unknown => ExitCode::from(EXIT_NOT_ACQUIRED),
        }
    }
}

/// `status`: held by a quorum, free (no quorum can hold it), or unknown.
/// With `--rw`: held by a writer on a quorum or by readers on a quorum of
/// nodes, free (no writer can be on a quorum, no readers anywhere that
/// answered), or unknown. Printed as text, or with `--json` as one object.
async fn status(args: StatusArgs) -> ExitCode {
    let redlock = match client(&args.nodes, |builder| builder) {
        Ok(redlock) => redlock,
        Err(code) => return code,
    };
    let resource = &args.resource;
    let found = if args.rw {
        redlock.rw_status(resource).await.map(|status| {
            let held = status.writer.is_held() || status.readers_on_quorum();
            let free = status.writer.is_free() && status.no_readers();
            let verdict = Verdict::of(held, free);
            let shown = if args.json {
                json::rw_status(resource, &status, verdict).to_string()
            } else {
                status.to_string()
            };
            (verdict, shown)
        })
    } else {
        redlock.status(resource).await.map(|status| {
            let verdict = Verdict::of_lock(&status);
            let shown = if args.json {
                json::status(resource, &status, verdict).to_string()
            } else {
                status.to_string()
            };
            (verdict, shown)
        })
    };
    match found {
        Ok((verdict, shown)) => {
            println!("{shown}");
            verdict.exit_code()
        }
        Err(err) => {
            eprintln!("quorlock: {err}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// The signals forwarded to CMD.
struct Forwarded {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Forwarded {
    /// The handlers, or the exit code of a failure to install them (said).
    fn install_or_exit() -> Result<Self, ExitCode> {
        Self::install().map_err(|err| {
            eprintln!("quorlock: cannot install signal handlers: {err}");
            ExitCode::FAILURE
        })
    }

    fn install() -> std::io::Result<Self> {
        Ok(Forwarded {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// The next signal received, as its number.
    async fn next(&mut self) -> i32 {
        tokio::select! {
            _ = self.interrupt.recv() => libc::SIGINT,
            _ = self.terminate.recv() => libc::SIGTERM,
            _ = self.hangup.recv() => libc::SIGHUP,
        }
    }
}

fn exit_code_of(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1)),
        (None, Some(signal)) => ExitCode::from(u8::try_from(128 + signal).unwrap_or(1)),
        (None, None) => ExitCode::FAILURE,
    }
}

async fn run(args: RunArgs) -> ExitCode {
    if (args.read || args.write) && args.resource.len() > 1 {
        eprintln!(
            "quorlock: --read and --write take one --resource (a read-write lock is on one resource)\n\nFor more information, try '--help'."
        );
        return ExitCode::from(EXIT_USAGE);
    }
    let wait = args.wait;
    let redlock = match client(&args.nodes, |builder| {
        // quorlock extends the lock itself (see the kill schedule).
        let builder = builder.auto_extend(false).fencing(args.fencing);
        if wait.is_zero() {
            builder.retry_count(0)
        } else {
            builder
                .acquire_timeout(wait)
                .retry_delay(Duration::from_millis(100))
                .retry_jitter(Duration::from_millis(50))
        }
    }) {
        Ok(redlock) => redlock,
        Err(code) => return code,
    };
    let mut signals = match Forwarded::install_or_exit() {
        Ok(signals) => signals,
        Err(code) => return code,
    };
    let code = lock_and_run(&redlock, &args, &mut signals).await;
    // Releases still running in the background (an acquire round cut short
    // by a signal, a release that timed out) finish before the runtime ends,
    // or their keys would block every other run until their TTL.
    let bound = args.nodes.connect_timeout + args.nodes.node_timeout * 3;
    if tokio::time::timeout(bound, redlock.flush()).await.is_err() {
        eprintln!(
            "quorlock: releases still unanswered after {bound:?}; their keys expire by their ttl"
        );
    }
    code
}

/// The lock `args` ask for: plain, on several resources, a read or the write
/// hold of a read-write lock.
async fn acquire(redlock: &Redlock, args: &RunArgs) -> quorlock::Result<quorlock::LockGuard> {
    match &args.resource[..] {
        [one] if args.read => redlock.read(one, args.ttl).await,
        [one] if args.write => redlock.write(one, args.ttl).await,
        [one] => redlock.lock(one, args.ttl).await,
        several => redlock.lock_all(several, args.ttl).await,
    }
}

async fn lock_and_run(redlock: &Redlock, args: &RunArgs, signals: &mut Forwarded) -> ExitCode {
    // Acquire; a signal while waiting gives up at once (nothing started yet;
    // what the round in flight set is released in the background).
    let acquired = tokio::select! {
        acquired = acquire(redlock, args) => acquired,
        signal = signals.next() => {
            eprintln!("quorlock: interrupted while waiting for the lock");
            return ExitCode::from(u8::try_from(128 + signal).unwrap_or(1));
        }
    };
    let mut guard = match acquired {
        Ok(guard) => guard,
        Err(err) if err.is_invalid_input() => {
            eprintln!("quorlock: {err}\n\nFor more information, try '--help'.");
            return ExitCode::from(EXIT_USAGE);
        }
        Err(err) => {
            eprintln!("quorlock: {err}");
            return ExitCode::from(EXIT_NOT_ACQUIRED);
        }
    };

    let schedule = Schedule {
        grace: args.grace,
        max_hold: args.max_hold,
        node_timeout: args.nodes.node_timeout,
    };
    let env = command_env(&guard, args);
    let code = run_held(&mut guard, &args.command, &env, &schedule, signals).await;
    if let Err(err) = guard.unlock().await {
        eprintln!("quorlock: {err}");
    }
    code
}

/// Runs `command` (with `env`) while `guard` holds, under the kill
/// schedule; its exit code. What is left of CMD's group is gone when this
/// returns, so the caller may release the lock.
async fn run_held(
    guard: &mut LockGuard,
    command: &[String],
    env: &[(&'static str, String)],
    schedule: &Schedule,
    signals: &mut Forwarded,
) -> ExitCode {
    group::become_subreaper();
    let mut group = match Group::spawn(command, env) {
        Ok(group) => group,
        Err(err) => {
            eprintln!("quorlock: cannot run {:?}: {err}", command[0]);
            return ExitCode::from(match err.kind() {
                std::io::ErrorKind::NotFound => EXIT_NOT_FOUND,
                _ => EXIT_CANNOT_EXECUTE,
            });
        }
    };
    let code = match supervise(guard, &mut group, schedule, signals).await {
        Ended::Exited(status) => exit_code_of(status),
        Ended::WaitFailed(err) => {
            eprintln!("quorlock: waiting for {:?} failed: {err}", command[0]);
            group.kill();
            ExitCode::FAILURE
        }
        Ended::Lost(why) => {
            eprintln!("quorlock: {why}; {:?} was terminated", command[0]);
            ExitCode::from(EXIT_LOST)
        }
    };
    // Nothing of CMD's group may run on once the lock is released.
    let grace = effective_grace(schedule.grace, guard.ttl());
    if group.finish(grace, guard.valid_until()).await {
        eprintln!(
            "quorlock: terminated what was left of {:?}'s process group",
            command[0]
        );
    }
    group.release();
    code
}

/// What CMD learns of its lock, in its environment: `QUORLOCK_RESOURCE`
/// (the `--resource` names, joined by commas), `QUORLOCK_KEY` (the Redis
/// key; of several resources, the first in byte order) and, with
/// `--fencing`, `QUORLOCK_FENCING_TOKEN`.
fn command_env(guard: &LockGuard, args: &RunArgs) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("QUORLOCK_RESOURCE", args.resource.join(",")),
        (
            "QUORLOCK_KEY",
            String::from_utf8_lossy(guard.key()).into_owned(),
        ),
    ];
    if let Some(token) = guard.fencing_token() {
        env.push(("QUORLOCK_FENCING_TOKEN", token.to_string()));
    }
    env
}

/// The kill schedule's parameters: `--grace`, `--max-hold`, and the node
/// timeout (the least pause between retried extensions).
struct Schedule {
    grace: Duration,
    max_hold: Duration,
    node_timeout: Duration,
}

/// How a supervised CMD ended.
enum Ended {
    /// CMD exited by itself, or after a forwarded signal.
    Exited(std::process::ExitStatus),
    /// The lock was lost or could not be kept; CMD's group was killed.
    Lost(String),
    /// Waiting for CMD failed; it is still running.
    WaitFailed(std::io::Error),
}

/// The grace between SIGTERM and SIGKILL: `--grace`, but at most half the TTL.
fn effective_grace(grace: Duration, ttl: Duration) -> Duration {
    grace.min(ttl / 2)
}

/// Why CMD is stopped at `limit`: the last failed extension, or the
/// `--max-hold` limit that stopped extensions.
fn lost_why(limit: &str, failure: &Option<String>, may_extend: bool) -> String {
    match failure {
        Some(failure) => format!("{failure}; {limit}"),
        None if may_extend => limit.to_owned(),
        None => format!("--max-hold reached; {limit}"),
    }
}

/// Extends the lock to `ttl`, unless its validity ends first (`None`).
async fn extend_within(
    guard: &mut LockGuard,
    ttl: Duration,
    valid_until: Instant,
) -> Option<quorlock::Result<()>> {
    tokio::select! {
        biased;
        _ = tokio::time::sleep_until(valid_until.into()) => None,
        extended = guard.extend(ttl) => Some(extended),
    }
}

/// Whether a failed extension may be tried again: too few nodes answered
/// (the lock may still be ours), not refused by the quorum or too late.
fn may_retry(err: &quorlock::Error) -> bool {
    matches!(
        err.lost_reason(),
        Some(LostReason::Unreachable { .. }) | None
    )
}

/// Runs the kill schedule (see the crate docs) until CMD exits or the lock
/// is gone, forwarding signals to CMD's group meanwhile.
async fn supervise(
    guard: &mut LockGuard,
    group: &mut Group,
    schedule: &Schedule,
    signals: &mut Forwarded,
) -> Ended {
    let ttl = guard.ttl();
    let grace = effective_grace(schedule.grace, ttl);
    let lead = grace + ttl / 4;
    let retry_pause = (ttl / 20).max(schedule.node_timeout);
    let mut retry_at: Option<Instant> = None;
    let mut last_failure: Option<String> = None;
    let mut terminated = false;
    loop {
        let valid_until = guard.valid_until();
        let term_at = valid_until.checked_sub(grace).unwrap_or(valid_until);
        let renew_at =
            retry_at.unwrap_or_else(|| valid_until.checked_sub(lead).unwrap_or(valid_until));
        let may_extend =
            renew_at.saturating_duration_since(guard.acquired_at()) + ttl <= schedule.max_hold;
        let why = |limit: &str, failure: &Option<String>| lost_why(limit, failure, may_extend);
        tokio::select! {
            biased;
            _ = tokio::time::sleep_until(valid_until.into()) => {
                group.kill();
                return Ended::Lost(why("the lock's validity ended (SIGKILL)", &last_failure));
            }
            _ = tokio::time::sleep_until(term_at.into()), if !terminated => {
                terminated = true;
                eprintln!("quorlock: {}", why("the lock is not extended: SIGTERM to CMD's group, SIGKILL at the end of its validity", &last_failure));
                group.signal(libc::SIGTERM);
            }
            status = group.child.wait() => {
                return match status {
                    Ok(_) if terminated => Ended::Lost(why("CMD exited after SIGTERM", &last_failure)),
                    Ok(status) => Ended::Exited(status),
                    Err(err) => Ended::WaitFailed(err),
                };
            }
            signal = signals.next() => group.signal(signal),
            _ = tokio::time::sleep_until(renew_at.into()), if may_extend => {
                match extend_within(guard, ttl, valid_until).await {
                    None => continue, // the validity ended first: the branch above acts
                    Some(Ok(())) => {
                        retry_at = None;
                        last_failure = None;
                        if terminated {
                            // Too late to take the SIGTERM back; CMD decides.
                            eprintln!("quorlock: the lock is extended again");
                        }
                    }
                    Some(Err(err)) if may_retry(&err) => {
                        retry_at = Some(Instant::now() + retry_pause);
                        last_failure = Some(err.to_string());
                    }
                    // Refused by the quorum, or too late: another client
                    // may hold the lock now.
                    Some(Err(err)) => {
                        group.kill();
                        return Ended::Lost(format!("{err} (SIGKILL at once)"));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{join_urls, parse_duration};
    use std::time::Duration;

    #[test]
    fn a_sentinel_urls_host_list_stays_one_url() {
        let pieces: Vec<String> = [
            "redis://a:1",
            "redis+sentinel://s1:26379",
            "s2:26379",
            "s3/mymaster",
            "redis://b:2",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            join_urls(&pieces),
            [
                "redis://a:1",
                "redis+sentinel://s1:26379,s2:26379,s3/mymaster",
                "redis://b:2"
            ]
        );
    }

    #[test]
    fn durations_in_human_forms() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration(" 0s "), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("2min"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("0.25"), Ok(Duration::from_millis(250)));
    }

    #[test]
    fn bad_durations_are_refused() {
        for text in [
            "",
            "s",
            "-1s",
            "10 parsecs",
            "1e999s",
            "NaNs",
            "1..2s",
            "10 fortnights",
            ".",
        ] {
            assert!(parse_duration(text).is_err(), "{text:?} was accepted");
        }
    }
}

//! `quorlock`: run a command while holding a distributed lock (a `flock` that
//! spans machines), or show who holds one.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use quorlock::{Error, Redlock};
use tokio::process::{Child, Command};
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
  76               the lock was lost while CMD ran: CMD got SIGTERM, then SIGKILL after --grace
  126 / 127        CMD could not be executed / was not found
  2                bad arguments
Exit codes of `status`: 0 held by a quorum, 1 free (no quorum can hold it), 75 unknown (the
nodes that did not answer could make a quorum with a holder).

Signals: SIGINT, SIGTERM and SIGHUP sent to quorlock are forwarded to CMD, and the lock
is released when CMD exits. Ctrl-C in a terminal reaches CMD directly as well (same
process group), so CMD may see SIGINT twice.";

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
}

#[derive(Args, Debug)]
struct NodeArgs {
    /// A Redis node URL; repeat for each independent node. Default: $QUORLOCK_NODES, comma-separated.
    #[arg(
        long = "node",
        value_name = "URL",
        env = "QUORLOCK_NODES",
        value_delimiter = ',',
        required = true
    )]
    nodes: Vec<String>,
    /// Bound on each call to one node.
    #[arg(long, value_name = "DURATION", default_value = "50ms", value_parser = parse_duration)]
    node_timeout: Duration,
    /// Prefix put before RESOURCE to form the Redis key.
    #[arg(long, value_name = "PREFIX", default_value = quorlock::DEFAULT_KEY_PREFIX)]
    key_prefix: String,
}

#[derive(Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    nodes: NodeArgs,
    /// The resource to lock.
    #[arg(long)]
    resource: String,
    /// Lock TTL; the lock is extended about a third of it before expiry. Forms: 500ms, 10s, 2m, 1h.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    ttl: Duration,
    /// How long to wait for the lock; 0 makes one attempt.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    wait: Duration,
    /// After the lock is lost: time between SIGTERM and SIGKILL to CMD.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    grace: Duration,
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
}

/// Parses `500ms`, `10s`, `1.5s`, `2m`, `1h`; a bare number is seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (examples: 500ms, 10s, 2m, 1h)"))?;
    let seconds = match unit.trim() {
        "ms" => value / 1000.0,
        "" | "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (use ms, s, m or h)"
            ));
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("{text:?} is out of range"))
}

fn main() -> ExitCode {
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
        }
    })
}

fn client(
    nodes: &NodeArgs,
    configure: impl FnOnce(quorlock::RedlockBuilder) -> quorlock::RedlockBuilder,
) -> Result<Redlock, ExitCode> {
    let builder = Redlock::builder(&nodes.nodes)
        .node_timeout(nodes.node_timeout)
        .key_prefix(&nodes.key_prefix);
    configure(builder).build().map_err(|err| {
        eprintln!("quorlock: {err}\n\nFor more information, try '--help'.");
        ExitCode::from(EXIT_USAGE)
    })
}

async fn status(args: StatusArgs) -> ExitCode {
    let redlock = match client(&args.nodes, |builder| builder) {
        Ok(redlock) => redlock,
        Err(code) => return code,
    };
    match redlock.status(&args.resource).await {
        Ok(status) => {
            println!("{status}");
            if status.is_held() {
                ExitCode::SUCCESS
            } else if status.is_free() {
                ExitCode::from(1)
            } else {
                ExitCode::from(EXIT_NOT_ACQUIRED)
            }
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

fn send_signal(child: &Child, signal: i32) {
    if let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) {
        // SAFETY: kill(2) has no memory effects; the pid is our own child's,
        // which we have not reaped yet (`id()` is None once it was reaped).
        unsafe {
            libc::kill(pid, signal);
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
    let wait = args.wait;
    let redlock = match client(&args.nodes, |builder| {
        let builder = builder.max_hold(args.max_hold);
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
    let mut signals = match Forwarded::install() {
        Ok(signals) => signals,
        Err(err) => {
            eprintln!("quorlock: cannot install signal handlers: {err}");
            return ExitCode::FAILURE;
        }
    };

    // Acquire; a signal while waiting gives up at once (nothing started yet).
    let acquired = tokio::select! {
        acquired = redlock.lock(&args.resource, args.ttl) => acquired,
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

    let mut child = match Command::new(&args.command[0])
        .args(&args.command[1..])
        .spawn()
    {
        Ok(child) => child,
        Err(err) => {
            eprintln!("quorlock: cannot run {:?}: {err}", args.command[0]);
            let _ = guard.unlock().await;
            return ExitCode::from(match err.kind() {
                std::io::ErrorKind::NotFound => EXIT_NOT_FOUND,
                _ => EXIT_CANNOT_EXECUTE,
            });
        }
    };

    // Wait for CMD under the lock, forwarding signals meanwhile.
    let outcome = guard
        .run(async {
            loop {
                tokio::select! {
                    status = child.wait() => break status,
                    signal = signals.next() => send_signal(&child, signal),
                }
            }
        })
        .await;

    match outcome {
        Ok(Ok(status)) => {
            if let Err(err) = guard.unlock().await {
                eprintln!("quorlock: {err}");
            }
            exit_code_of(status)
        }
        Ok(Err(err)) => {
            eprintln!("quorlock: waiting for {:?} failed: {err}", args.command[0]);
            send_signal(&child, libc::SIGKILL);
            let _ = child.wait().await;
            let _ = guard.unlock().await;
            ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!("quorlock: {err}; terminating {:?}", args.command[0]);
            terminate(&mut child, args.grace).await;
            let _ = guard.unlock().await;
            match err {
                Error::LockLost { .. } => ExitCode::from(EXIT_LOST),
                _ => ExitCode::FAILURE,
            }
        }
    }
}

/// SIGTERM, then SIGKILL if CMD is still running after `grace`.
async fn terminate(child: &mut Child, grace: Duration) {
    send_signal(child, libc::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        eprintln!("quorlock: still running after {grace:?}; sending SIGKILL");
        send_signal(child, libc::SIGKILL);
        let _ = child.wait().await;
    }
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations_in_human_forms() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration(" 0s "), Ok(Duration::ZERO));
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
            "10d",
        ] {
            assert!(parse_duration(text).is_err(), "{text:?} was accepted");
        }
    }
}

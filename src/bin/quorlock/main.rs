//! `quorlock`: run a command while holding a distributed lock (a `flock` that
//! spans machines), or show who holds one.
//!
//! `run.rs` runs CMD under the lock with its kill schedule; `status.rs`
//! tells who holds a lock; `elect.rs` runs CMD while this process leads an
//! election; `group.rs` is CMD's process group and its watchdog; `json.rs`
//! the `--json` output.

mod elect;
mod group;
mod json;
mod run;
mod status;
mod unlock;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use quorlock::Redlock;

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
Exit codes of `unlock`: 0 released (the token held it), 1 not held by anyone, 77 held under
another token (nothing changed), 75 unknown (nodes that did not answer may hold the token).

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
    /// Release the lock on RESOURCE held under TOKEN by another process (the
    /// QUORLOCK_TOKEN that `run` gives CMD): where the nodes hold that
    /// token, the lock is released (handed on to its first waiter); under
    /// another token, nothing changes.
    Unlock(unlock::UnlockArgs),
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
    /// Print the status as one JSON object (see docs/cli.md for its fields); the exit code
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
            Commands::Run(args) => run::run(args).await,
            Commands::Status(args) => status::status(args).await,
            Commands::Elect(args) => elect::elect(args).await,
            Commands::Leader(args) => elect::leader(args).await,
            Commands::Unlock(args) => unlock::unlock(args).await,
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

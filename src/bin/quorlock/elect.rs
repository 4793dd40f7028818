//! `quorlock elect` and `quorlock leader`: leader election from the shell.
//!
//! `elect` campaigns (waiting in the queue on the nodes for as long as it
//! takes, or until a signal), and once this process leads, runs CMD under
//! the kill schedule of `run` (the leadership is a lock: CMD is stopped when
//! it is lost) with `QUORLOCK_LEADER_ID` and `QUORLOCK_LEADER_TERM` in its
//! environment (the term is also `QUORLOCK_FENCING_TOKEN`); when CMD exits,
//! it resigns, and a standby leads next. It runs CMD once: to stay a
//! candidate, run it again (a service manager's restart does).
//!
//! `leader` prints who leads: exit 0 with a leader, 1 with none, 75 when
//! too few nodes answered to tell.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::json;

use super::run::{Forwarded, Schedule, kept_by_schedule, run_held};
use super::{EXIT_NOT_ACQUIRED, EXIT_USAGE, NodeArgs, client, parse_duration};

#[derive(Args, Debug)]
pub struct ElectArgs {
    #[command(flatten)]
    nodes: NodeArgs,
    /// The election: one leader at a time per name, across every machine.
    #[arg(long)]
    name: String,
    /// What this process publishes as its identity while it leads (what
    /// `quorlock leader` shows). Default: HOSTNAME:PID.
    #[arg(long, value_name = "ID")]
    id: Option<String>,
    /// The leader's lease; it is extended about a third of it before expiry. A standby takes
    /// over within it when the leader dies. Forms: 500ms, 10s, 2m, 1h.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    ttl: Duration,
    /// Time between SIGTERM and SIGKILL to CMD's group when the leadership cannot be kept
    /// (capped at ttl/2).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    grace: Duration,
    /// The longest CMD may lead (extension stops then).
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = parse_duration)]
    max_hold: Duration,
    /// The command to run while leading, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct LeaderArgs {
    #[command(flatten)]
    nodes: NodeArgs,
    /// The election.
    #[arg(long)]
    name: String,
    /// Print one JSON object: {"name", "state": "led" | "none" | "unknown",
    /// "identity", "term", "remaining_ms"} (null where there is no leader).
    #[arg(long)]
    json: bool,
}

/// This machine's name, and the process id.
fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}:{}", std::process::id())
}

/// `elect`: campaign, run CMD while leading, resign.
pub async fn elect(args: ElectArgs) -> ExitCode {
    // The schedule extends the lease itself (as `run` does).
    let redlock = match client(&args.nodes, |builder| {
        kept_by_schedule(builder, args.grace, args.ttl, args.max_hold)
    }) {
        Ok(redlock) => redlock,
        Err(code) => return code,
    };
    let mut signals = match Forwarded::install_or_exit() {
        Ok(signals) => signals,
        Err(code) => return code,
    };
    let identity = args.id.clone().unwrap_or_else(default_identity);
    let mut leadership = match campaign(&redlock, &args, &identity, &mut signals).await {
        Ok(leadership) => leadership,
        Err(code) => return code,
    };
    let term = leadership.term().to_string();
    eprintln!(
        "quorlock: leading {:?} as {identity:?}, term {term}",
        args.name
    );
    let env = [
        ("QUORLOCK_LEADER_ID", identity),
        ("QUORLOCK_LEADER_TERM", term.clone()),
        ("QUORLOCK_FENCING_TOKEN", term),
    ];
    let schedule = Schedule {
        grace: args.grace,
        max_hold: args.max_hold,
    };
    let code = run_held(
        &mut leadership,
        &args.command,
        &env,
        &schedule,
        &mut signals,
    )
    .await;
    if let Err(err) = leadership.resign().await {
        eprintln!("quorlock: {err}");
    }
    let bound = args.nodes.connect_timeout + args.nodes.node_timeout * 3;
    let _ = tokio::time::timeout(bound, redlock.flush()).await;
    code
}

/// Campaigns until this process leads, or a signal (its exit code then).
async fn campaign(
    redlock: &quorlock::Redlock,
    args: &ElectArgs,
    identity: &str,
    signals: &mut Forwarded,
) -> Result<quorlock::Leadership, ExitCode> {
    let campaign = redlock.campaign(&args.name, identity, args.ttl);
    let won = tokio::select! {
        won = campaign => won,
        signal = signals.next() => {
            eprintln!("quorlock: interrupted while campaigning");
            return Err(ExitCode::from(u8::try_from(128 + signal).unwrap_or(1)));
        }
    };
    won.map_err(|err| {
        if err.is_invalid_input() {
            eprintln!("quorlock: {err}\n\nFor more information, try '--help'.");
            ExitCode::from(EXIT_USAGE)
        } else {
            eprintln!("quorlock: {err}");
            ExitCode::from(EXIT_NOT_ACQUIRED)
        }
    })
}

/// `leader`: who leads, as text or JSON; exit 0 led, 1 none, 75 unknown.
pub async fn leader(args: LeaderArgs) -> ExitCode {
    let redlock = match client(&args.nodes, |builder| builder) {
        Ok(redlock) => redlock,
        Err(code) => return code,
    };
    let name = &args.name;
    let (shown, code) = match redlock.leader(name).await {
        Ok(Some(leader)) => {
            let remaining_ms = u64::try_from(leader.remaining.as_millis()).unwrap_or(u64::MAX);
            let shown = if args.json {
                json!({"name": name, "state": "led", "identity": leader.identity,
                       "term": leader.term, "remaining_ms": remaining_ms})
                .to_string()
            } else {
                format!(
                    "{name}: led by {} (term {}, lease {:?} left)",
                    leader.identity, leader.term, leader.remaining
                )
            };
            (shown, ExitCode::SUCCESS)
        }
        Ok(None) => {
            let shown = if args.json {
                json!({"name": name, "state": "none", "identity": null, "term": null,
                       "remaining_ms": null})
                .to_string()
            } else {
                format!("{name}: no leader")
            };
            (shown, ExitCode::from(1))
        }
        Err(err) if err.is_invalid_input() => {
            eprintln!("quorlock: {err}\n\nFor more information, try '--help'.");
            return ExitCode::from(EXIT_USAGE);
        }
        Err(err) => {
            eprintln!("quorlock: {err}");
            let shown = if args.json {
                json!({"name": name, "state": "unknown", "identity": null, "term": null,
                       "remaining_ms": null})
                .to_string()
            } else {
                format!("{name}: unknown")
            };
            (shown, ExitCode::from(EXIT_NOT_ACQUIRED))
        }
    };
    println!("{shown}");
    code
}

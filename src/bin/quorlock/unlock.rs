//! `quorlock unlock`: releases a lock held by another process, by its
//! token (the `QUORLOCK_TOKEN` that `run` gives CMD, or
//! `LockGuard::token` in a program).
//!
//! Exit codes: 0 released, 1 not held (by anyone), 77 held under another
//! token (nothing changed), 75 unknown (nodes that did not answer may
//! still hold the token), 2 bad arguments. `--json` prints one object:
//!
//! ```text
//! {"resource": "deploy", "outcome": "released" | "held_by_other" | "not_held" | "unknown",
//!  "nodes": 3 | null,       (released: the nodes that held the token; held_by_other: those holding another)
//!  "unanswered": 1 | null}  (unknown)
//! ```

use std::process::ExitCode;

use clap::Args;
use quorlock::TokenRelease;
use serde_json::json;

use super::{EXIT_NOT_ACQUIRED, EXIT_USAGE, NodeArgs, client};

/// The lock is held under another token: nothing was changed.
const EXIT_HELD_BY_OTHER: u8 = 77;

#[derive(Args, Debug)]
pub(super) struct UnlockArgs {
    #[command(flatten)]
    nodes: NodeArgs,
    /// The resource whose lock to release (a lock on one resource).
    #[arg(long)]
    resource: String,
    /// The lock's token. Default: $QUORLOCK_TOKEN, which `run` gives CMD (an
    /// argument shows in `ps`; the environment does not).
    #[arg(long, env = "QUORLOCK_TOKEN", hide_env_values = true)]
    token: String,
    /// Print the outcome as one JSON object; the exit code is the same.
    #[arg(long)]
    json: bool,
}

/// `unlock`: the release by token, and what it found.
pub(super) async fn unlock(args: UnlockArgs) -> ExitCode {
    let redlock = match client(&args.nodes, |builder| builder) {
        Ok(redlock) => redlock,
        Err(code) => return code,
    };
    let found = redlock.unlock_token(&args.resource, &args.token).await;
    // The release's last calls, which a node answered late, still go out.
    redlock.flush().await;
    let found = match found {
        Ok(found) => found,
        Err(err) => {
            eprintln!("quorlock: {err}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let (outcome, nodes, unanswered, code) = match found {
        TokenRelease::Released { nodes } => ("released", Some(nodes), None, 0),
        TokenRelease::HeldByOther { nodes } => {
            ("held_by_other", Some(nodes), None, EXIT_HELD_BY_OTHER)
        }
        TokenRelease::NotHeld => ("not_held", None, None, 1),
        TokenRelease::Unknown { unanswered } => {
            ("unknown", None, Some(unanswered), EXIT_NOT_ACQUIRED)
        }
        _ => ("unknown", None, None, EXIT_NOT_ACQUIRED),
    };
    if args.json {
        let shown = json!({
            "resource": args.resource,
            "outcome": outcome,
            "nodes": nodes,
            "unanswered": unanswered,
        });
        println!("{shown}");
    } else {
        println!("{}", text(&args.resource, found));
    }
    ExitCode::from(code)
}

/// The outcome as a line of text.
fn text(resource: &str, found: TokenRelease) -> String {
    match found {
        TokenRelease::Released { nodes } => {
            format!("released {resource}: the token held it on {nodes} node(s)")
        }
        TokenRelease::HeldByOther { nodes } => format!(
            "not released: {resource} is held under another token on {nodes} node(s); nothing changed"
        ),
        TokenRelease::NotHeld => format!("not released: no node holds {resource}"),
        TokenRelease::Unknown { unanswered } => format!(
            "unknown: no node released {resource}, but {unanswered} node(s) did not answer \
             and may hold the token until its TTL"
        ),
        _ => format!("unknown: the outcome for {resource} is not known to this version"),
    }
}

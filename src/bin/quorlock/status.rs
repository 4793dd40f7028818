//! `quorlock status`: who holds a lock, as a quorum of nodes tells it.

use std::process::ExitCode;

use super::{EXIT_NOT_ACQUIRED, EXIT_USAGE, StatusArgs, client, json};

/// What `status` found, and its exit code: 0 held, 1 free, 75 unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    Held,
    Free,
    Unknown,
}

impl Verdict {
    pub(super) fn of(held: bool, free: bool) -> Verdict {
        match (held, free) {
            (true, _) => Verdict::Held,
            (false, true) => Verdict::Free,
            (false, false) => Verdict::Unknown,
        }
    }

    /// A plain lock's: held by a quorum, free when no quorum can hold it.
    pub(super) fn of_lock(status: &quorlock::LockStatus) -> Verdict {
        Verdict::of(status.is_held(), status.is_free())
    }

    /// As `status --json` names it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Verdict::Held => "held",
            Verdict::Free => "free",
            Verdict::Unknown => "unknown",
        }
    }

    pub(super) fn exit_code(self) -> ExitCode {
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
pub(super) async fn status(args: StatusArgs) -> ExitCode {
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

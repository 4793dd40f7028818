//! `quorlock run`: CMD under the lock, with the kill schedule
//! ([`supervise`]; the schedule, its table and the watchdog are described
//! in `docs/cli.md`, "The kill schedule"). Before exiting, `quorlock` waits
//! (bounded) for the releases it runs in the background, such as the
//! cleanup of an acquire round cut short by a signal.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use quorlock::{LockGuard, LostReason, Redlock};
use tokio::signal::unix::{SignalKind, signal};

use super::group::{self, Group};
use super::{
    EXIT_CANNOT_EXECUTE, EXIT_LOST, EXIT_NOT_ACQUIRED, EXIT_NOT_FOUND, EXIT_USAGE, RunArgs, client,
};

/// The signals forwarded to CMD.
pub(super) struct Forwarded {
    pub(super) interrupt: tokio::signal::unix::Signal,
    pub(super) terminate: tokio::signal::unix::Signal,
    pub(super) hangup: tokio::signal::unix::Signal,
}

impl Forwarded {
    /// The handlers, or the exit code of a failure to install them (said).
    pub(super) fn install_or_exit() -> Result<Self, ExitCode> {
        Self::install().map_err(|err| {
            eprintln!("quorlock: cannot install signal handlers: {err}");
            ExitCode::FAILURE
        })
    }

    pub(super) fn install() -> std::io::Result<Self> {
        Ok(Forwarded {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// The next signal received, as its number.
    pub(super) async fn next(&mut self) -> i32 {
        tokio::select! {
            _ = self.interrupt.recv() => libc::SIGINT,
            _ = self.terminate.recv() => libc::SIGTERM,
            _ = self.hangup.recv() => libc::SIGHUP,
        }
    }
}

pub(super) fn exit_code_of(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1)),
        (None, Some(signal)) => ExitCode::from(u8::try_from(128 + signal).unwrap_or(1)),
        (None, None) => ExitCode::FAILURE,
    }
}

pub(super) async fn run(args: RunArgs) -> ExitCode {
    if (args.read || args.write) && args.resource.len() > 1 {
        eprintln!(
            "quorlock: --read and --write take one --resource (a read-write lock is on one resource)\n\nFor more information, try '--help'."
        );
        return ExitCode::from(EXIT_USAGE);
    }
    let wait = args.wait;
    let redlock = match client(&args.nodes, |builder| {
        // The keeper extends as the kill schedule needs.
        let builder =
            kept_by_schedule(builder, args.grace, args.ttl, args.max_hold).fencing(args.fencing);
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
pub(super) async fn acquire_asked(
    redlock: &Redlock,
    args: &RunArgs,
) -> quorlock::Result<quorlock::LockGuard> {
    match &args.resource[..] {
        [one] if args.read => redlock.read(one, args.ttl).await,
        [one] if args.write => redlock.write(one, args.ttl).await,
        [one] => redlock.lock(one, args.ttl).await,
        several => redlock.lock_all(several, args.ttl).await,
    }
}

pub(super) async fn lock_and_run(
    redlock: &Redlock,
    args: &RunArgs,
    signals: &mut Forwarded,
) -> ExitCode {
    // Acquire; a signal while waiting gives up at once (nothing started yet;
    // what the round in flight set is released in the background).
    let acquired = tokio::select! {
        acquired = acquire_asked(redlock, args) => acquired,
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
pub(super) async fn run_held(
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
/// key; of several resources, the first in byte order), `QUORLOCK_TOKEN`
/// (the lock's token: a secret, with which `quorlock unlock` releases a
/// lock on one resource from any process) and, with `--fencing`,
/// `QUORLOCK_FENCING_TOKEN`.
pub(super) fn command_env(guard: &LockGuard, args: &RunArgs) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("QUORLOCK_RESOURCE", args.resource.join(",")),
        (
            "QUORLOCK_KEY",
            String::from_utf8_lossy(guard.key()).into_owned(),
        ),
        ("QUORLOCK_TOKEN", guard.token().to_owned()),
    ];
    if let Some(token) = guard.fencing_token() {
        env.push(("QUORLOCK_FENCING_TOKEN", token.to_string()));
    }
    env
}

/// The kill schedule's parameters: `--grace`, and `--max-hold` (to say
/// why a lock was no longer extended).
pub(super) struct Schedule {
    pub(super) grace: Duration,
    pub(super) max_hold: Duration,
}

/// The client options that make the library's keeper extend as the kill
/// schedule needs: `grace + ttl / 4` before the validity ends (before the
/// SIGTERM at `grace` before it), never past `--max-hold`.
pub(super) fn kept_by_schedule(
    builder: quorlock::RedlockBuilder,
    grace: Duration,
    ttl: Duration,
    max_hold: Duration,
) -> quorlock::RedlockBuilder {
    builder
        .max_hold(max_hold)
        .renew_when_left(renewal_lead(grace, ttl))
}

/// How much validity is left when the lock is extended: `grace + ttl / 4`.
pub(super) fn renewal_lead(grace: Duration, ttl: Duration) -> Duration {
    effective_grace(grace, ttl) + ttl / 4
}

/// Why the lock with validity until `valid_until` was not extended: the
/// keeper stops before an extension would carry it past `--max-hold`
/// (the library's rule), else its extensions failed.
fn not_extended_why(guard: &LockGuard, schedule: &Schedule, valid_until: Instant) -> &'static str {
    let ttl = guard.ttl();
    let renew_at = valid_until
        .checked_sub(renewal_lead(schedule.grace, ttl))
        .unwrap_or(valid_until);
    if renew_at.saturating_duration_since(guard.acquired_at()) + ttl > schedule.max_hold {
        "--max-hold reached"
    } else {
        "its extensions failed"
    }
}

/// How a supervised CMD ended.
pub(super) enum Ended {
    /// CMD exited by itself, or after a forwarded signal.
    Exited(std::process::ExitStatus),
    /// The lock was lost or could not be kept; CMD's group was killed.
    Lost(String),
    /// Waiting for CMD failed; it is still running.
    WaitFailed(std::io::Error),
}

/// The grace between SIGTERM and SIGKILL: `--grace`, but at most half the TTL.
pub(super) fn effective_grace(grace: Duration, ttl: Duration) -> Duration {
    grace.min(ttl / 2)
}

/// Why CMD's group was killed when the lock was lost (`lost`, as
/// [`LockGuard::lost`] told it): at once when another client may hold the
/// lock (a quorum refused an extension, or its servers changed), else at
/// the end of the validity (extensions failed, or `--max-hold` stopped
/// them).
pub(super) fn lost_why(lost: &quorlock::Error) -> String {
    match lost.lost_reason() {
        Some(LostReason::Expired | LostReason::Unreachable { .. } | LostReason::LimitReached) => {
            format!("{lost}: the lock's validity ended (SIGKILL)")
        }
        _ => format!("{lost} (SIGKILL at once)"),
    }
}

/// Runs the kill schedule (see `docs/cli.md`) until CMD exits or the lock
/// is gone, forwarding signals to CMD's group meanwhile. The lock is kept
/// by the library's keeper ([`LockGuard::keep_alive`], set up by
/// [`kept_by_schedule`]); its loss ([`LockGuard::lost`]) kills the group.
pub(super) async fn supervise(
    guard: &mut LockGuard,
    group: &mut Group,
    schedule: &Schedule,
    signals: &mut Forwarded,
) -> Ended {
    let grace = effective_grace(schedule.grace, guard.ttl());
    let lost = guard.lost();
    tokio::pin!(lost);
    if let Err(err) = guard.keep_alive() {
        group.kill();
        return Ended::Lost(format!("{err} (SIGKILL at once)"));
    }
    let mut terminated = false;
    loop {
        let valid_until = guard.valid_until();
        let term_at = valid_until.checked_sub(grace).unwrap_or(valid_until);
        tokio::select! {
            biased;
            lost = &mut lost => {
                group.kill();
                return Ended::Lost(lost_why(&lost));
            }
            _ = tokio::time::sleep_until(term_at.into()), if !terminated => {
                if guard.valid_until() > valid_until {
                    continue; // extended meanwhile
                }
                terminated = true;
                let why = not_extended_why(guard, schedule, valid_until);
                eprintln!("quorlock: the lock is not extended ({why}): SIGTERM to CMD's group, SIGKILL at the end of its validity");
                group.signal(libc::SIGTERM);
            }
            status = group.child.wait() => {
                return match status {
                    Ok(_) if terminated => Ended::Lost("CMD exited after SIGTERM".to_owned()),
                    Ok(status) => Ended::Exited(status),
                    Err(err) => Ended::WaitFailed(err),
                };
            }
            signal = signals.next() => group.signal(signal),
        }
    }
}

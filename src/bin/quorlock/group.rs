//! CMD's process group: CMD runs as the leader of a group of its own, so that
//! every signal reaches everything it started (children that ignore SIGTERM
//! included), and the group never outlives `quorlock`:
//!
//! - **quorlock exits**: whatever is left of the group is terminated first
//!   (SIGTERM, then SIGKILL), before the lock is released;
//! - **quorlock dies** (SIGKILL, a crash): a watchdog process, `quorlock`
//!   itself started with a hidden argument, reads a pipe whose only writer is
//!   `quorlock`. When the pipe closes without the "stand down" byte that a
//!   normal exit writes, the watchdog kills the group with SIGKILL. The
//!   watchdog ignores SIGINT, SIGTERM and SIGHUP, so that the signals a
//!   terminal or a supervisor sends to `quorlock`'s group do not stop it
//!   first. On Linux CMD also gets `PR_SET_PDEATHSIG` (SIGKILL), in case the
//!   watchdog itself was killed.
//! - `quorlock` is a child subreaper (Linux), so that CMD's orphaned
//!   children are its own to reap, and "is anything of the group left" is a
//!   question with an answer (`killpg(pgid, 0)`), not one that a zombie
//!   left to an init that does not reap answers "yes" forever.
//!
//! **Not covered**: a process that leaves the group (`setsid`, `setpgid`) is
//! no longer reached by any of this.
//!
//! **The terminal.** A group other than the terminal's foreground group is
//! stopped (SIGTTIN) when it reads the terminal. When `quorlock` runs in the
//! foreground of a terminal, CMD's group is made the foreground group before
//! CMD starts (and the terminal handed back when it ends), so interactive
//! commands work, and Ctrl-C reaches CMD (once) rather than `quorlock`.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

/// The hidden first argument that makes `quorlock` the watchdog of a group.
pub const WATCHDOG_ARG: &str = "__watch-group";

/// CMD, the leader of its own process group, and its watchdog.
pub struct Group {
    pub child: Child,
    pgid: libc::pid_t,
    /// Write end of the watchdog's pipe: closing it without writing kills the group.
    watchdog_pipe: Option<std::io::PipeWriter>,
    watchdog: Option<std::process::Child>,
    /// Whether the terminal was handed to the group (and must be taken back).
    has_terminal: bool,
}

impl Group {
    /// Starts `command` as the leader of a new process group, with its watchdog.
    pub fn spawn(command: &[String], env: &[(&str, String)]) -> std::io::Result<Group> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| std::io::Error::other("no command"))?;
        // SAFETY: getpgrp, tcgetpgrp and isatty have no memory effects.
        let our_group = unsafe { libc::getpgrp() };
        let foreground = unsafe { libc::isatty(0) == 1 && libc::tcgetpgrp(0) == our_group };
        // SAFETY: getpid has no memory effects.
        let quorlock = unsafe { libc::getpid() };
        let mut cmd = Command::new(program);
        cmd.args(args).process_group(0);
        cmd.envs(env.iter().map(|(name, value)| (name, value)));
        // SAFETY: the closure runs in the child between fork and exec, and
        // calls only async-signal-safe functions (prctl, getppid, _exit,
        // sigprocmask, tcsetpgrp, getpid), touching no locks or allocations.
        unsafe {
            cmd.as_std_mut().pre_exec(move || {
                #[cfg(target_os = "linux")]
                {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    // quorlock died before the line above: nobody holds the lock.
                    if libc::getppid() != quorlock {
                        libc::_exit(EXIT_ORPHANED);
                    }
                }
                #[cfg(not(target_os = "linux"))]
                let _ = quorlock;
                if foreground {
                    // Take the terminal for the new group; from a background
                    // group that raises SIGTTOU unless it is blocked.
                    let mut block: libc::sigset_t = std::mem::zeroed();
                    let mut previous: libc::sigset_t = std::mem::zeroed();
                    libc::sigemptyset(&mut block);
                    libc::sigaddset(&mut block, libc::SIGTTOU);
                    libc::sigprocmask(libc::SIG_BLOCK, &block, &mut previous);
                    libc::tcsetpgrp(0, libc::getpid());
                    libc::sigprocmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut());
                }
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        let pgid = child
            .id()
            .and_then(|pid| libc::pid_t::try_from(pid).ok())
            .ok_or_else(|| std::io::Error::other("CMD has no pid"))?;
        let mut group = Group {
            child,
            pgid,
            watchdog_pipe: None,
            watchdog: None,
            has_terminal: foreground,
        };
        match start_watchdog(pgid) {
            Ok((pipe, watchdog)) => {
                group.watchdog_pipe = Some(pipe);
                group.watchdog = Some(watchdog);
            }
            Err(err) => {
                eprintln!("quorlock: cannot start the watchdog of CMD's group: {err}");
                group.kill();
                return Err(err);
            }
        }
        Ok(group)
    }

    /// Sends `signal` to every process of the group.
    pub fn signal(&self, signal: i32) {
        // SAFETY: killpg has no memory effects; the group is ours (its
        // leader is our child, or the watchdog has not been stood down).
        unsafe {
            libc::killpg(self.pgid, signal);
        }
    }

    /// SIGKILL to the whole group, at once.
    pub fn kill(&self) {
        self.signal(libc::SIGKILL);
    }

    /// Whether any process of the group is left (after reaping the ones that
    /// are ours and have exited).
    fn any_left(&self) -> bool {
        loop {
            let mut status = 0;
            // SAFETY: waitpid writes only `status`. Only called once the
            // leader (CMD) was reaped by tokio, so this cannot take its status.
            let reaped = unsafe { libc::waitpid(-self.pgid, &mut status, libc::WNOHANG) };
            if reaped <= 0 {
                break;
            }
        }
        // SAFETY: as in `signal`; signal 0 only checks for existence.
        unsafe { libc::killpg(self.pgid, 0) == 0 }
    }

    /// After CMD itself exited: terminates what is left of its group
    /// (SIGTERM, then SIGKILL after `grace` or at `latest`, whichever comes
    /// first) and waits until none of it is left (at most 2 s after the
    /// SIGKILL). Returns whether anything was left.
    pub async fn finish(&mut self, grace: Duration, latest: Instant) -> bool {
        if !self.any_left() {
            return false;
        }
        self.signal(libc::SIGTERM);
        let kill_at = (Instant::now() + grace).min(latest);
        while Instant::now() < kill_at && self.any_left() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let killed = Instant::now();
        while self.any_left() && killed.elapsed() < Duration::from_secs(2) {
            self.kill();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }

    /// Stands the watchdog down (the group is gone) and takes the terminal back.
    pub fn release(mut self) {
        self.stand_down();
    }

    fn stand_down(&mut self) {
        if let Some(mut pipe) = self.watchdog_pipe.take() {
            let _ = pipe.write_all(b"x");
        }
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.wait();
        }
        if self.has_terminal {
            self.has_terminal = false;
            // SAFETY: signal and tcsetpgrp have no memory effects. SIGTTOU
            // is ignored first: quorlock is in a background group now.
            unsafe {
                libc::signal(libc::SIGTTOU, libc::SIG_IGN);
                libc::tcsetpgrp(0, libc::getpgrp());
            }
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // Not released normally (an error path): nothing of the group may
        // outlive quorlock.
        if self.watchdog_pipe.is_some() {
            self.kill();
            self.stand_down();
        }
    }
}

/// CMD's exit code when quorlock died before CMD could arrange to die with it.
const EXIT_ORPHANED: i32 = 125;

/// Starts `quorlock` as the watchdog of group `pgid`, reading a pipe.
fn start_watchdog(
    pgid: libc::pid_t,
) -> std::io::Result<(std::io::PipeWriter, std::process::Child)> {
    let (reader, writer) = std::io::pipe()?;
    let watchdog = std::process::Command::new(std::env::current_exe()?)
        .arg(WATCHDOG_ARG)
        .arg(pgid.to_string())
        .stdin(Stdio::from(reader))
        .stdout(Stdio::null())
        .spawn()?;
    Ok((writer, watchdog))
}

/// The watchdog's main: waits until `quorlock` stands it down (one byte on
/// stdin) or dies (stdin closes without it), and then kills group `pgid`.
pub fn watch(pgid: &str) -> std::process::ExitCode {
    let Ok(pgid) = pgid.parse::<libc::pid_t>() else {
        return std::process::ExitCode::from(2);
    };
    // SAFETY: setting dispositions to SIG_IGN has no memory effects.
    unsafe {
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::signal(signal, libc::SIG_IGN);
        }
    }
    let mut byte = [0u8; 1];
    let stood_down = loop {
        match std::io::Read::read(&mut std::io::stdin(), &mut byte) {
            Ok(read) => break read == 1,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break false,
        }
    };
    if !stood_down && pgid > 1 {
        // SAFETY: killpg has no memory effects.
        unsafe {
            libc::killpg(pgid, libc::SIGKILL);
        }
    }
    std::process::ExitCode::SUCCESS
}

/// Makes `quorlock` the reaper of CMD's orphaned descendants (Linux).
pub fn become_subreaper() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with these arguments has no memory effects.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
    }
}

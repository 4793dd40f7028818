//! The `quorlock` command-line tool, run as a process against real servers.
#![cfg(feature = "cli")]

mod support;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::{RedisServer, servers, urls};

const EXIT_NOT_ACQUIRED: i32 = 75;
const EXIT_LOST: i32 = 76;

fn quorlock(nodes: &[RedisServer]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_quorlock"));
    command.env("QUORLOCK_NODES", urls(nodes).join(","));
    command
}

fn output(command: &mut Command) -> Output {
    command.stdin(Stdio::null()).output().expect("run quorlock")
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("quorlock-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Two `quorlock run` loops of a command that appends start/end lines to a
/// file never interleave; the same commands without the lock do.
#[test]
fn two_runs_never_interleave() {
    let nodes = servers(3);
    let dir = scratch("interleave");
    let journal = dir.join("journal");
    let section = format!(
        "echo start $$ >> {0}; sleep 0.05; echo end $$ >> {0}",
        journal.display()
    );
    let run_many = |locked: bool| {
        let mut children = Vec::new();
        for _ in 0..2 {
            let script = if locked {
                format!(
                    "for i in 1 2 3 4 5; do {} run --resource cli:journal --ttl 2s --wait 20s -- sh -c '{section}' || exit 1; done",
                    env!("CARGO_BIN_EXE_quorlock")
                )
            } else {
                format!("for i in 1 2 3 4 5; do sh -c '{section}'; done")
            };
            children.push(
                Command::new("sh")
                    .arg("-c")
                    .arg(script)
                    .env("QUORLOCK_NODES", urls(&nodes).join(","))
                    .spawn()
                    .unwrap(),
            );
        }
        for mut child in children {
            assert!(child.wait().unwrap().success());
        }
        let text = std::fs::read_to_string(&journal).unwrap();
        std::fs::remove_file(&journal).unwrap();
        text
    };
    let interleaved = |text: &str| {
        let lines: Vec<&str> = text.lines().collect();
        lines.chunks(2).any(|pair| {
            pair.len() != 2
                || !pair[0].starts_with("start ")
                || pair[1] != pair[0].replacen("start", "end", 1)
        })
    };

    let locked = run_many(true);
    assert_eq!(locked.lines().count(), 20);
    assert!(
        !interleaved(&locked),
        "locked sections interleaved:\n{locked}"
    );
    let unlocked = run_many(false);
    assert!(
        interleaved(&unlocked),
        "the control without a lock should interleave:\n{unlocked}"
    );
}

/// Killing the majority of nodes while CMD runs terminates CMD, and quorlock
/// exits with the lost-lock code.
#[test]
fn majority_killed_terminates_cmd_with_the_lost_code() {
    let mut nodes = servers(3);
    let dir = scratch("lost");
    let pid_file = dir.join("pid");
    let mut child = quorlock(&nodes)
        .args([
            "run",
            "--resource",
            "cli:lost",
            "--ttl",
            "1s",
            "--grace",
            "2s",
            "--",
        ])
        .args([
            "sh",
            "-c",
            &format!("echo $$ > {}; exec sleep 60", pid_file.display()),
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let cmd_pid = wait_for_pid(&pid_file);
    nodes[0].kill();
    nodes[1].kill();
    let killed = Instant::now();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(EXIT_LOST));
    assert!(
        killed.elapsed() < Duration::from_secs(5),
        "took {:?}",
        killed.elapsed()
    );
    assert!(!process_alive(&cmd_pid), "CMD was terminated");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("lost"), "stderr says why: {stderr}");
}

/// A CMD that ignores SIGTERM gets SIGKILL after the grace period.
#[test]
fn cmd_ignoring_sigterm_is_killed_after_the_grace() {
    let mut nodes = servers(1);
    let dir = scratch("grace");
    let pid_file = dir.join("pid");
    let mut child = quorlock(&nodes)
        .args([
            "run",
            "--resource",
            "cli:grace",
            "--ttl",
            "600ms",
            "--grace",
            "500ms",
            "--",
        ])
        .args([
            "sh",
            "-c",
            &format!(
                "trap '' TERM; echo $$ > {}; while :; do sleep 0.1; done",
                pid_file.display()
            ),
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let cmd_pid = wait_for_pid(&pid_file);
    nodes[0].kill();
    assert_eq!(child.wait().unwrap().code(), Some(EXIT_LOST));
    assert!(!process_alive(&cmd_pid), "CMD got SIGKILL");
}

/// The pid CMD wrote to `pid_file`, once it has (at most 10 s).
fn wait_for_pid(pid_file: &Path) -> String {
    let started = Instant::now();
    loop {
        let pid = std::fs::read_to_string(pid_file).unwrap_or_default();
        if !pid.trim().is_empty() {
            return pid.trim().to_owned();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "CMD never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn process_alive(pid: &str) -> bool {
    // A zombie still answers kill -0; read its state instead.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .split(") ")
            .nth(1)
            .is_some_and(|rest| rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// While one `quorlock run` holds the lock, a second with `--wait 1s` gives up
/// with the could-not-acquire code after about a second, without running CMD;
/// `status` shows the holder on every node meanwhile.
#[test]
fn held_lock_makes_a_second_run_give_up_and_status_shows_the_holder() {
    let nodes = servers(3);
    let dir = scratch("held");
    let marker = dir.join("ran");
    let mut holder = quorlock(&nodes)
        .args([
            "run",
            "--resource",
            "cli:held",
            "--ttl",
            "2s",
            "--",
            "sleep",
            "3",
        ])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the holder has the lock.
    let started = Instant::now();
    loop {
        let out = output(quorlock(&nodes).args(["status", "--resource", "cli:held"]));
        if out.status.code() == Some(0) {
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let prefixes: Vec<&str> = text
                .lines()
                .filter_map(|line| line.split("held by ").nth(1))
                .filter_map(|rest| rest.split('…').next())
                .collect();
            assert!(
                prefixes.iter().all(|p| p.len() == 8 && *p == prefixes[0]),
                "one holder everywhere:\n{text}"
            );
            // The quorum may answer before the last node has the key.
            if prefixes.len() == 4 {
                break;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "status never showed the holder on every node"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let waited = Instant::now();
    let out = output(
        quorlock(&nodes)
            .args([
                "run",
                "--resource",
                "cli:held",
                "--wait",
                "1s",
                "--",
                "touch",
            ])
            .arg(&marker),
    );
    let elapsed = waited.elapsed();
    assert_eq!(
        out.status.code(),
        Some(EXIT_NOT_ACQUIRED),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        elapsed >= Duration::from_millis(700) && elapsed < Duration::from_secs(3),
        "gave up after {elapsed:?}"
    );
    assert!(
        !Path::new(&marker).exists(),
        "CMD must not run without the lock"
    );

    assert_eq!(holder.wait().unwrap().code(), Some(0));
    let out = output(quorlock(&nodes).args(["status", "--resource", "cli:held"]));
    assert_eq!(out.status.code(), Some(1), "free after the holder exits");
}

/// CMD's exit code passes through; a missing CMD is 127; bad arguments exit 2
/// with a usage line.
#[test]
fn exit_codes_and_bad_arguments() {
    let nodes = servers(1);
    let out = output(quorlock(&nodes).args([
        "run",
        "--resource",
        "cli:codes",
        "--",
        "sh",
        "-c",
        "exit 7",
    ]));
    assert_eq!(out.status.code(), Some(7));
    let out =
        output(quorlock(&nodes).args(["run", "--resource", "cli:codes", "--", "/no/such/cmd"]));
    assert_eq!(out.status.code(), Some(127));
    for args in [
        &["run", "--resource", "x", "--ttl", "ten", "--", "true"][..],
        &["run", "--resource", "x"][..],
        &["run", "--resource", "x", "--ttl", "0s", "--", "true"][..],
        &["frobnicate"][..],
    ] {
        let out = output(quorlock(&nodes).args(args));
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("Usage") || stderr.contains("--help"),
            "{args:?}: {stderr}"
        );
    }
    let out = output(
        Command::new(env!("CARGO_BIN_EXE_quorlock"))
            .env_remove("QUORLOCK_NODES")
            .args(["status", "--resource", "x"]),
    );
    assert_eq!(out.status.code(), Some(2), "no nodes at all");
}

/// SIGTERM to quorlock is forwarded to CMD, and the lock is released after.
#[test]
fn sigterm_is_forwarded_and_the_lock_released() {
    let nodes = servers(1);
    let child = quorlock(&nodes)
        .args([
            "run",
            "--resource",
            "cli:signal",
            "--",
            "sh",
            "-c",
            "trap 'exit 9' TERM; while :; do sleep 0.05; done",
        ])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while output(quorlock(&nodes).args(["status", "--resource", "cli:signal"]))
        .status
        .code()
        != Some(0)
    {
        assert!(started.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let status = child.wait_with_output().unwrap().status;
    assert_eq!(status.code(), Some(9), "CMD's own exit code after its trap");
    let out = output(quorlock(&nodes).args(["status", "--resource", "cli:signal"]));
    assert_eq!(out.status.code(), Some(1), "released");
}

/// `status` says "free" only when enough nodes answered that no quorum can
/// hold the lock: with the holder's key deleted on one node and the third
/// node frozen, the frozen node may still hold it with the second, so the
/// answer is "unknown" (75), not "free" (1).
#[test]
fn status_is_unknown_while_a_silent_node_could_make_a_quorum() {
    let nodes = servers(3);
    let holder = quorlock(&nodes)
        .args([
            "run",
            "--resource",
            "cli:status",
            "--ttl",
            "10s",
            "--",
            "sleep",
            "30",
        ])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut holder = KillOnDrop(holder);
    let key = b"quorlock:cli:status";
    let started = Instant::now();
    while nodes.iter().any(|node| node.get(key).is_none()) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never held everywhere"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let _: () = redis::cmd("DEL")
        .arg(key)
        .query(&mut nodes[0].connection())
        .unwrap();
    nodes[2].pause();
    let out = output(quorlock(&nodes).args(["status", "--resource", "cli:status"]));
    nodes[2].resume();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(EXIT_NOT_ACQUIRED), "{text}");
    assert!(text.contains("unknown"), "{text}");
    holder.0.kill().unwrap();
}

/// Kills the child process when dropped, so that a failing test leaves none.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

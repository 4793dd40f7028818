//! The `quorlock` command-line tool, run as a process against real servers.
#![cfg(feature = "cli")]

mod support;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::{RedisServer, Scratch, proxies, proxy_urls, servers, urls, wait_held_everywhere};

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

/// A directory for test `name`'s files, removed when dropped.
fn scratch(name: &str) -> Scratch {
    Scratch::new(&format!("cli-{name}"))
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

/// `quorlock run` on `nodes` with `options` (before `--`), its CMD a shell
/// that writes its pid and sleeps a minute, stderr piped: the child, and
/// CMD's pid once it runs.
fn run_sleeping_cmd(nodes: &[RedisServer], name: &str, options: &[&str]) -> (Child, String) {
    // Removed on return, once CMD's pid was read from it.
    let dir = scratch(name);
    let pid_file = dir.join("pid");
    let child = quorlock(nodes)
        .arg("run")
        .args(options)
        .arg("--")
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
    (child, cmd_pid)
}

/// What a child wrote to its piped stderr.
fn stderr_of(child: &mut Child) -> String {
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    stderr
}

/// Killing the majority of nodes while CMD runs terminates CMD, and quorlock
/// exits with the lost-lock code.
#[test]
fn majority_killed_terminates_cmd_with_the_lost_code() {
    let mut nodes = servers(3);
    let options = ["--resource", "cli:lost", "--ttl", "1s", "--grace", "2s"];
    let (mut child, cmd_pid) = run_sleeping_cmd(&nodes, "lost", &options);
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
    let stderr = stderr_of(&mut child);
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

/// A node that cannot be used is named with its cause when `run` gives up:
/// a wrong password, and a Sentinel node whose Sentinels know no such master
/// (its URL's host list given through `QUORLOCK_NODES`, comma-separated).
#[test]
fn run_names_each_unusable_node_and_why() {
    let node = RedisServer::start_with(&["--requirepass", "right"]);
    let wrong = format!("redis://:wrong@127.0.0.1:{}", node.port());
    let out = output(
        Command::new(env!("CARGO_BIN_EXE_quorlock"))
            .env("QUORLOCK_NODES", &wrong)
            .args(["run", "--resource", "cli:why", "--wait", "0s", "--", "true"]),
    );
    assert_eq!(out.status.code(), Some(EXIT_NOT_ACQUIRED));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let name = format!("127.0.0.1:{}", node.port());
    assert!(
        stderr.contains(&format!("failed: node {name}"))
            && stderr.contains("authentication failed"),
        "{stderr}"
    );
    let url = format!(
        "redis+sentinel://127.0.0.1:{},127.0.0.1:1/nobody",
        node.port()
    );
    let out = output(
        Command::new(env!("CARGO_BIN_EXE_quorlock"))
            .env("QUORLOCK_NODES", &url)
            .args(["run", "--resource", "cli:why", "--wait", "0s", "--", "true"]),
    );
    assert_eq!(out.status.code(), Some(EXIT_NOT_ACQUIRED));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no Sentinel named a primary for master \"nobody\"")
            && stderr.contains("127.0.0.1:1:"),
        "{stderr}"
    );
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
    wait_held_everywhere(
        &nodes,
        key,
        Duration::from_secs(10),
        "never held everywhere",
    );
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

/// `status` shows a node that restarted empty as recovering (it does not
/// count), even from a fresh `quorlock` process that never met it: the other
/// nodes' records, written by a first `status`, name its old `run_id`.
#[test]
fn status_shows_a_restarted_node_as_recovering() {
    let mut nodes = servers(3);
    let out = output(quorlock(&nodes).args(["status", "--resource", "cli:restart"]));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("does not count"));
    nodes[1].restart();
    let out = output(quorlock(&nodes).args(["status", "--resource", "cli:restart"]));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = node_line(&text, &nodes[1]);
    // It came back empty: its data mark, recorded on the other nodes by
    // the first status, is gone.
    assert!(
        line.contains("does not count: recovering from a loss of data"),
        "{text}"
    );
    let out = output(quorlock(&nodes).args([
        "status",
        "--resource",
        "cli:restart",
        "--restart-grace",
        "0s",
    ]));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("does not count"));
}

/// The line of `quorlock status`'s text about `node`.
fn node_line<'a>(text: &'a str, node: &RedisServer) -> &'a str {
    text.lines()
        .find(|line| line.contains(&format!("127.0.0.1:{}", node.port())))
        .unwrap_or_else(|| panic!("no line for node {}:\n{text}", node.port()))
}

/// `quorlock status` shows a node whose data went (`FLUSHALL`: its data
/// mark, recorded by an earlier process, gone) as not counting, and a set
/// with a node that may evict lock keys as refused, in text and JSON.
#[test]
fn status_shows_a_loss_of_data_and_a_refusal() {
    let nodes = servers(3);
    let status = |nodes: &[RedisServer], json: bool| {
        let mut command = quorlock(nodes);
        command.args(["status", "--resource", "cli:data"]);
        if json {
            command.arg("--json");
        }
        String::from_utf8_lossy(&output(&mut command).stdout).into_owned()
    };
    assert!(!status(&nodes, false).contains("does not count"));
    nodes[1].flushall();
    let text = status(&nodes, false);
    let line = node_line(&text, &nodes[1]);
    assert!(
        line.contains("does not count: recovering from a loss of data"),
        "{text}"
    );

    let mut nodes = servers(3);
    nodes[2] =
        RedisServer::start_with(&["--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru"]);
    let text = status(&nodes, false);
    assert!(text.starts_with("locking refused: "), "{text}");
    assert!(text.contains("maxmemory-policy volatile-lru"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&status(&nodes, true)).unwrap();
    assert!(
        json["refused"]
            .as_str()
            .is_some_and(|refused| refused.contains("maxmemory-policy")),
        "{json}"
    );
}

/// A primary that has had a replica, restarted from its own snapshot (the
/// maintenance restart: `SHUTDOWN SAVE`, start again), reports
/// `master_replid2` as a promoted replica does, and may lack writes made
/// after its snapshot: it is held back for the grace. `quorlock run` is one
/// process per call, and the grace must run from the first process that
/// saw the node back (written on the node), not from each process's own
/// first sight: the runs after that grace take the lock, the runs before
/// it do not.
#[test]
fn runs_after_a_snapshot_restart_count_the_grace_from_the_first_sight() {
    let mut primary = RedisServer::start();
    let _replica = RedisServer::start_replica_of(&primary);
    let grace = Duration::from_secs(4);
    let nodes = std::slice::from_ref(&primary);
    let run = |nodes: &[RedisServer]| {
        output(quorlock(nodes).args([
            "run",
            "--resource",
            "cli:snapshot",
            "--ttl",
            "2s",
            "--restart-grace",
            "4s",
            "--",
            "true",
        ]))
    };
    assert_eq!(run(nodes).status.code(), Some(0), "before the restart");
    primary.restart_from_snapshot();
    let replid2 = primary.info_field("replication", "master_replid2");
    let promoted = replid2.is_some_and(|id| id.bytes().any(|byte| byte != b'0'));
    if support::is_redis_before_7() {
        // Redis 6.2 restarts a primary from its snapshot under a new
        // replication id: a restart, judged so, and held back the same way.
        support::adapted(
            "runs_after_a_snapshot_restart_count_the_grace_from_the_first_sight",
            "Redis before 7.0 keeps no master_replid2 across a restart: a plain restart",
        );
    } else {
        assert!(promoted, "the restarted primary reports master_replid2");
    }
    let restarted = Instant::now();
    let nodes = std::slice::from_ref(&primary);
    let (mut before, mut after) = (Vec::new(), Vec::new());
    while restarted.elapsed() < grace * 3 {
        let started = restarted.elapsed();
        let out = run(nodes);
        let seen = (started, out.status.code(), stderr_text(&out));
        // The first run's sight is within a second of the restart; the
        // grace has its drift allowance (1 %) and a second of slack.
        if started >= grace + Duration::from_secs(2) {
            after.push(seen);
        } else if started + Duration::from_secs(1) < grace {
            before.push(seen);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    println!("before the grace: {before:?}\nafter the grace: {after:?}");
    assert!(
        before
            .iter()
            .all(|(_, code, _)| *code == Some(EXIT_NOT_ACQUIRED)),
        "a run counted the restarted primary within the grace: {before:?}"
    );
    assert!(
        before
            .iter()
            .all(|(_, _, stderr)| stderr.contains("recovering")),
        "{before:?}"
    );
    assert!(!after.is_empty());
    assert!(
        after.iter().all(|(_, code, _)| *code == Some(0)),
        "runs after the grace from the first sight failed: {after:?}"
    );
}

fn stderr_text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Kills, when dropped, every process whose pid a `*.pid` file in the
/// directory names: what a failing test would otherwise leave running.
struct KillPids(std::path::PathBuf);

impl Drop for KillPids {
    fn drop(&mut self) {
        for entry in std::fs::read_dir(&self.0).into_iter().flatten().flatten() {
            if entry.path().extension().is_some_and(|ext| ext == "pid")
                && let Ok(pid) = std::fs::read_to_string(entry.path())
            {
                let _ = Command::new("kill")
                    .args(["-KILL", pid.trim()])
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }
}

/// Kills the child process when dropped, so that a failing test leaves none.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `quorlock run` interrupted while its acquire round is in flight (the `SET`
/// reached the nodes, their replies had not come back) releases what the
/// round set before it exits: no key is left to block other runs for its TTL.
#[test]
fn interrupted_mid_round_releases_what_the_round_set() {
    let nodes = servers(3);
    let proxies = proxies(&nodes, Duration::ZERO);
    for proxy in &proxies {
        proxy.delay_replies(Duration::from_millis(800));
    }
    let child = Command::new(env!("CARGO_BIN_EXE_quorlock"))
        .env("QUORLOCK_NODES", proxy_urls(&proxies).join(","))
        .args([
            "run",
            "--resource",
            "cli:midround",
            "--ttl",
            "30s",
            "--node-timeout",
            "5s",
            "--connect-timeout",
            "5s",
            "--",
            "true",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let key = b"quorlock:cli:midround";
    let what = "the SET never reached every node";
    wait_held_everywhere(&nodes, key, Duration::from_secs(10), what);
    assert!(
        Command::new("kill")
            .args(["-TERM", &child.0.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let status = child.0.wait().unwrap();
    assert_eq!(status.code(), Some(128 + 15), "exits as interrupted");
    let left: Vec<i64> = nodes.iter().map(|node| node.pttl(key)).collect();
    assert!(
        left.iter().all(|&pttl| pttl == -2),
        "keys left behind for their TTL (ms): {left:?}"
    );
}

/// A CMD that ignores SIGTERM and starts a child that ignores it too; both
/// append a line with a timestamp (ns since the epoch) to `journal` every
/// 100 ms, and CMD logs each SIGTERM it gets. Pids go to `cmd.pid` and
/// `child.pid`.
fn stubborn_cmd(dir: &Path) -> Vec<String> {
    let script = dir.join("stubborn.sh");
    std::fs::write(
        &script,
        format!(
            r#"cd {dir}
trap 'echo "TERM $(date +%s%N)" >> journal' TERM
echo $$ > cmd.pid.tmp && mv cmd.pid.tmp cmd.pid
sh -c 'trap "" TERM; echo $$ > child.pid.tmp && mv child.pid.tmp child.pid; while :; do echo "A child $(date +%s%N)" >> journal; sleep 0.1; done' &
while :; do echo "A cmd $(date +%s%N)" >> journal; sleep 0.1; done
"#,
            dir = dir.display()
        ),
    )
    .unwrap();
    vec!["sh".into(), script.display().to_string()]
}

/// A `quorlock run` of [`stubborn_cmd`] on `resource` with `--ttl ttl`, its
/// stderr in `dir/first.err`; returns it once CMD and its child have started,
/// with their pids.
fn run_stubborn(
    nodes: &[RedisServer],
    dir: &Path,
    resource: &str,
    ttl: &str,
) -> (KillOnDrop, String, String) {
    let first = quorlock(nodes)
        .args(["run", "--resource", resource, "--ttl", ttl, "--"])
        .args(stubborn_cmd(dir))
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(dir.join("first.err")).unwrap())
        .spawn()
        .unwrap();
    let first = KillOnDrop(first);
    let cmd_pid = wait_for_pid(&dir.join("cmd.pid"));
    let child_pid = wait_for_pid(&dir.join("child.pid"));
    (first, cmd_pid, child_pid)
}

/// Nanoseconds since the epoch, as `date +%s%N` prints them.
fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// The timestamps of the `A` lines (appends by CMD or its child) in `journal`.
fn appends(journal: &Path) -> Vec<u128> {
    std::fs::read_to_string(journal)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.starts_with("A "))
        .filter_map(|line| line.rsplit(' ').next()?.parse().ok())
        .collect()
}

/// Waits (at most `limit`) until `path` contains `text`.
fn wait_for_text(path: &Path, text: &str, limit: Duration) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        if std::fs::read_to_string(path).is_ok_and(|content| content.contains(text)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// The field report: `--ttl 2s`, a CMD that ignores SIGTERM with a child
/// that ignores it too, and the lock's key deleted on every node. At its next
/// extension quorlock finds the lock refused by the quorum: the whole group
/// is killed at once, so nothing is appended after a second `run` acquires
/// the lock, no process of the group is left, and quorlock exits 76.
#[test]
fn refused_extension_kills_the_whole_group_at_once() {
    let nodes = servers(3);
    let dir = scratch("refused");
    let _cleanup = KillPids(dir.to_path_buf());
    let journal = dir.join("journal");
    let (mut first, cmd_pid, child_pid) = run_stubborn(&nodes, &dir, "cli:refused", "2s");
    for node in &nodes {
        let _: () = redis::cmd("DEL")
            .arg("quorlock:cli:refused")
            .query(&mut node.connection())
            .unwrap();
    }
    assert!(
        wait_for_text(&dir.join("first.err"), "refused", Duration::from_secs(5)),
        "quorlock never noticed: {}",
        std::fs::read_to_string(dir.join("first.err")).unwrap_or_default()
    );
    // The second holder starts now, while today's quorlock would still be in
    // its 5 s grace, and notes when it has the lock.
    let second = output(
        quorlock(&nodes)
            .args(["run", "--resource", "cli:refused", "--wait", "5s", "--"])
            .args(["sh", "-c", "date +%s%N > acquired"])
            .current_dir(&dir),
    );
    assert_eq!(second.status.code(), Some(0), "{second:?}");
    let acquired: u128 = std::fs::read_to_string(dir.join("acquired"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let late: Vec<u128> = appends(&journal)
        .into_iter()
        .filter(|&at| at >= acquired)
        .collect();
    assert!(
        late.is_empty(),
        "{} appends after the second holder acquired",
        late.len()
    );
    assert_eq!(first.0.wait().unwrap().code(), Some(EXIT_LOST));
    assert!(!process_alive(&cmd_pid), "CMD is left running");
    assert!(!process_alive(&child_pid), "CMD's child is left running");
}

/// When extensions merely fail (the majority frozen), the group gets SIGTERM
/// by `valid_until - grace` and SIGKILL by `valid_until`: with `--ttl 2s`
/// the grace is 1 s, and the last extension was before the freeze, so CMD
/// hears SIGTERM within 1 s of the freeze and nothing of the group appends
/// later than 2 s after it.
#[test]
fn failing_extensions_term_then_kill_the_group_within_the_validity() {
    let nodes = servers(3);
    let dir = scratch("failing");
    let _cleanup = KillPids(dir.to_path_buf());
    let journal = dir.join("journal");
    let (mut first, cmd_pid, child_pid) = run_stubborn(&nodes, &dir, "cli:failing", "2s");
    let frozen_at = now_ns();
    nodes[0].pause();
    nodes[1].pause();
    let code = first.0.wait().unwrap().code();
    nodes[0].resume();
    nodes[1].resume();
    assert_eq!(code, Some(EXIT_LOST));
    let text = std::fs::read_to_string(&journal).unwrap();
    let term: u128 = text
        .lines()
        .find_map(|line| line.strip_prefix("TERM "))
        .expect("CMD got SIGTERM")
        .parse()
        .unwrap();
    let slack = 150_000_000; // 150 ms for a loaded machine
    assert!(
        term <= frozen_at + 1_000_000_000 + slack,
        "SIGTERM {} ms after the freeze",
        (term - frozen_at) / 1_000_000
    );
    let last = appends(&journal).into_iter().max().unwrap();
    assert!(
        last <= frozen_at + 2_000_000_000 + slack,
        "the group appended {} ms after the freeze",
        (last - frozen_at) / 1_000_000
    );
    assert!(!process_alive(&cmd_pid) && !process_alive(&child_pid));
}

/// If quorlock itself is killed (SIGKILL: nothing of it runs), CMD's group
/// does not outlive it: its watchdog kills the group.
#[test]
fn group_dies_with_quorlock() {
    let nodes = servers(1);
    let dir = scratch("dies");
    let _cleanup = KillPids(dir.to_path_buf());
    let (mut first, cmd_pid, child_pid) = run_stubborn(&nodes, &dir, "cli:dies", "10s");
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    let started = Instant::now();
    while process_alive(&cmd_pid) || process_alive(&child_pid) {
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "CMD (alive: {}) or its child (alive: {}) outlived quorlock",
            process_alive(&cmd_pid),
            process_alive(&child_pid)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// When CMD exits but left a process of its group running (a background job
/// that ignores SIGTERM), that process is killed before the lock is released.
#[test]
fn leftovers_of_the_group_are_killed_before_the_release() {
    let nodes = servers(1);
    let dir = scratch("leftover");
    let _cleanup = KillPids(dir.to_path_buf());
    // No pipes: the job left running would hold them open.
    let status = quorlock(&nodes)
        .args([
            "run",
            "--resource",
            "cli:leftover",
            "--grace",
            "300ms",
            "--",
        ])
        .args([
            "sh",
            "-c",
            "sh -c 'trap \"\" TERM; while :; do sleep 0.1; done' & echo $! > left.pid; exit 3",
        ])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(3), "CMD's own code");
    let left = wait_for_pid(&dir.join("left.pid"));
    assert!(
        !process_alive(&left),
        "the background job outlived the lock"
    );
    let status = output(quorlock(&nodes).args(["status", "--resource", "cli:leftover"]));
    assert_eq!(status.status.code(), Some(1), "released");
}

/// In a terminal, CMD's group is the foreground group: an interactive CMD can
/// read the terminal (a background group would be stopped by SIGTTIN).
#[test]
fn interactive_cmd_reads_the_terminal() {
    let nodes = servers(1);
    let command = format!(
        "{} run --resource cli:tty -- sh -c 'read line; echo got:$line'",
        env!("CARGO_BIN_EXE_quorlock")
    );
    let mut script = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("QUORLOCK_NODES", urls(&nodes).join(","))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run script(1) from util-linux");
    std::thread::sleep(Duration::from_millis(500));
    use std::io::Write as _;
    script
        .stdin
        .as_mut()
        .unwrap()
        .write_all(b"hello\n")
        .unwrap();
    let started = Instant::now();
    loop {
        if script.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > Duration::from_secs(10) {
            let _ = script.kill();
            panic!("CMD never finished: stopped reading the terminal?");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = script.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("got:hello"), "{text}");
    assert!(out.status.success(), "{out:?}");
}

/// The field report's command over links of about 30 ms round trip, with
/// default options: `quorlock run --resource r -- true` gets the lock (it
/// used to exit 75 every time, "3 failed of 3 nodes", in 55 ms).
#[test]
fn run_over_a_30_ms_link_with_defaults() {
    let nodes = servers(3);
    let proxies = proxies(&nodes, Duration::from_millis(15));
    let out = output(
        Command::new(env!("CARGO_BIN_EXE_quorlock"))
            .env("QUORLOCK_NODES", proxy_urls(&proxies).join(","))
            .args(["run", "--resource", "cli:slow-link", "--", "true"]),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A fresh `status` over the same links can tell too.
    let out = output(
        Command::new(env!("CARGO_BIN_EXE_quorlock"))
            .env("QUORLOCK_NODES", proxy_urls(&proxies).join(","))
            .args(["status", "--resource", "cli:slow-link"]),
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "free, not unknown: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// `--read` runs share the lock (two at once, each waits to see the other
/// in), a `--write` run is refused while they hold and succeeds after them.
#[test]
fn read_runs_share_and_a_write_run_waits_for_them() {
    let nodes = servers(3);
    let dir = scratch("rw");
    let inside = dir.join("inside");
    let section = format!(
        "echo in >> {0}; while [ $(wc -l < {0}) -lt 2 ]; do sleep 0.05; done; sleep 1",
        inside.display()
    );
    let readers: Vec<_> = (0..2)
        .map(|_| {
            quorlock(&nodes)
                .args([
                    "run",
                    "--read",
                    "--resource",
                    "cli:rw",
                    "--ttl",
                    "5s",
                    "--wait",
                    "10s",
                ])
                .args(["--", "timeout", "20", "sh", "-c", &section])
                .stdin(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let started = Instant::now();
    while std::fs::read_to_string(&inside).map_or(0, |text| text.lines().count()) < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the readers never held together"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let refused =
        output(quorlock(&nodes).args(["run", "--write", "--resource", "cli:rw", "--", "true"]));
    assert_eq!(
        refused.status.code(),
        Some(EXIT_NOT_ACQUIRED),
        "{refused:?}"
    );
    let status = output(quorlock(&nodes).args(["status", "--rw", "--resource", "cli:rw"]));
    let shown = String::from_utf8_lossy(&status.stdout);
    assert_eq!(status.status.code(), Some(0), "{shown}");
    assert!(shown.contains("readers on a quorum"), "{shown}");
    for mut reader in readers {
        assert!(reader.wait().unwrap().success(), "a reader failed");
    }
    let status = output(quorlock(&nodes).args(["status", "--rw", "--resource", "cli:rw"]));
    let shown = String::from_utf8_lossy(&status.stdout);
    assert_eq!(status.status.code(), Some(1), "{shown}");
    assert!(shown.contains("no readers"), "{shown}");
    let written =
        output(quorlock(&nodes).args(["run", "--write", "--resource", "cli:rw", "--", "true"]));
    assert!(written.status.success(), "{written:?}");
}

/// A run on two resources holds both at once: a plain run on one of them is
/// refused meanwhile, one on another resource is not; `--read` with two
/// resources is a usage error.
#[test]
fn a_run_on_two_resources_excludes_a_run_on_either() {
    let nodes = servers(3);
    let mut holder = quorlock(&nodes)
        .args([
            "run",
            "--resource",
            "cli:a",
            "--resource",
            "cli:b",
            "--ttl",
            "5s",
        ])
        .args(["--", "sleep", "2"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    for key in [b"quorlock:cli:a".as_slice(), b"quorlock:cli:b".as_slice()] {
        wait_held_everywhere(
            &nodes,
            key,
            Duration::from_secs(10),
            "the set was not taken",
        );
    }
    let refused = output(quorlock(&nodes).args(["run", "--resource", "cli:b", "--", "true"]));
    assert_eq!(
        refused.status.code(),
        Some(EXIT_NOT_ACQUIRED),
        "{refused:?}"
    );
    let other = output(quorlock(&nodes).args(["run", "--resource", "cli:c", "--", "true"]));
    assert!(other.status.success(), "{other:?}");
    assert!(holder.wait().unwrap().success());
    let usage = output(quorlock(&nodes).args([
        "run",
        "--read",
        "--resource",
        "cli:a",
        "--resource",
        "cli:b",
        "--",
        "true",
    ]));
    assert_eq!(usage.status.code(), Some(2), "{usage:?}");
}

/// What `sh -c 'echo ...'` under `quorlock run ARGS` printed: CMD's view of
/// its environment.
fn cmd_env(nodes: &[RedisServer], args: &[&str]) -> String {
    let out = output(
        quorlock(nodes)
            .arg("run")
            .args(args)
            .args(["--", "sh", "-c"])
            .arg("echo \"${QUORLOCK_FENCING_TOKEN-none}|$QUORLOCK_RESOURCE|$QUORLOCK_KEY\""),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `--fencing` gives CMD its fencing token, rising from run to run; every
/// run gives it the resource and the key; `--fencing` with `--read` is a
/// usage error.
#[test]
fn fencing_token_resource_and_key_reach_cmd() {
    let nodes = servers(3);
    let fenced = ["--resource", "cli:fenced", "--fencing"];
    let first = cmd_env(&nodes, &fenced);
    let second = cmd_env(&nodes, &fenced);
    let token = |line: &str| -> u64 {
        line.split('|')
            .next()
            .and_then(|token| token.parse().ok())
            .unwrap_or_else(|| panic!("no token in {line:?}"))
    };
    assert!(token(&second) > token(&first), "{first} then {second}");
    assert!(
        first.ends_with("|cli:fenced|quorlock:cli:fenced"),
        "resource and key: {first}"
    );
    let plain = cmd_env(&nodes, &["--resource", "cli:b", "--resource", "cli:a"]);
    assert_eq!(
        plain, "none|cli:b,cli:a|quorlock:cli:a",
        "no token without --fencing"
    );
    let write = cmd_env(&nodes, &["--resource", "cli:rw", "--write", "--fencing"]);
    assert!(token(&write) > 0, "a writer has a token: {write}");
    let out = output(quorlock(&nodes).args([
        "run",
        "--resource",
        "cli:rw",
        "--read",
        "--fencing",
        "--",
        "true",
    ]));
    assert_eq!(out.status.code(), Some(2), "--read --fencing");
}

/// `status --json`: one object with the state, holder, quorum and each
/// node, held while a run holds the lock (exit 0) and free after (exit 1);
/// with `--rw`, the writer, intent and readers.
#[test]
fn status_json_for_scripts() {
    let nodes = servers(3);
    let status = |extra: &[&str]| -> (Option<i32>, serde_json::Value) {
        let out = output(
            quorlock(&nodes)
                .args(["status", "--resource", "cli:json", "--json"])
                .args(extra),
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let value = serde_json::from_str(&text).unwrap_or_else(|err| panic!("{err}: {text}"));
        (out.status.code(), value)
    };
    let (code, free) = status(&[]);
    assert_eq!(code, Some(1));
    assert_eq!(free["state"], "free", "{free}");
    assert_eq!(free["resource"], "cli:json");
    assert_eq!(free["quorum"], 2);
    assert!(free["holder"].is_null());
    let mut holder = quorlock(&nodes)
        .args([
            "run",
            "--resource",
            "cli:json",
            "--ttl",
            "5s",
            "--",
            "sleep",
            "2",
        ])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let held = loop {
        let (code, value) = status(&[]);
        let all_held = (value["nodes"].as_array())
            .is_some_and(|nodes| nodes.iter().all(|node| node["state"] == "held"));
        if code == Some(0) && all_held {
            break value;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never held: {value}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(held["state"], "held");
    let holder_prefix = held["holder"].as_str().expect("a holder").to_owned();
    for node in held["nodes"].as_array().unwrap() {
        assert_eq!(node["token_prefix"], holder_prefix.as_str(), "{held}");
        let ttl = node["ttl_ms"].as_u64().expect("a TTL");
        assert!(ttl > 0 && ttl <= 5000, "{held}");
        assert!(
            node["node"]
                .as_str()
                .is_some_and(|n| n.starts_with("127.0.0.1:"))
        );
    }
    assert_eq!(holder.wait().unwrap().code(), Some(0));
    let (code, after) = status(&[]);
    assert_eq!(
        (code, &after["state"]),
        (Some(1), &serde_json::json!("free"))
    );
    let (code, rw) = status(&["--rw"]);
    assert_eq!(code, Some(1));
    assert_eq!(rw["state"], "free", "{rw}");
    assert_eq!(rw["writer"]["state"], "free");
    assert_eq!(rw["readers"].as_array().map(Vec::len), Some(3), "{rw}");
}

/// `completions SHELL` prints a script that completes the subcommands and
/// options; an unknown shell is a usage error.
#[test]
fn completions_for_each_shell() {
    for shell in ["bash", "zsh", "fish"] {
        let out = output(Command::new(env!("CARGO_BIN_EXE_quorlock")).args(["completions", shell]));
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let script = String::from_utf8_lossy(&out.stdout);
        for word in ["quorlock", "status", "resource", "fencing"] {
            assert!(script.contains(word), "{shell} completion lacks {word}");
        }
    }
    let out = output(Command::new(env!("CARGO_BIN_EXE_quorlock")).args(["completions", "tcsh"]));
    assert_eq!(out.status.code(), Some(2));
}

/// A `quorlock elect` process, its CMD writing its pid and environment
/// into `dir/<tag>.pid` and `dir/<tag>.env`, then sleeping.
fn elect(nodes: &[RedisServer], dir: &Path, tag: &str, id: &str) -> std::process::Child {
    let script = format!(
        "echo $QUORLOCK_LEADER_ID $QUORLOCK_LEADER_TERM $QUORLOCK_FENCING_TOKEN > {tag}.env; \
         echo $$ > {tag}.pid; exec sleep 60"
    );
    quorlock(nodes)
        .args([
            "elect",
            "--name",
            "cli:elect",
            "--id",
            id,
            "--ttl",
            "1s",
            "--",
        ])
        .args(["sh", "-c", &script])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("{tag}.err"))).unwrap())
        .spawn()
        .unwrap()
}

/// `quorlock leader --json` on `nodes`: the exit code and the object.
fn leader_json(nodes: &[RedisServer]) -> (Option<i32>, serde_json::Value) {
    let shown = output(quorlock(nodes).args(["leader", "--name", "cli:elect", "--json"]));
    let object = serde_json::from_slice(&shown.stdout).unwrap_or_default();
    (shown.status.code(), object)
}

/// Two `quorlock elect` processes: the first leads and runs its CMD (with
/// its identity and term in the environment), the second waits without
/// running its CMD; `quorlock leader` names the first. The first quorlock
/// is SIGKILLed: its CMD dies with it (the watchdog), and the second leads
/// within the TTL (1 s) and a round or two, with a higher term, as
/// `quorlock leader` then shows.
#[test]
fn elect_runs_cmd_on_one_machine_and_a_standby_takes_over() {
    let nodes = servers(3);
    let dir = scratch("elect");
    let _cleanup = KillPids(dir.to_path_buf());
    let mut first = elect(&nodes, &dir, "first", "machine-a");
    let first_pid = wait_for_pid(&dir.join("first.pid"));
    let mut second = elect(&nodes, &dir, "second", "machine-b");
    std::thread::sleep(Duration::from_millis(500));
    assert!(!dir.join("second.pid").exists(), "the standby ran its CMD");
    let env = std::fs::read_to_string(dir.join("first.env")).unwrap();
    let fields: Vec<&str> = env.split_whitespace().collect();
    assert_eq!(fields.first(), Some(&"machine-a"), "{env}");
    assert_eq!(
        fields.get(1),
        fields.get(2),
        "the term is the fencing token: {env}"
    );
    let first_term: u64 = fields[1].parse().unwrap();
    let (code, shown) = leader_json(&nodes);
    assert_eq!(code, Some(0), "{shown}");
    assert_eq!(shown["identity"], "machine-a", "{shown}");
    assert_eq!(shown["term"], first_term, "{shown}");

    first.kill().unwrap();
    let killed = Instant::now();
    first.wait().unwrap();
    let second_pid = wait_for_pid(&dir.join("second.pid"));
    let took = killed.elapsed();
    assert!(
        took < Duration::from_secs(4),
        "the standby led after {took:?}"
    );
    let started = Instant::now();
    while process_alive(&first_pid) && started.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!process_alive(&first_pid), "the dead leader's CMD runs on");
    let env = std::fs::read_to_string(dir.join("second.env")).unwrap();
    let second_term: u64 = env.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(second_term > first_term, "{second_term} after {first_term}");
    let (code, shown) = leader_json(&nodes);
    assert_eq!(code, Some(0), "{shown}");
    assert_eq!(shown["identity"], "machine-b", "{shown}");
    second.kill().unwrap();
    second.wait().unwrap();
    assert!(!second_pid.is_empty());
}

/// A leader whose lock is taken from it (its key deleted on every node)
/// finds its next extension refused: CMD is killed at once and `elect`
/// exits with the lost code. With nobody leading, `quorlock leader` exits 1.
#[test]
fn elect_kills_cmd_when_the_leadership_is_lost() {
    let nodes = servers(3);
    let dir = scratch("elect-lost");
    let _cleanup = KillPids(dir.to_path_buf());
    let mut leader = elect(&nodes, &dir, "leader", "machine-a");
    let cmd_pid = wait_for_pid(&dir.join("leader.pid"));
    for node in &nodes {
        let _: () = redis::cmd("DEL")
            .arg("quorlock:cli:elect")
            .query(&mut node.connection())
            .unwrap();
    }
    let (code, shown) = leader_json(&nodes);
    assert_eq!(code, Some(1), "{shown}");
    assert_eq!(shown["state"], "none", "{shown}");
    assert_eq!(leader.wait().unwrap().code(), Some(EXIT_LOST));
    assert!(!process_alive(&cmd_pid), "CMD is left running");
    let shown = output(quorlock(&nodes).args(["leader", "--name", "cli:elect"]));
    assert_eq!(shown.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&shown.stdout).trim(),
        "cli:elect: no leader"
    );
}

/// `--max-hold` stops the extensions: with a 2 s TTL, a 500 ms grace
/// (extensions when 1 s of validity is left) and a 3.5 s limit, the lock
/// is extended once (a second extension would hold it past 3.5 s), then
/// CMD gets SIGTERM `grace` before the validity ends and quorlock exits
/// with the lost-lock code, saying why.
#[test]
fn max_hold_stops_the_extensions_and_then_cmd() {
    let nodes = servers(3);
    let options = [
        "--resource",
        "cli:max-hold",
        "--ttl",
        "2s",
        "--grace",
        "500ms",
        "--max-hold",
        "3500ms",
    ];
    let (mut child, cmd_pid) = run_sleeping_cmd(&nodes, "max-hold", &options);
    let cmd_seen = Instant::now();
    let status = child.wait().unwrap();
    let ran = cmd_seen.elapsed();
    assert_eq!(status.code(), Some(EXIT_LOST));
    // From the acquisition: unextended, SIGTERM would come after about
    // 1.5 s; extended once, after about 2.45 s (seen here: CMD ran 2.25 s).
    assert!(
        ran > Duration::from_millis(1750) && ran < Duration::from_secs(20),
        "CMD ran {ran:?}"
    );
    assert!(!process_alive(&cmd_pid), "CMD was terminated");
    let stderr = stderr_of(&mut child);
    assert!(
        stderr.contains("--max-hold reached"),
        "stderr says why: {stderr}"
    );
}

/// The node under a run restarts empty (its server changed, and with it
/// the lock's only holder): quorlock learns it from the lock itself
/// (`LostReason::ServerChanged`) and kills CMD's group at once, long
/// before the validity of its 10 s TTL would end (its extensions, refused
/// by a recovering node, would otherwise keep CMD running until the
/// SIGTERM 5 s before that end).
#[test]
fn a_restarted_node_under_a_run_kills_cmd_at_once() {
    let mut nodes = servers(1);
    let options = ["--resource", "cli:restarted", "--ttl", "10s"];
    let (mut child, cmd_pid) = run_sleeping_cmd(&nodes, "restarted", &options);
    nodes[0].restart();
    let restarted = Instant::now();
    let status = child.wait().unwrap();
    let took = restarted.elapsed();
    assert_eq!(status.code(), Some(EXIT_LOST));
    assert!(
        took < Duration::from_secs(3),
        "CMD ran {took:?} after the restart"
    );
    assert!(!process_alive(&cmd_pid), "CMD was killed");
    let stderr = stderr_of(&mut child);
    assert!(
        stderr.contains("SIGKILL at once"),
        "stderr says why: {stderr}"
    );
}

/// A lock held by one `quorlock run` is released by its token from other
/// processes: `run` gives CMD the token (`QUORLOCK_TOKEN`), a wrong token
/// changes nothing (77, still held), the right one releases it on every
/// node (0, free; the holder's next extension is refused and its CMD
/// stopped with the lost code), and a second release finds nothing (1).
#[test]
fn unlock_by_token_from_another_process() {
    let nodes = servers(3);
    let dir = scratch("unlock-token");
    let token_file = dir.join("token");
    let mut holder = quorlock(&nodes)
        .args(["run", "--resource", "cli:handed", "--ttl", "2s", "--"])
        .args([
            "sh",
            "-c",
            &format!(
                "printf %s \"$QUORLOCK_TOKEN\" > {0}.part && mv {0}.part {0}; exec sleep 60",
                token_file.display()
            ),
        ])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_for_text(&token_file, "q", Duration::from_secs(10)),
        "CMD got no QUORLOCK_TOKEN"
    );
    let token = std::fs::read_to_string(&token_file).unwrap();
    assert_eq!(token.len(), 33, "a quorlock token: {token:?}");
    let unlock = |token: &str, json: bool| {
        let mut command = quorlock(&nodes);
        command
            .args(["unlock", "--resource", "cli:handed"])
            .env("QUORLOCK_TOKEN", token);
        if json {
            command.arg("--json");
        }
        output(&mut command)
    };
    let status = || output(quorlock(&nodes).args(["status", "--resource", "cli:handed"]));

    let wrong = unlock("q0123456789abcdef0123456789abcdef", false);
    assert_eq!(wrong.status.code(), Some(77), "{}", stderr_text(&wrong));
    assert!(
        String::from_utf8_lossy(&wrong.stdout).contains("held under another token on 3 node(s)"),
        "{}",
        String::from_utf8_lossy(&wrong.stdout)
    );
    assert_eq!(
        status().status.code(),
        Some(0),
        "still held after a wrong token"
    );

    let right = unlock(&token, true);
    assert_eq!(right.status.code(), Some(0), "{}", stderr_text(&right));
    let shown: serde_json::Value = serde_json::from_slice(&right.stdout).unwrap();
    assert_eq!(shown["outcome"], "released", "{shown}");
    assert_eq!(shown["nodes"], 3, "{shown}");
    assert_eq!(
        status().status.code(),
        Some(1),
        "free after the release by token"
    );

    let again = unlock(&token, false);
    assert_eq!(again.status.code(), Some(1), "{}", stderr_text(&again));
    assert!(String::from_utf8_lossy(&again.stdout).contains("no node holds cli:handed"));

    // The holder learns at its next extension (within the 2 s TTL).
    let deadline = Instant::now() + Duration::from_secs(10);
    let code = loop {
        if let Some(status) = holder.try_wait().unwrap() {
            break status.code();
        }
        assert!(Instant::now() < deadline, "the holder's CMD still runs");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(code, Some(EXIT_LOST));

    let empty =
        output(quorlock(&nodes).args(["unlock", "--resource", "cli:handed", "--token", ""]));
    assert_eq!(empty.status.code(), Some(2), "{}", stderr_text(&empty));
    assert!(
        stderr_text(&empty).contains("invalid token"),
        "{}",
        stderr_text(&empty)
    );
}

//! Leader election (`Redlock::campaign`, `leader`, `observe`) against real
//! servers: a campaign leads and is told, standbys take over in order with
//! higher terms, a dead leader's successor leads within its TTL, `observe`
//! tells each change (losses included), bad input is refused. Across OS
//! processes, four campaigners on five nodes never have two leaders valid at
//! once (each leader reports its term's start and the end of its validity,
//! on the wall clock the processes share, to a separate checker Redis) while
//! the test kills the leader, stops one past its lease and freezes nodes;
//! terms rise with time, and an observer sees every leadership that lasted.
//! The multi-process test re-executes this binary as its workers, so this
//! file has its own `main` (harness = false).

mod support;

use std::collections::BTreeMap;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use quorlock::{Error, LeaderEvent, Leadership, Redlock};
use support::harness::{Outcome, check};

/// Milliseconds since the Unix epoch: the clock the processes share.
fn wall_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// A leader that dies without a word: its lock is neither released nor
/// extended, and expires by its TTL.
fn die(leadership: Leadership) {
    leadership.forget();
}

/// A campaign leads, `leader` names it with its term, and after `resign`
/// nobody leads and the record is gone.
async fn a_campaign_leads_and_the_leader_is_told() -> Outcome {
    let nodes = support::servers(3);
    let redlock = support::builder(&nodes).build()?;
    let observer = support::builder(&nodes).build()?;
    check(
        observer.leader("elect:a").await?.is_none(),
        "nobody leads yet",
    )?;
    let leadership = redlock
        .campaign("elect:a", "host-1", Duration::from_secs(5))
        .await?;
    check(leadership.term() > 0, "a term")?;
    check(leadership.is_valid(), "a valid lock")?;
    check(
        leadership.fencing_token() == Some(leadership.term()),
        "the term is the fencing token (fencing off for the client)",
    )?;
    let leader = observer.leader("elect:a").await?;
    let named = leader
        .as_ref()
        .map(|leader| (leader.identity.as_str(), leader.term));
    check(
        named == Some(("host-1", leadership.term())),
        format!("leader {leader:?}"),
    )?;
    check(
        leader.is_some_and(|leader| leader.remaining <= Duration::from_secs(5)),
        "a remaining lease within the TTL",
    )?;
    leadership.resign().await?;
    check(
        observer.leader("elect:a").await?.is_none(),
        "nobody leads after resign",
    )?;
    let records = support::holders(&nodes, b"elect:a:quorlock-leader");
    check(
        records.iter().all(Option::is_none),
        format!("records left: {records:?}"),
    )
}

/// Standbys wait in order, and each new leader's term is higher.
async fn standbys_take_over_in_order_with_higher_terms() -> Outcome {
    let nodes = support::servers(3);
    let redlock = support::builder(&nodes).build()?;
    let first = redlock
        .campaign("elect:b", "first", Duration::from_secs(5))
        .await?;
    let (second, third) = (redlock.clone(), support::builder(&nodes).build()?);
    let second = tokio::spawn(async move {
        second
            .campaign("elect:b", "second", Duration::from_secs(5))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let third = tokio::spawn(async move {
        third
            .campaign("elect:b", "third", Duration::from_secs(5))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    check(
        !second.is_finished() && !third.is_finished(),
        "standbys wait",
    )?;
    let first_term = first.term();
    first.resign().await?;
    let second = tokio::time::timeout(Duration::from_secs(5), second).await???;
    check(
        second.identity() == "second" && second.term() > first_term,
        format!("second: {second:?} after term {first_term}"),
    )?;
    check(!third.is_finished(), "the third waits for the second")?;
    let second_term = second.term();
    second.resign().await?;
    let third = tokio::time::timeout(Duration::from_secs(5), third).await???;
    check(
        third.term() > second_term,
        format!("third: {third:?} after term {second_term}"),
    )?;
    third.resign().await?;
    Ok(())
}

/// A leader that dies is followed within its TTL (and a round or two) by
/// the standby; an observer sees the first leader elected and lost, then
/// the second elected and, once it dies too, lost.
async fn a_dead_leader_is_followed_and_observed() -> Outcome {
    let nodes = support::servers(5);
    let redlock = support::builder(&nodes).build()?;
    let standby = support::builder(&nodes).build()?;
    let observer = support::builder(&nodes).build()?;
    // Streams look only when polled: a task reads it from the start.
    let mut events = observer.observe("elect:c", Duration::from_millis(20))?;
    let (told, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => {
                    if told.send(event).is_err() {
                        break;
                    }
                }
                Err(err) => println!("  a look failed: {err}"),
            }
        }
    });
    let ttl = Duration::from_millis(600);
    let first = redlock.campaign("elect:c", "first", ttl).await?;
    let first_term = first.term();
    let waiting = tokio::spawn(async move { standby.campaign("elect:c", "second", ttl).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let died = Instant::now();
    die(first);
    let second = tokio::time::timeout(Duration::from_secs(10), waiting).await???;
    let took = died.elapsed();
    println!("  the standby led {took:?} after the leader died (TTL {ttl:?})");
    check(
        took <= ttl + Duration::from_millis(1500),
        format!("took over after {took:?}"),
    )?;
    check(second.term() > first_term, "a higher term")?;
    let second_term = second.term();
    die(second);
    let mut events = Vec::new();
    let limit = Instant::now() + Duration::from_secs(10);
    while events.len() < 4 {
        match tokio::time::timeout_at(limit.into(), seen.recv()).await {
            Ok(Some(event)) => events.push(event),
            _ => break,
        }
    }
    reader.abort();
    let told: Vec<(&str, u64)> = events
        .iter()
        .map(|event| match event {
            LeaderEvent::Elected(leader) => ("elected", leader.term),
            LeaderEvent::Lost(leader) => ("lost", leader.term),
            _ => ("other", 0),
        })
        .collect();
    check(
        told == [
            ("elected", first_term),
            ("lost", first_term),
            ("elected", second_term),
            ("lost", second_term),
        ],
        format!("observed {told:?}"),
    )
}

/// An empty or overlong identity, and a name that is a record's, are
/// refused before anything is sent.
async fn bad_input_is_refused() -> Outcome {
    let nodes = support::servers(1);
    let redlock = support::builder(&nodes).build()?;
    let ttl = Duration::from_secs(1);
    let empty = redlock.campaign("elect:d", "", ttl).await;
    check(
        matches!(empty, Err(Error::InvalidResource { .. })),
        format!("empty identity: {empty:?}"),
    )?;
    let long = "x".repeat(1025);
    let long = redlock.campaign("elect:d", long, ttl).await;
    check(
        matches!(long, Err(Error::InvalidResource { .. })),
        format!("long identity: {long:?}"),
    )?;
    let record = redlock.leader("elect:d:quorlock-leader").await;
    check(
        matches!(record, Err(Error::InvalidResource { .. })),
        format!("a record's name: {record:?}"),
    )?;
    let observed = redlock.observe("", Duration::ZERO);
    check(
        matches!(observed, Err(Error::InvalidResource { .. })),
        "an empty name to observe",
    )
}

const TTL_MS: u64 = 400;
const TTL: Duration = Duration::from_millis(TTL_MS);
const ELECTION: &str = "elect:shared";

/// Stores `term`'s start (first report wins) and the latest end of its
/// validity on the checker.
const REPORT: &str = r#"redis.call("hsetnx", KEYS[1], ARGV[1], ARGV[2])
local ends = tonumber(redis.call("hget", KEYS[2], ARGV[1]) or "0")
if tonumber(ARGV[3]) > ends then
    redis.call("hset", KEYS[2], ARGV[1], ARGV[3])
end
return 1"#;

/// One worker process: campaigns for `seconds`; as leader, keeps the lease
/// alive and, every 20 ms while its guard is valid, reports its term's
/// start and the end of its validity (wall clock, ms) to the checker; after
/// 200–600 ms it reports that it stopped acting, and resigns. Prints
/// `terms lost`.
async fn worker(seconds: u64, checker: &str, nodes: &[String]) -> Outcome {
    let redlock = Redlock::builder(nodes)
        .node_timeout(Duration::from_millis(50))
        .build()?;
    let mut checker = redis::Client::open(checker)?
        .get_multiplexed_async_connection()
        .await?;
    let report = redis::Script::new(REPORT);
    let identity = std::process::id().to_string();
    // The wall clock of a moment on the monotonic clock: a validity's end
    // maps to the wall clock without a read taken after a pause.
    let (base, base_wall) = (Instant::now(), wall_ms());
    let wall_of = |at: Instant| {
        let since = at.saturating_duration_since(base).as_millis();
        base_wall + u64::try_from(since).unwrap_or(u64::MAX)
    };
    let end = Instant::now() + Duration::from_secs(seconds);
    let (mut terms, mut lost) = (0u64, 0u64);
    while Instant::now() < end {
        let campaign = redlock.campaign(ELECTION, &identity, TTL);
        let Ok(leadership) = tokio::time::timeout_at(end.into(), campaign).await else {
            break;
        };
        let leadership = leadership?;
        leadership.keep_alive()?;
        terms += 1;
        let started = wall_ms();
        let hold = Duration::from_millis(200 + rand::random::<u64>() % 400);
        let until = Instant::now() + hold;
        while Instant::now() < until && leadership.is_valid() {
            let _: i64 = report
                .key("starts")
                .key("ends")
                .arg(leadership.term())
                .arg(started)
                .arg(wall_of(leadership.valid_until()))
                .invoke_async(&mut checker)
                .await?;
            tokio::select! {
                _ = leadership.lost() => {}
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
        // A leader paused past its lease finds its guard invalid.
        if !leadership.is_valid() {
            lost += 1;
        }
        // It stops acting now: its term ends here, or at its validity's
        // end if that came first.
        let _: i64 = redis::cmd("HSET")
            .arg("stopped")
            .arg(leadership.term())
            .arg(wall_ms())
            .query_async(&mut checker)
            .await?;
        let _ = leadership.resign().await;
    }
    redlock.flush().await;
    println!("{} {terms} {lost}", std::process::id());
    Ok(())
}

/// Sends `signal` to the process `pid`.
fn signal(signal: &str, pid: u32) -> Outcome {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()?;
    check(status.success(), format!("kill -{signal} {pid}"))
}

/// The leader's process among `workers`, as `leader` tells it.
async fn leading(redlock: &Redlock, workers: &[Child]) -> Option<(u32, u64)> {
    for _ in 0..100 {
        if let Ok(Some(leader)) = redlock.leader(ELECTION).await
            && let Ok(pid) = leader.identity.parse::<u32>()
            && workers.iter().any(|worker| worker.id() == pid)
        {
            return Some((pid, leader.term));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Four processes campaign on five nodes for 9 s while the test kills the
/// leader, stops the next one past its lease, and freezes nodes one at a
/// time; the checker's record of each term's start and validity shows no
/// two leaders valid at once and terms that rise with time; a standby led
/// within the TTL and a round or two after the kill; an observer saw every
/// term that lasted 150 ms, each lost before the next was elected.
async fn leaders_across_processes_never_overlap(exe: &std::path::Path) -> Outcome {
    let mut servers = support::servers(6);
    let checker = servers.remove(0);
    let nodes = support::urls(&servers);
    let mut workers: Vec<Child> = (0..4)
        .map(|_| {
            Command::new(exe)
                .args(["--worker", "1", "9", &checker.url()])
                .args(&nodes)
                .stdout(Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let redlock = Redlock::builder(&nodes).build()?;
    // The observer on a thread and runtime of its own: the waits for the
    // workers below block this one.
    let observing = nodes.clone();
    let observed = std::thread::spawn(move || -> Result<Vec<LeaderEvent>, String> {
        let runtime = support::runtime().map_err(|err| err.to_string())?;
        runtime.block_on(async move {
            let observer = Redlock::builder(&observing)
                .build()
                .map_err(|err| err.to_string())?;
            let mut events = (observer.observe(ELECTION, Duration::from_millis(20)))
                .map_err(|err| err.to_string())?;
            let mut seen = Vec::new();
            let end = Instant::now() + Duration::from_secs(12);
            while let Ok(Some(event)) = tokio::time::timeout_at(end.into(), events.next()).await {
                match event {
                    Ok(event) => seen.push(event),
                    Err(err) => println!("  a look failed: {err}"),
                }
            }
            Ok(seen)
        })
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The leader dies.
    let (killed, killed_term) = leading(&redlock, &workers)
        .await
        .ok_or("no leader to kill")?;
    let killed_at = wall_ms();
    signal("KILL", killed)?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The next one stops past its lease, then resumes.
    let (paused, paused_term) = leading(&redlock, &workers)
        .await
        .ok_or("no leader to stop")?;
    signal("STOP", paused)?;
    tokio::time::sleep(TTL * 3).await;
    let resumed_at = wall_ms();
    signal("CONT", paused)?;
    // Nodes freeze one at a time, each past the TTL.
    for node in servers.iter().take(3) {
        tokio::time::sleep(Duration::from_millis(300)).await;
        node.pause();
        tokio::time::sleep(TTL + Duration::from_millis(200)).await;
        node.resume();
    }
    let (mut terms_led, mut paused_lost) = (0, 0);
    for mut worker in workers.drain(..) {
        if worker.id() == killed {
            let _ = worker.wait();
            continue;
        }
        let output = worker.wait_with_output()?;
        let text = String::from_utf8_lossy(&output.stdout);
        check(
            output.status.success(),
            format!("worker failed: {} {text}", output.status),
        )?;
        let [pid, terms, lost] = support::harness::counts::<3>(&text)?;
        println!("  worker {pid}: led {terms} terms, {lost} lost");
        terms_led += terms;
        if pid == u64::from(paused) {
            paused_lost = lost;
        }
    }
    let seen = observed.join().map_err(|_| "the observer panicked")??;
    let mut connection = checker.connection();
    let starts: BTreeMap<u64, u64> = redis::cmd("HGETALL").arg("starts").query(&mut connection)?;
    let ends: BTreeMap<u64, u64> = redis::cmd("HGETALL").arg("ends").query(&mut connection)?;
    let stopped: BTreeMap<u64, u64> = redis::cmd("HGETALL")
        .arg("stopped")
        .query(&mut connection)?;
    println!(
        "  {} terms reported ({terms_led} by the survivors), killed term {killed_term}",
        starts.len()
    );
    check(starts.len() >= 6, format!("only {} terms", starts.len()))?;
    // By term: each ends (its validity, or where it stopped acting before)
    // before the next starts, and starts rise.
    let terms: Vec<(u64, u64, u64)> = starts
        .iter()
        .map(|(term, start)| {
            let valid_to = ends.get(term).copied().unwrap_or(*start);
            let end = stopped
                .get(term)
                .map_or(valid_to, |stop| valid_to.min(*stop));
            (*term, *start, end)
        })
        .collect();
    for pair in terms.windows(2) {
        let [(term, start, end), (next, next_start, _)] = pair else {
            continue;
        };
        check(
            end <= next_start && start < next_start,
            format!("term {term} ({start}..{end}) overlaps term {next} from {next_start}"),
        )?;
    }
    // The paused leader, if it still led when it was stopped (it stopped
    // acting only after it resumed): its validity ended before it resumed,
    // a standby led meanwhile, and it saw its guard invalid.
    if stopped
        .get(&paused_term)
        .is_some_and(|stop| *stop >= resumed_at)
    {
        let valid_to = ends.get(&paused_term).copied().unwrap_or(0);
        let next = terms.iter().find(|(term, _, _)| *term > paused_term);
        println!("  the paused leader: valid to {valid_to}, resumed {resumed_at}, next {next:?}");
        check(
            valid_to < resumed_at,
            "the paused leader's validity outlived the pause",
        )?;
        check(
            next.is_some_and(|(_, start, _)| *start < resumed_at),
            "no standby led while the leader was paused",
        )?;
        check(
            paused_lost >= 1,
            "the paused leader did not see its guard invalid",
        )?;
    }
    let after_kill = terms.iter().find(|(term, _, _)| *term > killed_term);
    let took = after_kill.map(|(_, start, _)| start.saturating_sub(killed_at));
    println!("  a standby led {took:?} ms after the kill (TTL {TTL:?})");
    check(
        took.is_some_and(|took| took <= TTL_MS + 1500),
        format!("takeover after the kill: {took:?} ms"),
    )?;
    check_observed(&seen, &terms, killed_term)
}

/// The observer's events: each `Lost` follows the `Elected` of its term,
/// terms rise, the killed term was lost, and every term that lasted 150 ms
/// was seen.
fn check_observed(seen: &[LeaderEvent], terms: &[(u64, u64, u64)], killed: u64) -> Outcome {
    let mut current: Option<u64> = None;
    let mut elected = Vec::new();
    for event in seen {
        match (event, current) {
            (LeaderEvent::Elected(leader), None) => {
                check(
                    elected.last().is_none_or(|last| *last < leader.term),
                    format!("term {} elected after {elected:?}", leader.term),
                )?;
                elected.push(leader.term);
                current = Some(leader.term);
            }
            (LeaderEvent::Lost(leader), Some(term)) if leader.term == term => current = None,
            _ => return Err(format!("out of order: {event:?} with {current:?} leading").into()),
        }
    }
    println!("  observed {} terms", elected.len());
    check(
        elected.contains(&killed) && current != Some(killed),
        format!("the killed term {killed}: {elected:?}"),
    )?;
    let lasting: Vec<u64> = (terms.iter())
        .filter(|(_, start, end)| end.saturating_sub(*start) >= 150)
        .map(|(term, _, _)| *term)
        .collect();
    let missed: Vec<_> = (terms.iter())
        .filter(|(term, _, _)| lasting.contains(term) && !elected.contains(term))
        .collect();
    if !missed.is_empty() {
        let first = terms.first().map_or(0, |(_, start, _)| *start);
        for (term, start, end) in terms {
            let seen = if elected.contains(term) {
                "seen"
            } else {
                "MISSED"
            };
            println!(
                "  term {term}: {}..{} ms {seen}",
                start - first,
                end - first
            );
        }
    }
    check(missed.is_empty(), format!("terms not observed: {missed:?}"))
}

const TESTS: [&str; 5] = [
    "a_campaign_leads_and_the_leader_is_told",
    "standbys_take_over_in_order_with_higher_terms",
    "a_dead_leader_is_followed_and_observed",
    "bad_input_is_refused",
    "leaders_across_processes_never_overlap",
];

fn run(name: &str, exe: &std::path::Path, runtime: &tokio::runtime::Runtime) -> Outcome {
    let test: std::pin::Pin<Box<dyn std::future::Future<Output = Outcome>>> = match name {
        "a_campaign_leads_and_the_leader_is_told" => {
            Box::pin(a_campaign_leads_and_the_leader_is_told())
        }
        "standbys_take_over_in_order_with_higher_terms" => {
            Box::pin(standbys_take_over_in_order_with_higher_terms())
        }
        "a_dead_leader_is_followed_and_observed" => {
            Box::pin(a_dead_leader_is_followed_and_observed())
        }
        "bad_input_is_refused" => Box::pin(bad_input_is_refused()),
        _ => Box::pin(leaders_across_processes_never_overlap(exe)),
    };
    support::harness::block_on_within(runtime, Duration::from_secs(90), test)
}

fn main() -> ExitCode {
    // One campaigner per process (TASKS is 1).
    support::harness::main_with_workers(
        &TESTS,
        &|args| Box::pin(worker(args.seconds, args.checker, args.nodes)),
        run,
    )
}

//! Locks on several resources (`lock_all`), against real servers: all or
//! none on each node, nothing left behind by a lost round, one guard that
//! extends and releases every key, exclusion with plain locks on a member,
//! fencing tokens above every earlier holder of any member, and, across OS
//! processes, overlapping sets named in opposite orders that all make
//! progress with no overlap on any resource (a separate checker Redis counts
//! the holders of each resource). The multi-process test re-executes this
//! binary as its workers, so this file has its own `main` (harness = false).

mod support;

use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use quorlock::{Error, Redlock};
use support::RedisServer;
use support::harness::{Outcome, check};

const TTL: Duration = Duration::from_secs(10);

/// Each node's values of `redlock`'s keys for `resources`, by node.
fn values(
    redlock: &Redlock,
    nodes: &[RedisServer],
    resources: &[&str],
) -> Vec<Vec<Option<Vec<u8>>>> {
    nodes
        .iter()
        .map(|node| {
            resources
                .iter()
                .map(|resource| node.get(&redlock.key(resource).unwrap_or_default()))
                .collect()
        })
        .collect()
}

/// A round that wins some keys on some nodes (here: none on two of three
/// nodes, where one member is taken) sets nothing there and leaves nothing
/// behind anywhere; a round that wins on a quorum releases every key on
/// every node, and leaves foreign keys alone.
async fn a_lost_round_leaves_no_key_behind() -> Outcome {
    let nodes = support::servers(3);
    let redlock = support::builder(&nodes).build()?;
    let key = |resource: &str| redlock.key(resource).unwrap_or_default();
    nodes[0].set_px(&key("m:b"), "someone-else", 60_000);
    nodes[1].set_px(&key("m:a"), "someone-else", 60_000);
    let lost = redlock.try_lock_all(["m:a", "m:b", "m:c"], TTL).await;
    check(
        matches!(lost, Err(Error::Contended { .. })),
        format!("a set taken on two of three nodes is contended: {lost:?}"),
    )?;
    redlock.flush().await;
    let after = values(&redlock, &nodes, &["m:a", "m:b", "m:c"]);
    let foreign = Some(b"someone-else".to_vec());
    check(
        after
            == vec![
                vec![None, foreign.clone(), None],
                vec![foreign.clone(), None, None],
                vec![None, None, None],
            ],
        format!("only the foreign keys are left: {after:?}"),
    )?;
    // Taken on one node only: a quorum of all-or-nothing grants wins.
    redis::cmd("DEL")
        .arg(key("m:a"))
        .query::<()>(&mut nodes[1].connection())?;
    let guard = redlock.try_lock_all(["m:c", "m:a", "m:b"], TTL).await?;
    let held = values(&redlock, &nodes, &["m:a", "m:b", "m:c"]);
    check(
        held[0] == vec![None, foreign.clone(), None]
            && held[1..]
                .iter()
                .all(|node| node.iter().all(Option::is_some)),
        format!("the other two nodes hold every key: {held:?}"),
    )?;
    check(
        held[1].iter().all(|value| *value == held[1][0]),
        "one token for every key",
    )?;
    guard.unlock().await?;
    let released = values(&redlock, &nodes, &["m:a", "m:b", "m:c"]);
    check(
        released
            == vec![
                vec![None, foreign, None],
                vec![None, None, None],
                vec![None, None, None],
            ],
        format!("released everywhere: {released:?}"),
    )
}

/// One guard for the set: its resources in byte order, none twice;
/// `extend` resets every key's TTL; `unlock` and a dropped guard release
/// every key.
async fn one_guard_extends_and_releases_every_key() -> Outcome {
    let nodes = support::servers(3);
    let redlock = support::builder(&nodes).build()?;
    let mut guard = redlock
        .lock_all(["g:b", "g:a", "g:b"], Duration::from_secs(5))
        .await?;
    let resources: Vec<&[u8]> = guard.resources().collect();
    check(
        resources == [b"g:a".as_slice(), b"g:b".as_slice()],
        format!("sorted, once each: {resources:?}"),
    )?;
    guard.extend(Duration::from_secs(60)).await?;
    for node in &nodes {
        for resource in ["g:a", "g:b"] {
            let pttl = node.pttl(&redlock.key(resource)?);
            check(
                pttl > 50_000,
                format!("{resource} extended to 60 s: pttl {pttl}"),
            )?;
        }
    }
    guard.unlock().await?;
    check(
        values(&redlock, &nodes, &["g:a", "g:b"])
            .iter()
            .flatten()
            .all(Option::is_none),
        "unlock released both",
    )?;
    let dropped = redlock.lock_all(["g:a", "g:b"], TTL).await?;
    drop(dropped);
    redlock.flush().await;
    check(
        values(&redlock, &nodes, &["g:a", "g:b"])
            .iter()
            .flatten()
            .all(Option::is_none),
        "a dropped guard released both",
    )
}

/// A plain lock on one member and the lock on the set exclude each other.
async fn a_plain_lock_on_a_member_excludes_the_set() -> Outcome {
    let nodes = support::servers(3);
    let redlock = support::builder(&nodes).build()?;
    let plain = redlock.lock("x:b", TTL).await?;
    let refused = redlock.try_lock_all(["x:a", "x:b"], TTL).await;
    check(
        matches!(refused, Err(Error::Contended { .. })),
        format!("the set is refused while x:b is held: {refused:?}"),
    )?;
    redlock.flush().await;
    check(
        values(&redlock, &nodes, &["x:a"])
            .iter()
            .flatten()
            .all(Option::is_none),
        "x:a was not taken",
    )?;
    plain.unlock().await?;
    let set = redlock.lock_all(["x:a", "x:b"], TTL).await?;
    for member in ["x:a", "x:b"] {
        let refused = redlock.try_lock(member, TTL).await;
        check(
            matches!(refused, Err(Error::Contended { .. })),
            format!("{member} is refused while the set is held: {refused:?}"),
        )?;
    }
    set.unlock().await?;
    redlock.lock("x:b", TTL).await?.unlock().await?;
    Ok(())
}

/// With fencing on, the set's token is above the last token of every member,
/// and the next holder of a member gets a token above the set's.
async fn the_fencing_token_passes_every_member() -> Outcome {
    let nodes = support::servers(3);
    let redlock = support::builder(&nodes).fencing(true).build()?;
    let mut last = 0;
    for resource in ["f:a", "f:b"] {
        let guard = redlock.lock(resource, TTL).await?;
        last = last.max(guard.fencing_token().ok_or("a token")?);
        guard.unlock().await?;
    }
    let set = redlock.lock_all(["f:a", "f:b"], TTL).await?;
    let token = set.fencing_token().ok_or("the set has a token")?;
    check(token > last, format!("set token {token} above {last}"))?;
    set.unlock().await?;
    let next = redlock.lock("f:b", TTL).await?;
    let after = next.fencing_token().ok_or("a token")?;
    check(after > token, format!("next token {after} above {token}"))?;
    next.unlock().await?;
    Ok(())
}

/// No resource, too many, or an invalid one: a typed error, nothing set.
async fn bad_sets_are_refused_before_any_round() -> Outcome {
    let nodes = support::servers(1);
    let redlock = support::builder(&nodes).build()?;
    let none: [&str; 0] = [];
    let empty = redlock.lock_all(none, TTL).await;
    check(
        matches!(empty, Err(Error::InvalidResource { .. })),
        format!("no resource: {empty:?}"),
    )?;
    let many: Vec<String> = (0..=Redlock::MAX_RESOURCES)
        .map(|i| format!("r{i}"))
        .collect();
    let too_many = redlock.lock_all(&many, TTL).await;
    check(
        matches!(too_many, Err(Error::InvalidResource { .. })),
        format!("{} resources: {too_many:?}", many.len()),
    )?;
    let invalid = redlock.try_lock_all(["ok", ""], TTL).await;
    check(
        matches!(invalid, Err(Error::InvalidResource { .. })),
        format!("an empty name: {invalid:?}"),
    )?;
    check(nodes[0].get(&redlock.key("ok")?).is_none(), "nothing set")?;
    let most: Vec<String> = many[..Redlock::MAX_RESOURCES].to_vec();
    redlock.lock_all(&most, TTL).await?.unlock().await?;
    Ok(())
}

/// Checks `held` (each node's values of a set's keys): a quorum of nodes
/// hold every key under one token (marked or not). Other nodes may hold
/// anything meanwhile (a member's waiter may be claiming it on a node the
/// set's gather did not reach).
fn check_one_token(held: &[Vec<Option<Vec<u8>>>]) -> Outcome {
    let unmarked = |value: &Vec<u8>| value.strip_suffix(b"+").unwrap_or(value).to_vec();
    let mut whole: std::collections::HashMap<Vec<u8>, usize> = std::collections::HashMap::new();
    for node in held {
        let tokens: std::collections::HashSet<Option<Vec<u8>>> = node
            .iter()
            .map(|value| value.as_ref().map(unmarked))
            .collect();
        if let [Some(token)] = tokens.into_iter().collect::<Vec<_>>().as_slice() {
            *whole.entry(token.clone()).or_default() += 1;
        }
    }
    check(
        whole.values().any(|nodes| *nodes > held.len() / 2),
        format!("one token on every key of a quorum of nodes: {held:?}"),
    )
}

/// A `lock_all` whose member `b` is held waits in `b`'s queue, holding `a`
/// (a plain `try_lock` of `a` is refused meanwhile), ahead of a plain
/// waiter that came after it; once `b` is released, the set holds every
/// key under one token on every node, the plain waiter still waits, and
/// after the set's release the waiter gets `b`. A `lock_all` dropped while
/// it waits leaves no key and no queue entry of its own behind.
async fn a_set_waits_in_the_queue_and_leaves_nothing_behind() -> Outcome {
    let nodes = support::servers(3);
    let redlock = support::builder(&nodes).fencing(true).build()?;
    let members = ["w:a", "w:b", "w:c"];
    let holder = redlock.lock("w:b", TTL).await?;
    let holder_token = holder.fencing_token().ok_or("a token")?;
    let set = tokio::spawn({
        let redlock = redlock.clone();
        async move { redlock.lock_all(["w:c", "w:b", "w:a"], TTL).await }
    });
    let b_key = redlock.key("w:b")?;
    let queued =
        |n: i64| (support::queue_lengths(&nodes, &b_key).iter()).all(|length| *length >= n);
    check(
        support::eventually(Duration::from_secs(10), || queued(1)).await,
        format!(
            "the set queued on w:b: {:?}",
            support::queue_lengths(&nodes, &b_key)
        ),
    )?;
    let a_taken = redlock.try_lock("w:a", TTL).await;
    check(
        matches!(a_taken, Err(Error::Contended { .. })),
        format!("w:a is held while the set waits: {a_taken:?}"),
    )?;
    let waiter = tokio::spawn({
        let redlock = redlock.clone();
        async move { redlock.lock("w:b", TTL).await }
    });
    check(
        support::eventually(Duration::from_secs(10), || queued(2)).await,
        "the plain waiter queued behind the set",
    )?;
    holder.unlock().await?;
    let set = tokio::time::timeout(Duration::from_secs(10), set).await???;
    let token = set.fencing_token().ok_or("the set has a token")?;
    check(
        token > holder_token,
        format!("set token {token} above {holder_token}"),
    )?;
    // The plain locks of the wait are released in the background where
    // the gather did not replace them (a node it skipped, slow under load).
    redlock.flush().await;
    let held = values(&redlock, &nodes, &members);
    check_one_token(&held)?;
    check(!waiter.is_finished(), "the plain waiter still waits")?;
    set.unlock().await?;
    let next = tokio::time::timeout(Duration::from_secs(10), waiter).await???;
    next.unlock().await?;
    // A set dropped while it waits for `b`.
    let holder = redlock.lock("w:b", TTL).await?;
    let set = tokio::spawn({
        let redlock = redlock.clone();
        async move { redlock.lock_all(members, TTL).await }
    });
    check(
        support::eventually(Duration::from_secs(10), || queued(1)).await,
        "the second set queued on w:b",
    )?;
    set.abort();
    let _ = set.await;
    holder.unlock().await?;
    redlock.flush().await;
    let left = values(&redlock, &nodes, &members);
    check(
        left.iter().flatten().all(Option::is_none),
        format!("nothing left after a dropped set: {left:?}"),
    )?;
    check(
        support::queue_lengths(&nodes, &b_key)
            .iter()
            .all(|length| *length == 0),
        "no queue entry left",
    )
}

/// The set's plain hold on `a` is lost while it waits for `b`: another
/// client's value replaces it on two of three nodes for 1.5 s. The gather
/// is refused there, gives back what it set, and the call starts over in
/// the queues: it takes the set only once the foreign value expired (never
/// over it), with one token on every key of a quorum of nodes.
async fn a_refused_gather_gives_everything_back_and_tries_again() -> Outcome {
    let nodes = support::servers(3);
    let redlock = support::builder(&nodes).build()?;
    let holder = redlock.lock("r:b", TTL).await?;
    let set = tokio::spawn({
        let redlock = redlock.clone();
        async move { redlock.lock_all(["r:a", "r:b"], TTL).await }
    });
    let b_key = redlock.key("r:b")?;
    check(
        support::eventually(Duration::from_secs(10), || {
            (support::queue_lengths(&nodes, &b_key).iter()).all(|length| *length == 1)
        })
        .await,
        "the set queued on r:b",
    )?;
    let a_key = redlock.key("r:a")?;
    for node in &nodes[..2] {
        node.set_px(&a_key, "someone-else", 1_500);
    }
    let foreign_from = Instant::now();
    holder.unlock().await?;
    let set = tokio::time::timeout(Duration::from_secs(10), set).await???;
    let waited = foreign_from.elapsed();
    check(
        waited >= Duration::from_millis(1_400),
        format!("the set was taken {waited:?} after the foreign value, which lived 1.5 s"),
    )?;
    redlock.flush().await;
    check_one_token(&values(&redlock, &nodes, &["r:a", "r:b"]))?;
    set.unlock().await?;
    redlock.flush().await;
    let left = values(&redlock, &nodes, &["r:a", "r:b"]);
    check(
        left.iter().flatten().all(Option::is_none),
        format!("nothing left: {left:?}"),
    )
}

/// The critical section: `INCR` each resource's holder count on the checker
/// (each must read 1), hold 1 ms, `DECR`. Returns whether this holder was
/// alone on every resource.
async fn checked_hold_all(
    checker: &mut redis::aio::MultiplexedConnection,
    resources: &[String],
) -> bool {
    let mut alone = true;
    for resource in resources {
        let inside: i64 = redis::cmd("INCR")
            .arg(format!("holders:{resource}"))
            .query_async(checker)
            .await
            .unwrap_or(-1);
        alone &= inside == 1;
    }
    tokio::task::block_in_place(|| std::thread::sleep(Duration::from_millis(1)));
    for resource in resources {
        let _: redis::RedisResult<i64> = redis::cmd("DECR")
            .arg(format!("holders:{resource}"))
            .query_async(checker)
            .await;
    }
    alone
}

/// One worker process: `tasks` tasks lock `resources` (several: `lock_all`
/// in the order given; one: a plain `lock`, after which the task pauses
/// `pause_ms`) for `seconds`, each hold checked on the checker. Prints
/// `acquisitions failed overlaps`.
async fn worker(
    (tasks, seconds, pause_ms): (usize, u64, u64),
    checker: &str,
    resources: &str,
    nodes: &[String],
) -> Outcome {
    let redlock = Redlock::builder(nodes)
        .retry_delay(Duration::from_millis(5))
        .retry_jitter(Duration::from_millis(5))
        .acquire_timeout(Duration::from_secs(10))
        .build()?;
    let resources: Vec<String> = resources.split(',').map(str::to_owned).collect();
    let checker = redis::Client::open(checker)?
        .get_multiplexed_async_connection()
        .await?;
    redlock.lock("m:warm-up", TTL).await?.unlock().await?;
    let end = Instant::now() + Duration::from_secs(seconds);
    let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (redlock, mut checker, counts) = (redlock.clone(), checker.clone(), counts.clone());
        let resources = resources.clone();
        handles.push(tokio::spawn(async move {
            while Instant::now() < end {
                let locked = match &resources[..] {
                    [one] => redlock.lock(one, TTL).await,
                    many => redlock.lock_all(many, TTL).await,
                };
                let Ok(guard) = locked else {
                    counts[1].fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                if !checked_hold_all(&mut checker, &resources).await {
                    counts[2].fetch_add(1, Ordering::Relaxed);
                }
                let _ = guard.unlock().await;
                counts[0].fetch_add(1, Ordering::Relaxed);
                if resources.len() == 1 && pause_ms > 0 {
                    tokio::time::sleep(Duration::from_millis(pause_ms)).await;
                }
            }
        }));
    }
    for handle in handles {
        handle.await?;
    }
    redlock.flush().await;
    support::harness::report(&*counts);
    Ok(())
}

/// Runs one worker process per `(resources, tasks, pause_ms)` for
/// `seconds` on `servers[1..]` (checker: `servers[0]`), and returns each
/// one's `[acquisitions, failed, overlaps]`, printed.
fn run_workers(
    exe: &std::path::Path,
    servers: &[RedisServer],
    seconds: &str,
    workers: &[(&str, &str, &str)],
) -> Result<Vec<[u64; 3]>, support::harness::AnyError> {
    let nodes = support::urls(&servers[1..]);
    let spawned: Vec<_> = workers
        .iter()
        .map(|(set, tasks, pause_ms)| {
            Command::new(exe)
                .args(["--worker", tasks, seconds, pause_ms, &servers[0].url(), set])
                .args(&nodes)
                .stdout(Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let mut counts = Vec::new();
    for ((set, tasks, _), worker) in workers.iter().zip(spawned) {
        let output = worker.wait_with_output()?;
        let text = String::from_utf8_lossy(&output.stdout);
        check(
            output.status.success(),
            format!("worker {set} failed: {} {text}", output.status),
        )?;
        let [acquired, failed, overlapped] = support::harness::counts::<3>(&text)?;
        println!(
            "  {set} ({tasks} tasks): {acquired} acquisitions, {failed} failed calls, \
             {overlapped} overlaps"
        );
        counts.push([acquired, failed, overlapped]);
    }
    Ok(counts)
}

/// Four processes on five nodes: three of three tasks lock overlapping sets
/// named in different orders (`a,b,c`, `c,b,a` and `d,b`), and three tasks
/// in a fourth take plain locks on `b` without a pause, so that `b` always
/// has waiters. Every process makes progress (no deadlock, no set starved
/// behind the plain waiters), no call fails within its patience, and the
/// checker sees no two holders of any resource at once.
fn overlapping_sets_in_opposite_orders_make_progress(exe: &std::path::Path) -> Outcome {
    let servers = support::servers(6);
    let workers = [
        ("p:a,p:b,p:c", "3", "0"),
        ("p:c,p:b,p:a", "3", "0"),
        ("p:d,p:b", "3", "0"),
        ("p:b", "3", "0"),
    ];
    let counts = run_workers(exe, &servers, "4", &workers)?;
    let total: u64 = counts.iter().map(|[acquired, ..]| acquired).sum();
    let failed: u64 = counts.iter().map(|[_, failed, _]| failed).sum();
    let overlaps: u64 = counts.iter().map(|[.., overlaps]| overlaps).sum();
    let least = counts.iter().map(|[acquired, ..]| *acquired).min();
    println!("  {total} acquisitions in all");
    check(overlaps == 0, format!("{overlaps} overlaps"))?;
    check(failed == 0, format!("{failed} calls failed"))?;
    check(
        least.is_some_and(|least| least >= 10),
        format!("a process made too little progress: {least:?}"),
    )
}

/// The case, across processes on five nodes: three processes each
/// lock `b` in a loop without a pause (so that `b` always has waiters
/// queued), and a fourth takes the set `{a, b, c}` in a loop. All four wait
/// in `b`'s queue in turn, so the set gets at least 0.8 of a fair share
/// (a quarter) of `b`'s holds, with no overlap and no failed call.
fn a_set_gets_its_share_behind_queued_waiters(exe: &std::path::Path) -> Outcome {
    let servers = support::servers(6);
    let workers = [
        ("q:b", "1", "0"),
        ("q:b", "1", "0"),
        ("q:b", "1", "0"),
        ("q:a,q:b,q:c", "1", "0"),
    ];
    let counts = run_workers(exe, &servers, "6", &workers)?;
    let total: u64 = counts.iter().map(|[acquired, ..]| acquired).sum();
    let failed: u64 = counts.iter().map(|[_, failed, _]| failed).sum();
    let overlaps: u64 = counts.iter().map(|[.., overlaps]| overlaps).sum();
    let set = counts.last().map_or(0, |[acquired, ..]| *acquired);
    let fair = total as f64 / workers.len() as f64;
    println!(
        "  the set: {set} of {total} holds of q:b, {:.2} of a fair share",
        set as f64 / fair
    );
    check(overlaps == 0, format!("{overlaps} overlaps"))?;
    check(failed == 0, format!("{failed} calls failed"))?;
    check(total >= 40, format!("too few holds to judge: {total}"))?;
    check(
        set as f64 >= 0.8 * fair,
        format!("the set got {set} of {total} holds, below 0.8 of a fair share {fair:.1}"),
    )
}

const TESTS: [&str; 9] = [
    "a_lost_round_leaves_no_key_behind",
    "one_guard_extends_and_releases_every_key",
    "a_plain_lock_on_a_member_excludes_the_set",
    "the_fencing_token_passes_every_member",
    "bad_sets_are_refused_before_any_round",
    "overlapping_sets_in_opposite_orders_make_progress",
    "a_set_waits_in_the_queue_and_leaves_nothing_behind",
    "a_set_gets_its_share_behind_queued_waiters",
    "a_refused_gather_gives_everything_back_and_tries_again",
];

fn run(name: &str, exe: &std::path::Path, runtime: &tokio::runtime::Runtime) -> Outcome {
    let limit = Duration::from_secs(120);
    let bounded = |test: std::pin::Pin<Box<dyn std::future::Future<Output = Outcome>>>| {
        runtime.block_on(async {
            tokio::time::timeout(limit, test)
                .await
                .unwrap_or_else(|_| Err(format!("not done in {limit:?}").into()))
        })
    };
    match name {
        "a_lost_round_leaves_no_key_behind" => {
            bounded(Box::pin(a_lost_round_leaves_no_key_behind()))
        }
        "one_guard_extends_and_releases_every_key" => {
            bounded(Box::pin(one_guard_extends_and_releases_every_key()))
        }
        "a_plain_lock_on_a_member_excludes_the_set" => {
            bounded(Box::pin(a_plain_lock_on_a_member_excludes_the_set()))
        }
        "the_fencing_token_passes_every_member" => {
            bounded(Box::pin(the_fencing_token_passes_every_member()))
        }
        "bad_sets_are_refused_before_any_round" => {
            bounded(Box::pin(bad_sets_are_refused_before_any_round()))
        }
        "a_set_waits_in_the_queue_and_leaves_nothing_behind" => bounded(Box::pin(
            a_set_waits_in_the_queue_and_leaves_nothing_behind(),
        )),
        "a_refused_gather_gives_everything_back_and_tries_again" => bounded(Box::pin(
            a_refused_gather_gives_everything_back_and_tries_again(),
        )),
        "a_set_gets_its_share_behind_queued_waiters" => {
            a_set_gets_its_share_behind_queued_waiters(exe)
        }
        _ => overlapping_sets_in_opposite_orders_make_progress(exe),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = support::runtime().expect("tokio runtime");
    if args.first().map(String::as_str) == Some("--worker") {
        let outcome = match &args[1..] {
            [tasks, seconds, pause_ms, checker, resources, nodes @ ..] => {
                match (tasks.parse(), seconds.parse(), pause_ms.parse()) {
                    (Ok(tasks), Ok(seconds), Ok(pause_ms)) => runtime.block_on(worker(
                        (tasks, seconds, pause_ms),
                        checker,
                        resources,
                        nodes,
                    )),
                    _ => Err("bad TASKS, SECONDS or PAUSE_MS".into()),
                }
            }
            _ => Err("--worker TASKS SECONDS PAUSE_MS CHECKER RESOURCES NODE...".into()),
        };
        return support::harness::exit("worker", outcome);
    }
    let exe = std::env::current_exe().expect("own executable");
    support::harness::run_tests(&args, &TESTS, |name| run(name, &exe, &runtime))
}

//! Real network faults (`support/netns.rs`): every node, and every client
//! process but the test's own, a host of its own in a network namespace;
//! partitions that drop packets without a reset. A holder cut off from a
//! majority while it holds is told by the end of its validity, and no other
//! process holds before then. This test re-executes its own binary as the
//! contending process, so it has its own `main` (harness = false).

mod support;

use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use quorlock::{LostReason, Redlock};
use support::RedisServer;
use support::harness::{AnyError, Outcome, WorkerArgs, check};
use support::netns::Net;

const RESOURCE: &str = "partition:resource";

/// Set for a worker that runs [`holder`], to the replicas that must
/// acknowledge each of its grants (`replica_acks`).
const HOLDER: &str = "QUORLOCK_PARTITION_HOLDER";

/// Set for a worker that runs [`contention`] rather than [`contender`], to
/// its node timeout in ms (anything else: the default).
const ROLE: &str = "QUORLOCK_PARTITION_CONTENTION";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--sale-worker") {
        let outcome = support::runtime()
            .map_err(AnyError::from)
            .and_then(|runtime| runtime.block_on(support::sale::worker_main(&args[1..])));
        return support::harness::exit("sale worker", outcome);
    }
    support::harness::main_with_workers(
        &[
            "a_cut_drops_packets_without_a_reset",
            "a_holder_cut_off_from_a_majority_is_told_and_never_overlapped",
            "waiters_are_served_when_their_notifications_go_silent",
            "lossy_and_slow_links_never_give_two_holders",
            "split_brain_over_sentinel",
            "a_net_leaves_no_link_behind_when_a_namespace_outlives_it",
        ],
        &|args| {
            if std::env::var_os(HOLDER).is_some() {
                Box::pin(holder(args))
            } else if std::env::var_os(ROLE).is_some() {
                Box::pin(contention(args))
            } else {
                Box::pin(contender(args))
            }
        },
        |name, exe, runtime| match name {
            "a_cut_drops_packets_without_a_reset" => support::harness::block_on_within(
                runtime,
                Duration::from_secs(60),
                a_cut_drops_packets_without_a_reset(),
            ),
            "a_holder_cut_off_from_a_majority_is_told_and_never_overlapped" => {
                support::harness::block_on_within(
                    runtime,
                    Duration::from_secs(120),
                    a_holder_cut_off_from_a_majority(exe),
                )
            }
            "waiters_are_served_when_their_notifications_go_silent" => {
                support::harness::block_on_within(
                    runtime,
                    Duration::from_secs(120),
                    waiters_served_when_notifications_go_silent(exe),
                )
            }
            "lossy_and_slow_links_never_give_two_holders" => support::harness::block_on_within(
                runtime,
                Duration::from_secs(180),
                lossy_and_slow_links(exe),
            ),
            "split_brain_over_sentinel" => support::harness::block_on_within(
                runtime,
                Duration::from_secs(240),
                split_brain_over_sentinel(exe),
            ),
            "a_net_leaves_no_link_behind_when_a_namespace_outlives_it" => {
                a_net_leaves_no_link_behind()
            }
            _ => Err(format!("unknown test {name}").into()),
        },
    )
}

/// Now on the machine's wall clock (which every process and namespace
/// shares), in µs since the Unix epoch.
fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_micros() as u64)
}

/// `at` (an `Instant` of this process) on the wall clock, in µs.
fn wall_us(at: Instant) -> u64 {
    let now = Instant::now();
    match at.checked_duration_since(now) {
        Some(ahead) => now_us() + ahead.as_micros() as u64,
        None => now_us().saturating_sub(now.duration_since(at).as_micros() as u64),
    }
}

/// A new host replaces a link left with its name, and a dropped net
/// removes its hosts' links even when a namespace outlives it: the kernel
/// keeps a namespace while anything holds it (here an open handle; after a
/// test, sockets still retransmitting to a cut peer, for minutes), and with
/// it the pair of links to its bridge. A link left behind made the next net
/// given the same slot fail to add its own ("File exists").
fn a_net_leaves_no_link_behind() -> Outcome {
    let net = Net::new();
    let host = net.host();
    let (Some(netns), Some(link)) = (host.netns.clone(), host.outside_link()) else {
        return Err("a host of the net has no namespace".into());
    };
    let exists = |link: &str| {
        std::process::Command::new("ip")
            .args(["link", "show", link])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    check(exists(&link), format!("{link} is there while the net is"))?;
    // A link left with the name of the next host's (by a net that had the
    // slot before, under older code, or whose removal was killed): the new
    // host replaces it.
    let stale = format!("{}h3", link.strip_suffix("h2").unwrap_or(&link));
    let made = std::process::Command::new("ip")
        .args(["link", "add", &stale, "type", "bridge"])
        .status()?;
    check(
        made.success() && exists(&stale),
        format!("a stale {stale} made"),
    )?;
    let next = net.host();
    check(
        next.outside_link().as_deref() == Some(stale.as_str()) && exists(&stale),
        format!("the next host's link is {:?}", next.outside_link()),
    )?;
    // Holds the namespace past the net, as a lingering socket would.
    let held = std::fs::File::open(format!("/var/run/netns/{netns}"))?;
    drop(net);
    let left = exists(&link);
    drop(held);
    check(!left, format!("{link} was left behind by the dropped net"))
}

/// The test support's faults do what they say (`support/netns.rs`): across
/// a cut, an open connection's command and a new connection both go
/// unanswered (no reset, no error) until the heal, after which both work;
/// a 100 % loss does the same; a host cut from another still reaches a
/// third; a 100 % loss beside the control stops another host's connection
/// but not the test process's.
async fn a_cut_drops_packets_without_a_reset() -> Outcome {
    let net = Net::new();
    let (node_host, other_host) = (net.host(), net.host());
    let node = RedisServer::start_in(&node_host, &[]);
    let other = RedisServer::start_in(&other_host, &[]);
    let local = net.local();
    let client = redis::Client::open(node.url())?;
    let mut open = client.get_multiplexed_async_connection().await?;
    let ping = |mut connection: redis::aio::MultiplexedConnection| async move {
        let reply: redis::RedisResult<String> =
            redis::cmd("PING").query_async(&mut connection).await;
        reply
    };
    check(ping(open.clone()).await? == "PONG", "PING before the cut")?;
    for (what, fault) in [("cut", 0u8), ("100 % loss", 100)] {
        match fault {
            0 => net.cut(&local, &node_host),
            percent => net.loss(&node_host, percent),
        }
        let silent = tokio::time::timeout(Duration::from_secs(2), ping(open.clone())).await;
        // Silent: no answer, or the client's own timeout; never a reset.
        check(
            match &silent {
                Err(_) => true,
                Ok(reply) => reply.as_ref().is_err_and(redis::RedisError::is_timeout),
            },
            format!("{what}: an open connection's PING answered {silent:?}"),
        )?;
        let fresh = tokio::time::timeout(
            Duration::from_secs(2),
            client.get_multiplexed_async_connection(),
        )
        .await;
        check(
            match &fresh {
                Err(_) => true,
                Ok(connection) => connection
                    .as_ref()
                    .is_err_and(redis::RedisError::is_timeout),
            },
            format!(
                "{what}: a new connection was answered: {:?}",
                fresh.map(|c| c.map(|_| ()))
            ),
        )?;
        let third = redis::Client::open(other.url())?
            .get_multiplexed_async_connection()
            .await?;
        check(
            ping(third).await? == "PONG",
            format!("{what}: the third host answers"),
        )?;
        net.heal();
        let healed = tokio::time::timeout(Duration::from_secs(10), ping(open.clone())).await;
        check(
            matches!(&healed, Ok(Ok(pong)) if pong == "PONG"),
            format!("{what}: after the heal, the open connection's PING: {healed:?}"),
        )?;
        open = client.get_multiplexed_async_connection().await?;
    }
    net.loss_beside_control(&node_host, 100);
    let control = tokio::time::timeout(
        Duration::from_secs(5),
        client.get_multiplexed_async_connection(),
    )
    .await;
    let answered = match control {
        Ok(Ok(connection)) => ping(connection).await.ok(),
        _ => None,
    };
    check(
        answered.as_deref() == Some("PONG"),
        format!("a loss beside the control: the test process's new connection got {answered:?}"),
    )?;
    let reached = other_host
        .command("timeout")
        .args(["2", "bash", "-c"])
        .arg(format!(
            "exec 3<>/dev/tcp/{}/{}",
            node.address(),
            node.port()
        ))
        .status()?;
    check(
        !reached.success(),
        "a loss beside the control: another host still connected",
    )?;
    net.heal();
    Ok(())
}

/// What worker process `worker` printed, once it ended; an error unless it
/// succeeded.
async fn worker_output(worker: std::process::Child) -> Result<String, AnyError> {
    let output = tokio::task::spawn_blocking(move || worker.wait_with_output()).await??;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    check(
        output.status.success(),
        format!("a worker: {} {text}", output.status),
    )?;
    Ok(text)
}

/// The contending process: tries the lock every 50 ms for `seconds`; when a
/// try succeeds, prints `acquired <wall µs when it returned>` and releases.
async fn contender(args: &WorkerArgs<'_>) -> Outcome {
    let redlock = Redlock::builder(args.nodes)
        .restart_grace(Duration::from_secs(3))
        .build()?;
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let (mut refused, mut last) = (0u64, None);
    while Instant::now() < deadline {
        match redlock.try_lock(RESOURCE, Duration::from_secs(3)).await {
            Ok(guard) => {
                println!("acquired {} after {refused} refusals", now_us());
                guard.unlock().await?;
                return Ok(());
            }
            Err(err) => {
                refused += 1;
                last = Some(err);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let last = last.map_or_else(String::new, |err| err.to_string());
    Err(format!(
        "never acquired in {} s ({refused} refusals, the last: {last})",
        args.seconds
    )
    .into())
}

/// A holds the lock on 5 nodes, kept alive, and is cut off (silently) from
/// three of them; B, another process in a host of its own, tries the lock
/// all along. A's `lost` tells it by the end of its validity (unreachable
/// nodes), B never holds before A's validity ends, and B gets the lock
/// soon after.
async fn a_holder_cut_off_from_a_majority(exe: &std::path::Path) -> Outcome {
    let net = Net::new();
    let (hosts, nodes) = net.servers(5);
    let urls = support::urls(&nodes);
    let ttl = Duration::from_secs(3);
    let a = Redlock::builder(&urls).restart_grace(ttl).build()?;
    let guard = a.lock(RESOURCE, ttl).await?;
    guard.keep_alive()?;
    let lost = guard.lost();
    let b_host = net.host();
    let b = b_host
        .command(exe)
        .args(["--worker", "1", "20", "unused"])
        .args(&urls)
        .stdout(Stdio::piped())
        .spawn()?;
    // Let B meet the nodes and be refused for a while, then cut A off.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let local = net.local();
    for host in &hosts[..3] {
        net.cut(&local, host);
    }
    let cut_at = Instant::now();
    let valid_until_at_cut = guard.valid_until();
    let err = tokio::time::timeout(ttl * 2, lost)
        .await
        .map_err(|_| "A was never told")?;
    let told = Instant::now();
    let valid_until = guard.valid_until();
    println!(
        "A told {:?} after the cut, {:?} past the validity it had at the cut: {err}",
        told - cut_at,
        told.saturating_duration_since(valid_until_at_cut)
    );
    check(
        matches!(
            err.lost_reason(),
            Some(LostReason::Unreachable { .. } | LostReason::Expired)
        ),
        format!("A told why: {err}"),
    )?;
    check(
        told <= valid_until + Duration::from_millis(100),
        format!(
            "A told {:?} after its validity ended",
            told.saturating_duration_since(valid_until)
        ),
    )?;
    let a_end = wall_us(valid_until);
    let out = tokio::task::spawn_blocking(move || b.wait_with_output()).await??;
    let text = String::from_utf8_lossy(&out.stdout);
    check(out.status.success(), format!("B: {} {text}", out.status))?;
    let b_at: u64 = text
        .lines()
        .find_map(|line| line.strip_prefix("acquired "))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| -> AnyError { format!("B printed {text:?}").into() })?;
    println!(
        "B acquired {} ms after A's validity ended ({})",
        (b_at as i64 - a_end as i64) / 1000,
        text.trim()
    );
    check(
        b_at > a_end,
        format!(
            "two holders: B held {} ms before A's validity ended",
            a_end.saturating_sub(b_at) / 1000
        ),
    )?;
    check(
        b_at < a_end + 2_000_000,
        "B got the lock within 2 s of A's validity's end",
    )?;
    net.heal();
    drop(guard);
    Ok(())
}

/// 300 waiters (2 processes of 150 tasks, each in a host of its own) queue
/// on a lock held by the test process on 3 nodes; then every client's
/// notification connection (its pub/sub connection to each node) goes
/// silent, without a reset, and the lock is released. The handoffs'
/// messages are lost: the waiters must find out without them, and each is
/// served within its patience (30 s), one at a time.
async fn waiters_served_when_notifications_go_silent(exe: &std::path::Path) -> Outcome {
    const RESOURCE: &str = "sale:item-42";
    let net = Net::new();
    let (hosts, nodes) = net.servers(3);
    let checker = RedisServer::start_in(&net.host(), &[]);
    let urls = support::urls(&nodes);
    let holder = Redlock::new(&urls)?;
    let guard = holder.lock(RESOURCE, Duration::from_secs(60)).await?;
    let (processes, tasks) = (2, 150);
    let start_at = SystemTime::now() + Duration::from_millis(1_500);
    let start_ms = start_at.duration_since(UNIX_EPOCH)?.as_millis().to_string();
    let workers: Vec<_> = (0..processes)
        .map(|_| {
            net.host()
                .command(exe)
                .args(["--sale-worker", &tasks.to_string(), "30000", &start_ms])
                .arg(checker.url())
                .args(&urls)
                .stdout(Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let key = holder.key(RESOURCE)?;
    let queued = support::eventually(Duration::from_secs(30), || {
        support::queue_lengths(&nodes, &key)
            .iter()
            .all(|&length| length >= (processes * tasks) as i64)
    })
    .await;
    check(
        queued,
        format!("queued: {:?}", support::queue_lengths(&nodes, &key)),
    )?;
    let mut silenced = 0;
    for (node, host) in nodes.iter().zip(&hosts) {
        let clients: String = redis::cmd("CLIENT")
            .arg("LIST")
            .arg("TYPE")
            .arg("pubsub")
            .query(&mut node.connection())?;
        for peer in clients.lines().filter_map(|line| {
            line.split_whitespace()
                .find_map(|field| field.strip_prefix("addr="))?
                .parse::<std::net::SocketAddrV4>()
                .ok()
        }) {
            net.blackhole_connection(host, peer);
            silenced += 1;
        }
    }
    check(
        silenced >= processes * nodes.len(),
        format!("{silenced} notification connections silenced"),
    )?;
    let released = Instant::now();
    guard.unlock().await?;
    let mut sale = support::sale::Sale::default();
    for worker in workers {
        let text = worker_output(worker).await?;
        let [served, failed, overlaps, _] =
            support::harness::counts::<4>(text.lines().next().unwrap_or_default())?;
        sale.served += served;
        sale.failed += failed;
        sale.overlaps += overlaps;
    }
    println!(
        "{} served, {} failed, {} overlaps, the last {:?} after the release",
        sale.served,
        sale.failed,
        sale.overlaps,
        released.elapsed()
    );
    check(sale.overlaps == 0, format!("{} overlaps", sale.overlaps))?;
    check(
        sale.served == (processes * tasks) as u64 && sale.failed == 0,
        format!("{} served, {} failed", sale.served, sale.failed),
    )?;
    Ok(())
}

/// A contention worker: `args.tasks` tasks lock `RESOURCE` (patience 2 s,
/// 10 s with a node timeout given)
/// again and again for `args.seconds`, each holder checked on the checker
/// (`INCR`: it must read 1) for 1 ms; prints `acquired failed overlaps`.
async fn contention(args: &WorkerArgs<'_>) -> Outcome {
    let node_timeout = std::env::var(ROLE)
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map_or(
            quorlock::RedlockBuilder::DEFAULT_NODE_TIMEOUT,
            Duration::from_millis,
        );
    // Over slow or lossy links (a node timeout raised for them), connecting
    // and the first check take round trips of their own (3 s), and each
    // handoff a few: a call's patience is 10 s there, 2 s otherwise.
    let patience = match node_timeout == quorlock::RedlockBuilder::DEFAULT_NODE_TIMEOUT {
        true => Duration::from_secs(2),
        false => Duration::from_secs(10),
    };
    // A clock reading is as precise as its round trip: with a node timeout
    // raised for slow links, the clock tolerance goes above twice it, as
    // its docs say (at 100 ms most votes over 100 ms round trips were
    // unsure, and on Redis 6.2 the delayed phase got 0-2 locks in 10 s);
    // with the default node timeout, the default tolerance.
    let mut builder = Redlock::builder(args.nodes)
        .acquire_timeout(patience)
        .node_timeout(node_timeout)
        .connect_timeout(Duration::from_secs(3));
    if node_timeout != quorlock::RedlockBuilder::DEFAULT_NODE_TIMEOUT {
        builder = builder.clock_tolerance(node_timeout * 2 + Duration::from_millis(100));
    }
    let redlock = builder.build()?;
    let checker = redis::Client::open(args.checker)?
        .get_multiplexed_async_connection()
        .await?;
    let counts = std::sync::Arc::new([
        std::sync::atomic::AtomicU64::new(0),
        std::sync::atomic::AtomicU64::new(0),
        std::sync::atomic::AtomicU64::new(0),
    ]);
    let until = Instant::now() + Duration::from_secs(args.seconds);
    let tasks: Vec<_> = (0..args.tasks)
        .map(|_| {
            let (redlock, mut checker, counts) = (redlock.clone(), checker.clone(), counts.clone());
            tokio::spawn(async move {
                while Instant::now() < until {
                    let Ok(guard) = redlock.lock(RESOURCE, Duration::from_secs(5)).await else {
                        counts[1].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        continue;
                    };
                    let alone = support::checked_hold(&mut checker, Duration::from_millis(1)).await;
                    let at = usize::from(!alone) * 2;
                    counts[at].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let _ = guard.unlock().await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await?;
    }
    redlock.flush().await;
    support::harness::report(&counts[..]);
    Ok(())
}

/// One contention phase: 3 processes of 4 tasks (in the test's own
/// namespace, reaching the nodes at `urls`) for `seconds`, checked on
/// `checker`: acquisitions, failed calls and overlaps (an overlap also
/// counts as an acquisition).
async fn contend(
    exe: &std::path::Path,
    urls: &[String],
    checker: &RedisServer,
    seconds: u64,
    node_timeout: &str,
) -> Result<[u64; 3], AnyError> {
    let workers: Vec<_> = (0..3)
        .map(|_| {
            std::process::Command::new(exe)
                .env(ROLE, node_timeout)
                .args(["--worker", "4", &seconds.to_string(), &checker.url()])
                .args(urls)
                .stdout(Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let mut total = [0u64; 3];
    for worker in workers {
        let text = worker_output(worker).await?;
        let [acquired, failed, overlaps] = support::harness::counts::<3>(&text)?;
        total = [total[0] + acquired, total[1] + failed, total[2] + overlaps];
    }
    Ok(total)
}

/// Contention across 3 processes on 5 nodes whose links lose 5 %, then
/// 20 %, of their packets each way, then whose every link is delayed
/// 50 ms ± 20 ms each way (a proxy per node; the node timeout raised to
/// 300 ms, above the round trip): 0 overlaps in each, acquisitions without
/// loss and over the slow links; the acquisitions, failed calls and pace
/// are printed.
async fn lossy_and_slow_links(exe: &std::path::Path) -> Outcome {
    let net = Net::new();
    let (hosts, nodes) = net.servers(5);
    let checker = RedisServer::start();
    let urls = support::urls(&nodes);
    const SECONDS: u64 = 6;
    // Each handoff over the slow links takes a few round trips of 100 ms.
    const SLOW_SECONDS: u64 = 10;
    // Loss: 0 overlaps is the claim; the pace is reported (a lost packet
    // stalls its connection for TCP's retransmission timeout, 200 ms or
    // more, past the node timeout).
    for (percent, node_timeout) in [(0, "default"), (5, "default"), (20, "default"), (20, "300")] {
        for host in &hosts {
            net.loss(host, percent);
        }
        let [acquired, failed, overlaps] =
            contend(exe, &urls, &checker, SECONDS, node_timeout).await?;
        println!(
            "{percent} % loss, node timeout {node_timeout}: {acquired} acquisitions ({:.0}/s), \
             {failed} failed calls, {overlaps} overlaps",
            acquired as f64 / SECONDS as f64
        );
        check(
            overlaps == 0,
            format!("{percent} % loss: {overlaps} overlaps"),
        )?;
        check(acquired > 0 || percent > 0, "no loss: no acquisition")?;
    }
    net.heal();
    // Fresh nodes for the slow links: the clock tolerance is the node set's
    // (every client judges steps by the smallest recorded on the nodes), and
    // the phases above recorded the default's.
    let (_slow_hosts, slow_nodes) = net.servers(5);
    let proxies: Vec<support::DelayProxy> = slow_nodes
        .iter()
        .map(|node| {
            let proxy = support::DelayProxy::start_to(
                node.address().parse().expect("a node's address"),
                node.port(),
                Duration::from_millis(50),
            );
            proxy.jitter(Duration::from_millis(20));
            proxy
        })
        .collect();
    let [acquired, failed, overlaps] = contend(
        exe,
        &support::proxy_urls(&proxies),
        &checker,
        SLOW_SECONDS,
        "300",
    )
    .await?;
    // A round trip of 100 ms ± 40 needs a node timeout above it.
    println!(
        "50 ms ± 20 ms each way, node timeout 300 ms: {acquired} acquisitions ({:.0}/s), {failed} failed calls, \
         {overlaps} overlaps",
        acquired as f64 / SLOW_SECONDS as f64
    );
    check(overlaps == 0, format!("delayed links: {overlaps} overlaps"))?;
    check(acquired > 0, "delayed links: no acquisition")?;
    Ok(())
}

/// The holding process of the split brain: takes the lock (TTL 3 s, grace
/// 5 s, `replica_acks` from [`HOLDER`]), keeps it alive, and after
/// `args.seconds` prints `held <end of its validity, wall µs>`, or, told
/// earlier that it lost it, `lost <wall µs> <why>`.
async fn holder(args: &WorkerArgs<'_>) -> Outcome {
    let acks = std::env::var(HOLDER)?.parse()?;
    let redlock = Redlock::builder(args.nodes)
        .restart_grace(Duration::from_secs(3))
        .replica_acks(acks)
        .build()?;
    let guard = redlock.lock(RESOURCE, Duration::from_secs(3)).await?;
    guard.keep_alive()?;
    let lost = guard.lost();
    tokio::select! {
        err = lost => println!("lost {} {err}", now_us()),
        () = tokio::time::sleep(Duration::from_secs(args.seconds)) => {
            println!("held {}", wall_us(guard.valid_until()));
        }
    }
    Ok(())
}

/// What one split brain gave: when the holder's protection ended (its
/// validity's end, or the moment it was told it lost the lock) and when the
/// other client got the lock (wall µs).
#[derive(Debug)]
struct SplitBrain {
    holder: String,
    holder_end: u64,
    other_at: Option<u64>,
}

impl SplitBrain {
    fn two_holders(&self) -> bool {
        self.other_at.is_some_and(|at| at < self.holder_end)
    }
}

/// One split brain over a Sentinel-managed primary (see
/// [`split_brain_over_sentinel`]), the holder requiring `acks` replica
/// acknowledgements and the primary started with `primary_args`; A cut
/// from the Sentinels too unless `a_reaches_sentinels`.
async fn split_brain(
    exe: &std::path::Path,
    acks: u32,
    primary_args: &[&str],
    a_reaches_sentinels: bool,
) -> Result<SplitBrain, AnyError> {
    const SECONDS: u64 = 14;
    let net = Net::new();
    let (primary_host, replica_host) = (net.host(), net.host());
    let sentinel_hosts: Vec<_> = (0..3).map(|_| net.host()).collect();
    let (a_host, b_host) = (net.host(), net.host());
    let primary = RedisServer::start_in(&primary_host, primary_args);
    let replica = RedisServer::start_replica_in(&replica_host, &primary);
    let sentinels = support::sentinel::Sentinels::start_in(
        &sentinel_hosts,
        &primary,
        1,
        Duration::from_secs(1),
    );
    let url = sentinels.url(None);
    let key = Redlock::new([url.as_str()])?.key(RESOURCE)?;
    let a = a_host
        .command(exe)
        .env(HOLDER, acks.to_string())
        .args(["--worker", "1", &SECONDS.to_string(), "unused", &url])
        .stdout(Stdio::piped())
        .spawn()?;
    let held = support::eventually(Duration::from_secs(20), || primary.get(&key).is_some());
    check(held.await, "A never held the lock")?;
    // The primary cut off from its Sentinels, its replica and B; A still
    // reaches it (and, where it says, the Sentinels).
    for host in sentinel_hosts.iter().chain([&replica_host, &b_host]) {
        net.cut(&primary_host, host);
        if !a_reaches_sentinels && host != &b_host {
            net.cut(&a_host, host);
        }
    }
    let promoted = replica.port();
    let _sentinels = tokio::task::spawn_blocking(move || {
        sentinels.wait_primary(promoted);
        sentinels
    })
    .await?;
    let b = b_host
        .command(exe)
        .args(["--worker", "1", &(SECONDS - 2).to_string(), "unused", &url])
        .stdout(Stdio::piped())
        .spawn()?;
    let (a, b) = (
        tokio::task::spawn_blocking(move || a.wait_with_output()).await??,
        tokio::task::spawn_blocking(move || b.wait_with_output()).await??,
    );
    let (a, b) = (
        String::from_utf8_lossy(&a.stdout).into_owned(),
        String::from_utf8_lossy(&b.stdout).into_owned(),
    );
    let holder_end = a
        .split_whitespace()
        .nth(1)
        .and_then(|at| at.parse().ok())
        .ok_or_else(|| -> AnyError { format!("A printed {a:?}").into() })?;
    let other_at = b
        .strip_prefix("acquired ")
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok());
    Ok(SplitBrain {
        holder: a.trim().to_owned(),
        holder_end,
        other_at,
    })
}

/// Split brain over Sentinel: client A holds the lock on a
/// Sentinel-managed primary; the primary is cut off from its Sentinels, its
/// replica and client B, but A still reaches it; the Sentinels promote the
/// replica, and B tries the lock there. Where A still reaches the
/// Sentinels, it is told (they name another primary: it connects there)
/// and B gets the lock only after. Where A is cut off from them too, no
/// client can tell: with the defaults there are two holders (printed, and
/// required: the hazard is real, and documented), and A's
/// `replica_acks(1)` or the server's `min-replicas-to-write 1`
/// (`min-replicas-max-lag 1`) each give one.
async fn split_brain_over_sentinel(exe: &std::path::Path) -> Outcome {
    let no_args: &[&str] = &[];
    let cases: [(&str, u32, &[&str], bool, bool); 4] = [
        ("defaults, A reaches the Sentinels", 0, no_args, true, false),
        (
            "defaults, A cut from the Sentinels",
            0,
            no_args,
            false,
            true,
        ),
        (
            "replica_acks(1), A cut from the Sentinels",
            1,
            no_args,
            false,
            false,
        ),
        (
            "min-replicas-to-write 1, A cut from the Sentinels",
            0,
            &[
                "--min-replicas-to-write",
                "1",
                "--min-replicas-max-lag",
                "1",
            ],
            false,
            false,
        ),
    ];
    let mut wrong = Vec::new();
    // The cases run side by side, each in a test network of its own, on a
    // thread and runtime of its own (their setup blocks).
    let outcomes: Vec<Result<SplitBrain, String>> = std::thread::scope(|scope| {
        let cases: Vec<_> = cases
            .iter()
            .map(|&(_, acks, primary_args, a_reaches_sentinels, _)| {
                scope.spawn(move || {
                    let runtime = support::runtime().map_err(|err| err.to_string())?;
                    runtime
                        .block_on(split_brain(exe, acks, primary_args, a_reaches_sentinels))
                        .map_err(|err| err.to_string())
                })
            })
            .collect();
        cases
            .into_iter()
            .map(|case| {
                case.join()
                    .unwrap_or_else(|_| Err("a case panicked".into()))
            })
            .collect()
    });
    for ((name, _, _, _, two_expected), outcome) in cases.into_iter().zip(outcomes) {
        let outcome = outcome?;
        let gap = |at: u64| (at as i64 - outcome.holder_end as i64) / 1000;
        println!(
            "{name}: A: {}; B {}; {}",
            outcome.holder,
            outcome
                .other_at
                .map_or("never got the lock".to_owned(), |at| format!(
                    "got the lock {} ms after A's protection ended",
                    gap(at)
                )),
            if outcome.two_holders() {
                "TWO HOLDERS"
            } else {
                "one holder"
            }
        );
        if outcome.two_holders() != two_expected || outcome.other_at.is_none() {
            wrong.push(name);
        }
    }
    check(wrong.is_empty(), format!("not as expected: {wrong:?}"))
}

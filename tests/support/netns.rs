//! Network faults between real hosts. Each host is a network namespace of
//! its own (`ip netns`), with one veth pair to a bridge that the test
//! makes, and an address in 198.18.0.0/15 (the range set aside for network
//! tests, RFC 2544); the test process itself is a host too ([`Net::local`]:
//! the bridge's own address). A `redis-server` runs in a host with
//! [`RedisServer::start_in`], a client process with [`Host::command`].
//!
//! Every fault is **silent**: packets vanish, nobody gets a reset or an
//! ICMP error, as across a partition between data centres.
//! - [`Net::cut`]: two hosts no longer reach each other. Each host's
//!   neighbour entry for the other is pointed at a MAC address no host
//!   has, so the frames go out and nobody takes them. (Every neighbour
//!   entry is permanent, so no ARP runs: a cut never turns into the
//!   "host unreachable" that a failed ARP gives after a few seconds.)
//! - [`Net::isolate`]: a host cut from every other one.
//! - [`Net::loss`]: a share of a host's packets dropped each way, by an
//!   `nft` rule in its namespace (`numgen random`): TCP retransmits, so a
//!   loss is a stall of the connection, as on a lossy link.
//! - [`Net::heal`]: every cut and every loss undone.
//!
//! (This kernel has no `netem`, so delays come from the test support's
//! delaying proxy, not from here.)
//!
//! **Removal.** Everything a [`Net`] makes (its namespaces, the processes
//! in them, its bridge) is removed when it is dropped; when the test
//! process dies any other way (an abort, SIGKILL, Ctrl-C), a watchdog
//! process it started removes it; and a new `Net` first removes what a
//! dead process's left behind. It needs root and `iproute2` and
//! `nftables` (`scripts/test.sh` installs them); without them a test fails
//! and says how to get them.

use std::net::Ipv4Addr;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU16, Ordering};

use super::RedisServer;

const INSTALL_HINT: &str = "the network fault tests need root, iproute2 and nftables: \
    `apt-get update && apt-get install -y iproute2 nftables` as root (scripts/test.sh does)";

/// How many nets fit in 198.18.0.0/15: one /24 each.
const SLOTS: u16 = 512;

/// A MAC address no host has: where a cut points a neighbour entry.
const NOWHERE: &str = "02:51:ff:ff:ff:fe";

/// One host of a [`Net`]: a namespace (none for the test process itself),
/// its address and its link's MAC address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// The namespace (`None`: the test process's own, on the bridge).
    pub netns: Option<String>,
    /// Its address.
    pub ip: Ipv4Addr,
    mac: String,
    /// Its link to the bridge, as named inside its namespace.
    dev: String,
}

impl Host {
    /// `program`, to run inside this host (`ip netns exec`).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        match &self.netns {
            Some(netns) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", netns]).arg(program);
                command
            }
            None => Command::new(program),
        }
    }

    /// The host's link as named outside its namespace, on the bridge
    /// (`None` for the test process's own host).
    pub fn outside_link(&self) -> Option<String> {
        let netns = self.netns.as_deref()?;
        let (slot, index) = netns.strip_prefix("ql")?.split_once('-')?;
        Some(format!("ql{slot}h{index}"))
    }

    /// `ip` (iproute2) inside this host's namespace.
    fn ip_command(&self) -> Command {
        let mut command = Command::new("ip");
        if let Some(netns) = &self.netns {
            command.args(["-n", netns]);
        }
        command
    }
}

/// A test's network: a bridge, and hosts joined to it (see the module
/// docs). Removes everything it made when dropped.
pub struct Net {
    slot: u16,
    bridge: String,
    local: Host,
    hosts: Mutex<Vec<Host>>,
    watchdog: Option<Child>,
}

impl Net {
    /// A new network with no host but the test process's own.
    pub fn new() -> Net {
        check_tools();
        sweep_dead();
        static NEXT: AtomicU16 = AtomicU16::new(0);
        let start = (std::process::id() as u16).wrapping_mul(7);
        for attempt in 0..SLOTS {
            let slot = (start
                .wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed))
                .wrapping_add(attempt))
                % SLOTS;
            let bridge = format!("qlb{slot}");
            // Creating the bridge claims the slot: another test (of this
            // process or another) that took it first makes this fail.
            if run("ip", &["link", "add", &bridge, "type", "bridge"]).is_err() {
                continue;
            }
            let local = Host {
                netns: None,
                ip: address(slot, 1),
                mac: mac(slot, 1),
                dev: bridge.clone(),
            };
            let mut net = Net {
                slot,
                bridge: bridge.clone(),
                local: local.clone(),
                hosts: Mutex::new(Vec::new()),
                watchdog: None,
            };
            net.watchdog = Some(watchdog(slot));
            let alias = format!("quorlock-test-pid-{}", std::process::id());
            let cidr = format!("{}/24", local.ip);
            for args in [
                vec!["link", "set", &bridge, "address", &local.mac],
                vec!["link", "set", &bridge, "alias", &alias],
                vec!["addr", "add", &cidr, "dev", &bridge],
                vec!["link", "set", &bridge, "up"],
            ] {
                run_or_panic("ip", &args);
            }
            return net;
        }
        panic!("no free test network: {SLOTS} bridges qlb* in use (ip link show type bridge)");
    }

    /// The test process's own host (the bridge's address).
    pub fn local(&self) -> Host {
        self.local.clone()
    }

    /// A new host: a namespace joined to the bridge, every other host (and
    /// the test process) told its address.
    pub fn host(&self) -> Host {
        let mut hosts = self.hosts.lock().unwrap();
        let index = u8::try_from(hosts.len() + 2).expect("at most 250 hosts in a net");
        assert!(index < 255, "at most 250 hosts in a net");
        let host = Host {
            netns: Some(format!("ql{}-{index}", self.slot)),
            ip: address(self.slot, index),
            mac: mac(self.slot, index),
            dev: "eth0".into(),
        };
        let netns = host.netns.as_deref().unwrap_or_default();
        let (outside, inside) = (
            format!("ql{}h{index}", self.slot),
            format!("ql{}n{index}", self.slot),
        );
        let cidr = format!("{}/24", host.ip);
        // A link of this name left by a net that had the slot before and
        // whose removal did not delete it (older code, or a removal that
        // was killed; see `removal_script`): the slot is ours now (we made
        // its bridge).
        let _ = run("ip", &["link", "del", &outside]);
        run_or_panic("ip", &["netns", "add", netns]);
        for args in [
            vec![
                "link", "add", &outside, "type", "veth", "peer", "name", &inside,
            ],
            vec!["link", "set", &inside, "netns", netns],
            vec!["-n", netns, "link", "set", &inside, "name", "eth0"],
            vec!["-n", netns, "link", "set", "eth0", "address", &host.mac],
            vec!["-n", netns, "addr", "add", &cidr, "dev", "eth0"],
            vec!["-n", netns, "link", "set", "eth0", "up"],
            vec!["-n", netns, "link", "set", "lo", "up"],
            vec!["link", "set", &outside, "master", &self.bridge, "up"],
        ] {
            run_or_panic("ip", &args);
        }
        // Permanent neighbour entries both ways, for every host there is.
        let everyone: Vec<Host> = std::iter::once(self.local.clone())
            .chain(hosts.iter().cloned())
            .collect();
        neighbours(
            &host,
            everyone.iter().map(|other| (other, other.mac.as_str())),
        );
        for other in &everyone {
            neighbours(other, [(&host, host.mac.as_str())]);
        }
        hosts.push(host.clone());
        host
    }

    /// `a` and `b` no longer reach each other: their packets vanish, both
    /// ways (see the module docs).
    pub fn cut(&self, a: &Host, b: &Host) {
        neighbours(a, [(b, NOWHERE)]);
        neighbours(b, [(a, NOWHERE)]);
    }

    /// `a` and `b` reach each other again.
    pub fn join(&self, a: &Host, b: &Host) {
        neighbours(a, [(b, b.mac.as_str())]);
        neighbours(b, [(a, a.mac.as_str())]);
    }

    /// `host` reaches no other host (the test process included), and no
    /// host reaches it.
    pub fn isolate(&self, host: &Host) {
        for other in self.everyone() {
            if other != *host {
                self.cut(host, &other);
            }
        }
    }

    /// Drops `percent` of `host`'s packets each way (0: none), at random.
    pub fn loss(&self, host: &Host, percent: u8) {
        self.loss_sparing(host, percent, None);
    }

    /// [`loss`](Self::loss) on every link of `host`'s but the one to the
    /// test process: its own connections (a harness's waits on `INFO`, its
    /// restarts and failovers) stay whole, as a control plane out of band,
    /// while every other host's see the loss. (Under a 20 % loss a new
    /// connection's handshake loses its SYN three times in a row one time
    /// in twenty or so, and waits 7 s.)
    pub fn loss_beside_control(&self, host: &Host, percent: u8) {
        self.loss_sparing(host, percent, Some(self.local.ip));
    }

    fn loss_sparing(&self, host: &Host, percent: u8, spared: Option<Ipv4Addr>) {
        let netns = host
            .netns
            .as_deref()
            .expect("loss is set on a host's namespace, not the test process's");
        // Replaced as a whole: no rule of an earlier loss stays.
        let _ = run(
            "ip",
            &[
                "netns", "exec", netns, "nft", "delete", "table", "inet", "qlloss",
            ],
        );
        if percent == 0 {
            return;
        }
        let spare = match spared {
            Some(ip) => format!("ip saddr != {ip} ip daddr != {ip} "),
            None => String::new(),
        };
        let rule = match percent {
            100.. => format!("{spare}drop"),
            _ => format!("{spare}numgen random mod 100 < {percent} drop"),
        };
        let rules = format!(
            "table inet qlloss {{\n\
             chain input {{ type filter hook input priority 0; policy accept; {rule}; }}\n\
             chain output {{ type filter hook output priority 0; policy accept; {rule}; }}\n}}\n"
        );
        nft(netns, &rules);
    }

    /// Drops every packet of one TCP connection of `host`'s, the one with
    /// the peer at `peer` (its address and port), both ways: that
    /// connection goes silent while the host's others work.
    pub fn blackhole_connection(&self, host: &Host, peer: std::net::SocketAddrV4) {
        let netns = host
            .netns
            .as_deref()
            .expect("a connection is blackholed in a host's namespace");
        let (ip, port) = (peer.ip(), peer.port());
        let rules = format!(
            "table inet qlconn {{\n\
             chain input {{ type filter hook input priority 0; policy accept; }}\n\
             chain output {{ type filter hook output priority 0; policy accept; }}\n}}\n\
             add rule inet qlconn input ip saddr {ip} tcp sport {port} drop\n\
             add rule inet qlconn output ip daddr {ip} tcp dport {port} drop\n"
        );
        nft(netns, &rules);
    }

    /// Every cut joined, every loss and blackholed connection removed.
    pub fn heal(&self) {
        let everyone = self.everyone();
        for host in &everyone {
            neighbours(
                host,
                everyone
                    .iter()
                    .filter(|other| *other != host)
                    .map(|other| (other, other.mac.as_str())),
            );
            if let Some(netns) = &host.netns {
                self.loss(host, 0);
                let _ = run(
                    "ip",
                    &[
                        "netns", "exec", netns, "nft", "delete", "table", "inet", "qlconn",
                    ],
                );
            }
        }
    }

    /// `n` new hosts with a `redis-server` in each (default options).
    pub fn servers(&self, n: usize) -> (Vec<Host>, Vec<RedisServer>) {
        let hosts: Vec<Host> = (0..n).map(|_| self.host()).collect();
        let servers = hosts
            .iter()
            .map(|host| RedisServer::start_in(host, &[]))
            .collect();
        (hosts, servers)
    }

    /// The test process's host and every host made.
    fn everyone(&self) -> Vec<Host> {
        let hosts = self.hosts.lock().unwrap();
        std::iter::once(self.local.clone())
            .chain(hosts.iter().cloned())
            .collect()
    }
}

impl Default for Net {
    fn default() -> Self {
        Net::new()
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
        remove_slot(self.slot);
    }
}

impl RedisServer {
    /// Starts a server inside `host`, listening on its address, waiting
    /// until it answers PING. Protected mode is off: its clients come from
    /// other hosts of the test network, and it listens nowhere else.
    pub fn start_in(host: &Host, extra_args: &[&str]) -> RedisServer {
        let mut args = vec!["--protected-mode", "no"];
        args.extend_from_slice(extra_args);
        let mut last_error = String::new();
        for _ in 0..5 {
            let mut server = RedisServer::on_port(super::free_port(), &args);
            server.address = host.ip.to_string();
            server.netns = host.netns.clone();
            match server.spawn() {
                Ok(()) => return server,
                Err(err) => last_error = err,
            }
        }
        panic!("could not start redis-server in {host:?}: {last_error}");
    }
}

/// Loads `rules` with `nft -f -` in namespace `netns`.
fn nft(netns: &str, rules: &str) {
    let mut command = Command::new("ip");
    command.args(["netns", "exec", netns, "nft", "-f", "-"]);
    run_with_input(command, rules, "nft rules");
}

/// Runs `command` with `input` on its standard input; panics, naming
/// `what` and with its stderr, unless it succeeds.
fn run_with_input(mut command: Command, input: &str, what: &str) {
    let mut child = command
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| panic!("{what}: {err}. {INSTALL_HINT}"));
    use std::io::Write;
    let written = child
        .stdin
        .take()
        .map(|mut stdin| stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect(what);
    assert!(
        matches!(written, Some(Ok(()))) && out.status.success(),
        "{what}: {}. {INSTALL_HINT}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Sets `host`'s permanent neighbour entry of each `(other, mac)` to that
/// MAC address: the real one, or [`NOWHERE`] for a cut.
fn neighbours<'a>(host: &Host, entries: impl IntoIterator<Item = (&'a Host, &'a str)>) {
    let batch: String = entries
        .into_iter()
        .map(|(other, mac)| {
            format!(
                "neigh replace {} lladdr {mac} nud permanent dev {}\n",
                other.ip, host.dev
            )
        })
        .collect();
    if batch.is_empty() {
        return;
    }
    let mut command = host.ip_command();
    command.args(["-batch", "-"]);
    run_with_input(command, &batch, &format!("ip neigh in {:?}", host.netns));
}

/// The address of host `index` of net `slot`: 198.18.0.0/15, a /24 per net.
fn address(slot: u16, index: u8) -> Ipv4Addr {
    let [high, low] = slot.to_be_bytes();
    Ipv4Addr::new(198, 18 + high, low, index)
}

/// The MAC address of host `index` of net `slot` (locally administered).
fn mac(slot: u16, index: u8) -> String {
    let [high, low] = slot.to_be_bytes();
    format!("02:51:{high:02x}:{low:02x}:00:{index:02x}")
}

/// Runs `program args`; its stderr as the error.
fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|err| format!("{program}: {err}. {INSTALL_HINT}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

fn run_or_panic(program: &str, args: &[&str]) {
    if let Err(err) = run(program, args) {
        panic!("{program} {}: {err}", args.join(" "));
    }
}

/// Fails the test, saying what to install, unless `ip` and `nft` run and
/// this is root.
fn check_tools() {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.starts_with(b"0\n"));
    assert!(root, "not root: {INSTALL_HINT}");
    for (program, arg) in [("ip", "-V"), ("nft", "--version")] {
        if let Err(err) = run(program, &[arg]) {
            panic!("{program} does not run ({err}): {INSTALL_HINT}");
        }
    }
}

/// The shell commands that remove net `slot`: every process in its
/// namespaces killed, the namespaces deleted, then its hosts' links and
/// last its bridge (which frees the slot). A namespace lives on while
/// anything holds it (sockets retransmitting to a cut peer, for minutes),
/// and with it the pair of links to the bridge: each pair is deleted by its
/// outside end, which deletes both.
fn removal_script(slot: u16) -> String {
    format!(
        "for ns in $(ip netns list | awk '{{print $1}}' | grep '^ql{slot}-'); do \
           ip netns pids \"$ns\" | xargs -r kill -9; ip netns del \"$ns\"; \
         done; \
         for link in $(ip -o link show | awk -F': ' '{{print $2}}' | sed 's/@.*//' \
                       | grep -x 'ql{slot}h[0-9]*'); do \
           ip link del \"$link\" 2>/dev/null; \
         done; ip link del qlb{slot} 2>/dev/null; true"
    )
}

fn remove_slot(slot: u16) {
    let _ = run("sh", &["-c", &removal_script(slot)]);
}

/// A process, in a session of its own (so that Ctrl-C to the test does not
/// reach it), that removes net `slot` once this process is gone.
fn watchdog(slot: u16) -> Child {
    let script = format!(
        "trap '' INT TERM HUP; while kill -0 {} 2>/dev/null; do sleep 0.3; done; {}",
        std::process::id(),
        removal_script(slot)
    );
    Command::new("setsid")
        .args(["sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|err| panic!("start the network's watchdog: {err}"))
}

/// Removes the nets whose test process is gone (its watchdog killed too).
fn sweep_dead() {
    let Ok(out) = Command::new("ip")
        .args(["-o", "-d", "link", "show", "type", "bridge"])
        .output()
    else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let slot = line
            .split_whitespace()
            .nth(1)
            .and_then(|name| name.trim_end_matches(':').strip_prefix("qlb"))
            .and_then(|slot| slot.parse::<u16>().ok());
        let owner = line
            .split("quorlock-test-pid-")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|pid| pid.parse::<u32>().ok());
        if let (Some(slot), Some(pid)) = (slot, owner)
            && !std::path::Path::new(&format!("/proc/{pid}")).exists()
        {
            remove_slot(slot);
        }
    }
}

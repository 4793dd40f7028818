//! Redis Cluster as one node: which slot a key lives in, how a lock's keys
//! are laid out so that every key one script touches lives in one slot,
//! the cluster's topology (which primary serves which slots), and which
//! key a command is routed by.
//!
//! # The slotted key layout
//!
//! A Redis Cluster runs a script (or a pipeline) only when every key it
//! touches hashes to one slot, and a key's slot is the CRC16 of its *hash
//! tag* (the part between the first `{` and the first `}` after it, when
//! that part is not empty) or of the whole key. A lock touches its key, its
//! queue (`<key>:quorlock-queue`), its fencing counter, the read-write
//! lock's keys (`<key>:quorlock-write`, …) and the liveness keys of the
//! clients that wait on it. So when any node of a client is a cluster, the
//! client lays its keys out *slotted* (on every node, so that every node
//! holds the same keys):
//!
//! - the lock key is the key prefix and the resource name as in the plain
//!   layout when that already has a hash tag (a user who groups resources
//!   with tags, `{order:42}:items`, keeps them together); otherwise the
//!   resource name is wrapped in braces: `<prefix>{<resource>}`. Its tag
//!   decides its slot, and every key made by appending to it keeps that tag;
//! - the fencing counter is the hash tag's, `<prefix>{<tag>}quorlock-fence`,
//!   not one counter per node: a counter shared by every resource would
//!   live in one slot. Every lock on a resource, alone or in a set (whose
//!   resources share a tag), takes its token from its tag's counter, so
//!   tokens increase per resource, which is what fencing promises;
//! - a waiting client's liveness key carries the lock's tag:
//!   `<prefix>{<tag>}quorlock-client:<client id>`, one per tag the client
//!   waits on (see `session.rs`); so do its waiter ids, which start with it.
//!
//! A key prefix with a `{` that opens no hash tag would take the tag away
//! from the resource, and is refused when the client is built; a resource
//! whose key still has no hash tag (a name that starts with `}`) is refused
//! at the call.

use redis::{Arg, Cmd, Value};

/// How many slots a Redis Cluster has.
pub(crate) const SLOTS: usize = 16384;

/// What follows the start of a liveness key ([`live_key_start`]), in the
/// slotted layout, in the key of the fencing counter of a hash tag.
pub(crate) const FENCE_INFIX: &str = "quorlock-fence";

/// The CRC16 of Redis Cluster (XMODEM: polynomial 0x1021, initial 0).
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The hash tag of `key`: what lies between its first `{` and the first
/// `}` after it, when that is not empty.
pub(crate) fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&byte| byte == b'{')?;
    let rest = &key[open + 1..];
    let close = rest.iter().position(|&byte| byte == b'}')?;
    (close > 0).then(|| &rest[..close])
}

/// The slot `key` lives in.
pub(crate) fn slot(key: &[u8]) -> u16 {
    let hashed = hash_tag(key).unwrap_or(key);
    // 16384 slots: the low 14 bits.
    crc16(hashed) & 0x3fff
}

/// Why a key prefix cannot serve the slotted layout, if it cannot: a `{`
/// that opens no hash tag would join the resource name's tag.
pub(crate) fn prefix_problem(prefix: &[u8]) -> Option<String> {
    let has_brace = prefix.contains(&b'{');
    (has_brace && hash_tag(prefix).is_none()).then(|| {
        "a key prefix with a '{' that opens no hash tag cannot be used with a Redis Cluster \
         node: every key of a lock must keep the resource's hash tag"
            .to_owned()
    })
}

/// The lock key of `resource` in the slotted layout (see the module docs):
/// `prefix` and `resource` when that has a hash tag, else `prefix` and the
/// name in braces; an error when even that has none.
pub(crate) fn slotted_key(prefix: &[u8], resource: &[u8]) -> Result<Vec<u8>, String> {
    let mut key = Vec::with_capacity(prefix.len() + resource.len() + 2);
    key.extend_from_slice(prefix);
    key.extend_from_slice(resource);
    if hash_tag(&key).is_some() {
        return Ok(key);
    }
    key.truncate(prefix.len());
    key.push(b'{');
    key.extend_from_slice(resource);
    key.push(b'}');
    if hash_tag(&key).is_none() {
        return Err(
            "a name that starts with '}' leaves its Redis Cluster key without a hash \
                    tag, so the lock's keys could not share a slot"
                .to_owned(),
        );
    }
    Ok(key)
}

/// The start of a liveness key, in the slotted layout, for the lock key
/// `key`: `prefix`, then `key`'s hash tag in braces (nothing more when the
/// prefix has a hash tag of its own: it decides every key's slot). The
/// client's infix and id follow.
pub(crate) fn live_key_start(prefix: &[u8], key: &[u8]) -> Vec<u8> {
    let mut start = prefix.to_vec();
    if hash_tag(prefix).is_none()
        && let Some(tag) = hash_tag(key)
    {
        start.push(b'{');
        start.extend_from_slice(tag);
        start.push(b'}');
    }
    start
}

/// The key a command is routed by: `KEYS[1]` of a script (or `ARGV[1]`,
/// for a script without keys: the heartbeat's liveness key), the first
/// argument of any other command; `None` for the commands that name no
/// key, which go to every primary.
pub(crate) fn route_key(cmd: &Cmd) -> Option<&[u8]> {
    let mut args = cmd.args_iter().filter_map(|arg| match arg {
        Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let name = args.next()?;
    let keyless = [
        "PING", "INFO", "ROLE", "CONFIG", "SCRIPT", "WAIT", "CLUSTER", "ASKING", "TIME",
    ];
    if keyless
        .iter()
        .any(|known| name.eq_ignore_ascii_case(known.as_bytes()))
    {
        return None;
    }
    if name.eq_ignore_ascii_case(b"EVALSHA") || name.eq_ignore_ascii_case(b"EVAL") {
        // The script, the number of keys, then the first key (or argument).
        return args.nth(2);
    }
    args.next()
}

/// Which primary serves each slot, as `CLUSTER SLOTS` tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Topology {
    /// The primaries' addresses, `host:port`, in the order met.
    pub(crate) primaries: Vec<(String, u16)>,
    /// Per slot, the index of its primary in `primaries` (`u16::MAX`: none).
    slots: Box<[u16]>,
    /// Every node the reply named, primaries and replicas: where to read
    /// the topology next, should the nodes of the URL be gone.
    pub(crate) nodes: Vec<(String, u16)>,
}

/// A slot no primary serves, in [`Topology`].
const UNSERVED: u16 = u16::MAX;

impl Topology {
    /// The topology in a reply to `CLUSTER SLOTS` from the node at
    /// `asked_host` (a primary whose host is empty or `?` is on that host).
    pub(crate) fn parse(reply: &Value, asked_host: &str) -> Result<Self, String> {
        let Value::Array(ranges) = reply else {
            return Err(format!("CLUSTER SLOTS answered {reply:?}"));
        };
        let mut topology = Topology {
            primaries: Vec::new(),
            slots: vec![UNSERVED; SLOTS].into_boxed_slice(),
            nodes: Vec::new(),
        };
        for range in ranges {
            let (start, end, servers) = read_range(range, asked_host)?;
            for server in &servers {
                if !topology.nodes.contains(server) {
                    topology.nodes.push(server.clone());
                }
            }
            let Some(primary) = servers.into_iter().next() else {
                continue;
            };
            let index = match topology
                .primaries
                .iter()
                .position(|known| *known == primary)
            {
                Some(index) => index,
                None => {
                    topology.primaries.push(primary);
                    topology.primaries.len() - 1
                }
            };
            let index = u16::try_from(index).map_err(|_| "more primaries than slots")?;
            topology.slots[start..=end].fill(index);
        }
        if topology.primaries.is_empty() {
            return Err("the cluster serves no slot: no primary has slots yet".to_owned());
        }
        Ok(topology)
    }

    /// The index (in [`primaries`](Self::primaries)) of the primary that
    /// serves `slot`, if one does.
    pub(crate) fn primary_of(&self, slot: u16) -> Option<usize> {
        match self.slots.get(usize::from(slot)) {
            Some(&UNSERVED) | None => None,
            Some(&index) => Some(usize::from(index)),
        }
    }

    /// How many slots no primary serves.
    pub(crate) fn unserved(&self) -> usize {
        self.slots
            .iter()
            .filter(|&&index| index == UNSERVED)
            .count()
    }
}

/// A slot range of `CLUSTER SLOTS`: its first and last slot, and its
/// servers, the primary first.
type Range = (usize, usize, Vec<(String, u16)>);

/// One entry of `CLUSTER SLOTS`: its first and last slot, its primary and
/// its replicas.
fn read_range(range: &Value, asked_host: &str) -> Result<Range, String> {
    let bad = || format!("CLUSTER SLOTS gave an entry it should not: {range:?}");
    let Value::Array(fields) = range else {
        return Err(bad());
    };
    let (Some(Value::Int(start)), Some(Value::Int(end))) = (fields.first(), fields.get(1)) else {
        return Err(bad());
    };
    let (start, end) = match (usize::try_from(*start), usize::try_from(*end)) {
        (Ok(start), Ok(end)) if start <= end && end < SLOTS => (start, end),
        _ => return Err(bad()),
    };
    let servers = fields[2..]
        .iter()
        .map(|server| read_server(server, asked_host).ok_or_else(bad))
        .collect::<Result<Vec<_>, String>>()?;
    if servers.is_empty() {
        return Err(bad());
    }
    Ok((start, end, servers))
}

/// A server of a `CLUSTER SLOTS` entry: `[host, port, id, …]` (a host that
/// is empty or `?` is `asked_host`).
fn read_server(server: &Value, asked_host: &str) -> Option<(String, u16)> {
    let Value::Array(primary) = server else {
        return None;
    };
    let host = match primary.first() {
        Some(Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
        Some(Value::SimpleString(text)) => text.clone(),
        Some(Value::Nil) => String::new(),
        _ => return None,
    };
    let host = if host.is_empty() || host == "?" {
        asked_host.to_owned()
    } else {
        host
    };
    let port = match primary.get(1) {
        Some(Value::Int(port)) => u16::try_from(*port).ok()?,
        _ => return None,
    };
    Some((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_those_of_redis_cluster() {
        // The reference value of CRC16/XMODEM, and slots Redis reports
        // (`CLUSTER KEYSLOT foo` is 12182, `bar` 5061).
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"bar"), 5061);
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
        // An empty first tag: the whole key is hashed.
        assert_eq!(slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") & 0x3fff);
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
        assert_eq!(slot(b"foo{bar}{zap}"), slot(b"bar"));
    }

    #[test]
    fn hash_tags_are_the_first_non_empty_braces() {
        assert_eq!(hash_tag(b"a{b}c"), Some(&b"b"[..]));
        assert_eq!(hash_tag(b"a{}c{d}"), None);
        assert_eq!(hash_tag(b"a{b"), None);
        assert_eq!(hash_tag(b"a}b{c}"), Some(&b"c"[..]));
    }

    #[test]
    fn every_key_of_a_lock_shares_its_slot() {
        for (prefix, resource) in [
            (&b"locks:"[..], &b"orders"[..]),
            (b"locks:", b"{order:42}:items"),
            (b"{app}:", b"orders"),
            (b"", b"a}b"),
            (b"x}", b"{"),
            (b"", b"{}"),
        ] {
            let key = slotted_key(prefix, resource).expect("a tag");
            let tag_slot = slot(&key);
            for suffix in [":quorlock-queue", ":quorlock-write"] {
                let derived = [&key[..], suffix.as_bytes()].concat();
                assert_eq!(slot(&derived), tag_slot, "{key:?} {suffix}");
            }
            let live = [&live_key_start(prefix, &key)[..], b"quorlock-client:q12"].concat();
            assert_eq!(slot(&live), tag_slot, "{live:?}");
            let fence = [&live_key_start(prefix, &key)[..], FENCE_INFIX.as_bytes()].concat();
            assert_eq!(slot(&fence), tag_slot, "{fence:?}");
            assert!(key.starts_with(prefix));
            assert!(live.starts_with(prefix));
        }
        assert_eq!(slotted_key(b"l:", b"orders").expect("a tag"), b"l:{orders}");
        assert_eq!(slotted_key(b"l:", b"{o}x").expect("a tag"), b"l:{o}x");
        assert!(slotted_key(b"l:", b"}x").is_err());
    }

    #[test]
    fn prefixes_that_open_no_tag_are_refused() {
        assert!(prefix_problem(b"locks:").is_none());
        assert!(prefix_problem(b"{app}:").is_none());
        assert!(prefix_problem(b"a}").is_none());
        assert!(prefix_problem(b"a{").is_some());
        assert!(prefix_problem(b"a{}b").is_some());
    }

    #[test]
    fn commands_route_by_their_first_key() {
        let mut script = redis::cmd("EVALSHA");
        script.arg("abc").arg(1).arg("key").arg("token");
        assert_eq!(route_key(&script), Some(&b"key"[..]));
        let mut keyless = redis::cmd("EVALSHA");
        keyless.arg("abc").arg(0).arg("live");
        assert_eq!(route_key(&keyless), Some(&b"live"[..]));
        let mut set = redis::cmd("SET");
        set.arg("key").arg("v");
        assert_eq!(route_key(&set), Some(&b"key"[..]));
        assert_eq!(route_key(&redis::cmd("PING")), None);
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD").arg("return 1");
        assert_eq!(route_key(&load), None);
    }

    #[test]
    fn the_topology_maps_each_slot_to_its_primary() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let range = |start: i64, end: i64, primary: Value| {
            Value::Array(vec![Value::Int(start), Value::Int(end), primary])
        };
        let mut with_replica = range(5461, 10922, node("", 7001));
        if let Value::Array(fields) = &mut with_replica {
            fields.push(node("127.0.0.1", 7004));
        }
        let reply = Value::Array(vec![
            range(0, 5460, node("127.0.0.1", 7000)),
            with_replica,
            range(10923, 16383, node("127.0.0.1", 7000)),
        ]);
        let topology = Topology::parse(&reply, "127.0.0.1").expect("parses");
        let port = |(_, port): &(String, u16)| *port;
        assert_eq!(
            topology.nodes.iter().map(port).collect::<Vec<_>>(),
            [7000, 7001, 7004]
        );
        assert_eq!(
            topology.primaries,
            vec![
                ("127.0.0.1".to_owned(), 7000),
                ("127.0.0.1".to_owned(), 7001)
            ]
        );
        assert_eq!(topology.primary_of(0), Some(0));
        assert_eq!(topology.primary_of(6000), Some(1));
        assert_eq!(topology.primary_of(16383), Some(0));
        assert_eq!(topology.unserved(), 0);
        let partial = Value::Array(vec![range(0, 99, node("127.0.0.1", 7000))]);
        let partial = Topology::parse(&partial, "h").expect("parses");
        assert_eq!(partial.primary_of(100), None);
        assert_eq!(partial.unserved(), SLOTS - 100);
        assert!(Topology::parse(&Value::Array(vec![]), "h").is_err());
        assert!(Topology::parse(&Value::Array(vec![range(5, 2, node("h", 1))]), "h").is_err());
    }
}

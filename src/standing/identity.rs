//! What a check reads of a server ([`Identity`]: its `run_id`, replication
//! ids, role, persistence, record and clock, with what it reads of the
//! data, in one round trip), a Redis Cluster's primaries read as one
//! server, and the misconfigurations the identities show.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{RedisError, RedisResult, Value};

use super::answers::{config_value, info_field, is_refusal, read_record, refusal};
use super::evidence::{self, Asked, Evidence};
use crate::clock::Reading;
use crate::connection::Connection;

/// What one check of a node read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Identity {
    /// The server's `run_id`: two nodes with one run_id are one server.
    pub(crate) run_id: Option<String>,
    /// The first element of `ROLE`: `master`, `slave` or `sentinel`.
    pub(crate) role: Option<String>,
    /// `uptime_in_seconds`.
    pub(crate) uptime: Option<Duration>,
    /// `master_replid` (`INFO replication`): a new one at every start and
    /// every promotion of a replica.
    pub(crate) replid: Option<String>,
    /// `master_replid2` is set: the server took over a replication history
    /// (a replica promoted to primary, or a primary that reloaded a snapshot
    /// with its replication id), so it may lack writes acknowledged by the
    /// server it replaced.
    pub(crate) promoted: bool,
    /// The major of `redis_version` (Valkey reports its Redis-compatible one).
    pub(crate) major_version: Option<u32>,
    /// `appendonly yes` with `appendfsync always` (false when unknown).
    pub(crate) durable: bool,
    /// The node's record: the `run_id`s of incarnations that counted.
    pub(crate) record: Vec<String>,
    /// The check commands the node refused, each with its reply (`ROLE: ERR
    /// unknown command…`, a renamed command; `NOPERM …`, an ACL user).
    pub(crate) refused: Vec<String>,
    /// A server of a Redis Cluster named as a server of its own (`INFO
    /// cluster`): it would answer `MOVED` for most keys.
    pub(crate) cluster_enabled: bool,
    /// Its clock, as the check read it (`TIME`).
    pub(crate) clock: Option<Reading>,
    /// Its notes of clock steps still running when read: `run_id`s, each
    /// with until when (on this client's clock: the note's time left, by the
    /// node's clock, after the reply came) the node with that `run_id` is
    /// held back. A deadline, so that a note read long ago is not taken as
    /// running still.
    pub(crate) clock_notes: Vec<(String, Instant)>,
    /// What it read of the data (see `evidence.rs`).
    pub(crate) evidence: Evidence,
}

impl Identity {
    /// The incarnation: the `run_id`, and the replication id where known
    /// (`run_id/replid`). It changes with every restart and every promotion
    /// of a replica, and not while one server keeps serving as primary.
    pub(crate) fn incarnation(&self) -> Option<String> {
        let run_id = self.run_id.as_ref()?;
        Some(match &self.replid {
            Some(replid) => format!("{run_id}/{replid}"),
            None => run_id.clone(),
        })
    }
}

/// What a check asks a server, besides its identity.
#[derive(Debug, Clone, Copy)]
pub(super) struct CheckAsk<'a> {
    /// The data part (see `evidence.rs`).
    pub(super) data: Asked<'a>,
    /// The incarnations and the mark ids this client knows to count, to
    /// record on the node.
    pub(super) counting: &'a [String],
    pub(super) counting_marks: &'a [String],
    /// The scripts to load.
    pub(super) scripts: &'static [&'static str],
}

/// The check's round trip (see [`check_pipeline`]), read. A command the
/// node refuses leaves that part unknown (a refused `INFO` or `ROLE` is
/// listed in [`Identity::refused`]; a refused `SCRIPT LOAD` only costs the
/// `NOSCRIPT` fallback later); only a failure to get any answer is an
/// error. A cluster's mark is not read: its keys live on several primaries.
pub(super) async fn read_identity(
    connection: &Connection,
    asked: &CheckAsk<'_>,
) -> Result<Identity, RedisError> {
    let servers = connection.servers();
    let asked = CheckAsk {
        data: Asked {
            mark: asked.data.mark && matches!(connection, Connection::One(_)),
            ..asked.data
        },
        ..*asked
    };
    let reads = servers.into_iter().map(|(address, mut server)| async move {
        let identity = read_server(&mut server, &asked).await?;
        Ok::<_, RedisError>((address, identity))
    });
    let mut identities = futures::future::try_join_all(reads).await?;
    match identities.as_slice() {
        [(None, _)] => Ok(identities
            .pop()
            .map(|(_, identity)| identity)
            .unwrap_or_default()),
        _ => Ok(combine(identities)),
    }
}

/// The node's clock from its answer to the check's `TIME`, sent and
/// answered when; a refusal is noted in `refused` (its grants count without
/// a clock watch, see `clock.rs`).
pub(super) fn read_time(
    answer: Option<RedisResult<Value>>,
    refused: &mut Vec<String>,
    sent: Instant,
    received: Instant,
) -> Option<Reading> {
    match answer? {
        Ok(time) => Reading::from_reply(&time, sent, received),
        Err(err) => {
            refusal(refused, "TIME (its clock is not watched)", &err);
            None
        }
    }
}

/// `Err` with the first answer that is an error but no refusal (a server
/// loading its data, say): it fails the check, since a node judged on it
/// would count without what that command checks. The last `scripts`
/// answers (the `SCRIPT LOAD`s) only save a round trip later.
fn no_failure(answers: &[RedisResult<Value>], scripts: usize) -> Result<(), RedisError> {
    let checked = answers.len().saturating_sub(scripts);
    match answers[..checked]
        .iter()
        .filter_map(|answer| answer.as_ref().err())
        .find(|err| !is_refusal(err))
    {
        Some(failure) => Err(failure.clone()),
        None => Ok(()),
    }
}

/// One server's identity, read with the check's round trip.
pub(super) async fn read_server(
    connection: &mut crate::connection::server::Server,
    asked: &CheckAsk<'_>,
) -> Result<Identity, RedisError> {
    let pipe = check_pipeline(asked);
    let sent = Instant::now();
    let answers = pipe
        .query_async::<Vec<RedisResult<Value>>>(connection)
        .await?;
    let received = Instant::now();
    no_failure(&answers, asked.scripts.len())?;
    let mut answers = answers.into_iter();
    let mut identity = Identity::default();
    match answers.next() {
        Some(Ok(info)) => read_info(&mut identity, info),
        Some(Err(err)) => refusal(&mut identity.refused, "INFO server", &err),
        None => {}
    }
    match answers.next() {
        Some(Ok(info)) => read_replication(&mut identity, info),
        Some(Err(err)) => refusal(&mut identity.refused, "INFO replication", &err),
        None => {}
    }
    if let Some(Ok(info)) = answers.next() {
        let info = redis::from_redis_value::<String>(info).unwrap_or_default();
        identity.cluster_enabled = info_field(&info, "cluster_enabled:").as_deref() == Some("1");
    }
    match answers.next() {
        Some(Ok(Value::Array(role))) => {
            identity.role = match role.first() {
                Some(Value::BulkString(bytes)) => Some(String::from_utf8_lossy(bytes).into_owned()),
                Some(Value::SimpleString(text)) => Some(text.clone()),
                _ => None,
            };
        }
        Some(Ok(_)) | None => {}
        Some(Err(err)) => refusal(&mut identity.refused, "ROLE", &err),
    }
    let appendonly = config_value(answers.next());
    let appendfsync = config_value(answers.next());
    identity.durable =
        appendonly.as_deref() == Some("yes") && appendfsync.as_deref() == Some("always");
    identity.record = read_record(answers.next());
    identity.record.extend(read_record(answers.next()));
    identity.evidence = evidence::read(&mut answers, &asked.data, &mut identity.refused);
    identity.clock = read_time(answers.next(), &mut identity.refused, sent, received);
    if let (Some(Ok(notes)), Some(clock)) = (answers.next(), identity.clock) {
        identity.clock_notes = read_clock_notes(notes, clock.node_us / 1000)
            .into_iter()
            .filter_map(|(run_id, left_ms)| {
                let left = Duration::from_millis(u64::try_from(left_ms).ok()?);
                Some((run_id, received.checked_add(left)?))
            })
            .collect();
    }
    for loaded in answers {
        if let Err(err) = loaded {
            tracing::debug!(error = %err, "SCRIPT LOAD refused: scripts load on first use");
        }
    }
    Ok(identity)
}

/// The check's round trip: `INFO server`, `INFO replication`, `INFO
/// cluster`, `ROLE`, `CONFIG GET` of the persistence settings, `SMEMBERS`
/// of both records of incarnations, the data part (`evidence.rs`), `TIME`,
/// the notes of clock steps, then the records of the incarnations and
/// marks this client knows to count, and the `SCRIPT LOAD` of its scripts.
pub(super) fn check_pipeline(asked: &CheckAsk<'_>) -> redis::Pipeline {
    let keys = asked.data.keys;
    let mut pipe = redis::pipe();
    pipe.ignore_errors()
        .cmd("INFO")
        .arg("server")
        .cmd("INFO")
        .arg("replication")
        .cmd("INFO")
        .arg("cluster")
        .cmd("ROLE")
        .cmd("CONFIG")
        .arg("GET")
        .arg("appendonly")
        .cmd("CONFIG")
        .arg("GET")
        .arg("appendfsync")
        .cmd("SMEMBERS")
        .arg(&*keys.incarnations)
        .cmd("SMEMBERS")
        .arg(&*keys.run_ids);
    evidence::ask(&mut pipe, &asked.data);
    pipe.cmd("TIME").cmd("HGETALL").arg(&*keys.clock_steps);
    if !asked.counting.is_empty() {
        for add in keys.adds(asked.counting) {
            pipe.add_command(add).ignore();
        }
    }
    if let Some(add) = keys.add_marks(asked.counting_marks) {
        pipe.add_command(add).ignore();
    }
    for code in asked.scripts {
        pipe.cmd("SCRIPT").arg("LOAD").arg(*code);
    }
    pipe
}

/// The notes of clock steps in the reply to `HGETALL` (a RESP2 array of
/// fields and values, or a RESP3 map): each `run_id` with how long it is
/// held back after `now_ms` (the node's time, ms).
pub(super) fn read_clock_notes(reply: Value, now_ms: i64) -> Vec<(String, i64)> {
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    };
    let pairs: Vec<(Value, Value)> = match reply {
        Value::Map(pairs) => pairs,
        Value::Array(items) => {
            let mut items = items.into_iter();
            std::iter::from_fn(|| Some((items.next()?, items.next()?))).collect()
        }
        _ => Vec::new(),
    };
    pairs
        .iter()
        .filter_map(|(run_id, until)| {
            let until_ms = text(until)?.parse::<i64>().ok()?;
            Some((text(run_id)?, until_ms.saturating_sub(now_ms)))
        })
        .collect()
}

/// Reads the replication ids from the reply to `INFO replication`: a
/// `master_replid2` of zeros means no replication history was taken over.
pub(super) fn read_replication(identity: &mut Identity, info: Value) {
    let info = redis::from_redis_value::<String>(info).unwrap_or_default();
    identity.replid = info_field(&info, "master_replid:");
    identity.promoted = info_field(&info, "master_replid2:")
        .is_some_and(|replid2| replid2.bytes().any(|byte| byte != b'0'));
}

/// Reads `run_id`, uptime and version from the reply to `INFO server`.
pub(super) fn read_info(identity: &mut Identity, info: Value) {
    let info = redis::from_redis_value::<String>(info).unwrap_or_default();
    let field = |name: &str| info_field(&info, name);
    identity.run_id = field("run_id:");
    identity.uptime = field("uptime_in_seconds:")
        .and_then(|secs| secs.parse::<u64>().ok())
        .map(Duration::from_secs);
    identity.major_version =
        field("redis_version:").and_then(|version| version.split('.').next()?.parse().ok());
}

/// The identity of a Redis Cluster node, from each primary's (with its
/// address), as one server's: one incarnation made of every primary's
/// (sorted by `run_id`, so that a resharding that keeps the servers keeps
/// it), so that a change of any primary is a change of the node; promoted
/// if any is; durable if all are; the shortest uptime; a role other than
/// `master` if any primary answers so; every record's entries (each
/// record lives on the primary of its slot).
pub(super) fn combine(mut servers: Vec<(Option<String>, Identity)>) -> Identity {
    servers.sort_by(|(_, a), (_, b)| a.run_id.cmp(&b.run_id));
    let all = |field: fn(&Identity) -> Option<&String>| -> Option<String> {
        let parts: Option<Vec<&String>> = servers
            .iter()
            .map(|(_, identity)| field(identity))
            .collect();
        parts.map(|parts| {
            parts
                .iter()
                .map(|part| part.as_str())
                .collect::<Vec<_>>()
                .join(",")
        })
    };
    let identities = || servers.iter().map(|(_, identity)| identity);
    let mut record: Vec<String> = identities()
        .flat_map(|identity| identity.record.clone())
        .collect();
    record.sort();
    record.dedup();
    Identity {
        run_id: all(|identity| identity.run_id.as_ref()),
        replid: all(|identity| identity.replid.as_ref()),
        role: identities()
            .filter_map(|identity| identity.role.clone())
            .find(|role| role != "master")
            .or_else(|| identities().find_map(|identity| identity.role.clone())),
        uptime: identities().filter_map(|identity| identity.uptime).min(),
        promoted: identities().any(|identity| identity.promoted),
        major_version: identities()
            .filter_map(|identity| identity.major_version)
            .min(),
        durable: identities().all(|identity| identity.durable),
        record,
        // Its primaries are read as one clock (see `clock.rs`).
        clock: identities().find_map(|identity| identity.clock),
        evidence: evidence::combine(identities().map(|identity| &identity.evidence)),
        clock_notes: identities()
            .flat_map(|identity| identity.clock_notes.clone())
            .collect(),
        refused: servers
            .iter()
            .flat_map(|(address, identity)| {
                let address = address.as_deref().unwrap_or_default();
                identity
                    .refused
                    .iter()
                    .map(move |refusal| format!("{address}: {refusal}"))
            })
            .collect(),
        cluster_enabled: false,
    }
}

/// The first misconfiguration among the nodes' last checks, in words; a
/// node that may evict keys is one unless `allow_eviction`.
pub(super) fn misconfiguration(
    names: &[Arc<str>],
    identities: &[Option<Identity>],
    allow_eviction: bool,
) -> Option<String> {
    let known: Vec<(usize, &Identity)> = identities
        .iter()
        .enumerate()
        .filter_map(|(index, identity)| identity.as_ref().map(|identity| (index, identity)))
        .collect();
    for &(index, identity) in &known {
        if identity.cluster_enabled {
            return Some(format!(
                "node {} is a server of a Redis Cluster: name the cluster as one node, \
                 redis+cluster://{}",
                names[index], names[index]
            ));
        }
        if let Some(role) = identity.role.as_deref().filter(|role| *role != "master") {
            return Some(format!(
                "node {} is a {role} (ROLE), not an independent master",
                names[index]
            ));
        }
        if let Some(evicts) = identity
            .evidence
            .memory
            .evicts()
            .filter(|_| !allow_eviction)
        {
            return Some(format!(
                "node {} may evict lock keys ({evicts}), and a held lock whose key is \
                 evicted is granted again: set maxmemory-policy noeviction, or give the \
                 locks a server without maxmemory (RedlockBuilder::allow_eviction takes \
                 such nodes, at that risk)",
                names[index]
            ));
        }
    }
    for (position, &(index, identity)) in known.iter().enumerate() {
        let Some(run_id) = &identity.run_id else {
            continue;
        };
        if let Some(&(other, _)) = known[position + 1..]
            .iter()
            .find(|(_, other)| other.run_id.as_ref() == Some(run_id))
        {
            return Some(format!(
                "nodes {} and {} are the same server (one run_id): its vote would count twice",
                names[index], names[other]
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Notes of clock steps read as RESP2 (field, value, …) and RESP3 (a
    /// map), each as how long it holds its node back after the node's now;
    /// a value that is no number is left out.
    #[test]
    fn clock_notes_read_as_time_left() {
        let bulk = |text: &str| Value::BulkString(text.as_bytes().to_vec());
        let resp2 = Value::Array(vec![
            bulk("run-a"),
            bulk("1000500"),
            bulk("run-b"),
            bulk("999000"),
            bulk("run-c"),
            bulk("soon"),
        ]);
        assert_eq!(
            read_clock_notes(resp2, 1_000_000),
            [("run-a".to_owned(), 500), ("run-b".to_owned(), -1000)]
        );
        let resp3 = Value::Map(vec![(bulk("run-a"), bulk("1000500"))]);
        assert_eq!(
            read_clock_notes(resp3, 1_000_000),
            [("run-a".to_owned(), 500)]
        );
        assert!(read_clock_notes(Value::Nil, 0).is_empty());
    }

    /// A cluster is judged as one server made of its primaries: any
    /// primary's change (a restart, a promotion) changes its incarnation;
    /// the order the topology lists them in does not.
    #[test]
    fn a_cluster_is_one_incarnation_of_all_its_primaries() {
        let primary = |run_id: &str, up: u64| Identity {
            run_id: Some(run_id.into()),
            replid: Some(format!("x{run_id}")),
            uptime: Some(Duration::from_secs(up)),
            role: Some("master".into()),
            durable: true,
            record: vec![format!("seen-by-{run_id}")],
            ..Identity::default()
        };
        let at = |address: &str, identity: Identity| (Some(address.to_owned()), identity);
        let both = combine(vec![
            at("h:1", primary("b", 50)),
            at("h:2", primary("a", 90)),
        ]);
        assert_eq!(both.incarnation().as_deref(), Some("a,b/xa,xb"));
        assert_eq!(both.uptime, Some(Duration::from_secs(50)));
        assert!(both.durable && !both.promoted && !both.cluster_enabled);
        assert_eq!(both.record, ["seen-by-a", "seen-by-b"]);
        let reordered = combine(vec![
            at("h:2", primary("a", 90)),
            at("h:1", primary("b", 50)),
        ]);
        assert_eq!(reordered.incarnation(), both.incarnation());
        let failed_over = combine(vec![
            at("h:2", primary("a", 90)),
            at(
                "h:3",
                Identity {
                    promoted: true,
                    durable: false,
                    ..primary("c", 500)
                },
            ),
        ]);
        assert_ne!(failed_over.incarnation(), both.incarnation());
        assert!(failed_over.promoted && !failed_over.durable);
        let demoted = combine(vec![
            at("h:2", primary("a", 90)),
            at(
                "h:1",
                Identity {
                    role: Some("slave".into()),
                    ..primary("b", 50)
                },
            ),
        ]);
        assert_eq!(demoted.role.as_deref(), Some("slave"));
    }
}

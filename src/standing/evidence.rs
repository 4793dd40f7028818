//! What a check reads of a node's data rather than its server, in the same
//! round trip as the identity (see the module docs, "Evidence in the
//! data"): its data mark, the record of marks that counted, its memory
//! policy, and the settings the clients of the node set have recorded there.

use redis::{Pipeline, RedisResult, Value};

use super::answers::{info_field, read_record, refusal};
use super::mark::{Mark, MarkRead, wall_ms};
use super::record::RecordKeys;
use crate::scripts;

/// What the data part of a check reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Evidence {
    /// The node's data mark.
    pub(crate) mark: MarkRead,
    /// The ids of the marks, of any node of the set, that counted.
    pub(crate) mark_record: Vec<String>,
    /// Its memory limit and what it does at the limit.
    pub(crate) memory: Memory,
    /// The settings recorded on it, merged with this client's.
    pub(crate) settings: Option<Settings>,
}

impl Evidence {
    /// The id of the node's mark, if it has one.
    pub(crate) fn mark_id(&self) -> Option<&str> {
        match &self.mark {
            MarkRead::Present(_, mark) | MarkRead::Made(_, mark) => Some(&mark.id),
            _ => None,
        }
    }
}

/// A node's memory limit and eviction policy (`INFO memory`), where known.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Memory {
    /// `maxmemory`, bytes (0: no limit).
    pub(crate) maxmemory: Option<u64>,
    /// `maxmemory_policy`.
    pub(crate) policy: Option<String>,
}

impl Memory {
    /// Whether the node can evict keys, lock keys among them: a memory
    /// limit with any policy but `noeviction` (the `volatile-*` policies
    /// evict keys with a TTL, which every lock key has). In words, naming
    /// the settings, if it can.
    pub(crate) fn evicts(&self) -> Option<String> {
        let (Some(limit), Some(policy)) = (self.maxmemory, self.policy.as_deref()) else {
            return None;
        };
        (limit > 0 && policy != "noeviction")
            .then(|| format!("maxmemory-policy {policy} with maxmemory {limit} bytes"))
    }
}

/// The settings the clients of a node set record on its nodes (see the
/// module docs): the smallest and largest clock tolerance in use (µs; 0:
/// none recorded) and the longest grace (ms).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Settings {
    pub(crate) tolerance_min_us: u64,
    pub(crate) tolerance_max_us: u64,
    pub(crate) grace_max_ms: u64,
}

/// What this client asks of the data in a check.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asked<'a> {
    pub(crate) keys: &'a RecordKeys,
    /// Read the mark (the restart protection on; not a cluster).
    pub(crate) mark: bool,
    /// This client's clock tolerance (µs, 0: clocks not watched) and grace
    /// (ms), to record.
    pub(crate) tolerance_us: u64,
    pub(crate) grace_ms: u64,
}

/// Adds the data part of a check to `pipe`: the read of the mark (made
/// where there is none, see [`scripts::MARK_READ_CODE`]), `SMEMBERS` of
/// the record of marks, `INFO memory`, the settings' merge.
pub(super) fn ask(pipe: &mut Pipeline, asked: &Asked<'_>) {
    match asked.mark {
        true => pipe
            .cmd("EVAL")
            .arg(scripts::MARK_READ_CODE)
            .arg(1)
            .arg(&*asked.keys.mark)
            .arg(Mark::fresh_id())
            .arg(wall_ms()),
        false => pipe.cmd("PING"),
    };
    pipe.cmd("SMEMBERS")
        .arg(&*asked.keys.marks)
        .cmd("INFO")
        .arg("memory")
        .cmd("EVAL")
        .arg(scripts::SETTINGS_CODE)
        .arg(1)
        .arg(&*asked.keys.settings)
        .arg(asked.tolerance_us)
        .arg(asked.grace_ms);
}

/// Reads the answers to [`ask`]'s commands, in order; a refusal of one is
/// noted in `refused`.
pub(super) fn read(
    answers: &mut impl Iterator<Item = RedisResult<Value>>,
    asked: &Asked<'_>,
    refused: &mut Vec<String>,
) -> Evidence {
    let mark = match (asked.mark, answers.next()) {
        (false, _) | (true, None) => MarkRead::Unread,
        (true, Some(answer)) => read_mark(answer, refused),
    };
    let mark_record = read_record(answers.next());
    let memory = match answers.next() {
        Some(Ok(info)) => {
            let info = redis::from_redis_value::<String>(info).unwrap_or_default();
            Memory {
                maxmemory: info_field(&info, "maxmemory:").and_then(|limit| limit.parse().ok()),
                policy: info_field(&info, "maxmemory_policy:"),
            }
        }
        Some(Err(err)) => {
            refusal(
                refused,
                "INFO memory (its eviction policy is unknown)",
                &err,
            );
            Memory::default()
        }
        None => Memory::default(),
    };
    let settings = match answers.next() {
        Some(Ok(Value::Array(items))) => match items.as_slice() {
            [Value::Int(low), Value::Int(high), Value::Int(grace)] => Some(Settings {
                tolerance_min_us: u64::try_from(*low).unwrap_or(0),
                tolerance_max_us: u64::try_from(*high).unwrap_or(0),
                grace_max_ms: u64::try_from(*grace).unwrap_or(0),
            }),
            _ => None,
        },
        _ => None,
    };
    Evidence {
        mark,
        mark_record,
        memory,
        settings,
    }
}

/// The mark in the reply to its read (see [`ask`]): `{made, value}`.
pub(super) fn read_mark(answer: RedisResult<Value>, refused: &mut Vec<String>) -> MarkRead {
    match answer {
        Ok(Value::Array(items)) => match <[Value; 2]>::try_from(items) {
            Ok([Value::Int(made), value]) => match read_mark(Ok(value), refused) {
                MarkRead::Present(raw, mark) if made == 1 => MarkRead::Made(raw, mark),
                read => read,
            },
            Ok(other) => MarkRead::Foreign(format!("{other:?}").into_bytes()),
            Err(items) => MarkRead::Foreign(format!("{items:?}").into_bytes()),
        },
        Ok(Value::Nil) => MarkRead::Missing,
        Ok(Value::BulkString(bytes)) => match Mark::parse(&bytes) {
            Some(mark) => MarkRead::Present(bytes, mark),
            None => MarkRead::Foreign(bytes),
        },
        Ok(other) => MarkRead::Foreign(format!("{other:?}").into_bytes()),
        Err(err) => {
            refusal(
                refused,
                "GET of the data mark (losses of data are not seen)",
                &err,
            );
            MarkRead::Refused(err.to_string())
        }
    }
}

/// What several servers (a cluster's primaries) show of their data, as
/// one's: no mark (its keys live on several primaries: no one mark covers
/// them), every record's entries, a memory policy that evicts if any
/// does, the settings' extremes.
pub(super) fn combine<'a>(all: impl Iterator<Item = &'a Evidence> + Clone) -> Evidence {
    Evidence {
        mark: MarkRead::Unread,
        mark_record: all
            .clone()
            .flat_map(|evidence| evidence.mark_record.clone())
            .collect(),
        memory: (all.clone())
            .map(|evidence| evidence.memory.clone())
            .find(|memory| memory.evicts().is_some())
            .unwrap_or_default(),
        settings: combine_settings(all.map(|evidence| evidence.settings)),
    }
}

/// The settings of several servers (a cluster's primaries) as one's: the
/// smallest and largest tolerance, the longest grace.
pub(super) fn combine_settings(all: impl Iterator<Item = Option<Settings>>) -> Option<Settings> {
    all.flatten().reduce(|a, b| Settings {
        tolerance_min_us: match (a.tolerance_min_us, b.tolerance_min_us) {
            (0, other) | (other, 0) => other,
            (x, y) => x.min(y),
        },
        tolerance_max_us: a.tolerance_max_us.max(b.tolerance_max_us),
        grace_max_ms: a.grace_max_ms.max(b.grace_max_ms),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memory_limit_evicts_unless_the_policy_is_noeviction() {
        let memory = |limit, policy: &str| Memory {
            maxmemory: Some(limit),
            policy: Some(policy.into()),
        };
        assert_eq!(memory(0, "allkeys-lru").evicts(), None);
        assert_eq!(memory(1 << 20, "noeviction").evicts(), None);
        let evicts = memory(1 << 20, "volatile-lru").evicts().unwrap();
        assert!(evicts.contains("maxmemory-policy volatile-lru"), "{evicts}");
        assert_eq!(Memory::default().evicts(), None);
    }

    #[test]
    fn a_clusters_settings_are_its_primaries_extremes() {
        let settings = |low, high, grace| {
            Some(Settings {
                tolerance_min_us: low,
                tolerance_max_us: high,
                grace_max_ms: grace,
            })
        };
        let all = [
            settings(100, 200, 5),
            None,
            settings(0, 0, 9),
            settings(50, 90, 1),
        ];
        assert_eq!(
            combine_settings(all.into_iter()),
            settings(50, 200, 9),
            "a server with none recorded does not lower the smallest"
        );
    }

    #[test]
    fn a_mark_reads_as_present_made_missing_foreign_or_refused() {
        let mut refused = Vec::new();
        let value = b"0123456789abcdef 1 2 1 r/x".to_vec();
        assert!(matches!(
            read_mark(Ok(Value::BulkString(value.clone())), &mut refused),
            MarkRead::Present(_, mark) if mark.incarnation == "r/x"
        ));
        let reply = |made| Value::Array(vec![Value::Int(made), Value::BulkString(value.clone())]);
        assert!(matches!(
            read_mark(Ok(reply(0)), &mut refused),
            MarkRead::Present(..)
        ));
        assert!(matches!(
            read_mark(Ok(reply(1)), &mut refused),
            MarkRead::Made(..)
        ));
        assert_eq!(read_mark(Ok(Value::Nil), &mut refused), MarkRead::Missing);
        assert!(matches!(
            read_mark(Ok(Value::BulkString(b"x".to_vec())), &mut refused),
            MarkRead::Foreign(_)
        ));
        assert!(refused.is_empty());
        let err = redis::RedisError::from((redis::ErrorKind::Io, "gone"));
        assert!(matches!(
            read_mark(Err(err), &mut refused),
            MarkRead::Refused(_)
        ));
        assert_eq!(refused.len(), 1);
    }
}

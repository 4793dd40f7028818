//! The nodes' records (which incarnations and data marks counted, the
//! notes of clock steps, the settings of the node set) and each node's data
//! mark: their keys, the commands that add to them, and the errands the
//! standings send the nodes through the engine.

use std::fmt;
use std::sync::Arc;

use redis::Value;

use super::answers::is_refusal;
use crate::answer::{NodeError, NodeErrorKind};
use crate::connection::Connection;

/// What follows the key prefix in the key of each node's *record*: a set of
/// the `run_id`s of the node incarnations, on any node of the lock, whose
/// votes have counted (see the module docs). A resource whose key would be
/// the record's is refused.
pub(crate) const RECORD_SUFFIX: &str = "quorlock-incarnations";

/// What follows [`RECORD_SUFFIX`] in the key of the record of incarnations
/// (`run_id/master_replid`). The record under [`RECORD_SUFFIX`] itself holds
/// their bare `run_id`s: clients from before incarnations read it, and would
/// take every entry of the new form as an incarnation that is gone.
pub(super) const INCARNATIONS_TAIL: &str = ":v2";

/// What follows [`RECORD_SUFFIX`] in the key of the notes of clock steps.
pub(super) const CLOCK_STEPS_TAIL: &str = ":clock-steps";

/// What follows [`RECORD_SUFFIX`] in the key of the node's data mark.
pub(super) const MARK_TAIL: &str = ":mark";

/// What follows [`RECORD_SUFFIX`] in the key of the record of data marks
/// that counted.
pub(super) const MARKS_TAIL: &str = ":marks";

/// What follows [`RECORD_SUFFIX`] in the key of the node set's settings.
pub(super) const SETTINGS_TAIL: &str = ":settings";

/// The keys of each node's record (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct RecordKeys {
    /// Incarnations, `run_id/master_replid`.
    pub(crate) incarnations: Arc<[u8]>,
    /// Their bare `run_id`s (and those that older clients recorded).
    pub(crate) run_ids: Arc<[u8]>,
    /// The notes of clock steps (see `clock.rs`): a hash of `run_id`s, each
    /// with the time on this node until which that node is held back.
    pub(crate) clock_steps: Arc<[u8]>,
    /// The node's data mark (see `mark.rs`).
    pub(crate) mark: Arc<[u8]>,
    /// The ids of the data marks, of any node of the set, that counted.
    pub(crate) marks: Arc<[u8]>,
    /// The settings the clients of the node set recorded (see `evidence.rs`).
    pub(crate) settings: Arc<[u8]>,
}

impl RecordKeys {
    /// The record keys under `key_prefix`; `slotted` (see `cluster.rs`),
    /// with the suffix in braces unless the prefix has a hash tag, so that
    /// both keys live in one slot.
    pub(crate) fn new(key_prefix: &[u8], slotted: bool) -> Self {
        let mut run_ids = key_prefix.to_vec();
        let tagged = slotted && crate::cluster::hash_tag(key_prefix).is_none();
        if tagged {
            run_ids.push(b'{');
        }
        run_ids.extend_from_slice(RECORD_SUFFIX.as_bytes());
        if tagged {
            run_ids.push(b'}');
        }
        let mut incarnations = run_ids.clone();
        incarnations.extend_from_slice(INCARNATIONS_TAIL.as_bytes());
        let tailed = |tail: &str| -> Arc<[u8]> {
            let mut key = run_ids.clone();
            key.extend_from_slice(tail.as_bytes());
            key.into()
        };
        RecordKeys {
            incarnations: incarnations.into(),
            clock_steps: tailed(CLOCK_STEPS_TAIL),
            mark: tailed(MARK_TAIL),
            marks: tailed(MARKS_TAIL),
            settings: tailed(SETTINGS_TAIL),
            run_ids: run_ids.into(),
        }
    }

    /// The command that records the data marks `ids` on a node, if any.
    pub(crate) fn add_marks(&self, ids: &[impl AsRef<str>]) -> Option<redis::Cmd> {
        if ids.is_empty() {
            return None;
        }
        let mut add = redis::cmd("SADD");
        add.arg(&*self.marks);
        for id in ids {
            add.arg(id.as_ref());
        }
        Some(add)
    }

    /// The commands that record `incarnations` on a node: each in the
    /// record of incarnations, its `run_id` in the record of `run_id`s.
    pub(crate) fn adds(&self, incarnations: &[impl AsRef<str>]) -> [redis::Cmd; 2] {
        let mut full = redis::cmd("SADD");
        full.arg(&*self.incarnations);
        let mut bare = redis::cmd("SADD");
        bare.arg(&*self.run_ids);
        for incarnation in incarnations {
            full.arg(incarnation.as_ref());
            bare.arg(run_id_of(incarnation.as_ref()));
        }
        [full, bare]
    }
}

/// What is recorded of a node that counts: its incarnation (empty where
/// `INFO` is refused) and its data mark's id, where it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Counted {
    pub(super) incarnation: String,
    pub(super) mark: Option<String>,
}

/// What the standings ask of one node, through the nodes (which they do
/// not know).
#[derive(Debug, Clone)]
pub(crate) enum Errand {
    /// Record an incarnation (`SADD` to its record), and the node's data
    /// mark where it has one.
    Record {
        incarnation: Arc<str>,
        mark: Option<Arc<str>>,
    },
    /// Note that the node with this `run_id` is held back for `hold_ms`
    /// for a clock step (see `clock.rs`).
    NoteClockStep { run_id: Arc<str>, hold_ms: u64 },
    /// Read its clock (`TIME`) and its data mark, if it is connected: the
    /// background reading.
    ReadClock,
    /// Connect again, which checks the node again: its data mark changed.
    Recheck,
    /// Ask a Sentinel node's Sentinels which primary they name, and connect
    /// again if it is not the one in use (see `Link::primary_moved`).
    FollowSentinels,
}

/// Runs an [`Errand`] on node `j`, bounded by the connect timeout.
pub(crate) type RecordFn = dyn Fn(usize, Errand) -> futures::future::BoxFuture<'static, Result<(), NodeError>>
    + Send
    + Sync;

/// A [`RecordFn`], shared.
#[derive(Clone)]
pub(crate) struct Recorder(pub(crate) Arc<RecordFn>);

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Recorder")
    }
}

/// Records `incarnation` (see [`RecordKeys::adds`]) and the data mark
/// `mark` on a node's own connection. A node that refuses it (an ACL) is
/// left without it, with a warning: it still counts. Any other error (a
/// server loading its data) fails the check.
pub(super) async fn record_incarnation(
    connection: &mut Connection,
    keys: &RecordKeys,
    incarnation: &str,
    mark: Option<&str>,
    name: &str,
) -> Result<(), NodeErrorKind> {
    let mut pipe = redis::pipe();
    if !incarnation.is_empty() {
        for add in keys.adds(&[incarnation]) {
            pipe.add_command(add);
        }
    }
    if let Some(add) = keys.add_marks(mark.as_slice()) {
        pipe.add_command(add);
    }
    if pipe.is_empty() {
        return Ok(());
    }
    match pipe.query_async::<Value>(connection).await {
        Ok(_) => Ok(()),
        Err(err) if is_refusal(&err) => {
            tracing::warn!(
                node = %name,
                error = %err,
                "node check: the node refused to record its run_id; it counts, but a client \
                 meeting the nodes later may not see that it restarted"
            );
            Ok(())
        }
        Err(err) => Err(NodeErrorKind::Redis(Arc::new(err))),
    }
}

/// Whether `recorded` (an entry of a record) names an incarnation in
/// `current`: the same, or the bare `run_id` an older client recorded.
pub(super) fn is_current(recorded: &str, current: &[&str]) -> bool {
    current.iter().any(|incarnation| {
        *incarnation == recorded
            || incarnation
                .strip_prefix(recorded)
                .is_some_and(|rest| rest.starts_with('/'))
    })
}

/// The `run_id` of an incarnation (`run_id/replid`, or a bare `run_id`).
pub(super) fn run_id_of(incarnation: &str) -> &str {
    incarnation.split('/').next().unwrap_or(incarnation)
}

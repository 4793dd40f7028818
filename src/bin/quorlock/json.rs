//! `status --json`: a lock's status as one JSON object, for scripts.
//!
//! ```text
//! {"resource": "deploy", "state": "held" | "free" | "unknown",
//!  "holder": "q1a2b3c4" | null, "quorum": 2,
//!  "refused": "misconfigured lock nodes: ..." | null,
//!  "nodes": [{"node": "127.0.0.1:7001", "state": "held" | "free" | "failed",
//!             "token_prefix": "q1a2b3c4", "ttl_ms": 9421,   (held)
//!             "error": "...",                               (failed)
//!             "not_counted": "..." | null}, ...]}
//! ```
//!
//! With `--rw`: `{"resource", "state", "writer": {…as above…}, "intent":
//! {…}, "readers": [{"node", "readers": n | null}], "quorum"}`, `state`
//! being `"held"` (a writer on a quorum, or readers on a quorum of nodes),
//! `"free"` or `"unknown"`.

use quorlock::{LockStatus, NodeState, RwStatus};

use super::status::Verdict;
use serde_json::{Value, json};

/// One node's answer.
fn node(status: &quorlock::NodeStatus) -> Value {
    let not_counted = status.not_counted.as_ref().map(ToString::to_string);
    match &status.state {
        NodeState::Free => {
            json!({"node": status.node, "state": "free", "not_counted": not_counted})
        }
        NodeState::Held { token_prefix, ttl } => json!({
            "node": status.node,
            "state": "held",
            "token_prefix": token_prefix,
            "ttl_ms": ttl.map(|ttl| u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)),
            "not_counted": not_counted,
        }),
        NodeState::Failed(err) => json!({
            "node": status.node,
            "state": "failed",
            "error": err.to_string(),
            "not_counted": not_counted,
        }),
        // A state of a later version of the library.
        other => {
            json!({"node": status.node, "state": format!("{other:?}"), "not_counted": not_counted})
        }
    }
}

/// A lock's status without its resource name; `state` is what `status`
/// found for it (`held`, `free` or `unknown`).
fn lock(status: &LockStatus, state: Verdict) -> Value {
    json!({
        "state": state.name(),
        "holder": status.holder,
        "quorum": status.quorum,
        "refused": status.refused,
        "nodes": status.nodes.iter().map(node).collect::<Vec<_>>(),
    })
}

/// `status --json`, found to be `state`.
pub fn status(resource: &str, status: &LockStatus, state: Verdict) -> Value {
    let mut value = lock(status, state);
    value["resource"] = json!(resource);
    value
}

/// `status --rw --json`, found to be `state`.
pub fn rw_status(resource: &str, status: &RwStatus, state: Verdict) -> Value {
    json!({
        "resource": resource,
        "state": state.name(),
        "writer": lock(&status.writer, Verdict::of_lock(&status.writer)),
        "intent": lock(&status.intent, Verdict::of_lock(&status.intent)),
        "readers": status.readers.iter()
            .map(|(node, readers)| json!({"node": node, "readers": readers}))
            .collect::<Vec<_>>(),
        "quorum": status.quorum,
    })
}

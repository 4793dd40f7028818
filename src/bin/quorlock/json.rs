//! `status --json`: a lock's status as one JSON object, for scripts.
//!
//! ```text
//! {"resource": "deploy", "state": "held" | "free" | "unknown",
//!  "holder": "q1a2b3c4" | null, "quorum": 2,
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
use serde_json::{Value, json};

/// `held`, `free` or `unknown`, as the exit code of `status` tells them.
fn state(held: bool, free: bool) -> &'static str {
    match (held, free) {
        (true, _) => "held",
        (false, true) => "free",
        (false, false) => "unknown",
    }
}

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

/// A lock's status without its resource name.
fn lock(status: &LockStatus) -> Value {
    json!({
        "state": state(status.is_held(), status.is_free()),
        "holder": status.holder,
        "quorum": status.quorum,
        "nodes": status.nodes.iter().map(node).collect::<Vec<_>>(),
    })
}

/// `status --json`.
pub fn status(resource: &str, status: &LockStatus) -> Value {
    let mut value = lock(status);
    value["resource"] = json!(resource);
    value
}

/// `status --rw --json`.
pub fn rw_status(resource: &str, status: &RwStatus) -> Value {
    let held = status.writer.is_held() || status.readers_on_quorum();
    let free = status.writer.is_free() && status.no_readers();
    json!({
        "resource": resource,
        "state": state(held, free),
        "writer": lock(&status.writer),
        "intent": lock(&status.intent),
        "readers": status.readers.iter()
            .map(|(node, readers)| json!({"node": node, "readers": readers}))
            .collect::<Vec<_>>(),
        "quorum": status.quorum,
    })
}

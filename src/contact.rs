//! First contact: before a client's first lock, every node is asked who it is
//! (`INFO server` for its `run_id`, `ROLE`), so that a misconfiguration is
//! refused instead of silently weakening the quorum:
//!
//! - the same server listed twice (two URLs, one `run_id`) would cast two
//!   votes in extensions and releases, and count twice in the quorum size;
//! - a replica cannot hold a lock (it refuses writes) and loses what it
//!   replicates on failover: quorlock needs independent masters.
//!
//! Nodes that do not answer then are asked again, in the background, when a
//! later lock finds them still unchecked. Until a node is checked, its grants
//! do not count toward a quorum (its key is still released like any other).

use std::sync::{Arc, Mutex, OnceLock};

use crate::node::{Identity, Node};

/// Where one node's check stands.
#[derive(Debug, Clone)]
enum Check {
    Unchecked,
    Checking,
    Checked(Identity),
}

/// The first-contact state of a client.
#[derive(Debug)]
pub(crate) struct FirstContact {
    checks: Mutex<Vec<Check>>,
    first_round: tokio::sync::OnceCell<()>,
    misconfigured: OnceLock<String>,
}

impl FirstContact {
    pub(crate) fn new(nodes: usize) -> Self {
        FirstContact {
            checks: Mutex::new(vec![Check::Unchecked; nodes]),
            first_round: tokio::sync::OnceCell::new(),
            misconfigured: OnceLock::new(),
        }
    }

    /// Checks every node the first time it is called (concurrent callers
    /// wait for the same check), then starts background checks of nodes that
    /// are still unchecked. Returns the misconfiguration found, if any.
    pub(crate) async fn ensure(self: &Arc<Self>, nodes: &Arc<[Node]>) -> Option<String> {
        self.first_round
            .get_or_init(|| async {
                let all: Vec<usize> = (0..nodes.len()).collect();
                self.mark_checking(&all);
                let answers =
                    futures::future::join_all(all.iter().map(|&index| nodes[index].identify()))
                        .await;
                for (index, answer) in all.into_iter().zip(answers) {
                    self.record(nodes, index, answer.ok());
                }
            })
            .await;
        self.recheck_in_background(nodes);
        self.misconfigured.get().cloned()
    }

    /// Which nodes' grants count: those checked. `None` when all are (the
    /// usual case, without allocating).
    pub(crate) fn counted(&self) -> Option<Vec<bool>> {
        let checks = self.lock_checks();
        if checks
            .iter()
            .all(|check| matches!(check, Check::Checked(_)))
        {
            return None;
        }
        Some(
            checks
                .iter()
                .map(|check| matches!(check, Check::Checked(_)))
                .collect(),
        )
    }

    fn lock_checks(&self) -> std::sync::MutexGuard<'_, Vec<Check>> {
        // A panic while holding this lock cannot leave the checks half
        // written (each update is one assignment), so poisoning is ignored.
        self.checks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn mark_checking(&self, indices: &[usize]) {
        let mut checks = self.lock_checks();
        for &index in indices {
            checks[index] = Check::Checking;
        }
    }

    fn recheck_in_background(self: &Arc<Self>, nodes: &Arc<[Node]>) {
        let unchecked: Vec<usize> = {
            let mut checks = self.lock_checks();
            let unchecked: Vec<usize> = checks
                .iter()
                .enumerate()
                .filter(|(_, check)| matches!(check, Check::Unchecked))
                .map(|(index, _)| index)
                .collect();
            for &index in &unchecked {
                checks[index] = Check::Checking;
            }
            unchecked
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for index in unchecked {
            let (contact, nodes) = (self.clone(), nodes.clone());
            runtime.spawn(async move {
                let answer = nodes[index].identify().await;
                contact.record(&nodes, index, answer.ok());
            });
        }
    }

    /// Stores one node's identity (`None`: it did not answer) and looks for
    /// duplicates and replicas among all identities known.
    fn record(&self, nodes: &[Node], index: usize, identity: Option<Identity>) {
        let mut checks = self.lock_checks();
        checks[index] = match identity {
            Some(identity) => Check::Checked(identity),
            None => Check::Unchecked,
        };
        if let Some(reason) = misconfiguration(nodes, &checks)
            && self.misconfigured.set(reason.clone()).is_ok()
        {
            tracing::error!(%reason, "misconfigured lock nodes: locking is refused");
        }
    }
}

/// The first misconfiguration among the checked nodes, in words.
fn misconfiguration(nodes: &[Node], checks: &[Check]) -> Option<String> {
    let identities: Vec<(usize, &Identity)> = checks
        .iter()
        .enumerate()
        .filter_map(|(index, check)| match check {
            Check::Checked(identity) => Some((index, identity)),
            _ => None,
        })
        .collect();
    for &(index, identity) in &identities {
        if let Some(role) = identity.role.as_deref().filter(|role| *role != "master") {
            return Some(format!(
                "node {} is a {role} (ROLE), not an independent master",
                nodes[index].name()
            ));
        }
    }
    for (position, &(index, identity)) in identities.iter().enumerate() {
        let Some(run_id) = &identity.run_id else {
            continue;
        };
        if let Some(&(other, _)) = identities[position + 1..]
            .iter()
            .find(|(_, other)| other.run_id.as_ref() == Some(run_id))
        {
            return Some(format!(
                "nodes {} and {} are the same server (one run_id): its vote would count twice",
                nodes[index].name(),
                nodes[other].name()
            ));
        }
    }
    None
}

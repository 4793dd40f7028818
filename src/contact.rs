//! First contact: before a client's first lock, every node is asked who it is
//! (`INFO server` for its `run_id`, `ROLE`; the client's scripts are loaded
//! in the same round trip), so that a misconfiguration is
//! refused instead of silently weakening the quorum:
//!
//! - the same server listed twice (two URLs, one `run_id`) would cast two
//!   votes in extensions and releases, and count twice in the quorum size;
//! - a replica cannot hold a lock (it refuses writes) and loses what it
//!   replicates on failover: quorlock needs independent masters.
//!
//! **Which nodes count.** A node's grants count toward a quorum only once it
//! has been checked. Until then (its check did not get an answer: no
//! connection, or no reply within the connect timeout) a grant from it is a
//! failed vote whose error says why (`not checked at first contact yet`), and
//! its key is still released like any other. Not counting a node can only
//! withhold a lock, never grant one.
//!
//! **Policy for a node that refuses a check command.** A node that answers
//! but refuses `INFO` or `ROLE` (an ACL user without the permission, a
//! renamed command, a proxy that lacks it) *is counted*, with a warning that
//! names the node and its reply: it answers, so it can hold a lock, and
//! refusing it would make such deployments unusable. What is lost is the
//! check itself: a duplicate or a replica among such nodes is not detected.
//!
//! **Timing.** The first call of a client waits until every node's first
//! check has ended (each is bounded by the connect timeout), or until the
//! caller's acquire deadline. Checks run as tasks of their own, so a caller
//! that stops waiting does not cut them short; a check whose task is dropped
//! (its runtime shut down) leaves its node unchecked, and the next lock call
//! checks it again. Nodes still unchecked are checked again at each lock
//! call, one check per node at a time.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use tokio::sync::Notify;

use crate::error::{NodeError, NodeErrorKind};
use crate::node::{Identity, Node};

/// Where one node's check stands.
#[derive(Debug, Clone)]
enum Check {
    /// Not checked; why, if a check was made and failed.
    Unchecked(Option<NodeError>),
    Checking,
    Checked(Identity),
}

/// One node's check, and whether a check of it has ever ended.
#[derive(Debug, Clone)]
struct Slot {
    check: Check,
    attempted: bool,
}

/// Why [`FirstContact::ensure`] did not let a lock call go on.
#[derive(Debug)]
pub(crate) enum NotReady {
    /// The nodes are misconfigured: locking is refused.
    Misconfigured(String),
    /// The caller's deadline passed before every node's first check ended;
    /// the nodes not yet checked, with why.
    DeadlinePassed(Vec<NodeError>),
}

/// The first-contact state of a client.
#[derive(Debug)]
pub(crate) struct FirstContact {
    slots: Mutex<Vec<Slot>>,
    /// Notified whenever a check ends.
    ended: Notify,
    misconfigured: OnceLock<String>,
    /// The scripts loaded on each node with its check.
    scripts: &'static [&'static str],
}

impl FirstContact {
    pub(crate) fn new(nodes: usize, scripts: &'static [&'static str]) -> Self {
        FirstContact {
            scripts,
            slots: Mutex::new(vec![
                Slot {
                    check: Check::Unchecked(None),
                    attempted: false,
                };
                nodes
            ]),
            ended: Notify::new(),
            misconfigured: OnceLock::new(),
        }
    }

    /// Starts a check of every unchecked node, then waits until every node
    /// has had one check end (at once after the first call), or until
    /// `deadline`.
    ///
    /// Cancel safe: the checks go on without the caller.
    pub(crate) async fn ensure(
        self: &Arc<Self>,
        nodes: &Arc<[Node]>,
        deadline: Option<Instant>,
    ) -> Result<(), NotReady> {
        // The usual case: every node checked, nothing to start or wait for.
        let all_checked = self
            .lock_slots()
            .iter()
            .all(|slot| matches!(slot.check, Check::Checked(_)));
        if !all_checked {
            self.wait_for_first_checks(nodes, deadline).await?;
        }
        match self.misconfigured.get() {
            Some(reason) => Err(NotReady::Misconfigured(reason.clone())),
            None => Ok(()),
        }
    }

    /// Starts checks of the unchecked nodes and waits until every node has
    /// had one check end, or until `deadline`.
    async fn wait_for_first_checks(
        self: &Arc<Self>,
        nodes: &Arc<[Node]>,
        deadline: Option<Instant>,
    ) -> Result<(), NotReady> {
        loop {
            let ended = self.ended.notified();
            let mut ended = std::pin::pin!(ended);
            ended.as_mut().enable();
            // Again on every wake-up: a check whose runtime ended left its
            // node unchecked.
            self.start_checks(nodes);
            if self.lock_slots().iter().all(|slot| slot.attempted) {
                return Ok(());
            }
            match deadline {
                Some(deadline) => {
                    if tokio::time::timeout_at(deadline.into(), ended)
                        .await
                        .is_err()
                    {
                        return Err(NotReady::DeadlinePassed(self.unchecked(nodes)));
                    }
                }
                None => ended.await,
            }
        }
    }

    /// Which nodes' grants count: `Ok` for those checked, and for the others
    /// the error that says why not. `None` when all count (the usual case,
    /// without allocating).
    pub(crate) fn counted(&self, nodes: &[Node]) -> Option<Vec<Result<(), NodeError>>> {
        let slots = self.lock_slots();
        if slots
            .iter()
            .all(|slot| matches!(slot.check, Check::Checked(_)))
        {
            return None;
        }
        Some(
            slots
                .iter()
                .zip(nodes)
                .map(|(slot, node)| match &slot.check {
                    Check::Checked(_) => Ok(()),
                    _ => Err(not_counted(node, &slot.check)),
                })
                .collect(),
        )
    }

    /// The nodes not checked yet, each with why.
    fn unchecked(&self, nodes: &[Node]) -> Vec<NodeError> {
        self.lock_slots()
            .iter()
            .zip(nodes)
            .filter(|(slot, _)| !matches!(slot.check, Check::Checked(_)))
            .map(|(slot, node)| not_counted(node, &slot.check))
            .collect()
    }

    fn lock_slots(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        // A panic while holding this lock cannot leave the slots half
        // written (each update is one assignment), so poisoning is ignored.
        self.slots
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts a check, as a task of the current runtime, of every node that
    /// is unchecked and not being checked.
    fn start_checks(self: &Arc<Self>, nodes: &Arc<[Node]>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut slots = self.lock_slots();
        for (index, slot) in slots.iter_mut().enumerate() {
            if !matches!(slot.check, Check::Unchecked(_)) {
                continue;
            }
            slot.check = Check::Checking;
            let check = CheckUnderWay {
                contact: self.clone(),
                nodes: nodes.clone(),
                index,
                ended: false,
            };
            let scripts = self.scripts;
            runtime.spawn(async move {
                let mut check = check;
                let answer = check.nodes[check.index].identify(scripts).await;
                check.record(answer);
            });
        }
    }
}

/// A check running as a task; if the task is dropped before the check ends,
/// its node goes back to unchecked.
struct CheckUnderWay {
    contact: Arc<FirstContact>,
    nodes: Arc<[Node]>,
    index: usize,
    ended: bool,
}

impl CheckUnderWay {
    /// Stores the node's identity (or why there is none) and looks for
    /// duplicates and replicas among all identities known.
    fn record(&mut self, answer: Result<Identity, NodeError>) {
        self.ended = true;
        let node = &self.nodes[self.index];
        {
            let mut slots = self.contact.lock_slots();
            let slot = &mut slots[self.index];
            let first = !slot.attempted;
            slot.attempted = true;
            slot.check = match answer {
                Ok(identity) => {
                    for refusal in &identity.refused {
                        tracing::warn!(
                            node = %node.name(),
                            %refusal,
                            "first contact: the node refused a check command; it counts, \
                             but is not checked for being a duplicate or a replica"
                        );
                    }
                    Check::Checked(identity)
                }
                Err(err) => {
                    // Warned once; a node that stays down is checked again
                    // at every lock call.
                    if first {
                        tracing::warn!(
                            node = %node.name(),
                            error = %err.kind(),
                            "first contact failed: the node's grants do not count until it is checked"
                        );
                    } else {
                        tracing::debug!(node = %node.name(), error = %err.kind(), "first contact failed again");
                    }
                    Check::Unchecked(Some(err))
                }
            };
            if let Some(reason) = misconfiguration(&self.nodes, &slots)
                && self.contact.misconfigured.set(reason.clone()).is_ok()
            {
                tracing::error!(%reason, "misconfigured lock nodes: locking is refused");
            }
        }
        self.contact.ended.notify_waiters();
    }
}

impl Drop for CheckUnderWay {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        {
            let mut slots = self.contact.lock_slots();
            let slot = &mut slots[self.index];
            if matches!(slot.check, Check::Checking) {
                slot.check = Check::Unchecked(None);
            }
        }
        self.contact.ended.notify_waiters();
    }
}

/// The error that says why a node's grants do not count.
fn not_counted(node: &Node, check: &Check) -> NodeError {
    let why = match check {
        Check::Unchecked(Some(err)) => err.kind().to_string(),
        Check::Unchecked(None) => "no check has ended yet".to_owned(),
        Check::Checking => "its check is under way".to_owned(),
        Check::Checked(_) => "checked".to_owned(),
    };
    NodeError::new(node.name().into(), NodeErrorKind::Unchecked(why))
}

/// The first misconfiguration among the checked nodes, in words.
fn misconfiguration(nodes: &[Node], slots: &[Slot]) -> Option<String> {
    let identities: Vec<(usize, &Identity)> = slots
        .iter()
        .enumerate()
        .filter_map(|(index, slot)| match &slot.check {
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

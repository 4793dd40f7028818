//! The check every connection to a node passes before a call uses it: read
//! the server, judge it, and record or hold it back.

use std::sync::Arc;
use std::time::Instant;

use super::evidence::Asked;
use super::identity::{CheckAsk, Identity, misconfiguration, read_identity};
use super::judge::{Facts, Judgment, Recovery, Since, came_back, judge, may_have_lost_keys};
use super::record::{record_incarnation, run_id_of};
use super::settings::micros;
use super::table::Standings;
use crate::answer::NodeErrorKind;
use crate::changes::Change;
use crate::connection::Connection;

impl Standings {
    /// Checks a new connection to node `index` before any call uses it (see
    /// the module docs): reads, judges, and records the incarnation of a
    /// node that counts. A server that changed while this client knew it is
    /// noted as a change ([`ServerChanges`]), so that the locks it may have
    /// lost are told. Returns the server's major version, where known. Only
    /// a failure to get any answer is an error: the connection is then not
    /// used.
    pub(crate) async fn check(
        &self,
        index: usize,
        mut connection: Connection,
    ) -> Result<Option<u32>, NodeErrorKind> {
        let started = Instant::now();
        let identity = self.read(index, &connection).await?;
        self.primary_or_failing_over(index, &identity)?;
        let read_at = Instant::now();
        let known = self.record_read(index, &identity);
        let incarnation = identity.incarnation().unwrap_or_default();
        let run_id = identity.run_id.clone().unwrap_or_default();
        if may_have_lost_keys(&identity, known.as_deref(), self.policy.trust_durable) {
            self.changes.changed(index, Change::Server(run_id.clone()));
        }
        let recovery = self.detail(index).recovery.clone();
        let judgment = self
            .judgment(&identity, known.as_deref(), recovery.as_ref(), started)
            .await;
        let judgment = (self.judge_by_mark(index, &mut connection, &identity, judgment, started))
            .await
            .inspect_err(|failure| self.record_failure(index, failure.clone()))?;
        let clock_hold = match &judgment {
            Judgment::Recovering { .. } => {
                self.restart_clock(index, &identity);
                None
            }
            _ => self.clock_at_check(index, &identity, started).await,
        };
        let mark = self.detail(index).mark.as_ref().map(|mark| mark.id.clone());
        let Judgment::Recovering {
            why,
            previous,
            since,
            lost,
        } = judgment
        else {
            self.record_own(index, &mut connection, &identity, mark.as_deref())
                .await?;
            match clock_hold {
                None => self.counts(index, incarnation, mark),
                Some(hold) => self.hold_clock(index, hold),
            }
            return Ok(identity.major_version);
        };
        let recovery = Recovery {
            run_id,
            incarnation,
            previous_run_id: known
                .as_deref()
                .map(|known| run_id_of(known).to_owned())
                .or(previous),
            why,
            came_back: came_back_since(&since, &identity, read_at),
            // A hold kept on a new connection stays what it was.
            clock: match since {
                Since::Kept(_) => recovery.and_then(|recovery| recovery.clock),
                _ => None,
            },
            lost,
            mark,
        };
        self.recovering(index, connection, recovery);
        Ok(identity.major_version)
    }

    /// Records, on node `index`'s own connection, its incarnation and data
    /// mark where its own record lacks them (a node judged to count is in
    /// its own record before its connection is handed out).
    async fn record_own(
        &self,
        index: usize,
        connection: &mut Connection,
        identity: &Identity,
        mark: Option<&str>,
    ) -> Result<(), NodeErrorKind> {
        let incarnation = identity.incarnation().unwrap_or_default();
        let incarnation = match identity.record.contains(&incarnation) {
            true => "",
            false => incarnation.as_str(),
        };
        let records = &identity.evidence.mark_record;
        let mark = mark.filter(|mark| !records.iter().any(|recorded| recorded == mark));
        let name = &self.names[index];
        record_incarnation(connection, &self.record_keys, incarnation, mark, name).await
    }

    /// The judgment of a check that read `identity` (see [`judge`]), with
    /// rule 8 asked of the records.
    pub(super) async fn judgment(
        &self,
        identity: &Identity,
        known: Option<&str>,
        recovery: Option<&Recovery>,
        started: Instant,
    ) -> Judgment {
        let facts = Facts {
            identity,
            known,
            recovery,
            grace: self.grace(),
            policy: self.policy,
        };
        match judge(&facts) {
            Judgment::AskRecords => self.ask_records(started).await,
            verdict => verdict,
        }
    }

    /// A server that answers as a replica, where the node follows failovers
    /// or this client knew a primary there, is a failover under way (or an
    /// address that leads to a replica now): the connection is not used,
    /// and the next attempt asks again. At a fixed node's first check it is
    /// a misconfiguration instead (see [`misconfiguration`]).
    pub(super) fn primary_or_failing_over(
        &self,
        index: usize,
        identity: &Identity,
    ) -> Result<(), NodeErrorKind> {
        let Some(role) = identity.role.as_deref().filter(|role| *role != "master") else {
            return Ok(());
        };
        let known = self.detail(index).identity.is_some();
        if !(known || self.follows_failovers.get(index).copied().unwrap_or(false)) {
            return Ok(());
        }
        let failure = NodeErrorKind::NotPrimary {
            role: role.to_owned(),
        };
        self.record_failure(index, failure.clone());
        Err(failure)
    }

    /// Reads node `index`'s identity on `connection`, warning of each check
    /// command it refused; a failure to get any answer is recorded.
    pub(super) async fn read(
        &self,
        index: usize,
        connection: &Connection,
    ) -> Result<Identity, NodeErrorKind> {
        // What this client knows to count goes onto every node it checks.
        let counting = self.counting_incarnations();
        let counting_marks = self.counting_marks();
        // What this client records of the node set's settings (see
        // `settings.rs`): its clock tolerance (none with clocks not
        // watched) and grace.
        let tolerance_us = match self.clock_on() {
            true => micros(self.policy.clock_tolerance),
            false => 0,
        };
        let grace_ms = u64::try_from(self.own_grace().as_millis()).unwrap_or(u64::MAX);
        let asked = CheckAsk {
            data: Asked {
                keys: &self.record_keys,
                mark: !self.policy.grace.is_zero(),
                tolerance_us,
                grace_ms,
            },
            counting: &counting,
            counting_marks: &counting_marks,
            scripts: self.scripts,
        };
        let identity = read_identity(connection, &asked).await.map_err(|err| {
            let failure = NodeErrorKind::Redis(Arc::new(err));
            self.record_failure(index, failure.clone());
            failure
        })?;
        for refusal in &identity.refused {
            tracing::warn!(
                node = %self.names[index],
                %refusal,
                "node check: the node refused a check command; it counts, without what that \
                 command checks (INFO, ROLE: duplicates, replicas, restarts, failovers; \
                 TIME: clock steps; the data mark: losses of data; INFO memory: eviction)"
            );
        }
        Ok(identity)
    }

    /// Records a check's read; returns the incarnation this client knew
    /// before.
    pub(super) fn record_read(&self, index: usize, identity: &Identity) -> Option<String> {
        let known = {
            let mut detail = self.detail(index);
            let known = detail.identity.as_ref().and_then(Identity::incarnation);
            detail.identity = Some(identity.clone());
            detail.failure = None;
            known
        };
        self.heard(index);
        self.settings.merge(identity.evidence.settings);
        let reason = {
            let identities: Vec<Option<Identity>> = (0..self.slots.len())
                .map(|i| self.detail(i).identity.clone())
                .collect();
            misconfiguration(&self.names, &identities, self.policy.allow_eviction)
        };
        if let Some(reason) = reason
            && self.misconfigured.set(reason.clone()).is_ok()
        {
            tracing::error!(%reason, "misconfigured lock nodes: locking is refused");
        }
        known
    }
}

/// When a recovering node came back, by the judgment's `since`, for a
/// check that read `identity` at `read_at`.
fn came_back_since(since: &Since, identity: &Identity, read_at: Instant) -> Instant {
    match since {
        Since::Start => identity.uptime.map_or(read_at, |up| came_back(read_at, up)),
        Since::Seen => read_at,
        Since::Kept(at) | Since::At(at) => *at,
    }
}

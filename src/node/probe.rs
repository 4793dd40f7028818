//! The probe of a node whose call timed out (it is skipped by votes until
//! it answers a `PING`), and the node's place in its client's standings.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use crate::answer::NodeErrorKind;
use crate::batch::{Asks, Judged, Witnessed};
use crate::connection::Link;
use crate::standing::Standings;
use crate::tasks;

/// How long the primary of a Sentinel node may go without answering a
/// probe before the node is connected again, through the Sentinels.
pub(super) const SILENT_PRIMARY: Duration = Duration::from_secs(1);

/// A call timed out: skip node `index` and probe it with `PING` (each
/// bounded by `timeout`) until it answers. Without a runtime to probe on, the
/// node is not skipped. A Sentinel or cluster node silent for
/// [`SILENT_PRIMARY`] is connected again (through the Sentinels or the
/// topology, which may name another primary by then), once per such span.
pub(super) fn timed_out(standing: &Arc<StandingRef>, link: Arc<Link>, timeout: Duration) {
    if !tasks::has_runtime() {
        return;
    }
    if !standing.standings.skip(standing.index) {
        return; // a probe is on its way
    }
    let probe = Probe {
        standing: standing.clone(),
    };
    tracing::debug!(node = %probe.name(), "node timed out: skipped until it answers a PING");
    tasks::spawn(async move {
        let probe = probe;
        let mut silent_since = std::time::Instant::now();
        loop {
            let ping = async {
                let handle = link.connection().await?;
                let mut connection = handle.connection;
                redis::cmd("PING")
                    .query_async::<Value>(&mut connection)
                    .await
                    .map_err(|err| NodeErrorKind::Redis(Arc::new(err)))
            };
            // Any answer, even an error, shows the node is not frozen.
            if tokio::time::timeout(timeout, ping).await.is_ok() {
                break;
            }
            // A primary that Sentinels manage and that went silent (frozen,
            // or cut off) may have been replaced: connect again, to the one
            // the Sentinels (or the cluster's topology) name now; once per
            // second of silence, so that a connection that takes longer to
            // make than a probe's wait (a cluster's: every primary, checked)
            // is not dropped as soon as it is made.
            if link.follows_failovers() && silent_since.elapsed() >= SILENT_PRIMARY {
                link.reconnect();
                silent_since = std::time::Instant::now();
            }
            tokio::time::sleep(timeout).await;
        }
        tracing::debug!(node = %probe.name(), "node answers again");
    });
}

/// The running probe of a skipped node: its end, however it comes, ends the
/// skipping.
pub(super) struct Probe {
    pub(super) standing: Arc<StandingRef>,
}

impl StandingRef {
    /// What a witness of the node says of the grants before it (see
    /// `Standings::see_witness`).
    pub(super) fn judge(&self, witnessed: &Witnessed) -> Judged {
        (self.standings.see_witness(self.index, witnessed)).map_err(Arc::new)
    }

    /// What a vote's witness reads now: the node's data mark where this
    /// client reads it, its clock where clocks are watched.
    pub(super) fn asks(&self) -> Asks {
        Asks {
            mark: self.standings.mark_key(self.index),
            clock: self.standings.clock_on(),
        }
    }

    /// Whether a vote's witness reads anything.
    pub(super) fn witnesses(&self) -> bool {
        self.standings.clock_on() || self.standings.is_marked(self.index)
    }
}

impl Probe {
    pub(super) fn name(&self) -> String {
        self.standing.standings.name(self.standing.index).to_owned()
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.standing.standings.unskip(self.standing.index);
    }
}

/// One node's place in its client's [`Standings`], in the node's own
/// [`NodeCore`] (a call clones that one `Arc`, not the `Standings` that all
/// nodes share), and in the probe of a skipped node.
#[derive(Debug)]
pub(super) struct StandingRef {
    pub(super) standings: Arc<Standings>,
    pub(super) index: usize,
}

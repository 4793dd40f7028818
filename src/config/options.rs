//! The checked options of a client ([`Config`]) and what follows from them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::RngExt;

use crate::error::BuildError;
use crate::quorum::{self, MAX_TTL};

/// The retries after the first round when no acquire timeout is set
/// ([`RedlockBuilder::DEFAULT_RETRY_COUNT`](crate::RedlockBuilder::DEFAULT_RETRY_COUNT)).
pub(super) const DEFAULT_RETRY_COUNT: u32 = 10;

/// The key of each node's fencing counter
/// ([`RedlockBuilder::DEFAULT_FENCING_COUNTER_KEY`](crate::RedlockBuilder::DEFAULT_FENCING_COUNTER_KEY)).
pub(super) const DEFAULT_FENCING_COUNTER_KEY: &str = "quorlock-fencing-counter";

/// The longest retry delay, retry jitter, per-node or connect timeout accepted.
const MAX_DELAY_OPTION: Duration = Duration::from_secs(3600);

/// The options of a client, checked by [`RedlockBuilder::validate`].
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) retry_count: Option<u32>,
    pub(crate) acquire_timeout: Option<Duration>,
    pub(crate) retry_delay: Duration,
    pub(crate) retry_jitter: Duration,
    pub(crate) node_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) key_prefix: Arc<[u8]>,
    pub(crate) auto_extend: bool,
    pub(crate) max_hold: Duration,
    /// How much validity is left when the keeper extends (`None`: a third
    /// of the TTL).
    pub(crate) renew_when_left: Option<Duration>,
    pub(crate) max_extensions: Option<u32>,
    /// Whether locks carry fencing tokens.
    pub(crate) fencing: bool,
    /// The key of each node's fencing counter (used with fencing on).
    pub(crate) fencing_counter_key: Arc<[u8]>,
    pub(crate) release_notifications: bool,
    /// Whether a waiting `lock` queues on the nodes (else it polls).
    pub(crate) queueing: bool,
    pub(crate) restart_grace: Duration,
    /// The largest clock step not seen (zero: steps are not watched).
    pub(crate) clock_tolerance: Duration,
    pub(crate) trust_durable_nodes: bool,
    pub(crate) strict_restarts: bool,
    /// Nodes whose memory policy can evict keys are taken.
    pub(crate) allow_eviction: bool,
    /// How many replicas must acknowledge a grant (`WAIT`) before it counts.
    pub(crate) replica_acks: u32,
    /// Whether metrics carry a `resource` label.
    pub(crate) metrics_resource_label: bool,
    /// Keys are laid out for Redis Cluster (some node is a cluster: see
    /// `cluster.rs`).
    pub(crate) slotted: bool,
}

impl Config {
    /// How much validity is left when the keeper extends a lock of `ttl`:
    /// [`renew_when_left`](crate::RedlockBuilder::renew_when_left), at most
    /// three quarters of the TTL, or a third of the TTL.
    pub(crate) fn renew_lead(&self, ttl: Duration) -> Duration {
        match self.renew_when_left {
            Some(lead) => lead.min(ttl / 4 * 3),
            None => ttl / 3,
        }
    }

    /// A pause of the jittered retry delay: `retry_delay ± retry_jitter`,
    /// drawn uniformly now.
    pub(crate) fn retry_pause(&self) -> Duration {
        let unit = rand::rng().random::<f64>();
        quorum::jittered(self.retry_delay, self.retry_jitter, unit)
    }

    /// Sleeps for a [`retry_pause`](Self::retry_pause), at most `at_most`,
    /// and not past `deadline`.
    ///
    /// Cancel safety: cancel safe (it only sleeps).
    pub(crate) async fn sleep_retry_pause(&self, at_most: Duration, deadline: Instant) {
        let pause = self.retry_pause().min(at_most);
        let until = Instant::now().checked_add(pause).unwrap_or(deadline);
        tokio::time::sleep_until(until.min(deadline).into()).await;
    }

    /// With fencing on, the key of the fencing counter of the lock whose
    /// key is `key`: each node's one counter, or in the slotted layout the
    /// counter of `key`'s hash tag (see `cluster.rs`); `None` with fencing
    /// off.
    pub(crate) fn counter_key(&self, key: &[u8]) -> Option<Arc<[u8]>> {
        self.counter_key_when(key, self.fencing)
    }

    /// [`counter_key`](Self::counter_key), for a lock that is `fenced`
    /// whatever the client's setting (a leader's term is its fencing token).
    pub(crate) fn counter_key_when(&self, key: &[u8], fenced: bool) -> Option<Arc<[u8]>> {
        if !fenced {
            return None;
        }
        if !self.slotted {
            return Some(self.fencing_counter_key.clone());
        }
        let mut counter = crate::cluster::live_key_start(&self.key_prefix, key);
        counter.extend_from_slice(crate::cluster::FENCE_INFIX.as_bytes());
        Some(counter.into())
    }

    /// The resource name in `key`, a key this client made: what follows
    /// the prefix (in the slotted layout, without the braces the name was
    /// wrapped in, if it was).
    pub(crate) fn resource_of<'a>(&self, key: &'a [u8]) -> &'a [u8] {
        let name = key.get(self.key_prefix.len()..).unwrap_or(key);
        if self.slotted
            && let Some(inner) = name
                .strip_prefix(b"{")
                .and_then(|name| name.strip_suffix(b"}"))
            && crate::cluster::slotted_key(&self.key_prefix, inner).is_ok_and(|made| made == key)
        {
            return inner;
        }
        name
    }

    /// How long a waiting writer's intent lives after the round that left it,
    /// in ms: the waiter lifetime, or three retry delays (with their
    /// jitter) when longer, so that the writer's next round renews it first.
    pub(crate) fn intent_ms(&self) -> u64 {
        let rounds = (self.retry_delay + self.retry_jitter).saturating_mul(3);
        let lifetime = crate::queue::entries::WAITER_LIFETIME.max(rounds);
        u64::try_from(lifetime.as_millis()).unwrap_or(u64::MAX)
    }

    /// Retries allowed after the first round: the configured count; with none
    /// configured, the default, or no limit when an acquire timeout bounds the wait.
    /// Zero makes `lock` one round; otherwise [`patience`](Self::patience) bounds it.
    pub(crate) fn retries(&self) -> u32 {
        match (self.retry_count, self.acquire_timeout) {
            (Some(count), _) => count,
            (None, Some(_)) => u32::MAX,
            (None, None) => DEFAULT_RETRY_COUNT,
        }
    }

    /// How long `lock` waits, from the call: the acquire timeout, or
    /// `retry_count × retry_delay` (2 s with the defaults), whichever is
    /// shorter when both are set; at most an hour, and at least one round.
    pub(crate) fn patience(&self) -> Duration {
        let by_count = self
            .retry_delay
            .saturating_mul(self.retries())
            .min(MAX_PATIENCE);
        match (self.retry_count, self.acquire_timeout) {
            (None, Some(timeout)) => timeout.min(MAX_PATIENCE),
            (Some(_), Some(timeout)) => timeout.min(by_count),
            (_, None) => by_count,
        }
    }
}

/// The longest a `lock` call waits, whatever the options say.
const MAX_PATIENCE: Duration = Duration::from_secs(3600);

impl Config {
    /// Refuses what the slotted layout cannot serve (see `cluster.rs`): a
    /// key prefix that would take the resources' hash tags, and one fencing
    /// counter for every resource.
    pub(super) fn check_slotted(&self) -> Result<(), BuildError> {
        if let Some(problem) = crate::cluster::prefix_problem(&self.key_prefix) {
            return Err(invalid_option("key_prefix", &problem));
        }
        if *self.fencing_counter_key != *DEFAULT_FENCING_COUNTER_KEY.as_bytes() {
            return Err(invalid_option(
                "fencing_counter_key",
                "with a Redis Cluster node, each hash tag has its own fencing counter \
                 (<prefix>{<tag>}quorlock-fence): one counter for every resource would \
                 live in one slot",
            ));
        }
        Ok(())
    }

    /// Refuses options out of range.
    pub(super) fn check(&self) -> Result<(), BuildError> {
        if !(0.0..1.0).contains(&self.drift_factor) {
            return Err(BuildError::InvalidDriftFactor {
                value: self.drift_factor,
            });
        }
        if self.fencing_counter_key.is_empty() {
            return Err(invalid_option("fencing_counter_key", "must not be empty"));
        }
        if self.renew_when_left.is_some_and(|left| left.is_zero()) {
            return Err(invalid_option("renew_when_left", "must be above zero"));
        }
        if self.node_timeout.is_zero() {
            return Err(invalid_option("node_timeout", "must be above zero"));
        }
        if self.connect_timeout.is_zero() {
            return Err(invalid_option("connect_timeout", "must be above zero"));
        }
        if self.restart_grace > MAX_TTL {
            return Err(invalid_option("restart_grace", "must be at most 365 days"));
        }
        if self.clock_tolerance > Duration::from_secs(3600) {
            return Err(invalid_option("clock_tolerance", "must be at most 1 hour"));
        }
        for (option, value) in [
            ("node_timeout", self.node_timeout),
            ("connect_timeout", self.connect_timeout),
            ("retry_delay", self.retry_delay),
            ("retry_jitter", self.retry_jitter),
        ] {
            if value > MAX_DELAY_OPTION {
                return Err(invalid_option(option, "must be at most one hour"));
            }
        }
        Ok(())
    }
}

/// The error for an option out of its range.
fn invalid_option(option: &'static str, reason: &str) -> BuildError {
    BuildError::InvalidOption {
        option,
        reason: reason.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keeper's lead: a third of the TTL by default; the configured
    /// one, capped at three quarters of the TTL.
    #[test]
    fn the_keeper_extends_a_third_of_the_ttl_before_the_end_unless_told() {
        let ttl = Duration::from_millis(1200);
        assert_eq!(
            Config::default().renew_lead(ttl),
            Duration::from_millis(400)
        );
        let early = Config {
            renew_when_left: Some(Duration::from_millis(700)),
            ..Config::default()
        };
        assert_eq!(early.renew_lead(ttl), Duration::from_millis(700));
        let longer_than_the_ttl = Config {
            renew_when_left: Some(Duration::from_secs(10)),
            ..Config::default()
        };
        assert_eq!(
            longer_than_the_ttl.renew_lead(ttl),
            Duration::from_millis(900)
        );
    }
}

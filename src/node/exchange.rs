//! What a node's calls share ([`NodeCore`]), and one exchange on its
//! connection: connecting first if needed, with the fallbacks a node may
//! need, and the acknowledgement of its replicas.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::{ErrorKind, RedisError};

use super::probe::StandingRef;
use super::reply::{Exchanged, Reply, Witness, is_syntax_error, unexpected};
use super::send::{
    AcquireCall, ReadCall, first_write, read_unscripted, run, run_witnessed, seeded, send_set_nx,
};
use super::wire::{Call, read_script};
use crate::answer::{Answer, NodeError, NodeErrorKind};
use crate::batch::{Batches, Judged};
use crate::connection::{self, Connection, Link};
use crate::read_round;
use crate::scripts;

/// What a node's calls share.
#[derive(Debug)]
pub(super) struct NodeCore {
    /// `host:port` (or the socket path), for errors and logs; never credentials.
    pub(super) name: Arc<str>,
    pub(super) link: Arc<Link>,
    pub(super) timeout: Duration,
    pub(super) connect_timeout: Duration,
    /// Set once the server refused `SET NX GET` (Redis < 7.0).
    pub(super) legacy_set: Arc<AtomicBool>,
    /// Set once the server refused a reader's round without a script (see
    /// `read_round.rs`): its rounds run the script from then on.
    pub(super) reads_scripted: AtomicBool,
    /// Whether its votes count (in the standings of all the client's nodes).
    pub(super) standing: Arc<StandingRef>,
    /// How many replicas must acknowledge a grant before it counts (0: off).
    pub(super) replica_acks: u32,
    /// The node's witnessed votes, sent in batches (see `batch.rs`).
    pub(super) batches: Arc<Batches>,
}

impl NodeCore {
    /// A grant, once `replica_acks` of the node's replicas acknowledged it
    /// (`WAIT`, on the connection that made it, ending a little before the
    /// call's `deadline`, so that a slow acknowledgement is an answer and
    /// not a timeout that would mark the node unresponsive); with fewer, a
    /// failure that says so.
    pub(super) async fn acknowledged(
        &self,
        granted: Answer,
        deadline: std::time::Instant,
    ) -> Result<Answer, NodeErrorKind> {
        let mut connection = self.link.connection().await?.connection;
        // Three quarters of what is left, at least 1 ms (`WAIT` with 0
        // would block until the replicas answer, however long).
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let timeout_ms = u64::try_from((left * 3 / 4).as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let acknowledged: i64 = redis::cmd("WAIT")
            .arg(self.replica_acks)
            .arg(timeout_ms)
            .query_async(&mut connection)
            .await
            .map_err(|err| NodeErrorKind::Redis(Arc::new(err)))?;
        if acknowledged >= i64::from(self.replica_acks) {
            return Ok(granted);
        }
        let kind = NodeErrorKind::ReplicasBehind {
            acknowledged: u32::try_from(acknowledged).unwrap_or(0),
            wanted: self.replica_acks,
        };
        Ok(Answer::Failed(NodeError::new(self.name.clone(), kind)))
    }

    /// The answer in `exchanged`, read as `reply`, with what the node's
    /// witness, read after it (if it was), showed.
    pub(super) fn answer(&self, exchanged: Exchanged, reply: Reply) -> Answer {
        let answer = (reply.read(exchanged.reply, exchanged.legacy))
            .unwrap_or_else(|value| Answer::Failed(unexpected(self.name.clone(), &value)));
        match exchanged.witness {
            Witness::Unread => answer,
            Witness::Judged(judged) => self.witness_checked(answer, judged),
        }
    }

    /// A vote's `answer` with what the node's witness, read after it,
    /// showed (`judged`, see `Standings::see_witness`): a grant of a node
    /// whose data mark changed, or whose clock stepped or may have, does
    /// not count.
    pub(super) fn witness_checked(&self, answer: Answer, judged: Judged) -> Answer {
        match judged {
            Err(reason) if answer.is_granted() => {
                let kind = NodeErrorKind::NotCounted(reason);
                Answer::Failed(NodeError::new(self.name.clone(), kind))
            }
            _ => answer,
        }
    }

    /// Runs `call` on the link's connection (connecting first if needed),
    /// with its fallbacks; a call that shows the connection broken marks it
    /// so. The reply comes with whether the legacy command gave it.
    pub(super) async fn exchange(&self, call: &Call) -> Result<Exchanged, NodeErrorKind> {
        self.exchange_with(call, false).await
    }

    /// [`exchange`](Self::exchange), `witnessed`: with the node's witness
    /// (its data mark and clock) read after the call, in the same request
    /// or batch (see `batch.rs`).
    pub(super) async fn exchange_with(
        &self,
        call: &Call,
        witnessed: bool,
    ) -> Result<Exchanged, NodeErrorKind> {
        // In a block of its own: the handle, taken apart, is not kept in
        // this future across the call (every node call's future is boxed,
        // and a box above 1 KiB costs the allocator several times more).
        let (id, mut connection) = {
            let handle = self.link.connection().await?;
            (handle.id(), handle.connection)
        };
        let outstanding = self.link.outstanding();
        let answer = self.fallbacks(&mut connection, call, witnessed).await;
        drop(outstanding);
        if let Err(err) = &answer
            && connection::is_broken(err)
        {
            self.link.broken(id);
        }
        answer.map_err(|err| NodeErrorKind::Redis(Arc::new(err)))
    }

    /// `call`'s request, and its fallback where the node refuses it: the
    /// script loaded on `NOSCRIPT` (a node that restarted, or ran `SCRIPT
    /// FLUSH`), `SET NX` instead of `SET NX GET` before Redis 7.0; a fenced
    /// grant whose counter the node had lost is seeded ([`seeded`]).
    pub(super) async fn fallbacks(
        &self,
        connection: &mut Connection,
        call: &Call,
        witnessed: bool,
    ) -> Result<Exchanged, RedisError> {
        let (lock, ttl_ms, counter_key, check) = match call {
            Call::Command { cmd, script } if witnessed => {
                return Box::pin(run_witnessed(connection, cmd, *script, &self.batches)).await;
            }
            Call::Command { cmd, script } => {
                return run(connection, cmd, *script)
                    .await
                    .map(|reply| Exchanged::plain(reply, false));
            }
            Call::Read {
                lock,
                keys,
                ttl_ms,
                first,
                prune,
            } => {
                let read = ReadCall {
                    token: &lock.token,
                    keys,
                    ttl_ms: *ttl_ms,
                    scripted: !*first || *prune,
                    prune: *prune,
                };
                return Box::pin(self.read_hold(connection, read, witnessed)).await;
            }
            Call::Acquire {
                lock,
                ttl_ms,
                counter_key,
                check,
            } => (lock, *ttl_ms, counter_key.as_deref(), check.as_deref()),
        };
        let acquired = AcquireCall {
            lock,
            key: check.map_or(&lock.key, |keys| &keys.write),
            ttl_ms,
            counter_key,
            check,
            witnessed: witnessed.then_some(&self.batches),
        };
        match (counter_key, check) {
            (None, None) => self.set_nx(connection, &acquired).await,
            (_, Some(keys)) => {
                let exchanged = Box::pin(self.set_nx(connection, &acquired)).await?;
                Box::pin(first_write(connection, lock, keys, exchanged)).await
            }
            // Boxed: the pipeline and the seeding would make every node
            // call's future (one type for all requests) a third larger.
            (Some(counter_key), None) => {
                let mut exchanged = Box::pin(self.set_nx(connection, &acquired)).await?;
                let legacy = exchanged.legacy;
                let seeding = seeded(connection, lock, counter_key, exchanged.reply, legacy);
                exchanged.reply = Box::pin(seeding).await?;
                Ok(exchanged)
            }
        }
    }

    /// [`send_set_nx`], with `SET NX GET` first unless this node refused it
    /// before; its reply, with whether the legacy `SET NX` gave it.
    pub(super) async fn set_nx(
        &self,
        connection: &mut Connection,
        call: &AcquireCall<'_>,
    ) -> Result<Exchanged, RedisError> {
        let legacy = self.legacy_set.load(Ordering::Relaxed);
        match send_set_nx(connection, call, !legacy).await {
            Err(err) if !legacy && is_syntax_error(&err) => {
                tracing::debug!("SET NX GET refused (Redis < 7.0): using SET NX on this node");
                self.legacy_set.store(true, Ordering::Relaxed);
                // Boxed: once per node at most, and it would otherwise make
                // every node call's future larger.
                let exchanged = Box::pin(send_set_nx(connection, call, false)).await;
                exchanged.map(|exchanged| Exchanged {
                    legacy: true,
                    ..exchanged
                })
            }
            exchanged => exchanged.map(|exchanged| Exchanged {
                legacy,
                ..exchanged
            }),
        }
    }
}

impl NodeCore {
    /// A reader's round (see [`Call::Read`]): without a script where the
    /// node allows it, else (and where that missed, or the node refused
    /// it) the read script.
    pub(super) async fn read_hold(
        &self,
        connection: &mut Connection,
        read: ReadCall<'_>,
        witnessed: bool,
    ) -> Result<Exchanged, RedisError> {
        if let Some(node_clock_us) = self.read_aim(connection, &read, witnessed) {
            let ends_ms = read_round::aim(node_clock_us, read.ttl_ms);
            match read_unscripted(connection, &self.batches, &read, ends_ms).await {
                Ok(Some(exchanged)) => return Ok(exchanged),
                Ok(None) => tracing::debug!(
                    node = %self.name,
                    "a reader's entry was aimed short of the node's clock: the read script decides"
                ),
                Err(err) if matches!(err.kind(), ErrorKind::Server(_)) => {
                    // `ERR`: the commands or their flags are unknown there.
                    if err.code() == Some("ERR") {
                        tracing::debug!(
                            node = %self.name,
                            "a reader's round without a script refused ({err}): \
                             the read script from now on"
                        );
                        self.reads_scripted.store(true, Ordering::Relaxed);
                    }
                }
                Err(err) => return Err(err),
            }
        }
        let cmd = read_script(read.keys, read.token, read.ttl_ms, read.prune);
        if witnessed {
            Box::pin(run_witnessed(
                connection,
                &cmd,
                Some(&scripts::READ),
                &self.batches,
            ))
            .await
        } else {
            let reply = run(connection, &cmd, Some(&scripts::READ)).await?;
            Ok(Exchanged::plain(reply, false))
        }
    }

    /// The most the node's clock reads now (µs since the Unix epoch), to aim
    /// a reader's round without a script at, where the node allows one: a
    /// single server (not a cluster) of Redis 7.0 or later that has not
    /// refused one, its clock read after the round (`witnessed`) and read
    /// before, for a round not `scripted`.
    pub(super) fn read_aim(
        &self,
        connection: &Connection,
        read: &ReadCall<'_>,
        witnessed: bool,
    ) -> Option<i64> {
        let allowed = witnessed
            && !read.scripted
            && matches!(connection, Connection::One(_))
            && !self.legacy_set.load(Ordering::Relaxed)
            && !self.reads_scripted.load(Ordering::Relaxed);
        let standing = &self.standing;
        allowed
            .then(|| standing.standings.node_clock_at_most(standing.index))
            .flatten()
    }
}

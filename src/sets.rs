//! Locks on several resources: [`lock_all`](crate::Redlock::lock_all) and
//! [`try_lock_all`](crate::Redlock::try_lock_all).
//!
//! A lock on several resources is one lock with several keys and one
//! token. It is taken in one of two ways:
//!
//! - **At once**: one round runs one script per node
//!   (`scripts::ACQUIRE_ALL`) that sets every key, with the same TTL, only
//!   when none of them exists there; otherwise it sets nothing. This is
//!   `try_lock_all`, and the first round of every `lock_all` (free when no
//!   member is taken or waited for).
//! - **In the queues**: when that round is lost, `lock_all` takes a plain
//!   lock on each member, one after another in byte order of their keys,
//!   each waiting in that key's queue as a plain [`lock`](crate::Redlock::lock)
//!   does (unfenced, each with a fresh token, kept alive while the call
//!   waits for the next). Holding them all, it makes one **gather** round
//!   (`scripts::GATHER`): on each node, only when every key is absent or
//!   holds the caller's own token for it, every key is set to the set's one
//!   new token, with the TTL; otherwise nothing is set. The plain locks are
//!   then dropped, which releases them only where the gather did not
//!   replace them. A lost gather round is released as any lost round is,
//!   the plain locks with it, and the call starts again in the queues after
//!   the jittered retry delay, until its patience ends.
//!
//! Either way the lock is won only with a quorum of grants of one round and
//! validity left after it, and with fencing on it is fenced as a plain lock
//! is (one counter per node, incremented by the granting script).
//!
//! # Why two holders of one key are never both valid
//!
//! Both kinds of grant set every key of the set on a node in one script
//! only when none of them holds any other holder's token there: an
//! all-at-once grant when every key is absent, a gather when every key is
//! absent or holds a token that only this caller knows (its own plain lock
//! on that key, made for this attempt). To every other holder that is a
//! grant of free keys, so the mutex's argument carries over key by key:
//! any other holder `H` of key `k` (a plain lock, or another set that
//! shares `k`) needed a quorum of nodes holding `H`'s token for `k`; two
//! quorums share a node `m`. If `H`'s grant at `m` came first, `k` held
//! `H`'s token there until its TTL (past `H`'s validity) or `H`'s release
//! (after which `H` is not valid), so `m` refused the set meanwhile; if the
//! set's grant came first, `k` held the set's token until its TTL (past the
//! set's validity) or its release, and `H` could be granted at `m` only
//! after that. It assumes what the mutex assumes (independent nodes,
//! bounded clock drift, no loss of a key on a node that counts), and that
//! a set's keys live on one server per node (a standalone or Sentinel
//! node; on a Redis Cluster node the call refuses keys of different slots).
//!
//! The plain locks of the queued way only choose *when* to gather: they
//! keep others from being granted the keys while the caller waits for the
//! rest. They grant nothing themselves. If one is lost meanwhile (it
//! expired on a node, another caller holds the key there), the gather is
//! refused on that node, which only withholds the lock. Their tokens are
//! fresh for each attempt, never the set's: a lost round's release may
//! reach a node late, and it must not match a key a later round set.
//!
//! Nodes that disagree (one refuses because another holder has one key
//! there, one has a key of another type) refuse the whole set there, which
//! only withholds the lock. The extend script (`EXTEND_ALL`) votes yes
//! only where every key still holds our token, and resets them together;
//! the release script (`RELEASE_ALL`) gives up each key that holds our
//! token, handing it on to that key's queued waiters (the gather keeps a
//! key's waiters' mark) like a plain release.
//!
//! # No deadlock, no starvation
//!
//! Every `lock_all` takes its plain locks in one order, the byte order of
//! the keys, whatever order the caller named them in, so no cycle of
//! waiters can form: a call waiting for key `k` holds only keys before
//! `k`, and a plain `lock` waits holding nothing. A call that dies stops
//! renewing its plain locks, which expire within their TTL. (A caller
//! that already holds one of a set's resources when it calls `lock_all`
//! waits for itself until its patience ends: hold none of them.)
//!
//! In each member's queue the call is one waiter among the others, served
//! in turn, so a set is not starved by plain waiters on one of its
//! members. The price: while it waits for later members, the members it
//! holds are held, and their own waiters wait behind it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::acquire::{
    Fencing, How, Metered, Waits, Wanted, acquire_metered, acquire_with_meter, kind, retry_delay,
};
use crate::engine::Engine;
use crate::error::{Error, Result, show_resources};
use crate::guard::LockGuard;
use crate::meter::Meter;
use crate::request::{OtherKeys, Shape};

/// Takes the locks on every one of `resources` at once, all or none: one
/// round for `try_lock_all` ([`Waits::No`]), or, for `lock_all`, that round
/// and then the queues of its keys until the call's patience ends (see the
/// module docs).
pub(crate) async fn acquire_all(
    engine: &Arc<Engine>,
    resources: &[&[u8]],
    ttl: Duration,
    waits: Waits,
) -> Result<LockGuard> {
    let Members { keys, names } = members(engine, resources)?;
    let Some((key, others)) = keys.split_first() else {
        return Err(Error::InvalidResource {
            reason: "no resource named".into(),
        });
    };
    if others.is_empty() {
        return acquire_metered(
            engine,
            &names,
            Wanted::new(key.clone(), Shape::One),
            ttl,
            How::plain(engine, waits),
        )
        .await;
    }
    let shape = Shape::All(OtherKeys::from(others));
    if waits == Waits::No {
        return acquire_metered(
            engine,
            &names,
            Wanted::new(key.clone(), shape),
            ttl,
            How::plain(engine, Waits::No),
        )
        .await;
    }
    let called = Instant::now();
    let resource_label = engine.config.metrics_resource_label;
    let meter = Meter::new(
        kind(&shape),
        resource_label.then(|| show_resources(&names).into()),
    );
    let set = Set {
        engine,
        keys: &keys,
        names: &names,
        shape,
        ttl,
        meter: meter.clone(),
    };
    let taken = set.wait_and_gather(called).await;
    match &taken {
        Ok(_) => meter.acquired(called),
        Err(err) => meter.failed(err),
    }
    taken
}

/// The members of a lock on several resources: their keys and names, in
/// byte order of the keys, none twice (the nodes see one set whatever
/// order the caller named them in).
struct Members<'a> {
    keys: Vec<Arc<[u8]>>,
    names: Vec<&'a [u8]>,
}

/// The members named by `resources`, checked: at most
/// [`MAX_RESOURCES`](crate::engine::MAX_RESOURCES), and on a Redis Cluster
/// node all in one slot.
fn members<'a>(engine: &Engine, resources: &[&'a [u8]]) -> Result<Members<'a>> {
    let mut named = resources
        .iter()
        .map(|resource| Ok((engine.key(resource)?, *resource)))
        .collect::<Result<Vec<_>>>()?;
    named.sort();
    named.dedup_by(|a, b| a.0 == b.0);
    if named.len() > crate::engine::MAX_RESOURCES {
        return Err(Error::InvalidResource {
            reason: format!(
                "{} resources named, more than the {} one lock takes",
                named.len(),
                crate::engine::MAX_RESOURCES
            ),
        });
    }
    let (keys, names): (Vec<_>, Vec<_>) = named.into_iter().unzip();
    if engine.config.slotted {
        one_slot(&keys)?;
    }
    Ok(Members { keys, names })
}

/// In the slotted layout (a Redis Cluster node), a lock on several
/// resources runs one script over all its keys, which the cluster runs
/// only within one slot: the keys must share a hash tag.
fn one_slot(keys: &[Arc<[u8]>]) -> Result<()> {
    let mut slots = keys.iter().map(|key| crate::cluster::slot(key));
    let first = slots.next();
    if slots.all(|slot| Some(slot) == first) {
        return Ok(());
    }
    Err(Error::InvalidResource {
        reason: "with a Redis Cluster node, the resources of one lock must share a slot: give \
                 them one hash tag, as in {order:42}:items and {order:42}:payment"
            .into(),
    })
}

/// A `lock_all` call that waits: its keys (two or more, in byte order),
/// their names, and the lock's shape.
struct Set<'a> {
    engine: &'a Arc<Engine>,
    keys: &'a [Arc<[u8]>],
    names: &'a [&'a [u8]],
    shape: Shape,
    ttl: Duration,
    meter: Meter,
}

impl Set<'_> {
    /// Takes the set for a call made at `called`: at once, or in the queues
    /// and a gather, until the call's patience ends.
    async fn wait_and_gather(&self, called: Instant) -> Result<LockGuard> {
        let config = &self.engine.config;
        let deadline = called
            .checked_add(config.patience())
            .unwrap_or_else(|| called + Duration::from_secs(86_400));
        let at_once = self.round(How::plain(self.engine, Waits::No), called).await;
        match at_once {
            Err(err) if worth_another(&err) => {}
            taken => return taken,
        }
        loop {
            let held = self.hold_each(deadline).await?;
            let tokens = held.iter().map(|plain| plain.lock_id().token.clone());
            held.iter().for_each(LockGuard::stop_keeping);
            let gathered = self.round(How::gathering(tokens.collect()), Instant::now());
            let gathered = gathered.await;
            // Released only where the gather did not replace them.
            drop(held);
            match gathered {
                Err(err) if worth_another(&err) && Instant::now() < deadline => {
                    retry_delay(config, deadline).await;
                }
                taken => return taken,
            }
        }
    }

    /// One round for the whole set, as `how` says, for a call made at `called`.
    async fn round(&self, how: How, called: Instant) -> Result<LockGuard> {
        let wanted = Wanted::new(self.keys[0].clone(), self.shape.clone());
        let metered = Metered::new(called, self.meter.clone());
        acquire_with_meter(self.engine, self.names, wanted, self.ttl, how, metered).await
    }

    /// A plain lock on each key, in order, each waiting in the key's queue
    /// until `deadline`, and each kept alive once held. The first that
    /// fails ends the call with its error, and the ones held are released.
    async fn hold_each(&self, deadline: Instant) -> Result<Vec<LockGuard>> {
        let mut held = Vec::with_capacity(self.keys.len());
        for (key, name) in self.keys.iter().zip(self.names) {
            let patience = deadline.saturating_duration_since(Instant::now());
            let how = How::waiting(patience, Fencing::Never);
            let wanted = Wanted::new(key.clone(), Shape::One);
            let metered = Metered::new(Instant::now(), self.meter.clone());
            let plain =
                acquire_with_meter(self.engine, &[name], wanted, self.ttl, how, metered).await?;
            plain.keep_alive()?;
            held.push(plain);
        }
        Ok(held)
    }
}

/// Whether a lost round is worth another attempt: the nodes refused, too
/// few answered, or the round took too long; not bad input or a
/// misconfiguration.
fn worth_another(err: &Error) -> bool {
    matches!(
        err,
        Error::Contended { .. } | Error::Unavailable { .. } | Error::NoValidity { .. }
    )
}

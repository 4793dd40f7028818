//! Which lock keys this client last found taken ([`Busy`]): a hint that
//! chooses a `lock` call's first round, never what a node grants.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};

/// How many lock keys [`Busy`] remembers (more share slots: a wrong guess
/// only costs a round its cheaper form).
const BUSY_SLOTS: usize = 64;

/// Which lock keys this client last found taken, or is making a plain
/// first round on: a `lock` call on one of them skips the plain `SET NX`
/// first round (it would find the key held or handed on, or would race
/// the call already making one) and runs the queue script at once, which
/// joins the queue or takes a free lock just the same. A hint, never a
/// decision: it changes which of two correct rounds is sent, not what a
/// node grants. A key whose
/// slot another shares may be guessed wrong, costing a round its cheaper
/// form; the next first round corrects it.
#[derive(Debug)]
pub(crate) struct Busy {
    /// This client's random start for the keys' hash.
    seed: u64,
    slots: [AtomicU64; BUSY_SLOTS],
}

impl Busy {
    pub(crate) fn new() -> Self {
        Busy {
            seed: RandomState::new().hash_one(0_u64),
            slots: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// The slot of `key` and the mark it leaves there (never 0). The hash
    /// takes eight bytes a step (a multiply and a rotation each) from a
    /// random start, not SipHash nor byte-wise FNV: it is computed twice per
    /// `lock` call, and a key made to share a slot only costs a round its
    /// cheaper form.
    fn slot(&self, key: &[u8]) -> (&AtomicU64, u64) {
        const MIX: u64 = 0x9e37_79b9_7f4a_7c15;
        let step = |hash: u64, word: u64| (hash ^ word).wrapping_mul(MIX).rotate_left(29);
        let mut words = key.chunks_exact(8);
        let mut hash = self.seed ^ key.len() as u64;
        for word in &mut words {
            let mut bytes = [0; 8];
            bytes.copy_from_slice(word);
            hash = step(hash, u64::from_le_bytes(bytes));
        }
        let mut tail = [0; 8];
        tail[..words.remainder().len()].copy_from_slice(words.remainder());
        let hash = step(hash, u64::from_le_bytes(tail)).wrapping_mul(MIX) | 1;
        // The high bits mix the most; the remainder is below BUSY_SLOTS,
        // so it fits any usize.
        let index = usize::try_from((hash >> 32) % BUSY_SLOTS as u64).unwrap_or(0);
        (&self.slots[index], hash)
    }

    /// Whether the last first round of a `lock` call on `key` found it taken.
    pub(crate) fn is_busy(&self, key: &[u8]) -> bool {
        let (slot, mark) = self.slot(key);
        slot.load(Ordering::Relaxed) == mark
    }

    /// Notes what a `lock` call's first round on `key` found (`taken` also
    /// while it is under way).
    pub(crate) fn note(&self, key: &[u8], taken: bool) {
        let (slot, mark) = self.slot(key);
        if taken {
            slot.store(mark, Ordering::Relaxed);
        } else if slot.load(Ordering::Relaxed) == mark {
            // Only our own mark goes: another key's stays. (A plain load
            // first: the common case, nothing to clear, writes nothing.)
            let _ = slot.compare_exchange(mark, 0, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_keys_are_remembered_until_found_free() {
        let busy = Busy::new();
        assert!(!busy.is_busy(b"a"));
        busy.note(b"a", true);
        assert!(busy.is_busy(b"a"));
        // Another key found free leaves the mark of `a` alone.
        let other = (0..1_000u32)
            .map(|n| format!("other-{n}"))
            .find(|name| std::ptr::eq(busy.slot(name.as_bytes()).0, busy.slot(b"a").0))
            .expect("some name shares a slot among 1,000");
        busy.note(other.as_bytes(), false);
        assert!(busy.is_busy(b"a"));
        assert!(!busy.is_busy(other.as_bytes()));
        busy.note(b"a", false);
        assert!(!busy.is_busy(b"a"));
    }

    #[test]
    fn keys_spread_over_the_busy_slots() {
        let busy = Busy::new();
        let used: std::collections::HashSet<*const AtomicU64> = (0..1_000u32)
            .map(|n| busy.slot(format!("stock:item-{n}").as_bytes()).0 as *const _)
            .collect();
        assert!(used.len() >= 60, "1,000 keys in {} of 64 slots", used.len());
    }
}

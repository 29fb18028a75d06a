//! The durable image of a persistent region: what it would keep through a power cut, which
//! regions count as persistent, and what a cut does to the bytes not made durable
//! (docs/persistence.md). The model that cuts a node is `power.rs`.

use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};

use rpma_mem::{Memory, MemoryKind, VolatileSlice};

/// Which registered regions the persistence model treats as persistent memory
/// ([`MockFabricBuilder::persistent_memory`](crate::MockFabricBuilder::persistent_memory)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PersistentMemory {
    /// Regions on a devdax mapping or a `MAP_SYNC` file mapping (what is persistent on a real
    /// node); any other memory is DRAM and comes back from a power cut as nothing.
    Mappings,
    /// Every region registered on the fabric, whatever its memory (a test's stand-in for pmem).
    All,
}

/// What a power cut does to bytes that were written (and maybe acknowledged) but not made
/// durable ([`MockFabricBuilder::unflushed`](crate::MockFabricBuilder::unflushed)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unflushed {
    /// All lost: a region comes back exactly as it was last made durable (the default, and the
    /// strictest: a missing flush always shows).
    Lost,
    /// All kept: a region comes back as its peers last saw it (a platform whose CPU caches and
    /// NIC buffers are inside the persistence domain, e.g. eADR).
    Kept,
    /// Torn: each aligned 8-byte word ([`Unflushed::WORD`], by memory address) independently old (durable)
    /// or new (as last seen), drawn from `seed`, so the case replays: the failure atomicity x86
    /// persistent memory promises (8 aligned bytes, not a cache line). An aligned 8-byte write
    /// never tears.
    Torn {
        /// The seed of the draws (printed with every cut and every crash point).
        seed: u64,
    },
    /// Torn per 64-byte line ([`Unflushed::LINE`], by memory address): each line independently old or
    /// new, drawn from `seed` (coarser than [`Unflushed::Torn`]: what a platform that writes
    /// whole lines back would leave).
    TornLines {
        /// The seed of the draws.
        seed: u64,
    },
}

impl Unflushed {
    /// The cache line [`Unflushed::TornLines`] decides on.
    pub const LINE: usize = 64;

    /// The unit [`Unflushed::Torn`] decides on: the 8 aligned bytes whose failure atomicity x86
    /// persistent memory promises.
    pub const WORD: usize = 8;

    /// The seed of a torn policy.
    #[must_use]
    pub const fn seed(self) -> Option<u64> {
        match self {
            Self::Torn { seed } | Self::TornLines { seed } => Some(seed),
            Self::Lost | Self::Kept => None,
        }
    }

    /// The same policy with `seed` (a torn one; the others have none).
    #[must_use]
    pub const fn with_seed(self, seed: u64) -> Self {
        match self {
            Self::Torn { .. } => Self::Torn { seed },
            Self::TornLines { .. } => Self::TornLines { seed },
            other => other,
        }
    }
}

impl fmt::Display for Unflushed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Lost => f.write_str("unflushed bytes lost"),
            Self::Kept => f.write_str("unflushed bytes kept"),
            Self::Torn { seed } => write!(f, "unflushed bytes torn per 8-byte word, seed {seed:#x}"),
            Self::TornLines { seed } => write!(f, "unflushed bytes torn per 64-byte line, seed {seed:#x}"),
        }
    }
}

/// The most remote writes a region notes for the next RDMA Read (APM) before it notes their
/// envelope instead (a write-only stream stays bounded; docs/persistence.md).
const NOTED: usize = 1024;

/// The durable image of a persistent region, and the remote writes executed on it since the
/// last RDMA Read (what a read after them makes durable: APM).
pub(crate) struct Durable {
    state: Mutex<DurableState>,
}

struct DurableState {
    image: Box<[u8]>,
    /// `(offset, len, connection)` of the remote writes not yet made durable by a read on their
    /// connection, adjacent ones of one connection merged.
    noted: Vec<(usize, usize, u32)>,
}

impl Durable {
    /// A region's image when it is registered: its bytes then (memory that held data before,
    /// e.g. a region brought back by a power cut, holds it durably).
    pub(crate) fn of(visible: VolatileSlice<'_>) -> Self {
        Self { state: Mutex::new(DurableState { image: visible.to_vec().into_boxed_slice(), noted: Vec::new() }) }
    }

    fn lock(&self) -> MutexGuard<'_, DurableState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Copies `[offset, offset + len)` of what is seen now into the image (clamped to the
    /// region: the caller checked the range).
    pub(crate) fn make_durable(&self, visible: VolatileSlice<'_>, offset: usize, len: usize) {
        copy_in(&mut self.lock().image, visible, offset, len);
    }

    /// A remote write of `[offset, offset + len)` executed, sent on connection `from` (the queue
    /// pair number that identifies the connection at this region's fabric).
    pub(crate) fn note_write(&self, offset: usize, len: usize, from: u32) {
        let noted = &mut self.lock().noted;
        // Merged with the last range when it is of the same connection and touches or overlaps
        // it (a log's appends, a slot written again).
        if let Some((o, l, _)) =
            noted.last_mut().filter(|(o, l, c)| *c == from && offset <= *o + *l && *o <= offset + len)
        {
            let end = (*o + *l).max(offset + len);
            *o = (*o).min(offset);
            *l = end - *o;
        } else if noted.len() >= NOTED {
            // The connection's ranges become their envelope (a superset: more is made durable by
            // its next read than it wrote).
            let mine = noted.iter().filter(|r| r.2 == from);
            let start = mine.clone().map(|r| r.0).min().unwrap_or(offset).min(offset);
            let end = mine.map(|r| r.0 + r.1).max().unwrap_or(0).max(offset + len);
            noted.retain(|r| r.2 != from);
            noted.push((start, end - start, from));
        } else {
            noted.push((offset, len, from));
        }
    }

    /// An RDMA Read executed on connection `from`: the writes noted before it on that
    /// connection are durable (APM; a read orders only its own connection's writes).
    pub(crate) fn read_after_writes(&self, visible: VolatileSlice<'_>, from: u32) {
        let mut g = self.lock();
        let DurableState { image, noted } = &mut *g;
        noted.retain(|&(offset, len, c)| {
            if c == from {
                copy_in(image, visible, offset, len);
            }
            c != from
        });
    }

    /// What the region holds after a power cut under `unflushed`; `rng` draws the torn words or
    /// lines.
    pub(crate) fn recover(&self, visible: VolatileSlice<'_>, unflushed: Unflushed, rng: &mut fastrand::Rng) -> Vec<u8> {
        let image = &self.lock().image;
        match unflushed {
            Unflushed::Lost => image.to_vec(),
            Unflushed::Kept => visible.to_vec(),
            Unflushed::Torn { .. } | Unflushed::TornLines { .. } => {
                let unit = if matches!(unflushed, Unflushed::Torn { .. }) { Unflushed::WORD } else { Unflushed::LINE };
                let now = visible.to_vec();
                let mut out = image.to_vec();
                // Units by memory address: the first may be shorter.
                let mut at = 0;
                let first = unit - (visible.as_ptr() as usize % unit);
                while at < out.len() {
                    let n = if at == 0 { first.min(out.len()) } else { unit.min(out.len() - at) };
                    if rng.bool() {
                        out[at..at + n].copy_from_slice(&now[at..at + n]);
                    }
                    at += n;
                }
                out
            }
        }
    }
}

/// Copies `[offset, offset + len)` of `visible` into `image`, clamped to it.
fn copy_in(image: &mut [u8], visible: VolatileSlice<'_>, offset: usize, len: usize) {
    let end = offset.saturating_add(len).min(image.len());
    if offset < end {
        visible.read(offset, &mut image[offset..end]).expect("a range inside the region");
    }
}

/// Whether a region on `memory` is persistent under `scope`.
pub(crate) fn is_persistent(scope: PersistentMemory, memory: &Memory) -> bool {
    match scope {
        PersistentMemory::All => true,
        PersistentMemory::Mappings => memory.kind() == MemoryKind::DevDax || memory.is_map_sync(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(bytes: &[u8]) -> Memory {
        let m = Memory::page_aligned(bytes.len()).unwrap();
        m.volatile().write(0, bytes).unwrap();
        m
    }

    #[test]
    fn durable_image_follows_make_durable_only() {
        let m = region(&[1; 256]);
        let d = Durable::of(m.volatile());
        m.volatile().write(0, &[2; 256]).unwrap();
        d.make_durable(m.volatile(), 64, 64);
        let mut rng = fastrand::Rng::with_seed(1);
        let lost = d.recover(m.volatile(), Unflushed::Lost, &mut rng);
        assert_eq!(&lost[..64], &[1; 64]);
        assert_eq!(&lost[64..128], &[2; 64]);
        assert_eq!(&lost[128..], &[1; 128]);
        assert_eq!(d.recover(m.volatile(), Unflushed::Kept, &mut rng), vec![2; 256]);
    }

    #[test]
    fn torn_units_are_whole_and_replay_per_seed() {
        let m = region(&[0; 4096]);
        let d = Durable::of(m.volatile());
        m.volatile().fill(0xFF);
        for (policy, unit) in
            [(Unflushed::Torn { seed: 0 }, Unflushed::WORD), (Unflushed::TornLines { seed: 0 }, Unflushed::LINE)]
        {
            let draw = |seed| d.recover(m.volatile(), policy.with_seed(seed), &mut fastrand::Rng::with_seed(seed));
            let a = draw(7);
            assert_eq!(a, draw(7), "the same seed tears the same units");
            assert_ne!(a, draw(8), "another seed tears others (64 units at least: equal by chance with p <= 2^-64)");
            for u in a.chunks(unit) {
                assert!(u.iter().all(|&b| b == u[0]), "a unit of {unit} bytes is all old or all new: {u:?}");
            }
            assert!(a.contains(&0) && a.contains(&0xFF), "some units old, some new");
            // Some 64-byte line mixes old and new words under the 8-byte policy.
            if unit == Unflushed::WORD {
                assert!(a.chunks(Unflushed::LINE).any(|l| l.contains(&0) && l.contains(&0xFF)), "no line tears inside");
            }
        }
    }
}

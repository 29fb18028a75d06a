//! Registered memory's regions: the [`Memory`] a region owns, access rights as librpma maps
//! usages, and copies between regions. The registration that makes a region, and the protection
//! domain's table of regions by rkey, are `pd.rs`'s.
//!
//! The bytes are reached only through `rpma_mem`'s [`VolatileSlice`] (rule M2 of
//! `docs/memory.md`): a remote write racing with a local copy gives torn bytes, as on a NIC,
//! never undefined behaviour.
//!
//! A file-mapped region (`rpma_mem::MapOptions`): a persistent flush covering a range syncs
//! that range to the file at once (at the responder, before the flush completes).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpma_core::Usage;
use rpma_mem::{Memory, MemoryKind, VolatileSlice};

use crate::counters::Live;
use crate::durable::{Durable, Unflushed};

/// Access rights of a registration (the `IBV_ACCESS_*` librpma derives from the usage,
/// docs/semantics.md#usages-and-access-rights).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Access {
    pub(crate) local_write: bool,
    pub(crate) remote_read: bool,
    pub(crate) remote_write: bool,
    /// Remote writes may take the responder's fast path: granted, and the region is not in
    /// the persistence model (whose writes go the general way, `responder::execute_op`).
    pub(crate) fast_write: bool,
    pub(crate) flush_global: bool,
    pub(crate) flush_persistent: bool,
}

impl Access {
    /// Whether a remote peer may reach the region at all.
    pub(crate) const fn remote(self) -> bool {
        self.remote_read || self.remote_write || self.flush_global || self.flush_persistent
    }

    pub(crate) fn of(usage: Usage, native_flush: bool, iwarp: bool) -> Self {
        let flush_read = !native_flush && usage.intersects(Usage::FLUSH_TYPES);
        Self {
            local_write: usage.intersects(Usage::READ_DST | Usage::WRITE_SRC | Usage::WRITE_DST | Usage::RECV),
            remote_read: usage.contains(Usage::READ_SRC) || flush_read,
            remote_write: usage.contains(Usage::WRITE_DST) || (iwarp && usage.contains(Usage::READ_DST)),
            fast_write: usage.contains(Usage::WRITE_DST) || (iwarp && usage.contains(Usage::READ_DST)),
            flush_global: native_flush && usage.contains(Usage::FLUSH_TYPE_VISIBILITY),
            flush_persistent: native_flush && usage.contains(Usage::FLUSH_TYPE_PERSISTENT),
        }
    }
}

pub(crate) struct MrShared {
    pub(crate) addr: u64,
    pub(crate) len: usize,
    pub(crate) rkey: u32,
    pub(crate) access: Access,
    pub(crate) valid: AtomicBool,
    /// The region's bytes (the data path reaches them through [`MrShared::bytes`]).
    pub(crate) data: Memory,
    /// What would survive a power cut (the persistence model, for a persistent region).
    pub(crate) durable: Option<Durable>,
    pub(crate) _live: Live,
}

impl MrShared {
    /// The offset of `[addr, addr + len)` inside the region, if it lies inside.
    #[inline]
    pub(crate) fn offset_of(&self, addr: u64, len: usize) -> Option<usize> {
        let off = addr.checked_sub(self.addr)?;
        let end = off.checked_add(len as u64)?;
        (end <= self.len as u64).then_some(off as usize)
    }

    /// `len` bytes at `offset` (validated by the caller: rpma-core for local buffers,
    /// [`MrShared::offset_of`] for remote ones).
    #[inline]
    pub(crate) fn bytes(&self, offset: usize, len: usize) -> VolatileSlice<'_> {
        self.data.volatile().subslice(offset, len).expect("a range checked against the region")
    }

    /// Syncs `[offset, offset + len)` (clamped to the region) to the region's file, if it is a
    /// file mapping (a persistent flush at the responder). A no-op for memory-only regions.
    pub(crate) fn persist(&self, offset: usize, len: usize) -> Result<(), rpma_mem::MemError> {
        let end = offset.saturating_add(len).min(self.len);
        if offset >= end || !matches!(self.data.kind(), MemoryKind::File | MemoryKind::DevDax) {
            return Ok(());
        }
        self.data.flush(offset, end - offset)
    }
}

impl MrShared {
    /// What the region holds after a power cut (its durable image under `unflushed`; a region
    /// outside the model keeps nothing: zeroes).
    pub(crate) fn recover(&self, unflushed: Unflushed, rng: &mut fastrand::Rng) -> Vec<u8> {
        let visible = self.bytes(0, self.len);
        self.durable.as_ref().map_or_else(|| vec![0; self.len], |d| d.recover(visible, unflushed, rng))
    }

    /// Makes `[offset, offset + len)` durable (a persistent flush at the responder, the
    /// owner's persist), if the region is in the model.
    #[inline]
    pub(crate) fn make_durable(&self, offset: usize, len: usize) {
        if let Some(d) = &self.durable {
            d.make_durable(self.bytes(0, self.len), offset, len);
        }
    }

    /// A remote write (or atomic write) of `[offset, offset + len)` executed on connection
    /// `from`, if the region is in the model (a later RDMA Read at it on that connection makes
    /// it durable, APM).
    #[inline]
    pub(crate) fn note_write(&self, offset: usize, len: usize, from: u32) {
        if let Some(d) = &self.durable {
            d.note_write(offset, len, from);
        }
    }

    /// An RDMA Read executed at the region on connection `from`, if it is in the model: the
    /// remote writes that connection executed on it before are durable (librpma's APM: a read
    /// after writes, towards a node with direct write to pmem).
    #[inline]
    pub(crate) fn read_after_writes(&self, from: u32) {
        if let Some(d) = &self.durable {
            d.read_after_writes(self.bytes(0, self.len), from);
        }
    }
}

/// Copies `len` bytes from `src` at `src_off` to `dst` at `dst_off` (the same region too; the
/// ranges may overlap).
#[inline]
pub(crate) fn copy(src: &MrShared, src_off: usize, dst: &MrShared, dst_off: usize, len: usize) {
    if len == 0 {
        return;
    }
    src.bytes(src_off, len).copy_to(&dst.bytes(dst_off, len)).expect("equal lengths");
}

/// How long a deregistration (`MockMr`'s `dereg`, `pd.rs`) waits for the peer-side accesses
/// that began before the region was unpublished. Each is one copy in memory (the immediate path's,
/// the deferred engine's, a peer process's request at this process's responder), none blocks
/// while it holds the region, so the wait is as long as the copy in progress; the limit only
/// bounds a bug.
pub(crate) const QUIESCE_LIMIT: Duration = Duration::from_secs(30);

/// The region, once `shared` is its only holder: every peer-side access (which holds an `Arc`
/// of the region while it copies: a lookup in the rkey table, or an upgrade of a cached `Weak`)
/// has let go, and none can start (the caller took the region out of the table first, and an
/// upgrade after the successful `try_unwrap` fails). `try_unwrap` is a compare-and-swap of the
/// strong count from 1 to 0, ordered after each holder's release: the accesses happen before
/// this returns. Spins a little, then sleeps with backoff, never holding a lock. `Err` (the
/// region still held) after [`QUIESCE_LIMIT`].
pub(crate) fn quiesce(mut shared: Arc<MrShared>) -> Result<MrShared, Arc<MrShared>> {
    let mut start = None;
    let mut nap = Duration::from_micros(20);
    for round in 0u32.. {
        match Arc::try_unwrap(shared) {
            Ok(s) => return Ok(s),
            Err(s) => shared = s,
        }
        if round < 64 {
            std::hint::spin_loop();
        } else if round < 128 {
            std::thread::yield_now();
        } else if start.get_or_insert_with(Instant::now).elapsed() < QUIESCE_LIMIT {
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(1));
        } else {
            break;
        }
    }
    Err(shared)
}

//! Registered memory: buffers owned by the region, access rights as librpma maps usages, and
//! copies between regions that take their locks in a global order.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use rpma_core::transport::{MrBackend, MrBuffer};
use rpma_core::{Advice, Error, ErrorKind, Result, Usage};

use crate::counters::{Kind, Live};
use crate::MockPd;

/// Access rights of a registration (the `IBV_ACCESS_*` librpma derives from the usage, spec 3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Access {
    pub(crate) local_write: bool,
    pub(crate) remote_read: bool,
    pub(crate) remote_write: bool,
    pub(crate) flush_global: bool,
    pub(crate) flush_persistent: bool,
}

impl Access {
    pub(crate) fn of(usage: Usage, native_flush: bool, iwarp: bool) -> Self {
        let flush_read = !native_flush && usage.intersects(Usage::FLUSH_TYPES);
        Self {
            local_write: usage.intersects(Usage::READ_DST | Usage::WRITE_SRC | Usage::WRITE_DST | Usage::RECV),
            remote_read: usage.contains(Usage::READ_SRC) || flush_read,
            remote_write: usage.contains(Usage::WRITE_DST) || (iwarp && usage.contains(Usage::READ_DST)),
            flush_global: native_flush && usage.contains(Usage::FLUSH_TYPE_VISIBILITY),
            flush_persistent: native_flush && usage.contains(Usage::FLUSH_TYPE_PERSISTENT),
        }
    }
}

pub(crate) struct MrShared {
    pub(crate) id: u64,
    pub(crate) addr: u64,
    pub(crate) len: usize,
    pub(crate) rkey: u32,
    pub(crate) access: Access,
    pub(crate) valid: AtomicBool,
    data: RwLock<Box<[u8]>>,
    _live: Live,
}

impl MrShared {
    /// The offset of `[addr, addr + len)` inside the region, if it lies inside.
    pub(crate) fn offset_of(&self, addr: u64, len: usize) -> Option<usize> {
        let off = addr.checked_sub(self.addr)?;
        let end = off.checked_add(len as u64)?;
        (end <= self.len as u64).then_some(off as usize)
    }

    pub(crate) fn read_at(&self, offset: usize, dst: &mut [u8]) {
        let g = self.data.read().unwrap_or_else(PoisonError::into_inner);
        dst.copy_from_slice(&g[offset..offset + dst.len()]);
    }

    pub(crate) fn write_at(&self, offset: usize, src: &[u8]) {
        let mut g = self.data.write().unwrap_or_else(PoisonError::into_inner);
        g[offset..offset + src.len()].copy_from_slice(src);
    }
}

/// Copies `len` bytes from `src` at `src_off` to `dst` at `dst_off`, locking the two regions in
/// the order of their ids (one lock if they are the same region).
pub(crate) fn copy(src: &MrShared, src_off: usize, dst: &MrShared, dst_off: usize, len: usize) {
    if len == 0 {
        return;
    }
    if src.id == dst.id {
        let mut g = dst.data.write().unwrap_or_else(PoisonError::into_inner);
        g.copy_within(src_off..src_off + len, dst_off);
        return;
    }
    let copy_into = |s: &[u8], d: &mut [u8]| d[dst_off..dst_off + len].copy_from_slice(&s[src_off..src_off + len]);
    if src.id < dst.id {
        let s = src.data.read().unwrap_or_else(PoisonError::into_inner);
        let mut d = dst.data.write().unwrap_or_else(PoisonError::into_inner);
        copy_into(&s, &mut d);
    } else {
        let mut d = dst.data.write().unwrap_or_else(PoisonError::into_inner);
        let s = src.data.read().unwrap_or_else(PoisonError::into_inner);
        copy_into(&s, &mut d);
    }
}

/// A registered region of the mock: owns its bytes; dropping it deregisters it (remote accesses
/// by its rkey then fail with a remote access error).
pub struct MockMr {
    pub(crate) shared: Arc<MrShared>,
    pd: Arc<MockPd>,
}

impl std::fmt::Debug for MockMr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockMr").field("addr", &self.shared.addr).field("len", &self.shared.len).finish()
    }
}

pub(crate) fn reg_mr(pd: &Arc<MockPd>, buf: &MrBuffer, usage: Usage) -> Result<MockMr> {
    let f = &pd.fabric;
    f.faults.check("ibv_reg_mr")?;
    let len = buf.len();
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| Error::new(ErrorKind::NoMem, "rpma_mr_reg"))?;
    v.resize(len, 0u8);
    let base = f.next_addr(len);
    let addr = match buf {
        MrBuffer::PageAligned(_) => base,
        // A heap buffer is not page-aligned: model malloc's 16-byte alignment.
        _ => base + 16,
    };
    let shared = Arc::new(MrShared {
        id: f.next_id(),
        addr,
        len,
        rkey: f.next_num(),
        access: Access::of(usage, pd.caps.native_flush, pd.caps.iwarp),
        valid: AtomicBool::new(true),
        data: RwLock::new(v.into_boxed_slice()),
        _live: f.live(Kind::Mr),
    });
    pd.mrs.write().unwrap_or_else(PoisonError::into_inner).insert(shared.rkey, Arc::downgrade(&shared));
    Ok(MockMr { shared, pd: Arc::clone(pd) })
}

impl MockMr {
    fn deregister(&self) {
        self.shared.valid.store(false, Ordering::SeqCst);
        self.pd.mrs.write().unwrap_or_else(PoisonError::into_inner).remove(&self.shared.rkey);
    }
}

impl Drop for MockMr {
    fn drop(&mut self) {
        self.deregister();
    }
}

impl MrBackend for MockMr {
    fn addr(&self) -> u64 {
        self.shared.addr
    }

    fn len(&self) -> usize {
        self.shared.len
    }

    fn rkey(&self) -> u32 {
        self.shared.rkey
    }

    fn read(&self, offset: usize, dst: &mut [u8]) {
        self.shared.read_at(offset, dst);
    }

    fn write(&self, offset: usize, src: &[u8]) {
        self.shared.write_at(offset, src);
    }

    fn advise(&self, _offset: usize, _len: usize, advice: Advice, flags: u32) -> Result<()> {
        self.pd.fabric.faults.check("ibv_advise_mr").map_err(|e| match e.errno() {
            Some(95) => Error::new(ErrorKind::NoSupp, "ibv_advise_mr"),
            Some(14 | 22) => Error::new(ErrorKind::Inval, "ibv_advise_mr"),
            _ => e,
        })?;
        if !self.pd.caps.advise_mr {
            return Err(Error::new(ErrorKind::NoSupp, "ibv_advise_mr"));
        }
        if flags & !rpma_core::ADVISE_FLAG_FLUSH != 0 {
            return Err(Error::inval("ibv_advise_mr", "unknown advise flags"));
        }
        if advice == Advice::PrefetchWrite && !self.shared.access.local_write {
            return Err(Error::inval("ibv_advise_mr", "PREFETCH_WRITE needs a locally writable region"));
        }
        Ok(())
    }

    fn dereg(self) -> Result<()> {
        let r = self.pd.fabric.faults.check("ibv_dereg_mr");
        drop(self);
        r
    }
}

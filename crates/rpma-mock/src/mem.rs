//! Registered memory: buffers owned by the region, access rights as librpma maps usages, and
//! copies between regions that take their locks in a global order.
//!
//! A [`MrBuffer::File`] region starts with the file's first `len` bytes (the file is created and
//! extended with zeros as needed); a persistent flush covering a range writes that range back
//! to the file at once (at the responder, before the flush completes), and deregistration
//! writes the whole region back. A write that was never persistently flushed reaches the file
//! only at deregistration.

use std::fs::File;
use std::os::unix::fs::FileExt;
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
    /// The file behind a [`MrBuffer::File`] region.
    file: Option<File>,
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

    /// Writes `[offset, offset + len)` (clamped to the region) back to the region's file, if it
    /// has one (a persistent flush at the responder). A no-op for memory-only regions.
    pub(crate) fn persist(&self, offset: usize, len: usize) -> std::io::Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let end = offset.saturating_add(len).min(self.len);
        if offset >= end {
            return Ok(());
        }
        let g = self.data.read().unwrap_or_else(PoisonError::into_inner);
        file.write_all_at(&g[offset..end], offset as u64)
    }
}

/// Opens (creating and extending as needed) the file of a [`MrBuffer::File`] region and reads its
/// first `len` bytes into `v`.
fn load_file(path: &std::path::Path, v: &mut [u8]) -> Result<File> {
    let errno = |op: &'static str, e: &std::io::Error| {
        Error::provider(op, e.raw_os_error().unwrap_or(5)).with_detail(&format!("{}: {e}", path.display()))
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| errno("open", &e))?;
    let size = file.metadata().map_err(|e| errno("fstat", &e))?.len();
    if size < v.len() as u64 {
        file.set_len(v.len() as u64).map_err(|e| errno("ftruncate", &e))?;
    }
    file.read_exact_at(v, 0).map_err(|e| errno("pread", &e))?;
    Ok(file)
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

/// The `ibv_reg_mr` call(s) of a registration: as librpma (spec 8.8), a registration failing with
/// `EOPNOTSUPP` on an ODP-capable device is retried once with `IBV_ACCESS_ON_DEMAND` (the mock's
/// regions behave the same either way).
fn register(f: &crate::FabricInner, odp_capable: bool) -> Result<()> {
    const EOPNOTSUPP: i32 = 95;
    match f.faults.check("ibv_reg_mr") {
        Err(e) if odp_capable && e.errno() == Some(EOPNOTSUPP) => f.faults.check("ibv_reg_mr"),
        r => r,
    }
}

pub(crate) fn reg_mr(pd: &Arc<MockPd>, buf: &MrBuffer, usage: Usage) -> Result<MockMr> {
    let f = &pd.fabric;
    register(f, pd.caps.odp)?;
    let len = buf.len();
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| Error::new(ErrorKind::NoMem, "rpma_mr_reg"))?;
    v.resize(len, 0u8);
    let file = match buf {
        MrBuffer::File { path, .. } => Some(load_file(path, &mut v)?),
        _ => None,
    };
    let base = f.next_addr(len);
    let addr = match buf {
        MrBuffer::PageAligned(_) | MrBuffer::File { .. } => base,
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
        file,
        _live: f.live(Kind::Mr),
    });
    pd.mrs.write().unwrap_or_else(PoisonError::into_inner).insert(shared.rkey, Arc::clone(&shared));
    Ok(MockMr { shared, pd: Arc::clone(pd) })
}

impl MockMr {
    /// Deregisters the region (once) and writes a file-backed region back to its file.
    fn deregister(&self) -> Result<()> {
        if !self.shared.valid.swap(false, Ordering::SeqCst) {
            return Ok(());
        }
        self.pd.mrs.write().unwrap_or_else(PoisonError::into_inner).remove(&self.shared.rkey);
        self.shared.persist(0, self.shared.len).map_err(|e| {
            Error::provider("ibv_dereg_mr", e.raw_os_error().unwrap_or(5))
                .with_detail(&format!("writing the region back to its file: {e}"))
        })
    }
}

impl Drop for MockMr {
    fn drop(&mut self) {
        if let Err(e) = self.deregister() {
            rpma_core::rpma_log!(Error, "{e}");
        }
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
        let w = self.deregister();
        drop(self);
        r.and(w)
    }
}

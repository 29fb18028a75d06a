//! Registered memory: the [`Memory`] a region owns (allocated or mapped by `rpma-mem`), access
//! rights as librpma maps usages, and deregistration that never releases memory the device may
//! still reach (rule M1 of `docs/memory.md`).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rdma_sys as ffi;
use rpma_core::transport::MrBackend;
use rpma_core::{Advice, Error, ErrorKind, Result, Usage};
use rpma_mem::{Memory, VolatileSlice};

use crate::pin::{Pin, Pinned};
use crate::sys::{call, errno, release, ret_errno, track};
use crate::VerbsPd;

/// Region ids: unique for the life of the process (a queue's pin table tells regions apart by
/// id, never by an address that a later region may reuse).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

const IBV_ACCESS_FLUSH_GLOBAL: u32 = 1 << 8;
const IBV_ACCESS_FLUSH_PERSISTENT: u32 = 1 << 9;
/// Every access flag that lets a peer reach the bytes (`IBV_ACCESS_REMOTE_*`, the flush bits).
const REMOTE_ACCESS: u32 = ffi::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0
    | ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
    | ffi::ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0
    | IBV_ACCESS_FLUSH_GLOBAL
    | IBV_ACCESS_FLUSH_PERSISTENT;

/// The access flags librpma registers a usage with (docs/semantics.md#usages-and-access-rights),
/// with the rules of docs/native-ops.md on a device with native flush: `FLUSH_TYPE_VISIBILITY` gets
/// `IBV_ACCESS_FLUSH_GLOBAL` (librpma 1.3); `FLUSH_TYPE_PERSISTENT` gets, when `flush_persistent`,
/// `IBV_ACCESS_FLUSH_PERSISTENT` (native persistent flushes; the kernel grants it on pmem only),
/// plus `IBV_ACCESS_REMOTE_READ` (the APM read of initiators without native flush, or that chose
/// it).
fn access(usage: Usage, native_flush: bool, iwarp: bool, flush_persistent: bool) -> u32 {
    let mut a = 0;
    if usage.contains(Usage::READ_SRC) {
        a |= ffi::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
    }
    if usage.contains(Usage::READ_DST) {
        a |= ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        if iwarp {
            a |= ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
        }
    }
    if usage.intersects(Usage::WRITE_SRC | Usage::RECV) {
        a |= ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
    }
    if usage.contains(Usage::WRITE_DST) {
        a |= ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 | ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
    }
    if usage.contains(Usage::FLUSH_TYPE_VISIBILITY) {
        a |= if native_flush { IBV_ACCESS_FLUSH_GLOBAL } else { ffi::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0 };
    }
    if usage.contains(Usage::FLUSH_TYPE_PERSISTENT) {
        a |= ffi::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
        if native_flush && flush_persistent {
            a |= IBV_ACCESS_FLUSH_PERSISTENT;
        }
    }
    a
}

/// A registered local memory region that owns its [`Memory`].
pub struct VerbsMr {
    mr: NonNull<ffi::ibv_mr>,
    addr: u64,
    len: usize,
    lkey: u32,
    rkey: u32,
    local_write: bool,
    /// Whether the registration grants a peer any access (read, write, atomic, flush).
    remote_access: bool,
    /// [`REGISTERED`], [`DEREGISTERED`] or [`LEAKED`].
    state: AtomicU8,
    /// The registered bytes: given back by `dereg`, released by `Drop` once deregistered, or
    /// leaked (never released) when the device may still reach them (rule M1).
    mem: Option<Memory>,
    pd: Arc<VerbsPd>,
    id: u64,
    /// The pins of the queues that used the region (crate::pin).
    users: Mutex<Vec<Arc<Pin>>>,
}

// SAFETY: [V3] the registration is only used in thread-safe verbs calls; [M2] the bytes are only
// reached through `Memory`'s volatile view, never by reference.
unsafe impl Send for VerbsMr {}
// SAFETY: [V3] as above; methods taking `&self` mutate nothing but an atomic state.
unsafe impl Sync for VerbsMr {}

impl std::fmt::Debug for VerbsMr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsMr").field("addr", &self.addr).field("len", &self.len).field("rkey", &self.rkey).finish()
    }
}

pub(crate) fn reg_mr(pd: &Arc<VerbsPd>, mem: Memory, usage: Usage) -> Result<VerbsMr> {
    let len = mem.len();
    let caps = pd.caps();
    let persistent = caps.native_flush && usage.contains(Usage::FLUSH_TYPE_PERSISTENT);
    let mut acc = access(usage, caps.native_flush, caps.iwarp, persistent);
    let reg = |acc: u32| {
        // SAFETY: [M1] `mem` owns `len` bytes at `as_ptr()`, which outlive the registration (the
        // region releases them only after a successful deregistration); [V1] the PD is alive (we
        // hold an `Arc`).
        call!("ibv_reg_mr", std::ptr::null_mut(), unsafe {
            ffi::ibv_reg_mr(pd.as_ptr(), mem.as_ptr().cast(), len, acc as i32)
        })
    };
    let mut p = reg(acc);
    if p.is_null() && errno() == libc::EINVAL && persistent {
        // The kernel grants persistent flush access on persistent memory only (rxe: "page can't
        // be persistent"): register without it (docs/native-ops.md, "The persistent flush
        // rule"). A native persistent flush into the region then completes with a remote
        // access error at the initiator, never as a silent success; the APM read still works.
        rpma_core::rpma_log!(
            Notice,
            "ibv_reg_mr: EINVAL with IBV_ACCESS_FLUSH_PERSISTENT (not persistent memory): registered without it, \
             so a native persistent flush into this region fails with a remote access error (only the RDMA Read \
             of RPMA_VERBS_PERSISTENT_FLUSH=read reaches it)"
        );
        acc = access(usage, caps.native_flush, caps.iwarp, false);
        p = reg(acc);
    }
    if p.is_null() && errno() == libc::EOPNOTSUPP && caps.odp {
        rpma_core::rpma_log!(Warning, "ibv_reg_mr: EOPNOTSUPP, retrying with IBV_ACCESS_ON_DEMAND (maybe FSDAX?)");
        p = reg(acc | ffi::ibv_access_flags::IBV_ACCESS_ON_DEMAND.0);
    }
    let mr = NonNull::new(p).ok_or_else(|| {
        let e = errno();
        let err = Error::provider("ibv_reg_mr", e);
        if e == libc::EFAULT && mem.kind() == rpma_mem::MemoryKind::File {
            // Linux 6.5+ refuses a long-term writable pin of a shared file mapping on a file
            // system that tracks dirty pages (ext4, xfs, 9p, ...): only DAX and tmpfs qualify.
            err.with_detail(
                "the kernel refuses to pin a shared mapping of this file for the device (Linux 6.5+ \
                 allows it on a DAX file system, tmpfs or hugetlbfs only)",
            )
        } else {
            err
        }
    })?;
    track!(Mr, 1);
    // SAFETY: [V1] a registration just returned by `ibv_reg_mr`, read before anything can free it.
    let (addr, lkey, rkey) = unsafe { ((*mr.as_ptr()).addr as u64, (*mr.as_ptr()).lkey, (*mr.as_ptr()).rkey) };
    Ok(VerbsMr {
        mr,
        addr,
        len,
        lkey,
        rkey,
        local_write: acc & ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 != 0,
        remote_access: acc & REMOTE_ACCESS != 0,
        state: AtomicU8::new(REGISTERED),
        mem: Some(mem),
        pd: Arc::clone(pd),
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        users: Mutex::new(Vec::new()),
    })
}

impl VerbsMr {
    /// Whether a work request in flight on some queue uses the region.
    pub(crate) fn busy(&self) -> bool {
        self.users.lock().unwrap_or_else(PoisonError::into_inner).iter().any(|p| p.busy())
    }

    /// The region without its memory and registration, which move to a new value parked until
    /// no queue uses them ([`PARKED`]); `self` is left with nothing to release.
    fn park(&mut self) {
        let moved = Self {
            mr: self.mr,
            addr: self.addr,
            len: self.len,
            lkey: self.lkey,
            rkey: self.rkey,
            local_write: self.local_write,
            remote_access: self.remote_access,
            state: AtomicU8::new(*self.state.get_mut()),
            mem: self.mem.take(),
            pd: Arc::clone(&self.pd),
            id: self.id,
            users: Mutex::new(std::mem::take(self.users.get_mut().unwrap_or_else(PoisonError::into_inner))),
        };
        *self.state.get_mut() = MOVED;
        PARKED.park(moved);
    }

    /// The virtual address of `offset` (for a scatter/gather entry).
    #[inline]
    pub(crate) fn sge(&self, offset: usize, len: usize) -> ffi::ibv_sge {
        ffi::ibv_sge {
            addr: self.addr + offset as u64,
            length: u32::try_from(len).unwrap_or(u32::MAX),
            lkey: self.lkey,
        }
    }
}

impl Pinned for VerbsMr {
    #[inline(always)]
    fn pin_id(&self) -> u64 {
        self.id
    }

    fn pin_span(&self) -> (u64, usize) {
        (self.addr, self.len)
    }

    fn attach_pin(&self, pin: Arc<Pin>) {
        let mut users = self.users.lock().unwrap_or_else(PoisonError::into_inner);
        // The pins of destroyed queues never say busy again: dropped here, so a region that
        // outlives many connections keeps only its live queues' pins.
        users.retain(|p| !p.released());
        users.push(pin);
    }
}

/// Regions dropped while in use, waiting for their pins to fall to zero.
#[derive(Debug)]
pub(crate) struct Parked {
    regions: Mutex<Vec<VerbsMr>>,
    count: AtomicUsize,
}

/// The process's parked regions.
pub(crate) static PARKED: Parked = Parked { regions: Mutex::new(Vec::new()), count: AtomicUsize::new(0) };

impl Parked {
    /// Keeps `mr` until no queue uses it.
    pub(crate) fn park(&self, mr: VerbsMr) {
        let mut g = self.regions.lock().unwrap_or_else(PoisonError::into_inner);
        g.push(mr);
        self.count.store(g.len(), Ordering::Release);
    }

    /// Whether a region is parked (cheap: one load, checked after work is retired).
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) != 0
    }

    /// Deregisters and frees every parked region no queue uses any more. Taken out of the
    /// list under the lock, dropped (deregistered) after it.
    pub(crate) fn sweep(&self) {
        let done: Vec<VerbsMr> = {
            let mut g = self.regions.lock().unwrap_or_else(PoisonError::into_inner);
            let (idle, busy): (Vec<_>, Vec<_>) = g.drain(..).partition(|m| !m.busy());
            *g = busy;
            self.count.store(g.len(), Ordering::Release);
            idle
        };
        drop(done);
    }
}

// ---- Deregistration and release of the bytes (rule M1).

/// The region is registered.
const REGISTERED: u8 = 0;
/// The region was deregistered: its bytes may be released.
const DEREGISTERED: u8 = 1;
/// Deregistration failed, or the region was abandoned with a queue pair that could not be
/// destroyed: the device may still access the bytes, so they are never released.
const LEAKED: u8 = 2;
/// The registration and the bytes moved to a parked region ([`PARKED`]): nothing to release.
const MOVED: u8 = 3;

impl VerbsMr {
    /// Deregisters now (once; later calls and the drop do nothing). If `ibv_dereg_mr` fails
    /// the region is marked leaked (its bytes are never released), the leak is reported (see
    /// [`crate::leaks`]) and the error returned.
    pub(crate) fn deregister(&self) -> Result<()> {
        if self.state.compare_exchange(REGISTERED, DEREGISTERED, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return Ok(());
        }
        // SAFETY: [V1] registered in `reg_mr`, deregistered once (guarded by `state`); [V4] no
        // work request uses it any more (callers check `busy()` first and park a busy region;
        // the flush buffer is deregistered only after its queue pair is destroyed).
        let r = release!(Mr: "ibv_dereg_mr", errno(), unsafe { ffi::ibv_dereg_mr(self.mr.as_ptr()) });
        if r == 0 {
            for p in self.users.lock().unwrap_or_else(PoisonError::into_inner).iter() {
                p.set_gone();
            }
            return Ok(());
        }
        let e = Error::provider("ibv_dereg_mr", ret_errno(r));
        self.state.store(LEAKED, Ordering::Release);
        crate::leak::region(self.addr, self.len, &e);
        Err(e)
    }

    /// Abandons the region without deregistering it: a queue pair that may still use it could
    /// not be destroyed. Its registration and bytes are leaked and reported.
    pub(crate) fn abandon(&self, why: &dyn std::fmt::Display) {
        if self.state.compare_exchange(REGISTERED, LEAKED, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            crate::leak::region(self.addr, self.len, why);
        }
    }
}

impl Drop for VerbsMr {
    fn drop(&mut self) {
        if *self.state.get_mut() == MOVED {
            return;
        }
        if *self.state.get_mut() == REGISTERED && self.busy() {
            self.park();
            return;
        }
        if let Err(e) = self.deregister() {
            rpma_core::rpma_log!(Error, "dropping a memory region: {e}");
        }
        if *self.state.get_mut() == LEAKED {
            // The device may still reach the bytes: never release them (rule M1).
            if let Some(mem) = self.mem.take() {
                mem.leak();
            }
        }
        // Otherwise `mem`, if still here, is released after this, i.e. after deregistration.
    }
}

impl MrBackend for VerbsMr {
    #[inline]
    fn addr(&self) -> u64 {
        self.addr
    }

    fn in_use(&self) -> bool {
        self.busy()
    }

    #[inline]
    fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn rkey(&self) -> u32 {
        self.rkey
    }

    fn memory(&self) -> VolatileSlice<'_> {
        self.mem.as_ref().expect("memory present until deregistered").volatile()
    }

    fn memory_mut(&mut self) -> Option<&mut Memory> {
        // Rule M3: no plain slice while the device may write or a peer may reach the bytes.
        if *self.state.get_mut() == REGISTERED && !self.remote_access && !self.busy() {
            self.mem.as_mut()
        } else {
            None
        }
    }

    fn persist(&self, offset: usize, len: usize) -> Result<()> {
        let Some(mem) = &self.mem else { return Ok(()) };
        // libpmem's pmem_persist: the range's cache lines written back and fenced (devdax, a
        // MAP_SYNC file, any memory), or msync of a file mapping with a page cache (rule M7)
        mem.persist(offset, len).map_err(|e| match e {
            rpma_mem::MemError::OutOfBounds { .. } => Error::invalid_input("MrLocal::persist", &e.to_string()),
            e => Error::provider("msync", e.errno().unwrap_or(libc::EIO))
                .with_detail(&format!("persisting the region's range: {e}")),
        })
    }

    fn advise(&self, offset: usize, len: usize, advice: Advice, flags: u32) -> Result<()> {
        const OP: &str = "ibv_advise_mr";
        if advice == Advice::PrefetchWrite && !self.local_write && self.pd.caps().advise_mr {
            return Err(Error::invalid_input(OP, "PREFETCH_WRITE needs a locally writable region"));
        }
        // A caller of the backend contract other than rpma-core may pass any range: checked
        // here (the kernel checks the SGE against the registration too).
        if offset.checked_add(len).map_or(true, |end| end > self.len) {
            return Err(Error::invalid_input(OP, "range outside the region"));
        }
        let Ok(length) = u32::try_from(len) else {
            return Err(Error::invalid_input(OP, "length exceeds 4 GiB"));
        };
        let mut sge = ffi::ibv_sge { addr: self.addr + offset as u64, length, lkey: self.lkey };
        let adv = match advice {
            Advice::Prefetch => ffi::ib_uverbs_advise_mr_advice::IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH,
            Advice::PrefetchWrite => ffi::ib_uverbs_advise_mr_advice::IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE,
            Advice::PrefetchNoFault => ffi::ib_uverbs_advise_mr_advice::IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT,
        };
        let r = call!("ibv_advise_mr", errno(), {
            // SAFETY: [V1, V2] the PD is alive; `sge` describes a range inside this registration
            // (checked above; the kernel checks it against the MR as well) and lives across the
            // call.
            unsafe { ffi::ibv_advise_mr(self.pd.as_ptr(), adv, flags, &mut sge, 1) }
        });
        match ret_errno(r) {
            0 => Ok(()),
            libc::EOPNOTSUPP => Err(Error::failed(ErrorKind::Unsupported, OP, libc::EOPNOTSUPP)),
            e @ (libc::EFAULT | libc::EINVAL) => Err(Error::failed(ErrorKind::InvalidInput, OP, e)),
            e => Err(Error::provider(OP, e)),
        }
    }

    fn dereg(mut self) -> Result<Option<Memory>> {
        if self.busy() {
            // A work request in flight uses the region: deregistered and freed when it is
            // retired (crate::pin).
            self.park();
            return Ok(None);
        }
        self.deregister()?;
        Ok(self.mem.take())
    }
}

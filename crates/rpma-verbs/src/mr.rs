//! Registered memory: the [`Memory`] a region owns (allocated or mapped by `rpma-mem`), access
//! rights as librpma maps usages, and deregistration that never frees memory the device may
//! still reach (rule M1 of `docs/memory.md`).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rdma_sys as ffi;
use rpma_core::transport::MrBackend;
use rpma_core::{Advice, Error, ErrorKind, Result, Usage};
use rpma_mem::{Memory, VolatileSlice};

use crate::sys::{call, errno, release, ret_errno, track};
use crate::VerbsPd;

const IBV_ACCESS_FLUSH_GLOBAL: u32 = 1 << 8;
const IBV_ACCESS_FLUSH_PERSISTENT: u32 = 1 << 9;

/// The access flags librpma registers a usage with (spec 3.2).
fn access(usage: Usage, native_flush: bool, iwarp: bool) -> u32 {
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
        a |= if native_flush { IBV_ACCESS_FLUSH_PERSISTENT } else { ffi::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0 };
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
    deregistered: AtomicBool,
    /// The registered bytes: present until deregistration gives them back, or leaked (never
    /// freed) when deregistration fails.
    mem: Option<Memory>,
    pd: Arc<VerbsPd>,
}

// SAFETY: [V3] the registration is only used in thread-safe verbs calls; [M2] the bytes are only
// reached through `Memory`'s volatile view, never by reference.
unsafe impl Send for VerbsMr {}
// SAFETY: [V3] as above; methods taking `&self` mutate nothing but an atomic flag.
unsafe impl Sync for VerbsMr {}

impl std::fmt::Debug for VerbsMr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsMr").field("addr", &self.addr).field("len", &self.len).field("rkey", &self.rkey).finish()
    }
}

pub(crate) fn reg_mr(pd: &Arc<VerbsPd>, mem: Memory, usage: Usage) -> Result<VerbsMr> {
    let len = mem.len();
    let caps = pd.caps();
    let acc = access(usage, caps.native_flush, caps.iwarp);
    let reg = |acc: u32| {
        // SAFETY: [M1] `mem` owns `len` bytes at `as_ptr()`, which outlive the registration (the
        // region deregisters before releasing them, and leaks them if that fails); [V1] the PD is
        // alive (we hold an `Arc`).
        call!("ibv_reg_mr", std::ptr::null_mut(), unsafe {
            ffi::ibv_reg_mr(pd.as_ptr(), mem.as_ptr().cast(), len, acc as i32)
        })
    };
    let mut p = reg(acc);
    if p.is_null() && errno() == libc::EOPNOTSUPP && caps.odp {
        rpma_core::rpma_log!(Warning, "ibv_reg_mr: EOPNOTSUPP, retrying with IBV_ACCESS_ON_DEMAND (maybe FSDAX?)");
        p = reg(acc | ffi::ibv_access_flags::IBV_ACCESS_ON_DEMAND.0);
    }
    let mr = NonNull::new(p).ok_or_else(|| Error::provider("ibv_reg_mr", errno()))?;
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
        deregistered: AtomicBool::new(false),
        mem: Some(mem),
        pd: Arc::clone(pd),
    })
}

impl VerbsMr {
    /// The virtual address of `offset` (for a scatter/gather entry).
    pub(crate) fn sge(&self, offset: usize, len: usize) -> ffi::ibv_sge {
        ffi::ibv_sge {
            addr: self.addr + offset as u64,
            length: u32::try_from(len).unwrap_or(u32::MAX),
            lkey: self.lkey,
        }
    }

    /// Deregisters now (once; later calls and the drop do nothing).
    pub(crate) fn deregister(&self) -> Result<()> {
        if self.deregistered.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // SAFETY: [V1] registered in `reg_mr`, deregistered once (guarded by the flag); [V4] no work
        // request uses it any more (each holds an `Arc` of the region until retired).
        let r = release!(Mr: "ibv_dereg_mr", errno(), unsafe { ffi::ibv_dereg_mr(self.mr.as_ptr()) });
        if r == 0 {
            Ok(())
        } else {
            Err(Error::provider("ibv_dereg_mr", ret_errno(r)))
        }
    }
}

impl VerbsMr {
    /// Deregisters and gives the memory back; on failure the device may still reach the
    /// memory, so it is leaked (rule M1) and the failure returned.
    fn release(&mut self) -> Result<Option<Memory>> {
        match self.deregister() {
            Ok(()) => Ok(self.mem.take()),
            Err(e) => {
                if let Some(mem) = self.mem.take() {
                    rpma_core::rpma_log!(
                        Error,
                        "ibv_dereg_mr failed: leaking the region's {} bytes at {:#x}, which the device may still reach",
                        mem.len(),
                        self.addr
                    );
                    track!(LeakedMr, 1);
                    mem.leak();
                }
                Err(e)
            }
        }
    }
}

impl Drop for VerbsMr {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            rpma_core::rpma_log!(Error, "dropping a memory region: {e}");
        }
    }
}

impl MrBackend for VerbsMr {
    fn addr(&self) -> u64 {
        self.addr
    }

    fn len(&self) -> usize {
        self.len
    }

    fn rkey(&self) -> u32 {
        self.rkey
    }

    fn memory(&self) -> VolatileSlice<'_> {
        self.mem.as_ref().expect("memory present until deregistered").volatile()
    }

    fn memory_mut(&mut self) -> Option<&mut Memory> {
        self.mem.as_mut()
    }

    fn advise(&self, offset: usize, len: usize, advice: Advice, flags: u32) -> Result<()> {
        const OP: &str = "ibv_advise_mr";
        if advice == Advice::PrefetchWrite && !self.local_write && self.pd.caps().advise_mr {
            return Err(Error::inval(OP, "PREFETCH_WRITE needs a locally writable region"));
        }
        let Ok(length) = u32::try_from(len) else {
            return Err(Error::inval(OP, "length exceeds 4 GiB"));
        };
        let mut sge = ffi::ibv_sge { addr: self.addr + offset as u64, length, lkey: self.lkey };
        let adv = match advice {
            Advice::Prefetch => ffi::ib_uverbs_advise_mr_advice::IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH,
            Advice::PrefetchWrite => ffi::ib_uverbs_advise_mr_advice::IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE,
            Advice::PrefetchNoFault => ffi::ib_uverbs_advise_mr_advice::IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT,
        };
        // SAFETY: [V1] the PD is alive; [V2] `sge` describes a range inside this registration
        // (validated by rpma-core) and lives across the call.
        let r =
            call!("ibv_advise_mr", errno(), unsafe { ffi::ibv_advise_mr(self.pd.as_ptr(), adv, flags, &mut sge, 1) });
        match ret_errno(r) {
            0 => Ok(()),
            libc::EOPNOTSUPP => Err(Error::new(ErrorKind::NoSupp, OP)),
            libc::EFAULT | libc::EINVAL => Err(Error::new(ErrorKind::Inval, OP)),
            e => Err(Error::provider(OP, e)),
        }
    }

    fn dereg(mut self) -> Result<Option<Memory>> {
        self.release()
    }
}

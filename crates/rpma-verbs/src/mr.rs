//! Registered memory: buffers owned by the region (heap, page-aligned, file mapping), access
//! rights as librpma maps usages, copies in and out.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rdma_sys as ffi;
use rpma_core::transport::{MrBackend, MrBuffer};
use rpma_core::{Advice, Error, ErrorKind, Result, Usage};

use crate::sys::{call, errno, release, ret_errno, track};
use crate::VerbsPd;

const IBV_ACCESS_FLUSH_GLOBAL: u32 = 1 << 8;
const IBV_ACCESS_FLUSH_PERSISTENT: u32 = 1 << 9;

/// The bytes of a region.
enum Memory {
    Alloc { ptr: NonNull<u8>, layout: Layout },
    Map { ptr: NonNull<u8>, len: usize, _file: std::fs::File },
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|p| p.is_power_of_two()).unwrap_or(4096)
}

impl Memory {
    fn new(buf: &MrBuffer) -> Result<Self> {
        const OP: &str = "rpma_mr_reg";
        let len = buf.len();
        if len == 0 {
            return Err(Error::provider("ibv_reg_mr", libc::EINVAL).with_detail("empty buffer"));
        }
        match buf {
            MrBuffer::File { path, len } => {
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(path)
                    .map_err(|e| io_err("open", &e))?;
                let cur = file.metadata().map_err(|e| io_err("fstat", &e))?.len();
                let want = u64::try_from(*len).map_err(|_| Error::new(ErrorKind::NoMem, OP))?;
                if cur < want {
                    file.set_len(want).map_err(|e| io_err("ftruncate", &e))?;
                }
                use std::os::fd::AsRawFd;
                // SAFETY: a fresh shared read/write mapping of `len` bytes of an open file the
                // mapping does not outlive (the file is kept with it); the kernel picks the address.
                let p = call!("mmap", libc::MAP_FAILED, unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        *len,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_SHARED,
                        file.as_raw_fd(),
                        0,
                    )
                });
                if p == libc::MAP_FAILED {
                    return Err(match errno() {
                        libc::ENOMEM => Error::new(ErrorKind::NoMem, OP),
                        e => Error::provider("mmap", e),
                    });
                }
                let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| Error::provider("mmap", libc::EINVAL))?;
                track!(Mapping, 1);
                Ok(Self::Map { ptr, len: *len, _file: file })
            }
            MrBuffer::Heap(_) | MrBuffer::PageAligned(_) => {
                let align = if matches!(buf, MrBuffer::PageAligned(_)) { page_size() } else { 16 };
                let layout = Layout::from_size_align(len, align).map_err(|_| Error::new(ErrorKind::NoMem, OP))?;
                // SAFETY: the layout has a non-zero size.
                let p = unsafe { std::alloc::alloc_zeroed(layout) };
                let ptr = NonNull::new(p).ok_or_else(|| Error::new(ErrorKind::NoMem, OP))?;
                Ok(Self::Alloc { ptr, layout })
            }
            _ => Err(Error::new(ErrorKind::NoSupp, OP).with_detail("unknown buffer kind")),
        }
    }

    const fn ptr(&self) -> *mut u8 {
        match self {
            Self::Alloc { ptr, .. } | Self::Map { ptr, .. } => ptr.as_ptr(),
        }
    }
}

fn io_err(op: &'static str, e: &std::io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::ENOMEM) => Error::new(ErrorKind::NoMem, "rpma_mr_reg"),
        Some(n) => Error::provider(op, n).with_detail(&e.to_string()),
        None => Error::provider(op, libc::EIO).with_detail(&e.to_string()),
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        match self {
            Self::Alloc { ptr, layout } => {
                // SAFETY: allocated with this layout by `alloc_zeroed`; deregistered before (the
                // region drops its registration first) and never freed twice.
                unsafe { std::alloc::dealloc(ptr.as_ptr(), *layout) };
            }
            Self::Map { ptr, len, .. } => {
                // SAFETY: the mapping made in `new`, unmapped once, after deregistration.
                unsafe {
                    if libc::msync(ptr.as_ptr().cast(), *len, libc::MS_SYNC) != 0 {
                        log::error!("msync failed: errno {}", errno());
                    }
                    let r = release!(Mapping: "munmap", -1, libc::munmap(ptr.as_ptr().cast(), *len));
                    if r != 0 {
                        log::error!("munmap failed: errno {}", errno());
                    }
                }
            }
        }
    }
}

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

/// A registered local memory region that owns its bytes.
pub struct VerbsMr {
    mr: NonNull<ffi::ibv_mr>,
    addr: u64,
    len: usize,
    lkey: u32,
    rkey: u32,
    local_write: bool,
    deregistered: AtomicBool,
    mem: Memory,
    pd: Arc<VerbsPd>,
}

// SAFETY: the registration is only used in thread-safe verbs calls; the bytes are only accessed
// by copies through raw pointers (the device may write them at any time anyway).
unsafe impl Send for VerbsMr {}
// SAFETY: as above; all methods take `&self` and mutate nothing but atomics.
unsafe impl Sync for VerbsMr {}

impl std::fmt::Debug for VerbsMr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsMr").field("addr", &self.addr).field("len", &self.len).field("rkey", &self.rkey).finish()
    }
}

pub(crate) fn reg_mr(pd: &Arc<VerbsPd>, buf: &MrBuffer, usage: Usage) -> Result<VerbsMr> {
    let mem = Memory::new(buf)?;
    let len = buf.len();
    let caps = pd.caps();
    let acc = access(usage, caps.native_flush, caps.iwarp);
    let reg = |acc: u32| {
        // SAFETY: `mem` owns `len` bytes at `ptr`, which outlive the registration (the region
        // deregisters before freeing them); the PD is alive (we hold an `Arc`).
        call!("ibv_reg_mr", std::ptr::null_mut(), unsafe {
            ffi::ibv_reg_mr(pd.as_ptr(), mem.ptr().cast(), len, acc as i32)
        })
    };
    let mut p = reg(acc);
    if p.is_null() && errno() == libc::EOPNOTSUPP && caps.odp {
        log::warn!("ibv_reg_mr: EOPNOTSUPP, retrying with IBV_ACCESS_ON_DEMAND (maybe FSDAX?)");
        p = reg(acc | ffi::ibv_access_flags::IBV_ACCESS_ON_DEMAND.0);
    }
    let mr = NonNull::new(p).ok_or_else(|| Error::provider("ibv_reg_mr", errno()))?;
    track!(Mr, 1);
    // SAFETY: a registration just returned by `ibv_reg_mr`.
    let (addr, lkey, rkey) = unsafe { ((*mr.as_ptr()).addr as u64, (*mr.as_ptr()).lkey, (*mr.as_ptr()).rkey) };
    Ok(VerbsMr {
        mr,
        addr,
        len,
        lkey,
        rkey,
        local_write: acc & ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 != 0,
        deregistered: AtomicBool::new(false),
        mem,
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
        // SAFETY: registered in `reg_mr`, deregistered once (guarded by the flag); no work
        // request uses it any more (each holds an `Arc` of the region until retired).
        let r = release!(Mr: "ibv_dereg_mr", errno(), unsafe { ffi::ibv_dereg_mr(self.mr.as_ptr()) });
        if r == 0 {
            Ok(())
        } else {
            Err(Error::provider("ibv_dereg_mr", ret_errno(r)))
        }
    }
}

impl Drop for VerbsMr {
    fn drop(&mut self) {
        if let Err(e) = self.deregister() {
            log::error!("dropping a memory region: {e}");
        }
        // `mem` (the bytes) is dropped after this, i.e. after deregistration.
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

    fn read(&self, offset: usize, dst: &mut [u8]) {
        assert!(offset.checked_add(dst.len()).is_some_and(|e| e <= self.len), "read outside the region");
        // SAFETY: the range lies inside the owned buffer (checked above); `dst` is a distinct
        // Rust buffer. The device may write the region concurrently: the bytes are copied, never
        // referenced.
        unsafe { std::ptr::copy_nonoverlapping(self.mem.ptr().add(offset), dst.as_mut_ptr(), dst.len()) };
    }

    fn write(&self, offset: usize, src: &[u8]) {
        assert!(offset.checked_add(src.len()).is_some_and(|e| e <= self.len), "write outside the region");
        // SAFETY: as in `read`, in the other direction.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.mem.ptr().add(offset), src.len()) };
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
        // SAFETY: the PD is alive; `sge` describes a range inside this registration (validated
        // by rpma-core) and lives across the call.
        let r =
            call!("ibv_advise_mr", errno(), unsafe { ffi::ibv_advise_mr(self.pd.as_ptr(), adv, flags, &mut sge, 1) });
        match ret_errno(r) {
            0 => Ok(()),
            libc::EOPNOTSUPP => Err(Error::new(ErrorKind::NoSupp, OP)),
            libc::EFAULT | libc::EINVAL => Err(Error::new(ErrorKind::Inval, OP)),
            e => Err(Error::provider(OP, e)),
        }
    }

    fn dereg(self) -> Result<()> {
        self.deregister()
    }
}

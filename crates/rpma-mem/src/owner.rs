//! How the bytes of a [`Memory`](crate::Memory) are given back: the owner behind each kind of
//! memory, the file or devdax mapping, and `munmap`.

use std::alloc::Layout;
use std::io;
use std::path::PathBuf;
use std::ptr::NonNull;

use crate::error::{MemError, Result};
use crate::sys;

/// The callback that gives raw memory back (see [`Memory::from_raw_parts`](crate::Memory::from_raw_parts)).
pub type Release = Box<dyn FnOnce(NonNull<u8>, usize) + Send>;

/// How the bytes are given back when the [`Memory`](crate::Memory) is dropped.
pub(crate) enum Owner {
    /// `std::alloc::alloc_zeroed` with this layout.
    Heap(Layout),
    /// An anonymous huge-page mapping of this many bytes.
    HugePages { map_len: usize },
    /// An anonymous private mapping of this many bytes (a large zeroed allocation).
    Anonymous { map_len: usize },
    /// The buffer of a `Vec<u8>` of this capacity.
    Vec { capacity: usize },
    /// The buffer of a `Box<[u8]>`.
    Boxed,
    /// A file or devdax mapping.
    Mapping(Mapping),
    /// Raw memory, given back by this callback (if any).
    Raw(Option<Release>),
}

/// A shared mapping of a file or devdax device, owned by a [`Memory`](crate::Memory).
pub(crate) struct Mapping {
    pub(crate) map_len: usize,
    pub(crate) path: PathBuf,
}

impl Mapping {
    /// `msync(MS_SYNC)` of the pages holding `offset..offset + len` of the mapping at `base`.
    ///
    /// # Safety
    ///
    /// [M4] `base` is the start of this mapping and `offset + len` is within it.
    pub(crate) unsafe fn msync(&self, base: NonNull<u8>, offset: usize, len: usize) -> Result<()> {
        let start = offset & !(sys::page_size() - 1);
        // SAFETY: [M4] start <= offset lies inside the mapping (the caller checked offset + len),
        // and base is page aligned (an mmap result), so base + start is too. msync only writes
        // back pages; it changes no memory.
        let rc = unsafe { libc::msync(base.as_ptr().add(start).cast(), offset + len - start, libc::MS_SYNC) };
        if rc != 0 {
            return Err(MemError::Io { op: "msync", path: self.path.clone(), source: io::Error::last_os_error() });
        }
        Ok(())
    }

    /// Writes back if `write_back` (files; devdax refuses msync and needs none) and unmaps the
    /// mapping.
    ///
    /// # Safety
    ///
    /// [M1] `base` is the start of this mapping, which nothing reaches any more.
    pub(crate) unsafe fn release(&self, base: NonNull<u8>, write_back: bool) {
        if write_back {
            // SAFETY: [M4] the whole mapping, from its start. A failure cannot be reported from
            // drop: callers who care call Memory::flush first.
            let _ = unsafe { self.msync(base, 0, self.map_len) };
        }
        // SAFETY: [M1] the caller owns the mapping and nothing uses it any more.
        unsafe { unmap(base, self.map_len) };
    }
}

/// Unmaps `len` bytes at `ptr`.
///
/// # Safety
///
/// [M1] `ptr..ptr + len` is a mapping owned by the caller, which nothing reaches any more.
pub(crate) unsafe fn unmap(ptr: NonNull<u8>, len: usize) {
    // SAFETY: [M1] the caller owns the mapping and nothing uses it any more. A failure (only
    // EINVAL for a bad range, impossible here) would leave the mapping in place: a leak, not UB.
    let rc = unsafe { libc::munmap(ptr.as_ptr().cast(), len) };
    debug_assert_eq!(rc, 0, "munmap failed: {}", io::Error::last_os_error());
}

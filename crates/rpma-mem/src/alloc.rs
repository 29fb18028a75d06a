//! Memory this crate allocates: heap (aligned) and anonymous huge pages.

use std::alloc::Layout;
use std::io;
use std::ptr::{self, NonNull};

use crate::error::{MemError, Result};
use crate::memory::{Memory, MemoryKind};
use crate::owner::Owner;
use crate::sys;

/// The alignment of [`Memory::zeroed`]: a cache line, enough for any atomic and for DMA.
const HEAP_ALIGN: usize = 64;

/// From this size on, zeroed memory aligned to at most a page is an anonymous mapping: the
/// kernel zero-fills each page when it is first touched, where the global allocator would
/// write zeros over all of it at once (an aligned `alloc_zeroed` is an allocation and a
/// `memset`: 256 MiB cost a writer's open about 90 ms).
const ANONYMOUS_FROM: usize = 256 << 10;

impl Memory {
    /// `len` zeroed bytes aligned to 64 bytes (a cache line): from the global allocator, or an
    /// anonymous mapping from 256 KiB on (zero-filled page by page when first touched).
    ///
    /// # Errors
    ///
    /// [`MemError::Empty`] if `len` is 0; [`MemError::Alloc`] if the allocation fails or `len`
    /// rounded up to 64 exceeds `isize::MAX`.
    pub fn zeroed(len: usize) -> Result<Self> {
        heap(len, HEAP_ALIGN, MemoryKind::Heap)
    }

    /// `len` zeroed bytes aligned to the page size: from the global allocator, or an anonymous
    /// mapping from 256 KiB on (zero-filled page by page when first touched).
    ///
    /// # Errors
    ///
    /// As [`aligned`](Self::aligned).
    pub fn page_aligned(len: usize) -> Result<Self> {
        heap(len, sys::page_size(), MemoryKind::Aligned)
    }

    /// `len` zeroed bytes aligned to `align`: from the global allocator, or, from 256 KiB on
    /// with `align` at most the page size, an anonymous mapping (zero-filled page by page when
    /// first touched).
    ///
    /// # Errors
    ///
    /// [`MemError::BadAlignment`] if `align` is not a power of two; [`MemError::Empty`] if `len`
    /// is 0; [`MemError::Alloc`] if the allocation fails or `len` rounded up to `align` exceeds
    /// `isize::MAX`.
    pub fn aligned(len: usize, align: usize) -> Result<Self> {
        heap(len, align, MemoryKind::Aligned)
    }

    /// `len` zeroed bytes of an anonymous private mapping of huge pages (`MAP_HUGETLB`, the
    /// default huge page size of `/proc/meminfo`). The mapping is `len` rounded up to the huge
    /// page size; [`len`](Self::len) reports `len`.
    ///
    /// Huge pages must have been reserved (`/proc/sys/vm/nr_hugepages`) or be allowed to be
    /// allocated on demand (`nr_overcommit_hugepages`); the kernel reserves them when mapping,
    /// so a shortage is reported here, not by a SIGBUS later.
    ///
    /// # Errors
    ///
    /// [`MemError::Empty`] if `len` is 0; [`MemError::Alloc`] if rounding `len` up overflows;
    /// [`MemError::HugePages`] if the kernel has no huge pages or `mmap` fails (`ENOMEM` when
    /// none are reserved or free).
    pub fn huge_pages(len: usize) -> Result<Self> {
        if len == 0 {
            return Err(MemError::Empty);
        }
        let huge = sys::huge_page_size().map_err(|source| MemError::HugePages { len, source })?;
        let map_len = sys::round_up(len, huge).ok_or(MemError::Alloc { len })?;
        // SAFETY: [M1] a new anonymous mapping at an address the kernel chooses (NULL hint, no
        // MAP_FIXED) touches no existing memory; the result is checked before use.
        let addr = unsafe {
            libc::mmap(
                ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(MemError::HugePages { len, source: io::Error::last_os_error() });
        }
        let ptr = NonNull::new(addr.cast::<u8>()).ok_or(MemError::Alloc { len })?;
        // SAFETY: [M1] the fresh mapping of map_len >= len bytes (map_len <= isize::MAX, or mmap
        // would have failed) is readable, writable, zero-filled and owned by nothing else;
        // Owner::HugePages unmaps it.
        Ok(unsafe { Memory::from_owner(ptr, len, MemoryKind::HugePages, false, Owner::HugePages { map_len }) })
    }
}

/// Zeroed heap memory of `len` bytes aligned to `align`.
fn heap(len: usize, align: usize, kind: MemoryKind) -> Result<Memory> {
    if !align.is_power_of_two() {
        return Err(MemError::BadAlignment { what: "the alignment is not a power of two", value: align as u64, align });
    }
    if len == 0 {
        return Err(MemError::Empty);
    }
    if len >= ANONYMOUS_FROM && align <= sys::page_size() {
        return anonymous(len, kind);
    }
    let layout = Layout::from_size_align(len, align).map_err(|_| MemError::Alloc { len })?;
    // SAFETY: [M1] the layout has a non-zero size (len > 0 was checked).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    let ptr = NonNull::new(ptr).ok_or(MemError::Alloc { len })?;
    // SAFETY: [M1] alloc_zeroed returned len initialized bytes (len <= isize::MAX by Layout),
    // owned by nothing else; Owner::Heap frees them with the same layout.
    Ok(unsafe { Memory::from_owner(ptr, len, kind, false, Owner::Heap(layout)) })
}

/// Zeroed memory of `len` bytes in an anonymous private mapping (page aligned).
fn anonymous(len: usize, kind: MemoryKind) -> Result<Memory> {
    let map_len = sys::round_up(len, sys::page_size()).ok_or(MemError::Alloc { len })?;
    // SAFETY: [M1] a new anonymous mapping at an address the kernel chooses (NULL hint, no
    // MAP_FIXED) touches no existing memory; the result is checked before use.
    let addr = unsafe {
        libc::mmap(
            ptr::null_mut(),
            map_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(MemError::Alloc { len });
    }
    let ptr = NonNull::new(addr.cast::<u8>()).ok_or(MemError::Alloc { len })?;
    // SAFETY: [M1] the fresh mapping of map_len >= len bytes (map_len <= isize::MAX, or mmap
    // would have failed) is readable, writable, zero-filled and owned by nothing else;
    // Owner::Anonymous unmaps it.
    Ok(unsafe { Memory::from_owner(ptr, len, kind, false, Owner::Anonymous { map_len }) })
}

//! [`Memory`]: owned bytes that may be handed to a NIC (rule M1).

use std::fmt;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;

use crate::error::{check_range, Result};
use crate::owner::{self, Owner, Release};
use crate::volatile::VolatileSlice;

/// Where the bytes of a [`Memory`] come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MemoryKind {
    /// [`Memory::zeroed`]: the global allocator, 64-byte aligned.
    Heap,
    /// [`Memory::aligned`] or [`Memory::page_aligned`]: the global allocator.
    Aligned,
    /// [`Memory::huge_pages`]: an anonymous `MAP_HUGETLB` mapping.
    HugePages,
    /// [`Memory::from_vec`].
    Vec,
    /// [`Memory::from_boxed`].
    Boxed,
    /// A regular file mapped by [`MapOptions::map`](crate::MapOptions::map).
    File,
    /// A devdax character device mapped by [`MapOptions::map`](crate::MapOptions::map).
    DevDax,
    /// [`Memory::from_raw_parts`].
    Raw,
}

/// Bytes owned by this value, which may be registered with a NIC and so read or written by a
/// device or a remote peer (rules M1-M3 of `docs/memory.md`).
///
/// - It owns its bytes (M1): they are released (freed, unmapped, given back to the `Vec`, ...)
///   only when the `Memory` is dropped. Code that registered it drops it only after a successful
///   deregistration; after a failed one it calls [`leak`](Self::leak).
/// - Shared access (`&Memory`) goes through [`volatile`](Self::volatile), a [`VolatileSlice`]
///   that tolerates concurrent changes (M2).
/// - Plain slices come only from `&mut Memory` ([`as_slice`](Self::as_slice),
///   [`as_mut_slice`](Self::as_mut_slice), M3).
///
/// It is `Send` and `Sync` and never `Clone`. Its `Debug` shows kind, address and length, not
/// the bytes.
pub struct Memory {
    ptr: NonNull<u8>,
    len: usize,
    kind: MemoryKind,
    map_sync: bool,
    owner: Owner,
}

// SAFETY: [M1] a Memory owns its bytes wherever it goes: heap, mappings and Vec/Box buffers may
// be released from any thread, and the Raw release callback is Send.
unsafe impl Send for Memory {}
// SAFETY: [M2] through &Memory the bytes are reached only by VolatileSlice (raw pointers,
// volatile, atomics), which tolerates concurrent access; the Raw release callback (not Sync) is
// reached only by Drop, through &mut self.
unsafe impl Sync for Memory {}

impl Memory {
    /// Builds a `Memory` from its parts.
    ///
    /// # Safety
    ///
    /// [M1] `ptr..ptr + len` is valid for reads and writes, is not reached through references,
    /// `len <= isize::MAX`, and `owner` describes how it was obtained so that dropping the
    /// `Memory` gives it back correctly (for `Mapping`/`HugePages`, a mapping made by this crate
    /// and owned by nobody else).
    pub(crate) unsafe fn from_owner(
        ptr: NonNull<u8>,
        len: usize,
        kind: MemoryKind,
        map_sync: bool,
        owner: Owner,
    ) -> Self {
        Self { ptr, len, kind, map_sync, owner }
    }

    /// Takes ownership of the buffer of `v` (no copy). [`into_vec`](Self::into_vec) gives it
    /// back. `len()` is `v.len()`; the spare capacity is kept but not part of the memory.
    pub fn from_vec(v: Vec<u8>) -> Self {
        let mut v = ManuallyDrop::new(v);
        let (len, capacity) = (v.len(), v.capacity());
        let ptr = NonNull::new(v.as_mut_ptr()).unwrap_or(NonNull::dangling());
        // SAFETY: [M1] the Vec's buffer is valid for its len bytes and, the Vec being forgotten,
        // owned by nothing else; Owner::Vec rebuilds the Vec with the same capacity to free it.
        unsafe { Self::from_owner(ptr, len, MemoryKind::Vec, false, Owner::Vec { capacity }) }
    }

    /// Takes ownership of the buffer of `b` (no copy). [`into_boxed`](Self::into_boxed) gives it
    /// back.
    pub fn from_boxed(b: Box<[u8]>) -> Self {
        let len = b.len();
        let ptr = NonNull::new(Box::into_raw(b).cast::<u8>()).unwrap_or(NonNull::dangling());
        // SAFETY: [M1] Box::into_raw gives up the buffer, valid for len bytes; Owner::Boxed
        // rebuilds the Box to free it.
        unsafe { Self::from_owner(ptr, len, MemoryKind::Boxed, false, Owner::Boxed) }
    }

    /// Takes ownership of `len` bytes at `ptr`, given back by `release(ptr, len)` when the
    /// `Memory` is dropped (never if it is [leaked](Self::leak), nor if `release` is `None`).
    ///
    /// # Safety
    ///
    /// Rule M6: until `release` runs (or forever if it is `None` or the memory is leaked),
    /// - `ptr..ptr + len` is valid for reads and writes, stays allocated, and `len <= isize::MAX`;
    /// - nobody reaches these bytes through a Rust reference while the `Memory` exists (devices,
    ///   raw pointers and atomics may: they are the M2 model), and nobody reaches them at all
    ///   while a slice from [`as_slice`](Self::as_slice)/[`as_mut_slice`](Self::as_mut_slice)
    ///   lives (M3);
    /// - the range fixes the size of every access to its bytes (a byte inside an 8-aligned word
    ///   that lies wholly in the range through that word, the others as bytes, M2): an atomic
    ///   access of this process to them that is not made through this `Memory` (another `Memory`
    ///   over overlapping bytes whose ends differ inside a word, C code) and may race with one of
    ///   its views', one of the two a write, uses the same size for each byte.
    pub unsafe fn from_raw_parts(ptr: NonNull<u8>, len: usize, release: Option<Release>) -> Self {
        // SAFETY: [M6] the caller guarantees validity and exclusive ownership until release.
        unsafe { Self::from_owner(ptr, len, MemoryKind::Raw, false, Owner::Raw(release)) }
    }

    /// The number of bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the memory has no bytes (only possible with [`from_vec`](Self::from_vec),
    /// [`from_boxed`](Self::from_boxed) or [`from_raw_parts`](Self::from_raw_parts)).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address of the first byte, for FFI (e.g. `ibv_reg_mr`). Safe code never dereferences
    /// it; unsafe code does so only under rule M2.
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Where the bytes come from.
    #[inline]
    pub fn kind(&self) -> MemoryKind {
        self.kind
    }

    /// Whether this is a mapping made with `MAP_SYNC` (so that flushing CPU caches makes
    /// writes persistent, without `msync`).
    #[inline]
    pub fn is_map_sync(&self) -> bool {
        self.map_sync
    }

    /// Shared access to all the bytes, which tolerates concurrent changes by a device, a peer or
    /// another thread (rule M2). Every view of a `Memory` accesses each byte with the same size
    /// (through its 8-aligned word when the word lies wholly in the memory, else as a byte).
    #[inline]
    pub fn volatile(&self) -> VolatileSlice<'_> {
        // SAFETY: [M1] [M2] the Memory owns ptr..ptr + len, valid for reads and writes until it is
        // dropped, which the borrow of self prevents for the slice's lifetime; no reference to
        // the bytes exists while self is shared (slices need &mut self). Every view of it is made
        // from the same ptr and len, so all use the same size for a byte; no other Memory owns
        // these bytes, except raw ones whose caller took on that rule (M6).
        unsafe { VolatileSlice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes as a plain mutable slice.
    ///
    /// `&mut self` proves that no other Rust handle (no [`VolatileSlice`]) exists. Rule M3 asks
    /// more of a caller that registered this memory with a NIC or shared it with another
    /// process: no device, peer or process may access it while the slice lives (no remote
    /// access granted, no operation in flight). The safe crates keep registered memory behind
    /// `&Memory` so that this cannot happen.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: [M3] &mut self excludes every other Rust access for the slice's lifetime, and
        // by M3 no device or peer accesses registered bytes meanwhile; [M1] the bytes are valid,
        // non-null (dangling only when len is 0) and len <= isize::MAX.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes as a plain slice, under the same rule M3 as [`as_mut_slice`](Self::as_mut_slice).
    /// It takes `&mut self` on purpose: through `&self`, a [`VolatileSlice`] could change the
    /// bytes under the `&[u8]`.
    #[inline]
    pub fn as_slice(&mut self) -> &[u8] {
        self.as_mut_slice()
    }

    /// A copy of the bytes, read through [`volatile`](Self::volatile).
    pub fn to_vec(&self) -> Vec<u8> {
        self.volatile().to_vec()
    }

    /// Makes the writes to `offset..offset + len` durable.
    ///
    /// For a [`File`](MemoryKind::File) mapping: `msync(MS_SYNC)` of the pages of the range.
    /// For a [`DevDax`](MemoryKind::DevDax) mapping: nothing (a devdax device has no page cache
    /// and refuses `msync`; CPU stores reach persistence through cache flushes, which this crate
    /// does not issue). For the other kinds: nothing.
    ///
    /// # Errors
    ///
    /// [`MemError::OutOfBounds`](crate::MemError::OutOfBounds) if the range is not inside;
    /// [`MemError::Io`](crate::MemError::Io) (`op` "msync") if `msync` fails.
    pub fn flush(&self, offset: usize, len: usize) -> Result<()> {
        check_range(offset, len, self.len)?;
        match &self.owner {
            // SAFETY: [M4] self.ptr is the start of the mapping and the range was checked.
            Owner::Mapping(m) if self.kind == MemoryKind::File && len > 0 => unsafe { m.msync(self.ptr, offset, len) },
            _ => Ok(()),
        }
    }

    /// Gives back the `Vec<u8>` of a [`Vec`](MemoryKind::Vec) or [`Boxed`](MemoryKind::Boxed)
    /// memory, the same allocation without copying. Any other kind is returned as `Err(self)`.
    #[allow(clippy::result_large_err)]
    pub fn into_vec(self) -> Result<Vec<u8>, Self> {
        let (ptr, len) = (self.ptr.as_ptr(), self.len);
        match self.owner {
            Owner::Vec { capacity } => {
                std::mem::forget(self);
                // SAFETY: [M1] ptr, len, capacity are those of the Vec from_vec took apart, and
                // the Memory is forgotten, so the buffer has exactly one owner again.
                Ok(unsafe { Vec::from_raw_parts(ptr, len, capacity) })
            }
            Owner::Boxed => {
                std::mem::forget(self);
                // SAFETY: [M1] ptr and len are those of the Box from_boxed took apart, and the
                // Memory is forgotten; Box::into_vec reuses the allocation.
                Ok(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) }.into_vec())
            }
            _ => Err(self),
        }
    }

    /// Gives back the `Box<[u8]>` of a [`Boxed`](MemoryKind::Boxed) memory, or of a
    /// [`Vec`](MemoryKind::Vec) memory whose capacity equals its length, the same allocation
    /// without copying. Anything else (including a `Vec` with spare capacity, which would need a
    /// reallocation: use `into_vec()?.into_boxed_slice()` for that) is returned as `Err(self)`.
    #[allow(clippy::result_large_err)]
    pub fn into_boxed(self) -> Result<Box<[u8]>, Self> {
        let (ptr, len) = (self.ptr.as_ptr(), self.len);
        match self.owner {
            Owner::Boxed => {
                std::mem::forget(self);
                // SAFETY: [M1] ptr and len are those of the Box from_boxed took apart, and the
                // Memory is forgotten, so the buffer has exactly one owner again.
                Ok(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) })
            }
            Owner::Vec { capacity } if capacity == len => {
                std::mem::forget(self);
                // SAFETY: [M1] as in into_vec; with capacity == len, into_boxed_slice does not
                // reallocate.
                Ok(unsafe { Vec::from_raw_parts(ptr, len, capacity) }.into_boxed_slice())
            }
            _ => Err(self),
        }
    }

    /// Forgets the memory: its bytes are never freed nor unmapped, and a raw release callback
    /// never runs (rule M1). For memory whose deregistration failed, which a device may still
    /// reach.
    pub fn leak(self) {
        std::mem::forget(self);
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        let (ptr, len) = (self.ptr, self.len);
        match &mut self.owner {
            // SAFETY: [M1] ptr was allocated by alloc_zeroed with this layout and is freed once,
            // here; the &mut self of drop proves no VolatileSlice or slice is left.
            Owner::Heap(layout) => unsafe { std::alloc::dealloc(ptr.as_ptr(), *layout) },
            // SAFETY: [M1] ptr..ptr + map_len is the anonymous (huge-page or not) mapping this
            // Memory owns.
            Owner::HugePages { map_len } | Owner::Anonymous { map_len } => unsafe { owner::unmap(ptr, *map_len) },
            // SAFETY: [M1] ptr, len and capacity are those of the Vec from_vec took apart.
            Owner::Vec { capacity } => drop(unsafe { Vec::from_raw_parts(ptr.as_ptr(), len, *capacity) }),
            // SAFETY: [M1] ptr and len are those of the Box from_boxed took apart.
            Owner::Boxed => drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr.as_ptr(), len)) }),
            // SAFETY: [M1] [M5] the mapping starting at ptr is owned by this Memory and unmapped
            // once, here.
            Owner::Mapping(m) => unsafe { m.release(ptr, self.kind == MemoryKind::File) },
            Owner::Raw(release) => {
                if let Some(release) = release.take() {
                    release(ptr, len);
                }
            }
        }
    }
}

impl fmt::Debug for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Memory")
            .field("kind", &self.kind)
            .field("ptr", &self.ptr.as_ptr())
            .field("len", &self.len)
            .field("map_sync", &self.map_sync)
            .finish()
    }
}

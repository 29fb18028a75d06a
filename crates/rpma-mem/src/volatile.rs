//! [`VolatileSlice`]: access to bytes that others may change at any time (rule M2).

use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::atomic_copy::{self, WordDomain};
use crate::error::{check_range, MemError, Result};

/// A borrowed view of bytes that others (a NIC, a remote peer, another thread or process) may
/// read or write at any time (rule M2 of `docs/memory.md`).
///
/// The bytes are never reached through a `&`/`&mut` reference, and every access to them is
/// atomic, with one size per byte: a byte inside a whole 8-aligned word of the memory the view
/// was made from is always accessed through that word (a relaxed `u64` load or store, or a
/// compare-exchange of the word that changes only the bytes being stored), a byte of a partial
/// word at either end of that memory always as a byte. So ranges are copied one word per
/// aligned word they cover whole, [`load_u8`](Self::load_u8)/[`store_u8`](Self::store_u8) go
/// through the byte's word, and [`load_u64`](Self::load_u64)/[`store_u64`](Self::store_u64) are
/// atomics with the ordering asked. A concurrent change by another thread, process or device
/// gives unspecified bytes (a copy may see some bytes old and some new, though never half of an
/// aligned word that was stored whole), and any two racing accesses to a byte have the same size
/// and address: no data race, no mixed-size race (rule M2 of `docs/memory.md`).
///
/// Every accessor checks its range first (rule M4) and returns
/// [`MemError::OutOfBounds`] instead of touching anything outside.
///
/// A `VolatileSlice` is `Copy`, `Send` and `Sync`: like a `&[AtomicU8]`, it lets every holder
/// read and write from any thread.
///
/// ```
/// let mem = rpma_mem::Memory::zeroed(16)?;
/// let v = mem.volatile();
/// v.write(4, b"abcd")?;
/// let mut out = [0u8; 4];
/// v.subslice(4, 4)?.read(0, &mut out)?;
/// assert_eq!(&out, b"abcd");
/// # Ok::<(), rpma_mem::MemError>(())
/// ```
#[derive(Clone, Copy)]
pub struct VolatileSlice<'a> {
    ptr: *mut u8,
    len: usize,
    /// The whole 8-aligned words of the memory the view was made from (fixed by
    /// `from_raw_parts`, kept by subslices): the bytes accessed through their word.
    words: WordDomain,
    /// Borrows the bytes for `'a` with shared, interior-mutable access.
    _bytes: PhantomData<&'a std::cell::UnsafeCell<[u8]>>,
}

// SAFETY: [M2] a VolatileSlice reaches its bytes only with atomic accesses (atomic_copy, and
// the u8/u64 accessors), which other threads (and devices) may race with without a data race;
// the bytes stay valid for 'a by the contract of `from_raw_parts`.
unsafe impl Send for VolatileSlice<'_> {}
// SAFETY: [M2] as for Send: every method takes &self and accesses the bytes only atomically, so
// threads sharing the view race only atomic accesses with each other, never plain ones.
unsafe impl Sync for VolatileSlice<'_> {}

impl<'a> VolatileSlice<'a> {
    /// Makes a view of `len` bytes at `ptr`, the whole of a memory as far as the view's access
    /// sizes go: a byte inside an 8-aligned word that lies wholly in `ptr..ptr + len` is always
    /// accessed through that word, any other byte (at most 7 at each end) as a byte, by this
    /// view and every [`subslice`](Self::subslice) of it.
    ///
    /// # Safety
    ///
    /// For the whole lifetime `'a` (rule M2):
    /// - `ptr` is non-null (even when `len` is 0) and `ptr..ptr + len` is one allocation or
    ///   mapping, valid for reads and writes, that stays allocated (not freed, not unmapped, not
    ///   truncated under a file mapping) until `'a` ends;
    /// - `len <= isize::MAX`;
    /// - nobody reaches these bytes through a Rust reference (`&`/`&mut` to them or to a value
    ///   containing them, other than `UnsafeCell`-based atomics); devices and other processes
    ///   may access them in any way, and code of this process through raw pointers too, but a
    ///   non-atomic access (a raw-pointer copy, a volatile access) that may race with an access
    ///   through a view is a data race of that code, not of the view, which only makes atomic
    ///   ones;
    /// - an atomic access of this process to these bytes other than through this view and its
    ///   subslices that may race with one of the view's, one of the two a write, has the size
    ///   and address the view uses for that byte (above). Another view does if it is made from
    ///   the same `ptr` and `len` (as [`Memory::volatile`](crate::Memory::volatile) makes each
    ///   of its views); views made from different ranges over the same bytes may use different
    ///   sizes near the ends of either range, and must not race there.
    #[inline]
    pub unsafe fn from_raw_parts(ptr: *mut u8, len: usize) -> Self {
        debug_assert!(!ptr.is_null(), "VolatileSlice::from_raw_parts: null pointer");
        debug_assert!(isize::try_from(len).is_ok(), "VolatileSlice::from_raw_parts: len over isize::MAX");
        Self { ptr, len, words: WordDomain::of_memory(ptr as usize, len), _bytes: PhantomData }
    }

    /// The number of bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view has no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address of the first byte, for FFI. Dereferencing it is up to the caller's own
    /// `unsafe` code, under rule M2.
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The address of byte `offset`, after checking that `offset..offset + len` is inside.
    #[inline]
    fn ptr_at(&self, offset: usize, len: usize) -> Result<*mut u8> {
        check_range(offset, len, self.len)?;
        // SAFETY: [M4] offset <= offset + len <= self.len was just checked, so the result stays
        // inside (or one past the end of) the allocation from_raw_parts was given.
        Ok(unsafe { self.ptr.add(offset) })
    }

    /// The view of `len` bytes at `offset`.
    ///
    /// # Errors
    ///
    /// [`MemError::OutOfBounds`] if `offset + len` overflows or exceeds [`len`](Self::len).
    #[inline]
    pub fn subslice(&self, offset: usize, len: usize) -> Result<VolatileSlice<'a>> {
        let ptr = self.ptr_at(offset, len)?;
        // The range is inside this view (checked by ptr_at), so it is valid and free of
        // references for 'a as this view is, and keeps the access sizes of its memory.
        Ok(VolatileSlice { ptr, len, words: self.words, _bytes: PhantomData })
    }

    /// Copies `dst.len()` bytes starting at `offset` into `dst`, with relaxed atomic loads (see
    /// the type's documentation: one per word, or per byte at the ends of the memory).
    ///
    /// # Errors
    ///
    /// [`MemError::OutOfBounds`] if the range is not inside the view; nothing is copied then.
    #[inline]
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        let src = self.ptr_at(offset, dst.len())?;
        let edges = self.words.edges(src as usize, dst.len());
        // SAFETY: [M2] [M4] src..src + dst.len() is inside the view (checked), valid for reads
        // and reached by no non-atomic reference, with the edges of its memory (the words of
        // the other bytes lie inside that memory); dst is a Rust slice held exclusively, which
        // by M2 cannot overlap the view's bytes. A concurrent writer makes the copied bytes
        // unspecified, the accesses being atomic.
        unsafe { atomic_copy::load(src, dst.as_mut_ptr(), dst.len(), edges) };
        Ok(())
    }

    /// Copies `src` into the view, starting at `offset`, with relaxed atomic stores (one per
    /// word the range covers whole; a word it covers in part has those bytes changed by a
    /// compare-exchange, so that concurrent stores to the word's other bytes are kept).
    ///
    /// # Errors
    ///
    /// [`MemError::OutOfBounds`] if the range is not inside the view; nothing is copied then.
    #[inline]
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        let dst = self.ptr_at(offset, src.len())?;
        let edges = self.words.edges(dst as usize, src.len());
        // SAFETY: [M2] [M4] dst..dst + src.len() is inside the view (checked), valid for writes
        // and reached by no non-atomic reference, with the edges of its memory; src is a Rust
        // slice, which by M2 cannot overlap the view's bytes, and nobody writes it while it is
        // borrowed.
        unsafe { atomic_copy::store(src.as_ptr(), dst, src.len(), edges) };
        Ok(())
    }

    /// Copies all bytes of this view into `dst`, which must have the same length. The two views
    /// may overlap (the copy behaves like `memmove`). Both sides are accessed with relaxed
    /// atomics; when the two views' addresses differ modulo 8, the bytes go through a small
    /// buffer on the stack.
    ///
    /// # Errors
    ///
    /// [`MemError::OutOfBounds`] (`offset` 0, `len` this length, `size` the destination's
    /// length) if the lengths differ; nothing is copied then.
    #[inline]
    pub fn copy_to(&self, dst: &VolatileSlice<'_>) -> Result<()> {
        if self.len != dst.len {
            return Err(MemError::OutOfBounds { offset: 0, len: self.len, size: dst.len });
        }
        // SAFETY: [M2] [M4] both views are valid for reads and writes of self.len bytes (equal
        // lengths checked), each inside the memory of its whole words, and reached by no
        // non-atomic reference, by their from_raw_parts contracts; atomic_copy::copy allows them
        // to overlap.
        unsafe { atomic_copy::copy(self.ptr, self.words, dst.ptr, dst.words, self.len) };
        Ok(())
    }

    /// Sets every byte of the view to `byte`, with relaxed atomic stores.
    #[inline]
    pub fn fill(&self, byte: u8) {
        // SAFETY: [M2] the whole view is valid for writes, with the edges of its memory, and
        // reached by no non-atomic reference, by its from_raw_parts contract.
        unsafe { atomic_copy::fill(self.ptr, byte, self.len, self.words.edges(self.ptr as usize, self.len)) };
    }

    /// A copy of the bytes of the view, read with relaxed atomic loads.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        // SAFETY: [M2] the view is valid for reads of self.len bytes and reached by no
        // non-atomic reference; v's buffer is a fresh allocation of at least self.len bytes that
        // nothing else reaches, so they do not overlap. set_len follows the copy that
        // initialized those bytes.
        unsafe {
            atomic_copy::load(self.ptr, v.as_mut_ptr(), self.len, self.words.edges(self.ptr as usize, self.len));
            v.set_len(self.len);
        }
        v
    }

    /// Reads the byte at `offset` with a relaxed atomic load: of the byte's 8-aligned word when
    /// that word lies wholly in the view's memory (then the byte may race with copies and `u64`
    /// stores of the word, the accesses having the same size), of the byte alone at the ends of
    /// the memory. A loop polling a flag sees a change made by another thread, a device or a
    /// peer: the compiler may not hoist the load out of the loop (a store must become visible
    /// to atomic loads in finite time). It orders nothing else: pair it with an acquire fence
    /// (or use [`load_u64`](Self::load_u64) with `Acquire`) to order other reads after it.
    ///
    /// # Errors
    ///
    /// [`MemError::OutOfBounds`] if `offset >= len`.
    #[inline]
    pub fn load_u8(&self, offset: usize) -> Result<u8> {
        let p = self.ptr_at(offset, 1)?;
        // SAFETY: [M2] [M4] p is inside the view (checked), valid for reads and reached by no
        // non-atomic reference; when it lies in a whole word of the view's memory, so is that
        // word, inside the memory.
        Ok(unsafe {
            if self.words.contains(p as usize) {
                atomic_copy::load_u8_of_word(p)
            } else {
                atomic_copy::load_byte(p)
            }
        })
    }

    /// Writes the byte at `offset` with a relaxed atomic store (it orders nothing before it:
    /// use a release fence, or [`store_u64`](Self::store_u64) with `Release`, for that). When
    /// the byte's 8-aligned word lies wholly in the view's memory, the store is a
    /// compare-exchange loop on that word that changes this byte only (a concurrent store to
    /// another byte of the word is kept); at the ends of the memory, a store of the byte alone.
    ///
    /// # Errors
    ///
    /// [`MemError::OutOfBounds`] if `offset >= len`.
    #[inline]
    pub fn store_u8(&self, offset: usize, v: u8) -> Result<()> {
        let p = self.ptr_at(offset, 1)?;
        // SAFETY: [M2] [M4] as in load_u8, for writes.
        unsafe {
            if self.words.contains(p as usize) {
                atomic_copy::store_u8_in_word(p, v);
            } else {
                atomic_copy::store_byte(p, v);
            }
        }
        Ok(())
    }

    /// The alignment `atomic_at` checks, which `AtomicU64::from_ptr` requires.
    const ATOMIC_ALIGN: usize = {
        assert!(align_of::<AtomicU64>() == 8);
        8
    };

    /// The `u64` at `offset`, for atomic access: checks the range and the alignment. An
    /// 8-aligned word inside the view is a whole word of its memory, which copies and
    /// `load_u8`/`store_u8` also access whole: the accesses to its bytes have one size.
    #[inline]
    fn atomic_at(&self, offset: usize) -> Result<&AtomicU64> {
        let p = self.ptr_at(offset, 8)?;
        if p as usize % Self::ATOMIC_ALIGN != 0 {
            return Err(MemError::BadAlignment {
                what: "the address of an atomic u64 is not a multiple of 8",
                value: p as u64,
                align: Self::ATOMIC_ALIGN,
            });
        }
        // SAFETY: [M2] [M4] p..p + 8 is inside the view (checked) and 8-aligned (checked), so it
        // is valid for an AtomicU64. The reference is to an UnsafeCell-based atomic, which allows
        // the concurrent changes M2 expects; it only lives for one atomic access in the caller.
        Ok(unsafe { AtomicU64::from_ptr(p.cast::<u64>()) })
    }

    /// Atomically loads the native-endian `u64` at `offset` with `order` (which may not be
    /// `Release` nor `AcqRel`). The address of byte `offset` must be a multiple of 8.
    ///
    /// # Errors
    ///
    /// [`MemError::OutOfBounds`] if `offset + 8` exceeds the length (or overflows);
    /// [`MemError::BadAlignment`] if the address is not 8-aligned.
    ///
    /// # Panics
    ///
    /// If `order` is `Release` or `AcqRel`, as [`AtomicU64::load`] does.
    #[inline]
    pub fn load_u64(&self, offset: usize, order: Ordering) -> Result<u64> {
        Ok(self.atomic_at(offset)?.load(order))
    }

    /// Atomically stores the native-endian `u64` `v` at `offset` with `order` (which may not be
    /// `Acquire` nor `AcqRel`). The address of byte `offset` must be a multiple of 8.
    ///
    /// # Errors
    ///
    /// [`MemError::OutOfBounds`] if `offset + 8` exceeds the length (or overflows);
    /// [`MemError::BadAlignment`] if the address is not 8-aligned. Nothing is stored then.
    ///
    /// # Panics
    ///
    /// If `order` is `Acquire` or `AcqRel`, as [`AtomicU64::store`] does.
    #[inline]
    pub fn store_u64(&self, offset: usize, v: u64, order: Ordering) -> Result<()> {
        self.atomic_at(offset)?.store(v, order);
        Ok(())
    }
}

impl fmt::Debug for VolatileSlice<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VolatileSlice").field("ptr", &self.ptr).field("len", &self.len).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_slice<R>(len: usize, f: impl FnOnce(VolatileSlice<'_>) -> R) -> R {
        // A u64 buffer so that offset 0 is 8-aligned.
        let mut buf = vec![0u64; len.div_ceil(8)];
        // SAFETY: [M2] buf lives for this call, has at least len bytes and is reached only
        // through the view until f returns.
        let v = unsafe { VolatileSlice::from_raw_parts(buf.as_mut_ptr().cast(), len) };
        f(v)
    }

    #[test]
    fn empty_view_accepts_empty_ranges_only() {
        with_slice(0, |v| {
            assert!(v.is_empty());
            v.read(0, &mut []).unwrap();
            v.write(0, &[]).unwrap();
            v.fill(1);
            assert!(v.to_vec().is_empty());
            assert!(v.subslice(0, 0).unwrap().is_empty());
            assert!(v.load_u8(0).is_err());
        });
    }

    #[test]
    fn debug_shows_pointer_and_length_only() {
        with_slice(3, |v| {
            v.fill(0xAB);
            let s = format!("{v:?}");
            assert!(s.starts_with("VolatileSlice { ptr: 0x") && s.ends_with("len: 3 }"), "{s}");
            assert!(!s.contains("171") && !s.contains("ab, "), "{s}");
        });
    }
}

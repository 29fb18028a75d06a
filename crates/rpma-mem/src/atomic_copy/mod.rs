//! Copies made of atomic accesses, for the bytes behind a [`VolatileSlice`](crate::VolatileSlice)
//! (rule M2 of `docs/memory.md`).
//!
//! Other threads of the process (the mock's peers, a user's threads sharing a view) may read and
//! write the same bytes at any time. A plain `memcpy` racing with any of those accesses is a data
//! race, undefined behaviour by the language's rules whatever the machine does. So every access
//! these functions make to shared bytes is an atomic one, with `Relaxed` ordering. A concurrent
//! change then makes the copied bytes unspecified (each byte old or new; each whole aligned word
//! old or new, never a mix), which is what the byte-wise atomic memcpy proposed for C++ (P1478)
//! and Rust (RFC 3301, `AtomicPerByte`) specifies. The copy itself orders nothing: a reader that
//! must see a writer's bytes pairs it with an acquire/release `load_u64`/`store_u64` or a fence,
//! as with RDMA.
//!
//! # One access size per byte
//!
//! The language also declares undefined two racing atomic accesses to overlapping bytes, one of
//! them a write, that differ in size or address ("mixed-size" accesses: a 1-byte load of a byte
//! that another thread stores as part of an 8-byte word). So the size of every access to a byte
//! is fixed by where the byte lies in its *memory* (the allocation or mapping its view was made
//! from, described by its [`WordDomain`]), never by the range being copied:
//!
//! - a byte inside a whole 8-aligned word of its memory is always accessed through that word,
//!   with a relaxed `AtomicU64`. A copy moves each word its range covers whole with one load or
//!   one store; a word it covers in part (at the range's edges) is loaded whole and the bytes
//!   picked out of it, or stored by a compare-exchange loop that changes only the range's bytes
//!   (a concurrent store to the word's other bytes makes the exchange fail and be retried on the
//!   new value: nothing is lost). [`load_u8_of_word`] and [`store_u8_in_word`] do the same for
//!   one byte;
//! - a byte of a partial word at either end of its memory (a memory that does not start at a
//!   multiple of 8 or whose end is not one: a `Vec<u8>`, a C buffer) has no whole word to go
//!   through (the rest of the word lies outside the memory, which is never touched), and is
//!   always accessed with a relaxed `AtomicU8`. At most 7 bytes at each end are.
//!
//! Every view of a memory follows the same rule, so two accesses to one byte always have the
//! same size and address, whatever ranges they copy.
//!
//! The side that is not shared (a Rust slice, a fresh `Vec`, a stack buffer) is accessed with
//! plain, possibly unaligned loads and stores.
//!
//! Why not a crate: `atomic-memcpy` (taiki-e's P1478 implementation) copies a value of a type
//! fixed at compile time (`atomic_load::<T>(*const T) -> MaybeUninit<T>`), not a run-time
//! length; a view's range would have to be cut into fixed-size values by hand, which is the
//! whole of the work here. `vm-memory` copies guest memory with volatile accesses, which are no
//! atomics in Rust's memory model. No crate of the ecosystem copies a run-time length with
//! atomic accesses.
//!
//! Cost: LLVM neither merges nor vectorizes atomic accesses, so a word copy is one 8-byte load
//! and one 8-byte store per word (`mov`s on x86-64, `ldr`/`str` on aarch64: relaxed atomics need
//! no fence there), where `memcpy` moves 32 or 64 bytes per instruction. The loops below take
//! four words per round to keep loop overhead out of that; `cargo bench -p rpma-mem` measures
//! the result against `memcpy` (docs/bench.md). A copy whose range starts or ends inside a word
//! pays one compare-exchange (a locked instruction on x86-64) per such edge when it stores, and
//! nothing more when it loads.

use std::ptr;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};

mod copy;
#[cfg(test)]
mod tests;

pub(crate) use copy::copy;

/// The size and alignment of the word accesses.
const WORD: usize = 8;

/// Words per round of the unrolled loops.
const UNROLL: usize = 4;

/// Bytes per round of a copy between two views whose addresses differ modulo 8 (through a
/// stack buffer): small enough for the stack, large enough that the per-round cost is noise.
const BOUNCE: usize = 512;

// The word accesses below use AtomicU64 at 8-aligned addresses only.
const _: () = assert!(align_of::<AtomicU64>() == WORD && size_of::<AtomicU64>() == WORD);

/// The whole 8-aligned words of a memory (the allocation or mapping a view was made from):
/// addresses `lo..hi`, `lo` the first multiple of 8 at or after the memory's start, `hi` the last
/// at or before its end. A byte of the memory in `lo..hi` is always accessed through its word;
/// any other byte (at most 7 at each end; every byte when no word of the memory is whole, and
/// then `hi` may be below `lo`) always as a byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WordDomain {
    lo: usize,
    hi: usize,
}

impl WordDomain {
    /// The whole words of a memory of `len` bytes at `addr`, whose `addr + len` does not
    /// overflow (it is an allocation or a mapping, below the top of the address space).
    #[inline]
    pub(crate) fn of_memory(addr: usize, len: usize) -> Self {
        Self { lo: addr.wrapping_add(WORD - 1) & !(WORD - 1), hi: addr.wrapping_add(len) & !(WORD - 1) }
    }

    /// Whether the byte at `addr` (a byte of the memory) lies in a whole word of it.
    #[inline]
    pub(crate) fn contains(self, addr: usize) -> bool {
        self.lo <= addr && addr < self.hi
    }

    /// The edges of the `len` bytes at `addr` (inside the memory): how many of its first and
    /// last bytes lie outside the whole words.
    #[inline]
    pub(crate) fn edges(self, addr: usize, len: usize) -> Edges {
        if self.lo <= addr && addr + len <= self.hi {
            // The common case, a range inside the whole words.
            return Edges::default();
        }
        // Bytes below lo: a prefix of at most 7 (addr is at or after the memory's start);
        // bytes at or after hi: a suffix of at most 7, the rest of the range after the prefix
        // when the memory has no whole word (hi < lo; then the prefix is the whole range).
        let head = self.lo.saturating_sub(addr).min(len);
        let tail = (addr + len).saturating_sub(self.hi).min(len - head);
        Edges { head, tail }
    }
}

/// Where a range of bytes lies against its memory's whole words ([`WordDomain::edges`]): its
/// first `head` bytes and its last `tail` bytes lie in partial words at the ends of the memory
/// (accessed as bytes), every other byte in a whole 8-aligned word of the memory (accessed
/// through the word). Each is at most 7, and `head + tail` is at most the range's length.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Edges {
    head: usize,
    tail: usize,
}

/// The number of bytes from `addr` up to the next multiple of 8 (0 if it is one), at most `len`.
#[inline(always)]
fn head_len(addr: usize, len: usize) -> usize {
    (addr.wrapping_neg() % WORD).min(len)
}

/// The shift, in bits, of byte `i` (`0..8`) of a native-endian word.
#[inline(always)]
const fn byte_shift(i: usize) -> u32 {
    (if cfg!(target_endian = "little") { 8 * i } else { 8 * (WORD - 1 - i) }) as u32
}

/// The mask of bytes `i..i + n` of a native-endian word (`1 <= n`, `i + n <= 8`).
#[inline(always)]
fn part_mask(i: usize, n: usize) -> u64 {
    let ones = u64::MAX >> (64 - 8 * n as u32);
    if cfg!(target_endian = "little") {
        ones << (8 * i)
    } else {
        ones << (8 * (WORD - i - n))
    }
}

/// Relaxed atomic load of the byte at `p`, as a byte: for a byte of a partial word at an end of
/// its memory.
///
/// # Safety
///
/// `p` is valid for reads for the duration of the call and reached by nobody through a Rust
/// reference other than an atomic one (rule M2).
#[inline(always)]
pub(crate) unsafe fn load_byte(p: *const u8) -> u8 {
    // SAFETY: [M2] the caller guarantees p is valid; a u8 is always aligned; the reference to
    // the UnsafeCell-based AtomicU8 lives for this one access only and allows concurrent atomic
    // accesses by others.
    unsafe { AtomicU8::from_ptr(p.cast_mut()) }.load(Relaxed)
}

/// Relaxed atomic store of `v` to the byte at `p`, as a byte: for a byte of a partial word at
/// an end of its memory.
///
/// # Safety
///
/// `p` is valid for writes for the duration of the call and reached by nobody through a Rust
/// reference other than an atomic one (rule M2).
#[inline(always)]
pub(crate) unsafe fn store_byte(p: *mut u8, v: u8) {
    // SAFETY: [M2] as in load_byte, for writes.
    unsafe { AtomicU8::from_ptr(p) }.store(v, Relaxed);
}

/// Relaxed atomic load of the native-endian word at `p`.
///
/// # Safety
///
/// As [`load_byte`] for the 8 bytes at `p`, and `p` is 8-aligned.
#[inline(always)]
unsafe fn load_word(p: *const u8) -> u64 {
    // SAFETY: [M2] the caller guarantees 8 valid bytes at an 8-aligned p; the reference to the
    // AtomicU64 lives for this one access only.
    unsafe { AtomicU64::from_ptr(p.cast_mut().cast::<u64>()) }.load(Relaxed)
}

/// Relaxed atomic store of the native-endian word `v` at `p`.
///
/// # Safety
///
/// As [`store_byte`] for the 8 bytes at `p`, and `p` is 8-aligned.
#[inline(always)]
unsafe fn store_word(p: *mut u8, v: u64) {
    // SAFETY: [M2] as in load_word, for writes.
    unsafe { AtomicU64::from_ptr(p.cast::<u64>()) }.store(v, Relaxed);
}

/// Stores the bits of `val` that `mask` selects into the word at `p`, keeping its other bits:
/// a relaxed compare-exchange loop, so that a concurrent store to the other bits is never lost
/// (the exchange fails and is retried on the new value). `val` has no bit outside `mask`.
///
/// # Safety
///
/// As [`store_word`].
#[inline(always)]
unsafe fn merge_word(p: *mut u8, val: u64, mask: u64) {
    // SAFETY: [M2] the caller guarantees 8 valid bytes at an 8-aligned p; the reference to the
    // AtomicU64 lives for this function only, and every access through it is atomic.
    let w = unsafe { AtomicU64::from_ptr(p.cast::<u64>()) };
    let mut old = w.load(Relaxed);
    while let Err(now) = w.compare_exchange_weak(old, (old & !mask) | val, Relaxed, Relaxed) {
        old = now;
    }
}

/// Relaxed atomic load of the byte at `p` through its 8-aligned word: for a byte inside a whole
/// word of its memory.
///
/// # Safety
///
/// The 8-aligned word holding `p` is valid for reads and reached by nobody through a Rust
/// reference other than an atomic one (rule M2).
#[inline(always)]
pub(crate) unsafe fn load_u8_of_word(p: *const u8) -> u8 {
    let i = p as usize % WORD;
    // SAFETY: [M2] [M4] p - i is the 8-aligned start of p's word, inside the same allocation
    // (the caller's contract), so the offset stays in bounds and the load is valid.
    let w = unsafe { load_word(p.sub(i)) };
    (w >> byte_shift(i)) as u8
}

/// Relaxed atomic store of `v` to the byte at `p` through its 8-aligned word (changing only
/// that byte, see [`merge_word`]): for a byte inside a whole word of its memory.
///
/// # Safety
///
/// The 8-aligned word holding `p` is valid for writes and reached by nobody through a Rust
/// reference other than an atomic one (rule M2).
#[inline(always)]
pub(crate) unsafe fn store_u8_in_word(p: *mut u8, v: u8) {
    let i = p as usize % WORD;
    // SAFETY: [M2] [M4] as in load_u8_of_word, for writes.
    unsafe { merge_word(p.sub(i), u64::from(v) << byte_shift(i), 0xFF << byte_shift(i)) };
}

/// Copies the `n` shared bytes at `src` (`1..=7`, all in one whole word of their memory) to
/// `dst`, from one load of the word.
///
/// # Safety
///
/// As [`load_in_words`], and `src..src + n` lies in one 8-aligned word.
#[inline(always)]
unsafe fn load_part(src: *const u8, dst: *mut u8, n: usize) {
    let i = src as usize % WORD;
    // SAFETY: [M2] [M4] src - i is the start of src's word, valid for reads (the caller's
    // contract); bytes i..i + n of the local array are inside it (i + n <= 8) and dst is valid
    // for n plain writes.
    unsafe {
        let w = load_word(src.sub(i)).to_ne_bytes();
        ptr::copy_nonoverlapping(w.as_ptr().add(i), dst, n);
    }
}

/// Copies `n` private bytes at `src` to the shared bytes at `dst` (`1..=7`, all in one whole
/// word of their memory), changing only those bytes of the word (see [`merge_word`]).
///
/// # Safety
///
/// As [`store_in_words`], and `dst..dst + n` lies in one 8-aligned word.
#[inline(always)]
unsafe fn store_part(src: *const u8, dst: *mut u8, n: usize) {
    let i = dst as usize % WORD;
    let mut v = [0u8; WORD];
    // SAFETY: [M2] [M4] src is valid for n plain reads (the caller's contract) and bytes
    // i..i + n of the local array are inside it (i + n <= 8); dst - i is the start of dst's
    // word, valid for writes.
    unsafe {
        ptr::copy_nonoverlapping(src, v.as_mut_ptr().add(i), n);
        merge_word(dst.sub(i), u64::from_ne_bytes(v), part_mask(i, n));
    }
}

/// Sets the `n` shared bytes at `dst` (`1..=7`, all in one whole word of their memory) to the
/// bytes of `w` at the same places, changing only those bytes of the word (see [`merge_word`]).
///
/// # Safety
///
/// As [`fill_in_words`], and `dst..dst + n` lies in one 8-aligned word.
#[inline(always)]
unsafe fn fill_part(dst: *mut u8, w: u64, n: usize) {
    let i = dst as usize % WORD;
    let mask = part_mask(i, n);
    // SAFETY: [M2] [M4] dst - i is the start of dst's word, valid for writes (the caller's
    // contract).
    unsafe { merge_word(dst.sub(i), w & mask, mask) };
}

/// Copies `len` shared bytes at `src` (atomic loads) to private memory at `dst` (plain stores),
/// where `edges` tells which of the shared bytes lie in partial words at the ends of their
/// memory.
///
/// # Safety
///
/// - `src..src + len` is valid for reads and reached by nobody through a non-atomic Rust
///   reference (M2), and `edges` are its edges: every byte outside them lies in an 8-aligned
///   word that is valid for reads and reached by nobody through a non-atomic Rust reference;
/// - `dst..dst + len` is valid for writes, may be uninitialised, and nobody else accesses it
///   during the call (a Rust slice held exclusively, a fresh buffer);
/// - the two ranges do not overlap.
#[inline]
pub(crate) unsafe fn load(src: *const u8, dst: *mut u8, len: usize, edges: Edges) {
    if edges != Edges::default() {
        // SAFETY: [M2] [M4] the caller's contract.
        return unsafe { load_at_memory_ends(src, dst, len, edges) };
    }
    // SAFETY: [M2] [M4] the caller's contract, without edges.
    unsafe { load_in_words(src, dst, len) }
}

/// [`load`] of a range that reaches a partial word at an end of its memory: out of line, to
/// keep the common path small enough to inline.
///
/// # Safety
///
/// As [`load`].
#[inline(never)]
unsafe fn load_at_memory_ends(src: *const u8, dst: *mut u8, len: usize, edges: Edges) {
    let (head, end) = (edges.head, len - edges.tail);
    // SAFETY: [M2] [M4] head <= end <= len (head + tail <= len): bytes 0..head and end..len are
    // loaded one by one, bytes head..end through their words, as the caller's edges allow.
    unsafe {
        for i in 0..head {
            dst.add(i).write(load_byte(src.add(i)));
        }
        load_in_words(src.add(head), dst.add(head), end - head);
        for i in end..len {
            dst.add(i).write(load_byte(src.add(i)));
        }
    }
}

/// [`load`] of bytes that all lie in whole words of their memory.
///
/// # Safety
///
/// As [`load`], every byte of `src..src + len` lying in a whole word (no edges).
#[inline(always)]
unsafe fn load_in_words(src: *const u8, dst: *mut u8, len: usize) {
    if (src as usize | len) % WORD == 0 {
        // SAFETY: [M2] [M4] the caller's contract: len / 8 whole words at an 8-aligned src.
        return unsafe { load_words(src, dst, len / WORD) };
    }
    // SAFETY: [M2] [M4] the caller's contract.
    unsafe { load_in_words_with_parts(src, dst, len) }
}

/// Loads `words` words at the 8-aligned `src` into `dst` (plain unaligned stores), four per
/// round.
///
/// # Safety
///
/// As [`load`] for `8 * words` bytes, `src` 8-aligned.
#[inline(always)]
unsafe fn load_words(s: *const u8, d: *mut u8, words: usize) {
    // SAFETY: [M2] [M4] every word i < words is inside both ranges; s + 8 * i is 8-aligned.
    unsafe {
        let mut i = 0;
        while i + UNROLL <= words {
            let w = [
                load_word(s.add(i * WORD)),
                load_word(s.add((i + 1) * WORD)),
                load_word(s.add((i + 2) * WORD)),
                load_word(s.add((i + 3) * WORD)),
            ];
            d.add(i * WORD).cast::<[u64; UNROLL]>().write_unaligned(w);
            i += UNROLL;
        }
        while i < words {
            d.add(i * WORD).cast::<u64>().write_unaligned(load_word(s.add(i * WORD)));
            i += 1;
        }
    }
}

/// [`load_in_words`] of a range that starts or ends inside a word, out of line (the parts
/// make the common aligned loop spill its registers).
///
/// # Safety
///
/// As [`load_in_words`].
#[inline(never)]
unsafe fn load_in_words_with_parts(src: *const u8, dst: *mut u8, len: usize) {
    let head = head_len(src as usize, len);
    let words = (len - head) / WORD;
    let tail = head + words * WORD;
    // SAFETY: [M2] [M4] every offset below is < len: head <= len, head + 8 * words <= len, and
    // the tail part runs from there to len. src + head is 8-aligned (head_len), so is every
    // src + head + 8 * i; bytes 0..head lie in one word (the one before src + head), bytes
    // tail..len in one word (the one at src + tail), both valid by the caller's contract. The
    // loads of src are atomic (load_part, load_word), the stores to dst plain and unaligned, as
    // the caller allows.
    unsafe {
        if head > 0 {
            load_part(src, dst, head);
        }
        load_words(src.add(head), dst.add(head), words);
        if tail < len {
            load_part(src.add(tail), dst.add(tail), len - tail);
        }
    }
}

/// Copies `len` bytes of private memory at `src` (plain loads) to shared bytes at `dst` (atomic
/// stores), where `edges` tells which of the shared bytes lie in partial words at the ends of
/// their memory.
///
/// # Safety
///
/// - `src..src + len` is valid for reads and initialised, and nobody writes it during the call;
/// - `dst..dst + len` is valid for writes and reached by nobody through a non-atomic Rust
///   reference (M2), and `edges` are its edges: every byte outside them lies in an 8-aligned
///   word that is valid for writes and reached by nobody through a non-atomic Rust reference;
/// - the two ranges do not overlap.
#[inline]
pub(crate) unsafe fn store(src: *const u8, dst: *mut u8, len: usize, edges: Edges) {
    if edges != Edges::default() {
        // SAFETY: [M2] [M4] the caller's contract.
        return unsafe { store_at_memory_ends(src, dst, len, edges) };
    }
    // SAFETY: [M2] [M4] the caller's contract, without edges.
    unsafe { store_in_words(src, dst, len) }
}

/// [`store`] to a range that reaches a partial word at an end of its memory, out of line.
///
/// # Safety
///
/// As [`store`].
#[inline(never)]
unsafe fn store_at_memory_ends(src: *const u8, dst: *mut u8, len: usize, edges: Edges) {
    let (head, end) = (edges.head, len - edges.tail);
    // SAFETY: [M2] [M4] as in load_at_memory_ends, with the roles swapped.
    unsafe {
        for i in 0..head {
            store_byte(dst.add(i), src.add(i).read());
        }
        store_in_words(src.add(head), dst.add(head), end - head);
        for i in end..len {
            store_byte(dst.add(i), src.add(i).read());
        }
    }
}

/// [`store`] to bytes that all lie in whole words of their memory.
///
/// # Safety
///
/// As [`store`], every byte of `dst..dst + len` lying in a whole word (no edges).
#[inline(always)]
unsafe fn store_in_words(src: *const u8, dst: *mut u8, len: usize) {
    if (dst as usize | len) % WORD == 0 {
        // SAFETY: [M2] [M4] the caller's contract: len / 8 whole words at an 8-aligned dst.
        return unsafe { store_words(src, dst, len / WORD) };
    }
    // SAFETY: [M2] [M4] the caller's contract.
    unsafe { store_in_words_with_parts(src, dst, len) }
}

/// Stores `words` words read from `src` (plain unaligned loads) at the 8-aligned `dst`, four
/// per round.
///
/// # Safety
///
/// As [`store`] for `8 * words` bytes, `dst` 8-aligned.
#[inline(always)]
unsafe fn store_words(s: *const u8, d: *mut u8, words: usize) {
    // SAFETY: [M2] [M4] every word i < words is inside both ranges; d + 8 * i is 8-aligned.
    unsafe {
        let mut i = 0;
        while i + UNROLL <= words {
            let w = s.add(i * WORD).cast::<[u64; UNROLL]>().read_unaligned();
            store_word(d.add(i * WORD), w[0]);
            store_word(d.add((i + 1) * WORD), w[1]);
            store_word(d.add((i + 2) * WORD), w[2]);
            store_word(d.add((i + 3) * WORD), w[3]);
            i += UNROLL;
        }
        while i < words {
            store_word(d.add(i * WORD), s.add(i * WORD).cast::<u64>().read_unaligned());
            i += 1;
        }
    }
}

/// [`store_in_words`] to a range that starts or ends inside a word, out of line.
///
/// # Safety
///
/// As [`store_in_words`].
#[inline(never)]
unsafe fn store_in_words_with_parts(src: *const u8, dst: *mut u8, len: usize) {
    let head = head_len(dst as usize, len);
    let words = (len - head) / WORD;
    let tail = head + words * WORD;
    // SAFETY: [M2] [M4] as in load_in_words, with the roles swapped: dst + head + 8 * i is
    // 8-aligned and stored atomically, the parts at the edges merged into their words; src is
    // read with plain unaligned loads.
    unsafe {
        if head > 0 {
            store_part(src, dst, head);
        }
        store_words(src.add(head), dst.add(head), words);
        if tail < len {
            store_part(src.add(tail), dst.add(tail), len - tail);
        }
    }
}

/// Sets the `len` shared bytes at `dst` to `byte` (atomic stores), where `edges` tells which of
/// them lie in partial words at the ends of their memory.
///
/// # Safety
///
/// `dst..dst + len` is valid for writes and reached by nobody through a non-atomic Rust
/// reference (M2), and `edges` are its edges, as in [`store`].
#[inline]
pub(crate) unsafe fn fill(dst: *mut u8, byte: u8, len: usize, edges: Edges) {
    if edges != Edges::default() {
        // SAFETY: [M2] [M4] the caller's contract.
        return unsafe { fill_at_memory_ends(dst, byte, len, edges) };
    }
    // SAFETY: [M2] [M4] the caller's contract, without edges.
    unsafe { fill_in_words(dst, u64::from_ne_bytes([byte; WORD]), len) }
}

/// [`fill`] of a range that reaches a partial word at an end of its memory, out of line.
///
/// # Safety
///
/// As [`fill`].
#[inline(never)]
unsafe fn fill_at_memory_ends(dst: *mut u8, byte: u8, len: usize, edges: Edges) {
    let (head, end) = (edges.head, len - edges.tail);
    // SAFETY: [M2] [M4] as in store_at_memory_ends, with a constant source.
    unsafe {
        for i in 0..head {
            store_byte(dst.add(i), byte);
        }
        fill_in_words(dst.add(head), u64::from_ne_bytes([byte; WORD]), end - head);
        for i in end..len {
            store_byte(dst.add(i), byte);
        }
    }
}

/// [`fill`] of bytes that all lie in whole words of their memory, with the word `w` of the byte.
///
/// # Safety
///
/// As [`fill`], every byte of `dst..dst + len` lying in a whole word (no edges).
#[inline(always)]
unsafe fn fill_in_words(dst: *mut u8, w: u64, len: usize) {
    if (dst as usize | len) % WORD == 0 {
        // SAFETY: [M2] [M4] the caller's contract: len / 8 whole words at an 8-aligned dst.
        return unsafe { fill_words(dst, w, len / WORD) };
    }
    // SAFETY: [M2] [M4] the caller's contract.
    unsafe { fill_in_words_with_parts(dst, w, len) }
}

/// Stores the word `w` `words` times from the 8-aligned `dst` on, four per round.
///
/// # Safety
///
/// As [`fill`] for `8 * words` bytes, `dst` 8-aligned.
#[inline(always)]
unsafe fn fill_words(d: *mut u8, w: u64, words: usize) {
    // SAFETY: [M2] [M4] every word i < words is inside the range; d + 8 * i is 8-aligned.
    unsafe {
        let mut i = 0;
        while i + UNROLL <= words {
            store_word(d.add(i * WORD), w);
            store_word(d.add((i + 1) * WORD), w);
            store_word(d.add((i + 2) * WORD), w);
            store_word(d.add((i + 3) * WORD), w);
            i += UNROLL;
        }
        while i < words {
            store_word(d.add(i * WORD), w);
            i += 1;
        }
    }
}

/// [`fill_in_words`] of a range that starts or ends inside a word, out of line.
///
/// # Safety
///
/// As [`fill_in_words`].
#[inline(never)]
unsafe fn fill_in_words_with_parts(dst: *mut u8, w: u64, len: usize) {
    let head = head_len(dst as usize, len);
    let words = (len - head) / WORD;
    let tail = head + words * WORD;
    // SAFETY: [M2] [M4] as in store_in_words, with a constant source: the words covered whole
    // stored, the parts at the edges (bytes 0..head in the word at dst - i, bytes tail..len in
    // the word at dst + tail, valid by the caller's contract) merged into their words.
    unsafe {
        if head > 0 {
            fill_part(dst, w, head);
        }
        fill_words(dst.add(head), w, words);
        if tail < len {
            fill_part(dst.add(tail), w, len - tail);
        }
    }
}

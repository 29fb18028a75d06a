//! Copies made of atomic accesses, for the bytes behind a [`VolatileSlice`](crate::VolatileSlice)
//! (rule M2 of `docs/memory.md`).
//!
//! Other threads of the process (the mock's peers, a user's threads sharing a view) may read and
//! write the same bytes at any time. A plain `memcpy` racing with any of those accesses is a data
//! race, undefined behaviour by the language's rules whatever the machine does. So every access
//! these functions make to shared bytes is an atomic one, with `Relaxed` ordering: a relaxed
//! `AtomicU64` for each 8-aligned word the range covers whole, a relaxed `AtomicU8` for each byte
//! before the first such word and after the last. A concurrent change then makes the copied bytes
//! unspecified (each byte old or new; each whole aligned word old or new, never a mix), which is
//! what the byte-wise atomic memcpy proposed for C++ (P1478) and Rust (RFC 3301,
//! `AtomicPerByte`) specifies. The copy itself orders nothing: a reader that must see a writer's
//! bytes pairs it with an acquire/release `load_u64`/`store_u64` or a fence, as with RDMA.
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
//! the result against `memcpy` (docs/bench.md).
//!
//! Residual caveat (docs/memory.md, M2): two racing atomic accesses of different sizes to
//! overlapping bytes (a word of one copy against a byte at the edge of another, or against
//! `load_u8`/`store_u8`; a `u64` access against the edge bytes of a copy) are still outside
//! Rust's memory model ("mixed-size" accesses, which its documentation declares undefined,
//! inheriting C++'s rule), although every target executes them as ordinary aligned loads and
//! stores, each byte old or new. Races between accesses of the same size and place (whole
//! aligned words against `load_u64`/`store_u64` or each other; bytes against bytes) are defined.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};

/// The size and alignment of the word accesses.
const WORD: usize = 8;

/// Words per round of the unrolled loops.
const UNROLL: usize = 4;

/// Bytes per round of a copy between two views whose addresses differ modulo 8 (through a
/// stack buffer): small enough for the stack, large enough that the per-round cost is noise.
const BOUNCE: usize = 512;

// The word accesses below use AtomicU64 at 8-aligned addresses only.
const _: () = assert!(align_of::<AtomicU64>() == WORD && size_of::<AtomicU64>() == WORD);

/// The number of bytes from `addr` up to the next multiple of 8 (0 if it is one), at most `len`.
#[inline(always)]
fn head_len(addr: usize, len: usize) -> usize {
    (addr.wrapping_neg() % WORD).min(len)
}

/// Relaxed atomic load of the byte at `p`.
///
/// # Safety
///
/// `p` is valid for reads for the duration of the call and reached by nobody through a Rust
/// reference other than an atomic one (rule M2).
#[inline(always)]
pub(crate) unsafe fn load_u8(p: *const u8) -> u8 {
    // SAFETY: [M2] the caller guarantees p is valid; a u8 is always aligned; the reference to
    // the UnsafeCell-based AtomicU8 lives for this one access only and allows concurrent atomic
    // accesses by others.
    unsafe { AtomicU8::from_ptr(p.cast_mut()) }.load(Relaxed)
}

/// Relaxed atomic store of `v` to the byte at `p`.
///
/// # Safety
///
/// `p` is valid for writes for the duration of the call and reached by nobody through a Rust
/// reference other than an atomic one (rule M2).
#[inline(always)]
pub(crate) unsafe fn store_u8(p: *mut u8, v: u8) {
    // SAFETY: [M2] as in load_u8, for writes.
    unsafe { AtomicU8::from_ptr(p) }.store(v, Relaxed);
}

/// Relaxed atomic load of the native-endian word at `p`.
///
/// # Safety
///
/// As [`load_u8`] for the 8 bytes at `p`, and `p` is 8-aligned.
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
/// As [`store_u8`] for the 8 bytes at `p`, and `p` is 8-aligned.
#[inline(always)]
unsafe fn store_word(p: *mut u8, v: u64) {
    // SAFETY: [M2] as in load_word, for writes.
    unsafe { AtomicU64::from_ptr(p.cast::<u64>()) }.store(v, Relaxed);
}

/// Copies `len` shared bytes at `src` (atomic loads) to private memory at `dst` (plain stores).
///
/// # Safety
///
/// - `src..src + len` is valid for reads and reached by nobody through a non-atomic Rust
///   reference (M2);
/// - `dst..dst + len` is valid for writes, may be uninitialised, and nobody else accesses it
///   during the call (a Rust slice held exclusively, a fresh buffer);
/// - the two ranges do not overlap.
#[inline]
pub(crate) unsafe fn load(src: *const u8, dst: *mut u8, len: usize) {
    let head = head_len(src as usize, len);
    let words = (len - head) / WORD;
    let tail = head + words * WORD;
    // SAFETY: [M2] [M4] every offset below is < len: head <= len, head + 8 * words <= len, and
    // the tail loop runs from there to len. src + head is 8-aligned (head_len), so is every
    // src + head + 8 * i; the loads of src are atomic (load_u8, load_word), the stores to dst
    // plain and unaligned, as the caller allows.
    unsafe {
        for i in 0..head {
            dst.add(i).write(load_u8(src.add(i)));
        }
        let (s, d) = (src.add(head), dst.add(head));
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
        for i in tail..len {
            dst.add(i).write(load_u8(src.add(i)));
        }
    }
}

/// Copies `len` bytes of private memory at `src` (plain loads) to shared bytes at `dst` (atomic
/// stores).
///
/// # Safety
///
/// - `src..src + len` is valid for reads and initialised, and nobody writes it during the call;
/// - `dst..dst + len` is valid for writes and reached by nobody through a non-atomic Rust
///   reference (M2);
/// - the two ranges do not overlap.
#[inline]
pub(crate) unsafe fn store(src: *const u8, dst: *mut u8, len: usize) {
    let head = head_len(dst as usize, len);
    let words = (len - head) / WORD;
    let tail = head + words * WORD;
    // SAFETY: [M2] [M4] as in load, with the roles swapped: dst + head + 8 * i is 8-aligned and
    // stored atomically; src is read with plain unaligned loads.
    unsafe {
        for i in 0..head {
            store_u8(dst.add(i), src.add(i).read());
        }
        let (s, d) = (src.add(head), dst.add(head));
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
        for i in tail..len {
            store_u8(dst.add(i), src.add(i).read());
        }
    }
}

/// Sets the `len` shared bytes at `dst` to `byte` (atomic stores).
///
/// # Safety
///
/// `dst..dst + len` is valid for writes and reached by nobody through a non-atomic Rust
/// reference (M2).
#[inline]
pub(crate) unsafe fn fill(dst: *mut u8, byte: u8, len: usize) {
    let head = head_len(dst as usize, len);
    let words = (len - head) / WORD;
    let tail = head + words * WORD;
    let w = u64::from_ne_bytes([byte; WORD]);
    // SAFETY: [M2] [M4] as in store, with a constant source.
    unsafe {
        for i in 0..head {
            store_u8(dst.add(i), byte);
        }
        let d = dst.add(head);
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
        for i in tail..len {
            store_u8(dst.add(i), byte);
        }
    }
}

/// Copies `len` shared bytes at `src` to shared bytes at `dst`, atomic on both sides; the ranges
/// may overlap (the result is `memmove`'s when nobody else writes meanwhile).
///
/// When the two addresses are equal modulo 8 each aligned word is moved with one load and one
/// store; otherwise the bytes go through a stack buffer, [`BOUNCE`] bytes at a time (loaded with
/// `src`'s words, stored with `dst`'s). Either way the copy runs front to back when `dst` is
/// below `src` (or the ranges are apart) and back to front otherwise, so that no byte is
/// overwritten before it was read.
///
/// # Safety
///
/// Both ranges are valid for reads and writes and reached by nobody through a non-atomic Rust
/// reference (M2).
#[inline]
pub(crate) unsafe fn copy(src: *const u8, dst: *mut u8, len: usize) {
    if len == 0 || src == dst.cast_const() {
        // Onto itself: every byte already holds what the copy would store.
        return;
    }
    if len == WORD && (src as usize | dst as usize) % WORD == 0 {
        // One aligned word (an 8-byte write, the commonest small copy of the data path): one
        // load, one store (two distinct 8-aligned words cannot overlap).
        // SAFETY: [M2] [M4] the caller's contract; both addresses are 8-aligned.
        unsafe { store_word(dst, load_word(src)) };
        return;
    }
    let forward = (dst as usize) < (src as usize) || (dst as usize) - (src as usize) >= len;
    if (src as usize ^ dst as usize) % WORD == 0 {
        // SAFETY: [M2] [M4] the caller's contract, and the two addresses share their alignment.
        unsafe { copy_same_alignment(src, dst, len, forward) }
    } else {
        // SAFETY: [M2] [M4] the caller's contract.
        unsafe { copy_bounced(src, dst, len, forward) }
    }
}

/// [`copy`] when `src` and `dst` are equal modulo 8: each aligned word with one load and one
/// store, the bytes at the edges one by one.
///
/// # Safety
///
/// As [`copy`], and `src as usize % 8 == dst as usize % 8`.
#[inline]
unsafe fn copy_same_alignment(src: *const u8, dst: *mut u8, len: usize, forward: bool) {
    if !forward {
        // SAFETY: [M2] [M4] the caller's contract. Out of line: an overlapping copy to a higher
        // address is rare, and the common loop below keeps its registers to itself.
        return unsafe { copy_same_alignment_backward(src, dst, len) };
    }
    let head = head_len(src as usize, len);
    let words = (len - head) / WORD;
    let tail = head + words * WORD;
    // SAFETY: [M2] [M4] offsets as in load; src + head and dst + head are both 8-aligned (equal
    // modulo 8). Every access is atomic. Overlap: going forward, dst is below src (or the ranges
    // are apart), and as the two are equal modulo 8, dst <= src - 8: a store at dst + k never
    // reaches a byte src + j with j > k, so each store lands only on bytes already loaded
    // (within a round, the four loads come before the four stores).
    unsafe {
        for i in 0..head {
            store_u8(dst.add(i), load_u8(src.add(i)));
        }
        let (s, d) = (src.add(head), dst.add(head));
        let mut i = 0;
        while i + UNROLL <= words {
            let w = [
                load_word(s.add(i * WORD)),
                load_word(s.add((i + 1) * WORD)),
                load_word(s.add((i + 2) * WORD)),
                load_word(s.add((i + 3) * WORD)),
            ];
            store_word(d.add(i * WORD), w[0]);
            store_word(d.add((i + 1) * WORD), w[1]);
            store_word(d.add((i + 2) * WORD), w[2]);
            store_word(d.add((i + 3) * WORD), w[3]);
            i += UNROLL;
        }
        while i < words {
            store_word(d.add(i * WORD), load_word(s.add(i * WORD)));
            i += 1;
        }
        for i in tail..len {
            store_u8(dst.add(i), load_u8(src.add(i)));
        }
    }
}

/// [`copy_same_alignment`] back to front, for `dst` above `src` with the ranges overlapping.
///
/// # Safety
///
/// As [`copy_same_alignment`].
#[inline(never)]
unsafe fn copy_same_alignment_backward(src: *const u8, dst: *mut u8, len: usize) {
    let head = head_len(src as usize, len);
    let words = (len - head) / WORD;
    let tail = head + words * WORD;
    // SAFETY: [M2] [M4] as in copy_same_alignment, mirrored: dst >= src + 8, so a store at
    // dst + k never reaches a byte src + j with j < k, and the bytes are taken from the end.
    unsafe {
        for i in (tail..len).rev() {
            store_u8(dst.add(i), load_u8(src.add(i)));
        }
        let (s, d) = (src.add(head), dst.add(head));
        let mut i = words;
        while i >= UNROLL {
            i -= UNROLL;
            let w = [
                load_word(s.add((i + 3) * WORD)),
                load_word(s.add((i + 2) * WORD)),
                load_word(s.add((i + 1) * WORD)),
                load_word(s.add(i * WORD)),
            ];
            store_word(d.add((i + 3) * WORD), w[0]);
            store_word(d.add((i + 2) * WORD), w[1]);
            store_word(d.add((i + 1) * WORD), w[2]);
            store_word(d.add(i * WORD), w[3]);
        }
        while i > 0 {
            i -= 1;
            store_word(d.add(i * WORD), load_word(s.add(i * WORD)));
        }
        for i in (0..head).rev() {
            store_u8(dst.add(i), load_u8(src.add(i)));
        }
    }
}

/// [`copy`] when `src` and `dst` differ modulo 8: each chunk of up to [`BOUNCE`] bytes is loaded
/// whole into a stack buffer, then stored whole, chunks in the copy's direction.
///
/// # Safety
///
/// As [`copy`].
#[inline(never)]
unsafe fn copy_bounced(src: *const u8, dst: *mut u8, len: usize, forward: bool) {
    // Not zeroed (that would cost as much as a chunk's copy): each chunk's bytes are written by
    // `load` before `store` reads them.
    let mut buf = MaybeUninit::<[u64; BOUNCE / WORD]>::uninit();
    let b = buf.as_mut_ptr().cast::<u8>();
    let chunks = len.div_ceil(BOUNCE);
    for c in 0..chunks {
        let c = if forward { c } else { chunks - 1 - c };
        let at = c * BOUNCE;
        let n = BOUNCE.min(len - at);
        // SAFETY: [M2] [M4] at + n <= len, so both ranges are inside the caller's; buf is a local
        // of BOUNCE >= n bytes that nothing else reaches and that overlaps neither range, and its
        // first n bytes are initialised by load before store reads exactly those. A chunk
        // is loaded whole before any of it is stored; going forward (dst below src, or apart), a
        // chunk's stores end at dst + at + n <= src + at + n, before any byte a later chunk
        // loads; backward mirrors it. So no byte is overwritten before it was loaded.
        unsafe {
            load(src.add(at), b, n);
            store(b, dst.add(at), n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A buffer of `n` bytes starting at an 8-aligned address, filled with a pattern.
    fn words(n: usize) -> Vec<u64> {
        (0..n.div_ceil(8) as u64)
            .map(|i| 0x0706_0504_0302_0100u64.wrapping_add(i.wrapping_mul(0x0808_0808_0808_0808)))
            .collect()
    }

    fn bytes(w: &[u64]) -> Vec<u8> {
        w.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }

    #[test]
    fn load_store_and_fill_agree_with_slices_at_every_alignment_and_length() {
        for off in 0..16 {
            for len in 0..80 {
                let mut mem = words(96);
                let base = mem.as_mut_ptr().cast::<u8>();
                let mut model = bytes(&mem);
                let mut out = vec![0xEEu8; len + 3];
                // SAFETY: [M2] [M4] off + len <= 96 bytes of mem; out has len + 3 bytes, written
                // at 3 (unaligned); mem is reached only through base here.
                unsafe { load(base.add(off), out.as_mut_ptr().add(3), len) };
                assert_eq!(&out[3..], &model[off..off + len], "load off {off} len {len}");
                let src: Vec<u8> = (0..len as u8).map(|x| x ^ 0x5A).collect();
                // SAFETY: [M2] [M4] as above.
                unsafe { store(src.as_ptr(), base.add(off), len) };
                model[off..off + len].copy_from_slice(&src);
                assert_eq!(bytes(&mem), model, "store off {off} len {len}");
                let base = mem.as_mut_ptr().cast::<u8>();
                // SAFETY: [M2] [M4] as above.
                unsafe { fill(base.add(off), 0xC3, len) };
                model[off..off + len].fill(0xC3);
                assert_eq!(bytes(&mem), model, "fill off {off} len {len}");
            }
        }
    }

    #[test]
    fn copy_is_memmove_for_every_overlap_alignment_and_length() {
        // Lengths across the unrolled rounds and across the bounce buffer's chunks.
        let lens = (0..70).chain([BOUNCE - 1, BOUNCE, BOUNCE + 1, 2 * BOUNCE + 13, 3 * BOUNCE]);
        for len in lens {
            for src in 0usize..17 {
                for dst in [0, 1, 3, 7, 8, 9, 15, 16, 17, 23, 24, 40].into_iter().chain([
                    src.saturating_sub(1),
                    src + 1,
                    src + 8,
                ]) {
                    let size = 3 * BOUNCE + 64;
                    let mut mem = words(size);
                    let mut model = bytes(&mem);
                    let base = mem.as_mut_ptr().cast::<u8>();
                    // SAFETY: [M2] [M4] src, dst < 64 and len <= 3 * BOUNCE: both ranges are
                    // inside mem, reached only through base here.
                    unsafe { copy(base.add(src), base.add(dst), len) };
                    model.copy_within(src..src + len, dst);
                    assert_eq!(bytes(&mem), model, "copy src {src} dst {dst} len {len}");
                }
            }
        }
    }

    #[test]
    fn copy_between_two_buffers_in_and_out_of_step() {
        for (so, d_o) in [(0, 0), (3, 3), (0, 5), (7, 2), (1, 0)] {
            let len = 4 * BOUNCE + 11;
            let src = words(len + 8);
            let mut dst = vec![0u64; (len + 16) / 8];
            let want = bytes(&src)[so..so + len].to_vec();
            // SAFETY: [M2] [M4] so + len and d_o + len fit in both buffers, which are distinct
            // and reached only through these pointers here.
            unsafe { copy(src.as_ptr().cast::<u8>().add(so), dst.as_mut_ptr().cast::<u8>().add(d_o), len) };
            assert_eq!(&bytes(&dst)[d_o..d_o + len], &want[..], "src at {so}, dst at {d_o}");
        }
    }
}

//! The copy between two shared ranges ([`copy`]): a `memmove` made of atomic accesses on both
//! sides, word by word when the two addresses are in step, through a stack buffer otherwise.

use std::mem::MaybeUninit;

use super::{head_len, load, load_word, store, store_word, WordDomain, BOUNCE, UNROLL, WORD};

/// Copies `len` shared bytes at `src` (in a memory whose whole words are `src_words`) to shared
/// bytes at `dst` (whole words `dst_words`), atomic on both sides; the ranges may overlap (the
/// result is `memmove`'s when nobody else writes meanwhile).
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
/// reference (M2), each inside the memory whose whole words are given, whose words are valid
/// and reached so too.
#[inline]
pub(crate) unsafe fn copy(src: *const u8, src_words: WordDomain, dst: *mut u8, dst_words: WordDomain, len: usize) {
    if len == 0 || src == dst.cast_const() {
        // Onto itself: every byte already holds what the copy would store.
        return;
    }
    if len == WORD && (src as usize | dst as usize) % WORD == 0 {
        // One aligned word (an 8-byte write, the commonest small copy of the data path): one
        // load, one store (two distinct 8-aligned words cannot overlap). An 8-aligned word
        // inside a range is a whole word of its memory.
        // SAFETY: [M2] [M4] the caller's contract; both addresses are 8-aligned.
        unsafe { store_word(dst, load_word(src)) };
        return;
    }
    let forward = (dst as usize) < (src as usize) || (dst as usize) - (src as usize) >= len;
    let ends = Ends { src, src_words, dst, dst_words, len };
    if (src as usize ^ dst as usize) % WORD == 0 {
        // SAFETY: [M2] [M4] the caller's contract, and the two addresses share their alignment.
        unsafe { copy_same_alignment(ends, forward) }
    } else {
        // SAFETY: [M2] [M4] the caller's contract.
        unsafe { copy_bounced(ends, forward) }
    }
}

/// The two ranges of a [`copy`], with the whole words of their memories.
#[derive(Clone, Copy)]
struct Ends {
    src: *const u8,
    src_words: WordDomain,
    dst: *mut u8,
    dst_words: WordDomain,
    len: usize,
}

impl Ends {
    /// Copies bytes `at..at + n` (`n <= BOUNCE`, `at + n <= len`) through `buf`: all loaded (with
    /// the source's sizes) before any is stored (with the destination's).
    ///
    /// # Safety
    ///
    /// As [`copy`]; `buf` holds at least `n` bytes and overlaps neither range.
    #[inline(always)]
    unsafe fn through(self, buf: *mut u8, at: usize, n: usize) {
        // SAFETY: [M2] [M4] at + n <= len, so both sub-ranges are inside the caller's, each with
        // the edges its memory gives it; buf is a private buffer of n bytes that overlaps
        // neither, its bytes written by load before store reads them.
        unsafe {
            let (src, dst) = (self.src.add(at), self.dst.add(at));
            load(src, buf, n, self.src_words.edges(src as usize, n));
            store(buf, dst, n, self.dst_words.edges(dst as usize, n));
        }
    }

    /// [`Ends::through`] of up to 7 bytes, through a buffer on the stack; nothing if `n` is 0.
    ///
    /// # Safety
    ///
    /// As [`copy`]; `n < 8`, `at + n <= len`.
    #[inline(always)]
    unsafe fn part(self, at: usize, n: usize) {
        if n > 0 {
            // SAFETY: [M2] [M4] the caller's contract.
            unsafe { self.part_out_of_line(at, n) };
        }
    }

    /// [`Ends::part`] of 1 to 7 bytes, out of line (the loop of whole words stays small).
    ///
    /// # Safety
    ///
    /// As [`Ends::part`], `n > 0`.
    #[inline(never)]
    unsafe fn part_out_of_line(self, at: usize, n: usize) {
        let mut buf = [0u8; WORD];
        // SAFETY: [M2] [M4] buf is a local of 8 > n bytes; the rest is the caller's.
        unsafe { self.through(buf.as_mut_ptr(), at, n) };
    }
}

/// [`copy`] when `src` and `dst` are equal modulo 8: each aligned word with one load and one
/// store, the bytes at the edges (fewer than 8 at each end) through a stack buffer.
///
/// # Safety
///
/// As [`copy`], and `src as usize % 8 == dst as usize % 8`.
#[inline]
unsafe fn copy_same_alignment(e: Ends, forward: bool) {
    if !forward {
        // SAFETY: [M2] [M4] the caller's contract. Out of line: an overlapping copy to a higher
        // address is rare, and the common loop below keeps its registers to itself.
        return unsafe { copy_same_alignment_backward(e) };
    }
    let (src, dst, len) = (e.src, e.dst, e.len);
    let head = head_len(src as usize, len);
    let words = (len - head) / WORD;
    let tail = head + words * WORD;
    // SAFETY: [M2] [M4] offsets as in load_in_words; src + head and dst + head are both 8-aligned
    // (equal modulo 8), and each aligned word of a range is a whole word of its memory. Every
    // access is atomic. Overlap: going forward, dst is below src (or the ranges are apart), and
    // as the two are equal modulo 8, dst <= src - 8: a store at dst + k never reaches a byte
    // src + j with j > k, so each store lands only on bytes already loaded (the head and tail
    // parts are loaded before they are stored; within a round, the four loads come before the
    // four stores). A part merged into its word writes the word's other bytes back unchanged.
    unsafe {
        e.part(0, head);
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
        e.part(tail, len - tail);
    }
}

/// [`copy_same_alignment`] back to front, for `dst` above `src` with the ranges overlapping.
///
/// # Safety
///
/// As [`copy_same_alignment`].
#[inline(never)]
unsafe fn copy_same_alignment_backward(e: Ends) {
    let (src, dst, len) = (e.src, e.dst, e.len);
    let head = head_len(src as usize, len);
    let words = (len - head) / WORD;
    let tail = head + words * WORD;
    // SAFETY: [M2] [M4] as in copy_same_alignment, mirrored: dst >= src + 8, so a store at
    // dst + k never reaches a byte src + j with j < k, and the bytes are taken from the end.
    unsafe {
        e.part(tail, len - tail);
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
        e.part(0, head);
    }
}

/// [`copy`] when `src` and `dst` differ modulo 8: each chunk of up to [`BOUNCE`] bytes is loaded
/// whole into a stack buffer, then stored whole, chunks in the copy's direction.
///
/// # Safety
///
/// As [`copy`].
#[inline(never)]
unsafe fn copy_bounced(e: Ends, forward: bool) {
    // Not zeroed (that would cost as much as a chunk's copy): each chunk's bytes are written by
    // `load` before `store` reads them.
    let mut buf = MaybeUninit::<[u64; BOUNCE / WORD]>::uninit();
    let b = buf.as_mut_ptr().cast::<u8>();
    let chunks = e.len.div_ceil(BOUNCE);
    for c in 0..chunks {
        let c = if forward { c } else { chunks - 1 - c };
        let at = c * BOUNCE;
        let n = BOUNCE.min(e.len - at);
        // SAFETY: [M2] [M4] at + n <= len; buf is a local of BOUNCE >= n bytes that nothing else
        // reaches and that overlaps neither range. A chunk is loaded whole before any of it is
        // stored; going forward (dst below src, or apart), a chunk's stores end at
        // dst + at + n <= src + at + n, before any byte a later chunk loads (a part merged into
        // its word writes the word's other bytes back unchanged); backward mirrors it. So no
        // byte is overwritten before it was loaded.
        unsafe { e.through(b, at, n) };
    }
}

//! Unit tests of the atomic copies: every alignment, length, overlap and pair of memories,
//! against a plain model (and under Miri, on allocations of exactly the memory's size).

use std::alloc::Layout;

use super::*;

/// A memory of `len` bytes at an address equal to `residue` modulo 8, filled with a
/// pattern. Under Miri, which places allocations at random addresses, it is an allocation
/// of exactly `len` bytes, so that Miri reports any access outside the memory; natively the
/// allocator gives aligned blocks, and the memory lies inside a larger one.
struct Mem {
    base: *mut u8,
    layout: Layout,
    ptr: *mut u8,
    len: usize,
}

impl Mem {
    fn new(residue: usize, len: usize) -> Self {
        let exact = Layout::from_size_align(len.max(1), 1).unwrap();
        for _ in 0..if cfg!(miri) { 256 } else { 1 } {
            // SAFETY: [M1] a layout of non-zero size.
            let p = unsafe { std::alloc::alloc(exact) };
            assert!(!p.is_null());
            if p as usize % WORD == residue {
                return Self::filled(p, exact, p, len);
            }
            // SAFETY: [M1] p was allocated just above with this layout.
            unsafe { std::alloc::dealloc(p, exact) };
        }
        let layout = Layout::from_size_align(len + residue + 1, WORD).unwrap();
        // SAFETY: [M1] a layout of non-zero size.
        let base = unsafe { std::alloc::alloc(layout) };
        assert!(!base.is_null());
        // SAFETY: [M4] residue < len + residue + 1.
        Self::filled(base, layout, unsafe { base.add(residue) }, len)
    }

    fn filled(base: *mut u8, layout: Layout, ptr: *mut u8, len: usize) -> Self {
        for i in 0..len {
            // SAFETY: [M4] i < len, inside the allocation.
            unsafe { ptr.add(i).write((i as u8).wrapping_mul(7).wrapping_add(1)) };
        }
        Self { base, layout, ptr, len }
    }

    fn words(&self) -> WordDomain {
        WordDomain::of_memory(self.ptr as usize, self.len)
    }

    /// The edges of bytes `off..off + n`.
    fn edges(&self, off: usize, n: usize) -> Edges {
        self.words().edges(self.ptr as usize + off, n)
    }

    /// The bytes, while nothing else accesses them.
    fn bytes(&self) -> &[u8] {
        // SAFETY: [M3] the memory is initialised, and nothing writes it while the slice,
        // which borrows self, lives (the tests access it only between two such slices).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        // SAFETY: [M1] base was allocated with layout by Mem::new.
        unsafe { std::alloc::dealloc(self.base, self.layout) };
    }
}

/// Whether the byte at `addr` lies in a whole 8-aligned word of the memory `s..e`.
fn in_whole_word(addr: usize, s: usize, e: usize) -> bool {
    let w = addr - addr % WORD;
    w >= s && w + WORD <= e
}

#[test]
#[cfg_attr(miri, ignore = "arithmetic only, and slow interpreted")]
fn edges_say_exactly_which_bytes_lie_in_whole_words() {
    for s in 64..64 + WORD {
        for len in 0..40 {
            let d = WordDomain::of_memory(s, len);
            for off in 0..=len {
                for n in 0..=len - off {
                    let e = d.edges(s + off, n);
                    assert!(e.head < WORD && e.tail < WORD && e.head + e.tail <= n);
                    for i in 0..n {
                        let want = in_whole_word(s + off + i, s, s + len);
                        assert_eq!(i >= e.head && i < n - e.tail, want, "memory {s}+{len}, range {off}+{n}, byte {i}");
                        assert_eq!(d.contains(s + off + i), want);
                    }
                }
            }
        }
    }
}

#[test]
fn load_store_and_fill_agree_with_slices_at_every_alignment_and_length() {
    // Under Miri, which interprets every access: memories with both ends partial, or one.
    let (residues, lens) =
        if cfg!(miri) { (vec![0, 3, 7], vec![5, 19]) } else { ((0..WORD).collect(), (0..40).collect()) };
    let (mut out, mut src) = ([0u8; 48], [0u8; 48]);
    for residue in residues {
        for &len in &lens {
            let mem = Mem::new(residue, len);
            let mut model = mem.bytes().to_vec();
            for off in 0..=len {
                for n in 0..=len - off {
                    let e = mem.edges(off, n);
                    // SAFETY: [M2] [M4] off + n <= len bytes of mem, with their edges; out
                    // has 48 > n + 3 bytes, written at 3 (unaligned); mem is reached only
                    // through its pointer here.
                    unsafe { load(mem.ptr.add(off), out.as_mut_ptr().add(3), n, e) };
                    assert_eq!(
                        &out[3..3 + n],
                        &model[off..off + n],
                        "load, memory at {residue}+{len}, range {off}+{n}"
                    );
                    let src = &mut src[..n];
                    src.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8 ^ 0x5A ^ off as u8);
                    // SAFETY: [M2] [M4] as above.
                    unsafe { store(src.as_ptr(), mem.ptr.add(off), n, e) };
                    model[off..off + n].copy_from_slice(src);
                    assert_eq!(mem.bytes(), model, "store, memory at {residue}+{len}, range {off}+{n}");
                    // SAFETY: [M2] [M4] as above.
                    unsafe { fill(mem.ptr.add(off), 0xC3 ^ n as u8, n, e) };
                    model[off..off + n].fill(0xC3 ^ n as u8);
                    assert_eq!(mem.bytes(), model, "fill, memory at {residue}+{len}, range {off}+{n}");
                }
            }
            for i in 0..len {
                let inside = mem.words().contains(mem.ptr as usize + i);
                // SAFETY: [M2] [M4] i < len; through the word only when the byte lies in a
                // whole word of the memory.
                unsafe {
                    let p = mem.ptr.add(i);
                    let b = if inside { load_u8_of_word(p) } else { load_byte(p) };
                    assert_eq!(b, model[i]);
                    if inside {
                        store_u8_in_word(p, !b);
                    } else {
                        store_byte(p, !b);
                    }
                }
                model[i] = !model[i];
                assert_eq!(mem.bytes(), model, "store of byte {i}, memory at {residue}+{len}");
            }
        }
    }
}

#[test]
fn copy_is_memmove_for_every_overlap_alignment_and_length() {
    // Lengths across the unrolled rounds and across the bounce buffer's chunks.
    // Under Miri, which interprets every access, a sample.
    let (lens, srcs, dsts, residues): (Vec<usize>, Vec<usize>, Vec<usize>, Vec<usize>) = if cfg!(miri) {
        ([0, 1, 7, 9, 16, 33, BOUNCE + 9].into(), [0, 3, 8].into(), [0, 1, 8, 9, 16, 24].into(), [0, 5].into())
    } else {
        (
            (0..70).chain([BOUNCE - 1, BOUNCE, BOUNCE + 1, 2 * BOUNCE + 13, 3 * BOUNCE]).collect(),
            (0..17).collect(),
            [0, 1, 3, 7, 8, 9, 15, 16, 17, 23, 24, 40].into(),
            (0..WORD).collect(),
        )
    };
    let longest = lens.iter().max().copied().unwrap_or(0);
    for residue in residues {
        // A memory whose two ends are partial words unless residue is 0.
        let size = longest + 64 - residue;
        let mem = Mem::new(residue, size);
        let base = mem.ptr;
        let mut model = mem.bytes().to_vec();
        for &len in &lens {
            for &src in &srcs {
                for dst in dsts.iter().copied().chain([src.saturating_sub(1), src + 1, src + 8]) {
                    // At the memory's end as well as at its start.
                    for (src, dst) in [(src, dst), (size - len - src, size - len - dst)] {
                        // SAFETY: [M2] [M4] src + len and dst + len are at most size: both
                        // ranges are inside mem, with their edges, reached only through
                        // base here.
                        unsafe { copy(base.add(src), mem.words(), base.add(dst), mem.words(), len) };
                        model.copy_within(src..src + len, dst);
                        assert_eq!(mem.bytes(), model, "memory at {residue}, copy src {src} dst {dst} len {len}");
                    }
                }
            }
        }
    }
}

#[test]
fn copy_between_two_memories_in_and_out_of_step() {
    let len = if cfg!(miri) { BOUNCE + 11 } else { 4 * BOUNCE + 11 };
    for (so, d_o) in [(0, 0), (3, 3), (0, 5), (7, 2), (1, 0), (6, 6)] {
        let src = Mem::new(so, len);
        let dst = Mem::new(d_o, len + 2);
        let mut want = dst.bytes().to_vec();
        want[1..len].copy_from_slice(&src.bytes()[1..]);
        // SAFETY: [M2] [M4] len - 1 bytes at 1 fit in both memories, which are distinct and
        // reached only through these pointers here.
        unsafe { copy(src.ptr.add(1), src.words(), dst.ptr.add(1), dst.words(), len - 1) };
        assert_eq!(dst.bytes(), want, "src at {so}, dst at {d_o}");
    }
}

//! Byte accesses racing word-sized accesses to the same bytes through the public API of a
//! `VolatileSlice` (rule M2 of docs/memory.md): the polling pattern of docs/memory.md, a
//! `load_u8` in a loop on bytes a peer lands whole words on.
//!
//! Two racing atomic accesses to overlapping bytes, one of them a write, must have the same size
//! and address, or the program is undefined by Rust's memory model (the "mixed-size" rule). So a
//! view accesses each byte with one size fixed by where the byte lies in its memory: inside a
//! whole 8-aligned word of the memory, always through that word (a `load_u8` is a word load, a
//! `store_u8` or the edge of a copy a compare-exchange of the word); in a partial word at either
//! end of the memory, always as a byte. Miri checks the rule: `scripts/miri.sh` runs these tests
//! with many seeds (`-Zmiri-many-seeds`); natively they only check the values.
//!
//! Each test ends its loops by rounds, not by time, so that a slow interpreter still ends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;

use rpma_mem::{Memory, VolatileSlice};

/// Rounds of the landing thread: small under Miri, which interprets every access.
const ROUNDS: u8 = if cfg!(miri) { 6 } else { 200 };

/// The word whose 8 bytes are all `k`.
fn pattern(k: u8) -> u64 {
    u64::from_ne_bytes([k; 8])
}

/// A memory of `len` bytes, 8-aligned (`Memory::zeroed` is 64-aligned).
fn aligned(len: usize) -> Memory {
    let m = Memory::zeroed(len).expect("a small buffer");
    assert_eq!(m.as_ptr() as usize % 8, 0);
    m
}

/// Asserts that every byte of `bytes` holds a round's value (0 before the first).
fn assert_landed(bytes: &[u8], what: &str) {
    assert!(bytes.iter().all(|&b| b <= ROUNDS), "{what}: {bytes:?} holds a byte nobody wrote");
}

/// The owner polls bytes of words 1 and 2 with `load_u8` and reads a range whose two edges are
/// parts of those words, while a peer lands whole words on them with `write`, `copy_to` and
/// `store_u64` (what the mock does with an RDMA write into a `WRITE_DST` region).
#[test]
fn a_byte_poll_and_a_read_with_partial_edges_race_word_sized_writes() {
    let mem = aligned(32);
    let peer = aligned(16);
    let (v, src) = (mem.volatile(), peer.volatile());
    let landed = AtomicBool::new(false);
    let start = Barrier::new(2);
    std::thread::scope(|s| {
        s.spawn(|| {
            start.wait();
            for k in 1..=ROUNDS {
                match k % 3 {
                    0 => v.write(8, &[k; 16]).unwrap(),
                    1 => {
                        src.fill(k);
                        src.copy_to(&v.subslice(8, 16).unwrap()).unwrap();
                    }
                    _ => {
                        v.store_u64(8, pattern(k), Ordering::Relaxed).unwrap();
                        v.store_u64(16, pattern(k), Ordering::Relaxed).unwrap();
                    }
                }
            }
            landed.store(true, Ordering::Release);
        });
        start.wait();
        let mut out = [0u8; 10];
        loop {
            // Read before the test of `landed`, so that the last round is read after it.
            let done = landed.load(Ordering::Acquire);
            let b = v.load_u8(13).unwrap();
            assert!(b <= ROUNDS, "load_u8: {b}");
            // Bytes 11..21: the last 5 bytes of word 1, the first 5 of word 2.
            v.read(11, &mut out).unwrap();
            assert_landed(&out, "read");
            if done {
                assert_eq!((b, out), (ROUNDS, [ROUNDS; 10]), "the last round, after it landed");
                break;
            }
            std::hint::spin_loop();
        }
    });
}

/// The owner stores bytes of a word (`store_u8`, and a `write` of a few bytes), another thread
/// stores other bytes of the same word, and a peer reads the word whole (`read`, `copy_to`,
/// `load_u64`, what the mock does with an RDMA read of the region): no byte's store is lost and
/// every word read whole is one that was there.
#[test]
fn byte_stores_to_one_word_race_whole_word_reads_and_lose_nothing() {
    let mem = aligned(16);
    let peer = aligned(16);
    let (v, dst) = (mem.volatile(), peer.volatile());
    let start = Barrier::new(3);
    std::thread::scope(|s| {
        s.spawn(|| {
            start.wait();
            let mut out = [0u8; 2];
            for k in 1..=ROUNDS {
                v.store_u8(9, k).unwrap();
                v.write(13, &[k, k]).unwrap();
                // Nobody else writes these bytes: a store of the other thread that wrote back
                // an old value of them (a lost update) would show here.
                v.read(13, &mut out).unwrap();
                assert_eq!((v.load_u8(9).unwrap(), out), (k, [k, k]), "a store was lost");
            }
        });
        s.spawn(|| {
            start.wait();
            let mut out = [0u8; 2];
            for k in 1..=ROUNDS {
                v.store_u8(10, k).unwrap();
                v.write(11, &[k, k]).unwrap();
                v.read(11, &mut out).unwrap();
                assert_eq!((v.load_u8(10).unwrap(), out), (k, [k, k]), "a store was lost");
            }
        });
        start.wait();
        let mut out = [0u8; 16];
        for _ in 0..ROUNDS {
            v.read(0, &mut out).unwrap();
            assert_landed(&out, "read");
            v.copy_to(&dst).unwrap();
            let w = v.load_u64(8, Ordering::Relaxed).unwrap();
            assert_landed(&w.to_ne_bytes(), "load_u64");
        }
    });
    // Each thread's last stores landed: no compare-exchange dropped the other's bytes.
    let mut want = [0u8; 16];
    want[9..15].fill(ROUNDS);
    assert_eq!(mem.to_vec(), want);
}

/// A memory whose ends are partial words (as a C buffer or a `Vec<u8>` may have): bytes 3..8 and
/// 24..27 of `words` have no whole word inside the view's memory, so every access to them is a
/// byte access, while the bytes of words 1 and 2 are reached through their words, also by the
/// reads whose edges cut them. (That no access reaches outside a memory is checked by the unit
/// tests of `atomic_copy`, on exact allocations under Miri.)
#[test]
fn the_partial_words_at_the_ends_of_a_memory_race_as_bytes() {
    let mut words = [0u64; 4];
    // SAFETY: [M2] bytes 3..27 of words, which outlives the view and is reached only through it
    // (and its subslices) until the scope below ends.
    let v = unsafe { VolatileSlice::from_raw_parts(words.as_mut_ptr().cast::<u8>().add(3), 24) };
    let start = Barrier::new(2);
    std::thread::scope(|s| {
        s.spawn(|| {
            start.wait();
            for k in 1..=ROUNDS {
                // The head (5 bytes), a whole word, the tail (3 bytes), in one write.
                v.write(0, &[k; 24]).unwrap();
                v.fill(k);
            }
        });
        start.wait();
        let mut out = [0u8; 7];
        for _ in 0..ROUNDS {
            assert!(v.load_u8(2).unwrap() <= ROUNDS);
            assert!(v.load_u8(22).unwrap() <= ROUNDS);
            v.read(2, &mut out).unwrap();
            assert_landed(&out, "head read");
            v.read(17, &mut out).unwrap();
            assert_landed(&out, "tail read");
        }
    });
    assert_eq!(words[0].to_ne_bytes()[..3], [0; 3]);
    assert_eq!(words[3].to_ne_bytes()[3..], [0; 5]);
}

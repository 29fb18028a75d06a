//! Threads racing on the same bytes through one `VolatileSlice` (rule M2 of docs/memory.md): two
//! threads copy (write, fill, copy_to, read, to_vec) while a third stores and loads words.
//!
//! Every access of a `VolatileSlice` to its bytes is atomic, so this is no data race: it runs
//! under ThreadSanitizer without a report (`scripts/tsan.sh`) and under Miri (`scripts/miri.sh`,
//! which also checks that racing accesses have the same size: tests/mixed_size_race.rs is about
//! that). A copy moves each aligned word it covers whole with one access: every word read is one
//! that some thread wrote whole, never a mix of two (the assertions below, which a byte-wise copy
//! could fail).
//!
//! Each thread is joined explicitly: a join is a `pthread_join`, which ThreadSanitizer sees,
//! whereas the end of `thread::scope` is a wait inside std, which it does not (std is not
//! instrumented by `scripts/tsan.sh`).

use std::sync::atomic::Ordering;
use std::sync::Barrier;

use rpma_mem::{Memory, VolatileSlice};

/// Bytes of each half: the first half is written, then copied onto the second. Small under
/// Miri, which interprets every access.
const HALF: usize = if cfg!(miri) { 128 } else { 2048 };
/// The number of distinct patterns; pattern `k` is the word whose 8 bytes are all `k`.
const PATTERNS: u8 = 7;
/// Rounds per thread: short enough under ThreadSanitizer (each access is instrumented), and
/// under Miri.
const ROUNDS: usize = if cfg!(miri) { 6 } else { 400 };

fn pattern(k: u8) -> u64 {
    u64::from_ne_bytes([k; 8])
}

/// Asserts that every 8-byte word of `bytes` (8-aligned in the memory) is 0 or a pattern.
fn assert_whole_words(bytes: &[u8], what: &str) {
    for (i, w) in bytes.chunks_exact(8).enumerate() {
        let w = u64::from_ne_bytes(w.try_into().expect("8 bytes"));
        assert!(
            w == 0 || (1..=PATTERNS).any(|k| w == pattern(k)),
            "{what}: word {i} is {w:#018x}, which nobody wrote whole"
        );
    }
}

#[test]
fn copies_and_word_stores_race_without_tearing_words() {
    let mem = Memory::zeroed(2 * HALF).expect("4 KiB");
    let v = mem.volatile();
    assert_eq!(v.as_ptr() as usize % 8, 0);
    let (src, dst) = (v.subslice(0, HALF).unwrap(), v.subslice(HALF, HALF).unwrap());
    let bufs: Vec<Vec<u8>> = (0..=PATTERNS).map(|k| vec![k; HALF]).collect();
    let start = Barrier::new(3);
    std::thread::scope(|s| {
        // Copier 1: writes whole patterns into the first half, by copy and by fill.
        let copier1 = s.spawn(|| {
            start.wait();
            for r in 0..ROUNDS {
                let k = 1 + (r % usize::from(PATTERNS)) as u8;
                if r % 2 == 0 {
                    src.write(0, &bufs[usize::from(k)]).unwrap();
                } else {
                    src.fill(k);
                }
            }
        });
        // Copier 2: copies the first half onto the second, reads both back.
        let copier2 = s.spawn(|| {
            start.wait();
            let mut out = vec![0u8; HALF];
            for _ in 0..ROUNDS {
                src.copy_to(&dst).unwrap();
                src.read(0, &mut out).unwrap();
                assert_whole_words(&out, "read");
                assert_whole_words(&v.to_vec(), "to_vec");
            }
        });
        // The third thread stores and loads single words all over both halves.
        let words = s.spawn(|| {
            start.wait();
            let words = 2 * HALF / 8;
            for r in 0..ROUNDS {
                let k = 1 + ((r + 3) % usize::from(PATTERNS)) as u8;
                for i in (r % 5..words).step_by(5) {
                    v.store_u64(8 * i, pattern(k), Ordering::Relaxed).unwrap();
                    let w = v.load_u64(8 * ((i * 7) % words), Ordering::Relaxed).unwrap();
                    assert!(w == 0 || (1..=PATTERNS).any(|k| w == pattern(k)), "load_u64: {w:#018x}");
                }
            }
        });
        for t in [copier1, copier2, words] {
            t.join().unwrap();
        }
    });
    assert_whole_words(&mem.to_vec(), "at the end");
}

#[test]
fn copy_to_between_views_out_of_step_races_without_undefined_behaviour() {
    // Source and destination 3 bytes out of step: no word of one is a word of the other, so the
    // copy's bytes may tear, and the destination's words at its two ends are stored in part
    // (merged into the word); what is checked here (under ThreadSanitizer and Miri) is that the
    // race is no data race and no mixed-size race. The word thread stores every word of both
    // halves, those the copy stores in part included.
    let mem = Memory::zeroed(2 * HALF).expect("4 KiB");
    let v = mem.volatile();
    let src = v.subslice(0, HALF).unwrap();
    let dst: VolatileSlice<'_> = v.subslice(HALF + 3, HALF - 8).unwrap();
    let start = Barrier::new(3);
    std::thread::scope(|s| {
        let copier = s.spawn(|| {
            start.wait();
            for r in 0..ROUNDS {
                src.subslice(0, HALF - 8).unwrap().copy_to(&dst).unwrap();
                if r % 8 == 0 {
                    let _ = dst.to_vec();
                }
            }
        });
        let reader = s.spawn(|| {
            start.wait();
            let mut out = vec![0u8; HALF];
            for _ in 0..ROUNDS {
                src.read(0, &mut out).unwrap();
                assert_whole_words(&out, "read");
            }
        });
        let words = s.spawn(|| {
            start.wait();
            for r in 0..ROUNDS {
                let k = 1 + (r % usize::from(PATTERNS)) as u8;
                for i in 0..2 * HALF / 8 {
                    v.store_u64(8 * i, pattern(k), Ordering::Relaxed).unwrap();
                }
            }
        });
        for t in [copier, reader, words] {
            t.join().unwrap();
        }
    });
    // Quiet now: the last copy moved the last pattern.
    src.subslice(0, HALF - 8).unwrap().copy_to(&dst).unwrap();
    assert_eq!(dst.to_vec(), src.subslice(0, HALF - 8).unwrap().to_vec());
}

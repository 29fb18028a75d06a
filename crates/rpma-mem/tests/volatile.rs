//! VolatileSlice: bounds of every accessor, copies, atomics, concurrent writers, and a model test.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use rpma_mem::{MemError, Memory, VolatileSlice};

fn oob(r: Result<impl std::fmt::Debug, MemError>, offset: usize, len: usize, size: usize) {
    match r {
        Err(MemError::OutOfBounds { offset: o, len: l, size: s }) => assert_eq!((o, l, s), (offset, len, size)),
        other => panic!("expected OutOfBounds {{ {offset}, {len}, {size} }}, got {other:?}"),
    }
}

#[test]
fn every_accessor_checks_bounds_including_overflow() {
    let mem = Memory::zeroed(64).unwrap();
    let v = mem.volatile();
    v.fill(0x11);
    let mut buf = [0u8; 8];
    for offset in [57, 64, 65, usize::MAX - 7, usize::MAX] {
        oob(v.read(offset, &mut buf), offset, 8, 64);
        oob(v.write(offset, &buf), offset, 8, 64);
        oob(v.subslice(offset, 8), offset, 8, 64);
        oob(v.load_u64(offset, Ordering::Relaxed), offset, 8, 64);
        oob(v.store_u64(offset, 1, Ordering::Relaxed), offset, 8, 64);
    }
    for offset in [64, 65, usize::MAX] {
        oob(v.load_u8(offset), offset, 1, 64);
        oob(v.store_u8(offset, 1), offset, 1, 64);
    }
    for offset in [65, usize::MAX] {
        oob(v.read(offset, &mut []), offset, 0, 64);
        oob(v.write(offset, &[]), offset, 0, 64);
        oob(v.subslice(offset, 0), offset, 0, 64);
    }
    // offset + len overflows while each alone is small enough or not.
    oob(v.subslice(1, usize::MAX), 1, usize::MAX, 64);
    oob(v.subslice(usize::MAX, usize::MAX), usize::MAX, usize::MAX, 64);
    // Copies between views of different lengths.
    oob(v.subslice(0, 8).unwrap().copy_to(&v.subslice(8, 9).unwrap()), 0, 8, 9);
    // Nothing was written by any failed call.
    assert_eq!(mem.to_vec(), vec![0x11; 64]);
    // The exact ends are inside.
    v.read(56, &mut buf).unwrap();
    v.write(56, &buf).unwrap();
    v.read(64, &mut []).unwrap();
    assert!(v.subslice(64, 0).unwrap().is_empty());
    assert_eq!(v.load_u8(63).unwrap(), 0x11);
    assert_eq!(v.load_u64(56, Ordering::Relaxed).unwrap(), 0x1111_1111_1111_1111);
}

#[test]
fn subslices_share_the_bytes_and_check_their_own_bounds() {
    let mem = Memory::zeroed(32).unwrap();
    let v = mem.volatile();
    let s = v.subslice(8, 16).unwrap();
    assert_eq!((s.len(), s.as_ptr() as usize - v.as_ptr() as usize), (16, 8));
    s.write(0, b"0123456789abcdef").unwrap();
    let mut out = [0u8; 4];
    v.read(12, &mut out).unwrap();
    assert_eq!(&out, b"4567");
    let inner = s.subslice(4, 8).unwrap();
    inner.fill(b'x');
    assert_eq!(&mem.to_vec()[8..24], b"0123xxxxxxxxcdef");
    oob(s.write(10, &[0; 7]), 10, 7, 16);
    oob(inner.subslice(0, 9), 0, 9, 8);
    assert_eq!(inner.to_vec(), vec![b'x'; 8]);
}

#[test]
fn copy_to_moves_overlapping_ranges_like_memmove() {
    let mem = Memory::from_vec((0..32u8).collect());
    let v = mem.volatile();
    // Forward overlap: 0..16 -> 4..20.
    v.subslice(0, 16).unwrap().copy_to(&v.subslice(4, 16).unwrap()).unwrap();
    let mut model: Vec<u8> = (0..32).collect();
    model.copy_within(0..16, 4);
    assert_eq!(mem.to_vec(), model);
    // Backward overlap: 10..30 -> 5..25.
    v.subslice(10, 20).unwrap().copy_to(&v.subslice(5, 20).unwrap()).unwrap();
    model.copy_within(10..30, 5);
    assert_eq!(mem.to_vec(), model);
    // Between two memories, and onto itself.
    let other = Memory::zeroed(32).unwrap();
    v.copy_to(&other.volatile()).unwrap();
    v.copy_to(&v).unwrap();
    assert_eq!(other.to_vec(), model);
}

#[test]
fn u8_accesses_are_volatile_loads_and_stores() {
    let mem = Memory::zeroed(4).unwrap();
    let v = mem.volatile();
    v.store_u8(3, 0xFE).unwrap();
    assert_eq!(v.load_u8(3).unwrap(), 0xFE);
    assert_eq!(mem.to_vec(), [0, 0, 0, 0xFE]);
}

#[test]
fn a_spin_loop_on_load_u8_sees_another_threads_store() {
    let mem = Memory::zeroed(64).unwrap();
    let v = mem.volatile();
    let started = AtomicBool::new(false);
    std::thread::scope(|s| {
        let poller = s.spawn(|| {
            started.store(true, Ordering::SeqCst);
            let deadline = Instant::now() + Duration::from_secs(20);
            // The load must be repeated each round, never hoisted out of the loop.
            while v.load_u8(7).unwrap() == 0 {
                assert!(Instant::now() < deadline, "the poller never saw the store");
                std::hint::spin_loop();
            }
            v.load_u8(7).unwrap()
        });
        while !started.load(Ordering::SeqCst) {
            std::hint::spin_loop();
        }
        std::thread::sleep(Duration::from_millis(10));
        v.store_u8(7, 9).unwrap();
        assert_eq!(poller.join().unwrap(), 9);
    });
}

#[test]
fn u64_atomics_are_native_endian_and_need_8_aligned_addresses() {
    let mem = Memory::zeroed(64).unwrap();
    let v = mem.volatile();
    v.store_u64(8, 0x0102_0304_0506_0708, Ordering::Release).unwrap();
    assert_eq!(v.load_u64(8, Ordering::Acquire).unwrap(), 0x0102_0304_0506_0708);
    assert_eq!(&mem.to_vec()[8..16], &0x0102_0304_0506_0708u64.to_ne_bytes());
    for order in [Ordering::Relaxed, Ordering::SeqCst] {
        v.store_u64(56, u64::MAX, order).unwrap();
        assert_eq!(v.load_u64(56, order).unwrap(), u64::MAX);
    }
    for offset in [1, 4, 7, 9, 52] {
        match v.load_u64(offset, Ordering::Relaxed) {
            Err(MemError::BadAlignment { align: 8, value, .. }) => assert_eq!(value, v.as_ptr() as u64 + offset as u64),
            other => panic!("offset {offset}: {other:?}"),
        }
        assert!(matches!(v.store_u64(offset, 1, Ordering::Relaxed), Err(MemError::BadAlignment { align: 8, .. })));
    }
    // Alignment is the address's: offset 4 of a view starting at byte 4 is 8-aligned.
    let s = v.subslice(4, 20).unwrap();
    s.store_u64(4, 77, Ordering::Relaxed).unwrap();
    assert_eq!(v.load_u64(8, Ordering::Relaxed).unwrap(), 77);
    assert!(matches!(s.load_u64(0, Ordering::Relaxed), Err(MemError::BadAlignment { .. })));
    assert_eq!(&mem.to_vec()[..8], &[0; 8], "failed stores wrote nothing");
}

#[test]
#[should_panic]
fn load_u64_with_release_order_panics_like_std() {
    let mem = Memory::zeroed(8).unwrap();
    let _ = mem.volatile().load_u64(0, Ordering::Release);
}

#[test]
fn concurrent_u64_writers_never_tear() {
    // Small under Miri, which interprets every access.
    const SLOTS: usize = if cfg!(miri) { 16 } else { 512 };
    const ROUNDS: usize = if cfg!(miri) { 4 } else { 200 };
    const WRITERS: u64 = 4;
    let pattern = |w: u64| 0x0101_0101_0101_0101u64 * (w + 1);
    let valid = |x: u64| x == 0 || (0..WRITERS).any(|w| x == pattern(w));
    let mem = Memory::zeroed(SLOTS * 8).unwrap();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let v = mem.volatile();
                s.spawn(move || {
                    for round in 0..ROUNDS {
                        for slot in 0..SLOTS {
                            // Alternate directions so that writers cross each other.
                            let slot = if (round + w as usize) % 2 == 0 { slot } else { SLOTS - 1 - slot };
                            v.store_u64(slot * 8, pattern(w), Ordering::Relaxed).unwrap();
                        }
                    }
                })
            })
            .collect();
        let reader = s.spawn(|| {
            let v = mem.volatile();
            let mut reads = 0u64;
            while !done.load(Ordering::Acquire) || reads == 0 {
                for slot in 0..SLOTS {
                    let x = v.load_u64(slot * 8, Ordering::Relaxed).unwrap();
                    assert!(valid(x), "slot {slot} holds {x:#x}, which no writer wrote");
                    reads += 1;
                }
            }
            reads
        });
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Release);
        assert!(reader.join().unwrap() > 0);
    });
    let v = mem.volatile();
    for slot in 0..SLOTS {
        let x = v.load_u64(slot * 8, Ordering::Relaxed).unwrap();
        assert!(x != 0 && valid(x), "slot {slot}: {x:#x}");
    }
}

#[test]
fn from_raw_parts_views_foreign_memory() {
    let mut words = [0u64; 4];
    // SAFETY: [M2] words outlives the view and is reached only through it until the view's
    // last use below.
    let v = unsafe { VolatileSlice::from_raw_parts(words.as_mut_ptr().cast(), 32) };
    v.store_u64(24, 5, Ordering::SeqCst).unwrap();
    v.write(0, &[1; 8]).unwrap();
    assert_eq!(v.len(), 32);
    assert!(format!("{v:?}").contains("len: 32"));
    assert_eq!(words, [0x0101_0101_0101_0101, 0, 0, 5]);
}

/// One operation on a view, the view being a subslice (off, len) of the whole memory.
#[derive(Debug, Clone)]
enum Op {
    Read { view: (usize, usize), off: usize, len: usize },
    Write { view: (usize, usize), off: usize, data: Vec<u8> },
    CopyTo { src: (usize, usize), dst_off: usize },
    Fill { view: (usize, usize), byte: u8 },
    LoadU8 { view: (usize, usize), off: usize },
    StoreU8 { view: (usize, usize), off: usize, byte: u8 },
    ToVec { view: (usize, usize) },
}

fn index() -> impl Strategy<Value = usize> {
    prop_oneof![8 => 0usize..80, 1 => Just(usize::MAX), 1 => (usize::MAX - 80)..=usize::MAX]
}

fn view() -> impl Strategy<Value = (usize, usize)> {
    (index(), index())
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (view(), index(), 0usize..40).prop_map(|(view, off, len)| Op::Read { view, off, len }),
        (view(), index(), proptest::collection::vec(any::<u8>(), 0..40)).prop_map(|(view, off, data)| Op::Write {
            view,
            off,
            data
        }),
        (view(), index()).prop_map(|(src, dst_off)| Op::CopyTo { src, dst_off }),
        (view(), any::<u8>()).prop_map(|(view, byte)| Op::Fill { view, byte }),
        (view(), index()).prop_map(|(view, off)| Op::LoadU8 { view, off }),
        (view(), index(), any::<u8>()).prop_map(|(view, off, byte)| Op::StoreU8 { view, off, byte }),
        view().prop_map(|view| Op::ToVec { view }),
    ]
}

/// The model's range, or None where the crate must answer OutOfBounds.
fn range(off: usize, len: usize, size: usize) -> Option<std::ops::Range<usize>> {
    off.checked_add(len).filter(|&end| end <= size).map(|end| off..end)
}

/// Runs `op` on the memory and on the model; both must agree, errors included.
fn check(v: VolatileSlice<'_>, model: &mut [u8], op: &Op) -> Result<(), TestCaseError> {
    let size = model.len();
    let sub = |(o, l): (usize, usize)| (v.subslice(o, l).ok(), range(o, l, size));
    match op.clone() {
        Op::Read { view, off, len } => {
            let (s, r) = sub(view);
            prop_assert_eq!(s.is_some(), r.is_some());
            if let (Some(s), Some(r)) = (s, r) {
                let mut buf = vec![0xCC; len];
                let got = s.read(off, &mut buf);
                let want = range(off, len, r.len()).map(|w| model[r][w].to_vec());
                prop_assert_eq!(got.is_ok(), want.is_some());
                if let Some(want) = want {
                    prop_assert_eq!(buf, want);
                }
            }
        }
        Op::Write { view, off, data } => {
            let (s, r) = sub(view);
            prop_assert_eq!(s.is_some(), r.is_some());
            if let (Some(s), Some(r)) = (s, r) {
                let ok = s.write(off, &data).is_ok();
                let want = range(off, data.len(), r.len());
                prop_assert_eq!(ok, want.is_some());
                if let Some(w) = want {
                    model[r][w].copy_from_slice(&data);
                }
            }
        }
        Op::CopyTo { src, dst_off } => {
            let (s, r) = sub(src);
            let (d, dr) = sub((dst_off, src.1));
            if let (Some(s), Some(r), Some(d), Some(dr)) = (s, r.clone(), d, dr.clone()) {
                s.copy_to(&d).unwrap();
                model.copy_within(r, dr.start);
            } else {
                prop_assert_eq!(s.is_some(), r.is_some());
                prop_assert_eq!(d.is_some(), dr.is_some());
            }
        }
        Op::Fill { view, byte } => {
            let (s, r) = sub(view);
            prop_assert_eq!(s.is_some(), r.is_some());
            if let (Some(s), Some(r)) = (s, r) {
                s.fill(byte);
                model[r].fill(byte);
            }
        }
        Op::LoadU8 { view, off } => {
            if let (Some(s), Some(r)) = sub(view) {
                prop_assert_eq!(s.load_u8(off).ok(), model[r].get(off).copied());
            }
        }
        Op::StoreU8 { view, off, byte } => {
            if let (Some(s), Some(r)) = sub(view) {
                let ok = s.store_u8(off, byte).is_ok();
                prop_assert_eq!(ok, off < r.len());
                if ok {
                    model[r][off] = byte;
                }
            }
        }
        Op::ToVec { view } => {
            if let (Some(s), Some(r)) = sub(view) {
                prop_assert_eq!(s.to_vec(), model[r].to_vec());
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    // proptest's failure persistence reads the working directory, which Miri's isolation
    // refuses; scripts/miri.sh runs the other tests of this file.
    #[cfg_attr(miri, ignore = "proptest needs the file system")]
    fn accessors_agree_with_a_vec_model(
        init in proptest::collection::vec(any::<u8>(), 0..64),
        ops in proptest::collection::vec(op(), 1..24),
    ) {
        let mut model = init.clone();
        let mem = Memory::from_vec(init);
        for op in &ops {
            check(mem.volatile(), &mut model, op)?;
            prop_assert_eq!(mem.to_vec(), model.clone(), "after {:?}", op);
        }
    }
}

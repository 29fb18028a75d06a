//! Conformance cases: local and remote memory regions (docs/semantics.md: usages and access rights,
//! descriptors, registration and on-demand paging).
//!
//! Type-enforced (no case): `reg__NULL_peer`, `reg__NULL_ptr`, `reg__NULL_mr_ptr` (the region
//! owns the `Memory` it is registered with; a peer and the result cannot be NULL);
//! `dereg__NULL_mr_ptr`, `dereg__NULL_mr`; every `get_descriptor*__*_NULL`,
//! `remote_from_descriptor__desc_NULL` / `__mr_ptr_NULL`, `remote_delete__*`,
//! `remote_get_size__*_NULL`, `remote_get_flush_type__*_NULL`, `get_size__*_NULL`,
//! `get_ptr__*_NULL` (references and return values); `*__malloc_ERRNO` (allocation failure aborts);
//! `get_descriptor__desc_alignment` / `remote_from_descriptor__desc_alignment` (a byte array /
//! slice has no alignment requirement: decoding copies bytes).
//! Not tested: advise with `len > u32::MAX` (`InvalidInput`) needs a > 4 GiB registration.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use rpma::{Advice, ErrorKind, Memory, MrRemote, Usage};

use super::harness::{assert_kind, mr, peer, remote, Backend, Case};
use crate::cases;

pub fn cases<B: Backend>() -> Vec<Case<B>> {
    cases![
        reg_dereg__success,
        reg_dereg__success_each_usage,
        reg__0_size,
        reg__0_usage,
        reg__wrong_usage,
        reg__heap_buffer,
        reg__page_aligned_buffer,
        reg__buffer_zeroed,
        reg__arbitrary_usage,
        reg__own_vec_content_kept,
        get_ptr__success,
        get_size__success,
        get_descriptor_size__success,
        get_descriptor__layout,
        remote_from_descriptor__success,
        remote_from_descriptor__invalid_desc_size,
        remote_from_descriptor__buff_usage_equal_zero,
        remote_from_descriptor__longer_desc,
        remote_from_descriptor__usage_kept,
        remote_get_size__success,
        remote_get_flush_type__success,
        remote_get_flush_type__registered,
        local_write_read__success,
        local_to_vec__success,
        local_read__out_of_range,
        local_write__out_of_range,
        local_to_vec__out_of_range,
        local_rw__offset_overflow,
        local_rw__empty_range_at_end,
        local_rw__arbitrary_ranges,
        dereg__success,
        dereg__hands_back_memory,
        as_mut_slice__local_only_success,
        as_mut_slice__remote_access_E_INVAL,
        volatile__same_bytes_as_copies,
        advise__success,
        advise__range_outside,
        advise__failed_E_INVAL_flags,
        advise__failed_E_INVAL_prefetch_write_read_only,
    ]
}

/// Every single usage bit, in bit order.
const USAGES: [Usage; 8] = [
    Usage::READ_SRC,
    Usage::READ_DST,
    Usage::WRITE_SRC,
    Usage::WRITE_DST,
    Usage::FLUSH_TYPE_VISIBILITY,
    Usage::FLUSH_TYPE_PERSISTENT,
    Usage::SEND,
    Usage::RECV,
];

const RW: Usage = Usage::READ_SRC.union(Usage::WRITE_DST).union(Usage::READ_DST).union(Usage::WRITE_SRC);

/// `len` zeroed bytes of heap memory.
fn heap(len: usize) -> Memory {
    Memory::zeroed(len).expect("heap memory")
}

/// `len` zeroed, page-aligned bytes.
fn page_aligned(len: usize) -> Memory {
    Memory::page_aligned(len).expect("page-aligned memory")
}

/// A bounded property runner (a conformance case never runs long).
fn runner() -> TestRunner {
    TestRunner::new(Config { cases: 64, failure_persistence: None, ..Config::default() })
}

fn reg_dereg__success<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let m = p.reg_mr(page_aligned(4096), RW).unwrap();
    assert_eq!(m.len(), 4096);
    assert!(!m.is_empty());
    assert_eq!(m.usage(), RW);
    m.dereg().unwrap();
}

fn reg_dereg__success_each_usage<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    for u in USAGES.into_iter().chain([Usage::all(), Usage::FLUSH_TYPES, RW]) {
        let m = p.reg_mr(page_aligned(4096), u).unwrap_or_else(|e| panic!("reg {u:?}: {e}"));
        assert_eq!(m.usage(), u);
        assert_eq!(m.descriptor()[20], u.bits() as u8);
        m.dereg().unwrap();
    }
}

fn reg__0_size<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    // Empty memory of every kind a caller can hand over.
    let e = p.reg_mr(Memory::from_vec(Vec::new()), RW).expect_err("a zero-size registration");
    assert_eq!((e.kind(), e.op(), e.detail()), (ErrorKind::InvalidInput, "Peer::reg_mr", Some("size is 0")), "{e}");
    assert_kind(p.reg_mr(Memory::from_boxed(Box::new([])), RW), ErrorKind::InvalidInput);
    assert_kind(p.reg_mr(Memory::from_vec(Vec::with_capacity(4096)), RW), ErrorKind::InvalidInput);
    // The shorthand that allocates.
    let e = p.alloc_mr(0, RW).expect_err("a zero-size allocation");
    assert_eq!((e.kind(), e.op()), (ErrorKind::InvalidInput, "Peer::alloc_mr"), "{e}");
    // The size rule comes before the usage rule (librpma's check order); both give InvalidInput.
    assert_kind(p.reg_mr(Memory::from_vec(Vec::new()), Usage::empty()), ErrorKind::InvalidInput);
}

fn reg__0_usage<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    assert_kind(p.reg_mr(page_aligned(4096), Usage::empty()), ErrorKind::InvalidInput);
    assert_kind(p.reg_mr(heap(64), Usage::empty()), ErrorKind::InvalidInput);
}

fn reg__wrong_usage<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    for bits in [0x100, 0x1FF, 0x8000_0000, 0xFFFF_FF00, u32::MAX, 0x101] {
        let u = Usage::from_bits_retain(bits);
        assert_kind(p.reg_mr(page_aligned(4096), u), ErrorKind::InvalidInput);
    }
}

fn reg__heap_buffer<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    for len in [1usize, 7, 100, 4096, 10_000] {
        let m = p.reg_mr(heap(len), RW).unwrap();
        assert_eq!(m.len(), len);
        assert_ne!(m.addr(), 0);
        m.write(0, &[0xAB]).unwrap();
        assert_eq!(m.to_vec(0, 1).unwrap(), [0xAB]);
        m.dereg().unwrap();
    }
}

fn reg__page_aligned_buffer<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    for len in [1usize, 100, 4096, 3 * 4096 + 5] {
        let m = p.reg_mr(page_aligned(len), RW).unwrap();
        assert_eq!(m.len(), len);
        assert_ne!(m.addr(), 0);
        assert_eq!(m.addr() % 4096, 0, "page-aligned buffer at {:#x}", m.addr());
        m.dereg().unwrap();
    }
    // alloc_mr is the page-aligned shorthand.
    let m = p.alloc_mr(8192, RW).unwrap();
    assert_eq!(m.addr() % 4096, 0);
    assert_eq!(m.len(), 8192);
}

fn reg__buffer_zeroed<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    for buf in [heap(1000), page_aligned(5000), Memory::aligned(3000, 256).unwrap()] {
        let len = buf.len();
        let m = p.reg_mr(buf, RW).unwrap();
        assert!(m.to_vec(0, len).unwrap().iter().all(|b| *b == 0));
    }
}

/// Arbitrary usage bits: accepted iff non-zero and within 0xFF; accepted ones are registered
/// on the backend with exactly that usage.
fn reg__arbitrary_usage<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let strategy = prop_oneof![0u32..=0x1FF, any::<u32>()];
    runner()
        .run(&strategy, |bits| {
            let u = Usage::from_bits_retain(bits);
            let valid = bits != 0 && bits & !0xFF == 0;
            match p.reg_mr(heap(64), u) {
                Ok(m) => {
                    prop_assert!(valid, "usage {bits:#x} accepted");
                    prop_assert_eq!(m.usage(), u);
                    prop_assert_eq!(m.descriptor()[20], bits as u8);
                    prop_assert_eq!(m.len(), 64);
                    m.dereg().map_err(|e| TestCaseError::fail(e.to_string()))?;
                }
                Err(e) => {
                    prop_assert!(!valid, "usage {bits:#x} rejected: {e}");
                    prop_assert_eq!(e.kind(), ErrorKind::InvalidInput);
                }
            }
            Ok(())
        })
        .unwrap();
}

fn get_ptr__success<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let m = mr(&p, 4096, RW);
    assert_ne!(m.addr(), 0);
    // The address a peer is told about.
    assert_eq!(m.addr(), u64::from_le_bytes(m.descriptor()[0..8].try_into().unwrap()));
    assert_eq!(m.addr(), remote(&m).addr());
    // Two live regions do not overlap.
    let m2 = mr(&p, 4096, RW);
    assert!(m.addr() + 4096 <= m2.addr() || m2.addr() + 4096 <= m.addr());
}

fn get_size__success<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    for len in [1usize, 21, 4096, 65536] {
        let m = mr(&p, len, RW);
        assert_eq!(m.len(), len);
        assert_eq!(m.volatile().len(), len);
        assert_eq!(remote(&m).len(), len as u64);
    }
}

fn get_descriptor_size__success<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let m = mr(&p, 4096, RW);
    assert_eq!(m.descriptor_size(), 21);
    assert_eq!(MrRemote::DESCRIPTOR_SIZE, 21);
    assert_eq!(m.descriptor().len(), 21);
}

/// `raddr: u64 LE` at 0, `size: u64 LE` at 8, `rkey: u32 LE` at 16, `usage: u8` at 20.
fn get_descriptor__layout<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let u = Usage::READ_SRC | Usage::FLUSH_TYPE_PERSISTENT;
    let m = mr(&p, 12345, u);
    let d = m.descriptor();
    assert_eq!(d[0..8], m.addr().to_le_bytes());
    assert_eq!(d[8..16], 12345u64.to_le_bytes());
    assert_eq!(d[16..20], m.rkey().to_le_bytes());
    assert_eq!(d[20], 0x21);
}

fn remote_from_descriptor__success<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let u = Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_VISIBILITY;
    let m = mr(&p, 8192, u);
    let r = MrRemote::from_descriptor(&m.descriptor()).unwrap();
    assert_eq!(r.addr(), m.addr());
    assert_eq!(r.len(), 8192);
    assert!(!r.is_empty());
    assert_eq!(r.rkey(), m.rkey());
    assert_eq!(r.usage(), u);
    assert_eq!(r.descriptor().encode(), m.descriptor());
    assert_eq!(remote(&m), r);
}

fn remote_from_descriptor__invalid_desc_size<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let d = mr(&p, 4096, RW).descriptor();
    for n in 0..MrRemote::DESCRIPTOR_SIZE {
        assert_kind(MrRemote::from_descriptor(&d[..n]), ErrorKind::InvalidInput);
    }
}

/// docs/decisions.md #2: `InvalidInput` (librpma's code), not the man page's `Unsupported`.
fn remote_from_descriptor__buff_usage_equal_zero<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let mut d = mr(&p, 4096, RW).descriptor();
    d[20] = 0;
    assert_kind(MrRemote::from_descriptor(&d), ErrorKind::InvalidInput);
    assert_kind(MrRemote::from_descriptor(&[0u8; 21]), ErrorKind::InvalidInput);
}

fn remote_from_descriptor__longer_desc<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let m = mr(&p, 4096, RW);
    let mut long = m.descriptor().to_vec();
    long.extend_from_slice(&[0xEE; 11]);
    let r = MrRemote::from_descriptor(&long).unwrap();
    assert_eq!(r, remote(&m));
}

/// No validation beyond size and usage != 0: any address, size, rkey and usage byte is kept.
fn remote_from_descriptor__usage_kept<B: Backend>(_b: &B) {
    let golden = [
        0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, 0x00, 0x0f, 0x0e, 0x0d, 0x0c, 0x0b, 0x0a, 0x09, 0x08, 0x13, 0x12,
        0x11, 0x10, 0x21,
    ];
    let r = MrRemote::from_descriptor(&golden).unwrap();
    assert_eq!(r.addr(), 0x0001_0203_0405_0607);
    assert_eq!(r.len(), 0x0809_0a0b_0c0d_0e0f);
    assert_eq!(r.rkey(), 0x1011_1213);
    assert_eq!(r.usage(), Usage::READ_SRC | Usage::FLUSH_TYPE_PERSISTENT);
    for usage in 1..=u8::MAX {
        let mut d = golden;
        d[20] = usage;
        let r = MrRemote::from_descriptor(&d).unwrap();
        assert_eq!(r.usage().bits(), u32::from(usage));
        assert_eq!(r.descriptor().encode(), d);
    }
    // A descriptor may claim a zero size (decoding does not check it).
    let mut d = golden;
    d[8..16].fill(0);
    let r = MrRemote::from_descriptor(&d).unwrap();
    assert_eq!(r.len(), 0);
    assert!(r.is_empty());
}

fn remote_get_size__success<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    for len in [1usize, 4096, 100_000] {
        let m = mr(&p, len, RW);
        assert_eq!(remote(&m).len(), len as u64);
    }
}

/// `usage & 0x30` for crafted descriptors.
fn remote_get_flush_type__success<B: Backend>(_b: &B) {
    let mut d = [0u8; 21];
    for (usage, expected) in [(0x01u8, 0u32), (0x10, 0x10), (0x20, 0x20), (0x30, 0x30), (0xFF, 0x30), (0xCF, 0)] {
        d[20] = usage;
        let r = MrRemote::from_descriptor(&d).unwrap();
        assert_eq!(r.flush_type().bits(), expected, "usage {usage:#x}");
    }
}

/// Flush types of regions registered on the backend.
fn remote_get_flush_type__registered<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let cases = [
        (Usage::READ_SRC | Usage::WRITE_DST, Usage::empty()),
        (Usage::FLUSH_TYPE_VISIBILITY, Usage::FLUSH_TYPE_VISIBILITY),
        (Usage::FLUSH_TYPE_PERSISTENT, Usage::FLUSH_TYPE_PERSISTENT),
        (Usage::FLUSH_TYPES, Usage::FLUSH_TYPES),
        (Usage::FLUSH_TYPE_VISIBILITY | Usage::READ_SRC, Usage::FLUSH_TYPE_VISIBILITY),
    ];
    for (u, ft) in cases {
        let m = mr(&p, 4096, u);
        assert_eq!(remote(&m).flush_type(), ft, "usage {u:?}");
    }
}

fn local_write_read__success<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let m = mr(&p, 4096, RW);
    m.write(100, b"hello rpma").unwrap();
    let mut buf = [0u8; 10];
    m.read(100, &mut buf).unwrap();
    assert_eq!(&buf, b"hello rpma");
    // The whole region, at both ends.
    m.write(0, &[1]).unwrap();
    m.write(4095, &[2]).unwrap();
    let mut all = vec![0u8; 4096];
    m.read(0, &mut all).unwrap();
    assert_eq!((all[0], all[4095], &all[100..110]), (1, 2, &b"hello rpma"[..]));
}

fn local_to_vec__success<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let m = p.reg_mr(heap(64), RW).unwrap();
    let data: Vec<u8> = (0..64).collect();
    m.write(0, &data).unwrap();
    assert_eq!(m.to_vec(0, 64).unwrap(), data);
    assert_eq!(m.to_vec(10, 5).unwrap(), [10, 11, 12, 13, 14]);
    assert_eq!(m.to_vec(64, 0).unwrap(), Vec::<u8>::new());
}

fn local_read__out_of_range<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let m = mr(&p, 100, RW);
    let mut buf = [0u8; 10];
    assert_kind(m.read(91, &mut buf), ErrorKind::InvalidInput);
    assert_kind(m.read(100, &mut buf), ErrorKind::InvalidInput);
    assert_kind(m.read(101, &mut []), ErrorKind::InvalidInput);
    let mut big = vec![0u8; 101];
    assert_kind(m.read(0, &mut big), ErrorKind::InvalidInput);
    m.read(90, &mut buf).unwrap();
}

fn local_write__out_of_range<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let m = mr(&p, 100, RW);
    assert_kind(m.write(91, &[7; 10]), ErrorKind::InvalidInput);
    assert_kind(m.write(0, &[7; 101]), ErrorKind::InvalidInput);
    assert_kind(m.write(101, &[]), ErrorKind::InvalidInput);
    // A rejected write changes nothing.
    assert!(m.to_vec(0, 100).unwrap().iter().all(|b| *b == 0));
    m.write(90, &[7; 10]).unwrap();
}

fn local_to_vec__out_of_range<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let m = mr(&p, 100, RW);
    assert_kind(m.to_vec(0, 101), ErrorKind::InvalidInput);
    assert_kind(m.to_vec(50, 51), ErrorKind::InvalidInput);
    assert_kind(m.to_vec(101, 0), ErrorKind::InvalidInput);
}

/// `offset + len` overflowing `usize` is out of range, not a wrap-around.
fn local_rw__offset_overflow<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let m = mr(&p, 100, RW);
    let mut buf = [0u8; 2];
    assert_kind(m.read(usize::MAX, &mut buf), ErrorKind::InvalidInput);
    assert_kind(m.write(usize::MAX, &[1, 2]), ErrorKind::InvalidInput);
    assert_kind(m.write(usize::MAX - 1, &[1, 2, 3]), ErrorKind::InvalidInput);
    assert_kind(m.to_vec(usize::MAX, 2), ErrorKind::InvalidInput);
    assert_kind(m.to_vec(2, usize::MAX), ErrorKind::InvalidInput);
    assert_kind(m.to_vec(usize::MAX, usize::MAX), ErrorKind::InvalidInput);
}

fn local_rw__empty_range_at_end<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let m = mr(&p, 100, RW);
    m.read(100, &mut []).unwrap();
    m.write(100, &[]).unwrap();
    m.read(0, &mut []).unwrap();
    assert!(m.to_vec(100, 0).unwrap().is_empty());
}

/// Arbitrary offset and length: accepted iff `[offset, offset + len)` is inside the region;
/// accepted writes read back the same bytes.
fn local_rw__arbitrary_ranges<B: Backend>(b: &B) {
    const SIZE: usize = 300;
    let t = b.transport();
    let p = peer(b, &t);
    let m = p.reg_mr(heap(SIZE), RW).unwrap();
    let offset = prop_oneof![4 => 0usize..400, 1 => (usize::MAX - 400)..=usize::MAX];
    let strategy = (offset, 0usize..400, any::<u8>());
    runner()
        .run(&strategy, |(offset, len, seed)| {
            let in_bounds = offset.checked_add(len).is_some_and(|end| end <= SIZE);
            let data: Vec<u8> = (0..len).map(|i| seed.wrapping_add(i as u8)).collect();
            let w = m.write(offset, &data);
            let mut back = vec![0u8; len];
            let r = m.read(offset, &mut back);
            let v = m.to_vec(offset, len);
            prop_assert_eq!(w.is_ok(), in_bounds);
            prop_assert_eq!(r.is_ok(), in_bounds);
            prop_assert_eq!(v.is_ok(), in_bounds);
            if in_bounds {
                prop_assert_eq!(&back, &data);
                prop_assert_eq!(v.unwrap(), data);
            } else {
                prop_assert_eq!(w.unwrap_err().kind(), ErrorKind::InvalidInput);
                prop_assert_eq!(r.unwrap_err().kind(), ErrorKind::InvalidInput);
                prop_assert_eq!(v.unwrap_err().kind(), ErrorKind::InvalidInput);
            }
            Ok(())
        })
        .unwrap();
}

fn dereg__success<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let m = mr(&p, 4096, RW);
    let back = m.dereg().unwrap().expect("no operation holds the region");
    assert_eq!(back.len(), 4096);
    // Register again after deregistration, and drop (dereg on drop) instead.
    let m = p.reg_mr(heap(10), RW).unwrap();
    drop(m);
    // A region outlives the caller's peer handle.
    let m = mr(&p, 4096, RW);
    drop(p);
    m.write(0, &[5]).unwrap();
    m.dereg().unwrap();
}

/// Prefetch succeeds where the device supports advising, else `Unsupported`.
fn advise__success<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let m = mr(&p, 8192, RW);
    for (off, len, advice, flags) in [
        (0, 8192, Advice::Prefetch, 0),
        (4096, 4096, Advice::Prefetch, Advice::FLAG_FLUSH),
        (0, 100, Advice::PrefetchWrite, Advice::FLAG_FLUSH),
        (100, 100, Advice::PrefetchNoFault, 0),
    ] {
        let r = m.advise(off, len, advice, flags);
        if b.caps().advise_mr {
            r.unwrap_or_else(|e| panic!("advise({off}, {len}, {advice:?}, {flags}): {e}"));
        } else {
            assert_kind(r, ErrorKind::Unsupported);
        }
    }
}

/// The range is checked here (docs/decisions.md #13), whatever the device supports.
fn advise__range_outside<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let m = mr(&p, 4096, RW);
    assert_kind(m.advise(0, 4097, Advice::Prefetch, 0), ErrorKind::InvalidInput);
    assert_kind(m.advise(4096, 1, Advice::Prefetch, 0), ErrorKind::InvalidInput);
    assert_kind(m.advise(4097, 0, Advice::Prefetch, 0), ErrorKind::InvalidInput);
    assert_kind(m.advise(usize::MAX, 2, Advice::Prefetch, 0), ErrorKind::InvalidInput);
    assert_kind(m.advise(1, usize::MAX, Advice::Prefetch, 0), ErrorKind::InvalidInput);
}

/// Unknown flags: `InvalidInput` from the provider where advising is supported, else `Unsupported`.
fn advise__failed_E_INVAL_flags<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let m = mr(&p, 4096, RW);
    for flags in [2u32, 0x8000_0000, u32::MAX] {
        let r = m.advise(0, 4096, Advice::Prefetch, flags);
        let kind = if b.caps().advise_mr { ErrorKind::InvalidInput } else { ErrorKind::Unsupported };
        assert_kind(r, kind);
    }
}

/// PREFETCH_WRITE on a region the device may not write: `InvalidInput` (usage does not allow the
/// advice) where advising is supported, else `Unsupported`.
fn advise__failed_E_INVAL_prefetch_write_read_only<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let m = mr(&p, 4096, Usage::READ_SRC);
    let r = m.advise(0, 4096, Advice::PrefetchWrite, 0);
    let kind = if b.caps().advise_mr { ErrorKind::InvalidInput } else { ErrorKind::Unsupported };
    assert_kind(r, kind);
    // A plain prefetch of the same region is fine.
    let r = m.advise(0, 4096, Advice::Prefetch, 0);
    if b.caps().advise_mr {
        r.unwrap();
    } else {
        assert_kind(r, ErrorKind::Unsupported);
    }
}

/// A caller's own vector is registered in place: its content is the region's, and what a
/// region holds afterwards comes back with the vector (the same allocation).
fn reg__own_vec_content_kept<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let v: Vec<u8> = (0..=255).cycle().take(1000).collect();
    let m = p.reg_mr(Memory::from_vec(v.clone()), RW).unwrap();
    assert_eq!(m.len(), 1000);
    assert_eq!(m.to_vec(0, 1000).unwrap(), v);
    m.write(0, b"new").unwrap();
    let back = m.dereg().unwrap().expect("no operation holds the region");
    let back = back.into_vec().expect("a vector comes back as a vector");
    assert_eq!(&back[..3], b"new");
    assert_eq!(back[3..], v[3..]);
    // A boxed slice too.
    let m = p.reg_mr(Memory::from_boxed(vec![7u8; 64].into_boxed_slice()), RW).unwrap();
    assert_eq!(m.to_vec(0, 64).unwrap(), vec![7; 64]);
    let back = m.dereg().unwrap().expect("no operation holds the region").into_boxed().expect("a box");
    assert_eq!(&back[..], &[7u8; 64][..]);
}

/// `dereg` gives back the very memory the region owned (pointer equality), with the bytes
/// written through the region.
fn dereg__hands_back_memory<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    for u in [RW, Usage::WRITE_SRC, Usage::RECV] {
        let m = p.reg_mr(page_aligned(8192), u).unwrap();
        let ptr = m.volatile().as_ptr();
        m.write(4000, b"kept").unwrap();
        let back = m.dereg().unwrap().expect("no operation holds the region");
        assert_eq!(back.as_ptr(), ptr, "usage {u:?}: another allocation came back");
        assert_eq!(back.len(), 8192);
        assert_eq!(back.volatile().subslice(4000, 4).unwrap().to_vec(), b"kept");
    }
}

/// A region no remote peer may access (its usage grants no remote read, write or flush) can be
/// used as a plain `&mut [u8]`, and what is written through it is the region's content.
/// (On iWARP a read destination or receive buffer needs remote write access: not local-only.)
fn as_mut_slice__local_only_success<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let iwarp = b.caps().iwarp;
    let local_only = [
        (Usage::WRITE_SRC, true),
        (Usage::SEND, true),
        (Usage::WRITE_SRC | Usage::SEND, true),
        (Usage::READ_DST, !iwarp),
        (Usage::RECV, !iwarp),
        (Usage::READ_DST | Usage::WRITE_SRC | Usage::SEND | Usage::RECV, !iwarp),
    ];
    for (u, ok) in local_only {
        let mut m = p.alloc_mr(256, u).unwrap();
        assert_eq!(m.remote_access(), !ok, "usage {u:?}");
        if !ok {
            assert_kind(m.as_mut_slice().map(|s| s.len()), ErrorKind::InvalidInput);
            continue;
        }
        let s = m.as_mut_slice().unwrap_or_else(|e| panic!("usage {u:?}: {e}"));
        assert_eq!(s.len(), 256);
        assert!(s.iter().all(|&x| x == 0), "a fresh region is zeroed");
        for (i, x) in s.iter_mut().enumerate() {
            *x = i as u8;
        }
        let want: Vec<u8> = (0..=255).collect();
        assert_eq!(m.to_vec(0, 256).unwrap(), want);
        // Copies in are seen through the slice too.
        m.write(10, &[0xAA; 4]).unwrap();
        assert_eq!(m.as_mut_slice().unwrap()[10..14], [0xAA; 4]);
        m.dereg().unwrap();
    }
}

/// A region a remote peer may read, write or flush never becomes a `&mut [u8]`: InvalidInput (its
/// bytes are reached by copies or the volatile view), and the region stays usable.
fn as_mut_slice__remote_access_E_INVAL<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    for u in [
        Usage::READ_SRC,
        Usage::WRITE_DST,
        Usage::FLUSH_TYPE_VISIBILITY,
        Usage::FLUSH_TYPE_PERSISTENT,
        Usage::FLUSH_TYPES,
        Usage::READ_SRC | Usage::WRITE_SRC,
        Usage::WRITE_DST | Usage::SEND,
        Usage::FLUSH_TYPE_VISIBILITY | Usage::WRITE_SRC | Usage::SEND | Usage::RECV,
        Usage::all(),
    ] {
        let mut m = p.alloc_mr(64, u).unwrap();
        assert!(m.remote_access(), "usage {u:?}");
        let e = m.as_mut_slice().map(|s| s.len()).expect_err("a remotely accessible region as &mut [u8]");
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "usage {u:?}: {e}");
        m.write(0, &[1, 2, 3]).unwrap();
        assert_eq!(m.volatile().to_vec()[..3], [1, 2, 3]);
        m.dereg().unwrap();
    }
}

/// The volatile view and the copying shorthands see the same bytes, both ways.
fn volatile__same_bytes_as_copies<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let m = mr(&p, 4096, RW);
    let v = m.volatile();
    assert_eq!(v.len(), 4096);
    v.write(100, b"volatile").unwrap();
    assert_eq!(m.to_vec(100, 8).unwrap(), b"volatile");
    m.write(200, &0x1122_3344_5566_7788u64.to_ne_bytes()).unwrap();
    assert_eq!(v.load_u64(200, std::sync::atomic::Ordering::Acquire).unwrap(), 0x1122_3344_5566_7788);
    v.store_u8(4095, 9).unwrap();
    assert_eq!(m.to_vec(4095, 1).unwrap(), [9]);
    assert_eq!(v.load_u8(100).unwrap(), b'v');
    let sub = v.subslice(100, 8).unwrap();
    assert_eq!(sub.to_vec(), b"volatile");
    sub.fill(0);
    assert_eq!(m.to_vec(100, 8).unwrap(), [0; 8]);
    // Out of range is refused, not wrapped.
    assert!(v.subslice(4090, 7).is_err());
    assert!(v.load_u8(4096).is_err());
    assert!(v.load_u64(4092, std::sync::atomic::Ordering::Relaxed).is_err());
}

//! Memory: every constructor, ownership hand-back without copies, release callbacks, leaks.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rpma_mem::{page_size, MemError, Memory, MemoryKind};

fn assert_zeroed(mem: &Memory) {
    assert!(mem.to_vec().iter().all(|&b| b == 0), "{mem:?} is not zeroed");
}

fn assert_writable(mem: &mut Memory) {
    let len = mem.len();
    mem.volatile().store_u8(len - 1, 0xA5).unwrap();
    mem.volatile().store_u8(0, 0x5A).unwrap();
    assert_eq!(mem.as_slice()[0], 0x5A);
    if len > 1 {
        assert_eq!(mem.as_slice()[len - 1], 0xA5);
    }
    mem.as_mut_slice()[0] = 7;
    assert_eq!(mem.volatile().load_u8(0).unwrap(), 7);
}

#[test]
fn zeroed_is_64_byte_aligned_heap() {
    // 1 MiB is slow to check under Miri, which interprets every access.
    for len in [1, 63, 64, 65, 4096, if cfg!(miri) { 4097 } else { 1 << 20 }] {
        let mut mem = Memory::zeroed(len).unwrap();
        assert_eq!((mem.len(), mem.kind(), mem.is_empty(), mem.is_map_sync()), (len, MemoryKind::Heap, false, false));
        assert_eq!(mem.as_ptr() as usize % 64, 0);
        assert_zeroed(&mem);
        assert_writable(&mut mem);
    }
}

#[test]
fn page_aligned_is_page_aligned() {
    // From 256 KiB on, an anonymous mapping (its length not a multiple of the page size here).
    for len in [10, if cfg!(miri) { 8193 } else { (1 << 20) + 1 }] {
        let mut mem = Memory::page_aligned(len).unwrap();
        assert_eq!((mem.len(), mem.kind()), (len, MemoryKind::Aligned));
        assert_eq!(mem.as_ptr() as usize % page_size(), 0);
        assert_zeroed(&mem);
        assert_writable(&mut mem);
    }
    assert!(matches!(Memory::page_aligned(0), Err(MemError::Empty)));
}

#[test]
fn aligned_honours_any_power_of_two() {
    for align in [1, 2, 8, 64, 4096, 1 << 21] {
        let mut mem = Memory::aligned(100, align).unwrap();
        assert_eq!((mem.len(), mem.kind()), (100, MemoryKind::Aligned));
        assert_eq!(mem.as_ptr() as usize % align, 0, "align {align}");
        assert_zeroed(&mem);
        assert_writable(&mut mem);
    }
}

#[test]
fn aligned_rejects_bad_alignments_and_empty() {
    for align in [0, 3, 24, 4097, usize::MAX] {
        match Memory::aligned(100, align) {
            Err(MemError::BadAlignment { value, align: a, .. }) => assert_eq!((value, a), (align as u64, align)),
            other => panic!("align {align}: {other:?}"),
        }
    }
    assert!(matches!(Memory::aligned(0, 8), Err(MemError::Empty)));
    assert!(matches!(Memory::zeroed(0), Err(MemError::Empty)));
}

#[test]
#[cfg_attr(miri, ignore = "Miri stops at an allocation larger than the machine has")]
fn too_large_allocations_are_alloc_errors() {
    // Overflows a Layout (rounded up to the alignment past isize::MAX).
    assert!(matches!(Memory::zeroed(usize::MAX), Err(MemError::Alloc { len: usize::MAX })));
    assert!(matches!(Memory::aligned(1, 1 << 63), Err(MemError::Alloc { len: 1 })));
    // A valid Layout no allocator can satisfy (more than the 47-bit address space).
    let huge = isize::MAX as usize / 2;
    assert!(matches!(Memory::zeroed(huge), Err(MemError::Alloc { len }) if len == huge));
    assert!(matches!(Memory::page_aligned(huge), Err(MemError::Alloc { .. })));
}

/// Reads a number from a /proc file or a /proc/meminfo line.
fn proc_number(path: &str, meminfo_key: Option<&str>) -> u64 {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let field = match meminfo_key {
        Some(key) => text.lines().find_map(|l| l.strip_prefix(key)).unwrap_or("0"),
        None => &text,
    };
    field.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0)
}

#[test]
#[cfg_attr(miri, ignore = "reads /proc and maps huge pages")]
fn huge_pages_follow_what_the_system_reserved() {
    let reserved = proc_number("/proc/sys/vm/nr_hugepages", None);
    let overcommit = proc_number("/proc/sys/vm/nr_overcommit_hugepages", None);
    let free = proc_number("/proc/meminfo", Some("HugePages_Free:"));
    let huge = proc_number("/proc/meminfo", Some("Hugepagesize:")) as usize * 1024;
    let result = Memory::huge_pages(1);
    if reserved == 0 && overcommit == 0 {
        // Nothing reserved and no surplus allowed: the kernel refuses the mapping with ENOMEM.
        match result {
            Err(e @ MemError::HugePages { len: 1, .. }) => {
                assert_eq!(e.errno(), Some(libc::ENOMEM), "{e}");
                assert!(e.to_string().contains("nr_hugepages"), "{e}");
            }
            other => panic!("no huge pages reserved, yet: {other:?}"),
        }
    } else if free >= 1 {
        let mut mem = result.expect("a free huge page is reserved");
        assert_eq!((mem.len(), mem.kind()), (1, MemoryKind::HugePages));
        assert_eq!(mem.as_ptr() as usize % huge, 0, "huge-page aligned");
        assert_zeroed(&mem);
        assert_writable(&mut mem);
        assert!(mem.flush(0, 1).is_ok());
    } else {
        // All reserved pages in use, or only surplus pages: either outcome, but a clear one.
        match result {
            Ok(mem) => assert_eq!((mem.len(), mem.kind()), (1, MemoryKind::HugePages)),
            Err(e) => assert!(matches!(e, MemError::HugePages { len: 1, .. }), "{e:?}"),
        }
    }
}

#[test]
#[cfg_attr(miri, ignore = "reads /proc")]
fn huge_pages_reject_empty_and_overflowing_lengths() {
    assert!(matches!(Memory::huge_pages(0), Err(MemError::Empty)));
    assert!(matches!(Memory::huge_pages(usize::MAX), Err(MemError::Alloc { len: usize::MAX })));
}

#[test]
fn from_vec_takes_the_buffer_and_into_vec_gives_it_back() {
    let mut v = Vec::with_capacity(100);
    v.extend_from_slice(b"hello");
    let (ptr, cap) = (v.as_ptr(), v.capacity());
    let mem = Memory::from_vec(v);
    assert_eq!((mem.len(), mem.kind(), mem.as_ptr().cast_const()), (5, MemoryKind::Vec, ptr));
    mem.volatile().write(0, b"HELLO").unwrap();
    let back = mem.into_vec().unwrap();
    assert_eq!((back.as_ptr(), back.capacity(), back.as_slice()), (ptr, cap, &b"HELLO"[..]));
}

#[test]
fn from_boxed_and_into_boxed_keep_the_allocation() {
    let b: Box<[u8]> = vec![1, 2, 3].into_boxed_slice();
    let ptr = b.as_ptr();
    let mem = Memory::from_boxed(b);
    assert_eq!((mem.len(), mem.kind(), mem.as_ptr().cast_const()), (3, MemoryKind::Boxed, ptr));
    let back = mem.into_boxed().unwrap();
    assert_eq!((back.as_ptr(), &back[..]), (ptr, &[1u8, 2, 3][..]));
    // Boxed -> Vec, and a full Vec -> Box: still the same allocation.
    let v = Memory::from_boxed(back).into_vec().unwrap();
    assert_eq!((v.as_ptr(), v.capacity()), (ptr, 3));
    let b = Memory::from_vec(v).into_boxed().unwrap();
    assert_eq!(b.as_ptr(), ptr);
}

#[test]
fn into_boxed_refuses_a_vec_with_spare_capacity_instead_of_copying() {
    let mut v = Vec::with_capacity(64);
    v.extend_from_slice(&[9; 10]);
    let ptr = v.as_ptr();
    let mem = Memory::from_vec(v);
    let mem = mem.into_boxed().expect_err("would reallocate");
    assert_eq!((mem.kind(), mem.len(), mem.as_ptr().cast_const()), (MemoryKind::Vec, 10, ptr));
    let back = mem.into_vec().unwrap();
    assert_eq!((back.as_ptr(), back.capacity()), (ptr, 64));
}

#[test]
fn other_kinds_are_given_back_unchanged() {
    let mem = Memory::zeroed(32).unwrap();
    mem.volatile().fill(3);
    let ptr = mem.as_ptr();
    let mem = mem.into_vec().expect_err("heap is no Vec");
    let mem = mem.into_boxed().expect_err("heap is no Box");
    assert_eq!((mem.kind(), mem.as_ptr(), mem.to_vec()), (MemoryKind::Heap, ptr, vec![3; 32]));
    let aligned = Memory::aligned(8, 8).unwrap().into_vec().expect_err("aligned is no Vec");
    assert_eq!(aligned.kind(), MemoryKind::Aligned);
}

#[test]
fn empty_vec_and_box_are_empty_memories() {
    let mem = Memory::from_vec(Vec::new());
    assert!(mem.is_empty() && mem.volatile().is_empty() && mem.to_vec().is_empty());
    assert!(mem.flush(0, 0).is_ok());
    assert!(matches!(mem.volatile().load_u8(0), Err(MemError::OutOfBounds { offset: 0, len: 1, size: 0 })));
    assert!(mem.into_vec().unwrap().is_empty());
    let mut mem = Memory::from_boxed(Box::new([]));
    assert!(mem.as_mut_slice().is_empty());
    assert!(mem.into_boxed().unwrap().is_empty());
}

/// A buffer released by a counting callback.
fn raw_memory(len: usize, calls: &Arc<AtomicUsize>, seen: &Arc<Mutex<Option<(usize, usize)>>>) -> Memory {
    let buf: &'static mut [u8] = Box::leak(vec![0u8; len].into_boxed_slice());
    let ptr = NonNull::new(buf.as_mut_ptr()).unwrap();
    let (calls, seen) = (Arc::clone(calls), Arc::clone(seen));
    let release = Box::new(move |p: NonNull<u8>, l: usize| {
        calls.fetch_add(1, Ordering::SeqCst);
        *seen.lock().unwrap() = Some((p.as_ptr() as usize, l));
        // SAFETY: [M6] p and l are the leaked box's, given back exactly once, here.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p.as_ptr(), l)) });
    });
    // SAFETY: [M6] the leaked buffer is valid and only reached through the Memory until release.
    unsafe { Memory::from_raw_parts(ptr, len, Some(release)) }
}

#[test]
fn from_raw_parts_releases_exactly_once_with_its_pointer() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(None));
    let mem = raw_memory(48, &calls, &seen);
    let ptr = mem.as_ptr() as usize;
    assert_eq!((mem.kind(), mem.len()), (MemoryKind::Raw, 48));
    mem.volatile().write(0, b"raw").unwrap();
    assert_eq!(&mem.to_vec()[..3], b"raw");
    let mem = mem.into_vec().expect_err("raw is no Vec");
    let mem = mem.into_boxed().expect_err("raw is no Box");
    assert_eq!(calls.load(Ordering::SeqCst), 0, "not released by failed conversions");
    // Dropped on another thread: Memory is Send.
    std::thread::spawn(move || drop(mem)).join().unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(*seen.lock().unwrap(), Some((ptr, 48)));
}

#[test]
#[cfg_attr(miri, ignore = "leaks on purpose, which Miri reports as an error")]
fn leak_never_releases() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(None));
    let mem = raw_memory(8, &calls, &seen);
    mem.leak();
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // Leaking owned kinds is allowed too (the bytes stay reachable by a device).
    Memory::zeroed(64).unwrap().leak();
    Memory::from_vec(vec![1; 8]).leak();
}

#[test]
fn from_raw_parts_without_release() {
    let raw = Box::into_raw(Box::new([0u8; 16]));
    let ptr = NonNull::new(raw.cast::<u8>()).expect("a box is not null");
    // SAFETY: [M6] this test's own bytes, only reached through this Memory while it lives, and
    // freed below only after it is gone (it releases nothing itself).
    let mem = unsafe { Memory::from_raw_parts(ptr, 16, None) };
    mem.volatile().fill(0xEE);
    assert_eq!(mem.to_vec(), vec![0xEE; 16]);
    drop(mem);
    // SAFETY: [M6] the Memory is gone without releasing the bytes: they are this box's again.
    drop(unsafe { Box::from_raw(raw) });
}

#[test]
fn flush_of_memory_that_is_not_a_file_is_a_bounds_checked_no_op() {
    let mem = Memory::zeroed(100).unwrap();
    mem.flush(0, 100).unwrap();
    mem.flush(100, 0).unwrap();
    mem.flush(99, 1).unwrap();
    for (offset, len) in [(0, 101), (101, 0), (usize::MAX, 1), (1, usize::MAX), (usize::MAX, usize::MAX)] {
        match mem.flush(offset, len) {
            Err(MemError::OutOfBounds { offset: o, len: l, size: 100 }) => assert_eq!((o, l), (offset, len)),
            other => panic!("flush({offset}, {len}): {other:?}"),
        }
    }
}

#[test]
fn debug_shows_kind_pointer_and_length_not_the_bytes() {
    let mem = Memory::from_vec(vec![0x42; 3]);
    let s = format!("{mem:?}");
    assert!(s.starts_with("Memory { kind: Vec, ptr: 0x"), "{s}");
    assert!(s.contains("len: 3") && !s.contains('['), "{s}");
}

#[test]
fn memory_is_send_and_sync_and_volatile_is_copy_send_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn copy<T: Copy>() {}
    send_sync::<Memory>();
    send_sync::<rpma_mem::VolatileSlice<'static>>();
    copy::<rpma_mem::VolatileSlice<'static>>();
    send_sync::<MemError>();
    // Shared across threads by reference: every thread writes its own byte.
    let mem = Memory::zeroed(8).unwrap();
    std::thread::scope(|s| {
        for i in 0..8u8 {
            let mem = &mem;
            s.spawn(move || mem.volatile().store_u8(usize::from(i), i + 1).unwrap());
        }
    });
    assert_eq!(mem.to_vec(), (1..=8).collect::<Vec<u8>>());
}

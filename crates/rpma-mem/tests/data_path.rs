//! The data path of the in-memory fabric: 64 KiB copies through VolatileSlice allocate nothing.
//! (Their speed against memcpy is measured by `cargo bench -p rpma-mem`, not timed here.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hint::black_box;
use std::sync::atomic::Ordering;

use rpma_mem::Memory;

/// The system allocator, counting the allocations of each thread.
struct Counting;

thread_local! {
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn count() {
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

fn allocs() -> usize {
    ALLOCS.with(Cell::get)
}

// SAFETY: [M1] every call is forwarded unchanged to the system allocator, which upholds the
// GlobalAlloc contract; counting touches only a const-initialized thread-local Cell.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: [M1] the caller's layout contract is forwarded.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: [M1] the caller's layout contract is forwarded.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: [M1] ptr was allocated by System with layout (every allocation goes there).
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: [M1] ptr was allocated by System with layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// 64 KiB; 4 KiB under Miri, which interprets every access.
const LEN: usize = if cfg!(miri) { 4 << 10 } else { 64 << 10 };

#[test]
fn the_data_path_allocates_nothing() {
    let a = Memory::zeroed(LEN).unwrap();
    let b = Memory::page_aligned(LEN).unwrap();
    let mut buf = vec![7u8; LEN];
    let before = allocs();
    for _ in 0..if cfg!(miri) { 2 } else { 16 } {
        let (va, vb) = (a.volatile(), b.volatile());
        va.write(0, &buf).unwrap();
        va.copy_to(&vb).unwrap();
        vb.subslice(100, 1000).unwrap().read(0, &mut buf[..1000]).unwrap();
        vb.store_u64(8, 1, Ordering::Release).unwrap();
        black_box(vb.load_u64(8, Ordering::Acquire).unwrap());
        black_box(va.load_u8(LEN - 1).unwrap());
        va.store_u8(0, 1).unwrap();
        va.fill(0);
        assert!(va.write(LEN, &buf[..1]).is_err());
        a.flush(0, LEN).unwrap();
    }
    assert_eq!(allocs() - before, 0, "the data path allocated");
}

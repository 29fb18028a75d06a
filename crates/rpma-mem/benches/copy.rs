//! Copies through a `VolatileSlice` (relaxed atomic words, docs/memory.md M2) against a plain
//! slice copy (memcpy) in the same run, 64 KiB and 64 B: `cargo bench -p rpma-mem`. Every buffer
//! is page-aligned (a `vec!` may sit 16 bytes out of step with another, which sends memcpy down
//! a slow path); `copy_to_unaligned` copies between two views 3 bytes out of step (the stack
//! buffer path); `write_partial_edges` writes from byte 3 to 3 bytes before the end (the two
//! words at the edges stored in part, by compare-exchange). `bytes` times `load_u8` and
//! `store_u8` of a byte inside a word. The ratios belong in docs/bench.md, not in a timed test.
#![allow(missing_docs)] // criterion_group! generates an undocumented function.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rpma_mem::Memory;

fn group(c: &mut Criterion, name: &str, len: usize) {
    let page = |fill: u8| {
        let mut m = Memory::page_aligned(len + 64).expect("a buffer");
        m.as_mut_slice().fill(fill);
        m
    };
    let (mut src, mut dst) = (page(0x5A), page(0));
    let (a, b) = (page(0), page(0));
    let (va, vb) = (a.volatile().subslice(0, len).expect("in"), b.volatile().subslice(0, len).expect("in"));
    let vb3 = b.volatile().subslice(3, len).expect("in");
    let src = &src.as_mut_slice()[..len];
    let dst = &mut dst.as_mut_slice()[..len];
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Bytes(len as u64));
    g.bench_function("memcpy", |bn| bn.iter(|| black_box(&mut *dst).copy_from_slice(black_box(src))));
    g.bench_function("volatile_write", |bn| bn.iter(|| va.write(0, black_box(src)).expect("in bounds")));
    g.bench_function("volatile_read", |bn| bn.iter(|| va.read(0, black_box(&mut *dst)).expect("in bounds")));
    g.bench_function("volatile_copy_to", |bn| bn.iter(|| va.copy_to(black_box(&vb)).expect("same length")));
    g.bench_function("volatile_copy_to_unaligned", |bn| bn.iter(|| va.copy_to(black_box(&vb3)).expect("same length")));
    g.bench_function("volatile_write_partial_edges", |bn| {
        bn.iter(|| va.write(3, black_box(&src[..len - 6])).expect("in bounds"))
    });
    g.finish();
}

fn bytes(c: &mut Criterion) {
    let m = Memory::page_aligned(64).expect("a buffer");
    let v = m.volatile();
    let mut g = c.benchmark_group("bytes");
    g.bench_function("load_u8", |bn| bn.iter(|| v.load_u8(black_box(13)).expect("in bounds")));
    g.bench_function("store_u8", |bn| bn.iter(|| v.store_u8(black_box(13), black_box(1)).expect("in bounds")));
    g.finish();
}

fn copies(c: &mut Criterion) {
    group(c, "64KiB", 64 * 1024);
    group(c, "64B", 64);
}

criterion_group!(benches, copies, bytes);
criterion_main!(benches);

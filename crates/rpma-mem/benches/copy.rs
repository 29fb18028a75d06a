//! Copies through a `VolatileSlice` against a plain slice copy (memcpy), 64 KiB, same run:
//! `cargo bench -p rpma-mem`. The ratio belongs in docs/bench.md, not in a timed test.
#![allow(missing_docs)] // criterion_group! generates an undocumented function.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rpma_mem::Memory;

const LEN: usize = 64 * 1024;

fn copies(c: &mut Criterion) {
    let src = vec![0x5Au8; LEN];
    let mut dst = vec![0u8; LEN];
    let a = Memory::page_aligned(LEN).expect("64 KiB");
    let b = Memory::page_aligned(LEN).expect("64 KiB");
    let (va, vb) = (a.volatile(), b.volatile());
    let mut g = c.benchmark_group("64KiB");
    g.throughput(Throughput::Bytes(LEN as u64));
    g.bench_function("memcpy", |bn| bn.iter(|| black_box(&mut dst[..]).copy_from_slice(black_box(&src[..]))));
    g.bench_function("volatile_write", |bn| bn.iter(|| va.write(0, black_box(&src[..])).expect("in bounds")));
    g.bench_function("volatile_read", |bn| bn.iter(|| va.read(0, black_box(&mut dst[..])).expect("in bounds")));
    g.bench_function("volatile_copy_to", |bn| bn.iter(|| va.copy_to(black_box(&vb)).expect("same length")));
    g.finish();
}

criterion_group!(benches, copies);
criterion_main!(benches);

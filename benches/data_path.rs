//! Micro-benchmarks of the data path on the mock fabric: argument validation + post + poll of
//! each operation, and a 64 KiB write against a plain `memcpy` of 64 KiB (between page-aligned
//! buffers) as the baseline.
//!
//! Run with `cargo bench --bench data_path` (add `-- --quick` for a short run). `cargo test
//! --benches` runs every benchmark once as a smoke test.

#![allow(missing_docs)] // criterion_group! generates an undocumented function.

use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rpma::mock::{Conn, ConnCfg, ConnReq, Device, Ep, MockFabric, MrLocal, Peer, PersistentMemory};
use rpma::{CompletionFlags, ConnEvent, ContextType, FlushType, MrRemote, PeerCfg, Usage, Wc, WcStatus};

const ADDR: &str = "127.0.0.1";
const PORT: &str = "7300";
const BIG: usize = 64 * 1024;

/// A connected pair on one mock fabric, with a local source/destination region on the client
/// and a remote target region on the server.
struct Pair {
    client: Conn,
    server: Conn,
    local: MrLocal,
    server_msg: MrLocal,
    remote: MrRemote,
    _target: MrLocal,
    _ep: Ep,
}

fn pair() -> Pair {
    pair_on(&MockFabric::builder().ordered_receives(true).build(), PORT)
}

/// [`pair`] on `fabric`, the server listening on `port`.
fn pair_on(fabric: &MockFabric, port: &str) -> Pair {
    let server_peer = Peer::new(&Device::lookup(fabric, ADDR, ContextType::Local).expect("device")).expect("peer");
    let client_peer = Peer::new(&Device::lookup(fabric, ADDR, ContextType::Remote).expect("device")).expect("peer");
    let ep = Ep::listen(&server_peer, ADDR, port).expect("listen");
    let usage = Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_VISIBILITY | Usage::FLUSH_TYPE_PERSISTENT;
    let target = server_peer.alloc_mr(BIG, usage).expect("server mr");
    let server_msg = server_peer.alloc_mr(4096, Usage::RECV | Usage::SEND).expect("server msg mr");
    let local =
        client_peer.alloc_mr(BIG, Usage::WRITE_SRC | Usage::READ_DST | Usage::SEND | Usage::RECV).expect("client mr");
    let cfg = ConnCfg::new().with_sq_size(64).with_rq_size(64).with_cq_size(64);
    let req = ConnReq::new(&client_peer, ADDR, port, Some(&cfg)).expect("conn req");
    let client = req.connect(None).expect("connect");
    let incoming = ep.next_conn_req(Some(&cfg)).expect("incoming request");
    let server = incoming.connect(Some(&target.descriptor())).expect("accept");
    assert_eq!(client.next_event().expect("client event"), ConnEvent::Established);
    assert_eq!(server.next_event().expect("server event"), ConnEvent::Established);
    let remote = MrRemote::from_descriptor(client.private_data()).expect("descriptor");
    // The target is "persistent memory" (the persistence model decides what that means).
    client.apply_remote_peer_cfg(&PeerCfg::new().with_direct_write_to_pmem(true));
    Pair { client, server, local, server_msg, remote, _target: target, _ep: ep }
}

/// Polls `conn`'s CQ until one completion arrives; panics on an error completion.
#[inline]
fn poll(conn: &Conn) -> Wc {
    let cq = conn.cq();
    loop {
        match cq.next_wc() {
            Ok(Some(wc)) => {
                assert_eq!(wc.status(), WcStatus::Success, "operation {} failed", wc.wr_id());
                return wc;
            }
            Ok(None) => std::hint::spin_loop(),
            Err(e) => panic!("poll failed: {e}"),
        }
    }
}

/// Posts an 8-byte write and polls its completion.
#[inline]
fn write_8(p: &Pair) {
    p.client.write(p.remote.at(0), p.local.slice(0..black_box(8))).context(1).post().expect("write");
    black_box(poll(&p.client));
}

/// Posts an 8-byte write (unsignaled) and a persistent flush of it, and polls the flush.
#[inline]
fn write_8_persistent(p: &Pair) {
    p.client
        .write(p.remote.at(0), p.local.slice(0..black_box(8)))
        .flags(CompletionFlags::ON_ERROR)
        .post()
        .expect("write");
    p.client.flush(p.remote.slice(0..8), FlushType::Persistent).context(8).post().expect("flush");
    black_box(poll(&p.client));
}

fn ops(c: &mut Criterion) {
    let p = pair();
    let mut g = c.benchmark_group("mock_8B");
    g.throughput(Throughput::Elements(1));
    // The checks `.post()` of a write makes before calling the transport (flags, the local
    // range, the message size, the remote range and access; a write's source needs no usage
    // check), without posting. `validate` is rpma-core's (the facade does not re-export it).
    let caps = p.client.peer().capabilities().clone();
    g.bench_function("validate_write", |b| {
        b.iter(|| {
            let op = "Conn::write";
            let f = rpma_core::validate::flags(op, black_box(CompletionFlags::ALWAYS));
            let l = rpma_core::validate::local_range(op, p.local.len(), 0, black_box(8));
            let m = rpma_core::validate::msg_len(op, rpma_core::validate::msg_limit(&caps), black_box(8));
            let r = rpma_core::validate::remote_buf(
                op,
                black_box(p.remote.descriptor()),
                0,
                8,
                rpma_core::validate::RemoteAccess::Write,
            );
            black_box((f.is_ok(), l.is_ok(), m.is_ok(), r.is_ok()))
        });
    });
    g.bench_function("write", |b| b.iter(|| write_8(&p)));
    g.bench_function("write_persistent_flush", |b| b.iter(|| write_8_persistent(&p)));
    g.bench_function("read", |b| {
        b.iter(|| {
            p.client.read(p.local.slice(0..black_box(8)), p.remote.at(0)).context(2).post().expect("read");
            black_box(poll(&p.client))
        });
    });
    g.bench_function("atomic_write", |b| {
        b.iter(|| {
            p.client.atomic_write(p.remote.at(8), black_box([7u8; 8])).context(3).post().expect("atomic write");
            black_box(poll(&p.client))
        });
    });
    g.bench_function("flush", |b| {
        b.iter(|| {
            p.client.flush(p.remote.slice(0..black_box(8)), FlushType::Visibility).context(4).post().expect("flush");
            black_box(poll(&p.client))
        });
    });
    g.bench_function("send_recv", |b| {
        b.iter(|| {
            p.server.recv(p.server_msg.slice(0..8)).context(5).post().expect("recv");
            p.client.send(p.local.slice(0..black_box(8))).context(6).post().expect("send");
            black_box(poll(&p.client));
            black_box(poll(&p.server))
        });
    });
    g.finish();

    // Two threads, each posting and polling 8-byte writes on its own connection (one fabric):
    // the time of an iteration is that of one write on each, side by side, so the elements per
    // second are twice the per-thread rate; against `mock_8B/write`, how the data path scales.
    let mut g = c.benchmark_group("mock_8B_two_threads");
    g.throughput(Throughput::Elements(2));
    let fabric = MockFabric::builder().ordered_receives(true).build();
    let mut pairs = vec![pair_on(&fabric, "7301"), pair_on(&fabric, "7302")];
    g.bench_function("write", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            pairs = std::thread::scope(|s| {
                let threads: Vec<_> = pairs
                    .drain(..)
                    .map(|p| {
                        s.spawn(move || {
                            for _ in 0..iters {
                                write_8(&p);
                            }
                            p
                        })
                    })
                    .collect();
                threads.into_iter().map(|t| t.join().expect("a writing thread")).collect()
            });
            start.elapsed()
        });
    });
    g.finish();

    // The persistence model on (docs/persistence.md): the target region keeps a durable image;
    // the same two rows as `mock_8B` (model off), in this run.
    let mut g = c.benchmark_group("mock_8B_persistence_model");
    g.throughput(Throughput::Elements(1));
    let on = MockFabric::builder().ordered_receives(true).persistent_memory(PersistentMemory::All).build();
    let q = pair_on(&on, "7303");
    g.bench_function("write", |b| b.iter(|| write_8(&q)));
    g.bench_function("write_persistent_flush", |b| b.iter(|| write_8_persistent(&q)));
    g.finish();

    let mut g = c.benchmark_group("mock_64KiB");
    g.throughput(Throughput::Bytes(BIG as u64));
    g.bench_function("write", |b| {
        b.iter(|| {
            p.client.write(p.remote.at(0), p.local.slice(0..black_box(BIG))).context(7).post().expect("write");
            black_box(poll(&p.client))
        });
    });
    // Page-aligned buffers, as `rpma bench --baseline` uses: two `vec!`s may sit a few bytes out
    // of step, which sends memcpy down a slow path on some CPUs (2.6 GB/s instead of tens).
    let mut src = rpma::Memory::page_aligned(BIG).expect("the baseline's source");
    let mut dst = rpma::Memory::page_aligned(BIG).expect("the baseline's destination");
    src.as_mut_slice().fill(1);
    let (src, dst) = (src.as_slice(), dst.as_mut_slice());
    g.bench_function("memcpy_baseline", |b| {
        b.iter(|| {
            dst.copy_from_slice(black_box(src));
            black_box(&mut *dst);
        });
    });
    g.finish();

    // Connection setup and teardown, not on the data path but a useful reference.
    let mut g = c.benchmark_group("mock_setup");
    g.sample_size(10);
    g.bench_function("connect_pair", |b| b.iter_batched(|| (), |()| drop(black_box(pair())), BatchSize::PerIteration));
    g.finish();
}

criterion_group!(benches, ops);
criterion_main!(benches);

//! Conformance cases beyond librpma: batches (one chain, one doorbell), scatter-gather and
//! inline operations (docs/semantics.md#batches-scatter-gather-and-inline-data), and their bad
//! input, which is `Inval` before anything is posted: a chain is posted whole or not at all.

use rpma::{Batch, CompletionFlags, ConnCfg, ConnReq, ErrorKind, FlushType, PeerCfg, Usage, WcOpcode, WcStatus};

use super::harness::{assert_kind, assert_no_wc, mr, next_wc, pair_with, peer, remote, Backend, Case, Pair};
use crate::cases;

pub fn cases<B: Backend>() -> Vec<Case<B>> {
    cases![
        batch__write_flush_signal_last_one_completion,
        batch__write_atomic_write_flush_in_order,
        batch__reads_complete_in_posting_order,
        batch__sends_and_recv_batch_deliver_every_message,
        batch__longer_than_free_slots_Inval_nothing_posted,
        batch__full_refuses_push_and_keeps_its_ops,
        batch__op_of_another_connection_Inval,
        batch__invalid_op_refused_at_push,
        batch__empty_posts_nothing,
        sg__write_gathers_pieces_of_two_regions,
        sg__read_scatters_into_pieces,
        sg__send_to_scattering_recv,
        sg__more_pieces_than_max_sge_Inval,
        sg__empty_or_out_of_bounds_piece_Inval,
        sg__max_sge_zero_or_above_device_Inval,
        inline__write_from_plain_memory,
        inline__send_from_plain_memory,
        inline__above_max_inline_or_empty_Inval,
        inline__max_inline_above_device_Inval,
    ]
}

/// A pair whose client may use `sge` pieces and `inline` bytes, with queues of `depth`.
fn pair_of<B: Backend>(b: &B, t: &B::T, sge: u32, inline: u32, depth: u32) -> Pair<B::T> {
    let cfg = ConnCfg::new()
        .with_max_sge(sge)
        .with_max_inline(inline)
        .with_sq_size(depth)
        .with_rq_size(depth)
        .with_cq_size(depth);
    let scfg = ConnCfg::new().with_max_sge(sge).with_sq_size(depth).with_rq_size(depth).with_cq_size(depth);
    pair_with(b, t, Some(&cfg), Some(&scfg), None, None)
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add(i as u8).wrapping_mul(31)).collect()
}

fn batch__write_flush_signal_last_one_completion<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair_of(b, &t, 1, 0, 16);
    let dst = mr(&p.speer, 4096, Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY | Usage::FLUSH_TYPE_PERSISTENT);
    let rdst = remote(&dst);
    p.client.apply_remote_peer_cfg(&PeerCfg::new().with_direct_write_to_pmem(true));
    let src = mr(&p.cpeer, 4096, Usage::WRITE_SRC);
    let data = pattern(7, 4096);
    src.write(0, &data).unwrap();
    let free = p.client.sq_free();
    assert_eq!(free, 16);
    let mut batch = p.client.batch();
    for i in 0..4 {
        batch.push(p.client.write(rdst.at(i * 1024), src.slice(i * 1024..(i + 1) * 1024)).context(i as u64)).unwrap();
    }
    batch.push(p.client.flush(rdst.slice(..), FlushType::Persistent).context(99)).unwrap();
    assert_eq!(batch.len(), 5);
    batch.signal_last().post().unwrap();
    assert!(batch.is_empty(), "a posted batch is emptied");
    assert_eq!(p.client.sq_free(), free - 5, "every operation of the chain takes a slot until retired");
    let wc = next_wc(p.client.cq());
    assert_eq!((wc.wr_id, wc.status), (99, WcStatus::Success), "only the last operation completes: {wc:?}");
    assert_no_wc(p.client.cq());
    assert_eq!(p.client.sq_free(), free, "the last completion retires the whole chain");
    assert_eq!(dst.to_vec(0, 4096).unwrap(), data);
}

fn batch__write_atomic_write_flush_in_order<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair_of(b, &t, 1, 0, 16);
    let dst = mr(&p.speer, 64, Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY);
    let rdst = remote(&dst);
    let src = mr(&p.cpeer, 32, Usage::WRITE_SRC);
    src.write(0, &pattern(3, 32)).unwrap();
    let mut batch = p.client.batch();
    batch.push(p.client.write(rdst.at(8), src.slice(0..32)).flags(CompletionFlags::ON_ERROR)).unwrap();
    batch.push(p.client.flush(rdst.slice(8..40), FlushType::Visibility).context(1)).unwrap();
    batch.push(p.client.atomic_write(rdst.at(0), 40u64.to_le_bytes()).context(2)).unwrap();
    batch.push(p.client.flush(rdst.slice(0..8), FlushType::Visibility).context(3)).unwrap();
    batch.post().unwrap();
    let got: Vec<u64> = (0..3)
        .map(|_| next_wc(p.client.cq()))
        .map(|wc| {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            wc.wr_id
        })
        .collect();
    assert_eq!(got, [1, 2, 3], "completions of one send queue appear in posting order");
    assert_no_wc(p.client.cq());
    assert_eq!(dst.to_vec(0, 8).unwrap(), 40u64.to_le_bytes(), "the commit pointer");
    assert_eq!(dst.to_vec(8, 32).unwrap(), pattern(3, 32), "the data it points past");
}

fn batch__reads_complete_in_posting_order<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair_of(b, &t, 1, 0, 16);
    let target = mr(&p.speer, 1024, Usage::READ_SRC | Usage::WRITE_DST);
    target.write(0, &pattern(9, 1024)).unwrap();
    let rtarget = remote(&target);
    let dst = mr(&p.cpeer, 1024, Usage::READ_DST);
    let mut batch = Batch::<_, 8>::new(&p.client);
    for i in 0..8 {
        batch
            .push(p.client.read(dst.slice(i * 128..(i + 1) * 128), rtarget.at((7 - i) * 128)).context(10 + i as u64))
            .unwrap();
    }
    batch.post().unwrap();
    for i in 0..8 {
        let wc = next_wc(p.client.cq());
        assert_eq!((wc.wr_id, wc.status, wc.opcode), (10 + i, WcStatus::Success, WcOpcode::RdmaRead));
    }
    let whole = pattern(9, 1024);
    for i in 0..8 {
        assert_eq!(dst.to_vec(i * 128, 128).unwrap(), whole[(7 - i) * 128..(8 - i) * 128], "piece {i}");
    }
}

fn batch__sends_and_recv_batch_deliver_every_message<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair_of(b, &t, 1, 0, 16);
    let inbox = mr(&p.speer, 8 * 64, Usage::RECV);
    let mut rb = p.server.recv_batch();
    for i in 0..8 {
        rb.push(p.server.recv(inbox.slice(i * 64..(i + 1) * 64)).context(100 + i as u64)).unwrap();
    }
    rb.post().unwrap();
    assert!(rb.is_empty());
    let src = mr(&p.cpeer, 8 * 64, Usage::SEND);
    for i in 0..8 {
        src.write(i * 64, &[i as u8 + 1; 64]).unwrap();
    }
    let mut batch = p.client.batch();
    for i in 0..8 {
        batch.push(p.client.send(src.slice(i * 64..i * 64 + 10 + i)).context(i as u64)).unwrap();
    }
    batch.post().unwrap();
    for i in 0..8 {
        let wc = next_wc(p.client.cq());
        assert_eq!((wc.wr_id, wc.status), (i, WcStatus::Success));
    }
    // Receive buffers are an unordered set: find each message by its content.
    let mut seen = [false; 8];
    for _ in 0..8 {
        let wc = next_wc(p.server.cq());
        assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::Recv), "{wc:?}");
        let slot = (wc.wr_id - 100) as usize;
        let bytes = inbox.to_vec(slot * 64, wc.byte_len as usize).unwrap();
        let k = (bytes[0] - 1) as usize;
        assert_eq!(bytes, vec![k as u8 + 1; 10 + k], "message {k} intact");
        assert!(!seen[k], "message {k} delivered twice");
        seen[k] = true;
    }
    assert!(seen.iter().all(|s| *s));
}

fn batch__longer_than_free_slots_Inval_nothing_posted<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair_of(b, &t, 1, 0, 8);
    let dst = mr(&p.speer, 64, Usage::WRITE_DST);
    let rdst = remote(&dst);
    let src = mr(&p.cpeer, 64, Usage::WRITE_SRC);
    src.write(0, &[0xAB; 64]).unwrap();
    // Five slots taken by unsignaled writes (retired only by a later completion).
    for i in 0..5 {
        p.client.write(rdst.at(i), src.slice(0..1)).flags(CompletionFlags::ON_ERROR).post().unwrap();
    }
    assert_eq!(p.client.sq_free(), 3);
    let mut batch = p.client.batch();
    for i in 0..4 {
        batch.push(p.client.write(rdst.at(32 + i), src.slice(0..1)).context(i as u64)).unwrap();
    }
    assert_kind(batch.post(), ErrorKind::Inval);
    assert_eq!(batch.len(), 4, "a refused batch keeps its operations");
    assert_eq!(p.client.sq_free(), 3, "nothing of the chain was posted");
    assert_no_wc(p.client.cq());
    assert_eq!(dst.to_vec(32, 4).unwrap(), [0; 4], "nothing of the chain executed");
    // A chain that fits goes; its completion retires the unsignaled writes too.
    batch.clear();
    for i in 0..3 {
        batch.push(p.client.write(rdst.at(32 + i), src.slice(0..1)).context(i as u64)).unwrap();
    }
    batch.signal_last().post().unwrap();
    assert_eq!(next_wc(p.client.cq()).wr_id, 2);
    assert_eq!(p.client.sq_free(), 8);
    assert_eq!(dst.to_vec(32, 4).unwrap(), [0xAB, 0xAB, 0xAB, 0]);
}

fn batch__full_refuses_push_and_keeps_its_ops<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair_of(b, &t, 1, 0, 8);
    let dst = mr(&p.speer, 64, Usage::WRITE_DST);
    let rdst = remote(&dst);
    let src = mr(&p.cpeer, 64, Usage::WRITE_SRC);
    src.write(0, &pattern(1, 64)).unwrap();
    let mut batch = Batch::<_, 2>::new(&p.client);
    batch.push(p.client.write(rdst.at(0), src.slice(0..8)).context(1)).unwrap();
    batch.push(p.client.write(rdst.at(8), src.slice(8..16)).context(2)).unwrap();
    assert_kind(batch.push(p.client.write(rdst.at(16), src.slice(16..24))).map(|_| ()), ErrorKind::Inval);
    assert_eq!(batch.len(), 2);
    batch.post().unwrap();
    assert_eq!(next_wc(p.client.cq()).wr_id, 1);
    assert_eq!(next_wc(p.client.cq()).wr_id, 2);
    assert_eq!(dst.to_vec(0, 24).unwrap()[..16], pattern(1, 64)[..16]);
    assert_eq!(dst.to_vec(16, 8).unwrap(), [0; 8], "the refused operation was not posted");
}

fn batch__op_of_another_connection_Inval<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair_of(b, &t, 1, 0, 8);
    let q = pair_of(b, &t, 1, 0, 8);
    let dst = mr(&p.speer, 64, Usage::WRITE_DST);
    let rdst = remote(&dst);
    let src = mr(&p.cpeer, 64, Usage::WRITE_SRC);
    let mut batch = p.client.batch();
    assert_kind(batch.push(q.client.write(rdst.at(0), src.slice(0..8))).map(|_| ()), ErrorKind::Inval);
    assert!(batch.is_empty());
    assert_eq!(q.client.sq_free(), 8);
}

fn batch__invalid_op_refused_at_push<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair_of(b, &t, 1, 0, 8);
    let dst = mr(&p.speer, 64, Usage::WRITE_DST);
    let rdst = remote(&dst);
    let src = mr(&p.cpeer, 64, Usage::WRITE_SRC);
    let mut batch = p.client.batch();
    batch.push(p.client.write(rdst.at(0), src.slice(0..8)).context(1)).unwrap();
    assert_kind(batch.push(p.client.write(rdst.at(60), src.slice(0..8))).map(|_| ()), ErrorKind::Inval);
    assert_kind(batch.push(p.client.write(rdst.at(0), src.slice(0..65))).map(|_| ()), ErrorKind::Inval);
    assert_kind(
        batch.push(p.client.write(rdst.at(0), src.slice(0..8)).flags(CompletionFlags::empty())).map(|_| ()),
        ErrorKind::Inval,
    );
    assert_eq!(batch.len(), 1, "refused operations are not added");
    batch.post().unwrap();
    assert_eq!(next_wc(p.client.cq()).wr_id, 1);
    assert_no_wc(p.client.cq());
}

fn batch__empty_posts_nothing<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair_of(b, &t, 1, 0, 8);
    p.client.batch().post().unwrap();
    p.server.recv_batch().post().unwrap();
    assert_eq!(p.client.sq_free(), 8);
    assert_no_wc(p.client.cq());
}

fn sg__write_gathers_pieces_of_two_regions<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair_of(b, &t, 3, 0, 8);
    let dst = mr(&p.speer, 256, Usage::WRITE_DST);
    let rdst = remote(&dst);
    let a = mr(&p.cpeer, 128, Usage::WRITE_SRC);
    let c = mr(&p.cpeer, 128, Usage::WRITE_SRC);
    a.write(0, &pattern(1, 128)).unwrap();
    c.write(0, &pattern(2, 128)).unwrap();
    let pieces = [a.slice(10..30), c.slice(100..128), a.slice(0..5)];
    p.client.write_sg(rdst.at(16), &pieces).context(5).post().unwrap();
    let wc = next_wc(p.client.cq());
    assert_eq!((wc.wr_id, wc.status), (5, WcStatus::Success));
    let mut want = pattern(1, 128)[10..30].to_vec();
    want.extend_from_slice(&pattern(2, 128)[100..128]);
    want.extend_from_slice(&pattern(1, 128)[0..5]);
    assert_eq!(dst.to_vec(16, want.len()).unwrap(), want);
    assert_eq!(dst.to_vec(16 + want.len(), 8).unwrap(), [0; 8], "nothing past the sum of the pieces");
}

fn sg__read_scatters_into_pieces<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair_of(b, &t, 3, 0, 8);
    let target = mr(&p.speer, 256, Usage::READ_SRC);
    target.write(0, &pattern(4, 256)).unwrap();
    let rtarget = remote(&target);
    let dst = mr(&p.cpeer, 256, Usage::READ_DST);
    let pieces = [dst.slice(200..216), dst.slice(0..7), dst.slice(64..100)];
    p.client.read_sg(&pieces, rtarget.at(50)).context(6).post().unwrap();
    let wc = next_wc(p.client.cq());
    assert_eq!((wc.wr_id, wc.status), (6, WcStatus::Success));
    let src = &pattern(4, 256)[50..50 + 16 + 7 + 36];
    assert_eq!(dst.to_vec(200, 16).unwrap(), src[..16]);
    assert_eq!(dst.to_vec(0, 7).unwrap(), src[16..23]);
    assert_eq!(dst.to_vec(64, 36).unwrap(), src[23..]);
    assert_eq!(dst.to_vec(7, 57).unwrap(), vec![0; 57], "bytes between the pieces untouched");
}

fn sg__send_to_scattering_recv<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair_of(b, &t, 2, 0, 8);
    let inbox = mr(&p.speer, 128, Usage::RECV);
    let rpieces = [inbox.slice(64..74), inbox.slice(0..40)];
    p.server.recv_sg(&rpieces).context(7).post().unwrap();
    let src = mr(&p.cpeer, 128, Usage::SEND);
    src.write(0, &pattern(5, 128)).unwrap();
    let spieces = [src.slice(100..120), src.slice(0..15)];
    p.client.send_sg(&spieces).context(8).post().unwrap();
    let swc = next_wc(p.client.cq());
    assert_eq!((swc.wr_id, swc.status), (8, WcStatus::Success));
    let rwc = next_wc(p.server.cq());
    assert_eq!((rwc.wr_id, rwc.status, rwc.byte_len), (7, WcStatus::Success, 35));
    let mut msg = pattern(5, 128)[100..120].to_vec();
    msg.extend_from_slice(&pattern(5, 128)[0..15]);
    assert_eq!(inbox.to_vec(64, 10).unwrap(), msg[..10]);
    assert_eq!(inbox.to_vec(0, 25).unwrap(), msg[10..]);
}

fn sg__more_pieces_than_max_sge_Inval<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair_of(b, &t, 2, 0, 8);
    let dst = mr(&p.speer, 64, Usage::WRITE_DST);
    let rdst = remote(&dst);
    let src = mr(&p.cpeer, 64, Usage::WRITE_SRC | Usage::SEND | Usage::READ_DST | Usage::RECV);
    let three = [src.slice(0..4), src.slice(8..12), src.slice(16..20)];
    assert_kind(p.client.write_sg(rdst.at(0), &three).post(), ErrorKind::Inval);
    assert_kind(p.client.send_sg(&three).post(), ErrorKind::Inval);
    assert_kind(p.client.recv_sg(&three).post(), ErrorKind::Inval);
    let target = mr(&p.speer, 64, Usage::READ_SRC);
    assert_kind(p.client.read_sg(&three, remote(&target).at(0)).post(), ErrorKind::Inval);
    assert_eq!(p.client.sq_free(), 8);
    assert_no_wc(p.client.cq());
    // The default configuration allows one piece.
    let q = pair_with(b, &t, None, None, None, None);
    let src2 = mr(&q.cpeer, 64, Usage::WRITE_SRC);
    let dst2 = mr(&q.speer, 64, Usage::WRITE_DST);
    assert_kind(q.client.write_sg(remote(&dst2).at(0), &[src2.slice(0..4), src2.slice(4..8)]).post(), ErrorKind::Inval);
    q.client.write_sg(remote(&dst2).at(0), &[src2.slice(0..4)]).post().unwrap();
    assert_eq!(next_wc(q.client.cq()).status, WcStatus::Success);
}

fn sg__empty_or_out_of_bounds_piece_Inval<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair_of(b, &t, 4, 0, 8);
    let dst = mr(&p.speer, 64, Usage::WRITE_DST);
    let rdst = remote(&dst);
    let src = mr(&p.cpeer, 64, Usage::WRITE_SRC);
    src.write(0, &[1; 64]).unwrap();
    assert_kind(p.client.write_sg(rdst.at(0), &[]).post(), ErrorKind::Inval);
    assert_kind(p.client.write_sg(rdst.at(0), &[src.slice(0..4), src.slice(4..4)]).post(), ErrorKind::Inval);
    assert_kind(p.client.write_sg(rdst.at(0), &[src.slice(0..4), src.slice(60..70)]).post(), ErrorKind::Inval);
    // The sum of the pieces must fit the remote range too.
    assert_kind(p.client.write_sg(rdst.at(40), &[src.slice(0..16), src.slice(16..32)]).post(), ErrorKind::Inval);
    assert_eq!(p.client.sq_free(), 8);
    assert_no_wc(p.client.cq());
    assert_eq!(dst.to_vec(0, 64).unwrap(), vec![0; 64], "nothing was written");
}

fn sg__max_sge_zero_or_above_device_Inval<B: Backend>(b: &B) {
    let t = b.transport();
    let caps = b.caps();
    let speer = peer(b, &t);
    let cpeer = peer(b, &t);
    let port = b.port();
    let ep = rpma::Ep::listen(&speer, &b.addr(), &port).expect("listen");
    for bad in [0, caps.max_sge + 1] {
        let cfg = ConnCfg::new().with_max_sge(bad);
        assert_kind(ConnReq::new(&cpeer, &b.addr(), &port, Some(&cfg)).map(|_| ()), ErrorKind::Inval);
    }
    // The passive side checks its configuration too (the incoming request is left pending).
    let ok = ConnReq::new(&cpeer, &b.addr(), &port, None).expect("conn_req_new");
    let _client = ok.connect(None).expect("connect");
    let cfg = ConnCfg::new().with_max_sge(caps.max_sge + 1);
    assert_kind(ep.next_conn_req(Some(&cfg)).map(|_| ()), ErrorKind::Inval);
}

fn inline__write_from_plain_memory<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair_of(b, &t, 1, 64, 8);
    let dst = mr(&p.speer, 128, Usage::WRITE_DST);
    let rdst = remote(&dst);
    let mut bytes = [0u8; 48];
    bytes.copy_from_slice(&pattern(6, 48));
    p.client.write_inline(rdst.at(8), &bytes).context(1).post().unwrap();
    // Copied at post time: changing the array now changes nothing that arrives.
    bytes.fill(0xEE);
    let wc = next_wc(p.client.cq());
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (1, WcStatus::Success, WcOpcode::RdmaWrite));
    assert_eq!(dst.to_vec(8, 48).unwrap(), pattern(6, 48));
    assert_eq!(bytes[0], 0xEE);
}

fn inline__send_from_plain_memory<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair_of(b, &t, 1, 32, 8);
    let inbox = mr(&p.speer, 64, Usage::RECV);
    p.server.recv(inbox.slice(..)).context(3).post().unwrap();
    let mut msg = *b"inline message!";
    p.client.send_inline(&msg).imm(77).context(2).post().unwrap();
    msg.fill(b'x');
    let swc = next_wc(p.client.cq());
    assert_eq!((swc.wr_id, swc.status), (2, WcStatus::Success));
    let rwc = next_wc(p.server.cq());
    assert_eq!((rwc.wr_id, rwc.status, rwc.byte_len, rwc.imm_data), (3, WcStatus::Success, 15, Some(77)));
    assert_eq!(inbox.to_vec(0, 15).unwrap(), b"inline message!");
}

fn inline__above_max_inline_or_empty_Inval<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair_of(b, &t, 1, 16, 8);
    let dst = mr(&p.speer, 64, Usage::WRITE_DST);
    let rdst = remote(&dst);
    assert_kind(p.client.write_inline(rdst.at(0), &[1; 17]).post(), ErrorKind::Inval);
    assert_kind(p.client.send_inline(&[1; 17]).post(), ErrorKind::Inval);
    assert_kind(p.client.write_inline(rdst.at(0), &[]).post(), ErrorKind::Inval);
    assert_kind(p.client.write_inline(rdst.at(60), &[1; 8]).post(), ErrorKind::Inval);
    assert_eq!(p.client.sq_free(), 8);
    assert_no_wc(p.client.cq());
    assert_eq!(dst.to_vec(0, 64).unwrap(), vec![0; 64]);
    // Without `with_max_inline` no inline operation is allowed.
    let q = pair_with(b, &t, None, None, None, None);
    let dst2 = mr(&q.speer, 64, Usage::WRITE_DST);
    assert_kind(q.client.write_inline(remote(&dst2).at(0), &[1]).post(), ErrorKind::Inval);
    // Exactly the limit is fine.
    p.client.write_inline(rdst.at(0), &[9; 16]).post().unwrap();
    assert_eq!(next_wc(p.client.cq()).status, WcStatus::Success);
    assert_eq!(dst.to_vec(0, 16).unwrap(), [9; 16]);
}

fn inline__max_inline_above_device_Inval<B: Backend>(b: &B) {
    let t = b.transport();
    let caps = b.caps();
    let cpeer = peer(b, &t);
    let speer = peer(b, &t);
    let port = b.port();
    let _ep = rpma::Ep::listen(&speer, &b.addr(), &port).expect("listen");
    let cfg = ConnCfg::new().with_max_inline(caps.max_inline_data + 1);
    assert_kind(ConnReq::new(&cpeer, &b.addr(), &port, Some(&cfg)).map(|_| ()), ErrorKind::Inval);
    // The device's own limit is accepted, and an inline write of that size works.
    let p = pair_of(b, &t, 1, caps.max_inline_data, 8);
    let dst = mr(&p.speer, caps.max_inline_data as usize, Usage::WRITE_DST);
    let bytes = pattern(8, caps.max_inline_data as usize);
    p.client.write_inline(remote(&dst).at(0), &bytes).post().unwrap();
    assert_eq!(next_wc(p.client.cq()).status, WcStatus::Success);
    assert_eq!(dst.to_vec(0, bytes.len()).unwrap(), bytes);
}

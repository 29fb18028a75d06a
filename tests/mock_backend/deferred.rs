//! The deferred mode (`Mode::Deferred`): work executes after `post`, in posting order, and the
//! bugs it exists to catch are caught. Most cases use a fabric without background progress, so
//! that work runs exactly when the case polls, waits or calls `MockFabric::progress`.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use rpma::mock::Mode;

use super::*;

/// A deferred fabric whose work runs only in polls, waits and `progress()`.
fn manual() -> MockFabric {
    MockFabric::builder().mode(Mode::Deferred).background_progress(None).build()
}

fn torn(bytes: usize) -> MockFabric {
    MockFabric::builder().mode(Mode::Deferred).background_progress(None).tearing(bytes).build()
}

/// Reuses the source of a write before its completion: what lands is what the source holds when
/// the write executes.
fn reuse_before_completion(f: MockFabric) -> Vec<u8> {
    let fx = fixture_on(f);
    fx.src.write(0, b"old bytes").unwrap();
    fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..9)).context(1).post().unwrap();
    // The bug: the buffer is refilled before the write's completion was polled.
    fx.src.write(0, b"NEW BYTES").unwrap();
    let wc = next_wc(fx.p.client.cq());
    assert_eq!((wc.wr_id(), wc.status()), (1, WcStatus::Success));
    fx.dst.to_vec(0, 9).unwrap()
}

#[test]
fn deferred__buffer_reused_before_completion_sends_the_new_bytes() {
    assert_eq!(
        reuse_before_completion(manual()),
        b"NEW BYTES",
        "deferred: the write reads its source when it executes"
    );
    // The same code passes unnoticed in the immediate mode: the write ran inside post.
    assert_eq!(reuse_before_completion(MockFabric::with_mode(Mode::Immediate)), b"old bytes");
}

#[test]
fn deferred__send_reads_its_source_when_it_executes() {
    let fx = fixture_on(manual());
    fx.p.server.recv(fx.dst.slice(0..5)).context(7).post().unwrap();
    fx.src.write(0, b"first").unwrap();
    fx.p.client.send(fx.src.slice(0..5)).context(1).post().unwrap();
    fx.src.write(0, b"again").unwrap();
    // The server's poll progresses the connection (the peer's send queue too).
    let wc = next_wc(fx.p.server.cq());
    assert_eq!((wc.wr_id(), wc.status(), wc.byte_len()), (7, WcStatus::Success, 5));
    assert_eq!(fx.dst.to_vec(0, 5).unwrap(), b"again");
    assert_eq!(next_wc(fx.p.client.cq()).wr_id(), 1);
}

#[test]
fn deferred__region_read_before_the_write_completes_shows_old_data() {
    let fx = fixture_on(manual());
    fx.src.write(0, b"payload").unwrap();
    fx.p.client.write(fx.rdst.at(64), fx.src.slice(0..7)).context(1).post().unwrap();
    // The target looks before the initiator saw the completion: nothing has landed.
    assert_eq!(fx.dst.to_vec(64, 7).unwrap(), [0; 7]);
    assert_eq!(fx.p.client.backend().deferred_waiting(), 1);
    assert_eq!(next_wc(fx.p.client.cq()).status(), WcStatus::Success);
    assert_eq!(fx.dst.to_vec(64, 7).unwrap(), b"payload");
    assert_eq!(fx.p.client.backend().deferred_waiting(), 0);
}

#[test]
fn deferred__read_destination_written_when_it_executes() {
    let fx = fixture_on(manual());
    fx.dst.write(0, b"before").unwrap();
    fx.p.client.read(fx.src.slice(0..6), fx.rdst.at(0)).context(1).post().unwrap();
    assert_eq!(fx.src.to_vec(0, 6).unwrap(), [0; 6], "a read lands only when it executes");
    fx.dst.write(0, b"after!").unwrap();
    assert_eq!(next_wc(fx.p.client.cq()).wr_id(), 1);
    assert_eq!(fx.src.to_vec(0, 6).unwrap(), b"after!");
}

#[test]
fn deferred__work_executes_in_posting_order() {
    let fx = fixture_on(manual());
    fx.src.write(0, b"AAAABBBB").unwrap();
    fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..4)).flags(CompletionFlags::ON_ERROR).post().unwrap();
    fx.p.client.write(fx.rdst.at(0), fx.src.slice(4..8)).context(2).post().unwrap();
    fx.p.client.read(fx.src.slice(8..12), fx.rdst.at(0)).context(3).post().unwrap();
    assert_eq!(next_wc(fx.p.client.cq()).wr_id(), 2);
    assert_eq!(next_wc(fx.p.client.cq()).wr_id(), 3);
    // The second write landed after the first, and the read after both.
    assert_eq!(fx.dst.to_vec(0, 4).unwrap(), b"BBBB");
    assert_eq!(fx.src.to_vec(8, 4).unwrap(), b"BBBB");
}

#[test]
fn deferred__inline_bytes_are_copied_at_post() {
    let f = manual();
    let p = pair_with(&f, Some(&ConnCfg::new().with_max_inline(16)), None);
    let dst = p.speer.alloc_mr(64, Usage::WRITE_DST).unwrap();
    let mut bytes = *b"inline";
    p.client.write_inline(remote(&dst).at(0), &bytes).context(1).post().unwrap();
    bytes.copy_from_slice(b"reused");
    assert_eq!(bytes, *b"reused");
    assert_eq!(next_wc(p.client.cq()).status(), WcStatus::Success);
    assert_eq!(dst.to_vec(0, 6).unwrap(), b"inline");
}

/// A send without a receive at the peer stalls the send queue (receiver-not-ready retry): the
/// write posted after it waits too, as RC keeps the order.
#[test]
fn deferred__send_waiting_for_a_receive_holds_back_later_work() {
    let fx = fixture_on(manual());
    fx.src.write(0, b"msg!data").unwrap();
    fx.p.client.send(fx.src.slice(0..4)).context(1).post().unwrap();
    fx.p.client.write(fx.rdst.at(100), fx.src.slice(4..8)).context(2).post().unwrap();
    for _ in 0..3 {
        assert_no_wc(fx.p.client.cq());
    }
    assert_eq!(fx.dst.to_vec(100, 4).unwrap(), [0; 4], "the write passed the stalled send");
    fx.p.server.recv(fx.dst.slice(0..4)).context(9).post().unwrap();
    assert_eq!(next_wc(fx.p.client.cq()).wr_id(), 1);
    assert_eq!(next_wc(fx.p.client.cq()).wr_id(), 2);
    assert_eq!(fx.dst.to_vec(0, 8).unwrap()[..4], *b"msg!");
    assert_eq!(fx.dst.to_vec(100, 4).unwrap(), b"data");
}

#[test]
fn deferred__progress_steps_every_connection() {
    let fx = fixture_on(manual());
    fx.src.write(0, b"stepped").unwrap();
    assert!(!fx.f.progress(), "nothing waits yet");
    fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..7)).context(1).post().unwrap();
    assert_eq!(fx.dst.to_vec(0, 7).unwrap(), [0; 7]);
    assert!(fx.f.progress());
    assert_eq!(fx.dst.to_vec(0, 7).unwrap(), b"stepped");
    assert!(!fx.f.progress());
    assert_eq!(next_wc(fx.p.client.cq()).wr_id(), 1);
}

#[test]
fn deferred__error_flushes_the_work_behind_it() {
    let fx = fixture_on(manual());
    let mut desc = fx.dst.descriptor();
    desc[16] ^= 0xff; // corrupt the rkey
    let bad = MrRemote::from_descriptor(&desc).unwrap();
    fx.p.client.write(bad.at(0), fx.src.slice(0..8)).flags(CompletionFlags::ON_ERROR).context(1).post().unwrap();
    fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..8)).flags(CompletionFlags::ON_ERROR).context(2).post().unwrap();
    let wc = next_wc(fx.p.client.cq());
    assert_eq!((wc.wr_id(), wc.status()), (1, WcStatus::RemAccessErr));
    let wc = next_wc(fx.p.client.cq());
    assert_eq!((wc.wr_id(), wc.status()), (2, WcStatus::WrFlushErr));
}

/// A region the deferred work holds cannot be reused in place: `as_mut_slice` says `WouldBlock`
/// until the completion was polled.
#[test]
fn deferred__local_region_held_until_completion() {
    let f = manual();
    let p = pair(&f);
    let dst = p.speer.alloc_mr(64, Usage::WRITE_DST).unwrap();
    let mut src = p.cpeer.alloc_mr(64, Usage::WRITE_SRC).unwrap();
    src.as_mut_slice().unwrap()[..4].copy_from_slice(b"held");
    p.client.write(remote(&dst).at(0), src.slice(0..4)).context(1).post().unwrap();
    assert_eq!(src.as_mut_slice().unwrap_err().kind(), ErrorKind::WouldBlock);
    assert_eq!(next_wc(p.client.cq()).wr_id(), 1);
    src.as_mut_slice().unwrap()[..4].copy_from_slice(b"free");
    assert_eq!(dst.to_vec(0, 4).unwrap(), b"held");
}

#[test]
fn deferred__torn_write_lands_piece_by_piece() {
    let fx = fixture_on(torn(8));
    fx.src.write(0, &[0xAB; 64]).unwrap();
    fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..64)).context(1).post().unwrap();
    let landed = |dst: &MrLocal| dst.to_vec(0, 64).unwrap().iter().filter(|b| **b == 0xAB).count();
    for step in 1..=7 {
        // Each poll lands one 8-byte piece; the write completes only with the last one.
        assert_no_wc(fx.p.client.cq());
        assert_eq!(landed(&fx.dst), 8 * step);
    }
    let wc = next_wc(fx.p.client.cq());
    assert_eq!((wc.wr_id(), wc.status()), (1, WcStatus::Success));
    assert_eq!(landed(&fx.dst), 64);
    // The pieces are 8-byte aligned and whole (never a partial piece in between).
    let v = fx.dst.to_vec(0, 64).unwrap();
    assert!(v.chunks(8).all(|c| c == [0xAB; 8]));
}

#[test]
fn deferred__torn_write_order_is_not_the_address_order() {
    let fx = fixture_on(torn(8));
    fx.src.write(0, &[0xCD; 256]).unwrap();
    fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..256)).context(1).post().unwrap();
    let mut order = Vec::new();
    let mut before = fx.dst.to_vec(0, 256).unwrap();
    while fx.f.progress() {
        let now = fx.dst.to_vec(0, 256).unwrap();
        let piece: Vec<usize> = (0..32).filter(|i| before[i * 8] != now[i * 8]).collect();
        assert_eq!(piece.len(), 1, "one piece per step");
        order.push(piece[0]);
        before = now;
    }
    assert_eq!(order.len(), 32);
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..32).collect::<Vec<_>>());
    assert_ne!(order, sorted, "a last-byte poller must not see the last byte last");
    assert_eq!(next_wc(fx.p.client.cq()).wr_id(), 1);
}

#[test]
fn deferred__torn_write_to_a_region_deregistered_midway_fails() {
    let fx = fixture_on(torn(8));
    let Fixture { f: _f, p, src, dst, rdst } = fx;
    src.write(0, &[0xEE; 32]).unwrap();
    p.client.write(rdst.at(0), src.slice(0..32)).context(1).post().unwrap();
    assert_no_wc(p.client.cq());
    assert_eq!(dst.to_vec(0, 32).unwrap().iter().filter(|b| **b == 0xEE).count(), 8);
    drop(dst);
    let wc = next_wc(p.client.cq());
    assert_eq!((wc.wr_id(), wc.status()), (1, WcStatus::RemAccessErr));
}

#[test]
fn deferred__unaligned_torn_write_splits_at_the_address_multiples() {
    let fx = fixture_on(torn(8));
    fx.src.write(0, &[0x11; 13]).unwrap();
    // Bytes 5..18 of the target: pieces 5..8, 8..16, 16..18.
    fx.p.client.write(fx.rdst.at(5), fx.src.slice(0..13)).context(1).post().unwrap();
    let mut sizes = Vec::new();
    let mut before = 0;
    while fx.f.progress() {
        let now = fx.dst.to_vec(0, 32).unwrap().iter().filter(|b| **b == 0x11).count();
        sizes.push(now - before);
        before = now;
    }
    sizes.sort_unstable();
    assert_eq!(sizes, [2, 3, 8]);
    assert_eq!(fx.dst.to_vec(5, 13).unwrap(), [0x11; 13]);
}

#[test]
fn deferred__tearing_needs_the_deferred_mode() {
    let e = MockFabric::builder().mode(Mode::Immediate).tearing(8).try_build().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("tearing needs the deferred mode"), "{e}");
    // Built anyway, the fabric refuses to be used, with the same error.
    let f = MockFabric::builder().mode(Mode::Deferred).tearing(0).build();
    let e = Device::lookup(&f, ADDR, ContextType::Local).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("0 bytes"), "{e}");
}

/// Without a progress step in any mock call, the progress thread completes the work: code that
/// waits in `poll(2)` on the completion fd does not hang.
#[test]
fn deferred__background_progress_wakes_an_fd_waiter() {
    let fx = fixture_on(MockFabric::builder().mode(Mode::Deferred).build());
    fx.src.write(0, b"bg").unwrap();
    let cq = fx.p.client.cq();
    let fd = cq.fd();
    fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..2)).context(1).post().unwrap();
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    let n = poll(&mut fds, PollTimeout::from(5000u16)).unwrap();
    assert_eq!(n, 1, "the completion fd did not become readable");
    cq.wait().unwrap();
    assert_eq!(next_wc(cq).wr_id(), 1);
    assert_eq!(fx.dst.to_vec(0, 2).unwrap(), b"bg");
}

/// A writer that polls while the progress thread comes for the same work, then sleeps in
/// `poll(2)` on the completion fd: the work left after its last poll still completes. The
/// thread takes the queue pair off its list and finds it busy when a poll is executing a piece of
/// a torn write; the poll's step must then put it back (once it did not, and such a writer slept
/// until its timeout). Each round polls across the thread's 2 ms delay.
#[test]
fn deferred__work_left_by_a_poll_racing_the_progress_thread_completes() {
    const LEN: usize = 256 * 1024;
    let f = MockFabric::builder().mode(Mode::Deferred).tearing(8).build();
    let p = pair(&f);
    let src = p.cpeer.alloc_mr(LEN, Usage::WRITE_SRC).unwrap();
    let dst = p.speer.alloc_mr(LEN, Usage::WRITE_DST).unwrap();
    let rdst = remote(&dst);
    let cq = p.client.cq();
    let fd = cq.fd();
    for round in 0..16u8 {
        src.write(0, &[round; LEN]).unwrap();
        p.client.write(rdst.at(0), src.slice(0..LEN)).context(u64::from(round)).post().unwrap();
        let start = Instant::now();
        let mut wc = [Wc::default(); 1];
        let mut done = false;
        while start.elapsed() < Duration::from_millis(5) && !done {
            done = cq.poll(&mut wc).unwrap() == 1;
        }
        if !done {
            let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
            let n = poll(&mut fds, PollTimeout::from(5000u16)).unwrap();
            assert_eq!(n, 1, "round {round}: the work left after the last poll never completed");
            cq.wait().unwrap();
            wc[0] = next_wc(cq);
        }
        assert_eq!((wc[0].wr_id(), wc[0].status()), (u64::from(round), WcStatus::Success));
        assert_eq!(dst.to_vec(0, LEN).unwrap(), vec![round; LEN]);
    }
}

/// Two nodes of a deferred fabric (10.9.0.1, 10.9.0.2) connected, the client's source and the
/// server's destination of 64 bytes each.
struct TwoNodes {
    f: MockFabric,
    client: Conn,
    server: Conn,
    src: MrLocal,
    dst: MrLocal,
}

fn two_nodes() -> TwoNodes {
    let f = MockFabric::builder().mode(Mode::Deferred).device("a", &["10.9.0.1"]).device("b", &["10.9.0.2"]).build();
    let on = |ip: &str| Peer::new(&Device::lookup(&f, ip, ContextType::Local).unwrap()).unwrap();
    let (cpeer, speer) = (on("10.9.0.1"), on("10.9.0.2"));
    let ep = Ep::listen(&speer, "10.9.0.2", PORT).unwrap();
    let client = ConnReq::new(&cpeer, "10.9.0.2", PORT, None).unwrap().connect(None).unwrap();
    let server = ep.next_conn_req(None).unwrap().connect(None).unwrap();
    nonblock(client.event_fd());
    nonblock(server.event_fd());
    assert_eq!(next_event(&client), ConnEvent::Established);
    assert_eq!(next_event(&server), ConnEvent::Established);
    let src = cpeer.alloc_mr(64, Usage::WRITE_SRC).unwrap();
    let dst = speer.alloc_mr(64, Usage::WRITE_DST).unwrap();
    TwoNodes { f, client, server, src, dst }
}

/// A silent link (`MockFabric::silence`) keeps its connection: no event, no error, and the work
/// across it waits unanswered, whoever polls; healed, the work goes on and lands. A silent link
/// needs the deferred mode and two devices.
#[test]
fn deferred__work_across_a_silent_link_waits_until_it_heals() {
    let TwoNodes { f, client, server, src, dst } = two_nodes();
    src.write(0, b"across").unwrap();
    let (da, db) = (f.devices()[0].clone(), f.devices()[1].clone());
    assert_eq!(f.silence(&da, &db).unwrap(), 1);
    client.write(remote(&dst).at(0), src.slice(0..6)).context(1).post().unwrap();
    // Polls, progress steps and the progress thread's delay: nothing is answered.
    for _ in 0..3 {
        assert!(!f.progress());
        assert_no_wc(client.cq());
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(dst.to_vec(0, 6).unwrap(), [0; 6]);
    assert_eq!(client.next_event().unwrap_err().kind(), ErrorKind::NoEvent);
    assert_eq!(server.next_event().unwrap_err().kind(), ErrorKind::NoEvent);
    // A new connection request across it is never delivered.
    assert_eq!(f.connections(), 1);
    f.heal(&da, &db);
    let wc = next_wc(client.cq());
    assert_eq!((wc.wr_id(), wc.status()), (1, WcStatus::Success));
    assert_eq!(dst.to_vec(0, 6).unwrap(), b"across");
    // The immediate mode cannot leave work waiting; a link needs two devices.
    let imm = MockFabric::builder().device("a", &["10.9.0.1"]).device("b", &["10.9.0.2"]).build();
    let e = imm.silence(&imm.devices()[0], &imm.devices()[1]).unwrap_err();
    assert!(e.kind() == ErrorKind::InvalidInput && e.to_string().contains("deferred mode"), "{e}");
    let e = f.silence(&da, &da).unwrap_err();
    assert!(e.to_string().contains("given twice"), "{e}");
}

/// A responder that disconnected drops the work that arrives after, as a queue pair in the
/// error state does, even when its DREQ never reached the requester (lost across a silent link):
/// the requester's retries run out, and nothing lands. A fence of a writer by its queue pair
/// (rpma-log's replicas disconnect the writer they fence) rests on it.
#[test]
fn deferred__a_responder_that_disconnected_drops_what_arrives_after() {
    let TwoNodes { f, client, server, src, dst } = two_nodes();
    src.write(0, b"too late").unwrap();
    let (da, db) = (f.devices()[0].clone(), f.devices()[1].clone());
    assert_eq!(f.silence(&da, &db).unwrap(), 1);
    client.write(remote(&dst).at(0), src.slice(0..8)).context(1).post().unwrap();
    // The server fences the client: its DREQ is lost across the silent link.
    server.disconnect().unwrap();
    assert_eq!(client.next_event().unwrap_err().kind(), ErrorKind::NoEvent);
    f.heal(&da, &db);
    let wc = next_wc(client.cq());
    assert_eq!((wc.wr_id(), wc.status()), (1, WcStatus::RetryExcErr));
    assert_eq!(dst.to_vec(0, 8).unwrap(), [0; 8], "a write reached a responder that had disconnected");
}

/// A blocking wait runs the deferred work it waits for (no progress thread here).
#[test]
fn deferred__blocking_waits_progress_the_work() {
    let fx = fixture_on(manual());
    fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..8)).context(1).post().unwrap();
    fx.p.client.cq().wait().unwrap();
    assert_eq!(next_wc(fx.p.client.cq()).wr_id(), 1);
    // And from another thread's receive: the wait on the server's CQ runs the client's send.
    let (tx, rx) = std::sync::mpsc::channel();
    let Fixture { f: _f, p, src, dst, rdst: _ } = fx;
    let Pair { client, server, cpeer: _c, speer: _s, ep: _ep } = p;
    server.recv(dst.slice(0..8)).context(5).post().unwrap();
    let t = std::thread::spawn(move || {
        server.cq().wait().unwrap();
        tx.send(next_wc(server.cq()).wr_id()).unwrap();
        server
    });
    client.send(src.slice(0..8)).context(2).post().unwrap();
    assert_eq!(rx.recv_timeout(DEADLINE).unwrap(), 5);
    assert_eq!(next_wc(client.cq()).wr_id(), 2);
    drop(t.join().unwrap());
}

#[test]
fn deferred__mode_is_reported() {
    assert_eq!(manual().mode(), Mode::Deferred);
    assert_eq!(MockFabric::with_mode(Mode::Immediate).mode(), Mode::Immediate);
}

/// A connection torn down while the progress thread runs its work (a write torn in 4096 pieces
/// keeps it busy) or its CM timer: once the connection is deleted, nothing of it is live (the
/// thread never holds a torn-down queue pair), so dropping the fabric releases every resource.
#[test]
fn deferred__teardown_racing_the_progress_thread_leaks_nothing() {
    for i in 0..200u64 {
        let f = MockFabric::builder()
            .mode(Mode::Deferred)
            .tearing(1)
            .background_progress(Some(Duration::from_micros(100)))
            .cm_timeout(Duration::from_micros(200 + (i * 53) % 300))
            .build();
        let Fixture { f, p, src, dst, rdst } = fixture_on(f);
        p.client.write(rdst.at(0), src.slice(..)).context(1).post().unwrap();
        if i % 2 == 0 {
            p.client.disconnect().unwrap();
        }
        std::thread::sleep(Duration::from_micros(100 + (i * 37) % 500));
        p.client.delete().unwrap();
        p.server.delete().unwrap();
        drop((p.ep, p.cpeer, p.speer, src, dst));
        assert!(f.live().is_zero(), "round {i}: {:?}", f.live());
    }
}

/// A write posted right behind a read, from the read's destination: RC lets the write execute
/// before the read's response lands, so it sends the destination's old bytes (the completions
/// still come in order). The immediate mode executes each inside its post, so the same code
/// passes unnoticed there.
fn write_back_what_was_read(f: MockFabric) -> Vec<u8> {
    let fx = fixture_on(f);
    fx.dst.write(0, b"remote").unwrap();
    fx.src.write(0, b"stale!").unwrap();
    fx.p.client.read(fx.src.slice(0..6), fx.rdst.at(0)).context(1).post().unwrap();
    fx.p.client.write(fx.rdst.at(100), fx.src.slice(0..6)).context(2).post().unwrap();
    let (a, b) = (next_wc(fx.p.client.cq()), next_wc(fx.p.client.cq()));
    assert_eq!((a.wr_id(), a.status(), a.opcode()), (1, WcStatus::Success, WcOpcode::RdmaRead));
    assert_eq!((b.wr_id(), b.status(), b.opcode()), (2, WcStatus::Success, WcOpcode::RdmaWrite));
    // The read's bytes did land, after the write took its source.
    assert_eq!(fx.src.to_vec(0, 6).unwrap(), b"remote");
    fx.dst.to_vec(100, 6).unwrap()
}

#[test]
fn deferred__a_write_behind_a_read_passes_its_response() {
    assert_eq!(write_back_what_was_read(manual()), b"stale!", "deferred: the write passed the read");
    assert_eq!(write_back_what_was_read(MockFabric::with_mode(Mode::Immediate)), b"remote");
}

/// What the read passing leaves alone: the responder's order (a read behind a write sees it, as
/// librpma's emulated flush relies on), and a write whose read failed is flushed.
#[test]
fn deferred__a_read_behind_a_write_sees_it_and_a_failed_read_flushes_the_write() {
    let fx = fixture_on(manual());
    fx.src.write(0, b"landed").unwrap();
    fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..6)).context(1).post().unwrap();
    fx.p.client.read(fx.src.slice(8..14), fx.rdst.at(0)).context(2).post().unwrap();
    assert_eq!(next_wc(fx.p.client.cq()).wr_id(), 1);
    assert_eq!(next_wc(fx.p.client.cq()).wr_id(), 2);
    assert_eq!(fx.src.to_vec(8, 6).unwrap(), b"landed");
    // A read of a region deregistered meanwhile fails; the write passing it is flushed and
    // never lands.
    let gone = fx.p.speer.alloc_mr(64, Usage::READ_SRC).unwrap();
    let rgone = remote(&gone);
    drop(gone);
    fx.p.client.read(fx.src.slice(0..8), rgone.at(0)).context(3).post().unwrap();
    fx.p.client.write(fx.rdst.at(200), fx.src.slice(0..6)).context(4).post().unwrap();
    let (a, b) = (next_wc(fx.p.client.cq()), next_wc(fx.p.client.cq()));
    assert_eq!((a.wr_id(), a.status()), (3, WcStatus::RemAccessErr));
    assert_eq!((b.wr_id(), b.status()), (4, WcStatus::WrFlushErr));
    assert_eq!(fx.dst.to_vec(200, 6).unwrap(), [0; 6]);
}

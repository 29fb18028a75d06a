//! rpma-tokio on the mock: accept, connect, per-operation futures, completions and events;
//! cancellation at each await point; backpressure; timeouts; many connections on one runtime;
//! peers that die; bad input.
#![allow(non_snake_case)] // case names say what they test: `cancel__...`, `timeout__...`

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use futures_util::StreamExt;
use rpma_core::op;
use rpma_core::{
    ConnCfg, ConnEvent, ConnReq, ContextType, Device, Ep, ErrorKind, FlushType, MrLocal, MrRemote, Peer, Usage,
    WcOpcode, WcStatus,
};
use rpma_mock::MockFabric;
use rpma_tokio::{connect, connect_timeout, AsyncConn, AsyncEp, Next, TOKEN_TAG};
use tokio::time::timeout;

type T = MockFabric;

const SHORT: Duration = Duration::from_millis(30);
const LONG: Duration = Duration::from_secs(10);

fn peer(f: &MockFabric) -> Peer<T> {
    Peer::new(&Device::lookup(f, "127.0.0.1", ContextType::Local).expect("lookup")).expect("peer")
}

fn remote(mr: &MrLocal<T>) -> MrRemote {
    MrRemote::from_descriptor(&mr.descriptor()).expect("descriptor")
}

struct Pair {
    client: AsyncConn<T>,
    server: AsyncConn<T>,
    cpeer: Peer<T>,
    speer: Peer<T>,
    _ep: AsyncEp<T>,
}

async fn pair_with(f: &MockFabric, port: &str, ccfg: Option<&ConnCfg<T>>, scfg: Option<&ConnCfg<T>>) -> Pair {
    let (speer, cpeer) = (peer(f), peer(f));
    let mut ep = AsyncEp::new(Ep::listen(&speer, "127.0.0.1", port).expect("listen")).expect("async ep");
    let req = ConnReq::new(&cpeer, "127.0.0.1", port, ccfg).expect("conn_req_new");
    // The client's establishment needs the server's accept: both sides run concurrently.
    let server = async {
        let sreq = ep.accept(scfg).await?;
        connect(sreq, None).await
    };
    let (client, server) = tokio::join!(connect(req, None), server);
    Pair {
        client: client.expect("client established"),
        server: server.expect("server established"),
        cpeer,
        speer,
        _ep: ep,
    }
}

async fn pair(f: &MockFabric, port: &str) -> Pair {
    pair_with(f, port, None, None).await
}

// ---- operations as futures ------------------------------------------------------------------

#[tokio::test]
async fn each_op_future_resolves_to_its_own_completion() {
    let f = MockFabric::new();
    let p = pair(&f, "7901").await;
    p.client.with_conn(|c| c.apply_remote_peer_cfg(&rpma_core::PeerCfg::new().with_direct_write_to_pmem(true)));
    let usage = Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_PERSISTENT | Usage::FLUSH_TYPE_VISIBILITY;
    let dst = p.speer.alloc_mr(4096, usage).unwrap();
    let r = remote(&dst);
    let src = p.cpeer.alloc_mr(4096, Usage::WRITE_SRC | Usage::READ_DST | Usage::SEND).unwrap();
    src.write(0, b"async!!!").unwrap();
    let inbox = p.speer.alloc_mr(64, Usage::RECV).unwrap();
    let c = &p.client;
    // Six operations in flight at once in one task; each future gets its own completion.
    let (w, a, fl, rd, s, rv) = tokio::join!(
        c.write(r.at(0), src.slice(0..8)),
        c.atomic_write(r.at(64), *b"87654321"),
        c.flush(r.slice(0..72), FlushType::Persistent),
        c.read(src.slice(1024..1032), r.at(2048)),
        c.send(src.slice(0..8)),
        p.server.recv(inbox.slice(..)),
    );
    let (w, a, fl, rd, s, rv) = (w.unwrap(), a.unwrap(), fl.unwrap(), rd.unwrap(), s.unwrap(), rv.unwrap());
    assert_eq!(w.opcode(), WcOpcode::RdmaWrite);
    assert_eq!(rd.opcode(), WcOpcode::RdmaRead);
    assert_eq!((s.opcode(), rv.opcode(), rv.byte_len()), (WcOpcode::Send, WcOpcode::Recv, 8));
    let ids = [w.wr_id(), a.wr_id(), fl.wr_id(), rd.wr_id(), s.wr_id()];
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(id >> 56, TOKEN_TAG >> 56, "a token");
        assert!(!ids[..i].contains(id), "tokens are distinct");
    }
    assert_eq!(dst.to_vec(0, 8).unwrap(), b"async!!!");
    assert_eq!(dst.to_vec(64, 8).unwrap(), b"87654321");
    assert_eq!(inbox.to_vec(0, 8).unwrap(), b"async!!!");
    assert_eq!((c.in_flight(), p.server.in_flight()), (0, 0));
    // Immediate data, inline data and the builder form.
    let inbox2 = p.speer.alloc_mr(64, Usage::RECV).unwrap();
    let cfg_inline = c.post(op::send_inline(b"hi").imm(7)).await;
    assert_eq!(cfg_inline.unwrap_err().kind(), ErrorKind::InvalidInput, "max_inline is 0 by default");
    let (s, rv) = tokio::join!(c.post(op::send(src.slice(0..3)).imm(7)), p.server.post(op::recv(inbox2.slice(..))));
    assert!(s.unwrap().is_success());
    assert_eq!(rv.unwrap().imm_data(), Some(7));
    // Events still come through the connection.
    c.with_conn(|c| c.disconnect()).unwrap();
    assert_eq!(timeout(LONG, p.server.next()).await.unwrap().unwrap(), Next::Event(ConnEvent::Closed));
}

#[tokio::test]
async fn bad_arguments_are_errors_and_post_nothing() {
    let f = MockFabric::new();
    let p = pair(&f, "7902").await;
    let dst = p.speer.alloc_mr(64, Usage::WRITE_DST).unwrap();
    let src = p.cpeer.alloc_mr(64, Usage::WRITE_SRC).unwrap();
    let free = p.client.sq_free();
    let e = p.client.write(remote(&dst).at(60), src.slice(0..8)).await.unwrap_err();
    assert_eq!((e.kind(), e.op()), (ErrorKind::InvalidInput, "Conn::write"));
    // (An immediate value on a flush, or a receive posted unsignaled, does not compile:
    // crates/rpma-compile-fail/tests/compile_fail_op/imm_on_read_async.rs.)
    let e = p.client.post(op::read(src.slice(0..8), remote(&dst).at(60))).await.unwrap_err();
    assert_eq!((e.kind(), e.op()), (ErrorKind::InvalidInput, "Conn::read"));
    assert_eq!((p.client.sq_free(), p.client.in_flight()), (free, 0));
}

#[tokio::test]
async fn ops_posted_through_with_conn_are_unclaimed_completions_and_a_stream() {
    let f = MockFabric::new();
    let p = pair(&f, "7903").await;
    let dst = p.speer.alloc_mr(64, Usage::WRITE_DST).unwrap();
    let r = remote(&dst);
    let src = p.cpeer.alloc_mr(64, Usage::WRITE_SRC).unwrap();
    p.client.with_conn(|c| c.write(r.at(0), src.slice(0..8)).context(41).post()).unwrap();
    // An awaited operation in between takes only its own completion.
    let w = p.client.write(r.at(8), src.slice(0..8)).await.unwrap();
    assert_ne!(w.wr_id(), 41);
    p.client.with_conn(|c| c.write(r.at(16), src.slice(0..8)).context(42).post()).unwrap();
    let mut stream = p.client.completions();
    let a = timeout(LONG, stream.next()).await.unwrap().unwrap().unwrap();
    let b = timeout(LONG, stream.next()).await.unwrap().unwrap().unwrap();
    assert_eq!((a.wr_id(), b.wr_id()), (41, 42));
    assert!(timeout(SHORT, stream.next()).await.is_err(), "nothing else");
    // After a dropped wait the stream goes on.
    p.client.with_conn(|c| c.write(r.at(24), src.slice(0..8)).context(43).post()).unwrap();
    assert_eq!(timeout(LONG, stream.next()).await.unwrap().unwrap().unwrap().wr_id(), 43);
}

#[tokio::test]
async fn shared_channel_and_receive_cq_work_with_op_futures() {
    let f = MockFabric::new();
    for (port, shared, rcq) in [("7904", true, 4), ("7905", true, 0), ("7906", false, 4)] {
        let cfg = ConnCfg::new().with_shared_channel(shared).with_rcq_size(rcq);
        let p = pair_with(&f, port, Some(&cfg), Some(&cfg)).await;
        let inbox = p.speer.alloc_mr(64, Usage::RECV).unwrap();
        let out = p.cpeer.alloc_mr(64, Usage::SEND).unwrap();
        out.write(0, b"ping").unwrap();
        // The receive waits (it has no completion yet) until the send comes.
        let recv = p.server.recv(inbox.slice(..));
        let send = async {
            tokio::time::sleep(SHORT).await;
            p.client.send(out.slice(0..4)).await
        };
        let (rv, s) = tokio::join!(recv, send);
        assert_eq!(rv.unwrap().byte_len(), 4, "{port}");
        assert!(s.unwrap().is_success());
        assert_eq!(inbox.to_vec(0, 4).unwrap(), b"ping");
    }
}

// ---- cancellation -----------------------------------------------------------------------------

#[tokio::test]
async fn cancel__drop_next_wc_future_before_the_completion() {
    let f = MockFabric::new();
    let p = pair(&f, "7910").await;
    // Nothing in flight: the future is dropped at its await point (the timeout elapses).
    assert!(timeout(SHORT, p.client.next_wc()).await.is_err());
    let dst = p.speer.alloc_mr(64, Usage::WRITE_DST).unwrap();
    let src = p.cpeer.alloc_mr(64, Usage::WRITE_SRC).unwrap();
    p.client.with_conn(|c| c.write(remote(&dst).at(0), src.slice(0..8)).context(9).post()).unwrap();
    // The connection is still usable and the completion is not lost.
    let wc = timeout(LONG, p.client.next_wc()).await.expect("in time").expect("a completion");
    assert_eq!(wc.wr_id(), 9);
}

#[tokio::test]
async fn cancel__drop_accept_future_then_accept() {
    let f = MockFabric::new();
    let (speer, cpeer) = (peer(&f), peer(&f));
    let mut ep = AsyncEp::new(Ep::listen(&speer, "127.0.0.1", "7911").unwrap()).unwrap();
    assert!(timeout(SHORT, ep.accept(None)).await.is_err(), "no request yet");
    let req = ConnReq::new(&cpeer, "127.0.0.1", "7911", None).unwrap();
    let server = async {
        let sreq = ep.accept(None).await?;
        connect(sreq, None).await
    };
    let (client, server) = tokio::join!(connect(req, None), server);
    drop((client.expect("client"), server.expect("the request after a dropped accept")));
}

#[tokio::test]
async fn cancel__drop_next_event_future_then_take_the_event() {
    let f = MockFabric::new();
    let p = pair(&f, "7912").await;
    assert!(timeout(SHORT, p.server.next_event()).await.is_err());
    p.client.with_conn(|c| c.disconnect()).unwrap();
    assert_eq!(timeout(LONG, p.server.next_event()).await.unwrap().unwrap(), ConnEvent::Closed);
}

#[tokio::test]
async fn cancel__drop_op_future_after_post_before_completion() {
    // A receive is posted and awaited; its future is dropped before the message comes. The
    // operation stays posted (its buffer held), the message lands in it, and its completion is
    // discarded: it reaches no later future and no unclaimed queue, and the slot is freed.
    let f = MockFabric::new();
    let p = pair(&f, "7913").await;
    let inbox = p.cpeer.alloc_mr(64, Usage::RECV).unwrap();
    assert!(timeout(SHORT, p.client.recv(inbox.slice(..))).await.is_err());
    assert_eq!(p.client.in_flight(), 1, "the orphaned receive keeps its slot");
    let out = p.speer.alloc_mr(64, Usage::SEND).unwrap();
    out.write(0, b"late").unwrap();
    p.server.send(out.slice(0..4)).await.unwrap();
    assert!(timeout(SHORT, p.client.next_wc()).await.is_err(), "the orphan's completion is not unclaimed");
    assert_eq!(p.client.in_flight(), 0, "and its slot is free");
    assert_eq!(inbox.to_vec(0, 4).unwrap(), b"late");
    // The next awaited operations get their own completions.
    let (rv, s) = tokio::join!(p.client.recv(inbox.slice(..)), p.server.send(out.slice(0..2)));
    assert_eq!((rv.unwrap().byte_len(), s.unwrap().status()), (2, WcStatus::Success));
}

#[tokio::test]
async fn cancel__drop_op_future_while_it_waits_for_a_send_queue_slot() {
    // A send queue of one slot, taken by a send that waits for the peer's receive: a second
    // operation waits for the slot; dropped there, it has posted nothing.
    let f = MockFabric::new();
    let cfg = ConnCfg::new().with_sq_size(1);
    let p = pair_with(&f, "7914", Some(&cfg), None).await;
    let out = p.cpeer.alloc_mr(64, Usage::SEND | Usage::WRITE_SRC).unwrap();
    let dst = p.speer.alloc_mr(64, Usage::WRITE_DST).unwrap();
    let r = remote(&dst);
    let send = p.client.send(out.slice(0..4));
    tokio::pin!(send);
    assert!(timeout(SHORT, &mut send).await.is_err(), "the send waits for a receive");
    assert_eq!(p.client.sq_free(), 0);
    assert!(timeout(SHORT, p.client.write(r.at(0), out.slice(0..8))).await.is_err(), "waits for the slot");
    assert_eq!((p.client.sq_free(), p.client.in_flight()), (0, 1), "the dropped write posted nothing");
    let inbox = p.speer.alloc_mr(64, Usage::RECV).unwrap();
    let (s, rv) = tokio::join!(send, p.server.recv(inbox.slice(..)));
    assert_eq!((s.unwrap().status(), rv.unwrap().byte_len()), (WcStatus::Success, 4));
    out.write(0, b"12345678").unwrap();
    p.client.write(r.at(0), out.slice(0..8)).await.unwrap();
    assert_eq!(dst.to_vec(0, 8).unwrap(), b"12345678");
}

#[tokio::test]
async fn cancel__drop_op_future_before_its_first_poll() {
    let f = MockFabric::new();
    let p = pair(&f, "7915").await;
    let dst = p.speer.alloc_mr(64, Usage::WRITE_DST).unwrap();
    let src = p.cpeer.alloc_mr(64, Usage::WRITE_SRC).unwrap();
    src.write(0, b"xxxxxxxx").unwrap();
    drop(p.client.write(remote(&dst).at(0), src.slice(0..8)));
    assert_eq!((p.client.in_flight(), p.client.sq_free()), (0, ConnCfg::<MockFabric>::DEFAULT_SQ_SIZE));
    assert_eq!(dst.to_vec(0, 8).unwrap(), [0; 8], "nothing was posted");
}

#[tokio::test]
async fn cancel__drop_region_while_its_write_is_in_flight() {
    // Dropping the future and the region of an operation in flight frees nothing the
    // backend still uses: the completion arrives and the connection goes on.
    let f = MockFabric::new();
    let p = pair(&f, "7916").await;
    let dst = p.speer.alloc_mr(64, Usage::WRITE_DST).unwrap();
    {
        let src = p.cpeer.alloc_mr(64, Usage::WRITE_SRC).unwrap();
        src.write(0, &[7; 8]).unwrap();
        p.client.with_conn(|c| c.write(remote(&dst).at(0), src.slice(0..8)).context(1).post()).unwrap();
        assert!(src.dereg().is_ok());
    }
    let wc = timeout(LONG, p.client.next_wc()).await.unwrap().unwrap();
    assert_eq!((wc.wr_id(), wc.status()), (1, WcStatus::Success));
    assert_eq!(dst.to_vec(0, 8).unwrap(), [7; 8]);
}

#[tokio::test]
async fn cancel__drop_send_future_and_its_region_before_the_peer_receives() {
    // The send's future and then its region are dropped while the message waits for the
    // peer's receive: the region is held by the operation, the peer still gets the bytes.
    let f = MockFabric::new();
    let p = pair(&f, "7917").await;
    {
        let out = p.cpeer.alloc_mr(64, Usage::SEND).unwrap();
        out.write(0, b"held").unwrap();
        assert!(timeout(SHORT, p.client.send(out.slice(0..4))).await.is_err());
        drop(out);
    }
    let inbox = p.speer.alloc_mr(64, Usage::RECV).unwrap();
    let wc = timeout(LONG, p.server.recv(inbox.slice(..))).await.unwrap().unwrap();
    assert_eq!((wc.byte_len(), inbox.to_vec(0, 4).unwrap()), (4, b"held".to_vec()));
    // Driving the client's CQ discards the orphan's completion.
    assert!(timeout(SHORT, p.client.next_wc()).await.is_err());
    assert_eq!(p.client.in_flight(), 0);
}

// ---- backpressure -----------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backpressure__many_sends_on_a_small_send_queue_all_complete() {
    // 48 sends from 48 tasks on a send queue of 4: at most 4 are posted at a time, the others
    // wait for slots (never an error); the server receives them at its own pace.
    const N: usize = 48;
    let f = MockFabric::new();
    let cfg = ConnCfg::new().with_sq_size(4).with_cq_size(8);
    let scfg = ConnCfg::new().with_rq_size(8).with_cq_size(16);
    let p = pair_with(&f, "7920", Some(&cfg), Some(&scfg)).await;
    let client = Arc::new(p.client);
    let out = Arc::new(p.cpeer.alloc_mr(N * 8, Usage::SEND).unwrap());
    for i in 0..N {
        out.write(i * 8, &(i as u64).to_le_bytes()).unwrap();
    }
    let tasks: Vec<_> = (0..N)
        .map(|i| {
            let (client, out) = (Arc::clone(&client), Arc::clone(&out));
            tokio::spawn(async move { client.send(out.slice(i * 8..i * 8 + 8)).await })
        })
        .collect();
    let inbox = p.speer.alloc_mr(8 * 8, Usage::RECV).unwrap();
    let mut seen = [false; N];
    let mut max_used = 0;
    for round in 0..N / 8 {
        // Eight receives at a time, awaited together.
        let got = timeout(LONG, join_all((0..8).map(|k| p.server.recv(inbox.slice(k * 8..k * 8 + 8))))).await;
        for (k, wc) in got.expect("the messages come").into_iter().enumerate() {
            assert_eq!(wc.unwrap().byte_len(), 8);
            let v = u64::from_le_bytes(inbox.to_vec(k * 8, 8).unwrap().try_into().unwrap()) as usize;
            assert!(!seen[v], "message {v} twice (round {round})");
            seen[v] = true;
        }
        max_used = max_used.max(4 - client.sq_free());
    }
    for t in tasks {
        let wc = timeout(LONG, t).await.unwrap().unwrap().unwrap();
        assert_eq!((wc.status(), wc.opcode()), (WcStatus::Success, WcOpcode::Send));
    }
    assert!(seen.iter().all(|s| *s));
    assert!(max_used <= 4);
    assert_eq!((client.sq_free(), client.in_flight()), (4, 0));
}

#[tokio::test]
async fn backpressure__one_task_keeps_more_ops_in_flight_than_the_queue_holds() {
    // A queue of 2 slots, both held by sends that wait for the peer's receives; 32 writes
    // joined in the same task wait for slots (none is posted, none fails) until the sends
    // complete, then go through the queue two at a time.
    let f = MockFabric::new();
    let cfg = ConnCfg::new().with_sq_size(2);
    let p = pair_with(&f, "7921", Some(&cfg), None).await;
    let dst = p.speer.alloc_mr(32 * 8, Usage::WRITE_DST).unwrap();
    let r = remote(&dst);
    let src = p.cpeer.alloc_mr(32 * 8, Usage::WRITE_SRC | Usage::SEND).unwrap();
    for i in 0..32u64 {
        src.write(i as usize * 8, &(i + 1).to_le_bytes()).unwrap();
    }
    let c = &p.client;
    let sends = join_all((0..2).map(|i| c.send(src.slice(i * 8..i * 8 + 8))));
    let writes = join_all((0..32).map(|i| c.write(r.at(i * 8), src.slice(i * 8..i * 8 + 8))));
    let all = async { tokio::join!(sends, writes) };
    tokio::pin!(all);
    assert!(timeout(SHORT, &mut all).await.is_err(), "the sends wait for receives, the writes for slots");
    assert_eq!((c.sq_free(), c.in_flight()), (0, 2), "only the sends are posted");
    assert_eq!(dst.to_vec(0, 32 * 8).unwrap(), [0; 32 * 8], "no write was posted");
    let inbox = p.speer.alloc_mr(16, Usage::RECV).unwrap();
    let recvs = join_all((0..2).map(|k| p.server.recv(inbox.slice(k * 8..k * 8 + 8))));
    let ((sends, writes), recvs) = timeout(LONG, async { tokio::join!(all, recvs) }).await.expect("no hang");
    assert!(sends.into_iter().chain(writes).chain(recvs).all(|r| r.is_ok_and(|wc| wc.is_success())));
    assert_eq!(dst.to_vec(0, 32 * 8).unwrap(), src.to_vec(0, 32 * 8).unwrap());
    assert_eq!((c.sq_free(), c.in_flight()), (2, 0));
}

#[tokio::test]
async fn backpressure__unsignaled_ops_leave_a_slot_for_the_signaled_one_that_retires_them() {
    let f = MockFabric::new();
    let cfg = ConnCfg::new().with_sq_size(3);
    let p = pair_with(&f, "7922", Some(&cfg), None).await;
    let dst = p.speer.alloc_mr(64, Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY).unwrap();
    let r = remote(&dst);
    let src = p.cpeer.alloc_mr(64, Usage::WRITE_SRC).unwrap();
    src.write(0, b"abcdefghijklmnop").unwrap();
    let c = &p.client;
    c.post_unsignaled(op::write(r.at(0), src.slice(0..8)).context(1)).await.unwrap();
    c.post_unsignaled(op::write(r.at(8), src.slice(8..16)).context(2)).await.unwrap();
    assert_eq!(c.sq_free(), 1);
    // A third would fill the queue with operations nothing could retire: refused, at once.
    let e =
        timeout(LONG, c.post_unsignaled(op::write(r.at(0), src.slice(0..8)).context(3))).await.unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::WouldBlock);
    assert!(e.to_string().contains("two free send-queue slots"), "{e}");
    // The flush takes the kept slot; its completion retires the writes too.
    c.flush(r.slice(0..16), FlushType::Visibility).await.unwrap();
    assert_eq!(c.sq_free(), 3);
    assert_eq!(dst.to_vec(0, 16).unwrap(), b"abcdefghijklmnop");
    // A queue full of operations posted around the async API, none signaled: an error, no hang.
    c.with_conn(|c| {
        for i in 0..3 {
            c.write(r.at(0), src.slice(0..8)).flags(rpma_core::CompletionFlags::ON_ERROR).context(i).post()?;
        }
        Ok::<_, rpma_core::Error>(())
    })
    .unwrap();
    let e = timeout(LONG, c.write(r.at(0), src.slice(0..8))).await.unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::WouldBlock);
}

// ---- timeouts ---------------------------------------------------------------------------------

#[tokio::test]
async fn timeout__zero_is_inval() {
    let f = MockFabric::new();
    let p = pair(&f, "7930").await;
    for e in
        [p.client.set_timeout(Some(Duration::ZERO)).unwrap_err(), p._ep.set_timeout(Some(Duration::ZERO)).unwrap_err()]
    {
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.to_string().contains("zero"), "{e}");
    }
    assert_eq!(p.client.timeout(), None, "unchanged");
    let req = ConnReq::new(&p.cpeer, "127.0.0.1", "7930", None).unwrap();
    let e = connect_timeout(req, None, Duration::ZERO).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
}

#[tokio::test]
async fn timeout__op_wait_times_out_and_the_connection_goes_on() {
    let f = MockFabric::new();
    let p = pair(&f, "7931").await;
    p.client.set_timeout(Some(SHORT)).unwrap();
    assert_eq!(p.client.timeout(), Some(SHORT));
    let inbox = p.cpeer.alloc_mr(64, Usage::RECV).unwrap();
    let t0 = tokio::time::Instant::now();
    let e = p.client.recv(inbox.slice(..)).await.unwrap_err();
    assert!(t0.elapsed() >= SHORT);
    assert_eq!(e.kind(), ErrorKind::NoCompletion);
    assert!(e.to_string().contains("timed out after"), "{e}");
    let e = p.client.next_event().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoEvent);
    let e = p.client.next_wc().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoCompletion);
    // The timed-out receive was left posted: the server's message lands in it.
    p.client.set_timeout(None).unwrap();
    let out = p.speer.alloc_mr(64, Usage::SEND).unwrap();
    out.write(0, b"ok").unwrap();
    p.server.send(out.slice(0..2)).await.unwrap();
    assert!(timeout(SHORT, p.client.next_wc()).await.is_err());
    assert_eq!((p.client.in_flight(), inbox.to_vec(0, 2).unwrap()), (0, b"ok".to_vec()));
}

#[tokio::test]
async fn timeout__next_wc_and_next_event_under_tokio_time() {
    let f = MockFabric::new();
    let p = pair(&f, "7932").await;
    let t0 = tokio::time::Instant::now();
    assert!(timeout(SHORT, p.client.next_wc()).await.is_err());
    assert!(timeout(SHORT, p.client.next_event()).await.is_err());
    assert!(timeout(SHORT, p.client.next()).await.is_err());
    assert!(t0.elapsed() >= 3 * SHORT);
}

#[tokio::test]
async fn timeout__accept_and_connect_to_a_silent_listener() {
    let f = MockFabric::new();
    let (speer, cpeer) = (peer(&f), peer(&f));
    let mut ep = AsyncEp::new(Ep::listen(&speer, "127.0.0.1", "7933").unwrap()).unwrap();
    ep.set_timeout(Some(SHORT)).unwrap();
    assert_eq!(ep.accept(None).await.unwrap_err().kind(), ErrorKind::NoEvent);
    // The listener never accepts: the client gives up.
    let req = ConnReq::new(&cpeer, "127.0.0.1", "7933", None).unwrap();
    let e = timeout(LONG, connect_timeout(req, None, SHORT)).await.unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoEvent);
}

#[tokio::test]
async fn timeout__a_peer_that_never_answers_does_not_hang() {
    let f = MockFabric::new();
    let p = pair(&f, "7934").await;
    let inbox = p.cpeer.alloc_mr(64, Usage::RECV).unwrap();
    p.client.with_conn(|c| c.recv(inbox.slice(..)).context(5).post()).unwrap();
    // The server never sends: the wait for the message ends with the timeout.
    assert!(timeout(SHORT, p.client.next_wc()).await.is_err());
    // Then the server goes away: the receive is flushed and the connection closes.
    drop(p.server);
    let got = timeout(LONG, async {
        let mut closed = false;
        let mut flushed = false;
        while !(closed && flushed) {
            match p.client.next().await.unwrap() {
                Next::Event(ev) => closed |= ev == ConnEvent::Closed || ev == ConnEvent::Lost,
                Next::Completion(wc) => flushed |= wc.wr_id() == 5 && wc.status() != WcStatus::Success,
            }
        }
    })
    .await;
    assert!(got.is_ok(), "CLOSED and the flushed receive within 10 s");
}

#[test]
fn timeout__needs_a_runtime_with_timers() {
    let f = MockFabric::new();
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
    let p = peer(&f);
    let e = rt
        .block_on(async {
            let ep = AsyncEp::new(Ep::listen(&p, "127.0.0.1", "7935").unwrap()).unwrap();
            ep.set_timeout(None).unwrap();
            ep.set_timeout(Some(SHORT))
        })
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("timers disabled"), "{e}");
}

// ---- peers that die, closed connections, regions gone -----------------------------------------

#[tokio::test]
async fn a_peer_that_dies_mid_operation_fails_the_operation() {
    let f = MockFabric::new();
    // The peer's connection is dropped while a send waits for its receive.
    let p = pair(&f, "7940").await;
    let out = p.cpeer.alloc_mr(64, Usage::SEND).unwrap();
    let send = p.client.send(out.slice(0..4));
    let kill = async {
        tokio::time::sleep(SHORT).await;
        drop(p.server);
    };
    let (r, ()) = timeout(LONG, async { tokio::join!(send, kill) }).await.expect("no hang");
    let e = r.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Provider);
    assert!(e.to_string().contains("WrFlushErr"), "{e}");
    // The link is cut while a receive waits for a message.
    let p = pair(&f, "7941").await;
    let inbox = p.cpeer.alloc_mr(64, Usage::RECV).unwrap();
    let recv = p.client.recv(inbox.slice(..));
    let cut = async {
        tokio::time::sleep(SHORT).await;
        p.server.with_conn(|c| c.backend().cut_link());
    };
    let (r, ()) = timeout(LONG, async { tokio::join!(recv, cut) }).await.expect("no hang");
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Provider);
    assert_eq!(timeout(LONG, p.client.next_event()).await.unwrap().unwrap(), ConnEvent::Lost);
}

#[tokio::test]
async fn awaiting_on_a_closed_connection_is_an_error() {
    let f = MockFabric::new();
    let p = pair(&f, "7942").await;
    let dst = p.speer.alloc_mr(64, Usage::WRITE_DST).unwrap();
    let src = p.cpeer.alloc_mr(64, Usage::WRITE_SRC).unwrap();
    p.client.with_conn(|c| c.disconnect()).unwrap();
    assert_eq!(timeout(LONG, p.server.next_event()).await.unwrap().unwrap(), ConnEvent::Closed);
    p.server.with_conn(|c| c.disconnect()).unwrap();
    assert_eq!(timeout(LONG, p.client.next_event()).await.unwrap().unwrap(), ConnEvent::Closed);
    let e = timeout(LONG, p.client.write(remote(&dst).at(0), src.slice(0..8))).await.expect("no hang").unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Provider), "{e}");
    assert_eq!(e.op(), "Conn::write");
}

#[tokio::test]
async fn awaiting_on_a_deregistered_remote_region_is_an_error() {
    let f = MockFabric::new();
    let p = pair(&f, "7943").await;
    let dst = p.speer.alloc_mr(64, Usage::WRITE_DST).unwrap();
    let r = remote(&dst);
    assert!(dst.dereg().is_ok());
    let src = p.cpeer.alloc_mr(64, Usage::WRITE_SRC).unwrap();
    let e = timeout(LONG, p.client.write(r.at(0), src.slice(0..8))).await.expect("no hang").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Provider);
    assert!(e.to_string().contains("RemAccessErr"), "{e}");
}

// ---- many connections, runtimes --------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_connections_on_one_runtime_in_spawned_tasks() {
    let f = MockFabric::new();
    let mut tasks = Vec::new();
    for i in 0..16u16 {
        let f = f.clone();
        tasks.push(tokio::spawn(async move {
            let p = pair(&f, &(7950 + i).to_string()).await;
            let dst = p.speer.alloc_mr(4096, Usage::WRITE_DST).unwrap();
            let src = p.cpeer.alloc_mr(4096, Usage::WRITE_SRC).unwrap();
            src.write(0, &[i as u8; 64]).unwrap();
            let r = remote(&dst);
            for k in 0..32usize {
                // Four at a time, each awaited on its own.
                let wcs = join_all((0..4).map(|j| p.client.write(r.at((k * 4 + j) % 64 * 64), src.slice(0..64)))).await;
                assert!(wcs.into_iter().all(|w| w.is_ok_and(|w| w.is_success())));
            }
            assert_eq!(dst.to_vec(63 * 64, 64).unwrap(), [i as u8; 64]);
        }));
    }
    for t in tasks {
        timeout(LONG, t).await.expect("in time").expect("task");
    }
}

#[test]
fn outside_a_runtime_or_without_io_is_an_error_not_a_panic() {
    let f = MockFabric::new();
    let ep = Ep::listen(&peer(&f), "127.0.0.1", "7990").unwrap();
    let e = AsyncEp::new(ep).expect_err("no runtime");
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("tokio runtime"), "{e}");
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let ep = Ep::listen(&peer(&f), "127.0.0.1", "7991").unwrap();
    let e = rt.block_on(async { AsyncEp::new(ep) }).expect_err("IO disabled");
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("IO disabled"), "{e}");
}

#[test]
fn futures_are_send_and_the_connection_is_sync() {
    fn send<X: Send>(_: &X) {}
    const fn sync<X: Sync + Send>() {}
    sync::<AsyncConn<T>>();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let f = MockFabric::new();
        let p = pair(&f, "7992").await;
        let dst = p.speer.alloc_mr(64, Usage::WRITE_DST).unwrap();
        let src = p.cpeer.alloc_mr(64, Usage::WRITE_SRC).unwrap();
        let r = remote(&dst);
        let w = p.client.write(r.at(0), src.slice(0..8));
        send(&w);
        send(&p.client.next());
        send(&p.client.completions());
        w.await.unwrap();
    });
}

/// The connection-level getters and configuration of `Conn` on `AsyncConn`, without `with_conn`.
#[tokio::test]
async fn async_conn_has_the_connection_getters_and_configuration() {
    let f = MockFabric::new();
    let (speer, cpeer) = (peer(&f), peer(&f));
    let mut ep = AsyncEp::new(Ep::listen(&speer, "127.0.0.1", "7951").expect("listen")).expect("async ep");
    let log = speer.alloc_mr(4096, Usage::WRITE_DST | Usage::FLUSH_TYPE_PERSISTENT).unwrap();
    let pdata = rpma_core::Offer::encode(&log, &rpma_core::PeerCfg::new().with_direct_write_to_pmem(true));
    let req = ConnReq::new(&cpeer, "127.0.0.1", "7951", None).expect("conn_req_new");
    let server = async { connect(ep.accept(None).await?, Some(&pdata)).await };
    let (client, server) = tokio::join!(connect(req, None), server);
    let (client, server) = (client.unwrap(), server.unwrap());
    assert_ne!(client.qp_num(), server.qp_num());
    let offer = rpma_core::Offer::decode(&client.private_data()).expect("the offer");
    let src = cpeer.alloc_mr(64, Usage::WRITE_SRC).unwrap();
    let e = client.flush(offer.region.slice(0..8), FlushType::Persistent).await.expect_err("no cfg applied yet");
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    client.apply_remote_peer_cfg(&offer.peer_cfg);
    client.write(offer.region.at(0), src.slice(0..8)).await.unwrap();
    assert!(client.flush(offer.region.slice(0..8), FlushType::Persistent).await.unwrap().is_success());
    client.disconnect().unwrap();
    assert_eq!(timeout(LONG, server.next_event()).await.unwrap().unwrap(), ConnEvent::Closed);
}

//! Behaviour specific to the in-memory mock backend: fault injection on every provider call,
//! leak counters, link loss, injected CM events, receive-order seeds, native vs emulated
//! flush / atomic write, and thread safety of the data path.
#![allow(non_snake_case, missing_docs)]

use std::collections::BTreeSet;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rpma::mock::{Conn, ConnCfg, ConnReq, Cq, Device, Ep, LiveCounts, MockFabric, MrLocal, Peer, Srq};
use rpma::transport::CmEvent;
use rpma::{
    CompletionFlags, ConnEvent, ContextType, Error, ErrorKind, FlushType, MrRemote, SrqCfg, Usage, Wc, WcOpcode,
    WcStatus,
};

const ADDR: &str = "127.0.0.1";
const PORT: &str = "7777";
const EIO: i32 = 5;
const ENOMEM: i32 = 12;
const DEADLINE: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

fn peer(f: &MockFabric) -> Peer {
    let dev = Device::lookup(f, ADDR, ContextType::Local).expect("device lookup");
    Peer::new(&dev).expect("peer")
}

/// Sets `O_NONBLOCK` on an event or completion fd, so no call can block.
fn nonblock(fd: BorrowedFd<'_>) {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let raw = fd.as_raw_fd();
    let fl = OFlag::from_bits_truncate(fcntl(raw, FcntlArg::F_GETFL).expect("F_GETFL"));
    fcntl(raw, FcntlArg::F_SETFL(fl | OFlag::O_NONBLOCK)).expect("F_SETFL");
}

fn remote(mr: &MrLocal) -> MrRemote {
    MrRemote::from_descriptor(&mr.descriptor()).expect("remote from descriptor")
}

/// Arms a one-shot fault on the first call of `name`.
fn arm(f: &MockFabric, name: &'static str, errno: i32) {
    f.faults().fail_nth(1, errno, Some(name));
}

#[track_caller]
fn assert_provider<T: std::fmt::Debug>(r: rpma::Result<T>, errno: i32, op: &str) {
    match r {
        Ok(v) => panic!("expected a provider error of {op}, got Ok({v:?})"),
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Provider, "{e}");
            assert_eq!(e.errno(), Some(errno), "{e}");
            assert_eq!(e.op(), op, "{e}");
        }
    }
}

#[track_caller]
fn assert_kind<T: std::fmt::Debug>(r: rpma::Result<T>, kind: ErrorKind, op: &str) {
    match r {
        Ok(v) => panic!("expected {kind:?} from {op}, got Ok({v:?})"),
        Err(e) => {
            assert_eq!(e.kind(), kind, "{e}");
            assert_eq!(e.op(), op, "{e}");
        }
    }
}

#[track_caller]
fn assert_no_wc(cq: Cq<'_>) {
    if let Some(wc) = cq.next_wc().expect("poll") {
        panic!("unexpected completion {wc:?}");
    }
}

/// The next completion, with a 10 s deadline.
#[track_caller]
fn next_wc(cq: Cq<'_>) -> Wc {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(wc) = cq.next_wc().expect("poll") {
            return wc;
        }
        assert!(Instant::now() < deadline, "no completion within 10 s");
        std::thread::yield_now();
    }
}

/// The next connection event, with a 10 s deadline (the event fd must be non-blocking).
fn next_event(conn: &Conn) -> ConnEvent {
    let deadline = Instant::now() + DEADLINE;
    loop {
        match conn.next_event() {
            Ok(ev) => return ev,
            Err(e) if e.kind() == ErrorKind::NoEvent => {
                assert!(Instant::now() < deadline, "no connection event within 10 s");
                std::thread::yield_now();
            }
            Err(e) => panic!("next_event failed: {e}"),
        }
    }
}

/// A listening server and a client whose request reached it (not yet accepted).
struct Half {
    speer: Peer,
    cpeer: Peer,
    ep: Ep,
    client: Conn,
}

fn half(f: &MockFabric, ccfg: Option<&ConnCfg>, cpdata: Option<&[u8]>) -> Half {
    let speer = peer(f);
    let cpeer = peer(f);
    let ep = Ep::listen(&speer, ADDR, PORT).expect("listen");
    nonblock(ep.fd());
    let client = ConnReq::new(&cpeer, ADDR, PORT, ccfg).expect("conn_req_new").connect(cpdata).expect("connect");
    nonblock(client.event_fd());
    Half { speer, cpeer, ep, client }
}

struct Pair {
    client: Conn,
    server: Conn,
    cpeer: Peer,
    speer: Peer,
    ep: Ep,
}

fn pair_with(f: &MockFabric, ccfg: Option<&ConnCfg>, scfg: Option<&ConnCfg>) -> Pair {
    let h = half(f, ccfg, None);
    let server = h.ep.next_conn_req(scfg).expect("next_conn_req").connect(None).expect("accept");
    nonblock(server.event_fd());
    assert_eq!(next_event(&h.client), ConnEvent::Established);
    assert_eq!(next_event(&server), ConnEvent::Established);
    Pair { client: h.client, server, cpeer: h.cpeer, speer: h.speer, ep: h.ep }
}

fn pair(f: &MockFabric) -> Pair {
    pair_with(f, None, None)
}

/// A connected pair with a client source region, a server target region (readable, writable,
/// flushable, receivable) and two receives posted at the server.
struct Fixture {
    f: MockFabric,
    p: Pair,
    src: MrLocal,
    dst: MrLocal,
    rdst: MrRemote,
}

fn fixture_on(f: MockFabric) -> Fixture {
    let p = pair(&f);
    let src = p.cpeer.alloc_mr(4096, Usage::WRITE_SRC | Usage::SEND | Usage::READ_DST).expect("src");
    let dst = p
        .speer
        .alloc_mr(
            4096,
            Usage::WRITE_DST
                | Usage::READ_SRC
                | Usage::FLUSH_TYPE_VISIBILITY
                | Usage::FLUSH_TYPE_PERSISTENT
                | Usage::RECV,
        )
        .expect("dst");
    let rdst = remote(&dst);
    Fixture { f, p, src, dst, rdst }
}

fn fixture() -> Fixture {
    fixture_on(MockFabric::new())
}

// ---------------------------------------------------------------------------------------------
// provider errors of every public operation
// ---------------------------------------------------------------------------------------------

#[test]
fn peer_new__alloc_pd_ENOMEM() {
    let f = MockFabric::new();
    let dev = Device::lookup(&f, ADDR, ContextType::Local).unwrap();
    arm(&f, "ibv_alloc_pd", ENOMEM);
    assert_kind(Peer::new(&dev), ErrorKind::NoMem, "rpma_peer_new");
    f.faults().disarm();
    assert!(f.live().is_zero(), "{:?}", f.live());
    assert!(Peer::new(&dev).is_ok());
}

#[test]
fn peer_new__alloc_pd_EIO() {
    let f = MockFabric::new();
    let dev = Device::lookup(&f, ADDR, ContextType::Local).unwrap();
    arm(&f, "ibv_alloc_pd", EIO);
    assert_provider(Peer::new(&dev), EIO, "rpma_peer_new");
    f.faults().disarm();
    assert!(f.live().is_zero(), "{:?}", f.live());
    let p = Peer::new(&dev).unwrap();
    assert_eq!(f.live().pds, 1);
    drop(p);
    assert!(f.live().is_zero());
}

#[test]
fn peer_new__query_device_fails() {
    let f = MockFabric::new();
    let dev = Device::lookup(&f, ADDR, ContextType::Local).unwrap();
    arm(&f, "ibv_query_device_ex", EIO);
    assert_provider(Peer::new(&dev), EIO, "rpma_peer_new");
    f.faults().disarm();
    assert!(f.live().is_zero());
    assert!(Peer::new(&dev).is_ok());
}

#[test]
fn utils_get_ibv_context__provider_error() {
    let f = MockFabric::new();
    arm(&f, "rdma_getaddrinfo", EIO);
    assert_provider(Device::lookup(&f, ADDR, ContextType::Local), EIO, "rpma_utils_get_ibv_context");
    f.faults().disarm();
    assert!(Device::lookup(&f, ADDR, ContextType::Local).is_ok());
}

#[test]
fn utils_ibv_context_is_odp_capable__query_fails() {
    let f = MockFabric::new();
    let dev = Device::lookup(&f, ADDR, ContextType::Local).unwrap();
    arm(&f, "ibv_query_device_ex", EIO);
    assert_provider(dev.is_odp_capable(), EIO, "rpma_utils_ibv_context_is_odp_capable");
    f.faults().disarm();
    assert_eq!(dev.is_odp_capable(), Ok(false));
}

#[test]
fn mr_reg__reg_mr_fails() {
    let f = MockFabric::new();
    let p = peer(&f);
    arm(&f, "ibv_reg_mr", EIO);
    assert_provider(p.alloc_mr(4096, Usage::READ_SRC), EIO, "rpma_mr_reg");
    f.faults().disarm();
    assert_eq!(f.live().mrs, 0);
    let mr = p.alloc_mr(4096, Usage::READ_SRC).unwrap();
    assert_eq!(f.live().mrs, 1);
    drop(mr);
    assert_eq!(f.live().mrs, 0);
}

#[test]
fn mr_dereg__dereg_mr_fails() {
    let f = MockFabric::new();
    let p = peer(&f);
    let mr = p.alloc_mr(4096, Usage::READ_SRC).unwrap();
    arm(&f, "ibv_dereg_mr", EIO);
    assert_provider(mr.dereg(), EIO, "rpma_mr_dereg");
    f.faults().disarm();
    // The region is gone all the same (spec 9 #10).
    assert_eq!(f.live().mrs, 0);
    let mr = p.alloc_mr(4096, Usage::READ_SRC).unwrap();
    assert!(mr.dereg().is_ok());
    assert_eq!(f.live().mrs, 0);
}

#[test]
fn mr_advise__advise_mr_fails() {
    let f = MockFabric::new();
    let p = peer(&f);
    let mr = p.alloc_mr(4096, Usage::READ_DST).unwrap();
    arm(&f, "ibv_advise_mr", EIO);
    assert_provider(mr.advise(0, 4096, rpma::Advice::PrefetchWrite, 0), EIO, "rpma_mr_advise");
    f.faults().disarm();
    assert!(mr.advise(0, 4096, rpma::Advice::PrefetchWrite, 0).is_ok());
}

#[test]
fn mr_advise__advise_mr_EOPNOTSUPP_and_EINVAL() {
    let f = MockFabric::new();
    let p = peer(&f);
    let mr = p.alloc_mr(4096, Usage::READ_DST).unwrap();
    arm(&f, "ibv_advise_mr", 95);
    assert_kind(mr.advise(0, 4096, rpma::Advice::Prefetch, 0), ErrorKind::NoSupp, "rpma_mr_advise");
    arm(&f, "ibv_advise_mr", 22);
    assert_kind(mr.advise(0, 4096, rpma::Advice::Prefetch, 0), ErrorKind::Inval, "rpma_mr_advise");
    arm(&f, "ibv_advise_mr", 14);
    assert_kind(mr.advise(0, 4096, rpma::Advice::Prefetch, 0), ErrorKind::Inval, "rpma_mr_advise");
    f.faults().disarm();
    assert!(mr.advise(0, 4096, rpma::Advice::Prefetch, 0).is_ok());
}

#[test]
fn srq_new__provider_errors() {
    for name in ["ibv_create_srq", "ibv_create_comp_channel", "ibv_create_cq", "ibv_req_notify_cq"] {
        let f = MockFabric::new();
        let p = peer(&f);
        arm(&f, name, EIO);
        assert_provider(Srq::new(&p, None), EIO, "rpma_srq_new");
        f.faults().disarm();
        assert_eq!(f.live(), LiveCounts { pds: 1, ..LiveCounts::default() }, "after a failure of {name}");
        let srq = Srq::new(&p, None).unwrap();
        assert_eq!(f.live(), LiveCounts { pds: 1, srqs: 1, cqs: 1, channels: 1, ..LiveCounts::default() });
        drop(srq);
        drop(p);
        assert!(f.live().is_zero(), "{:?}", f.live());
    }
}

#[test]
fn srq_delete__provider_errors() {
    for name in ["ibv_destroy_srq", "ibv_destroy_cq", "ibv_destroy_comp_channel"] {
        let f = MockFabric::new();
        let p = peer(&f);
        let srq = Srq::new(&p, None).unwrap();
        arm(&f, name, EIO);
        assert_provider(srq.delete(), EIO, "rpma_srq_delete");
        f.faults().disarm();
        assert_eq!(f.live(), LiveCounts { pds: 1, ..LiveCounts::default() }, "after a failure of {name}");
        assert!(Srq::new(&p, None).unwrap().delete().is_ok());
    }
}

#[test]
fn srq_recv__post_srq_recv_fails() {
    let f = MockFabric::new();
    let p = peer(&f);
    let srq = Srq::new(&p, None).unwrap();
    let mr = p.alloc_mr(64, Usage::RECV).unwrap();
    arm(&f, "ibv_post_srq_recv", EIO);
    assert_provider(srq.recv(mr.slice(0..64)).context(1).post(), EIO, "rpma_srq_recv");
    f.faults().disarm();
    assert!(srq.recv(mr.slice(0..64)).context(1).post().is_ok());
}

#[test]
fn srq_recv__retry_receives_the_message() {
    // A failed SRQ post leaves nothing behind: the retried buffer is the one that takes the
    // message.
    let f = MockFabric::new();
    let speer = peer(&f);
    let srq = Srq::new(&speer, Some(&SrqCfg::new().with_rq_size(4).with_rcq_size(4))).unwrap();
    let scfg = ConnCfg::new().with_srq(Some(&srq));
    let p = pair_with(&f, None, Some(&scfg));
    let rbuf = p.speer.alloc_mr(64, Usage::RECV).unwrap();
    let sbuf = p.cpeer.alloc_mr(64, Usage::SEND).unwrap();
    arm(&f, "ibv_post_srq_recv", EIO);
    assert_provider(srq.recv(rbuf.slice(0..64)).context(1).post(), EIO, "rpma_srq_recv");
    f.faults().disarm();
    srq.recv(rbuf.slice(0..64)).context(2).post().unwrap();
    sbuf.write(0, b"ping").unwrap();
    p.client.send(sbuf.slice(0..4)).context(9).post().unwrap();
    let wc = next_wc(srq.rcq().unwrap());
    assert_eq!((wc.wr_id, wc.status, wc.opcode, wc.byte_len), (2, WcStatus::Success, WcOpcode::Recv, 4));
    assert_no_wc(srq.rcq().unwrap());
    assert_eq!(next_wc(p.client.cq()).status, WcStatus::Success);
}

#[test]
fn ep_listen__provider_errors() {
    for name in ["rdma_create_event_channel", "rdma_create_id", "rdma_getaddrinfo", "rdma_bind_addr", "rdma_listen"] {
        let f = MockFabric::new();
        let p = peer(&f);
        arm(&f, name, EIO);
        assert_provider(Ep::listen(&p, ADDR, PORT), EIO, "rpma_ep_listen");
        f.faults().disarm();
        assert_eq!(f.live(), LiveCounts { pds: 1, ..LiveCounts::default() }, "after a failure of {name}");
        // The port was not taken by the failed attempt.
        let ep = Ep::listen(&p, ADDR, PORT).unwrap();
        assert_eq!(f.live().listeners, 1);
        drop(ep);
    }
}

#[test]
fn ep_shutdown__destroy_id_fails() {
    let f = MockFabric::new();
    let p = peer(&f);
    let ep = Ep::listen(&p, ADDR, PORT).unwrap();
    arm(&f, "rdma_destroy_id", EIO);
    assert_provider(ep.shutdown(), EIO, "rpma_ep_shutdown");
    f.faults().disarm();
    // The endpoint is gone all the same: the port is free again.
    assert_eq!(f.live(), LiveCounts { pds: 1, ..LiveCounts::default() });
    assert!(Ep::listen(&p, ADDR, PORT).unwrap().shutdown().is_ok());
}

#[test]
fn ep_next_conn_req__get_cm_event_fails() {
    let f = MockFabric::new();
    let h = half(&f, None, Some(b"hi"));
    arm(&f, "rdma_get_cm_event", EIO);
    assert_provider(h.ep.next_conn_req(None), EIO, "rpma_ep_next_conn_req");
    f.faults().disarm();
    // The request is still there.
    let req = h.ep.next_conn_req(None).unwrap();
    assert!(req.private_data().starts_with(b"hi"));
    let server = req.connect(None).unwrap();
    assert_eq!(next_event(&h.client), ConnEvent::Established);
    nonblock(server.event_fd());
    assert_eq!(next_event(&server), ConnEvent::Established);
}

#[test]
fn ep_next_conn_req__queue_creation_fails() {
    for name in ["ibv_create_comp_channel", "ibv_create_cq", "rdma_create_qp", "rdma_ack_cm_event"] {
        let f = MockFabric::new();
        let h = half(&f, None, None);
        let before = f.live();
        arm(&f, name, EIO);
        assert_provider(h.ep.next_conn_req(None), EIO, "rpma_ep_next_conn_req");
        f.faults().disarm();
        assert_eq!(f.live(), before, "leak after a failure of {name}");
        // The request is consumed and rejected: the client learns it.
        assert_eq!(next_event(&h.client), ConnEvent::Rejected, "after a failure of {name}");
        assert_eq!(h.ep.next_conn_req(None).unwrap_err().kind(), ErrorKind::NoEvent);
        // A new request goes through.
        let c2 = ConnReq::new(&h.cpeer, ADDR, PORT, None).unwrap().connect(None).unwrap();
        nonblock(c2.event_fd());
        let _s2 = h.ep.next_conn_req(None).unwrap().connect(None).unwrap();
        assert_eq!(next_event(&c2), ConnEvent::Established);
        drop(h.speer);
    }
}

#[test]
fn conn_req_new__provider_errors() {
    for name in [
        "rdma_getaddrinfo",
        "rdma_create_id",
        "rdma_resolve_addr",
        "rdma_resolve_route",
        "ibv_create_comp_channel",
        "ibv_create_cq",
        "ibv_req_notify_cq",
        "rdma_create_qp",
    ] {
        let f = MockFabric::new();
        let p = peer(&f);
        let cfg = ConnCfg::new().with_rcq_size(4);
        arm(&f, name, EIO);
        assert_provider(ConnReq::new(&p, ADDR, PORT, Some(&cfg)), EIO, "rpma_conn_req_new");
        f.faults().disarm();
        assert_eq!(f.live(), LiveCounts { pds: 1, ..LiveCounts::default() }, "leak after a failure of {name}");
        let req = ConnReq::new(&p, ADDR, PORT, Some(&cfg)).unwrap();
        assert_eq!(f.live().qps, 1);
        drop(req);
        assert_eq!(f.live(), LiveCounts { pds: 1, ..LiveCounts::default() });
    }
}

#[test]
fn conn_req_new__rcq_creation_fails_second_cq() {
    // The receive CQ is the second CQ created: failing it must release the first.
    let f = MockFabric::new();
    let p = peer(&f);
    let cfg = ConnCfg::new().with_rcq_size(4);
    f.faults().fail_nth(2, EIO, Some("ibv_create_cq"));
    assert_provider(ConnReq::new(&p, ADDR, PORT, Some(&cfg)), EIO, "rpma_conn_req_new");
    f.faults().disarm();
    assert_eq!(f.live(), LiveCounts { pds: 1, ..LiveCounts::default() });
}

#[test]
fn conn_req_recv__post_recv_fails() {
    let f = MockFabric::new();
    let h = half(&f, None, None);
    let req = h.ep.next_conn_req(None).unwrap();
    let rbuf = h.speer.alloc_mr(64, Usage::RECV).unwrap();
    arm(&f, "ibv_post_recv", EIO);
    assert_provider(req.recv(rbuf.slice(0..64)).context(1).post(), EIO, "rpma_conn_req_recv");
    f.faults().disarm();
    req.recv(rbuf.slice(0..64)).context(2).post().unwrap();
    let server = req.connect(None).unwrap();
    assert_eq!(next_event(&h.client), ConnEvent::Established);
    let sbuf = h.cpeer.alloc_mr(64, Usage::SEND).unwrap();
    h.client.send(sbuf.slice(0..8)).context(3).post().unwrap();
    let wc = next_wc(server.cq());
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (2, WcStatus::Success, WcOpcode::Recv));
    assert_no_wc(server.cq());
}

#[test]
fn conn_req_connect__connect_fails() {
    for name in ["rdma_create_event_channel", "rdma_migrate_id", "rdma_connect"] {
        let f = MockFabric::new();
        let cpeer = peer(&f);
        let speer = peer(&f);
        let ep = Ep::listen(&speer, ADDR, PORT).unwrap();
        nonblock(ep.fd());
        let req = ConnReq::new(&cpeer, ADDR, PORT, None).unwrap();
        arm(&f, name, EIO);
        assert_provider(req.connect(Some(b"x")), EIO, "rpma_conn_req_connect");
        f.faults().disarm();
        // The request was consumed and released; nothing reached the listener.
        assert_eq!(f.live().qps, 0, "after a failure of {name}");
        assert_eq!(ep.next_conn_req(None).unwrap_err().kind(), ErrorKind::NoEvent);
        let c = ConnReq::new(&cpeer, ADDR, PORT, None).unwrap().connect(Some(b"x")).unwrap();
        nonblock(c.event_fd());
        let s = ep.next_conn_req(None).unwrap().connect(None).unwrap();
        assert_eq!(next_event(&c), ConnEvent::Established);
        drop(s);
    }
}

#[test]
fn conn_req_connect__accept_fails() {
    let f = MockFabric::new();
    let h = half(&f, None, None);
    let req = h.ep.next_conn_req(None).unwrap();
    arm(&f, "rdma_accept", EIO);
    assert_provider(req.connect(Some(b"srv")), EIO, "rpma_conn_req_connect");
    f.faults().disarm();
    // The incoming request was rejected and released.
    assert_eq!(next_event(&h.client), ConnEvent::Rejected);
    assert_eq!(f.live().qps, 1, "only the client's QP is left");
    let c2 = ConnReq::new(&h.cpeer, ADDR, PORT, None).unwrap().connect(None).unwrap();
    nonblock(c2.event_fd());
    let s2 = h.ep.next_conn_req(None).unwrap().connect(Some(b"srv")).unwrap();
    assert_eq!(next_event(&c2), ConnEvent::Established);
    assert!(c2.private_data().starts_with(b"srv"));
    drop(s2);
}

#[test]
fn conn_req_delete__reject_fails() {
    let f = MockFabric::new();
    let h = half(&f, None, None);
    let req = h.ep.next_conn_req(None).unwrap();
    arm(&f, "rdma_reject", EIO);
    assert_provider(req.delete(), EIO, "rpma_conn_req_delete");
    f.faults().disarm();
    // Released all the same.
    assert_eq!(f.live().qps, 1);
    assert_eq!(next_event(&h.client), ConnEvent::Rejected);
    let c2 = ConnReq::new(&h.cpeer, ADDR, PORT, None).unwrap().connect(None).unwrap();
    let r2 = h.ep.next_conn_req(None).unwrap();
    assert!(r2.delete().is_ok());
    drop(c2);
}

#[test]
fn conn_req_delete__destroy_fails() {
    for name in ["rdma_destroy_qp", "ibv_destroy_cq", "rdma_destroy_id", "rdma_destroy_event_channel"] {
        let f = MockFabric::new();
        let p = peer(&f);
        let req = ConnReq::new(&p, ADDR, PORT, None).unwrap();
        arm(&f, name, EIO);
        assert_provider(req.delete(), EIO, "rpma_conn_req_delete");
        f.faults().disarm();
        assert_eq!(f.live(), LiveCounts { pds: 1, ..LiveCounts::default() }, "leak after a failure of {name}");
        assert!(ConnReq::new(&p, ADDR, PORT, None).unwrap().delete().is_ok());
    }
}

#[test]
fn conn_next_event__get_cm_event_fails() {
    let f = MockFabric::new();
    let h = half(&f, None, None);
    let server = h.ep.next_conn_req(None).unwrap().connect(None).unwrap();
    arm(&f, "rdma_get_cm_event", EIO);
    assert_provider(h.client.next_event(), EIO, "rpma_conn_next_event");
    f.faults().disarm();
    // The event was not lost.
    assert_eq!(next_event(&h.client), ConnEvent::Established);
    drop(server);
}

#[test]
fn conn_disconnect__disconnect_fails() {
    let f = MockFabric::new();
    let p = pair(&f);
    arm(&f, "rdma_disconnect", EIO);
    assert_provider(p.client.disconnect(), EIO, "rpma_conn_disconnect");
    f.faults().disarm();
    // Nothing happened: the connection still works and a retry disconnects.
    assert_eq!(p.client.next_event().unwrap_err().kind(), ErrorKind::NoEvent);
    assert_eq!(p.server.next_event().unwrap_err().kind(), ErrorKind::NoEvent);
    p.client.write_empty().context(1).post().unwrap();
    assert_eq!(next_wc(p.client.cq()).status, WcStatus::Success);
    // RDMA CM's order: the initiator's CLOSED comes once the peer has disconnected too.
    p.client.disconnect().unwrap();
    assert_eq!(p.client.next_event().unwrap_err().kind(), ErrorKind::NoEvent);
    assert_eq!(next_event(&p.server), ConnEvent::Closed);
    p.server.disconnect().unwrap();
    assert_eq!(next_event(&p.client), ConnEvent::Closed);
}

#[test]
fn conn_delete__destroy_fails() {
    for name in [
        "rdma_destroy_qp",
        "ibv_destroy_cq",
        "rdma_destroy_id",
        "ibv_destroy_comp_channel",
        "rdma_destroy_event_channel",
    ] {
        let f = MockFabric::new();
        let cfg = ConnCfg::new().with_rcq_size(4).with_shared_channel(true);
        let p = pair_with(&f, Some(&cfg), None);
        // RDMA CM's order: the initiator's CLOSED comes once the peer has disconnected too.
        p.client.disconnect().unwrap();
        assert_eq!(p.client.next_event().unwrap_err().kind(), ErrorKind::NoEvent);
        assert_eq!(next_event(&p.server), ConnEvent::Closed);
        p.server.disconnect().unwrap();
        assert_eq!(next_event(&p.client), ConnEvent::Closed);
        arm(&f, name, EIO);
        assert_provider(p.client.delete(), EIO, "rpma_conn_delete");
        f.faults().disarm();
        // Released all the same (every step is attempted).
        assert_eq!(f.live().qps, 1, "after a failure of {name}");
        assert!(p.server.delete().is_ok());
        drop((p.ep, p.cpeer, p.speer));
        assert!(f.live().is_zero(), "leak after a failure of {name}: {:?}", f.live());
    }
}

/// Fails the first `ibv_post_send` of `op`, checks that nothing was posted, then retries.
fn post_send_fault(rpma_op: &str, post: impl Fn(&Fixture, u64) -> rpma::Result<()>, opcode: WcOpcode) {
    let fx = fixture();
    // Receives for the message-consuming operations.
    let rbuf = fx.p.speer.alloc_mr(64, Usage::RECV).unwrap();
    fx.p.server.recv(rbuf.slice(0..64)).context(100).post().unwrap();
    arm(&fx.f, "ibv_post_send", EIO);
    assert_provider(post(&fx, 1), EIO, rpma_op);
    fx.f.faults().disarm();
    assert_eq!(fx.p.client.backend().sq_in_use(), 0, "a failed post takes no send-queue slot");
    assert_no_wc(fx.p.client.cq());
    post(&fx, 2).unwrap();
    let wc = next_wc(fx.p.client.cq());
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (2, WcStatus::Success, opcode), "{rpma_op}");
    assert_no_wc(fx.p.client.cq());
}

#[test]
fn read__post_send_fails() {
    post_send_fault(
        "rpma_read",
        |fx, ctx| fx.p.client.read(fx.src.slice(0..8), fx.rdst.at(0)).context(ctx).post(),
        WcOpcode::RdmaRead,
    );
}

#[test]
fn write__post_send_fails() {
    post_send_fault(
        "rpma_write",
        |fx, ctx| fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..8)).context(ctx).post(),
        WcOpcode::RdmaWrite,
    );
}

#[test]
fn write_with_imm__post_send_fails() {
    post_send_fault(
        "rpma_write_with_imm",
        |fx, ctx| fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..8)).imm(7).context(ctx).post(),
        WcOpcode::RdmaWrite,
    );
}

#[test]
fn atomic_write__post_send_fails() {
    post_send_fault(
        "rpma_atomic_write",
        |fx, ctx| fx.p.client.atomic_write(fx.rdst.at(0), [1; 8]).context(ctx).post(),
        WcOpcode::RdmaWrite,
    );
}

#[test]
fn flush__post_send_fails() {
    post_send_fault(
        "rpma_flush",
        |fx, ctx| fx.p.client.flush(fx.rdst.slice(0..8), FlushType::Visibility).context(ctx).post(),
        WcOpcode::RdmaRead,
    );
}

#[test]
fn send__post_send_fails() {
    post_send_fault("rpma_send", |fx, ctx| fx.p.client.send(fx.src.slice(0..8)).context(ctx).post(), WcOpcode::Send);
}

#[test]
fn send_with_imm__post_send_fails() {
    post_send_fault(
        "rpma_send_with_imm",
        |fx, ctx| fx.p.client.send(fx.src.slice(0..8)).imm(5).context(ctx).post(),
        WcOpcode::Send,
    );
}

#[test]
fn recv__post_recv_fails() {
    let fx = fixture();
    arm(&fx.f, "ibv_post_recv", EIO);
    assert_provider(fx.p.server.recv(fx.dst.slice(0..64)).context(1).post(), EIO, "rpma_recv");
    fx.f.faults().disarm();
    fx.p.server.recv(fx.dst.slice(0..64)).context(2).post().unwrap();
    fx.p.client.send(fx.src.slice(0..8)).context(3).post().unwrap();
    let wc = next_wc(fx.p.server.cq());
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (2, WcStatus::Success, WcOpcode::Recv));
    assert_no_wc(fx.p.server.cq());
}

#[test]
fn cq_get_wc__poll_cq_fails() {
    let fx = fixture();
    fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..8)).context(42).post().unwrap();
    arm(&fx.f, "ibv_poll_cq", EIO);
    let mut wc = [Wc::EMPTY; 4];
    assert_provider(fx.p.client.cq().poll(&mut wc), EIO, "rpma_cq_get_wc");
    fx.f.faults().disarm();
    // The completion was not consumed by the failed poll.
    let wc = next_wc(fx.p.client.cq());
    assert_eq!((wc.wr_id, wc.status), (42, WcStatus::Success));
}

#[test]
fn cq_wait__req_notify_cq_fails() {
    let fx = fixture();
    nonblock(fx.p.client.cq().fd());
    fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..8)).context(42).post().unwrap();
    arm(&fx.f, "ibv_req_notify_cq", EIO);
    assert_provider(fx.p.client.cq().wait(), EIO, "rpma_cq_wait");
    fx.f.faults().disarm();
    // The event was consumed before re-arming failed; the completion is still there.
    let wc = next_wc(fx.p.client.cq());
    assert_eq!((wc.wr_id, wc.status), (42, WcStatus::Success));
    // As on hardware, the CQ stays unarmed after a failed re-arm: a later wait (non-blocking
    // here) reports no completion instead of hanging.
    fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..8)).context(43).post().unwrap();
    assert_kind(fx.p.client.cq().wait(), ErrorKind::NoCompletion, "rpma_cq_wait");
    assert_eq!(next_wc(fx.p.client.cq()).wr_id, 43);
}

#[test]
fn cq_wait__get_cq_event_fails() {
    let fx = fixture();
    nonblock(fx.p.client.cq().fd());
    fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..8)).context(42).post().unwrap();
    arm(&fx.f, "ibv_get_cq_event", EIO);
    // librpma: a failed ibv_get_cq_event is RPMA_E_NO_COMPLETION.
    assert_kind(fx.p.client.cq().wait(), ErrorKind::NoCompletion, "rpma_cq_wait");
    fx.f.faults().disarm();
    // The event is still pending: the retry succeeds.
    fx.p.client.cq().wait().unwrap();
    assert_eq!(next_wc(fx.p.client.cq()).wr_id, 42);
}

fn shared_channel_fixture() -> Fixture {
    let f = MockFabric::new();
    let cfg = ConnCfg::new().with_rcq_size(4).with_shared_channel(true);
    let p = pair_with(&f, Some(&cfg), None);
    nonblock(p.client.compl_fd().unwrap());
    let src = p.cpeer.alloc_mr(4096, Usage::WRITE_SRC | Usage::SEND | Usage::RECV).unwrap();
    let dst = p.speer.alloc_mr(4096, Usage::WRITE_DST | Usage::READ_SRC | Usage::SEND).unwrap();
    let rdst = remote(&dst);
    Fixture { f, p, src, dst, rdst }
}

#[test]
fn conn_wait__req_notify_cq_fails() {
    let fx = shared_channel_fixture();
    fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..8)).context(42).post().unwrap();
    arm(&fx.f, "ibv_req_notify_cq", EIO);
    assert_provider(fx.p.client.wait(), EIO, "rpma_conn_wait");
    fx.f.faults().disarm();
    assert_eq!(next_wc(fx.p.client.cq()).wr_id, 42);
    // The receive CQ is still armed: a wait for it succeeds.
    fx.p.client.recv(fx.src.slice(0..64)).context(7).post().unwrap();
    fx.p.server.send(fx.dst.slice(0..8)).context(8).post().unwrap();
    let (cq, is_rcq) = fx.p.client.wait().unwrap();
    assert!(is_rcq);
    assert_eq!(next_wc(cq).wr_id, 7);
}

#[test]
fn conn_wait__get_cq_event_fails() {
    let fx = shared_channel_fixture();
    fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..8)).context(42).post().unwrap();
    arm(&fx.f, "ibv_get_cq_event", EIO);
    assert_kind(fx.p.client.wait(), ErrorKind::NoCompletion, "rpma_conn_wait");
    fx.f.faults().disarm();
    let (cq, is_rcq) = fx.p.client.wait().unwrap();
    assert!(!is_rcq);
    assert_eq!(next_wc(cq).wr_id, 42);
}

// ---------------------------------------------------------------------------------------------
// fault sweep over a whole client/server flow
// ---------------------------------------------------------------------------------------------

fn flow_err(detail: &str) -> Error {
    Error::new(ErrorKind::Unknown, "flow").with_detail(detail)
}

const TIMEOUT: &str = "timeout: the flow stalled";

fn poll_wc(cq: Cq<'_>) -> rpma::Result<Wc> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match cq.next_wc()? {
            Some(wc) if wc.status == WcStatus::Success => return Ok(wc),
            Some(wc) => return Err(flow_err(&format!("error completion {wc:?}"))),
            None => {
                if Instant::now() > deadline {
                    return Err(flow_err(TIMEOUT));
                }
                std::thread::yield_now();
            }
        }
    }
}

fn wait_event(conn: &Conn, want: ConnEvent) -> rpma::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match conn.next_event() {
            Ok(ev) if ev == want => return Ok(()),
            Ok(ev) => return Err(flow_err(&format!("unexpected event {ev:?}, wanted {want:?}"))),
            Err(e) if e.kind() == ErrorKind::NoEvent => {
                if Instant::now() > deadline {
                    return Err(flow_err(TIMEOUT));
                }
                std::thread::yield_now();
            }
            Err(e) => return Err(e),
        }
    }
}

/// connect with private data, write, flush, send/recv (both ways, one pre-posted before
/// accept), disconnect, delete; every resource released explicitly so every failure surfaces.
fn flow(f: &MockFabric) -> rpma::Result<()> {
    let sdev = Device::lookup(f, ADDR, ContextType::Local)?;
    let cdev = Device::lookup(f, ADDR, ContextType::Remote)?;
    let speer = Peer::new(&sdev)?;
    let cpeer = Peer::new(&cdev)?;
    let dst = speer.alloc_mr(4096, Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY)?;
    let srecv = speer.alloc_mr(64, Usage::RECV | Usage::SEND)?;
    let src = cpeer.alloc_mr(4096, Usage::WRITE_SRC | Usage::SEND | Usage::RECV)?;
    let ep = Ep::listen(&speer, ADDR, PORT)?;
    nonblock(ep.fd());

    let ccfg = ConnCfg::new().with_rcq_size(4);
    let creq = ConnReq::new(&cpeer, ADDR, PORT, Some(&ccfg))?;
    creq.recv(src.slice(1024..1088)).context(20).post()?;
    let client = creq.connect(Some(b"client-hello"))?;
    nonblock(client.event_fd());

    let deadline = Instant::now() + Duration::from_secs(2);
    let sreq = loop {
        match ep.next_conn_req(None) {
            Ok(r) => break r,
            Err(e) if e.kind() == ErrorKind::NoEvent && Instant::now() < deadline => std::thread::yield_now(),
            Err(e) if e.kind() == ErrorKind::NoEvent => return Err(flow_err(TIMEOUT)),
            Err(e) => return Err(e),
        }
    };
    if !sreq.private_data().starts_with(b"client-hello") {
        return Err(flow_err("wrong connect private data"));
    }
    sreq.recv(srecv.slice(0..64)).context(10).post()?;
    let server = sreq.connect(Some(&dst.descriptor()))?;
    nonblock(server.event_fd());
    wait_event(&client, ConnEvent::Established)?;
    wait_event(&server, ConnEvent::Established)?;
    let rdst = MrRemote::from_descriptor(client.private_data())?;

    src.write(0, b"persist me")?;
    client.write(rdst.at(0), src.slice(0..10)).context(1).post()?;
    poll_wc(client.cq())?;
    client.flush(rdst.slice(0..10), FlushType::Visibility).context(2).post()?;
    poll_wc(client.cq())?;
    if dst.to_vec(0, 10)? != b"persist me" {
        return Err(flow_err("write did not land"));
    }
    client.send(src.slice(0..10)).context(3).post()?;
    poll_wc(client.cq())?;
    let wc = poll_wc(server.cq())?;
    if wc.wr_id != 10 || srecv.to_vec(0, 10)? != b"persist me" {
        return Err(flow_err("wrong message"));
    }
    srecv.write(0, b"ack")?;
    server.send(srecv.slice(0..3)).context(11).post()?;
    poll_wc(server.cq())?;
    let rcq = client.rcq().ok_or_else(|| flow_err("no rcq"))?;
    if poll_wc(rcq)?.wr_id != 20 || src.to_vec(1024, 3)? != b"ack" {
        return Err(flow_err("wrong reply"));
    }

    client.disconnect()?;
    wait_event(&server, ConnEvent::Closed)?;
    server.disconnect()?;
    wait_event(&client, ConnEvent::Closed)?;
    client.delete()?;
    server.delete()?;
    ep.shutdown()?;
    dst.dereg()?;
    srecv.dereg()?;
    src.dereg()?;
    cpeer.delete()?;
    speer.delete()?;
    Ok(())
}

/// Runs `flow` once per provider call, failing that call; returns the number of calls.
fn sweep(flow: fn(&MockFabric) -> rpma::Result<()>) -> u64 {
    let f = MockFabric::new();
    f.faults().count_calls(None);
    f.faults().record_names(true);
    flow(&f).expect("the flow without faults");
    let names = f.faults().recorded();
    let n = f.faults().calls();
    f.faults().disarm();
    assert!(f.live().is_zero(), "leak without faults: {:?}", f.live());
    assert!(n > 20, "suspiciously few provider calls: {n}");
    assert_eq!(names.len() as u64, n);

    let mut swallowed = Vec::new();
    let mut misnamed = Vec::new();
    for k in 1..=n {
        let name = names[(k - 1) as usize];
        let f = MockFabric::new();
        f.faults().fail_nth(k, EIO, None);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| flow(&f)));
        let fired = f.faults().calls() >= k;
        f.faults().disarm();
        let live = f.live();
        match r {
            Err(_) => panic!("the flow panicked with call {k} ({name}) failing"),
            // A failed ibv_get_cq_event is RPMA_E_NO_COMPLETION, which a waiter retries.
            Ok(Ok(())) if name == "ibv_get_cq_event" => {}
            // rpma_utils_get_ibv_context ignores a failure to destroy its temporary CM id (the
            // call right after its rdma_bind_addr / rdma_resolve_addr).
            Ok(Ok(()))
                if name == "rdma_destroy_id"
                    && k >= 2
                    && matches!(names[(k - 2) as usize], "rdma_bind_addr" | "rdma_resolve_addr") => {}
            Ok(Ok(())) => swallowed.push((k, name)),
            Ok(Err(e)) => {
                assert_ne!(e.detail(), Some(TIMEOUT), "the flow stalled with call {k} ({name}) failing: {e}");
                if !e.op().starts_with("rpma_") {
                    misnamed.push(format!("call {k} ({name}): {e}"));
                }
                match name {
                    // librpma: a failed mmap of the APM flush buffer is NOMEM, a failed munmap
                    // INVAL, whatever the errno.
                    "mmap" => assert_eq!(e.kind(), ErrorKind::NoMem, "call {k} ({name}): {e}"),
                    "munmap" => assert_eq!(e.kind(), ErrorKind::Inval, "call {k} ({name}): {e}"),
                    _ => {
                        assert!(
                            matches!(e.kind(), ErrorKind::Provider | ErrorKind::NoMem),
                            "call {k} ({name}): unexpected kind: {e}"
                        );
                        assert_eq!(e.errno(), Some(EIO), "call {k} ({name}): {e}");
                    }
                }
            }
        }
        assert!(fired, "call {k} ({name}) was never made");
        assert!(live.is_zero(), "leak with call {k} ({name}) failing: {live:?}");
    }
    eprintln!("sweep: {n} provider calls, each failed once: {names:?}");
    assert!(swallowed.is_empty(), "injected faults that did not surface: {swallowed:?}");
    assert!(misnamed.is_empty(), "errors naming no rpma function: {misnamed:#?}");
    n
}

#[test]
fn fault_sweep__client_server_flow() {
    assert!(sweep(flow) > 50);
}

/// A flow over a shared RQ with its own receive CQ and a client with a shared completion
/// channel (waited on with `Conn::wait`).
fn flow_srq(f: &MockFabric) -> rpma::Result<()> {
    let dev = Device::lookup(f, ADDR, ContextType::Local)?;
    let speer = Peer::new(&dev)?;
    let cpeer = Peer::new(&dev)?;
    let srq = Srq::new(&speer, Some(&SrqCfg::new().with_rq_size(4).with_rcq_size(4)))?;
    let sbuf = speer.alloc_mr(64, Usage::RECV | Usage::SEND)?;
    let cbuf = cpeer.alloc_mr(64, Usage::SEND | Usage::RECV)?;
    let ep = Ep::listen(&speer, ADDR, PORT)?;
    nonblock(ep.fd());
    let ccfg = ConnCfg::new().with_rcq_size(2).with_shared_channel(true);
    let client = ConnReq::new(&cpeer, ADDR, PORT, Some(&ccfg))?.connect(None)?;
    nonblock(client.event_fd());
    nonblock(client.compl_fd()?);
    let scfg = ConnCfg::new().with_srq(Some(&srq));
    let deadline = Instant::now() + Duration::from_secs(2);
    let sreq = loop {
        match ep.next_conn_req(Some(&scfg)) {
            Ok(r) => break r,
            Err(e) if e.kind() == ErrorKind::NoEvent && Instant::now() < deadline => std::thread::yield_now(),
            Err(e) if e.kind() == ErrorKind::NoEvent => return Err(flow_err(TIMEOUT)),
            Err(e) => return Err(e),
        }
    };
    drop(scfg);
    let server = sreq.connect(None)?;
    nonblock(server.event_fd());
    wait_event(&client, ConnEvent::Established)?;
    wait_event(&server, ConnEvent::Established)?;

    srq.recv(sbuf.slice(0..64)).context(1).post()?;
    client.recv(cbuf.slice(0..64)).context(2).post()?;
    client.send_empty().imm(77).context(3).post()?;
    let rcq = srq.rcq().ok_or_else(|| flow_err("no srq rcq"))?;
    let wc = poll_wc(rcq)?;
    if wc.imm_data != Some(77) {
        return Err(flow_err("wrong imm"));
    }
    // The client waits on its shared channel for the send completion and then the reply.
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut got = (false, false);
    let mut replied = false;
    while got != (true, true) {
        match client.wait() {
            Ok((cq, is_rcq)) => loop {
                match cq.next_wc()? {
                    Some(wc) if wc.status != WcStatus::Success => {
                        return Err(flow_err(&format!("error completion {wc:?}")))
                    }
                    Some(_) if is_rcq => got.1 = true,
                    Some(_) => got.0 = true,
                    None => break,
                }
            },
            Err(e) if e.kind() == ErrorKind::NoCompletion => {
                if Instant::now() > deadline {
                    return Err(flow_err(TIMEOUT));
                }
                std::thread::yield_now();
            }
            Err(e) => return Err(e),
        }
        if got.0 && !replied {
            server.send_empty().context(4).post()?;
            poll_wc(server.cq())?;
            replied = true;
        }
    }
    server.disconnect()?;
    wait_event(&client, ConnEvent::Closed)?;
    client.disconnect()?;
    wait_event(&server, ConnEvent::Closed)?;
    client.delete()?;
    server.delete()?;
    ep.shutdown()?;
    srq.delete()?;
    sbuf.dereg()?;
    cbuf.dereg()?;
    Ok(())
}

#[test]
fn fault_sweep__srq_shared_channel_flow() {
    assert!(sweep(flow_srq) > 50);
}

// ---------------------------------------------------------------------------------------------
// leak counters
// ---------------------------------------------------------------------------------------------

#[test]
fn live__counts_while_alive_and_zero_after_drop() {
    let f = MockFabric::new();
    assert!(f.live().is_zero());
    let ccfg = ConnCfg::new().with_rcq_size(4).with_shared_channel(true);
    let p = pair_with(&f, Some(&ccfg), None);
    // Peers: 2 PDs. Listener: 1 plus its CM event channel. Client: main CQ + receive CQ on one
    // shared completion channel, plus its CM event channel. Server: one CQ with a private
    // completion channel, plus its CM event channel.
    assert_eq!(
        f.live(),
        LiveCounts { pds: 2, mrs: 0, cqs: 3, channels: 5, qps: 2, srqs: 0, listeners: 1 },
        "{:?}",
        f.live()
    );
    let mr = p.cpeer.alloc_mr(4096, Usage::WRITE_SRC).unwrap();
    assert_eq!(f.live().mrs, 1);
    drop(p.client);
    assert_eq!((f.live().qps, f.live().cqs, f.live().channels), (1, 1, 3));
    drop(p.ep);
    assert_eq!((f.live().listeners, f.live().channels), (0, 2));
    // A peer lives while an object made from it does.
    drop(p.cpeer);
    assert_eq!(f.live().pds, 2);
    drop(mr);
    assert_eq!(f.live().pds, 1);
    drop((p.server, p.speer));
    assert!(f.live().is_zero(), "{:?}", f.live());
}

#[test]
fn live__private_channels_and_srq() {
    let f = MockFabric::new();
    let speer = peer(&f);
    let srq = Srq::new(&speer, Some(&SrqCfg::new().with_rq_size(4).with_rcq_size(4))).unwrap();
    assert_eq!(f.live(), LiveCounts { pds: 1, srqs: 1, cqs: 1, channels: 1, ..LiveCounts::default() });
    let scfg = ConnCfg::new().with_srq(Some(&srq));
    let ccfg = ConnCfg::new().with_rcq_size(4);
    let p = pair_with(&f, Some(&ccfg), Some(&scfg));
    // Client: 2 CQs, 2 private channels + CM channel; server: 1 CQ (receives go to the SRQ's
    // CQ), 1 channel + CM channel; listener channel; SRQ CQ + channel.
    assert_eq!(f.live(), LiveCounts { pds: 3, mrs: 0, cqs: 4, channels: 7, qps: 2, srqs: 1, listeners: 1 });
    drop((srq, scfg));
    // The server connection keeps the SRQ alive.
    assert_eq!(f.live().srqs, 1);
    drop(p.server);
    assert_eq!(f.live().srqs, 0);
    drop((p.client, p.ep, p.cpeer, p.speer, speer));
    assert!(f.live().is_zero(), "{:?}", f.live());
}

#[test]
fn live__zero_after_full_flow() {
    let f = MockFabric::new();
    flow(&f).unwrap();
    assert!(f.live().is_zero(), "{:?}", f.live());
    flow_srq(&f).unwrap();
    assert!(f.live().is_zero(), "{:?}", f.live());
}

#[test]
fn live__posted_buffers_keep_region_until_flushed() {
    // A region posted as a receive buffer stays registered while posted; deleting the
    // connection releases it.
    let fx = fixture();
    let rbuf = fx.p.speer.alloc_mr(64, Usage::RECV).unwrap();
    fx.p.server.recv(rbuf.slice(0..64)).context(1).post().unwrap();
    drop(rbuf);
    assert_eq!(fx.f.live().mrs, 3);
    let Fixture { f, p, src, dst, rdst: _ } = fx;
    drop(p);
    drop((src, dst));
    assert!(f.live().is_zero(), "{:?}", f.live());
}

// ---------------------------------------------------------------------------------------------
// link loss and unexpected events
// ---------------------------------------------------------------------------------------------

#[test]
fn cut_link__both_sides_lost_and_work_flushed() {
    let fx = fixture();
    let rbuf = fx.p.speer.alloc_mr(128, Usage::RECV).unwrap();
    fx.p.server.recv(rbuf.slice(0..64)).context(1).post().unwrap();
    fx.p.server.recv(rbuf.slice(64..128)).context(2).post().unwrap();
    fx.p.client.backend().cut_link();
    assert_eq!(next_event(&fx.p.client), ConnEvent::Lost);
    assert_eq!(next_event(&fx.p.server), ConnEvent::Lost);
    // Posted receives are flushed.
    let mut flushed = BTreeSet::new();
    for _ in 0..2 {
        let wc = next_wc(fx.p.server.cq());
        assert_eq!((wc.status, wc.opcode), (WcStatus::WrFlushErr, WcOpcode::Recv));
        flushed.insert(wc.wr_id);
    }
    assert_eq!(flushed, BTreeSet::from([1, 2]));
    assert_no_wc(fx.p.server.cq());
    // Later posts complete with an error status; nothing lands.
    fx.src.write(0, b"lost").unwrap();
    fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..4)).context(3).post().unwrap();
    let wc = next_wc(fx.p.client.cq());
    assert_eq!(wc.wr_id, 3);
    assert_ne!(wc.status, WcStatus::Success);
    assert_eq!(fx.dst.to_vec(0, 4).unwrap(), [0; 4]);
    // Even an unsignaled one reports its error.
    fx.p.client.send(fx.src.slice(0..4)).flags(CompletionFlags::ON_ERROR).context(4).post().unwrap();
    let wc = next_wc(fx.p.client.cq());
    assert_eq!(wc.wr_id, 4);
    assert_ne!(wc.status, WcStatus::Success);
    fx.p.server.recv(rbuf.slice(0..64)).context(5).post().unwrap();
    let wc = next_wc(fx.p.server.cq());
    assert_eq!((wc.wr_id, wc.status), (5, WcStatus::WrFlushErr));
    // Nothing else happens; the connection can still be released cleanly.
    assert_eq!(fx.p.client.next_event().unwrap_err().kind(), ErrorKind::NoEvent);
    fx.p.client.disconnect().unwrap();
    let Fixture { f, p, src, dst, rdst: _ } = fx;
    p.client.delete().unwrap();
    p.server.delete().unwrap();
    drop((p.ep, p.cpeer, p.speer, src, dst, rbuf));
    assert!(f.live().is_zero(), "{:?}", f.live());
}

#[test]
fn cut_link__pending_send_fails() {
    // A send waiting for a receive buffer (RNR) is failed by the link loss.
    let fx = fixture();
    fx.p.client.send(fx.src.slice(0..8)).context(1).post().unwrap();
    assert_no_wc(fx.p.client.cq());
    fx.p.server.backend().cut_link();
    let wc = next_wc(fx.p.client.cq());
    assert_eq!(wc.wr_id, 1);
    assert_ne!(wc.status, WcStatus::Success);
    assert_eq!(next_event(&fx.p.client), ConnEvent::Lost);
    assert_eq!(next_event(&fx.p.server), ConnEvent::Lost);
}

/// A connected fixture whose client QP is in the error state (a read with a corrupted rkey).
fn fixture_client_in_error() -> Fixture {
    let fx = fixture();
    let mut desc = fx.dst.descriptor();
    desc[16] ^= 0xff; // corrupt the rkey
    let bad = MrRemote::from_descriptor(&desc).unwrap();
    fx.p.client.read(fx.src.slice(0..8), bad.at(0)).context(1).post().unwrap();
    assert_eq!(next_wc(fx.p.client.cq()).status, WcStatus::RemAccessErr);
    fx
}

#[test]
fn conn_disconnect__after_error_completion() {
    // An error completion moves the client's QP to the error state; a disconnect must still
    // reach the peer and produce CLOSED on both sides (as rdma_disconnect does on hardware).
    let fx = fixture_client_in_error();
    // RDMA CM's order: the initiator's CLOSED comes once the peer has disconnected too.
    fx.p.client.disconnect().unwrap();
    assert_eq!(fx.p.client.next_event().unwrap_err().kind(), ErrorKind::NoEvent);
    assert_eq!(next_event(&fx.p.server), ConnEvent::Closed);
    fx.p.server.disconnect().unwrap();
    assert_eq!(next_event(&fx.p.client), ConnEvent::Closed);
}

#[test]
fn conn_next_event__peer_disconnects_after_error_completion() {
    // The passive side disconnects a client whose QP is in the error state: the client still
    // gets CLOSED.
    let fx = fixture_client_in_error();
    // RDMA CM's order: the initiator's CLOSED comes once the peer has disconnected too.
    fx.p.server.disconnect().unwrap();
    assert_eq!(fx.p.server.next_event().unwrap_err().kind(), ErrorKind::NoEvent);
    assert_eq!(next_event(&fx.p.client), ConnEvent::Closed);
    fx.p.client.disconnect().unwrap();
    assert_eq!(next_event(&fx.p.server), ConnEvent::Closed);
}

#[test]
fn conn_next_event__unexpected_event() {
    let p = pair(&MockFabric::new());
    p.client.backend().inject_event(CmEvent::Other(99));
    assert_kind(p.client.next_event(), ErrorKind::Unknown, "rpma_conn_next_event");
    // The event was consumed; the connection goes on.
    assert_eq!(p.client.next_event().unwrap_err().kind(), ErrorKind::NoEvent);
    // RDMA CM's order: the initiator's CLOSED comes once the peer has disconnected too.
    p.client.disconnect().unwrap();
    assert_eq!(p.client.next_event().unwrap_err().kind(), ErrorKind::NoEvent);
    assert_eq!(next_event(&p.server), ConnEvent::Closed);
    p.server.disconnect().unwrap();
    assert_eq!(next_event(&p.client), ConnEvent::Closed);
}

#[test]
fn conn_next_event__raw_event_mapping() {
    let p = pair(&MockFabric::new());
    for (raw, want) in [
        (CmEvent::DeviceRemoval, ConnEvent::Lost),
        (CmEvent::ConnectError, ConnEvent::Lost),
        (CmEvent::TimewaitExit, ConnEvent::Closed),
        (CmEvent::Disconnected, ConnEvent::Closed),
        (CmEvent::Rejected, ConnEvent::Rejected),
        (CmEvent::Unreachable, ConnEvent::Unreachable),
    ] {
        p.server.backend().inject_event(raw);
        assert_eq!(next_event(&p.server), want, "{raw:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// unordered receives
// ---------------------------------------------------------------------------------------------

/// Posts 32 receives (context i into slot i), sends 32 messages (message j carries j) and
/// returns, in completion order, (buffer context, message) pairs.
fn receive_order(f: MockFabric) -> Vec<(u64, u8)> {
    const N: u32 = 32;
    let cfg = ConnCfg::new().with_rq_size(N).with_sq_size(N).with_cq_size(2 * N);
    let p = pair_with(&f, Some(&cfg), Some(&cfg));
    let rbuf = p.speer.alloc_mr(N as usize * 8, Usage::RECV).unwrap();
    let sbuf = p.cpeer.alloc_mr(N as usize * 8, Usage::SEND).unwrap();
    for i in 0..N as usize {
        p.server.recv(rbuf.slice(i * 8..i * 8 + 8)).context(i as u64).post().unwrap();
        sbuf.write(i * 8, &[i as u8; 8]).unwrap();
    }
    for j in 0..N as usize {
        p.client
            .send(sbuf.slice(j * 8..j * 8 + 8))
            .flags(CompletionFlags::ON_ERROR)
            .context(1000 + j as u64)
            .post()
            .unwrap();
    }
    let mut order = Vec::new();
    for _ in 0..N {
        let wc = next_wc(p.server.cq());
        assert_eq!((wc.status, wc.opcode, wc.byte_len), (WcStatus::Success, WcOpcode::Recv, 8));
        let slot = wc.wr_id as usize;
        order.push((wc.wr_id, rbuf.to_vec(slot * 8, 1).unwrap()[0]));
    }
    assert_no_wc(p.server.cq());
    assert_no_wc(p.client.cq());
    // Every buffer was used once and every message delivered once.
    let bufs: BTreeSet<u64> = order.iter().map(|o| o.0).collect();
    let msgs: BTreeSet<u8> = order.iter().map(|o| o.1).collect();
    assert_eq!((bufs.len(), msgs.len()), (N as usize, N as usize));
    order
}

#[test]
fn recv__unordered_by_default_and_reproducible() {
    let a = receive_order(MockFabric::builder().seed(42).build());
    let fifo: Vec<u64> = (0..32).collect();
    let got: Vec<u64> = a.iter().map(|o| o.0).collect();
    assert_ne!(got, fifo, "random receive matching produced posting order");
    // Messages complete in send order; it is the buffer choice that is random.
    let msgs: Vec<u8> = a.iter().map(|o| o.1).collect();
    assert_eq!(msgs, (0..32).collect::<Vec<u8>>());
    // Same seed, same order.
    assert_eq!(receive_order(MockFabric::builder().seed(42).build()), a);
    // The default fabric is random too (and reproducible).
    let d = receive_order(MockFabric::new());
    assert_ne!(d.iter().map(|o| o.0).collect::<Vec<_>>(), fifo);
    assert_eq!(receive_order(MockFabric::new()), d);
}

#[test]
fn recv__ordered_receives_is_fifo() {
    let a = receive_order(MockFabric::builder().seed(42).ordered_receives(true).build());
    let fifo: Vec<(u64, u8)> = (0..32).map(|i| (i, i as u8)).collect();
    assert_eq!(a, fifo);
}

// ---------------------------------------------------------------------------------------------
// local-only regions: out of the rkey table
// ---------------------------------------------------------------------------------------------

/// A descriptor of `mr` whose usage byte claims remote read and write (a lying peer).
fn forged_rw(mr: &MrLocal) -> MrRemote {
    let mut desc = mr.descriptor();
    desc[20] = (Usage::READ_SRC | Usage::WRITE_DST).bits() as u8;
    MrRemote::from_descriptor(&desc).unwrap()
}

#[test]
fn mr_reg__local_only_region_is_unreachable_by_its_rkey() {
    // A region whose usage grants no remote access is not in the mock's rkey table: a remote
    // read or write naming its rkey fails at the responder whatever the descriptor claims, and
    // touches no byte. That is what makes `as_mut_slice` sound for it (rule M3).
    let local_only = Usage::READ_DST | Usage::WRITE_SRC | Usage::SEND | Usage::RECV;
    for op in ["read", "write"] {
        let fx = fixture();
        let mut target = fx.p.speer.alloc_mr(64, local_only).unwrap();
        assert!(!target.remote_access());
        target.as_mut_slice().unwrap().fill(0xAB);
        let forged = forged_rw(&target);
        fx.src.write(0, &[1; 8]).unwrap();
        match op {
            "read" => fx.p.client.read(fx.src.slice(0..8), forged.at(0)).context(1).post().unwrap(),
            _ => fx.p.client.write(forged.at(0), fx.src.slice(0..8)).context(1).post().unwrap(),
        }
        let wc = next_wc(fx.p.client.cq());
        assert_eq!((wc.wr_id, wc.status), (1, WcStatus::RemAccessErr), "{op}");
        assert_eq!(target.to_vec(0, 64).unwrap(), [0xAB; 64], "{op}: the region is untouched");
        assert_eq!(fx.src.to_vec(0, 8).unwrap(), [1; 8], "{op}: nothing was read");
        // Still exclusively ours.
        assert_eq!(target.as_mut_slice().unwrap().len(), 64);
    }
}

#[test]
fn mr_reg__iwarp_read_destination_is_remotely_writable() {
    // On iWARP a read destination needs remote write access: such a region is in the rkey
    // table, a (forged) remote write lands in it, and no plain `&mut [u8]` is handed out.
    let mut caps = rpma::Capabilities::roce_defaults();
    caps.iwarp = true;
    let fx = fixture_on(MockFabric::builder().capabilities(caps).build());
    let mut target = fx.p.speer.alloc_mr(64, Usage::READ_DST).unwrap();
    assert!(target.remote_access());
    assert_kind(target.as_mut_slice().map(|s| s.len()), ErrorKind::Inval, "MrLocal::as_mut_slice");
    fx.src.write(0, b"iwarp!!!").unwrap();
    fx.p.client.write(forged_rw(&target).at(8), fx.src.slice(0..8)).context(1).post().unwrap();
    let wc = next_wc(fx.p.client.cq());
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success));
    assert_eq!(target.to_vec(8, 8).unwrap(), b"iwarp!!!");
}

// ---------------------------------------------------------------------------------------------
// native vs emulated flush and atomic write
// ---------------------------------------------------------------------------------------------

#[test]
fn flush__native_completes_with_flush_opcode() {
    let fx = fixture_on(MockFabric::builder().native(true, true).build());
    assert!(fx.p.client.peer().capabilities().native_flush);
    fx.p.client.flush(fx.rdst.slice(0..4096), FlushType::Visibility).context(1).post().unwrap();
    let wc = next_wc(fx.p.client.cq());
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (1, WcStatus::Success, WcOpcode::Flush));
    fx.p.client.atomic_write(fx.rdst.at(8), 0x0102_0304_0506_0708u64.to_le_bytes()).context(2).post().unwrap();
    let wc = next_wc(fx.p.client.cq());
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (2, WcStatus::Success, WcOpcode::AtomicWrite));
    assert_eq!(fx.dst.to_vec(8, 8).unwrap(), 0x0102_0304_0506_0708u64.to_le_bytes());
}

#[test]
fn flush__emulated_completes_with_read_opcode() {
    let fx = fixture();
    assert!(!fx.p.client.peer().capabilities().native_flush);
    fx.p.client.flush(fx.rdst.slice(0..4096), FlushType::Visibility).context(1).post().unwrap();
    let wc = next_wc(fx.p.client.cq());
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (1, WcStatus::Success, WcOpcode::RdmaRead));
    fx.p.client.atomic_write(fx.rdst.at(8), [9; 8]).context(2).post().unwrap();
    let wc = next_wc(fx.p.client.cq());
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (2, WcStatus::Success, WcOpcode::RdmaWrite));
    assert_eq!(fx.dst.to_vec(8, 8).unwrap(), [9; 8]);
}

/// Reads a region registered with flush usages only.
fn read_flush_only_region(f: MockFabric) -> WcStatus {
    let fx = fixture_on(f);
    let target = fx.p.speer.alloc_mr(4096, Usage::FLUSH_TYPE_VISIBILITY | Usage::FLUSH_TYPE_PERSISTENT).unwrap();
    let rt = remote(&target);
    // Flushing it works either way.
    fx.p.client.flush(rt.slice(0..64), FlushType::Visibility).context(1).post().unwrap();
    assert_eq!(next_wc(fx.p.client.cq()).status, WcStatus::Success);
    // rpma-core lets the read through (flush usages imply remote read under APM); the
    // responder decides.
    fx.p.client.read(fx.src.slice(0..64), rt.at(0)).context(2).post().unwrap();
    let wc = next_wc(fx.p.client.cq());
    assert_eq!(wc.wr_id, 2);
    wc.status
}

#[test]
fn mr_reg__native_flush_usage_is_not_remotely_readable() {
    assert_eq!(read_flush_only_region(MockFabric::builder().native(true, false).build()), WcStatus::RemAccessErr);
}

#[test]
fn mr_reg__emulated_flush_usage_is_remotely_readable() {
    assert_eq!(read_flush_only_region(MockFabric::new()), WcStatus::Success);
}

#[test]
fn flush__native_needs_the_flush_usage_at_the_responder() {
    // A descriptor claiming a flush usage the region lacks (tampered): the native responder
    // refuses it, touching nothing.
    let fx = fixture_on(MockFabric::builder().native(true, true).build());
    let target = fx.p.speer.alloc_mr(4096, Usage::WRITE_DST).unwrap();
    let mut desc = target.descriptor();
    desc[20] |= Usage::FLUSH_TYPE_VISIBILITY.bits() as u8;
    let rt = MrRemote::from_descriptor(&desc).unwrap();
    fx.p.client.flush(rt.slice(0..64), FlushType::Visibility).context(1).post().unwrap();
    let wc = next_wc(fx.p.client.cq());
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::RemAccessErr));
}

// ---------------------------------------------------------------------------------------------
// thread safety
// ---------------------------------------------------------------------------------------------

#[test]
fn types__send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Conn>();
    send_sync::<Peer>();
    send_sync::<MrLocal>();
    send_sync::<Srq>();
    send_sync::<ConnCfg>();
    send_sync::<MockFabric>();
    send::<Ep>();
    send::<ConnReq>();
}

#[test]
fn conn__concurrent_writes_complete_once() {
    const THREADS: u64 = 4;
    const PER: u64 = 64;
    let f = MockFabric::new();
    let cfg = ConnCfg::new().with_sq_size((THREADS * PER) as u32).with_cq_size((THREADS * PER) as u32);
    let p = pair_with(&f, Some(&cfg), None);
    let src = p.cpeer.alloc_mr(4096, Usage::WRITE_SRC).unwrap();
    let dst = p.speer.alloc_mr((THREADS * PER * 8) as usize, Usage::WRITE_DST).unwrap();
    let rdst = remote(&dst);
    for t in 0..THREADS {
        src.write(t as usize * 8, &[t as u8 + 1; 8]).unwrap();
    }
    let done = Mutex::new(Vec::new());
    let deadline = Instant::now() + DEADLINE;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (p, src, done) = (&p, &src, &done);
            s.spawn(move || {
                for i in 0..PER {
                    let ctx = (t << 32) | i;
                    let off = ((t * PER + i) * 8) as usize;
                    p.client
                        .write(rdst.at(off), src.slice(t as usize * 8..t as usize * 8 + 8))
                        .context(ctx)
                        .post()
                        .unwrap();
                }
                // Poll until every thread's operations completed (any thread may reap any).
                loop {
                    let mut wc = [Wc::EMPTY; 8];
                    match p.client.cq().poll(&mut wc) {
                        Ok(0) => std::thread::yield_now(),
                        Ok(n) => {
                            let mut g = done.lock().unwrap();
                            for w in &wc[..n] {
                                assert_eq!(w.status, WcStatus::Success);
                                g.push(w.wr_id);
                            }
                        }
                        Err(e) => panic!("{e}"),
                    }
                    if done.lock().unwrap().len() as u64 >= THREADS * PER {
                        break;
                    }
                    assert!(Instant::now() < deadline, "completions missing after 10 s");
                }
            });
        }
    });
    let mut got = done.into_inner().unwrap();
    got.sort_unstable();
    let mut want: Vec<u64> = (0..THREADS).flat_map(|t| (0..PER).map(move |i| (t << 32) | i)).collect();
    want.sort_unstable();
    assert_eq!(got, want, "every op context completes exactly once");
    assert_eq!(p.client.backend().sq_in_use(), 0);
    for t in 0..THREADS {
        for i in 0..PER {
            let off = ((t * PER + i) * 8) as usize;
            assert_eq!(dst.to_vec(off, 8).unwrap(), [t as u8 + 1; 8]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// the remaining ERRORS rules and upstream fault tests (docs/errors.md, docs/upstream-tests.md)
// ---------------------------------------------------------------------------------------------

const EOPNOTSUPP: i32 = 95;

#[test]
fn peer_new__alloc_pd_no_error() {
    let f = MockFabric::new();
    let dev = Device::lookup(&f, ADDR, ContextType::Local).unwrap();
    arm(&f, "ibv_alloc_pd", 0);
    assert_kind(Peer::new(&dev), ErrorKind::Unknown, "rpma_peer_new");
    f.faults().disarm();
    assert!(f.live().is_zero(), "{:?}", f.live());
    assert!(Peer::new(&dev).is_ok());
}

/// The temporary CM id's steps of `rpma_utils_get_ibv_context` for `kind`: each failure is a
/// provider error, and the id is destroyed whenever it was created.
fn get_ibv_context_step_fails(kind: ContextType, name: &'static str) {
    let f = MockFabric::new();
    f.faults().fail_nth(1, EIO, Some(name));
    assert_provider(Device::lookup(&f, ADDR, kind), EIO, "rpma_utils_get_ibv_context");
    f.faults().count_calls(None);
    f.faults().record_names(true);
    assert!(Device::lookup(&f, ADDR, kind).is_ok());
    let second = if kind == ContextType::Local { "rdma_bind_addr" } else { "rdma_resolve_addr" };
    assert_eq!(f.faults().recorded(), ["rdma_getaddrinfo", "rdma_create_id", second, "rdma_destroy_id"]);
    // A failed bind/resolve still destroys the temporary id.
    f.faults().fail_nth(3, EIO, None);
    assert!(Device::lookup(&f, ADDR, kind).is_err());
    assert_eq!(f.faults().recorded(), ["rdma_getaddrinfo", "rdma_create_id", second, "rdma_destroy_id"]);
}

#[test]
fn utils_get_ibv_context__create_id_failed() {
    get_ibv_context_step_fails(ContextType::Local, "rdma_create_id");
    get_ibv_context_step_fails(ContextType::Remote, "rdma_create_id");
}

#[test]
fn utils_get_ibv_context__bind_addr_failed_E_PROVIDER() {
    get_ibv_context_step_fails(ContextType::Local, "rdma_bind_addr");
}

#[test]
fn utils_get_ibv_context__resolve_addr_failed_E_PROVIDER() {
    get_ibv_context_step_fails(ContextType::Remote, "rdma_resolve_addr");
}

/// A failure to destroy the temporary id is ignored: the lookup succeeds.
fn get_ibv_context_destroy_id_fails(kind: ContextType) {
    let f = MockFabric::new();
    arm(&f, "rdma_destroy_id", EIO);
    let dev = Device::lookup(&f, ADDR, kind).expect("a destroy_id failure is ignored");
    assert_eq!(f.faults().calls(), 1, "rdma_destroy_id was called (and failed)");
    f.faults().disarm();
    assert!(Peer::new(&dev).is_ok());
}

#[test]
fn utils_get_ibv_context__success_destroy_id_failed_passive() {
    get_ibv_context_destroy_id_fails(ContextType::Local);
}

#[test]
fn utils_get_ibv_context__success_destroy_id_failed_active() {
    get_ibv_context_destroy_id_fails(ContextType::Remote);
}

#[test]
fn mr_reg__reg_mr_EOPNOTSUPP_no_odp() {
    // Not ODP-capable: no retry, the EOPNOTSUPP is the result.
    let f = MockFabric::new();
    let p = peer(&f);
    assert_eq!(p.device().is_odp_capable(), Ok(false));
    arm(&f, "ibv_reg_mr", EOPNOTSUPP);
    assert_provider(p.alloc_mr(4096, Usage::READ_SRC), EOPNOTSUPP, "rpma_mr_reg");
    assert_eq!(f.faults().calls(), 1, "registered once, no ODP retry");
    f.faults().disarm();
    assert_eq!(f.live().mrs, 0);
}

#[test]
fn mr_reg__reg_mr_EOPNOTSUPP_ERRNO() {
    // ODP-capable: the retry with IBV_ACCESS_ON_DEMAND is made, and its failure is the result.
    let f = MockFabric::builder().odp(true).build();
    let p = peer(&f);
    f.faults().fail_nth(1, EOPNOTSUPP, Some("ibv_reg_mr"));
    f.faults().also_fail(2, EIO, "ibv_reg_mr");
    assert_provider(p.alloc_mr(4096, Usage::READ_SRC), EIO, "rpma_mr_reg");
    assert_eq!(f.faults().calls(), 2, "one retry");
    // Only EOPNOTSUPP is retried.
    arm(&f, "ibv_reg_mr", EIO);
    assert_provider(p.alloc_mr(4096, Usage::READ_SRC), EIO, "rpma_mr_reg");
    assert_eq!(f.faults().calls(), 1, "no retry for another errno");
    f.faults().disarm();
    assert_eq!(f.live().mrs, 0);
}

#[test]
fn mr_reg__success_odp() {
    let f = MockFabric::builder().odp(true).build();
    let p = peer(&f);
    assert_eq!(p.device().is_odp_capable(), Ok(true));
    arm(&f, "ibv_reg_mr", EOPNOTSUPP);
    let mr = p.alloc_mr(4096, Usage::READ_SRC | Usage::WRITE_DST).expect("the ODP retry succeeds");
    assert_eq!(f.faults().calls(), 2, "registered on the retry");
    f.faults().disarm();
    assert_eq!(f.live().mrs, 1);
    mr.write(8, b"odp").unwrap();
    assert_eq!(mr.to_vec(8, 3).unwrap(), b"odp");
    mr.dereg().unwrap();
    assert_eq!(f.live().mrs, 0);
}

#[test]
fn ep_next_conn_req__event_not_a_request_E_INVAL() {
    // librpma's next_conn_req__event_REJECTED and from_cm_event__RDMA_CM_EVENT_CONNECT_ERROR:
    // any event but a connection request is acked and rejected with Inval.
    let f = MockFabric::new();
    let speer = peer(&f);
    let cpeer = peer(&f);
    let ep = Ep::listen(&speer, ADDR, PORT).unwrap();
    nonblock(ep.fd());
    let port: u16 = PORT.parse().unwrap();
    for ev in [CmEvent::Rejected, CmEvent::ConnectError, CmEvent::DeviceRemoval, CmEvent::Other(99)] {
        assert!(f.inject_listener_event(ADDR, port, ev));
        f.faults().count_calls(None);
        f.faults().record_names(true);
        assert_kind(ep.next_conn_req(None), ErrorKind::Inval, "rpma_ep_next_conn_req");
        assert_eq!(f.faults().recorded(), ["rdma_get_cm_event", "rdma_ack_cm_event"], "{ev:?} is acked");
        f.faults().disarm();
        assert_eq!(ep.next_conn_req(None).unwrap_err().kind(), ErrorKind::NoEvent, "{ev:?} is consumed");
    }
    assert_eq!(f.live().qps, 0, "no queue pair built for a non-request");
    // The endpoint goes on.
    let c = ConnReq::new(&cpeer, ADDR, PORT, None).unwrap().connect(None).unwrap();
    nonblock(c.event_fd());
    let _s = ep.next_conn_req(None).unwrap().connect(None).unwrap();
    assert_eq!(next_event(&c), ConnEvent::Established);
    assert!(!f.inject_listener_event(ADDR, port + 1, CmEvent::Rejected), "nothing listens there");
}

#[test]
fn ep_next_conn_req__event_REJECTED_ack_ERRNO() {
    let f = MockFabric::new();
    let speer = peer(&f);
    let ep = Ep::listen(&speer, ADDR, PORT).unwrap();
    nonblock(ep.fd());
    assert!(f.inject_listener_event(ADDR, PORT.parse().unwrap(), CmEvent::Rejected));
    arm(&f, "rdma_ack_cm_event", EIO);
    assert_provider(ep.next_conn_req(None), EIO, "rpma_ep_next_conn_req");
    f.faults().disarm();
    assert_eq!(ep.next_conn_req(None).unwrap_err().kind(), ErrorKind::NoEvent);
}

#[test]
fn conn_next_event__ack_cm_event_fails() {
    // librpma's next_event__event_UNREACHABLE_ack_ERRNO: a failed ack loses the event (and the
    // private-data copy).
    let f = MockFabric::new();
    let h = half(&f, None, None);
    let server = h.ep.next_conn_req(None).unwrap().connect(Some(b"srv")).unwrap();
    arm(&f, "rdma_ack_cm_event", EIO);
    assert_provider(h.client.next_event(), EIO, "rpma_conn_next_event");
    f.faults().disarm();
    assert_eq!(h.client.next_event().unwrap_err().kind(), ErrorKind::NoEvent, "the event is gone");
    assert!(h.client.private_data().is_empty(), "the private data is discarded");
    // An unreachable peer: same.
    let lonely = ConnReq::new(&h.cpeer, ADDR, "7778", None).unwrap().connect(None).unwrap();
    nonblock(lonely.event_fd());
    arm(&f, "rdma_ack_cm_event", EIO);
    assert_provider(lonely.next_event(), EIO, "rpma_conn_next_event");
    f.faults().disarm();
    assert_eq!(lonely.next_event().unwrap_err().kind(), ErrorKind::NoEvent);
    drop(server);
}

#[test]
fn conn_wait__get_cq_event_UNKNOWN() {
    // A shared channel without a receive CQ: an event naming the receive CQ is of an unknown CQ.
    let f = MockFabric::new();
    let cfg = ConnCfg::new().with_shared_channel(true);
    let p = pair_with(&f, Some(&cfg), None);
    nonblock(p.client.compl_fd().unwrap());
    assert!(p.client.rcq().is_none());
    assert!(p.client.backend().inject_cq_event(rpma::transport::CqSlot::Receive));
    assert_kind(p.client.wait(), ErrorKind::Unknown, "rpma_conn_wait");
    // Waiting goes on for the main CQ.
    let src = p.cpeer.alloc_mr(64, Usage::WRITE_SRC).unwrap();
    let dst = p.speer.alloc_mr(64, Usage::WRITE_DST).unwrap();
    p.client.write(remote(&dst).at(0), src.slice(0..8)).context(5).post().unwrap();
    let (cq, is_rcq) = p.client.wait().unwrap();
    assert!(!is_rcq);
    assert_eq!(next_wc(cq).wr_id, 5);
    // Not shared: nothing to inject into.
    let q = pair(&MockFabric::new());
    assert!(!q.client.backend().inject_cq_event(rpma::transport::CqSlot::Main));
}

#[test]
fn conn_req_connect__conn_new_fails() {
    // The connection object's provider calls (event channel, migrate id, APM flush buffer):
    // before rdma_connect on the active side, after rdma_accept on the passive side.
    for name in ["rdma_create_event_channel", "rdma_migrate_id", "mmap", "ibv_reg_mr"] {
        let want = |r: rpma::Result<Conn>| {
            if name == "mmap" {
                assert_kind(r, ErrorKind::NoMem, "rpma_conn_req_connect");
            } else {
                assert_provider(r, EIO, "rpma_conn_req_connect");
            }
        };
        // Active.
        let f = MockFabric::new();
        let cpeer = peer(&f);
        let speer = peer(&f);
        let ep = Ep::listen(&speer, ADDR, PORT).unwrap();
        nonblock(ep.fd());
        let req = ConnReq::new(&cpeer, ADDR, PORT, None).unwrap();
        arm(&f, name, EIO);
        want(req.connect(None));
        f.faults().disarm();
        assert_eq!(f.live().qps, 0, "active, {name}");
        assert_eq!(ep.next_conn_req(None).unwrap_err().kind(), ErrorKind::NoEvent, "nothing sent ({name})");
        // Passive.
        let f = MockFabric::new();
        let h = half(&f, None, None);
        let req = h.ep.next_conn_req(None).unwrap();
        arm(&f, name, EIO);
        want(req.connect(Some(b"srv")));
        f.faults().disarm();
        assert_eq!(next_event(&h.client), ConnEvent::Rejected, "passive, {name}");
        assert_eq!(f.live().qps, 1, "only the client's QP is left (passive, {name})");
    }
    // With native flush there is no flush buffer, hence no mmap / registration.
    let f = MockFabric::builder().native(true, false).build();
    let h = half(&f, None, None);
    f.faults().count_calls(None);
    f.faults().record_names(true);
    let _s = h.ep.next_conn_req(None).unwrap().connect(None).unwrap();
    let names = f.faults().recorded();
    assert!(!names.contains(&"mmap") && !names.contains(&"ibv_reg_mr"), "{names:?}");
    assert!(names.contains(&"rdma_migrate_id"), "{names:?}");
}

#[test]
fn conn_req_connect_via_accept__conn_new_fails_subsequent_reject_fails() {
    // Two faults: the connection object fails after the accept (EIO), then releasing the
    // request fails too (ENOMEM): the first error wins, and everything is released.
    let f = MockFabric::new();
    let h = half(&f, None, None);
    let req = h.ep.next_conn_req(None).unwrap();
    f.faults().fail_nth(1, EIO, Some("rdma_migrate_id"));
    f.faults().also_fail(1, ENOMEM, "rdma_reject");
    assert_provider(req.connect(None), EIO, "rpma_conn_req_connect");
    f.faults().disarm();
    assert_eq!(next_event(&h.client), ConnEvent::Rejected);
    assert_eq!(f.live().qps, 1);
}

/// Runs `scenario` without faults, recording the provider calls of its teardown (made between
/// `arm()` and the scenario's `disarm`); then fails each of them alone (EIO), and each pair of
/// them (the first with EIO, the later one with ENOMEM). The teardown must report the first
/// failure (`munmap` → `Inval`, others `Provider` with EIO), attempt every step, and leak
/// nothing. Returns the recorded names.
fn teardown_faults(scenario: fn(&MockFabric, &dyn Fn()) -> rpma::Result<()>, op: &str) -> Vec<&'static str> {
    let f = MockFabric::new();
    let record = || {
        f.faults().count_calls(None);
        f.faults().record_names(true);
    };
    scenario(&f, &record).expect("the teardown without faults");
    let names = f.faults().recorded();
    assert!(f.live().is_zero(), "leak without faults: {:?}", f.live());
    let check = |what: &str, f: &MockFabric, first: usize, r: rpma::Result<()>| {
        let e = r.expect_err(what);
        assert_eq!(e.op(), op, "{what}: {e}");
        if names[first] == "munmap" {
            assert_eq!(e.kind(), ErrorKind::Inval, "{what}: {e}");
        } else {
            assert_eq!((e.kind(), e.errno()), (ErrorKind::Provider, Some(EIO)), "{what}: {e}");
        }
        assert!(f.live().is_zero(), "{what}: leak {:?}", f.live());
    };
    for i in 0..names.len() {
        let f = MockFabric::new();
        let r = scenario(&f, &|| f.faults().fail_nth(i as u64 + 1, EIO, None));
        check(&format!("{} failing", names[i]), &f, i, r);
        for j in i + 1..names.len() {
            let nth = names[..=j].iter().filter(|n| **n == names[j]).count() as u64;
            let f = MockFabric::new();
            let r = scenario(&f, &|| {
                f.faults().fail_nth(i as u64 + 1, EIO, None);
                f.faults().also_fail(nth, ENOMEM, names[j]);
            });
            check(&format!("{} (#{i}) then {} (#{j}) failing", names[i], names[j]), &f, i, r);
        }
    }
    names
}

/// A connection configuration with a receive CQ and a shared completion channel: every
/// teardown step exists.
fn full_cfg() -> ConnCfg {
    ConnCfg::new().with_rcq_size(4).with_shared_channel(true)
}

#[test]
fn conn_req_delete__via_destroy_faults_first_error_wins() {
    fn scenario(f: &MockFabric, arm: &dyn Fn()) -> rpma::Result<()> {
        let p = peer(f);
        let req = ConnReq::new(&p, ADDR, PORT, Some(&full_cfg()))?;
        arm();
        let r = req.delete();
        f.faults().disarm();
        r
    }
    let names = teardown_faults(scenario, "rpma_conn_req_delete");
    assert_eq!(
        names,
        [
            "rdma_destroy_qp",
            "ibv_destroy_cq",
            "ibv_destroy_cq",
            "rdma_destroy_id",
            "ibv_destroy_comp_channel",
            "rdma_destroy_event_channel"
        ]
    );
}

#[test]
fn conn_req_delete__via_reject_faults_first_error_wins() {
    fn scenario(f: &MockFabric, arm: &dyn Fn()) -> rpma::Result<()> {
        let h = half(f, None, None);
        let req = h.ep.next_conn_req(Some(&full_cfg()))?;
        arm();
        let r = req.delete();
        f.faults().disarm();
        // Rejected whatever failed.
        assert_eq!(next_event(&h.client), ConnEvent::Rejected);
        r
    }
    let names = teardown_faults(scenario, "rpma_conn_req_delete");
    assert_eq!(
        names,
        [
            "rdma_reject",
            "rdma_destroy_qp",
            "ibv_destroy_cq",
            "ibv_destroy_cq",
            "rdma_destroy_id",
            "ibv_destroy_comp_channel",
            "rdma_destroy_event_channel"
        ]
    );
}

#[test]
fn conn_delete__faults_first_error_wins() {
    // With emulated flush the APM flush buffer is released first: ibv_dereg_mr (→ Provider),
    // then munmap (→ Inval).
    fn scenario(f: &MockFabric, arm: &dyn Fn()) -> rpma::Result<()> {
        let p = pair_with(f, Some(&full_cfg()), None);
        // RDMA CM's order: the initiator's CLOSED comes once the peer has disconnected too.
        p.client.disconnect()?;
        assert_eq!(p.client.next_event().unwrap_err().kind(), ErrorKind::NoEvent);
        assert_eq!(next_event(&p.server), ConnEvent::Closed);
        p.server.disconnect()?;
        assert_eq!(next_event(&p.client), ConnEvent::Closed);
        arm();
        let r = p.client.delete();
        f.faults().disarm();
        r
    }
    let names = teardown_faults(scenario, "rpma_conn_delete");
    assert_eq!(
        names,
        [
            "ibv_dereg_mr",
            "munmap",
            "rdma_destroy_qp",
            "ibv_destroy_cq",
            "ibv_destroy_cq",
            "rdma_destroy_id",
            "ibv_destroy_comp_channel",
            "rdma_destroy_event_channel"
        ]
    );
    // Native flush: no flush buffer to release.
    let f = MockFabric::builder().native(true, false).build();
    let p = pair(&f);
    f.faults().count_calls(None);
    f.faults().record_names(true);
    p.client.delete().unwrap();
    let names = f.faults().recorded();
    assert!(!names.contains(&"ibv_dereg_mr") && !names.contains(&"munmap"), "{names:?}");
}

#[test]
fn conn_req_connect__flush_buffer_reg_fails_munmap_ignored() {
    // librpma's new__apm_mr_reg_E_NOMEM_munmap_ERRNO: the APM flush buffer's registration fails,
    // its page is unmapped, and a failure of that is ignored: the registration's error is the
    // result.
    let f = MockFabric::new();
    let cpeer = peer(&f);
    let req = ConnReq::new(&cpeer, ADDR, PORT, None).unwrap();
    f.faults().fail_nth(1, ENOMEM, Some("ibv_reg_mr"));
    f.faults().also_fail(1, EIO, "munmap");
    assert_provider(req.connect(None), ENOMEM, "rpma_conn_req_connect");
    f.faults().disarm();
    assert_eq!(f.live().qps, 0);
    // Without the second fault, the unmap is made all the same.
    let req = ConnReq::new(&cpeer, ADDR, PORT, None).unwrap();
    f.faults().fail_nth(1, EIO, Some("munmap"));
    f.faults().also_fail(1, ENOMEM, "ibv_reg_mr");
    assert_provider(req.connect(None), ENOMEM, "rpma_conn_req_connect");
    assert_eq!(f.faults().calls(), 1, "munmap was called (and its failure ignored)");
    f.faults().disarm();
    assert_eq!(f.live().qps, 0);
}

/// A receive buffer is released before its completion can be polled, whichever thread delivers
/// the message: `as_mut_slice` right after the poll never sees `Again` (the mock once posted
/// the completion before dropping its hold on the region).
#[test]
fn recv_region_is_free_once_its_completion_is_polled() {
    const ROUNDS: usize = 2000;
    let f = MockFabric::new();
    let p = pair(&f);
    let src = p.cpeer.alloc_mr(8, Usage::SEND).expect("src");
    let mut inbox = p.speer.alloc_mr(8, Usage::RECV).expect("inbox");
    let ready = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        s.spawn(|| {
            let cq = p.client.cq();
            for _ in 0..ROUNDS {
                ready.wait(); // the server has posted its receive
                p.client.send(src.slice(..)).post().expect("send");
                let wc = next_wc(cq); // retires the send-queue slot
                assert_eq!(wc.status, WcStatus::Success);
            }
        });
        let cq = p.server.cq();
        for round in 0..ROUNDS {
            p.server.recv(inbox.slice(..)).context(round as u64).post().expect("recv");
            ready.wait();
            let wc = next_wc(cq);
            assert_eq!((wc.wr_id, wc.status), (round as u64, WcStatus::Success));
            let bytes = inbox.as_mut_slice().unwrap_or_else(|e| panic!("round {round}: {e}"));
            bytes[0] = 0;
        }
    });
}

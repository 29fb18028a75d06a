//! Provider errors of every public operation: each provider call failed once, the error surfaces
//! with its errno, and a retry succeeds.

use super::*;

#[test]
fn peer_new__alloc_pd_ENOMEM() {
    let f = MockFabric::new();
    let dev = Device::lookup(&f, ADDR, ContextType::Local).unwrap();
    arm(&f, "ibv_alloc_pd", ENOMEM);
    assert_kind(Peer::new(&dev), ErrorKind::OutOfMemory, "Peer::new");
    f.faults().disarm();
    assert!(f.live().is_zero(), "{:?}", f.live());
    assert!(Peer::new(&dev).is_ok());
}

#[test]
fn peer_new__alloc_pd_EIO() {
    let f = MockFabric::new();
    let dev = Device::lookup(&f, ADDR, ContextType::Local).unwrap();
    arm(&f, "ibv_alloc_pd", EIO);
    assert_provider(Peer::new(&dev), EIO, "Peer::new");
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
    assert_provider(Peer::new(&dev), EIO, "Peer::new");
    f.faults().disarm();
    assert!(f.live().is_zero());
    assert!(Peer::new(&dev).is_ok());
}

#[test]
fn utils_get_ibv_context__provider_error() {
    let f = MockFabric::new();
    arm(&f, "rdma_getaddrinfo", EIO);
    assert_provider(Device::lookup(&f, ADDR, ContextType::Local), EIO, "Device::lookup");
    f.faults().disarm();
    assert!(Device::lookup(&f, ADDR, ContextType::Local).is_ok());
}

#[test]
fn utils_ibv_context_is_odp_capable__query_fails() {
    let f = MockFabric::new();
    let dev = Device::lookup(&f, ADDR, ContextType::Local).unwrap();
    arm(&f, "ibv_query_device_ex", EIO);
    assert_provider(dev.is_odp_capable(), EIO, "Device::is_odp_capable");
    f.faults().disarm();
    assert_eq!(dev.is_odp_capable(), Ok(false));
}

#[test]
fn mr_reg__reg_mr_fails() {
    let f = MockFabric::new();
    let p = peer(&f);
    arm(&f, "ibv_reg_mr", EIO);
    assert_provider(p.alloc_mr(4096, Usage::READ_SRC), EIO, "Peer::alloc_mr");
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
    assert_provider(mr.dereg(), EIO, "MrLocal::dereg");
    f.faults().disarm();
    // The region is gone all the same (docs/decisions.md #10).
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
    assert_provider(mr.advise(0, 4096, rpma::Advice::PrefetchWrite, 0), EIO, "MrLocal::advise");
    f.faults().disarm();
    assert!(mr.advise(0, 4096, rpma::Advice::PrefetchWrite, 0).is_ok());
}

#[test]
fn mr_advise__advise_mr_EOPNOTSUPP_and_EINVAL() {
    let f = MockFabric::new();
    let p = peer(&f);
    let mr = p.alloc_mr(4096, Usage::READ_DST).unwrap();
    arm(&f, "ibv_advise_mr", 95);
    assert_kind(mr.advise(0, 4096, rpma::Advice::Prefetch, 0), ErrorKind::Unsupported, "MrLocal::advise");
    arm(&f, "ibv_advise_mr", 22);
    assert_kind(mr.advise(0, 4096, rpma::Advice::Prefetch, 0), ErrorKind::InvalidInput, "MrLocal::advise");
    arm(&f, "ibv_advise_mr", 14);
    assert_kind(mr.advise(0, 4096, rpma::Advice::Prefetch, 0), ErrorKind::InvalidInput, "MrLocal::advise");
    f.faults().disarm();
    assert!(mr.advise(0, 4096, rpma::Advice::Prefetch, 0).is_ok());
}

#[test]
fn srq_new__provider_errors() {
    for name in ["ibv_create_srq", "ibv_create_comp_channel", "ibv_create_cq", "ibv_req_notify_cq"] {
        let f = MockFabric::new();
        let p = peer(&f);
        arm(&f, name, EIO);
        assert_provider(Srq::new(&p, None), EIO, "Srq::new");
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
        assert_provider(srq.delete(), EIO, "Srq::delete");
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
    assert_provider(srq.recv(mr.slice(0..64)).context(1).post(), EIO, "Srq::recv");
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
    let p = pair_on(&f, speer.clone(), None, Some(&scfg));
    // The receive buffer is registered on the SRQ's peer (a region of another protection
    // domain is refused).
    let rbuf = speer.alloc_mr(64, Usage::RECV).unwrap();
    let sbuf = p.cpeer.alloc_mr(64, Usage::SEND).unwrap();
    arm(&f, "ibv_post_srq_recv", EIO);
    assert_provider(srq.recv(rbuf.slice(0..64)).context(1).post(), EIO, "Srq::recv");
    f.faults().disarm();
    srq.recv(rbuf.slice(0..64)).context(2).post().unwrap();
    sbuf.write(0, b"ping").unwrap();
    p.client.send(sbuf.slice(0..4)).context(9).post().unwrap();
    let wc = next_wc(srq.rcq().unwrap());
    assert_eq!((wc.wr_id(), wc.status(), wc.opcode(), wc.byte_len()), (2, WcStatus::Success, WcOpcode::Recv, 4));
    assert_no_wc(srq.rcq().unwrap());
    assert_eq!(next_wc(p.client.cq()).status(), WcStatus::Success);
}

#[test]
fn ep_listen__provider_errors() {
    for name in ["rdma_create_event_channel", "rdma_create_id", "rdma_getaddrinfo", "rdma_bind_addr", "rdma_listen"] {
        let f = MockFabric::new();
        let p = peer(&f);
        arm(&f, name, EIO);
        assert_provider(Ep::listen(&p, ADDR, PORT), EIO, "Ep::listen");
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
    assert_provider(ep.shutdown(), EIO, "Ep::shutdown");
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
    assert_provider(h.ep.next_conn_req(None), EIO, "Ep::next_conn_req");
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
        assert_provider(h.ep.next_conn_req(None), EIO, "Ep::next_conn_req");
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
        assert_provider(ConnReq::new(&p, ADDR, PORT, Some(&cfg)), EIO, "ConnReq::new");
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
    assert_provider(ConnReq::new(&p, ADDR, PORT, Some(&cfg)), EIO, "ConnReq::new");
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
    assert_provider(req.recv(rbuf.slice(0..64)).context(1).post(), EIO, "ConnReq::recv");
    f.faults().disarm();
    req.recv(rbuf.slice(0..64)).context(2).post().unwrap();
    let server = req.connect(None).unwrap();
    assert_eq!(next_event(&h.client), ConnEvent::Established);
    let sbuf = h.cpeer.alloc_mr(64, Usage::SEND).unwrap();
    h.client.send(sbuf.slice(0..8)).context(3).post().unwrap();
    let wc = next_wc(server.cq());
    assert_eq!((wc.wr_id(), wc.status(), wc.opcode()), (2, WcStatus::Success, WcOpcode::Recv));
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
        assert_provider(req.connect(Some(b"x")), EIO, "ConnReq::connect");
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
    assert_provider(req.connect(Some(b"srv")), EIO, "ConnReq::connect");
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
    assert_provider(req.delete(), EIO, "ConnReq::delete");
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
        assert_provider(req.delete(), EIO, "ConnReq::delete");
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
    assert_provider(h.client.next_event(), EIO, "Conn::next_event");
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
    assert_provider(p.client.disconnect(), EIO, "Conn::disconnect");
    f.faults().disarm();
    // Nothing happened: the connection still works and a retry disconnects.
    assert_eq!(p.client.next_event().unwrap_err().kind(), ErrorKind::NoEvent);
    assert_eq!(p.server.next_event().unwrap_err().kind(), ErrorKind::NoEvent);
    p.client.write_empty().context(1).post().unwrap();
    assert_eq!(next_wc(p.client.cq()).status(), WcStatus::Success);
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
        assert_provider(p.client.delete(), EIO, "Conn::delete");
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
    assert_eq!((wc.wr_id(), wc.status(), wc.opcode()), (2, WcStatus::Success, opcode), "{rpma_op}");
    assert_no_wc(fx.p.client.cq());
}

#[test]
fn read__post_send_fails() {
    post_send_fault(
        "Conn::read",
        |fx, ctx| fx.p.client.read(fx.src.slice(0..8), fx.rdst.at(0)).context(ctx).post(),
        WcOpcode::RdmaRead,
    );
}

#[test]
fn write__post_send_fails() {
    post_send_fault(
        "Conn::write",
        |fx, ctx| fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..8)).context(ctx).post(),
        WcOpcode::RdmaWrite,
    );
}

#[test]
fn write_with_imm__post_send_fails() {
    post_send_fault(
        "Conn::write(..).imm",
        |fx, ctx| fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..8)).imm(7).context(ctx).post(),
        WcOpcode::RdmaWrite,
    );
}

#[test]
fn atomic_write__post_send_fails() {
    post_send_fault(
        "Conn::atomic_write",
        |fx, ctx| fx.p.client.atomic_write(fx.rdst.at(0), [1; 8]).context(ctx).post(),
        WcOpcode::RdmaWrite,
    );
}

#[test]
fn flush__post_send_fails() {
    post_send_fault(
        "Conn::flush",
        |fx, ctx| fx.p.client.flush(fx.rdst.slice(0..8), FlushType::Visibility).context(ctx).post(),
        WcOpcode::RdmaRead,
    );
}

#[test]
fn send__post_send_fails() {
    post_send_fault("Conn::send", |fx, ctx| fx.p.client.send(fx.src.slice(0..8)).context(ctx).post(), WcOpcode::Send);
}

#[test]
fn send_with_imm__post_send_fails() {
    post_send_fault(
        "Conn::send(..).imm",
        |fx, ctx| fx.p.client.send(fx.src.slice(0..8)).imm(5).context(ctx).post(),
        WcOpcode::Send,
    );
}

#[test]
fn recv__post_recv_fails() {
    let fx = fixture();
    arm(&fx.f, "ibv_post_recv", EIO);
    assert_provider(fx.p.server.recv(fx.dst.slice(0..64)).context(1).post(), EIO, "Conn::recv");
    fx.f.faults().disarm();
    fx.p.server.recv(fx.dst.slice(0..64)).context(2).post().unwrap();
    fx.p.client.send(fx.src.slice(0..8)).context(3).post().unwrap();
    let wc = next_wc(fx.p.server.cq());
    assert_eq!((wc.wr_id(), wc.status(), wc.opcode()), (2, WcStatus::Success, WcOpcode::Recv));
    assert_no_wc(fx.p.server.cq());
}

#[test]
fn cq_get_wc__poll_cq_fails() {
    let fx = fixture();
    fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..8)).context(42).post().unwrap();
    arm(&fx.f, "ibv_poll_cq", EIO);
    let mut wc = [Wc::EMPTY; 4];
    assert_provider(fx.p.client.cq().poll(&mut wc), EIO, "Cq::poll");
    fx.f.faults().disarm();
    // The completion was not consumed by the failed poll.
    let wc = next_wc(fx.p.client.cq());
    assert_eq!((wc.wr_id(), wc.status()), (42, WcStatus::Success));
}

#[test]
fn cq_wait__req_notify_cq_fails() {
    let fx = fixture();
    nonblock(fx.p.client.cq().fd());
    fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..8)).context(42).post().unwrap();
    arm(&fx.f, "ibv_req_notify_cq", EIO);
    assert_provider(fx.p.client.cq().wait(), EIO, "Cq::wait");
    fx.f.faults().disarm();
    // The event was consumed before re-arming failed; the completion is still there.
    let wc = next_wc(fx.p.client.cq());
    assert_eq!((wc.wr_id(), wc.status()), (42, WcStatus::Success));
    // As on hardware, the CQ stays unarmed after a failed re-arm: a later wait (non-blocking
    // here) reports no completion instead of hanging.
    fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..8)).context(43).post().unwrap();
    assert_kind(fx.p.client.cq().wait(), ErrorKind::NoCompletion, "Cq::wait");
    assert_eq!(next_wc(fx.p.client.cq()).wr_id(), 43);
}

#[test]
fn cq_wait__get_cq_event_fails() {
    let fx = fixture();
    nonblock(fx.p.client.cq().fd());
    fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..8)).context(42).post().unwrap();
    arm(&fx.f, "ibv_get_cq_event", EIO);
    // librpma: a failed ibv_get_cq_event is RPMA_E_NO_COMPLETION.
    assert_kind(fx.p.client.cq().wait(), ErrorKind::NoCompletion, "Cq::wait");
    fx.f.faults().disarm();
    // The event is still pending: the retry succeeds.
    fx.p.client.cq().wait().unwrap();
    assert_eq!(next_wc(fx.p.client.cq()).wr_id(), 42);
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
    assert_provider(fx.p.client.wait(), EIO, "Conn::wait");
    fx.f.faults().disarm();
    assert_eq!(next_wc(fx.p.client.cq()).wr_id(), 42);
    // The receive CQ is still armed: a wait for it succeeds.
    fx.p.client.recv(fx.src.slice(0..64)).context(7).post().unwrap();
    fx.p.server.send(fx.dst.slice(0..8)).context(8).post().unwrap();
    let (cq, is_rcq) = fx.p.client.wait().unwrap();
    assert!(is_rcq);
    assert_eq!(next_wc(cq).wr_id(), 7);
}

#[test]
fn conn_wait__get_cq_event_fails() {
    let fx = shared_channel_fixture();
    fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..8)).context(42).post().unwrap();
    arm(&fx.f, "ibv_get_cq_event", EIO);
    assert_kind(fx.p.client.wait(), ErrorKind::NoCompletion, "Conn::wait");
    fx.f.faults().disarm();
    let (cq, is_rcq) = fx.p.client.wait().unwrap();
    assert!(!is_rcq);
    assert_eq!(next_wc(cq).wr_id(), 42);
}

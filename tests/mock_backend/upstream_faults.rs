//! The remaining ERRORS rules and upstream fault tests (docs/errors.md, docs/upstream-tests.md).

use super::*;

const EOPNOTSUPP: i32 = 95;

#[test]
fn peer_new__alloc_pd_no_error() {
    let f = MockFabric::new();
    let dev = Device::lookup(&f, ADDR, ContextType::Local).unwrap();
    arm(&f, "ibv_alloc_pd", 0);
    assert_kind(Peer::new(&dev), ErrorKind::Other, "Peer::new");
    f.faults().disarm();
    assert!(f.live().is_zero(), "{:?}", f.live());
    assert!(Peer::new(&dev).is_ok());
}

/// The temporary CM id's steps of `rpma_utils_get_ibv_context` for `kind`: each failure is a
/// provider error, and the id is destroyed whenever it was created.
fn get_ibv_context_step_fails(kind: ContextType, name: &'static str) {
    let f = MockFabric::new();
    f.faults().fail_nth(1, EIO, Some(name));
    assert_provider(Device::lookup(&f, ADDR, kind), EIO, "Device::lookup");
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
    assert_provider(p.alloc_mr(4096, Usage::READ_SRC), EOPNOTSUPP, "Peer::alloc_mr");
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
    assert_provider(p.alloc_mr(4096, Usage::READ_SRC), EIO, "Peer::alloc_mr");
    assert_eq!(f.faults().calls(), 2, "one retry");
    // Only EOPNOTSUPP is retried.
    arm(&f, "ibv_reg_mr", EIO);
    assert_provider(p.alloc_mr(4096, Usage::READ_SRC), EIO, "Peer::alloc_mr");
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
    // any event but a connection request is acked and rejected with InvalidInput.
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
        assert_kind(ep.next_conn_req(None), ErrorKind::InvalidInput, "Ep::next_conn_req");
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
    assert_provider(ep.next_conn_req(None), EIO, "Ep::next_conn_req");
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
    assert_provider(h.client.next_event(), EIO, "Conn::next_event");
    f.faults().disarm();
    assert_eq!(h.client.next_event().unwrap_err().kind(), ErrorKind::NoEvent, "the event is gone");
    assert!(h.client.private_data().is_empty(), "the private data is discarded");
    // An unreachable peer: same.
    let lonely = ConnReq::new(&h.cpeer, ADDR, "7778", None).unwrap().connect(None).unwrap();
    nonblock(lonely.event_fd());
    arm(&f, "rdma_ack_cm_event", EIO);
    assert_provider(lonely.next_event(), EIO, "Conn::next_event");
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
    assert_kind(p.client.wait(), ErrorKind::Other, "Conn::wait");
    // Waiting goes on for the main CQ.
    let src = p.cpeer.alloc_mr(64, Usage::WRITE_SRC).unwrap();
    let dst = p.speer.alloc_mr(64, Usage::WRITE_DST).unwrap();
    p.client.write(remote(&dst).at(0), src.slice(0..8)).context(5).post().unwrap();
    let (cq, is_rcq) = p.client.wait().unwrap();
    assert!(!is_rcq);
    assert_eq!(next_wc(cq).wr_id(), 5);
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
                assert_kind(r, ErrorKind::OutOfMemory, "ConnReq::connect");
            } else {
                assert_provider(r, EIO, "ConnReq::connect");
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
    assert_provider(req.connect(None), EIO, "ConnReq::connect");
    f.faults().disarm();
    assert_eq!(next_event(&h.client), ConnEvent::Rejected);
    assert_eq!(f.live().qps, 1);
}

/// Runs `scenario` without faults, recording the provider calls of its teardown (made between
/// `arm()` and the scenario's `disarm`); then fails each of them alone (EIO), and each pair of
/// them (the first with EIO, the later one with ENOMEM). The teardown must report the first
/// failure (`munmap` → `InvalidInput`, others `Provider` with EIO), attempt every step, and leak
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
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{what}: {e}");
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
    let names = teardown_faults(scenario, "ConnReq::delete");
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
    let names = teardown_faults(scenario, "ConnReq::delete");
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
    // then munmap (→ InvalidInput).
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
    let names = teardown_faults(scenario, "Conn::delete");
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
    assert_provider(req.connect(None), ENOMEM, "ConnReq::connect");
    f.faults().disarm();
    assert_eq!(f.live().qps, 0);
    // Without the second fault, the unmap is made all the same.
    let req = ConnReq::new(&cpeer, ADDR, PORT, None).unwrap();
    f.faults().fail_nth(1, EIO, Some("munmap"));
    f.faults().also_fail(1, ENOMEM, "ibv_reg_mr");
    assert_provider(req.connect(None), ENOMEM, "ConnReq::connect");
    assert_eq!(f.faults().calls(), 1, "munmap was called (and its failure ignored)");
    f.faults().disarm();
    assert_eq!(f.live().qps, 0);
}

/// A receive buffer is released before its completion can be polled, whichever thread delivers
/// the message: `as_mut_slice` right after the poll never sees `WouldBlock` (the mock once posted
/// the completion before dropping its hold on the region).
#[test]
fn recv_region_is_free_once_its_completion_is_polled() {
    const ROUNDS: usize = 2000;
    let f = MockFabric::new();
    let Pair { client, server, cpeer, speer, ep: _ep } = pair(&f);
    let src = cpeer.alloc_mr(8, Usage::SEND).expect("src");
    let mut inbox = speer.alloc_mr(8, Usage::RECV).expect("inbox");
    let ready = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        let (src, ready) = (&src, &ready);
        s.spawn(move || {
            let cq = client.cq();
            for _ in 0..ROUNDS {
                ready.wait(); // the server has posted its receive
                client.send(src.slice(..)).post().expect("send");
                let wc = next_wc(cq); // retires the send-queue slot
                assert_eq!(wc.status(), WcStatus::Success);
            }
        });
        let cq = server.cq();
        for round in 0..ROUNDS {
            server.recv(inbox.slice(..)).context(round as u64).post().expect("recv");
            ready.wait();
            let wc = next_wc(cq);
            assert_eq!((wc.wr_id(), wc.status()), (round as u64, WcStatus::Success));
            let bytes = inbox.as_mut_slice().unwrap_or_else(|e| panic!("round {round}: {e}"));
            bytes[0] = 0;
        }
    });
}

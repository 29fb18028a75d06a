//! Two devices on one fabric: what is made on one device is not accepted by the other's
//! requests (an object's handle means nothing to another device's context).

use super::*;

/// The second device's address (the first, `mock0`, owns [`ADDR`]).
const ADDR2: &str = "10.77.0.2";

fn two_devices() -> MockFabric {
    MockFabric::builder().device("mock0", &[ADDR]).device("mock1", &[ADDR2]).build()
}

/// A peer and an SRQ (with or without its own receive CQ) on the second device.
fn srq_on_mock1(f: &MockFabric, rcq_size: u32) -> (Peer, Srq) {
    let dev = Device::lookup(f, ADDR2, ContextType::Local).expect("device lookup");
    assert_eq!(dev.name(), "mock1");
    let p = Peer::new(&dev).expect("peer");
    let srq = Srq::new(&p, Some(&SrqCfg::new().with_rcq_size(rcq_size))).expect("srq");
    (p, srq)
}

/// `InvalidInput` of `op` naming the SRQ's device and the request's.
#[track_caller]
fn assert_foreign_srq<T: std::fmt::Debug>(r: rpma::Result<T>, op: &str) {
    let e = r.expect_err("a request with an SRQ of another device");
    assert_eq!((e.kind(), e.op()), (ErrorKind::InvalidInput, op), "{e}");
    let text = e.to_string();
    assert!(text.contains("the SRQ was created on another peer"), "{text}");
    assert!(text.contains("the SRQ's peer is on device mock1, the request's on device mock0"), "{text}");
}

/// A request of a peer of `mock0` built with an SRQ of `mock1` is `InvalidInput`, with or without
/// the SRQ's receive CQ: on a real device its queue pair would be created with another context's
/// SRQ and CQ handles.
#[test]
fn srq_of_another_device__conn_req_new_E_INVAL() {
    let f = two_devices();
    let p = peer(&f);
    assert_eq!(p.device().name(), "mock0");
    let _ep = Ep::listen(&peer(&f), ADDR, PORT).expect("listen");
    for rcq_size in [0, 4] {
        let (_p1, srq) = srq_on_mock1(&f, rcq_size);
        let cfg = ConnCfg::new().with_srq(Some(&srq));
        assert_foreign_srq(ConnReq::new(&p, ADDR, PORT, Some(&cfg)), "ConnReq::new");
    }
}

/// The listener's side: an endpoint of `mock0` takes no request with an SRQ of `mock1` (its
/// request stays pending and is accepted with the endpoint's own SRQ).
#[test]
fn srq_of_another_device__ep_next_conn_req_E_INVAL() {
    let f = two_devices();
    let h = half(&f, None, None);
    for rcq_size in [0, 4] {
        let (_p1, srq) = srq_on_mock1(&f, rcq_size);
        let cfg = ConnCfg::new().with_srq(Some(&srq));
        assert_foreign_srq(h.ep.next_conn_req(Some(&cfg)).and_then(|r| r.connect(None)), "Ep::next_conn_req");
    }
    let own = Srq::new(&h.speer, None).expect("srq");
    let server = h.ep.next_conn_req(Some(&ConnCfg::new().with_srq(Some(&own)))).expect("next_conn_req");
    let server = server.connect(None).expect("accept");
    nonblock(server.event_fd());
    assert_eq!(next_event(&h.client), ConnEvent::Established);
    assert_eq!(next_event(&server), ConnEvent::Established);
}

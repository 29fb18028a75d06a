//! Connection management as RDMA CM behaves when a peer is silent or dies: a disconnect whose
//! DREQ is never answered closes after the CM timeout, and an active side that goes away during
//! setup is reported to the passive side.

use std::os::fd::AsFd;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::*;

fn timeout_fabric(ms: u64) -> MockFabric {
    MockFabric::builder().cm_timeout(Duration::from_millis(ms)).build()
}

#[test]
fn cm_timeout__initiator_closed_when_the_peer_stays_silent() {
    let f = timeout_fabric(300);
    let p = pair(&f);
    let start = Instant::now();
    p.client.disconnect().unwrap();
    assert_eq!(next_event(&p.server), ConnEvent::Closed);
    // The server never answers. The client's DREQ is pending: no event yet.
    assert_eq!(p.client.next_event().unwrap_err().kind(), ErrorKind::NoEvent);
    // Its fd becomes readable when the DREQ times out, without any call into the mock.
    let fd = p.client.event_fd();
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    assert_eq!(poll(&mut fds, PollTimeout::from(10_000u16)).unwrap(), 1, "no event within 10 s");
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(250), "closed after {waited:?}, before the CM timeout");
    assert_eq!(p.client.next_event().unwrap(), ConnEvent::Closed);
    // Once: the server's late answer adds nothing.
    p.server.disconnect().unwrap();
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(p.client.next_event().unwrap_err().kind(), ErrorKind::NoEvent);
    assert_eq!(p.server.next_event().unwrap_err().kind(), ErrorKind::NoEvent);
}

/// The default CM timeout (1 s) ends a blocking `next_event` (no fd is involved).
#[test]
fn cm_timeout__default_ends_a_blocking_next_event() {
    let f = MockFabric::new();
    let (speer, cpeer) = (peer(&f), peer(&f));
    let ep = Ep::listen(&speer, ADDR, PORT).unwrap();
    let client = ConnReq::new(&cpeer, ADDR, PORT, None).unwrap().connect(None).unwrap();
    let server = ep.next_conn_req(None).unwrap().connect(None).unwrap();
    assert_eq!(client.next_event().unwrap(), ConnEvent::Established);
    assert_eq!(server.next_event().unwrap(), ConnEvent::Established);
    let start = Instant::now();
    client.disconnect().unwrap();
    assert_eq!(server.next_event().unwrap(), ConnEvent::Closed);
    assert_eq!(client.next_event().unwrap(), ConnEvent::Closed);
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(900), "closed after {waited:?}");
    assert!(waited < DEADLINE, "closed after {waited:?}");
    assert_eq!(rpma::mock::DEFAULT_CM_TIMEOUT, Duration::from_secs(1));
}

/// An answered disconnect closes at once; the timer finds nothing left to do.
#[test]
fn cm_timeout__answered_disconnect_closes_at_once() {
    let f = timeout_fabric(200);
    let p = pair(&f);
    p.client.disconnect().unwrap();
    assert_eq!(next_event(&p.server), ConnEvent::Closed);
    p.server.disconnect().unwrap();
    assert_eq!(p.client.next_event().unwrap(), ConnEvent::Closed);
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(p.client.next_event().unwrap_err().kind(), ErrorKind::NoEvent);
}

/// The connection may be deleted while its DREQ is pending; the timer then finds it gone.
#[test]
fn cm_timeout__connection_deleted_before_the_timer() {
    let f = timeout_fabric(100);
    let p = pair(&f);
    p.client.disconnect().unwrap();
    assert_eq!(next_event(&p.server), ConnEvent::Closed);
    p.client.delete().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    p.server.delete().unwrap();
    drop((p.ep, p.cpeer, p.speer));
    assert!(f.live().is_zero(), "{:?}", f.live());
}

#[test]
fn cm_timeout__zero_is_refused() {
    let e = MockFabric::builder().cm_timeout(Duration::ZERO).try_build().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("CM timeout"), "{e}");
}

#[track_caller]
fn assert_requester_gone<T: std::fmt::Debug>(r: rpma::Result<T>) {
    let e = r.expect_err("accepting the request of a dead active side");
    assert_eq!((e.kind(), e.errno()), (ErrorKind::Provider, Some(111)), "{e}");
    assert!(e.to_string().contains("the requesting side is gone"), "{e}");
}

/// The active side is dropped after its request reached the listener, before the server took
/// it: the request still arrives (its REQ did), and accepting it fails (the REJ of the dead id).
#[test]
fn setup__active_side_dropped_before_the_request_is_taken() {
    let f = MockFabric::new();
    let h = half(&f, None, Some(b"hello"));
    drop(h.client);
    let req = h.ep.next_conn_req(None).expect("the request arrived");
    assert_eq!(&req.private_data()[..5], b"hello");
    assert_requester_gone(req.connect(None));
    // Nothing is left behind on either side.
    drop((h.ep, h.cpeer, h.speer));
    assert!(f.live().is_zero(), "{:?}", f.live());
}

/// The active side is dropped while the server holds its request.
#[test]
fn setup__active_side_dropped_while_the_server_holds_the_request() {
    let f = MockFabric::new();
    let h = half(&f, None, None);
    let req = h.ep.next_conn_req(None).unwrap();
    drop(h.client);
    assert_requester_gone(req.connect(Some(b"welcome")));
    drop((h.ep, h.cpeer, h.speer));
    assert!(f.live().is_zero(), "{:?}", f.live());
}

/// The active side is dropped after the server accepted, before it took its own ESTABLISHED:
/// the server sees ESTABLISHED, then CLOSED.
#[test]
fn setup__active_side_dropped_after_the_accept() {
    let f = MockFabric::new();
    let h = half(&f, None, None);
    let server = h.ep.next_conn_req(None).unwrap().connect(None).unwrap();
    nonblock(server.event_fd());
    drop(h.client);
    assert_eq!(next_event(&server), ConnEvent::Established);
    assert_eq!(next_event(&server), ConnEvent::Closed);
}

/// An endpoint serves one client after another: a second connection request after the first
/// connection ended reaches it (not UNREACHABLE).
#[test]
fn ep__serves_a_second_client_after_the_first_disconnected() {
    let f = MockFabric::new();
    let speer = peer(&f);
    let ep = Ep::listen(&speer, ADDR, "7790").unwrap();
    for round in 0..3 {
        let cpeer = peer(&f);
        let client = ConnReq::new(&cpeer, ADDR, "7790", None).unwrap().connect(None).unwrap();
        let server = ep.next_conn_req(None).unwrap().connect(None).unwrap();
        assert_eq!(client.next_event().unwrap(), ConnEvent::Established, "round {round}");
        assert_eq!(server.next_event().unwrap(), ConnEvent::Established, "round {round}");
        client.disconnect().unwrap();
        assert_eq!(server.next_event().unwrap(), ConnEvent::Closed, "round {round}");
        server.disconnect().unwrap();
        assert_eq!(client.next_event().unwrap(), ConnEvent::Closed, "round {round}");
        client.delete().unwrap();
        server.delete().unwrap();
    }
}

//! The `mio` event source (feature `mio`): an endpoint, a connection and a completion queue of
//! the mock registered with one `mio::Poll`, each reporting readiness when its event comes.
#![cfg(all(feature = "mock", feature = "mio"))]

use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token};
use rpma::mock::{ConnCfg, ConnReq, Device, Ep, MockFabric, Peer};
use rpma::{ConnEvent, ContextType, ErrorKind, Usage, WcOpcode};

const EP: Token = Token(0);
const CONN: Token = Token(1);
const CQ: Token = Token(2);
const RCQ: Token = Token(3);
const LIMIT: Duration = Duration::from_secs(10);

/// Polls until `token` is reported readable (or fails after `LIMIT`).
fn wait_for(poll: &mut Poll, events: &mut Events, token: Token) {
    let until = Instant::now() + LIMIT;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "{token:?} never became readable");
        poll.poll(events, Some(left)).expect("poll");
        if events.iter().any(|e| e.token() == token && e.is_readable()) {
            return;
        }
    }
}

#[test]
fn ep_conn_and_cq_report_readiness_through_mio() {
    let fabric = MockFabric::new();
    let speer = Peer::new(&Device::lookup(&fabric, "127.0.0.1", ContextType::Local).unwrap()).unwrap();
    let cpeer = Peer::new(&Device::lookup(&fabric, "127.0.0.1", ContextType::Remote).unwrap()).unwrap();
    let mut poll = Poll::new().unwrap();
    let mut events = Events::with_capacity(8);

    let mut ep = Ep::listen(&speer, "127.0.0.1", "7450").unwrap();
    ep.set_nonblocking(true).unwrap();
    poll.registry().register(&mut ep, EP, Interest::READABLE).unwrap();
    poll.poll(&mut events, Some(Duration::from_millis(20))).unwrap();
    assert!(events.is_empty(), "nothing pending yet");

    // A connection request makes the endpoint readable.
    let cfg = ConnCfg::new().with_rcq_size(4);
    let client = ConnReq::new(&cpeer, "127.0.0.1", "7450", None).unwrap().connect(None).unwrap();
    wait_for(&mut poll, &mut events, EP);
    let req = ep.next_conn_req(Some(&cfg)).unwrap();
    assert_eq!(ep.next_conn_req(None).unwrap_err().kind(), ErrorKind::NoEvent, "taken until empty");
    let inbox = speer.alloc_mr(64, Usage::RECV).unwrap();
    req.recv(inbox.slice(..)).context(7).post().unwrap();
    let mut server = req.connect(None).unwrap();
    server.set_nonblocking(true).unwrap();

    // Establishment is a connection event: the connection's fd becomes readable.
    poll.registry().register(&mut server, CONN, Interest::READABLE).unwrap();
    wait_for(&mut poll, &mut events, CONN);
    assert_eq!(server.next_event().unwrap(), ConnEvent::Established);
    assert_eq!(client.next_event().unwrap(), ConnEvent::Established);

    // A message is a completion of the server's receive CQ: its channel becomes readable; the
    // main CQ's stays quiet.
    let mut cq = server.cq();
    let mut rcq = server.rcq().expect("a receive CQ");
    rcq.set_nonblocking(true).unwrap();
    poll.registry().register(&mut cq, CQ, Interest::READABLE).unwrap();
    poll.registry().register(&mut rcq, RCQ, Interest::READABLE).unwrap();
    client.send_empty().post().unwrap();
    wait_for(&mut poll, &mut events, RCQ);
    assert!(events.iter().all(|e| e.token() != CQ), "the main CQ has nothing");
    rcq.wait().unwrap();
    let wc = rcq.next_wc().unwrap().expect("the receive's completion");
    assert_eq!((wc.wr_id(), wc.opcode()), (7, WcOpcode::Recv));
    assert_eq!(rcq.wait().unwrap_err().kind(), ErrorKind::NoCompletion, "the event was taken");

    // Deregistered sources report nothing more.
    poll.registry().deregister(&mut rcq).unwrap();
    poll.registry().deregister(&mut cq).unwrap();
    poll.registry().deregister(&mut ep).unwrap();
    client.disconnect().unwrap();
    wait_for(&mut poll, &mut events, CONN);
    assert_eq!(server.next_event().unwrap(), ConnEvent::Closed);
    poll.registry().reregister(&mut server, CONN, Interest::READABLE).unwrap();
    poll.registry().deregister(&mut server).unwrap();
}

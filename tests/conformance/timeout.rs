//! Conformance cases of the waits with a deadline (`*_timeout`) and non-blocking fds
//! (docs/semantics.md#waits-with-a-deadline): a wait with nothing to take ends at its deadline with
//! the "nothing pending" kind, a pending event is taken at once, a zero timeout is `InvalidInput`,
//! and a timed wait leaves the fd's blocking mode as it found it.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use rpma::{ConnCfg, ConnEvent, ConnReq, Ep, ErrorKind, Usage, WcStatus};

use super::harness::{assert_kind, mr, pair, pair_with, peer, remote, Backend, Case};
use crate::cases;

pub fn cases<B: Backend>() -> Vec<Case<B>> {
    cases![
        timeout__next_event_expires_with_NoEvent,
        timeout__next_event_takes_a_pending_event_at_once,
        timeout__next_conn_req_expires_then_takes_a_request,
        timeout__cq_wait_expires_then_wakes_on_a_completion,
        timeout__conn_wait_on_a_shared_channel,
        timeout__zero_is_InvalidInput,
        timeout__set_nonblocking_and_restored_mode,
        timeout__wait_next_sleeps_until_a_completion_or_expires,
    ]
}

const SHORT: Duration = Duration::from_millis(50);
const LONG: Duration = Duration::from_secs(10);

fn nonblocking(fd: BorrowedFd<'_>) -> bool {
    let flags = fcntl(fd.as_raw_fd(), FcntlArg::F_GETFL).expect("F_GETFL");
    OFlag::from_bits_truncate(flags).contains(OFlag::O_NONBLOCK)
}

/// Asserts `r` failed with `kind` after about `SHORT` (not at once, not after seconds).
#[track_caller]
fn assert_timed_out<X: std::fmt::Debug>(started: Instant, r: rpma::Result<X>, kind: ErrorKind) {
    let took = started.elapsed();
    match r {
        Ok(v) => panic!("expected {kind:?} after {SHORT:?}, got Ok({v:?})"),
        Err(e) => {
            assert_eq!(e.kind(), kind, "{e}");
            assert!(e.to_string().contains("timed out"), "{e}");
        }
    }
    assert!(took >= SHORT, "returned after {took:?}, before the deadline");
    assert!(took < Duration::from_secs(5), "returned after {took:?}, long past the deadline");
}

fn timeout__next_event_expires_with_NoEvent<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    let started = Instant::now();
    assert_timed_out(started, p.client.next_event_timeout(SHORT), ErrorKind::NoEvent);
    assert!(!nonblocking(p.client.event_fd()), "the fd is blocking again");
}

fn timeout__next_event_takes_a_pending_event_at_once<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    p.client.disconnect().expect("disconnect");
    let started = Instant::now();
    assert_eq!(p.server.next_event_timeout(LONG).expect("an event"), ConnEvent::Closed);
    assert!(started.elapsed() < Duration::from_secs(5));
    p.server.disconnect().expect("disconnect after CLOSED");
    assert_eq!(p.client.next_event_timeout(LONG).expect("an event"), ConnEvent::Closed);
}

fn timeout__next_conn_req_expires_then_takes_a_request<B: Backend>(b: &B) {
    let t = b.transport();
    let (speer, cpeer) = (peer(b, &t), peer(b, &t));
    let port = b.port();
    let ep = Ep::listen(&speer, &b.addr(), &port).expect("listen");
    let started = Instant::now();
    assert_timed_out(started, ep.next_conn_req_timeout(None, SHORT).map(|_| ()), ErrorKind::NoEvent);
    let client = ConnReq::new(&cpeer, &b.addr(), &port, None).expect("conn_req_new").connect(None).expect("connect");
    let server = ep.next_conn_req_timeout(None, LONG).expect("the request").connect(None).expect("accept");
    assert!(!nonblocking(ep.fd()), "the endpoint's fd is blocking again after a wait that took a request");
    assert_eq!(client.next_event_timeout(LONG).expect("client event"), ConnEvent::Established);
    assert_eq!(server.next_event_timeout(LONG).expect("server event"), ConnEvent::Established);
}

fn timeout__cq_wait_expires_then_wakes_on_a_completion<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    let dst = mr(&p.speer, 64, Usage::WRITE_DST);
    let src = mr(&p.cpeer, 64, Usage::WRITE_SRC);
    let started = Instant::now();
    assert_timed_out(started, p.client.cq().wait_timeout(SHORT), ErrorKind::NoCompletion);
    p.client.write(remote(&dst).at(0), src.slice(0..8)).context(4).post().expect("write");
    p.client.cq().wait_timeout(LONG).expect("a completion event");
    let deadline = Instant::now() + LONG;
    let wc = loop {
        if let Some(wc) = p.client.cq().next_wc().expect("poll") {
            break wc;
        }
        assert!(Instant::now() < deadline, "no completion after its event");
    };
    assert_eq!((wc.wr_id(), wc.status()), (4, WcStatus::Success));
}

fn timeout__conn_wait_on_a_shared_channel<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    assert_kind(p.client.wait_timeout(SHORT).map(|_| ()), ErrorKind::NotSharedChannel);
    let cfg = ConnCfg::new().with_shared_channel(true);
    let q = pair_with(b, &t, Some(&cfg), None, None, None);
    let started = Instant::now();
    assert_timed_out(started, q.client.wait_timeout(SHORT).map(|_| ()), ErrorKind::NoCompletion);
    // A CQ on a shared channel is waited through its connection.
    assert_kind(q.client.cq().wait_timeout(SHORT), ErrorKind::SharedChannel);
    let dst = mr(&q.speer, 64, Usage::WRITE_DST);
    let src = mr(&q.cpeer, 64, Usage::WRITE_SRC);
    q.client.write(remote(&dst).at(0), src.slice(0..8)).post().expect("write");
    let (_cq, is_rcq) = q.client.wait_timeout(LONG).expect("a completion event");
    assert!(!is_rcq);
    let fd = q.client.compl_fd().expect("the shared channel's fd");
    assert!(!nonblocking(fd), "the shared channel's fd is blocking again after a wait that took an event");
    // On a non-blocking fd a timed wait waits all the same, and leaves the fd non-blocking.
    q.client.set_nonblocking(true).expect("set_nonblocking");
    assert_timed_out(Instant::now(), q.client.wait_timeout(SHORT).map(|_| ()), ErrorKind::NoCompletion);
    q.client.write(remote(&dst).at(8), src.slice(0..8)).post().expect("write");
    let (_cq, is_rcq) = q.client.wait_timeout(LONG).expect("a completion event on the non-blocking fd");
    assert!(!is_rcq);
    assert!(nonblocking(q.client.compl_fd().expect("fd")), "still non-blocking");
}

fn timeout__zero_is_InvalidInput<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    assert_kind(p.client.next_event_timeout(Duration::ZERO), ErrorKind::InvalidInput);
    assert_kind(p.client.cq().wait_timeout(Duration::ZERO), ErrorKind::InvalidInput);
    assert_kind(p.ep.next_conn_req_timeout(None, Duration::ZERO).map(|_| ()), ErrorKind::InvalidInput);
    let cfg = ConnCfg::new().with_shared_channel(true);
    let q = pair_with(b, &t, Some(&cfg), None, None, None);
    assert_kind(q.client.wait_timeout(Duration::ZERO).map(|_| ()), ErrorKind::InvalidInput);
}

fn timeout__set_nonblocking_and_restored_mode<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    p.client.set_nonblocking(true).expect("set_nonblocking");
    assert!(nonblocking(p.client.event_fd()));
    let started = Instant::now();
    assert_kind(p.client.next_event(), ErrorKind::NoEvent);
    assert!(started.elapsed() < Duration::from_secs(1), "a non-blocking fd does not wait");
    // A timed wait on a non-blocking fd leaves it non-blocking.
    assert_timed_out(Instant::now(), p.client.next_event_timeout(SHORT), ErrorKind::NoEvent);
    assert!(nonblocking(p.client.event_fd()));
    p.client.set_nonblocking(false).expect("set_nonblocking");
    assert!(!nonblocking(p.client.event_fd()));
    p.client.cq().set_nonblocking(true).expect("cq set_nonblocking");
    assert!(nonblocking(p.client.cq().fd()));
    assert_kind(p.client.cq().wait(), ErrorKind::NoCompletion);
    p.ep.set_nonblocking(true).expect("ep set_nonblocking");
    assert_kind(p.ep.next_conn_req(None).map(|_| ()), ErrorKind::NoEvent);
}

/// `Cq::wait_next`: the next completion, sleeping for it; its deadline gives `NoCompletion`; a zero
/// timeout is `InvalidInput`; the errors a post's validation gives name their numbers and the fix.
fn timeout__wait_next_sleeps_until_a_completion_or_expires<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    let dst = mr(&p.speer, 64, Usage::WRITE_DST | Usage::FLUSH_TYPE_PERSISTENT);
    let src = mr(&p.cpeer, 64, Usage::WRITE_SRC);
    let started = Instant::now();
    assert_timed_out(started, p.client.cq().wait_next(Some(SHORT)), ErrorKind::NoCompletion);
    assert_eq!(p.client.cq().wait_next(Some(Duration::ZERO)).unwrap_err().kind(), ErrorKind::InvalidInput);
    p.client.write(remote(&dst).at(0), src.slice(0..8)).context(5).post().expect("write");
    let wc = p.client.cq().wait_next(Some(LONG)).expect("the write's completion");
    assert_eq!((wc.wr_id(), wc.status()), (5, WcStatus::Success));
    p.client.write(remote(&dst).at(0), src.slice(0..8)).context(6).post().expect("write");
    assert_eq!(p.client.cq().wait_next(None).expect("no limit").wr_id(), 6);
    // What a mistake says: the numbers, and the fix.
    let e = p.client.write(remote(&dst).at(60), src.slice(0..8)).post().expect_err("past the end");
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("offset 60 + length 8 > the region's 64 bytes"), "{e}");
    let e = p.client.flush(remote(&dst).slice(0..8), rpma::FlushType::Persistent).post().expect_err("no dwtp");
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert!(e.to_string().contains("Conn::apply_remote_peer_cfg"), "{e}");
}

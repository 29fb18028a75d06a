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

mod cm;
mod cross_process;
mod deferred;
mod devices;
mod fault_sweep;
mod fds;
mod link_loss;
mod live;
mod local_only;
mod mistakes;
mod native_ops;
mod power_cut;
mod provider_errors;
mod recv_order;
mod threads;
mod upstream_faults;

// Helpers shared by the groups.

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
    half_on(f, peer(f), ccfg, cpdata)
}

/// [`half`] with the server on `speer` (the peer of an SRQ its requests use).
fn half_on(f: &MockFabric, speer: Peer, ccfg: Option<&ConnCfg>, cpdata: Option<&[u8]>) -> Half {
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
    pair_on(f, peer(f), ccfg, scfg)
}

/// [`pair_with`] with the server on `speer` (the peer of an SRQ `scfg` names).
fn pair_on(f: &MockFabric, speer: Peer, ccfg: Option<&ConnCfg>, scfg: Option<&ConnCfg>) -> Pair {
    let h = half_on(f, speer, ccfg, None);
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

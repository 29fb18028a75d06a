//! Conformance cases: endpoints, connection requests, connections, completion queues and shared
//! receive queues (docs/semantics.md: connection establishment to queues of a connection).
//!
//! Every blocking call that waits for something the peer does (`next_event`, `next_conn_req`,
//! `Cq::wait`, `Conn::wait`) goes through [`within`]: the fd is made non-blocking and polled with
//! a 10 s deadline, so a missing event fails the case instead of hanging it.
//!
//! Type-enforced (no case): every `*__*_NULL` rule of ep-listen/get_fd/next_conn_req/shutdown,
//! conn_req-new/connect/delete/recv/private_data, conn-get_*/next_event/wait/disconnect/delete/
//! apply_remote_peer_cfg, cq-get_fd/wait/get_wc and srq-new/delete/recv/get_rcq (references,
//! return values and owned handles cannot be NULL; `num_entries_got` is the return value);
//! `connect__pdata_NULL_pdata_ptr_NULL` (a slice has no NULL pointer); `*__malloc_ERRNO`
//! (allocation failure aborts). Provider-failure rules (`*_ERRNO`) need fault injection and live
//! in the mock-only tests. `ep_next_conn_req__event_REJECTED` (an event other than a connection
//! request on the endpoint's channel) and `conn_next_event` of an unexpected CM event cannot be
//! produced through the public API. `srq_recv__dst_NULL_offset_not_NULL`, `__len_not_NULL`,
//! `__offset_len_not_NULL`: a receive takes a slice of a region (`srq.recv(dst.slice(a..b))`) or
//! nothing (`srq.recv_empty()`), so an offset or length without a region cannot be written.

use std::collections::BTreeSet;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use rpma::{
    Conn, ConnCfg, ConnEvent, ConnReq, Ep, ErrorKind, FlushType, MrLocal, Peer, PeerCfg, Srq, SrqCfg, Transport, Usage,
    Wc, WcOpcode, WcStatus,
};

use super::harness::{assert_kind, assert_no_wc, mr, next_wc, pair, pair_with, peer, remote, Backend, Case};
use crate::cases;

pub fn cases<B: Backend>() -> Vec<Case<B>> {
    cases![
        // endpoint
        ep__lifecycle,
        conn__offer_carries_region_and_peer_cfg,
        conn__post_after_close_is_taken_and_completes_flushed,
        ep_listen__success,
        ep_listen__addr_port_in_use_E_PROVIDER,
        ep_listen__addr_unknown_E_PROVIDER,
        ep_get_fd__success,
        ep_get_fd__readable_on_conn_req,
        ep_next_conn_req__success,
        ep_next_conn_req__get_cm_event_ENODATA,
        ep_next_conn_req__shared_true_srq_rcq_not_NULL,
        ep_next_conn_req__queue_size_above_device_limit,
        ep_next_conn_req__srq_of_another_peer_E_INVAL,
        ep_shutdown__success,
        ep_shutdown__connections_survive,
        // connection requests
        conn_req_new__success,
        conn_req_new__addr_unknown_E_PROVIDER,
        conn_req_new__shared_true_srq_rcq_not_NULL,
        conn_req_new__shared_true_srq_without_rcq,
        conn_req_new__queue_size_above_device_limit,
        conn_req_new__queue_size_at_device_limit,
        conn_req_new__timeout_above_i32_max_ms,
        conn_req_new__retry_count_above_7_E_INVAL,
        conn_req_new__ack_timeout_outside_1_31_E_INVAL,
        ep_next_conn_req__retry_count_or_ack_timeout_out_of_range_E_INVAL,
        conn__retry_count_0_ack_timeout_14_connects_and_writes,
        conn_req_new__srq_of_another_peer_E_INVAL,
        conn_req_connect__pdata_NULL_pdata_len_0,
        conn_req_connect_via_accept__pdata_len_0_rejects,
        conn_req_connect__pdata_too_long,
        conn_req_connect_via_accept__pdata_too_long_rejects,
        conn_req_connect__pdata_longer_than_255,
        conn_req_connect__pdata_max_len,
        conn_req_connect_via_connect__success_outgoing,
        conn_req_connect_via_accept__success_incoming,
        conn_req_connect__no_listener,
        conn_req_get_private_data__success,
        conn_req_get_private_data__outgoing_empty,
        transfer_private_data__success,
        transfer_private_data__no_data,
        conn_req_recv__success,
        conn_req_recv__success_outgoing,
        conn_req_recv__range_outside_dst,
        conn_req_recv__range_inverted,
        conn_req_delete__incoming_rejects,
        conn_req_drop__incoming_rejects,
        conn_req_delete__outgoing,
        // connections
        conn_next_event__success_ESTABLISHED,
        conn_next_event__get_cm_event_ENODATA,
        conn_get_event_fd__success,
        conn_get_event_fd__readable_on_event,
        conn_disconnect__success,
        conn_disconnect__success_passive_side,
        conn_disconnect__initiator_closed_after_peer_answers,
        conn_delete__success_after_closed,
        conn_delete__peer_gets_CLOSED,
        conn_drop__peer_gets_CLOSED,
        conn_get_qp_num__success,
        conn_get_qp_num__success_after_disconnect,
        conn_get_cq__success,
        conn_get_rcq__success,
        conn_get_rcq__recv_completions_go_to_rcq,
        conn_get_rcq__own_channel,
        conn_get_compl_fd__E_NOT_SHARED_CHNL,
        conn_get_compl_fd__success,
        conn_wait__channel_not_shared,
        conn_wait__success,
        conn_wait__success_shared_without_rcq,
        conn_wait__no_completion,
        conn_apply_remote_peer_cfg__success,
        // completion queues
        cq_get_fd__success,
        cq_wait__success,
        cq_wait__E_SHARED_CHANNEL,
        cq_wait__no_completion,
        cq_get_wc__num_entries_non_positive,
        cq_get_wc__poll_cq_no_data,
        cq_get_wc__poll_cq_more_data,
        // shared receive queues
        srq_new__success_defaults,
        srq_new__success_cfg,
        srq_get_rcq__success,
        srq_recv__success,
        srq_recv__range_inverted,
        srq_new__queue_size_above_device_limit,
        srq_recv__two_connections_share_srq,
        srq_recv__srq_without_rcq_completions_on_conn_cq,
        srq_get_rcq__conn_rcq_none_with_srq_rcq,
        conn_recv__srq_E_PROVIDER,
        srq_delete__success,
        srq_recv__conn_deleted_with_the_completion_unpolled,
        srq_delete__posted_receives_free_their_regions,
    ]
}

// ----------------------------------------------------------------------------------------------
// helpers

/// How long any case waits for something the peer (or the fabric) does.
const DEADLINE: Duration = Duration::from_secs(10);

/// An address no device owns (TEST-NET-1): binding a listener to it fails.
const UNOWNED_ADDR: &str = "192.0.2.77";

/// A name that never resolves (the `.invalid` TLD is reserved, RFC 2606): the active side's
/// address translation fails. (An unowned IP literal may still be routable through a gateway on
/// a real RoCE network, so the active-side case uses a name.)
const UNRESOLVABLE_ADDR: &str = "rpma-conformance.invalid";

fn set_nonblocking(fd: BorrowedFd<'_>) {
    let raw = fd.as_raw_fd();
    let fl = OFlag::from_bits_retain(fcntl(raw, FcntlArg::F_GETFL).expect("F_GETFL"));
    fcntl(raw, FcntlArg::F_SETFL(fl | OFlag::O_NONBLOCK)).expect("F_SETFL");
}

/// Whether `fd` is (or becomes within `timeout`) readable.
fn readable(fd: BorrowedFd<'_>, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::try_from(left).expect("timeout")) {
            Ok(0) => return false,
            Ok(_) => return fds[0].revents().is_some_and(|r| r.contains(PollFlags::POLLIN)),
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => panic!("poll: {e}"),
        }
    }
}

/// Calls `f` until it stops failing with `again`, waiting (at most 10 s in all) for `fd`, which is
/// made non-blocking, to become readable in between.
#[track_caller]
fn within<R>(fd: BorrowedFd<'_>, again: ErrorKind, mut f: impl FnMut() -> rpma::Result<R>) -> R {
    set_nonblocking(fd);
    let deadline = Instant::now() + DEADLINE;
    loop {
        match f() {
            Ok(r) => return r,
            Err(e) if e.kind() == again => {
                let left = deadline.saturating_duration_since(Instant::now());
                assert!(!left.is_zero(), "nothing within {DEADLINE:?} ({again:?})");
                readable(fd, left.min(Duration::from_millis(200)));
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
}

/// The next connection event (bounded).
#[track_caller]
fn event<T: Transport>(c: &Conn<T>) -> ConnEvent {
    within(c.event_fd(), ErrorKind::NoEvent, || c.next_event())
}

/// The next incoming connection request (bounded).
#[track_caller]
fn incoming<T: Transport>(ep: &Ep<T>, cfg: Option<&ConnCfg<T>>) -> ConnReq<T> {
    within(ep.fd(), ErrorKind::NoEvent, || ep.next_conn_req(cfg))
}

/// Asserts no connection event is pending (the event fd is made non-blocking).
#[track_caller]
fn assert_no_event<T: Transport>(c: &Conn<T>) {
    set_nonblocking(c.event_fd());
    assert_kind(c.next_event(), ErrorKind::NoEvent);
}

/// A server peer listening on a fresh port, and a client peer.
struct Listening<T: Transport> {
    speer: Peer<T>,
    cpeer: Peer<T>,
    ep: Ep<T>,
    port: String,
}

fn listening<B: Backend>(b: &B, t: &B::T) -> Listening<B::T> {
    let speer = peer(b, t);
    let cpeer = peer(b, t);
    let port = b.port();
    let ep = Ep::listen(&speer, &b.addr(), &port).expect("listen");
    Listening { speer, cpeer, ep, port }
}

/// A client connection (connect sent, no event taken) and the server's incoming request.
fn dial<B: Backend>(
    b: &B,
    l: &Listening<B::T>,
    ccfg: Option<&ConnCfg<B::T>>,
    scfg: Option<&ConnCfg<B::T>>,
    pdata: Option<&[u8]>,
) -> (Conn<B::T>, ConnReq<B::T>) {
    let req = ConnReq::new(&l.cpeer, &b.addr(), &l.port, ccfg).expect("conn_req_new");
    let client = req.connect(pdata).expect("connect");
    let sreq = incoming(&l.ep, scfg);
    (client, sreq)
}

/// A connected (client, server) pair on `l`, ESTABLISHED taken on both sides.
fn establish<B: Backend>(
    b: &B,
    l: &Listening<B::T>,
    ccfg: Option<&ConnCfg<B::T>>,
    scfg: Option<&ConnCfg<B::T>>,
) -> (Conn<B::T>, Conn<B::T>) {
    let (client, sreq) = dial(b, l, ccfg, scfg, None);
    let server = sreq.connect(None).expect("accept");
    assert_eq!(event(&client), ConnEvent::Established);
    assert_eq!(event(&server), ConnEvent::Established);
    (client, server)
}

/// The usage of a receive buffer on this backend (iWARP also needs remote write access).
fn recv_usage<B: Backend>(b: &B) -> Usage {
    if b.caps().iwarp {
        Usage::RECV | Usage::WRITE_DST
    } else {
        Usage::RECV
    }
}

/// Sends `data` (copied into `src` at `off`), signaled, with `wr_id`.
fn send_bytes<T: Transport>(c: &Conn<T>, src: &MrLocal<T>, off: usize, data: &[u8], wr_id: u64) {
    src.write(off, data).expect("local write");
    c.send(src.slice(off..off + data.len())).context(wr_id).post().expect("send");
}

/// An SRQ of `cfg` without a receive CQ of its own, one 64-byte receive (context 8) posted to
/// it, a connection whose server side uses it, and `data` sent by the client: its send
/// completion polled (the server's side took the receive and completed it by then), the
/// receive's completion left in the server's CQ. Returns (SRQ, receive region, client, server).
#[allow(clippy::type_complexity)]
fn srq_without_rcq_one_message<B: Backend>(
    b: &B,
    l: &Listening<B::T>,
    cfg: SrqCfg,
    data: &[u8],
) -> (Srq<B::T>, MrLocal<B::T>, Conn<B::T>, Conn<B::T>) {
    let srq = Srq::new(&l.speer, Some(&cfg.with_rcq_size(0))).unwrap();
    let scfg = ConnCfg::new().with_srq(Some(&srq));
    let dst = mr(&l.speer, 64, recv_usage(b));
    srq.recv(dst.slice(0..64)).context(8).post().unwrap();
    let (client, server) = establish(b, l, None, Some(&scfg));
    let src = mr(&l.cpeer, 64, Usage::SEND);
    send_bytes(&client, &src, 0, data, 1);
    assert_wc(&next_wc(client.cq()), 1, WcOpcode::Send);
    (srq, dst, client, server)
}

/// Asserts `wc` is a successful completion of `opcode` with `wr_id`.
#[track_caller]
fn assert_wc(wc: &Wc, wr_id: u64, opcode: WcOpcode) {
    assert_eq!((wc.wr_id(), wc.status(), wc.opcode()), (wr_id, WcStatus::Success, opcode), "{wc:?}");
}

/// A pattern of `len` non-zero bytes starting at `seed`.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_add(seed) | 1).collect()
}

/// Asserts private data `got` carries `sent` (transports may zero-pad: `>=`, never `==`).
#[track_caller]
fn assert_pdata(got: &[u8], sent: &[u8]) {
    assert!(got.len() >= sent.len(), "private data too short: {} < {}", got.len(), sent.len());
    assert_eq!(&got[..sent.len()], sent);
}

/// Asserts no private data arrived: empty (or, on transports that always deliver the full field,
/// zero padding only).
#[track_caller]
fn assert_no_pdata(got: &[u8]) {
    assert!(got.iter().all(|&b| b == 0), "unexpected private data {got:?}");
}

// ----------------------------------------------------------------------------------------------
// endpoint (6.7)

fn ep__lifecycle<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let port = b.port();
    let ep = Ep::listen(&p, &b.addr(), &port).unwrap();
    ep.shutdown().unwrap();
    // The port is free again after shutdown.
    let ep = Ep::listen(&p, &b.addr(), &port).unwrap();
    ep.shutdown().unwrap();
}

fn ep_listen__success<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    // A client can reach it.
    let (client, sreq) = dial(b, &l, None, None, None);
    assert!(sreq.is_incoming());
    let server = sreq.connect(None).unwrap();
    assert_eq!(event(&client), ConnEvent::Established);
    assert_eq!(event(&server), ConnEvent::Established);
}

fn ep_listen__addr_port_in_use_E_PROVIDER<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let port = b.port();
    let _ep = Ep::listen(&p, &b.addr(), &port).unwrap();
    assert_kind(Ep::listen(&p, &b.addr(), &port), ErrorKind::Provider);
    let p2 = peer(b, &t);
    assert_kind(Ep::listen(&p2, &b.addr(), &port), ErrorKind::Provider);
}

fn ep_listen__addr_unknown_E_PROVIDER<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    assert_kind(Ep::listen(&p, UNOWNED_ADDR, &b.port()), ErrorKind::Provider);
}

fn ep_get_fd__success<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let fd = l.ep.fd();
    assert!(fd.as_raw_fd() >= 0);
    fcntl(fd.as_raw_fd(), FcntlArg::F_GETFL).expect("a valid, open fd");
    // Stable across calls.
    assert_eq!(l.ep.fd().as_raw_fd(), fd.as_raw_fd());
}

fn ep_get_fd__readable_on_conn_req<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    assert!(!readable(l.ep.fd(), Duration::ZERO), "readable with no request pending");
    let req = ConnReq::new(&l.cpeer, &b.addr(), &l.port, None).unwrap();
    let client = req.connect(None).unwrap();
    assert!(readable(l.ep.fd(), DEADLINE), "not readable with a request pending");
    set_nonblocking(l.ep.fd());
    let sreq = l.ep.next_conn_req(None).expect("the request the fd announced");
    let server = sreq.connect(None).unwrap();
    assert_eq!(event(&client), ConnEvent::Established);
    assert_eq!(event(&server), ConnEvent::Established);
}

fn ep_next_conn_req__success<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let cfg = ConnCfg::new().with_rcq_size(4);
    let (client, sreq) = dial(b, &l, None, Some(&cfg), None);
    assert!(sreq.is_incoming());
    let server = sreq.connect(None).unwrap();
    assert!(server.rcq().is_some(), "the incoming request was built per cfg");
    assert_eq!(event(&client), ConnEvent::Established);
    assert_eq!(event(&server), ConnEvent::Established);
}

fn ep_next_conn_req__get_cm_event_ENODATA<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    set_nonblocking(l.ep.fd());
    assert_kind(l.ep.next_conn_req(None), ErrorKind::NoEvent);
    assert_kind(l.ep.next_conn_req(None), ErrorKind::NoEvent);
}

fn ep_next_conn_req__shared_true_srq_rcq_not_NULL<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let srq = Srq::new(&l.speer, None).unwrap();
    assert!(srq.rcq().is_some());
    let cfg = ConnCfg::new().with_shared_channel(true).with_srq(Some(&srq));
    // A request is pending (so a backend checking after taking the event cannot block).
    let req = ConnReq::new(&l.cpeer, &b.addr(), &l.port, None).unwrap();
    let _client = req.connect(None).unwrap();
    assert!(readable(l.ep.fd(), DEADLINE));
    set_nonblocking(l.ep.fd());
    assert_kind(l.ep.next_conn_req(Some(&cfg)), ErrorKind::InvalidInput);
}

/// An SRQ is a queue of its peer's protection domain: an endpoint's request built with the SRQ of
/// another peer (here on the same device) is `InvalidInput`, naming the SRQ and the request, and
/// the request stays pending: accepted with the endpoint's own SRQ, it connects.
fn ep_next_conn_req__srq_of_another_peer_E_INVAL<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let req = ConnReq::new(&l.cpeer, &b.addr(), &l.port, None).unwrap();
    let client = req.connect(None).unwrap();
    assert!(readable(l.ep.fd(), DEADLINE));
    set_nonblocking(l.ep.fd());
    for rcq_size in [0, 4] {
        let foreign = Srq::new(&l.cpeer, Some(&SrqCfg::new().with_rcq_size(rcq_size))).unwrap();
        let e = l.ep.next_conn_req(Some(&ConnCfg::new().with_srq(Some(&foreign)))).expect_err("a foreign SRQ");
        assert_eq!((e.kind(), e.op()), (ErrorKind::InvalidInput, "Ep::next_conn_req"), "{e}");
        assert!(e.to_string().contains("the SRQ was created on another peer"), "{e}");
    }
    let own = Srq::new(&l.speer, None).unwrap();
    let server = incoming(&l.ep, Some(&ConnCfg::new().with_srq(Some(&own)))).connect(None).unwrap();
    assert_eq!(event(&client), ConnEvent::Established);
    assert_eq!(event(&server), ConnEvent::Established);
}

fn ep_shutdown__success<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    l.ep.shutdown().unwrap();
}

fn ep_shutdown__connections_survive<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    p.ep.shutdown().unwrap();
    assert_no_event(&p.client);
    assert_no_event(&p.server);
    let dst = mr(&p.speer, 64, recv_usage(b));
    let src = mr(&p.cpeer, 64, Usage::SEND);
    p.server.recv(dst.slice(0..64)).context(5).post().unwrap();
    send_bytes(&p.client, &src, 0, b"still here", 6);
    assert_wc(&next_wc(p.client.cq()), 6, WcOpcode::Send);
    let wc = next_wc(p.server.cq());
    assert_wc(&wc, 5, WcOpcode::Recv);
    assert_eq!(dst.to_vec(0, 10).unwrap(), b"still here");
}

// ----------------------------------------------------------------------------------------------
// connection requests (6.8, 8.2, 8.3)

fn conn_req_new__success<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let req = ConnReq::new(&p, &b.addr(), &b.port(), None).unwrap();
    assert!(!req.is_incoming());
    req.delete().unwrap();
    let cfg = ConnCfg::new().with_rcq_size(3).with_shared_channel(true);
    let req = ConnReq::new(&p, &b.addr(), &b.port(), Some(&cfg)).unwrap();
    assert!(!req.is_incoming());
    drop(req);
}

fn conn_req_new__addr_unknown_E_PROVIDER<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    assert_kind(ConnReq::new(&p, UNRESOLVABLE_ADDR, &b.port(), None), ErrorKind::Provider);
}

fn conn_req_new__shared_true_srq_rcq_not_NULL<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let srq = Srq::new(&p, None).unwrap();
    let cfg = ConnCfg::new().with_shared_channel(true).with_srq(Some(&srq));
    assert_kind(ConnReq::new(&p, &b.addr(), &b.port(), Some(&cfg)), ErrorKind::InvalidInput);
}

/// An outgoing request built with the SRQ of another peer (here on the same device: another
/// protection domain) is `InvalidInput` before anything is made, with or without the SRQ's own
/// receive CQ; with an SRQ of its own peer it is made.
fn conn_req_new__srq_of_another_peer_E_INVAL<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let other = peer(b, &t);
    for rcq_size in [0, 4] {
        let foreign = Srq::new(&other, Some(&SrqCfg::new().with_rcq_size(rcq_size))).unwrap();
        let cfg = ConnCfg::new().with_srq(Some(&foreign));
        let e = ConnReq::new(&p, &b.addr(), &b.port(), Some(&cfg)).expect_err("a foreign SRQ");
        assert_eq!((e.kind(), e.op()), (ErrorKind::InvalidInput, "ConnReq::new"), "{e}");
        assert!(e.to_string().contains("the SRQ was created on another peer"), "{e}");
        let own = Srq::new(&p, Some(&SrqCfg::new().with_rcq_size(rcq_size))).unwrap();
        let cfg = ConnCfg::new().with_srq(Some(&own));
        ConnReq::new(&p, &b.addr(), &b.port(), Some(&cfg)).unwrap().delete().unwrap();
    }
}

/// A shared channel with an SRQ that has no receive CQ of its own is allowed.
fn conn_req_new__shared_true_srq_without_rcq<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let scfg = SrqCfg::new().with_rcq_size(0);
    let srq = Srq::new(&p, Some(&scfg)).unwrap();
    let cfg = ConnCfg::new().with_shared_channel(true).with_srq(Some(&srq));
    ConnReq::new(&p, &b.addr(), &b.port(), Some(&cfg)).unwrap().delete().unwrap();
}

fn conn_req_connect__pdata_NULL_pdata_len_0<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let req = ConnReq::new(&p, &b.addr(), &b.port(), None).unwrap();
    assert_kind(req.connect(Some(&[])), ErrorKind::InvalidInput);
}

/// An invalid accept deletes (rejects) the incoming request (docs/decisions.md #16).
fn conn_req_connect_via_accept__pdata_len_0_rejects<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let (client, sreq) = dial(b, &l, None, None, None);
    assert_kind(sreq.connect(Some(&[])), ErrorKind::InvalidInput);
    assert_eq!(event(&client), ConnEvent::Rejected);
}

fn conn_req_connect__pdata_too_long<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let limit = b.caps().max_private_data_connect;
    let req = ConnReq::new(&p, &b.addr(), &b.port(), None).unwrap();
    assert_kind(req.connect(Some(&pattern(limit + 1, 1))), ErrorKind::InvalidInput);
}

fn conn_req_connect_via_accept__pdata_too_long_rejects<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let limit = b.caps().max_private_data_accept;
    let (client, sreq) = dial(b, &l, None, None, None);
    assert_kind(sreq.connect(Some(&pattern(limit + 1, 1))), ErrorKind::InvalidInput);
    assert_eq!(event(&client), ConnEvent::Rejected);
}

/// Private data has a `u8` length in librpma: 256 bytes is invalid on both sides whatever the
/// transport allows.
fn conn_req_connect__pdata_longer_than_255<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let req = ConnReq::new(&l.cpeer, &b.addr(), &l.port, None).unwrap();
    assert_kind(req.connect(Some(&pattern(256, 3))), ErrorKind::InvalidInput);
    let (client, sreq) = dial(b, &l, None, None, None);
    assert_kind(sreq.connect(Some(&pattern(256, 4))), ErrorKind::InvalidInput);
    assert_eq!(event(&client), ConnEvent::Rejected);
}

/// Private data of exactly the transport's limits goes through both ways.
fn conn_req_connect__pdata_max_len<B: Backend>(b: &B) {
    let t = b.transport();
    let caps = b.caps();
    let cdata = pattern(caps.max_private_data_connect.min(255), 7);
    let sdata = pattern(caps.max_private_data_accept.min(255), 9);
    let p = pair_with(b, &t, None, None, Some(&cdata), Some(&sdata));
    assert_pdata(p.server.private_data(), &cdata);
    assert_pdata(p.client.private_data(), &sdata);
}

fn conn_req_connect_via_connect__success_outgoing<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let req = ConnReq::new(&l.cpeer, &b.addr(), &l.port, None).unwrap();
    let client = req.connect(Some(b"hello")).unwrap();
    let sreq = incoming(&l.ep, None);
    let server = sreq.connect(None).unwrap();
    assert_eq!(event(&client), ConnEvent::Established);
    assert_eq!(event(&server), ConnEvent::Established);
    assert_pdata(server.private_data(), b"hello");
}

fn conn_req_connect_via_accept__success_incoming<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let (client, sreq) = dial(b, &l, None, None, None);
    let server = sreq.connect(Some(b"welcome")).unwrap();
    // The active side first: with RDMA CM its librdmacm moves its QP to RTS and answers the
    // accept (RTU) while taking the event, and only then is the passive side ESTABLISHED.
    assert_eq!(event(&client), ConnEvent::Established);
    assert_eq!(event(&server), ConnEvent::Established);
    assert_pdata(client.private_data(), b"welcome");
}

/// Nobody listens on the port: the connection fails with an event, never ESTABLISHED. The mock
/// reports UNREACHABLE; on IB/RoCE the remote CM answers a request for an unknown service ID with
/// a REJ (reason 8), which rdma_cm reports as REJECTED.
fn conn_req_connect__no_listener<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let req = ConnReq::new(&p, &b.addr(), &b.port(), None).unwrap();
    let client = req.connect(None).unwrap();
    let ev = event(&client);
    assert!(matches!(ev, ConnEvent::Unreachable | ConnEvent::Rejected), "got {ev:?}");
    client.delete().unwrap();
}

fn conn_req_get_private_data__success<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let (client, sreq) = dial(b, &l, None, None, Some(b"request data"));
    assert_pdata(sreq.private_data(), b"request data");
    let server = sreq.connect(None).unwrap();
    // Moved into the connection on accept.
    assert_pdata(server.private_data(), b"request data");
    assert_eq!(event(&client), ConnEvent::Established);
    assert_eq!(event(&server), ConnEvent::Established);
    assert_pdata(server.private_data(), b"request data");
}

fn conn_req_get_private_data__outgoing_empty<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let req = ConnReq::new(&p, &b.addr(), &b.port(), None).unwrap();
    assert!(req.private_data().is_empty());
}

/// Client data: visible in the incoming request and the server connection. Server data: visible
/// on the client after ESTABLISHED was taken, empty before.
fn transfer_private_data__success<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let (client, sreq) = dial(b, &l, None, None, Some(b"client-hello"));
    assert_pdata(sreq.private_data(), b"client-hello");
    let server = sreq.connect(Some(b"server-hello")).unwrap();
    assert!(client.private_data().is_empty(), "accept data before ESTABLISHED was taken");
    assert_eq!(event(&client), ConnEvent::Established);
    assert_eq!(event(&server), ConnEvent::Established);
    assert_pdata(client.private_data(), b"server-hello");
    assert_pdata(server.private_data(), b"client-hello");
}

fn transfer_private_data__no_data<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let (client, sreq) = dial(b, &l, None, None, None);
    assert_no_pdata(sreq.private_data());
    let server = sreq.connect(None).unwrap();
    assert_eq!(event(&client), ConnEvent::Established);
    assert_eq!(event(&server), ConnEvent::Established);
    assert_no_pdata(client.private_data());
    assert_no_pdata(server.private_data());
}

/// A receive posted on the incoming request catches the client's first send.
fn conn_req_recv__success<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let dst = mr(&l.speer, 64, recv_usage(b));
    let src = mr(&l.cpeer, 64, Usage::SEND);
    let (client, sreq) = dial(b, &l, None, None, None);
    sreq.recv(dst.slice(8..40)).context(42).post().unwrap();
    let server = sreq.connect(None).unwrap();
    assert_eq!(event(&client), ConnEvent::Established);
    assert_eq!(event(&server), ConnEvent::Established);
    send_bytes(&client, &src, 0, b"first!", 1);
    assert_wc(&next_wc(client.cq()), 1, WcOpcode::Send);
    let wc = next_wc(server.cq());
    assert_wc(&wc, 42, WcOpcode::Recv);
    assert_eq!(wc.byte_len(), 6);
    assert_eq!(wc.qp_num(), server.qp_num());
    assert_eq!(dst.to_vec(8, 6).unwrap(), b"first!");
}

/// A receive posted on the outgoing request catches the server's first send.
fn conn_req_recv__success_outgoing<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let dst = mr(&l.cpeer, 64, recv_usage(b));
    let src = mr(&l.speer, 64, Usage::SEND);
    let req = ConnReq::new(&l.cpeer, &b.addr(), &l.port, None).unwrap();
    req.recv(dst.slice(0..64)).context(77).post().unwrap();
    let client = req.connect(None).unwrap();
    let server = incoming(&l.ep, None).connect(None).unwrap();
    assert_eq!(event(&client), ConnEvent::Established);
    assert_eq!(event(&server), ConnEvent::Established);
    send_bytes(&server, &src, 0, b"greetings", 2);
    assert_wc(&next_wc(server.cq()), 2, WcOpcode::Send);
    let wc = next_wc(client.cq());
    assert_wc(&wc, 77, WcOpcode::Recv);
    assert_eq!(wc.byte_len(), 9);
    assert_eq!(dst.to_vec(0, 9).unwrap(), b"greetings");
}

fn conn_req_recv__range_outside_dst<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let dst = mr(&p, 64, recv_usage(b));
    let req = ConnReq::new(&p, &b.addr(), &b.port(), None).unwrap();
    assert_kind(req.recv(dst.slice(60..68)).post(), ErrorKind::InvalidInput);
    assert_kind(req.recv(dst.slice(65..65)).post(), ErrorKind::InvalidInput);
}

fn conn_req_delete__incoming_rejects<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let (client, sreq) = dial(b, &l, None, None, None);
    sreq.delete().unwrap();
    assert_eq!(event(&client), ConnEvent::Rejected);
    client.delete().unwrap();
}

fn conn_req_drop__incoming_rejects<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let (client, sreq) = dial(b, &l, None, None, None);
    drop(sreq);
    assert_eq!(event(&client), ConnEvent::Rejected);
}

fn conn_req_delete__outgoing<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let req = ConnReq::new(&l.cpeer, &b.addr(), &l.port, None).unwrap();
    req.delete().unwrap();
    // Nothing reached the listener.
    set_nonblocking(l.ep.fd());
    assert_kind(l.ep.next_conn_req(None), ErrorKind::NoEvent);
}

// ----------------------------------------------------------------------------------------------
// connections (6.9, 8.4)

fn conn_next_event__success_ESTABLISHED<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let (client, sreq) = dial(b, &l, None, None, None);
    let server = sreq.connect(None).unwrap();
    assert_eq!(event(&client), ConnEvent::Established);
    assert_eq!(event(&server), ConnEvent::Established);
    // One ESTABLISHED each.
    assert_no_event(&client);
    assert_no_event(&server);
}

fn conn_next_event__get_cm_event_ENODATA<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    set_nonblocking(p.client.event_fd());
    assert_kind(p.client.next_event(), ErrorKind::NoEvent);
    set_nonblocking(p.server.event_fd());
    assert_kind(p.server.next_event(), ErrorKind::NoEvent);
}

fn conn_get_event_fd__success<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    let (c, s, e) = (p.client.event_fd().as_raw_fd(), p.server.event_fd().as_raw_fd(), p.ep.fd().as_raw_fd());
    for fd in [c, s] {
        fcntl(fd, FcntlArg::F_GETFL).expect("a valid, open fd");
    }
    // Every connection has its own channel, separate from the endpoint's.
    assert_ne!(c, s);
    assert_ne!(c, e);
    assert_ne!(s, e);
    assert_eq!(p.client.event_fd().as_raw_fd(), c);
}

fn conn_get_event_fd__readable_on_event<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    assert!(!readable(p.server.event_fd(), Duration::ZERO), "readable with no event pending");
    p.client.disconnect().unwrap();
    assert!(readable(p.server.event_fd(), DEADLINE), "not readable with an event pending");
    set_nonblocking(p.server.event_fd());
    assert_eq!(p.server.next_event().unwrap(), ConnEvent::Closed);
}

/// The active side disconnects: both sides get CLOSED; disconnecting after CLOSED completes. The
/// disconnect handshake in librpma's order (docs/semantics.md#connection-establishment): one side
/// disconnects, the other gets CLOSED and completes the disconnect, then the initiator gets CLOSED.
/// (On RDMA CM the initiator's DISCONNECTED waits for the peer's reply, DREP, which the peer sends
/// from `rdma_disconnect`; so the initiator's CLOSED is taken after the peer's disconnect.)
fn conn_disconnect__success<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    p.client.disconnect().unwrap();
    assert_eq!(event(&p.server), ConnEvent::Closed);
    p.server.disconnect().unwrap();
    assert_eq!(event(&p.client), ConnEvent::Closed);
    p.client.delete().unwrap();
    p.server.delete().unwrap();
}

/// `rdma_disconnect` sends a DREQ: the peer sees CLOSED at once, the initiator only once the
/// peer has disconnected too (its DREP). The mock models the same order.
fn conn_disconnect__initiator_closed_after_peer_answers<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    p.client.disconnect().unwrap();
    assert_eq!(event(&p.server), ConnEvent::Closed);
    assert_no_event(&p.client);
    p.server.disconnect().unwrap();
    assert_eq!(event(&p.client), ConnEvent::Closed);
    p.client.delete().unwrap();
    p.server.delete().unwrap();
}

fn conn_disconnect__success_passive_side<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    p.server.disconnect().unwrap();
    assert_eq!(event(&p.client), ConnEvent::Closed);
    p.client.disconnect().unwrap();
    assert_eq!(event(&p.server), ConnEvent::Closed);
    p.server.delete().unwrap();
    p.client.delete().unwrap();
}

fn conn_delete__success_after_closed<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    p.client.disconnect().unwrap();
    assert_eq!(event(&p.server), ConnEvent::Closed);
    p.server.disconnect().unwrap();
    p.server.delete().unwrap();
    assert_eq!(event(&p.client), ConnEvent::Closed);
    p.client.delete().unwrap();
}

/// Deleting a connected connection without disconnecting: the peer sees CLOSED.
fn conn_delete__peer_gets_CLOSED<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    p.client.delete().unwrap();
    assert_eq!(event(&p.server), ConnEvent::Closed);
    p.server.disconnect().unwrap();
    p.server.delete().unwrap();
}

fn conn_drop__peer_gets_CLOSED<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    drop(p.server);
    assert_eq!(event(&p.client), ConnEvent::Closed);
}

fn conn_get_qp_num__success<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let (c1, s1) = establish(b, &l, None, None);
    let (c2, s2) = establish(b, &l, None, None);
    for q in [c1.qp_num(), s1.qp_num(), c2.qp_num(), s2.qp_num()] {
        assert_ne!(q, 0);
        assert!(q <= 0x00FF_FFFF, "QP numbers are 24-bit: {q:#x}");
    }
    assert_ne!(c1.qp_num(), s1.qp_num());
    assert_ne!(c1.qp_num(), c2.qp_num());
    assert_ne!(s1.qp_num(), s2.qp_num());
    assert_eq!(c1.qp_num(), c1.qp_num());
}

fn conn_get_qp_num__success_after_disconnect<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    let (c, s) = (p.client.qp_num(), p.server.qp_num());
    // The handshake order of conn_disconnect__success.
    p.client.disconnect().unwrap();
    assert_eq!(event(&p.server), ConnEvent::Closed);
    p.server.disconnect().unwrap();
    assert_eq!(event(&p.client), ConnEvent::Closed);
    assert_eq!(p.client.qp_num(), c);
    assert_eq!(p.server.qp_num(), s);
}

/// The main CQ gets the completions of the connection's own work (and, without a receive CQ,
/// its receive completions too), with the connection's QP number.
fn conn_get_cq__success<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    assert!(!p.client.cq().is_channel_shared());
    let dst = mr(&p.speer, 64, recv_usage(b));
    let src = mr(&p.cpeer, 64, Usage::SEND);
    p.server.recv(dst.slice(0..64)).context(10).post().unwrap();
    send_bytes(&p.client, &src, 0, b"x", 11);
    let wc = next_wc(p.client.cq());
    assert_wc(&wc, 11, WcOpcode::Send);
    assert_eq!(wc.qp_num(), p.client.qp_num());
    let wc = next_wc(p.server.cq());
    assert_wc(&wc, 10, WcOpcode::Recv);
    assert_eq!(wc.qp_num(), p.server.qp_num());
}

fn conn_get_rcq__success<B: Backend>(b: &B) {
    let t = b.transport();
    let scfg = ConnCfg::new().with_rcq_size(5);
    let p = pair_with(b, &t, None, Some(&scfg), None, None);
    assert!(p.client.rcq().is_none(), "no receive CQ by default");
    let rcq = p.server.rcq().expect("a receive CQ with rcq_size > 0");
    assert!(!rcq.is_channel_shared());
}

/// With a receive CQ, receive completions go there and never to the main CQ; the connection's
/// other completions still go to the main CQ.
fn conn_get_rcq__recv_completions_go_to_rcq<B: Backend>(b: &B) {
    let t = b.transport();
    let scfg = ConnCfg::new().with_rcq_size(5);
    let p = pair_with(b, &t, None, Some(&scfg), None, None);
    let sdst = mr(&p.speer, 64, recv_usage(b));
    let ssrc = mr(&p.speer, 64, Usage::SEND);
    let cdst = mr(&p.cpeer, 64, recv_usage(b));
    let csrc = mr(&p.cpeer, 64, Usage::SEND);
    p.server.recv(sdst.slice(0..64)).context(1).post().unwrap();
    p.server.recv_empty().context(2).post().unwrap();
    p.client.recv(cdst.slice(0..64)).context(3).post().unwrap();
    send_bytes(&p.client, &csrc, 0, b"ping", 4);
    assert_wc(&next_wc(p.client.cq()), 4, WcOpcode::Send);
    p.client.send_empty().context(5).post().unwrap();
    assert_wc(&next_wc(p.client.cq()), 5, WcOpcode::Send);
    let rcq = p.server.rcq().unwrap();
    let ids: BTreeSet<u64> = (0..2)
        .map(|_| {
            let wc = next_wc(rcq);
            assert_eq!((wc.status(), wc.opcode()), (WcStatus::Success, WcOpcode::Recv));
            assert_eq!(wc.qp_num(), p.server.qp_num());
            wc.wr_id()
        })
        .collect();
    assert_eq!(ids, BTreeSet::from([1, 2]));
    assert_no_wc(p.server.cq());
    send_bytes(&p.server, &ssrc, 0, b"pong", 6);
    assert_wc(&next_wc(p.server.cq()), 6, WcOpcode::Send);
    assert_no_wc(rcq);
    // The client has no receive CQ: its receive completion is on its main CQ.
    assert_wc(&next_wc(p.client.cq()), 3, WcOpcode::Recv);
    assert_eq!(cdst.to_vec(0, 4).unwrap(), b"pong");
}

/// Not shared: the main CQ and the receive CQ have a channel (fd) each.
fn conn_get_rcq__own_channel<B: Backend>(b: &B) {
    let t = b.transport();
    let scfg = ConnCfg::new().with_rcq_size(5);
    let p = pair_with(b, &t, None, Some(&scfg), None, None);
    let rcq = p.server.rcq().unwrap();
    assert_ne!(p.server.cq().fd().as_raw_fd(), rcq.fd().as_raw_fd());
    assert_ne!(p.server.cq().fd().as_raw_fd(), p.client.cq().fd().as_raw_fd());
}

fn conn_get_compl_fd__E_NOT_SHARED_CHNL<B: Backend>(b: &B) {
    let t = b.transport();
    let scfg = ConnCfg::new().with_rcq_size(5);
    let p = pair_with(b, &t, None, Some(&scfg), None, None);
    assert_kind(p.client.compl_fd(), ErrorKind::NotSharedChannel);
    assert_kind(p.server.compl_fd(), ErrorKind::NotSharedChannel);
}

fn conn_get_compl_fd__success<B: Backend>(b: &B) {
    let t = b.transport();
    let cfg = ConnCfg::new().with_shared_channel(true).with_rcq_size(5);
    let p = pair_with(b, &t, Some(&cfg), Some(&cfg), None, None);
    for c in [&p.client, &p.server] {
        let fd = c.compl_fd().unwrap().as_raw_fd();
        fcntl(fd, FcntlArg::F_GETFL).expect("a valid, open fd");
        assert!(c.cq().is_channel_shared());
        let rcq = c.rcq().unwrap();
        assert!(rcq.is_channel_shared());
        assert_eq!(c.cq().fd().as_raw_fd(), fd);
        assert_eq!(rcq.fd().as_raw_fd(), fd);
    }
    assert_ne!(p.client.compl_fd().unwrap().as_raw_fd(), p.server.compl_fd().unwrap().as_raw_fd());
}

fn conn_wait__channel_not_shared<B: Backend>(b: &B) {
    let t = b.transport();
    let scfg = ConnCfg::new().with_rcq_size(5);
    let p = pair_with(b, &t, None, Some(&scfg), None, None);
    assert_kind(p.client.wait(), ErrorKind::NotSharedChannel);
    assert_kind(p.server.wait(), ErrorKind::NotSharedChannel);
}

/// Shared channel with a receive CQ: `Conn::wait` names the CQ that has the completion.
fn conn_wait__success<B: Backend>(b: &B) {
    let t = b.transport();
    let scfg = ConnCfg::new().with_shared_channel(true).with_rcq_size(5);
    let p = pair_with(b, &t, None, Some(&scfg), None, None);
    let sdst = mr(&p.speer, 64, recv_usage(b));
    let ssrc = mr(&p.speer, 64, Usage::SEND);
    let cdst = mr(&p.cpeer, 64, recv_usage(b));
    let csrc = mr(&p.cpeer, 64, Usage::SEND);
    let fd = p.server.compl_fd().unwrap();

    // A receive completion: the receive CQ.
    p.server.recv(sdst.slice(0..64)).context(1).post().unwrap();
    send_bytes(&p.client, &csrc, 0, b"to server", 2);
    assert_wc(&next_wc(p.client.cq()), 2, WcOpcode::Send);
    let (cq, is_rcq) = within(fd, ErrorKind::NoCompletion, || p.server.wait());
    assert!(is_rcq, "a receive completion is on the receive CQ");
    assert!(cq.is_channel_shared());
    assert_wc(&next_wc(cq), 1, WcOpcode::Recv);
    assert_eq!(sdst.to_vec(0, 9).unwrap(), b"to server");

    // A send completion: the main CQ.
    p.client.recv(cdst.slice(0..64)).context(3).post().unwrap();
    send_bytes(&p.server, &ssrc, 0, b"to client", 4);
    let (cq, is_rcq) = within(fd, ErrorKind::NoCompletion, || p.server.wait());
    assert!(!is_rcq, "a send completion is on the main CQ");
    assert_wc(&next_wc(cq), 4, WcOpcode::Send);
    assert_wc(&next_wc(p.client.cq()), 3, WcOpcode::Recv);
    assert_no_wc(p.server.cq());
    assert_no_wc(p.server.rcq().unwrap());
}

/// A shared channel is allowed without a receive CQ: everything is on the main CQ.
fn conn_wait__success_shared_without_rcq<B: Backend>(b: &B) {
    let t = b.transport();
    let scfg = ConnCfg::new().with_shared_channel(true);
    let p = pair_with(b, &t, None, Some(&scfg), None, None);
    assert!(p.server.rcq().is_none());
    let sdst = mr(&p.speer, 64, recv_usage(b));
    let csrc = mr(&p.cpeer, 64, Usage::SEND);
    let fd = p.server.compl_fd().unwrap();
    assert_eq!(fd.as_raw_fd(), p.server.cq().fd().as_raw_fd());
    p.server.recv(sdst.slice(0..64)).context(1).post().unwrap();
    send_bytes(&p.client, &csrc, 0, b"hi", 2);
    let (cq, is_rcq) = within(fd, ErrorKind::NoCompletion, || p.server.wait());
    assert!(!is_rcq);
    assert_wc(&next_wc(cq), 1, WcOpcode::Recv);
}

fn conn_wait__no_completion<B: Backend>(b: &B) {
    let t = b.transport();
    let scfg = ConnCfg::new().with_shared_channel(true).with_rcq_size(5);
    let p = pair_with(b, &t, None, Some(&scfg), None, None);
    set_nonblocking(p.server.compl_fd().unwrap());
    assert_kind(p.server.wait(), ErrorKind::NoCompletion);
}

/// The remote peer's configuration alone gates persistent flushes.
fn conn_apply_remote_peer_cfg__success<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    let target = mr(&p.speer, 64, Usage::WRITE_DST | Usage::FLUSH_TYPE_PERSISTENT | Usage::FLUSH_TYPE_VISIBILITY);
    let r = remote(&target);
    assert_kind(p.client.flush(r.slice(0..8), FlushType::Persistent).context(1).post(), ErrorKind::Unsupported);

    // The server describes itself; the client applies what it decoded.
    let spcfg = PeerCfg::new().with_direct_write_to_pmem(true);
    let pcfg = PeerCfg::from_descriptor(&spcfg.descriptor()).unwrap();
    p.client.apply_remote_peer_cfg(&pcfg);
    p.client.flush(r.slice(0..8), FlushType::Persistent).context(2).post().unwrap();
    let wc = next_wc(p.client.cq());
    assert_eq!((wc.wr_id(), wc.status()), (2, WcStatus::Success));

    // Applying "not supported" takes it back; a configuration not applied does not matter.
    let pcfg = pcfg.with_direct_write_to_pmem(false);
    p.client.flush(r.slice(0..8), FlushType::Persistent).context(3).post().unwrap();
    assert_eq!(next_wc(p.client.cq()).wr_id(), 3);
    p.client.apply_remote_peer_cfg(&pcfg);
    assert_kind(p.client.flush(r.slice(0..8), FlushType::Persistent).context(4).post(), ErrorKind::Unsupported);
    // The server side was never told anything.
    let ctarget = mr(&p.cpeer, 64, Usage::WRITE_DST | Usage::FLUSH_TYPE_PERSISTENT);
    let cr = remote(&ctarget);
    assert_kind(p.server.flush(cr.slice(0..8), FlushType::Persistent).context(5).post(), ErrorKind::Unsupported);
}

// ----------------------------------------------------------------------------------------------
// completion queues (6.11, 8.6)

fn cq_get_fd__success<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    let cq = p.client.cq();
    fcntl(cq.fd().as_raw_fd(), FcntlArg::F_GETFL).expect("a valid, open fd");
    assert!(!readable(cq.fd(), Duration::ZERO), "readable with no completion");
    let target = mr(&p.speer, 64, Usage::WRITE_DST);
    let src = mr(&p.cpeer, 64, Usage::WRITE_SRC);
    p.client.write(remote(&target).at(0), src.slice(0..8)).context(9).post().unwrap();
    assert!(readable(cq.fd(), DEADLINE), "not readable after a completion");
    assert_wc(&next_wc(cq), 9, WcOpcode::RdmaWrite);
}

/// Private channel: wait, then drain with get_wc; the CQ is re-armed for the next completion.
fn cq_wait__success<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    let cq = p.client.cq();
    let target = mr(&p.speer, 64, Usage::WRITE_DST);
    let src = mr(&p.cpeer, 64, Usage::WRITE_SRC);
    let r = remote(&target);
    for id in [1, 2] {
        p.client.write(r.at(0), src.slice(0..8)).context(id).post().unwrap();
        within(cq.fd(), ErrorKind::NoCompletion, || cq.wait());
        assert_wc(&next_wc(cq), id, WcOpcode::RdmaWrite);
    }
}

fn cq_wait__E_SHARED_CHANNEL<B: Backend>(b: &B) {
    let t = b.transport();
    let cfg = ConnCfg::new().with_shared_channel(true).with_rcq_size(5);
    let p = pair_with(b, &t, Some(&cfg), None, None, None);
    assert_kind(p.client.cq().wait(), ErrorKind::SharedChannel);
    assert_kind(p.client.rcq().unwrap().wait(), ErrorKind::SharedChannel);
    // The other side is not shared.
    set_nonblocking(p.server.cq().fd());
    assert_kind(p.server.cq().wait(), ErrorKind::NoCompletion);
}

fn cq_wait__no_completion<B: Backend>(b: &B) {
    let t = b.transport();
    let scfg = ConnCfg::new().with_rcq_size(5);
    let p = pair_with(b, &t, None, Some(&scfg), None, None);
    set_nonblocking(p.server.cq().fd());
    assert_kind(p.server.cq().wait(), ErrorKind::NoCompletion);
    let rcq = p.server.rcq().unwrap();
    set_nonblocking(rcq.fd());
    assert_kind(rcq.wait(), ErrorKind::NoCompletion);
}

fn cq_get_wc__num_entries_non_positive<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    let e = p.client.cq().poll(&mut []).expect_err("num_entries 0");
    assert_eq!((e.kind(), e.op()), (ErrorKind::InvalidInput, "Cq::poll"), "{e}");
}

fn cq_get_wc__poll_cq_no_data<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    let mut wc = [Wc::EMPTY; 8];
    assert_eq!(p.client.cq().poll(&mut wc).unwrap(), 0);
    assert_eq!(wc, [Wc::EMPTY; 8], "an empty poll writes no entry");
    assert_eq!(p.client.cq().poll(&mut wc[..1]).unwrap(), 0);
    assert_eq!(p.client.cq().next_wc().unwrap(), None);
    // Polling again (and the other side, which has no work either) stays empty.
    assert_eq!(p.client.cq().next_wc().unwrap(), None);
    assert_eq!(p.server.cq().poll(&mut wc).unwrap(), 0);
}

/// Several completions come back from one call. The client's three send completions mean the
/// server acknowledged the three messages, whose receive completions the responder generates
/// before acknowledging; so all three are on the server's CQ before it is polled.
fn cq_get_wc__poll_cq_more_data<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    let dst = mr(&p.speer, 3 * 16, recv_usage(b));
    let src = mr(&p.cpeer, 3 * 16, Usage::SEND);
    for i in 0..3u8 {
        let o = usize::from(i) * 16;
        p.server.recv(dst.slice(o..o + 16)).context(u64::from(i)).post().unwrap();
    }
    for i in 0..3u8 {
        send_bytes(&p.client, &src, usize::from(i) * 16, &[i + 1; 5], 100 + u64::from(i));
    }
    for i in 0..3 {
        assert_wc(&next_wc(p.client.cq()), 100 + i, WcOpcode::Send);
    }
    let deadline = Instant::now() + DEADLINE;
    let mut got = Vec::new();
    let mut first = None;
    while got.len() < 3 {
        let mut wc = [Wc::EMPTY; 8];
        match p.server.cq().poll(&mut wc) {
            Ok(0) => {
                assert!(Instant::now() < deadline, "only {} completions within 10 s", got.len());
                std::thread::yield_now();
            }
            Ok(n) => {
                assert!((1..=8).contains(&n));
                first.get_or_insert(n);
                got.extend_from_slice(&wc[..n]);
            }
            Err(e) => panic!("poll: {e}"),
        }
    }
    assert_eq!(got.len(), 3);
    assert!(first.unwrap() >= 2, "one call returned {} of 3 available completions", first.unwrap());
    let mut ids: Vec<u64> = got
        .iter()
        .map(|wc| {
            assert_eq!((wc.status(), wc.opcode(), wc.byte_len()), (WcStatus::Success, WcOpcode::Recv, 5));
            wc.wr_id()
        })
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, [0, 1, 2]);
    // Receive buffers are an unordered set: each buffer got one of the three messages.
    let mut msgs: Vec<Vec<u8>> = (0..3).map(|i| dst.to_vec(i * 16, 5).unwrap()).collect();
    msgs.sort();
    assert_eq!(msgs, [vec![1; 5], vec![2; 5], vec![3; 5]]);
    assert_eq!(p.server.cq().poll(&mut [Wc::EMPTY; 8]).unwrap(), 0);
}

// ----------------------------------------------------------------------------------------------
// shared receive queues (6.6)

fn srq_new__success_defaults<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let srq = Srq::new(&p, None).unwrap();
    // Defaults: rcq_size 20 > 0, so the SRQ has its own receive CQ with its own channel.
    let rcq = srq.rcq().expect("default rcq_size > 0");
    assert!(!rcq.is_channel_shared());
    fcntl(rcq.fd().as_raw_fd(), FcntlArg::F_GETFL).expect("a valid, open fd");
    srq.delete().unwrap();
}

fn srq_new__success_cfg<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let cfg = SrqCfg::new().with_rq_size(8).with_rcq_size(0);
    let srq = Srq::new(&p, Some(&cfg)).unwrap();
    assert!(srq.rcq().is_none());
    srq.delete().unwrap();
    let srq = Srq::new(&p, Some(&cfg.with_rcq_size(7))).unwrap();
    assert!(srq.rcq().is_some());
    srq.delete().unwrap();
}

fn srq_get_rcq__success<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let srq = Srq::new(&p, None).unwrap();
    let a = srq.rcq().unwrap().fd().as_raw_fd();
    assert_eq!(srq.rcq().unwrap().fd().as_raw_fd(), a);
    // A configuration holds a handle of the same SRQ.
    let cfg = ConnCfg::new().with_srq(Some(&srq));
    assert_eq!(cfg.srq().unwrap().rcq().unwrap().fd().as_raw_fd(), a, "handles of one SRQ");
    let rcq = srq.rcq().unwrap();
    assert_eq!(rcq.next_wc().unwrap(), None);
    set_nonblocking(rcq.fd());
    assert_kind(rcq.wait(), ErrorKind::NoCompletion);
}

fn srq_recv__success<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let srq = Srq::new(&p, None).unwrap();
    let dst = mr(&p, 64, recv_usage(b));
    srq.recv(dst.slice(0..64)).context(1).post().unwrap();
    srq.recv(dst.slice(32..64)).context(2).post().unwrap();
    srq.recv_empty().context(3).post().unwrap();
}

/// Two connections receive through one SRQ: both messages land in SRQ buffers and their
/// completions are on the SRQ's receive CQ, each with the QP number of its connection.
fn srq_recv__two_connections_share_srq<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let srq = Srq::new(&l.speer, None).unwrap();
    let scfg = ConnCfg::new().with_srq(Some(&srq));
    let dst = mr(&l.speer, 2 * 64, recv_usage(b));
    srq.recv(dst.slice(0..64)).post().unwrap();
    srq.recv(dst.slice(64..128)).context(1).post().unwrap();
    let (c1, s1) = establish(b, &l, None, Some(&scfg));
    let (c2, s2) = establish(b, &l, None, Some(&scfg));
    assert!(s1.rcq().is_none() && s2.rcq().is_none(), "the SRQ's receive CQ is used");
    let src1 = mr(&l.cpeer, 64, Usage::SEND);
    let src2 = mr(&l.cpeer, 64, Usage::SEND);
    send_bytes(&c1, &src1, 0, b"from connection one", 11);
    send_bytes(&c2, &src2, 0, b"from connection two", 12);
    assert_wc(&next_wc(c1.cq()), 11, WcOpcode::Send);
    assert_wc(&next_wc(c2.cq()), 12, WcOpcode::Send);
    let rcq = srq.rcq().unwrap();
    let mut qps = BTreeSet::new();
    let mut slots = BTreeSet::new();
    for _ in 0..2 {
        let wc = next_wc(rcq);
        assert_eq!((wc.status(), wc.opcode(), wc.byte_len()), (WcStatus::Success, WcOpcode::Recv, 19), "{wc:?}");
        let expected: &[u8] = if wc.qp_num() == s1.qp_num() {
            b"from connection one"
        } else {
            assert_eq!(wc.qp_num(), s2.qp_num(), "completion of an unknown QP");
            b"from connection two"
        };
        assert_eq!(dst.to_vec(wc.wr_id() as usize * 64, 19).unwrap(), expected);
        qps.insert(wc.qp_num());
        slots.insert(wc.wr_id());
    }
    assert_eq!(qps.len(), 2);
    assert_eq!(slots, BTreeSet::from([0, 1]));
    assert_no_wc(s1.cq());
    assert_no_wc(s2.cq());
}

/// An SRQ without its own receive CQ: receive completions go to the connection's CQ.
fn srq_recv__srq_without_rcq_completions_on_conn_cq<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let (_srq, dst, _client, server) = srq_without_rcq_one_message(b, &l, SrqCfg::new(), b"via srq");
    let wc = next_wc(server.cq());
    assert_wc(&wc, 8, WcOpcode::Recv);
    assert_eq!(wc.qp_num(), server.qp_num());
    assert_eq!(dst.to_vec(0, 7).unwrap(), b"via srq");
}

/// A connection deleted with the completion of a receive it took from its SRQ still in its CQ
/// (an SRQ without a receive CQ of its own): the receive goes with the CQ, so its region is not
/// in use and the SRQ's one slot takes a receive again.
fn srq_recv__conn_deleted_with_the_completion_unpolled<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let cfg = SrqCfg::new().with_rq_size(1);
    let (srq, dst, client, server) = srq_without_rcq_one_message(b, &l, cfg, b"never polled");
    client.disconnect().unwrap();
    assert_eq!(event(&server), ConnEvent::Closed);
    server.delete().unwrap();
    assert!(!dst.is_in_use(), "the receive went with the connection's CQ");
    srq.recv(dst.slice(0..64)).context(9).post().unwrap();
}

/// An SRQ deleted with receives still posted: their regions are not in use any more.
fn srq_delete__posted_receives_free_their_regions<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let srq = Srq::new(&p, None).unwrap();
    let dst = mr(&p, 128, recv_usage(b));
    srq.recv(dst.slice(0..64)).post().unwrap();
    srq.recv(dst.slice(64..128)).context(1).post().unwrap();
    assert!(dst.is_in_use(), "posted receives hold the region");
    srq.delete().unwrap();
    assert!(!dst.is_in_use(), "the receives went with the SRQ");
}

/// An SRQ with its own receive CQ wins over the connection's `rcq_size`.
fn srq_get_rcq__conn_rcq_none_with_srq_rcq<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let srq = Srq::new(&l.speer, None).unwrap();
    let scfg = ConnCfg::new().with_srq(Some(&srq)).with_rcq_size(5);
    let (_client, server) = establish(b, &l, None, Some(&scfg));
    assert!(server.rcq().is_none());
}

/// A connection using an SRQ has no receive queue of its own (docs/decisions.md #18).
fn conn_recv__srq_E_PROVIDER<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let srq = Srq::new(&l.speer, None).unwrap();
    let scfg = ConnCfg::new().with_srq(Some(&srq));
    let (_client, server) = establish(b, &l, None, Some(&scfg));
    let dst = mr(&l.speer, 64, recv_usage(b));
    assert_kind(server.recv(dst.slice(0..64)).post(), ErrorKind::Provider);
}

fn srq_delete__success<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    Srq::new(&l.speer, None).unwrap().delete().unwrap();
    // After the connections using it are gone.
    let srq = Srq::new(&l.speer, None).unwrap();
    let scfg = ConnCfg::new().with_srq(Some(&srq));
    let (client, server) = establish(b, &l, None, Some(&scfg));
    client.disconnect().unwrap();
    assert_eq!(event(&server), ConnEvent::Closed);
    server.delete().unwrap();
    assert_eq!(event(&client), ConnEvent::Closed);
    client.delete().unwrap();
    let scfg = scfg.with_srq(None);
    assert!(scfg.srq().is_none());
    srq.delete().unwrap();
}

// ----------------------------------------------------------------------------------------------
// queue sizes against the device's limits, timeouts, ranges

/// `limit + 1` (every device's limits are far below `u32::MAX`).
fn above(limit: u32) -> u32 {
    limit.checked_add(1).expect("a device limit below u32::MAX")
}

/// Configurations with one queue or CQ above the device's limit (and one with all of them).
fn oversized_cfgs<T: Transport>(p: &Peer<T>) -> Vec<(&'static str, ConnCfg<T>)> {
    let caps = p.capabilities();
    let (qp, cq) = (above(caps.max_qp_wr), above(caps.max_cqe));
    vec![
        ("sq_size", ConnCfg::new().with_sq_size(qp)),
        ("rq_size", ConnCfg::new().with_rq_size(qp)),
        ("cq_size", ConnCfg::new().with_cq_size(cq)),
        ("rcq_size", ConnCfg::new().with_rcq_size(cq)),
        ("sq_size", ConnCfg::new().with_sq_size(u32::MAX)),
        ("cq_size", ConnCfg::new().with_cq_size(u32::MAX).with_shared_channel(true)),
        ("", ConnCfg::new().with_sq_size(qp).with_rq_size(qp).with_cq_size(cq).with_rcq_size(cq)),
    ]
}

/// A queue or CQ larger than the device allows (`max_qp_wr`, `max_cqe`) is `InvalidInput` before
/// any provider call (librpma handed it to the provider, which failed or aborted).
fn conn_req_new__queue_size_above_device_limit<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    assert_eq!(p.capabilities(), &b.caps());
    for (what, cfg) in oversized_cfgs(&p) {
        let e = ConnReq::new(&p, &b.addr(), &b.port(), Some(&cfg)).expect_err("an oversized queue");
        assert_eq!((e.kind(), e.op()), (ErrorKind::InvalidInput, "ConnReq::new"), "{cfg:?}: {e}");
        assert!(e.to_string().contains(what), "{what}: {e}");
    }
    // Nothing was left half-built: the defaults still work.
    ConnReq::new(&p, &b.addr(), &b.port(), None).unwrap().delete().unwrap();
}

/// Sizes of exactly the device's limits pass the check (the provider may still refuse to build
/// such queues, as its own error).
fn conn_req_new__queue_size_at_device_limit<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let caps = p.capabilities().clone();
    for cfg in [
        ConnCfg::new().with_sq_size(caps.max_qp_wr),
        ConnCfg::new().with_rq_size(caps.max_qp_wr),
        ConnCfg::new().with_cq_size(caps.max_cqe),
        ConnCfg::new().with_rcq_size(caps.max_cqe),
    ] {
        match ConnReq::new(&p, &b.addr(), &b.port(), Some(&cfg)) {
            Ok(req) => req.delete().unwrap(),
            Err(e) => assert_ne!(e.kind(), ErrorKind::InvalidInput, "{cfg:?}: a size at the limit refused: {e}"),
        }
    }
}

/// The incoming side checks the same limits; the refused request stays pending and a valid
/// configuration takes it.
fn ep_next_conn_req__queue_size_above_device_limit<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let req = ConnReq::new(&l.cpeer, &b.addr(), &l.port, None).unwrap();
    let client = req.connect(None).unwrap();
    assert!(readable(l.ep.fd(), DEADLINE));
    set_nonblocking(l.ep.fd());
    for (what, cfg) in oversized_cfgs(&l.speer) {
        let e = l.ep.next_conn_req(Some(&cfg)).expect_err("an oversized queue");
        assert_eq!((e.kind(), e.op()), (ErrorKind::InvalidInput, "Ep::next_conn_req"), "{cfg:?}: {e}");
        assert!(e.to_string().contains(what), "{what}: {e}");
    }
    let server = incoming(&l.ep, None).connect(None).unwrap();
    assert_eq!(event(&client), ConnEvent::Established);
    assert_eq!(event(&server), ConnEvent::Established);
}

/// An SRQ or its receive CQ larger than the device allows (`max_srq_wr`, `max_cqe`) is
/// `InvalidInput`.
fn srq_new__queue_size_above_device_limit<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let caps = p.capabilities().clone();
    let (rq, cq) = (above(caps.max_srq_wr), above(caps.max_cqe));
    for (what, cfg) in [
        ("rq_size", SrqCfg::new().with_rq_size(rq)),
        ("rq_size", SrqCfg::new().with_rq_size(rq).with_rcq_size(0)),
        ("rcq_size", SrqCfg::new().with_rcq_size(cq)),
        ("rq_size", SrqCfg::new().with_rq_size(u32::MAX).with_rcq_size(u32::MAX)),
    ] {
        let e = Srq::new(&p, Some(&cfg)).expect_err("an oversized shared RQ");
        assert_eq!((e.kind(), e.op()), (ErrorKind::InvalidInput, "Srq::new"), "{cfg:?}: {e}");
        assert!(e.to_string().contains(what), "{what}: {e}");
    }
    // The defaults are within every device's limits.
    Srq::new(&p, None).unwrap().delete().unwrap();
}

/// librpma took the timeout as an `int` of milliseconds: a `Duration` above `i32::MAX` ms is
/// `InvalidInput` when the request is made (a negative one cannot be written). At the limit, and
/// sub-millisecond parts, are accepted.
fn conn_req_new__timeout_above_i32_max_ms<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let max = Duration::from_millis(i32::MAX as u64);
    for timeout in [max + Duration::from_millis(1), Duration::from_secs(u64::from(u32::MAX)), Duration::MAX] {
        let cfg = ConnCfg::new().with_timeout(timeout);
        let e = ConnReq::new(&p, &b.addr(), &b.port(), Some(&cfg)).expect_err("a timeout above i32::MAX ms");
        assert_eq!((e.kind(), e.op()), (ErrorKind::InvalidInput, "ConnReq::new"), "{timeout:?}: {e}");
    }
    for timeout in [max, max + Duration::from_micros(999), Duration::from_micros(1_500_250)] {
        let cfg = ConnCfg::new().with_timeout(timeout);
        ConnReq::new(&p, &b.addr(), &b.port(), Some(&cfg))
            .unwrap_or_else(|e| panic!("{timeout:?}: {e}"))
            .delete()
            .unwrap();
    }
}

/// A transport retry count above 7 (a 3-bit field) is `InvalidInput` naming the item, the value and
/// the range; 0..=7 are accepted.
fn conn_req_new__retry_count_above_7_E_INVAL<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    for n in [8u8, 9, u8::MAX] {
        let cfg = ConnCfg::new().with_retry_count(n);
        let e = ConnReq::new(&p, &b.addr(), &b.port(), Some(&cfg)).expect_err("a retry count above 7");
        assert_eq!((e.kind(), e.op()), (ErrorKind::InvalidInput, "ConnReq::new"), "{n}: {e}");
        assert!(e.to_string().contains(&format!("retry_count {n} is outside 0..=7")), "{e}");
    }
    for n in 0..=7u8 {
        let cfg = ConnCfg::new().with_retry_count(n);
        ConnReq::new(&p, &b.addr(), &b.port(), Some(&cfg)).unwrap_or_else(|e| panic!("{n}: {e}")).delete().unwrap();
    }
}

/// A local ACK timeout exponent outside 1..=31 (0 would mean none) is `InvalidInput` naming the
/// item, the value and the range; 1..=31 are accepted, and so is leaving it unset.
fn conn_req_new__ack_timeout_outside_1_31_E_INVAL<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    for n in [0u8, 32, u8::MAX] {
        let cfg = ConnCfg::new().with_ack_timeout(n);
        let e = ConnReq::new(&p, &b.addr(), &b.port(), Some(&cfg)).expect_err("an ACK timeout outside 1..=31");
        assert_eq!((e.kind(), e.op()), (ErrorKind::InvalidInput, "ConnReq::new"), "{n}: {e}");
        assert!(e.to_string().contains(&format!("ack_timeout {n} is outside 1..=31")), "{e}");
    }
    for n in [1u8, 14, 31] {
        let cfg = ConnCfg::new().with_ack_timeout(n);
        ConnReq::new(&p, &b.addr(), &b.port(), Some(&cfg)).unwrap_or_else(|e| panic!("{n}: {e}")).delete().unwrap();
    }
}

/// The passive side checks the same rules: a retry count or an ACK timeout out of range is
/// `InvalidInput` and the request stays pending, to be accepted with a valid configuration.
fn ep_next_conn_req__retry_count_or_ack_timeout_out_of_range_E_INVAL<B: Backend>(b: &B) {
    let t = b.transport();
    let l = listening(b, &t);
    let req = ConnReq::new(&l.cpeer, &b.addr(), &l.port, None).unwrap();
    let client = req.connect(None).unwrap();
    assert!(readable(l.ep.fd(), DEADLINE));
    set_nonblocking(l.ep.fd());
    for (what, cfg) in [
        ("retry_count 8 is outside 0..=7", ConnCfg::new().with_retry_count(8)),
        ("ack_timeout 0 is outside 1..=31", ConnCfg::new().with_ack_timeout(0)),
        ("ack_timeout 32 is outside 1..=31", ConnCfg::new().with_ack_timeout(32)),
    ] {
        let e = l.ep.next_conn_req(Some(&cfg)).expect_err("out of range");
        assert_eq!((e.kind(), e.op()), (ErrorKind::InvalidInput, "Ep::next_conn_req"), "{cfg:?}: {e}");
        assert!(e.to_string().contains(what), "{what}: {e}");
    }
    let cfg = ConnCfg::new().with_retry_count(7).with_ack_timeout(31);
    let server = incoming(&l.ep, Some(&cfg)).connect(None).unwrap();
    assert_eq!(event(&client), ConnEvent::Established);
    assert_eq!(event(&server), ConnEvent::Established);
}

/// A connection whose queue pairs give up at the first unacknowledged try (retry count 0) with
/// an ACK timeout of 4.096 us * 2^14 (about 67 ms) on both sides connects and writes: the
/// settings reach the backend (on verbs, `rdma_conn_param.retry_count` and
/// `RDMA_OPTION_ID_ACK_TIMEOUT`) and a live peer needs no retry.
fn conn__retry_count_0_ack_timeout_14_connects_and_writes<B: Backend>(b: &B) {
    let t = b.transport();
    let cfg = ConnCfg::new().with_retry_count(0).with_ack_timeout(14);
    assert_eq!((cfg.retry_count(), cfg.ack_timeout()), (0, Some(14)));
    let p = pair_with(b, &t, Some(&cfg), Some(&cfg), None, None);
    let target = mr(&p.speer, 64, Usage::WRITE_DST);
    let src = mr(&p.cpeer, 64, Usage::WRITE_SRC);
    src.write(0, b"retry 0!").unwrap();
    p.client.write(remote(&target).at(8), src.slice(0..8)).context(0x14).post().unwrap();
    assert_wc(&next_wc(p.client.cq()), 0x14, WcOpcode::RdmaWrite);
    assert_eq!(target.to_vec(8, 8).unwrap(), b"retry 0!");
}

/// An inverted range, and one ending at `usize::MAX` inclusive (its end does not fit a
/// `usize`), are `InvalidInput` when the receive is posted.
fn srq_recv__range_inverted<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let srq = Srq::new(&p, None).unwrap();
    let dst = mr(&p, 64, recv_usage(b));
    let (lo, hi) = (40, 8);
    for r in [srq.recv(dst.slice(lo..hi)), srq.recv(dst.slice(..=usize::MAX)), srq.recv(dst.slice(8..=usize::MAX))] {
        let e = r.context(1).post().expect_err("an inverted range");
        assert_eq!((e.kind(), e.op()), (ErrorKind::InvalidInput, "Srq::recv"), "{e}");
    }
    // The same bounds the right way round are fine.
    srq.recv(dst.slice(hi..lo)).context(2).post().unwrap();
    srq.recv(dst.slice(..=63)).context(3).post().unwrap();
}

fn conn_req_recv__range_inverted<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let dst = mr(&p, 64, recv_usage(b));
    let req = ConnReq::new(&p, &b.addr(), &b.port(), None).unwrap();
    let (lo, hi) = (40, 8);
    for r in [req.recv(dst.slice(lo..hi)), req.recv(dst.slice(..=usize::MAX)), req.recv(dst.slice(63..=usize::MAX))] {
        let e = r.context(1).post().expect_err("an inverted range");
        assert_eq!((e.kind(), e.op()), (ErrorKind::InvalidInput, "ConnReq::recv"), "{e}");
    }
    req.recv(dst.slice(hi..=lo)).context(2).post().unwrap();
}

/// `Offer`: the server accepts with its region and peer configuration packed; the client
/// unpacks both, applies the configuration (a persistent flush is then allowed) and writes.
fn conn__offer_carries_region_and_peer_cfg<B: Backend>(b: &B) {
    let t = b.transport();
    let (speer, cpeer) = (peer(b, &t), peer(b, &t));
    let port = b.port();
    let ep = Ep::listen(&speer, &b.addr(), &port).expect("listen");
    let log = mr(&speer, 4096, Usage::WRITE_DST | Usage::FLUSH_TYPE_PERSISTENT);
    let client = ConnReq::new(&cpeer, &b.addr(), &port, None).expect("conn_req_new").connect(None).expect("connect");
    let pdata = rpma::descriptor::Offer::encode(&log, &PeerCfg::new().with_direct_write_to_pmem(true));
    assert_eq!(pdata.len(), rpma::descriptor::Offer::SIZE);
    let _server = ep.next_conn_req(None).expect("request").connect(Some(&pdata)).expect("accept");
    assert_eq!(client.next_event().expect("event"), ConnEvent::Established);
    let offer = rpma::descriptor::Offer::decode(client.private_data()).expect("an offer");
    assert!(offer.peer_cfg.direct_write_to_pmem());
    let remote = offer.apply_to(&client);
    assert_eq!(remote, rpma::MrRemote::from_descriptor(&log.descriptor()).expect("descriptor"));
    let src = mr(&cpeer, 64, Usage::WRITE_SRC);
    src.write(0, b"offered").expect("fill");
    client.write(remote.at(0), src.slice(0..7)).flags(rpma::CompletionFlags::ON_ERROR).post().expect("write");
    client.flush(remote.slice(0..7), FlushType::Persistent).context(1).post().expect("allowed by the applied cfg");
    assert_eq!(next_wc(client.cq()).status(), WcStatus::Success);
    assert_eq!(log.to_vec(0, 7).expect("read"), b"offered");
    assert_eq!(rpma::descriptor::Offer::decode(&pdata[..5]).unwrap_err().kind(), ErrorKind::InvalidInput);
}

/// A post on a connection that was closed is taken, and its completion (even unsignaled) is
/// `WrFlushErr`, as `Post::post` documents.
fn conn__post_after_close_is_taken_and_completes_flushed<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    let dst = mr(&p.speer, 64, Usage::WRITE_DST);
    let src = mr(&p.cpeer, 64, Usage::WRITE_SRC);
    p.client.disconnect().expect("disconnect");
    assert_eq!(p.server.next_event().expect("server event"), ConnEvent::Closed);
    p.server.disconnect().expect("disconnect after CLOSED");
    assert_eq!(p.client.next_event().expect("client event"), ConnEvent::Closed);
    p.client.write(remote(&dst).at(0), src.slice(0..8)).context(7).post().expect("taken");
    let wc = next_wc(p.client.cq());
    assert_eq!((wc.wr_id(), wc.status()), (7, WcStatus::WrFlushErr));
    p.client
        .write(remote(&dst).at(0), src.slice(0..8))
        .flags(rpma::CompletionFlags::ON_ERROR)
        .context(8)
        .post()
        .expect("taken");
    let wc = next_wc(p.client.cq());
    assert_eq!((wc.wr_id(), wc.status()), (8, WcStatus::WrFlushErr));
}

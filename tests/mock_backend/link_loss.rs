//! Link loss and unexpected CM events.

use super::*;

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
        assert_eq!((wc.status(), wc.opcode()), (WcStatus::WrFlushErr, WcOpcode::Recv));
        flushed.insert(wc.wr_id());
    }
    assert_eq!(flushed, BTreeSet::from([1, 2]));
    assert_no_wc(fx.p.server.cq());
    // Later posts complete with an error status; nothing lands.
    fx.src.write(0, b"lost").unwrap();
    fx.p.client.write(fx.rdst.at(0), fx.src.slice(0..4)).context(3).post().unwrap();
    let wc = next_wc(fx.p.client.cq());
    assert_eq!(wc.wr_id(), 3);
    assert_ne!(wc.status(), WcStatus::Success);
    assert_eq!(fx.dst.to_vec(0, 4).unwrap(), [0; 4]);
    // Even an unsignaled one reports its error.
    fx.p.client.send(fx.src.slice(0..4)).flags(CompletionFlags::ON_ERROR).context(4).post().unwrap();
    let wc = next_wc(fx.p.client.cq());
    assert_eq!(wc.wr_id(), 4);
    assert_ne!(wc.status(), WcStatus::Success);
    fx.p.server.recv(rbuf.slice(0..64)).context(5).post().unwrap();
    let wc = next_wc(fx.p.server.cq());
    assert_eq!((wc.wr_id(), wc.status()), (5, WcStatus::WrFlushErr));
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
    assert_eq!(wc.wr_id(), 1);
    assert_ne!(wc.status(), WcStatus::Success);
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
    assert_eq!(next_wc(fx.p.client.cq()).status(), WcStatus::RemAccessErr);
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
    assert_kind(p.client.next_event(), ErrorKind::Other, "Conn::next_event");
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

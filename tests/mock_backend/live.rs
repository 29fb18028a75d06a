//! Leak counters: live objects while alive, none after drop.

use super::fault_sweep::{flow, flow_srq};
use super::*;

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
    let p = pair_on(&f, speer.clone(), Some(&ccfg), Some(&scfg));
    // Client: 2 CQs, 2 private channels + CM channel; server: 1 CQ (receives go to the SRQ's
    // CQ), 1 channel + CM channel; listener channel; SRQ CQ + channel.
    assert_eq!(f.live(), LiveCounts { pds: 2, mrs: 0, cqs: 4, channels: 7, qps: 2, srqs: 1, listeners: 1 });
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

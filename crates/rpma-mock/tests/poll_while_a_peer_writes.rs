//! The polling pattern of docs/memory.md on the mock: the owner of a `WRITE_DST` region polls a
//! byte of it with `volatile().load_u8` (and reads a range whose edges cut words) while a peer's
//! RDMA writes land in it, copied by the mock on the peer's thread. Every access to a byte has
//! the one size rpma-mem fixes for it (rule M2), so this races without undefined behaviour:
//! `scripts/miri.sh` runs it under Miri, which reports racing atomic accesses of different sizes
//! ("mixed-size" accesses); natively it checks the values.

use std::sync::atomic::{AtomicBool, Ordering};

use rpma_core::{ConnEvent, ConnReq, ContextType, Device, Ep, MrRemote, Peer, Usage};
use rpma_mock::MockFabric;

/// Writes by the peer: few under Miri, which interprets every access.
const ROUNDS: u8 = if cfg!(miri) { 4 } else { 100 };

#[test]
fn a_byte_poll_races_a_peers_rdma_writes_into_the_region() {
    let fabric = MockFabric::new();
    let peer = |kind| Peer::new(&Device::lookup(&fabric, "127.0.0.1", kind).unwrap()).unwrap();
    let (server_peer, client_peer) = (peer(ContextType::Local), peer(ContextType::Remote));
    let target = server_peer.alloc_mr(32, Usage::WRITE_DST).unwrap();
    let ep = Ep::listen(&server_peer, "127.0.0.1", "7311").unwrap();
    let client = ConnReq::new(&client_peer, "127.0.0.1", "7311", None).unwrap().connect(None).unwrap();
    let server = ep.next_conn_req(None).unwrap().connect(Some(&target.descriptor())).unwrap();
    assert_eq!(client.next_event().unwrap(), ConnEvent::Established);
    assert_eq!(server.next_event().unwrap(), ConnEvent::Established);
    let remote = MrRemote::from_descriptor(client.private_data()).unwrap();
    let mut src = client_peer.alloc_mr(16, Usage::WRITE_SRC).unwrap();
    let landed = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            // The owner: polls byte 13 (inside word 1) and reads bytes 11..21 (the last 5 bytes of
            // word 1 and the first 5 of word 2) while the peer lands whole words 1 and 2.
            let v = target.volatile();
            let mut out = [0u8; 10];
            loop {
                let done = landed.load(Ordering::Acquire);
                let b = v.load_u8(13).unwrap();
                v.read(11, &mut out).unwrap();
                assert!(b <= ROUNDS && out.iter().all(|&x| x <= ROUNDS), "{b} {out:?}: bytes nobody wrote");
                if done {
                    assert_eq!((b, out), (ROUNDS, [ROUNDS; 10]), "the last write, after its completion");
                    break;
                }
                std::hint::spin_loop();
            }
        });
        // The peer: 16-byte RDMA writes of words 1 and 2, each waited for.
        for k in 1..=ROUNDS {
            src.as_mut_slice().unwrap().fill(k);
            client.write(remote.at(8), src.slice(..)).context(u64::from(k)).post().unwrap();
            let wc = loop {
                if let Some(wc) = client.cq().next_wc().unwrap() {
                    break wc;
                }
                std::thread::yield_now();
            };
            assert_eq!((wc.wr_id(), wc.is_success()), (u64::from(k), true), "{wc:?}");
        }
        landed.store(true, Ordering::Release);
    });
    client.disconnect().unwrap();
}

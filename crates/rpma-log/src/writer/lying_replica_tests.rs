//! A writer against a peer that answers the takeover like a replica but lies about its region:
//! a corrupt header, another log id in the header than in its reply, a region too small for
//! the ring it announces. Each is a clear error naming the replica, never a panic or a read out
//! of bounds.

use std::thread::JoinHandle;
use std::time::Duration;

use rpma::mock::{Conn, Device, Ep, MockFabric, MrLocal, Peer};
use rpma::{ContextType, Memory, PeerCfg};

use crate::format::{self, Status};
use crate::replica::USAGE;
use crate::{Log, LogError, LogOptions, Quorum, ReplicaAddr};

const LOG_ID: u64 = 0x1E_0036;
const WRITER: &str = "10.0.0.1";
const REPLICA: &str = "10.0.1.1";
const PORT: &str = "7500";

fn fabric() -> MockFabric {
    MockFabric::builder().device("writer", &[WRITER]).device("r0", &[REPLICA]).build()
}

fn peer(fabric: &MockFabric, ip: &str) -> Peer {
    Peer::new(&Device::lookup(fabric, ip, ContextType::Local).expect("device")).expect("peer")
}

/// A peer at the replica's address that accepts one writer with an "accepted" reply announcing
/// a ring of `capacity` bytes and a region of `region_len` bytes whose header is `header`.
fn liar(fabric: &MockFabric, header: &[u8], region_len: usize, capacity: u64) -> JoinHandle<(Conn, MrLocal)> {
    let p = peer(fabric, REPLICA);
    let memory = Memory::page_aligned(region_len).expect("memory");
    memory.volatile().write(0, header).expect("header");
    let mr = p.reg_mr(memory, USAGE).expect("register");
    let ep = Ep::listen(&p, REPLICA, PORT).expect("listen");
    std::thread::spawn(move || {
        let req = ep.next_conn_req(None).expect("a request");
        let hello = format::decode_hello(req.private_data()).expect("a writer's hello");
        let mut rest = mr.descriptor().to_vec();
        rest.extend_from_slice(&PeerCfg::new().with_direct_write_to_pmem(true).descriptor());
        let reply = format::encode_reply(Status::Accepted, hello.log_id, hello.epoch, capacity, &rest);
        let conn = req.connect(Some(&reply)).expect("accept");
        // Until the writer closes it.
        let _ = conn.next_event_timeout(Duration::from_secs(5));
        (conn, mr)
    })
}

/// A valid header of log `log_id` with a ring of `capacity` bytes.
fn header(log_id: u64, capacity: u64) -> Vec<u8> {
    let mut b = vec![0u8; format::HEADER];
    b[..64].copy_from_slice(&format::static_block(log_id, capacity));
    b
}

fn open(fabric: &MockFabric) -> crate::Result<Log<MockFabric>> {
    let opts = LogOptions::new(LOG_ID).quorum(Quorum::All).timeout(Duration::from_secs(2));
    Log::open(&peer(fabric, WRITER), &[ReplicaAddr::new(REPLICA, PORT)], opts).map(|(log, _)| log)
}

#[test]
fn a_replica_whose_header_is_corrupt_is_a_corrupt_header_error() {
    let fabric = fabric();
    let mut h = header(LOG_ID, 1024);
    h[30] ^= 0x08; // the static block fails its checksum
    let liar = liar(&fabric, &h, format::HEADER + 1024, 1024);
    match open(&fabric) {
        Err(LogError::CorruptHeader { replica, detail }) => {
            assert_eq!(replica, format!("{REPLICA}:{PORT}"));
            assert!(detail.contains("static block"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    drop(liar.join().expect("the fake replica"));
}

#[test]
fn a_replica_whose_header_holds_another_log_than_its_reply_says_is_a_wrong_log_id_error() {
    let fabric = fabric();
    let liar = liar(&fabric, &header(LOG_ID + 1, 1024), format::HEADER + 1024, 1024);
    match open(&fabric) {
        Err(LogError::WrongLogId { expected, found, .. }) => assert_eq!((expected, found), (LOG_ID, LOG_ID + 1)),
        other => panic!("{other:?}"),
    }
    drop(liar.join().expect("the fake replica"));
}

#[test]
fn a_replica_that_answers_with_a_region_too_small_for_its_ring_is_a_capacity_error() {
    let fabric = fabric();
    // It announces a ring of 64 KiB on a region of one page.
    let liar = liar(&fabric, &header(LOG_ID, 1024), 4096, 64 * 1024);
    match open(&fabric) {
        Err(LogError::Capacity { replica, detail }) => {
            assert_eq!(replica, format!("{REPLICA}:{PORT}"));
            assert!(detail.contains("cannot hold a ring of 65536"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    drop(liar.join().expect("the fake replica"));
}

#[test]
fn a_replica_whose_header_disagrees_with_its_reply_on_the_ring_is_a_capacity_error() {
    let fabric = fabric();
    // Its reply says 2048 bytes of ring (which the region holds), its header 1024.
    let liar = liar(&fabric, &header(LOG_ID, 1024), format::HEADER + 2048, 2048);
    match open(&fabric) {
        Err(LogError::Capacity { detail, .. }) => assert!(detail.contains("1024"), "{detail}"),
        other => panic!("{other:?}"),
    }
    drop(liar.join().expect("the fake replica"));
}

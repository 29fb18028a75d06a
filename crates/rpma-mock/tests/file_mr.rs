//! `MrBuffer::File` on the mock: the region starts with the file's bytes, a persistent flush
//! writes the flushed range back at once, deregistration writes the whole region back, and
//! nothing else reaches the file.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use rpma_core::{
    CompletionFlags, Conn, ConnEvent, ConnReq, ContextType, Device, Ep, ErrorKind, FlushType, MrBuffer, MrLocal,
    MrRemote, Peer, PeerCfg, Usage, WcStatus,
};
use rpma_mock::MockFabric;

/// A fresh path in a fresh directory under the system's temporary directory.
fn temp_path(name: &str) -> (PathBuf, PathBuf) {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "rpma-mock-file-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    (dir.join(name), dir)
}

struct Pair {
    _ep: Ep<MockFabric>,
    client: Conn<MockFabric>,
    _server: Conn<MockFabric>,
    peer: Peer<MockFabric>,
}

/// A connection from a client to a server on `fabric`; the server's region `target` is handed
/// out with the accept.
fn pair(fabric: &MockFabric, server_peer: &Peer<MockFabric>, target: &MrLocal<MockFabric>) -> Pair {
    let ep = Ep::listen(server_peer, "127.0.0.1", "7300").unwrap();
    let peer = Peer::new(&Device::lookup(fabric, "127.0.0.1", ContextType::Remote).unwrap()).unwrap();
    let client = ConnReq::new(&peer, "127.0.0.1", "7300", None).unwrap().connect(None).unwrap();
    let server = ep.next_conn_req(None).unwrap().connect(Some(&target.descriptor())).unwrap();
    assert_eq!(client.next_event().unwrap(), ConnEvent::Established);
    assert_eq!(server.next_event().unwrap(), ConnEvent::Established);
    let pcfg = PeerCfg::new();
    pcfg.set_direct_write_to_pmem(true);
    client.apply_remote_peer_cfg(&pcfg);
    Pair { _ep: ep, client, _server: server, peer }
}

fn file_at(path: &PathBuf, offset: usize, len: usize) -> Vec<u8> {
    std::fs::read(path).unwrap()[offset..offset + len].to_vec()
}

fn write_and_complete(p: &Pair, remote: &MrRemote, offset: usize, bytes: &[u8]) {
    let src = p.peer.alloc_mr(bytes.len(), Usage::WRITE_SRC).unwrap();
    src.write(0, bytes).unwrap();
    p.client.write(Some(remote), offset, Some(&src), 0, bytes.len(), CompletionFlags::ALWAYS, 1).unwrap();
    let wc = p.client.cq().get_wc1().unwrap();
    assert_eq!(wc.status, WcStatus::Success);
}

fn flush(p: &Pair, remote: &MrRemote, offset: usize, len: usize, t: FlushType) {
    p.client.flush(remote, offset, len, t, CompletionFlags::ALWAYS, 2).unwrap();
    let wc = p.client.cq().get_wc1().unwrap();
    assert_eq!((wc.status, wc.wr_id), (WcStatus::Success, 2));
}

#[test]
fn a_new_file_is_created_zeroed_and_an_existing_one_extended_and_loaded() {
    let fabric = MockFabric::new();
    let peer = Peer::new(&Device::lookup(&fabric, "127.0.0.1", ContextType::Local).unwrap()).unwrap();
    let (path, dir) = temp_path("new");
    let mr = peer.reg_mr(MrBuffer::File { path: path.clone(), len: 4096 }, Usage::READ_SRC).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 4096);
    assert_eq!(mr.to_vec(0, 4096).unwrap(), vec![0u8; 4096]);
    drop(mr);
    let old = dir.join("old");
    std::fs::write(&old, b"previous content").unwrap();
    let mr = peer.reg_mr(MrBuffer::File { path: old.clone(), len: 64 }, Usage::READ_SRC).unwrap();
    assert_eq!(std::fs::metadata(&old).unwrap().len(), 64);
    assert_eq!(mr.to_vec(0, 16).unwrap(), b"previous content");
    assert_eq!(mr.to_vec(16, 48).unwrap(), vec![0u8; 48]);
    // A longer file keeps its length; only the first `len` bytes are registered.
    let long = dir.join("long");
    std::fs::write(&long, vec![7u8; 100]).unwrap();
    let mr = peer.reg_mr(MrBuffer::File { path: long.clone(), len: 10 }, Usage::READ_SRC).unwrap();
    assert_eq!(mr.to_vec(0, 10).unwrap(), vec![7u8; 10]);
    mr.write(0, b"0123456789").unwrap();
    mr.dereg().unwrap();
    let after = std::fs::read(&long).unwrap();
    assert_eq!((after.len(), &after[..10], after[10]), (100, &b"0123456789"[..], 7));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_file_that_cannot_be_opened_fails_registration() {
    let fabric = MockFabric::new();
    let peer = Peer::new(&Device::lookup(&fabric, "127.0.0.1", ContextType::Local).unwrap()).unwrap();
    let (_, dir) = temp_path("x");
    let e = peer.reg_mr(MrBuffer::File { path: dir.clone(), len: 64 }, Usage::READ_SRC).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Provider);
    let e = peer.reg_mr(MrBuffer::File { path: dir.join("no/such/dir/f"), len: 64 }, Usage::READ_SRC).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Provider);
    assert_eq!(fabric.live().mrs, 0, "a failed registration leaks nothing: {:?}", fabric.live());
    std::fs::remove_dir_all(dir).unwrap();
}

fn persistent_flush_writes_back(native: bool) {
    let fabric = MockFabric::builder().native(native, false).build();
    let server_peer = Peer::new(&Device::lookup(&fabric, "127.0.0.1", ContextType::Local).unwrap()).unwrap();
    let (path, dir) = temp_path("pmem");
    let usage = Usage::WRITE_DST | Usage::FLUSH_TYPE_PERSISTENT | Usage::FLUSH_TYPE_VISIBILITY;
    let target = server_peer.reg_mr(MrBuffer::File { path: path.clone(), len: 4096 }, usage).unwrap();
    let p = pair(&fabric, &server_peer, &target);
    let remote = MrRemote::from_descriptor(p.client.private_data()).unwrap();

    // A write alone is in the region, not in the file.
    write_and_complete(&p, &remote, 100, b"durable record");
    assert_eq!(target.to_vec(100, 14).unwrap(), b"durable record");
    assert_eq!(file_at(&path, 100, 14), vec![0u8; 14]);
    // A persistent flush covering it puts it in the file before it completes.
    flush(&p, &remote, 100, 14, FlushType::Persistent);
    assert_eq!(file_at(&path, 100, 14), b"durable record");

    // A visibility flush does not write the file back.
    write_and_complete(&p, &remote, 200, b"visible only");
    flush(&p, &remote, 200, 12, FlushType::Visibility);
    assert_eq!(file_at(&path, 200, 12), vec![0u8; 12]);
    // A persistent flush writes back only the range it covers.
    write_and_complete(&p, &remote, 300, b"AAAABBBB");
    flush(&p, &remote, 300, 4, FlushType::Persistent);
    assert_eq!(file_at(&path, 300, 8), b"AAAA\0\0\0\0");

    // Deregistration writes everything back.
    target.dereg().unwrap();
    assert_eq!(file_at(&path, 200, 12), b"visible only");
    assert_eq!(file_at(&path, 300, 8), b"AAAABBBB");
    assert_eq!(file_at(&path, 100, 14), b"durable record");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn persistent_flush_writes_the_range_back_emulated() {
    persistent_flush_writes_back(false);
}

#[test]
fn persistent_flush_writes_the_range_back_native() {
    persistent_flush_writes_back(true);
}

#[test]
fn dropping_a_file_region_writes_it_back() {
    let fabric = MockFabric::new();
    let peer = Peer::new(&Device::lookup(&fabric, "127.0.0.1", ContextType::Local).unwrap()).unwrap();
    let (path, dir) = temp_path("drop");
    let mr = peer.reg_mr(MrBuffer::File { path: path.clone(), len: 128 }, Usage::WRITE_DST).unwrap();
    mr.write(5, b"kept").unwrap();
    assert_eq!(file_at(&path, 5, 4), vec![0u8; 4]);
    drop(mr);
    assert_eq!(file_at(&path, 5, 4), b"kept");
    std::fs::remove_dir_all(dir).unwrap();
}

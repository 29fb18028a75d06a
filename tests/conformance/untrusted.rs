//! Untrusted remote peer: the peer lies — a descriptor with a wrong rkey, an address
//! or a length past its region, a usage it did not grant, oversized private data, a message
//! larger than the posted receive. The local side must get an error completion or a clear
//! error, and no byte outside what the operation may touch changes: every case checks whole
//! regions, including neighbour regions registered right before and after the target, and the
//! bytes around a posted receive buffer.
//!
//! (ops.rs covers the basic wrong-rkey read/write, a size claim on write and a `WRITE_DST` claim
//! on write; these cases cover the remaining lies and the neighbours.)

use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpma::descriptor::MrDescriptor;
use rpma::transport::{CmBackend, ListenerBackend, MrBackend, QueueConfig};
use rpma::{ConnEvent, ConnReq, ContextType, Ep, ErrorKind, FlushType, MrLocal, MrRemote, Transport, Usage, WcStatus};

use super::harness::{mr, next_wc, pair, peer, remote, Backend, Case, Pair};
use crate::cases;

pub fn cases<B: Backend>() -> Vec<Case<B>> {
    cases![
        untrusted__read_descriptor_longer_than_region,
        untrusted__read_address_of_neighbour_with_target_rkey,
        untrusted__read_usage_not_granted,
        untrusted__write_address_of_neighbour_with_target_rkey,
        untrusted__write_rkey_of_neighbour_with_target_address,
        untrusted__write_with_imm_wrong_rkey,
        untrusted__atomic_write_past_region_end,
        untrusted__atomic_write_usage_not_granted,
        untrusted__flush_past_region_end,
        untrusted__descriptor_range_wraps_address_space,
        untrusted__send_larger_than_posted_receive,
        untrusted__send_with_imm_larger_than_posted_receive,
        untrusted__oversized_private_data_on_connect,
        untrusted__oversized_private_data_on_accept,
        untrusted__raw_region_lends_no_plain_bytes_a_peer_may_reach,
    ]
}

const SZ: usize = 4096;
/// Filler of the server's regions.
const SFILL: u8 = 0xA5;
/// Filler of the client's region.
const CFILL: u8 = 0x3C;

/// A pair with three server regions registered one after the other (`before`, `target`,
/// `after`, all `READ_SRC | WRITE_DST | FLUSH_TYPE_VISIBILITY`) and a client region, each
/// filled with a known byte, plus the client's honest view of `target`.
struct Rig<T: Transport> {
    p: Pair<T>,
    before: MrLocal<T>,
    target: MrLocal<T>,
    after: MrLocal<T>,
    local: MrLocal<T>,
    r: MrRemote,
}

fn rig<B: Backend>(b: &B, t: &B::T) -> Rig<B::T> {
    let p = pair(b, t);
    let u = Usage::READ_SRC | Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY;
    let [before, target, after] = [(); 3].map(|()| mr(&p.speer, SZ, u));
    for m in [&before, &target, &after] {
        m.write(0, &[SFILL; SZ]).unwrap();
    }
    let local = mr(&p.cpeer, SZ, Usage::READ_DST | Usage::WRITE_SRC);
    local.write(0, &[CFILL; SZ]).unwrap();
    let r = remote(&target);
    Rig { p, before, target, after, local, r }
}

impl<T: Transport> Rig<T> {
    /// Every byte of every region is as filled.
    #[track_caller]
    fn assert_untouched(&self) {
        for (name, m) in [("before", &self.before), ("target", &self.target), ("after", &self.after)] {
            assert!(m.to_vec(0, SZ).unwrap().iter().all(|b| *b == SFILL), "server region {name} was modified");
        }
        assert!(self.local.to_vec(0, SZ).unwrap().iter().all(|b| *b == CFILL), "client region was modified");
    }
}

fn desc<T: Transport>(m: &MrLocal<T>) -> MrDescriptor {
    MrDescriptor::decode(&m.descriptor()).unwrap()
}

fn lie(d: MrDescriptor) -> MrRemote {
    MrRemote::from_descriptor(&d.encode()).unwrap()
}

/// The post was refused with a clear error, or it was accepted and completed with an error.
#[track_caller]
fn assert_refused<T: Transport>(p: &Pair<T>, posted: rpma::Result<()>, wr_id: u64) {
    match posted {
        Err(e) => assert!(matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::Unsupported), "unclear error: {e}"),
        Ok(()) => {
            let wc = next_wc(p.client.cq());
            assert_eq!(wc.wr_id(), wr_id, "{wc:?}");
            assert_ne!(wc.status(), WcStatus::Success, "a lying descriptor was honoured: {wc:?}");
        }
    }
}

/// The descriptor claims three times the registered size; a read straddling the real end.
fn untrusted__read_descriptor_longer_than_region<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig(b, &t);
    let big = lie(MrDescriptor { len: 3 * SZ as u64, ..desc(&x.target) });
    let r = x.p.client.read(x.local.slice(0..64), big.at(SZ - 8)).context(1).post();
    assert_refused(&x.p, r, 1);
    x.assert_untouched();
}

/// The address of the region after the target, with the target's rkey: the key does not
/// cover that address.
fn untrusted__read_address_of_neighbour_with_target_rkey<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig(b, &t);
    let liar = lie(MrDescriptor { addr: desc(&x.after).addr, ..desc(&x.target) });
    let r = x.p.client.read(x.local.slice(0..64), liar.at(0)).context(2).post();
    assert_refused(&x.p, r, 2);
    x.assert_untouched();
}

/// A region registered `WRITE_DST` only, whose descriptor claims `READ_SRC`.
fn untrusted__read_usage_not_granted<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig(b, &t);
    let wo = mr(&x.p.speer, SZ, Usage::WRITE_DST);
    wo.write(0, &[SFILL; SZ]).unwrap();
    let liar = lie(MrDescriptor { usage: (Usage::READ_SRC | Usage::WRITE_DST).bits() as u8, ..desc(&wo) });
    let r = x.p.client.read(x.local.slice(0..64), liar.at(0)).context(3).post();
    assert_refused(&x.p, r, 3);
    x.assert_untouched();
    assert!(wo.to_vec(0, SZ).unwrap().iter().all(|b| *b == SFILL));
}

fn untrusted__write_address_of_neighbour_with_target_rkey<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig(b, &t);
    let liar = lie(MrDescriptor { addr: desc(&x.before).addr, ..desc(&x.target) });
    let r = x.p.client.write(liar.at(0), x.local.slice(0..256)).context(4).post();
    assert_refused(&x.p, r, 4);
    x.assert_untouched();
}

/// The rkey of the region after the target (valid, writable) with the target's address.
fn untrusted__write_rkey_of_neighbour_with_target_address<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig(b, &t);
    let liar = lie(MrDescriptor { rkey: desc(&x.after).rkey, ..desc(&x.target) });
    let r = x.p.client.write(liar.at(0), x.local.slice(0..256)).context(5).post();
    assert_refused(&x.p, r, 5);
    x.assert_untouched();
}

fn untrusted__write_with_imm_wrong_rkey<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig(b, &t);
    let rbuf = mr(&x.p.speer, SZ, Usage::RECV);
    rbuf.write(0, &[SFILL; SZ]).unwrap();
    x.p.server.recv(rbuf.slice(..SZ)).context(60).post().unwrap();
    let liar = lie(MrDescriptor { rkey: desc(&x.target).rkey ^ 0x0080_0000, ..desc(&x.target) });
    let r = x.p.client.write(liar.at(0), x.local.slice(0..64)).imm(7).context(6).post();
    assert_refused(&x.p, r, 6);
    x.assert_untouched();
    assert!(rbuf.to_vec(0, SZ).unwrap().iter().all(|b| *b == SFILL), "receive buffer modified");
}

/// The descriptor claims twice the size; an atomic write just past the real end.
fn untrusted__atomic_write_past_region_end<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig(b, &t);
    let big = lie(MrDescriptor { len: 2 * SZ as u64, ..desc(&x.target) });
    let r = x.p.client.atomic_write(big.at(SZ), [0x11; 8]).context(7).post();
    assert_refused(&x.p, r, 7);
    x.assert_untouched();
}

/// A region registered `READ_SRC` only, whose descriptor claims `WRITE_DST`.
fn untrusted__atomic_write_usage_not_granted<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig(b, &t);
    let ro = mr(&x.p.speer, SZ, Usage::READ_SRC);
    ro.write(0, &[SFILL; SZ]).unwrap();
    let liar = lie(MrDescriptor { usage: (Usage::READ_SRC | Usage::WRITE_DST).bits() as u8, ..desc(&ro) });
    let r = x.p.client.atomic_write(liar.at(64), [0x22; 8]).context(8).post();
    assert_refused(&x.p, r, 8);
    x.assert_untouched();
    assert!(ro.to_vec(0, SZ).unwrap().iter().all(|b| *b == SFILL), "read-only region modified");
}

/// The descriptor claims twice the size; a flush of a range wholly past the real end.
fn untrusted__flush_past_region_end<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig(b, &t);
    let big = lie(MrDescriptor { len: 2 * SZ as u64, ..desc(&x.target) });
    let r = x.p.client.flush(big.slice(SZ + 256..SZ + 256 + 64), FlushType::Visibility).context(9).post();
    assert_refused(&x.p, r, 9);
    x.assert_untouched();
}

/// A descriptor whose range wraps around the end of the address space.
fn untrusted__descriptor_range_wraps_address_space<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig(b, &t);
    let wrap = lie(MrDescriptor { addr: u64::MAX - 15, len: u64::MAX, ..desc(&x.target) });
    let r = x.p.client.write(wrap.at(0), x.local.slice(0..64)).context(10).post();
    assert_refused(&x.p, r, 10);
    x.assert_untouched();
    let t2 = b.transport();
    let y = rig(b, &t2);
    let wrap = lie(MrDescriptor { addr: u64::MAX - 15, len: u64::MAX, ..desc(&y.target) });
    let r = y.p.client.read(y.local.slice(0..64), wrap.at(8)).context(11).post();
    assert_refused(&y.p, r, 11);
    y.assert_untouched();
}

/// The peer sends more than the receive buffer holds: both sides get an error completion and no
/// byte outside the posted buffer changes (inside it the content is undefined, as on hardware).
fn oversized_message<B: Backend>(b: &B, imm: Option<u32>) {
    let t = b.transport();
    let p = pair(b, &t);
    let src = mr(&p.cpeer, SZ, Usage::SEND);
    src.write(0, &[0x77; SZ]).unwrap();
    let dst = mr(&p.speer, SZ, Usage::RECV);
    dst.write(0, &[SFILL; SZ]).unwrap();
    let (off, len) = (1024, 64);
    p.server.recv(dst.slice(off..off + len)).context(50).post().unwrap();
    match imm {
        None => p.client.send(src.slice(0..512)).context(1).post().unwrap(),
        Some(i) => p.client.send(src.slice(0..512)).imm(i).context(1).post().unwrap(),
    }
    let wc = next_wc(p.server.cq());
    assert_eq!(wc.wr_id(), 50, "{wc:?}");
    assert_ne!(wc.status(), WcStatus::Success, "{wc:?}");
    let wc = next_wc(p.client.cq());
    assert_eq!(wc.wr_id(), 1, "{wc:?}");
    assert_ne!(wc.status(), WcStatus::Success, "{wc:?}");
    let all = dst.to_vec(0, SZ).unwrap();
    assert!(all[..off].iter().all(|b| *b == SFILL), "bytes before the receive buffer modified");
    assert!(all[off + len..].iter().all(|b| *b == SFILL), "bytes after the receive buffer modified");
}

fn untrusted__send_larger_than_posted_receive<B: Backend>(b: &B) {
    oversized_message(b, None);
}

fn untrusted__send_with_imm_larger_than_posted_receive<B: Backend>(b: &B) {
    oversized_message(b, Some(0xBAD));
}

fn queue_config<'a, T: Transport>() -> QueueConfig<'a, T> {
    QueueConfig {
        timeout_ms: i32::try_from(rpma::ConnCfg::<T>::DEFAULT_TIMEOUT.as_millis())
            .expect("the default timeout fits i32 ms"),
        cq_size: 10,
        rcq_size: 0,
        sq_size: 10,
        rq_size: 10,
        max_sge: 1,
        max_inline: 0,
        retry_count: rpma::ConnCfg::<T>::DEFAULT_RETRY_COUNT,
        ack_timeout: None,
        shared_channel: false,
        srq: None,
    }
}

/// A protection domain made straight from the transport: a lying peer does not go through
/// rpma-core's validation.
fn raw_pd<B: Backend>(b: &B, t: &B::T) -> Arc<<B::T as Transport>::Pd> {
    let dev = t.lookup_device(&b.addr(), ContextType::Local).expect("lookup_device");
    let caps = t.capabilities(&dev).expect("capabilities");
    Arc::new(t.alloc_pd(&dev, &caps).expect("alloc_pd"))
}

fn set_nonblock(fd: BorrowedFd<'_>) {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let fl = OFlag::from_bits_retain(fcntl(fd.as_raw_fd(), FcntlArg::F_GETFL).expect("F_GETFL"));
    fcntl(fd.as_raw_fd(), FcntlArg::F_SETFL(fl | OFlag::O_NONBLOCK)).expect("F_SETFL");
}

/// A client bypassing validation connects with 300 bytes of private data (RDMA CM carries at
/// most 56): the transport refuses it, or the server sees no more than the limit.
fn untrusted__oversized_private_data_on_connect<B: Backend>(b: &B) {
    let t = b.transport();
    let caps = b.caps();
    let speer = peer(b, &t);
    let port = b.port();
    let ep = Ep::listen(&speer, &b.addr(), &port).expect("listen");
    let pd = raw_pd(b, &t);
    let mut qp = t.connect_request(&pd, &b.addr(), &port, &queue_config()).expect("connect_request");
    match qp.connect(Some(&[0xAB; 300])) {
        Err(e) => {
            assert!(matches!(e.kind(), ErrorKind::Provider | ErrorKind::InvalidInput), "unclear error: {e}");
            set_nonblock(ep.fd());
            std::thread::sleep(Duration::from_millis(50));
            let r = ep.next_conn_req(None);
            assert_eq!(r.expect_err("a refused connect reached the server").kind(), ErrorKind::NoEvent);
        }
        Ok(()) => {
            let req = ep.next_conn_req(None).expect("next_conn_req");
            let got = req.private_data();
            assert!(got.len() <= caps.max_private_data_connect, "server got {} bytes of private data", got.len());
        }
    }
    let _ = qp.reject();
}

/// A server bypassing validation accepts with 300 bytes of private data (RDMA CM over RoCE
/// carries at most 196): the transport refuses it, or the client sees no more than the limit.
fn untrusted__oversized_private_data_on_accept<B: Backend>(b: &B) {
    let t = b.transport();
    let caps = b.caps();
    let cpeer = peer(b, &t);
    let port = b.port();
    let pd = raw_pd(b, &t);
    let listener = t.listen(&pd, &b.addr(), &port).expect("listen");
    let client = ConnReq::new(&cpeer, &b.addr(), &port, None).expect("conn_req_new").connect(None).expect("connect");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut sqp = loop {
        match listener.next_request(&queue_config()) {
            Ok(q) => break q,
            Err(e) if e.kind() == ErrorKind::NoEvent && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("next_request: {e}"),
        }
    };
    match sqp.connect(Some(&[0xCD; 300])) {
        Err(e) => {
            assert!(matches!(e.kind(), ErrorKind::Provider | ErrorKind::InvalidInput), "unclear error: {e}");
            let _ = sqp.reject();
            // The client is refused (or its attempt ends); it never becomes ESTABLISHED.
            let ev = client.next_event().expect("client event");
            assert_ne!(ev, ConnEvent::Established);
        }
        Ok(()) => {
            assert_eq!(client.next_event().expect("client event"), ConnEvent::Established);
            let got = client.private_data();
            assert!(got.len() <= caps.max_private_data_accept, "client got {} bytes of private data", got.len());
            let _ = sqp.destroy();
        }
    }
    let _ = listener.shutdown();
}

/// A region registered straight on the transport (no rpma-core check in between) lends its
/// `Memory`, whose plain slices are references, only while no peer can reach the bytes (rule
/// M3): the backend itself refuses for every usage that grants remote access.
fn untrusted__raw_region_lends_no_plain_bytes_a_peer_may_reach<B: Backend>(b: &B) {
    let t = b.transport();
    let pd = raw_pd(b, &t);
    let remote = [Usage::READ_SRC, Usage::WRITE_DST, Usage::FLUSH_TYPE_VISIBILITY, Usage::FLUSH_TYPE_PERSISTENT];
    for usage in remote {
        let mut mr = t.reg_mr(&pd, rpma::Memory::zeroed(SZ).expect("memory"), usage).expect("reg_mr");
        assert!(mr.memory_mut().is_none(), "{usage:?} grants remote access, yet the backend lent its memory");
        drop(mr);
    }
    // iWARP registers a read's and a receive's destination for remote write.
    let local: &[Usage] =
        if b.caps().iwarp { &[Usage::WRITE_SRC] } else { &[Usage::WRITE_SRC, Usage::RECV, Usage::READ_DST] };
    for &usage in local {
        let mut mr = t.reg_mr(&pd, rpma::Memory::zeroed(SZ).expect("memory"), usage).expect("reg_mr");
        let mem = mr.memory_mut().unwrap_or_else(|| panic!("{usage:?} is local only, yet the backend kept its memory"));
        mem.as_mut_slice()[0] = 1;
    }
}

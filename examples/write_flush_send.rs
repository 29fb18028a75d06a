//! A client writes into a server's memory, flushes it to persistence, reads it back, and the
//! two exchange a message, on the in-memory mock fabric (server and client are threads).
//!
//! Run with `cargo run --example write_flush_send`.

use std::thread;

use rpma::mock::MockFabric;
use rpma::{CompletionFlags, ConnEvent, ContextType, FlushType, MrRemote, PeerCfg, Usage, WcOpcode, WcStatus};

// The mock's API types: the top-level aliases (`rpma::Peer`, ...) follow the default transport,
// which is the verbs backend when feature `verbs` is on.
type Conn = rpma::generic::Conn<MockFabric>;
type ConnCfg = rpma::generic::ConnCfg<MockFabric>;
type ConnReq = rpma::generic::ConnReq<MockFabric>;
type Device = rpma::generic::Device<MockFabric>;
type Ep = rpma::generic::Ep<MockFabric>;
type Peer = rpma::generic::Peer<MockFabric>;

const ADDR: &str = "127.0.0.1";
const PORT: &str = "7204";
const LEN: usize = 4096;

fn main() -> Result<(), rpma::Error> {
    let fabric = MockFabric::new();
    let dev = Device::lookup(&fabric, ADDR, ContextType::Local)?;
    let server_peer = Peer::new(&dev)?;
    let ep = Ep::listen(&server_peer, ADDR, PORT)?;

    let server = thread::spawn(move || -> Result<Vec<u8>, rpma::Error> {
        // The server's memory: written and flushed by the client, then read back by it.
        let usage = Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_PERSISTENT | Usage::FLUSH_TYPE_VISIBILITY;
        let pmem = server_peer.alloc_mr(LEN, usage)?;
        let msg = server_peer.alloc_mr(64, Usage::RECV | Usage::SEND)?;
        // Private data: MR descriptor + peer-config descriptor (direct write to PMem).
        let pcfg = PeerCfg::new();
        pcfg.set_direct_write_to_pmem(true);
        let mut pdata = pmem.descriptor().to_vec();
        pdata.extend_from_slice(&pcfg.descriptor());

        let req = ep.next_conn_req(None)?;
        req.recv(&msg, 0, 64, 1)?;
        let conn = req.connect(Some(&pdata))?;
        assert_eq!(conn.next_event()?, ConnEvent::Established);

        // Wait for the client's "done" message.
        let wc = loop {
            match conn.cq().get_wc1() {
                Ok(wc) => break wc,
                Err(e) if e.kind() == rpma::ErrorKind::NoCompletion => thread::yield_now(),
                Err(e) => return Err(e),
            }
        };
        assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::Recv));
        let received = msg.to_vec(0, wc.byte_len as usize)?;
        println!("server: received {:?}", String::from_utf8_lossy(&received));
        msg.write(0, b"bye")?;
        conn.send(Some(&msg), 0, 3, CompletionFlags::ALWAYS, 2)?;
        assert_eq!(conn.next_event()?, ConnEvent::Closed);
        conn.delete()?;
        pmem.to_vec(0, 13)
    });

    let peer = Peer::new(&Device::lookup(&fabric, ADDR, ContextType::Remote)?)?;
    let src = peer.alloc_mr(LEN, Usage::WRITE_SRC | Usage::READ_DST | Usage::SEND | Usage::RECV)?;
    let cfg = ConnCfg::new();
    cfg.set_sq_size(16).set_cq_size(16);
    let req = ConnReq::new(&peer, ADDR, PORT, Some(&cfg))?;
    let conn = req.connect(None)?;
    assert_eq!(conn.next_event()?, ConnEvent::Established);
    let pdata = conn.private_data();
    let remote = MrRemote::from_descriptor(&pdata[..rpma::MR_DESCRIPTOR_SIZE])?;
    conn.apply_remote_peer_cfg(&PeerCfg::from_descriptor(&pdata[rpma::MR_DESCRIPTOR_SIZE..])?);

    src.write(0, b"Hello, world!")?;
    conn.write(Some(&remote), 0, Some(&src), 0, 13, CompletionFlags::ON_ERROR, 10)?;
    conn.flush(&remote, 0, 13, FlushType::Persistent, CompletionFlags::ALWAYS, 11)?;
    let wc = wait(&conn)?;
    println!("client: wrote and flushed 13 bytes (completion {:?} for op {})", wc.opcode, wc.wr_id);
    conn.read(Some(&src), 100, Some(&remote), 0, 13, CompletionFlags::ALWAYS, 12)?;
    wait(&conn)?;
    println!("client: read back {:?}", String::from_utf8_lossy(&src.to_vec(100, 13)?));

    src.write(200, b"done")?;
    conn.recv(Some(&src), 300, 64, 13)?;
    conn.send(Some(&src), 200, 4, CompletionFlags::ALWAYS, 14)?;
    let mut got_reply = false;
    while !got_reply {
        let wc = wait(&conn)?;
        if wc.opcode == WcOpcode::Recv {
            println!("client: received {:?}", String::from_utf8_lossy(&src.to_vec(300, wc.byte_len as usize)?));
            got_reply = true;
        }
    }
    conn.disconnect()?;
    assert_eq!(conn.next_event()?, ConnEvent::Closed);
    conn.delete()?;
    let persisted = server.join().expect("server thread")?;
    println!("server memory now holds {:?}", String::from_utf8_lossy(&persisted));
    Ok(())
}

fn wait(conn: &Conn) -> Result<rpma::Wc, rpma::Error> {
    // Poll first; wait for a completion event only when the CQ is empty (the CQ is armed, so
    // a completion arriving in between still raises an event).
    loop {
        match conn.cq().get_wc1() {
            Ok(wc) if wc.status == WcStatus::Success => return Ok(wc),
            Ok(wc) => panic!("operation {} failed: {:?}", wc.wr_id, wc.status),
            Err(e) if e.kind() == rpma::ErrorKind::NoCompletion => conn.cq().wait()?,
            Err(e) => return Err(e),
        }
    }
}

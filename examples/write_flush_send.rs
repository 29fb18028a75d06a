//! A client writes into a server's memory, flushes it to persistence, reads it back, and the
//! two exchange a message, on the in-memory mock fabric (server and client are threads).
//!
//! Run with `cargo run -p rpma-examples --example write_flush_send`.

use std::thread;

use rpma::descriptor::Offer;
use rpma::mock::{Conn, ConnCfg, ConnReq, Device, Ep, MockFabric, Peer};
use rpma::{CompletionFlags, ConnEvent, ContextType, FlushType, PeerCfg, Usage, WcOpcode, WcStatus};

const ADDR: &str = "127.0.0.1";
const PORT: &str = "7204";
const LEN: usize = 4096;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let fabric = MockFabric::new();
    let dev = Device::lookup(&fabric, ADDR, ContextType::Local)?;
    let server_peer = Peer::new(&dev)?;
    let ep = Ep::listen(&server_peer, ADDR, PORT)?;

    let server = thread::spawn(move || -> Result<Vec<u8>, rpma::Error> {
        // The server's memory: written and flushed by the client, then read back by it.
        let usage = Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_PERSISTENT | Usage::FLUSH_TYPE_VISIBILITY;
        let pmem = server_peer.alloc_mr(LEN, usage)?;
        let msg = server_peer.alloc_mr(64, Usage::RECV | Usage::SEND)?;
        // Private data: the region and the peer configuration (direct write to PMem).
        let pdata = Offer::encode(&pmem, &PeerCfg::new().with_direct_write_to_pmem(true));

        let req = ep.next_conn_req(None)?;
        req.recv(msg.slice(0..64)).context(1).post()?;
        let conn = req.connect(Some(&pdata))?;
        assert_eq!(conn.next_event()?, ConnEvent::Established);

        // Wait for the client's "done" message.
        let wc = loop {
            match conn.cq().next_wc()? {
                Some(wc) => break wc,
                None => thread::yield_now(),
            }
        };
        assert_eq!((wc.status(), wc.opcode()), (WcStatus::Success, WcOpcode::Recv));
        let received = msg.to_vec(0, wc.byte_len() as usize)?;
        println!("server: received {:?}", String::from_utf8_lossy(&received));
        msg.write(0, b"bye")?;
        conn.send(msg.slice(0..3)).context(2).post()?;
        assert_eq!(conn.next_event()?, ConnEvent::Closed);
        conn.delete()?;
        pmem.to_vec(0, 13)
    });

    let peer = Peer::new(&Device::lookup(&fabric, ADDR, ContextType::Remote)?)?;
    // The client's memory: the source of the write, the destination of the read, and its
    // message buffers. No remote peer can reach it, so it is filled in place (zero copy).
    let mut src = peer.alloc_mr(LEN, Usage::WRITE_SRC | Usage::READ_DST | Usage::SEND | Usage::RECV)?;
    let cfg = ConnCfg::new().with_sq_size(16).with_cq_size(16);
    let req = ConnReq::new(&peer, ADDR, PORT, Some(&cfg))?;
    let conn = req.connect(None)?;
    assert_eq!(conn.next_event()?, ConnEvent::Established);
    // The server's region, with its configuration applied (persistent flushes are allowed).
    let remote = Offer::decode(conn.private_data())?.apply_to(&conn);

    src.as_mut_slice()?[..13].copy_from_slice(b"Hello, world!");
    conn.write(remote.at(0), src.slice(0..13)).flags(CompletionFlags::ON_ERROR).context(10).post()?;
    conn.flush(remote.slice(0..13), FlushType::Persistent).context(11).post()?;
    let wc = wait(&conn)?;
    println!("client: wrote and flushed 13 bytes (completion {:?} for op {})", wc.opcode(), wc.wr_id());
    conn.read(src.slice(100..113), remote.at(0)).context(12).post()?;
    wait(&conn)?;
    println!("client: read back {:?}", String::from_utf8_lossy(&src.to_vec(100, 13)?));

    // The write, the flush and the read are completed (retired): `src` is ours again.
    src.as_mut_slice()?[200..204].copy_from_slice(b"done");
    conn.recv(src.slice(300..364)).context(13).post()?;
    conn.send(src.slice(200..204)).context(14).post()?;
    let mut got_reply = false;
    while !got_reply {
        let wc = wait(&conn)?;
        if wc.opcode() == WcOpcode::Recv {
            println!("client: received {:?}", String::from_utf8_lossy(&src.to_vec(300, wc.byte_len() as usize)?));
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

fn wait(conn: &Conn) -> rpma::Result<rpma::Wc> {
    // Poll first; wait for a completion event only when the CQ is empty (the CQ is armed, so
    // a completion arriving in between still raises an event).
    loop {
        match conn.cq().next_wc()? {
            Some(wc) if wc.is_success() => return Ok(wc),
            Some(wc) => panic!("operation {} failed: {:?}", wc.wr_id(), wc.status()),
            None => conn.cq().wait()?,
        }
    }
}

//! A replicated write on tokio: one client writes log records to two servers and makes each
//! persistent on both; a record is done when both persistent flushes have completed. Then each
//! server checks that its memory holds every record.
//!
//! Per record and server: the write is posted unsignaled (no completion of its own), the
//! persistent flush behind it is awaited (its completion retires the write too); the two
//! servers' flushes are awaited together (`tokio::join!`).
//!
//! On the in-memory mock fabric (servers and client are tasks of one runtime):
//!
//! ```sh
//! cargo run -p rpma-examples --features tokio --example async_replicated_write
//! ```
//!
//! On an RDMA device (all three in this process, over the device owning the address):
//!
//! ```sh
//! RPMA_TEST_DEVICE=rxe0 RPMA_TEST_ADDR=10.77.0.1 cargo run -p rpma-examples --features verbs,tokio --example async_replicated_write
//! RPMA_BACKEND=verbs RPMA_TEST_ADDR=10.77.0.1 cargo run -p rpma-examples --features verbs,tokio --example async_replicated_write
//! ```
//!
//! Exits non-zero if anything fails or a server's memory misses a record.

use std::error::Error;
use std::time::Duration;

use rpma::any::WithTransport;
use rpma::op;
use rpma::tokio::{connect, AsyncConn, AsyncEp};
use rpma::{ConnReq, ContextType, Device, Ep, FlushType, MrRemote, Peer, PeerCfg, Transport, Usage};
use rpma_examples::backend;

const PORTS: [&str; 2] = ["7321", "7322"];
const RECORD: usize = 64;
const RECORDS: usize = 32;
/// Longest a wait may take before the run fails: a lost peer cannot hang the example.
const TIMEOUT: Duration = Duration::from_secs(10);

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// Record `i`: its number and a pattern, `RECORD` bytes.
fn record(i: usize) -> [u8; RECORD] {
    let mut r = [(i as u8).wrapping_mul(31); RECORD];
    r[..8].copy_from_slice(&(i as u64).to_le_bytes());
    r
}

/// A server: a log region the client writes and flushes to persistence; once the client has
/// disconnected, checks that the region holds every record.
async fn serve<T: Transport>(name: &'static str, peer: Peer<T>, ep: Ep<T>) -> Res<()> {
    let mut ep = AsyncEp::new(ep)?;
    ep.set_timeout(Some(TIMEOUT))?;
    let log = peer.alloc_mr(RECORD * RECORDS, Usage::WRITE_DST | Usage::FLUSH_TYPE_PERSISTENT)?;
    // Private data: the region's descriptor and the peer configuration (direct write to PMem,
    // which persistent flushes need).
    let mut pdata = log.descriptor().to_vec();
    pdata.extend_from_slice(&PeerCfg::new().with_direct_write_to_pmem(true).descriptor());
    let req = ep.accept(None).await?;
    let conn = connect(req, Some(&pdata)).await?;
    conn.set_timeout(Some(TIMEOUT))?;
    let ev = conn.next_event().await?;
    conn.with_conn(|c| c.disconnect())?;
    for i in 0..RECORDS {
        if log.to_vec(i * RECORD, RECORD)? != record(i) {
            return Err(format!("{name}: record {i} is missing or wrong").into());
        }
    }
    println!("{name}: holds all {RECORDS} records ({})", ev.as_str());
    Ok(())
}

/// A connection to one replica and where its log is.
struct Replica<T: Transport> {
    conn: AsyncConn<T>,
    log: MrRemote,
}

async fn replica<T: Transport>(peer: &Peer<T>, addr: &str, port: &str) -> Res<Replica<T>> {
    let conn = connect(ConnReq::new(peer, addr, port, None)?, None).await?;
    conn.set_timeout(Some(TIMEOUT))?;
    let pdata = conn.with_conn(|c| c.private_data().to_vec());
    let log = MrRemote::from_descriptor(pdata.get(..MrRemote::DESCRIPTOR_SIZE).ok_or("no region descriptor")?)?;
    let pcfg = PeerCfg::from_descriptor(pdata.get(MrRemote::DESCRIPTOR_SIZE..).ok_or("no peer configuration")?)?;
    conn.with_conn(|c| c.apply_remote_peer_cfg(&pcfg));
    Ok(Replica { conn, log })
}

/// Writes `src` at `off` of the replica's log and makes it persistent: done when the flush's
/// completion arrives.
async fn persist<T: Transport>(r: &Replica<T>, src: &rpma::MrLocal<T>, off: usize) -> Res<()> {
    r.conn.post_unsignaled(op::write(r.log.at(off), src.slice(..)).context(off as u64)).await?;
    r.conn.flush(r.log.slice(off..off + RECORD), FlushType::Persistent).await?;
    Ok(())
}

async fn client<T: Transport>(peer: Peer<T>, addr: &str) -> Res<()> {
    let (a, b) = tokio::try_join!(replica(&peer, addr, PORTS[0]), replica(&peer, addr, PORTS[1]))?;
    let mut src = peer.alloc_mr(RECORD, Usage::WRITE_SRC)?;
    for i in 0..RECORDS {
        // Both flushes of the previous record have completed: nothing holds `src`.
        src.as_mut_slice()?.copy_from_slice(&record(i));
        tokio::try_join!(persist(&a, &src, i * RECORD), persist(&b, &src, i * RECORD))?;
    }
    println!("client: {RECORDS} records persistent on both replicas");
    for r in [&a, &b] {
        r.conn.with_conn(|c| c.disconnect())?;
        r.conn.next_event().await?;
    }
    Ok(())
}

async fn run<T: Transport>(transport: T, addr: &str) -> Res<()> {
    let speer = Peer::new(&Device::lookup(&transport, addr, ContextType::Local)?)?;
    let servers = [
        tokio::spawn(serve("server 1", speer.clone(), Ep::listen(&speer, addr, PORTS[0])?)),
        tokio::spawn(serve("server 2", speer.clone(), Ep::listen(&speer, addr, PORTS[1])?)),
    ];
    let cpeer = Peer::new(&Device::lookup(&transport, addr, ContextType::Remote)?)?;
    let client = client(cpeer, addr).await;
    for s in servers {
        s.await.map_err(|e| format!("a server task failed: {e}"))??;
    }
    client?;
    println!("async_replicated_write: PASS");
    Ok(())
}

/// On the backend and address of `backend::from_env` (examples/src/backend.rs).
fn main() -> Res<()> {
    let (backend, addr) = backend::from_env()?;
    println!("async_replicated_write on {backend} ({addr})");
    backend.run(OnTokio(addr)).map_err(|e| e.to_string())?
}

/// [`run`] on a tokio runtime, on the transport chosen at run time.
struct OnTokio(String);

impl WithTransport for OnTokio {
    type Output = Res<()>;
    fn run<T: Transport>(self, transport: T) -> Res<()> {
        tokio::runtime::Runtime::new()?.block_on(run(transport, &self.0))
    }
}

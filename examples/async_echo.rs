//! An echo server and its client on tokio: the client sends messages, the server sends each one
//! back, the client checks it. Every send and receive is a future resolving to its own
//! completion (`rpma::tokio`).
//!
//! On the in-memory mock fabric (server and client are tasks of one runtime):
//!
//! ```sh
//! cargo run -p rpma-examples --features tokio --example async_echo
//! ```
//!
//! On an RDMA device (both sides in this process, over the device owning the address):
//!
//! ```sh
//! RPMA_TEST_DEVICE=rxe0 RPMA_TEST_ADDR=10.77.0.1 cargo run -p rpma-examples --features verbs,tokio --example async_echo
//! RPMA_BACKEND=verbs RPMA_TEST_ADDR=10.77.0.1 cargo run -p rpma-examples --features verbs,tokio --example async_echo
//! ```
//!
//! Exits non-zero if anything fails or an echo differs from its message.

use std::error::Error;
use std::time::Duration;

use rpma::any::WithTransport;
use rpma::tokio::{connect, AsyncConn, AsyncEp};
use rpma::{ConnReq, ContextType, Device, Ep, Peer, Transport, Usage};
use rpma_examples::backend;

const PORT: &str = "7311";
const MSG: usize = 64;
/// Longest a wait may take before the run fails: a lost peer cannot hang the example.
const TIMEOUT: Duration = Duration::from_secs(10);

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// The server: echoes every message of one client until an empty one.
async fn serve<T: Transport>(peer: Peer<T>, ep: Ep<T>) -> Res<usize> {
    let mut ep = AsyncEp::new(ep)?;
    ep.set_timeout(Some(TIMEOUT))?;
    let req = ep.accept(None).await?;
    let conn = connect(req, None).await?;
    conn.set_timeout(Some(TIMEOUT))?;
    let inbox = peer.alloc_mr(MSG, Usage::RECV)?;
    let mut outbox = peer.alloc_mr(MSG, Usage::SEND)?;
    let mut echoed = 0;
    loop {
        let wc = conn.recv(inbox.slice(..)).await?;
        let len = wc.byte_len() as usize;
        if len == 0 {
            break;
        }
        // The receive has completed and nothing else holds `outbox`: fill it in place.
        outbox.as_mut_slice()?[..len].copy_from_slice(&inbox.to_vec(0, len)?);
        conn.send(outbox.slice(0..len)).await?;
        echoed += 1;
    }
    // The client disconnects; answer it.
    let ev = conn.next_event().await?;
    conn.with_conn(|c| c.disconnect())?;
    println!("server: echoed {echoed} messages, then {}", ev.as_str());
    Ok(echoed)
}

/// The client: sends each message and awaits its echo (the receive is posted with the send).
async fn client<T: Transport>(peer: Peer<T>, addr: &str, messages: &[&[u8]]) -> Res<()> {
    let req = ConnReq::new(&peer, addr, PORT, None)?;
    let conn: AsyncConn<T> = connect(req, None).await?;
    conn.set_timeout(Some(TIMEOUT))?;
    let mut out = peer.alloc_mr(MSG, Usage::SEND)?;
    let back = peer.alloc_mr(MSG, Usage::RECV)?;
    for msg in messages {
        out.as_mut_slice()?[..msg.len()].copy_from_slice(msg);
        let (sent, echo) = tokio::join!(conn.send(out.slice(0..msg.len())), conn.recv(back.slice(..)));
        sent?;
        let got = back.to_vec(0, echo?.byte_len() as usize)?;
        if got != *msg {
            return Err(format!("echo {:?} differs from message {:?}", String::from_utf8_lossy(&got), msg).into());
        }
        println!("client: {:?} came back", String::from_utf8_lossy(&got));
    }
    conn.post(rpma::op::send_empty()).await?; // the end
    conn.with_conn(|c| c.disconnect())?;
    let ev = conn.next_event().await?;
    println!("client: {}", ev.as_str());
    Ok(())
}

async fn run<T: Transport>(transport: T, addr: &str) -> Res<()> {
    let server_peer = Peer::new(&Device::lookup(&transport, addr, ContextType::Local)?)?;
    let ep = Ep::listen(&server_peer, addr, PORT)?;
    let server = tokio::spawn(serve(server_peer, ep));
    let peer = Peer::new(&Device::lookup(&transport, addr, ContextType::Remote)?)?;
    let messages: [&[u8]; 4] = [b"hello", b"async", b"RDMA", b"echo, echo, echo"];
    let client = client(peer, addr, &messages).await;
    let echoed = server.await.map_err(|e| format!("the server task failed: {e}"))??;
    client?;
    if echoed != messages.len() {
        return Err(format!("the server echoed {echoed} of {} messages", messages.len()).into());
    }
    println!("async_echo: PASS");
    Ok(())
}

/// On the backend and address of `backend::from_env` (examples/src/backend.rs).
fn main() -> Res<()> {
    let (backend, addr) = backend::from_env()?;
    println!("async_echo on {backend} ({addr})");
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

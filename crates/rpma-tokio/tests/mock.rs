//! rpma-tokio on the mock: accept, connect, completions and events as futures; cancellation at
//! each await point; timeouts; many connections on one runtime; a runtime without IO.
#![allow(non_snake_case)] // case names say what they test: `cancel__...`, `timeout__...`

use std::time::Duration;

use rpma_core::{ConnEvent, ConnReq, ContextType, Device, Ep, ErrorKind, MrLocal, MrRemote, Peer, Usage, WcStatus};
use rpma_mock::MockFabric;
use rpma_tokio::{connect, AsyncConn, AsyncEp, Next};
use tokio::time::timeout;

type T = MockFabric;

const SHORT: Duration = Duration::from_millis(30);
const LONG: Duration = Duration::from_secs(10);

fn peer(f: &MockFabric) -> Peer<T> {
    Peer::new(&Device::lookup(f, "127.0.0.1", ContextType::Local).expect("lookup")).expect("peer")
}

fn remote(mr: &MrLocal<T>) -> MrRemote {
    MrRemote::from_descriptor(&mr.descriptor()).expect("descriptor")
}

struct Pair {
    client: AsyncConn<T>,
    server: AsyncConn<T>,
    cpeer: Peer<T>,
    speer: Peer<T>,
    _ep: AsyncEp<T>,
}

async fn pair(f: &MockFabric, port: &str) -> Pair {
    let (speer, cpeer) = (peer(f), peer(f));
    let mut ep = AsyncEp::new(Ep::listen(&speer, "127.0.0.1", port).expect("listen")).expect("async ep");
    let req = ConnReq::new(&cpeer, "127.0.0.1", port, None).expect("conn_req_new");
    // The client's establishment needs the server's accept: both sides run concurrently.
    let server = async {
        let sreq = ep.accept(None).await?;
        connect(sreq, None).await
    };
    let (client, server) = tokio::join!(connect(req, None), server);
    Pair {
        client: client.expect("client established"),
        server: server.expect("server established"),
        cpeer,
        speer,
        _ep: ep,
    }
}

#[tokio::test]
async fn write_completes_as_a_future() {
    let f = MockFabric::new();
    let mut p = pair(&f, "7901").await;
    let dst = p.speer.alloc_mr(64, Usage::WRITE_DST).unwrap();
    let src = p.cpeer.alloc_mr(64, Usage::WRITE_SRC).unwrap();
    src.write(0, b"async!!!").unwrap();
    p.client.conn().write(remote(&dst).at(0), src.slice(0..8)).context(3).post().unwrap();
    let wc = timeout(LONG, p.client.next_wc()).await.expect("in time").expect("a completion");
    assert_eq!((wc.wr_id(), wc.status()), (3, WcStatus::Success));
    assert_eq!(dst.to_vec(0, 8).unwrap(), b"async!!!");
    // Events and completions through one future.
    p.client.conn().disconnect().unwrap();
    assert_eq!(timeout(LONG, p.server.next()).await.unwrap().unwrap(), Next::Event(ConnEvent::Closed));
}

#[tokio::test]
async fn cancel__drop_next_wc_future_before_the_completion() {
    let f = MockFabric::new();
    let mut p = pair(&f, "7902").await;
    // Nothing in flight: the future is dropped at its await point (the timeout elapses).
    assert!(timeout(SHORT, p.client.next_wc()).await.is_err());
    let dst = p.speer.alloc_mr(64, Usage::WRITE_DST).unwrap();
    let src = p.cpeer.alloc_mr(64, Usage::WRITE_SRC).unwrap();
    p.client.conn().write(remote(&dst).at(0), src.slice(0..8)).context(9).post().unwrap();
    // The connection is still usable and the completion is not lost.
    let wc = timeout(LONG, p.client.next_wc()).await.expect("in time").expect("a completion");
    assert_eq!(wc.wr_id(), 9);
}

#[tokio::test]
async fn cancel__drop_accept_future_then_accept() {
    let f = MockFabric::new();
    let (speer, cpeer) = (peer(&f), peer(&f));
    let mut ep = AsyncEp::new(Ep::listen(&speer, "127.0.0.1", "7903").unwrap()).unwrap();
    assert!(timeout(SHORT, ep.accept(None)).await.is_err(), "no request yet");
    let req = ConnReq::new(&cpeer, "127.0.0.1", "7903", None).unwrap();
    let server = async {
        let sreq = ep.accept(None).await?;
        connect(sreq, None).await
    };
    let (client, server) = tokio::join!(connect(req, None), server);
    drop((client.expect("client"), server.expect("the request after a dropped accept")));
}

#[tokio::test]
async fn cancel__drop_next_event_future_then_take_the_event() {
    let f = MockFabric::new();
    let mut p = pair(&f, "7904").await;
    assert!(timeout(SHORT, p.server.next_event()).await.is_err());
    p.client.conn().disconnect().unwrap();
    assert_eq!(timeout(LONG, p.server.next_event()).await.unwrap().unwrap(), ConnEvent::Closed);
}

#[tokio::test]
async fn cancel__drop_region_while_its_write_is_in_flight() {
    // Dropping the future and the region of an operation in flight frees nothing the
    // backend still uses: the completion arrives and the connection goes on.
    let f = MockFabric::new();
    let mut p = pair(&f, "7905").await;
    let dst = p.speer.alloc_mr(64, Usage::WRITE_DST).unwrap();
    {
        let src = p.cpeer.alloc_mr(64, Usage::WRITE_SRC).unwrap();
        src.write(0, &[7; 8]).unwrap();
        p.client.conn().write(remote(&dst).at(0), src.slice(0..8)).context(1).post().unwrap();
        assert!(src.dereg().is_ok());
    }
    let wc = timeout(LONG, p.client.next_wc()).await.unwrap().unwrap();
    assert_eq!((wc.wr_id(), wc.status()), (1, WcStatus::Success));
    assert_eq!(dst.to_vec(0, 8).unwrap(), [7; 8]);
}

#[tokio::test]
async fn timeout__next_wc_and_next_event_under_tokio_time() {
    let f = MockFabric::new();
    let mut p = pair(&f, "7906").await;
    let t0 = tokio::time::Instant::now();
    assert!(timeout(SHORT, p.client.next_wc()).await.is_err());
    assert!(timeout(SHORT, p.client.next_event()).await.is_err());
    assert!(timeout(SHORT, p.client.next()).await.is_err());
    assert!(t0.elapsed() >= 3 * SHORT);
}

#[tokio::test]
async fn timeout__a_peer_that_never_answers_does_not_hang() {
    let f = MockFabric::new();
    let mut p = pair(&f, "7907").await;
    let inbox = p.cpeer.alloc_mr(64, Usage::RECV).unwrap();
    p.client.conn().recv(inbox.slice(..)).context(5).post().unwrap();
    // The server never sends: the wait for the message ends with the timeout.
    assert!(timeout(SHORT, p.client.next_wc()).await.is_err());
    // Then the server goes away: the receive is flushed and the connection closes.
    drop(p.server);
    let got = timeout(LONG, async {
        let mut closed = false;
        let mut flushed = false;
        while !(closed && flushed) {
            match p.client.next().await.unwrap() {
                Next::Event(ev) => closed |= ev == ConnEvent::Closed || ev == ConnEvent::Lost,
                Next::Completion(wc) => flushed |= wc.wr_id() == 5 && wc.status() != WcStatus::Success,
            }
        }
    })
    .await;
    assert!(got.is_ok(), "CLOSED and the flushed receive within 10 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_connections_on_one_runtime_in_spawned_tasks() {
    let f = MockFabric::new();
    let mut tasks = Vec::new();
    for i in 0..16u16 {
        let f = f.clone();
        tasks.push(tokio::spawn(async move {
            let mut p = pair(&f, &(7920 + i).to_string()).await;
            let dst = p.speer.alloc_mr(4096, Usage::WRITE_DST).unwrap();
            let src = p.cpeer.alloc_mr(4096, Usage::WRITE_SRC).unwrap();
            src.write(0, &[i as u8; 64]).unwrap();
            for k in 0..32u64 {
                p.client.conn().write(remote(&dst).at(k as usize * 64), src.slice(0..64)).context(k).post().unwrap();
                let wc = timeout(LONG, p.client.next_wc()).await.unwrap().unwrap();
                assert_eq!((wc.wr_id(), wc.status()), (k, WcStatus::Success));
            }
            assert_eq!(dst.to_vec(31 * 64, 64).unwrap(), [i as u8; 64]);
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
}

#[test]
fn outside_a_runtime_or_without_io_is_an_error_not_a_panic() {
    let f = MockFabric::new();
    let ep = Ep::listen(&peer(&f), "127.0.0.1", "7940").unwrap();
    let e = AsyncEp::new(ep).expect_err("no runtime");
    assert_eq!(e.kind(), ErrorKind::Inval);
    assert!(e.to_string().contains("tokio runtime"), "{e}");
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let ep = Ep::listen(&peer(&f), "127.0.0.1", "7941").unwrap();
    let e = rt.block_on(async { AsyncEp::new(ep) }).expect_err("IO disabled");
    assert_eq!(e.kind(), ErrorKind::Inval);
    assert!(e.to_string().contains("IO disabled"), "{e}");
}

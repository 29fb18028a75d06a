//! rpma-tokio on a real device: the per-operation futures, backpressure, cancellation, timeouts,
//! peers that die and many connections on one runtime, where completions really come later than
//! the post (on the mock most complete as they are posted; crates/rpma-tokio/tests/mock.rs has
//! the full set there).
//!
//! With `RPMA_TEST_DEVICE` and `RPMA_TEST_ADDR` set (the Soft-RoCE VM of scripts/test-verbs.sh
//! exports `rxe0` and `10.77.0.1`) the cases run on that device; without them, on the mock, so
//! the cases themselves are checked everywhere.
#![allow(non_snake_case, missing_docs)] // case names say what they test: `cancel__...`, `timeout__...`

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use rpma::any::{Backend, WithTransport};
use rpma::tokio::{connect, AsyncConn, AsyncEp};
use rpma::{
    ConnCfg, ConnEvent, ConnReq, ContextType, Device, Ep, ErrorKind, FlushType, MrLocal, MrRemote, Peer, PeerCfg,
    Transport, Usage, WcStatus,
};
use tokio::time::timeout;

/// Where the cases run.
struct Env<T: Transport> {
    transport: T,
    addr: String,
    next_port: AtomicU32,
}

const SHORT: Duration = Duration::from_millis(100);
/// Longest any case waits for something that must come (a real device's retries take seconds).
const LONG: Duration = Duration::from_secs(60);

type Case<T> = fn(&Env<T>);

fn cases<T: Transport>() -> Vec<(&'static str, Case<T>)> {
    vec![
        ("ops_resolve_to_their_own_completions", ops_resolve_to_their_own_completions as Case<T>),
        ("backpressure__joined_writes_on_a_queue_of_two", backpressure__joined_writes_on_a_queue_of_two),
        ("cancel__dropped_receive_is_orphaned_and_its_completion_discarded", cancel__dropped_receive),
        ("cancel__dropped_op_futures_after_post_free_their_slots", cancel__dropped_ops_after_post),
        ("timeout__a_receive_nobody_sends_to_times_out", timeout__receive_times_out),
        ("a_peer_that_dies_mid_operation_fails_it", peer_dies_mid_operation),
        ("many_connections_on_one_runtime", many_connections_on_one_runtime),
    ]
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

struct Pair<T: Transport> {
    client: AsyncConn<T>,
    server: AsyncConn<T>,
    cpeer: Peer<T>,
    speer: Peer<T>,
    _ep: AsyncEp<T>,
}

impl<T: Transport> Env<T> {
    fn peer(&self, kind: ContextType) -> Peer<T> {
        Peer::new(&Device::lookup(&self.transport, &self.addr, kind).expect("device lookup")).expect("peer")
    }

    async fn pair(&self, cfg: Option<&ConnCfg<T>>) -> Pair<T> {
        let port = self.next_port.fetch_add(1, Ordering::Relaxed).to_string();
        let (speer, cpeer) = (self.peer(ContextType::Local), self.peer(ContextType::Remote));
        let mut ep = AsyncEp::new(Ep::listen(&speer, &self.addr, &port).expect("listen")).expect("async ep");
        let req = ConnReq::new(&cpeer, &self.addr, &port, cfg).expect("conn_req_new");
        let server = async {
            let sreq = ep.accept(cfg).await?;
            connect(sreq, None).await
        };
        let (client, server) =
            timeout(LONG, async { tokio::join!(connect(req, None), server) }).await.expect("in time");
        let (client, server) = (client.expect("client established"), server.expect("server established"));
        client.set_timeout(Some(LONG)).unwrap();
        server.set_timeout(Some(LONG)).unwrap();
        Pair { client, server, cpeer, speer, _ep: ep }
    }
}

fn remote<T: Transport>(mr: &MrLocal<T>) -> MrRemote {
    MrRemote::from_descriptor(&mr.descriptor()).expect("descriptor")
}

fn ops_resolve_to_their_own_completions<T: Transport>(env: &Env<T>) {
    runtime().block_on(async {
        let p = env.pair(None).await;
        p.client.with_conn(|c| c.apply_remote_peer_cfg(&PeerCfg::new().with_direct_write_to_pmem(true)));
        let usage = Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_PERSISTENT;
        let dst = p.speer.alloc_mr(4096, usage).unwrap();
        let r = remote(&dst);
        let src = p.cpeer.alloc_mr(4096, Usage::WRITE_SRC | Usage::READ_DST | Usage::SEND).unwrap();
        src.write(0, b"from the client").unwrap();
        dst.write(2048, b"from the server").unwrap();
        let inbox = p.speer.alloc_mr(64, Usage::RECV).unwrap();
        let c = &p.client;
        let (w, a, rd, s, rv) = tokio::join!(
            c.write(r.at(0), src.slice(0..15)),
            c.atomic_write(r.at(64), *b"atomic!!"),
            c.read(src.slice(1024..1039), r.at(2048)),
            c.send(src.slice(0..4)),
            p.server.recv(inbox.slice(..)),
        );
        let ids: Vec<u64> = [w, a, rd, s].into_iter().map(|r| r.expect("completed").wr_id()).collect();
        assert!(ids.iter().enumerate().all(|(i, id)| !ids[..i].contains(id)), "distinct tokens {ids:x?}");
        assert_eq!(rv.expect("received").byte_len(), 4);
        // The flush after the writes makes them persistent: awaited, then read back.
        c.flush(r.slice(0..72), FlushType::Persistent).await.expect("flush");
        assert_eq!(dst.to_vec(0, 15).unwrap(), b"from the client");
        assert_eq!(dst.to_vec(64, 8).unwrap(), b"atomic!!");
        assert_eq!(src.to_vec(1024, 15).unwrap(), b"from the server");
        assert_eq!(inbox.to_vec(0, 4).unwrap(), b"from");
        assert_eq!((c.in_flight(), p.server.in_flight()), (0, 0));
    });
}

fn backpressure__joined_writes_on_a_queue_of_two<T: Transport>(env: &Env<T>) {
    runtime().block_on(async {
        let cfg = ConnCfg::new().with_sq_size(2);
        let p = env.pair(Some(&cfg)).await;
        let dst = p.speer.alloc_mr(64 * 64, Usage::WRITE_DST).unwrap();
        let r = remote(&dst);
        let src = p.cpeer.alloc_mr(64 * 64, Usage::WRITE_SRC).unwrap();
        for i in 0..64u64 {
            src.write(i as usize * 64, &[i as u8 + 1; 64]).unwrap();
        }
        let c = &p.client;
        let all = timeout(LONG, join_all((0..64).map(|i| c.write(r.at(i * 64), src.slice(i * 64..i * 64 + 64)))))
            .await
            .expect("no hang");
        assert!(all.into_iter().all(|w| w.is_ok_and(|w| w.status() == WcStatus::Success)));
        assert_eq!(dst.to_vec(0, 64 * 64).unwrap(), src.to_vec(0, 64 * 64).unwrap());
        assert_eq!((c.sq_free(), c.in_flight()), (2, 0));
    });
}

fn cancel__dropped_receive<T: Transport>(env: &Env<T>) {
    runtime().block_on(async {
        let p = env.pair(None).await;
        let inbox = p.cpeer.alloc_mr(64, Usage::RECV).unwrap();
        assert!(timeout(SHORT, p.client.recv(inbox.slice(..))).await.is_err());
        assert_eq!(p.client.in_flight(), 1, "orphaned, posted");
        let out = p.speer.alloc_mr(64, Usage::SEND).unwrap();
        out.write(0, b"late").unwrap();
        p.server.send(out.slice(0..4)).await.expect("the message goes to the orphan's buffer");
        // Any wait of the client drives its CQs: the orphan's completion is discarded.
        assert!(timeout(SHORT * 5, p.client.next_wc()).await.is_err(), "not unclaimed");
        assert_eq!(p.client.in_flight(), 0);
        assert_eq!(inbox.to_vec(0, 4).unwrap(), b"late");
        let (rv, s) = tokio::join!(p.client.recv(inbox.slice(..)), p.server.send(out.slice(0..2)));
        assert_eq!((rv.unwrap().byte_len(), s.unwrap().status()), (2, WcStatus::Success));
    });
}

fn cancel__dropped_ops_after_post<T: Transport>(env: &Env<T>) {
    runtime().block_on(async {
        let p = env.pair(None).await;
        let dst = p.speer.alloc_mr(4096, Usage::WRITE_DST).unwrap();
        let r = remote(&dst);
        let src = p.cpeer.alloc_mr(4096, Usage::WRITE_SRC).unwrap();
        src.write(0, &[9; 4096]).unwrap();
        // Each write is polled once (posted) and dropped, whatever became of it.
        for i in 0..8usize {
            let mut w = std::pin::pin!(p.client.write(r.at(i * 512), src.slice(i * 512..i * 512 + 512)));
            std::future::poll_fn(|cx| {
                let _ = w.as_mut().poll(cx);
                std::task::Poll::Ready(())
            })
            .await;
        }
        // A later awaited operation completes after them (completions of one send queue come in
        // order) and its wait drives the orphans' completions away.
        p.client.write(r.at(0), src.slice(0..8)).await.expect("a write after the dropped ones");
        assert_eq!(p.client.in_flight(), 0, "the orphans' slots are free");
        assert_eq!(dst.to_vec(0, 4096).unwrap(), [9; 4096], "every dropped write was done");
        assert!(timeout(SHORT, p.client.next_wc()).await.is_err(), "and their completions reached no one");
    });
}

fn timeout__receive_times_out<T: Transport>(env: &Env<T>) {
    runtime().block_on(async {
        let p = env.pair(None).await;
        p.client.set_timeout(Some(SHORT)).unwrap();
        let inbox = p.cpeer.alloc_mr(64, Usage::RECV).unwrap();
        let e = p.client.recv(inbox.slice(..)).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NoCompletion);
        assert!(e.to_string().contains("timed out"), "{e}");
        assert_eq!(p.client.set_timeout(Some(Duration::ZERO)).unwrap_err().kind(), ErrorKind::InvalidInput);
    });
}

fn peer_dies_mid_operation<T: Transport>(env: &Env<T>) {
    runtime().block_on(async {
        let p = env.pair(None).await;
        let out = p.cpeer.alloc_mr(64, Usage::SEND).unwrap();
        // The send waits for a receive the peer never posts; then the peer's connection goes.
        // As on any RDMA connection, the client learns it from its connection events and
        // disconnects, which moves its queue pair to the error state: the work still queued is
        // flushed and the send fails (a device alone may retry it for a long time, or forever:
        // receiver-not-ready retries are unlimited, docs/async.md "A peer that goes away").
        let send = p.client.send(out.slice(0..4));
        let server = p.server;
        let kill = async move {
            tokio::time::sleep(SHORT).await;
            drop(server);
        };
        let client = &p.client;
        let watch = async {
            let ev = client.next_event().await.expect("a connection event");
            assert!(matches!(ev, ConnEvent::Closed | ConnEvent::Lost), "the peer went away: {ev:?}");
            client.with_conn(|c| c.disconnect()).expect("disconnect");
        };
        let (r, (), ()) = timeout(LONG, async { tokio::join!(send, kill, watch) }).await.expect("an error, not a hang");
        assert_eq!(r.expect_err("the send cannot succeed").kind(), ErrorKind::Provider);
    });
}

fn many_connections_on_one_runtime<T: Transport>(env: &Env<T>) {
    runtime().block_on(async {
        let mut pairs = Vec::new();
        for _ in 0..4 {
            pairs.push(Arc::new(env.pair(None).await));
        }
        let tasks: Vec<_> = pairs
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let p = Arc::clone(p);
                tokio::spawn(async move {
                    let dst = p.speer.alloc_mr(4096, Usage::WRITE_DST).unwrap();
                    let src = p.cpeer.alloc_mr(4096, Usage::WRITE_SRC).unwrap();
                    src.write(0, &[i as u8; 64]).unwrap();
                    let r = remote(&dst);
                    for k in 0..16usize {
                        let wcs =
                            join_all((0..4).map(|j| p.client.write(r.at((k * 4 + j) % 64 * 64), src.slice(0..64))))
                                .await;
                        assert!(wcs.into_iter().all(|w| w.is_ok()));
                    }
                    assert_eq!(dst.to_vec(63 * 64, 64).unwrap(), [i as u8; 64]);
                })
            })
            .collect();
        for t in tasks {
            timeout(LONG, t).await.expect("in time").expect("task");
        }
    });
}

fn run<T: Transport>(env: Env<T>, args: &libtest_mimic::Arguments) -> libtest_mimic::Conclusion {
    let env = Arc::new(env);
    let trials = cases::<T>()
        .into_iter()
        .map(|(name, f)| {
            let env = Arc::clone(&env);
            libtest_mimic::Trial::test(name, move || {
                f(&env);
                Ok(())
            })
        })
        .collect();
    libtest_mimic::run(args, trials)
}

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let dev = std::env::var("RPMA_TEST_DEVICE").ok().filter(|d| !d.is_empty());
    // Distinct ports per run, below the ephemeral range (see tests/verbs.rs).
    let base = 20_000 + (std::process::id() % 200) * 50;
    let backend = if dev.is_some() { Backend::Verbs } else { Backend::Mock };
    match backend.run(Suite { dev, base, args: &args }) {
        Ok(conclusion) => conclusion.exit(),
        Err(e) => {
            eprintln!("tokio_backends: {e}");
            std::process::exit(2);
        }
    }
}

/// The cases on the transport chosen at run time: the device `RPMA_TEST_DEVICE` (verbs) at
/// `RPMA_TEST_ADDR`, else the mock at 127.0.0.1.
struct Suite<'a> {
    dev: Option<String>,
    base: u32,
    args: &'a libtest_mimic::Arguments,
}

impl WithTransport for Suite<'_> {
    type Output = libtest_mimic::Conclusion;
    fn run<T: Transport>(self, transport: T) -> libtest_mimic::Conclusion {
        let Some(dev) = self.dev else {
            println!("tokio_backends: on the mock (set RPMA_TEST_DEVICE and RPMA_TEST_ADDR for a device)");
            return run(Env { transport, addr: "127.0.0.1".into(), next_port: self.base.into() }, self.args);
        };
        let Some(addr) = std::env::var("RPMA_TEST_ADDR").ok().filter(|a| !a.is_empty()) else {
            eprintln!("RPMA_TEST_DEVICE={dev} is set but RPMA_TEST_ADDR is not");
            std::process::exit(2);
        };
        match Device::lookup(&transport, &addr, ContextType::Local) {
            Ok(d) if d.name() == dev => {}
            Ok(d) => {
                eprintln!("{addr} belongs to device {}, not RPMA_TEST_DEVICE={dev}", d.name());
                std::process::exit(2);
            }
            Err(e) => {
                eprintln!("no RDMA device owns {addr} (RPMA_TEST_ADDR): {e}");
                std::process::exit(2);
            }
        }
        println!("tokio_backends: on {dev} ({addr})");
        run(Env { transport, addr, next_port: self.base.into() }, self.args)
    }
}

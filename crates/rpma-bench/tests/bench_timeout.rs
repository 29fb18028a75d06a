//! `rpma bench --timeout`: a peer that stops answering ends the run with an error naming the
//! wait, on either side, instead of hanging it (the mock, one process; each test plays the
//! silent peer itself with the rpma API).
#![cfg(feature = "mock")]

use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::Parser;
use rpma::mock::MockFabric;
use rpma::{Conn, ConnCfg, ConnEvent, ConnReq, ContextType, Device, Ep, MrLocal, Peer, PeerCfg, Usage};
use rpma_bench::{self as bench, BenchArgs};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

fn args(line: &[&str]) -> BenchArgs {
    Cli::try_parse_from(std::iter::once("bench").chain(line.iter().copied())).expect("valid arguments").args
}

/// A server that accepts one benchmark connection (its target region and peer configuration in
/// the private data, receives posted) and then never answers, until told to go.
fn silent_server(f: MockFabric, port: u16, ready: mpsc::Sender<()>, go: mpsc::Receiver<()>) {
    let dev = Device::lookup(&f, "127.0.0.1", ContextType::Local).unwrap();
    let peer = Peer::new(&dev).unwrap();
    let ep = Ep::listen(&peer, "127.0.0.1", &port.to_string()).unwrap();
    ready.send(()).unwrap();
    let cfg = ConnCfg::new().with_sq_size(16).with_rq_size(16).with_cq_size(64);
    let req = ep.next_conn_req(Some(&cfg)).unwrap();
    let usage = Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_PERSISTENT | Usage::FLUSH_TYPE_VISIBILITY;
    let target = peer.alloc_mr(1 << 20, usage).unwrap();
    let recvs = peer.alloc_mr(8 * 4096, Usage::RECV).unwrap();
    for slot in 0..8 {
        req.recv(recvs.slice(slot * 4096..(slot + 1) * 4096)).context(slot as u64).post().unwrap();
    }
    let mut pdata = target.descriptor().to_vec();
    pdata.extend_from_slice(&PeerCfg::new().with_direct_write_to_pmem(true).descriptor());
    let conn = req.connect(Some(&pdata)).unwrap();
    assert_eq!(conn.next_event().unwrap(), ConnEvent::Established);
    let _ = go.recv_timeout(Duration::from_secs(60));
}

/// Runs the benchmark's client side against a silent server; returns its error and how long it
/// took.
fn against_a_silent_server(port: u16, line: &[&str]) -> (String, Duration) {
    let f = MockFabric::new();
    let (ready_tx, ready) = mpsc::channel();
    let (go, go_rx) = mpsc::channel();
    let server = {
        let f = f.clone();
        std::thread::spawn(move || silent_server(f, port, ready_tx, go_rx))
    };
    ready.recv().unwrap();
    let target = format!("127.0.0.1:{port}");
    let mut l = vec!["--backend", "verbs", "--connect", &target, "--no-progress"];
    l.extend_from_slice(line);
    let t = Instant::now();
    let e = bench::measure_on(f, &args(&l), None).expect_err("the server never answers");
    let took = t.elapsed();
    go.send(()).unwrap();
    server.join().unwrap();
    (format!("{e:#}"), took)
}

#[test]
fn a_send_ping_pong_without_echoes_times_out_naming_the_wait() {
    let (e, took) =
        against_a_silent_server(7631, &["--op", "send", "--size", "8", "--iters", "10", "--timeout", "0.3"]);
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(e.contains("client: waiting for the echo of send of 8 B: nothing came for 0.3 s (--timeout)"), "{e}");
}

#[test]
fn a_64k_write_ping_pong_without_an_answer_times_out_naming_the_wait() {
    let (e, took) = against_a_silent_server(
        7632,
        &["--op", "write-pingpong", "--size", "64K", "--iters", "10", "--timeout", "0.3"],
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(
        e.contains("client: waiting for the server's answer to the start of a write ping-pong of 65536 B: nothing came for 0.3 s"),
        "{e}"
    );
}

#[test]
fn a_connection_never_accepted_times_out() {
    // A listener that never takes the request: the client's wait for the connection ends.
    let f = MockFabric::new();
    let dev = Device::lookup(&f, "127.0.0.1", ContextType::Local).unwrap();
    let peer = Peer::new(&dev).unwrap();
    let _ep = Ep::listen(&peer, "127.0.0.1", "7633").unwrap();
    let t = Instant::now();
    let line = ["--backend", "verbs", "--connect", "127.0.0.1:7633", "--timeout", "0.3", "--no-progress"];
    let e = format!("{:#}", bench::measure_on(f, &args(&line), None).expect_err("never accepted"));
    assert!(t.elapsed() < Duration::from_secs(10));
    assert!(e.contains("client: waiting for the connection to 127.0.0.1:7633: nothing came for 0.3 s"), "{e}");
}

/// Connects to a benchmark server listening on `port` as its client does, once it listens: the
/// benchmark's request in the private data (target bytes, qd 1, `inbox`, receive bytes, source
/// bytes, in that order in `sizes` but for the inbox).
fn connect_as_client(
    peer: &Peer<MockFabric>,
    port: &str,
    sizes: (u64, u32, u32),
    inbox: &MrLocal<MockFabric>,
) -> Conn<MockFabric> {
    let (target, recv_max, source_max) = sizes;
    let mut pdata = Vec::new();
    pdata.extend_from_slice(&target.to_le_bytes());
    pdata.extend_from_slice(&1u32.to_le_bytes());
    pdata.extend_from_slice(&inbox.descriptor());
    pdata.extend_from_slice(&recv_max.to_le_bytes());
    pdata.extend_from_slice(&source_max.to_le_bytes());
    let cfg = ConnCfg::new().with_sq_size(8).with_rq_size(8).with_cq_size(32);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // The server may not listen yet.
        if let Ok(req) = ConnReq::new(peer, "127.0.0.1", port, Some(&cfg)) {
            match req.connect(Some(&pdata)) {
                Ok(c) if c.next_event().unwrap() == ConnEvent::Established => return c,
                _ => {}
            }
        }
        assert!(Instant::now() < deadline, "the server never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_client_that_stops_pinging_times_the_server_out() {
    let f = MockFabric::new();
    let client = {
        let f = f.clone();
        std::thread::spawn(move || {
            let dev = Device::lookup(&f, "127.0.0.1", ContextType::Remote).unwrap();
            let peer = Peer::new(&dev).unwrap();
            let inbox = peer.alloc_mr(65536, Usage::WRITE_DST).unwrap();
            let msgs = peer.alloc_mr(64, Usage::RECV).unwrap();
            // Target 64 KiB, receives of 0 bytes and pongs of 64 KiB.
            let conn = connect_as_client(&peer, "7634", (65536, 0, 65536), &inbox);
            conn.recv(msgs.slice(..64)).context(1).post().unwrap();
            // Start a write ping-pong of 64 KiB, take the server's answer, then never ping.
            conn.send_empty().imm((1 << 31) | 65536).context(2).post().unwrap();
            let mut seen = 0;
            while seen < 2 {
                if let Some(wc) = conn.cq().next_wc().unwrap() {
                    assert_eq!(wc.status(), rpma::WcStatus::Success);
                    seen += 1;
                }
            }
            std::thread::sleep(Duration::from_secs(2));
        })
    };
    let t = Instant::now();
    let line = ["--backend", "verbs", "--server", "--port", "7634", "--timeout", "0.3", "--no-progress"];
    let e = format!("{:#}", bench::measure_on(f, &args(&line), None).expect_err("the client stopped pinging"));
    assert!(t.elapsed() < Duration::from_secs(10));
    assert!(e.contains("server: waiting for ping 1 of a write ping-pong of 65536 B: nothing came for 0.3 s"), "{e}");
    client.join().unwrap();
}

#[test]
fn a_busy_polling_server_ends_when_its_client_leaves_without_the_stop_message() {
    let f = MockFabric::new();
    let (done_tx, done) = mpsc::channel();
    {
        let f = f.clone();
        std::thread::spawn(move || {
            let line = ["--backend", "verbs", "--server", "--port", "7635", "--busy-poll", "--no-progress"];
            let _ = done_tx.send(bench::measure_on(f, &args(&line), None).map_err(|e| format!("{e:#}")));
        });
    }
    let dev = Device::lookup(&f, "127.0.0.1", ContextType::Remote).unwrap();
    let peer = Peer::new(&dev).unwrap();
    let inbox = peer.alloc_mr(4096, Usage::WRITE_DST).unwrap();
    // Target 4 KiB, receives and sends of 8 bytes.
    let conn = connect_as_client(&peer, "7635", (4096, 8, 8), &inbox);
    // Gone without the stop message: the server, spinning on its CQ, must notice (its posted
    // receives are flushed, or it sees the connection end).
    conn.disconnect().unwrap();
    let e = done
        .recv_timeout(Duration::from_secs(20))
        .expect("the busy-polling server did not end after its client left")
        .expect_err("the client left without its stop message");
    assert!(e.contains("WrFlushErr") || e.contains("before the client's stop message"), "{e}");
}

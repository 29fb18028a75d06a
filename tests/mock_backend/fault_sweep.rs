//! Fault sweep over a whole client/server flow: every provider call failed in turn.

use super::*;

fn flow_err(detail: &str) -> Error {
    Error::new(ErrorKind::Other, "flow").with_detail(detail)
}

const TIMEOUT: &str = "timeout: the flow stalled";

fn poll_wc(cq: Cq<'_>) -> rpma::Result<Wc> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match cq.next_wc()? {
            Some(wc) if wc.status() == WcStatus::Success => return Ok(wc),
            Some(wc) => return Err(flow_err(&format!("error completion {wc:?}"))),
            None => {
                if Instant::now() > deadline {
                    return Err(flow_err(TIMEOUT));
                }
                std::thread::yield_now();
            }
        }
    }
}

fn wait_event(conn: &Conn, want: ConnEvent) -> rpma::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match conn.next_event() {
            Ok(ev) if ev == want => return Ok(()),
            Ok(ev) => return Err(flow_err(&format!("unexpected event {ev:?}, wanted {want:?}"))),
            Err(e) if e.kind() == ErrorKind::NoEvent => {
                if Instant::now() > deadline {
                    return Err(flow_err(TIMEOUT));
                }
                std::thread::yield_now();
            }
            Err(e) => return Err(e),
        }
    }
}

/// connect with private data, write, flush, send/recv (both ways, one pre-posted before
/// accept), disconnect, delete; every resource released explicitly so every failure surfaces.
pub(super) fn flow(f: &MockFabric) -> rpma::Result<()> {
    let sdev = Device::lookup(f, ADDR, ContextType::Local)?;
    let cdev = Device::lookup(f, ADDR, ContextType::Remote)?;
    let speer = Peer::new(&sdev)?;
    let cpeer = Peer::new(&cdev)?;
    let dst = speer.alloc_mr(4096, Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY)?;
    let srecv = speer.alloc_mr(64, Usage::RECV | Usage::SEND)?;
    let src = cpeer.alloc_mr(4096, Usage::WRITE_SRC | Usage::SEND | Usage::RECV)?;
    let ep = Ep::listen(&speer, ADDR, PORT)?;
    nonblock(ep.fd());

    let ccfg = ConnCfg::new().with_rcq_size(4);
    let creq = ConnReq::new(&cpeer, ADDR, PORT, Some(&ccfg))?;
    creq.recv(src.slice(1024..1088)).context(20).post()?;
    let client = creq.connect(Some(b"client-hello"))?;
    nonblock(client.event_fd());

    let deadline = Instant::now() + Duration::from_secs(2);
    let sreq = loop {
        match ep.next_conn_req(None) {
            Ok(r) => break r,
            Err(e) if e.kind() == ErrorKind::NoEvent && Instant::now() < deadline => std::thread::yield_now(),
            Err(e) if e.kind() == ErrorKind::NoEvent => return Err(flow_err(TIMEOUT)),
            Err(e) => return Err(e),
        }
    };
    if !sreq.private_data().starts_with(b"client-hello") {
        return Err(flow_err("wrong connect private data"));
    }
    sreq.recv(srecv.slice(0..64)).context(10).post()?;
    let server = sreq.connect(Some(&dst.descriptor()))?;
    nonblock(server.event_fd());
    wait_event(&client, ConnEvent::Established)?;
    wait_event(&server, ConnEvent::Established)?;
    let rdst = MrRemote::from_descriptor(client.private_data())?;

    src.write(0, b"persist me")?;
    client.write(rdst.at(0), src.slice(0..10)).context(1).post()?;
    poll_wc(client.cq())?;
    client.flush(rdst.slice(0..10), FlushType::Visibility).context(2).post()?;
    poll_wc(client.cq())?;
    if dst.to_vec(0, 10)? != b"persist me" {
        return Err(flow_err("write did not land"));
    }
    client.send(src.slice(0..10)).context(3).post()?;
    poll_wc(client.cq())?;
    let wc = poll_wc(server.cq())?;
    if wc.wr_id() != 10 || srecv.to_vec(0, 10)? != b"persist me" {
        return Err(flow_err("wrong message"));
    }
    srecv.write(0, b"ack")?;
    server.send(srecv.slice(0..3)).context(11).post()?;
    poll_wc(server.cq())?;
    let rcq = client.rcq().ok_or_else(|| flow_err("no rcq"))?;
    if poll_wc(rcq)?.wr_id() != 20 || src.to_vec(1024, 3)? != b"ack" {
        return Err(flow_err("wrong reply"));
    }

    client.disconnect()?;
    wait_event(&server, ConnEvent::Closed)?;
    server.disconnect()?;
    wait_event(&client, ConnEvent::Closed)?;
    client.delete()?;
    server.delete()?;
    ep.shutdown()?;
    dst.dereg()?;
    srecv.dereg()?;
    src.dereg()?;
    cpeer.delete()?;
    speer.delete()?;
    Ok(())
}

/// Runs `flow` once per provider call, failing that call; returns the number of calls.
fn sweep(flow: fn(&MockFabric) -> rpma::Result<()>) -> u64 {
    let f = MockFabric::new();
    f.faults().count_calls(None);
    f.faults().record_names(true);
    flow(&f).expect("the flow without faults");
    let names = f.faults().recorded();
    let n = f.faults().calls();
    f.faults().disarm();
    assert!(f.live().is_zero(), "leak without faults: {:?}", f.live());
    assert!(n > 20, "suspiciously few provider calls: {n}");
    assert_eq!(names.len() as u64, n);

    let mut swallowed = Vec::new();
    let mut misnamed = Vec::new();
    for k in 1..=n {
        let name = names[(k - 1) as usize];
        let f = MockFabric::new();
        f.faults().fail_nth(k, EIO, None);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| flow(&f)));
        let fired = f.faults().calls() >= k;
        f.faults().disarm();
        let live = f.live();
        match r {
            Err(_) => panic!("the flow panicked with call {k} ({name}) failing"),
            // A failed ibv_get_cq_event is RPMA_E_NO_COMPLETION, which a waiter retries.
            Ok(Ok(())) if name == "ibv_get_cq_event" => {}
            // rpma_utils_get_ibv_context ignores a failure to destroy its temporary CM id (the
            // call right after its rdma_bind_addr / rdma_resolve_addr).
            Ok(Ok(()))
                if name == "rdma_destroy_id"
                    && k >= 2
                    && matches!(names[(k - 2) as usize], "rdma_bind_addr" | "rdma_resolve_addr") => {}
            Ok(Ok(())) => swallowed.push((k, name)),
            Ok(Err(e)) => {
                assert_ne!(e.detail(), Some(TIMEOUT), "the flow stalled with call {k} ({name}) failing: {e}");
                // The public call names itself (`Conn::read`), not the provider step that failed.
                if !e.op().contains("::") || Some(e.op()) == e.failed_call() {
                    misnamed.push(format!("call {k} ({name}): {e}"));
                }
                match name {
                    // librpma: a failed mmap of the APM flush buffer is NOMEM, a failed munmap
                    // INVAL, whatever the errno.
                    "mmap" => assert_eq!(e.kind(), ErrorKind::OutOfMemory, "call {k} ({name}): {e}"),
                    "munmap" => assert_eq!(e.kind(), ErrorKind::InvalidInput, "call {k} ({name}): {e}"),
                    _ => {
                        assert!(
                            matches!(e.kind(), ErrorKind::Provider | ErrorKind::OutOfMemory),
                            "call {k} ({name}): unexpected kind: {e}"
                        );
                        assert_eq!(e.errno(), Some(EIO), "call {k} ({name}): {e}");
                    }
                }
            }
        }
        assert!(fired, "call {k} ({name}) was never made");
        assert!(live.is_zero(), "leak with call {k} ({name}) failing: {live:?}");
    }
    eprintln!("sweep: {n} provider calls, each failed once: {names:?}");
    assert!(swallowed.is_empty(), "injected faults that did not surface: {swallowed:?}");
    assert!(misnamed.is_empty(), "errors naming a provider call, not the Rust item called: {misnamed:#?}");
    n
}

#[test]
fn fault_sweep__client_server_flow() {
    assert!(sweep(flow) > 50);
}

/// A flow over a shared RQ with its own receive CQ and a client with a shared completion
/// channel (waited on with `Conn::wait`).
pub(super) fn flow_srq(f: &MockFabric) -> rpma::Result<()> {
    let dev = Device::lookup(f, ADDR, ContextType::Local)?;
    let speer = Peer::new(&dev)?;
    let cpeer = Peer::new(&dev)?;
    let srq = Srq::new(&speer, Some(&SrqCfg::new().with_rq_size(4).with_rcq_size(4)))?;
    let sbuf = speer.alloc_mr(64, Usage::RECV | Usage::SEND)?;
    let cbuf = cpeer.alloc_mr(64, Usage::SEND | Usage::RECV)?;
    let ep = Ep::listen(&speer, ADDR, PORT)?;
    nonblock(ep.fd());
    let ccfg = ConnCfg::new().with_rcq_size(2).with_shared_channel(true);
    let client = ConnReq::new(&cpeer, ADDR, PORT, Some(&ccfg))?.connect(None)?;
    nonblock(client.event_fd());
    nonblock(client.compl_fd()?);
    let scfg = ConnCfg::new().with_srq(Some(&srq));
    let deadline = Instant::now() + Duration::from_secs(2);
    let sreq = loop {
        match ep.next_conn_req(Some(&scfg)) {
            Ok(r) => break r,
            Err(e) if e.kind() == ErrorKind::NoEvent && Instant::now() < deadline => std::thread::yield_now(),
            Err(e) if e.kind() == ErrorKind::NoEvent => return Err(flow_err(TIMEOUT)),
            Err(e) => return Err(e),
        }
    };
    drop(scfg);
    let server = sreq.connect(None)?;
    nonblock(server.event_fd());
    wait_event(&client, ConnEvent::Established)?;
    wait_event(&server, ConnEvent::Established)?;

    srq.recv(sbuf.slice(0..64)).context(1).post()?;
    client.recv(cbuf.slice(0..64)).context(2).post()?;
    client.send_empty().imm(77).context(3).post()?;
    let rcq = srq.rcq().ok_or_else(|| flow_err("no srq rcq"))?;
    let wc = poll_wc(rcq)?;
    if wc.imm_data() != Some(77) {
        return Err(flow_err("wrong imm"));
    }
    // The client waits on its shared channel for the send completion and then the reply.
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut got = (false, false);
    let mut replied = false;
    while got != (true, true) {
        match client.wait() {
            Ok((cq, is_rcq)) => loop {
                match cq.next_wc()? {
                    Some(wc) if wc.status() != WcStatus::Success => {
                        return Err(flow_err(&format!("error completion {wc:?}")))
                    }
                    Some(_) if is_rcq => got.1 = true,
                    Some(_) => got.0 = true,
                    None => break,
                }
            },
            Err(e) if e.kind() == ErrorKind::NoCompletion => {
                if Instant::now() > deadline {
                    return Err(flow_err(TIMEOUT));
                }
                std::thread::yield_now();
            }
            Err(e) => return Err(e),
        }
        if got.0 && !replied {
            server.send_empty().context(4).post()?;
            poll_wc(server.cq())?;
            replied = true;
        }
    }
    server.disconnect()?;
    wait_event(&client, ConnEvent::Closed)?;
    client.disconnect()?;
    wait_event(&server, ConnEvent::Closed)?;
    client.delete()?;
    server.delete()?;
    ep.shutdown()?;
    srq.delete()?;
    sbuf.dereg()?;
    cbuf.dereg()?;
    Ok(())
}

#[test]
fn fault_sweep__srq_shared_channel_flow() {
    assert!(sweep(flow_srq) > 50);
}

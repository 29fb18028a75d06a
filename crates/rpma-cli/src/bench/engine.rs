//! The measurement: server and client sides, generic over the transport.
//!
//! Protocol: the client's connection private data says what it needs (largest size, queue
//! depth: `u64` + `u32`, little endian); the server answers with the descriptor of its target
//! region and its peer configuration (direct write to PMem, so persistent flushes are allowed).
//! Both sides keep `qd` receives posted; the server echoes every message with a send of the
//! same size and stops serving a connection on a zero-length send with immediate data
//! [`STOP_IMM`], after which the client disconnects.

use std::io::IsTerminal;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use rpma::generic::{Conn, ConnCfg, ConnReq, Device, Ep, MrLocal, Peer};
use rpma::{
    CompletionFlags, ConnEvent, ContextType, ErrorKind, FlushType, MrRemote, PeerCfg, Transport, Usage, Wc, WcStatus,
    MR_DESCRIPTOR_SIZE, PEER_CFG_DESCRIPTOR_SIZE,
};

use super::report::{Baseline, BenchReport, Latency, RunResult, SCHEMA_VERSION};
use super::{Amount, Op, Plan, Role, MAX_QD, MAX_SIZE};
use crate::backend::BackendKind;

/// The immediate data of the message that ends a connection's service.
pub const STOP_IMM: u32 = u32::MAX;
const RECV_TAG: u64 = 1 << 62;
const SEND_TAG: u64 = 1 << 61;
const STOP_ID: u64 = SEND_TAG | (1 << 40);
/// The largest target region (operations beyond it wrap to offset 0).
const MAX_REGION: usize = 256 << 20;
const HIST_MAX_NS: u64 = 3_600_000_000_000;
const WC_BATCH: usize = 32;
/// Empty polls a server thread spins through, then yields through, before it sleeps on its
/// completion channel (busy enough for ping-pong latency, polite to the client's threads).
const SERVER_SPINS: u32 = 1024;
const SERVER_YIELDS: u32 = 50_000;

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_NS, 3).expect("constant histogram bounds are valid")
}

fn region_len(max: usize, qd: usize) -> usize {
    max.saturating_mul(qd).min(MAX_REGION).max(max)
}

/// The offset of `slot`'s buffer of `size` bytes in a region of `region` bytes (8-aligned when
/// `size` is).
const fn slot_offset(slot: usize, size: usize, region: usize) -> usize {
    let off = slot * size;
    if off + size <= region {
        off
    } else {
        0
    }
}

fn request_pdata(max: usize, qd: usize) -> [u8; 12] {
    let mut p = [0u8; 12];
    p[..8].copy_from_slice(&(max as u64).to_le_bytes());
    p[8..].copy_from_slice(&(qd as u32).to_le_bytes());
    p
}

/// Reads a client's request (untrusted: bounded like the command line).
fn parse_request(p: &[u8]) -> Result<(usize, usize)> {
    let (Some(m), Some(q)) = (p.get(..8), p.get(8..12)) else {
        bail!("the client's private data is too short ({} bytes) for a benchmark request", p.len());
    };
    let max = u64::from_le_bytes(m.try_into().expect("8 bytes"));
    let qd = u32::from_le_bytes(q.try_into().expect("4 bytes"));
    if max == 0 || max > MAX_SIZE as u64 || qd == 0 || qd as usize > MAX_QD {
        bail!("the client asks for size {max} and queue depth {qd}: outside 1..=1G and 1..={MAX_QD}");
    }
    Ok((max as usize, qd as usize))
}

fn conn_cfg<T: Transport>(qd: usize) -> ConnCfg<T> {
    let q = u32::try_from(qd).unwrap_or(u32::MAX);
    let cfg = ConnCfg::new();
    cfg.set_sq_size(2 * q + 2).set_rq_size(q + 2).set_cq_size(4 * q + 8);
    cfg
}

fn check(wc: &Wc, who: &str) -> Result<()> {
    if wc.status != WcStatus::Success {
        bail!("{who}: operation {:#x} completed with {:?} (vendor error {})", wc.wr_id, wc.status, wc.vendor_err);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Server

/// One accepted connection with its memory.
struct Served<T: Transport> {
    conn: Conn<T>,
    _target: MrLocal<T>,
    msgs: MrLocal<T>,
    max: usize,
    qd: usize,
}

fn accept<T: Transport>(peer: &Peer<T>, ep: &Ep<T>, qd_limit: usize, abort: &AtomicBool) -> Result<Served<T>> {
    // Wait for a request, giving up when the client side failed (loopback).
    loop {
        if abort.load(Ordering::Acquire) {
            bail!("the client gave up");
        }
        let mut fds = [nix::poll::PollFd::new(ep.as_fd(), nix::poll::PollFlags::POLLIN)];
        if nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(100u16)).context("polling the endpoint")? > 0 {
            break;
        }
    }
    let cfg = conn_cfg::<T>(qd_limit);
    let req = ep.next_conn_req(Some(&cfg)).context("receiving a connection request")?;
    let (max, qd) = match parse_request(req.private_data()) {
        Ok((max, qd)) if qd <= qd_limit => (max, qd),
        Ok((_, qd)) => {
            let _ = req.delete();
            bail!("a client asks for queue depth {qd}, above this server's --qd {qd_limit}");
        }
        Err(e) => {
            let _ = req.delete();
            return Err(e);
        }
    };
    let usage = Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_PERSISTENT | Usage::FLUSH_TYPE_VISIBILITY;
    let target = peer.alloc_mr(region_len(max, qd), usage).context("registering the target region")?;
    let msgs = peer.alloc_mr(2 * qd * max, Usage::RECV | Usage::SEND).context("registering message buffers")?;
    for slot in 0..qd {
        req.recv(&msgs, slot * max, max, RECV_TAG | slot as u64).context("posting a receive")?;
    }
    let pcfg = PeerCfg::new();
    pcfg.set_direct_write_to_pmem(true);
    let mut pdata = target.descriptor().to_vec();
    pdata.extend_from_slice(&pcfg.descriptor());
    let conn = req.connect(Some(&pdata)).context("accepting a connection")?;
    match conn.next_event().context("waiting for the connection")? {
        ConnEvent::Established => {}
        ev => bail!("server: unexpected connection event {ev:?}"),
    }
    Ok(Served { conn, _target: target, msgs, max, qd })
}

/// Echoes messages until the stop message, then waits for the client to disconnect.
fn serve<T: Transport>(s: Served<T>) -> Result<()> {
    let cq = s.conn.cq();
    let mut wcs = [Wc::EMPTY; WC_BATCH];
    let mut idle = 0u32;
    'serve: loop {
        let n = match cq.get_wc(&mut wcs) {
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::NoCompletion => {
                idle += 1;
                if idle < SERVER_SPINS {
                    std::hint::spin_loop();
                } else if idle < SERVER_SPINS + SERVER_YIELDS {
                    std::thread::yield_now();
                } else {
                    // The CQ is armed: a completion after the poll above still wakes us.
                    cq.wait().context("server: waiting for completions")?;
                    idle = 0;
                }
                continue;
            }
            Err(e) => return Err(e).context("server: polling"),
        };
        idle = 0;
        for wc in &wcs[..n] {
            check(wc, "server")?;
            if wc.wr_id & RECV_TAG == 0 {
                continue; // an echo's send completion
            }
            if wc.imm_data == Some(STOP_IMM) {
                break 'serve;
            }
            let slot = (wc.wr_id & !RECV_TAG) as usize;
            s.conn.recv(Some(&s.msgs), slot * s.max, s.max, wc.wr_id).context("server: posting a receive")?;
            let len = (wc.byte_len as usize).min(s.max);
            let src = (len > 0).then_some(&s.msgs);
            let off = if len > 0 { (s.qd + slot) * s.max } else { 0 };
            s.conn.send(src, off, len, CompletionFlags::ALWAYS, SEND_TAG | slot as u64).context("server: echoing")?;
        }
    }
    match s.conn.next_event().context("server: waiting for the disconnect")? {
        ConnEvent::Closed => {}
        ev => bail!("server: unexpected connection event {ev:?}"),
    }
    s.conn.delete().context("server: deleting the connection")?;
    Ok(())
}

/// Accepts `conns` connections and serves each on its own thread.
fn run_server<T: Transport>(peer: &Peer<T>, ep: &Ep<T>, conns: usize, qd: usize, abort: &AtomicBool) -> Result<()> {
    std::thread::scope(|sc| {
        let mut handles = Vec::new();
        for _ in 0..conns {
            let served = accept(peer, ep, qd, abort)?;
            handles.push(sc.spawn(move || serve(served)));
        }
        for h in handles {
            h.join().map_err(|_| anyhow::anyhow!("a server thread panicked"))??;
        }
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// Client

/// One client connection and its state.
struct Lane<T: Transport> {
    conn: Conn<T>,
    local: MrLocal<T>,
    msgs: MrLocal<T>,
    remote: MrRemote,
    region: usize,
    max: usize,
    qd: usize,
    /// Post times of the operations in flight, oldest at `head` (completions come in order).
    posted_at: Vec<Instant>,
    head: usize,
    inflight: usize,
    seq: u64,
}

fn connect<T: Transport>(peer: &Peer<T>, addr: &str, port: u16, max: usize, qd: usize) -> Result<Lane<T>> {
    let cfg = conn_cfg::<T>(qd);
    let req = ConnReq::new(peer, addr, &port.to_string(), Some(&cfg)).context("creating a connection request")?;
    let conn = req.connect(Some(&request_pdata(max, qd))).context("connecting")?;
    match conn.next_event().context("waiting for the connection")? {
        ConnEvent::Established => {}
        ev => bail!("client: the connection was not established: {ev:?}"),
    }
    let pd = conn.private_data();
    let Some(desc) = pd.get(..MR_DESCRIPTOR_SIZE) else {
        bail!("client: the server's private data ({} bytes) holds no region descriptor", pd.len());
    };
    let remote = MrRemote::from_descriptor(desc).context("client: the server's region descriptor")?;
    if let Some(p) = pd.get(MR_DESCRIPTOR_SIZE..MR_DESCRIPTOR_SIZE + PEER_CFG_DESCRIPTOR_SIZE) {
        conn.apply_remote_peer_cfg(&PeerCfg::from_descriptor(p).context("client: the server's peer configuration")?);
    }
    let region = region_len(max, qd);
    if (remote.len() as usize) < region.min(max) {
        bail!("client: the server's region ({} bytes) is smaller than a message ({max} bytes)", remote.len());
    }
    let region = region.min(remote.len() as usize);
    let usage = Usage::WRITE_SRC | Usage::READ_DST | Usage::SEND | Usage::RECV;
    let local = peer.alloc_mr(region, usage).context("registering the local region")?;
    let msgs = peer.alloc_mr(qd * max, Usage::RECV).context("registering receive buffers")?;
    for slot in 0..qd {
        conn.recv(Some(&msgs), slot * max, max, RECV_TAG | slot as u64).context("posting a receive")?;
    }
    let now = Instant::now();
    Ok(Lane { conn, local, msgs, remote, region, max, qd, posted_at: vec![now; qd], head: 0, inflight: 0, seq: 0 })
}

/// When a phase ends.
#[derive(Clone, Copy)]
enum Stop {
    Count(u64),
    Until(Instant),
}

impl<T: Transport> Lane<T> {
    fn post(&mut self, op: Op, size: usize, at: Instant) -> Result<()> {
        let slot = (self.seq % self.qd as u64) as usize;
        let off = slot_offset(slot, size, self.region);
        let id = slot as u64;
        let all = CompletionFlags::ALWAYS;
        let c = &self.conn;
        let (l, r) = (Some(&self.local), Some(&self.remote));
        match op {
            Op::Read => c.read(l, off, r, off, size, all, id),
            Op::Write => c.write(r, off, l, off, size, all, id),
            Op::WriteFlush => c
                .write(r, off, l, off, size, CompletionFlags::ON_ERROR, id)
                .and_then(|()| c.flush(&self.remote, off, size, FlushType::Persistent, all, id)),
            Op::Flush => c.flush(&self.remote, off, size, FlushType::Persistent, all, id),
            Op::AtomicWrite => c.atomic_write(&self.remote, off & !7, self.seq.to_le_bytes(), all, id),
            Op::Send => c.send(l, off, size, all, SEND_TAG | id),
            Op::SendImm => c.send_with_imm(l, off, size, all, slot as u32, SEND_TAG | id),
            Op::WriteImm => c.write_with_imm(r, off, l, off, size, all, slot as u32, SEND_TAG | id),
        }
        .with_context(|| format!("posting {} of {size} B", op.name()))?;
        let tail = (self.head + self.inflight) % self.qd;
        self.posted_at[tail] = at;
        self.inflight += 1;
        self.seq += 1;
        Ok(())
    }

    /// Polls once; returns the operations completed.
    fn poll(&mut self, op: Op, hist: &mut Histogram<u64>, record: bool, wcs: &mut [Wc]) -> Result<u64> {
        let n = match self.conn.cq().get_wc(wcs) {
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::NoCompletion => return Ok(0),
            Err(e) => return Err(e).context("client: polling"),
        };
        let now = Instant::now();
        let mut done = 0;
        for wc in &wcs[..n] {
            check(wc, op.name())?;
            if wc.wr_id & SEND_TAG != 0 {
                continue; // a message's send completion: its echo completes it
            }
            if wc.wr_id & RECV_TAG != 0 {
                let slot = (wc.wr_id & !RECV_TAG) as usize;
                self.conn.recv(Some(&self.msgs), slot * self.max, self.max, wc.wr_id).context("posting a receive")?;
            }
            if self.inflight == 0 {
                bail!("client: a completion ({:#x}) for no operation in flight", wc.wr_id);
            }
            let t0 = self.posted_at[self.head];
            self.head = (self.head + 1) % self.qd;
            self.inflight -= 1;
            done += 1;
            if record {
                let mut ns = u64::try_from(now.duration_since(t0).as_nanos()).unwrap_or(u64::MAX);
                if op.is_ping_pong() {
                    ns /= 2;
                }
                hist.saturating_record(ns.max(1));
            }
        }
        Ok(done)
    }

    /// Ends the connection: the stop message, then a disconnect.
    fn finish(self) -> Result<()> {
        self.conn.send_with_imm(None, 0, 0, CompletionFlags::ALWAYS, STOP_IMM, STOP_ID).context("sending stop")?;
        let mut wcs = [Wc::EMPTY; WC_BATCH];
        'wait: loop {
            match self.conn.cq().get_wc(&mut wcs) {
                Ok(n) => {
                    for wc in &wcs[..n] {
                        check(wc, "stop")?;
                        if wc.wr_id == STOP_ID {
                            break 'wait;
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::NoCompletion => std::hint::spin_loop(),
                Err(e) => return Err(e).context("client: polling"),
            }
        }
        self.conn.disconnect().context("disconnecting")?;
        match self.conn.next_event().context("waiting for the disconnect")? {
            ConnEvent::Closed => {}
            ev => bail!("client: unexpected connection event {ev:?}"),
        }
        self.conn.delete().context("deleting the connection")?;
        Ok(())
    }
}

/// Shared progress of the current run.
struct Progress {
    run: AtomicUsize,
    done: AtomicU64,
    finished: AtomicBool,
}

/// Runs one phase on a thread's lanes; returns the operations completed and the time taken.
fn drive<T: Transport>(
    lanes: &mut [Lane<T>],
    op: Op,
    size: usize,
    stop: Stop,
    hist: &mut Histogram<u64>,
    record: bool,
    progress: &Progress,
) -> Result<(u64, Duration)> {
    let mut wcs = [Wc::EMPTY; WC_BATCH];
    let mut posted = vec![0u64; lanes.len()];
    let mut total = 0u64;
    let mut unreported = 0u64;
    let start = Instant::now();
    loop {
        let mut busy = false;
        for (lane, posted) in lanes.iter_mut().zip(posted.iter_mut()) {
            while lane.inflight < lane.qd {
                let at = Instant::now();
                let more = match stop {
                    Stop::Count(n) => *posted < n,
                    Stop::Until(t) => at < t,
                };
                if !more {
                    break;
                }
                lane.post(op, size, at)?;
                *posted += 1;
            }
            if lane.inflight > 0 {
                busy = true;
                let d = lane.poll(op, hist, record, &mut wcs)?;
                total += d;
                unreported += d;
            }
        }
        if unreported >= 256 || !busy {
            progress.done.fetch_add(unreported, Ordering::Relaxed);
            unreported = 0;
        }
        if !busy {
            return Ok((total, start.elapsed()));
        }
    }
}

/// Per thread and run: operations, time, latencies.
type Measured = (u64, Duration, Histogram<u64>);

#[allow(clippy::too_many_arguments)]
fn client_thread<T: Transport>(
    mut lanes: Vec<Lane<T>>,
    plan: &Plan,
    runs: &[(Op, usize)],
    barrier: &Barrier,
    failed: &AtomicBool,
    progress: &Progress,
) -> Result<Vec<Measured>> {
    let mut out = Vec::with_capacity(runs.len());
    let mut error = None;
    for &(op, size) in runs {
        let mut hist = new_histogram();
        // Warm-up, then the measurement; every thread starts each phase together. Every thread
        // (and the coordinator) passes both barriers of every run, even after a failure.
        barrier.wait();
        let skip = failed.load(Ordering::Acquire);
        let warm = if skip {
            Ok((0, Duration::ZERO))
        } else {
            drive(&mut lanes, op, size, Stop::Count(plan.warmup), &mut hist, false, progress)
        };
        barrier.wait();
        if skip {
            continue;
        }
        let r = warm.and_then(|_| {
            let stop = match plan.amount {
                Amount::Iters(n) => Stop::Count(n),
                Amount::Duration(d) => Stop::Until(Instant::now() + d),
            };
            drive(&mut lanes, op, size, stop, &mut hist, true, progress)
        });
        match r {
            Ok((n, t)) => out.push((n, t, hist)),
            Err(e) => {
                failed.store(true, Ordering::Release);
                error = Some(e);
            }
        }
    }
    if let Some(e) = error {
        return Err(e);
    }
    if failed.load(Ordering::Acquire) {
        bail!("another client thread failed");
    }
    for lane in lanes {
        lane.finish()?;
    }
    Ok(out)
}

fn memcpy_baseline(size: usize, ops: u64) -> f64 {
    let src = vec![0x5Au8; size];
    let mut dst = vec![0u8; size];
    let budget = Duration::from_millis(200);
    // Batches of copies between clock reads, so the clock does not dominate small sizes.
    let batch = (1usize << 20).div_ceil(size).clamp(1, 1024) as u64;
    let start = Instant::now();
    let mut n = 0u64;
    while n < ops.max(16) && (n < 16 || start.elapsed() < budget) {
        for _ in 0..batch {
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&mut dst);
        }
        n += batch;
    }
    (n as f64 * size as f64) / start.elapsed().as_secs_f64() / 1e9
}

fn show_progress(plan: &Plan, runs: &[(Op, usize)], progress: &Progress) {
    let tty = plan.progress && std::io::stderr().is_terminal();
    let mut current = usize::MAX;
    let mut started = Instant::now();
    let mut bar: Option<ProgressBar> = None;
    while !progress.finished.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(50));
        if !tty {
            continue;
        }
        let run = progress.run.load(Ordering::Acquire);
        if run != current {
            if let Some(b) = bar.take() {
                b.finish_and_clear();
            }
            current = run;
            started = Instant::now();
        }
        let Some(&(op, size)) = runs.get(run) else { continue };
        if bar.is_none() && started.elapsed() >= Duration::from_secs(1) {
            let len = match plan.amount {
                Amount::Iters(n) => (n + plan.warmup) * plan.conns as u64,
                Amount::Duration(d) => d.as_millis() as u64,
            };
            let b = ProgressBar::new(len);
            let style = ProgressStyle::with_template("{msg} [{bar:40}] {percent}% {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_bar());
            b.set_style(style.progress_chars("=> "));
            b.set_message(format!("{} {size} B", op.name()));
            bar = Some(b);
        }
        if let Some(b) = &bar {
            match plan.amount {
                Amount::Iters(_) => b.set_position(progress.done.load(Ordering::Relaxed)),
                Amount::Duration(_) => b.set_position(started.elapsed().as_millis() as u64),
            }
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
}

/// Runs the client side of every run on `conns` connections to `addr:port`.
fn run_client<T: Transport>(peer: &Peer<T>, plan: &Plan, addr: &str, port: u16) -> Result<Vec<RunResult>> {
    let runs: Vec<(Op, usize)> = plan.ops.iter().flat_map(|op| plan.sizes.iter().map(move |s| (*op, *s))).collect();
    let max = plan.max_size();
    let mut per_thread: Vec<Vec<Lane<T>>> = (0..plan.threads).map(|_| Vec::new()).collect();
    for i in 0..plan.conns {
        let lane = connect(peer, addr, port, max, plan.qd)?;
        per_thread[i % plan.threads].push(lane);
    }
    let barrier = Barrier::new(plan.threads + 1);
    let failed = AtomicBool::new(false);
    let progress = Progress { run: AtomicUsize::new(0), done: AtomicU64::new(0), finished: AtomicBool::new(false) };
    let measured: Vec<Result<Vec<Measured>>> = std::thread::scope(|sc| {
        let handles: Vec<_> = per_thread
            .into_iter()
            .map(|lanes| {
                let (runs, barrier, failed, progress) = (&runs, &barrier, &failed, &progress);
                sc.spawn(move || client_thread(lanes, plan, runs, barrier, failed, progress))
            })
            .collect();
        let monitor = sc.spawn(|| show_progress(plan, &runs, &progress));
        // The coordinator takes part in the barriers to move the progress to each run.
        for i in 0..runs.len() {
            progress.done.store(0, Ordering::Relaxed);
            progress.run.store(i, Ordering::Release);
            barrier.wait();
            barrier.wait();
        }
        let results =
            handles.into_iter().map(|h| h.join().unwrap_or_else(|_| bail!("a client thread panicked"))).collect();
        progress.finished.store(true, Ordering::Release);
        let _ = monitor.join();
        results
    });
    let mut per_run: Vec<Measured> = runs.iter().map(|_| (0, Duration::ZERO, new_histogram())).collect();
    for m in measured {
        for (acc, (n, t, h)) in per_run.iter_mut().zip(m?) {
            acc.0 += n;
            acc.1 = acc.1.max(t);
            acc.2.add(&h).context("merging latency histograms")?;
        }
    }
    let mut results = Vec::with_capacity(runs.len());
    for (&(op, size), (ops, elapsed, hist)) in runs.iter().zip(per_run) {
        let secs = elapsed.as_secs_f64().max(1e-9);
        let bytes = ops as f64 * size as f64;
        let gb_s = bytes / secs / 1e9;
        let baseline = plan.baseline.then(|| {
            let m = memcpy_baseline(size, ops);
            Baseline { gb_s: m, ratio: if m > 0.0 { gb_s / m } else { 0.0 } }
        });
        results.push(RunResult {
            op: op.name(),
            size,
            qd: plan.qd,
            conns: plan.conns,
            threads: plan.threads,
            ops,
            elapsed_s: secs,
            latency_kind: if op.is_ping_pong() { "half_round_trip" } else { "completion" },
            latency_ns: Latency::of(&hist),
            mb_s: bytes / secs / 1e6,
            gb_s,
            msg_rate: ops as f64 / secs,
            baseline,
        });
    }
    Ok(results)
}

/// Runs `plan` on `transport`.
pub(super) fn run<T: Transport>(transport: &T, plan: &Plan, backend: BackendKind) -> Result<BenchReport> {
    let report =
        |device: String, results| BenchReport { schema: SCHEMA_VERSION, backend: backend.name(), device, results };
    let port = plan.port.to_string();
    match &plan.role {
        Role::Server => {
            let dev = Device::lookup(transport, &plan.addr, ContextType::Local)
                .with_context(|| format!("no RDMA device owns {}", plan.addr))?;
            let peer = Peer::new(&dev).context("creating the peer")?;
            let ep =
                Ep::listen(&peer, &plan.addr, &port).with_context(|| format!("listening on {}:{port}", plan.addr))?;
            eprintln!("rpma bench: serving {} connection(s) on {}:{port}", plan.conns, plan.addr);
            run_server(&peer, &ep, plan.conns, plan.qd, &AtomicBool::new(false))?;
            ep.shutdown().context("shutting the endpoint down")?;
            Ok(report(dev.name(), Vec::new()))
        }
        Role::Client { addr, port } => {
            let dev = Device::lookup(transport, addr, ContextType::Remote)
                .with_context(|| format!("no RDMA device routes to {addr}"))?;
            let peer = Peer::new(&dev).context("creating the peer")?;
            let results = run_client(&peer, plan, addr, *port)?;
            Ok(report(dev.name(), results))
        }
        Role::Loopback => {
            let sdev = Device::lookup(transport, &plan.addr, ContextType::Local)
                .with_context(|| format!("no RDMA device owns {}", plan.addr))?;
            let server_peer = Peer::new(&sdev).context("creating the server's peer")?;
            let ep = Ep::listen(&server_peer, &plan.addr, &port)
                .with_context(|| format!("listening on {}:{port}", plan.addr))?;
            let cdev = Device::lookup(transport, &plan.addr, ContextType::Remote)
                .with_context(|| format!("no RDMA device routes to {}", plan.addr))?;
            let peer = Peer::new(&cdev).context("creating the client's peer")?;
            let abort = AtomicBool::new(false);
            let (client, server) = std::thread::scope(|sc| {
                let server = sc.spawn(|| run_server(&server_peer, &ep, plan.conns, plan.qd, &abort));
                let client = run_client(&peer, plan, &plan.addr, plan.port);
                if client.is_err() {
                    abort.store(true, Ordering::Release);
                }
                (client, server.join().unwrap_or_else(|_| bail!("the server thread panicked")))
            });
            let results = client?;
            server.context("server")?;
            ep.shutdown().context("shutting the endpoint down")?;
            Ok(report(cdev.name(), results))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_are_bounded() {
        assert_eq!(parse_request(&request_pdata(4096, 16)).unwrap(), (4096, 16));
        let mut padded = request_pdata(8, 1).to_vec();
        padded.resize(56, 0);
        assert_eq!(parse_request(&padded).unwrap(), (8, 1));
        assert!(parse_request(&[1, 2, 3]).is_err());
        assert!(parse_request(&request_pdata(0, 1)).is_err());
        assert!(parse_request(&request_pdata(8, 0)).is_err());
        assert!(parse_request(&request_pdata(MAX_SIZE + 1, 1)).is_err());
        assert!(parse_request(&request_pdata(8, MAX_QD + 1)).is_err());
    }

    #[test]
    fn slots_stay_inside_the_region() {
        for (slot, size, region) in [(0, 8, 8), (3, 8, 64), (7, 8, 64), (8, 8, 64), (100, 4096, 8192)] {
            let off = slot_offset(slot, size, region);
            assert!(off + size <= region, "{slot} {size} {region}");
        }
        assert_eq!(slot_offset(3, 8, 64), 24);
        assert_eq!(region_len(8, 4), 32);
        assert_eq!(region_len(1 << 30, 4), 1 << 30);
        assert_eq!(region_len(1 << 20, 1024), MAX_REGION);
    }
}

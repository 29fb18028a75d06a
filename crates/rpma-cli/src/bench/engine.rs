//! The measurement: server and client sides, generic over the transport.
//!
//! Protocol: the client's connection private data says what it needs (largest size, queue
//! depth: `u64` + `u32`, little endian) followed by the descriptor of its inbox (a region of the
//! largest size the server writes into for `write-pingpong`); the server answers with the
//! descriptor of its target region and its peer configuration (direct write to PMem, so
//! persistent flushes are allowed). The client keeps `qd` receives posted, the server `qd + 1`
//! (it echoes before re-posting the receive it consumed); the server echoes every message with
//! a send of the same size and stops serving a connection on a zero-length send with immediate
//! data [`STOP_IMM`], after which the client disconnects.
//!
//! A `write-pingpong` phase starts with a zero-length send with immediate data
//! [`PINGPONG_BIT`]` | size`: the server clears the last byte of the message in its target
//! region and answers with a zero-length send. Then the client writes `size` bytes whose last
//! byte is the iteration number (mod 256) into the server's target region at offset 0; the
//! server polls that byte in its memory and, on the next number, writes `size` bytes with the
//! same last byte into the client's inbox, which the client polls (perftest's `ib_write_lat`
//! scheme). The client ends the phase by writing the number after the next one.

use std::io::IsTerminal;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use rpma::{
    CompletionFlags, Conn, ConnCfg, ConnEvent, ConnReq, ContextType, Device, Ep, FlushType, MrLocal, MrRemote, Peer,
    PeerCfg, Transport, Usage, Wc, WcStatus, MR_DESCRIPTOR_SIZE, PEER_CFG_DESCRIPTOR_SIZE,
};

use super::report::{Baseline, BenchReport, Latency, RunResult, SCHEMA_VERSION};
use super::{Amount, Op, Plan, Role, MAX_QD, MAX_SIZE};
use crate::backend::BackendKind;
use crate::native::{OpCounts, OpPath, Source};

/// The immediate data of the message that ends a connection's service.
pub const STOP_IMM: u32 = u32::MAX;
/// The immediate data bit of the message that starts a `write-pingpong` phase (the low bits are
/// the message size).
pub const PINGPONG_BIT: u32 = 1 << 31;
/// The `wr_id` of the writes of a `write-pingpong`.
const PP_ID: u64 = 1 << 59;
/// The `wr_id` of the message starting a `write-pingpong` phase.
const PP_CTL_ID: u64 = SEND_TAG | (1 << 41);
/// Request private data: size, queue depth, the client's inbox descriptor.
const REQUEST_LEN: usize = 12 + MR_DESCRIPTOR_SIZE;
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

fn request_pdata(max: usize, qd: usize, inbox: &[u8]) -> [u8; REQUEST_LEN] {
    let mut p = [0u8; REQUEST_LEN];
    p[..8].copy_from_slice(&(max as u64).to_le_bytes());
    p[8..12].copy_from_slice(&(qd as u32).to_le_bytes());
    let n = inbox.len().min(MR_DESCRIPTOR_SIZE);
    p[12..12 + n].copy_from_slice(&inbox[..n]);
    p
}

/// Reads a client's request (untrusted: bounded like the command line): size, queue depth and
/// the client's inbox.
fn parse_request(p: &[u8]) -> Result<(usize, usize, MrRemote)> {
    let (Some(m), Some(q), Some(d)) = (p.get(..8), p.get(8..12), p.get(12..REQUEST_LEN)) else {
        bail!("the client's private data is too short ({} bytes) for a benchmark request", p.len());
    };
    let inbox = MrRemote::from_descriptor(d).context("the client's inbox descriptor")?;
    let max = u64::from_le_bytes(m.try_into().expect("8 bytes"));
    let qd = u32::from_le_bytes(q.try_into().expect("4 bytes"));
    if max == 0 || max > MAX_SIZE as u64 || qd == 0 || qd as usize > MAX_QD {
        bail!("the client asks for size {max} and queue depth {qd}: outside 1..=1G and 1..={MAX_QD}");
    }
    Ok((max as usize, qd as usize, inbox))
}

fn conn_cfg<T: Transport>(qd: usize) -> ConnCfg<T> {
    let q = u32::try_from(qd).unwrap_or(u32::MAX);
    ConnCfg::new().with_sq_size(2 * q + 2).with_rq_size(q + 2).with_cq_size(4 * q + 8)
}

/// What sources hold: any bytes do, the same for every operation.
const SOURCE_BYTE: u8 = 0x5A;

/// Fills a region that operations send or write from, once, in place (nothing is copied per
/// operation): through a plain slice when nothing else can reach its bytes (no remote access
/// granted, nothing in flight), else through its volatile view.
fn fill_source<T: Transport>(mr: &mut MrLocal<T>) {
    match mr.as_mut_slice() {
        Ok(bytes) => bytes.fill(SOURCE_BYTE),
        Err(_) => mr.volatile().fill(SOURCE_BYTE),
    }
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
    target: MrLocal<T>,
    /// Receive slots `0..=qd`, then one send/write source buffer.
    msgs: MrLocal<T>,
    /// The client's inbox (`write-pingpong`).
    inbox: MrRemote,
    max: usize,
    qd: usize,
    busy_poll: bool,
}

impl<T: Transport> Served<T> {
    /// The offset of the buffer echoes and pongs are sent from.
    const fn source(&self) -> usize {
        (self.qd + 1) * self.max
    }
}

fn accept<T: Transport>(
    peer: &Peer<T>,
    ep: &Ep<T>,
    qd_limit: usize,
    busy_poll: bool,
    abort: &AtomicBool,
) -> Result<Served<T>> {
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
    let (max, qd, inbox) = match parse_request(req.private_data()) {
        Ok((max, qd, inbox)) if qd <= qd_limit => (max, qd, inbox),
        Ok((_, qd, _)) => {
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
    let mut msgs = peer
        .alloc_mr((qd + 2) * max, Usage::RECV | Usage::SEND | Usage::WRITE_SRC)
        .context("registering message buffers")?;
    fill_source(&mut msgs);
    for slot in 0..=qd {
        req.recv(msgs.slice(slot * max..(slot + 1) * max))
            .context(RECV_TAG | slot as u64)
            .post()
            .context("posting a receive")?;
    }
    let pcfg = PeerCfg::new().with_direct_write_to_pmem(true);
    let mut pdata = target.descriptor().to_vec();
    pdata.extend_from_slice(&pcfg.descriptor());
    let conn = req.connect(Some(&pdata)).context("accepting a connection")?;
    match conn.next_event().context("waiting for the connection")? {
        ConnEvent::Established => {}
        ev => bail!("server: unexpected connection event {ev:?}"),
    }
    Ok(Served { conn, target, msgs, inbox, max, qd, busy_poll })
}

/// Checks a server's completion during a `write-pingpong`: only its own sends may complete.
fn pingpong_wc(wc: &Wc) -> Result<()> {
    check(wc, "server")?;
    if wc.wr_id & RECV_TAG != 0 {
        bail!("server: the client sent a message during a write ping-pong");
    }
    Ok(())
}

/// Serves a `write-pingpong` phase of `size`-byte messages (see the module's documentation).
fn pingpong<T: Transport>(s: &Served<T>, size: usize) -> Result<()> {
    if size == 0 || size > s.max || (s.inbox.len() as usize) < size {
        bail!("server: the client asks for a write ping-pong of {size} B, outside 1..={} and its inbox", s.max);
    }
    let at = size - 1;
    let src = s.source();
    // The client writes the target and the NIC reads the pong's source: both are reached
    // through their volatile views, byte by byte (a plain read of the polled byte could be
    // hoisted out of the loop).
    let (target, msgs) = (s.target.volatile(), s.msgs.volatile());
    target.store_u8(at, 0).context("server: clearing the ping-pong byte")?;
    s.conn.send_empty().context(PP_CTL_ID).post().context("server: answering a ping-pong start")?;
    let mut wcs = [Wc::EMPTY; WC_BATCH];
    let mut prev = 0u8;
    let mut idle = 0u32;
    loop {
        let v = target.load_u8(at).context("server: reading the ping-pong byte")?;
        if v == prev {
            idle = idle.wrapping_add(1);
            if idle % SERVER_SPINS == 0 {
                // A broken connection flushes the posted receives: look now and then.
                let n = s.conn.cq().poll(&mut wcs).context("server: polling")?;
                wcs[..n].iter().try_for_each(pingpong_wc)?;
                if !s.busy_poll {
                    std::thread::yield_now();
                }
            }
            std::hint::spin_loop();
            continue;
        }
        idle = 0;
        if v == prev.wrapping_add(2) {
            return Ok(()); // the end of the phase
        }
        if v != prev.wrapping_add(1) {
            bail!("server: write ping-pong number {v} after {prev}");
        }
        prev = v;
        msgs.store_u8(src + at, v).context("server: writing the pong byte")?;
        s.conn
            .write(s.inbox.at(0), s.msgs.slice(src..src + size))
            .context(PP_ID)
            .post()
            .context("server: writing a pong")?;
        'wait: loop {
            let n = s.conn.cq().poll(&mut wcs).context("server: polling")?;
            for wc in &wcs[..n] {
                pingpong_wc(wc)?;
                if wc.wr_id == PP_ID {
                    break 'wait;
                }
            }
            if n == 0 {
                std::hint::spin_loop();
            }
        }
    }
}

/// Echoes messages until the stop message, then waits for the client to disconnect.
fn serve<T: Transport>(s: Served<T>) -> Result<()> {
    let cq = s.conn.cq();
    let mut wcs = [Wc::EMPTY; WC_BATCH];
    let mut idle = 0u32;
    'serve: loop {
        let n = cq.poll(&mut wcs).context("server: polling")?;
        if n == 0 {
            idle += 1;
            if s.busy_poll || idle < SERVER_SPINS {
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
        idle = 0;
        for wc in &wcs[..n] {
            check(wc, "server")?;
            if wc.wr_id & RECV_TAG == 0 {
                continue; // an echo's send completion
            }
            let slot = (wc.wr_id & !RECV_TAG) as usize;
            let slot_buf = s.msgs.slice(slot * s.max..(slot + 1) * s.max);
            match wc.imm_data {
                Some(STOP_IMM) => break 'serve,
                Some(imm) if imm & PINGPONG_BIT != 0 => {
                    s.conn.recv(slot_buf).context(wc.wr_id).post().context("server: posting a receive")?;
                    pingpong(&s, (imm & !PINGPONG_BIT) as usize)?;
                    continue;
                }
                _ => {}
            }
            // Echo first, then re-post the receive: `qd + 1` receives are posted, so the client
            // (at most `qd` messages in flight) always finds one.
            // The echo goes out of the source buffer, filled once: nothing is copied.
            let len = (wc.byte_len as usize).min(s.max);
            let echo =
                if len > 0 { s.conn.send(s.msgs.slice(s.source()..s.source() + len)) } else { s.conn.send_empty() };
            echo.context(SEND_TAG | slot as u64).post().context("server: echoing")?;
            s.conn.recv(slot_buf).context(wc.wr_id).post().context("server: posting a receive")?;
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
fn run_server<T: Transport>(peer: &Peer<T>, ep: &Ep<T>, plan: &Plan, abort: &AtomicBool) -> Result<()> {
    std::thread::scope(|sc| {
        let mut handles = Vec::new();
        for _ in 0..plan.conns {
            let served = accept(peer, ep, plan.qd, plan.busy_poll, abort)?;
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
    /// Where the server writes its pongs (`write-pingpong`).
    inbox: MrLocal<T>,
    region: usize,
    max: usize,
    qd: usize,
    /// The signaled operations in flight, oldest at `head` (completions come in order): post
    /// time and how many operations its completion retires (itself and the unsignaled ones
    /// posted before it).
    batches: Vec<(Instant, usize)>,
    head: usize,
    /// Signaled operations in flight.
    pending: usize,
    /// Unsignaled operations posted after the last signaled one.
    open: usize,
    /// Operations in flight (signaled or not).
    inflight: usize,
    seq: u64,
    /// `write-pingpong`: the number of the last ping, whether its write has completed.
    pp_seq: u8,
    pp_written: bool,
}

fn connect<T: Transport>(peer: &Peer<T>, addr: &str, port: u16, max: usize, qd: usize) -> Result<Lane<T>> {
    let cfg = conn_cfg::<T>(qd);
    let inbox = peer.alloc_mr(max, Usage::WRITE_DST).context("registering the inbox")?;
    let req = ConnReq::new(peer, addr, &port.to_string(), Some(&cfg)).context("creating a connection request")?;
    let conn = req.connect(Some(&request_pdata(max, qd, &inbox.descriptor()))).context("connecting")?;
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
    let mut local = peer.alloc_mr(region, usage).context("registering the local region")?;
    fill_source(&mut local);
    let msgs = peer.alloc_mr(qd * max, Usage::RECV).context("registering receive buffers")?;
    for slot in 0..qd {
        conn.recv(msgs.slice(slot * max..(slot + 1) * max))
            .context(RECV_TAG | slot as u64)
            .post()
            .context("posting a receive")?;
    }
    let now = Instant::now();
    Ok(Lane {
        conn,
        local,
        msgs,
        remote,
        inbox,
        region,
        max,
        qd,
        batches: vec![(now, 0); qd],
        head: 0,
        pending: 0,
        open: 0,
        inflight: 0,
        seq: 0,
        pp_seq: 0,
        pp_written: false,
    })
}

/// When a phase ends.
#[derive(Clone, Copy)]
enum Stop {
    Count(u64),
    Until(Instant),
}

impl<T: Transport> Lane<T> {
    /// Posts one operation, signaled (its completion retires it and the unsignaled ones before
    /// it) or not (`--cq-mod`).
    ///
    /// Zero copy: the operation names a slice of the local region, filled once when it was
    /// registered; the only byte written per operation is `write-pingpong`'s sequence number.
    fn post(&mut self, op: Op, size: usize, at: Instant, signaled: bool) -> Result<()> {
        let slot = (self.seq % self.qd as u64) as usize;
        let off = slot_offset(slot, size, self.region);
        let id = slot as u64;
        let all = if signaled { CompletionFlags::ALWAYS } else { CompletionFlags::ON_ERROR };
        if op == Op::WritePingpong {
            self.pp_seq = self.pp_seq.wrapping_add(1);
            // The previous ping's write has completed (`--qd 1`): no device reads the byte now.
            self.local.volatile().store_u8(size - 1, self.pp_seq).context("writing the ping byte")?;
            self.pp_written = false;
        }
        let (c, r) = (&self.conn, &self.remote);
        let local = self.local.slice(off..off + size);
        let range = || r.slice(off..off + size);
        match op {
            Op::Read => c.read(local, r.at(off)).flags(all).context(id).post(),
            Op::Write => c.write(r.at(off), local).flags(all).context(id).post(),
            Op::WriteFlush => c
                .write(r.at(off), local)
                .flags(CompletionFlags::ON_ERROR)
                .context(id)
                .post()
                .and_then(|()| c.flush(range(), FlushType::Persistent).flags(all).context(id).post()),
            Op::Flush => c.flush(range(), FlushType::Persistent).flags(all).context(id).post(),
            Op::AtomicWrite => c.atomic_write(r.at(off & !7), self.seq.to_le_bytes()).flags(all).context(id).post(),
            Op::Send => c.send(local).flags(all).context(SEND_TAG | id).post(),
            Op::SendImm => c.send(local).imm(slot as u32).flags(all).context(SEND_TAG | id).post(),
            Op::WriteImm => c.write(r.at(off), local).imm(slot as u32).flags(all).context(SEND_TAG | id).post(),
            Op::WritePingpong => c.write(r.at(0), self.local.slice(..size)).flags(all).context(PP_ID).post(),
        }
        .with_context(|| format!("posting {} of {size} B", op.name()))?;
        if signaled {
            let tail = (self.head + self.pending) % self.qd;
            self.batches[tail] = (at, self.open + 1);
            self.pending += 1;
            self.open = 0;
        } else {
            self.open += 1;
        }
        self.inflight += 1;
        self.seq += 1;
        Ok(())
    }

    /// Re-posts the receive of the completion `wr_id` (its slot of the receive buffers).
    fn repost(&self, wr_id: u64) -> Result<()> {
        let slot = (wr_id & !RECV_TAG) as usize;
        let buf = self.msgs.slice(slot * self.max..(slot + 1) * self.max);
        self.conn.recv(buf).context(wr_id).post().context("posting a receive")
    }

    /// Retires the oldest signaled operation (and the unsignaled ones before it) completed at
    /// `now`; returns how many operations that is.
    fn retire(&mut self, op: Op, now: Instant, hist: &mut Histogram<u64>, record: bool, wr_id: u64) -> Result<u64> {
        if self.pending == 0 {
            bail!("client: a completion ({wr_id:#x}) for no operation in flight");
        }
        let (t0, n) = self.batches[self.head];
        self.head = (self.head + 1) % self.qd;
        self.pending -= 1;
        self.inflight -= n;
        if record {
            let mut ns = u64::try_from(now.duration_since(t0).as_nanos()).unwrap_or(u64::MAX);
            if op.is_half_round_trip() {
                ns /= 2;
            }
            hist.saturating_record(ns.max(1));
        }
        Ok(n as u64)
    }

    /// Polls until `want` (a send's `wr_id`) has completed and, if `recv`, a message has arrived
    /// (its receive is re-posted); other completions are errors.
    fn await_control(&mut self, want: u64, mut recv: bool, wcs: &mut [Wc]) -> Result<()> {
        let mut sent = false;
        while !sent || recv {
            let n = self.conn.cq().poll(wcs).context("client: polling")?;
            if n == 0 {
                std::hint::spin_loop();
                continue;
            }
            for wc in &wcs[..n] {
                check(wc, "client")?;
                if wc.wr_id == want {
                    sent = true;
                } else if wc.wr_id & RECV_TAG != 0 && recv {
                    self.repost(wc.wr_id)?;
                    recv = false;
                } else {
                    bail!("client: unexpected completion {:#x} around a write ping-pong", wc.wr_id);
                }
            }
        }
        Ok(())
    }

    /// Starts a `write-pingpong` phase: the server clears its byte and answers.
    fn pingpong_begin(&mut self, size: usize, wcs: &mut [Wc]) -> Result<()> {
        self.inbox.volatile().store_u8(size - 1, 0).context("clearing the pong byte")?;
        self.pp_seq = 0;
        let imm = PINGPONG_BIT | u32::try_from(size).context("a ping-pong size")?;
        self.conn.send_empty().imm(imm).context(PP_CTL_ID).post().context("starting a ping-pong")?;
        self.await_control(PP_CTL_ID, true, wcs)
    }

    /// Ends a `write-pingpong` phase: the number after the next one.
    fn pingpong_end(&mut self, size: usize, wcs: &mut [Wc]) -> Result<()> {
        let end = self.pp_seq.wrapping_add(2);
        self.local.volatile().store_u8(size - 1, end).context("writing the end byte")?;
        self.conn
            .write(self.remote.at(0), self.local.slice(..size))
            .context(PP_ID)
            .post()
            .context("ending a ping-pong")?;
        self.await_control(PP_ID, false, wcs)
    }

    /// `write-pingpong`: completes the ping in flight once its write has completed and the pong
    /// has arrived in the inbox.
    fn poll_pingpong(&mut self, size: usize, hist: &mut Histogram<u64>, record: bool, wcs: &mut [Wc]) -> Result<u64> {
        if !self.pp_written {
            let n = self.conn.cq().poll(wcs).context("client: polling")?;
            for wc in &wcs[..n] {
                check(wc, Op::WritePingpong.name())?;
                if wc.wr_id != PP_ID {
                    bail!("client: unexpected completion {:#x} in a write ping-pong", wc.wr_id);
                }
                self.pp_written = true;
            }
            if !self.pp_written {
                return Ok(0);
            }
        }
        // The server writes the inbox: a volatile load, which the compiler can neither hoist
        // out of the caller's polling loop nor fold with the previous one.
        let pong = self.inbox.volatile().load_u8(size - 1).context("reading the pong byte")?;
        if pong != self.pp_seq {
            return Ok(0);
        }
        let now = Instant::now();
        self.retire(Op::WritePingpong, now, hist, record, PP_ID)
    }

    /// Polls once; returns the operations completed.
    fn poll(&mut self, op: Op, size: usize, hist: &mut Histogram<u64>, record: bool, wcs: &mut [Wc]) -> Result<u64> {
        if op == Op::WritePingpong {
            return self.poll_pingpong(size, hist, record, wcs);
        }
        let n = self.conn.cq().poll(wcs).context("client: polling")?;
        if n == 0 {
            return Ok(0);
        }
        let now = Instant::now();
        let mut done = 0;
        for wc in &wcs[..n] {
            check(wc, op.name())?;
            if wc.wr_id & SEND_TAG != 0 {
                continue; // a message's send completion: its echo completes it
            }
            if wc.wr_id & RECV_TAG != 0 {
                self.repost(wc.wr_id)?;
            }
            done += self.retire(op, now, hist, record, wc.wr_id)?;
        }
        Ok(done)
    }

    /// Ends the connection: the stop message, then a disconnect.
    fn finish(self) -> Result<()> {
        self.conn.send_empty().imm(STOP_IMM).context(STOP_ID).post().context("sending stop")?;
        let mut wcs = [Wc::EMPTY; WC_BATCH];
        'wait: loop {
            let n = self.conn.cq().poll(&mut wcs).context("client: polling")?;
            for wc in &wcs[..n] {
                check(wc, "stop")?;
                if wc.wr_id == STOP_ID {
                    break 'wait;
                }
            }
            if n == 0 {
                std::hint::spin_loop();
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
/// `every` operations make a signaled batch (`Plan::signal_every`).
#[allow(clippy::too_many_arguments)]
fn drive<T: Transport>(
    lanes: &mut [Lane<T>],
    op: Op,
    size: usize,
    every: usize,
    stop: Stop,
    hist: &mut Histogram<u64>,
    record: bool,
    progress: &Progress,
) -> Result<(u64, Duration)> {
    let mut wcs = [Wc::EMPTY; WC_BATCH];
    if matches!(stop, Stop::Count(0)) {
        return Ok((0, Duration::ZERO));
    }
    if op == Op::WritePingpong {
        for lane in lanes.iter_mut() {
            lane.pingpong_begin(size, &mut wcs)?;
        }
    }
    let mut posted = vec![0u64; lanes.len()];
    let mut total = 0u64;
    let mut unreported = 0u64;
    let start = Instant::now();
    let elapsed = loop {
        let mut busy = false;
        for (lane, posted) in lanes.iter_mut().zip(posted.iter_mut()) {
            while lane.inflight < lane.qd {
                let at = Instant::now();
                let (more, last) = match stop {
                    Stop::Count(n) => (*posted < n, *posted + 1 == n),
                    Stop::Until(t) => (at < t, false),
                };
                if !more {
                    if lane.open > 0 {
                        // Time is up with unsignaled operations in flight: one more, signaled,
                        // retires them.
                        lane.post(op, size, at, true)?;
                        *posted += 1;
                    }
                    break;
                }
                lane.post(op, size, at, last || lane.open + 1 >= every)?;
                *posted += 1;
            }
            if lane.inflight > 0 {
                busy = true;
                let d = lane.poll(op, size, hist, record, &mut wcs)?;
                total += d;
                unreported += d;
            }
        }
        if unreported >= 256 || !busy {
            progress.done.fetch_add(unreported, Ordering::Relaxed);
            unreported = 0;
        }
        if !busy {
            break start.elapsed();
        }
    };
    if op == Op::WritePingpong {
        for lane in lanes.iter_mut() {
            lane.pingpong_end(size, &mut wcs)?;
        }
    }
    Ok((total, elapsed))
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
            drive(&mut lanes, op, size, plan.signal_every(op), Stop::Count(plan.warmup), &mut hist, false, progress)
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
            drive(&mut lanes, op, size, plan.signal_every(op), stop, &mut hist, true, progress)
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
    let mut counts: Vec<Option<OpCounts>> = Vec::with_capacity(runs.len() + 1);
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
        // The coordinator takes part in the barriers to move the progress to each run, and
        // reads the backend's flush and atomic-write counters as each measurement starts
        // (every thread has finished the run's warm-up and the previous run).
        for i in 0..runs.len() {
            progress.done.store(0, Ordering::Relaxed);
            progress.run.store(i, Ordering::Release);
            barrier.wait();
            barrier.wait();
            counts.push(crate::backend::op_counts::<T>());
        }
        let results =
            handles.into_iter().map(|h| h.join().unwrap_or_else(|_| bail!("a client thread panicked"))).collect();
        counts.push(crate::backend::op_counts::<T>());
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
    for (i, (&(op, size), (ops, elapsed, hist))) in runs.iter().zip(per_run).enumerate() {
        let path = op_path(
            op,
            ops,
            peer.capabilities(),
            counts.get(i).copied().flatten(),
            counts.get(i + 1).copied().flatten(),
        );
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
            latency_kind: if op.is_half_round_trip() { "half_round_trip" } else { "completion" },
            latency_ns: Latency::of(&hist),
            mb_s: bytes / secs / 1e6,
            gb_s,
            msg_rate: ops as f64 / secs,
            baseline,
            op_path: path,
        });
    }
    Ok(results)
}

/// Whether a run's flushes or atomic writes went native: from the backend's counters between
/// the start of its measurement and the start of the next run's (so the next run's warm-up,
/// whose operations take the same path, counts too), else (the mock) the device's capabilities.
/// `None` for an operation that posts neither.
fn op_path(
    op: Op,
    ops: u64,
    caps: &rpma::Capabilities,
    before: Option<OpCounts>,
    after: Option<OpCounts>,
) -> Option<OpPath> {
    let counts = match (before, after) {
        (Some(b), Some(a)) => a.since(b),
        _ => OpCounts::by_capabilities(
            caps,
            if op.flushes() { ops } else { 0 },
            if op.atomic_writes() { ops } else { 0 },
        ),
    };
    if op.flushes() {
        counts.flush()
    } else if op.atomic_writes() {
        counts.atomic_write()
    } else {
        None
    }
}

/// Where the report's `op_path`s come from on transport `T`.
fn op_path_source<T: Transport>() -> Source {
    if crate::backend::op_counts::<T>().is_some() {
        Source::Counters
    } else {
        Source::Capabilities
    }
}

/// Runs `plan` on `transport`.
pub(super) fn run<T: Transport>(transport: &T, plan: &Plan, backend: BackendKind) -> Result<BenchReport> {
    let report = |device: String, results| BenchReport {
        schema: SCHEMA_VERSION,
        backend: backend.name(),
        device,
        op_path_source: op_path_source::<T>(),
        results,
    };
    let port = plan.port.to_string();
    match &plan.role {
        Role::Server => {
            let dev = Device::lookup(transport, &plan.addr, ContextType::Local)
                .with_context(|| format!("no RDMA device owns {}", plan.addr))?;
            let peer = Peer::new(&dev).context("creating the peer")?;
            let ep =
                Ep::listen(&peer, &plan.addr, &port).with_context(|| format!("listening on {}:{port}", plan.addr))?;
            crate::out::err_line(format_args!(
                "rpma bench: serving {} connection(s) on {}:{port}",
                plan.conns, plan.addr
            ));
            run_server(&peer, &ep, plan, &AtomicBool::new(false))?;
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
                let server = sc.spawn(|| run_server(&server_peer, &ep, plan, &abort));
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

    /// A region descriptor: 64 bytes, usage 1.
    const DESC: [u8; MR_DESCRIPTOR_SIZE] = {
        let mut d = [0u8; MR_DESCRIPTOR_SIZE];
        d[8] = 64;
        d[MR_DESCRIPTOR_SIZE - 1] = 1;
        d
    };

    #[test]
    fn requests_round_trip_and_are_bounded() {
        let remote = MrRemote::from_descriptor(&DESC).unwrap();
        let (max, qd, inbox) = parse_request(&request_pdata(4096, 16, &DESC)).unwrap();
        assert_eq!((max, qd, inbox.len()), (4096, 16, remote.len()));
        let mut padded = request_pdata(8, 1, &DESC).to_vec();
        padded.resize(56, 0);
        assert_eq!(parse_request(&padded).map(|(m, q, _)| (m, q)).unwrap(), (8, 1));
        assert!(parse_request(&[1, 2, 3]).is_err());
        assert!(parse_request(&request_pdata(8, 1, &DESC)[..20]).is_err(), "no inbox");
        assert!(parse_request(&request_pdata(8, 1, &[0; MR_DESCRIPTOR_SIZE])).is_err(), "a bad inbox");
        assert!(parse_request(&request_pdata(0, 1, &DESC)).is_err());
        assert!(parse_request(&request_pdata(8, 0, &DESC)).is_err());
        assert!(parse_request(&request_pdata(MAX_SIZE + 1, 1, &DESC)).is_err());
        assert!(parse_request(&request_pdata(8, MAX_QD + 1, &DESC)).is_err());
    }

    #[test]
    fn the_path_of_a_run_comes_from_the_counters_or_the_capabilities() {
        let mut caps = rpma::Capabilities::roce_defaults();
        assert_eq!(op_path(Op::Write, 10, &caps, None, None), None);
        assert_eq!(op_path(Op::Flush, 10, &caps, None, None), Some(OpPath::Emulated));
        caps.native_flush = true;
        assert_eq!(op_path(Op::WriteFlush, 10, &caps, None, None), Some(OpPath::Native));
        assert_eq!(op_path(Op::AtomicWrite, 10, &caps, None, None), Some(OpPath::Emulated));
        // With counters (verbs), only the difference counts, and only the run's own kind.
        let before = OpCounts { flush_emulated: 7, atomic_write_native: 3, ..OpCounts::default() };
        let after = OpCounts { flush_persistent_read: 110, atomic_write_native: 9, ..before };
        assert_eq!(op_path(Op::Flush, 100, &caps, Some(before), Some(after)), Some(OpPath::PersistentRead));
        assert_eq!(op_path(Op::AtomicWrite, 100, &caps, Some(before), Some(after)), Some(OpPath::Native));
        assert_eq!(op_path(Op::Read, 100, &caps, Some(before), Some(after)), None);
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

//! The hand-written baseline of `rpma log bench --baseline`: the log's work done with the plain
//! rpma API, as well as it can be done, against regions of this process.
//!
//! - `qd1`: one append + sync at a time at the floor of a durable remote append: to every
//!   replica, with every replica's posts before any wait, one batch (one doorbell) of a write of
//!   the entry and its flush (signaled); then the wait for the quorum's completions (the others
//!   are taken later).
//! - `group-commit`: the rate of plain writes of the entry to every replica at queue depth 128
//!   (a signaled write every 32nd; no flush, no commit record).

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rpma::{
    CompletionFlags, Conn, ConnCfg, ConnEvent, ConnReq, Ep, ErrorKind, FlushType, Memory, MrLocal, MrRemote, Peer,
    PeerCfg, Transport, Usage,
};

use super::options::Mode;

/// Where the entries go in a baseline region (after a header the size of the log's).
const DATA: usize = rpma_log::HEADER_SIZE;
/// The writes kept in flight per replica by `group-commit`.
const DEPTH: u64 = 128;
/// One signaled write in this many (`group-commit`).
const SIGNAL_EVERY: u64 = 32;
const SQ: u32 = 256;

/// One replica of the baseline: the server's side (kept alive) and the client's connection.
struct Target<T: Transport> {
    conn: Conn<T>,
    remote: MrRemote,
    /// The highest context of a completed signaled operation.
    done: u64,
    _server: (Conn<T>, MrLocal<T>, Ep<T>, Peer<T>),
}

/// The baseline's connections to its own regions.
pub(super) struct Baseline<T: Transport> {
    targets: Vec<Target<T>>,
    src: MrLocal<T>,
    /// The ring bytes of a region (entries go round it).
    ring: usize,
    size: usize,
    quorum: usize,
    flush: FlushType,
    timeout: Duration,
    /// The last context posted.
    seq: u64,
}

fn established<T: Transport>(c: &Conn<T>, who: &str, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        match c.next_event() {
            Ok(ConnEvent::Established) => return Ok(()),
            Ok(ev) => bail!("baseline {who}: {ev:?} instead of ESTABLISHED"),
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(anyhow::Error::new(e).context(format!("baseline {who}: the connection event"))),
        }
    }
}

impl<T: Transport> Baseline<T> {
    /// Registers each of `memories` on a server peer of `addr`, listens on `port + i`, and
    /// connects `client` to each.
    pub(super) fn connect(
        t: &T,
        client: &Peer<T>,
        addr: &str,
        port: u16,
        memories: Vec<Memory>,
        setup: (usize, usize, FlushType, Duration),
    ) -> Result<Self> {
        let (size, quorum, flush, timeout) = setup;
        let mut targets = Vec::new();
        let mut ring = usize::MAX;
        let cfg = ConnCfg::new().with_sq_size(SQ).with_cq_size(SQ).with_timeout(timeout);
        for (i, memory) in memories.into_iter().enumerate() {
            ring = ring.min(memory.len().saturating_sub(DATA));
            let port = (usize::from(port) + i).to_string();
            let speer = rpma_scenarios::common::server_peer(t, addr)?;
            let usage =
                Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_PERSISTENT | Usage::FLUSH_TYPE_VISIBILITY;
            let mr = speer.reg_mr(memory, usage).context("baseline: registering a region")?;
            let ep =
                Ep::listen(&speer, addr, &port).with_context(|| format!("baseline: listening on {addr}:{port}"))?;
            let conn = ConnReq::new(client, addr, &port, Some(&cfg))?.connect(None)?;
            let req = ep.next_conn_req(Some(&cfg))?;
            let server = req.connect(Some(&mr.descriptor()))?;
            established(&conn, "client", timeout)?;
            established(&server, "server", timeout)?;
            conn.apply_remote_peer_cfg(&PeerCfg::new().with_direct_write_to_pmem(true));
            let remote = MrRemote::from_descriptor(conn.private_data())?;
            targets.push(Target { conn, remote, done: 0, _server: (server, mr, ep, speer) });
        }
        if ring < size * DEPTH as usize {
            bail!("baseline: a region of {ring} ring bytes is too small for {DEPTH} entries of {size} bytes");
        }
        let src = client.alloc_mr(size, Usage::WRITE_SRC)?;
        src.write(0, &vec![0x5a; size])?;
        Ok(Self { targets, src, ring: ring / size * size, size, quorum, flush, timeout, seq: 0 })
    }

    /// Takes every replica's completions; fails on an error completion.
    fn poll(&mut self) -> Result<()> {
        for (i, t) in self.targets.iter_mut().enumerate() {
            while let Some(wc) = t.conn.cq().next_wc()? {
                if !wc.is_success() {
                    bail!("baseline: replica {i}: {:?}", wc.status());
                }
                t.done = t.done.max(wc.wr_id());
            }
        }
        Ok(())
    }

    /// Polls until `q` replicas completed `seq`.
    fn wait(&mut self, seq: u64, q: usize) -> Result<()> {
        let deadline = Instant::now() + self.timeout;
        loop {
            self.poll()?;
            if self.targets.iter().filter(|t| t.done >= seq).count() >= q {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("baseline: no completions within {:?}", self.timeout);
            }
            // As the log's sync: on rxe the responder and completer run in kernel threads that a
            // poller never yielding would hold off until its time slice ends (one vCPU).
            std::thread::yield_now();
        }
    }

    /// `n` operations of `mode` (`group`: appends per latency sample in `group-commit`); calls
    /// `sample` with each sample's nanoseconds.
    pub(super) fn run(&mut self, mode: Mode, n: u64, group: usize, sample: &mut dyn FnMut(u64)) -> Result<()> {
        match mode {
            Mode::Qd1 => self.qd1(n, sample),
            Mode::GroupCommit => self.writes(n, group as u64, sample),
            // Refused with --baseline (check_bench): its unit is the run's own qd-1 sync.
            Mode::Failover => Ok(()),
        }
    }

    fn qd1(&mut self, n: u64, sample: &mut dyn FnMut(u64)) -> Result<()> {
        let quiet = CompletionFlags::ON_ERROR;
        let (size, ring, ft) = (self.size, self.ring, self.flush);
        for _ in 0..n {
            let s = Instant::now();
            self.seq += 1;
            let seq = self.seq;
            let off = DATA + (seq as usize * size) % ring;
            // Every replica's posts before any wait.
            for t in &self.targets {
                let (c, r) = (&t.conn, t.remote);
                let mut b = c.batch();
                b.push(c.write(r.at(off), self.src.slice(0..size)).flags(quiet))?;
                b.push(c.flush(r.slice(off..off + size), ft).context(seq))?;
                b.post()?;
            }
            self.wait(seq, self.quorum)?;
            sample(u64::try_from(s.elapsed().as_nanos()).unwrap_or(u64::MAX).max(1));
        }
        // The replicas outside the quorum finish before the next measurement.
        self.wait(self.seq, self.targets.len())
    }

    fn writes(&mut self, n: u64, group: u64, sample: &mut dyn FnMut(u64)) -> Result<()> {
        let (size, ring) = (self.size, self.ring);
        let first = self.seq + 1;
        let mut s = Instant::now();
        for j in 0..n {
            self.seq += 1;
            let seq = self.seq;
            // At most DEPTH writes in flight on each replica.
            if seq >= first + DEPTH {
                let need = (seq - DEPTH) / SIGNAL_EVERY * SIGNAL_EVERY;
                if need >= first {
                    self.wait(need, self.targets.len())?;
                }
            }
            let off = DATA + (seq as usize * size) % ring;
            let signaled = seq % SIGNAL_EVERY == 0 || j + 1 == n;
            for t in &self.targets {
                let op = t.conn.write(t.remote.at(off), self.src.slice(0..size));
                if signaled {
                    op.context(seq).post()?;
                } else {
                    op.flags(CompletionFlags::ON_ERROR).post()?;
                }
            }
            if (j + 1) % group == 0 || j + 1 == n {
                if j + 1 == n {
                    self.wait(seq, self.targets.len())?;
                }
                sample(u64::try_from(s.elapsed().as_nanos()).unwrap_or(u64::MAX).max(1));
                s = Instant::now();
            }
        }
        Ok(())
    }
}

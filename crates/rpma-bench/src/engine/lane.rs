//! A lane: one client connection with its regions, its in-flight operations and its latency
//! stamps; posts operations and polls their completions.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use rpma::op::{Batch, LocalSlice, Operation, Post};
use rpma::{
    CompletionFlags, Conn, ConnEvent, ConnReq, FlushType, MrLocal, MrRemote, Peer, PeerCfg, Transport, Usage, Wc,
};

use super::protocol::*;
use super::wait::{self, Idle};
use crate::footprint::Footprint;
use crate::op::Op;
use crate::plan::{Retry, MAX_BATCH, MAX_CHAIN_PIECES, MAX_SGE};
use rpma_scenarios::usage::UsageError;

/// How a lane's operations are shaped (`--batch`, `--sge`, `--inline`), and how long its
/// connection retries.
#[derive(Clone, Copy, Debug)]
pub(super) struct Shape {
    /// One-sided operations per chain.
    pub(super) batch: usize,
    /// Scatter-gather pieces of each operation's local side.
    pub(super) sge: usize,
    /// Inline bytes of writes and sends (0: none, the largest size with `--inline`).
    pub(super) inline: usize,
    /// The connection's retry count and ACK timeout (`--retry-count`, `--ack-timeout`).
    pub(super) retry: Retry,
}

/// Where an operation goes: posted at once, or pushed into a chain.
enum Sink<'b, 'c, T: Transport> {
    Now,
    Chain(&'b mut Batch<'c, T, MAX_BATCH>),
}

impl<'c, T: Transport> Sink<'_, 'c, T> {
    #[inline(always)]
    fn emit<K: Operation<'c, T, Flags = CompletionFlags>>(&mut self, p: Post<'c, T, K>) -> rpma::Result<()> {
        match self {
            Self::Now => p.post(),
            Self::Chain(b) => b.push(p).map(|_| ()),
        }
    }
}

/// Makes the operation of slot `id` of `lane` at `off` and posts it: what C librpma's caller
/// does with `rpma_read(conn, dst, off, src, off, len, flags, ctx)` and the like (benches/c's
/// `post_op`: its arguments in, the call out; six of them, all in registers). Never inlined,
/// like `poll_cq` and `post_recv`: scripts/bench-softroce.sh counts the instructions of every
/// post and poll with callgrind on these three, in both programs.
#[inline(never)]
fn post_op<T: Transport>(
    lane: &Lane<T>,
    op: Op,
    size: usize,
    off: usize,
    id: u64,
    flags: CompletionFlags,
) -> rpma::Result<()> {
    lane.emit(op, size, (off, id), flags, &[], &mut Sink::Now)
}

/// [`post_op`] of an operation whose local side is the scatter-gather `pieces` (`--sge`).
#[inline(never)]
fn post_op_sg<'c, T: Transport>(
    lane: &'c Lane<T>,
    op: Op,
    size: usize,
    off: usize,
    id: u64,
    flags: CompletionFlags,
    pieces: &'c [LocalSlice<'c, T>],
) -> rpma::Result<()> {
    lane.emit(op, size, (off, id), flags, pieces, &mut Sink::Now)
}

/// Posts a receive of `len` bytes at `off` of `msgs` (none if `None`) with `wr_id`: what C
/// librpma's caller does with `rpma_recv(conn, mr, off, len, ctx)` (see [`post_op`]; the caller
/// picks the offset, as benches/c's).
#[inline(never)]
fn post_recv<T: Transport>(
    conn: &Conn<T>,
    msgs: Option<&MrLocal<T>>,
    off: usize,
    len: usize,
    wr_id: u64,
) -> rpma::Result<()> {
    match msgs {
        Some(m) => conn.recv(m.slice(off..off + len)),
        None => conn.recv_empty(),
    }
    .context(wr_id)
    .post()
}

/// Polls a connection's CQ (see [`post_op`]).
#[inline(never)]
fn poll_cq<T: Transport>(conn: &Conn<T>, wcs: &mut [Wc]) -> rpma::Result<usize> {
    conn.cq().poll(wcs)
}

/// The error of a failed post of `op` of `size` bytes.
#[cold]
#[inline(never)]
fn posting_failed(e: rpma::Error, op: Op, size: usize) -> anyhow::Error {
    anyhow::Error::new(e).context(format!("posting {} of {size} B", op.name()))
}

/// Splits `[off, off + size)` into `out.len()` contiguous non-empty pieces of nearly equal size
/// (`size >= out.len()`).
fn split<'a, T: Transport>(local: &'a MrLocal<T>, off: usize, size: usize, out: &mut [LocalSlice<'a, T>]) {
    let n = out.len();
    for (i, p) in out.iter_mut().enumerate() {
        *p = local.slice(off + i * size / n..off + (i + 1) * size / n);
    }
}

/// One client connection and its state.
///
/// Aligned to 128 bytes (two cache lines: the adjacent-line prefetcher fetches pairs): the lanes
/// of different client threads are allocated one after the other, and the bookkeeping one
/// thread writes per operation must not share a line with what another thread reads per
/// operation (two threads on two connections of the mock ran at 1.2-1.3x one thread with
/// `--no-latency` before, 1.98x after: the median of five rounds, 1.78..2.31).
#[repr(align(128))]
pub(super) struct Lane<T: Transport> {
    pub(super) conn: Conn<T>,
    pub(super) shape: Shape,
    /// The bytes of inline writes and sends (plain memory, `shape.inline` long).
    inline_src: Box<[u8]>,
    pub(super) local: MrLocal<T>,
    /// Receive slots of `recv_max` bytes (none if zero-length).
    pub(super) msgs: Option<MrLocal<T>>,
    pub(super) recv_max: usize,
    pub(super) remote: MrRemote,
    /// Where the server writes its pongs (`write-pingpong`).
    pub(super) inbox: MrLocal<T>,
    /// The span of the slots of operations on the local region and the remote one.
    pub(super) region: usize,
    /// The span of the slots of operations on the local region alone (sends).
    pub(super) local_region: usize,
    /// The span of the slots of operations on the remote region alone (flush, atomic write).
    pub(super) remote_region: usize,
    pub(super) qd: usize,
    /// How long any wait may last without progress (`--timeout`).
    pub(super) timeout: Duration,
    /// The signaled operations in flight, oldest at `head` (completions come in order): post
    /// time and how many operations its completion retires (itself and the unsignaled ones
    /// posted before it).
    pub(super) batches: Vec<(Instant, usize)>,
    pub(super) head: usize,
    /// Signaled operations in flight.
    pub(super) pending: usize,
    /// Unsignaled operations posted after the last signaled one.
    pub(super) open: usize,
    /// Operations in flight (signaled or not).
    pub(super) inflight: usize,
    /// The slot of the next operation: the operations posted so far modulo `qd`, counted on
    /// without a division per operation.
    slot: usize,
    /// `write-pingpong`: the number of the last ping, whether its write has completed.
    pub(super) pp_seq: u8,
    pub(super) pp_written: bool,
    /// Whether operations are timed (a clock read when a signaled one is posted and when its
    /// completion arrives); not with `--no-latency`.
    pub(super) clock: bool,
}

pub(super) fn connect<T: Transport>(
    peer: &Peer<T>,
    addr: &str,
    port: u16,
    f: &Footprint,
    timeout: Duration,
    shape: Shape,
) -> Result<Lane<T>> {
    let qd = f.qd;
    let caps = peer.capabilities();
    // What the device cannot do is a usage error (exit 2), as an argument out of range is.
    if shape.sge as u64 > u64::from(caps.max_sge) {
        return Err(UsageError(format!(
            "--sge {}: the device takes at most {} scatter-gather pieces per operation (max_sge)",
            shape.sge, caps.max_sge
        ))
        .into());
    }
    if shape.inline as u64 > u64::from(caps.max_inline_data) {
        return Err(UsageError(format!(
            "--inline: a size of {} B exceeds the device's inline limit of {} B (max_inline_data)",
            shape.inline, caps.max_inline_data
        ))
        .into());
    }
    let cfg = conn_cfg::<T>(qd, shape.retry)
        .with_max_sge(u32::try_from(shape.sge).unwrap_or(u32::MAX))
        .with_max_inline(u32::try_from(shape.inline).unwrap_or(u32::MAX));
    let inbox = peer.alloc_mr(f.inbox_len(), Usage::WRITE_DST).context("registering the inbox")?;
    let req = ConnReq::new(peer, addr, &port.to_string(), Some(&cfg)).context("creating a connection request")?;
    let request = Request { target_max: f.target_max, qd, recv_max: f.server_recv_max, source_max: f.source_max };
    let conn = req.connect(Some(&request_pdata(request, &inbox.descriptor()))).context("connecting")?;
    match wait::next_event(&conn, timeout, &format!("client: waiting for the connection to {addr}:{port}"))? {
        ConnEvent::Established => {}
        ev => bail!(
            "client: the connection to {addr}:{port} was not established: {}",
            rpma_scenarios::common::not_established(ev)
        ),
    }
    let pd = conn.private_data();
    let Some(desc) = pd.get(..MrRemote::DESCRIPTOR_SIZE) else {
        bail!("client: the server's private data ({} bytes) holds no region descriptor", pd.len());
    };
    let remote = MrRemote::from_descriptor(desc).context("client: the server's region descriptor")?;
    if let Some(p) = pd.get(MrRemote::DESCRIPTOR_SIZE..MrRemote::DESCRIPTOR_SIZE + PeerCfg::DESCRIPTOR_SIZE) {
        conn.apply_remote_peer_cfg(&PeerCfg::from_descriptor(p).context("client: the server's peer configuration")?);
    }
    let remote_len = remote.len() as usize;
    if remote_len < f.target_max {
        bail!("client: the server's region ({remote_len} bytes) is smaller than a message ({} bytes)", f.target_max);
    }
    let local_len = f.local_len();
    let mut local = peer
        .alloc_mr(local_len, Usage::WRITE_SRC | Usage::READ_DST | Usage::SEND)
        .context("registering the local region")?;
    fill_source(&mut local);
    let recv_max = f.client_recv_max;
    let msgs = match recv_max {
        0 => None,
        _ => Some(peer.alloc_mr(f.client_recv_len(), Usage::RECV).context("registering receive buffers")?),
    };
    let lane_msgs = msgs;
    let now = Instant::now();
    let lane = Lane {
        conn,
        shape,
        inline_src: vec![SOURCE_BYTE; shape.inline].into_boxed_slice(),
        local,
        msgs: lane_msgs,
        recv_max,
        remote,
        inbox,
        region: local_len.min(remote_len),
        local_region: local_len,
        remote_region: remote_len,
        qd,
        timeout,
        batches: vec![(now, 0); qd],
        head: 0,
        pending: 0,
        open: 0,
        inflight: 0,
        slot: 0,
        pp_seq: 0,
        pp_written: false,
        clock: true,
    };
    for slot in 0..qd {
        lane.repost(RECV_TAG | slot as u64)?;
    }
    Ok(lane)
}

/// When a phase ends.
#[derive(Clone, Copy)]
pub(super) enum Stop {
    Count(u64),
    Until(Instant),
}

impl<T: Transport> Lane<T> {
    /// `i + 1` modulo the queue depth.
    #[inline]
    fn next_slot(&self, i: usize) -> usize {
        if i + 1 == self.qd {
            0
        } else {
            i + 1
        }
    }

    /// The offset of `slot` in the region `op` uses.
    fn offset_at(&self, op: Op, size: usize, slot: usize) -> usize {
        slot_offset(slot, size, self.span(op))
    }

    /// The span of the slots of the region `op` uses.
    pub(super) const fn span(&self, op: Op) -> usize {
        match op {
            Op::Send | Op::SendImm => self.local_region,
            Op::Flush | Op::AtomicWrite => self.remote_region,
            _ => self.region,
        }
    }

    /// Whether `op` takes [`Lane::post_plain`] (no ping byte, one piece or inline data).
    pub(super) fn plain(&self, op: Op) -> bool {
        op != Op::WritePingpong && self.shape.sge <= 1
    }

    /// Makes the work requests of the operation of slot `id` at `off` (with `flags`) and hands
    /// them to `sink`. `pieces` holds the scatter-gather pieces of the local side (empty: one
    /// piece). An atomic write writes the slot's number.
    #[inline(always)]
    fn emit<'c>(
        &'c self,
        op: Op,
        size: usize,
        (off, id): (usize, u64),
        flags: CompletionFlags,
        pieces: &'c [LocalSlice<'c, T>],
        sink: &mut Sink<'_, 'c, T>,
    ) -> rpma::Result<()> {
        let (c, r) = (&self.conn, &self.remote);
        let local = self.local.slice(off..off + size);
        let range = || r.slice(off..off + size);
        let inline = (self.shape.inline > 0).then(|| &self.inline_src[..size]);
        // Each shape of the local side (inline, one piece, pieces) is its own post, so that
        // every path is made for its shape (no dispatch on it left at run time).
        macro_rules! write {
            (|$p:ident| $then:expr) => {
                match (inline, pieces.is_empty()) {
                    (Some(bytes), _) => {
                        let $p = c.write_inline(r.at(off), bytes);
                        sink.emit($then)
                    }
                    (None, true) => {
                        let $p = c.write(r.at(off), local);
                        sink.emit($then)
                    }
                    (None, false) => {
                        let $p = c.write_sg(r.at(off), pieces);
                        sink.emit($then)
                    }
                }
            };
        }
        macro_rules! send {
            (|$p:ident| $then:expr) => {
                match (inline, pieces.is_empty()) {
                    (Some(bytes), _) => {
                        let $p = c.send_inline(bytes);
                        sink.emit($then)
                    }
                    (None, true) => {
                        let $p = c.send(local);
                        sink.emit($then)
                    }
                    (None, false) => {
                        let $p = c.send_sg(pieces);
                        sink.emit($then)
                    }
                }
            };
        }
        match op {
            Op::Read if pieces.is_empty() => sink.emit(c.read(local, r.at(off)).flags(flags).context(id)),
            Op::Read => sink.emit(c.read_sg(pieces, r.at(off)).flags(flags).context(id)),
            Op::Write => write!(|p| p.flags(flags).context(id)),
            Op::WriteFlush => {
                write!(|p| p.flags(CompletionFlags::ON_ERROR).context(id))?;
                sink.emit(c.flush(range(), FlushType::Persistent).flags(flags).context(id))
            }
            Op::Flush => sink.emit(c.flush(range(), FlushType::Persistent).flags(flags).context(id)),
            Op::AtomicWrite => sink.emit(c.atomic_write(r.at(off & !7), id.to_le_bytes()).flags(flags).context(id)),
            Op::Send => send!(|p| p.flags(flags).context(SEND_TAG | id)),
            Op::SendImm => send!(|p| p.imm(id as u32).flags(flags).context(SEND_TAG | id)),
            Op::WriteImm => write!(|p| p.imm(id as u32).flags(flags).context(SEND_TAG | id)),
            Op::WritePingpong => sink.emit(c.write(r.at(0), self.local.slice(..size)).flags(flags).context(PP_ID)),
            Op::Connect => {
                Err(rpma::Error::invalid_input("rpma bench --op connect", "connection setup posts no operation"))
            }
        }
    }

    /// Records `n` operations about to be posted, the last signaled or not; the index of the
    /// signaled one's entry in `batches` (its post time is set once it is posted), if any.
    /// Done before the post, so that the latency window holds the post and its completion only
    /// (a failed post ends the run: nothing to undo).
    fn posted(&mut self, n: usize, signaled: bool) -> Option<usize> {
        let entry = if signaled {
            let tail = self.signal(self.open + n);
            self.open = 0;
            Some(tail)
        } else {
            self.open += n;
            None
        };
        self.inflight += n;
        self.slot = if n == 1 { self.next_slot(self.slot) } else { (self.slot + n) % self.qd };
        entry
    }

    /// Records a signaled operation whose completion retires `ops` operations (itself and the
    /// unsignaled ones before it); the index of its entry in `batches`.
    #[inline]
    fn signal(&mut self, ops: usize) -> usize {
        let tail = match self.head + self.pending {
            t if t >= self.qd => t - self.qd,
            t => t,
        };
        self.batches[tail].1 = ops;
        self.pending += 1;
        tail
    }

    /// Sets the post time of a signaled operation's entry (from [`Lane::posted`]).
    #[inline]
    fn stamp(&mut self, entry: Option<usize>, at: Option<Instant>) {
        if let (Some(i), Some(at)) = (entry, at) {
            self.batches[i].0 = at;
        }
    }

    /// Posts one operation, signaled (its completion retires it and the unsignaled ones before
    /// it) or not (`--cq-mod`).
    ///
    /// Zero copy: the operation names a slice of the local region, filled once when it was
    /// registered (or, `--inline`, plain memory copied by the driver); the only byte written
    /// per operation is `write-pingpong`'s sequence number.
    ///
    /// Its latency starts when the clock is read right before the post (this harness's own
    /// work, the bookkeeping and the making of the work request, comes before), and ends when a
    /// poll returns its completion.
    ///
    /// Inlined into the driver's loop, as the C program's bookkeeping is inline in its loop:
    /// the harness's own instructions per operation are part of what `rpma bench` measures (at
    /// queue depth 128 its loop took 114 per operation against the C loop's 31: callgrind in
    /// the guest, docs/bench.md). `--sge` and `write-pingpong` take [`Lane::post_general`].
    #[inline(always)]
    pub(super) fn post(&mut self, op: Op, size: usize, signaled: bool) -> Result<()> {
        if self.plain(op) {
            self.post_plain(op, size, signaled, self.span(op))
        } else {
            self.post_general(op, size, signaled)
        }
    }

    /// [`Lane::post`] of an operation that is [`Lane::plain`], in slots of `span` bytes
    /// ([`Lane::span`]): a driver's loop decides both once, not per operation.
    #[inline(always)]
    pub(super) fn post_plain(&mut self, op: Op, size: usize, signaled: bool, span: usize) -> Result<()> {
        let id = self.slot as u64;
        let off = slot_offset(self.slot, size, span);
        let all = if signaled { CompletionFlags::ALWAYS } else { CompletionFlags::ON_ERROR };
        let entry = self.posted(1, signaled);
        // Only a signaled operation's post time is kept (its completion retires the
        // unsignaled ones before it): the others read no clock (nor any, `--no-latency`).
        let at = entry.filter(|_| self.clock).map(|_| Instant::now());
        // The error's context is made on the error path only.
        match post_op(self, op, size, off, id, all) {
            Ok(()) => {
                self.stamp(entry, at);
                Ok(())
            }
            Err(e) => Err(posting_failed(e, op, size)),
        }
    }

    /// [`Lane::post_plain`] while the queue has room and fewer than `n` operations are posted
    /// (`p` so far), one signaled per `every` and the last: the driver's loop for single
    /// operations up to a count. The lane's counters stay in registers until the loop ends
    /// (`post_op` reads none of them), and the offset is one multiplication when every slot
    /// fits its span (the usual case). Returns the new count. Not inlined: a call per run of
    /// posts (up to `--qd` of them), and its loop gets the registers to itself.
    #[inline(never)]
    pub(super) fn post_run(&mut self, op: Op, size: usize, every: usize, p: u64, n: u64) -> Result<u64> {
        let span = self.span(op);
        if self.qd.checked_mul(size).is_some_and(|b| b <= span) {
            self.post_run_at(op, size, every, (p, n), |slot| slot * size)
        } else {
            self.post_run_at(op, size, every, (p, n), |slot| slot_offset(slot, size, span))
        }
    }

    /// [`Lane::post_run`] with the offset of each slot from `offset` (a copy of the loop per
    /// way of computing it, so that neither is decided per operation).
    #[inline(always)]
    fn post_run_at(
        &mut self,
        op: Op,
        size: usize,
        every: usize,
        (mut p, n): (u64, u64),
        offset: impl Fn(usize) -> usize,
    ) -> Result<u64> {
        let qd = self.qd;
        let (mut open, mut inflight, mut slot) = (self.open, self.inflight, self.slot);
        let mut result = Ok(());
        while inflight < qd && p < n {
            let (off, id) = (offset(slot), slot as u64);
            slot = if slot + 1 == qd { 0 } else { slot + 1 };
            inflight += 1;
            p += 1;
            let posted = if p == n || open + 1 >= every {
                let entry = self.signal(open + 1);
                open = 0;
                // Only a signaled operation's post time is kept (its completion retires the
                // unsignaled ones before it), read right before its post.
                let at = self.clock.then(Instant::now);
                let r = post_op(self, op, size, off, id, CompletionFlags::ALWAYS);
                if let (Ok(()), Some(at)) = (&r, at) {
                    self.batches[entry].0 = at;
                }
                r
            } else {
                open += 1;
                post_op(self, op, size, off, id, CompletionFlags::ON_ERROR)
            };
            if let Err(e) = posted {
                result = Err(posting_failed(e, op, size));
                break;
            }
        }
        (self.open, self.inflight, self.slot) = (open, inflight, slot);
        result.map(|()| p)
    }

    /// [`Lane::post`] of any operation: `write-pingpong` (its ping byte), `--sge` pieces.
    #[inline(never)]
    pub(super) fn post_general(&mut self, op: Op, size: usize, signaled: bool) -> Result<()> {
        if op == Op::WritePingpong {
            self.pp_seq = self.pp_seq.wrapping_add(1);
            // The previous ping's write has completed (`--qd 1`): no device reads the byte now.
            self.local.volatile().store_u8(size - 1, self.pp_seq).context("writing the ping byte")?;
            self.pp_written = false;
        }
        if self.shape.sge <= 1 {
            return self.post_plain(op, size, signaled, self.span(op));
        }
        let id = self.slot as u64;
        let off = self.offset_at(op, size, self.slot);
        let all = if signaled { CompletionFlags::ALWAYS } else { CompletionFlags::ON_ERROR };
        let entry = self.posted(1, signaled);
        let mut buf = [self.local.slice(0..0); MAX_SGE];
        let pieces = &mut buf[..self.shape.sge];
        split(&self.local, off, size, pieces);
        let at = entry.filter(|_| self.clock).map(|_| Instant::now());
        post_op_sg(self, op, size, off, id, all, pieces).map_err(|e| posting_failed(e, op, size))?;
        self.stamp(entry, at);
        Ok(())
    }

    /// [`Lane::post`] of one signaled operation that retires the unsignaled ones still in flight
    /// when a run ends (not inlined: once per run).
    #[inline(never)]
    pub(super) fn post_last(&mut self, op: Op, size: usize) -> Result<()> {
        self.post(op, size, true)
    }

    /// Posts `n` one-sided operations as one chain with one doorbell (`--batch`); if `signaled`,
    /// the last one is, and its completion retires the chain and the unsignaled chains before.
    pub(super) fn post_chain(&mut self, op: Op, size: usize, n: usize, signaled: bool) -> Result<()> {
        // Each operation's offset and slot, the slots counted on from the next one (no division).
        let mut offs = [(0usize, 0u64); MAX_BATCH];
        let mut slot = self.slot;
        for o in offs.iter_mut().take(n) {
            *o = (self.offset_at(op, size, slot), slot as u64);
            slot = self.next_slot(slot);
        }
        let entry = self.posted(n, signaled);
        let at = if self.shape.sge > 1 {
            let sge = self.shape.sge;
            let mut buf = [self.local.slice(0..0); MAX_CHAIN_PIECES];
            for (j, o) in offs.iter().enumerate().take(n) {
                split(&self.local, o.0, size, &mut buf[j * sge..(j + 1) * sge]);
            }
            self.post_chain_of(op, size, &offs[..n], &buf, signaled, entry.is_some() && self.clock)
        } else {
            self.post_chain_of(op, size, &offs[..n], &[], signaled, entry.is_some() && self.clock)
        }
        .with_context(|| format!("posting a chain of {n} {} of {size} B", op.name()))?;
        self.stamp(entry, at);
        Ok(())
    }

    /// Makes the chain of the operations at `offs` (offset, slot), each with `--sge` of
    /// `pieces` (none: one piece), and posts it, the last one signaled if `signaled`; the post
    /// time if `stamped`.
    fn post_chain_of<'c>(
        &'c self,
        op: Op,
        size: usize,
        offs: &[(usize, u64)],
        pieces: &'c [LocalSlice<'c, T>],
        signaled: bool,
        stamped: bool,
    ) -> rpma::Result<Option<Instant>> {
        let mut chain = Batch::<T, MAX_BATCH>::new(&self.conn);
        let mut sink = Sink::Chain(&mut chain);
        let sge = self.shape.sge;
        for (j, &slot) in offs.iter().enumerate() {
            let flags = CompletionFlags::ON_ERROR;
            // Without pieces, no range of them: one piece each.
            let own = pieces.get(j * sge..(j + 1) * sge).unwrap_or(&[]);
            self.emit(op, size, slot, flags, own, &mut sink)?;
        }
        let at = stamped.then(Instant::now);
        if signaled { chain.signal_last().post() } else { chain.post() }.map(|()| at)
    }

    /// Re-posts the receive of the completion `wr_id` (its slot of the receive buffers).
    pub(super) fn repost(&self, wr_id: u64) -> Result<()> {
        let slot = (wr_id & !RECV_TAG) as usize;
        let max = self.recv_max;
        post_recv(&self.conn, self.msgs.as_ref(), slot * max, max, wr_id).context("posting a receive")
    }

    /// Retires the oldest signaled operation (and the unsignaled ones before it) completed at
    /// `now` (`None`: not timed, `--no-latency`); returns how many operations that is.
    pub(super) fn retire(
        &mut self,
        op: Op,
        now: Option<Instant>,
        hist: &mut Histogram<u64>,
        record: bool,
        wr_id: u64,
    ) -> Result<u64> {
        if self.pending == 0 {
            bail!("client: a completion ({wr_id:#x}) for no operation in flight");
        }
        let (t0, n) = self.batches[self.head];
        self.head = self.next_slot(self.head);
        self.pending -= 1;
        self.inflight -= n;
        if let (true, Some(now)) = (record, now) {
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
    pub(super) fn await_control(&mut self, want: u64, mut recv: bool, wcs: &mut [Wc], what: &str) -> Result<()> {
        let mut sent = false;
        let mut idle = Idle::new(self.timeout);
        while !sent || recv {
            let n = self.conn.cq().poll(wcs).context("client: polling")?;
            if n == 0 {
                idle.tick(|| format!("client: waiting for {what}"))?;
                std::hint::spin_loop();
                continue;
            }
            idle.progress();
            for wc in &wcs[..n] {
                check(wc, "client")?;
                if wc.wr_id() == want {
                    sent = true;
                } else if wc.wr_id() & RECV_TAG != 0 && recv {
                    self.repost(wc.wr_id())?;
                    recv = false;
                } else {
                    bail!("client: unexpected completion {:#x} around a write ping-pong", wc.wr_id());
                }
            }
        }
        Ok(())
    }

    /// Starts a `write-pingpong` phase: the server clears its byte and answers.
    pub(super) fn pingpong_begin(&mut self, size: usize, wcs: &mut [Wc]) -> Result<()> {
        self.inbox.volatile().store_u8(size - 1, 0).context("clearing the pong byte")?;
        self.pp_seq = 0;
        let imm = PINGPONG_BIT | u32::try_from(size).context("a ping-pong size")?;
        self.conn.send_empty().imm(imm).context(PP_CTL_ID).post().context("starting a ping-pong")?;
        self.await_control(
            PP_CTL_ID,
            true,
            wcs,
            &format!("the server's answer to the start of a write ping-pong of {size} B"),
        )
    }

    /// Ends a `write-pingpong` phase: the number after the next one.
    pub(super) fn pingpong_end(&mut self, size: usize, wcs: &mut [Wc]) -> Result<()> {
        let end = self.pp_seq.wrapping_add(2);
        self.local.volatile().store_u8(size - 1, end).context("writing the end byte")?;
        self.conn
            .write(self.remote.at(0), self.local.slice(..size))
            .context(PP_ID)
            .post()
            .context("ending a ping-pong")?;
        self.await_control(PP_ID, false, wcs, &format!("the write ending a write ping-pong of {size} B"))
    }

    /// `write-pingpong`: completes the ping in flight once its write has completed and the pong
    /// has arrived in the inbox.
    pub(super) fn poll_pingpong(
        &mut self,
        size: usize,
        hist: &mut Histogram<u64>,
        record: bool,
        wcs: &mut [Wc],
    ) -> Result<u64> {
        if !self.pp_written {
            let n = self.conn.cq().poll(wcs).context("client: polling")?;
            for wc in &wcs[..n] {
                check(wc, Op::WritePingpong.name())?;
                if wc.wr_id() != PP_ID {
                    bail!("client: unexpected completion {:#x} in a write ping-pong", wc.wr_id());
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
        let now = self.clock.then(Instant::now);
        self.retire(Op::WritePingpong, now, hist, record, PP_ID)
    }

    /// Polls once; returns the operations completed.
    pub(super) fn poll(
        &mut self,
        op: Op,
        size: usize,
        hist: &mut Histogram<u64>,
        record: bool,
        wcs: &mut [Wc],
    ) -> Result<u64> {
        if op == Op::WritePingpong {
            return self.poll_pingpong(size, hist, record, wcs);
        }
        // Room for the completions that can be pending and no more (as the C program asks
        // for one at queue depth 1): a provider may look at one more queue entry per spare
        // slot (rxe does).
        let pending = self.qd << usize::from(op.is_ping_pong());
        let room = pending.min(wcs.len());
        let n = poll_cq(&self.conn, &mut wcs[..room]).context("client: polling")?;
        if n == 0 {
            return Ok(0);
        }
        let now = self.clock.then(Instant::now);
        let mut done = 0;
        for wc in &wcs[..n] {
            check(wc, op.name())?;
            if wc.wr_id() & SEND_TAG != 0 {
                continue; // a message's send completion: its echo completes it
            }
            if wc.wr_id() & RECV_TAG != 0 {
                self.repost(wc.wr_id())?;
            }
            done += self.retire(op, now, hist, record, wc.wr_id())?;
        }
        Ok(done)
    }

    /// Ends the connection: the stop message, then a disconnect.
    pub(super) fn finish(self) -> Result<()> {
        self.conn.send_empty().imm(STOP_IMM).context(STOP_ID).post().context("sending stop")?;
        let mut wcs = [Wc::EMPTY; WC_BATCH];
        let mut idle = Idle::new(self.timeout);
        'wait: loop {
            let n = self.conn.cq().poll(&mut wcs).context("client: polling")?;
            for wc in &wcs[..n] {
                check(wc, "stop")?;
                if wc.wr_id() == STOP_ID {
                    break 'wait;
                }
            }
            if n == 0 {
                idle.tick(|| "client: waiting for the stop message's completion".into())?;
                std::hint::spin_loop();
            }
        }
        self.conn.disconnect().context("disconnecting")?;
        match wait::next_event(&self.conn, self.timeout, "client: waiting for the disconnect")? {
            ConnEvent::Closed => {}
            ev => bail!("client: unexpected connection event {ev:?}"),
        }
        self.conn.delete().context("deleting the connection")?;
        Ok(())
    }
}

//! One connection to a queue pair in another process: its socket, the thread reading it and the
//! thread writing it, the work requests this side sent and waits for (the initiator), and the
//! requests the peer sent that wait to execute here (the responder).
//!
//! The responder executes requests in the order they came, as RC does: a message that finds no
//! receive stalls the requests behind it (receiver-not-ready retry) until a receive takes it; the
//! thread that delivers it (the one posting the receive) runs what waited. Answers go back in
//! the same order, so the initiator's oldest outstanding work request is the one answered next;
//! an answer to anything else is a protocol violation, as is any malformed frame: the
//! connection is then lost (LOST, outstanding work flushed), as when the peer process dies.
//! Nothing the peer sends reaches memory but through the responder's checks (rkey, bounds,
//! access rights, message size), the same as for a peer in this process.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

use rpma_core::transport::{CmEvent, SendOp, SendWr};
use rpma_core::{rpma_log, Capabilities, Error, WcOpcode, WcStatus};

use super::frame::{encode_req, read_frame, Frame, Native, Req, NATIVE_ATOMIC_WRITE, NATIVE_FLUSH};
use crate::fabric::MockFabric;
use crate::qp::pieces::{gather_append, ByteSide, Dst, Source};
use crate::qp::recv::{arrive, Msg, Sender};
use crate::qp::responder::{execute_op, opcodes};
use crate::qp::{pad, QpShared, CONNECTED, CONNECTING, ERROR};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The native operations of a device, as the frames carry them.
pub(crate) fn native_of(caps: &Capabilities) -> Native {
    (if caps.native_flush { NATIVE_FLUSH } else { 0 })
        | (if caps.native_atomic_write { NATIVE_ATOMIC_WRITE } else { 0 })
}

/// A work request sent and not answered yet.
struct Outstanding {
    seq: u64,
    wr_id: u64,
    signaled: bool,
    opcode: WcOpcode,
    /// A read's destination and length.
    read: Option<(Dst, usize)>,
    /// The regions of a write's or send's source, held until the answer as a NIC may read
    /// them until then (their bytes went out at post).
    source: Dst,
}

#[derive(Default)]
struct Initiator {
    sent: VecDeque<Outstanding>,
    /// Answers to work requests up to this sequence number are ignored: they were flushed.
    flushed_to: u64,
}

#[derive(Default)]
struct Responder {
    held: VecDeque<Req>,
    /// What the held requests take: their bytes and [`FRAME_COST`] each (bounded by
    /// [`OUTBOX_LIMIT`]: a peer that piles requests behind a message that waits for a receive
    /// is treated as failed, so it cannot make this process hoard memory).
    held_bytes: u64,
    /// A thread executes the held requests (or a message stalls them).
    running: bool,
    /// The message the queue waits for (set before it arrives).
    waiting: Option<u64>,
    /// The runner left because of `waiting`: its delivery resumes the queue.
    stalled: bool,
    /// A request failed: as an RC responder after a NAK, nothing after it executes (the
    /// initiator flushes it).
    failed: bool,
}

#[derive(Default)]
struct Outbox {
    frames: VecDeque<Vec<u8>>,
    /// No frame is queued any more: the writer sends what it has, then shuts the socket.
    closing: bool,
    /// The writer has ended.
    done: bool,
    /// Bytes queued.
    bytes: u64,
}

/// What may wait in a link's outbox: a peer process that lets more pile up (it stopped reading,
/// or asks for reads it never takes) is treated as failed, so it cannot make this process
/// hoard memory.
const OUTBOX_LIMIT: u64 = 2 * super::frame::MAX_FRAME as u64;

/// What a queued frame or held request costs besides its bytes (a vector's header and its
/// allocation), counted against [`OUTBOX_LIMIT`] so that many small ones are bounded too.
const FRAME_COST: u64 = 64;

impl Outbox {
    /// Queues a frame (dropped once closing); `false` if the outbox is now over
    /// [`OUTBOX_LIMIT`].
    fn queue(&mut self, f: Vec<u8>) -> bool {
        if self.closing {
            return true;
        }
        self.bytes += f.len() as u64 + FRAME_COST;
        self.frames.push_back(f);
        self.bytes <= OUTBOX_LIMIT
    }
}

/// How long closing a link waits for its last frames to go out (a peer process that stopped
/// reading does not hold a teardown longer).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// A connection to a peer process (see the module documentation).
pub(crate) struct Link {
    stream: UnixStream,
    out: Mutex<Outbox>,
    out_cv: Condvar,
    /// The queue pair of this side (set by the connecting side at once, by the accepting side
    /// when it accepts).
    qp: OnceLock<Weak<QpShared>>,
    initiator: Mutex<Initiator>,
    responder: Mutex<Responder>,
    /// The peer's native operations (from its hello or accept).
    peer_native: AtomicU8,
    /// This side closed the link (a read ending then is no failure of the peer).
    closed_here: AtomicBool,
    /// The peer said goodbye or the link ended: nothing more comes from it.
    gone: AtomicBool,
    /// The peer said goodbye before the end (a clean close, not a death).
    bye: AtomicBool,
    /// Where the peer was reached (for log lines).
    name: String,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link").field("peer", &self.name).finish_non_exhaustive()
    }
}

impl Link {
    /// Starts the reader and writer threads of a connected socket. `qp` is this side's queue
    /// pair if already known (the connecting side); `first` a frame to send first.
    pub(crate) fn start(
        stream: UnixStream,
        qp: Option<Weak<QpShared>>,
        peer_native: Native,
        name: String,
        first: Option<Frame>,
    ) -> io::Result<Arc<Self>> {
        let reader = stream.try_clone()?;
        let writer = stream.try_clone()?;
        let link = Arc::new(Self {
            stream,
            out: Mutex::new(Outbox::default()),
            out_cv: Condvar::new(),
            qp: OnceLock::new(),
            initiator: Mutex::new(Initiator::default()),
            responder: Mutex::new(Responder::default()),
            peer_native: AtomicU8::new(peer_native),
            closed_here: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            bye: AtomicBool::new(false),
            name,
        });
        if let Some(q) = qp {
            let _ = link.qp.set(q);
        }
        if let Some(f) = first {
            link.send(&f);
        }
        let l = Arc::clone(&link);
        std::thread::Builder::new().name("rpma-mock-wire-tx".into()).spawn(move || l.write_loop(writer))?;
        let l = Arc::clone(&link);
        if let Err(e) = std::thread::Builder::new().name("rpma-mock-wire-rx".into()).spawn(move || l.read_loop(reader))
        {
            link.close(false);
            return Err(e);
        }
        Ok(link)
    }

    /// The peer is gone (it said goodbye, died, or the link failed).
    pub(crate) fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    fn qp(&self) -> Option<Arc<QpShared>> {
        self.qp.get().and_then(Weak::upgrade)
    }

    /// The accepting side's queue pair takes the link.
    pub(crate) fn attach(&self, qp: &Arc<QpShared>) {
        let _ = self.qp.set(Arc::downgrade(qp));
    }

    /// Queues a frame for the writer (dropped once the link closes).
    pub(crate) fn send(&self, f: &Frame) {
        self.push(f.encode());
    }

    fn push(&self, bytes: Vec<u8>) {
        let ok = lock(&self.out).queue(bytes);
        self.queued(ok);
    }

    /// Wakes the writer after frames were queued; ends the link if the peer does not take them.
    fn queued(&self, ok: bool) {
        self.out_cv.notify_all();
        if !ok {
            rpma_log!(
                Warning,
                "mock connection to {}: the peer process takes no answers; the connection is lost",
                self.name
            );
            let _ = self.stream.shutdown(Shutdown::Both);
        }
    }

    /// Closes this side. With `bye`, the writer sends what is queued and a goodbye, then shuts
    /// the socket, which ends the reader too, and this waits (up to [`DRAIN_TIMEOUT`]) until it
    /// has: a process that exits right after tearing a connection down has told its peer, as
    /// the kernel's connection manager would. Without `bye`, the socket is shut at once (the
    /// peer sees its connection fail, as when a process dies). Outstanding work is the caller's
    /// to flush.
    pub(crate) fn close(&self, bye: bool) {
        self.closed_here.store(true, Ordering::Release);
        let mut g = lock(&self.out);
        if !g.closing {
            if bye {
                let _ = g.queue(Frame::Bye.encode());
            } else {
                g.frames.clear();
                g.bytes = 0;
            }
            g.closing = true;
        }
        self.out_cv.notify_all();
        if !bye {
            drop(g);
            let _ = self.stream.shutdown(Shutdown::Both);
            return;
        }
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        while !g.done {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            g = self.out_cv.wait_timeout(g, left).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    fn write_loop(self: Arc<Self>, mut stream: UnixStream) {
        loop {
            let frame = {
                let mut g = lock(&self.out);
                loop {
                    if let Some(f) = g.frames.pop_front() {
                        g.bytes -= f.len() as u64 + FRAME_COST;
                        break Some(f);
                    }
                    if g.closing {
                        break None;
                    }
                    g = self.out_cv.wait(g).unwrap_or_else(PoisonError::into_inner);
                }
            };
            let Some(frame) = frame else { break };
            if stream.write_all(&frame).is_err() {
                // The reader sees the same failure and reports it.
                break;
            }
        }
        let _ = stream.shutdown(Shutdown::Both);
        let mut g = lock(&self.out);
        g.closing = true;
        g.done = true;
        drop(g);
        self.out_cv.notify_all();
    }

    fn read_loop(self: Arc<Self>, mut stream: UnixStream) {
        let failure = loop {
            match read_frame(&mut stream) {
                Ok(Some(f)) => {
                    if let Err(e) = self.handle(f) {
                        break Some(e);
                    }
                }
                Ok(None) => break None,
                Err(e) => break Some(e),
            }
        };
        self.ended(failure);
    }

    /// The link ended: unless this side closed it, the peer is gone, cleanly (after its
    /// goodbye) or not (a death, a failed socket, a protocol violation: LOST).
    fn ended(&self, failure: Option<io::Error>) {
        self.gone.store(true, Ordering::Release);
        let here = self.closed_here.load(Ordering::Acquire);
        if let Some(e) = &failure {
            if !here {
                rpma_log!(Warning, "mock connection to {}: {e}", self.name);
            }
        }
        self.close(false);
        let Some(qp) = self.qp() else { return };
        if qp.established.load(Ordering::Acquire) {
            let ev = if self.bye.load(Ordering::Acquire) && failure.is_none() {
                CmEvent::Disconnected
            } else {
                CmEvent::ConnectError
            };
            qp.hang_up(ev);
        } else if qp.state.compare_exchange(CONNECTING, ERROR, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            // The listening process went away before it answered the request.
            qp.push_event(CmEvent::Rejected, None);
        }
        self.flush(&qp);
    }

    fn handle(self: &Arc<Self>, f: Frame) -> io::Result<()> {
        match f {
            Frame::Req(r) => self.respond(r),
            Frame::Ack { seq, status, data } => self.answered(seq, status, data),
            Frame::Accept { native, pdata } => {
                let Some(qp) = self.qp() else { return Ok(()) };
                if pdata.len() > qp.pd.caps.max_private_data_accept {
                    return Err(violation("private data longer than an accept carries"));
                }
                self.peer_native.store(native, Ordering::Release);
                if qp.state.compare_exchange(CONNECTING, CONNECTED, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    qp.established.store(true, Ordering::Release);
                    let pdata = (!pdata.is_empty()).then(|| pdata.into_boxed_slice());
                    qp.push_event(CmEvent::Established, pdata);
                }
                Ok(())
            }
            Frame::Reject => {
                if let Some(qp) = self.qp() {
                    if qp.state.compare_exchange(CONNECTING, ERROR, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                        qp.push_event(CmEvent::Rejected, None);
                    }
                }
                Ok(())
            }
            // A disconnect request, or the answer to ours: this side is closed now.
            Frame::Dreq | Frame::Drep => {
                if let Some(qp) = self.qp() {
                    qp.hang_up(CmEvent::Disconnected);
                    self.flush(&qp);
                }
                Ok(())
            }
            Frame::Bye => {
                self.bye.store(true, Ordering::Release);
                self.gone.store(true, Ordering::Release);
                Ok(())
            }
            Frame::Hello { .. } => Err(violation("a second hello")),
        }
    }

    // ------------------------------------------------------------------------- initiator

    /// Sends a chain of work requests whose send-queue slots `first + 1 ..` were taken.
    pub(crate) fn post(&self, qp: &QpShared, wrs: &[SendWr<'_, MockFabric>], first: u64) {
        if qp.state() != CONNECTED || self.is_gone() {
            // RC flushes what follows an error, in order: what is outstanding first.
            self.flush(qp);
            for (i, wr) in wrs.iter().enumerate() {
                let (op, _) = opcodes(wr.op, &qp.pd.caps);
                qp.complete(wr.wr_id, WcStatus::WrFlushErr, op, wr.signaled, first + i as u64 + 1);
            }
            return;
        }
        let native = native_of(&qp.pd.caps);
        let mut frames = Vec::with_capacity(wrs.len());
        {
            let mut g = lock(&self.initiator);
            for (i, wr) in wrs.iter().enumerate() {
                let seq = first + i as u64 + 1;
                let (opcode, _) = opcodes(wr.op, &qp.pd.caps);
                let remote = wr.remote.map(|r| (r.addr, r.rkey));
                let carries = matches!(wr.op, SendOp::Write | SendOp::WriteImm(_) | SendOp::Send | SendOp::SendImm(_));
                let read = matches!(wr.op, SendOp::Read).then(|| (Dst::of(&wr.local), wr.len));
                let source = if carries { Dst::of(&wr.local) } else { Dst::None };
                // The source's bytes go straight into the frame.
                frames.push(encode_req(seq, wr.op, native, remote, wr.len as u64, |v| {
                    if carries {
                        gather_append(&wr.local, wr.len, v);
                    }
                }));
                g.sent.push_back(Outstanding { seq, wr_id: wr.wr_id, signaled: wr.signaled, opcode, read, source });
            }
        }
        let mut g = lock(&self.out);
        let mut ok = true;
        for f in frames {
            ok &= g.queue(f);
        }
        drop(g);
        self.queued(ok);
    }

    /// The peer answered work request `seq`.
    fn answered(&self, seq: u64, status: WcStatus, data: Vec<u8>) -> io::Result<()> {
        // Completions are queued with the outstanding list held, so that a flush from another
        // thread (a disconnect) cannot queue later work requests' completions before this one.
        let mut g = lock(&self.initiator);
        match g.sent.front() {
            Some(o) if o.seq == seq => {
                // A malformed answer is refused while the request is still outstanding: the
                // link's failure then flushes it with the others, so it still completes.
                let bad = match &o.read {
                    Some((_, len)) if status.is_success() => {
                        (data.len() != *len).then_some("a read answered with another length")
                    }
                    _ => (!data.is_empty()).then_some("bytes in the answer to a request that is no read"),
                };
                if let Some(what) = bad {
                    return Err(violation(what));
                }
            }
            _ if seq <= g.flushed_to => return Ok(()),
            _ => return Err(violation("an answer to no outstanding request")),
        }
        let mut o = g.sent.pop_front().expect("the front checked above");
        // The source is free again once its completion can be polled.
        drop(std::mem::take(&mut o.source));
        let Some(qp) = self.qp() else { return Ok(()) };
        if let Some((dst, len)) = o.read.take().filter(|_| status.is_success()) {
            dst.fill(&Source::Bytes(data.into_boxed_slice()), len);
        }
        qp.complete(o.wr_id, status, o.opcode, o.signaled, seq);
        if !status.is_success() {
            // The queue pair is in the error state: what is still outstanding is flushed, after
            // the error's completion.
            flush_locked(&mut g, &qp);
        }
        Ok(())
    }

    /// Flushes every outstanding work request (the queue pair is in the error state or the
    /// link is gone): each completes with `WR_FLUSH_ERR`, in order.
    pub(crate) fn flush(&self, qp: &QpShared) {
        flush_locked(&mut lock(&self.initiator), qp);
    }

    // ------------------------------------------------------------------------- responder

    fn respond(self: &Arc<Self>, r: Req) -> io::Result<()> {
        {
            let mut g = lock(&self.responder);
            g.held_bytes += r.data.len() as u64 + FRAME_COST;
            if g.held_bytes > OUTBOX_LIMIT {
                return Err(violation("more requests held behind a message waiting for a receive than fit"));
            }
            g.held.push_back(r);
            if g.running {
                return Ok(());
            }
            g.running = true;
        }
        self.run_held();
        Ok(())
    }

    /// Executes the held requests in order, until none is left or a message waits for a
    /// receive.
    fn run_held(self: &Arc<Self>) {
        loop {
            let r = {
                let mut g = lock(&self.responder);
                let Some(r) = g.held.pop_front() else {
                    g.running = false;
                    return;
                };
                g.held_bytes -= r.data.len() as u64 + FRAME_COST;
                if g.failed {
                    continue;
                }
                if r.consumes_receive() {
                    g.waiting = Some(r.seq);
                }
                r
            };
            let seq = r.seq;
            if self.execute(r) {
                continue;
            }
            let mut g = lock(&self.responder);
            if g.waiting == Some(seq) {
                g.stalled = true;
                return;
            }
        }
    }

    /// The message of request `seq` was delivered (or failed): answers it, and resumes the
    /// requests stalled behind it.
    pub(crate) fn message_done(self: &Arc<Self>, seq: u64, status: WcStatus) {
        self.answer(seq, status, Vec::new());
        let resume = {
            let mut g = lock(&self.responder);
            if g.waiting == Some(seq) {
                g.waiting = None;
                std::mem::take(&mut g.stalled)
            } else {
                false
            }
        };
        if resume {
            self.run_held();
        }
    }

    /// Answers request `seq`; after a failure nothing more executes.
    fn answer(&self, seq: u64, status: WcStatus, data: Vec<u8>) {
        if !status.is_success() {
            lock(&self.responder).failed = true;
        }
        self.send(&Frame::Ack { seq, status, data });
    }

    /// Executes one request here; `false` if it is a message that waits for a receive.
    fn execute(self: &Arc<Self>, r: Req) -> bool {
        let ack = |status: WcStatus, data: Vec<u8>| self.answer(r.seq, status, data);
        let Some(qp) = self.qp() else {
            ack(WcStatus::WrFlushErr, Vec::new());
            return true;
        };
        let mut caps = qp.pd.caps.clone();
        caps.native_flush = r.native & NATIVE_FLUSH != 0;
        caps.native_atomic_write = r.native & NATIVE_ATOMIC_WRITE != 0;
        // (A device configured for larger messages still answers no more than a frame carries.)
        if r.len > caps.max_msg_size.min(super::frame::MAX_MESSAGE) {
            ack(WcStatus::RemInvReqErr, Vec::new());
            return true;
        }
        let len = r.len as usize;
        let one_sided = |r: &Req| {
            // A queue pair in the error state (this side disconnected) drops what arrives: the
            // requester's retries run out. A fence by the QP rests on it (deferred.rs,
            // `peer_takes_work`).
            if qp.state() != CONNECTED {
                return (WcStatus::RetryExcErr, Vec::new());
            }
            let target = r
                .remote
                .and_then(|(_, rkey)| qp.pd.mrs.read().unwrap_or_else(PoisonError::into_inner).get(&rkey).cloned());
            let side = ByteSide::new(&r.data);
            let status = execute_op(r.op, &side, r.remote_buf(), len, target.as_deref(), &caps, qp.qp_num);
            (status, side.into_read())
        };
        if !r.consumes_receive() {
            // Executed with the outbox held, the answer queued before anything this side's user
            // does after seeing the bytes (a disconnect must not overtake the answer).
            let mut g = lock(&self.out);
            let (status, read) = one_sided(&r);
            if !status.is_success() {
                lock(&self.responder).failed = true;
            }
            let data = if status.is_success() { read } else { Vec::new() };
            let ok = g.queue(Frame::Ack { seq: r.seq, status, data }.encode());
            drop(g);
            self.queued(ok);
            return true;
        }
        if let SendOp::WriteImm(_) = r.op {
            let (status, _) = one_sided(&r);
            if !status.is_success() {
                ack(status, Vec::new());
                return true;
            }
        }
        let (imm, write_imm) = match r.op {
            SendOp::SendImm(i) => (Some(i), false),
            SendOp::WriteImm(i) => (Some(i), true),
            _ => (None, false),
        };
        let m = Msg {
            src: if write_imm { Source::None } else { Source::Bytes(r.data.into_boxed_slice()) },
            len,
            imm,
            write_imm,
            sender: Sender::Wire(Arc::downgrade(self)),
            sender_signaled: true,
            sender_wr_id: 0,
            sender_seq: r.seq,
            receiver: Arc::downgrade(&qp),
        };
        arrive(&qp, m)
    }
}

/// [`Link::flush`] with the outstanding list held.
fn flush_locked(g: &mut Initiator, qp: &QpShared) {
    if let Some(last) = g.sent.back() {
        g.flushed_to = last.seq;
    }
    for o in g.sent.drain(..) {
        // Its regions are free again before its completion can be polled.
        let Outstanding { seq, wr_id, signaled, opcode, read, source } = o;
        drop((read, source));
        qp.complete(wr_id, WcStatus::WrFlushErr, opcode, signaled, seq);
    }
}

fn violation(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("protocol violation by the peer process: {what}"))
}

/// Private data as the connecting side sends it: zero-padded to what RDMA CM carries.
pub(crate) fn padded(p: Option<&[u8]>, to: usize) -> Vec<u8> {
    pad(p, to).map(Vec::from).unwrap_or_default()
}

/// The error of an operation whose connection's threads could not start.
pub(crate) fn start_error(e: &io::Error, op: &'static str) -> Error {
    Error::provider(op, e.raw_os_error().unwrap_or(11))
        .with_detail(&format!("cannot start the mock connection's threads: {e}"))
}

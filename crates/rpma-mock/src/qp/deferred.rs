//! The send queue of [`Mode::Deferred`](crate::Mode::Deferred): work requests wait after `post`
//! and execute later, in posting order (RC's order; nothing passes anything), when the queue is
//! progressed: by a poll or a wait on either end of the connection, by
//! [`MockFabric::progress`](crate::MockFabric::progress), or on the fabric's progress thread.
//!
//! A waiting work request owns its local side: registered pieces (each region's `Arc`, released
//! before its completion is queued) or inline bytes (copied at post, as a NIC does). So the source
//! of a write or send is read when it executes, and the destination of a read is written then.
//! A send (or write with immediate data) whose message finds no receive at the peer stalls the
//! queue behind it (receiver-not-ready retry) until a receive takes it. With tearing, a remote
//! write lands one piece per progress step, in a seeded random order of its aligned pieces, and
//! completes after the last; a region deregistered meanwhile refuses the rest (remote access error).
//!
//! The queue is executed by one thread at a time (`busy`); whoever finds it busy leaves it to
//! that thread. No lock is held while a work request executes.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use rpma_core::transport::{Local, RemoteBuf, SendOp, SendWr};
use rpma_core::{WcOpcode, WcStatus};

use super::cm::cm_timer_fired;
use super::pieces::{gather_range, ByteSide, LocalSide, Piece, Source};
use super::recv::{arrive, Msg, Sender};
use super::responder::{execute_op, opcodes, write_offset};
use super::{QpShared, CONNECTED};
use crate::engine::{Progress, StepDone};
use crate::event::Event;
use crate::fabric::MockFabric;
use crate::mem::MrShared;

/// The owned local side of a waiting work request.
enum Owned {
    None,
    Pieces(Box<[Piece]>),
    /// Inline bytes, copied at post.
    Bytes(Box<[u8]>),
}

impl Owned {
    fn of(local: &Local<'_, MockFabric>) -> Self {
        match local {
            Local::None => Self::None,
            Local::Inline(b) => Self::Bytes((*b).into()),
            Local::One(_) | Local::Sg(_) => Self::Pieces(
                (0..local.pieces_len())
                    .filter_map(|i| local.piece(i))
                    .map(|b| (Arc::clone(b.mr), b.offset, b.len))
                    .collect(),
            ),
        }
    }

    /// The source of a message, read now (several pieces) or when it is delivered (one).
    fn into_source(self, len: usize) -> Source {
        match self {
            Self::None => Source::None,
            Self::Bytes(b) => Source::Bytes(b),
            Self::Pieces(p) => match &*p {
                [(mr, off, _)] => Source::One(Arc::clone(mr), *off),
                _ => {
                    let mut v = vec![0u8; len];
                    let mut at = 0;
                    for (mr, off, l) in p.iter() {
                        mr.shared().bytes(*off, *l).read(0, &mut v[at..at + l]).expect("inside the piece");
                        at += l;
                    }
                    Source::Bytes(v.into_boxed_slice())
                }
            },
        }
    }
}

impl LocalSide for Owned {
    fn inline(&self) -> Option<&[u8]> {
        match self {
            Self::Bytes(b) => Some(b),
            _ => None,
        }
    }

    fn pieces(&self) -> usize {
        match self {
            Self::Pieces(p) => p.len(),
            _ => 0,
        }
    }

    fn piece_at(&self, i: usize) -> Option<(&MrShared, usize, usize)> {
        match self {
            Self::Pieces(p) => p.get(i).map(|(mr, off, len)| (&**mr.shared(), *off, *len)),
            _ => None,
        }
    }
}

/// A remote write landing in pieces.
struct Torn {
    /// The target region, held weakly: its deregistration must not wait for the write.
    target: Weak<MrShared>,
    /// The write's offset in the target.
    off: usize,
    /// The pieces still to land, `(start in the write, length)`, the next one last.
    left: Vec<(usize, usize)>,
}

impl Torn {
    /// The pieces of a write of `len` bytes at remote address `addr`, split at the multiples of
    /// `chunk` of the address, in a random order.
    fn new(target: Weak<MrShared>, off: usize, addr: u64, len: usize, chunk: usize, rng: &mut fastrand::Rng) -> Self {
        let mut left = Vec::with_capacity(len / chunk + 2);
        let mut at = 0;
        while at < len {
            let a = addr + at as u64;
            let to_boundary = chunk - (a % chunk as u64) as usize;
            let n = to_boundary.min(len - at);
            left.push((at, n));
            at += n;
        }
        rng.shuffle(&mut left);
        Self { target, off, left }
    }
}

/// A work request waiting in the queue.
struct Pending {
    op: SendOp,
    local: Owned,
    remote: Option<RemoteBuf>,
    len: usize,
    signaled: bool,
    wr_id: u64,
    /// Its send-queue sequence number (what its completion retires).
    seq: u64,
    /// Set once a torn write started landing.
    torn: Option<Torn>,
}

/// What executing a work request did.
enum Executed {
    /// The whole work request: it completed (or failed).
    Whole,
    /// One piece of a torn write landed; the rest waits for the next step.
    Piece,
}

struct SqState {
    queue: VecDeque<Pending>,
    /// A thread executes the queue.
    busy: bool,
    /// The sequence number of a message waiting for a receive at the peer: the queue waits
    /// behind it.
    stalled: Option<u64>,
    /// Torn down: nothing executes any more.
    closed: bool,
    rng: fastrand::Rng,
}

/// A queue pair's deferred send queue.
pub(crate) struct DeferredSq {
    state: Mutex<SqState>,
    /// On the fabric's list of queue pairs with work (see `schedule`).
    scheduled: AtomicBool,
    tearing: Option<usize>,
}

impl DeferredSq {
    pub(super) fn new(tearing: Option<usize>, seed: u64) -> Self {
        Self {
            state: Mutex::new(SqState {
                queue: VecDeque::new(),
                busy: false,
                stalled: None,
                closed: false,
                rng: fastrand::Rng::with_seed(seed),
            }),
            scheduled: AtomicBool::new(false),
            tearing,
        }
    }

    fn lock(&self) -> MutexGuard<'_, SqState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues a chain whose send-queue slots were taken, the first after sequence number `seq`.
    pub(super) fn push(&self, wrs: &[SendWr<'_, MockFabric>], seq: u64) {
        let mut g = self.lock();
        for (i, wr) in wrs.iter().enumerate() {
            g.queue.push_back(Pending {
                op: wr.op,
                local: Owned::of(&wr.local),
                remote: wr.remote,
                len: wr.len,
                signaled: wr.signaled,
                wr_id: wr.wr_id,
                seq: seq + i as u64 + 1,
                torn: None,
            });
        }
    }

    /// Drops every waiting work request (the queue pair is torn down: its CQs go with it); from
    /// now on nothing executes or schedules it.
    pub(super) fn clear(&self) {
        self.scheduled.store(true, Ordering::Release);
        let dropped: Vec<Pending> = {
            let mut g = self.lock();
            g.closed = true;
            g.stalled = None;
            g.queue.drain(..).collect()
        };
        drop(dropped);
    }

    /// Work requests waiting (for tests and `MockFabric::progress`).
    pub(crate) fn waiting(&self) -> usize {
        self.lock().queue.len()
    }
}

impl QpShared {
    /// The message of work request `seq` was delivered or failed: a queue stalled behind it
    /// goes on (scheduled to run).
    pub(super) fn message_done(self: &Arc<Self>, seq: u64) {
        let Some(d) = &self.deferred else { return };
        let more = {
            let mut g = d.lock();
            if g.closed || g.stalled != Some(seq) {
                return;
            }
            g.stalled = None;
            !g.queue.is_empty()
        };
        if more {
            schedule(self);
        }
    }
}

/// Puts `qp` on its fabric's list of queue pairs with deferred work (once).
pub(super) fn schedule(qp: &Arc<QpShared>) {
    if let Some(d) = &qp.deferred {
        if !d.scheduled.swap(true, Ordering::AcqRel) {
            qp.fabric.engine.schedule(Arc::downgrade(qp) as Weak<dyn Progress>);
        }
    }
}

/// Takes `qp` off its fabric's list (the list was taken): a later post schedules it again.
fn unscheduled(qp: &QpShared) {
    if let Some(d) = &qp.deferred {
        d.scheduled.store(false, Ordering::Release);
    }
}

/// Puts `qp` back on its fabric's list if work waits (a silent link it crosses healed).
pub(super) fn resume(qp: &Arc<QpShared>) {
    reschedule_if_waiting(qp);
}

/// Whether `qp`'s connection crosses a silent link: its work waits, unanswered.
fn silenced(qp: &QpShared) -> bool {
    qp.remote().is_some_and(|r| qp.fabric.net.is_silent(qp.node(), r.node()))
}

/// Puts `qp` back on its fabric's list if work still waits (after one step of
/// `MockFabric::progress`).
fn reschedule_if_waiting(qp: &Arc<QpShared>) {
    if qp.deferred.as_ref().is_some_and(|d| d.waiting() > 0) {
        schedule(qp);
    }
}

/// Executes `qp`'s waiting work requests in order: all of them if `drain`, else up to the first
/// piece of a torn write. Stops at a message waiting for a receive. Returns whether anything
/// executed (nothing if another thread is executing the queue).
///
/// A step that ends with work still waiting (a torn write's next piece) puts `qp` back on its
/// fabric's list. The progress thread takes `qp` off the list before it runs it, and finds it
/// busy if a poll's step runs it meanwhile: that step is then the last to hold the queue, and
/// without this nothing would run the rest until the next post (a writer asleep on its
/// completion channel waited for ever).
fn progress_qp(qp: &Arc<QpShared>, drain: bool) -> bool {
    let Some(d) = &qp.deferred else { return false };
    let mut g = d.lock();
    if g.busy {
        return false;
    }
    g.busy = true;
    let mut ran = false;
    while g.stalled.is_none() && !g.closed {
        if silenced(qp) {
            // Nothing is answered across a silent link: the work waits until it heals (which
            // puts the queue pair back on the list).
            g.busy = false;
            return ran;
        }
        let Some(mut p) = g.queue.pop_front() else { break };
        if g.queue.front().is_some_and(|w| passes(&p, w, d.tearing)) {
            let mut w = g.queue.pop_front().expect("a write behind the read");
            drop(g);
            execute_write_passing_read(qp, &mut p, &mut w);
            ran = true;
            g = d.lock();
            continue;
        }
        drop(g);
        let step = execute(qp, d, &mut p);
        ran = true;
        g = d.lock();
        if let Executed::Piece = step {
            if g.closed {
                break;
            }
            g.queue.push_front(p);
            if !drain {
                break;
            }
        }
    }
    g.busy = false;
    let more = !g.queue.is_empty() && g.stalled.is_none() && !g.closed;
    drop(g);
    if more {
        schedule(qp);
    }
    ran
}

/// Executes `qp`'s first waiting work request (or one piece of a torn write): a simulation's
/// step. Says what it was; `None` if nothing executed (the queue is empty, stalled, closed or
/// busy).
fn progress_one(qp: &Arc<QpShared>) -> Option<StepDone> {
    let d = qp.deferred.as_ref()?;
    let mut g = d.lock();
    if g.busy || g.stalled.is_some() || g.closed || silenced(qp) {
        return None;
    }
    let mut p = g.queue.pop_front()?;
    g.busy = true;
    let mut what = StepDone { device: String::new(), qp_num: qp.qp_num, op: p.op, len: p.len, and_write: false };
    if g.queue.front().is_some_and(|w| passes(&p, w, d.tearing)) {
        let mut w = g.queue.pop_front().expect("a write behind the read");
        drop(g);
        execute_write_passing_read(qp, &mut p, &mut w);
        d.lock().busy = false;
        what.and_write = true;
        what.device = qp.pd.dev.name().to_owned();
        return Some(what);
    }
    drop(g);
    let step = execute(qp, d, &mut p);
    let mut g = d.lock();
    if let Executed::Piece = step {
        if !g.closed {
            g.queue.push_front(p);
        }
    }
    g.busy = false;
    what.device = qp.pd.dev.name().to_owned();
    Some(what)
}

/// Progresses both send queues of `qp`'s connection (a poll or a wait on one end).
pub(super) fn progress_conn(qp: &Arc<QpShared>, drain: bool) {
    progress_qp(qp, drain);
    if let Some(r) = qp.remote() {
        progress_qp(&r, drain);
    }
}

impl Progress for QpShared {
    fn progress_own(self: Arc<Self>, drain: bool) -> bool {
        progress_qp(&self, drain)
    }

    fn progress_conn(self: Arc<Self>, drain: bool) {
        progress_conn(&self, drain);
    }

    fn unscheduled(&self) {
        unscheduled(self);
    }

    fn reschedule_if_waiting(self: Arc<Self>) {
        reschedule_if_waiting(&self);
    }

    fn cm_timer_fired(&self) {
        cm_timer_fired(self);
    }

    fn progress_one(self: Arc<Self>) -> Option<StepDone> {
        progress_one(&self)
    }
}

/// Whether `w`, queued right behind `r`, passes it: a plain RDMA Write (not torn) behind an
/// RDMA Read with bytes to read. RC lets a write posted after a read execute before the read's
/// response has landed (only a fence, which the emulated atomic write carries, forbids it).
fn passes(r: &Pending, w: &Pending, tearing: Option<usize>) -> bool {
    matches!(r.op, SendOp::Read)
        && r.len > 0
        && r.torn.is_none()
        && matches!(w.op, SendOp::Write)
        && w.remote.is_some()
        && tearing.map_or(true, |chunk| w.len <= chunk)
}

/// A read `r` and the write `w` behind it that passes its response: the read executes at the
/// responder (its bytes are taken there, in order), then the write executes (reading its source
/// now), then the read's bytes land in its destination; the completions come in posting order.
/// So a write whose source is the read's destination sends the old bytes, as it may on RC.
fn execute_write_passing_read(qp: &Arc<QpShared>, r: &mut Pending, w: &mut Pending) {
    let caps = &qp.pd.caps;
    let (rop, _) = opcodes(r.op, caps);
    let (wop, _) = opcodes(w.op, caps);
    let table = qp.remote_mrs.get().filter(|_| qp.state() == CONNECTED);
    let Some(table) = table else {
        finish(qp, r, WcStatus::WrFlushErr, rop);
        finish(qp, w, WcStatus::WrFlushErr, wop);
        return;
    };
    if !peer_takes_work(qp) {
        finish(qp, r, WcStatus::RetryExcErr, rop);
        finish(qp, w, WcStatus::WrFlushErr, wop);
        return;
    }
    let lookup = |p: &Pending| {
        p.remote.and_then(|rb| table.read().unwrap_or_else(PoisonError::into_inner).get(&rb.rkey).cloned())
    };
    let sink = ByteSide::new(&[]);
    let rstatus = execute_op(r.op, &sink, r.remote, r.len, lookup(r).as_deref(), caps, qp.qp_num);
    if rstatus != WcStatus::Success {
        // The read fails: the queue pair enters the error state and the write is flushed.
        finish(qp, r, rstatus, rop);
        finish(qp, w, WcStatus::WrFlushErr, wop);
        return;
    }
    let wstatus = execute_op(w.op, &w.local, w.remote, w.len, lookup(w).as_deref(), caps, qp.qp_num);
    let bytes = sink.into_read();
    let mut at = 0;
    for i in 0..r.local.pieces() {
        if let Some((mr, off, len)) = r.local.piece_at(i) {
            mr.bytes(off, len).write(0, &bytes[at..at + len]).expect("inside the piece");
            at += len;
        }
    }
    finish(qp, r, WcStatus::Success, rop);
    finish(qp, w, wstatus, wop);
}

/// Releases the work request's local side, then queues its completion. Crash points: an
/// execution (unless the work was flushed), then the completion if one is queued.
fn finish(qp: &QpShared, p: &mut Pending, status: WcStatus, opcode: WcOpcode) -> Executed {
    p.local = Owned::None;
    p.torn = None;
    if status != WcStatus::WrFlushErr {
        qp.fabric.event(Event::Execute);
    }
    qp.complete(p.wr_id, status, opcode, p.signaled, p.seq);
    if p.signaled || status != WcStatus::Success {
        qp.fabric.event(Event::Complete);
    }
    Executed::Whole
}

fn execute(qp: &Arc<QpShared>, d: &DeferredSq, p: &mut Pending) -> Executed {
    let caps = &qp.pd.caps;
    let (sop, rop) = opcodes(p.op, caps);
    if p.torn.is_some() {
        return land(qp, p, sop);
    }
    if qp.state() != CONNECTED {
        return finish(qp, p, WcStatus::WrFlushErr, sop);
    }
    if !rop {
        let Some(table) = qp.remote_mrs.get() else {
            return finish(qp, p, WcStatus::WrFlushErr, sop);
        };
        if !peer_takes_work(qp) {
            return finish(qp, p, WcStatus::RetryExcErr, sop);
        }
        let target =
            p.remote.and_then(|rb| table.read().unwrap_or_else(PoisonError::into_inner).get(&rb.rkey).cloned());
        if let (SendOp::Write, Some(chunk), Some(rb)) = (p.op, d.tearing, p.remote) {
            if p.len > chunk {
                let Some(off) = target.as_deref().and_then(|m| write_offset(m, rb, p.len)) else {
                    return finish(qp, p, WcStatus::RemAccessErr, sop);
                };
                let weak = target.as_ref().map_or_else(Weak::new, Arc::downgrade);
                drop(target);
                let torn = Torn::new(weak, off, rb.addr, p.len, chunk, &mut d.lock().rng);
                p.torn = Some(torn);
                return land(qp, p, sop);
            }
        }
        let status = execute_op(p.op, &p.local, p.remote, p.len, target.as_deref(), caps, qp.qp_num);
        drop(target);
        return finish(qp, p, status, sop);
    }
    // A send, or a write with immediate data: a message for the peer's receive queue.
    let Some(remote) = qp.remote() else {
        return finish(qp, p, WcStatus::WrFlushErr, sop);
    };
    if p.remote.is_some() {
        let target =
            p.remote.and_then(|rb| remote.pd.mrs.read().unwrap_or_else(PoisonError::into_inner).get(&rb.rkey).cloned());
        let status = execute_op(p.op, &p.local, p.remote, p.len, target.as_deref(), caps, qp.qp_num);
        // Held for the copy only: a deregistration waits for it (mem.rs, `quiesce`).
        drop(target);
        if status != WcStatus::Success {
            return finish(qp, p, status, sop);
        }
    }
    let src = match p.op {
        SendOp::Send | SendOp::SendImm(_) => std::mem::replace(&mut p.local, Owned::None).into_source(p.len),
        _ => Source::None,
    };
    p.local = Owned::None;
    let imm = match p.op {
        SendOp::SendImm(i) | SendOp::WriteImm(i) => Some(i),
        _ => None,
    };
    let m = Msg {
        src,
        len: p.len,
        imm,
        write_imm: matches!(p.op, SendOp::WriteImm(_)),
        sender: Sender::Local(Arc::downgrade(qp)),
        sender_signaled: p.signaled,
        sender_wr_id: p.wr_id,
        sender_seq: p.seq,
        receiver: Arc::downgrade(&remote),
    };
    // Stalled before it arrives: a receive taking it at once (here or on another thread) ends
    // the stall through `message_done`.
    d.lock().stalled = Some(p.seq);
    let _ = arrive(&remote, m);
    Executed::Whole
}

/// Whether the peer's queue pair still executes what arrives: it is connected. A peer that moved
/// its queue pair to the error state (its disconnect, even one whose DREQ this side never heard
/// across a silent link) drops the requests, as a responder in the error state does: the
/// requester's retries run out. A fence of a writer by its QP rests on this (rpma-log's
/// replicas disconnect the writer they fence).
fn peer_takes_work(qp: &QpShared) -> bool {
    qp.remote().is_some_and(|r| r.state() == CONNECTED)
}

/// Lands the next piece of a torn write; completes it after the last.
fn land(qp: &QpShared, p: &mut Pending, opcode: WcOpcode) -> Executed {
    if qp.state() != CONNECTED {
        return finish(qp, p, WcStatus::WrFlushErr, opcode);
    }
    if !peer_takes_work(qp) {
        return finish(qp, p, WcStatus::RetryExcErr, opcode);
    }
    let Pending { torn: Some(t), local, .. } = p else {
        return finish(qp, p, WcStatus::Success, opcode);
    };
    let Some((from, n)) = t.left.pop() else {
        return finish(qp, p, WcStatus::Success, opcode);
    };
    match t.target.upgrade().filter(|m| m.valid.load(Ordering::Acquire)) {
        Some(m) => {
            gather_range(local, from, n, &m, t.off + from);
            m.note_write(t.off + from, n, qp.qp_num);
        }
        None => return finish(qp, p, WcStatus::RemAccessErr, opcode),
    }
    if t.left.is_empty() {
        return finish(qp, p, WcStatus::Success, opcode);
    }
    Executed::Piece
}

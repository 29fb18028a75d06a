//! Queue pairs of the mock: their state shared with the peer and their posting; their connection
//! management, message matching, the responder, listeners and shared receive queues have a file
//! each.

use std::collections::VecDeque;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use rpma_core::transport::{CmEvent, CqSlot, QpBackend, QueueConfig, RecvWr, SendOp, SendWr};
use rpma_core::{Error, ErrorKind, Result, Wc, WcOpcode, WcStatus};

use crate::config::Mode;
use crate::counters::{Kind, Live};
use crate::cq::{new_channel, new_cq, Channel, CqShared, Entry, MockCq};
use crate::engine::Progress;
use crate::event::Event;
use crate::fabric::{FabricInner, MockFabric};
use crate::net::Connection;
use crate::notify::Notifier;
use crate::pd::{MockPd, MrTable};
use crate::power::PowerLoss;
use crate::sim::Sched;

mod cm;
mod deferred;
mod listener;
mod pieces;
mod recv;
mod responder;
mod sq;
mod srq;
mod wire;

pub(crate) use cm::connect_request;
pub use listener::MockListener;
pub(crate) use listener::{listen, ListenerShared};
pub(crate) use srq::create_srq;
pub use srq::MockSrq;

use deferred::{progress_conn, schedule, DeferredSq};
use listener::Requester;
use pieces::{Dst, Source};
use recv::{arrive, complete_sender, deliver, Msg, RecvBuf, RecvSide, Sender};
use responder::opcodes;
use sq::TargetCache;
use srq::SrqShared;
use wire::Link;

const EINVAL: i32 = 22;
const ENOMEM: i32 = 12;
const ECONNREFUSED: i32 = 111;

const INIT: u8 = 0;
const CONNECTING: u8 = 1;
const CONNECTED: u8 = 2;
const ERROR: u8 = 3;

type CmItem = (CmEvent, Option<Box<[u8]>>);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A queue pair's state shared with its peer and its receive side (aligned so that no other
/// object shares its cache lines: the posting thread writes `posted`).
#[repr(align(128))]
pub(crate) struct QpShared {
    fabric: Arc<FabricInner>,
    pd: Arc<MockPd>,
    qp_num: u32,
    state: AtomicU8,
    /// The connection was established (CM level, independent of the QP's error state).
    established: AtomicBool,
    /// The connection was closed or lost on this side (its event was queued).
    closed: AtomicBool,
    /// This side called `disconnect` first (a DREQ is out): its own CLOSED event waits until
    /// the peer disconnects too or goes away, as with RDMA CM.
    disconnecting: AtomicBool,
    send_cq: Arc<CqShared>,
    recv_cq: Arc<CqShared>,
    rq: Option<Mutex<RecvSide>>,
    srq: Option<Arc<SrqShared>>,
    sq_size: u64,
    /// The slots the immediate path of `post_send` may take: `sq_size`, or 0 in the deferred
    /// mode or once the peer is in another process, so that such a post finds its slots "full"
    /// and goes the cold way, which the immediate mode's fast path then pays nothing for.
    fast_slots: AtomicU64,
    /// Send-queue slots taken so far (written by the posting thread only, see `sq.rs`).
    posted: AtomicU64,
    /// The send queue of the deferred mode (`None`: work executes as it is posted).
    deferred: Option<Box<DeferredSq>>,
    remote: OnceLock<Weak<QpShared>>,
    /// The remote PD's registration table (set with `remote`): one-sided operations reach it
    /// without upgrading `remote` (no reference-count traffic per operation).
    remote_mrs: OnceLock<Arc<MrTable>>,
    /// The connection to the peer's process (cross-process mode; `remote` then stays unset).
    link: OnceLock<Arc<Link>>,
    events: Notifier<CmItem>,
    _live: Live,
}

impl QpShared {
    /// The link fails: both ends enter the error state (posted work is flushed) and receive
    /// LOST ([`MockQp::cut_link`], a power cut of either node).
    pub(crate) fn lose(&self) {
        let r = self.remote();
        self.hang_up(CmEvent::ConnectError);
        if let Some(r) = r {
            r.hang_up(CmEvent::ConnectError);
        }
        // A peer in another process sees its connection end without a goodbye.
        if let Some(l) = self.link.get() {
            l.close(false);
            l.flush(self);
        }
    }

    fn state(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    /// The node (device index) the queue pair was made on.
    pub(crate) fn node(&self) -> usize {
        self.pd.dev.index
    }

    /// The other end of an established connection that neither side closed yet.
    pub(crate) fn live_peer(&self) -> Option<Arc<Self>> {
        if !self.established.load(Ordering::Acquire) || self.closed.load(Ordering::Acquire) {
            return None;
        }
        self.remote().filter(|r| !r.closed.load(Ordering::Acquire))
    }

    fn remote(&self) -> Option<Arc<Self>> {
        self.remote.get().and_then(Weak::upgrade)
    }

    fn side(&self) -> &Mutex<RecvSide> {
        match (&self.rq, &self.srq) {
            (Some(rq), _) => rq,
            (None, Some(srq)) => &srq.side,
            (None, None) => unreachable!("a QP has a receive queue or an SRQ"),
        }
    }

    fn complete(&self, wr_id: u64, status: WcStatus, opcode: WcOpcode, signaled: bool, seq: u64) {
        if status != WcStatus::Success {
            self.to_error();
        }
        if status == WcStatus::Success && !signaled {
            return;
        }
        let wc = Wc::new(wr_id, status, opcode).with_qp_num(self.qp_num);
        self.send_cq.push(Entry { wc, retire: seq });
    }

    fn recv_complete(&self, wr_id: u64, status: WcStatus, opcode: WcOpcode, byte_len: u32, imm: Option<u32>) {
        let wc = Wc::new(wr_id, status, opcode).with_byte_len(byte_len).with_imm(imm).with_qp_num(self.qp_num);
        self.recv_cq.push(Entry { wc, retire: 0 });
    }

    /// Moves the QP to the error state (as RC hardware does after an error completion or a
    /// disconnect) and flushes its posted receives and waiting messages.
    fn to_error(&self) {
        if self.state.swap(ERROR, Ordering::AcqRel) == ERROR {
            return;
        }
        let (bufs, pending): (Vec<RecvBuf>, Vec<Msg>) = match (&self.rq, &self.srq) {
            (Some(rq), _) => {
                let mut g = lock(rq);
                (g.bufs.drain(..).collect(), g.pending.drain(..).collect())
            }
            (None, Some(srq)) => {
                let mut g = lock(&srq.side);
                let me = self as *const Self;
                let (mine, rest): (VecDeque<Msg>, VecDeque<Msg>) =
                    g.pending.drain(..).partition(|m| std::ptr::eq(m.receiver.as_ptr(), me));
                g.pending = rest;
                (Vec::new(), mine.into_iter().collect())
            }
            (None, None) => (Vec::new(), Vec::new()),
        };
        // Each region is released before its completion is posted (see `deliver`).
        for RecvBuf { dst, wr_id } in bufs {
            drop(dst);
            self.recv_complete(wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0, None);
        }
        for mut m in pending {
            drop(std::mem::take(&mut m.src));
            complete_sender(&m, WcStatus::WrFlushErr);
        }
    }

    fn push_event(&self, ev: CmEvent, pdata: Option<Box<[u8]>>) {
        self.events.push((ev, pdata));
    }

    /// Ends an established connection on this side: error state and one connection event
    /// (whatever the QP's state: a QP in error after a failed operation still closes).
    fn hang_up(&self, ev: CmEvent) {
        if self.established.load(Ordering::Acquire) && !self.closed.swap(true, Ordering::AcqRel) {
            self.to_error();
            self.push_event(ev, None);
        }
    }
}

impl PowerLoss for QpShared {
    /// A power cut of either node loses the connection.
    fn power_lost(&self) {
        self.lose();
    }
}

impl Connection for QpShared {
    fn node(&self) -> usize {
        Self::node(self)
    }

    fn live_peer(&self) -> Option<Arc<dyn Connection>> {
        Self::live_peer(self).map(|r| r as Arc<dyn Connection>)
    }

    fn lose(&self) {
        Self::lose(self);
    }

    /// Puts it back on its fabric's list of queue pairs with deferred work if work waits (a
    /// silent link it crosses healed).
    fn resume(self: Arc<Self>) {
        deferred::resume(&self);
    }
}

/// A queue pair of the mock, with its CM identifier and event channel.
pub struct MockQp {
    shared: Arc<QpShared>,
    cq: MockCq,
    rcq: Option<MockCq>,
    shared_channel: Option<Arc<Channel>>,
    req_pdata: Box<[u8]>,
    target: Option<(String, u16)>,
    incoming: Option<Requester>,
    /// The APM flush buffer of a connection without native flush (created by `connect`).
    flush_buf: bool,
    torn: AtomicBool,
    /// The remote region the last one-sided operation reached (`sq.rs`).
    target_cache: TargetCache,
}

impl std::fmt::Debug for MockQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockQp").field("qp_num", &self.shared.qp_num).finish_non_exhaustive()
    }
}

fn create_qp(pd: &Arc<MockPd>, cfg: &QueueConfig<'_, MockFabric>) -> Result<MockQp> {
    pd.alive("rdma_create_qp")?;
    // `cfg.retry_count` and `cfg.ack_timeout` are ignored: the mock never retransmits.
    let f = &pd.fabric;
    let caps = &pd.caps;
    let shared_channel = if cfg.shared_channel { Some(new_channel(f)?) } else { None };
    let cq = new_cq(f, cfg.cq_size, cfg.sq_size, shared_channel.as_ref(), CqSlot::Main, caps.max_cqe)?;
    let srq = cfg.srq.map(|s| Arc::clone(&s.shared));
    let srq_rcq = srq.as_ref().and_then(|s| s.rcq.clone());
    let rcq = if cfg.rcq_size > 0 && srq_rcq.is_none() {
        Some(new_cq(f, cfg.rcq_size, 0, shared_channel.as_ref(), CqSlot::Receive, caps.max_cqe)?)
    } else {
        None
    };
    f.faults.check("rdma_create_qp")?;
    if cfg.sq_size > caps.max_qp_wr || (srq.is_none() && cfg.rq_size > caps.max_qp_wr) {
        return Err(Error::provider("rdma_create_qp", EINVAL).with_detail("queue size exceeds the device maximum"));
    }
    let recv_cq =
        srq_rcq.or_else(|| rcq.as_ref().map(|c| Arc::clone(&c.shared))).unwrap_or_else(|| Arc::clone(&cq.shared));
    let qp_num = f.next_num() & 0x00FF_FFFF;
    let rq = srq.is_none().then(|| Mutex::new(RecvSide::new(cfg.rq_size, f.seed ^ u64::from(qp_num), f.ordered)));
    let events = f.notifier(f.live(Kind::Channel), "rdma_create_event_channel")?;
    let shared = Arc::new(QpShared {
        fabric: Arc::clone(f),
        pd: Arc::clone(pd),
        qp_num,
        state: AtomicU8::new(INIT),
        established: AtomicBool::new(false),
        closed: AtomicBool::new(false),
        disconnecting: AtomicBool::new(false),
        send_cq: Arc::clone(&cq.shared),
        recv_cq,
        rq,
        srq,
        sq_size: u64::from(cfg.sq_size),
        fast_slots: AtomicU64::new(if f.execution.mode == Mode::Deferred { 0 } else { u64::from(cfg.sq_size) }),
        posted: AtomicU64::new(0),
        deferred: (f.execution.mode == Mode::Deferred)
            .then(|| Box::new(DeferredSq::new(f.execution.tearing, f.seed ^ u64::from(qp_num)))),
        remote: OnceLock::new(),
        remote_mrs: OnceLock::new(),
        link: OnceLock::new(),
        events,
        _live: f.live(Kind::Qp),
    });
    if let Some(p) = &f.power {
        p.add_qp(pd.dev.index, Arc::downgrade(&shared) as Weak<dyn PowerLoss>);
    }
    f.net.add_qp(Arc::downgrade(&shared) as Weak<dyn Connection>);
    // A poll or a wait on one of its CQs progresses the connection's deferred work.
    shared.send_cq.watch(Arc::downgrade(&shared) as Weak<dyn Progress>);
    if !Arc::ptr_eq(&shared.send_cq, &shared.recv_cq) {
        shared.recv_cq.watch(Arc::downgrade(&shared) as Weak<dyn Progress>);
    }
    Ok(MockQp {
        shared,
        cq,
        rcq,
        shared_channel,
        req_pdata: Box::new([]),
        target: None,
        incoming: None,
        flush_buf: false,
        torn: AtomicBool::new(false),
        target_cache: TargetCache::default(),
    })
}

fn pad(p: Option<&[u8]>, to: usize) -> Option<Box<[u8]>> {
    p.map(|p| {
        let mut v = p.to_vec();
        if v.len() < to {
            v.resize(to, 0);
        }
        v.into_boxed_slice()
    })
}

impl MockQp {
    /// Injects a link failure: both ends of the connection enter the error state (posted work is
    /// flushed) and receive [`ConnEvent::Lost`](rpma_core::ConnEvent::Lost).
    pub fn cut_link(&self) {
        self.shared.lose();
    }

    /// Delivers an arbitrary raw CM event to this connection (to test the handling of
    /// unexpected events).
    pub fn inject_event(&self, ev: CmEvent) {
        self.shared.push_event(ev, None);
    }

    /// Signals a completion event on the shared completion channel as if the CQ in `slot` had
    /// fired, without any completion (to test the handling of events of an unknown CQ: a
    /// [`CqSlot::Receive`] event on a connection without a receive CQ). Returns `false` if the
    /// channel is not shared.
    pub fn inject_cq_event(&self, slot: CqSlot) -> bool {
        self.shared_channel.as_ref().map(|c| c.push(slot)).is_some()
    }

    /// Send-queue slots in use (posted and not yet retired by a polled completion).
    #[must_use]
    pub fn sq_in_use(&self) -> u64 {
        self.shared.posted.load(Ordering::Acquire) - self.shared.send_cq.retired()
    }

    /// Executes one work request of a chain whose send-queue slot `seq` was taken.
    fn post_one(&self, wr: &SendWr<'_, MockFabric>, seq: u64) {
        let s = &self.shared;
        let state = s.state();
        let (sop, rop) = opcodes(wr.op, &s.pd.caps);
        if !rop {
            self.post_one_sided(wr, seq, sop);
            return;
        }
        let remote = s.remote();
        let (CONNECTED, Some(remote)) = (state, remote) else {
            s.complete_own(wr.wr_id, WcStatus::WrFlushErr, sop, wr.signaled, seq);
            return;
        };
        let status = self.target_cache.execute(&remote.pd.mrs, wr, &s.pd.caps, s.qp_num);
        if status != WcStatus::Success {
            s.complete_own(wr.wr_id, status, sop, wr.signaled, seq);
            return;
        }
        let src = match wr.op {
            SendOp::Send | SendOp::SendImm(_) => Source::of(&wr.local, wr.len),
            _ => Source::None,
        };
        let imm = match wr.op {
            SendOp::SendImm(i) | SendOp::WriteImm(i) => Some(i),
            _ => None,
        };
        let m = Msg {
            src,
            len: wr.len,
            imm,
            write_imm: matches!(wr.op, SendOp::WriteImm(_)),
            sender: Sender::Local(Arc::downgrade(s)),
            sender_signaled: wr.signaled,
            sender_wr_id: wr.wr_id,
            sender_seq: seq,
            receiver: Arc::downgrade(&remote),
        };
        arrive(&remote, m);
    }

    /// `post_send` when the immediate path found no free slots: a full send queue, or the
    /// deferred mode, where the chain takes its slots and waits in the queue.
    #[cold]
    #[inline(never)]
    fn post_cold(&self, wrs: &[SendWr<'_, MockFabric>]) -> Result<()> {
        const OP: &str = "ibv_post_send";
        let s = &self.shared;
        let full = || Error::send_queue_full(OP, s.sq_size, self.sq_in_use(), wrs.len() as u64);
        if let Some(link) = s.link.get() {
            let first = s.take_slots_of(wrs.len() as u64, s.sq_size).ok_or_else(full)?;
            link.post(s, wrs, first);
            return Ok(());
        }
        let Some(d) = &s.deferred else { return Err(full()) };
        if s.fabric.sim.is_some() {
            Sched::point("post");
        }
        if s.fabric.execution.background.is_some() {
            s.fabric.engine.ensure_thread(OP)?;
        }
        let first = s.take_slots_of(wrs.len() as u64, s.sq_size).ok_or_else(full)?;
        d.push(wrs, first);
        schedule(s);
        s.fabric.event(Event::Post);
        Ok(())
    }

    /// What a wait of this connection runs while it waits, in the deferred mode (nothing in a
    /// simulation: its steps execute the work).
    fn progress_hook(&self) -> Option<impl Fn() + '_> {
        self.shared
            .deferred
            .as_ref()
            .filter(|_| self.shared.fabric.sim.is_none())
            .map(|_| || progress_conn(&self.shared, true))
    }

    /// Deferred work requests waiting in the send queue (0 in the immediate mode).
    #[must_use]
    pub fn deferred_waiting(&self) -> usize {
        self.shared.deferred.as_ref().map_or(0, |d| d.waiting())
    }
}

impl QpBackend<MockFabric> for MockQp {
    fn qp_num(&self) -> u32 {
        self.shared.qp_num
    }

    fn cq(&self) -> &MockCq {
        &self.cq
    }

    fn rcq(&self) -> Option<&MockCq> {
        self.rcq.as_ref()
    }

    fn compl_fd(&self) -> Option<BorrowedFd<'_>> {
        self.shared_channel.as_ref().map(|c| c.fd())
    }

    fn wait_shared(&self) -> Result<CqSlot> {
        let Some(ch) = &self.shared_channel else {
            return Err(Error::new(ErrorKind::NotSharedChannel, "Conn::wait"));
        };
        self.shared.fabric.faults.check("ibv_get_cq_event").map_err(|e| Error::new(ErrorKind::NoCompletion, e.op()))?;
        let hook = self.progress_hook();
        let Ok(Some(slot)) = ch.pop_with(hook.as_ref().map(|h| h as &dyn Fn())) else {
            return Err(Error::new(ErrorKind::NoCompletion, "ibv_get_cq_event"));
        };
        match slot {
            CqSlot::Main => self.cq.shared.rearm()?,
            CqSlot::Receive => match &self.rcq {
                Some(r) => r.shared.rearm()?,
                None => return Err(Error::new(ErrorKind::Other, "ibv_get_cq_event")),
            },
        }
        Ok(slot)
    }

    fn post_recv(&self, wrs: &[RecvWr<'_, MockFabric>]) -> Result<()> {
        const OP: &str = "ibv_post_recv";
        let s = &self.shared;
        s.fabric.faults.check(OP)?;
        let Some(rq) = &s.rq else {
            return Err(Error::provider(OP, EINVAL).with_detail("the QP receives through a shared RQ"));
        };
        if s.state() == ERROR {
            for wr in wrs {
                s.recv_complete(wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0, None);
            }
            return Ok(());
        }
        post_recvs(rq, wrs, OP)
    }

    fn post_send(&self, wrs: &[SendWr<'_, MockFabric>]) -> Result<()> {
        const OP: &str = "ibv_post_send";
        let s = &self.shared;
        s.fabric.faults.check(OP)?;
        let state = s.state();
        if state == INIT || state == CONNECTING {
            return Err(Error::provider(OP, EINVAL).with_detail("the connection is not established"));
        }
        let n = wrs.len() as u64;
        // The whole chain takes its slots at once, or none.
        let Some(first) = s.take_slots(n) else {
            return self.post_cold(wrs);
        };
        for (i, wr) in wrs.iter().enumerate() {
            self.post_one(wr, first + i as u64 + 1);
        }
        Ok(())
    }

    fn sq_free(&self) -> u32 {
        u32::try_from(self.shared.sq_size.saturating_sub(self.sq_in_use())).unwrap_or(u32::MAX)
    }
}

/// Posts a chain of receives to `side`, whole or not at all: a message waiting for a buffer
/// takes it at once (RC's receiver-not-ready retry ends).
fn post_recvs(side: &Mutex<RecvSide>, wrs: &[RecvWr<'_, MockFabric>], op: &'static str) -> Result<()> {
    let mut matched = Vec::new();
    {
        let mut g = lock(side);
        if !g.has_room(wrs.len().saturating_sub(g.pending.len())) {
            return Err(Error::provider(op, ENOMEM).with_detail("receive queue is full"));
        }
        for wr in wrs {
            if let Some(m) = g.post(RecvBuf { dst: Dst::of(&wr.local), wr_id: wr.wr_id }, op)? {
                matched.push(m);
            }
        }
    }
    for (m, b) in matched {
        deliver(m, b);
    }
    Ok(())
}

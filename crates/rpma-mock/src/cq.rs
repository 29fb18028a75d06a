//! Completion queues and completion channels.
//!
//! A CQ keeps its completions in two places, polled in this order:
//!
//! - **its own ring**: the completions its queue pair produces while it posts (one-sided
//!   operations, failures found at posting time). The transport contract has a queue pair and
//!   its CQs used by one thread at a time, so the ring has one producer and one consumer, the
//!   same thread: no lock and no read-modify-write. Its words are atomics only so that the CQ
//!   type stays `Sync` (an SRQ's CQ may be polled from several threads; its ring is never
//!   used): relaxed loads and stores, plain moves on x86.
//! - **the shared queue**, behind a lock: every other completion (receives, sends completed
//!   when the peer's receive matched them, work flushed by a peer's disconnect, ...), pushed
//!   from any thread.
//!
//! While the shared queue holds anything, the owner's completions go there too, behind the
//! others; so the CQ yields completions in the order they were pushed, as one queue would.
//! Misused from two threads at once (through the backend, not rpma-core's API, whose `Conn`
//! is `!Sync` and `Cq` `!Send`), the ring could hand out an entry twice: wrong, never unsound
//! (this crate has no unsafe code).

use std::collections::VecDeque;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use rpma_core::transport::{CqBackend, CqSlot, CqTrace};
use rpma_core::{Error, ErrorKind, Result, Wc, WcOpcode, WcStatus};

use crate::config::Mode;
use crate::counters::{Kind, Live};
use crate::engine::Progress;
use crate::fabric::FabricInner;
use crate::notify::Notifier;
use crate::sim::Sched;

const EIO: i32 = 5;

/// A completion channel: one fd, events naming the CQ that fired.
pub(crate) type Channel = Notifier<CqSlot>;

/// A completion plus what polling it retires: the send-queue slots of the CQ's QP up to
/// `retire` (a send-queue sequence number, from 1; 0 retires nothing).
pub(crate) struct Entry {
    pub(crate) wc: Wc,
    pub(crate) retire: u64,
}

/// One completion in the own ring (on a cache line of its own, so that no other object's
/// bytes share it). Only the fields a completion made at posting time can have: no byte count,
/// no immediate data, no vendor error.
#[derive(Default)]
#[repr(align(64))]
struct Slot {
    wr_id: AtomicU64,
    retire: AtomicU64,
    /// Status (bits 0-15), opcode (16-31), QP number (32-63), see [`encode`].
    code: AtomicU64,
}

/// The own ring's `code` of a completion, if it fits a slot.
#[inline]
fn encode(status: WcStatus, opcode: WcOpcode, qp_num: u32) -> Option<u64> {
    let (status, opcode) = (status.raw(), opcode.raw());
    (status <= 0xFFFF && opcode <= 0xFFFF)
        .then(|| u64::from(status) | u64::from(opcode) << 16 | u64::from(qp_num) << 32)
}

fn decode(wr_id: u64, code: u64) -> Wc {
    Wc::new(wr_id, WcStatus::from_raw((code & 0xFFFF) as u32), WcOpcode::from_raw(((code >> 16) & 0xFFFF) as u32))
        .with_qp_num((code >> 32) as u32)
}

/// What the owner thread writes on every completion: the ring's indices and the send-queue
/// slots retired, on cache lines no other thread writes.
#[repr(align(128))]
struct Own {
    slots: Box<[Slot]>,
    /// `slots.len() - 1` (a power of two long, or empty).
    mask: u64,
    /// Next slot to poll.
    head: AtomicU64,
    /// Next slot to fill.
    tail: AtomicU64,
    /// The highest send-queue sequence number retired by polling (a CQ is the send CQ of at
    /// most one QP; only `poll` writes it).
    retired: AtomicU64,
}

impl Own {
    /// Entries in the ring, as another thread may see them (never more than there are).
    fn len_seen(&self) -> usize {
        let t = self.tail.load(Ordering::Acquire);
        let h = self.head.load(Ordering::Acquire);
        t.saturating_sub(h) as usize
    }
}

/// The shared queue and what its producers write, away from the owner's lines.
#[repr(align(128))]
struct Foreign {
    entries: Mutex<VecDeque<Entry>>,
    /// `entries.len()`, readable without the lock (0 on the owner's fast path).
    len: AtomicUsize,
    armed: AtomicBool,
    overrun: AtomicBool,
}

/// The queue pairs whose connections a poll or a wait of one completion queue progresses
/// (deferred mode; in a simulation, a poll is a scheduling point instead, and the
/// simulation's steps execute the work).
#[derive(Default)]
pub(crate) struct Watched {
    qps: Mutex<Vec<Weak<dyn Progress>>>,
    simulated: bool,
}

impl Watched {
    /// The list of a CQ of a fabric that is `simulated` or not.
    pub(crate) fn new(simulated: bool) -> Self {
        Self { qps: Mutex::new(Vec::new()), simulated }
    }

    /// A poll or a wait of the CQ progresses `qp`'s connection from now on.
    pub(crate) fn add(&self, qp: Weak<dyn Progress>) {
        let mut g = self.qps.lock().unwrap_or_else(PoisonError::into_inner);
        g.retain(|w| w.strong_count() > 0);
        g.push(qp);
    }

    /// Runs the deferred work of the connections watched (a step, or all of it if `drain`).
    #[cold]
    #[inline(never)]
    pub(crate) fn progress(&self, drain: bool) {
        if self.simulated {
            if !drain {
                Sched::point("poll");
            }
            return;
        }
        let qps: Vec<Arc<dyn Progress>> =
            self.qps.lock().unwrap_or_else(PoisonError::into_inner).iter().filter_map(Weak::upgrade).collect();
        for q in qps {
            q.progress_conn(drain);
        }
    }
}

pub(crate) struct CqShared {
    own: Own,
    foreign: Foreign,
    cap: usize,
    slot: CqSlot,
    pub(crate) channel: Arc<Channel>,
    fabric: Arc<FabricInner>,
    /// Deferred mode: the queue pairs completing here, whose connections a poll or a wait
    /// progresses through the engine (`None` in the immediate mode).
    progress: Option<Watched>,
    /// What its polls report (rpma-core's `tracing` feature).
    trace: CqTrace,
    _live: Live,
}

impl CqShared {
    /// Deferred mode: a poll or wait of this CQ progresses `qp`'s connection.
    pub(crate) fn watch(&self, qp: Weak<dyn Progress>) {
        if let Some(p) = &self.progress {
            p.add(qp);
        }
    }

    /// The highest send-queue sequence number retired by polling.
    pub(crate) fn retired(&self) -> u64 {
        self.own.retired.load(Ordering::Acquire)
    }

    /// Adds a completion from any thread; signals the channel if the CQ is armed. A full CQ
    /// overruns (as on hardware, a fatal condition): the completion is lost and polling fails
    /// from then on.
    pub(crate) fn push(&self, e: Entry) {
        let f = &self.foreign;
        {
            let mut g = f.entries.lock().unwrap_or_else(PoisonError::into_inner);
            if g.len() + self.own.len_seen() >= self.cap {
                f.overrun.store(true, Ordering::SeqCst);
                return;
            }
            g.push_back(e);
            f.len.store(g.len(), Ordering::Release);
        }
        self.notify();
        if let Some(s) = &self.fabric.sim {
            s.touch();
        }
    }

    /// Adds a completion of the send queue (no byte count, no immediate data) made by the
    /// thread that posts to this CQ's queue pair while it posts: the ring's only producer (by
    /// the transport contract the same thread polls).
    #[inline(always)]
    pub(crate) fn push_own(&self, wr_id: u64, status: WcStatus, opcode: WcOpcode, qp_num: u32, retire: u64) {
        let o = &self.own;
        let (h, t) = (o.head.load(Ordering::Relaxed), o.tail.load(Ordering::Relaxed));
        let used = t.wrapping_sub(h) as usize;
        match (encode(status, opcode, qp_num), self.foreign.len.load(Ordering::Acquire)) {
            (Some(code), 0) if used < o.slots.len() && used < self.cap => {
                let s = &o.slots[(t & o.mask) as usize];
                s.wr_id.store(wr_id, Ordering::Relaxed);
                s.retire.store(retire, Ordering::Relaxed);
                s.code.store(code, Ordering::Relaxed);
                o.tail.store(t + 1, Ordering::Release);
                self.notify();
            }
            _ => self.push_own_slow(wr_id, status, opcode, qp_num, retire),
        }
    }

    /// [`CqShared::push_own`] when the ring cannot take it: behind the shared queue's entries,
    /// or as an overrun.
    #[cold]
    #[inline(never)]
    fn push_own_slow(&self, wr_id: u64, status: WcStatus, opcode: WcOpcode, qp_num: u32, retire: u64) {
        let wc = Wc::new(wr_id, status, opcode).with_qp_num(qp_num);
        self.push(Entry { wc, retire });
    }

    /// Signals the channel if the CQ is armed (and disarms it).
    #[inline]
    fn notify(&self) {
        let armed = &self.foreign.armed;
        // Disarmed is the common case on a busy CQ: a load, not a read-modify-write.
        if armed.load(Ordering::Acquire) && armed.swap(false, Ordering::AcqRel) {
            self.channel.push(self.slot);
        }
    }

    pub(crate) fn rearm(&self) -> Result<()> {
        self.fabric.faults.check("ibv_req_notify_cq")?;
        self.foreign.armed.store(true, Ordering::Release);
        Ok(())
    }

    /// Takes up to `out.len()` completions of the own ring; how many.
    #[inline]
    fn take_own(&self, out: &mut [Wc]) -> usize {
        let o = &self.own;
        let h = o.head.load(Ordering::Relaxed);
        let n = (o.tail.load(Ordering::Acquire).wrapping_sub(h) as usize).min(out.len());
        if n == 0 {
            return 0;
        }
        let mut at = h;
        let mut retire = 0;
        for w in &mut out[..n] {
            let s = &o.slots[(at & o.mask) as usize];
            *w = decode(s.wr_id.load(Ordering::Relaxed), s.code.load(Ordering::Relaxed));
            self.trace.completed(w);
            // Posted in order, so the last one retires the most.
            retire = s.retire.load(Ordering::Relaxed);
            at += 1;
        }
        o.head.store(at, Ordering::Release);
        self.retire(retire);
        n
    }

    /// Takes up to `out.len()` completions of the shared queue; how many.
    #[inline(never)]
    fn take_foreign(&self, out: &mut [Wc]) -> usize {
        let f = &self.foreign;
        let mut g = f.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let n = out.len().min(g.len());
        let mut retire = 0;
        for w in out.iter_mut().take(n) {
            let Some(e) = g.pop_front() else { break };
            retire = retire.max(e.retire);
            *w = e.wc;
            self.trace.completed(w);
        }
        f.len.store(g.len(), Ordering::Release);
        drop(g);
        self.retire(retire);
        n
    }

    fn retire(&self, upto: u64) {
        if upto > self.own.retired.load(Ordering::Relaxed) {
            self.own.retired.store(upto, Ordering::Release);
        }
    }
}

/// A completion queue of the mock.
pub struct MockCq {
    pub(crate) shared: Arc<CqShared>,
}

impl std::fmt::Debug for MockCq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockCq").field("cap", &self.shared.cap).finish_non_exhaustive()
    }
}

pub(crate) fn new_channel(fabric: &Arc<FabricInner>) -> Result<Arc<Channel>> {
    fabric.faults.check("ibv_create_comp_channel")?;
    Ok(Arc::new(fabric.notifier(fabric.live(Kind::Channel), "ibv_create_comp_channel")?))
}

/// Creates a CQ of `size` entries on `channel` (a new private one if `None`), armed. `own`
/// bounds the completions its queue pair can have in it from posting (its send-queue size;
/// 0 for a CQ no queue pair posts to).
pub(crate) fn new_cq(
    fabric: &Arc<FabricInner>,
    size: u32,
    own: u32,
    channel: Option<&Arc<Channel>>,
    slot: CqSlot,
    max_cqe: u32,
) -> Result<MockCq> {
    let channel = match channel {
        Some(c) => Arc::clone(c),
        None => new_channel(fabric)?,
    };
    fabric.faults.check("ibv_create_cq")?;
    let size = size.min(i32::MAX as u32);
    if size > max_cqe {
        return Err(Error::provider("ibv_create_cq", 22).with_detail("cq size exceeds the device maximum"));
    }
    let cap = size.max(1) as usize;
    // More never fit: the CQ overruns at `cap`, and each completion of posting holds a
    // send-queue slot until it is polled.
    let ring = match own.min(size) {
        0 => 0,
        n => n.next_power_of_two() as usize,
    };
    let shared = Arc::new(CqShared {
        own: Own {
            slots: (0..ring).map(|_| Slot::default()).collect(),
            mask: (ring as u64).saturating_sub(1),
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            retired: AtomicU64::new(0),
        },
        foreign: Foreign {
            entries: Mutex::new(VecDeque::with_capacity(cap)),
            len: AtomicUsize::new(0),
            armed: AtomicBool::new(false),
            overrun: AtomicBool::new(false),
        },
        cap,
        slot,
        channel,
        fabric: Arc::clone(fabric),
        progress: (fabric.execution.mode == Mode::Deferred).then(|| Watched::new(fabric.sim.is_some())),
        trace: CqTrace::new(),
        _live: fabric.live(Kind::Cq),
    });
    shared.rearm()?;
    Ok(MockCq { shared })
}

#[cold]
fn overrun() -> Error {
    Error::provider("ibv_poll_cq", EIO).with_detail("completion queue overrun")
}

impl CqBackend for MockCq {
    fn poll(&self, wc: &mut [Wc]) -> Result<usize> {
        let s = &self.shared;
        s.fabric.faults.check("ibv_poll_cq")?;
        if let Some(p) = &s.progress {
            p.progress(false);
        }
        if s.foreign.overrun.load(Ordering::Acquire) {
            return Err(overrun());
        }
        let n = s.take_own(wc);
        // The shared queue's length is read without its lock, unless the CQ is armed: a poll
        // after `rearm` takes the lock, so that either it sees an entry pushed meanwhile or
        // that entry's producer sees the CQ armed and signals the channel (the lock orders the
        // two; without it both could miss). A CQ disarmed by a producer has its event coming.
        if n < wc.len() && (s.foreign.len.load(Ordering::Relaxed) != 0 || s.foreign.armed.load(Ordering::Relaxed)) {
            return Ok(n + s.take_foreign(&mut wc[n..]));
        }
        Ok(n)
    }

    fn trace(&self) -> &CqTrace {
        &self.shared.trace
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.shared.channel.fd()
    }

    fn wait(&self) -> Result<()> {
        self.wait_until(None)
    }

    fn wait_timeout(&self, timeout: Duration) -> Option<Result<()>> {
        Some(self.wait_until(self.shared.fabric.now().checked_add(timeout)))
    }
}

impl MockCq {
    /// [`CqBackend::wait`], until `deadline` at most (without making the channel's fd).
    fn wait_until(&self, deadline: Option<Instant>) -> Result<()> {
        let s = &self.shared;
        s.fabric.faults.check("ibv_get_cq_event").map_err(|e| Error::new(ErrorKind::NoCompletion, e.op()))?;
        let hook = s.progress.as_ref().map(|p| move || p.progress(true));
        match s.channel.pop_until(hook.as_ref().map(|h| h as &dyn Fn()), deadline) {
            Ok(Some(_)) => s.rearm(),
            Ok(None) => Err(Error::new(ErrorKind::NoCompletion, "ibv_get_cq_event")),
            Err(e) => Err(Error::new(ErrorKind::NoCompletion, "ibv_get_cq_event").with_detail(&e.to_string())),
        }
    }
}

//! Completion queues and completion channels.

use std::collections::VecDeque;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rpma_core::transport::{CqBackend, CqSlot};
use rpma_core::{Error, ErrorKind, Result, Wc};

use crate::counters::{Kind, Live};
use crate::notify::{new_notifier, Notifier};
use crate::FabricInner;

const EIO: i32 = 5;

/// A completion channel: one fd, events naming the CQ that fired.
pub(crate) type Channel = Notifier<CqSlot>;

/// A completion plus what polling it retires: the send-queue slots of the CQ's QP up to
/// `retire` (a send-queue sequence number, from 1; 0 retires nothing).
pub(crate) struct Entry {
    pub(crate) wc: Wc,
    pub(crate) retire: u64,
}

pub(crate) struct CqShared {
    entries: Mutex<VecDeque<Entry>>,
    cap: usize,
    overrun: AtomicBool,
    armed: AtomicBool,
    slot: CqSlot,
    /// The highest send-queue sequence number retired by polling (a CQ is the send CQ of at
    /// most one QP; only `poll` writes it, under the entries lock).
    pub(crate) retired: AtomicU64,
    pub(crate) channel: Arc<Channel>,
    fabric: Arc<FabricInner>,
    _live: Live,
}

impl CqShared {
    /// Adds a completion; signals the channel if the CQ is armed. A full CQ overruns (as on
    /// hardware, a fatal condition): the completion is lost and polling fails from then on.
    pub(crate) fn push(&self, e: Entry) {
        {
            let mut g = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            if g.len() >= self.cap {
                self.overrun.store(true, Ordering::SeqCst);
                return;
            }
            g.push_back(e);
        }
        // Disarmed is the common case on a busy CQ: a load, not a read-modify-write.
        if self.armed.load(Ordering::Acquire) && self.armed.swap(false, Ordering::AcqRel) {
            self.channel.push(self.slot);
        }
    }

    pub(crate) fn rearm(&self) -> Result<()> {
        self.fabric.faults.check("ibv_req_notify_cq")?;
        self.armed.store(true, Ordering::Release);
        Ok(())
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
    Ok(Arc::new(new_notifier(fabric.live(Kind::Channel), "ibv_create_comp_channel")?))
}

/// Creates a CQ of `size` entries on `channel` (a new private one if `None`), armed.
pub(crate) fn new_cq(
    fabric: &Arc<FabricInner>,
    size: u32,
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
    let shared = Arc::new(CqShared {
        entries: Mutex::new(VecDeque::with_capacity(cap)),
        cap,
        overrun: AtomicBool::new(false),
        armed: AtomicBool::new(false),
        slot,
        retired: AtomicU64::new(0),
        channel,
        fabric: Arc::clone(fabric),
        _live: fabric.live(Kind::Cq),
    });
    shared.rearm()?;
    Ok(MockCq { shared })
}

impl CqBackend for MockCq {
    fn poll(&self, wc: &mut [Wc]) -> Result<usize> {
        let s = &self.shared;
        s.fabric.faults.check("ibv_poll_cq")?;
        if s.overrun.load(Ordering::Acquire) {
            return Err(Error::provider("ibv_poll_cq", EIO).with_detail("completion queue overrun"));
        }
        let mut g = s.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let n = wc.len().min(g.len());
        for slot in wc.iter_mut().take(n) {
            let Some(e) = g.pop_front() else { break };
            if e.retire > s.retired.load(Ordering::Relaxed) {
                s.retired.store(e.retire, Ordering::Release);
            }
            *slot = e.wc;
        }
        Ok(n)
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.shared.channel.fd()
    }

    fn wait(&self) -> Result<()> {
        let s = &self.shared;
        s.fabric.faults.check("ibv_get_cq_event").map_err(|e| Error::new(ErrorKind::NoCompletion, e.op()))?;
        match s.channel.pop() {
            Ok(Some(_)) => s.rearm(),
            Ok(None) => Err(Error::new(ErrorKind::NoCompletion, "ibv_get_cq_event")),
            Err(e) => Err(Error::new(ErrorKind::NoCompletion, "ibv_get_cq_event").with_detail(&e.to_string())),
        }
    }
}

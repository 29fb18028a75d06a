//! A shared receive queue with its optional receive CQ.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rdma_sys as ffi;
use rpma_core::transport::{RecvWr, SrqBackend};

use rpma_core::{Error, Result};

use crate::provider::{self, PostSrqRecv};
use crate::ring::{FifoRing, Ring, SlotRing};
use crate::sys::{call, errno, release, ret_errno, track};
use crate::{Verbs, VerbsPd};

use super::cq::{RecvLink, SrqRing, SrqState, VerbsCq};
use super::recv_queue::{recv_chain, recvs_posted, RecvScratch};

/// A shared receive queue with its optional receive CQ.
pub struct VerbsSrq {
    pub(super) srq: NonNull<ffi::ibv_srq>,
    /// The provider's `post_srq_recv` (crate::provider).
    post_fn: PostSrqRecv,
    pub(super) ring: Arc<SrqRing>,
    pub(super) rcq: Option<VerbsCq>,
    torn: AtomicBool,
    _pd: Arc<VerbsPd>,
}

// SAFETY: [V3] the SRQ is used only through thread-safe libibverbs calls; the ring is behind
// its lock.
unsafe impl Send for VerbsSrq {}
// SAFETY: [V3, V6] as above; its own CQ reaches no connection ring (only this SRQ's locked
// ring, and the ring of no queue, with nothing in flight, which `VerbsCq::complete_send` only
// reads), so polling it from several threads at once touches no unsynchronised state.
unsafe impl Sync for VerbsSrq {}

impl std::fmt::Debug for VerbsSrq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsSrq").field("rcq", &self.rcq.is_some()).finish_non_exhaustive()
    }
}

pub(crate) fn create_srq(pd: &Arc<VerbsPd>, rq_size: u32, rcq_size: u32) -> Result<VerbsSrq> {
    // SAFETY: [V1] the PD keeps its device context open.
    let post_fn = unsafe { provider::post_srq_recv(pd.device().ctx()) }?;
    let ring = Arc::new(Mutex::new(SrqState { ring: SlotRing::new(rq_size, 1), scratch: RecvScratch::default() }));
    let rcq = if rcq_size > 0 {
        let link = RecvLink::Srq(Arc::clone(&ring));
        // SAFETY: [V9] the ring of no queue lives for the process and is only read; the SRQ's
        // ring is kept alive by the CQ's `Arc` and locked.
        Some(unsafe { VerbsCq::new(pd.device().ctx(), rcq_size, None, FifoRing::no_queue(), link) }?)
    } else {
        None
    };
    let mut attr = ffi::ibv_srq_init_attr {
        srq_context: std::ptr::null_mut(),
        attr: ffi::ibv_srq_attr { max_wr: rq_size, max_sge: 1, srq_limit: 0 },
    };
    // SAFETY: [V2] a live PD and a valid attribute struct.
    let srq = call!("ibv_create_srq", std::ptr::null_mut(), unsafe { ffi::ibv_create_srq(pd.as_ptr(), &mut attr) });
    let srq = NonNull::new(srq).ok_or_else(|| Error::provider("ibv_create_srq", errno()))?;
    track!(Srq, 1);
    Ok(VerbsSrq { srq, post_fn, ring, rcq, torn: AtomicBool::new(false), _pd: Arc::clone(pd) })
}

impl VerbsSrq {
    fn teardown(&self) -> Result<()> {
        if self.torn.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let mut r = Ok(());
        if let Some(c) = &self.rcq {
            r = r.and(c.release()).and(c.channel().release());
        }
        // SAFETY: [V1] no QP uses the SRQ any more (each holds an `Arc` of it); destroyed once.
        let d = release!(Srq: "ibv_destroy_srq", errno(), unsafe { ffi::ibv_destroy_srq(self.srq.as_ptr()) });
        if d != 0 {
            if r.is_ok() {
                r = Err(Error::provider("ibv_destroy_srq", ret_errno(d)));
            }
            return r;
        }
        // The receives posted to it are gone with it: their regions are free (crate::pin).
        self.ring.lock().unwrap_or_else(PoisonError::into_inner).ring.release_pins();
        crate::mr::PARKED.sweep();
        r
    }
}

impl Drop for VerbsSrq {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            rpma_core::rpma_log!(Error, "dropping a shared receive queue: {e}");
        }
    }
}

impl SrqBackend<Verbs> for VerbsSrq {
    fn post_recv(&self, wrs: &[RecvWr<'_, Verbs>]) -> Result<()> {
        const OP: &str = "ibv_post_srq_recv";
        let mut g = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        let SrqState { ring, scratch } = &mut *g;
        ring.check(OP, wrs.len())?;
        let head = recv_chain(ring, scratch, wrs);
        let mut bad: *mut ffi::ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: [V2, V4, V8] a live SRQ and its provider's `post_srq_recv`; the chain was just
        // linked in the scratch buffers (untouched until the call returns, under the lock), its
        // SGEs describe pieces of regions `wrs` borrows (pinned by the ring right after).
        let r = call!("ibv_post_srq_recv", errno(), unsafe { (self.post_fn)(self.srq.as_ptr(), head, &mut bad) });
        recvs_posted(ring, wrs, OP, head, r, bad)
    }

    fn rcq(&self) -> Option<&VerbsCq> {
        self.rcq.as_ref()
    }

    fn destroy(self) -> Result<()> {
        self.teardown()
    }
}

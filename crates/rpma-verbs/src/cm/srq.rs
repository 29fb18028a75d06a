//! A shared receive queue with its optional receive CQ.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rdma_sys as ffi;
use rpma_core::transport::{LocalBuf, SrqBackend};

use rpma_core::{Error, Result};

use crate::cq::VerbsCq;
use crate::mr::VerbsMr;
use crate::ring::RecvRing;
use crate::sys::{call, errno, release, ret_errno, track};
use crate::{Verbs, VerbsPd};

/// A shared receive queue with its optional receive CQ.
pub struct VerbsSrq {
    pub(super) srq: NonNull<ffi::ibv_srq>,
    pub(super) ring: Arc<RecvRing>,
    pub(super) rcq: Option<VerbsCq>,
    torn: AtomicBool,
    _pd: Arc<VerbsPd>,
}

// SAFETY: [V3] the SRQ is used only through thread-safe libibverbs calls; the ring locks itself.
unsafe impl Send for VerbsSrq {}
// SAFETY: [V3] as above.
unsafe impl Sync for VerbsSrq {}

impl std::fmt::Debug for VerbsSrq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsSrq").field("rcq", &self.rcq.is_some()).finish_non_exhaustive()
    }
}

pub(crate) fn create_srq(pd: &Arc<VerbsPd>, rq_size: u32, rcq_size: u32) -> Result<VerbsSrq> {
    let ring = Arc::new(RecvRing::new(rq_size));
    let rcq = if rcq_size > 0 {
        Some(VerbsCq::new(pd.device().ctx(), rcq_size, None, None, Some(Arc::clone(&ring)))?)
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
    Ok(VerbsSrq { srq, ring, rcq, torn: AtomicBool::new(false), _pd: Arc::clone(pd) })
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
        if d != 0 && r.is_ok() {
            r = Err(Error::provider("ibv_destroy_srq", ret_errno(d)));
        }
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
    fn post_recv(&self, buf: Option<LocalBuf<'_, VerbsMr>>, wr_id: u64) -> Result<()> {
        const OP: &str = "ibv_post_srq_recv";
        let mut sge = buf.as_ref().map(|b| b.mr.sge(b.offset, b.len));
        self.ring.post(OP, wr_id, buf.as_ref().map(|b| b.mr), |id| {
            let mut wr = ffi::ibv_recv_wr {
                wr_id: id,
                next: std::ptr::null_mut(),
                sg_list: sge.as_mut().map_or(std::ptr::null_mut(), |s| s as *mut ffi::ibv_sge),
                num_sge: i32::from(sge.is_some()),
            };
            let mut bad: *mut ffi::ibv_recv_wr = std::ptr::null_mut();
            // SAFETY: [V2, V4] a live SRQ; one initialised work request whose SGE lives across the call.
            let r = call!("ibv_post_srq_recv", errno(), unsafe {
                ffi::ibv_post_srq_recv(self.srq.as_ptr(), &mut wr, &mut bad)
            });
            if r == 0 {
                Ok(())
            } else {
                Err(Error::provider(OP, ret_errno(r)))
            }
        })
    }

    fn rcq(&self) -> Option<&VerbsCq> {
        self.rcq.as_ref()
    }

    fn destroy(self) -> Result<()> {
        self.teardown()
    }
}

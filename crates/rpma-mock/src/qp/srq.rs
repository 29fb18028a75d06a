//! A shared receive queue of the mock.

use std::sync::{Arc, Mutex};

use rpma_core::transport::{CqSlot, RecvWr, SrqBackend};
use rpma_core::{Error, Result};

use crate::counters::{Kind, Live};
use crate::cq::{new_cq, CqShared, MockCq};
use crate::fabric::{FabricInner, MockFabric};
use crate::pd::MockPd;

use super::{post_recvs, RecvSide, EINVAL};

pub(crate) struct SrqShared {
    pub(super) side: Mutex<RecvSide>,
    pub(super) rcq: Option<Arc<CqShared>>,
    fabric: Arc<FabricInner>,
    _live: Live,
}

/// A shared receive queue of the mock.
pub struct MockSrq {
    pub(super) shared: Arc<SrqShared>,
    rcq: Option<MockCq>,
}

impl std::fmt::Debug for MockSrq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockSrq").field("rcq", &self.rcq.is_some()).finish_non_exhaustive()
    }
}

pub(crate) fn create_srq(pd: &Arc<MockPd>, rq_size: u32, rcq_size: u32) -> Result<MockSrq> {
    let f = &pd.fabric;
    f.faults.check("ibv_create_srq")?;
    if rq_size > pd.caps.max_srq_wr {
        return Err(Error::provider("ibv_create_srq", EINVAL).with_detail("rq size exceeds the device maximum"));
    }
    let rcq = if rcq_size > 0 { Some(new_cq(f, rcq_size, 0, None, CqSlot::Receive, pd.caps.max_cqe)?) } else { None };
    let seed = f.seed ^ f.next_id().rotate_left(32);
    let shared = Arc::new(SrqShared {
        side: Mutex::new(RecvSide::new(rq_size, seed, f.ordered)),
        rcq: rcq.as_ref().map(|c| Arc::clone(&c.shared)),
        fabric: Arc::clone(f),
        _live: f.live(Kind::Srq),
    });
    Ok(MockSrq { shared, rcq })
}

impl SrqBackend<MockFabric> for MockSrq {
    fn post_recv(&self, wrs: &[RecvWr<'_, MockFabric>]) -> Result<()> {
        const OP: &str = "ibv_post_srq_recv";
        self.shared.fabric.faults.check(OP)?;
        post_recvs(&self.shared.side, wrs, OP)
    }

    fn rcq(&self) -> Option<&MockCq> {
        self.rcq.as_ref()
    }

    fn destroy(self) -> Result<()> {
        let f = &self.shared.fabric.faults;
        let mut r = Ok(());
        if self.rcq.is_some() {
            r = r.and(f.check("ibv_destroy_cq")).and(f.check("ibv_destroy_comp_channel"));
        }
        r.and(f.check("ibv_destroy_srq"))
    }
}

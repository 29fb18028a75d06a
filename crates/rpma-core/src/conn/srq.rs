//! Shared receive queues and their configuration, with librpma's defaults
//! (docs/semantics.md#defaults).

use std::fmt;
use std::sync::Arc;

use crate::error::Result;
use crate::peer::{Peer, PeerInner};
use crate::transport::{SrqBackend, Transport};
use crate::validate;

use super::{Cq, OpLimits};

/// A shared receive queue (`struct rpma_srq`): one set of receive buffers for several
/// connections. Cheap to clone (a handle); connections using it keep it alive.
///
/// `Send + Sync`: receives may be posted from several threads.
pub struct Srq<T: Transport> {
    pub(super) srq: Arc<T::Srq>,
    _peer: Arc<PeerInner<T>>,
    /// What a receive may use: one piece ([`OpLimits::single`]).
    limits: OpLimits,
}

impl<T: Transport> Clone for Srq<T> {
    fn clone(&self) -> Self {
        Self { srq: Arc::clone(&self.srq), _peer: Arc::clone(&self._peer), limits: self.limits }
    }
}

impl<T: Transport> fmt::Debug for Srq<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Srq").field("rcq", &self.srq.rcq().is_some()).finish_non_exhaustive()
    }
}

impl<T: Transport> Srq<T> {
    /// `rpma_srq_new`: a shared RQ of `cfg.rq_size()` entries with, if `cfg.rcq_size() > 0`, its
    /// own receive CQ (with a private completion channel). `None` uses the defaults (20 / 20).
    ///
    /// # Errors
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) if a size exceeds the device's limit
    /// (`max_srq_wr`, `max_cqe`); [`Provider`](crate::ErrorKind::Provider) if creating the SRQ,
    /// channel or CQ fails; [`OutOfMemory`](crate::ErrorKind::OutOfMemory).
    pub fn new(peer: &Peer<T>, cfg: Option<&SrqCfg>) -> Result<Self> {
        const OP: &str = "Srq::new";
        let (rq, rcq) = cfg.map_or((SrqCfg::DEFAULT_SIZE, SrqCfg::DEFAULT_SIZE), |c| (c.rq_size(), c.rcq_size()));
        validate::queue_size(OP, "rq_size", rq, peer.inner.caps.max_srq_wr)?;
        validate::queue_size(OP, "rcq_size", rcq, peer.inner.caps.max_cqe)?;
        let srq = peer.transport().create_srq(&peer.inner.pd, rq, rcq).map_err(|e| e.in_op("Srq::new"))?;
        Ok(Self { srq: Arc::new(srq), _peer: Arc::clone(&peer.inner), limits: OpLimits::single(&peer.inner.caps) })
    }

    pub(crate) fn backend(&self) -> &T::Srq {
        &self.srq
    }

    pub(crate) const fn peer_inner(&self) -> &Arc<PeerInner<T>> {
        &self._peer
    }

    /// Whether the SRQ was created on the peer (protection domain) `peer`.
    #[inline]
    pub(crate) fn is_of(&self, peer: &Arc<PeerInner<T>>) -> bool {
        Arc::ptr_eq(&self._peer, peer)
    }

    pub(crate) const fn limits(&self) -> &OpLimits {
        &self.limits
    }

    /// `rpma_srq_get_rcq`: the SRQ's receive CQ, or `None` if created with `rcq_size == 0`.
    #[must_use]
    pub fn rcq(&self) -> Option<Cq<'_, T>> {
        self.srq.rcq().map(|cq| Cq { cq, shared: false, _local: std::marker::PhantomData })
    }

    /// `rpma_srq_delete`: releases this handle; the SRQ is destroyed when the last connection
    /// using it is gone, and a failure is reported if this was the last handle.
    ///
    /// # Errors
    /// [`Provider`](crate::ErrorKind::Provider) if destroying the CQ, channel or SRQ fails.
    pub fn delete(self) -> Result<()> {
        match Arc::try_unwrap(self.srq) {
            Ok(s) => s.destroy().map_err(|e| e.in_op("Srq::delete")),
            Err(_) => Ok(()),
        }
    }
}

/// A shared-RQ configuration (`struct rpma_srq_cfg`): a plain builder. `Send + Sync`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqCfg {
    rq_size: u32,
    rcq_size: u32,
}

impl Default for SrqCfg {
    fn default() -> Self {
        Self { rq_size: Self::DEFAULT_SIZE, rcq_size: Self::DEFAULT_SIZE }
    }
}

impl SrqCfg {
    /// The default size of a shared receive queue and of its receive CQ, 20. librpma's code
    /// uses 20, its man page says 100; rpma-rs follows the code (docs/decisions.md #1), which
    /// is what every librpma program ran with.
    pub const DEFAULT_SIZE: u32 = 20;

    /// `rpma_srq_cfg_new`: RQ size 20, receive CQ size 20 ([`SrqCfg::DEFAULT_SIZE`]).
    #[doc(alias = "rpma_srq_cfg_new")]
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// `rpma_srq_cfg_set_rq_size`.
    #[doc(alias = "rpma_srq_cfg_set_rq_size")]
    #[must_use]
    pub const fn with_rq_size(mut self, rq_size: u32) -> Self {
        self.rq_size = rq_size;
        self
    }

    /// `rpma_srq_cfg_get_rq_size`.
    #[doc(alias = "rpma_srq_cfg_get_rq_size")]
    #[must_use]
    pub const fn rq_size(&self) -> u32 {
        self.rq_size
    }

    /// `rpma_srq_cfg_set_rcq_size`: 0 means the SRQ gets no receive CQ of its own.
    #[doc(alias = "rpma_srq_cfg_set_rcq_size")]
    #[must_use]
    pub const fn with_rcq_size(mut self, rcq_size: u32) -> Self {
        self.rcq_size = rcq_size;
        self
    }

    /// `rpma_srq_cfg_get_rcq_size`.
    #[doc(alias = "rpma_srq_cfg_get_rcq_size")]
    #[must_use]
    pub const fn rcq_size(&self) -> u32 {
        self.rcq_size
    }
}

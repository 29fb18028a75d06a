//! Connection and shared-RQ configurations, with librpma's defaults (spec section 4).

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::conn::Srq;
use crate::error::{Error, Result};
use crate::transport::Transport;
use crate::types::DEFAULT_TIMEOUT_MS;

/// Default main CQ size.
pub const DEFAULT_CQ_SIZE: u32 = 10;
/// Default receive CQ size (0: no separate receive CQ).
pub const DEFAULT_RCQ_SIZE: u32 = 0;
/// Default send queue size.
pub const DEFAULT_SQ_SIZE: u32 = 10;
/// Default receive queue size.
pub const DEFAULT_RQ_SIZE: u32 = 10;
/// Default SRQ size and SRQ receive CQ size. librpma's code uses 20, its man page says 100;
/// rpma-rs follows the code (spec 9 #1), which is what every librpma program ran with.
pub const DEFAULT_SRQ_SIZE: u32 = 20;

/// A connection configuration (`struct rpma_conn_cfg`).
///
/// Read when a connection request is created ([`ConnReq::new`](crate::ConnReq::new),
/// [`Ep::next_conn_req`](crate::Ep::next_conn_req)); later changes do not affect existing
/// requests or connections. Setters take `&self` (atomic stores) and return `&Self` so they
/// chain.
pub struct ConnCfg<T: Transport> {
    timeout_ms: AtomicI32,
    cq_size: AtomicU32,
    rcq_size: AtomicU32,
    sq_size: AtomicU32,
    rq_size: AtomicU32,
    shared: AtomicBool,
    srq: Mutex<Option<Srq<T>>>,
}

impl<T: Transport> fmt::Debug for ConnCfg<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnCfg")
            .field("timeout_ms", &self.timeout_ms())
            .field("cq_size", &self.cq_size())
            .field("rcq_size", &self.rcq_size())
            .field("sq_size", &self.sq_size())
            .field("rq_size", &self.rq_size())
            .field("compl_channel_shared", &self.compl_channel())
            .field("srq", &self.srq().is_some())
            .finish()
    }
}

impl<T: Transport> Default for ConnCfg<T> {
    fn default() -> Self {
        Self {
            timeout_ms: AtomicI32::new(DEFAULT_TIMEOUT_MS),
            cq_size: AtomicU32::new(DEFAULT_CQ_SIZE),
            rcq_size: AtomicU32::new(DEFAULT_RCQ_SIZE),
            sq_size: AtomicU32::new(DEFAULT_SQ_SIZE),
            rq_size: AtomicU32::new(DEFAULT_RQ_SIZE),
            shared: AtomicBool::new(false),
            srq: Mutex::new(None),
        }
    }
}

impl<T: Transport> Clone for ConnCfg<T> {
    fn clone(&self) -> Self {
        let c = Self::default();
        c.timeout_ms.store(self.timeout_ms(), Ordering::Relaxed);
        c.set_cq_size(self.cq_size())
            .set_rcq_size(self.rcq_size())
            .set_sq_size(self.sq_size())
            .set_rq_size(self.rq_size())
            .set_compl_channel(self.compl_channel());
        if let Some(s) = self.srq() {
            c.set_srq(&s);
        }
        c
    }
}

impl<T: Transport> ConnCfg<T> {
    /// `rpma_conn_cfg_new`: timeout 1000 ms, CQ 10, RCQ 0, SQ 10, RQ 10, channel not shared,
    /// no SRQ.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// `rpma_conn_cfg_set_timeout`: connection-establishment timeout (active side).
    ///
    /// # Errors
    /// [`Inval`](crate::ErrorKind::Inval) if `timeout_ms < 0`.
    pub fn set_timeout(&self, timeout_ms: i32) -> Result<&Self> {
        if timeout_ms < 0 {
            return Err(Error::inval("rpma_conn_cfg_set_timeout", "timeout_ms < 0"));
        }
        self.timeout_ms.store(timeout_ms, Ordering::Relaxed);
        Ok(self)
    }

    /// `rpma_conn_cfg_get_timeout`.
    #[must_use]
    pub fn timeout_ms(&self) -> i32 {
        self.timeout_ms.load(Ordering::Relaxed)
    }

    /// `rpma_conn_cfg_set_cq_size`.
    pub fn set_cq_size(&self, cq_size: u32) -> &Self {
        self.cq_size.store(cq_size, Ordering::Relaxed);
        self
    }

    /// `rpma_conn_cfg_get_cq_size`.
    #[must_use]
    pub fn cq_size(&self) -> u32 {
        self.cq_size.load(Ordering::Relaxed)
    }

    /// `rpma_conn_cfg_set_rcq_size`: a value > 0 creates a separate receive CQ.
    pub fn set_rcq_size(&self, rcq_size: u32) -> &Self {
        self.rcq_size.store(rcq_size, Ordering::Relaxed);
        self
    }

    /// `rpma_conn_cfg_get_rcq_size`.
    #[must_use]
    pub fn rcq_size(&self) -> u32 {
        self.rcq_size.load(Ordering::Relaxed)
    }

    /// `rpma_conn_cfg_set_sq_size`.
    pub fn set_sq_size(&self, sq_size: u32) -> &Self {
        self.sq_size.store(sq_size, Ordering::Relaxed);
        self
    }

    /// `rpma_conn_cfg_get_sq_size`.
    #[must_use]
    pub fn sq_size(&self) -> u32 {
        self.sq_size.load(Ordering::Relaxed)
    }

    /// `rpma_conn_cfg_set_rq_size`.
    pub fn set_rq_size(&self, rq_size: u32) -> &Self {
        self.rq_size.store(rq_size, Ordering::Relaxed);
        self
    }

    /// `rpma_conn_cfg_get_rq_size`.
    #[must_use]
    pub fn rq_size(&self) -> u32 {
        self.rq_size.load(Ordering::Relaxed)
    }

    /// `rpma_conn_cfg_set_compl_channel`: one completion channel shared by the main CQ and the
    /// receive CQ (then use [`Conn::wait`](crate::Conn::wait)).
    pub fn set_compl_channel(&self, shared: bool) -> &Self {
        self.shared.store(shared, Ordering::Relaxed);
        self
    }

    /// `rpma_conn_cfg_get_compl_channel`.
    #[must_use]
    pub fn compl_channel(&self) -> bool {
        self.shared.load(Ordering::Relaxed)
    }

    /// `rpma_conn_cfg_set_srq`: connections made with this configuration receive through `srq`.
    /// (A NULL SRQ, which librpma rejected with `Inval`, cannot be expressed; use
    /// [`ConnCfg::clear_srq`] to unset, which librpma could not do.)
    pub fn set_srq(&self, srq: &Srq<T>) -> &Self {
        *self.srq.lock().unwrap_or_else(PoisonError::into_inner) = Some(srq.clone());
        self
    }

    /// Removes the SRQ from the configuration.
    pub fn clear_srq(&self) -> &Self {
        *self.srq.lock().unwrap_or_else(PoisonError::into_inner) = None;
        self
    }

    /// `rpma_conn_cfg_get_srq`.
    #[must_use]
    pub fn srq(&self) -> Option<Srq<T>> {
        self.srq.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// A shared-RQ configuration (`struct rpma_srq_cfg`).
#[derive(Debug)]
pub struct SrqCfg {
    rq_size: AtomicU32,
    rcq_size: AtomicU32,
}

impl Default for SrqCfg {
    fn default() -> Self {
        Self { rq_size: AtomicU32::new(DEFAULT_SRQ_SIZE), rcq_size: AtomicU32::new(DEFAULT_SRQ_SIZE) }
    }
}

impl Clone for SrqCfg {
    fn clone(&self) -> Self {
        let c = Self::default();
        c.set_rq_size(self.rq_size()).set_rcq_size(self.rcq_size());
        c
    }
}

impl SrqCfg {
    /// `rpma_srq_cfg_new`: RQ size 20, receive CQ size 20 ([`DEFAULT_SRQ_SIZE`]).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// `rpma_srq_cfg_set_rq_size`.
    pub fn set_rq_size(&self, rq_size: u32) -> &Self {
        self.rq_size.store(rq_size, Ordering::Relaxed);
        self
    }

    /// `rpma_srq_cfg_get_rq_size`.
    #[must_use]
    pub fn rq_size(&self) -> u32 {
        self.rq_size.load(Ordering::Relaxed)
    }

    /// `rpma_srq_cfg_set_rcq_size`: 0 means the SRQ gets no receive CQ of its own.
    pub fn set_rcq_size(&self, rcq_size: u32) -> &Self {
        self.rcq_size.store(rcq_size, Ordering::Relaxed);
        self
    }

    /// `rpma_srq_cfg_get_rcq_size`.
    #[must_use]
    pub fn rcq_size(&self) -> u32 {
        self.rcq_size.load(Ordering::Relaxed)
    }
}

//! Connection requests, outgoing and incoming, and the queue configuration they are built with.

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::AtomicBool;
use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::peer::Peer;
use crate::trace::{ConnTrace, Step};
use crate::transport::{Capabilities, CmBackend, QueueConfig, SrqBackend, Transport};
use crate::validate;

use super::cfg::ConnCfg;
use super::{Conn, OpLimits, Srq};

/// The queue configuration of a request of `peer` made per `cfg` (`srq`: its SRQ), validated.
pub(super) fn queue_config<'a, T: Transport>(
    op: &'static str,
    peer: &Peer<T>,
    cfg: Option<&ConnCfg<T>>,
    srq: &'a Option<Srq<T>>,
) -> Result<QueueConfig<'a, T>> {
    let caps: &Capabilities = &peer.inner.caps;
    let d = ConnCfg::<T>::new();
    let c = cfg.unwrap_or(&d);
    if let Some(s) = srq.as_ref().filter(|s| !s.is_of(&peer.inner)) {
        return Err(Error::invalid_input(
            op,
            &format!(
                "the SRQ was created on another peer (protection domain) than the request's: the SRQ's peer is on \
                 device {}, the request's on device {}",
                s.peer_inner().device.name(),
                peer.device().name()
            ),
        ));
    }
    let shared = c.shared_channel();
    if shared && srq.as_ref().is_some_and(|s| s.srq.rcq().is_some()) {
        return Err(Error::invalid_input(
            op,
            "a shared completion channel cannot be used with an SRQ that has its own receive CQ",
        ));
    }
    let timeout_ms = i32::try_from(c.timeout().as_millis())
        .map_err(|_| Error::invalid_input(op, "the timeout exceeds i32::MAX milliseconds"))?;
    validate::queue_size(op, "cq_size", c.cq_size(), caps.max_cqe)?;
    validate::queue_size(op, "rcq_size", c.rcq_size(), caps.max_cqe)?;
    validate::queue_size(op, "sq_size", c.sq_size(), caps.max_qp_wr)?;
    validate::queue_size(op, "rq_size", c.rq_size(), caps.max_qp_wr)?;
    if c.max_sge() == 0 {
        return Err(Error::invalid_input(op, "max_sge is 0 (at least one piece per operation)"));
    }
    validate::queue_size(op, "max_sge", c.max_sge(), caps.max_sge)?;
    validate::queue_size(op, "max_inline", c.max_inline(), caps.max_inline_data)?;
    validate::retry_count(op, c.retry_count())?;
    validate::ack_timeout(op, c.ack_timeout())?;
    Ok(QueueConfig {
        timeout_ms,
        cq_size: c.cq_size(),
        rcq_size: c.rcq_size(),
        sq_size: c.sq_size(),
        rq_size: c.rq_size(),
        max_sge: c.max_sge(),
        max_inline: c.max_inline(),
        retry_count: c.retry_count(),
        ack_timeout: c.ack_timeout(),
        shared_channel: shared,
        srq: srq.as_ref().map(|s| &s.srq),
    })
}
/// A connection request (`struct rpma_conn_req`): outgoing ([`ConnReq::new`]) or incoming
/// ([`Ep::next_conn_req`](crate::Ep::next_conn_req)). [`ConnReq::connect`] turns it into a [`Conn`]; dropping it (or
/// [`ConnReq::delete`]) rejects an incoming request and abandons an outgoing one.
///
/// `Send` but not `Sync`, as a [`Conn`]: its receive queue is posted to without a lock.
pub struct ConnReq<T: Transport> {
    pub(super) qp: Option<T::Qp>,
    pub(super) shared: bool,
    pub(super) incoming: bool,
    pub(super) limits: OpLimits,
    pub(super) _not_sync: PhantomData<Cell<()>>,
    pub(super) srq: Option<Srq<T>>,
    pub(super) peer: Peer<T>,
    pub(super) trace: ConnTrace,
}

impl<T: Transport> fmt::Debug for ConnReq<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnReq").field("incoming", &self.incoming).finish_non_exhaustive()
    }
}

impl<T: Transport> Drop for ConnReq<T> {
    fn drop(&mut self) {
        if let Some(qp) = self.qp.take() {
            let _span = self.trace.enter();
            self.trace.step(Step::Reject);
            if let Err(e) = qp.reject() {
                rpma_log!(Error in "ConnReq::drop", "dropping a connection request failed: {e}");
            }
        }
    }
}

impl<T: Transport> ConnReq<T> {
    /// `rpma_conn_req_new`: resolves `addr:port` (blocking, up to the configured timeout for
    /// each step) and builds the queues of an outgoing connection per `cfg` (`None`: defaults).
    ///
    /// # Errors
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) if `cfg`'s SRQ was created on another peer
    /// than `peer` (another protection domain, or another device), `cfg` combines a shared
    /// completion channel with an SRQ that has its own receive CQ, a queue size exceeds the
    /// device's limit (`max_qp_wr`, `max_cqe`), the timeout does not fit `i32` milliseconds, the
    /// retry count exceeds 7 or the ACK timeout is outside 1..=31;
    /// [`Provider`](crate::ErrorKind::Provider) if resolving the address or route, or creating the
    /// CQs or QP, fails; [`OutOfMemory`](crate::ErrorKind::OutOfMemory).
    pub fn new(peer: &Peer<T>, addr: &str, port: &str, cfg: Option<&ConnCfg<T>>) -> Result<Self> {
        const OP: &str = "ConnReq::new";
        let srq = cfg.and_then(ConnCfg::srq).cloned();
        let qc = queue_config(OP, peer, cfg, &srq)?;
        let shared = qc.shared_channel;
        let limits = OpLimits::of(&qc, &peer.inner.caps);
        let trace = ConnTrace::active(peer, addr, port);
        let qp = {
            let _span = trace.enter();
            let qp = peer.transport().connect_request(&peer.inner.pd, addr, port, &qc).map_err(|e| e.in_op(OP))?;
            trace.attach::<T>(&qp);
            trace.step(Step::Requested);
            rpma_log!(Notice in OP, "Requesting a connection to {addr}:{port}");
            qp
        };
        Ok(Self {
            qp: Some(qp),
            shared,
            incoming: false,
            limits,
            _not_sync: PhantomData,
            srq,
            peer: peer.clone(),
            trace,
        })
    }

    pub(crate) fn qp(&self) -> &T::Qp {
        self.qp.as_ref().expect("qp present until consumed")
    }

    pub(crate) const fn peer(&self) -> &Peer<T> {
        &self.peer
    }

    pub(crate) const fn limits(&self) -> &OpLimits {
        &self.limits
    }

    /// Whether this is an incoming request (from [`Ep::next_conn_req`](crate::Ep::next_conn_req)).
    #[must_use]
    pub const fn is_incoming(&self) -> bool {
        self.incoming
    }

    /// `rpma_conn_req_get_private_data`: the private data that came with an incoming request
    /// (empty for outgoing requests or when none was sent). It may be longer than what the peer
    /// sent (zero-padded by the transport): check `len >= expected`, never `==`.
    ///
    /// SECURITY: private data is unauthenticated.
    #[must_use]
    pub fn private_data(&self) -> &[u8] {
        self.qp().request_private_data()
    }

    /// `rpma_conn_req_connect`: connects an outgoing request or accepts an incoming one,
    /// sending `pdata` as private data. The request is consumed either way; establishment is
    /// reported later by [`ConnEvent::Established`](crate::ConnEvent::Established) from [`Conn::next_event`].
    ///
    /// # Errors
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) if `pdata` is given but empty, or longer
    /// than the transport allows (56 bytes to connect, 196 to accept on IB/RoCE); the request is
    /// then deleted (an incoming one rejected), as librpma does (docs/decisions.md #16);
    /// [`Provider`](crate::ErrorKind::Provider) if connecting or accepting fails;
    /// [`OutOfMemory`](crate::ErrorKind::OutOfMemory).
    pub fn connect(mut self, pdata: Option<&[u8]>) -> Result<Conn<T>> {
        const OP: &str = "ConnReq::connect";
        let caps = &self.peer.inner.caps;
        let limit = if self.incoming { caps.max_private_data_accept } else { caps.max_private_data_connect };
        validate::private_data(OP, pdata, limit)?;
        let mut qp = self.qp.take().expect("qp present until consumed");
        let trace = self.trace.take();
        let req_pdata: Box<[u8]> = qp.request_private_data().into();
        {
            let _span = trace.enter();
            if let Err(e) = qp.connect(pdata) {
                trace.step(Step::Reject);
                if let Err(e2) = qp.reject() {
                    rpma_log!(Error in OP, "releasing a failed connection request: {e2}");
                }
                return Err(e.in_op(OP));
            }
            trace.step(if self.incoming { Step::Accept } else { Step::Connect });
        }
        let private_data = OnceLock::new();
        if !req_pdata.is_empty() {
            let _ = private_data.set(req_pdata);
        }
        Ok(Conn {
            qp,
            shared: self.shared,
            limits: self.limits,
            _not_sync: PhantomData,
            direct_write_to_pmem: AtomicBool::new(false),
            private_data,
            _srq: self.srq.take(),
            peer: self.peer.clone(),
            trace,
        })
    }

    /// `rpma_conn_req_delete`: rejects an incoming request (`rdma_reject`) or abandons an
    /// outgoing one, releasing its queues. (Dropping the request does the same.)
    ///
    /// # Errors
    /// [`Provider`](crate::ErrorKind::Provider): the first failure of the release steps (all are
    /// attempted).
    pub fn delete(mut self) -> Result<()> {
        let _span = self.trace.enter();
        self.qp.take().map_or(Ok(()), |qp| {
            self.trace.step(Step::Reject);
            qp.reject().map_err(|e| e.in_op("ConnReq::delete"))
        })
    }
}

//! Receive buffers, posted to a connection, a connection request or a shared receive queue.

use std::fmt;
use std::sync::Arc;

use crate::conn::{Conn, ConnReq, OpLimits, Srq};
use crate::error::Result;
use crate::peer::PeerInner;
use crate::transport::{ByCore, QpBackend, RecvWr, SrqBackend, Transport};
use crate::validate;

use super::local::{Rules, Src};
use super::slice::LocalSlice;

impl<T: Transport> Conn<T> {
    /// `rpma_recv`: posts a receive buffer.
    ///
    /// Posted buffers form an **unordered set**: which buffer a message lands in, and the order
    /// of receive completions, are not those of posting. A connection using an SRQ has no
    /// receive queue of its own: posting fails with [`Provider`](crate::ErrorKind::Provider);
    /// use [`Srq::recv`].
    ///
    /// A buffer of 0 bytes (an empty slice, as librpma allows, or [`Conn::recv_empty`]) takes
    /// only a message of 0 bytes or the immediate data of a write: a longer message fails on both
    /// sides (this receive completes with a local error, [`LocLenErr`](crate::WcStatus::LocLenErr)
    /// on the mock, [`LocQpOpErr`](crate::WcStatus::LocQpOpErr) on rxe; the send with an error),
    /// the queue pair enters the error state and, as on hardware, no connection event comes of
    /// it: the completions say what happened.
    #[doc(alias = "rpma_recv")]
    pub fn recv<'c>(&'c self, dst: LocalSlice<'c, T>) -> Recv<'c, T> {
        Recv::new(RecvQueue::Conn(self), Src::One(dst))
    }

    /// A scattering receive (librdmacm's `rdma_post_recvv`): the message fills the pieces of
    /// `dst` in order. At most the connection's [`max_sge`](crate::ConnCfg::with_max_sge)
    /// pieces, none empty.
    pub fn recv_sg<'c>(&'c self, dst: &'c [LocalSlice<'c, T>]) -> Recv<'c, T> {
        Recv::new(RecvQueue::Conn(self), Src::Sg(dst))
    }

    /// Posts a zero-length receive buffer (`rpma_recv` with no region).
    #[doc(alias = "rpma_recv")]
    pub fn recv_empty(&self) -> Recv<'_, T> {
        Recv::new(RecvQueue::Conn(self), Src::None)
    }
}

impl<T: Transport> Srq<T> {
    /// `rpma_srq_recv`: posts a receive buffer shared by every connection using the SRQ (an
    /// unordered set, as [`Conn::recv`]).
    #[doc(alias = "rpma_srq_recv")]
    pub fn recv<'c>(&'c self, dst: LocalSlice<'c, T>) -> Recv<'c, T> {
        Recv::new(RecvQueue::Srq(self), Src::One(dst))
    }

    /// Posts a zero-length receive buffer (`rpma_srq_recv` with no region).
    #[doc(alias = "rpma_srq_recv")]
    pub fn recv_empty(&self) -> Recv<'_, T> {
        Recv::new(RecvQueue::Srq(self), Src::None)
    }
}

impl<T: Transport> ConnReq<T> {
    /// `rpma_conn_req_recv`: posts a receive buffer before the connection is established, so a
    /// buffer is ready for the peer's first message. (librpma has no zero-length form here.)
    #[doc(alias = "rpma_conn_req_recv")]
    pub fn recv<'c>(&'c self, dst: LocalSlice<'c, T>) -> Recv<'c, T> {
        Recv::new(RecvQueue::Req(self), Src::One(dst))
    }

    /// A scattering receive posted before the connection is established ([`Conn::recv_sg`]).
    pub fn recv_sg<'c>(&'c self, dst: &'c [LocalSlice<'c, T>]) -> Recv<'c, T> {
        Recv::new(RecvQueue::Req(self), Src::Sg(dst))
    }
}

/// Which receive queue a [`Recv`] goes to.
pub(super) enum RecvQueue<'c, T: Transport> {
    Conn(&'c Conn<T>),
    Srq(&'c Srq<T>),
    Req(&'c ConnReq<T>),
}

impl<T: Transport> Clone for RecvQueue<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Transport> Copy for RecvQueue<'_, T> {}

impl<T: Transport> RecvQueue<'_, T> {
    /// The librpma function posting to this queue.
    pub(super) const fn op(&self) -> &'static str {
        match self {
            Self::Conn(_) => "rpma_recv",
            Self::Srq(_) => "rpma_srq_recv",
            Self::Req(_) => "rpma_conn_req_recv",
        }
    }

    /// Whether `other` is the same queue.
    pub(super) fn same(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Conn(a), Self::Conn(b)) => std::ptr::eq(*a, *b),
            (Self::Srq(a), Self::Srq(b)) => std::ptr::eq(a.backend(), b.backend()),
            (Self::Req(a), Self::Req(b)) => std::ptr::eq(*a, *b),
            _ => false,
        }
    }

    /// Posts a chain of validated receives (one doorbell).
    #[inline]
    pub(super) fn post(&self, wrs: &[RecvWr<'_, T>]) -> Result<()> {
        match self {
            Self::Conn(c) => c.qp().post_recv(wrs),
            Self::Srq(s) => s.backend().post_recv(wrs),
            Self::Req(r) => r.qp().post_recv(wrs),
        }
    }
}

/// A receive buffer ready to post ([`Conn::recv`], [`Srq::recv`], [`ConnReq::recv`]), alone
/// with [`post`](Recv::post) or in a [`RecvBatch`](super::RecvBatch).
#[must_use = "a receive does nothing until it is posted with .post()"]
pub struct Recv<'c, T: Transport> {
    pub(super) queue: RecvQueue<'c, T>,
    dst: Src<'c, T>,
    context: u64,
}

impl<T: Transport> fmt::Debug for Recv<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recv").field("dst", &self.dst).field("context", &self.context).finish_non_exhaustive()
    }
}

impl<'c, T: Transport> Recv<'c, T> {
    const fn new(queue: RecvQueue<'c, T>, dst: Src<'c, T>) -> Self {
        Self { queue, dst, context: 0 }
    }

    /// The operation context, returned as [`Wc::wr_id`](crate::Wc::wr_id) (default 0).
    pub const fn context(mut self, context: u64) -> Self {
        self.context = context;
        self
    }

    /// Validates the buffer into the work request a backend posts.
    #[inline]
    pub(super) fn into_wr(self) -> Result<(RecvWr<'c, T>, &'static str)> {
        let op = self.queue.op();
        let wr = match &self.queue {
            RecvQueue::Conn(c) => self.validated(op, c.limits(), &c.peer().inner),
            RecvQueue::Srq(s) => self.validated(op, s.limits(), s.peer_inner()),
            RecvQueue::Req(r) => self.validated(op, r.limits(), &r.peer().inner),
        }?;
        Ok((wr, op))
    }

    /// Validates the buffer against a queue's `limits` and `peer` (`op` names the call).
    #[inline(always)]
    fn validated(&self, op: &'static str, limits: &OpLimits, peer: &Arc<PeerInner<T>>) -> Result<RecvWr<'c, T>> {
        let (local, len) = self.dst.validate(op, peer, Rules { device_writes: true, read: false, limits })?;
        validate::msg_len(op, limits.max_msg, len)?;
        Ok(RecvWr { local, wr_id: self.context, _by_core: ByCore::VALIDATED })
    }

    /// Validates the buffer and posts it.
    ///
    /// # Errors
    /// [`Inval`](crate::ErrorKind::Inval) if the range is inverted or outside its region, the
    /// device may not write the region, the length exceeds the device's maximum message size,
    /// or (scatter-gather) there are no pieces, an empty one or more than the connection's
    /// [`max_sge`](crate::ConnCfg::with_max_sge); [`Provider`](crate::ErrorKind::Provider) if
    /// posting fails (the queue is full; a connection using an SRQ has no receive queue of its
    /// own).
    #[inline(always)]
    pub fn post(self) -> Result<()> {
        // One dispatch on the queue (each arm validates and posts), not one to validate and
        // another to post.
        match self.queue {
            RecvQueue::Conn(c) => {
                let wr = self.validated("rpma_recv", c.limits(), &c.peer().inner)?;
                c.qp().post_recv_one(wr).map_err(|e| e.in_op("rpma_recv"))
            }
            RecvQueue::Srq(s) => {
                let wr = self.validated("rpma_srq_recv", s.limits(), s.peer_inner())?;
                s.backend().post_recv(std::slice::from_ref(&wr)).map_err(|e| e.in_op("rpma_srq_recv"))
            }
            RecvQueue::Req(r) => {
                let wr = self.validated("rpma_conn_req_recv", r.limits(), &r.peer().inner)?;
                r.qp().post_recv_one(wr).map_err(|e| e.in_op("rpma_conn_req_recv"))
            }
        }
    }
}

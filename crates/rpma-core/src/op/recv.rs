//! The receive builders: receive buffers posted to a connection, a connection request or a
//! shared receive queue (`conn.recv(dst).context(1).post()`: the queue and an
//! [`Op`]`<`[`Recv`]`>`).

use std::fmt;

use crate::conn::{Conn, ConnReq, Srq};
use crate::error::Result;
use crate::transport::{QpBackend, RecvWr, SrqBackend, Transport};

use super::kind::Recv;
use super::slice::LocalSlice;
use super::value::{self as op, Op};

impl<T: Transport> Conn<T> {
    /// `rpma_recv`: posts a receive buffer ([`op::recv`](crate::op::recv) has the rules: an
    /// unordered set, what a buffer of 0 bytes takes).
    ///
    /// A connection using an SRQ has no receive queue of its own: posting fails with
    /// [`Provider`](crate::ErrorKind::Provider); use [`Srq::recv`].
    #[doc(alias = "rpma_recv")]
    pub fn recv<'c>(&'c self, dst: LocalSlice<'c, T>) -> PostRecv<'c, T> {
        PostRecv::new(RecvQueue::Conn(self), op::recv(dst))
    }

    /// A scattering receive (librdmacm's `rdma_post_recvv`): the message fills the pieces of
    /// `dst` in order. At most the connection's [`max_sge`](crate::ConnCfg::with_max_sge)
    /// pieces, none empty.
    pub fn recv_sg<'c>(&'c self, dst: &'c [LocalSlice<'c, T>]) -> PostRecv<'c, T> {
        PostRecv::new(RecvQueue::Conn(self), op::recv_sg(dst))
    }

    /// Posts a zero-length receive buffer (`rpma_recv` with no region).
    #[doc(alias = "rpma_recv")]
    pub fn recv_empty(&self) -> PostRecv<'_, T> {
        PostRecv::new(RecvQueue::Conn(self), op::recv_empty())
    }
}

impl<T: Transport> Srq<T> {
    /// `rpma_srq_recv`: posts a receive buffer shared by every connection using the SRQ (an
    /// unordered set, as [`Conn::recv`]).
    #[doc(alias = "rpma_srq_recv")]
    pub fn recv<'c>(&'c self, dst: LocalSlice<'c, T>) -> PostRecv<'c, T> {
        PostRecv::new(RecvQueue::Srq(self), op::recv(dst))
    }

    /// Posts a zero-length receive buffer (`rpma_srq_recv` with no region).
    #[doc(alias = "rpma_srq_recv")]
    pub fn recv_empty(&self) -> PostRecv<'_, T> {
        PostRecv::new(RecvQueue::Srq(self), op::recv_empty())
    }
}

impl<T: Transport> ConnReq<T> {
    /// `rpma_conn_req_recv`: posts a receive buffer before the connection is established, so a
    /// buffer is ready for the peer's first message. (librpma has no zero-length form here.)
    #[doc(alias = "rpma_conn_req_recv")]
    pub fn recv<'c>(&'c self, dst: LocalSlice<'c, T>) -> PostRecv<'c, T> {
        PostRecv::new(RecvQueue::Req(self), op::recv(dst))
    }

    /// A scattering receive posted before the connection is established ([`Conn::recv_sg`]).
    pub fn recv_sg<'c>(&'c self, dst: &'c [LocalSlice<'c, T>]) -> PostRecv<'c, T> {
        PostRecv::new(RecvQueue::Req(self), op::recv_sg(dst))
    }

    /// The receive `op` ready to post before the connection is established.
    pub(super) const fn recv_op<'c>(&'c self, op: Op<Recv<'c, T>>) -> PostRecv<'c, T> {
        PostRecv::new(RecvQueue::Req(self), op)
    }
}

impl<T: Transport> Conn<T> {
    /// The receive `op` ready to post on this connection.
    pub(super) const fn recv_op<'c>(&'c self, op: Op<Recv<'c, T>>) -> PostRecv<'c, T> {
        PostRecv::new(RecvQueue::Conn(self), op)
    }
}

impl<T: Transport> Srq<T> {
    /// The receive `op` ready to post on this shared receive queue.
    pub(super) const fn recv_op<'c>(&'c self, op: Op<Recv<'c, T>>) -> PostRecv<'c, T> {
        PostRecv::new(RecvQueue::Srq(self), op)
    }
}

/// Which receive queue a [`PostRecv`] goes to.
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
    /// The Rust item posting to this queue, as its errors name it.
    pub(super) const fn op(&self) -> &'static str {
        match self {
            Self::Conn(_) => "Conn::recv",
            Self::Srq(_) => "Srq::recv",
            Self::Req(_) => "ConnReq::recv",
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

/// A receive buffer ready to post ([`Conn::recv`], [`Srq::recv`], [`ConnReq::recv`]): an
/// [`Op`]`<`[`Recv`]`>` and the queue it goes to, posted alone with [`post`](PostRecv::post) or
/// in a [`RecvBatch`](super::RecvBatch).
#[must_use = "a receive does nothing until it is posted with .post()"]
pub struct PostRecv<'c, T: Transport> {
    pub(super) queue: RecvQueue<'c, T>,
    op: Op<Recv<'c, T>>,
}

impl<T: Transport> fmt::Debug for PostRecv<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostRecv").field("op", &self.op).finish_non_exhaustive()
    }
}

impl<'c, T: Transport> PostRecv<'c, T> {
    const fn new(queue: RecvQueue<'c, T>, op: Op<Recv<'c, T>>) -> Self {
        Self { queue, op }
    }

    /// The operation context, returned as [`Wc::wr_id`](crate::Wc::wr_id) (default 0).
    pub const fn context(mut self, context: u64) -> Self {
        self.op.context = context;
        self
    }

    /// The operation, apart from the queue.
    pub fn into_op(self) -> Op<Recv<'c, T>> {
        self.op
    }

    /// Validates the buffer into the work request a backend posts.
    #[inline]
    pub(super) fn into_wr(self) -> Result<(RecvWr<'c, T>, &'static str)> {
        let name = self.queue.op();
        let Op { kind, context, .. } = &self.op;
        let wr = match &self.queue {
            RecvQueue::Conn(c) => kind.work_request(name, c.limits(), &c.peer().inner, *context),
            RecvQueue::Srq(s) => kind.work_request(name, s.limits(), s.peer_inner(), *context),
            RecvQueue::Req(r) => kind.work_request(name, r.limits(), &r.peer().inner, *context),
        }?;
        Ok((wr, name))
    }

    /// Validates the buffer and posts it.
    ///
    /// # Errors
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) if the range is inverted or outside its
    /// region, the device may not write the region, the length exceeds the device's maximum message
    /// size, or (scatter-gather) there are no pieces, an empty one or more than the connection's
    /// [`max_sge`](crate::ConnCfg::with_max_sge); [`Provider`](crate::ErrorKind::Provider) if
    /// posting fails (the queue is full; a connection using an SRQ has no receive queue of its
    /// own).
    #[inline(always)]
    pub fn post(self) -> Result<()> {
        // One dispatch on the queue (each arm validates and posts), not one to validate and
        // another to post.
        match self.queue {
            RecvQueue::Conn(c) => c.post(self.op),
            RecvQueue::Srq(s) => s.post(self.op),
            RecvQueue::Req(r) => {
                const OP: &str = "ConnReq::recv";
                let wr = self.op.kind.work_request(OP, r.limits(), &r.peer().inner, self.op.context)?;
                r.qp().post_recv_one(wr).map_err(|e| e.in_op(OP))
            }
        }
    }
}

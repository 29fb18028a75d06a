//! The receive (`rpma_recv`, `rpma_srq_recv`, `rpma_conn_req_recv`): [`Recv`], its
//! constructors ([`recv`], [`recv_sg`], [`recv_empty`] and the same on a connection, a shared
//! receive queue or a connection request: [`Conn::recv`], [`Srq::recv`], [`ConnReq::recv`]),
//! its validation, and the receive queue it goes to ([`RecvQueue`], [`PostRecv`]).

use std::fmt;
use std::sync::Arc;

use crate::conn::{Conn, ConnReq, OpLimits, Srq};
use crate::error::Result;
use crate::peer::PeerInner;
use crate::transport::{ByCore, QpBackend, RecvWr, SrqBackend, Transport};
use crate::types::CompletionFlags;
use crate::validate;

use super::local::{debug_by_field, Rules, Src};
use super::slice::LocalSlice;
use super::value::{sealed::Sealed, NoFlags, Op};

/// A receive buffer (`rpma_recv`, `rpma_srq_recv`, `rpma_conn_req_recv`):
/// [`op::recv`](recv), [`op::recv_sg`](recv_sg), [`op::recv_empty`](recv_empty),
/// [`Conn::recv`], [`Srq::recv`], [`ConnReq::recv`].
pub struct Recv<'a, T: Transport> {
    dst: Src<'a, T>,
}

debug_by_field!(Recv { dst });

impl<T: Transport> Sealed for Recv<'_, T> {
    type Flags = NoFlags;
    fn completion_flags(flags: NoFlags) -> CompletionFlags {
        match flags {}
    }
}

impl<'a, T: Transport> Recv<'a, T> {
    /// Validates the buffer against a receive queue's `limits` and `peer` into the work request
    /// a backend posts (`op` names the call: `Conn::recv`, `Srq::recv`, `ConnReq::recv`).
    #[inline(always)]
    pub(super) fn work_request(
        &self,
        op: &'static str,
        limits: &OpLimits,
        peer: &Arc<PeerInner<T>>,
        wr_id: u64,
    ) -> Result<RecvWr<'a, T>> {
        let (local, len) = self.dst.validate(op, peer, Rules { device_writes: true, read: false, limits })?;
        validate::msg_len(op, limits.max_msg, len)?;
        Ok(RecvWr { local, wr_id, _by_core: ByCore::VALIDATED })
    }

    /// Validates the receive `op` against `conn` and posts it to the connection's receive
    /// queue ([`Conn::post`] of a receive).
    #[inline(always)]
    pub(super) fn post_on(op: Op<Self>, conn: &Conn<T>) -> Result<()> {
        const OP: &str = "Conn::recv";
        let wr = op.kind.work_request(OP, conn.limits(), &conn.peer().inner, op.context)?;
        conn.qp().post_recv_one(wr).map_err(|e| e.in_op(OP))
    }
}

/// `rpma_recv`: a receive buffer. Posted buffers form an **unordered set**: which buffer a
/// message lands in, and the order of receive completions, are not those of posting. Its
/// completion is the message's: [`Wc::byte_len`](crate::Wc::byte_len) bytes landed in `dst`.
///
/// A buffer of 0 bytes (an empty slice, or [`recv_empty`]) takes only a message of 0 bytes or
/// the immediate data of a write: a longer message fails on both sides (this receive completes
/// with a local error, [`LocLenErr`](crate::WcStatus::LocLenErr) on the mock,
/// [`LocQpOpErr`](crate::WcStatus::LocQpOpErr) on rxe; the send with an error), the queue pair
/// enters the error state and, as on hardware, no connection event comes of it: the
/// completions say what happened.
#[doc(alias = "rpma_recv")]
#[doc(alias = "rpma_srq_recv")]
pub const fn recv<T: Transport>(dst: LocalSlice<'_, T>) -> Op<Recv<'_, T>> {
    Op::new(Recv { dst: Src::One(dst) })
}

/// A scattering receive (librdmacm's `rdma_post_recvv`): the message fills the pieces of `dst`
/// in order. At most the connection's [`max_sge`](crate::ConnCfg::with_max_sge) pieces, none
/// empty.
pub const fn recv_sg<'a, T: Transport>(dst: &'a [LocalSlice<'a, T>]) -> Op<Recv<'a, T>> {
    Op::new(Recv { dst: Src::Sg(dst) })
}

/// A zero-length receive buffer (`rpma_recv` with no region; see [`recv`]).
#[doc(alias = "rpma_recv")]
pub const fn recv_empty<'a, T: Transport>() -> Op<Recv<'a, T>> {
    Op::new(Recv { dst: Src::None })
}

/// A receive buffer ready to post ([`Conn::recv`], [`Srq::recv`], [`ConnReq::recv`]): the
/// receive and the queue it goes to, posted alone with `.post()` or in a
/// [`RecvBatch`](super::RecvBatch).
pub type PostRecv<'c, T> = Op<Recv<'c, T>, RecvQueue<'c, T>>;

/// The receive queue a [`PostRecv`] goes to: a connection's, a shared receive queue, or a
/// connection request's.
#[non_exhaustive]
pub enum RecvQueue<'c, T: Transport> {
    /// The receive queue of a connection ([`Conn::recv`]).
    Conn(&'c Conn<T>),
    /// A shared receive queue ([`Srq::recv`]).
    Srq(&'c Srq<T>),
    /// The receive queue of a connection being established ([`ConnReq::recv`]).
    Req(&'c ConnReq<T>),
}

impl<T: Transport> Clone for RecvQueue<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Transport> Copy for RecvQueue<'_, T> {}

impl<T: Transport> fmt::Debug for RecvQueue<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.op())
    }
}

impl<'c, T: Transport> RecvQueue<'c, T> {
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

    /// Validates the receive `op` against this queue into the work request a backend posts.
    #[inline]
    pub(super) fn work_request<On>(&self, op: &Op<Recv<'c, T>, On>) -> Result<RecvWr<'c, T>> {
        let name = self.op();
        let Op { kind, context, .. } = op;
        match self {
            Self::Conn(c) => kind.work_request(name, c.limits(), &c.peer().inner, *context),
            Self::Srq(s) => kind.work_request(name, s.limits(), s.peer_inner(), *context),
            Self::Req(r) => kind.work_request(name, r.limits(), &r.peer().inner, *context),
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

impl<T: Transport> PostRecv<'_, T> {
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
        match self.on {
            RecvQueue::Conn(c) => Recv::post_on(self.into_op(), c),
            RecvQueue::Srq(s) => s.post(self.into_op()),
            RecvQueue::Req(r) => {
                const OP: &str = "ConnReq::recv";
                let wr = self.kind.work_request(OP, r.limits(), &r.peer().inner, self.context)?;
                r.qp().post_recv_one(wr).map_err(|e| e.in_op(OP))
            }
        }
    }
}

impl<T: Transport> Conn<T> {
    /// `rpma_recv`: posts a receive buffer ([`op::recv`](recv) has the rules: an unordered
    /// set, what a buffer of 0 bytes takes).
    ///
    /// A connection using an SRQ has no receive queue of its own: posting fails with
    /// [`Provider`](crate::ErrorKind::Provider); use [`Srq::recv`].
    #[doc(alias = "rpma_recv")]
    pub fn recv<'c>(&'c self, dst: LocalSlice<'c, T>) -> PostRecv<'c, T> {
        recv(dst).on(RecvQueue::Conn(self))
    }

    /// [`op::recv_sg`](recv_sg) on this connection.
    pub fn recv_sg<'c>(&'c self, dst: &'c [LocalSlice<'c, T>]) -> PostRecv<'c, T> {
        recv_sg(dst).on(RecvQueue::Conn(self))
    }

    /// [`op::recv_empty`](recv_empty) on this connection.
    #[doc(alias = "rpma_recv")]
    pub fn recv_empty(&self) -> PostRecv<'_, T> {
        recv_empty().on(RecvQueue::Conn(self))
    }
}

impl<T: Transport> Srq<T> {
    /// `rpma_srq_recv`: posts a receive buffer shared by every connection using the SRQ (an
    /// unordered set, as [`Conn::recv`]).
    #[doc(alias = "rpma_srq_recv")]
    pub fn recv<'c>(&'c self, dst: LocalSlice<'c, T>) -> PostRecv<'c, T> {
        recv(dst).on(RecvQueue::Srq(self))
    }

    /// Posts a zero-length receive buffer (`rpma_srq_recv` with no region).
    #[doc(alias = "rpma_srq_recv")]
    pub fn recv_empty(&self) -> PostRecv<'_, T> {
        recv_empty().on(RecvQueue::Srq(self))
    }

    /// Validates the receive `op` and posts it to the shared receive queue
    /// (`rpma_srq_recv`; [`Srq::recv`] is this).
    ///
    /// # Errors
    /// As [`Conn::post`] for a receive.
    #[doc(alias = "rpma_srq_recv")]
    #[inline(always)]
    pub fn post(&self, op: Op<Recv<'_, T>>) -> Result<()> {
        const OP: &str = "Srq::recv";
        let wr = op.kind.work_request(OP, self.limits(), self.peer_inner(), op.context)?;
        self.backend().post_recv(std::slice::from_ref(&wr)).map_err(|e| e.in_op(OP))
    }
}

impl<T: Transport> ConnReq<T> {
    /// `rpma_conn_req_recv`: posts a receive buffer before the connection is established, so a
    /// buffer is ready for the peer's first message. (librpma has no zero-length form here.)
    #[doc(alias = "rpma_conn_req_recv")]
    pub fn recv<'c>(&'c self, dst: LocalSlice<'c, T>) -> PostRecv<'c, T> {
        recv(dst).on(RecvQueue::Req(self))
    }

    /// A scattering receive posted before the connection is established ([`Conn::recv_sg`]).
    pub fn recv_sg<'c>(&'c self, dst: &'c [LocalSlice<'c, T>]) -> PostRecv<'c, T> {
        recv_sg(dst).on(RecvQueue::Req(self))
    }
}

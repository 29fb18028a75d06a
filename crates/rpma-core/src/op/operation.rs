//! Posting an operation value: [`Operation`], what every kind of [`Op`] does when it is
//! posted, and the calls that post one ([`Conn::post`], [`Srq::post`]).

use crate::conn::{Conn, Srq};
use crate::error::Result;
use crate::transport::{QpBackend, SrqBackend, Transport};

use super::any::AnyKind;
use super::kind::{sealed::Sealed, AtomicWrite, Flush, Read, Recv, Send, SendKind, Write};
use super::value::Op;

/// An operation [`Conn::post`] posts: every kind (sealed).
pub trait Operation<'a, T: Transport>: Sealed + Sized {
    /// The operation's name as its errors give it ([`Error::op`](crate::Error::op)): the Rust
    /// item that posts it (e.g. `"Conn::send(..).imm"`, a send with `.imm(..)`).
    fn name(&self) -> &'static str;
    /// Whether the operation takes a send-queue slot (all but a receive).
    fn uses_send_queue(&self) -> bool;
    #[doc(hidden)]
    fn post_on(op: Op<Self>, conn: &Conn<T>) -> Result<()>;
    /// The operation as an `Op` of [`AnyKind`], to keep with operations of other kinds.
    fn into_any(op: Op<Self>) -> Op<AnyKind<'a, T>>;
}

macro_rules! send_queue_operation {
    ($($ty:ty),*) => {$(
        impl<'a, T: Transport> Operation<'a, T> for $ty {
            fn name(&self) -> &'static str {
                SendKind::<T>::op_name(self)
            }
            fn uses_send_queue(&self) -> bool {
                true
            }
            #[inline(always)]
            fn post_on(op: Op<Self>, conn: &Conn<T>) -> Result<()> {
                let (wr, name) = op.send_wr(conn)?;
                conn.qp().post_send_one(wr).map_err(|e| e.in_op(name))
            }
            fn into_any(op: Op<Self>) -> Op<AnyKind<'a, T>> {
                op.into()
            }
        }
    )*};
}
send_queue_operation!(Read<'a, T>, Write<'a, T>, AtomicWrite<'a>, Flush<'a>, Send<'a, T>);

impl<'a, T: Transport> Operation<'a, T> for Recv<'a, T> {
    fn name(&self) -> &'static str {
        "Conn::recv"
    }
    fn uses_send_queue(&self) -> bool {
        false
    }
    #[inline(always)]
    fn post_on(op: Op<Self>, conn: &Conn<T>) -> Result<()> {
        const OP: &str = "Conn::recv";
        let wr = op.kind.work_request(OP, conn.limits(), &conn.peer().inner, op.context)?;
        conn.qp().post_recv_one(wr).map_err(|e| e.in_op(OP))
    }
    fn into_any(op: Op<Self>) -> Op<AnyKind<'a, T>> {
        op.into()
    }
}

impl<T: Transport> Conn<T> {
    /// Validates every argument of `op` and posts it: a send-queue operation to the send
    /// queue, a receive to the receive queue (`conn.post(op::write(remote.at(0),
    /// src.slice(0..8)).context(1))`). The builders (`conn.write(..).post()`, ...) are this.
    ///
    /// # Errors
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) if the flags are empty, a range is inverted
    /// or outside its region (the remote one as its descriptor claims it: the error gives the
    /// offset, the length and the region's size), the local region lacks the usage the operation
    /// needs or belongs to another peer, the remote region was not registered for the access, or
    /// the length exceeds the device's maximum message size; for an atomic write, an offset that is
    /// not a multiple of
    /// [`MrRemote::ATOMIC_WRITE_ALIGNMENT`](crate::MrRemote::ATOMIC_WRITE_ALIGNMENT); for
    /// scatter-gather, no pieces, an empty piece or more pieces than the connection's
    /// [`max_sge`](crate::ConnCfg::with_max_sge); for inline data, none or more than the
    /// connection's [`max_inline`](crate::ConnCfg::with_max_inline);
    /// [`Unsupported`](crate::ErrorKind::Unsupported) for a persistent flush the remote peer did
    /// not declare support for ([`Conn::apply_remote_peer_cfg`]);
    /// [`Provider`](crate::ErrorKind::Provider) if posting fails (the queue is full, the connection
    /// was never established, or, for a receive, the connection uses an SRQ and has no receive
    /// queue of its own).
    ///
    /// A connection that was established and then closed or lost takes the post, as a queue
    /// pair in the error state does on hardware: the operation completes with
    /// [`WcStatus::WrFlushErr`](crate::WcStatus::WrFlushErr) (also when it was posted
    /// unsignaled), so its completion, not this call, reports it.
    #[inline(always)]
    pub fn post<'a, K: Operation<'a, T>>(&self, op: Op<K>) -> Result<()> {
        K::post_on(op, self)
    }
}

impl<T: Transport> Srq<T> {
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

impl<'a, T: Transport> Operation<'a, T> for AnyKind<'a, T> {
    fn name(&self) -> &'static str {
        match self {
            Self::Read(k) => Operation::<T>::name(k),
            Self::Write(k) => Operation::<T>::name(k),
            Self::AtomicWrite(k) => Operation::<T>::name(k),
            Self::Flush(k) => Operation::<T>::name(k),
            Self::Send(k) => Operation::<T>::name(k),
            Self::Recv(k) => Operation::<T>::name(k),
        }
    }

    fn uses_send_queue(&self) -> bool {
        !matches!(self, Self::Recv(_))
    }

    #[inline]
    fn post_on(op: Op<Self>, conn: &Conn<T>) -> Result<()> {
        let Op { kind, flags, context } = op;
        match kind {
            Self::Read(kind) => conn.post(Op { kind, flags, context }),
            Self::Write(kind) => conn.post(Op { kind, flags, context }),
            Self::AtomicWrite(kind) => conn.post(Op { kind, flags, context }),
            Self::Flush(kind) => conn.post(Op { kind, flags, context }),
            Self::Send(kind) => conn.post(Op { kind, flags, context }),
            Self::Recv(kind) => conn.post(Op { kind, flags, context }),
        }
    }

    fn into_any(op: Op<Self>) -> Op<Self> {
        op
    }
}

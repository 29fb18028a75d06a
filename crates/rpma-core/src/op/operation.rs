//! What every kind does when it is posted: [`Operation`], the one trait of the operations
//! (sealed), and the calls that post an operation value ([`Conn::post`], `.post()` on a
//! [`Post`]).

use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::transport::{QpBackend, SendWr, Transport};
use crate::types::CompletionFlags;
use crate::validate;

use super::any::AnyKind;
use super::atomic_write::AtomicWrite;
use super::flush::Flush;
use super::read::Read;
use super::recv::Recv;
use super::send::Message;
use super::value::{sealed::Sealed, NoFlags, Op, Post};
use super::write::Write;

/// An operation of `rpma::op` (sealed): what [`Conn::post`] posts, and, bound by
/// `Operation<'a, T, Flags = CompletionFlags>`, what goes on a connection's send queue and
/// takes completion flags (every kind but a receive, whose flags are
/// [`NoFlags`](super::NoFlags); a receive in an [`AnyKind`] is refused there):
/// [`Batch::push`](super::Batch::push), rpma-tokio's `post_unsignaled`.
///
/// ```ignore
/// fn post_all<'c, T: Transport, K: Operation<'c, T, Flags = CompletionFlags>>(
///     b: &mut Batch<'c, T>,
///     ops: impl IntoIterator<Item = Post<'c, T, K>>,
/// ) -> rpma::Result<()> { ... }
/// ```
pub trait Operation<'a, T: Transport>: Sealed + Sized {
    /// The operation's name as its errors give it ([`Error::op`](crate::Error::op)): the Rust
    /// item that posts it (e.g. `"Conn::send(..).imm"`, a send with `.imm(..)`).
    fn name(&self) -> &'static str;
    /// Whether the operation takes a send-queue slot (all but a receive).
    fn uses_send_queue(&self) -> bool;
    /// The operation as an `Op` of [`AnyKind`], to keep with operations of other kinds.
    fn into_any(op: Op<Self>) -> Op<AnyKind<'a, T>>;
    #[doc(hidden)]
    fn post_on(op: Op<Self>, conn: &Conn<T>) -> Result<()>;
    #[doc(hidden)]
    fn send_wr(self, conn: &Conn<T>, flags: Self::Flags, wr_id: u64) -> Result<(SendWr<'a, T>, &'static str)>;
}

/// Validates the send-queue operation `op` into the work request a backend posts on `conn`,
/// with the operation's name.
#[inline(always)]
pub(super) fn send_wr<'a, T, K, On>(op: Op<K, On>, conn: &Conn<T>) -> Result<(SendWr<'a, T>, &'static str)>
where
    T: Transport,
    K: Operation<'a, T, Flags = CompletionFlags>,
{
    op.kind.send_wr(conn, op.flags, op.context)
}

/// The kinds that take completion flags: those of the send queue, and any kind.
macro_rules! takes_completion_flags {
    ($([$($g:tt)*] $ty:ty),*) => {$(
        impl<$($g)*> Sealed for $ty {
            type Flags = CompletionFlags;
            #[inline(always)]
            fn completion_flags(flags: CompletionFlags) -> CompletionFlags {
                flags
            }
        }
    )*};
}
takes_completion_flags!(
    [T: Transport] Read<'_, T>,
    [T: Transport] Write<'_, T>,
    [] AtomicWrite<'_>,
    [] Flush<'_>,
    [T: Transport] Message<'_, T>,
    [T: Transport] AnyKind<'_, T>
);

macro_rules! send_queue_operation {
    ($($ty:ty),*) => {$(
        impl<'a, T: Transport> Operation<'a, T> for $ty {
            fn name(&self) -> &'static str {
                <$ty>::name(self)
            }
            fn uses_send_queue(&self) -> bool {
                true
            }
            fn into_any(op: Op<Self>) -> Op<AnyKind<'a, T>> {
                op.into()
            }
            #[inline(always)]
            fn post_on(op: Op<Self>, conn: &Conn<T>) -> Result<()> {
                let (wr, name) = send_wr(op, conn)?;
                conn.qp().post_send_one(wr).map_err(|e| e.in_op(name))
            }
            #[inline(always)]
            fn send_wr(self, conn: &Conn<T>, flags: CompletionFlags, wr_id: u64) -> Result<(SendWr<'a, T>, &'static str)> {
                let name = <$ty>::name(&self);
                let signaled = validate::flags(name, flags)?;
                Ok((self.work_request(conn, signaled, wr_id)?, name))
            }
        }
    )*};
}
send_queue_operation!(Read<'a, T>, Write<'a, T>, AtomicWrite<'a>, Flush<'a>, Message<'a, T>);

impl<'a, T: Transport> Operation<'a, T> for Recv<'a, T> {
    fn name(&self) -> &'static str {
        "Conn::recv"
    }
    fn uses_send_queue(&self) -> bool {
        false
    }
    fn into_any(op: Op<Self>) -> Op<AnyKind<'a, T>> {
        op.into()
    }
    #[inline(always)]
    fn post_on(op: Op<Self>, conn: &Conn<T>) -> Result<()> {
        Recv::post_on(op, conn)
    }
    fn send_wr(self, _: &Conn<T>, flags: NoFlags, _: u64) -> Result<(SendWr<'a, T>, &'static str)> {
        match flags {}
    }
}

impl<'a, T: Transport> Operation<'a, T> for AnyKind<'a, T> {
    fn name(&self) -> &'static str {
        match self {
            Self::Read(k) => Operation::<T>::name(k),
            Self::Write(k) => Operation::<T>::name(k),
            Self::AtomicWrite(k) => Operation::<T>::name(k),
            Self::Flush(k) => Operation::<T>::name(k),
            Self::Message(k) => Operation::<T>::name(k),
            Self::Recv(k) => Operation::<T>::name(k),
        }
    }

    fn uses_send_queue(&self) -> bool {
        !matches!(self, Self::Recv(_))
    }

    fn into_any(op: Op<Self>) -> Op<Self> {
        op
    }

    #[inline]
    fn post_on(op: Op<Self>, conn: &Conn<T>) -> Result<()> {
        let Op { kind, flags, context, on: () } = op;
        match kind {
            Self::Read(kind) => conn.post(Op { kind, flags, context, on: () }),
            Self::Write(kind) => conn.post(Op { kind, flags, context, on: () }),
            Self::AtomicWrite(kind) => conn.post(Op { kind, flags, context, on: () }),
            Self::Flush(kind) => conn.post(Op { kind, flags, context, on: () }),
            Self::Message(kind) => conn.post(Op { kind, flags, context, on: () }),
            Self::Recv(kind) => conn.post(Op { kind, flags, context, on: () }),
        }
    }

    fn send_wr(self, conn: &Conn<T>, flags: CompletionFlags, wr_id: u64) -> Result<(SendWr<'a, T>, &'static str)> {
        match self {
            Self::Read(k) => k.send_wr(conn, flags, wr_id),
            Self::Write(k) => k.send_wr(conn, flags, wr_id),
            Self::AtomicWrite(k) => k.send_wr(conn, flags, wr_id),
            Self::Flush(k) => k.send_wr(conn, flags, wr_id),
            Self::Message(k) => k.send_wr(conn, flags, wr_id),
            Self::Recv(_) => Err(Error::invalid_input(
                "Conn::recv",
                "a receive goes to a receive queue, not the send queue: post it (Conn::post) or push it into a \
                 RecvBatch",
            )),
        }
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

impl<'c, T: Transport, K: Operation<'c, T>> Post<'c, T, K> {
    /// Validates every argument and posts the operation on its connection ([`Conn::post`]).
    ///
    /// # Errors
    /// As [`Conn::post`].
    #[inline(always)]
    pub fn post(self) -> Result<()> {
        let conn = self.on;
        conn.post(self.into_op())
    }
}

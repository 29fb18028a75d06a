//! The operation value: [`Op`], what to transfer and how to complete it, made without a
//! connection (`op::write(remote.at(0), src.slice(0..8)).context(1)`) and posted by
//! [`Conn::post`], [`Srq::post`](crate::Srq::post), a [`Batch`](super::Batch), or rpma-tokio's
//! `AsyncConn::post`.

use std::fmt;

use crate::conn::Conn;
use crate::error::Result;
use crate::transport::{SendWr, Transport};
use crate::types::{CompletionFlags, FlushType};
use crate::validate;

use super::kind::{sealed::Sealed, AtomicWrite, Flush, Read, Recv, Send, SendKind, Write};
use super::local::Src;
use super::slice::{LocalSlice, RemoteAt, RemoteSlice};

/// One operation: its kind `K` ([`Read`], [`Write`], [`AtomicWrite`], [`Flush`], [`Send`],
/// [`Recv`], or any of them as [`AnyKind`](super::AnyKind)), the memory it names, its
/// completion flags and its context.
///
/// Made by the functions of [`rpma::op`](super) (`op::write`, `op::send_inline`, ...) without
/// any check; posting validates every argument against the connection it is posted on (the
/// rules and errors of [`Conn::post`]). It borrows its regions for as long as it lives: a region
/// cannot be changed through `&mut` or deregistered while an operation naming it exists.
///
/// Defaults: [`CompletionFlags::ALWAYS`] (a completion always appears) and context 0. Only a
/// write or a send takes an immediate value (`.imm(..)`), only send-queue operations take
/// completion flags: on a read, `op::read(dst, src).imm(1)` does not compile.
#[must_use = "an operation does nothing until it is posted (Conn::post)"]
pub struct Op<K> {
    pub(super) kind: K,
    pub(super) flags: CompletionFlags,
    pub(super) context: u64,
}

impl<K: fmt::Debug> fmt::Debug for Op<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Op")
            .field("kind", &self.kind)
            .field("flags", &self.flags)
            .field("context", &self.context)
            .finish()
    }
}

impl<K> Op<K> {
    pub(super) const fn new(kind: K) -> Self {
        Self { kind, flags: CompletionFlags::ALWAYS, context: 0 }
    }

    /// The operation context (librpma's `op_context`), returned as
    /// [`Wc::wr_id`](crate::Wc::wr_id).
    pub const fn context(mut self, context: u64) -> Self {
        self.context = context;
        self
    }

    /// What the operation transfers.
    pub const fn kind(&self) -> &K {
        &self.kind
    }
}

/// The operations of a connection's send queue (all but [`Recv`]): they take completion flags.
pub trait SendQueue: Sealed {}
impl<T: Transport> SendQueue for Read<'_, T> {}
impl<T: Transport> SendQueue for Write<'_, T> {}
impl SendQueue for AtomicWrite<'_> {}
impl SendQueue for Flush<'_> {}
impl<T: Transport> SendQueue for Send<'_, T> {}

impl<K: SendQueue> Op<K> {
    /// When a completion appears: [`CompletionFlags::ALWAYS`] (the default) or
    /// [`CompletionFlags::ON_ERROR`] (unsignaled: only a failure completes).
    pub const fn flags(mut self, flags: CompletionFlags) -> Self {
        self.flags = flags;
        self
    }
}

impl<K> Op<K> {
    /// Validates a send-queue operation into the work request a backend posts on `conn`, with
    /// the operation's name ([`SendKind::op_name`]).
    #[inline(always)]
    pub(super) fn send_wr<'a, T: Transport>(self, conn: &Conn<T>) -> Result<(SendWr<'a, T>, &'static str)>
    where
        K: SendKind<'a, T>,
    {
        let name = self.kind.op_name();
        let signaled = validate::flags(name, self.flags)?;
        let wr = self.kind.work_request(conn, signaled, self.context)?;
        Ok((wr, name))
    }
}

impl<T: Transport> Op<Write<'_, T>> {
    /// Carries `imm` (host order; `rpma_write_with_imm`): consumes a receive buffer at the
    /// peer, whose completion is [`RecvRdmaWithImm`](crate::WcOpcode::RecvRdmaWithImm) with
    /// `imm_data == Some(imm)`.
    pub const fn imm(mut self, imm: u32) -> Self {
        self.kind.imm = Some(imm);
        self
    }
}

impl<T: Transport> Op<Send<'_, T>> {
    /// Carries `imm` (host order; `rpma_send_with_imm`).
    pub const fn imm(mut self, imm: u32) -> Self {
        self.kind.imm = Some(imm);
        self
    }
}

/// `rpma_read`: RDMA Read of `dst.len()` bytes at `src` of the remote region into `dst`.
#[doc(alias = "rpma_read")]
pub const fn read<'a, T: Transport>(dst: LocalSlice<'a, T>, src: RemoteAt<'a>) -> Op<Read<'a, T>> {
    Op::new(Read { dst: Src::One(dst), src: Some(src) })
}

/// A scattering read: the remote bytes at `src`, as many as the pieces hold together, land in
/// `dst` piece after piece. At most the connection's
/// [`max_sge`](crate::ConnCfg::with_max_sge) pieces (and the device's `max_sge_rd`), none
/// empty.
pub const fn read_sg<'a, T: Transport>(dst: &'a [LocalSlice<'a, T>], src: RemoteAt<'a>) -> Op<Read<'a, T>> {
    Op::new(Read { dst: Src::Sg(dst), src: Some(src) })
}

/// The zero-byte read (`rpma_read` with no regions): completes after the earlier writes of
/// the connection are placed, moving no data.
#[doc(alias = "rpma_read")]
pub const fn read_empty<'a, T: Transport>() -> Op<Read<'a, T>> {
    Op::new(Read { dst: Src::None, src: None })
}

/// `rpma_write`: RDMA Write of `src` to the remote region at `dst`. With
/// [`.imm(..)`](Op::imm), `rpma_write_with_imm`.
#[doc(alias = "rpma_write")]
#[doc(alias = "rpma_write_with_imm")]
pub const fn write<'a, T: Transport>(dst: RemoteAt<'a>, src: LocalSlice<'a, T>) -> Op<Write<'a, T>> {
    Op::new(Write { dst: Some(dst), src: Src::One(src), imm: None })
}

/// A gathering write: the pieces of `src`, in order, written as one contiguous range at `dst`.
/// At most the connection's [`max_sge`](crate::ConnCfg::with_max_sge) pieces, none empty.
pub const fn write_sg<'a, T: Transport>(dst: RemoteAt<'a>, src: &'a [LocalSlice<'a, T>]) -> Op<Write<'a, T>> {
    Op::new(Write { dst: Some(dst), src: Src::Sg(src), imm: None })
}

/// An inline write: `src` is plain memory, copied into the work request when it is posted (no
/// registration; `src` may be reused as soon as the post returns). At most the connection's
/// [`max_inline`](crate::ConnCfg::with_max_inline) bytes, at least one.
pub const fn write_inline<'a, T: Transport>(dst: RemoteAt<'a>, src: &'a [u8]) -> Op<Write<'a, T>> {
    Op::new(Write { dst: Some(dst), src: Src::Inline(src), imm: None })
}

/// The zero-byte write (`rpma_write` with no regions), e.g. to carry an immediate value alone
/// with [`.imm(..)`](Op::imm).
#[doc(alias = "rpma_write")]
pub const fn write_empty<'a, T: Transport>() -> Op<Write<'a, T>> {
    Op::new(Write { dst: None, src: Src::None, imm: None })
}

/// `rpma_atomic_write`: writes the 8 bytes `value` atomically at `dst` (an offset multiple of
/// [`MrRemote::ATOMIC_WRITE_ALIGNMENT`](crate::MrRemote::ATOMIC_WRITE_ALIGNMENT)): a native atomic write, or an
/// inline 8-byte write fenced behind earlier reads and flushes ("write data; flush;
/// atomic-write the commit pointer; flush").
#[doc(alias = "rpma_atomic_write")]
pub const fn atomic_write(dst: RemoteAt<'_>, value: [u8; 8]) -> Op<AtomicWrite<'_>> {
    Op::new(AtomicWrite { dst, value })
}

/// `rpma_flush`: makes the data previously written to `dst` visible
/// ([`FlushType::Visibility`]) or persistent ([`FlushType::Persistent`]) at the target.
#[doc(alias = "rpma_flush")]
pub const fn flush(dst: RemoteSlice<'_>, flush_type: FlushType) -> Op<Flush<'_>> {
    Op::new(Flush { dst, flush_type })
}

/// `rpma_send`: sends `src`; needs a receive posted at the peer. With [`.imm(..)`](Op::imm),
/// `rpma_send_with_imm`.
#[doc(alias = "rpma_send")]
#[doc(alias = "rpma_send_with_imm")]
pub const fn send<T: Transport>(src: LocalSlice<'_, T>) -> Op<Send<'_, T>> {
    Op::new(Send { src: Src::One(src), imm: None })
}

/// A gathering send: one message made of the pieces of `src`, in order. At most the
/// connection's [`max_sge`](crate::ConnCfg::with_max_sge) pieces, none empty.
pub const fn send_sg<'a, T: Transport>(src: &'a [LocalSlice<'a, T>]) -> Op<Send<'a, T>> {
    Op::new(Send { src: Src::Sg(src), imm: None })
}

/// An inline send: `src` is plain memory, copied into the work request when it is posted (no
/// registration). At most the connection's [`max_inline`](crate::ConnCfg::with_max_inline)
/// bytes, at least one.
pub const fn send_inline<T: Transport>(src: &[u8]) -> Op<Send<'_, T>> {
    Op::new(Send { src: Src::Inline(src), imm: None })
}

/// An empty message (`rpma_send` with no region).
#[doc(alias = "rpma_send")]
pub const fn send_empty<'a, T: Transport>() -> Op<Send<'a, T>> {
    Op::new(Send { src: Src::None, imm: None })
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

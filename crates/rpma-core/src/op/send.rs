//! The send-queue builders: `conn.write(remote.at(0), src.slice(0..8)).context(1).post()` is
//! `conn.post(op::write(remote.at(0), src.slice(0..8)).context(1))` written from the
//! connection ([`Post`]: the connection and an [`Op`]).

use std::fmt;

use crate::conn::Conn;
use crate::error::Result;
use crate::transport::{SendWr, Transport};
use crate::types::{CompletionFlags, FlushType};

use super::kind::{AtomicWrite, Flush, Read, Send, SendKind, Write};
use super::operation::Operation;
use super::slice::{LocalSlice, RemoteAt, RemoteSlice};
use super::value::{self as op, Op, SendQueue};

/// An operation on a connection's send queue, ready to post: an [`Op`] and the connection it
/// goes to. Chain options, then [`post`](Post::post) (or push it into a
/// [`Batch`](super::Batch)). `K` says which operation ([`Read`], [`Write`], [`AtomicWrite`],
/// [`Flush`], [`Send`]).
///
/// Defaults: [`CompletionFlags::ALWAYS`] (a completion always appears) and operation context 0.
/// It borrows the connection, so it lives on the connection's thread.
#[must_use = "an operation does nothing until it is posted with .post()"]
pub struct Post<'c, T: Transport, K> {
    pub(super) conn: &'c Conn<T>,
    op: Op<K>,
}

impl<T: Transport, K: fmt::Debug> fmt::Debug for Post<'_, T, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Post").field("op", &self.op).finish_non_exhaustive()
    }
}

impl<'c, T: Transport, K: SendKind<'c, T> + SendQueue> Post<'c, T, K> {
    pub(crate) const fn new(conn: &'c Conn<T>, op: Op<K>) -> Self {
        Self { conn, op }
    }

    /// When a completion appears: [`CompletionFlags::ALWAYS`] (the default) or
    /// [`CompletionFlags::ON_ERROR`] (unsignaled: only a failure completes).
    pub const fn flags(mut self, flags: CompletionFlags) -> Self {
        self.op.flags = flags;
        self
    }

    /// The operation context (librpma's `op_context`), returned as [`Wc::wr_id`](crate::Wc::wr_id).
    pub const fn context(mut self, context: u64) -> Self {
        self.op.context = context;
        self
    }

    /// The operation, apart from the connection.
    pub fn into_op(self) -> Op<K> {
        self.op
    }

    /// Validates every argument into the work request a backend posts, with the operation's
    /// name ([`SendKind::op_name`]).
    #[inline(always)]
    pub(super) fn into_wr(self) -> Result<(SendWr<'c, T>, &'static str)> {
        self.op.send_wr(self.conn)
    }

    /// Validates every argument and posts the operation ([`Conn::post`]).
    ///
    /// # Errors
    /// As [`Conn::post`].
    #[inline(always)]
    pub fn post(self) -> Result<()>
    where
        K: Operation<'c, T>,
    {
        self.conn.post(self.op)
    }
}

impl<T: Transport> Post<'_, T, Write<'_, T>> {
    /// Carries `imm` (host order; `rpma_write_with_imm`): consumes a receive buffer at the peer,
    /// whose completion is [`RecvRdmaWithImm`](crate::WcOpcode::RecvRdmaWithImm) with
    /// `imm_data == Some(imm)`.
    pub const fn imm(mut self, imm: u32) -> Self {
        self.op.kind.imm = Some(imm);
        self
    }
}

impl<T: Transport> Post<'_, T, Send<'_, T>> {
    /// Carries `imm` (host order; `rpma_send_with_imm`).
    pub const fn imm(mut self, imm: u32) -> Self {
        self.op.kind.imm = Some(imm);
        self
    }
}

impl<T: Transport> Conn<T> {
    /// `rpma_read`: RDMA Read of `dst.len()` bytes at `src` of the remote region into `dst`.
    ///
    /// ```ignore
    /// conn.read(dst.slice(0..4096), remote.at(0)).context(1).post()?;
    /// ```
    #[doc(alias = "rpma_read")]
    pub fn read<'c>(&'c self, dst: LocalSlice<'c, T>, src: RemoteAt<'c>) -> Post<'c, T, Read<'c, T>> {
        Post::new(self, op::read(dst, src))
    }

    /// A scattering read: the remote bytes at `src`, as many as the pieces hold together, land
    /// in `dst` piece after piece. At most the connection's
    /// [`max_sge`](crate::ConnCfg::with_max_sge) pieces (and the device's `max_sge_rd`), none
    /// empty.
    pub fn read_sg<'c>(&'c self, dst: &'c [LocalSlice<'c, T>], src: RemoteAt<'c>) -> Post<'c, T, Read<'c, T>> {
        Post::new(self, op::read_sg(dst, src))
    }

    /// The zero-byte read (`rpma_read` with no regions): orders after earlier operations
    /// without moving data.
    #[doc(alias = "rpma_read")]
    pub fn read_empty(&self) -> Post<'_, T, Read<'_, T>> {
        Post::new(self, op::read_empty())
    }

    /// `rpma_write`: RDMA Write of `src` to the remote region at `dst`. With
    /// [`.imm(..)`](Post::imm), `rpma_write_with_imm`.
    ///
    /// ```ignore
    /// conn.write(remote.at(0), src.slice(0..10)).flags(CompletionFlags::ON_ERROR).post()?;
    /// ```
    #[doc(alias = "rpma_write")]
    #[doc(alias = "rpma_write_with_imm")]
    pub fn write<'c>(&'c self, dst: RemoteAt<'c>, src: LocalSlice<'c, T>) -> Post<'c, T, Write<'c, T>> {
        Post::new(self, op::write(dst, src))
    }

    /// A gathering write: the pieces of `src`, in order, written as one contiguous range at
    /// `dst`. At most the connection's [`max_sge`](crate::ConnCfg::with_max_sge) pieces, none
    /// empty.
    pub fn write_sg<'c>(&'c self, dst: RemoteAt<'c>, src: &'c [LocalSlice<'c, T>]) -> Post<'c, T, Write<'c, T>> {
        Post::new(self, op::write_sg(dst, src))
    }

    /// An inline write: `src` is plain memory, copied into the work request when it is posted
    /// (no registration; `src` may be reused as soon as `post` returns). At most the
    /// connection's [`max_inline`](crate::ConnCfg::with_max_inline) bytes, at least one.
    pub fn write_inline<'c>(&'c self, dst: RemoteAt<'c>, src: &'c [u8]) -> Post<'c, T, Write<'c, T>> {
        Post::new(self, op::write_inline(dst, src))
    }

    /// The zero-byte write (`rpma_write` with no regions), e.g. to carry an immediate value
    /// alone with [`.imm(..)`](Post::imm).
    #[doc(alias = "rpma_write")]
    #[doc(alias = "rpma_write_with_imm")]
    pub fn write_empty(&self) -> Post<'_, T, Write<'_, T>> {
        Post::new(self, op::write_empty())
    }

    /// `rpma_atomic_write`: writes the 8 bytes `value` atomically at `dst` (an offset multiple of
    /// [`MrRemote::ATOMIC_WRITE_ALIGNMENT`](crate::MrRemote::ATOMIC_WRITE_ALIGNMENT)): a native atomic write, or an
    /// inline 8-byte write fenced behind earlier reads and flushes ("write data; flush;
    /// atomic-write the commit pointer; flush").
    #[doc(alias = "rpma_atomic_write")]
    pub fn atomic_write<'c>(&'c self, dst: RemoteAt<'c>, value: [u8; 8]) -> Post<'c, T, AtomicWrite<'c>> {
        Post::new(self, op::atomic_write(dst, value))
    }

    /// `rpma_flush`: makes the data previously written to `dst` visible
    /// ([`FlushType::Visibility`]) or persistent ([`FlushType::Persistent`]) at the target.
    #[doc(alias = "rpma_flush")]
    pub fn flush<'c>(&'c self, dst: RemoteSlice<'c>, flush_type: FlushType) -> Post<'c, T, Flush<'c>> {
        Post::new(self, op::flush(dst, flush_type))
    }

    /// `rpma_send`: sends `src`; needs a receive posted at the peer. With
    /// [`.imm(..)`](Post::imm), `rpma_send_with_imm`.
    #[doc(alias = "rpma_send")]
    #[doc(alias = "rpma_send_with_imm")]
    pub fn send<'c>(&'c self, src: LocalSlice<'c, T>) -> Post<'c, T, Send<'c, T>> {
        Post::new(self, op::send(src))
    }

    /// A gathering send: one message made of the pieces of `src`, in order. At most the
    /// connection's [`max_sge`](crate::ConnCfg::with_max_sge) pieces, none empty.
    pub fn send_sg<'c>(&'c self, src: &'c [LocalSlice<'c, T>]) -> Post<'c, T, Send<'c, T>> {
        Post::new(self, op::send_sg(src))
    }

    /// An inline send: `src` is plain memory, copied into the work request when it is posted
    /// (no registration). At most the connection's
    /// [`max_inline`](crate::ConnCfg::with_max_inline) bytes, at least one.
    pub fn send_inline<'c>(&'c self, src: &'c [u8]) -> Post<'c, T, Send<'c, T>> {
        Post::new(self, op::send_inline(src))
    }

    /// Sends an empty message (`rpma_send` with no region).
    #[doc(alias = "rpma_send")]
    #[doc(alias = "rpma_send_with_imm")]
    pub fn send_empty(&self) -> Post<'_, T, Send<'_, T>> {
        Post::new(self, op::send_empty())
    }
}

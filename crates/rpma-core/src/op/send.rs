//! Operations on a connection's send queue: read, write, atomic write, flush and send, each a
//! builder ([`Post`]) posted alone or in a [`Batch`](super::Batch).

use std::fmt;

use crate::conn::Conn;
use crate::error::{Error, ErrorKind, Result};
use crate::transport::{ByCore, QpBackend, SendOp, SendWr, Transport};
use crate::types::{CompletionFlags, FlushType};
use crate::validate::{self, RemoteAccess};

use super::local::{Rules, Src};
use super::slice::{checked, LocalSlice, RemoteAt, RemoteSlice};

/// An operation on a connection's send queue, ready to post: chain options, then
/// [`post`](Post::post) (or push it into a [`Batch`](super::Batch)). `K` says which operation
/// ([`Read`], [`Write`], [`AtomicWrite`], [`Flush`], [`Send`]).
///
/// Defaults: [`CompletionFlags::ALWAYS`] (a completion always appears) and operation context 0.
/// It borrows the connection, so it lives on the connection's thread.
#[must_use = "an operation does nothing until it is posted with .post()"]
pub struct Post<'c, T: Transport, K> {
    pub(super) conn: &'c Conn<T>,
    kind: K,
    flags: CompletionFlags,
    context: u64,
}

impl<T: Transport, K: fmt::Debug> fmt::Debug for Post<'_, T, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Post")
            .field("kind", &self.kind)
            .field("flags", &self.flags)
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}

impl<'c, T: Transport, K: SendKind<'c, T>> Post<'c, T, K> {
    pub(crate) const fn new(conn: &'c Conn<T>, kind: K) -> Self {
        Self { conn, kind, flags: CompletionFlags::ALWAYS, context: 0 }
    }

    /// When a completion appears: [`CompletionFlags::ALWAYS`] (the default) or
    /// [`CompletionFlags::ON_ERROR`] (unsignaled: only a failure completes).
    pub const fn flags(mut self, flags: CompletionFlags) -> Self {
        self.flags = flags;
        self
    }

    /// The operation context (librpma's `op_context`), returned as [`Wc::wr_id`](crate::Wc::wr_id).
    pub const fn context(mut self, context: u64) -> Self {
        self.context = context;
        self
    }

    /// Validates every argument into the work request a backend posts, with the name of the
    /// librpma function the operation is.
    #[inline(always)]
    pub(super) fn into_wr(self) -> Result<(SendWr<'c, T>, &'static str)> {
        let op = self.kind.op_name();
        let signaled = validate::flags(op, self.flags)?;
        let wr = self.kind.work_request(self.conn, signaled, self.context)?;
        Ok((wr, op))
    }

    /// Validates every argument and posts the operation.
    ///
    /// # Errors
    /// [`Inval`](ErrorKind::Inval) if the flags are empty, a range is inverted or outside its
    /// region (the remote one as its descriptor claims it), the local region lacks the usage
    /// the operation needs, the remote region was not registered for the access, or the length
    /// exceeds the device's maximum message size; for an atomic write, an offset that is not a
    /// multiple of [`ATOMIC_WRITE_ALIGNMENT`](crate::ATOMIC_WRITE_ALIGNMENT); for
    /// scatter-gather, no pieces, an empty piece or more pieces than the connection's
    /// [`max_sge`](crate::ConnCfg::with_max_sge); for inline data, none or more than the
    /// connection's [`max_inline`](crate::ConnCfg::with_max_inline);
    /// [`NoSupp`](ErrorKind::NoSupp) for a persistent flush the remote peer did not declare
    /// support for ([`Conn::apply_remote_peer_cfg`]); [`Provider`](ErrorKind::Provider) if
    /// posting fails (the send queue is full, or the connection was never established).
    ///
    /// A connection that was established and then closed or lost takes the post, as a queue
    /// pair in the error state does on hardware: the operation completes with
    /// [`WcStatus::WrFlushErr`](crate::WcStatus::WrFlushErr) (also when it was posted
    /// unsignaled), so its completion, not this call, reports it.
    #[inline(always)]
    pub fn post(self) -> Result<()> {
        let conn = self.conn;
        let (wr, op) = self.into_wr()?;
        conn.qp().post_send_one(wr).map_err(|e| e.in_op(op))
    }
}

/// What a [`Post`] posts (sealed: implemented by the operation kinds of this module).
pub trait SendKind<'c, T: Transport>: sealed::Sealed {
    #[doc(hidden)]
    fn op_name(&self) -> &'static str;
    #[doc(hidden)]
    fn work_request(self, conn: &Conn<T>, signaled: bool, wr_id: u64) -> Result<SendWr<'c, T>>;
}

mod sealed {
    pub trait Sealed {}
}

/// A read (`rpma_read`): [`Conn::read`], [`Conn::read_sg`], [`Conn::read_empty`].
pub struct Read<'a, T: Transport> {
    dst: Src<'a, T>,
    src: Option<RemoteAt<'a>>,
}

/// A write (`rpma_write`, `rpma_write_with_imm`): [`Conn::write`], [`Conn::write_sg`],
/// [`Conn::write_inline`], [`Conn::write_empty`].
pub struct Write<'a, T: Transport> {
    dst: Option<RemoteAt<'a>>,
    src: Src<'a, T>,
    imm: Option<u32>,
}

/// An atomic write (`rpma_atomic_write`): [`Conn::atomic_write`].
#[derive(Debug)]
pub struct AtomicWrite<'a> {
    dst: RemoteAt<'a>,
    value: [u8; 8],
}

/// A flush (`rpma_flush`): [`Conn::flush`].
#[derive(Debug)]
pub struct Flush<'a> {
    dst: RemoteSlice<'a>,
    flush_type: FlushType,
}

/// A send (`rpma_send`, `rpma_send_with_imm`): [`Conn::send`], [`Conn::send_sg`],
/// [`Conn::send_inline`], [`Conn::send_empty`].
pub struct Send<'a, T: Transport> {
    src: Src<'a, T>,
    imm: Option<u32>,
}

macro_rules! debug_by_field {
    ($($ty:ident { $($field:ident),* }),*) => {$(
        impl<T: Transport> fmt::Debug for $ty<'_, T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($ty))$(.field(stringify!($field), &self.$field))*.finish()
            }
        }
    )*};
}
debug_by_field!(Read { dst, src }, Write { dst, src, imm }, Send { src, imm });

impl<T: Transport> sealed::Sealed for Read<'_, T> {}
impl<T: Transport> sealed::Sealed for Write<'_, T> {}
impl sealed::Sealed for AtomicWrite<'_> {}
impl sealed::Sealed for Flush<'_> {}
impl<T: Transport> sealed::Sealed for Send<'_, T> {}

/// The rules of a send-queue operation's local side on `conn`.
#[inline(always)]
fn rules<T: Transport>(conn: &Conn<T>, read: bool) -> Rules<'_> {
    Rules { device_writes: read, read, limits: conn.limits() }
}

impl<'c, T: Transport> SendKind<'c, T> for Read<'c, T> {
    fn op_name(&self) -> &'static str {
        "rpma_read"
    }

    #[inline(always)]
    fn work_request(self, conn: &Conn<T>, signaled: bool, wr_id: u64) -> Result<SendWr<'c, T>> {
        const OP: &str = "rpma_read";
        let (local, len) = self.dst.validate(OP, &conn.peer().inner, rules(conn, true))?;
        let remote = match self.src {
            None => None,
            Some(src) => {
                validate::msg_len(OP, conn.limits().max_msg, len)?;
                Some(validate::remote_buf(OP, src.mr, src.offset, len, RemoteAccess::Read)?)
            }
        };
        Ok(SendWr { op: SendOp::Read, local, remote, len, signaled, wr_id, _by_core: ByCore::VALIDATED })
    }
}

impl<'c, T: Transport> SendKind<'c, T> for Write<'c, T> {
    fn op_name(&self) -> &'static str {
        if self.imm.is_some() {
            "rpma_write_with_imm"
        } else {
            "rpma_write"
        }
    }

    #[inline(always)]
    fn work_request(self, conn: &Conn<T>, signaled: bool, wr_id: u64) -> Result<SendWr<'c, T>> {
        let op = SendKind::<T>::op_name(&self);
        let (local, len) = self.src.validate(op, &conn.peer().inner, rules(conn, false))?;
        let remote = match self.dst {
            None => None,
            Some(dst) => {
                validate::msg_len(op, conn.limits().max_msg, len)?;
                Some(validate::remote_buf(op, dst.mr, dst.offset, len, RemoteAccess::Write)?)
            }
        };
        let sop = self.imm.map_or(SendOp::Write, SendOp::WriteImm);
        Ok(SendWr { op: sop, local, remote, len, signaled, wr_id, _by_core: ByCore::VALIDATED })
    }
}

impl<'c, T: Transport> SendKind<'c, T> for AtomicWrite<'c> {
    fn op_name(&self) -> &'static str {
        "rpma_atomic_write"
    }

    #[inline(always)]
    fn work_request(self, _conn: &Conn<T>, signaled: bool, wr_id: u64) -> Result<SendWr<'c, T>> {
        const OP: &str = "rpma_atomic_write";
        validate::atomic_offset(OP, self.dst.offset)?;
        let remote = validate::remote_buf(OP, self.dst.mr, self.dst.offset, 8, RemoteAccess::Write)?;
        Ok(SendWr {
            op: SendOp::AtomicWrite(self.value),
            local: crate::transport::Local::None,
            remote: Some(remote),
            len: 8,
            signaled,
            wr_id,
            _by_core: ByCore::VALIDATED,
        })
    }
}

impl<'c, T: Transport> SendKind<'c, T> for Flush<'c> {
    fn op_name(&self) -> &'static str {
        "rpma_flush"
    }

    #[inline(always)]
    fn work_request(self, conn: &Conn<T>, signaled: bool, wr_id: u64) -> Result<SendWr<'c, T>> {
        const OP: &str = "rpma_flush";
        if self.flush_type == FlushType::Persistent && !conn.direct_write_to_pmem() {
            return Err(Error::new(ErrorKind::NoSupp, OP).with_detail(
                "the remote peer does not support direct write to PMem: a persistent flush needs the peer's \
                     configuration saying it does (Conn::apply_remote_peer_cfg with the PeerCfg it sent, \
                     PeerCfg::with_direct_write_to_pmem(true) on its side); flush to visibility otherwise",
            ));
        }
        let (offset, len) = checked(OP, (self.dst.start, self.dst.end))?;
        let remote = validate::remote_buf(OP, self.dst.mr, offset, len, RemoteAccess::Flush(self.flush_type))?;
        Ok(SendWr {
            op: SendOp::Flush(self.flush_type),
            local: crate::transport::Local::None,
            remote: Some(remote),
            len,
            signaled,
            wr_id,
            _by_core: ByCore::VALIDATED,
        })
    }
}

impl<'c, T: Transport> SendKind<'c, T> for Send<'c, T> {
    fn op_name(&self) -> &'static str {
        if self.imm.is_some() {
            "rpma_send_with_imm"
        } else {
            "rpma_send"
        }
    }

    #[inline(always)]
    fn work_request(self, conn: &Conn<T>, signaled: bool, wr_id: u64) -> Result<SendWr<'c, T>> {
        let op = SendKind::<T>::op_name(&self);
        let (local, len) = self.src.validate(op, &conn.peer().inner, rules(conn, false))?;
        validate::msg_len(op, conn.limits().max_msg, len)?;
        let sop = self.imm.map_or(SendOp::Send, SendOp::SendImm);
        Ok(SendWr { op: sop, local, remote: None, len, signaled, wr_id, _by_core: ByCore::VALIDATED })
    }
}

impl<T: Transport> Post<'_, T, Write<'_, T>> {
    /// Carries `imm` (host order; `rpma_write_with_imm`): consumes a receive buffer at the peer,
    /// whose completion is [`RecvRdmaWithImm`](crate::WcOpcode::RecvRdmaWithImm) with
    /// `imm_data == Some(imm)`.
    pub const fn imm(mut self, imm: u32) -> Self {
        self.kind.imm = Some(imm);
        self
    }
}

impl<T: Transport> Post<'_, T, Send<'_, T>> {
    /// Carries `imm` (host order; `rpma_send_with_imm`).
    pub const fn imm(mut self, imm: u32) -> Self {
        self.kind.imm = Some(imm);
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
        Post::new(self, Read { dst: Src::One(dst), src: Some(src) })
    }

    /// A scattering read: the remote bytes at `src`, as many as the pieces hold together, land
    /// in `dst` piece after piece. At most the connection's
    /// [`max_sge`](crate::ConnCfg::with_max_sge) pieces (and the device's `max_sge_rd`), none
    /// empty.
    pub fn read_sg<'c>(&'c self, dst: &'c [LocalSlice<'c, T>], src: RemoteAt<'c>) -> Post<'c, T, Read<'c, T>> {
        Post::new(self, Read { dst: Src::Sg(dst), src: Some(src) })
    }

    /// The zero-byte read (`rpma_read` with no regions): orders after earlier operations
    /// without moving data.
    #[doc(alias = "rpma_read")]
    pub fn read_empty(&self) -> Post<'_, T, Read<'_, T>> {
        Post::new(self, Read { dst: Src::None, src: None })
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
        Post::new(self, Write { dst: Some(dst), src: Src::One(src), imm: None })
    }

    /// A gathering write: the pieces of `src`, in order, written as one contiguous range at
    /// `dst`. At most the connection's [`max_sge`](crate::ConnCfg::with_max_sge) pieces, none
    /// empty.
    pub fn write_sg<'c>(&'c self, dst: RemoteAt<'c>, src: &'c [LocalSlice<'c, T>]) -> Post<'c, T, Write<'c, T>> {
        Post::new(self, Write { dst: Some(dst), src: Src::Sg(src), imm: None })
    }

    /// An inline write: `src` is plain memory, copied into the work request when it is posted
    /// (no registration; `src` may be reused as soon as `post` returns). At most the
    /// connection's [`max_inline`](crate::ConnCfg::with_max_inline) bytes, at least one.
    pub fn write_inline<'c>(&'c self, dst: RemoteAt<'c>, src: &'c [u8]) -> Post<'c, T, Write<'c, T>> {
        Post::new(self, Write { dst: Some(dst), src: Src::Inline(src), imm: None })
    }

    /// The zero-byte write (`rpma_write` with no regions), e.g. to carry an immediate value
    /// alone with [`.imm(..)`](Post::imm).
    #[doc(alias = "rpma_write")]
    #[doc(alias = "rpma_write_with_imm")]
    pub fn write_empty(&self) -> Post<'_, T, Write<'_, T>> {
        Post::new(self, Write { dst: None, src: Src::None, imm: None })
    }

    /// `rpma_atomic_write`: writes the 8 bytes `value` atomically at `dst` (an offset multiple of
    /// [`ATOMIC_WRITE_ALIGNMENT`](crate::ATOMIC_WRITE_ALIGNMENT)): a native atomic write, or an
    /// inline 8-byte write fenced behind earlier reads and flushes ("write data; flush;
    /// atomic-write the commit pointer; flush").
    #[doc(alias = "rpma_atomic_write")]
    pub fn atomic_write<'c>(&'c self, dst: RemoteAt<'c>, value: [u8; 8]) -> Post<'c, T, AtomicWrite<'c>> {
        Post::new(self, AtomicWrite { dst, value })
    }

    /// `rpma_flush`: makes the data previously written to `dst` visible
    /// ([`FlushType::Visibility`]) or persistent ([`FlushType::Persistent`]) at the target.
    #[doc(alias = "rpma_flush")]
    pub fn flush<'c>(&'c self, dst: RemoteSlice<'c>, flush_type: FlushType) -> Post<'c, T, Flush<'c>> {
        Post::new(self, Flush { dst, flush_type })
    }

    /// `rpma_send`: sends `src`; needs a receive posted at the peer. With
    /// [`.imm(..)`](Post::imm), `rpma_send_with_imm`.
    #[doc(alias = "rpma_send")]
    #[doc(alias = "rpma_send_with_imm")]
    pub fn send<'c>(&'c self, src: LocalSlice<'c, T>) -> Post<'c, T, Send<'c, T>> {
        Post::new(self, Send { src: Src::One(src), imm: None })
    }

    /// A gathering send: one message made of the pieces of `src`, in order. At most the
    /// connection's [`max_sge`](crate::ConnCfg::with_max_sge) pieces, none empty.
    pub fn send_sg<'c>(&'c self, src: &'c [LocalSlice<'c, T>]) -> Post<'c, T, Send<'c, T>> {
        Post::new(self, Send { src: Src::Sg(src), imm: None })
    }

    /// An inline send: `src` is plain memory, copied into the work request when it is posted
    /// (no registration). At most the connection's
    /// [`max_inline`](crate::ConnCfg::with_max_inline) bytes, at least one.
    pub fn send_inline<'c>(&'c self, src: &'c [u8]) -> Post<'c, T, Send<'c, T>> {
        Post::new(self, Send { src: Src::Inline(src), imm: None })
    }

    /// Sends an empty message (`rpma_send` with no region).
    #[doc(alias = "rpma_send")]
    #[doc(alias = "rpma_send_with_imm")]
    pub fn send_empty(&self) -> Post<'_, T, Send<'_, T>> {
        Post::new(self, Send { src: Src::None, imm: None })
    }
}

//! Data-path operations as small builders: what to transfer is given when the operation is
//! made (`conn.write(remote.at(0), src.slice(0..8))`), how to complete it by chained options
//! (`.flags(..)`, `.context(..)`, `.imm(..)`), and `.post()` validates every argument and posts
//! it. Nothing is allocated and nothing is copied: the device reads and writes the registered
//! memory in place.

use std::fmt;
use std::ops::{Bound, RangeBounds};

use crate::conn::{Conn, ConnReq, Srq};
use crate::error::{Error, ErrorKind, Result};
use crate::mr::{MrLocal, MrRemote};
use crate::transport::{LocalBuf, QpBackend, SendOp, SendWr, SrqBackend, Transport};
use crate::types::{CompletionFlags, FlushType};
use crate::validate::{self, RemoteAccess};

/// Resolves a range against a length `len` as `(start, end)`; an inverted or overflowing range
/// comes out with `start > end`, which validation rejects.
#[inline]
fn resolve(range: &impl RangeBounds<usize>, len: usize) -> (usize, usize) {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => match e.checked_add(1) {
            Some(e) => e,
            None => return (usize::MAX, 0),
        },
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    (start, end)
}

/// Checks a resolved range and returns `(offset, len)`.
#[inline]
fn checked(op: &'static str, (start, end): (usize, usize)) -> Result<(usize, usize)> {
    if start > end {
        return Err(Error::inval(op, "range start is past its end"));
    }
    Ok((start, end - start))
}

/// A range of a local region: the local side of an operation ([`MrLocal::slice`]).
///
/// Made without checks; the operation it is posted with checks it against the region and the
/// region's usage. `Copy`, `Send + Sync` (a borrow of the region).
pub struct LocalSlice<'a, T: Transport> {
    mr: &'a MrLocal<T>,
    start: usize,
    end: usize,
}

impl<T: Transport> Clone for LocalSlice<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Transport> Copy for LocalSlice<'_, T> {}

impl<T: Transport> fmt::Debug for LocalSlice<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalSlice").field("start", &self.start).field("end", &self.end).finish_non_exhaustive()
    }
}

impl<'a, T: Transport> LocalSlice<'a, T> {
    /// The region.
    #[must_use]
    pub const fn mr(&self) -> &'a MrLocal<T> {
        self.mr
    }

    /// Bytes in the range (0 if it is inverted).
    #[must_use]
    pub const fn len(&self) -> usize {
        self.end.saturating_sub(self.start)
    }

    /// Whether the range is empty.
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Validates the range for `op` (`device_writes`: the device writes into it).
    fn buf(&self, op: &'static str, device_writes: bool) -> Result<LocalBuf<'a, T::Mr>> {
        let (offset, len) = checked(op, (self.start, self.end))?;
        validate::local_buf(op, &self.mr.mr, self.mr.usage(), offset, len, device_writes)
    }
}

impl<T: Transport> MrLocal<T> {
    /// The bytes of `range` (`..` for the whole region) as the local side of an operation.
    /// Checked when the operation is posted.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> LocalSlice<'_, T> {
        let (start, end) = resolve(&range, self.len());
        LocalSlice { mr: self, start, end }
    }
}

/// An offset in a remote region: the remote side of a read, write or atomic write
/// ([`MrRemote::at`]). The length comes from the local side.
#[derive(Clone, Copy, Debug)]
pub struct RemoteAt<'a> {
    mr: &'a MrRemote,
    offset: usize,
}

/// A range of a remote region: what a flush covers ([`MrRemote::slice`]).
#[derive(Clone, Copy, Debug)]
pub struct RemoteSlice<'a> {
    mr: &'a MrRemote,
    start: usize,
    end: usize,
}

impl MrRemote {
    /// The remote side of a read, write or atomic write, at `offset`. Checked against the size
    /// the peer's descriptor claims when the operation is posted.
    #[must_use]
    pub const fn at(&self, offset: usize) -> RemoteAt<'_> {
        RemoteAt { mr: self, offset }
    }

    /// The bytes of `range` (`..` for the whole region, as the descriptor claims it) for a
    /// flush. Checked when the flush is posted.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> RemoteSlice<'_> {
        let (start, end) = resolve(&range, usize::try_from(self.len()).unwrap_or(usize::MAX));
        RemoteSlice { mr: self, start, end }
    }
}

/// An operation on a connection's send queue, ready to post: chain options, then
/// [`post`](Post::post). `K` says which operation ([`Read`], [`Write`], [`AtomicWrite`],
/// [`Flush`], [`Send`]).
///
/// Defaults: [`CompletionFlags::ALWAYS`] (a completion always appears) and operation context 0.
/// `Send + Sync` (borrows of the connection and the regions): build it on one thread, post it on
/// another if you like.
#[must_use = "an operation does nothing until it is posted with .post()"]
pub struct Post<'c, T: Transport, K> {
    conn: &'c Conn<T>,
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

impl<'c, T: Transport, K: SendKind<T>> Post<'c, T, K> {
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

    /// Validates every argument and posts the operation.
    ///
    /// # Errors
    /// [`Inval`](ErrorKind::Inval) if the flags are empty, a range is inverted or outside its
    /// region (the remote one as its descriptor claims it), the local region lacks the usage
    /// the operation needs, the remote region was not registered for the access, or the length
    /// exceeds the device's maximum message size; for an atomic write, an offset that is not a
    /// multiple of [`ATOMIC_WRITE_ALIGNMENT`](crate::ATOMIC_WRITE_ALIGNMENT);
    /// [`NoSupp`](ErrorKind::NoSupp) for a persistent flush the remote peer did not declare
    /// support for ([`Conn::apply_remote_peer_cfg`]); [`Provider`](ErrorKind::Provider) if
    /// posting fails (e.g. the send queue is full or the connection is not established).
    #[inline]
    pub fn post(self) -> Result<()> {
        let op = self.kind.op_name();
        let signaled = validate::flags(op, self.flags)?;
        let wr = self.kind.work_request(self.conn, signaled, self.context)?;
        self.conn.qp().post_send(&wr).map_err(|e| e.in_op(op))
    }
}

/// What a [`Post`] posts (sealed: implemented by the operation kinds of this module).
pub trait SendKind<T: Transport>: sealed::Sealed {
    #[doc(hidden)]
    fn op_name(&self) -> &'static str;
    #[doc(hidden)]
    fn work_request<'a>(&'a self, conn: &Conn<T>, signaled: bool, wr_id: u64) -> Result<SendWr<'a, T::Mr>>;
}

mod sealed {
    pub trait Sealed {}
}

/// A read (`rpma_read`): [`Conn::read`], [`Conn::read_empty`].
pub struct Read<'a, T: Transport> {
    pair: Option<(LocalSlice<'a, T>, RemoteAt<'a>)>,
}

/// A write (`rpma_write`, `rpma_write_with_imm`): [`Conn::write`], [`Conn::write_empty`].
pub struct Write<'a, T: Transport> {
    pair: Option<(RemoteAt<'a>, LocalSlice<'a, T>)>,
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

/// A send (`rpma_send`, `rpma_send_with_imm`): [`Conn::send`], [`Conn::send_empty`].
pub struct Send<'a, T: Transport> {
    src: Option<LocalSlice<'a, T>>,
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
debug_by_field!(Read { pair }, Write { pair, imm }, Send { src, imm });

impl<T: Transport> sealed::Sealed for Read<'_, T> {}
impl<T: Transport> sealed::Sealed for Write<'_, T> {}
impl sealed::Sealed for AtomicWrite<'_> {}
impl sealed::Sealed for Flush<'_> {}
impl<T: Transport> sealed::Sealed for Send<'_, T> {}

impl<T: Transport> SendKind<T> for Read<'_, T> {
    fn op_name(&self) -> &'static str {
        "rpma_read"
    }

    #[inline]
    fn work_request<'a>(&'a self, conn: &Conn<T>, signaled: bool, wr_id: u64) -> Result<SendWr<'a, T::Mr>> {
        const OP: &str = "rpma_read";
        let (local, remote, len) = match &self.pair {
            None => (None, None, 0),
            Some((dst, src)) => {
                let local = dst.buf(OP, true)?;
                validate::msg_len(OP, conn.caps(), local.len)?;
                let remote = validate::remote_buf(OP, src.mr, src.offset, local.len, RemoteAccess::Read)?;
                let len = local.len;
                (Some(local), Some(remote), len)
            }
        };
        Ok(SendWr { op: SendOp::Read, local, remote, len, signaled, wr_id })
    }
}

impl<T: Transport> SendKind<T> for Write<'_, T> {
    fn op_name(&self) -> &'static str {
        if self.imm.is_some() {
            "rpma_write_with_imm"
        } else {
            "rpma_write"
        }
    }

    #[inline]
    fn work_request<'a>(&'a self, conn: &Conn<T>, signaled: bool, wr_id: u64) -> Result<SendWr<'a, T::Mr>> {
        let op = SendKind::<T>::op_name(self);
        let (local, remote, len) = match &self.pair {
            None => (None, None, 0),
            Some((dst, src)) => {
                let local = src.buf(op, false)?;
                validate::msg_len(op, conn.caps(), local.len)?;
                let remote = validate::remote_buf(op, dst.mr, dst.offset, local.len, RemoteAccess::Write)?;
                let len = local.len;
                (Some(local), Some(remote), len)
            }
        };
        let sop = self.imm.map_or(SendOp::Write, SendOp::WriteImm);
        Ok(SendWr { op: sop, local, remote, len, signaled, wr_id })
    }
}

impl<T: Transport> SendKind<T> for AtomicWrite<'_> {
    fn op_name(&self) -> &'static str {
        "rpma_atomic_write"
    }

    #[inline]
    fn work_request<'a>(&'a self, _conn: &Conn<T>, signaled: bool, wr_id: u64) -> Result<SendWr<'a, T::Mr>> {
        const OP: &str = "rpma_atomic_write";
        validate::atomic_offset(OP, self.dst.offset)?;
        let remote = validate::remote_buf(OP, self.dst.mr, self.dst.offset, 8, RemoteAccess::Write)?;
        Ok(SendWr { op: SendOp::AtomicWrite(self.value), local: None, remote: Some(remote), len: 8, signaled, wr_id })
    }
}

impl<T: Transport> SendKind<T> for Flush<'_> {
    fn op_name(&self) -> &'static str {
        "rpma_flush"
    }

    #[inline]
    fn work_request<'a>(&'a self, conn: &Conn<T>, signaled: bool, wr_id: u64) -> Result<SendWr<'a, T::Mr>> {
        const OP: &str = "rpma_flush";
        if self.flush_type == FlushType::Persistent && !conn.direct_write_to_pmem() {
            return Err(
                Error::new(ErrorKind::NoSupp, OP).with_detail("the remote peer does not support direct write to PMem")
            );
        }
        let (offset, len) = checked(OP, (self.dst.start, self.dst.end))?;
        let remote = validate::remote_buf(OP, self.dst.mr, offset, len, RemoteAccess::Flush(self.flush_type))?;
        Ok(SendWr { op: SendOp::Flush(self.flush_type), local: None, remote: Some(remote), len, signaled, wr_id })
    }
}

impl<T: Transport> SendKind<T> for Send<'_, T> {
    fn op_name(&self) -> &'static str {
        if self.imm.is_some() {
            "rpma_send_with_imm"
        } else {
            "rpma_send"
        }
    }

    #[inline]
    fn work_request<'a>(&'a self, conn: &Conn<T>, signaled: bool, wr_id: u64) -> Result<SendWr<'a, T::Mr>> {
        let op = SendKind::<T>::op_name(self);
        let local = self.src.as_ref().map(|s| s.buf(op, false)).transpose()?;
        let len = local.as_ref().map_or(0, |l| l.len);
        validate::msg_len(op, conn.caps(), len)?;
        let sop = self.imm.map_or(SendOp::Send, SendOp::SendImm);
        Ok(SendWr { op: sop, local, remote: None, len, signaled, wr_id })
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
        Post::new(self, Read { pair: Some((dst, src)) })
    }

    /// The zero-byte read (`rpma_read` with no regions): orders after earlier operations
    /// without moving data.
    #[doc(alias = "rpma_read")]
    pub fn read_empty(&self) -> Post<'_, T, Read<'_, T>> {
        Post::new(self, Read { pair: None })
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
        Post::new(self, Write { pair: Some((dst, src)), imm: None })
    }

    /// The zero-byte write (`rpma_write` with no regions), e.g. to carry an immediate value
    /// alone with [`.imm(..)`](Post::imm).
    #[doc(alias = "rpma_write")]
    #[doc(alias = "rpma_write_with_imm")]
    pub fn write_empty(&self) -> Post<'_, T, Write<'_, T>> {
        Post::new(self, Write { pair: None, imm: None })
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
        Post::new(self, Send { src: Some(src), imm: None })
    }

    /// Sends an empty message (`rpma_send` with no region).
    #[doc(alias = "rpma_send")]
    #[doc(alias = "rpma_send_with_imm")]
    pub fn send_empty(&self) -> Post<'_, T, Send<'_, T>> {
        Post::new(self, Send { src: None, imm: None })
    }

    /// `rpma_recv`: posts a receive buffer.
    ///
    /// Posted buffers form an **unordered set**: which buffer a message lands in, and the order
    /// of receive completions, are not those of posting. A connection using an SRQ has no
    /// receive queue of its own: posting fails with [`Provider`](ErrorKind::Provider); use
    /// [`Srq::recv`].
    #[doc(alias = "rpma_recv")]
    pub fn recv<'c>(&'c self, dst: LocalSlice<'c, T>) -> Recv<'c, T> {
        Recv { queue: RecvQueue::Conn(self), dst: Some(dst), context: 0 }
    }

    /// Posts a zero-length receive buffer (`rpma_recv` with no region).
    #[doc(alias = "rpma_recv")]
    pub fn recv_empty(&self) -> Recv<'_, T> {
        Recv { queue: RecvQueue::Conn(self), dst: None, context: 0 }
    }
}

impl<T: Transport> Srq<T> {
    /// `rpma_srq_recv`: posts a receive buffer shared by every connection using the SRQ (an
    /// unordered set, as [`Conn::recv`]).
    #[doc(alias = "rpma_srq_recv")]
    pub fn recv<'c>(&'c self, dst: LocalSlice<'c, T>) -> Recv<'c, T> {
        Recv { queue: RecvQueue::Srq(self), dst: Some(dst), context: 0 }
    }

    /// Posts a zero-length receive buffer (`rpma_srq_recv` with no region).
    #[doc(alias = "rpma_srq_recv")]
    pub fn recv_empty(&self) -> Recv<'_, T> {
        Recv { queue: RecvQueue::Srq(self), dst: None, context: 0 }
    }
}

impl<T: Transport> ConnReq<T> {
    /// `rpma_conn_req_recv`: posts a receive buffer before the connection is established, so a
    /// buffer is ready for the peer's first message. (librpma has no zero-length form here.)
    #[doc(alias = "rpma_conn_req_recv")]
    pub fn recv<'c>(&'c self, dst: LocalSlice<'c, T>) -> Recv<'c, T> {
        Recv { queue: RecvQueue::Req(self), dst: Some(dst), context: 0 }
    }
}

enum RecvQueue<'c, T: Transport> {
    Conn(&'c Conn<T>),
    Srq(&'c Srq<T>),
    Req(&'c ConnReq<T>),
}

/// A receive buffer ready to post ([`Conn::recv`], [`Srq::recv`], [`ConnReq::recv`]).
#[must_use = "a receive does nothing until it is posted with .post()"]
pub struct Recv<'c, T: Transport> {
    queue: RecvQueue<'c, T>,
    dst: Option<LocalSlice<'c, T>>,
    context: u64,
}

impl<T: Transport> fmt::Debug for Recv<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recv").field("dst", &self.dst).field("context", &self.context).finish_non_exhaustive()
    }
}

impl<T: Transport> Recv<'_, T> {
    /// The operation context, returned as [`Wc::wr_id`](crate::Wc::wr_id) (default 0).
    pub const fn context(mut self, context: u64) -> Self {
        self.context = context;
        self
    }

    /// Validates the buffer and posts it.
    ///
    /// # Errors
    /// [`Inval`](ErrorKind::Inval) if the range is inverted or outside its region, the device
    /// may not write the region, or the length exceeds the device's maximum message size;
    /// [`Provider`](ErrorKind::Provider) if posting fails (the queue is full; a connection using
    /// an SRQ has no receive queue of its own).
    #[inline]
    pub fn post(self) -> Result<()> {
        let (op, caps) = match &self.queue {
            RecvQueue::Conn(c) => ("rpma_recv", c.caps()),
            RecvQueue::Srq(s) => ("rpma_srq_recv", s.caps()),
            RecvQueue::Req(r) => ("rpma_conn_req_recv", r.caps()),
        };
        let buf = self.dst.as_ref().map(|d| d.buf(op, true)).transpose()?;
        validate::msg_len(op, caps, buf.as_ref().map_or(0, |b| b.len))?;
        let posted = match self.queue {
            RecvQueue::Conn(c) => c.qp().post_recv(buf, self.context),
            RecvQueue::Srq(s) => s.backend().post_recv(buf, self.context),
            RecvQueue::Req(r) => r.qp().post_recv(buf, self.context),
        };
        posted.map_err(|e| e.in_op(op))
    }
}

#[cfg(test)]
mod tests {
    use super::{checked, resolve};

    #[test]
    fn ranges_resolve_and_reject_inversion_and_overflow() {
        assert_eq!(resolve(&(..), 10), (0, 10));
        assert_eq!(resolve(&(2..5), 10), (2, 5));
        assert_eq!(resolve(&(2..=5), 10), (2, 6));
        assert_eq!(resolve(&(3..), 10), (3, 10));
        assert_eq!(checked("x", resolve(&(2..5), 10)), Ok((2, 3)));
        assert!(checked("x", resolve(&(..=usize::MAX), 10)).is_err());
        #[allow(clippy::reversed_empty_ranges)]
        let inverted = resolve(&(5..2), 10);
        assert!(checked("x", inverted).is_err());
        assert_eq!(checked("x", resolve(&(usize::MAX..), 10)).map_err(|e| e.kind()), Err(crate::ErrorKind::Inval));
    }
}

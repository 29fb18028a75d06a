//! The write (`rpma_write`, `rpma_write_with_imm`): [`Write`], its constructors ([`write`],
//! [`write_sg`], [`write_inline`], [`write_empty`] and the same on a connection,
//! [`Conn::write`]), its immediate value ([`Op::imm`]), and its validation.

use crate::conn::Conn;
use crate::error::Result;
use crate::transport::{ByCore, SendOp, SendWr, Transport};

use super::local::{debug_by_field, one_sided, Src};
use super::slice::{LocalSlice, RemoteAt};
use super::value::{imm_name, Op, Post};

/// A write (`rpma_write`, with an immediate value `rpma_write_with_imm`):
/// [`op::write`](fn@write), [`op::write_sg`](write_sg), [`op::write_inline`](write_inline),
/// [`op::write_empty`](write_empty), [`Conn::write`].
pub struct Write<'a, T: Transport> {
    dst: Option<RemoteAt<'a>>,
    src: Src<'a, T>,
    imm: Option<u32>,
}

debug_by_field!(Write { dst, src, imm });

impl<'a, T: Transport> Write<'a, T> {
    /// The Rust item that posts this write, as its errors name it.
    pub(super) const fn name(&self) -> &'static str {
        imm_name(self.imm, "Conn::write", "Conn::write(..).imm")
    }

    /// Validates the write against `conn` into the work request a backend posts.
    #[inline(always)]
    pub(super) fn work_request(self, conn: &Conn<T>, signaled: bool, wr_id: u64) -> Result<SendWr<'a, T>> {
        let (local, remote, len) = one_sided(self.name(), conn, self.src, self.dst, false)?;
        let sop = self.imm.map_or(SendOp::Write, SendOp::WriteImm);
        Ok(SendWr { op: sop, local, remote, len, signaled, wr_id, _by_core: ByCore::VALIDATED })
    }
}

impl<T: Transport, On> Op<Write<'_, T>, On> {
    /// Carries `imm` (host order; `rpma_write_with_imm`): consumes a receive buffer at the
    /// peer, whose completion is [`RecvRdmaWithImm`](crate::WcOpcode::RecvRdmaWithImm) with
    /// `imm_data == Some(imm)`.
    pub const fn imm(mut self, imm: u32) -> Self {
        self.kind.imm = Some(imm);
        self
    }
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

impl<T: Transport> Conn<T> {
    /// [`op::write`](fn@write) on this connection.
    ///
    /// ```ignore
    /// conn.write(remote.at(0), src.slice(0..10)).flags(CompletionFlags::ON_ERROR).post()?;
    /// ```
    #[doc(alias = "rpma_write")]
    #[doc(alias = "rpma_write_with_imm")]
    pub fn write<'c>(&'c self, dst: RemoteAt<'c>, src: LocalSlice<'c, T>) -> Post<'c, T, Write<'c, T>> {
        write(dst, src).on(self)
    }

    /// [`op::write_sg`](write_sg) on this connection.
    pub fn write_sg<'c>(&'c self, dst: RemoteAt<'c>, src: &'c [LocalSlice<'c, T>]) -> Post<'c, T, Write<'c, T>> {
        write_sg(dst, src).on(self)
    }

    /// [`op::write_inline`](write_inline) on this connection.
    pub fn write_inline<'c>(&'c self, dst: RemoteAt<'c>, src: &'c [u8]) -> Post<'c, T, Write<'c, T>> {
        write_inline(dst, src).on(self)
    }

    /// [`op::write_empty`](write_empty) on this connection.
    #[doc(alias = "rpma_write")]
    #[doc(alias = "rpma_write_with_imm")]
    pub fn write_empty(&self) -> Post<'_, T, Write<'_, T>> {
        write_empty().on(self)
    }
}

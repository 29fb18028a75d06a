//! The read (`rpma_read`): [`Read`], its constructors ([`read`], [`read_sg`], [`read_empty`]
//! and the same on a connection, [`Conn::read`]), and its validation.

use crate::conn::Conn;
use crate::error::Result;
use crate::transport::{ByCore, SendOp, SendWr, Transport};

use super::local::{debug_by_field, one_sided, Src};
use super::slice::{LocalSlice, RemoteAt};
use super::value::{Op, Post};

/// A read (`rpma_read`): [`op::read`](read), [`op::read_sg`](read_sg),
/// [`op::read_empty`](read_empty), [`Conn::read`].
pub struct Read<'a, T: Transport> {
    dst: Src<'a, T>,
    src: Option<RemoteAt<'a>>,
}

debug_by_field!(Read { dst, src });

impl<'a, T: Transport> Read<'a, T> {
    /// The Rust item that posts a read, as its errors name it.
    pub(super) const fn name(&self) -> &'static str {
        "Conn::read"
    }

    /// Validates the read against `conn` into the work request a backend posts.
    #[inline(always)]
    pub(super) fn work_request(self, conn: &Conn<T>, signaled: bool, wr_id: u64) -> Result<SendWr<'a, T>> {
        let (local, remote, len) = one_sided(self.name(), conn, self.dst, self.src, true)?;
        Ok(SendWr { op: SendOp::Read, local, remote, len, signaled, wr_id, _by_core: ByCore::VALIDATED })
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

impl<T: Transport> Conn<T> {
    /// [`op::read`](read) on this connection.
    ///
    /// ```ignore
    /// conn.read(dst.slice(0..4096), remote.at(0)).context(1).post()?;
    /// ```
    #[doc(alias = "rpma_read")]
    pub fn read<'c>(&'c self, dst: LocalSlice<'c, T>, src: RemoteAt<'c>) -> Post<'c, T, Read<'c, T>> {
        read(dst, src).on(self)
    }

    /// [`op::read_sg`](read_sg) on this connection.
    pub fn read_sg<'c>(&'c self, dst: &'c [LocalSlice<'c, T>], src: RemoteAt<'c>) -> Post<'c, T, Read<'c, T>> {
        read_sg(dst, src).on(self)
    }

    /// [`op::read_empty`](read_empty) on this connection.
    #[doc(alias = "rpma_read")]
    pub fn read_empty(&self) -> Post<'_, T, Read<'_, T>> {
        read_empty().on(self)
    }
}

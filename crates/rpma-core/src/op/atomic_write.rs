//! The atomic write (`rpma_atomic_write`): [`AtomicWrite`], its constructor ([`atomic_write`],
//! [`Conn::atomic_write`]), and its validation.

use crate::conn::Conn;
use crate::error::Result;
use crate::transport::{ByCore, Local, SendOp, SendWr, Transport};
use crate::validate::{self, RemoteAccess};

use super::slice::RemoteAt;
use super::value::{Op, Post};

/// An atomic write (`rpma_atomic_write`): [`op::atomic_write`](atomic_write),
/// [`Conn::atomic_write`].
#[derive(Debug)]
pub struct AtomicWrite<'a> {
    dst: RemoteAt<'a>,
    value: [u8; 8],
}

/// The Rust item that posts an atomic write, as its errors name it.
const NAME: &str = "Conn::atomic_write";

impl<'a> AtomicWrite<'a> {
    /// The Rust item that posts an atomic write, as its errors name it.
    pub(super) const fn name(&self) -> &'static str {
        NAME
    }

    /// Validates the atomic write (whatever the connection) into the work request a backend posts.
    #[inline(always)]
    pub(super) fn work_request<T: Transport>(self, _: &Conn<T>, signaled: bool, wr_id: u64) -> Result<SendWr<'a, T>> {
        validate::atomic_offset(NAME, self.dst.offset)?;
        let remote = validate::remote_buf(NAME, self.dst.mr.descriptor(), self.dst.offset, 8, RemoteAccess::Write)?;
        Ok(SendWr {
            op: SendOp::AtomicWrite(self.value),
            local: Local::None,
            remote: Some(remote),
            len: 8,
            signaled,
            wr_id,
            _by_core: ByCore::VALIDATED,
        })
    }
}

/// `rpma_atomic_write`: writes the 8 bytes `value` atomically at `dst` (an offset multiple of
/// [`MrRemote::ATOMIC_WRITE_ALIGNMENT`](crate::MrRemote::ATOMIC_WRITE_ALIGNMENT)): a native atomic write, or an
/// inline 8-byte write fenced behind earlier reads and flushes ("write data; flush;
/// atomic-write the commit pointer; flush").
#[doc(alias = "rpma_atomic_write")]
pub const fn atomic_write(dst: RemoteAt<'_>, value: [u8; 8]) -> Op<AtomicWrite<'_>> {
    Op::new(AtomicWrite { dst, value })
}

impl<T: Transport> Conn<T> {
    /// [`op::atomic_write`](atomic_write) on this connection.
    #[doc(alias = "rpma_atomic_write")]
    pub fn atomic_write<'c>(&'c self, dst: RemoteAt<'c>, value: [u8; 8]) -> Post<'c, T, AtomicWrite<'c>> {
        atomic_write(dst, value).on(self)
    }
}

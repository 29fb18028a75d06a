//! The flush (`rpma_flush`): [`Flush`], its constructor ([`flush`], [`Conn::flush`]), and its
//! validation, with the rule that a persistent flush needs the peer's word.

use crate::conn::Conn;
use crate::error::{Error, ErrorKind, Result};
use crate::transport::{ByCore, Local, SendOp, SendWr, Transport};
use crate::types::FlushType;
use crate::validate::{self, RemoteAccess};

use super::slice::{checked, RemoteSlice};
use super::value::{Op, Post};

/// A flush (`rpma_flush`): [`op::flush`](flush), [`Conn::flush`].
#[derive(Debug)]
pub struct Flush<'a> {
    dst: RemoteSlice<'a>,
    flush_type: FlushType,
}

/// The Rust item that posts a flush, as its errors name it.
const NAME: &str = "Conn::flush";

impl<'a> Flush<'a> {
    /// The Rust item that posts a flush, as its errors name it.
    pub(super) const fn name(&self) -> &'static str {
        NAME
    }

    /// Validates the flush against `conn` into the work request a backend posts.
    #[inline(always)]
    pub(super) fn work_request<T: Transport>(
        self,
        conn: &Conn<T>,
        signaled: bool,
        wr_id: u64,
    ) -> Result<SendWr<'a, T>> {
        if self.flush_type == FlushType::Persistent && !conn.direct_write_to_pmem() {
            return Err(Error::new(ErrorKind::Unsupported, NAME).with_detail(
                "the remote peer does not support direct write to PMem: a persistent flush needs the peer's \
                     configuration saying it does (Conn::apply_remote_peer_cfg with the PeerCfg it sent, \
                     PeerCfg::with_direct_write_to_pmem(true) on its side); flush to visibility otherwise",
            ));
        }
        let (offset, len) = checked(NAME, (self.dst.start, self.dst.end))?;
        let remote =
            validate::remote_buf(NAME, self.dst.mr.descriptor(), offset, len, RemoteAccess::Flush(self.flush_type))?;
        Ok(SendWr {
            op: SendOp::Flush(self.flush_type),
            local: Local::None,
            remote: Some(remote),
            len,
            signaled,
            wr_id,
            _by_core: ByCore::VALIDATED,
        })
    }
}

/// `rpma_flush`: makes the data previously written to `dst` visible
/// ([`FlushType::Visibility`]) or persistent ([`FlushType::Persistent`]) at the target.
#[doc(alias = "rpma_flush")]
pub const fn flush(dst: RemoteSlice<'_>, flush_type: FlushType) -> Op<Flush<'_>> {
    Op::new(Flush { dst, flush_type })
}

impl<T: Transport> Conn<T> {
    /// [`op::flush`](flush) on this connection.
    #[doc(alias = "rpma_flush")]
    pub fn flush<'c>(&'c self, dst: RemoteSlice<'c>, flush_type: FlushType) -> Post<'c, T, Flush<'c>> {
        flush(dst, flush_type).on(self)
    }
}

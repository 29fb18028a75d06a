//! What each operation transfers ([`Read`], [`Write`], [`AtomicWrite`], [`Flush`], [`Send`],
//! [`Recv`]) and the one validation of its arguments into the work request a backend posts.
//!
//! A kind borrows the memory it names (registered pieces, inline bytes, the remote region's
//! descriptor), never a connection: the connection it is posted on is given to the validation.

use std::fmt;
use std::sync::Arc;

use crate::conn::{Conn, OpLimits};
use crate::error::{Error, ErrorKind, Result};
use crate::peer::PeerInner;
use crate::transport::{ByCore, Local, RecvWr, SendOp, SendWr, Transport};
use crate::types::FlushType;
use crate::validate::{self, RemoteAccess};

use super::local::{Rules, Src};
use super::slice::{checked, RemoteAt, RemoteSlice};

/// A read (`rpma_read`): [`op::read`](super::read), [`op::read_sg`](super::read_sg),
/// [`op::read_empty`](super::read_empty).
pub struct Read<'a, T: Transport> {
    pub(super) dst: Src<'a, T>,
    pub(super) src: Option<RemoteAt<'a>>,
}

/// A write (`rpma_write`, with an immediate value `rpma_write_with_imm`):
/// [`op::write`](super::write), [`op::write_sg`](super::write_sg),
/// [`op::write_inline`](super::write_inline), [`op::write_empty`](super::write_empty).
pub struct Write<'a, T: Transport> {
    pub(super) dst: Option<RemoteAt<'a>>,
    pub(super) src: Src<'a, T>,
    pub(super) imm: Option<u32>,
}

/// An atomic write (`rpma_atomic_write`): [`op::atomic_write`](super::atomic_write).
#[derive(Debug)]
pub struct AtomicWrite<'a> {
    pub(super) dst: RemoteAt<'a>,
    pub(super) value: [u8; 8],
}

/// A flush (`rpma_flush`): [`op::flush`](super::flush).
#[derive(Debug)]
pub struct Flush<'a> {
    pub(super) dst: RemoteSlice<'a>,
    pub(super) flush_type: FlushType,
}

/// A send (`rpma_send`, with an immediate value `rpma_send_with_imm`):
/// [`op::send`](super::send), [`op::send_sg`](super::send_sg),
/// [`op::send_inline`](super::send_inline), [`op::send_empty`](super::send_empty).
pub struct Send<'a, T: Transport> {
    pub(super) src: Src<'a, T>,
    pub(super) imm: Option<u32>,
}

/// A receive buffer (`rpma_recv`, `rpma_srq_recv`, `rpma_conn_req_recv`):
/// [`op::recv`](super::recv), [`op::recv_sg`](super::recv_sg),
/// [`op::recv_empty`](super::recv_empty).
pub struct Recv<'a, T: Transport> {
    pub(super) dst: Src<'a, T>,
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
debug_by_field!(Read { dst, src }, Write { dst, src, imm }, Send { src, imm }, Recv { dst });

pub(super) mod sealed {
    /// Implemented by this module's kinds only.
    pub trait Sealed {}
}

impl<T: Transport> sealed::Sealed for Read<'_, T> {}
impl<T: Transport> sealed::Sealed for Write<'_, T> {}
impl sealed::Sealed for AtomicWrite<'_> {}
impl sealed::Sealed for Flush<'_> {}
impl<T: Transport> sealed::Sealed for Send<'_, T> {}
impl<T: Transport> sealed::Sealed for Recv<'_, T> {}

/// An operation of a connection's send queue: [`Read`], [`Write`], [`AtomicWrite`],
/// [`Flush`], [`Send`] (sealed). What [`Post`](super::Post) and [`Batch`](super::Batch) take.
pub trait SendKind<'a, T: Transport>: sealed::Sealed {
    /// The operation's name as its errors give it ([`Error::op`](crate::Error::op)): the Rust
    /// item that posts it (e.g. `"Conn::write(..).imm"`, a write with `.imm(..)`).
    fn op_name(&self) -> &'static str;
    #[doc(hidden)]
    fn work_request(self, conn: &Conn<T>, signaled: bool, wr_id: u64) -> Result<SendWr<'a, T>>;
}

/// The rules of a send-queue operation's local side on `conn`.
#[inline(always)]
fn rules<T: Transport>(conn: &Conn<T>, read: bool) -> Rules<'_> {
    Rules { device_writes: read, read, limits: conn.limits() }
}

impl<'a, T: Transport> SendKind<'a, T> for Read<'a, T> {
    fn op_name(&self) -> &'static str {
        "Conn::read"
    }

    #[inline(always)]
    fn work_request(self, conn: &Conn<T>, signaled: bool, wr_id: u64) -> Result<SendWr<'a, T>> {
        const OP: &str = "Conn::read";
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

impl<'a, T: Transport> SendKind<'a, T> for Write<'a, T> {
    fn op_name(&self) -> &'static str {
        if self.imm.is_some() {
            "Conn::write(..).imm"
        } else {
            "Conn::write"
        }
    }

    #[inline(always)]
    fn work_request(self, conn: &Conn<T>, signaled: bool, wr_id: u64) -> Result<SendWr<'a, T>> {
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

impl<'a, T: Transport> SendKind<'a, T> for AtomicWrite<'a> {
    fn op_name(&self) -> &'static str {
        "Conn::atomic_write"
    }

    #[inline(always)]
    fn work_request(self, _conn: &Conn<T>, signaled: bool, wr_id: u64) -> Result<SendWr<'a, T>> {
        const OP: &str = "Conn::atomic_write";
        validate::atomic_offset(OP, self.dst.offset)?;
        let remote = validate::remote_buf(OP, self.dst.mr, self.dst.offset, 8, RemoteAccess::Write)?;
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

impl<'a, T: Transport> SendKind<'a, T> for Flush<'a> {
    fn op_name(&self) -> &'static str {
        "Conn::flush"
    }

    #[inline(always)]
    fn work_request(self, conn: &Conn<T>, signaled: bool, wr_id: u64) -> Result<SendWr<'a, T>> {
        const OP: &str = "Conn::flush";
        if self.flush_type == FlushType::Persistent && !conn.direct_write_to_pmem() {
            return Err(Error::new(ErrorKind::Unsupported, OP).with_detail(
                "the remote peer does not support direct write to PMem: a persistent flush needs the peer's \
                     configuration saying it does (Conn::apply_remote_peer_cfg with the PeerCfg it sent, \
                     PeerCfg::with_direct_write_to_pmem(true) on its side); flush to visibility otherwise",
            ));
        }
        let (offset, len) = checked(OP, (self.dst.start, self.dst.end))?;
        let remote = validate::remote_buf(OP, self.dst.mr, offset, len, RemoteAccess::Flush(self.flush_type))?;
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

impl<'a, T: Transport> SendKind<'a, T> for Send<'a, T> {
    fn op_name(&self) -> &'static str {
        if self.imm.is_some() {
            "Conn::send(..).imm"
        } else {
            "Conn::send"
        }
    }

    #[inline(always)]
    fn work_request(self, conn: &Conn<T>, signaled: bool, wr_id: u64) -> Result<SendWr<'a, T>> {
        let op = SendKind::<T>::op_name(&self);
        let (local, len) = self.src.validate(op, &conn.peer().inner, rules(conn, false))?;
        validate::msg_len(op, conn.limits().max_msg, len)?;
        let sop = self.imm.map_or(SendOp::Send, SendOp::SendImm);
        Ok(SendWr { op: sop, local, remote: None, len, signaled, wr_id, _by_core: ByCore::VALIDATED })
    }
}

impl<'a, T: Transport> Recv<'a, T> {
    /// Validates the buffer against a receive queue's `limits` and `peer` into the work request
    /// a backend posts (`op` names the call: `rpma_recv`, `rpma_srq_recv`, `rpma_conn_req_recv`).
    #[inline(always)]
    pub(super) fn work_request(
        &self,
        op: &'static str,
        limits: &OpLimits,
        peer: &Arc<PeerInner<T>>,
        wr_id: u64,
    ) -> Result<RecvWr<'a, T>> {
        let (local, len) = self.dst.validate(op, peer, Rules { device_writes: true, read: false, limits })?;
        validate::msg_len(op, limits.max_msg, len)?;
        Ok(RecvWr { local, wr_id, _by_core: ByCore::VALIDATED })
    }
}

//! The send (`rpma_send`, `rpma_send_with_imm`): the message kind [`Message`], its
//! constructors ([`send`], [`send_sg`], [`send_inline`], [`send_empty`] and the same on a
//! connection, [`Conn::send`]), its immediate value ([`Op::imm`]), and its validation.

use crate::conn::Conn;
use crate::error::Result;
use crate::transport::{ByCore, SendOp, SendWr, Transport};
use crate::validate;

use super::local::{debug_by_field, Rules, Src};
use super::slice::LocalSlice;
use super::value::{imm_name, Op, Post};

/// A message sent (`rpma_send`, with an immediate value `rpma_send_with_imm`):
/// [`op::send`](send), [`op::send_sg`](send_sg), [`op::send_inline`](send_inline),
/// [`op::send_empty`](send_empty), [`Conn::send`].
pub struct Message<'a, T: Transport> {
    src: Src<'a, T>,
    imm: Option<u32>,
}

debug_by_field!(Message { src, imm });

impl<'a, T: Transport> Message<'a, T> {
    /// The Rust item that posts this message, as its errors name it.
    pub(super) const fn name(&self) -> &'static str {
        imm_name(self.imm, "Conn::send", "Conn::send(..).imm")
    }

    /// Validates the message against `conn` into the work request a backend posts.
    #[inline(always)]
    pub(super) fn work_request(self, conn: &Conn<T>, signaled: bool, wr_id: u64) -> Result<SendWr<'a, T>> {
        let op = self.name();
        let rules = Rules { device_writes: false, read: false, limits: conn.limits() };
        let (local, len) = self.src.validate(op, &conn.peer().inner, rules)?;
        validate::msg_len(op, conn.limits().max_msg, len)?;
        let sop = self.imm.map_or(SendOp::Send, SendOp::SendImm);
        Ok(SendWr { op: sop, local, remote: None, len, signaled, wr_id, _by_core: ByCore::VALIDATED })
    }
}

impl<T: Transport, On> Op<Message<'_, T>, On> {
    /// Carries `imm` (host order; `rpma_send_with_imm`).
    pub const fn imm(mut self, imm: u32) -> Self {
        self.kind.imm = Some(imm);
        self
    }
}

/// `rpma_send`: sends `src`; needs a receive posted at the peer. With [`.imm(..)`](Op::imm),
/// `rpma_send_with_imm`.
#[doc(alias = "rpma_send")]
#[doc(alias = "rpma_send_with_imm")]
pub const fn send<T: Transport>(src: LocalSlice<'_, T>) -> Op<Message<'_, T>> {
    Op::new(Message { src: Src::One(src), imm: None })
}

/// A gathering send: one message made of the pieces of `src`, in order. At most the
/// connection's [`max_sge`](crate::ConnCfg::with_max_sge) pieces, none empty.
pub const fn send_sg<'a, T: Transport>(src: &'a [LocalSlice<'a, T>]) -> Op<Message<'a, T>> {
    Op::new(Message { src: Src::Sg(src), imm: None })
}

/// An inline send: `src` is plain memory, copied into the work request when it is posted (no
/// registration). At most the connection's [`max_inline`](crate::ConnCfg::with_max_inline)
/// bytes, at least one.
pub const fn send_inline<T: Transport>(src: &[u8]) -> Op<Message<'_, T>> {
    Op::new(Message { src: Src::Inline(src), imm: None })
}

/// An empty message (`rpma_send` with no region).
#[doc(alias = "rpma_send")]
pub const fn send_empty<'a, T: Transport>() -> Op<Message<'a, T>> {
    Op::new(Message { src: Src::None, imm: None })
}

impl<T: Transport> Conn<T> {
    /// [`op::send`](send) on this connection.
    #[doc(alias = "rpma_send")]
    #[doc(alias = "rpma_send_with_imm")]
    pub fn send<'c>(&'c self, src: LocalSlice<'c, T>) -> Post<'c, T, Message<'c, T>> {
        send(src).on(self)
    }

    /// [`op::send_sg`](send_sg) on this connection.
    pub fn send_sg<'c>(&'c self, src: &'c [LocalSlice<'c, T>]) -> Post<'c, T, Message<'c, T>> {
        send_sg(src).on(self)
    }

    /// [`op::send_inline`](send_inline) on this connection.
    pub fn send_inline<'c>(&'c self, src: &'c [u8]) -> Post<'c, T, Message<'c, T>> {
        send_inline(src).on(self)
    }

    /// [`op::send_empty`](send_empty) on this connection.
    #[doc(alias = "rpma_send")]
    #[doc(alias = "rpma_send_with_imm")]
    pub fn send_empty(&self) -> Post<'_, T, Message<'_, T>> {
        send_empty().on(self)
    }
}

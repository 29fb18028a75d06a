//! The operation value: [`Op`], what to transfer and how to complete it, with its options
//! (`.flags(..)`, `.context(..)`), defined here once for every kind and for an operation bound
//! to the connection it goes to ([`Post`]: `conn.write(..)` is `op::write(..)` bound to
//! `conn`).

use std::fmt;

use crate::conn::Conn;
use crate::types::CompletionFlags;

pub(super) mod sealed {
    use crate::types::CompletionFlags;

    /// Implemented by the kinds of `rpma::op` only. `Flags` is what `.flags(..)` takes:
    /// `CompletionFlags` for an operation of the send queue, [`NoFlags`](super::NoFlags) for a
    /// receive.
    pub trait Sealed {
        /// What `Op::flags` takes.
        type Flags: Copy;
        /// `flags` as the completion flags the operation stores.
        fn completion_flags(flags: Self::Flags) -> CompletionFlags;
    }
}

/// The completion flags of a receive: there are none (a receive always completes), and no
/// value of this type exists, so `op::recv(..).flags(..)` does not compile and a receive does
/// not meet the bound `Operation<'a, T, Flags = CompletionFlags>` of the send queue's calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoFlags {}

/// One operation: its kind `K` ([`Read`](super::Read), [`Write`](super::Write),
/// [`AtomicWrite`](super::AtomicWrite), [`Flush`](super::Flush), [`Message`](super::Message),
/// [`Recv`](super::Recv), or any of them as [`AnyKind`](super::AnyKind)), the memory it names,
/// its completion flags and its context; `On` is where it goes: nothing yet (`()`, made by the
/// functions of [`rpma::op`](super)) or the connection that made it ([`Post`], made by
/// `conn.write(..)` and the other builders).
///
/// Made without any check; posting validates every argument against the connection it is
/// posted on (the rules and errors of [`Conn::post`]). It borrows its regions for as long as it
/// lives: a region cannot be changed through `&mut` or deregistered while an operation naming
/// it exists.
///
/// Defaults: [`CompletionFlags::ALWAYS`] (a completion always appears) and context 0. Only a
/// write or a send takes an immediate value (`.imm(..)`), only send-queue operations take
/// completion flags: on a read, `op::read(dst, src).imm(1)` does not compile, nor does
/// `op::recv(dst).flags(..)`.
#[must_use = "an operation does nothing until it is posted (Conn::post, or .post() on a Post)"]
pub struct Op<K, On = ()> {
    pub(super) kind: K,
    pub(super) flags: CompletionFlags,
    pub(super) context: u64,
    pub(super) on: On,
}

/// An operation on a connection's send queue, ready to post: the connection and the operation
/// (`conn.write(remote.at(0), src.slice(0..8))`). Chain options, then `.post()`, or push it into
/// a [`Batch`](super::Batch). It borrows the connection, so it lives on the connection's
/// thread.
pub type Post<'c, T, K> = Op<K, &'c Conn<T>>;

impl<K: fmt::Debug, On> fmt::Debug for Op<K, On> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Op")
            .field("kind", &self.kind)
            .field("flags", &self.flags)
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}

impl<K> Op<K> {
    pub(super) const fn new(kind: K) -> Self {
        Self { kind, flags: CompletionFlags::ALWAYS, context: 0, on: () }
    }

    /// The operation bound to `on`, where it goes.
    pub(super) fn on<On>(self, on: On) -> Op<K, On> {
        Op { kind: self.kind, flags: self.flags, context: self.context, on }
    }
}

impl<K, On> Op<K, On> {
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

    /// The operation apart from where it goes.
    pub fn into_op(self) -> Op<K> {
        Op { kind: self.kind, flags: self.flags, context: self.context, on: () }
    }
}

impl<K: sealed::Sealed, On> Op<K, On> {
    /// When a completion appears: [`CompletionFlags::ALWAYS`] (the default) or
    /// [`CompletionFlags::ON_ERROR`] (unsignaled: only a failure completes). A receive takes
    /// none ([`NoFlags`]); in an [`AnyKind`](super::AnyKind) a receive ignores them.
    #[inline(always)]
    pub fn flags(mut self, flags: K::Flags) -> Self {
        self.flags = K::completion_flags(flags);
        self
    }
}

/// The name of an operation that may carry an immediate value (a write, a send), as its errors
/// give it: `plain`, or `with_imm` when it carries one.
#[inline(always)]
pub(super) const fn imm_name(imm: Option<u32>, plain: &'static str, with_imm: &'static str) -> &'static str {
    if imm.is_some() {
        with_imm
    } else {
        plain
    }
}

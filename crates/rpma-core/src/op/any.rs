//! Any kind of operation as one type, [`AnyKind`]: for code that holds operations of several
//! kinds in one place (a queue of them, a future that posts whichever it was given, as
//! rpma-tokio's does). Validation and posting are the kinds' own: an `Op<AnyKind>` posts
//! exactly as the `Op` it was made from.

use std::fmt;

use crate::transport::Transport;
use crate::types::CompletionFlags;

use super::kind::{sealed::Sealed, AtomicWrite, Flush, Read, Recv, Send, Write};
use super::value::Op;

/// One operation of any kind (`Op::from(op::write(..))`, or `.into()`).
pub enum AnyKind<'a, T: Transport> {
    /// A read.
    Read(Read<'a, T>),
    /// A write.
    Write(Write<'a, T>),
    /// An atomic write.
    AtomicWrite(AtomicWrite<'a>),
    /// A flush.
    Flush(Flush<'a>),
    /// A send.
    Send(Send<'a, T>),
    /// A receive.
    Recv(Recv<'a, T>),
}

impl<T: Transport> fmt::Debug for AnyKind<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read(k) => k.fmt(f),
            Self::Write(k) => k.fmt(f),
            Self::AtomicWrite(k) => k.fmt(f),
            Self::Flush(k) => k.fmt(f),
            Self::Send(k) => k.fmt(f),
            Self::Recv(k) => k.fmt(f),
        }
    }
}

impl<T: Transport> Sealed for AnyKind<'_, T> {}

macro_rules! from_kind {
    ($($variant:ident: $ty:ty),*) => {$(
        impl<'a, T: Transport> From<Op<$ty>> for Op<AnyKind<'a, T>> {
            fn from(op: Op<$ty>) -> Self {
                Op { kind: AnyKind::$variant(op.kind), flags: op.flags, context: op.context }
            }
        }
    )*};
}
from_kind!(
    Read: Read<'a, T>,
    Write: Write<'a, T>,
    AtomicWrite: AtomicWrite<'a>,
    Flush: Flush<'a>,
    Send: Send<'a, T>,
    Recv: Recv<'a, T>
);

impl<T: Transport> Op<AnyKind<'_, T>> {
    /// The completion flags ([`Op::flags`]); a receive has none (it always completes) and
    /// ignores them.
    pub const fn flags(mut self, flags: CompletionFlags) -> Self {
        self.flags = flags;
        self
    }
}

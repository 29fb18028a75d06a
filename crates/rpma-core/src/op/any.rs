//! Any kind of operation as one type, [`AnyKind`]: for code that holds operations of several
//! kinds in one place (a queue of them, a future that posts whichever it was given, as
//! rpma-tokio's does). Validation and posting are the kinds' own: an `Op<AnyKind>` posts
//! exactly as the `Op` it was made from.

use std::fmt;

use crate::transport::Transport;

use super::atomic_write::AtomicWrite;
use super::flush::Flush;
use super::read::Read;
use super::recv::Recv;
use super::send::Message;
use super::value::Op;
use super::write::Write;

/// One operation of any kind (`Op::from(op::write(..))`, or `.into()`). It takes completion
/// flags; a receive in it ignores them (it always completes).
pub enum AnyKind<'a, T: Transport> {
    /// A read.
    Read(Read<'a, T>),
    /// A write.
    Write(Write<'a, T>),
    /// An atomic write.
    AtomicWrite(AtomicWrite<'a>),
    /// A flush.
    Flush(Flush<'a>),
    /// A message sent.
    Message(Message<'a, T>),
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
            Self::Message(k) => k.fmt(f),
            Self::Recv(k) => k.fmt(f),
        }
    }
}

macro_rules! from_kind {
    ($($variant:ident: $ty:ty),*) => {$(
        impl<'a, T: Transport> From<Op<$ty>> for Op<AnyKind<'a, T>> {
            fn from(op: Op<$ty>) -> Self {
                Op { kind: AnyKind::$variant(op.kind), flags: op.flags, context: op.context, on: () }
            }
        }
    )*};
}
from_kind!(
    Read: Read<'a, T>,
    Write: Write<'a, T>,
    AtomicWrite: AtomicWrite<'a>,
    Flush: Flush<'a>,
    Message: Message<'a, T>,
    Recv: Recv<'a, T>
);

//! Data-path operations as small builders: what to transfer is given when the operation is
//! made (`conn.write(remote.at(0), src.slice(0..8))`), how to complete it by chained options
//! (`.flags(..)`, `.context(..)`, `.imm(..)`), and `.post()` validates every argument and posts
//! it. Nothing is allocated and nothing is copied (except an inline operation's bytes, by the
//! device driver, at post time): the device reads and writes the registered memory in place.
//!
//! One file a concept: the local and remote sides of an operation ([`slice`]), what the local
//! side may be ([`local`]: one piece, several, inline bytes), send-queue operations ([`send`]),
//! receives ([`recv`]) and batches of either posted with one doorbell ([`batch`]).

mod batch;
mod local;
mod recv;
mod send;
mod slice;

pub use batch::{Batch, RecvBatch, DEFAULT_BATCH};
pub use recv::Recv;
pub use send::{AtomicWrite, Flush, Post, Read, Send, SendKind, Write};
pub use slice::{LocalSlice, RemoteAt, RemoteSlice};

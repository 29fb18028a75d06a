//! Data-path operations. An operation is a value, [`Op`]: what to transfer, made by this
//! module's functions (`op::write(remote.at(0), src.slice(0..8))`), and how to complete it,
//! by chained options (`.flags(..)`, `.context(..)`, `.imm(..)` on writes and sends). It
//! borrows the memory it names, never a connection: [`Conn::post`](crate::Conn::post) (or a
//! [`Batch`], [`Srq::post`](crate::Srq::post), rpma-tokio's `AsyncConn::post`, the C ABI's
//! `rpma_write`...) validates every argument against the connection and posts it. The
//! builders on the connection (`conn.write(dst, src).context(1).post()`, [`Post`],
//! [`PostRecv`]) are the same operation written from the connection.
//!
//! Nothing is allocated and nothing is copied (except an inline operation's bytes, by the
//! device driver, at post time): the device reads and writes the registered memory in place.
//!
//! One file a concept: the local and remote sides of an operation (`slice`), what the local
//! side may be (`local`: one piece, several, inline bytes), the kinds and their validation
//! (`kind`), the operation value and its constructors (`value`), any kind as one type
//! (`any`), what posting one does (`operation`), the builders from a connection (`send`, `recv`) and batches posted with one
//! doorbell (`batch`).

mod any;
mod batch;
mod kind;
mod local;
mod operation;
mod recv;
mod send;
mod slice;
mod value;

pub use any::AnyKind;
pub use batch::{Batch, RecvBatch, DEFAULT_BATCH};
pub use kind::{AtomicWrite, Flush, Read, Recv, Send, SendKind, Write};
pub use operation::Operation;
pub use recv::PostRecv;
pub use send::Post;
pub use slice::{LocalSlice, RemoteAt, RemoteSlice};
pub use value::{
    atomic_write, flush, read, read_empty, read_sg, recv, recv_empty, recv_sg, send, send_empty, send_inline, send_sg,
    write, write_empty, write_inline, write_sg, Op, SendQueue,
};

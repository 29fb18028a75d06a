//! Data-path operations. An operation is a value, [`Op`]: what to transfer, made by this
//! module's functions (`op::write(remote.at(0), src.slice(0..8))`), and how to complete it,
//! by chained options (`.flags(..)`, `.context(..)`, `.imm(..)` on writes and sends). It
//! borrows the memory it names, never a connection: [`Conn::post`](crate::Conn::post) (or a
//! [`Batch`], [`Srq::post`](crate::Srq::post), rpma-tokio's `AsyncConn::post`, the C ABI's
//! `rpma_write`...) validates every argument against the connection and posts it. The
//! builders on the connection (`conn.write(dst, src).context(1).post()`) make the same value
//! bound to the connection ([`Post`], [`PostRecv`]): the same options, and `.post()`.
//!
//! Nothing is allocated and nothing is copied (except an inline operation's bytes, by the
//! device driver, at post time): the device reads and writes the registered memory in place.
//!
//! One file a kind, each with its type, its constructors (here and on the connection) and its
//! validation: `read`, `write`, `atomic_write`, `flush`, `send` (the kind [`Message`]),
//! `recv` (with the receive queues). Beside them: the value and its options (`value`), the
//! one trait of the kinds, [`Operation`], and the calls that post (`operation`), any kind as
//! one type (`any`), batches posted with one doorbell (`batch`), the local and remote sides
//! of an operation (`slice`) and what the local side may be (`local`).

mod any;
mod atomic_write;
mod batch;
mod flush;
mod local;
mod operation;
mod read;
mod recv;
mod send;
mod slice;
mod value;
mod write;

pub use any::AnyKind;
pub use atomic_write::{atomic_write, AtomicWrite};
pub use batch::{Batch, RecvBatch, DEFAULT_BATCH};
pub use flush::{flush, Flush};
pub use operation::Operation;
pub use read::{read, read_empty, read_sg, Read};
pub use recv::{recv, recv_empty, recv_sg, PostRecv, Recv, RecvQueue};
pub use send::{send, send_empty, send_inline, send_sg, Message};
pub use slice::{LocalSlice, RemoteAt, RemoteSlice};
pub use value::{NoFlags, Op, Post};
pub use write::{write, write_empty, write_inline, write_sg, Write};

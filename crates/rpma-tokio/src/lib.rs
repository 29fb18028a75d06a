//! # rpma-tokio: rpma-rs on tokio
//!
//! rpma-rs's waits and operations as futures on a tokio runtime (with IO enabled): an
//! endpoint's connection requests ([`AsyncEp::accept`]), a connection's establishment
//! ([`connect`]), and on an [`AsyncConn`]:
//!
//! - **operations**, each a future ([`OpFuture`]) resolving to *its own* completion:
//!   `conn.write(remote.at(0), src.slice(0..8)).await?`, or any operation value
//!   ([`rpma_core::op`], [`Op`](rpma_core::Op)) with
//!   [`AsyncConn::post`] (read, write, atomic write, flush, send, receive; scatter-gather,
//!   inline, immediate data). Many may be in flight at once (`tokio::join!`, several tasks);
//!   a full send queue makes the next one wait for a completion (**backpressure**), it is not
//!   an error. Unsignaled operations ([`AsyncConn::post_unsignaled`]) have no completion to
//!   await: a later signaled one retires them.
//! - **completions** of operations posted otherwise ([`AsyncConn::with_conn`]):
//!   [`AsyncConn::next_wc`], or as a [`Stream`](futures_core::Stream)
//!   ([`AsyncConn::completions`]);
//! - **events**: [`AsyncConn::next_event`], or both with [`AsyncConn::next`].
//!
//! ```
//! use rpma::mock::{ConnReq, Device, Ep, MockFabric, Peer};
//! use rpma::tokio::{connect, AsyncEp};
//! use rpma::{op, ContextType, FlushType, MrRemote, Usage};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> rpma::Result<()> {
//! let fabric = MockFabric::new();
//! let peer = Peer::new(&Device::lookup(&fabric, "127.0.0.1", ContextType::Local)?)?;
//! let target = peer.alloc_mr(4096, Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY)?;
//! let mut ep = AsyncEp::new(Ep::listen(&peer, "127.0.0.1", "7207")?)?;
//! let req = ConnReq::new(&peer, "127.0.0.1", "7207", None)?;
//! let server = async { connect(ep.accept(None).await?, Some(&target.descriptor())).await };
//! let (conn, _server) = tokio::try_join!(connect(req, None), server)?;
//! let remote = conn.with_conn(|c| MrRemote::from_descriptor(c.private_data()))?;
//!
//! let src = peer.alloc_mr(4096, Usage::WRITE_SRC)?;
//! src.write(0, b"log record")?;
//! // Two operations in flight; each future resolves to its own completion.
//! let (w, f) = tokio::join!(
//!     conn.write(remote.at(0), src.slice(0..10)),
//!     conn.post(op::flush(remote.slice(0..10), FlushType::Visibility)),
//! );
//! assert!(w?.is_success() && f?.is_success());
//! assert_eq!(target.to_vec(0, 10)?, b"log record");
//! # Ok(()) }
//! ```
//!
//! Each wait watches an fd rpma-rs already has (CM event channel, completion channel, also a
//! shared one) with `tokio::io::unix::AsyncFd` and takes what is pending with the non-blocking
//! call: no thread is blocked, no busy polling. An operation that completes while it is posted
//! (the mock's one-sided operations) returns without sleeping at all.
//!
//! An [`AsyncConn`] is `Send + Sync`; its methods take `&self` and their futures are `Send`:
//! they run in `tokio::spawn` on a multi-threaded runtime.
//!
//! **Cancellation**: dropping any future of this crate at any await point is safe and leaves
//! the connection or endpoint usable. A wait takes nothing from a queue until it returns it.
//! An operation's future dropped before it posted posts nothing; dropped after, the operation
//! goes on: its memory stays registered and allocated until the completion arrives (the
//! backend holds the regions of every work request until it is retired, docs/memory.md rule
//! V4), and the completion is discarded then (its dispatcher slot is freed, never reused
//! before). docs/async.md has the rules and the tests.
//!
//! **Timeouts**: [`AsyncConn::set_timeout`] and [`AsyncEp::set_timeout`] limit every wait of
//! the object, [`connect_timeout`] the establishment; or wrap any future in
//! `tokio::time::timeout`. The synchronous API has `*_timeout` variants of every wait
//! (`Conn::next_event_timeout`, ...).
#![forbid(unsafe_code)]

mod channel;
mod conn;
mod dispatch;
mod ep;
mod fd;
mod op_future;
mod post;
mod slot;
mod state;
mod stream;
mod timeout;
mod wait;

pub use conn::{connect, connect_timeout, AsyncConn, Next};
pub use dispatch::TOKEN_TAG;
pub use ep::AsyncEp;
pub use op_future::OpFuture;
pub use stream::Completions;

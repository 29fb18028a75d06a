//! # rpma-tokio: rpma-rs on tokio
//!
//! The waits of rpma-rs as futures on a tokio runtime (with IO enabled): an endpoint's connection
//! requests ([`AsyncEp::accept`]), a connection's establishment ([`connect`]), its events
//! ([`AsyncConn::next_event`]) and its completions ([`AsyncConn::next_wc`], or both with
//! [`AsyncConn::next`]). Each watches the fd rpma-rs already has (CM event channel, completion
//! channel) with `tokio::io::unix::AsyncFd` and takes what is pending with the non-blocking call:
//! no thread is blocked, no busy polling.
//!
//! Operations are posted as in synchronous code, through [`AsyncConn::conn`]; their completions
//! are awaited here. A connection is `Send` but not `Sync`, so the types here take `&mut self`:
//! their futures are `Send` and may run in `tokio::spawn` on a multi-threaded runtime.
//!
//! **Cancellation**: dropping any future of this crate at any await point is safe and leaves
//! the connection or endpoint usable: nothing is taken from a queue until the future returns it
//! (an event or completion that arrives meanwhile is taken by the next call). Memory an
//! operation uses stays valid until its completion whatever futures are dropped: the operation
//! borrows its regions only while it is posted, and the backend keeps them registered and
//! allocated until the work request is retired (docs/memory.md, rule V4), so dropping a region
//! while its operation is in flight defers its release instead of freeing memory the NIC uses.
//!
//! Timeouts: wrap any future in `tokio::time::timeout`; the synchronous API has `*_timeout`
//! variants of every wait (`Conn::next_event_timeout`, ...).
//!
//! Not yet here (issue 14): a future per posted operation with send-queue backpressure,
//! completions as a `Stream`, shared completion channels.
#![forbid(unsafe_code)]

mod conn;
mod ep;
mod fd;

pub use conn::{connect, AsyncConn, Next};
pub use ep::AsyncEp;

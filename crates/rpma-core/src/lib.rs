//! # rpma-core: librpma's API in safe Rust, over any transport
//!
//! This crate holds the public API of rpma-rs (peers, memory regions, endpoints, connection
//! requests, connections, completion queues, shared receive queues, configurations, logging and
//! error codes), the [`Transport`] trait a backend implements, and **all argument validation**:
//! every ERRORS rule of librpma 1.3 that does not need a provider is checked here, once, before a
//! backend is called. It is `#![forbid(unsafe_code)]`.
//!
//! Users normally depend on the facade crate `rpma`, which picks a backend by Cargo feature
//! (`mock`: the in-memory loopback of `rpma-mock`; `verbs`: libibverbs + librdmacm). Every type
//! here is generic over the transport `T` and calls it through static dispatch.
//!
//! ## Memory safety
//! A registered memory region is written by the device or by a remote peer while Rust code runs.
//! So:
//! - a [`MrLocal`] **owns** its bytes (allocated by the backend: heap or page-aligned), and no
//!   safe function hands out a `&[u8]` or `&mut [u8]` to them: access is by copy
//!   ([`MrLocal::read`], [`MrLocal::write`], [`MrLocal::to_vec`]);
//! - dropping a region deregisters it *before* its bytes are freed; after deregistration the
//!   device can no longer touch them (an operation still in flight fails with an error
//!   completion instead);
//! - a post hands the backend an `Arc` of the region, which a real backend keeps until the work
//!   request is retired, so the registration stays alive while operations use it;
//! - a [`Peer`] is kept alive by every object made from it; an [`Srq`] by every connection
//!   using it.
//!
//! A zero-copy view of registered bytes is inherently `unsafe` (the rules are those of memory
//! shared with another process) and lives outside the forbid-unsafe crates, in a backend crate.
//!
//! ## Untrusted peers
//! Descriptors and private data come from the remote peer. Decoding validates sizes; every
//! operation checks offsets and lengths against the size the remote descriptor claims and the
//! access it claims to grant ([`ErrorKind::InvalidInput`] before posting); the responder (hardware,
//! or the mock) checks the real registration and reports violations as error completions.
//!
//! ## Thread safety
//! docs/semantics.md#thread-safety: peers, regions, shared receive queues and configurations are
//! `Send + Sync`. A connection, a connection request and an endpoint are used by one thread at a
//! time (`Send`, not `Sync`), and a [`Cq`] borrowed from a connection stays on its thread: so
//! posting and polling take no lock and count no reference (librpma let threads share a
//! connection, at the price of locks in every post and poll; docs/decisions.md #26). Several
//! operations go down with one doorbell as a [`Batch`].
//!
//! ## Decisions on librpma's man-page/code discrepancies
//! See `docs/decisions.md` in the repository; each is also noted at the function concerned.
#![forbid(unsafe_code)]

// First: its macro, `rpma_log!`, is in scope in the modules declared after it.
#[macro_use]
pub mod logging;

mod conn;
mod cq_trace;
pub mod descriptor;
mod error;
pub mod librpma;
mod mr;
mod offer;
pub mod op;
mod peer;
pub mod runtime;
mod trace;
pub mod transport;
mod types;
mod wc;
// Not part of the API: the argument checks run by every public call, public only so that the
// criterion benchmark can time them alone (benches/data_path.rs).
#[doc(hidden)]
pub mod validate;

pub use conn::{Conn, ConnCfg, ConnReq, Cq, Ep, Srq, SrqCfg};
pub use error::{Error, ErrorKind, Result};
pub use mr::{MrLocal, MrRemote};
pub use offer::Offer;
pub use op::{Batch, LocalSlice, Op, Post, PostRecv, RecvBatch, RemoteAt, RemoteSlice};
pub use peer::{Device, Peer, PeerCfg};
#[cfg(feature = "tracing")]
pub use trace::ConnStats;
pub use transport::{Capabilities, Transport};
pub use types::{Advice, CompletionFlags, ConnEvent, ContextType, FlushType, Usage};
pub use wc::{Wc, WcOpcode, WcStatus, WC_LAYOUT};

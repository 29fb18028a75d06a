//! # rpma: remote persistent memory access over RDMA
//!
//! librpma's small, hard-to-misuse API (peers, memory regions and their descriptors,
//! connections with private data, read, write, atomic write, flush, send/recv and the imm
//! variants, shared receive queues, completion queues and channels) in safe Rust.
//!
//! This facade re-exports [`rpma_core`] and picks a default transport by Cargo feature:
//!
//! | feature | transport | needs |
//! |---|---|---|
//! | `mock` (default) | [`mock::MockFabric`]: an in-memory loopback fabric with the full semantics of a reliable connection | nothing |
//! | `verbs` | `verbs::Verbs`: real RDMA devices (InfiniBand, RoCE, iWARP, Soft-RoCE) over libibverbs + librdmacm | libibverbs-dev, librdmacm-dev, libclang-dev |
//!
//! Features are additive. The top-level aliases (`Peer`, `Conn`, ...) use `DefaultTransport`:
//! the verbs transport when feature `verbs` is on, else the mock. The generic types are in
//! [`generic`] for code that names its transport (e.g. tests on the mock in an
//! `--all-features` build).
//!
//! ```
//! use rpma::generic::{Device, Peer};
//! use rpma::{mock::MockFabric, ContextType, Usage};
//! let fabric = MockFabric::new();
//! let dev = Device::lookup(&fabric, "127.0.0.1", ContextType::Local)?;
//! let peer = Peer::new(&dev)?;
//! let mr = peer.alloc_mr(4096, Usage::WRITE_DST | Usage::READ_SRC)?;
//! mr.write(0, b"hello")?;
//! assert_eq!(mr.to_vec(0, 5)?, b"hello");
//! # Ok::<(), rpma::Error>(())
//! ```
#![forbid(unsafe_code)]

pub use rpma_core::{
    conn_event_2str, descriptor, err_2str, log, transport, validate, Advice, Capabilities, CompletionFlags, ConnEvent,
    ContextType, Error, ErrorKind, FlushType, MrBuffer, MrRemote, PeerCfg, Result, SrqCfg, Transport, Usage, Wc,
    WcOpcode, WcStatus, ADVISE_FLAG_FLUSH, ATOMIC_WRITE_ALIGNMENT, DEFAULT_CQ_SIZE, DEFAULT_RCQ_SIZE, DEFAULT_RQ_SIZE,
    DEFAULT_SQ_SIZE, DEFAULT_SRQ_SIZE, DEFAULT_TIMEOUT_MS, MR_DESCRIPTOR_SIZE, PEER_CFG_DESCRIPTOR_SIZE,
};

/// The API generic over the transport, for code that names its backend.
pub mod generic {
    pub use rpma_core::{Conn, ConnCfg, ConnReq, Cq, Device, Ep, MrLocal, Peer, Srq};
}

/// The in-memory transport.
#[cfg(feature = "mock")]
pub use rpma_mock as mock;

/// The RDMA transport over libibverbs + librdmacm.
#[cfg(feature = "verbs")]
pub use rpma_verbs as verbs;

cfg_if::cfg_if! {
    if #[cfg(feature = "verbs")] {
        /// The transport the top-level aliases use: the highest-priority enabled backend.
        pub type DefaultTransport = rpma_verbs::Verbs;
    } else if #[cfg(feature = "mock")] {
        /// The transport the top-level aliases use: the highest-priority enabled backend.
        pub type DefaultTransport = rpma_mock::MockFabric;
    }
}

#[cfg(any(feature = "mock", feature = "verbs"))]
mod aliases {
    use super::DefaultTransport;
    /// A device of the default transport.
    pub type Device = rpma_core::Device<DefaultTransport>;
    /// A peer of the default transport.
    pub type Peer = rpma_core::Peer<DefaultTransport>;
    /// A local memory region of the default transport.
    pub type MrLocal = rpma_core::MrLocal<DefaultTransport>;
    /// A connection configuration of the default transport.
    pub type ConnCfg = rpma_core::ConnCfg<DefaultTransport>;
    /// An endpoint of the default transport.
    pub type Ep = rpma_core::Ep<DefaultTransport>;
    /// A connection request of the default transport.
    pub type ConnReq = rpma_core::ConnReq<DefaultTransport>;
    /// A connection of the default transport.
    pub type Conn = rpma_core::Conn<DefaultTransport>;
    /// A shared receive queue of the default transport.
    pub type Srq = rpma_core::Srq<DefaultTransport>;
    /// A completion queue of the default transport.
    pub type Cq<'a> = rpma_core::Cq<'a, DefaultTransport>;
}
#[cfg(any(feature = "mock", feature = "verbs"))]
pub use aliases::*;

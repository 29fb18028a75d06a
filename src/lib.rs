//! # rpma: remote persistent memory access over RDMA
//!
//! librpma's small, hard-to-misuse API (peers, memory regions and their descriptors,
//! connections with private data, read, write, atomic write, flush, send/recv and the imm
//! variants, shared receive queues, completion queues and channels) in safe Rust, with zero-copy
//! access to registered memory and an in-memory fabric to test on.
//!
//! ## Backends
//!
//! The API is generic over a [`Transport`]; each backend is a module of its own, with type
//! aliases for the whole API, and features are strictly additive (`--all-features` exposes both
//! and changes the meaning of nothing):
//!
//! | feature | module | transport | needs |
//! |---|---|---|---|
//! | `mock` (default) | [`mock`] | `mock::MockFabric`: an in-memory loopback fabric with the full semantics of a reliable connection | nothing |
//! | `verbs` | `verbs` | `verbs::Verbs`: real RDMA devices (InfiniBand, RoCE, iWARP, Soft-RoCE) over libibverbs + librdmacm | libibverbs-dev, librdmacm-dev, libclang-dev |
//!
//! Feature `tokio` adds `rpma::tokio`: connection requests, connection events, completions and
//! each operation (with send-queue backpressure) as futures on a tokio runtime (docs/async.md).
//! Feature `mio` makes [`Ep`], [`Conn`] and [`Cq`] `mio::event::Source`s (their fds), for
//! event loops other than tokio.
//!
//! Code written once for every backend names the generic types (`rpma::Peer<T>`,
//! `rpma::Conn<T>`, ... with `T: rpma::Transport`); code for one backend uses its module
//! (`rpma::mock::Peer`, `rpma::verbs::Conn`, ...). [`any`] chooses the backend at run time,
//! from a name or `RPMA_BACKEND`, once, and runs such generic code on it.
//!
//! ## Depending on it
//!
//! From a checkout of rpma-rs (or a git dependency on a clone: cargo finds the crate in its
//! workspace):
//!
//! ```toml
//! [dependencies]
//! rpma = { path = "../rpma-rs" }
//! # or, with RDMA devices as well as the mock:
//! rpma = { path = "../rpma-rs", features = ["verbs"] }
//! ```
//!
//! ## A server and a client: write, flush, send and receive
//!
//! ```
//! use rpma::mock::{ConnCfg, ConnReq, Device, Ep, MockFabric, Peer};
//! use rpma::{ConnEvent, ContextType, FlushType, MrRemote, PeerCfg, Usage};
//!
//! let fabric = MockFabric::new();
//! let peer = Peer::new(&Device::lookup(&fabric, "127.0.0.1", ContextType::Local)?)?;
//!
//! // The server registers a target region and listens; its descriptor travels to the client
//! // as private data of the connection.
//! let target = peer.alloc_mr(4096, Usage::WRITE_DST | Usage::FLUSH_TYPE_PERSISTENT)?;
//! let inbox = peer.alloc_mr(64, Usage::RECV)?;
//! let ep = Ep::listen(&peer, "127.0.0.1", "7204")?;
//!
//! // The client connects; the server accepts with the target's descriptor.
//! // (It may send up to 64 bytes inline: copied at post time, no registration.)
//! let cfg = ConnCfg::new().with_max_inline(64);
//! let client = ConnReq::new(&peer, "127.0.0.1", "7204", Some(&cfg))?.connect(None)?;
//! let req = ep.next_conn_req(None)?;
//! req.recv(inbox.slice(..)).context(9).post()?; // ready for the client's first message
//! let server = req.connect(Some(&target.descriptor()))?;
//! assert_eq!(client.next_event()?, ConnEvent::Established);
//! assert_eq!(server.next_event()?, ConnEvent::Established);
//!
//! // The client fills its source in place (no remote peer can touch a WRITE_SRC region, so a
//! // plain `&mut [u8]` is sound), then writes it and makes it persistent: one chain, one
//! // doorbell, and only the flush completes (its completion retires the write too).
//! let remote = MrRemote::from_descriptor(client.private_data())?;
//! client.apply_remote_peer_cfg(&PeerCfg::new().with_direct_write_to_pmem(true));
//! let mut src = peer.alloc_mr(4096, Usage::WRITE_SRC)?;
//! src.as_mut_slice()?[..10].copy_from_slice(b"log record");
//! let mut batch = client.batch();
//! batch.push(client.write(remote.at(0), src.slice(0..10)))?;
//! batch.push(client.flush(remote.slice(0..10), FlushType::Persistent).context(2))?;
//! batch.signal_last().post()?;
//! let cq = client.cq();
//! let wc = loop {
//!     if let Some(wc) = cq.next_wc()? {
//!         break wc;
//!     }
//! };
//! assert!(wc.is_success());
//! assert_eq!(wc.wr_id(), 2);
//!
//! // The target's bytes may be written by the peer at any time: read them by copy.
//! assert_eq!(target.to_vec(0, 10)?, b"log record");
//!
//! // A message to the server, from plain memory.
//! client.send_inline(b"log").post()?;
//! let wc = loop {
//!     if let Some(wc) = server.cq().next_wc()? {
//!         break wc;
//!     }
//! };
//! assert_eq!((wc.wr_id(), wc.byte_len()), (9, 3));
//! assert_eq!(inbox.to_vec(0, 3)?, b"log");
//!
//! client.disconnect()?;
//! assert_eq!(server.next_event()?, ConnEvent::Closed);
//! server.disconnect()?;
//! assert_eq!(client.next_event()?, ConnEvent::Closed);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Memory
//!
//! Registered memory is owned by the region ([`Memory`]: heap, aligned, huge pages, your `Vec`
//! or `Box`, a file or devdax mapping, or raw memory under an `unsafe` contract) and handed back
//! by [`MrLocal::dereg`]. Bytes a device or a peer may change are reached through a
//! [`VolatileSlice`](mem::VolatileSlice) (copies), never through a reference; a plain `&mut [u8]`
//! ([`MrLocal::as_mut_slice`]) needs `&mut` on the region, no remote access granted and no
//! operation in flight. The rules are in `docs/memory.md`.
//!
//! ```compile_fail,E0502
//! # use rpma::mock::{Device, MockFabric, Peer, Conn};
//! # use rpma::{ContextType, MrRemote, Usage};
//! # fn f(conn: &Conn, remote: &MrRemote, peer: &Peer) -> rpma::Result<()> {
//! let mut src = peer.alloc_mr(64, Usage::WRITE_SRC)?;
//! let op = conn.write(remote.at(0), src.slice(..)); // the operation borrows `src` ...
//! src.as_mut_slice()?[0] = 1; // ... so it cannot be changed before the operation is posted
//! op.post()?;
//! # Ok(()) }
//! ```
//!
//! A connection belongs to one thread at a time (`Send`, not `Sync`): that is what lets posting
//! and polling go without locks. Sharing one between threads does not compile; give each thread
//! its own connection, or move it, or put it in a `Mutex`:
//!
//! ```compile_fail,E0277
//! # use rpma::mock::Conn;
//! fn share(conn: &Conn) {
//!     std::thread::scope(|s| {
//!         s.spawn(|| conn.qp_num()); // `Conn` is not `Sync`
//!     });
//! }
//! ```
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// What a connection's completions counted ([`Conn::stats`]; the `tracing` feature).
#[cfg(feature = "tracing")]
pub use rpma_core::ConnStats;
pub use rpma_core::{
    descriptor, librpma, logging, op, runtime, Advice, Capabilities, CompletionFlags, Conn, ConnCfg, ConnEvent,
    ConnReq, ContextType, Cq, Device, Ep, Error, ErrorKind, FlushType, MrLocal, MrRemote, Peer, PeerCfg, Result, Srq,
    SrqCfg, Transport, Usage, Wc, WcOpcode, WcStatus,
};
pub use rpma_mem::Memory;

/// Memory below the registered regions ([`Memory`] is at the root): the views of bytes a NIC
/// or a peer may write ([`VolatileSlice`](mem::VolatileSlice)), file and devdax mappings
/// ([`MapOptions`](mem::MapOptions)), and how this CPU makes stores persistent
/// ([`cpu_persist_method`](mem::cpu_persist_method)); docs/memory.md.
pub mod mem {
    pub use rpma_mem::{cpu_persist_method, MapOptions, MapSync, MemError, MemoryKind, PersistMethod, VolatileSlice};
}

pub mod any;

/// The backend contract ([`Transport`] and the traits of its objects), for writing a backend.
///
/// Not semver-stable: it changes with the backends' needs, unlike the rest of the API.
pub mod transport {
    pub use rpma_core::transport::*;
}

/// Aliases of the whole API for one transport `$t`.
#[cfg(any(feature = "mock", feature = "verbs"))]
macro_rules! backend_aliases {
    ($t:ty, $name:literal) => {
        #[doc = concat!("A device of the ", $name, " transport.")]
        pub type Device = rpma_core::Device<$t>;
        #[doc = concat!("A peer of the ", $name, " transport.")]
        pub type Peer = rpma_core::Peer<$t>;
        #[doc = concat!("A local memory region of the ", $name, " transport.")]
        pub type MrLocal = rpma_core::MrLocal<$t>;
        #[doc = concat!("A connection configuration of the ", $name, " transport.")]
        pub type ConnCfg = rpma_core::ConnCfg<$t>;
        #[doc = concat!("An endpoint of the ", $name, " transport.")]
        pub type Ep = rpma_core::Ep<$t>;
        #[doc = concat!("A connection request of the ", $name, " transport.")]
        pub type ConnReq = rpma_core::ConnReq<$t>;
        #[doc = concat!("A connection of the ", $name, " transport.")]
        pub type Conn = rpma_core::Conn<$t>;
        #[doc = concat!("A shared receive queue of the ", $name, " transport.")]
        pub type Srq = rpma_core::Srq<$t>;
        #[doc = concat!("A completion queue of the ", $name, " transport.")]
        pub type Cq<'a> = rpma_core::Cq<'a, $t>;
        #[doc = concat!("A batch of operations on a connection of the ", $name, " transport.")]
        pub type Batch<'c> = rpma_core::Batch<'c, $t>;
        #[doc = concat!("A batch of receives of the ", $name, " transport.")]
        pub type RecvBatch<'c> = rpma_core::RecvBatch<'c, $t>;
    };
}

/// Futures on tokio: connection requests ([`AsyncEp`](rpma_tokio::AsyncEp)), establishment
/// ([`connect`](rpma_tokio::connect)), and on an [`AsyncConn`](rpma_tokio::AsyncConn) each
/// operation's completion (with send-queue backpressure), connection events and completions
/// (also as a `Stream`); see `docs/async.md`.
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod tokio {
    pub use rpma_tokio::*;
}

/// The in-memory transport ([`MockFabric`](rpma_mock::MockFabric)) and the API's types over it.
///
/// Here: the fabric, its builder and devices, the test controls (modes, faults, partitions,
/// power cuts and crash points, the simulation) and the API's types over the mock. The
/// backend's own objects, which rpma-core drives through the backend contract, are in
/// [`mock::backend`].
#[cfg(feature = "mock")]
#[cfg_attr(docsrs, doc(cfg(feature = "mock")))]
pub mod mock {
    pub use rpma_mock::{
        default_rendezvous_dir, sim, CrashFailure, CrashPoint, CrashPoints, CrashReport, Direction, Event, Faults,
        LiveCounts, MockDevice, MockFabric, MockFabricBuilder, Mode, PersistentMemory, PowerCut, Reboot, Recovered,
        Unflushed, DEFAULT_CM_TIMEOUT, DEFAULT_PROGRESS_DELAY, MODE_ENV, RENDEZVOUS_ENV,
    };
    backend_aliases!(MockFabric, "mock");

    /// The mock backend's own objects (what its [`Transport`](crate::Transport) hands
    /// rpma-core): for writing or testing a backend, not for using the API.
    pub mod backend {
        pub use rpma_mock::{Kind, MockCq, MockListener, MockMr, MockPd, MockQp, MockSrq};
    }
}

/// The RDMA transport over libibverbs + librdmacm (`Verbs`) and the API's types over it.
///
/// Here: the transport, its process-wide switches (native operations, the persistent flush
/// rule, fork safety), its leak and operation counts, and the API's types over it. The
/// backend's own objects are in `verbs::backend`.
#[cfg(feature = "verbs")]
#[cfg_attr(docsrs, doc(cfg(feature = "verbs")))]
pub mod verbs {
    #[cfg(feature = "verbs-fault-injection")]
    pub use rpma_verbs::faults;
    pub use rpma_verbs::{
        fork_safety, leaks, native_only, op_counts, persistent_flush, set_native_only, set_persistent_flush,
        ForkSafety, Leaks, NativeOnly, OpCounts, PersistentFlush, Verbs,
    };
    backend_aliases!(Verbs, "verbs");

    /// The verbs backend's own objects (what its [`Transport`](crate::Transport) hands
    /// rpma-core): for writing or testing a backend, not for using the API.
    pub mod backend {
        pub use rpma_verbs::{
            CqEvents, SharedCqEvents, VerbsCq, VerbsDevice, VerbsListener, VerbsMr, VerbsPd, VerbsQp, VerbsSrq,
        };
    }
}

#[cfg(test)]
mod tests {
    //! `Send`/`Sync` of every public type, as the docs state them.
    use super::*;

    const fn send_sync<X: Send + Sync>() {}
    const fn send<X: Send>() {}

    #[test]
    fn public_types_are_send_and_sync() {
        send_sync::<Error>();
        send_sync::<ErrorKind>();
        send_sync::<MrRemote>();
        send_sync::<PeerCfg>();
        send_sync::<SrqCfg>();
        send_sync::<Wc>();
        send_sync::<Memory>();
        send_sync::<mem::VolatileSlice<'static>>();
        send_sync::<mem::MapOptions>();
        #[cfg(feature = "mock")]
        {
            send_sync::<mock::Device>();
            send_sync::<mock::Peer>();
            send_sync::<mock::MrLocal>();
            send_sync::<mock::ConnCfg>();
            send_sync::<mock::Ep>();
            send::<mock::ConnReq>();
            send::<mock::Conn>();
            send_sync::<mock::Srq>();
            send_sync::<mock::MockFabric>();
            type M = mock::MockFabric;
            send_sync::<op::LocalSlice<'static, M>>();
            send_sync::<op::RemoteAt<'static>>();
            send_sync::<op::RemoteSlice<'static>>();
        }
        #[cfg(feature = "verbs")]
        {
            send_sync::<verbs::Device>();
            send_sync::<verbs::Peer>();
            send_sync::<verbs::MrLocal>();
            send_sync::<verbs::Ep>();
            send::<verbs::ConnReq>();
            send::<verbs::Conn>();
            send_sync::<verbs::Srq>();
        }
    }
}

//! The backend contract: what a transport (the in-memory mock, libibverbs + librdmacm, ...)
//! implements so that the public API of rpma-core runs on it.
//!
//! **Not semver-stable**: this contract changes with the backends' needs (the API above it
//! does not). Implement it only in a backend crate that pins the exact rpma-core version.
//!
//! The public types ([`Peer`](crate::Peer), [`Conn`](crate::Conn), ...) are generic over a
//! [`Transport`] and call it through static dispatch: no virtual call, no boxing on the data
//! path. **All argument validation is done by rpma-core before a backend is called**; a
//! backend may assume that:
//! - every local buffer it is handed lies inside its registration (`offset + len <= mr.len()`)
//!   and has the usage the operation needs;
//! - a remote address lies inside the remote region *as described by the peer's descriptor*
//!   (the descriptor itself is untrusted: the backend, like the hardware, must still check rkey,
//!   bounds and access rights at the responder and report violations as error completions);
//! - flags, alignment, private-data sizes and queue configurations follow the documented rules.
//!
//! Backends report failures of their provider calls as
//! [`ErrorKind::Provider`](crate::ErrorKind::Provider) (with the errno),
//! [`ErrorKind::OutOfMemory`](crate::ErrorKind::OutOfMemory), or the specific kinds named in each
//! method's documentation.
//!
//! # Resource lifetime
//! A backend object that must outlive another (a protection domain outlives its memory regions
//! and queue pairs, an SRQ outlives the QPs attached to it) receives an `Arc` of it and keeps a
//! clone. A memory region handed to a post call is passed as `&Arc<Mr>`: a backend whose device
//! may still access the buffer after the call returns (any real one) must keep the registration
//! and its memory alive until the work request is retired, even if the region is dropped or
//! deregistered meanwhile (rpma-verbs counts work requests per region without a reference count
//! and parks a region dropped while in use; the mock clones the `Arc` where it keeps a buffer).
//!
//! # Threads
//! A queue pair ([`QpBackend`]) and its CQs are used by one thread at a time: rpma-core's
//! `Conn` and `ConnReq` are `Send` but not `Sync` and a `Cq` is neither, so a backend may keep
//! its data-path bookkeeping unsynchronised (rpma-verbs does, rule V6 of docs/memory.md). A
//! shared receive queue ([`SrqBackend`]) is `Send + Sync` and is posted to from any thread.
//!
//! # Safe to reach
//! The contract is public (a backend crate implements it; [`Conn::backend`](crate::Conn::backend)
//! lends a backend's own extras, such as the mock's link cut), and no safe call of it can make a
//! backend touch freed or unvalidated memory:
//! - a work request ([`SendWr`], [`RecvWr`]) has a private field, so only rpma-core's validation
//!   makes one: code outside rpma-core can hand a backend only the work requests rpma-core built
//!   (reading their fields is free);
//! - what ends an object takes it by value ([`CmBackend::destroy`], [`CmBackend::reject`],
//!   [`MrBackend::dereg`], [`SrqBackend::destroy`], [`ListenerBackend::shutdown`]), so nothing
//!   can use it afterwards; a `&` to a backend object cannot end it;
//! - [`MrBackend::memory_mut`] gives the bytes only while neither the device nor a peer can reach
//!   them (no remote access granted, no work request in flight): each backend checks that itself
//!   (rule M3 of docs/memory.md).
//! - the [`Capabilities`] given to [`Transport::alloc_pd`] may narrow what the backend uses, never
//!   widen it past what the backend found the device can do (rpma-verbs probes native flush and
//!   atomic write itself); a [`QueueConfig`]'s SRQ of another device context is refused by the
//!   backend (rule V10 of docs/memory.md).
//!
//! ```compile_fail,E0507
//! // A connection's queue pair cannot be destroyed through a shared reference.
//! use rpma_core::transport::QpBackend;
//! fn end_it<T: rpma_core::Transport>(conn: &rpma_core::Conn<T>) {
//!     let _ = conn.backend().destroy();
//! }
//! ```
//!
//! ```compile_fail,E0451
//! // A work request cannot be made outside rpma-core.
//! use rpma_core::transport::{Local, RecvWr};
//! fn forge<T: rpma_core::Transport>() -> RecvWr<'static, T> {
//!     RecvWr { local: Local::None, wr_id: 0, _by_core: todo!() }
//! }
//! ```

use std::fmt::Debug;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Duration;

use rpma_mem::{Memory, VolatileSlice};

pub use crate::cq_trace::CqTrace;
use crate::error::Result;
use crate::op::LocalSlice;
use crate::types::{Advice, ContextType, FlushType, Usage};
use crate::wc::Wc;

/// What a backend (and the device under it) can do. The conformance suite uses it to gate the
/// few cases where backends legitimately differ.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Native RDMA Flush (`ibv_wr_flush`, IBTA 1.5); otherwise flush is emulated (APM read).
    pub native_flush: bool,
    /// Native RDMA Atomic Write (`ibv_wr_atomic_write`); otherwise a fenced inline 8-byte write.
    pub native_atomic_write: bool,
    /// On-demand paging for RC reads and writes (`rpma_utils_ibv_context_is_odp_capable`).
    pub odp: bool,
    /// `ibv_advise_mr` is available.
    pub advise_mr: bool,
    /// The device is iWARP (receive destinations then need remote write access).
    pub iwarp: bool,
    /// Maximum work requests of a send or receive queue.
    pub max_qp_wr: u32,
    /// Maximum entries of a completion queue.
    pub max_cqe: u32,
    /// Maximum work requests of a shared receive queue.
    pub max_srq_wr: u32,
    /// Maximum inline data of a send work request (what a connection's
    /// [`ConnCfg::with_max_inline`](crate::ConnCfg::with_max_inline) may ask for).
    pub max_inline_data: u32,
    /// Maximum scatter-gather entries of a send or receive work request (`max_sge`).
    pub max_sge: u32,
    /// Maximum scatter-gather entries of an RDMA Read work request (`max_sge_rd`).
    pub max_sge_rd: u32,
    /// Maximum message size of one operation.
    pub max_msg_size: u64,
    /// Maximum private data sent with a connection request (`rdma_connect`: 56 on IB/RoCE).
    pub max_private_data_connect: usize,
    /// Maximum private data sent with an accept (`rdma_accept`: 196 on IB/RoCE).
    pub max_private_data_accept: usize,
}

impl Capabilities {
    /// The limits of an RoCE device without IBTA 1.5 extensions (what Soft-RoCE reports).
    #[must_use]
    pub const fn roce_defaults() -> Self {
        Self {
            native_flush: false,
            native_atomic_write: false,
            odp: false,
            advise_mr: false,
            iwarp: false,
            max_qp_wr: 1 << 14,
            max_cqe: 1 << 16,
            max_srq_wr: 1 << 14,
            max_inline_data: 256,
            max_sge: 32,
            max_sge_rd: 32,
            max_msg_size: 1 << 31,
            max_private_data_connect: 56,
            max_private_data_accept: 196,
        }
    }
}

/// The queue configuration a connection request is built with (from a
/// [`ConnCfg`](crate::ConnCfg), already validated).
#[derive(Debug)]
pub struct QueueConfig<'a, T: Transport> {
    /// Connection-establishment timeout (active side).
    pub timeout_ms: i32,
    /// Main CQ entries.
    pub cq_size: u32,
    /// Receive CQ entries; 0 = none (also none when `srq` has its own receive CQ).
    pub rcq_size: u32,
    /// Send queue entries.
    pub sq_size: u32,
    /// Receive queue entries (unused with an SRQ).
    pub rq_size: u32,
    /// Scatter-gather entries per send and receive work request (at least 1, at most the
    /// device's `max_sge`).
    pub max_sge: u32,
    /// Inline bytes per send work request the connection's operations may use (at most the
    /// device's `max_inline_data`; a backend may create the QP with more for its own use).
    pub max_inline: u32,
    /// The transport retry count of the queue pair (`rdma_conn_param.retry_count`, 0..=7).
    pub retry_count: u8,
    /// The local ACK timeout exponent of the queue pair (1..=31), set on the CM id before it
    /// connects or accepts; `None`: the connection manager's default.
    pub ack_timeout: Option<u8>,
    /// One completion channel for the main CQ and the receive CQ.
    pub shared_channel: bool,
    /// The shared receive queue to attach, if any: one created on the request's protection
    /// domain (rpma-core refuses an SRQ of another peer; a backend whose device contexts number
    /// their objects apart refuses one of another context itself, rule V10 of docs/memory.md).
    pub srq: Option<&'a Arc<T::Srq>>,
}

/// Which of a connection's CQs a shared-channel wait reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqSlot {
    /// The main CQ.
    Main,
    /// The connection's receive CQ.
    Receive,
}

/// A raw connection-management event, as the provider reports it. rpma-core maps it to a
/// [`ConnEvent`](crate::ConnEvent) (docs/semantics.md#connection-events).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmEvent {
    /// `RDMA_CM_EVENT_ESTABLISHED`.
    Established,
    /// `RDMA_CM_EVENT_CONNECT_ERROR`.
    ConnectError,
    /// `RDMA_CM_EVENT_DEVICE_REMOVAL`.
    DeviceRemoval,
    /// `RDMA_CM_EVENT_DISCONNECTED`.
    Disconnected,
    /// `RDMA_CM_EVENT_TIMEWAIT_EXIT`.
    TimewaitExit,
    /// `RDMA_CM_EVENT_REJECTED`.
    Rejected,
    /// `RDMA_CM_EVENT_UNREACHABLE`.
    Unreachable,
    /// Any other event (raw `enum rdma_cm_event_type` value).
    Other(u32),
}

/// A local buffer of a work request: `len` bytes at `offset` of a registered region.
#[derive(Debug)]
pub struct LocalBuf<'a, M> {
    /// The region.
    pub mr: &'a Arc<M>,
    /// Offset inside the region.
    pub offset: usize,
    /// Length in bytes.
    pub len: usize,
}

/// A remote target of a work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteBuf {
    /// Absolute remote virtual address (`raddr + offset`).
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Bytes the remote region is described to hold from `addr` on (from the descriptor).
    pub described_len: u64,
}

/// The operation of a send-queue work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// RDMA Read from `remote` into `local`.
    Read,
    /// RDMA Write from `local` to `remote`.
    Write,
    /// RDMA Write with immediate data (host order; consumes a receive at the peer).
    WriteImm(u32),
    /// Atomic write of these 8 bytes at `remote` (native, or fenced inline write).
    AtomicWrite([u8; 8]),
    /// Flush `len` bytes at `remote` (native flush, or an APM read).
    Flush(FlushType),
    /// Send `local`.
    Send,
    /// Send `local` with immediate data (host order).
    SendImm(u32),
}

/// The local side of a work request, validated by rpma-core: every piece lies inside its
/// registration, has the usage the operation needs and is not empty; there are at most the
/// connection's `max_sge` pieces; inline bytes are at most its `max_inline`.
pub enum Local<'a, T: Transport> {
    /// No local bytes (the zero-byte forms, atomic write, flush).
    None,
    /// One registered piece.
    One(LocalBuf<'a, T::Mr>),
    /// Several registered pieces, gathered (send, write) or scattered (read, receive) in order.
    Sg(&'a [LocalSlice<'a, T>]),
    /// Bytes copied into the work request when it is posted (no registration: the caller may
    /// reuse them as soon as the post returns).
    Inline(&'a [u8]),
}

impl<T: Transport> Clone for Local<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Transport> Copy for Local<'_, T> {}

impl<M> Clone for LocalBuf<'_, M> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<M> Copy for LocalBuf<'_, M> {}

impl<T: Transport> Debug for Local<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::None => f.write_str("None"),
            Self::One(b) => f.debug_struct("One").field("offset", &b.offset).field("len", &b.len).finish(),
            Self::Sg(s) => f.debug_tuple("Sg").field(s).finish(),
            Self::Inline(b) => f.debug_tuple("Inline").field(&b.len()).finish(),
        }
    }
}

impl<T: Transport> Debug for SendWr<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendWr")
            .field("op", &self.op)
            .field("local", &self.local)
            .field("remote", &self.remote)
            .field("len", &self.len)
            .field("signaled", &self.signaled)
            .field("wr_id", &self.wr_id)
            .finish()
    }
}

impl<T: Transport> Debug for RecvWr<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvWr").field("local", &self.local).field("wr_id", &self.wr_id).finish()
    }
}

impl<'a, T: Transport> Local<'a, T> {
    /// How many registered pieces (0 for `None` and `Inline`).
    #[must_use]
    pub const fn pieces_len(&self) -> usize {
        match self {
            Self::None | Self::Inline(_) => 0,
            Self::One(_) => 1,
            Self::Sg(s) => s.len(),
        }
    }

    /// The `i`-th registered piece (`i < pieces_len()`).
    #[must_use]
    pub fn piece(&self, i: usize) -> Option<LocalBuf<'a, T::Mr>> {
        match self {
            Self::One(b) if i == 0 => Some(*b),
            Self::Sg(s) => s.get(i).map(LocalSlice::checked_buf),
            _ => None,
        }
    }
}

/// Made by rpma-core only: the private field that keeps [`SendWr`] and [`RecvWr`] from being
/// built anywhere else (see "Safe to reach" in the module docs).
#[derive(Clone, Copy)]
pub struct ByCore(());

impl ByCore {
    /// The mark of a work request rpma-core validated.
    pub(crate) const VALIDATED: Self = Self(());
}

/// A send-queue work request, validated by rpma-core (only rpma-core can make one: its field
/// `_by_core` is private).
pub struct SendWr<'a, T: Transport> {
    /// What to do.
    pub op: SendOp,
    /// The local side.
    pub local: Local<'a, T>,
    /// The remote target (`None` for sends and the zero-byte read/write forms).
    pub remote: Option<RemoteBuf>,
    /// Bytes to transfer (for flush: bytes to flush).
    pub len: usize,
    /// Post signaled (a completion always appears) or unsignaled (only on error).
    pub signaled: bool,
    /// The operation context, returned as [`Wc::wr_id`].
    pub wr_id: u64,
    pub(crate) _by_core: ByCore,
}

/// A receive work request, validated by rpma-core (`local` is `None`, `One` or `Sg`; only
/// rpma-core can make one: its field `_by_core` is private).
pub struct RecvWr<'a, T: Transport> {
    /// Where the message lands (`None`: a zero-length receive).
    pub local: Local<'a, T>,
    /// The operation context, returned as [`Wc::wr_id`].
    pub wr_id: u64,
    pub(crate) _by_core: ByCore,
}

/// A transport: the root of a backend.
///
/// A transport value is cheap to clone (a handle). Its associated types are the backend's
/// objects; each is documented by its own trait.
pub trait Transport: Clone + Send + Sync + Sized + 'static {
    /// A device context (librpma's `struct ibv_context *`).
    type Device: Clone + Send + Sync + Debug;
    /// A protection domain plus whatever per-peer state the backend needs.
    type Pd: Send + Sync + 'static;
    /// A registered local memory region that owns its bytes.
    type Mr: MrBackend;
    /// A completion queue with its completion channel.
    type Cq: CqBackend;
    /// A shared receive queue (with its optional receive CQ).
    type Srq: SrqBackend<Self>;
    /// A listening endpoint.
    type Listener: ListenerBackend<Self>;
    /// A connection's queue pair, CM identifier and event channel, from request to teardown.
    type Qp: QpBackend<Self> + CmBackend<Self>;

    /// A short name of the backend ("mock", "verbs").
    fn name(&self) -> &'static str;

    /// Where code running on this transport takes its time, pauses and threads
    /// ([`runtime`](crate::runtime)): the real clock and real threads
    /// ([`StdRuntime`](crate::runtime::StdRuntime)) unless the transport simulates them (the mock
    /// fabric under `rpma_mock::sim`).
    fn runtime(&self) -> &dyn crate::runtime::Runtime {
        &crate::runtime::StdRuntime
    }

    /// `rpma_utils_get_ibv_context`: the device owning (`Local`) or routing to (`Remote`) `addr`.
    ///
    /// # Errors
    /// `Provider` if the address cannot be translated, bound or resolved.
    fn lookup_device(&self, addr: &str, kind: ContextType) -> Result<Self::Device>;

    /// The device's capabilities (queried at peer creation; `rpma_peer_new` queries the same).
    ///
    /// # Errors
    /// `Provider` if the device query fails.
    fn capabilities(&self, dev: &Self::Device) -> Result<Capabilities>;

    /// A short name of the device (e.g. `rxe0`, `mock0`).
    fn device_name(&self, dev: &Self::Device) -> String;

    /// `ibv_alloc_pd`, for a peer that will use `caps` (what [`Transport::capabilities`]
    /// reported, or less). A backend does not trust `caps` for what the device can do: what
    /// gates a path it could not take safely (rpma-verbs: native flush and atomic write) is its
    /// own finding, which `caps` may narrow (a native operation turned off is emulated), never
    /// widen.
    ///
    /// # Errors
    /// `OutOfMemory` or `Provider` with the errno as reported (rpma-core maps `Provider` with
    /// `ENOMEM` to `OutOfMemory` and with errno 0 to `Other`, as `rpma_peer_new`); `Provider` if
    /// the backend must query the device first and that fails.
    fn alloc_pd(&self, dev: &Self::Device, caps: &Capabilities) -> Result<Self::Pd>;

    /// Registers `memory` (which the region then owns) with the access rights `usage` maps to
    /// (docs/semantics.md#usages-and-access-rights). If the registration fails with `EOPNOTSUPP`
    /// and the device is ODP-capable, it is retried once with on-demand paging
    /// (`IBV_ACCESS_ON_DEMAND`, docs/semantics.md#registration-and-on-demand-paging).
    ///
    /// # Errors
    /// `Provider` if registration fails.
    fn reg_mr(&self, pd: &Arc<Self::Pd>, memory: Memory, usage: Usage) -> Result<Self::Mr>;

    /// Creates a shared receive queue of `rq_size` entries and, if `rcq_size > 0`, its own
    /// receive CQ with a private completion channel.
    ///
    /// # Errors
    /// `OutOfMemory` or `Provider`.
    fn create_srq(&self, pd: &Arc<Self::Pd>, rq_size: u32, rcq_size: u32) -> Result<Self::Srq>;

    /// `rpma_ep_listen`: listens for connection requests on `addr:port`.
    ///
    /// # Errors
    /// `Provider` if the address cannot be bound or listened on.
    fn listen(&self, pd: &Arc<Self::Pd>, addr: &str, port: &str) -> Result<Self::Listener>;

    /// `rpma_conn_req_new`: resolves `addr:port` and builds an outgoing request's queues.
    ///
    /// # Errors
    /// `Provider` if resolution or queue creation fails; `OutOfMemory`; `InvalidInput` if `cfg.srq`
    /// belongs to another device than the one `addr` resolves through (rpma-verbs).
    fn connect_request(
        &self,
        pd: &Arc<Self::Pd>,
        addr: &str,
        port: &str,
        cfg: &QueueConfig<'_, Self>,
    ) -> Result<Self::Qp>;
}

/// A registered local memory region that owns its [`Memory`].
///
/// The bytes are reached through a [`VolatileSlice`] (the device and remote peers may write them
/// at any time, rule M2 of `docs/memory.md`). Dropping the region deregisters it before its
/// memory is freed; a memory whose deregistration failed is leaked (rule M1).
pub trait MrBackend: Send + Sync + 'static {
    /// The registered address (`ibv_mr->addr`, the `raddr` of the descriptor).
    fn addr(&self) -> u64;
    /// The registered length.
    fn len(&self) -> usize;
    /// Whether the registered length is 0 (never, for a successful registration).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The remote key.
    fn rkey(&self) -> u32;
    /// The region's bytes.
    fn memory(&self) -> VolatileSlice<'_>;
    /// The region's memory, if nothing but this handle can reach it: `None` while the
    /// registration grants any remote access, while a work request in flight may still use it,
    /// or while, e.g., a table of remotely reachable regions shares it. The backend checks this
    /// itself, whoever calls (rule M3: the `&mut Memory` gives plain slices of the bytes).
    fn memory_mut(&mut self) -> Option<&mut Memory>;
    /// Whether a work request in flight still uses the region although no other `Arc` of it
    /// exists (a backend that tracks its work requests without reference counts, as
    /// rpma-verbs does): then [`MrBackend::dereg`] would defer deregistration. The default,
    /// `false`, suits a backend that keeps an `Arc` of every region in use (the mock).
    fn in_use(&self) -> bool {
        false
    }
    /// Makes `[offset, offset + len)` durable by the owner's own hand (librpma's GPSPM server
    /// persisting on request; any local store into persistent memory): what the backend's memory
    /// needs for that (a file mapping's range synced; the CPU cache lines written back on
    /// persistent memory), and, on the mock's persistence model, the range's bytes made durable.
    /// The range is inside the region (checked by rpma-core).
    ///
    /// # Errors
    /// `Provider` if writing the range back fails (e.g. `msync`).
    fn persist(&self, offset: usize, len: usize) -> Result<()>;
    /// `ibv_advise_mr` on `[offset, offset + len)`.
    ///
    /// # Errors
    /// `Unsupported` if not supported, `InvalidInput` for `EFAULT`/`EINVAL`, else `Provider`.
    fn advise(&self, offset: usize, len: usize, advice: Advice, flags: u32) -> Result<()>;
    /// Deregisters the region now and gives its memory back (`None` if the backend must keep
    /// it a little longer and frees it itself).
    ///
    /// # Errors
    /// `Provider` if deregistration fails: the memory is then leaked, never freed (rule M1).
    fn dereg(self) -> Result<Option<Memory>>;
}

/// A completion queue and its completion channel.
pub trait CqBackend: Send + 'static {
    /// `ibv_poll_cq` into `wc` (non-empty); returns how many entries were filled (0 = none).
    ///
    /// # Errors
    /// `Provider` if polling fails.
    ///
    /// Reports each completion it writes to its [`CqTrace`] from inside
    /// ([`CqTrace::completed`]: nothing without the `tracing` feature).
    fn poll(&self, wc: &mut [Wc]) -> Result<usize>;
    /// The CQ's [`CqTrace`] (one per CQ, made with it).
    fn trace(&self) -> &CqTrace;
    /// The completion channel's fd (the shared one if the channel is shared).
    fn fd(&self) -> BorrowedFd<'_>;
    /// Waits for one completion event on this CQ's own channel, acks it and re-arms the CQ.
    ///
    /// # Errors
    /// `NoCompletion` if no event can be had (non-blocking fd); `Provider` if re-arming fails.
    fn wait(&self) -> Result<()>;
    /// [`CqBackend::wait`] for at most `timeout` (non-zero), without the fd: `None` if the
    /// backend has no such wait (the default), and rpma-core then polls [`CqBackend::fd`]. A
    /// backend whose fds are made on demand (the mock) waits here without making one.
    ///
    /// # Errors
    /// `NoCompletion` if no event came in time; as [`CqBackend::wait`].
    fn wait_timeout(&self, timeout: Duration) -> Option<Result<()>> {
        let _ = timeout;
        None
    }
}

/// A shared receive queue.
pub trait SrqBackend<T: Transport>: Send + Sync + 'static {
    /// `ibv_post_srq_recv` of a chain of receives (one doorbell), whole or not at all.
    ///
    /// # Errors
    /// `Provider` if posting fails (e.g. the queue has fewer free entries than `wrs`).
    fn post_recv(&self, wrs: &[RecvWr<'_, T>]) -> Result<()>;
    /// The SRQ's own receive CQ, if created with one.
    fn rcq(&self) -> Option<&T::Cq>;
    /// Destroys the SRQ now, reporting the first failure.
    ///
    /// # Errors
    /// `Provider`.
    fn destroy(self) -> Result<()>;
}

/// A listening endpoint.
pub trait ListenerBackend<T: Transport>: Send + Sync + 'static {
    /// The fd of the endpoint's CM event channel.
    fn fd(&self) -> BorrowedFd<'_>;
    /// Takes the next CM event; if it is a connection request, builds its queues per `cfg`.
    ///
    /// # Errors
    /// `NoEvent` if nothing is pending on a non-blocking fd; `InvalidInput` if the event is not a
    /// connection request (it is acknowledged), or if `cfg.srq` belongs to another device than
    /// the request (rpma-verbs: the request is rejected); `Provider`/`OutOfMemory` on failures.
    fn next_request(&self, cfg: &QueueConfig<'_, T>) -> Result<T::Qp>;
    /// [`ListenerBackend::next_request`] waiting at most `timeout` for a request (`NoEvent`
    /// then), whatever the fd's mode, if the backend waits so itself (on its own clock: a
    /// simulated transport's); `None` (the default) lets rpma-core wait on the fd instead.
    fn next_request_timeout(&self, cfg: &QueueConfig<'_, T>, timeout: Duration) -> Option<Result<T::Qp>> {
        let _ = (cfg, timeout);
        None
    }
    /// Stops listening, reporting a failure.
    ///
    /// # Errors
    /// `Provider`.
    fn shutdown(self) -> Result<()>;
}

/// The data path of a connection's queue pair (with its CM identifier and event channel, whose
/// management is [`CmBackend`]): its CQs, posting, and the send queue's free slots.
///
/// It starts as a request (outgoing from [`Transport::connect_request`], incoming from
/// [`ListenerBackend::next_request`]), becomes a connection with [`CmBackend::connect`], and ends
/// with [`CmBackend::destroy`] (or [`CmBackend::reject`] for an incoming request never
/// accepted). Dropping it releases everything as `destroy` would.
///
/// `Send` but not necessarily `Sync`: rpma-core calls the data path (posting, and polling the
/// CQs returned by [`QpBackend::cq`] / [`QpBackend::rcq`]) of one queue pair from one thread
/// at a time, so a backend needs no lock there.
pub trait QpBackend<T: Transport>: Send + 'static {
    /// The QP number.
    fn qp_num(&self) -> u32;
    /// The main CQ.
    fn cq(&self) -> &T::Cq;
    /// The connection's own receive CQ, if any.
    fn rcq(&self) -> Option<&T::Cq>;
    /// The shared completion channel's fd, if the channel is shared.
    fn compl_fd(&self) -> Option<BorrowedFd<'_>>;
    /// Waits on the shared completion channel; acks the event, re-arms that CQ and says which.
    ///
    /// # Errors
    /// `NoCompletion` if no event can be had; `Other` for an event of an unknown CQ;
    /// `Provider` if re-arming fails.
    fn wait_shared(&self) -> Result<CqSlot>;
    /// `ibv_post_recv` of a chain of receives (one doorbell), whole or not at all.
    ///
    /// # Errors
    /// `Provider` if posting fails (fewer free entries than `wrs`, QP attached to an SRQ, QP
    /// in error).
    fn post_recv(&self, wrs: &[RecvWr<'_, T>]) -> Result<()>;
    /// `ibv_post_send` of a chain of work requests (one doorbell), posted in order, whole or
    /// not at all.
    ///
    /// # Errors
    /// `Provider` if posting fails (fewer free send-queue slots than `wrs`: `ENOMEM`; QP not
    /// connected).
    fn post_send(&self, wrs: &[SendWr<'_, T>]) -> Result<()>;
    /// [`QpBackend::post_send`] of one work request, by value (a backend's fast path for the
    /// common case; the default posts a chain of one).
    ///
    /// # Errors
    /// As [`QpBackend::post_send`].
    #[inline]
    fn post_send_one(&self, wr: SendWr<'_, T>) -> Result<()> {
        self.post_send(std::slice::from_ref(&wr))
    }
    /// [`QpBackend::post_recv`] of one receive, by value (see [`QpBackend::post_send_one`]).
    ///
    /// # Errors
    /// As [`QpBackend::post_recv`].
    #[inline]
    fn post_recv_one(&self, wr: RecvWr<'_, T>) -> Result<()> {
        self.post_recv(std::slice::from_ref(&wr))
    }
    /// Send-queue slots free now: the configured `sq_size` minus the work requests posted and
    /// not yet retired (an unsignaled one is retired by the completion of a later one).
    fn sq_free(&self) -> u32;
}

/// The connection management of a queue pair ([`Transport::Qp`]): its request's private data,
/// connecting or rejecting, its CM events, disconnecting and the end of it. Apart from the data
/// path ([`QpBackend`]): rpma-core calls these on setup, events and teardown only.
pub trait CmBackend<T: Transport>: Send + 'static {
    /// Private data received with an incoming request (empty for outgoing ones).
    fn request_private_data(&self) -> &[u8];
    /// The connection's local and remote addresses, as far as the backend knows them
    /// (`rdma_get_local_addr`, `rdma_get_peer_addr`: bound once the request was made or
    /// received); `None` for one it does not know (the default: both). Read once per
    /// connection, for the `tracing` feature's span.
    fn addrs(&self) -> (Option<SocketAddr>, Option<SocketAddr>) {
        (None, None)
    }
    /// Active request: `rdma_connect`; incoming request: `rdma_accept`, with `pdata`.
    ///
    /// # Errors
    /// `Provider` or `OutOfMemory`.
    fn connect(&mut self, pdata: Option<&[u8]>) -> Result<()>;
    /// Rejects an incoming request (`rdma_reject`) or abandons an outgoing one, and releases
    /// everything.
    ///
    /// # Errors
    /// `Provider` (the first failure; every release step is still attempted).
    fn reject(self) -> Result<()>;
    /// The fd of the connection's CM event channel.
    fn event_fd(&self) -> BorrowedFd<'_>;
    /// Takes and acks the connection's next CM event, with its private data.
    ///
    /// # Errors
    /// `NoEvent` if nothing is pending on a non-blocking fd; `Provider`.
    fn next_event(&self) -> Result<(CmEvent, Option<Box<[u8]>>)>;
    /// [`CmBackend::next_event`] waiting at most `timeout` (non-zero), without the fd: `None` if
    /// the backend has no such wait (the default), and rpma-core then polls
    /// [`CmBackend::event_fd`]. A backend whose fds are made on demand (the mock) waits here
    /// without making one, so that many connections need no fd each.
    ///
    /// # Errors
    /// `NoEvent` if no event came in time; as [`CmBackend::next_event`].
    #[allow(clippy::type_complexity)]
    fn next_event_timeout(&self, timeout: Duration) -> Option<Result<(CmEvent, Option<Box<[u8]>>)>> {
        let _ = timeout;
        None
    }
    /// `rdma_disconnect`.
    ///
    /// # Errors
    /// `Provider`.
    fn disconnect(&self) -> Result<()>;
    /// Releases everything now, reporting the first failure (every step is still attempted).
    /// It takes the queue pair by value, so nothing can post, poll or wait on it afterwards
    /// (dropping it releases the same, logging a failure).
    ///
    /// # Errors
    /// `Provider`.
    fn destroy(self) -> Result<()>;
}

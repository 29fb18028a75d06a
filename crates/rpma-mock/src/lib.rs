//! # rpma-mock: an in-memory RDMA fabric with the semantics of a reliable connection
//!
//! [`MockFabric`] implements rpma-core's [`Transport`](rpma_core::Transport) entirely in
//! process (`transport.rs`), so every rule and every behaviour of the rpma API can be exercised
//! without RDMA hardware. It is a working transport, not a stub:
//!
//! - **Connection management**: addresses name mock devices; [`Ep::listen`](rpma_core::Ep::listen)
//!   on `addr:port` and [`ConnReq::new`](rpma_core::ConnReq::new) + `connect` to it exchange
//!   private data (zero-padded to the 56/196-byte fields of RDMA CM over IB/RoCE) and produce
//!   the connection events of librpma: ESTABLISHED, REJECTED (request deleted), UNREACHABLE (no
//!   listener), CLOSED (disconnect by either side, or the peer's connection dropped) and LOST
//!   (an injected link failure, [`MockQp::cut_link`]).
//! - **Memory**: read, write, atomic write and flush move bytes between the registered buffers of
//!   the two peers. The responder checks rkey, bounds and access rights as hardware does (with
//!   librpma's usage → access mapping); a violation gives an error completion
//!   ([`WcStatus::RemAccessErr`](rpma_core::WcStatus)) and touches no byte. As on RC hardware, a
//!   queue pair that produced an error completion enters the error state and flushes later work.
//! - **Messages**: send/recv and the imm variants. Posted receive buffers are an **unordered
//!   set**: by default the mock picks the buffer for each message at random (seeded,
//!   reproducible: [`MockFabricBuilder::seed`]), so code relying on posting order fails in
//!   tests. A message longer than the buffer fails on both sides. A send waits (RNR retry)
//!   until the peer posts a receive. Shared receive queues serve several connections.
//! - **Completions**: CQs with `wr_id`, status, opcode, `byte_len`, `imm_data`; unsignaled work
//!   requests occupy send-queue slots until a later signaled one is polled, so posting beyond
//!   the queue sizes fails as on hardware; completion channels become readable, per CQ or shared.
//! - **File descriptors**: a channel (a CQ's completion channel, a connection's CM events, an
//!   endpoint's requests) has no fd until one is asked for (`fd()`, `event_fd()`, `compl_fd()`,
//!   `set_nonblocking`, a wait with a deadline); then it gets one `eventfd`, readable while an
//!   event is pending. Blocking waits need none (they sleep on a condition variable), so 1000
//!   connections fit in the default limit of 1024 fds. A fabric holds one fd of its own: handed
//!   out by a channel whose eventfd cannot be created (`EMFILE`), always readable, the channel's
//!   waits then failing with that errno, so a poller wakes and learns why instead of hanging.
//! - **Connection management timeouts**: a side that disconnects first sees CLOSED when its peer
//!   disconnects too or goes away, or, if the peer stays silent, after the CM timeout (RDMA CM's
//!   DREQ timeout; [`MockFabricBuilder::cm_timeout`], 1 s by default; the timer runs on the
//!   fabric's thread `rpma-mock-progress`, started when first needed and ended with the fabric,
//!   so a poller of the event fd wakes too). An active side that goes away during setup makes
//!   the passive side's accept fail (`ECONNREFUSED`, "the requesting side is gone"); once
//!   accepted, its peer sees ESTABLISHED then CLOSED.
//! - **No retransmission**: nothing is lost between two mock peers, so a queue pair never
//!   retransmits; the retry count and the ACK timeout of a
//!   [`ConnCfg`](rpma_core::ConnCfg) ([`with_retry_count`](rpma_core::ConnCfg::with_retry_count),
//!   [`with_ack_timeout`](rpma_core::ConnCfg::with_ack_timeout)) are checked by rpma-core as on
//!   any backend and then ignored. A peer that goes away is reported at once (CLOSED or LOST),
//!   never after retries.
//! - **Between processes**: with a rendezvous directory ([`MockFabricBuilder::rendezvous`] or
//!   [`RENDEZVOUS_ENV`]), a listener also publishes a 0600 Unix socket there and a connection to
//!   an address nobody listens on in this process goes to it, so processes on one host connect
//!   (`rpma server`/`rpma client --backend mock`). Each connection is one socket; no memory is
//!   shared: every remote access is executed and checked by the process owning the target. A
//!   peer process that dies or speaks garbage is lost (LOST, outstanding work flushed).
//!   docs/semantics.md#between-processes has the rules.
//! - **Fault injection**: [`MockFabric::faults`] makes the N-th provider call fail with an errno;
//!   [`MockFabric::live`] counts live resources so tests can prove nothing leaks.
//!
//! # Modes
//!
//! When work executes is the fabric's [`Mode`], chosen with [`MockFabricBuilder::mode`] /
//! [`MockFabric::with_mode`] or, when the builder is not told, by the environment variable
//! `RPMA_MOCK_MODE=immediate|deferred` ([`MODE_ENV`]), read once when the fabric is built. An
//! unknown value is an [`InvalidInput`](rpma_core::ErrorKind::InvalidInput) error naming the
//! variable and the accepted values: from [`MockFabric::try_new`] /
//! [`MockFabricBuilder::try_build`] at once, and from every device lookup of a fabric built anyway
//! with [`MockFabric::new`] (never a panic).
//!
//! - [`Mode::Immediate`] (default): a one-sided operation executes inside `post`, and a send is
//!   delivered inside `post` if a receive waits. Fast and deterministic; it cannot show the bugs
//!   of code that assumes this.
//! - [`Mode::Deferred`]: work requests wait in their send queue and execute later, in posting
//!   order (RC's order; a send waiting for a receive holds back the work behind it): when a CQ
//!   or a wait of either end of the connection is polled, when [`MockFabric::progress`] is
//!   called, and on the fabric's progress thread about 2 ms after posting
//!   ([`MockFabricBuilder::background_progress`]; `None` for work that runs only when the test
//!   says). The source of a write or send is read when it executes, the destination of a read
//!   written then. What it punishes: a buffer reused before its completion (the peer gets the
//!   new bytes), a region read before the remote write's completion (it shows the old bytes),
//!   ordering assumed across connections (each progresses on its own), completions assumed
//!   without polling, a write posted right behind a read relying on the read's bytes (the write
//!   passes the read's response, as RC allows without a fence: it sends the old bytes). With
//!   [`MockFabricBuilder::tearing`], remote writes land in aligned pieces
//!   in a random order, one per progress step, so a "poll the last byte" receiver sees a torn
//!   message.
//!
//! # Concurrency
//!
//! No fabric-wide lock or counter on the data path. In the immediate mode a one-sided operation
//! (read, write, atomic write, flush) takes no lock and writes no memory another connection's
//! thread writes: the send-queue slots are a counter of its own queue pair, the target region
//! comes from the queue pair's cache of the last one (the peer's registration table, under its
//! read lock, only on a miss), the bytes move by one `memcpy` and the completion goes into the
//! CQ's own ring (a queue pair and its CQs are used by one thread at a time, the transport
//! contract). Its only read-modify-writes are on the target region's reference count, held
//! while it is copied into. Messages go through the receiver's queue and the sender's CQ's
//! shared queue (a lock each). The deferred mode's send queue is behind a lock (the peer's
//! polls and the progress thread execute it too) and its completions go through the CQ's
//! shared queue; its posts leave the immediate path where it finds no free slot (a deferred
//! queue pair has none there), so the immediate mode pays nothing for it.
//!
//! Capabilities are configurable ([`MockFabricBuilder::capabilities`]) so the emulated and
//! native flush / atomic-write paths can both be exercised.
#![forbid(unsafe_code)]

mod builder;
mod config;
mod counters;
mod cq;
mod crash;
mod device;
mod durable;
mod engine;
mod event;
mod fabric;
mod faults;
mod mem;
mod net;
mod notify;
mod pd;
mod power;
mod qp;
pub mod sim;
mod transport;

pub use builder::MockFabricBuilder;
pub use config::{default_rendezvous_dir, Mode, DEFAULT_CM_TIMEOUT, DEFAULT_PROGRESS_DELAY, MODE_ENV, RENDEZVOUS_ENV};
pub use counters::{Kind, LiveCounts};
pub use cq::MockCq;
pub use crash::{CrashFailure, CrashPoint, CrashPoints, CrashReport, Reboot};
pub use device::MockDevice;
pub use durable::{PersistentMemory, Unflushed};
pub use event::Event;
pub use fabric::MockFabric;
pub use faults::Faults;
pub use net::Direction;
pub use pd::{MockMr, MockPd};
pub use power::{PowerCut, Recovered};
pub use qp::{MockListener, MockQp, MockSrq};

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use rpma_core::{Error, Result};

const EADDRINUSE: i32 = 98;

/// The endpoints listening on a fabric, by `addr:port`: where a connection request made in this
/// process finds its listener. A part of the fabric's state (`fabric.rs`) that names the
/// listeners of `qp`, whose queue pairs hold the fabric: it stands here, at the root above every
/// module, so that the fabric itself stays below the queue pairs.
#[derive(Default)]
pub(crate) struct Listeners {
    by_addr: Mutex<HashMap<(String, u16), Weak<qp::ListenerShared>>>,
}

impl Listeners {
    /// The live listener on `addr:port` (one whose node's power was cut is gone).
    pub(crate) fn get(&self, addr: &str, port: u16) -> Option<Arc<qp::ListenerShared>> {
        let g = self.by_addr.lock().unwrap_or_else(PoisonError::into_inner);
        g.get(&(addr.to_owned(), port))?.upgrade().filter(|l| !l.dead.load(Ordering::Acquire))
    }

    /// Takes `addr:port` for `l`; `EADDRINUSE` if a live listener holds it.
    pub(crate) fn add(&self, addr: &str, port: u16, l: &Arc<qp::ListenerShared>) -> Result<()> {
        let mut g = self.by_addr.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (addr.to_owned(), port);
        if g.get(&key).and_then(Weak::upgrade).is_some_and(|l| !l.dead.load(Ordering::Acquire)) {
            return Err(Error::provider("rdma_bind_addr", EADDRINUSE).with_detail("another endpoint listens there"));
        }
        g.insert(key, Arc::downgrade(l));
        Ok(())
    }

    /// Frees `addr:port` if `l` holds it (a listener of a node cut and rebooted may hold it now).
    pub(crate) fn remove(&self, addr: &str, port: u16, l: &Arc<qp::ListenerShared>) {
        let mut g = self.by_addr.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (addr.to_owned(), port);
        if g.get(&key).is_some_and(|w| w.ptr_eq(&Arc::downgrade(l))) {
            g.remove(&key);
        }
    }
}

//! Connections; their endpoints, requests, completion queues and shared receive queues have a
//! file each.

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use crate::error::{Error, ErrorKind, Result};
use crate::peer::{Peer, PeerCfg};
use crate::trace::{ConnTrace, Step};
use crate::transport::{Capabilities, CmBackend, CmEvent, CqSlot, QpBackend, QueueConfig, Transport};
use crate::types::ConnEvent;
mod cfg;
mod cq;
mod ep;
#[cfg(feature = "mio")]
mod mio;
mod req;
mod srq;
mod wait;

pub use cfg::ConnCfg;
pub use cq::Cq;
pub use ep::Ep;
pub use req::ConnReq;
pub use srq::{Srq, SrqCfg};

/// What a connection's operations may use beyond one registered piece (from its
/// [`ConnCfg`](crate::ConnCfg), checked against the device).
#[derive(Clone, Copy, Debug)]
pub(crate) struct OpLimits {
    /// Pieces of a send, write or receive.
    pub(crate) max_sge: u32,
    /// Pieces of a read (also bounded by the device's `max_sge_rd`).
    pub(crate) max_sge_rd: u32,
    /// Inline bytes.
    pub(crate) max_inline: u32,
    /// Bytes of one message ([`validate::msg_limit`](crate::validate::msg_limit) of the
    /// device's capabilities, computed once).
    pub(crate) max_msg: u64,
}

impl OpLimits {
    pub(crate) fn of<T: Transport>(qc: &QueueConfig<'_, T>, caps: &Capabilities) -> Self {
        Self {
            max_sge: qc.max_sge,
            max_sge_rd: qc.max_sge.min(caps.max_sge_rd),
            max_inline: qc.max_inline,
            max_msg: crate::validate::msg_limit(caps),
        }
    }

    /// A shared receive queue's: one piece, nothing inline.
    pub(crate) fn single(caps: &Capabilities) -> Self {
        Self { max_sge: 1, max_sge_rd: 1, max_inline: 0, max_msg: crate::validate::msg_limit(caps) }
    }
}

/// A connection (`struct rpma_conn`).
///
/// `Send` but not `Sync` (docs/semantics.md#thread-safety): a connection is used by one
/// thread at a time, which may change (move it, or lend it through a `Mutex`). That is what
/// lets posting and polling go without a lock, an allocation or a reference count: the
/// queue pair's bookkeeping belongs to the thread holding the connection. To drive many
/// connections in parallel, give each thread its own; to post on one connection from several
/// threads, put it in a `Mutex` (librpma let threads share a connection and paid for a lock
/// in every post and poll).
pub struct Conn<T: Transport> {
    qp: T::Qp,
    shared: bool,
    limits: OpLimits,
    _not_sync: PhantomData<Cell<()>>,
    direct_write_to_pmem: AtomicBool,
    private_data: OnceLock<Box<[u8]>>,
    _srq: Option<Srq<T>>,
    peer: Peer<T>,
    trace: ConnTrace,
}

impl<T: Transport> fmt::Debug for Conn<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conn").field("qp_num", &self.qp_num()).finish_non_exhaustive()
    }
}

/// The connection's CM event fd ([`Conn::event_fd`]).
impl<T: Transport> AsFd for Conn<T> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.event_fd()
    }
}

impl<T: Transport> Conn<T> {
    #[inline(always)]
    pub(crate) const fn qp(&self) -> &T::Qp {
        &self.qp
    }

    /// `rpma_conn_get_event_fd`: the fd of the connection's own CM event channel.
    #[must_use]
    pub fn event_fd(&self) -> BorrowedFd<'_> {
        self.qp().event_fd()
    }

    /// `rpma_conn_next_event`: takes the next connection event. On the first
    /// [`ConnEvent::Established`] the active side stores the private data the passive side
    /// accepted with ([`Conn::private_data`]).
    ///
    /// # Errors
    /// [`NoEvent`](crate::ErrorKind::NoEvent) if nothing is pending and the fd is non-blocking;
    /// [`Other`](crate::ErrorKind::Other) for an unexpected CM event (it is acknowledged);
    /// [`Provider`](crate::ErrorKind::Provider) if getting or acknowledging the event fails.
    pub fn next_event(&self) -> Result<ConnEvent> {
        self.take_event(self.qp().next_event())
    }

    /// Maps a CM event the backend took (`rpma_conn_next_event`'s rules).
    pub(crate) fn take_event(&self, taken: Result<(CmEvent, Option<Box<[u8]>>)>) -> Result<ConnEvent> {
        const OP: &str = "Conn::next_event";
        let (ev, pdata) = taken.map_err(|e| e.in_op(OP))?;
        let _span = self.trace.enter();
        let event = match ev {
            CmEvent::Established => {
                if let Some(p) = pdata.filter(|p| !p.is_empty()) {
                    let _ = self.private_data.set(p);
                }
                ConnEvent::Established
            }
            CmEvent::ConnectError | CmEvent::DeviceRemoval => ConnEvent::Lost,
            CmEvent::Disconnected | CmEvent::TimewaitExit => ConnEvent::Closed,
            CmEvent::Rejected => ConnEvent::Rejected,
            CmEvent::Unreachable => ConnEvent::Unreachable,
            CmEvent::Other(raw) => {
                self.trace.unexpected_event(raw);
                rpma_log!(Warning in OP, "unexpected event received: {raw}");
                return Err(Error::new(ErrorKind::Other, OP).with_detail("unexpected CM event"));
            }
        };
        self.trace.cm_event(event);
        rpma_log!(Notice in OP, "{}", event.as_str());
        Ok(event)
    }

    /// `rpma_conn_get_private_data`: the passive side gets the client's connect data; the active
    /// side gets the server's accept data once [`ConnEvent::Established`] was taken (empty
    /// before). May be zero-padded past what the peer sent.
    ///
    /// SECURITY: private data is unauthenticated.
    #[must_use]
    pub fn private_data(&self) -> &[u8] {
        self.private_data.get().map_or(&[], |b| b)
    }

    /// `rpma_conn_apply_remote_peer_cfg`: records whether the remote peer writes directly to
    /// PMem; this alone gates [`FlushType::Persistent`](crate::FlushType::Persistent).
    pub fn apply_remote_peer_cfg(&self, pcfg: &PeerCfg) {
        self.direct_write_to_pmem.store(pcfg.direct_write_to_pmem(), Ordering::Relaxed);
    }

    /// `rpma_conn_get_qp_num`: the QP number (also after disconnect).
    #[must_use]
    pub fn qp_num(&self) -> u32 {
        self.qp().qp_num()
    }

    /// `rpma_conn_get_cq`: the main CQ (all completions, or all but receive completions when a
    /// receive CQ exists).
    #[must_use]
    pub fn cq(&self) -> Cq<'_, T> {
        Cq { cq: self.qp().cq(), shared: self.shared, _local: PhantomData }
    }

    /// `rpma_conn_get_rcq`: the connection's own receive CQ, or `None` (no `rcq_size`, or an SRQ
    /// with its own receive CQ is used).
    #[must_use]
    pub fn rcq(&self) -> Option<Cq<'_, T>> {
        self.qp().rcq().map(|cq| Cq { cq, shared: self.shared, _local: PhantomData })
    }

    /// `rpma_conn_get_compl_fd`: the fd of the shared completion channel.
    ///
    /// # Errors
    /// [`NotSharedChannel`](crate::ErrorKind::NotSharedChannel) if the channel is not shared.
    pub fn compl_fd(&self) -> Result<BorrowedFd<'_>> {
        self.qp().compl_fd().ok_or_else(|| Error::new(ErrorKind::NotSharedChannel, "Conn::compl_fd"))
    }

    /// `rpma_conn_wait`: waits on the shared completion channel and says which CQ has a
    /// completion event (and whether it is the receive CQ); then drain that CQ.
    ///
    /// # Errors
    /// [`NotSharedChannel`](crate::ErrorKind::NotSharedChannel) if the channel is not shared;
    /// [`NoCompletion`](crate::ErrorKind::NoCompletion) if no event can be had (non-blocking fd);
    /// [`Other`](crate::ErrorKind::Other) for an event of an unknown CQ;
    /// [`Provider`](crate::ErrorKind::Provider) if re-arming fails.
    pub fn wait(&self) -> Result<(Cq<'_, T>, bool)> {
        const OP: &str = "Conn::wait";
        if !self.shared {
            return Err(Error::new(ErrorKind::NotSharedChannel, OP));
        }
        match self.qp().wait_shared().map_err(|e| e.in_op(OP))? {
            CqSlot::Main => Ok((self.cq(), false)),
            CqSlot::Receive => self
                .rcq()
                .map(|c| (c, true))
                .ok_or_else(|| Error::new(ErrorKind::Other, OP).with_detail("event from an unknown CQ")),
        }
    }

    /// `rpma_conn_disconnect`: initiates a disconnect (then wait for [`ConnEvent::Closed`]) or
    /// completes one after [`ConnEvent::Closed`] was received.
    ///
    /// # Errors
    /// [`Provider`](crate::ErrorKind::Provider) if `rdma_disconnect` fails.
    pub fn disconnect(&self) -> Result<()> {
        let _span = self.trace.enter();
        self.trace.step(Step::Disconnect);
        rpma_log!(Notice in "Conn::disconnect", "Requesting for disconnection");
        self.qp().disconnect().map_err(|e| e.in_op("Conn::disconnect"))
    }

    /// `rpma_conn_delete`: releases the connection now and reports the first failure (every
    /// release step is attempted). Call after [`ConnEvent::Closed`]. (Dropping the connection
    /// does the same, logging a failure.)
    ///
    /// # Errors
    /// [`Provider`](crate::ErrorKind::Provider).
    pub fn delete(self) -> Result<()> {
        // The queue pair goes first, as when the connection is dropped (fields drop in order:
        // the queue pair, then the shared receive queue and the peer it may depend on).
        let Self { qp, _srq, peer, trace, .. } = self;
        let _span = trace.enter();
        trace.step(Step::Delete);
        let r = qp.destroy().map_err(|e| e.in_op("Conn::delete"));
        drop(_srq);
        drop(peer);
        r
    }

    pub(crate) const fn limits(&self) -> &OpLimits {
        &self.limits
    }

    /// Send-queue slots free now: the configured send-queue size minus the operations posted
    /// and not yet retired. An operation is retired by polling its completion or, if it was
    /// posted unsignaled ([`CompletionFlags::ON_ERROR`](crate::CompletionFlags::ON_ERROR)), the
    /// completion of a later operation of the same connection: a connection that posts only
    /// unsignaled operations fills its send queue. A [`Batch`](crate::Batch) longer than this is
    /// refused whole.
    #[must_use]
    pub fn sq_free(&self) -> u32 {
        self.qp().sq_free()
    }

    /// Whether the remote peer declared that it writes directly to persistent memory
    /// ([`Conn::apply_remote_peer_cfg`]): what a persistent flush on this connection needs.
    #[must_use]
    pub fn direct_write_to_pmem(&self) -> bool {
        self.direct_write_to_pmem.load(Ordering::Relaxed)
    }

    /// The backend's queue pair, for controls a backend offers beyond this API (e.g. the mock's
    /// link cut and event injection). Part of the backend contract ([`crate::transport`]), which
    /// is not semver-stable.
    #[must_use]
    pub fn backend(&self) -> &T::Qp {
        self.qp()
    }

    /// What the connection's completions counted so far (see [`ConnStats`](crate::ConnStats)
    /// for exactly what is counted). With the `tracing` feature only: the count is taken where
    /// each poll tests its completions for `rpma.failed_completion` events.
    #[cfg(feature = "tracing")]
    #[must_use]
    pub fn stats(&self) -> crate::trace::ConnStats {
        ConnTrace::stats::<T>(self.qp())
    }

    /// The peer the connection was made from.
    #[must_use]
    pub fn peer(&self) -> &Peer<T> {
        &self.peer
    }
}

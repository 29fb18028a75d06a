//! Endpoints, connection requests, connections, completion queues and shared receive queues.

use std::fmt;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use crate::cfg::{ConnCfg, SrqCfg, DEFAULT_SRQ_SIZE};
use crate::error::{Error, ErrorKind, Result};
use crate::peer::{Peer, PeerCfg, PeerInner};
use crate::transport::{
    Capabilities, CmEvent, CqBackend, CqSlot, ListenerBackend, QpBackend, QueueConfig, SrqBackend, Transport,
};
use crate::types::{ConnEvent, Wc};
use crate::validate;

/// A completion queue (`struct rpma_cq`), borrowed from its connection or shared RQ.
///
/// `Send + Sync` (`Copy`): polling from several threads is allowed, as in librpma.
pub struct Cq<'a, T: Transport> {
    cq: &'a T::Cq,
    shared: bool,
}

impl<T: Transport> fmt::Debug for Cq<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cq").field("shared_channel", &self.shared).finish_non_exhaustive()
    }
}

impl<T: Transport> Clone for Cq<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Transport> Copy for Cq<'_, T> {}

impl<'a, T: Transport> Cq<'a, T> {
    /// `rpma_cq_get_fd`: the fd of the CQ's completion channel (the shared channel's fd if it
    /// is shared). It becomes readable when a completion event is pending; set `O_NONBLOCK` on
    /// it to make [`Cq::wait`] non-blocking.
    #[must_use]
    pub fn fd(&self) -> BorrowedFd<'a> {
        self.cq.fd()
    }

    /// `rpma_cq_wait`: waits for a completion event, acks it and re-arms the CQ. Afterwards
    /// drain the CQ with [`Cq::poll`] (a wait may also be spurious).
    ///
    /// # Errors
    /// [`SharedChannel`](ErrorKind::SharedChannel) if the channel is shared (use
    /// [`Conn::wait`]); [`NoCompletion`](ErrorKind::NoCompletion) if no event can be had
    /// (non-blocking fd); [`Provider`](ErrorKind::Provider) if re-arming fails.
    pub fn wait(&self) -> Result<()> {
        if self.shared {
            return Err(Error::new(ErrorKind::SharedChannel, "rpma_cq_wait"));
        }
        self.cq.wait().map_err(|e| e.in_op("rpma_cq_wait"))
    }

    /// `rpma_cq_get_wc`: polls up to `wc.len()` completions into `wc` and returns how many
    /// (`0`: the queue is empty; librpma's `RPMA_E_NO_COMPLETION`).
    ///
    /// # Errors
    /// [`Inval`](ErrorKind::Inval) if `wc` is empty (`num_entries < 1`);
    /// [`Provider`](ErrorKind::Provider) if polling fails; [`Unknown`](ErrorKind::Unknown) if
    /// the provider reports more entries than asked.
    #[doc(alias = "rpma_cq_get_wc")]
    #[inline]
    pub fn poll(&self, wc: &mut [Wc]) -> Result<usize> {
        if wc.is_empty() {
            return Err(Error::inval("rpma_cq_get_wc", "num_entries < 1"));
        }
        polled(self.cq.poll(wc), wc.len())
    }

    /// Polls one completion (`rpma_cq_get_wc` with `num_entries == 1`): `None` if the queue is
    /// empty.
    ///
    /// # Errors
    /// As [`Cq::poll`].
    #[doc(alias = "rpma_cq_get_wc")]
    #[inline]
    pub fn next_wc(&self) -> Result<Option<Wc>> {
        let mut wc = [Wc::EMPTY];
        Ok((self.poll(&mut wc)? == 1).then_some(wc[0]))
    }

    /// Whether the CQ's channel is shared with the connection's other CQ.
    #[must_use]
    pub const fn is_channel_shared(&self) -> bool {
        self.shared
    }
}

/// `rpma_cq_get_wc`'s mapping of a poll result for `asked` entries: none → `Ok(0)` (librpma's
/// `NoCompletion`); more than asked (a misbehaving provider) → `Unknown`; a failure → its kind.
#[inline]
fn polled(r: Result<usize>, asked: usize) -> Result<usize> {
    const OP: &str = "rpma_cq_get_wc";
    match r {
        Ok(n) if n <= asked => Ok(n),
        Ok(_) => Err(Error::new(ErrorKind::Unknown, OP).with_detail("provider returned too many entries")),
        Err(e) => Err(e.in_op(OP)),
    }
}

impl<T: Transport> AsFd for Cq<'_, T> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.cq.fd()
    }
}

/// A shared receive queue (`struct rpma_srq`): one set of receive buffers for several
/// connections. Cheap to clone (a handle); connections using it keep it alive.
///
/// `Send + Sync`: receives may be posted from several threads.
pub struct Srq<T: Transport> {
    srq: Arc<T::Srq>,
    _peer: Arc<PeerInner<T>>,
}

impl<T: Transport> Clone for Srq<T> {
    fn clone(&self) -> Self {
        Self { srq: Arc::clone(&self.srq), _peer: Arc::clone(&self._peer) }
    }
}

impl<T: Transport> fmt::Debug for Srq<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Srq").field("rcq", &self.srq.rcq().is_some()).finish_non_exhaustive()
    }
}

impl<T: Transport> Srq<T> {
    /// `rpma_srq_new`: a shared RQ of `cfg.rq_size()` entries with, if `cfg.rcq_size() > 0`, its
    /// own receive CQ (with a private completion channel). `None` uses the defaults (20 / 20).
    ///
    /// # Errors
    /// [`Inval`](ErrorKind::Inval) if a size exceeds the device's limit (`max_srq_wr`,
    /// `max_cqe`); [`Provider`](ErrorKind::Provider) if creating the SRQ, channel or CQ fails;
    /// [`NoMem`](ErrorKind::NoMem).
    pub fn new(peer: &Peer<T>, cfg: Option<&SrqCfg>) -> Result<Self> {
        const OP: &str = "rpma_srq_new";
        let (rq, rcq) = cfg.map_or((DEFAULT_SRQ_SIZE, DEFAULT_SRQ_SIZE), |c| (c.rq_size(), c.rcq_size()));
        validate::queue_size(OP, "rq_size", rq, peer.inner.caps.max_srq_wr)?;
        validate::queue_size(OP, "rcq_size", rcq, peer.inner.caps.max_cqe)?;
        let srq = peer.transport().create_srq(&peer.inner.pd, rq, rcq).map_err(|e| e.in_op("rpma_srq_new"))?;
        Ok(Self { srq: Arc::new(srq), _peer: Arc::clone(&peer.inner) })
    }

    pub(crate) fn backend(&self) -> &T::Srq {
        &self.srq
    }

    pub(crate) fn caps(&self) -> &Capabilities {
        &self._peer.caps
    }

    /// `rpma_srq_get_rcq`: the SRQ's receive CQ, or `None` if created with `rcq_size == 0`.
    #[must_use]
    pub fn rcq(&self) -> Option<Cq<'_, T>> {
        self.srq.rcq().map(|cq| Cq { cq, shared: false })
    }

    /// `rpma_srq_delete`: releases this handle; the SRQ is destroyed when the last connection
    /// using it is gone, and a failure is reported if this was the last handle.
    ///
    /// # Errors
    /// [`Provider`](ErrorKind::Provider) if destroying the CQ, channel or SRQ fails.
    pub fn delete(self) -> Result<()> {
        match Arc::try_unwrap(self.srq) {
            Ok(s) => s.destroy().map_err(|e| e.in_op("rpma_srq_delete")),
            Err(_) => Ok(()),
        }
    }
}

fn queue_config<'a, T: Transport>(
    op: &'static str,
    caps: &Capabilities,
    cfg: Option<&ConnCfg<T>>,
    srq: &'a Option<Srq<T>>,
) -> Result<QueueConfig<'a, T>> {
    let d = ConnCfg::<T>::new();
    let c = cfg.unwrap_or(&d);
    let shared = c.shared_channel();
    if shared && srq.as_ref().is_some_and(|s| s.srq.rcq().is_some()) {
        return Err(Error::inval(
            op,
            "a shared completion channel cannot be used with an SRQ that has its own receive CQ",
        ));
    }
    let timeout_ms = i32::try_from(c.timeout().as_millis())
        .map_err(|_| Error::inval(op, "the timeout exceeds i32::MAX milliseconds"))?;
    validate::queue_size(op, "cq_size", c.cq_size(), caps.max_cqe)?;
    validate::queue_size(op, "rcq_size", c.rcq_size(), caps.max_cqe)?;
    validate::queue_size(op, "sq_size", c.sq_size(), caps.max_qp_wr)?;
    validate::queue_size(op, "rq_size", c.rq_size(), caps.max_qp_wr)?;
    Ok(QueueConfig {
        timeout_ms,
        cq_size: c.cq_size(),
        rcq_size: c.rcq_size(),
        sq_size: c.sq_size(),
        rq_size: c.rq_size(),
        shared_channel: shared,
        srq: srq.as_ref().map(|s| &s.srq),
    })
}

/// A listening endpoint (`struct rpma_ep`), the passive side's source of connection requests.
///
/// `Send + Sync`, but used by one thread at a time in practice (librpma's rule;
/// `next_conn_req` takes `&self` but the event channel is one stream).
pub struct Ep<T: Transport> {
    listener: Option<T::Listener>,
    peer: Peer<T>,
}

impl<T: Transport> fmt::Debug for Ep<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ep").finish_non_exhaustive()
    }
}

impl<T: Transport> Ep<T> {
    /// `rpma_ep_listen`: listens for connection requests on `addr:port`.
    ///
    /// # Errors
    /// [`Provider`](ErrorKind::Provider) if the address cannot be translated, bound or listened
    /// on (e.g. the port is taken); [`NoMem`](ErrorKind::NoMem).
    pub fn listen(peer: &Peer<T>, addr: &str, port: &str) -> Result<Self> {
        let l = peer.transport().listen(&peer.inner.pd, addr, port).map_err(|e| e.in_op("rpma_ep_listen"))?;
        crate::rpma_log!(Notice, "Waiting for incoming connection on {addr}:{port}");
        Ok(Self { listener: Some(l), peer: peer.clone() })
    }

    fn listener(&self) -> &T::Listener {
        self.listener.as_ref().expect("listener present until shutdown")
    }

    /// `rpma_ep_get_fd`: the fd of the endpoint's event channel (set `O_NONBLOCK` to make
    /// [`Ep::next_conn_req`] non-blocking; usable with poll/epoll).
    #[must_use]
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.listener().fd()
    }

    /// `rpma_ep_next_conn_req`: takes the next incoming connection request and builds its
    /// queues per `cfg` (`None`: defaults).
    ///
    /// # Errors
    /// [`NoEvent`](ErrorKind::NoEvent) if none is pending and the fd is non-blocking;
    /// [`Inval`](ErrorKind::Inval) if the next event is not a connection request, `cfg`
    /// combines a shared completion channel with an SRQ that has its own receive CQ, or a queue
    /// size exceeds the device's limit;
    /// [`Provider`](ErrorKind::Provider) if getting the event or building the queues fails;
    /// [`NoMem`](ErrorKind::NoMem).
    pub fn next_conn_req(&self, cfg: Option<&ConnCfg<T>>) -> Result<ConnReq<T>> {
        const OP: &str = "rpma_ep_next_conn_req";
        let srq = cfg.and_then(ConnCfg::srq).cloned();
        let qc = queue_config(OP, &self.peer.inner.caps, cfg, &srq)?;
        let shared = qc.shared_channel;
        let qp = self.listener().next_request(&qc).map_err(|e| e.in_op(OP))?;
        Ok(ConnReq { qp: Some(qp), shared, incoming: true, srq, peer: self.peer.clone() })
    }

    /// `rpma_ep_shutdown`: stops listening. Existing connections are not affected. (Dropping
    /// the endpoint does the same, logging a failure.)
    ///
    /// # Errors
    /// [`Provider`](ErrorKind::Provider) if destroying the listening identifier fails; the
    /// endpoint is gone all the same (spec 9 #10).
    pub fn shutdown(mut self) -> Result<()> {
        self.listener.take().map_or(Ok(()), |l| l.shutdown().map_err(|e| e.in_op("rpma_ep_shutdown")))
    }
}

impl<T: Transport> AsFd for Ep<T> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd()
    }
}

/// A connection request (`struct rpma_conn_req`): outgoing ([`ConnReq::new`]) or incoming
/// ([`Ep::next_conn_req`]). [`ConnReq::connect`] turns it into a [`Conn`]; dropping it (or
/// [`ConnReq::delete`]) rejects an incoming request and abandons an outgoing one.
///
/// `Send + Sync`.
pub struct ConnReq<T: Transport> {
    qp: Option<T::Qp>,
    shared: bool,
    incoming: bool,
    srq: Option<Srq<T>>,
    peer: Peer<T>,
}

impl<T: Transport> fmt::Debug for ConnReq<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnReq").field("incoming", &self.incoming).finish_non_exhaustive()
    }
}

impl<T: Transport> Drop for ConnReq<T> {
    fn drop(&mut self) {
        if let Some(qp) = self.qp.take() {
            if let Err(e) = qp.reject() {
                crate::rpma_log!(Error, "dropping a connection request failed: {e}");
            }
        }
    }
}

impl<T: Transport> ConnReq<T> {
    /// `rpma_conn_req_new`: resolves `addr:port` (blocking, up to the configured timeout for
    /// each step) and builds the queues of an outgoing connection per `cfg` (`None`: defaults).
    ///
    /// # Errors
    /// [`Inval`](ErrorKind::Inval) if `cfg` combines a shared completion channel with an SRQ
    /// that has its own receive CQ, a queue size exceeds the device's limit (`max_qp_wr`,
    /// `max_cqe`) or the timeout does not fit `i32` milliseconds;
    /// [`Provider`](ErrorKind::Provider) if resolving the address
    /// or route, or creating the CQs or QP, fails; [`NoMem`](ErrorKind::NoMem).
    pub fn new(peer: &Peer<T>, addr: &str, port: &str, cfg: Option<&ConnCfg<T>>) -> Result<Self> {
        const OP: &str = "rpma_conn_req_new";
        let srq = cfg.and_then(ConnCfg::srq).cloned();
        let qc = queue_config(OP, &peer.inner.caps, cfg, &srq)?;
        let shared = qc.shared_channel;
        let qp = peer.transport().connect_request(&peer.inner.pd, addr, port, &qc).map_err(|e| e.in_op(OP))?;
        crate::rpma_log!(Notice, "Requesting a connection to {addr}:{port}");
        Ok(Self { qp: Some(qp), shared, incoming: false, srq, peer: peer.clone() })
    }

    pub(crate) fn qp(&self) -> &T::Qp {
        self.qp.as_ref().expect("qp present until consumed")
    }

    pub(crate) fn caps(&self) -> &Capabilities {
        &self.peer.inner.caps
    }

    /// Whether this is an incoming request (from [`Ep::next_conn_req`]).
    #[must_use]
    pub const fn is_incoming(&self) -> bool {
        self.incoming
    }

    /// `rpma_conn_req_get_private_data`: the private data that came with an incoming request
    /// (empty for outgoing requests or when none was sent). It may be longer than what the peer
    /// sent (zero-padded by the transport): check `len >= expected`, never `==`.
    ///
    /// SECURITY: private data is unauthenticated.
    #[must_use]
    pub fn private_data(&self) -> &[u8] {
        self.qp().request_private_data()
    }

    /// `rpma_conn_req_connect`: connects an outgoing request or accepts an incoming one,
    /// sending `pdata` as private data. The request is consumed either way; establishment is
    /// reported later by [`ConnEvent::Established`] from [`Conn::next_event`].
    ///
    /// # Errors
    /// [`Inval`](ErrorKind::Inval) if `pdata` is given but empty, or longer than the transport
    /// allows (56 bytes to connect, 196 to accept on IB/RoCE); the request is then deleted (an
    /// incoming one rejected), as librpma does (spec 9 #16); [`Provider`](ErrorKind::Provider)
    /// if connecting or accepting fails; [`NoMem`](ErrorKind::NoMem).
    pub fn connect(mut self, pdata: Option<&[u8]>) -> Result<Conn<T>> {
        const OP: &str = "rpma_conn_req_connect";
        let caps = &self.peer.inner.caps;
        let limit = if self.incoming { caps.max_private_data_accept } else { caps.max_private_data_connect };
        validate::private_data(OP, pdata, limit)?;
        let mut qp = self.qp.take().expect("qp present until consumed");
        let req_pdata: Box<[u8]> = qp.request_private_data().into();
        if let Err(e) = qp.connect(pdata) {
            if let Err(e2) = qp.reject() {
                crate::rpma_log!(Error, "releasing a failed connection request: {e2}");
            }
            return Err(e.in_op(OP));
        }
        let private_data = OnceLock::new();
        if !req_pdata.is_empty() {
            let _ = private_data.set(req_pdata);
        }
        Ok(Conn {
            qp: Some(qp),
            shared: self.shared,
            direct_write_to_pmem: AtomicBool::new(false),
            private_data,
            _srq: self.srq.take(),
            peer: self.peer.clone(),
        })
    }

    /// `rpma_conn_req_delete`: rejects an incoming request (`rdma_reject`) or abandons an
    /// outgoing one, releasing its queues. (Dropping the request does the same.)
    ///
    /// # Errors
    /// [`Provider`](ErrorKind::Provider): the first failure of the release steps (all are
    /// attempted).
    pub fn delete(mut self) -> Result<()> {
        self.qp.take().map_or(Ok(()), |qp| qp.reject().map_err(|e| e.in_op("rpma_conn_req_delete")))
    }
}

/// A connection (`struct rpma_conn`).
///
/// Thread safety follows librpma (spec 8.11): data-path operations, getters, `next_event`,
/// `wait` and `disconnect` may be called from several threads at once (`&self`): `Send + Sync`.
pub struct Conn<T: Transport> {
    qp: Option<T::Qp>,
    shared: bool,
    direct_write_to_pmem: AtomicBool,
    private_data: OnceLock<Box<[u8]>>,
    _srq: Option<Srq<T>>,
    peer: Peer<T>,
}

impl<T: Transport> fmt::Debug for Conn<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conn").field("qp_num", &self.qp_num()).finish_non_exhaustive()
    }
}

impl<T: Transport> Drop for Conn<T> {
    fn drop(&mut self) {
        if let Some(qp) = self.qp.take() {
            if let Err(e) = qp.destroy() {
                crate::rpma_log!(Error, "dropping a connection failed: {e}");
            }
        }
    }
}

impl<T: Transport> Conn<T> {
    pub(crate) fn qp(&self) -> &T::Qp {
        self.qp.as_ref().expect("qp present until deleted")
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
    /// [`NoEvent`](ErrorKind::NoEvent) if nothing is pending and the fd is non-blocking;
    /// [`Unknown`](ErrorKind::Unknown) for an unexpected CM event (it is acknowledged);
    /// [`Provider`](ErrorKind::Provider) if getting or acknowledging the event fails.
    pub fn next_event(&self) -> Result<ConnEvent> {
        const OP: &str = "rpma_conn_next_event";
        let (ev, pdata) = self.qp().next_event().map_err(|e| e.in_op(OP))?;
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
                crate::rpma_log!(Warning, "{OP}: unexpected event received: {raw}");
                return Err(Error::new(ErrorKind::Unknown, OP).with_detail("unexpected CM event"));
            }
        };
        crate::rpma_log!(Notice, "{}", event.as_str());
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
        Cq { cq: self.qp().cq(), shared: self.shared }
    }

    /// `rpma_conn_get_rcq`: the connection's own receive CQ, or `None` (no `rcq_size`, or an SRQ
    /// with its own receive CQ is used).
    #[must_use]
    pub fn rcq(&self) -> Option<Cq<'_, T>> {
        self.qp().rcq().map(|cq| Cq { cq, shared: self.shared })
    }

    /// `rpma_conn_get_compl_fd`: the fd of the shared completion channel.
    ///
    /// # Errors
    /// [`NotSharedChannel`](ErrorKind::NotSharedChannel) if the channel is not shared.
    pub fn compl_fd(&self) -> Result<BorrowedFd<'_>> {
        self.qp().compl_fd().ok_or_else(|| Error::new(ErrorKind::NotSharedChannel, "rpma_conn_get_compl_fd"))
    }

    /// `rpma_conn_wait`: waits on the shared completion channel and says which CQ has a
    /// completion event (and whether it is the receive CQ); then drain that CQ.
    ///
    /// # Errors
    /// [`NotSharedChannel`](ErrorKind::NotSharedChannel) if the channel is not shared;
    /// [`NoCompletion`](ErrorKind::NoCompletion) if no event can be had (non-blocking fd);
    /// [`Unknown`](ErrorKind::Unknown) for an event of an unknown CQ;
    /// [`Provider`](ErrorKind::Provider) if re-arming fails.
    pub fn wait(&self) -> Result<(Cq<'_, T>, bool)> {
        const OP: &str = "rpma_conn_wait";
        if !self.shared {
            return Err(Error::new(ErrorKind::NotSharedChannel, OP));
        }
        match self.qp().wait_shared().map_err(|e| e.in_op(OP))? {
            CqSlot::Main => Ok((self.cq(), false)),
            CqSlot::Receive => self
                .rcq()
                .map(|c| (c, true))
                .ok_or_else(|| Error::new(ErrorKind::Unknown, OP).with_detail("event from an unknown CQ")),
        }
    }

    /// `rpma_conn_disconnect`: initiates a disconnect (then wait for [`ConnEvent::Closed`]) or
    /// completes one after [`ConnEvent::Closed`] was received.
    ///
    /// # Errors
    /// [`Provider`](ErrorKind::Provider) if `rdma_disconnect` fails.
    pub fn disconnect(&self) -> Result<()> {
        crate::rpma_log!(Notice, "Requesting for disconnection");
        self.qp().disconnect().map_err(|e| e.in_op("rpma_conn_disconnect"))
    }

    /// `rpma_conn_delete`: releases the connection now and reports the first failure (every
    /// release step is attempted). Call after [`ConnEvent::Closed`]. (Dropping the connection
    /// does the same, logging a failure.)
    ///
    /// # Errors
    /// [`Provider`](ErrorKind::Provider).
    pub fn delete(mut self) -> Result<()> {
        self.qp.take().map_or(Ok(()), |qp| qp.destroy().map_err(|e| e.in_op("rpma_conn_delete")))
    }

    pub(crate) fn caps(&self) -> &Capabilities {
        &self.peer.inner.caps
    }

    pub(crate) fn direct_write_to_pmem(&self) -> bool {
        self.direct_write_to_pmem.load(Ordering::Relaxed)
    }

    /// The backend's queue pair, for controls a backend offers beyond this API (e.g. the mock's
    /// link cut and event injection). Part of the backend contract ([`crate::transport`]), which
    /// is not semver-stable.
    #[must_use]
    pub fn backend(&self) -> &T::Qp {
        self.qp()
    }

    /// The peer the connection was made from.
    #[must_use]
    pub fn peer(&self) -> &Peer<T> {
        &self.peer
    }
}

#[cfg(test)]
#[allow(non_snake_case)]
mod tests {
    use super::polled;
    use crate::error::{Error, ErrorKind};

    /// librpma's `get_wc__poll_cq_more_data` with the provider returning more entries than
    /// asked: no backend can be made to do that, so the guard is tested on its own.
    #[test]
    fn cq_get_wc__poll_cq_more_than_asked_E_UNKNOWN() {
        for (asked, got) in [(1, 2), (4, 5), (4, usize::MAX)] {
            let e = polled(Ok(got), asked).expect_err("more entries than asked must fail");
            assert_eq!((e.kind(), e.op()), (ErrorKind::Unknown, "rpma_cq_get_wc"));
        }
        assert_eq!(polled(Ok(4), 4), Ok(4));
        assert_eq!(polled(Ok(1), 4), Ok(1));
        assert_eq!(polled(Ok(0), 4), Ok(0));
        let e = polled(Err(Error::provider("ibv_poll_cq", 5)), 4).expect_err("a failed poll");
        assert_eq!((e.kind(), e.op(), e.errno()), (ErrorKind::Provider, "rpma_cq_get_wc", Some(5)));
    }
}

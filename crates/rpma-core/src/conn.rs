//! Endpoints, connection requests, connections, completion queues and shared receive queues.

use std::fmt;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use crate::cfg::{ConnCfg, SrqCfg, DEFAULT_SRQ_SIZE};
use crate::error::{Error, ErrorKind, Result};
use crate::mr::{MrLocal, MrRemote};
use crate::peer::{Peer, PeerCfg, PeerInner};
use crate::transport::{
    CmEvent, CqBackend, CqSlot, ListenerBackend, LocalBuf, QpBackend, QueueConfig, SendOp, SendWr, SrqBackend,
    Transport,
};
use crate::types::{CompletionFlags, ConnEvent, FlushType, Wc};
use crate::validate::{self, RemoteAccess};

/// A completion queue (`struct rpma_cq`), borrowed from its connection or shared RQ.
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
    /// drain the CQ with [`Cq::get_wc`] (a wait may also be spurious).
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

    /// `rpma_cq_get_wc`: polls up to `wc.len()` completions into `wc`; returns how many.
    ///
    /// # Errors
    /// [`Inval`](ErrorKind::Inval) if `wc` is empty (`num_entries < 1`);
    /// [`NoCompletion`](ErrorKind::NoCompletion) if none is available;
    /// [`Provider`](ErrorKind::Provider) if polling fails.
    pub fn get_wc(&self, wc: &mut [Wc]) -> Result<usize> {
        const OP: &str = "rpma_cq_get_wc";
        if wc.is_empty() {
            return Err(Error::inval(OP, "num_entries < 1"));
        }
        polled(self.cq.poll(wc), wc.len())
    }

    /// Polls exactly one completion (`rpma_cq_get_wc` with `num_entries == 1`).
    ///
    /// # Errors
    /// As [`Cq::get_wc`].
    pub fn get_wc1(&self) -> Result<Wc> {
        let mut wc = [Wc::EMPTY];
        self.get_wc(&mut wc)?;
        Ok(wc[0])
    }

    /// Whether the CQ's channel is shared with the connection's other CQ.
    #[must_use]
    pub const fn is_channel_shared(&self) -> bool {
        self.shared
    }
}

/// `rpma_cq_get_wc`'s mapping of a poll result for `asked` entries (spec 6.11): none →
/// `NoCompletion`; more than asked (a misbehaving provider) → `Unknown`; a failure → its kind.
fn polled(r: Result<usize>, asked: usize) -> Result<usize> {
    const OP: &str = "rpma_cq_get_wc";
    match r {
        Ok(0) => Err(Error::new(ErrorKind::NoCompletion, OP)),
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
    /// [`Provider`](ErrorKind::Provider) if creating the SRQ, channel or CQ fails;
    /// [`NoMem`](ErrorKind::NoMem).
    pub fn new(peer: &Peer<T>, cfg: Option<&SrqCfg>) -> Result<Self> {
        let (rq, rcq) = cfg.map_or((DEFAULT_SRQ_SIZE, DEFAULT_SRQ_SIZE), |c| (c.rq_size(), c.rcq_size()));
        let srq = peer.transport().create_srq(&peer.inner.pd, rq, rcq).map_err(|e| e.in_op("rpma_srq_new"))?;
        Ok(Self { srq: Arc::new(srq), _peer: Arc::clone(&peer.inner) })
    }

    /// `rpma_srq_recv`: posts a receive buffer shared by all connections using the SRQ. `None`
    /// with `offset == len == 0` posts a zero-length buffer.
    ///
    /// Posted buffers form an **unordered set**: the order of posting does not determine which
    /// buffer a message lands in, nor the order of completions.
    ///
    /// # Errors
    /// [`Inval`](ErrorKind::Inval) for `None` with a non-zero offset or len, a range outside
    /// `dst`, or a `dst` the device may not write; [`Provider`](ErrorKind::Provider) if posting
    /// fails (e.g. the SRQ is full).
    pub fn recv(&self, dst: Option<&MrLocal<T>>, offset: usize, len: usize, op_context: u64) -> Result<()> {
        const OP: &str = "rpma_srq_recv";
        let buf = recv_buf(OP, &self._peer, dst, offset, len)?;
        self.srq.post_recv(buf, op_context).map_err(|e| e.in_op(OP))
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

fn recv_buf<'a, T: Transport>(
    op: &'static str,
    peer: &PeerInner<T>,
    dst: Option<&'a MrLocal<T>>,
    offset: usize,
    len: usize,
) -> Result<Option<LocalBuf<'a, T::Mr>>> {
    validate::zero_form(op, dst.is_some(), &[offset, len])?;
    validate::msg_len(op, &peer.caps, len)?;
    dst.map(|m| validate::local_buf(op, &m.mr, m.usage(), offset, len, true)).transpose()
}

fn queue_config<'a, T: Transport>(
    op: &'static str,
    cfg: Option<&ConnCfg<T>>,
    srq: &'a Option<Srq<T>>,
) -> Result<QueueConfig<'a, T>> {
    let d = ConnCfg::<T>::new();
    let c = cfg.unwrap_or(&d);
    let shared = c.compl_channel();
    if shared && srq.as_ref().is_some_and(|s| s.srq.rcq().is_some()) {
        return Err(Error::inval(
            op,
            "a shared completion channel cannot be used with an SRQ that has its own receive CQ",
        ));
    }
    Ok(QueueConfig {
        timeout_ms: c.timeout_ms(),
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
/// Used by one thread at a time (librpma's rule; `next_conn_req` takes `&self` but the event
/// channel is one stream).
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
    /// [`Inval`](ErrorKind::Inval) if the next event is not a connection request, or `cfg`
    /// combines a shared completion channel with an SRQ that has its own receive CQ;
    /// [`Provider`](ErrorKind::Provider) if getting the event or building the queues fails;
    /// [`NoMem`](ErrorKind::NoMem).
    pub fn next_conn_req(&self, cfg: Option<&ConnCfg<T>>) -> Result<ConnReq<T>> {
        const OP: &str = "rpma_ep_next_conn_req";
        let srq = cfg.and_then(ConnCfg::srq);
        let qc = queue_config(OP, cfg, &srq)?;
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
    /// that has its own receive CQ; [`Provider`](ErrorKind::Provider) if resolving the address
    /// or route, or creating the CQs or QP, fails; [`NoMem`](ErrorKind::NoMem).
    pub fn new(peer: &Peer<T>, addr: &str, port: &str, cfg: Option<&ConnCfg<T>>) -> Result<Self> {
        const OP: &str = "rpma_conn_req_new";
        let srq = cfg.and_then(ConnCfg::srq);
        let qc = queue_config(OP, cfg, &srq)?;
        let shared = qc.shared_channel;
        let qp = peer.transport().connect_request(&peer.inner.pd, addr, port, &qc).map_err(|e| e.in_op(OP))?;
        crate::rpma_log!(Notice, "Requesting a connection to {addr}:{port}");
        Ok(Self { qp: Some(qp), shared, incoming: false, srq, peer: peer.clone() })
    }

    fn qp(&self) -> &T::Qp {
        self.qp.as_ref().expect("qp present until consumed")
    }

    /// Whether this is an incoming request (from [`Ep::next_conn_req`]).
    #[must_use]
    pub const fn is_incoming(&self) -> bool {
        self.incoming
    }

    /// `rpma_conn_req_recv`: posts a receive buffer before the connection is established, so a
    /// buffer is ready for the peer's first message.
    ///
    /// # Errors
    /// [`Inval`](ErrorKind::Inval) if the range is outside `dst` or the device may not write
    /// `dst`; [`Provider`](ErrorKind::Provider) if posting fails. (librpma had no zero-length
    /// form here and allowed a NULL op context; both hold: `dst` is required, `op_context` is a
    /// plain value, spec 9 #7.)
    pub fn recv(&self, dst: &MrLocal<T>, offset: usize, len: usize, op_context: u64) -> Result<()> {
        const OP: &str = "rpma_conn_req_recv";
        let buf = recv_buf(OP, &self.peer.inner, Some(dst), offset, len)?;
        self.qp().post_recv(buf, op_context).map_err(|e| e.in_op(OP))
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
/// `wait` and `disconnect` may be called from several threads at once (`&self`).
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
    fn qp(&self) -> &T::Qp {
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
    /// PMem; this alone gates [`FlushType::Persistent`].
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

    fn post(&self, op: &'static str, wr: &SendWr<'_, T::Mr>) -> Result<()> {
        self.qp().post_send(wr).map_err(|e| e.in_op(op))
    }

    fn caps(&self) -> &crate::transport::Capabilities {
        &self.peer.inner.caps
    }

    /// `rpma_read`: RDMA Read of `len` bytes at `src_offset` of the remote region into `dst` at
    /// `dst_offset`. `dst == None && src == None` with all offsets and `len` 0 is the zero-byte
    /// form.
    ///
    /// # Errors
    /// [`Inval`](ErrorKind::Inval) if `flags` is empty; if exactly one of `dst`/`src` is given,
    /// or none is and an offset or `len` is not 0; if a range is outside its region (checked
    /// here, unlike librpma, against the size the remote descriptor claims); if `dst` may not be
    /// written by the device or the remote region was not registered for remote reads;
    /// [`Provider`](ErrorKind::Provider) if posting fails.
    #[allow(clippy::too_many_arguments)]
    pub fn read(
        &self,
        dst: Option<&MrLocal<T>>,
        dst_offset: usize,
        src: Option<&MrRemote>,
        src_offset: usize,
        len: usize,
        flags: CompletionFlags,
        op_context: u64,
    ) -> Result<()> {
        const OP: &str = "rpma_read";
        let signaled = validate::flags(OP, flags)?;
        let (local, remote) = match (dst, src) {
            (None, None) => {
                validate::zero_form(OP, false, &[dst_offset, src_offset, len])?;
                (None, None)
            }
            (Some(d), Some(s)) => {
                validate::msg_len(OP, self.caps(), len)?;
                let r = validate::remote_buf(OP, s, src_offset, len, RemoteAccess::Read)?;
                (Some(validate::local_buf(OP, &d.mr, d.usage(), dst_offset, len, true)?), Some(r))
            }
            _ => return Err(Error::inval(OP, "dst and src must both be given or both be absent")),
        };
        self.post(OP, &SendWr { op: SendOp::Read, local, remote, len, signaled, wr_id: op_context })
    }

    #[allow(clippy::too_many_arguments)]
    fn write_common(
        &self,
        op: &'static str,
        sop: SendOp,
        dst: Option<&MrRemote>,
        dst_offset: usize,
        src: Option<&MrLocal<T>>,
        src_offset: usize,
        len: usize,
        flags: CompletionFlags,
        op_context: u64,
    ) -> Result<()> {
        let signaled = validate::flags(op, flags)?;
        let (local, remote) = match (src, dst) {
            (None, None) => {
                validate::zero_form(op, false, &[dst_offset, src_offset, len])?;
                (None, None)
            }
            (Some(s), Some(d)) => {
                validate::msg_len(op, self.caps(), len)?;
                let r = validate::remote_buf(op, d, dst_offset, len, RemoteAccess::Write)?;
                (Some(validate::local_buf(op, &s.mr, s.usage(), src_offset, len, false)?), Some(r))
            }
            _ => return Err(Error::inval(op, "dst and src must both be given or both be absent")),
        };
        self.post(op, &SendWr { op: sop, local, remote, len, signaled, wr_id: op_context })
    }

    /// `rpma_write`: RDMA Write of `len` bytes of `src` at `src_offset` to the remote region at
    /// `dst_offset`. `dst == None && src == None` with all offsets and `len` 0 is the zero-byte
    /// form.
    ///
    /// # Errors
    /// As [`Conn::read`], with the remote region needing write access.
    #[allow(clippy::too_many_arguments)]
    pub fn write(
        &self,
        dst: Option<&MrRemote>,
        dst_offset: usize,
        src: Option<&MrLocal<T>>,
        src_offset: usize,
        len: usize,
        flags: CompletionFlags,
        op_context: u64,
    ) -> Result<()> {
        self.write_common("rpma_write", SendOp::Write, dst, dst_offset, src, src_offset, len, flags, op_context)
    }

    /// `rpma_write_with_imm`: as [`Conn::write`], carrying `imm` (host order); consumes a
    /// receive buffer at the peer, whose completion is
    /// [`RecvRdmaWithImm`](crate::WcOpcode::RecvRdmaWithImm) with `imm_data == Some(imm)`.
    ///
    /// # Errors
    /// As [`Conn::write`].
    #[allow(clippy::too_many_arguments)]
    pub fn write_with_imm(
        &self,
        dst: Option<&MrRemote>,
        dst_offset: usize,
        src: Option<&MrLocal<T>>,
        src_offset: usize,
        len: usize,
        flags: CompletionFlags,
        imm: u32,
        op_context: u64,
    ) -> Result<()> {
        self.write_common(
            "rpma_write_with_imm",
            SendOp::WriteImm(imm),
            dst,
            dst_offset,
            src,
            src_offset,
            len,
            flags,
            op_context,
        )
    }

    /// `rpma_atomic_write`: writes the 8 bytes `src` atomically at `dst_offset` of the remote
    /// region (native atomic write, or an inline 8-byte write fenced behind earlier reads and
    /// flushes: "write data; flush; atomic-write the commit pointer; flush").
    ///
    /// # Errors
    /// [`Inval`](ErrorKind::Inval) if `flags` is empty, `dst_offset` is not a multiple of
    /// [`ATOMIC_WRITE_ALIGNMENT`](crate::ATOMIC_WRITE_ALIGNMENT), the 8 bytes lie outside the
    /// remote region or it was not registered for remote writes;
    /// [`Provider`](ErrorKind::Provider) if posting fails.
    pub fn atomic_write(
        &self,
        dst: &MrRemote,
        dst_offset: usize,
        src: [u8; 8],
        flags: CompletionFlags,
        op_context: u64,
    ) -> Result<()> {
        const OP: &str = "rpma_atomic_write";
        let signaled = validate::flags(OP, flags)?;
        validate::atomic_offset(OP, dst_offset)?;
        let remote = validate::remote_buf(OP, dst, dst_offset, 8, RemoteAccess::Write)?;
        self.post(
            OP,
            &SendWr {
                op: SendOp::AtomicWrite(src),
                local: None,
                remote: Some(remote),
                len: 8,
                signaled,
                wr_id: op_context,
            },
        )
    }

    /// `rpma_flush`: makes the data previously written to `[dst_offset, dst_offset + len)` of
    /// the remote region visible (`Visibility`) or persistent (`Persistent`) at the target.
    ///
    /// # Errors
    /// [`Inval`](ErrorKind::Inval) if `flags` is empty or the range is outside the remote
    /// region; [`NoSupp`](ErrorKind::NoSupp) for `Persistent` when the remote peer did not
    /// declare direct write to PMem ([`Conn::apply_remote_peer_cfg`]), or when the remote region
    /// lacks the usage of the requested type; [`Provider`](ErrorKind::Provider) if posting fails.
    pub fn flush(
        &self,
        dst: &MrRemote,
        dst_offset: usize,
        len: usize,
        flush_type: FlushType,
        flags: CompletionFlags,
        op_context: u64,
    ) -> Result<()> {
        const OP: &str = "rpma_flush";
        let signaled = validate::flags(OP, flags)?;
        if flush_type == FlushType::Persistent && !self.direct_write_to_pmem.load(Ordering::Relaxed) {
            return Err(
                Error::new(ErrorKind::NoSupp, OP).with_detail("the remote peer does not support direct write to PMem")
            );
        }
        let remote = validate::remote_buf(OP, dst, dst_offset, len, RemoteAccess::Flush(flush_type))?;
        self.post(
            OP,
            &SendWr {
                op: SendOp::Flush(flush_type),
                local: None,
                remote: Some(remote),
                len,
                signaled,
                wr_id: op_context,
            },
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn send_common(
        &self,
        op: &'static str,
        sop: SendOp,
        src: Option<&MrLocal<T>>,
        offset: usize,
        len: usize,
        flags: CompletionFlags,
        op_context: u64,
    ) -> Result<()> {
        let signaled = validate::flags(op, flags)?;
        validate::zero_form(op, src.is_some(), &[offset, len])?;
        validate::msg_len(op, self.caps(), len)?;
        let local = src.map(|s| validate::local_buf(op, &s.mr, s.usage(), offset, len, false)).transpose()?;
        self.post(op, &SendWr { op: sop, local, remote: None, len, signaled, wr_id: op_context })
    }

    /// `rpma_send`: sends `len` bytes of `src` at `offset`; needs a receive posted at the peer.
    /// `None` with `offset == len == 0` sends an empty message.
    ///
    /// # Errors
    /// [`Inval`](ErrorKind::Inval) if `flags` is empty, `src` is `None` with a non-zero offset
    /// or len, or the range is outside `src`; [`Provider`](ErrorKind::Provider) if posting fails.
    pub fn send(
        &self,
        src: Option<&MrLocal<T>>,
        offset: usize,
        len: usize,
        flags: CompletionFlags,
        op_context: u64,
    ) -> Result<()> {
        self.send_common("rpma_send", SendOp::Send, src, offset, len, flags, op_context)
    }

    /// `rpma_send_with_imm`: as [`Conn::send`], carrying `imm` (host order).
    ///
    /// # Errors
    /// As [`Conn::send`].
    pub fn send_with_imm(
        &self,
        src: Option<&MrLocal<T>>,
        offset: usize,
        len: usize,
        flags: CompletionFlags,
        imm: u32,
        op_context: u64,
    ) -> Result<()> {
        self.send_common("rpma_send_with_imm", SendOp::SendImm(imm), src, offset, len, flags, op_context)
    }

    /// `rpma_recv`: posts a receive buffer (`None` with `offset == len == 0`: zero-length).
    ///
    /// Posted buffers form an **unordered set**: which buffer a message lands in, and the order
    /// of receive completions, are not those of posting.
    ///
    /// # Errors
    /// [`Inval`](ErrorKind::Inval) for `None` with a non-zero offset or len, a range outside
    /// `dst`, or a `dst` the device may not write; [`Provider`](ErrorKind::Provider) if posting
    /// fails (receive queue full; a connection using an SRQ has no receive queue of its own,
    /// spec 9 #18: use [`Srq::recv`]).
    pub fn recv(&self, dst: Option<&MrLocal<T>>, offset: usize, len: usize, op_context: u64) -> Result<()> {
        const OP: &str = "rpma_recv";
        let buf = recv_buf(OP, &self.peer.inner, dst, offset, len)?;
        self.qp().post_recv(buf, op_context).map_err(|e| e.in_op(OP))
    }

    /// The peer the connection was made from.
    #[must_use]
    pub fn peer(&self) -> &Peer<T> {
        &self.peer
    }

    /// The backend's queue pair.
    #[must_use]
    pub fn raw(&self) -> &T::Qp {
        self.qp()
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
        assert_eq!(polled(Ok(0), 4).map_err(|e| e.kind()), Err(ErrorKind::NoCompletion));
        let e = polled(Err(Error::provider("ibv_poll_cq", 5)), 4).expect_err("a failed poll");
        assert_eq!((e.kind(), e.op(), e.errno()), (ErrorKind::Provider, "rpma_cq_get_wc", Some(5)));
    }
}

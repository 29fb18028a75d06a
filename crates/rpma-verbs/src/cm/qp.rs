//! A connection's queue pair: its CM id and event channel, its CQs, and its send and receive
//! queues (which post: `send_queue`, `recv_queue`).

use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rdma_sys as ffi;
use rpma_core::transport::{CmBackend, CmEvent, CqSlot, QpBackend, QueueConfig, RecvWr, SendWr};
use rpma_core::{Error, ErrorKind, Result, Usage};

use crate::mr::reg_mr;
use crate::mr::PARKED;
use crate::provider::PostFns;
use crate::ring::{FifoRing, RingBox};
use crate::sys::{call, errno, release, ret_errno, track};
use crate::{context_name, Verbs, VerbsPd, MAX_INLINE_DATA};

use super::cq::{Channel, RecvLink, VerbsCq};
use super::recv_queue::RecvQueue;
use super::send_queue::SendQueue;
use super::srq::VerbsSrq;
use super::{check_device, conn_param, flush_buffer, AddrInfo, CmId, EventChannel, RawEvent};

/// `rpma_conn_req_new`: resolves `addr:port` and builds the queues.
pub(crate) fn connect_request(
    pd: &Arc<VerbsPd>,
    addr: &str,
    port: &str,
    cfg: &QueueConfig<'_, Verbs>,
) -> Result<VerbsQp> {
    let ai = AddrInfo::new(addr, Some(port), false)?;
    let id = CmId::new(std::ptr::null_mut())?;
    let timeout = cfg.timeout_ms;
    // SAFETY: [V1, V2] a live synchronous id and the addresses `rdma_getaddrinfo` returned.
    if call!("rdma_resolve_addr", -1, unsafe { ffi::rdma_resolve_addr(id.0.as_ptr(), ai.src(), ai.dst(), timeout) })
        != 0
    {
        return Err(Error::provider("rdma_resolve_addr", errno()));
    }
    // SAFETY: [V1] as above.
    if call!("rdma_resolve_route", -1, unsafe { ffi::rdma_resolve_route(id.0.as_ptr(), timeout) }) != 0 {
        return Err(Error::provider("rdma_resolve_route", errno()));
    }
    check_device(pd, id.verbs(), "rdma_resolve_addr")?;
    let evch = EventChannel::new()?;
    let qp = build_qp(pd, id.0, evch, cfg, false, Box::new([]))?;
    // The QP owns the id now.
    let _ = id.into_raw();
    Ok(qp)
}

/// `RDMA_OPTION_ID` of `<rdma/rdma_cma.h>` (an anonymous enum, not in the generated bindings):
/// the level of `rdma_set_option` for options of the CM id itself.
const RDMA_OPTION_ID: std::ffi::c_int = 0;
/// `RDMA_OPTION_ID_ACK_TIMEOUT` of `<rdma/rdma_cma.h>` (as above): the local ACK timeout
/// exponent of the id's QP, a `uint8_t`.
const RDMA_OPTION_ID_ACK_TIMEOUT: std::ffi::c_int = 3;

/// Sets the local ACK timeout exponent of the QP of `id` (`rdma_set_option`). The connection
/// manager applies it when the QP moves to RTS, which happens in `rdma_connect`'s handshake or
/// in `rdma_accept`: so it is set before either.
///
/// # Safety
/// `id` is alive.
unsafe fn set_ack_timeout(id: NonNull<ffi::rdma_cm_id>, ack_timeout: u8) -> Result<()> {
    let mut value = ack_timeout;
    // SAFETY: [V1, V2] a live id (the caller's promise); `value` is the `uint8_t` the option
    // takes, valid for its stated length (1) during the call.
    let r = call!("rdma_set_option", -1, unsafe {
        ffi::rdma_set_option(
            id.as_ptr(),
            RDMA_OPTION_ID,
            RDMA_OPTION_ID_ACK_TIMEOUT,
            std::ptr::addr_of_mut!(value).cast(),
            size_of::<u8>(),
        )
    });
    if r != 0 {
        return Err(Error::provider("rdma_set_option", errno())
            .with_detail(&format!("setting the ACK timeout (RDMA_OPTION_ID_ACK_TIMEOUT) to {ack_timeout}")));
    }
    Ok(())
}

/// Creates the CQs and the QP of a request on `id`. On failure the id is left to the caller
/// (it may have an event to ack first); everything else created here is released.
pub(super) fn build_qp(
    pd: &Arc<VerbsPd>,
    id: NonNull<ffi::rdma_cm_id>,
    evch: EventChannel,
    cfg: &QueueConfig<'_, Verbs>,
    incoming: bool,
    req_pdata: Box<[u8]>,
) -> Result<VerbsQp> {
    if let Some(t) = cfg.ack_timeout {
        // SAFETY: [V1] the id is alive (the caller holds it).
        unsafe { set_ack_timeout(id, t) }?;
    }
    let ctx = pd.device().ctx();
    // SAFETY: [V1] the PD keeps its device context open.
    let fns = unsafe { PostFns::of(ctx) }?;
    let caps = pd.caps();
    let shared = if cfg.shared_channel { Some(Channel::new(ctx)?) } else { None };
    let max_sge = cfg.max_sge.max(1);
    let srq = cfg.srq.map(Arc::clone);
    // The queues' rings, made before the CQs that reach them (so dropped after them, also when
    // building fails half-way: rule V9).
    let send_ring = RingBox::new(FifoRing::send(cfg.sq_size));
    let recv_ring = srq.is_none().then(|| RingBox::new(FifoRing::recv(cfg.rq_size)));
    let srq_rcq = srq.as_ref().and_then(|s| s.rcq.as_ref()).map(VerbsCq::as_ptr);
    let want_rcq = cfg.rcq_size > 0 && srq_rcq.is_none();
    let recv_link = || match (&srq, &recv_ring) {
        (Some(s), _) => RecvLink::Srq(Arc::clone(&s.ring)),
        (None, Some(r)) => RecvLink::Own(r.as_ptr()),
        (None, None) => RecvLink::None,
    };
    let (main_recv, rcq_recv) = if srq_rcq.is_some() {
        (RecvLink::None, None)
    } else if want_rcq {
        (RecvLink::None, Some(recv_link()))
    } else {
        (recv_link(), None)
    };
    // SAFETY: [V9] the rings are owned by the queues this queue pair holds, which drops its
    // CQs first (and here the CQs, made after the rings, are dropped before them on failure);
    // the queue pair is reached by one thread at a time.
    let cq = unsafe { VerbsCq::new(ctx, cfg.cq_size, shared.as_ref(), send_ring.as_ptr(), main_recv) }?;
    let rcq = match rcq_recv {
        // SAFETY: [V9] as above; the ring of no queue lives for the process.
        Some(link) => Some(unsafe { VerbsCq::new(ctx, cfg.rcq_size, shared.as_ref(), FifoRing::no_queue(), link) }?),
        None => None,
    };
    let recv_cq = srq_rcq.or_else(|| rcq.as_ref().map(VerbsCq::as_ptr)).unwrap_or_else(|| cq.as_ptr());
    // (with native flush too: persistent flushes are RDMA Reads, docs/native-ops.md)
    let flush_mr = Some(reg_mr(pd, flush_buffer()?, Usage::READ_DST)?);
    let native_ops = caps.native_atomic_write || caps.native_flush;
    // SAFETY: [V2] zeroed is a valid `ibv_qp_init_attr_ex` (null pointers, zero fields).
    let mut attr: ffi::ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
    attr.send_cq = cq.as_ptr();
    attr.recv_cq = recv_cq;
    attr.srq = srq.as_ref().map_or(std::ptr::null_mut(), |s| s.srq.as_ptr());
    attr.cap = ffi::ibv_qp_cap {
        max_send_wr: cfg.sq_size,
        max_recv_wr: if srq.is_some() { 0 } else { cfg.rq_size },
        max_send_sge: max_sge,
        max_recv_sge: if srq.is_some() { 1 } else { max_sge },
        max_inline_data: cfg.max_inline.max(MAX_INLINE_DATA),
    };
    attr.qp_type = ffi::ibv_qp_type::IBV_QPT_RC;
    attr.sq_sig_all = 0;
    attr.comp_mask = ffi::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0;
    attr.pd = pd.as_ptr();
    if native_ops {
        attr.comp_mask |= ffi::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.0;
        attr.send_ops_flags = send_ops_flags(caps);
    }
    // SAFETY: [V1] the id is alive (the caller holds it), and so are the PD (`pd`), the CQs
    // (`cq`, `rcq`, or the SRQ's, held by `srq`) and the SRQ whose pointers `attr` holds.
    unsafe { same_context(id, &attr) }?;
    // SAFETY: [V1, V2, V10] a live id; `attr` is valid and every object in it is alive and of
    // the id's device context (checked just above).
    let r = call!("rdma_create_qp", -1, unsafe { ffi::rdma_create_qp_ex(id.as_ptr(), &mut attr) });
    if r != 0 {
        return Err(Error::provider("rdma_create_qp", errno()));
    }
    track!(Qp, 1);
    // SAFETY: [V1] `rdma_create_qp_ex` succeeded, so the id holds the QP.
    let qp = unsafe { (*id.as_ptr()).qp };
    let Some(qp) = NonNull::new(qp) else {
        return Err(Error::provider("rdma_create_qp", libc::EIO));
    };
    let qpx = if native_ops {
        // SAFETY: [V1] the QP was created with send-ops flags, so it is an extended QP.
        NonNull::new(unsafe { ffi::ibv_qp_to_qp_ex(qp.as_ptr()) })
    } else {
        None
    };
    // SAFETY: [V1] a live QP.
    let qp_num = unsafe { (*qp.as_ptr()).qp_num };
    Ok(VerbsQp {
        id,
        raw: qp,
        qp_num,
        evch: evch.into_raw(),
        incoming,
        retry_count: cfg.retry_count,
        connected: AtomicBool::new(false),
        req_pdata,
        torn: AtomicBool::new(false),
        cq,
        rcq,
        shared,
        sq: SendQueue::new(qp, fns.post_send, qpx, send_ring, flush_mr, pd),
        rq: RecvQueue::new(qp, fns.post_recv, recv_ring),
        _srq: srq,
        pd: Arc::clone(pd),
    })
}

/// Rule V10: the objects a queue pair is made of (its PD, send and receive CQs and SRQ, whose
/// handles libibverbs sends to the CM id's context, where handles of another context name other
/// objects or none) are of the id's device context. `InvalidInput` naming the object and both
/// devices otherwise: rpma-core refuses an SRQ of another peer before, but the backend contract is
/// public.
///
/// # Safety
/// `id` and every object `attr` points to (`pd`, `send_cq`, `recv_cq`, `srq` unless null) are
/// alive.
unsafe fn same_context(id: NonNull<ffi::rdma_cm_id>, attr: &ffi::ibv_qp_init_attr_ex) -> Result<()> {
    // SAFETY: [V1] the caller's promise: each `context` is the one the object was made on.
    let (id_ctx, parts) = unsafe {
        let id_ctx = (*id.as_ptr()).verbs;
        let srq_ctx = if attr.srq.is_null() { id_ctx } else { (*attr.srq).context };
        let parts = [
            ("shared receive queue", srq_ctx),
            ("receive CQ", (*attr.recv_cq).context),
            ("send CQ", (*attr.send_cq).context),
            ("protection domain", (*attr.pd).context),
        ];
        (id_ctx, parts)
    };
    if id_ctx.is_null() {
        return Err(Error::provider("rdma_create_qp", libc::ENODEV).with_detail("the CM id has no device"));
    }
    for (what, ctx) in parts {
        if ctx != id_ctx {
            // SAFETY: [V1] the contexts of a live object and of a live id, open while they live.
            let (theirs, ours) = unsafe { (context_name(ctx), context_name(id_ctx)) };
            return Err(Error::invalid_input(
                "rdma_create_qp",
                &format!(
                    "the {what} is of device {theirs}, the connection's CM id of device {ours}: a queue pair is \
                     made of objects of its CM id's device context only"
                ),
            ));
        }
    }
    Ok(())
}

fn send_ops_flags(caps: &rpma_core::Capabilities) -> u64 {
    use ffi::ibv_qp_create_send_ops_flags as F;
    let f = F::IBV_QP_EX_WITH_RDMA_WRITE.0
        | F::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM.0
        | F::IBV_QP_EX_WITH_SEND.0
        | F::IBV_QP_EX_WITH_SEND_WITH_IMM.0
        | F::IBV_QP_EX_WITH_RDMA_READ.0;
    let mut f = u64::from(f);
    if caps.native_atomic_write {
        f |= crate::native::IBV_QP_EX_WITH_ATOMIC_WRITE;
    }
    if caps.native_flush {
        f |= crate::native::IBV_QP_EX_WITH_FLUSH;
    }
    f
}

/// A connection's queue pair with its CM id and event channel.
pub struct VerbsQp {
    id: NonNull<ffi::rdma_cm_id>,
    /// The id's QP (alive until teardown).
    raw: NonNull<ffi::ibv_qp>,
    qp_num: u32,
    pub(super) evch: NonNull<ffi::rdma_event_channel>,
    incoming: bool,
    /// The transport retry count `connect` passes on.
    retry_count: u8,
    connected: AtomicBool,
    req_pdata: Box<[u8]>,
    torn: AtomicBool,
    // Dropped in this order after `teardown` (the QP is gone by then): the CQs before the
    // queues whose rings they reach (rule V9).
    cq: VerbsCq,
    rcq: Option<VerbsCq>,
    shared: Option<Arc<Channel>>,
    sq: SendQueue,
    rq: RecvQueue,
    _srq: Option<Arc<VerbsSrq>>,
    pd: Arc<VerbsPd>,
}

// SAFETY: [V3] the id, QP and channel are used only through thread-safe librdmacm/libibverbs calls;
// [V6, V9] the queues' slot rings, chain buffers and extended-QP builder calls (`ibv_wr_*`) are
// reached by one thread at a time: the queue pair moves between threads whole (its queues and
// the CQs reaching their rings with it) and is not `Sync`.
unsafe impl Send for VerbsQp {}

impl std::fmt::Debug for VerbsQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsQp")
            .field("qp_num", &self.qp_num)
            .field("incoming", &self.incoming)
            .finish_non_exhaustive()
    }
}

impl VerbsQp {
    /// The QP: alive until teardown, which only happens through `self` by value or on drop.
    #[inline(always)]
    const fn qp(&self) -> *mut ffi::ibv_qp {
        self.raw.as_ptr()
    }

    /// The transport retry count and the local ACK timeout exponent of the queue pair, as the
    /// device reports them (`ibv_query_qp`): what `ConnCfg::with_retry_count` and
    /// `ConnCfg::with_ack_timeout` (or the connection manager's defaults) made of them once the
    /// connection is established (before, the queue pair has not reached RTS and both are 0).
    ///
    /// # Errors
    /// [`Provider`](ErrorKind::Provider) if `ibv_query_qp` fails.
    pub fn retry_attrs(&self) -> Result<(u8, u8)> {
        // SAFETY: [V2] all-zero bytes are a valid `ibv_qp_attr` and `ibv_qp_init_attr`
        // (integers and null pointers).
        let (mut attr, mut init): (ffi::ibv_qp_attr, ffi::ibv_qp_init_attr) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        let mask = ffi::ibv_qp_attr_mask::IBV_QP_TIMEOUT.0 | ffi::ibv_qp_attr_mask::IBV_QP_RETRY_CNT.0;
        let mask = std::ffi::c_int::try_from(mask).unwrap_or(std::ffi::c_int::MAX);
        // SAFETY: [V1, V2] the QP is alive until teardown, which needs `self` by value or drop;
        // both out-pointers are writable for the call.
        let r = call!("ibv_query_qp", libc::EIO, unsafe { ffi::ibv_query_qp(self.qp(), &mut attr, mask, &mut init) });
        if r != 0 {
            return Err(Error::provider("ibv_query_qp", ret_errno(r)));
        }
        Ok((attr.retry_cnt, attr.timeout))
    }

    fn teardown(&self) -> Result<()> {
        if self.torn.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let mut first: Result<()> = Ok(());
        let mut note = |r: Result<()>| {
            if first.is_ok() {
                first = r;
            }
        };
        // `ibv_destroy_qp` rather than `rdma_destroy_qp`, which ignores its result. (For a QP
        // created on our own CQs, `rdma_destroy_qp` does nothing else.)
        let qp = self.qp();
        // SAFETY: [V1] the id and its QP are alive, the QP is destroyed once (guarded by
        // `torn`); nothing posts any more (teardown runs with the QP owned by value or dropped).
        let r = release!(Qp: "ibv_destroy_qp", errno(), unsafe { ffi::ibv_destroy_qp(qp) });
        if r != 0 {
            let e = Error::provider("ibv_destroy_qp", ret_errno(r));
            self.abandon(&e);
            return Err(e);
        }
        // SAFETY: [V1] the id is alive; its QP is gone, so it must not refer to it any more.
        unsafe { (*self.id.as_ptr()).qp = std::ptr::null_mut() };
        // Receives of a shared receive queue that completed here but were never polled give
        // their slots back before the CQs go (the completions go with them).
        self.cq.drain_srq_receives();
        if let Some(r) = &self.rcq {
            r.drain_srq_receives();
        }
        // The device no longer uses any region for this QP: regions dropped while its work
        // requests were in flight can go now (crate::pin).
        self.sq.release_pins();
        self.rq.release_pins();
        PARKED.sweep();
        if let Some(r) = &self.rcq {
            note(r.release());
        }
        note(self.cq.release());
        // SAFETY: [V1] every event of this id was acked when taken; destroyed once.
        let r = release!(CmId: "rdma_destroy_id", -1, unsafe { ffi::rdma_destroy_id(self.id.as_ptr()) });
        if r != 0 {
            note(Err(Error::provider("rdma_destroy_id", errno())));
        }
        if let Some(r) = &self.rcq {
            note(r.channel().release());
        }
        note(self.cq.channel().release());
        // The private flush buffer (its QP is gone): reported like librpma's `rpma_conn_delete`.
        note(self.sq.release_flush_buffer());
        // SAFETY: [V1] its only id was destroyed above; destroyed once.
        unsafe { ffi::rdma_destroy_event_channel(self.evch.as_ptr()) };
        track!(EventChannel, -1);
        first
    }

    /// The QP could not be destroyed, so the device may still execute its work requests (V4)
    /// and it still refers to its CQs, SRQ, PD and context (V1): every one of them is leaked,
    /// never released, with the regions its unretired work requests reference and the flush
    /// buffer. Reported through the log and [`crate::leaks`].
    fn abandon(&self, why: &Error) {
        // The regions its work requests use, and the flush buffer, stay pinned: never
        // deregistered or freed.
        self.sq.report_leaks(why);
        self.rq.report_leaks(why);
        if let Some(srq) = &self._srq {
            std::mem::forget(Arc::clone(srq));
        }
        self.cq.abandon();
        if let Some(r) = &self.rcq {
            r.abandon();
        }
        if let Some(c) = &self.shared {
            c.abandon();
        }
        // The PD keeps the device handle, hence librdmacm's reference on the context. The CM id
        // and its event channel are not destroyed either (the id is left to the QP).
        std::mem::forget(Arc::clone(&self.pd));
        crate::leak::qp(self.qp_num, why);
    }

    /// The connection's shared completion channel as a [`SharedCqEvents`], to wait for its two
    /// CQs' events without borrowing the connection; `None` if the CQs have channels of their
    /// own ([`VerbsCq::events`] then).
    #[must_use]
    pub fn shared_events(&self) -> Option<SharedCqEvents> {
        let channel = Arc::clone(self.shared.as_ref()?);
        Some(SharedCqEvents {
            channel,
            main: self.cq.as_ptr() as usize,
            receive: self.rcq.as_ref().map(|r| r.as_ptr() as usize),
        })
    }
}

impl Drop for VerbsQp {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            rpma_core::rpma_log!(Error, "dropping a connection: {e}");
        }
    }
}

impl QpBackend<Verbs> for VerbsQp {
    fn qp_num(&self) -> u32 {
        self.qp_num
    }

    fn cq(&self) -> &VerbsCq {
        &self.cq
    }

    fn rcq(&self) -> Option<&VerbsCq> {
        self.rcq.as_ref()
    }

    fn compl_fd(&self) -> Option<BorrowedFd<'_>> {
        self.shared.as_ref().map(|c| c.fd())
    }

    fn wait_shared(&self) -> Result<CqSlot> {
        let Some(ch) = &self.shared else {
            return Err(Error::new(ErrorKind::NotSharedChannel, "Conn::wait"));
        };
        slot_of(ch.wait()? as usize, self.cq.as_ptr() as usize, self.rcq.as_ref().map(|r| r.as_ptr() as usize))
    }

    #[inline]
    fn post_recv(&self, wrs: &[RecvWr<'_, Verbs>]) -> Result<()> {
        self.rq.post(wrs)
    }

    #[inline(always)]
    fn post_recv_one(&self, wr: RecvWr<'_, Verbs>) -> Result<()> {
        self.rq.post_one(wr)
    }

    #[inline]
    fn post_send(&self, wrs: &[SendWr<'_, Verbs>]) -> Result<()> {
        self.sq.post(wrs)
    }

    #[inline(always)]
    fn post_send_one(&self, wr: SendWr<'_, Verbs>) -> Result<()> {
        self.sq.post_one(wr)
    }

    fn sq_free(&self) -> u32 {
        self.sq.free()
    }
}

impl CmBackend<Verbs> for VerbsQp {
    fn request_private_data(&self) -> &[u8] {
        &self.req_pdata
    }

    fn addrs(&self) -> (Option<SocketAddr>, Option<SocketAddr>) {
        // SAFETY: [V1, V6] the id lives until teardown, which takes the queue pair by value or
        // drops it; the owner's thread (`VerbsQp` is not `Sync`).
        unsafe { super::addr::of_id(self.id) }
    }

    fn connect(&mut self, pdata: Option<&[u8]>) -> Result<()> {
        let mut param = conn_param(pdata, self.retry_count);
        if self.incoming {
            // SAFETY: [V2] a live id of an incoming request with its QP; `param` and the private
            // data live across the call.
            if call!("rdma_accept", -1, unsafe { ffi::rdma_accept(self.id.as_ptr(), &mut param) }) != 0 {
                return Err(Error::provider("rdma_accept", errno()));
            }
        } else {
            // SAFETY: [V1] a live id (synchronous until now) and our live channel.
            if call!("rdma_migrate_id", -1, unsafe { ffi::rdma_migrate_id(self.id.as_ptr(), self.evch.as_ptr()) }) != 0
            {
                return Err(Error::provider("rdma_migrate_id", errno()));
            }
            // SAFETY: [V2] a live, resolved id with its QP; `param` lives across the call.
            if call!("rdma_connect", -1, unsafe { ffi::rdma_connect(self.id.as_ptr(), &mut param) }) != 0 {
                return Err(Error::provider("rdma_connect", errno()));
            }
        }
        self.connected.store(true, Ordering::Release);
        Ok(())
    }

    fn reject(self) -> Result<()> {
        let mut r = Ok(());
        if self.incoming && !self.connected.load(Ordering::Acquire) {
            // SAFETY: [V1] a live id of an incoming request never accepted.
            if call!("rdma_reject", -1, unsafe { ffi::rdma_reject(self.id.as_ptr(), std::ptr::null(), 0) }) != 0 {
                r = Err(Error::provider("rdma_reject", errno()));
            }
        }
        let t = self.teardown();
        r.and(t)
    }

    fn event_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: [V1] the channel's fd is open until teardown, which needs `self` by value or drop.
        unsafe { BorrowedFd::borrow_raw((*self.evch.as_ptr()).fd) }
    }

    fn next_event(&self) -> Result<(CmEvent, Option<Box<[u8]>>)> {
        use ffi::rdma_cm_event_type as E;
        let ev = RawEvent::get(self.evch)?;
        let kind = ev.kind();
        let (cm, pdata) = match kind {
            E::RDMA_CM_EVENT_ESTABLISHED => (CmEvent::Established, Some(ev.private_data())),
            E::RDMA_CM_EVENT_CONNECT_ERROR => (CmEvent::ConnectError, None),
            E::RDMA_CM_EVENT_DEVICE_REMOVAL => (CmEvent::DeviceRemoval, None),
            E::RDMA_CM_EVENT_DISCONNECTED => (CmEvent::Disconnected, None),
            E::RDMA_CM_EVENT_TIMEWAIT_EXIT => (CmEvent::TimewaitExit, None),
            E::RDMA_CM_EVENT_REJECTED => (CmEvent::Rejected, None),
            E::RDMA_CM_EVENT_UNREACHABLE => (CmEvent::Unreachable, None),
            other => (CmEvent::Other(other), None),
        };
        ev.ack()?;
        Ok((cm, pdata))
    }

    fn disconnect(&self) -> Result<()> {
        // SAFETY: [V1] a live id.
        if call!("rdma_disconnect", -1, unsafe { ffi::rdma_disconnect(self.id.as_ptr()) }) != 0 {
            return Err(Error::provider("rdma_disconnect", errno()));
        }
        Ok(())
    }

    fn destroy(self) -> Result<()> {
        self.teardown()
    }
}

/// A connection's shared completion channel ([`VerbsQp::shared_events`]): waits for the events
/// of the connection's two CQs without borrowing the connection, for a caller that must not
/// hold what guards it while it sleeps (the C ABI's handle lock). Taking, acking and re-arming
/// are thread-safe libibverbs calls (V3); the CQs' addresses are kept only to tell which one
/// fired, never dereferenced here.
pub struct SharedCqEvents {
    channel: Arc<Channel>,
    main: usize,
    receive: Option<usize>,
}

impl std::fmt::Debug for SharedCqEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedCqEvents").field("has_receive_cq", &self.receive.is_some()).finish_non_exhaustive()
    }
}

impl SharedCqEvents {
    /// `rpma_conn_wait`: takes one completion event of the channel (sleeping for it unless its
    /// fd is non-blocking), acks it, re-arms the CQ that fired and says which one it is.
    ///
    /// # Errors
    /// `NoCompletion` if no event can be had (non-blocking fd); `Provider` if re-arming fails;
    /// `Other` for an event of a CQ that is not the connection's.
    ///
    /// # Safety
    /// The connection's CQs are not destroyed before this returns: the event names one, and the
    /// ack and the re-arming use it (V1).
    pub unsafe fn wait(&self) -> Result<CqSlot> {
        slot_of(self.channel.wait()? as usize, self.main, self.receive)
    }
}

/// Which of a connection's CQs (at `main`, and `receive` if it has one) the CQ at `cq` is.
fn slot_of(cq: usize, main: usize, receive: Option<usize>) -> Result<CqSlot> {
    if cq == main {
        Ok(CqSlot::Main)
    } else if receive == Some(cq) {
        Ok(CqSlot::Receive)
    } else {
        Err(Error::new(ErrorKind::Other, "ibv_get_cq_event").with_detail("event from an unknown CQ"))
    }
}

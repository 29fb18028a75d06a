//! A connection's queue pair: its CQs, its CM id and event channel, and the posting of work requests.

use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rdma_sys as ffi;
use rpma_core::transport::{CmEvent, CqSlot, LocalBuf, QpBackend, QueueConfig, SendOp, SendWr};
use rpma_core::FlushType;

use crate::native::Counted;
use rpma_core::{Error, ErrorKind, Result, Usage};

use crate::cq::{Channel, VerbsCq};
use crate::mr::{reg_mr, VerbsMr};
use crate::ring::{RecvRing, SendRing};
use crate::sys::{call, errno, release, ret_errno, track};
use crate::{Verbs, VerbsPd, MAX_INLINE_DATA};

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
    let ctx = pd.device().ctx();
    let caps = pd.caps();
    let shared = if cfg.shared_channel { Some(Channel::new(ctx)?) } else { None };
    let sq = Arc::new(SendRing::new(cfg.sq_size));
    let srq = cfg.srq.map(Arc::clone);
    let rq = srq.is_none().then(|| Arc::new(RecvRing::new(cfg.rq_size)));
    let srq_rcq = srq.as_ref().and_then(|s| s.rcq.as_ref()).map(VerbsCq::as_ptr);
    let want_rcq = cfg.rcq_size > 0 && srq_rcq.is_none();
    let recv_ring = rq.clone().or_else(|| srq.as_ref().map(|s| Arc::clone(&s.ring)));
    let main_recv = if want_rcq || srq_rcq.is_some() { None } else { recv_ring.clone() };
    let cq = VerbsCq::new(ctx, cfg.cq_size, shared.as_ref(), Some(Arc::clone(&sq)), main_recv)?;
    let rcq = if want_rcq { Some(VerbsCq::new(ctx, cfg.rcq_size, shared.as_ref(), None, recv_ring)?) } else { None };
    let recv_cq = srq_rcq.or_else(|| rcq.as_ref().map(VerbsCq::as_ptr)).unwrap_or_else(|| cq.as_ptr());
    // (with native flush too: persistent flushes are RDMA Reads, docs/native-ops.md)
    let flush_mr = Some(reg_mr(pd, flush_buffer()?, Usage::READ_DST)?);
    let native_ops = caps.native_atomic_write || caps.native_flush;
    let mut attr = std::mem::MaybeUninit::<ffi::ibv_qp_init_attr_ex>::zeroed();
    // SAFETY: [V1, V2] zeroed is a valid `ibv_qp_init_attr_ex`; the CQs, SRQ and PD are alive.
    let r = unsafe {
        let a = attr.as_mut_ptr();
        (*a).send_cq = cq.as_ptr();
        (*a).recv_cq = recv_cq;
        (*a).srq = srq.as_ref().map_or(std::ptr::null_mut(), |s| s.srq.as_ptr());
        (*a).cap = ffi::ibv_qp_cap {
            max_send_wr: cfg.sq_size,
            max_recv_wr: if srq.is_some() { 0 } else { cfg.rq_size },
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: MAX_INLINE_DATA,
        };
        (*a).qp_type = ffi::ibv_qp_type::IBV_QPT_RC;
        (*a).sq_sig_all = 0;
        (*a).comp_mask = ffi::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0;
        (*a).pd = pd.as_ptr();
        if native_ops {
            (*a).comp_mask |= ffi::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.0;
            (*a).send_ops_flags = send_ops_flags(caps);
        }
        call!("rdma_create_qp", -1, ffi::rdma_create_qp_ex(id.as_ptr(), a))
    };
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
        qp_num,
        qpx,
        evch: evch.into_raw(),
        incoming,
        connected: AtomicBool::new(false),
        req_pdata,
        torn: AtomicBool::new(false),
        cq,
        rcq,
        shared,
        sq,
        rq,
        _srq: srq,
        flush_mr,
        pd: Arc::clone(pd),
    })
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
/// A native operation of an extended QP.
#[derive(Clone, Copy)]
enum Native {
    Flush,
    AtomicWrite,
}

/// A connection's queue pair with its CM id and event channel.
pub struct VerbsQp {
    id: NonNull<ffi::rdma_cm_id>,
    qp_num: u32,
    qpx: Option<NonNull<ffi::ibv_qp_ex>>,
    pub(super) evch: NonNull<ffi::rdma_event_channel>,
    incoming: bool,
    connected: AtomicBool,
    req_pdata: Box<[u8]>,
    torn: AtomicBool,
    // Dropped in this order after `teardown` (the QP is gone by then).
    cq: VerbsCq,
    rcq: Option<VerbsCq>,
    shared: Option<Arc<Channel>>,
    sq: Arc<SendRing>,
    rq: Option<Arc<RecvRing>>,
    _srq: Option<Arc<VerbsSrq>>,
    flush_mr: Option<VerbsMr>,
    pd: Arc<VerbsPd>,
}

// SAFETY: [V3] the id, QP and channel are used only through thread-safe librdmacm/libibverbs calls;
// the extended-QP builder calls (`ibv_wr_*`) are made under the send ring's lock.
unsafe impl Send for VerbsQp {}
// SAFETY: [V3] as above.
unsafe impl Sync for VerbsQp {}

impl std::fmt::Debug for VerbsQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsQp")
            .field("qp_num", &self.qp_num)
            .field("incoming", &self.incoming)
            .finish_non_exhaustive()
    }
}

impl VerbsQp {
    fn qp(&self) -> *mut ffi::ibv_qp {
        // SAFETY: [V1] the id is alive until teardown, which only happens through `self` by value
        // or on drop.
        unsafe { (*self.id.as_ptr()).qp }
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
        if let Some(m) = &self.flush_mr {
            note(m.deregister());
        }
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
        self.sq.abandon(why);
        if let Some(rq) = &self.rq {
            rq.abandon(why);
        }
        if let Some(srq) = &self._srq {
            std::mem::forget(Arc::clone(srq));
        }
        if let Some(m) = &self.flush_mr {
            m.abandon(why);
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

    fn post(&self, wr: &mut ffi::ibv_send_wr) -> Result<()> {
        let mut bad: *mut ffi::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: [V2, V4] the QP is alive; `wr` is a single, fully initialised work request whose
        // scatter/gather list (if any) lives across the call.
        let r = call!("ibv_post_send", errno(), unsafe { ffi::ibv_post_send(self.qp(), wr, &mut bad) });
        if r == 0 {
            Ok(())
        } else {
            Err(Error::provider("ibv_post_send", ret_errno(r)))
        }
    }

    /// Whether this QP has the function pointer of a native operation (librpma 1.3 decides per
    /// QP the same way: `qpx->wr_flush` / `qpx->wr_atomic_write` set).
    fn has_native(&self, op: Native) -> bool {
        let Some(qpx) = self.qpx else {
            return false;
        };
        let caps = self.pd.caps();
        // SAFETY: [V2] a live extended QP; `wr_flush` is read only when the QP was created with
        // IBV_QP_EX_WITH_FLUSH (native flush in the capabilities), which its provider accepted.
        unsafe {
            match op {
                Native::AtomicWrite => (*qpx.as_ptr()).wr_atomic_write.is_some(),
                Native::Flush => caps.native_flush && crate::native::wr_flush(qpx.as_ptr()).is_some(),
            }
        }
    }

    /// The `NoSupp` of a native-only operation that would be emulated.
    fn no_native(&self, op: &'static str, what: &str, device_has_it: bool) -> Error {
        let dev = self.pd.device().name();
        let why = if device_has_it {
            format!("this connection's QP on {dev} has no native {what}")
        } else {
            format!("device {dev} has no native {what} (kernel capability bits or provider support missing)")
        };
        Error::new(ErrorKind::NoSupp, op).with_detail(&format!(
            "native {what} required (rpma_verbs::set_native_only / RPMA_VERBS_NATIVE_ONLY) but {why}; not emulated"
        ))
    }

    /// Native atomic write through the extended-QP builder.
    fn post_atomic_write(&self, verbs_id: u64, flags: u32, rkey: u32, addr: u64, bytes: &[u8; 8]) -> Result<()> {
        let Some(qpx) = self.qpx else {
            return Err(Error::new(ErrorKind::NoSupp, "ibv_wr_atomic_write"));
        };
        let q = qpx.as_ptr();
        // SAFETY: [V2, V3] an extended QP created with IBV_QP_EX_WITH_ATOMIC_WRITE; the builder calls are
        // serialised by the send ring's lock; `bytes` lives across the calls.
        let r = unsafe {
            let Some(aw) = (*q).wr_atomic_write else {
                return Err(Error::new(ErrorKind::NoSupp, "ibv_wr_atomic_write"));
            };
            ffi::ibv_wr_start(q);
            (*q).wr_id = verbs_id;
            (*q).wr_flags = flags;
            aw(q, rkey, addr, bytes.as_ptr().cast());
            ffi::ibv_wr_complete(q)
        };
        if r == 0 {
            Ok(())
        } else {
            Err(Error::provider("ibv_wr_complete", ret_errno(r)))
        }
    }

    /// Native flush through the extended-QP builder.
    fn post_flush(&self, verbs_id: u64, flags: u32, rkey: u32, addr: u64, len: usize, t: FlushType) -> Result<()> {
        let Some(qpx) = self.qpx else {
            return Err(Error::new(ErrorKind::NoSupp, "ibv_wr_flush"));
        };
        let q = qpx.as_ptr();
        let ptype = match t {
            FlushType::Visibility => 1, // IBV_FLUSH_GLOBAL
            FlushType::Persistent => 2, // IBV_FLUSH_PERSISTENT
        };
        // SAFETY: [V2, V3] an extended QP created with IBV_QP_EX_WITH_FLUSH (so the provider, which
        // accepted the flag when probed, has `wr_flush`: crate::native); builder calls serialised by
        // the send ring's lock.
        let r = unsafe {
            let Some(fl) = crate::native::wr_flush(q) else {
                return Err(Error::new(ErrorKind::NoSupp, "ibv_wr_flush"));
            };
            ffi::ibv_wr_start(q);
            (*q).wr_id = verbs_id;
            (*q).wr_flags = flags;
            fl(q, rkey, addr, len, ptype, 0 /* IBV_FLUSH_RANGE */);
            ffi::ibv_wr_complete(q)
        };
        if r == 0 {
            Ok(())
        } else {
            Err(Error::provider("ibv_wr_complete", ret_errno(r)))
        }
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
            return Err(Error::new(ErrorKind::NotSharedChannel, "rpma_conn_wait"));
        };
        let cq = ch.wait()?;
        if cq == self.cq.as_ptr() {
            Ok(CqSlot::Main)
        } else if self.rcq.as_ref().is_some_and(|r| r.as_ptr() == cq) {
            Ok(CqSlot::Receive)
        } else {
            Err(Error::new(ErrorKind::Unknown, "ibv_get_cq_event").with_detail("event from an unknown CQ"))
        }
    }

    fn request_private_data(&self) -> &[u8] {
        &self.req_pdata
    }

    fn post_recv(&self, buf: Option<LocalBuf<'_, VerbsMr>>, wr_id: u64) -> Result<()> {
        const OP: &str = "ibv_post_recv";
        let Some(rq) = &self.rq else {
            return Err(Error::provider(OP, libc::EINVAL).with_detail("the QP receives through a shared RQ"));
        };
        let mut sge = buf.as_ref().map(|b| b.mr.sge(b.offset, b.len));
        rq.post(OP, wr_id, buf.as_ref().map(|b| b.mr), |id| {
            let mut wr = ffi::ibv_recv_wr {
                wr_id: id,
                next: std::ptr::null_mut(),
                sg_list: sge.as_mut().map_or(std::ptr::null_mut(), |s| s as *mut ffi::ibv_sge),
                num_sge: i32::from(sge.is_some()),
            };
            let mut bad: *mut ffi::ibv_recv_wr = std::ptr::null_mut();
            // SAFETY: [V2, V4] the QP is alive; one initialised work request whose SGE lives across the
            // call and describes a range inside a registration kept alive by the slot.
            let r = call!("ibv_post_recv", errno(), unsafe { ffi::ibv_post_recv(self.qp(), &mut wr, &mut bad) });
            if r == 0 {
                Ok(())
            } else {
                Err(Error::provider(OP, ret_errno(r)))
            }
        })
    }

    fn post_send(&self, wr: &SendWr<'_, VerbsMr>) -> Result<()> {
        const OP: &str = "ibv_post_send";
        use ffi::ibv_wr_opcode as O;
        let signaled = if wr.signaled { ffi::ibv_send_flags::IBV_SEND_SIGNALED.0 } else { 0 };
        let caps = self.pd.caps();
        let (rkey, raddr) = wr.remote.map_or((0, 0), |r| (r.rkey, r.addr));
        let mr = wr.local.as_ref().map(|l| l.mr);
        let mut sge = wr.local.as_ref().map(|l| l.mr.sge(l.offset, l.len));
        let mut flags = signaled;
        let mut imm: Option<u32> = None;
        let inline_bytes: [u8; 8] = match wr.op {
            SendOp::AtomicWrite(b) => b,
            _ => [0; 8],
        };
        let opcode = match wr.op {
            SendOp::Read => O::IBV_WR_RDMA_READ,
            SendOp::Write => O::IBV_WR_RDMA_WRITE,
            SendOp::WriteImm(i) => {
                imm = Some(i);
                O::IBV_WR_RDMA_WRITE_WITH_IMM
            }
            SendOp::Send => O::IBV_WR_SEND,
            SendOp::SendImm(i) => {
                imm = Some(i);
                O::IBV_WR_SEND_WITH_IMM
            }
            SendOp::AtomicWrite(bytes) if caps.native_atomic_write && self.has_native(Native::AtomicWrite) => {
                self.sq.post(OP, wr.wr_id, None, |id| self.post_atomic_write(id, signaled, rkey, raddr, &bytes))?;
                crate::native::count(Counted::AtomicWriteNative);
                return Ok(());
            }
            SendOp::AtomicWrite(_) => {
                if crate::native::native_only().atomic_write {
                    return Err(self.no_native("rpma_atomic_write", "atomic write", caps.native_atomic_write));
                }
                // A fenced inline 8-byte write (docs/semantics.md#atomic-write): not executed
                // before preceding reads (flushes) complete; inline data is copied at post time.
                flags |= ffi::ibv_send_flags::IBV_SEND_INLINE.0 | ffi::ibv_send_flags::IBV_SEND_FENCE.0;
                sge = Some(ffi::ibv_sge { addr: inline_bytes.as_ptr() as u64, length: 8, lkey: 0 });
                O::IBV_WR_RDMA_WRITE
            }
            SendOp::Flush(t @ FlushType::Visibility) if caps.native_flush && self.has_native(Native::Flush) => {
                self.sq.post(OP, wr.wr_id, None, |id| self.post_flush(id, signaled, rkey, raddr, wr.len, t))?;
                crate::native::count(Counted::FlushNative);
                return Ok(());
            }
            SendOp::Flush(t) => {
                // A persistent flush is an RDMA Read even with native flush (docs/native-ops.md:
                // the kernel grants persistent flush access on pmem only, and the initiator cannot
                // know the target's memory); any other emulated flush obeys the native-only policy.
                let by_rule = t == FlushType::Persistent && caps.native_flush;
                if !by_rule && crate::native::native_only().flush {
                    return Err(self.no_native("rpma_flush", "flush", caps.native_flush));
                }
                // APM (docs/semantics.md#flush): an 8-byte RDMA Read at the flushed address into
                // the connection's private buffer (no more than the region is described to hold).
                let Some(fm) = &self.flush_mr else {
                    return Err(Error::new(ErrorKind::NoSupp, OP).with_detail("no flush buffer"));
                };
                let n = wr.remote.map_or(0, |r| r.described_len.min(8)) as usize;
                sge = Some(fm.sge(0, n));
                O::IBV_WR_RDMA_READ
            }
        };
        let emulated = match wr.op {
            SendOp::Flush(FlushType::Persistent) if caps.native_flush => Some(Counted::FlushPersistentRead),
            SendOp::Flush(_) => Some(Counted::FlushEmulated),
            SendOp::AtomicWrite(_) => Some(Counted::AtomicWriteEmulated),
            _ => None,
        };
        let tag = if matches!(emulated, Some(Counted::FlushPersistentRead)) { crate::ring::FLUSH_READ_BIT } else { 0 };
        self.sq.post(OP, wr.wr_id, mr, |id| {
            // SAFETY: [V2] zeroed is a valid `ibv_send_wr` (null pointers, zero fields).
            let mut w: ffi::ibv_send_wr = unsafe { std::mem::zeroed() };
            w.wr_id = id | tag;
            w.opcode = opcode;
            w.send_flags = flags;
            if let Some(s) = sge.as_mut() {
                w.sg_list = s;
                w.num_sge = 1;
            }
            if let Some(i) = imm {
                w.imm_data_invalidated_rkey_union.imm_data = i.to_be();
            }
            w.wr.rdma = ffi::rdma_t { remote_addr: raddr, rkey };
            self.post(&mut w)
        })?;
        if let Some(c) = emulated {
            crate::native::count(c);
        }
        Ok(())
    }

    fn connect(&mut self, pdata: Option<&[u8]>) -> Result<()> {
        let mut param = conn_param(pdata);
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

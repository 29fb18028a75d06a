//! A connection's send queue: everything posting on it needs (the QP and its provider's
//! `post_send`, the extended QP of native operations, the emulated flush's buffer, the chain
//! buffers, the slot ring) and its two paths:
//!
//! - the fast path ([`SendQueue::post_one`], [`SendQueue::post`]): reads, writes and sends of
//!   at most one registered piece and emulated flushes, alone or in chains, turned straight into
//!   verbs work requests;
//! - the general path (cold): scatter-gather, inline data, atomic writes, native flushes and
//!   atomic writes through the extended QP, the native-only policy, a full queue.
//!
//! The ring lives in an allocation of its own ([`RingBox`]) that the CQ retiring the queue's
//! work requests reaches by address (rule V9 of docs/memory.md).

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_sys as ffi;
use rpma_core::transport::{Local, SendOp, SendWr};
use rpma_core::{Error, ErrorKind, FlushType, Result};

use crate::mr::VerbsMr;
use crate::native::Counted;
use crate::provider::PostSend;
use crate::ring::{FifoRing, Ring, RingBox, FLUSH_READ_BIT};
use crate::sys::call;
use crate::{Verbs, VerbsPd};

use super::chain::{self, regions};

/// A connection's send queue (see the module docs). Reached by one thread at a time (rule V6:
/// the queue pair holding it is `Send`, not `Sync`).
pub(super) struct SendQueue {
    /// The queue pair's QP (alive until the queue pair's teardown, after which nothing posts).
    qp: NonNull<ffi::ibv_qp>,
    /// The provider's `post_send` (crate::provider).
    post_send: PostSend,
    /// The extended QP, if the device has native flush or atomic write.
    qpx: Option<NonNull<ffi::ibv_qp_ex>>,
    /// The slot ring (its CQ reaches it too: rule V9).
    ring: RingBox,
    /// Chain buffers (rule V6).
    scratch: UnsafeCell<SendScratch>,
    /// The destination of emulated flushes (and of persistent flushes posted as RDMA Reads).
    flush_mr: Option<VerbsMr>,
    pd: Arc<VerbsPd>,
}

/// A read, write or send of at most one registered piece, or an emulated flush: what the fast
/// paths post without [`verbs_wr`].
struct FastWr<'m> {
    opcode: ffi::ibv_wr_opcode::Type,
    imm: Option<u32>,
    sge: Option<ffi::ibv_sge>,
    /// The region the slot pins (none for a flush: its buffer is the connection's own).
    mr: Option<&'m VerbsMr>,
}

impl SendQueue {
    /// The send queue of `qp` (its provider's `post_send`, its extended QP if it has one),
    /// recording in `ring` (which the send CQ reaches) and flushing into `flush_mr`.
    pub(super) fn new(
        qp: NonNull<ffi::ibv_qp>,
        post_send: PostSend,
        qpx: Option<NonNull<ffi::ibv_qp_ex>>,
        ring: RingBox,
        flush_mr: Option<VerbsMr>,
        pd: &Arc<VerbsPd>,
    ) -> Self {
        Self {
            qp,
            post_send,
            qpx,
            ring,
            scratch: UnsafeCell::new(SendScratch::default()),
            flush_mr,
            pd: Arc::clone(pd),
        }
    }

    /// `ibv_post_send` of the chain at `wr`.
    ///
    /// # Safety
    /// `wr` heads a chain of initialised work requests whose SGE lists (and inline data) live
    /// across the call and describe ranges inside registrations the ring pins once the chain
    /// is recorded, or the flush buffer (rules V2, V4); nothing is posted after teardown.
    #[inline(always)]
    unsafe fn doorbell(&self, wr: *mut ffi::ibv_send_wr, bad: &mut *mut ffi::ibv_send_wr) -> i32 {
        // SAFETY: [V2, V4, V8] the QP is alive (nothing posts after teardown) and `post_send` is
        // its provider's; the chain is as the contract says.
        call!("ibv_post_send", crate::sys::errno(), unsafe { (self.post_send)(self.qp.as_ptr(), wr, bad) })
    }

    /// Posts one work request: the fast path if it takes it, else the general one.
    ///
    /// # Errors
    /// As [`SendQueue::post`].
    #[inline(always)]
    pub(super) fn post_one(&self, wr: SendWr<'_, Verbs>) -> Result<()> {
        match self.post_one_fast(&wr) {
            Some(r) => r,
            None => self.post_general_one(wr),
        }
    }

    /// Posts a chain: the fast path if it takes it, else the general one.
    ///
    /// # Errors
    /// `Provider` (`ENOMEM`) if the queue has fewer free entries than `wrs` (nothing posted),
    /// `Unsupported` for an operation the native-only policy forbids to emulate, `Provider` if
    /// posting fails (saying how many were posted).
    #[inline]
    pub(super) fn post(&self, wrs: &[SendWr<'_, Verbs>]) -> Result<()> {
        match self.post_chain_fast(wrs) {
            Some(r) => r,
            None => self.post_general(wrs),
        }
    }

    /// Work requests that can be posted now.
    pub(super) fn free(&self) -> u32 {
        // SAFETY: [V6, V9] the owner's thread; the reference ends here.
        u32::try_from(unsafe { self.ring.get() }.free()).unwrap_or(u32::MAX)
    }

    /// The QP was destroyed: the regions the ring pins are free (crate::pin).
    pub(super) fn release_pins(&self) {
        // SAFETY: [V6, V9] teardown runs on the owner's thread; the reference ends here.
        unsafe { self.ring.get() }.release_pins();
    }

    /// The QP could not be destroyed, so the device may still use what its work requests name:
    /// the regions the ring pins and the flush buffer stay registered forever, reported as
    /// leaked.
    pub(super) fn report_leaks(&self, why: &Error) {
        // SAFETY: [V6, V9] as in `release_pins`.
        unsafe { self.ring.get() }.report_leaks(why);
        if let Some(m) = &self.flush_mr {
            m.abandon(why);
        }
    }

    /// Deregisters the flush buffer (after the QP was destroyed), reported like librpma's
    /// `rpma_conn_delete`.
    ///
    /// # Errors
    /// `Provider` if `ibv_dereg_mr` fails.
    pub(super) fn release_flush_buffer(&self) -> Result<()> {
        self.flush_mr.as_ref().map_or(Ok(()), VerbsMr::deregister)
    }

    /// The flush buffer if this QP emulates flushes and the native-only policy allows it (the
    /// fast path of a flush); `None` sends flushes down the general path.
    #[inline(always)]
    fn emulated_flush(&self) -> Option<&VerbsMr> {
        if self.qpx.is_none() && !crate::native::only_flush() {
            self.flush_mr.as_ref()
        } else {
            None
        }
    }

    /// `wr` as a [`FastWr`] work request; `None` for any other (the general path's).
    #[inline(always)]
    fn fast_wr<'m>(&self, wr: &SendWr<'m, Verbs>) -> Option<FastWr<'m>> {
        use ffi::ibv_wr_opcode as O;
        let piece = match wr.local {
            Local::One(b) => Some(b),
            Local::None => None,
            Local::Sg(_) | Local::Inline(_) => return None,
        };
        Some(match wr.op {
            SendOp::Read | SendOp::Write | SendOp::WriteImm(_) | SendOp::Send | SendOp::SendImm(_) => {
                let (opcode, imm) = rw_send_opcode(&wr.op)?;
                FastWr { opcode, imm, sge: piece.map(|b| b.mr.sge(b.offset, b.len)), mr: piece.map(|b| &**b.mr) }
            }
            // An emulated flush: an 8-byte RDMA Read at the flushed address into the connection's
            // flush buffer (docs/semantics.md#flush).
            SendOp::Flush(_) => {
                let fm = self.emulated_flush()?;
                let len = wr.remote.map_or(0, |r| r.described_len.min(8)) as usize;
                FastWr { opcode: O::IBV_WR_RDMA_READ, imm: None, sge: Some(fm.sge(0, len)), mr: None }
            }
            SendOp::AtomicWrite(_) => return None,
        })
    }

    /// Posts one read, write or send of at most one registered piece, or an emulated flush
    /// (the common cases), straight from the work request, and records it in the ring; `None`
    /// for any other work request (the general path handles it, and a full queue too, which it
    /// reports).
    #[inline(always)]
    fn post_one_fast(&self, wr: &SendWr<'_, Verbs>) -> Option<Result<()>> {
        // SAFETY: [V6, V9] the owner's thread (`VerbsQp` is not `Sync`); the reference ends with
        // this function, and nothing called here takes another (posting never polls).
        let ring = unsafe { self.ring.get() };
        let n = ring.next()?;
        let p = self.fast_wr(wr)?;
        let mut w = fast_ibv_wr(wr, &p, n);
        let mut sge = p.sge;
        if let Some(s) = sge.as_mut() {
            w.sg_list = s;
            w.num_sge = 1;
        }
        let mut bad: *mut ffi::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: [V2, V4] one initialised work request; its SGE, on the stack, lives across the
        // call and describes a piece of a region `wr` borrows (pinned below) or the flush buffer.
        let r = unsafe { self.doorbell(&mut w, &mut bad) };
        if r != 0 {
            return Some(Err(chain::post_failed("ibv_post_send", r)));
        }
        ring.push_one(n, wr.wr_id, p.mr);
        if matches!(wr.op, SendOp::Flush(_)) {
            crate::native::count(Counted::FlushEmulated);
        }
        Some(Ok(()))
    }

    /// Posts a chain of [`FastWr`] work requests (the common chains) with one doorbell, made
    /// in one pass into the scratch buffers, and records what was posted in the ring; `None`
    /// if the chain holds any other work request or does not fit the queue (the general path
    /// handles it, and reports a full queue).
    #[inline]
    fn post_chain_fast(&self, wrs: &[SendWr<'_, Verbs>]) -> Option<Result<()>> {
        // SAFETY: [V6, V9] the owner's thread (`VerbsQp` is not `Sync`); these references end
        // with this function, and nothing called here takes another.
        let (ring, sc) = unsafe { (self.ring.get(), &mut *self.scratch.get()) };
        if wrs.is_empty() || wrs.len() as u64 > ring.free() {
            return None;
        }
        sc.send.clear();
        sc.sges.clear();
        for (k, wr) in wrs.iter().enumerate() {
            let p = self.fast_wr(wr)?;
            let mut w = fast_ibv_wr(wr, &p, ring.id(k));
            if let Some(s) = p.sge {
                w.num_sge = 1;
                sc.sges.push(s);
            }
            sc.send.push(w);
        }
        let head = chain::link(&mut sc.send, &mut sc.sges);
        let mut bad: *mut ffi::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: [V2, V4] the chain was just linked in the scratch buffers, which are not
        // touched until the call returns; its SGEs describe pieces of regions `wrs` borrow
        // (pinned below) or the flush buffer.
        let r = unsafe { self.doorbell(head, &mut bad) };
        let posted = chain::posted(r, head, bad, wrs.len());
        for wr in &wrs[..posted] {
            let mr = match wr.local {
                Local::One(b) => Some(&**b.mr),
                _ => None,
            };
            // Room for the whole chain was checked above: there is a next slot.
            if let Some(n) = ring.next() {
                ring.push_one(n, wr.wr_id, mr);
            }
            if matches!(wr.op, SendOp::Flush(_)) {
                crate::native::count(Counted::FlushEmulated);
            }
        }
        if r == 0 {
            return Some(Ok(()));
        }
        Some(Err(chain::chain_failed("ibv_post_send", r, posted, wrs.len(), "work requests")))
    }

    /// [`SendQueue::post_general`] of one work request (by value: the fast path builds it in
    /// registers, only this cold call puts it in memory).
    #[inline(never)]
    fn post_general_one(&self, wr: SendWr<'_, Verbs>) -> Result<()> {
        self.post_general(std::slice::from_ref(&wr))
    }

    /// Posts what the fast path does not: chains, scatter-gather, inline data, native or
    /// atomic operations, a full queue.
    #[inline(never)]
    fn post_general(&self, wrs: &[SendWr<'_, Verbs>]) -> Result<()> {
        const OP: &str = "ibv_post_send";
        // SAFETY: [V6, V9] the owner's thread (`VerbsQp` is not `Sync`); these references end
        // with this call, and nothing called here takes another.
        let (ring, sc) = unsafe { (self.ring.get(), &mut *self.scratch.get()) };
        ring.check(OP, wrs.len())?;
        let SendScratch { send, sges, verbs_wrs } = sc;
        let ops = self.ops();
        let single;
        let all: &[VerbsWr] = if let [wr] = wrs {
            single = verbs_wr(wr, ops)?;
            std::slice::from_ref(&single)
        } else {
            verbs_wrs.clear();
            for wr in wrs {
                verbs_wrs.push(verbs_wr(wr, ops)?);
            }
            verbs_wrs
        };
        let Some(qpx) = self.qpx.filter(|_| all.iter().any(|p| p.native.is_some())) else {
            return self.post_chain(ring, send, sges, wrs, all);
        };
        // A chain with native operations: each native operation through the extended QP's
        // builder, each run of the others with one `ibv_post_send` (rxe's builder mishandles some
        // chains that mix sends with native flushes: measured in the debian13 guest), in order.
        // Everything was validated before, so the doorbells after the first do not fail; if one
        // did, the work requests before it stay posted and the error says how many.
        let mut at = 0;
        while at < wrs.len() {
            let native = all[at].native.is_some();
            let end =
                if native { at + 1 } else { (at..wrs.len()).find(|&i| all[i].native.is_some()).unwrap_or(wrs.len()) };
            let r = if native {
                // SAFETY: [V2, V6] the live extended QP of this queue, created with the send-ops
                // flags of the native operations `ops` reported; the owner's thread.
                unsafe { self.post_ex(qpx.as_ptr(), ring, sges, &wrs[at..end], &all[at..end]) }
            } else {
                self.post_chain(ring, send, sges, &wrs[at..end], &all[at..end])
            };
            if let Err(e) = r {
                return Err(if at > 0 {
                    e.with_detail(&format!("the first {at} of {} work requests were posted", wrs.len()))
                } else {
                    e
                });
            }
            at = end;
        }
        Ok(())
    }

    /// Posts a chain of work requests without native operations (`all`: their verbs form) with
    /// one `ibv_post_send`, and records what was posted in `ring`.
    ///
    /// # Errors
    /// `Provider` if posting fails (saying how many were posted).
    fn post_chain(
        &self,
        ring: &mut FifoRing,
        send: &mut Vec<ffi::ibv_send_wr>,
        sges: &mut Vec<ffi::ibv_sge>,
        wrs: &[SendWr<'_, Verbs>],
        all: &[VerbsWr],
    ) -> Result<()> {
        let flush_mr = self.flush_mr.as_ref();
        let mut bad: *mut ffi::ibv_send_wr = std::ptr::null_mut();
        let (r, posted) = if let ([wr], [p]) = (wrs, all) {
            // One work request: on the stack, with its SGE if it has at most one.
            let mut w = send_wr(p, ring.id(0));
            let mut sge = MaybeUninit::<ffi::ibv_sge>::uninit();
            let n = if wr.local.pieces_len() > 1 {
                sges.clear();
                let n = push_sges(wr, p, flush_mr, sges);
                w.sg_list = sges.as_mut_ptr();
                n
            } else {
                let s = match p.data {
                    Data::None => None,
                    Data::Local => wr.local.piece(0).map(|b| b.mr.sge(b.offset, b.len)),
                    Data::FlushBuf(n) => flush_mr.map(|fm| fm.sge(0, n)),
                    Data::Inline(ptr, len) => Some(ffi::ibv_sge { addr: ptr as u64, length: len as u32, lkey: 0 }),
                };
                match s {
                    Some(s) => {
                        w.sg_list = sge.write(s);
                        1
                    }
                    None => 0,
                }
            };
            w.num_sge = n;
            // SAFETY: [V2, V4] one initialised work request whose SGEs (on the stack or in
            // `sges`, untouched until the call returns) describe pieces of regions `wr` borrows
            // (pinned below), inline bytes it borrows, or the flush buffer.
            let r = unsafe { self.doorbell(&mut w, &mut bad) };
            (r, usize::from(r == 0))
        } else {
            send.clear();
            sges.clear();
            for (k, (wr, p)) in wrs.iter().zip(all).enumerate() {
                let mut w = send_wr(p, ring.id(k));
                w.num_sge = push_sges(wr, p, flush_mr, sges);
                send.push(w);
            }
            let head = chain::link(send, sges);
            // SAFETY: [V2, V4] the chain was just linked in `send` and `sges`, untouched until
            // the call returns; its SGEs are as above.
            let r = unsafe { self.doorbell(head, &mut bad) };
            (r, chain::posted(r, head, bad, wrs.len()))
        };
        for wr in &wrs[..posted] {
            ring.push(wr.wr_id, regions(&wr.local));
        }
        for p in &all[..posted] {
            if let Some(c) = p.counted {
                crate::native::count(c);
            }
        }
        if r == 0 {
            return Ok(());
        }
        Err(chain::chain_failed("ibv_post_send", r, posted, wrs.len(), "work requests"))
    }

    /// Posts a chain holding native operations through the extended QP's builder (one
    /// `ibv_wr_start` .. `ibv_wr_complete`: posted whole or not at all), and records it in
    /// `ring`.
    ///
    /// # Errors
    /// `Provider` if `ibv_wr_complete` fails (nothing was posted).
    ///
    /// # Safety
    /// `q` is this queue's live extended QP, created with the send-ops flags of every native
    /// operation in `all`; the caller is its owner's thread (rule V6).
    unsafe fn post_ex(
        &self,
        q: *mut ffi::ibv_qp_ex,
        ring: &mut FifoRing,
        sges: &mut Vec<ffi::ibv_sge>,
        wrs: &[SendWr<'_, Verbs>],
        all: &[VerbsWr],
    ) -> Result<()> {
        use ffi::ibv_wr_opcode as O;
        let flush_mr = self.flush_mr.as_ref();
        // SAFETY: [V2, V6] per the contract; every builder call is made between `ibv_wr_start`
        // and `ibv_wr_complete` on this thread; the data pointers (pieces, inline bytes, the
        // atomic value inside `wrs`) live across the calls, which copy them into the work queue.
        let r = unsafe {
            ffi::ibv_wr_start(q);
            for (k, (wr, p)) in wrs.iter().zip(all).enumerate() {
                (*q).wr_id = ring.id(k) | p.tag;
                (*q).wr_flags = p.flags;
                match p.native {
                    Some(Native::AtomicWrite) => {
                        let Some(aw) = (*q).wr_atomic_write else {
                            ffi::ibv_wr_abort(q);
                            return Err(Error::new(ErrorKind::Unsupported, "ibv_wr_atomic_write"));
                        };
                        let Data::Inline(ptr, _) = p.data else { unreachable!("an atomic write carries its value") };
                        aw(q, p.rkey, p.raddr, ptr.cast());
                        continue;
                    }
                    Some(Native::Flush(t)) => {
                        let Some(fl) = crate::native::wr_flush(q) else {
                            ffi::ibv_wr_abort(q);
                            return Err(Error::new(ErrorKind::Unsupported, "ibv_wr_flush"));
                        };
                        let ptype = match t {
                            FlushType::Visibility => 1, // IBV_FLUSH_GLOBAL
                            FlushType::Persistent => 2, // IBV_FLUSH_PERSISTENT
                        };
                        fl(q, p.rkey, p.raddr, wr.len, ptype, 0 /* IBV_FLUSH_RANGE */);
                        continue;
                    }
                    None => {}
                }
                match p.opcode {
                    O::IBV_WR_RDMA_READ => ffi::ibv_wr_rdma_read(q, p.rkey, p.raddr),
                    O::IBV_WR_RDMA_WRITE_WITH_IMM => {
                        ffi::ibv_wr_rdma_write_imm(q, p.rkey, p.raddr, p.imm.unwrap_or(0).to_be())
                    }
                    O::IBV_WR_SEND => ffi::ibv_wr_send(q),
                    O::IBV_WR_SEND_WITH_IMM => ffi::ibv_wr_send_imm(q, p.imm.unwrap_or(0).to_be()),
                    _ => ffi::ibv_wr_rdma_write(q, p.rkey, p.raddr),
                }
                match p.data {
                    Data::Inline(ptr, len) => ffi::ibv_wr_set_inline_data(q, ptr.cast_mut().cast(), len),
                    _ => {
                        sges.clear();
                        let n = push_sges(wr, p, flush_mr, sges);
                        ffi::ibv_wr_set_sge_list(q, n as usize, sges.as_ptr());
                    }
                }
            }
            ffi::ibv_wr_complete(q)
        };
        if r != 0 {
            return Err(Error::provider("ibv_wr_complete", crate::sys::ret_errno(r)));
        }
        for wr in wrs {
            ring.push(wr.wr_id, regions(&wr.local));
        }
        for p in all {
            if let Some(c) = p.counted {
                crate::native::count(c);
            }
        }
        Ok(())
    }

    /// What this queue can do natively (librpma 1.3 decides per QP the same way: `qpx->wr_flush`
    /// / `qpx->wr_atomic_write` set).
    fn ops(&self) -> QpOps<'_> {
        let caps = self.pd.caps();
        let (mut native_flush, mut native_atomic_write) = (false, false);
        if let Some(qpx) = self.qpx {
            // SAFETY: [V2] a live extended QP; `wr_flush` is read only when the QP was created
            // with IBV_QP_EX_WITH_FLUSH (native flush in the PD's capabilities, which only the
            // device's own probe turns on: `Transport::alloc_pd`), which its provider accepted.
            unsafe {
                native_atomic_write = caps.native_atomic_write && (*qpx.as_ptr()).wr_atomic_write.is_some();
                native_flush = caps.native_flush && crate::native::wr_flush(qpx.as_ptr()).is_some();
            }
        }
        QpOps { native_flush, native_atomic_write, flush_mr: self.flush_mr.as_ref(), pd: &self.pd }
    }
}

/// The verbs work request `id` of `wr` made [`FastWr`] as `p`, without its SGE list and link.
#[inline(always)]
fn fast_ibv_wr(wr: &SendWr<'_, Verbs>, p: &FastWr<'_>, id: u64) -> ffi::ibv_send_wr {
    let (raddr, rkey) = wr.remote.map_or((0, 0), |r| (r.addr, r.rkey));
    // SAFETY: [V2] zeroed is a valid `ibv_send_wr` (null pointers, zero fields).
    let mut w: ffi::ibv_send_wr = unsafe { std::mem::zeroed() };
    w.wr_id = id;
    w.opcode = p.opcode;
    w.send_flags = if wr.signaled { ffi::ibv_send_flags::IBV_SEND_SIGNALED.0 } else { 0 };
    if let Some(i) = p.imm {
        w.imm_data_invalidated_rkey_union.imm_data = i.to_be();
    }
    w.wr.rdma = ffi::rdma_t { remote_addr: raddr, rkey };
    w
}

/// Reusable buffers of a send queue's chains (owned by the queue; rule V6).
#[derive(Default)]
struct SendScratch {
    send: Vec<ffi::ibv_send_wr>,
    sges: Vec<ffi::ibv_sge>,
    /// The verbs form of a chain's work requests.
    verbs_wrs: Vec<VerbsWr>,
}

// SAFETY: [V6] the vectors hold pointers (chain links, SGE lists, inline data) only while a
// chain is posted by the thread that owns them; between posts those pointers are stale and
// never read.
unsafe impl Send for SendScratch {}

impl std::fmt::Debug for SendScratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendScratch").field("capacity", &self.send.capacity()).finish()
    }
}

/// Where a work request's data comes from or goes to.
#[derive(Clone, Copy)]
enum Data {
    /// Nothing.
    None,
    /// The registered pieces of its local side.
    Local,
    /// The first `n` bytes of the connection's flush buffer (an emulated flush).
    FlushBuf(usize),
    /// Inline bytes (copied by the provider at post time).
    Inline(*const u8, usize),
}

/// A work request as verbs wants it.
#[derive(Clone, Copy)]
struct VerbsWr {
    opcode: ffi::ibv_wr_opcode::Type,
    flags: u32,
    imm: Option<u32>,
    rkey: u32,
    raddr: u64,
    /// Bits added to the verbs `wr_id`.
    tag: u64,
    data: Data,
    native: Option<Native>,
    counted: Option<Counted>,
}

/// A native operation of an extended QP.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Native {
    Flush(FlushType),
    AtomicWrite,
}

/// What the QP can do, for [`verbs_wr`].
#[derive(Clone, Copy)]
struct QpOps<'a> {
    native_flush: bool,
    native_atomic_write: bool,
    flush_mr: Option<&'a VerbsMr>,
    /// Its protection domain (the device's capabilities and name, for a refusal).
    pd: &'a VerbsPd,
}

/// The `Unsupported` of a native-only operation (`what`) that would be emulated on a QP of `pd`.
#[cold]
#[inline(never)]
fn no_native(pd: &VerbsPd, op: &'static str, what: &str) -> Error {
    let caps = pd.caps();
    let device_has_it = if what == "flush" { caps.native_flush } else { caps.native_atomic_write };
    let dev = pd.device().name();
    let why = if device_has_it {
        format!("this connection's QP on {dev} has no native {what}")
    } else {
        format!("device {dev} has no native {what} (kernel capability bits or provider support missing)")
    };
    Error::new(ErrorKind::Unsupported, op).with_detail(&format!(
        "native {what} required (rpma_verbs::set_native_only / RPMA_VERBS_NATIVE_ONLY) but {why}; not emulated"
    ))
}

/// The verbs opcode (and immediate data) of a read, write or send; `None` for the operations
/// that have their own paths (atomic write, flush).
#[inline(always)]
fn rw_send_opcode(op: &SendOp) -> Option<(ffi::ibv_wr_opcode::Type, Option<u32>)> {
    use ffi::ibv_wr_opcode as O;
    Some(match *op {
        SendOp::Read => (O::IBV_WR_RDMA_READ, None),
        SendOp::Write => (O::IBV_WR_RDMA_WRITE, None),
        SendOp::WriteImm(i) => (O::IBV_WR_RDMA_WRITE_WITH_IMM, Some(i)),
        SendOp::Send => (O::IBV_WR_SEND, None),
        SendOp::SendImm(i) => (O::IBV_WR_SEND_WITH_IMM, Some(i)),
        SendOp::AtomicWrite(_) | SendOp::Flush(_) => return None,
    })
}

/// Maps one validated work request to verbs.
///
/// # Errors
/// `Unsupported` for an operation the native-only policy forbids to emulate, or a flush without a
/// flush buffer.
#[inline]
fn verbs_wr(wr: &SendWr<'_, Verbs>, ops: QpOps<'_>) -> Result<VerbsWr> {
    use ffi::ibv_send_flags as F;
    use ffi::ibv_wr_opcode as O;
    let (rkey, raddr) = wr.remote.map_or((0, 0), |r| (r.rkey, r.addr));
    let mut p = VerbsWr {
        opcode: O::IBV_WR_RDMA_WRITE,
        flags: if wr.signaled { F::IBV_SEND_SIGNALED.0 } else { 0 },
        imm: None,
        rkey,
        raddr,
        tag: 0,
        data: Data::Local,
        native: None,
        counted: None,
    };
    if let Local::Inline(b) = wr.local {
        p.flags |= F::IBV_SEND_INLINE.0;
        p.data = Data::Inline(b.as_ptr(), b.len());
    }
    if let Some((opcode, imm)) = rw_send_opcode(&wr.op) {
        p.opcode = opcode;
        p.imm = imm;
        return Ok(p);
    }
    match &wr.op {
        SendOp::Read | SendOp::Write | SendOp::WriteImm(_) | SendOp::Send | SendOp::SendImm(_) => {}
        SendOp::AtomicWrite(bytes) => {
            if ops.native_atomic_write {
                p.native = Some(Native::AtomicWrite);
                p.data = Data::Inline(bytes.as_ptr(), 8);
                p.counted = Some(Counted::AtomicWriteNative);
            } else {
                if crate::native::native_only().atomic_write {
                    return Err(no_native(ops.pd, "Conn::atomic_write", "atomic write"));
                }
                // A fenced inline 8-byte write (docs/semantics.md#atomic-write): not executed
                // before preceding reads (flushes) complete; inline data is copied at post time.
                p.flags |= F::IBV_SEND_INLINE.0 | F::IBV_SEND_FENCE.0;
                p.data = Data::Inline(bytes.as_ptr(), 8);
                p.counted = Some(Counted::AtomicWriteEmulated);
            }
        }
        SendOp::Flush(t) if ops.native_flush && (*t == FlushType::Visibility || !crate::native::persistent_read()) => {
            // docs/native-ops.md, "The persistent flush rule": native to visibility, and to
            // persistence unless the process chose the RDMA Read (a target region on DRAM has no
            // IBV_ACCESS_FLUSH_PERSISTENT: the flush then completes with a remote access error)
            p.native = Some(Native::Flush(*t));
            p.data = Data::None;
            p.counted =
                Some(if *t == FlushType::Persistent { Counted::FlushPersistentNative } else { Counted::FlushNative });
        }
        SendOp::Flush(t) => {
            // A persistent flush on a native-flush QP is an RDMA Read only by the process's
            // explicit choice (PersistentFlush::Read); any other emulated flush obeys the
            // native-only policy.
            let by_rule = *t == FlushType::Persistent && ops.native_flush;
            if !by_rule && crate::native::native_only().flush {
                return Err(no_native(ops.pd, "Conn::flush", "flush"));
            }
            if ops.flush_mr.is_none() {
                return Err(Error::new(ErrorKind::Unsupported, "ibv_post_send").with_detail("no flush buffer"));
            }
            // APM (docs/semantics.md#flush): an 8-byte RDMA Read at the flushed address into
            // the connection's private buffer (no more than the region is described to hold).
            p.opcode = O::IBV_WR_RDMA_READ;
            p.data = Data::FlushBuf(wr.remote.map_or(0, |r| r.described_len.min(8)) as usize);
            if by_rule {
                p.tag = FLUSH_READ_BIT;
                p.counted = Some(Counted::FlushPersistentRead);
            } else {
                p.counted = Some(Counted::FlushEmulated);
            }
        }
    }
    Ok(p)
}
/// Appends the scatter-gather entries of `wr` (with `p`) to `sges`; returns how many.
#[inline]
fn push_sges(wr: &SendWr<'_, Verbs>, p: &VerbsWr, flush_mr: Option<&VerbsMr>, sges: &mut Vec<ffi::ibv_sge>) -> i32 {
    match p.data {
        Data::None => 0,
        Data::Local => {
            let n = wr.local.pieces_len();
            sges.extend((0..n).filter_map(|i| wr.local.piece(i)).map(|b| b.mr.sge(b.offset, b.len)));
            n as i32
        }
        Data::FlushBuf(n) => match flush_mr {
            Some(fm) => {
                sges.push(fm.sge(0, n));
                1
            }
            None => 0,
        },
        Data::Inline(ptr, len) => {
            sges.push(ffi::ibv_sge { addr: ptr as u64, length: len as u32, lkey: 0 });
            1
        }
    }
}

/// A zeroed verbs send work request filled from `p`.
#[inline]
fn send_wr(p: &VerbsWr, id: u64) -> ffi::ibv_send_wr {
    // SAFETY: [V2] zeroed is a valid `ibv_send_wr` (null pointers, zero fields).
    let mut w: ffi::ibv_send_wr = unsafe { std::mem::zeroed() };
    w.wr_id = id | p.tag;
    w.opcode = p.opcode;
    w.send_flags = p.flags;
    if let Some(i) = p.imm {
        w.imm_data_invalidated_rkey_union.imm_data = i.to_be();
    }
    w.wr.rdma = ffi::rdma_t { remote_addr: p.raddr, rkey: p.rkey };
    w
}

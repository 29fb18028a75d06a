//! Completion queues and completion channels.

use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rdma_sys as ffi;
use rpma_core::transport::{CqBackend, CqTrace};
use rpma_core::{Error, ErrorKind, Result, Wc, WcOpcode, WC_LAYOUT};

use crate::mr::PARKED;
use crate::provider::{self, PollCq};
use crate::ring::{FifoRing, SlotRing, FLUSH_READ_BIT, NUMBER_MASK, RECV_BIT};
use crate::sys::{call, errno, release, ret_errno, track};

use super::recv_queue::RecvScratch;

// The device writes completions straight into the caller's `&mut [Wc]` (rule V7): `Wc` has
// the layout of `struct ibv_wc`.
const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    type W = ffi::ibv_wc;
    let ibv = [
        offset_of!(W, wr_id),
        offset_of!(W, status),
        offset_of!(W, opcode),
        offset_of!(W, vendor_err),
        offset_of!(W, byte_len),
        offset_of!(W, imm_data_invalidated_rkey_union),
        offset_of!(W, qp_num),
        offset_of!(W, src_qp),
        offset_of!(W, wc_flags),
        offset_of!(W, pkey_index),
        offset_of!(W, slid),
        offset_of!(W, sl),
        offset_of!(W, dlid_path_bits),
    ];
    let mut i = 0;
    while i < ibv.len() {
        assert!(ibv[i] == WC_LAYOUT.0[i], "rpma_core::Wc does not have the layout of struct ibv_wc");
        i += 1;
    }
    assert!(size_of::<W>() == WC_LAYOUT.1 && align_of::<W>() <= align_of::<Wc>());
};

/// A completion channel (`ibv_comp_channel`).
pub(crate) struct Channel {
    ch: NonNull<ffi::ibv_comp_channel>,
    destroyed: AtomicBool,
}

// SAFETY: [V3] a completion channel is used only through thread-safe libibverbs calls.
unsafe impl Send for Channel {}
// SAFETY: [V3] as above.
unsafe impl Sync for Channel {}

impl Channel {
    pub(crate) fn new(ctx: *mut ffi::ibv_context) -> Result<Arc<Self>> {
        // SAFETY: [V1] `ctx` is an open device context.
        let ch = call!("ibv_create_comp_channel", std::ptr::null_mut(), unsafe { ffi::ibv_create_comp_channel(ctx) });
        let ch = NonNull::new(ch).ok_or_else(|| Error::provider("ibv_create_comp_channel", errno()))?;
        track!(CompChannel, 1);
        Ok(Arc::new(Self { ch, destroyed: AtomicBool::new(false) }))
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: [V1] the channel's fd stays open until the channel is destroyed, which happens
        // only when the last holder releases it (not while `&self` is borrowed) or at teardown
        // of the owner of that borrow.
        unsafe { BorrowedFd::borrow_raw((*self.ch.as_ptr()).fd) }
    }

    /// `ibv_get_cq_event` + ack + re-arm; returns the CQ that fired.
    pub(crate) fn wait(&self) -> Result<*mut ffi::ibv_cq> {
        let mut cq: *mut ffi::ibv_cq = std::ptr::null_mut();
        let mut ctx: *mut libc::c_void = std::ptr::null_mut();
        // SAFETY: [V2] the channel is alive; the out-pointers are valid.
        let r = call!("ibv_get_cq_event", -1, unsafe { ffi::ibv_get_cq_event(self.ch.as_ptr(), &mut cq, &mut ctx) });
        if r != 0 || cq.is_null() {
            let e = errno();
            let err = Error::new(ErrorKind::NoCompletion, "ibv_get_cq_event");
            return Err(if e == libc::EAGAIN {
                err
            } else {
                err.with_detail(&std::io::Error::from_raw_os_error(e).to_string())
            });
        }
        // SAFETY: [V1] `cq` is a CQ of this channel that reported an event; every CQ of a channel is
        // destroyed only after its events are acked, which we do right here.
        unsafe { ffi::ibv_ack_cq_events(cq, 1) };
        // SAFETY: [V1] as above.
        let r = call!("ibv_req_notify_cq", errno(), unsafe { ffi::ibv_req_notify_cq(cq, 0) });
        if r != 0 {
            return Err(Error::provider("ibv_req_notify_cq", ret_errno(r)));
        }
        Ok(cq)
    }

    pub(crate) fn release(&self) -> Result<()> {
        if self.destroyed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // SAFETY: [V1] destroyed once; every CQ on it was destroyed before (their owners release
        // them first).
        let r = release!(CompChannel: "ibv_destroy_comp_channel", errno(), unsafe {
            ffi::ibv_destroy_comp_channel(self.ch.as_ptr())
        });
        if r == 0 {
            Ok(())
        } else {
            Err(Error::provider("ibv_destroy_comp_channel", ret_errno(r)))
        }
    }
}

impl Channel {
    /// Leaves the channel to a queue pair that could not be destroyed: never destroyed.
    pub(crate) fn abandon(&self) {
        self.destroyed.store(true, Ordering::Release);
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            rpma_core::rpma_log!(Error, "{e}");
        }
    }
}

/// A shared receive queue's slot ring and chain buffers: shared by the SRQ and the CQs of its
/// connections, so behind a lock (posting to an SRQ locks in the provider too).
pub(crate) type SrqRing = Mutex<SrqState>;

/// What [`SrqRing`] protects.
#[derive(Debug)]
pub(crate) struct SrqState {
    pub(crate) ring: SlotRing,
    pub(crate) scratch: RecvScratch,
}

/// A CQ's own completion channel ([`VerbsCq::events`]): waits for the CQ's completion events
/// without borrowing the CQ, for a caller that must not hold what guards the CQ while it
/// sleeps (the C ABI's handle lock: other threads post and poll meanwhile). Taking, acking and
/// re-arming are thread-safe libibverbs calls (V3), so nothing else is needed.
pub struct CqEvents {
    channel: Arc<Channel>,
}

impl std::fmt::Debug for CqEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqEvents").finish_non_exhaustive()
    }
}

impl CqEvents {
    /// `rpma_cq_wait`: takes one completion event (sleeping for it unless the channel's fd is
    /// non-blocking), acks it and re-arms the CQ: `read(2)` and the re-arming, as librpma's.
    ///
    /// # Errors
    /// `NoCompletion` if no event can be had (non-blocking fd); `Provider` if re-arming fails.
    ///
    /// # Safety
    /// The CQ this came from is not destroyed before this returns: the event names it, and
    /// the ack and the re-arming use it (V1).
    pub unsafe fn wait(&self) -> Result<()> {
        self.channel.wait().map(|_| ())
    }
}

/// Where a CQ translates receive completions.
pub(crate) enum RecvLink {
    /// The CQ gets no receive completions.
    None,
    /// The ring of the connection's own receive queue, which owns it (rules V6, V9: its
    /// owner's thread only, alive while the CQ is).
    Own(NonNull<FifoRing>),
    /// A shared receive queue.
    Srq(Arc<SrqRing>),
}

/// A completion queue with its completion channel.
///
/// A connection's CQ reaches the slot rings of the connection's queues whose work requests
/// complete here (its send queue's, and its own receive queue's if its receive completions
/// come here), which the queues own (rule V9): `Send` but not `Sync`, as the connection (rule
/// V6). An SRQ's own CQ reaches neither (only the SRQ's locked ring, and the ring of no queue).
pub struct VerbsCq {
    cq: NonNull<ffi::ibv_cq>,
    /// The provider's `poll_cq` (crate::provider).
    poll_fn: PollCq,
    /// What its polls report (rpma-core's `tracing` feature).
    trace: CqTrace,
    destroyed: AtomicBool,
    /// The send queue's ring, owned by the send queue ([`FifoRing::no_queue`] if no send queue
    /// completes here).
    send: NonNull<FifoRing>,
    recv: RecvLink,
    channel: Arc<Channel>,
    shared: bool,
}

// SAFETY: [V3] a CQ is used only through thread-safe libibverbs calls; [V6, V9] the rings it
// reaches move with the queue pair that owns them and it, and are reached by one thread at a
// time (it is not `Sync`).
unsafe impl Send for VerbsCq {}

impl std::fmt::Debug for VerbsCq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsCq").field("shared_channel", &self.shared).finish_non_exhaustive()
    }
}

impl VerbsCq {
    /// Creates a CQ of `size` entries on `channel` (a new private one if `None`) and arms it.
    /// Completions of send work requests are translated through the ring at `send`
    /// ([`FifoRing::no_queue`] if none come here), of receives through `recv`.
    ///
    /// # Safety
    /// The rings at `send` and in `recv` outlive the CQ and are reached only by the thread that
    /// holds it (rule V9; [`FifoRing::no_queue`] by any).
    pub(crate) unsafe fn new(
        ctx: *mut ffi::ibv_context,
        size: u32,
        channel: Option<&Arc<Channel>>,
        send: NonNull<FifoRing>,
        recv: RecvLink,
    ) -> Result<Self> {
        // SAFETY: [V1] `ctx` is open.
        let poll_fn = unsafe { provider::poll_cq(ctx) }?;
        let shared = channel.is_some();
        let channel = match channel {
            Some(c) => Arc::clone(c),
            None => Channel::new(ctx)?,
        };
        let cqe = i32::try_from(size).unwrap_or(i32::MAX);
        // SAFETY: [V1] `ctx` is open and `channel` belongs to it.
        let cq = call!("ibv_create_cq", std::ptr::null_mut(), unsafe {
            ffi::ibv_create_cq(ctx, cqe, std::ptr::null_mut(), channel.ch.as_ptr(), 0)
        });
        let cq = NonNull::new(cq).ok_or_else(|| Error::provider("ibv_create_cq", errno()))?;
        track!(Cq, 1);
        let me =
            Self { cq, poll_fn, trace: CqTrace::new(), destroyed: AtomicBool::new(false), send, recv, channel, shared };
        // SAFETY: [V1] the CQ was just created.
        let r = call!("ibv_req_notify_cq", errno(), unsafe { ffi::ibv_req_notify_cq(cq.as_ptr(), 0) });
        if r != 0 {
            return Err(Error::provider("ibv_req_notify_cq", ret_errno(r)));
        }
        Ok(me)
    }

    pub(crate) const fn as_ptr(&self) -> *mut ffi::ibv_cq {
        self.cq.as_ptr()
    }

    pub(crate) const fn channel(&self) -> &Arc<Channel> {
        &self.channel
    }

    /// The CQ's own completion channel as a [`CqEvents`], to wait for the CQ's events without
    /// borrowing the CQ; `None` if the channel is shared (its events are waited for through
    /// the connection, which tells its two CQs apart).
    #[must_use]
    pub fn events(&self) -> Option<CqEvents> {
        (!self.shared).then(|| CqEvents { channel: Arc::clone(&self.channel) })
    }

    /// Destroys the CQ now (once); its channel goes with the last holder.
    pub(crate) fn release(&self) -> Result<()> {
        if self.destroyed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // SAFETY: [V1] destroyed once; the QPs using it were destroyed before (owners release QPs
        // first) and every event it produced was acked in `Channel::wait`.
        let r = release!(Cq: "ibv_destroy_cq", errno(), unsafe { ffi::ibv_destroy_cq(self.cq.as_ptr()) });
        if r == 0 {
            Ok(())
        } else {
            Err(Error::provider("ibv_destroy_cq", ret_errno(r)))
        }
    }

    /// Leaves the CQ to a queue pair that could not be destroyed: never destroyed (its
    /// channel neither).
    pub(crate) fn abandon(&self) {
        self.destroyed.store(true, Ordering::Release);
        self.channel.abandon();
    }

    /// Turns a completion the device wrote into the user's: retires its work request in its
    /// ring and puts the user's `wr_id` in place of the verbs one.
    #[inline(always)]
    fn retire(&self, w: &mut Wc) {
        let id = w.wr_id();
        // With the `tracing` feature a failed completion leaves the common case in the same
        // test (its status ORed in), to be reported by `retire_tagged`.
        let other = if CqTrace::ENABLED { id & !NUMBER_MASK | u64::from(w.status_raw()) } else { id & !NUMBER_MASK };
        if other == 0 {
            // The common case, tested first with one test: a successful send-queue work request
            // without a tag, whose verbs `wr_id` is its number.
            w.set_wr_id(self.complete_send(id, id));
        } else {
            self.retire_tagged(w, id);
        }
    }

    /// [`VerbsCq::retire`] of a receive, or of a flush posted as an RDMA Read (reported as a
    /// flush): a verbs `wr_id` with tag bits; with the `tracing` feature also a failed
    /// completion, reported to the CQ's trace (an untagged `wr_id` is retired here as in
    /// `retire`).
    #[inline]
    fn retire_tagged(&self, w: &mut Wc, id: u64) {
        let user = if id & RECV_BIT == 0 {
            self.complete_send(id & NUMBER_MASK, id)
        } else {
            self.retire_recv(id).unwrap_or_else(|| unknown_completion(id))
        };
        w.set_wr_id(user);
        // Only flushes posted as reads carry the bit: reported as the flush they are, without
        // reading the opcode (undefined in an error completion, which a provider may leave
        // unwritten: through the C ABI, whatever the caller's array held).
        if id & FLUSH_READ_BIT != 0 {
            w.set_opcode(WcOpcode::Flush);
        }
        self.trace.completed(w);
    }

    /// The user `wr_id` of send-queue work request `n` (retired with those before it), or
    /// `u64::MAX` after logging the unknown verbs `wr_id` `id`. Each caller settles its own
    /// `None` (one `Option` less to merge on the common path).
    #[inline(always)]
    fn complete_send(&self, n: u64, id: u64) -> u64 {
        // The receive CQ of a shared receive queue, which several threads may poll at once
        // (`VerbsSrq` is `Sync`), has the ring of no queue: an unknown `wr_id` reaching it only
        // reads it.
        // SAFETY: [V6, V9] the ring outlives the CQ; no reference to it is alive (none outlives
        // a call here); a work request in flight means a connection's send queue completes
        // here, polled on its owner's thread.
        match unsafe { FifoRing::complete_at(self.send.as_ptr(), n) } {
            Some(user) => user,
            None => unknown_completion(id),
        }
    }

    /// Polls out what the CQ still holds, before it is destroyed with its queue pair: the
    /// receives taken from a shared receive queue that completed here free their slots of it
    /// (and their regions' pins) instead of staying taken for the life of the queue. Only a CQ
    /// that receives for a shared receive queue polls (a connection's own rings are released
    /// whole).
    pub(crate) fn drain_srq_receives(&self) {
        if !matches!(self.recv, RecvLink::Srq(_)) {
            return;
        }
        let mut wcs = [Wc::EMPTY; 16];
        while matches!(self.poll(&mut wcs), Ok(n) if n > 0) {}
    }

    #[inline]
    fn retire_recv(&self, id: u64) -> Option<u64> {
        match &self.recv {
            // SAFETY: [V6, V9] the ring outlives the CQ; polling runs on the owner's thread and
            // takes no other reference to the ring meanwhile.
            RecvLink::Own(r) => unsafe { FifoRing::complete_at(r.as_ptr(), id & NUMBER_MASK) },
            RecvLink::Srq(r) => r.lock().unwrap_or_else(PoisonError::into_inner).ring.complete(id),
            RecvLink::None => None,
        }
    }
}

#[cold]
#[inline(never)]
fn poll_failed(n: i32) -> Error {
    Error::provider("ibv_poll_cq", n.saturating_abs())
}

#[cold]
#[inline(never)]
fn unknown_completion(verbs_id: u64) -> u64 {
    rpma_core::rpma_log!(Error, "completion of an unknown work request (verbs wr_id {verbs_id:#x})");
    u64::MAX
}

impl Drop for VerbsCq {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            rpma_core::rpma_log!(Error, "{e}");
        }
    }
}

impl CqBackend for VerbsCq {
    #[inline(always)]
    fn poll(&self, wc: &mut [Wc]) -> Result<usize> {
        let want = i32::try_from(wc.len()).unwrap_or(i32::MAX);
        // SAFETY: [V2, V7, V8] the CQ is alive and `poll_fn` is its provider's; `wc` has room
        // for `want` entries laid out as `struct ibv_wc` (asserted above), any bit pattern of
        // which is a valid `Wc`.
        let n = call!("ibv_poll_cq", -errno(), unsafe {
            (self.poll_fn)(self.cq.as_ptr(), want, wc.as_mut_ptr().cast::<ffi::ibv_wc>())
        });
        let Ok(n) = usize::try_from(n) else {
            return Err(poll_failed(n));
        };
        let n = n.min(wc.len());
        match &mut wc[..n] {
            // Most polls take one completion: no loop to set up.
            [w] => self.retire(w),
            ws => ws.iter_mut().for_each(|w| self.retire(w)),
        }
        if n > 0 && PARKED.any() {
            PARKED.sweep();
        }
        Ok(n)
    }

    fn trace(&self) -> &CqTrace {
        &self.trace
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.channel.fd()
    }

    fn wait(&self) -> Result<()> {
        self.channel.wait().map(|_| ())
    }
}

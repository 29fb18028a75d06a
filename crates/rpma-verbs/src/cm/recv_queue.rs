//! A connection's own receive queue: what posting on it needs (the QP and its provider's
//! `post_recv`, the chain buffers, the slot ring), its fast path (one receive of at most one
//! piece) and its general path (chains, scatter-gather, a full queue). A connection that
//! receives through a shared receive queue has none of its own: posting is refused.
//!
//! The ring lives in an allocation of its own ([`RingBox`]) that the CQ retiring the queue's
//! receives reaches by address (rule V9 of docs/memory.md).

use std::cell::UnsafeCell;
use std::ptr::NonNull;

use rdma_sys as ffi;
use rpma_core::transport::{Local, RecvWr};
use rpma_core::{Error, Result};

use crate::provider::PostRecv;
use crate::ring::{Ring, RingBox};
use crate::sys::call;
use crate::Verbs;

use super::chain;

/// A connection's receive queue (see the module docs). Reached by one thread at a time (rule
/// V6: the queue pair holding it is `Send`, not `Sync`).
pub(super) struct RecvQueue {
    /// The queue pair's QP (alive until the queue pair's teardown, after which nothing posts).
    qp: NonNull<ffi::ibv_qp>,
    /// The provider's `post_recv` (crate::provider).
    post_recv: PostRecv,
    /// The slot ring (its CQ reaches it too: rule V9); `None` if the connection receives
    /// through a shared receive queue.
    ring: Option<RingBox>,
    /// Chain buffers (rule V6).
    scratch: UnsafeCell<RecvScratch>,
}

impl RecvQueue {
    /// The receive queue of `qp` (its provider's `post_recv`), recording in `ring` (which the
    /// receive CQ reaches); `None` if the QP receives through a shared receive queue.
    pub(super) fn new(qp: NonNull<ffi::ibv_qp>, post_recv: PostRecv, ring: Option<RingBox>) -> Self {
        Self { qp, post_recv, ring, scratch: UnsafeCell::new(RecvScratch::default()) }
    }

    /// `ibv_post_recv` of the chain at `wr`.
    ///
    /// # Safety
    /// `wr` heads a chain of initialised receives whose SGE lists live across the call and
    /// describe ranges inside registrations the ring pins once the chain is recorded (rules
    /// V2, V4); nothing is posted after teardown.
    #[inline(always)]
    unsafe fn doorbell(&self, wr: *mut ffi::ibv_recv_wr, bad: &mut *mut ffi::ibv_recv_wr) -> i32 {
        // SAFETY: [V2, V4, V8] the QP is alive (nothing posts after teardown) and `post_recv` is
        // its provider's; the chain is as the contract says.
        call!("ibv_post_recv", crate::sys::errno(), unsafe { (self.post_recv)(self.qp.as_ptr(), wr, bad) })
    }

    /// Posts one receive: the fast path if it takes it, else the general one.
    ///
    /// # Errors
    /// As [`RecvQueue::post`].
    #[inline(always)]
    pub(super) fn post_one(&self, wr: RecvWr<'_, Verbs>) -> Result<()> {
        match self.post_one_fast(&wr) {
            Some(r) => r,
            None => self.post_general_one(wr),
        }
    }

    /// Posts receives other than a single one of at most one piece (chains, scatter-gather, a
    /// full queue, a connection without a receive queue of its own).
    ///
    /// # Errors
    /// `Provider` (`EINVAL`) if the connection receives through a shared receive queue;
    /// `Provider` (`ENOMEM`) if the queue has fewer free entries than `wrs` (nothing posted);
    /// `Provider` if posting fails (saying how many were posted).
    #[inline(never)]
    pub(super) fn post(&self, wrs: &[RecvWr<'_, Verbs>]) -> Result<()> {
        const OP: &str = "ibv_post_recv";
        let Some(ring) = &self.ring else {
            return Err(Error::provider(OP, libc::EINVAL).with_detail("the QP receives through a shared RQ"));
        };
        // SAFETY: [V6, V9] the owner's thread (`VerbsQp` is not `Sync`); these references end
        // with this call, and nothing called here takes another (posting never polls).
        let (ring, sc) = unsafe { (ring.get(), &mut *self.scratch.get()) };
        ring.check(OP, wrs.len())?;
        let head = recv_chain(ring, sc, wrs);
        let mut bad: *mut ffi::ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: [V2, V4] the chain was just linked in the scratch buffers, untouched until the
        // call returns; its SGEs describe pieces of regions `wrs` borrows (pinned right after).
        let r = unsafe { self.doorbell(head, &mut bad) };
        recvs_posted(ring, wrs, OP, head, r, bad)
    }

    /// The QP was destroyed: the regions the ring pins are free (crate::pin).
    pub(super) fn release_pins(&self) {
        if let Some(r) = &self.ring {
            // SAFETY: [V6, V9] teardown runs on the owner's thread; the reference ends here.
            unsafe { r.get() }.release_pins();
        }
    }

    /// The QP could not be destroyed: the regions the ring pins stay registered forever,
    /// reported as leaked.
    pub(super) fn report_leaks(&self, why: &Error) {
        if let Some(r) = &self.ring {
            // SAFETY: [V6, V9] as in `release_pins`.
            unsafe { r.get() }.report_leaks(why);
        }
    }

    /// Posts one receive of at most one piece (the common case) and records it in the ring;
    /// `None` for any other (the general path handles it, and a full queue too).
    #[inline(always)]
    fn post_one_fast(&self, wr: &RecvWr<'_, Verbs>) -> Option<Result<()>> {
        // SAFETY: [V6, V9] the owner's thread (`VerbsQp` is not `Sync`); the reference ends with
        // this function, and nothing called here takes another.
        let ring = unsafe { self.ring.as_ref()?.get() };
        let id = ring.next()?;
        // One straight path per shape (a piece, or none): no optional SGE to select between.
        let (r, mr) = match wr.local {
            Local::One(b) => {
                let mut sge = b.mr.sge(b.offset, b.len);
                // SAFETY: [V2, V4] one SGE on this stack, of a piece of the region `wr` borrows.
                (unsafe { self.post_single(ring.id(0), &mut sge, 1) }, Some(&**b.mr))
            }
            // SAFETY: [V2] no SGE.
            Local::None => (unsafe { self.post_single(ring.id(0), std::ptr::null_mut(), 0) }, None),
            Local::Sg(_) | Local::Inline(_) => return None,
        };
        if r != 0 {
            return Some(Err(chain::post_failed("ibv_post_recv", r)));
        }
        ring.push_one(id, wr.wr_id, mr);
        Some(Ok(()))
    }

    /// Posts one receive with verbs `wr_id` and `num_sge` entries at `sg_list`.
    ///
    /// # Safety
    /// `sg_list` points to `num_sge` SGEs that live across the call and describe pieces of
    /// regions the caller's receive borrows (pinned once it is recorded).
    #[inline(always)]
    unsafe fn post_single(&self, wr_id: u64, sg_list: *mut ffi::ibv_sge, num_sge: i32) -> i32 {
        let mut w = ffi::ibv_recv_wr { wr_id, next: std::ptr::null_mut(), sg_list, num_sge };
        let mut bad: *mut ffi::ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: [V2, V4] one initialised receive whose SGEs are as the contract says.
        unsafe { self.doorbell(&mut w, &mut bad) }
    }

    /// [`RecvQueue::post`] of one receive (by value: the fast path builds it in registers,
    /// only this cold call puts it in memory).
    #[inline(never)]
    fn post_general_one(&self, wr: RecvWr<'_, Verbs>) -> Result<()> {
        self.post(std::slice::from_ref(&wr))
    }
}

/// Reusable buffers of a receive queue's chains (owned by one queue; rule V6 or a lock).
#[derive(Default)]
pub(crate) struct RecvScratch {
    recv: Vec<ffi::ibv_recv_wr>,
    sges: Vec<ffi::ibv_sge>,
}

// SAFETY: [V6] as `SendScratch`.
unsafe impl Send for RecvScratch {}

impl std::fmt::Debug for RecvScratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvScratch").field("capacity", &self.recv.capacity()).finish()
    }
}

/// Builds the chain of receives `wrs` in `sc`, numbered by `ring` (after [`Ring::check`]);
/// returns its first receive, valid while `sc` is not changed.
pub(super) fn recv_chain(ring: &impl Ring, sc: &mut RecvScratch, wrs: &[RecvWr<'_, Verbs>]) -> *mut ffi::ibv_recv_wr {
    sc.recv.clear();
    sc.sges.clear();
    for (k, wr) in wrs.iter().enumerate() {
        let before = sc.sges.len();
        sc.sges.extend(regions_sges(&wr.local));
        let num_sge = (sc.sges.len() - before) as i32;
        sc.recv.push(ffi::ibv_recv_wr {
            wr_id: ring.id(k),
            next: std::ptr::null_mut(),
            sg_list: std::ptr::null_mut(),
            num_sge,
        });
    }
    chain::link(&mut sc.recv, &mut sc.sges)
}

/// Records in `ring` the receives of `wrs` that a post of their chain at `head` (from
/// [`recv_chain`]) took, the provider having returned `r` and pointed `bad`.
///
/// # Errors
/// `Provider` (`op`) if the post failed, saying how many were posted.
pub(super) fn recvs_posted(
    ring: &mut impl Ring,
    wrs: &[RecvWr<'_, Verbs>],
    op: &'static str,
    head: *mut ffi::ibv_recv_wr,
    r: i32,
    bad: *mut ffi::ibv_recv_wr,
) -> Result<()> {
    let n = chain::posted(r, head, bad, wrs.len());
    for wr in &wrs[..n] {
        ring.push(wr.wr_id, chain::regions(&wr.local));
    }
    if r == 0 {
        return Ok(());
    }
    Err(chain::chain_failed(op, r, n, wrs.len(), "receives"))
}

fn regions_sges<'m>(local: &Local<'m, Verbs>) -> impl Iterator<Item = ffi::ibv_sge> + 'm {
    let l = *local;
    (0..l.pieces_len()).filter_map(move |i| l.piece(i)).map(|b| b.mr.sge(b.offset, b.len))
}

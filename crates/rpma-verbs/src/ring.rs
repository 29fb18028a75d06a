//! Per-queue bookkeeping of posted work requests: each one's user `wr_id` and the regions it
//! uses (pins, crate::pin) until it is retired, and the verbs `wr_id` that finds them again.
//!
//! - [`FifoRing`]: a send queue, or a connection's own receive queue. Their work requests
//!   complete in posting order, so each is numbered and its number is its verbs `wr_id`: a
//!   completion retires its work request and every one before it (unsignaled sends) with one
//!   store, whatever regions they used.
//! - [`SlotRing`]: a shared receive queue, whose receives complete in any order: free slots on a
//!   stack, the slot number in the verbs `wr_id`.
//!
//! Preallocated at queue creation; plain single-owner structures (`&mut self`): a connection's
//! rings belong to the thread holding the connection (rule V6), a shared receive queue's ring
//! is behind its lock. Posting and polling allocate nothing, lock nothing and count no
//! reference.

use std::ptr::NonNull;
use std::sync::OnceLock;

use rpma_core::{Error, Result};

use crate::mr::VerbsMr;
use crate::pin::{PinIdx, PinTable};

/// Set in the verbs `wr_id` of receive work requests.
pub(crate) const RECV_BIT: u64 = 1 << 63;
/// Set in the verbs `wr_id` of a flush posted as an RDMA Read on a device with native flush (a
/// persistent flush, docs/native-ops.md): its completion is reported as a flush, as every other
/// flush on that device.
pub(crate) const FLUSH_READ_BIT: u64 = 1 << 62;
/// The number (or slot) part of a verbs `wr_id`.
pub(crate) const NUMBER_MASK: u64 = FLUSH_READ_BIT - 1;

/// How a queue records what it posts (both ring kinds).
pub(crate) trait Ring {
    /// Checks that `n` work requests fit.
    ///
    /// # Errors
    /// `Provider` with `ENOMEM` (librpma's provider answer to a full queue).
    fn check(&self, op: &'static str, n: usize) -> Result<()>;

    /// The verbs `wr_id` of the `k`-th work request posted from now on (after
    /// [`Ring::check`]).
    fn id(&self, k: usize) -> u64;

    /// Records the next posted work request (after the post succeeded, in order).
    fn push<'m>(&mut self, wr_id: u64, mrs: impl Iterator<Item = &'m VerbsMr>);
}

#[cold]
#[inline(never)]
fn full(op: &'static str, what: &str) -> Error {
    Error::provider(op, libc::ENOMEM).with_detail(&format!("{what} is full"))
}

/// A queue whose work requests complete in posting order (see the module docs).
///
/// Work request `n` (counted from 0 since the queue was made) has the verbs `wr_id`
/// `tag | n` and its user `wr_id` in slot `n & mask`; slots are a power of two (a mask, not
/// a division), at most `cap` (the configured queue size) in flight.
#[derive(Debug)]
pub(crate) struct FifoRing {
    wr_ids: Box<[u64]>,
    /// Number of the oldest unretired work request.
    head: u64,
    /// Number of the next work request.
    tail: u64,
    cap: u64,
    /// Slots - 1: `wr_ids.len() - 1`, a power of two minus one, never changed (the slots are
    /// indexed by `n & mask` without a bounds check).
    mask: u64,
    /// 0 for a send queue, [`RECV_BIT`] for a receive queue.
    tag: u64,
    pins: PinTable,
}

impl FifoRing {
    /// A send queue's ring of `size` work requests.
    pub(crate) fn send(size: u32) -> Self {
        Self::new(size, 0)
    }

    /// The ring of no queue: nothing fits, nothing completes.
    fn none() -> Self {
        let mut r = Self::new(1, 0);
        r.cap = 0;
        r
    }

    /// The one ring of no queue, for the CQs that get no completions of a queue with a ring of
    /// its own (a connection's receive CQ has no send queue; a shared receive queue's CQ has
    /// neither). Nothing is ever in flight in it, so [`FifoRing::complete_at`] only reads it
    /// (several threads may at once), and nothing else reaches it.
    pub(crate) fn no_queue() -> NonNull<Self> {
        static NONE: OnceLock<FifoRing> = OnceLock::new();
        NonNull::from(NONE.get_or_init(Self::none))
    }

    /// A connection's own receive queue's ring of `size` receives.
    pub(crate) fn recv(size: u32) -> Self {
        Self::new(size, RECV_BIT)
    }

    fn new(size: u32, tag: u64) -> Self {
        let cap = u64::from(size.max(1));
        // (At most 2^32 slots: a `usize` of a 64-bit target, the only kind this crate builds for.)
        let wr_ids: Box<[u64]> = vec![0; cap.next_power_of_two() as usize].into();
        // The masked index of `push_one` and `complete_at` (rule M4) is below a power-of-two
        // length, and the mask is taken from the slice itself.
        debug_assert!(wr_ids.len().is_power_of_two());
        let mask = wr_ids.len() as u64 - 1;
        Self { wr_ids, head: 0, tail: 0, cap, mask, tag, pins: PinTable::default() }
    }

    /// Work requests that can be posted now.
    #[inline]
    pub(crate) const fn free(&self) -> u64 {
        self.cap - (self.tail - self.head)
    }

    /// The number of the next work request, if one fits.
    #[inline(always)]
    pub(crate) fn next(&self) -> Option<u64> {
        (self.tail - self.head < self.cap).then_some(self.tail)
    }

    /// Records work request `n` (from [`FifoRing::next`], posted) with user `wr_id`, using
    /// `mr` if any.
    #[inline(always)]
    pub(crate) fn push_one(&mut self, n: u64, wr_id: u64, mr: Option<&VerbsMr>) {
        // SAFETY: [M4] a masked index: `mask` is the number of slots - 1 (a power of two; both
        // fixed when the ring was made), so `n & mask` is below `wr_ids.len()`.
        unsafe { *self.wr_ids.get_unchecked_mut((n & self.mask) as usize) = wr_id };
        self.tail = n + 1;
        if let Some(mr) = mr {
            self.pins.mark(mr, n + 1);
        }
    }

    /// [`FifoRing::complete_at`] of a ring borrowed whole (the tests').
    #[cfg(test)]
    pub(crate) fn complete(&mut self, n: u64) -> Option<u64> {
        // SAFETY: [V6] `self` is borrowed exclusively: a live ring no other reference reaches.
        unsafe { Self::complete_at(self, n) }
    }

    /// Retires work request `n` (its verbs `wr_id` without tag bits) and every one before it,
    /// through a pointer to the ring; returns its user `wr_id`, or `None` if `n` is not in
    /// flight. The in-flight test reads the two fields in place, without a reference, and only
    /// a work request in flight borrows the ring (mutably). So a ring with nothing in flight
    /// that several threads reach at once ([`FifoRing::no_queue`], the send ring of a shared
    /// receive queue's CQ) is only ever read.
    ///
    /// # Safety
    /// `ring` points to a live ring no reference to which is alive; if `n` is in flight, no
    /// other thread reaches the ring (rule V6: its owner's thread).
    #[inline(always)]
    pub(crate) unsafe fn complete_at(ring: *mut Self, n: u64) -> Option<u64> {
        // In flight: `head <= n < tail` (two compares of the fields; numbers only grow, and a
        // u64 of them does not wrap).
        // SAFETY: [V6] a live ring (the contract); fields read in place, no reference made.
        if n < unsafe { (*ring).head } || n >= unsafe { (*ring).tail } {
            return None;
        }
        // SAFETY: [V6] in flight: only the owner's thread reaches the ring (the contract).
        let r = unsafe { &mut *ring };
        // SAFETY: [M4] a masked index, below `wr_ids.len()` (as in `push_one`).
        let user = unsafe { *r.wr_ids.get_unchecked((n & r.mask) as usize) };
        r.head = n + 1;
        r.pins.retire(n + 1);
        Some(user)
    }

    /// The queue pair was destroyed: no region is in use by it any more.
    pub(crate) fn release_pins(&self) {
        self.pins.release_all();
    }

    /// The queue pair could not be destroyed: the regions in use stay pinned (never freed),
    /// reported as leaked.
    pub(crate) fn report_leaks(&self, why: &dyn std::fmt::Display) {
        self.pins.report_leaks(why);
    }
}

impl Ring for FifoRing {
    #[inline]
    fn check(&self, op: &'static str, n: usize) -> Result<()> {
        if n as u64 > self.free() {
            return Err(if self.tag == 0 {
                Error::send_queue_full(op, self.cap, self.tail - self.head, n as u64)
            } else {
                full(op, "receive queue")
            });
        }
        Ok(())
    }

    #[inline]
    fn id(&self, k: usize) -> u64 {
        self.tag | (self.tail + k as u64)
    }

    #[inline]
    fn push<'m>(&mut self, wr_id: u64, mrs: impl Iterator<Item = &'m VerbsMr>) {
        let n = self.tail;
        self.push_one(n, wr_id, None);
        for mr in mrs {
            self.pins.mark(mr, n + 1);
        }
    }
}

/// The home of a queue's [`FifoRing`]: an allocation of its own, owned by the queue (a
/// connection's send queue or its own receive queue) and reached by address by the CQ that
/// retires the queue's work requests (rule V9 of docs/memory.md: the queue pair owns both and
/// drops its CQs first). Freed when dropped.
pub(crate) struct RingBox(NonNull<FifoRing>);

// SAFETY: [V6, V9] the ring is reached by one thread at a time, the queue pair's owner's.
unsafe impl Send for RingBox {}

impl RingBox {
    pub(crate) fn new(ring: FifoRing) -> Self {
        Self(NonNull::from(Box::leak(Box::new(ring))))
    }

    /// The ring's address, for the CQ that retires its work requests.
    pub(crate) const fn as_ptr(&self) -> NonNull<FifoRing> {
        self.0
    }

    /// The ring.
    ///
    /// # Safety
    /// No other reference to the ring is alive while the one returned is (rule V6: the caller
    /// is the owner's thread, and takes it for one call that neither polls nor posts again).
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn get(&self) -> &mut FifoRing {
        // SAFETY: [V6, V9] a live allocation of this box; exclusive per the contract.
        unsafe { &mut *self.0.as_ptr() }
    }
}

impl Drop for RingBox {
    fn drop(&mut self) {
        // SAFETY: [V9] made by `Box::leak` in `new`, dropped once; no CQ reaches it any more
        // (the queue pair drops its CQs before its queues).
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

impl std::fmt::Debug for RingBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingBox").finish_non_exhaustive()
    }
}

/// A shared receive queue's slots: receives complete in any order.
#[derive(Debug)]
pub(crate) struct SlotRing {
    wr_ids: Box<[u64]>,
    busy: Box<[bool]>,
    /// The pins of every slot: `per` entries a slot, `count[slot]` of them used.
    idx: Box<[PinIdx]>,
    count: Box<[u8]>,
    per: usize,
    table: PinTable,
    /// Free slots (a stack; preallocated to the ring's size).
    free: Vec<u32>,
}

impl SlotRing {
    /// A ring of `size` slots whose receives use at most `max_sge` regions each.
    pub(crate) fn new(size: u32, max_sge: u32) -> Self {
        let cap = size.max(1);
        let per = max_sge.clamp(1, u32::from(u8::MAX)) as usize;
        Self {
            wr_ids: vec![0; cap as usize].into(),
            busy: vec![false; cap as usize].into(),
            idx: vec![0; cap as usize * per].into(),
            count: vec![0; cap as usize].into(),
            per,
            table: PinTable::default(),
            free: (0..cap).rev().collect(),
        }
    }

    /// Retires the receive in the slot of verbs `wr_id`; returns its user `wr_id`.
    #[inline]
    pub(crate) fn complete(&mut self, verbs_wr_id: u64) -> Option<u64> {
        let idx = u32::try_from(verbs_wr_id & NUMBER_MASK).ok()?;
        let slot = idx as usize;
        if !*self.busy.get(slot)? {
            return None;
        }
        self.busy[slot] = false;
        let base = slot * self.per;
        let n = std::mem::take(&mut self.count[slot]) as usize;
        for &i in &self.idx[base..base + n] {
            self.table.put(i);
        }
        self.free.push(idx);
        Some(self.wr_ids[slot])
    }

    /// The shared receive queue was destroyed: no region is in use by its receives any more.
    pub(crate) fn release_pins(&self) {
        self.table.release_all();
    }
}

impl Ring for SlotRing {
    #[inline]
    fn check(&self, op: &'static str, n: usize) -> Result<()> {
        if n > self.free.len() {
            return Err(full(op, "shared receive queue"));
        }
        Ok(())
    }

    #[inline]
    fn id(&self, k: usize) -> u64 {
        RECV_BIT | u64::from(self.free[self.free.len() - 1 - k])
    }

    /// Records at most `max_sge` regions (the rest are refused earlier: the queue is created
    /// with `max_sge` scatter-gather entries).
    #[inline]
    fn push<'m>(&mut self, wr_id: u64, mrs: impl Iterator<Item = &'m VerbsMr>) {
        let Some(slot) = self.free.pop() else { return };
        let slot = slot as usize;
        self.wr_ids[slot] = wr_id;
        self.busy[slot] = true;
        let base = slot * self.per;
        let mut n = 0;
        for mr in mrs.take(self.per) {
            let p = self.table.take(mr);
            if let Some(i) = self.idx.get_mut(base + n) {
                *i = p;
            }
            n += 1;
        }
        self.count[slot] = n as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(r: &mut FifoRing, wr_id: u64) -> Result<u64> {
        r.check("t", 1)?;
        let id = r.id(0);
        r.push(wr_id, std::iter::empty());
        Ok(id)
    }

    #[test]
    fn fifo_ring_counts_the_configured_depth() {
        let mut r = FifoRing::send(3);
        let ids: Vec<u64> = (0..3).map(|i| post(&mut r, 100 + i).unwrap()).collect();
        assert_eq!(ids, [0, 1, 2]);
        assert_eq!(post(&mut r, 9).unwrap_err().errno(), Some(libc::ENOMEM));
        assert_eq!(r.next(), None);
        // A completion of the third request retires the two unsignaled ones before it.
        assert_eq!(r.complete(2), Some(102));
        assert_eq!(r.free(), 3);
        assert_eq!(r.complete(2), None, "already retired");
        assert_eq!(r.complete(1), None, "retired with the third");
        for i in 0..3 {
            post(&mut r, 200 + i).unwrap();
        }
        assert!(post(&mut r, 9).is_err());
        // Slots wrap around (4 of them for a depth of 3): request 3 (wr_id 200) is in slot 3,
        // request 4 (wr_id 201) in slot 0.
        assert_eq!(r.complete(4), Some(201));
        assert_eq!(r.complete(3), None, "retired with request 4");
        assert_eq!(r.complete(7), None, "never posted");
        assert_eq!(r.complete(u64::MAX), None);
    }

    #[test]
    fn fifo_ring_chain_ids_are_consecutive() {
        let mut r = FifoRing::send(4);
        post(&mut r, 1).unwrap();
        r.check("t", 3).unwrap();
        assert_eq!((r.id(0), r.id(1), r.id(2)), (1, 2, 3));
        assert!(r.check("t", 4).is_err(), "a chain longer than the free slots is refused whole");
        for i in 0..3 {
            r.push(10 + i, std::iter::empty());
        }
        assert_eq!(r.free(), 0);
        assert_eq!(r.complete(3), Some(12), "the last completion retires the chain");
        assert_eq!(r.free(), 4);
    }

    #[test]
    fn fifo_ring_of_no_queue_takes_and_completes_nothing() {
        let mut r = FifoRing::none();
        assert_eq!(r.free(), 0);
        assert_eq!(r.next(), None);
        assert_eq!(r.check("t", 1).unwrap_err().errno(), Some(libc::ENOMEM));
        for n in [0, 1, u64::MAX] {
            assert_eq!(r.complete(n), None);
        }
    }

    #[test]
    fn complete_at_answers_as_complete_and_only_reads_a_ring_with_nothing_in_flight() {
        let mut r = FifoRing::send(4);
        for i in 0..3 {
            post(&mut r, 100 + i).unwrap();
        }
        let p: *mut FifoRing = &mut r;
        // SAFETY: [V6] `r` is live, no reference to it is alive while these run, one thread.
        let (before, third, again, after) = unsafe {
            (
                FifoRing::complete_at(p, 4),
                FifoRing::complete_at(p, 2),
                FifoRing::complete_at(p, 2),
                FifoRing::complete_at(p, 0),
            )
        };
        assert_eq!((before, third, again, after), (None, Some(102), None, None));
        assert_eq!(r.free(), 4);
        // The ring of no queue, reached from two threads at once: both only read it.
        let addr = FifoRing::no_queue().as_ptr() as usize;
        assert_eq!(addr, FifoRing::no_queue().as_ptr() as usize, "one ring of no queue");
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(move || {
                    for n in [0, 1, u64::MAX] {
                        // SAFETY: [V6, V9] nothing is in flight in the ring, so no reference to
                        // it is made; it lives for the process and is only read.
                        assert_eq!(unsafe { FifoRing::complete_at(addr as *mut FifoRing, n) }, None);
                    }
                });
            }
        });
    }

    #[test]
    fn ring_box_is_reached_by_its_queue_and_by_address() {
        let b = RingBox::new(FifoRing::send(2));
        // SAFETY: [V6, V9] one thread; the reference ends with the statement.
        let id = post(unsafe { b.get() }, 7).unwrap();
        // Its CQ's view: the address, stable while the box lives, whoever holds the box.
        let at = b.as_ptr();
        let moved = b;
        assert_eq!(moved.as_ptr(), at);
        // SAFETY: [V6, V9] the box is alive, no reference to the ring is.
        assert_eq!(unsafe { FifoRing::complete_at(at.as_ptr(), id) }, Some(7));
        // SAFETY: [V6, V9] as above.
        assert_eq!(unsafe { moved.get() }.free(), 2);
    }

    #[test]
    fn fifo_recv_ring_tags_its_ids() {
        let mut r = FifoRing::recv(2);
        let id = post(&mut r, 5).unwrap();
        assert_eq!(id, RECV_BIT);
        assert_eq!(r.complete(id & NUMBER_MASK), Some(5));
        assert_eq!(r.check("t", 3).unwrap_err().errno(), Some(libc::ENOMEM));
    }

    #[test]
    fn slot_ring_completes_in_any_order() {
        let mut r = SlotRing::new(2, 1);
        r.check("t", 2).unwrap();
        let ids = [r.id(0), r.id(1)];
        r.push(10, std::iter::empty());
        r.push(11, std::iter::empty());
        assert!(ids.iter().all(|id| id & RECV_BIT != 0));
        assert_eq!(r.check("t", 1).unwrap_err().errno(), Some(libc::ENOMEM));
        assert_eq!(r.complete(ids[1]), Some(11));
        assert_eq!(r.complete(ids[1]), None, "not in flight");
        assert_eq!(r.complete(ids[0]), Some(10));
        assert_eq!(r.complete(RECV_BIT | 5), None, "unknown slot");
        r.check("t", 2).unwrap();
    }
}

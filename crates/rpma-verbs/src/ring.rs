//! Per-queue slot tables: they record each posted work request's user `wr_id` and the regions
//! it uses (pins, crate::pin) until it is retired, and translate the verbs `wr_id` (a slot
//! number) back to the user's.
//!
//! Preallocated at queue creation; plain single-owner structures (`&mut self`): a connection's
//! rings belong to the thread holding the connection (rule V6), a shared receive queue's ring
//! is behind its lock. Posting and polling allocate nothing, lock nothing and count no
//! reference.

use rpma_core::{Error, Result};

use crate::mr::VerbsMr;
use crate::pin::{PinIdx, PinTable};

/// Set in the verbs `wr_id` of receive work requests.
pub(crate) const RECV_BIT: u64 = 1 << 63;
/// Set in the verbs `wr_id` of a flush posted as an RDMA Read on a device with native flush (a
/// persistent flush, docs/native-ops.md): its completion is reported as a flush, as every other
/// flush on that device.
pub(crate) const FLUSH_READ_BIT: u64 = 1 << 62;

/// The pins of every slot: `per` entries a slot, `count[slot]` of them used.
#[derive(Debug)]
struct SlotPins {
    idx: Box<[PinIdx]>,
    count: Box<[u8]>,
    per: usize,
    table: PinTable,
}

impl SlotPins {
    fn new(slots: usize, per: u32) -> Self {
        let per = per.clamp(1, u32::from(u8::MAX)) as usize;
        Self { idx: vec![0; slots * per].into(), count: vec![0; slots].into(), per, table: PinTable::default() }
    }

    /// Records the regions of a work request in `slot` (at most `per`; the rest are refused
    /// earlier: the QP is created with `per` scatter-gather entries).
    #[inline]
    fn set<'m>(&mut self, slot: usize, mrs: impl Iterator<Item = &'m VerbsMr>) {
        let base = slot * self.per;
        let mut n = 0;
        for mr in mrs.take(self.per) {
            let p = self.table.take(mr);
            if let Some(i) = self.idx.get_mut(base + n) {
                *i = p;
            }
            n += 1;
        }
        if let Some(c) = self.count.get_mut(slot) {
            *c = n as u8;
        }
    }

    /// Releases the regions of the work request in `slot`.
    #[inline]
    fn clear(&mut self, slot: usize) {
        let base = slot * self.per;
        let n = std::mem::take(&mut self.count[slot]) as usize;
        for &i in &self.idx[base..base + n] {
            self.table.put(i);
        }
    }
}

/// A send queue's slots: work requests complete in posting order, and a completion retires its
/// work request and every (unsignaled) one posted before it.
///
/// The slots are a power of two (a mask, not a division, per work request); at most `cap` (the
/// configured queue size) are in flight.
#[derive(Debug)]
pub(crate) struct SendRing {
    wr_ids: Box<[u64]>,
    pins: SlotPins,
    /// Sequence number of the oldest unretired work request.
    head: u64,
    /// Sequence number of the next work request.
    tail: u64,
    cap: u64,
    /// Slots - 1.
    mask: u64,
}

impl SendRing {
    /// A ring of `size` slots whose work requests use at most `max_sge` regions each.
    pub(crate) fn new(size: u32, max_sge: u32) -> Self {
        let cap = u64::from(size.max(1));
        let slots = cap.next_power_of_two() as usize;
        Self {
            wr_ids: vec![0; slots].into(),
            pins: SlotPins::new(slots, max_sge),
            head: 0,
            tail: 0,
            cap,
            mask: slots as u64 - 1,
        }
    }

    /// Slots free now.
    #[inline]
    pub(crate) const fn free(&self) -> u64 {
        self.cap - (self.tail - self.head)
    }

    /// Checks that `n` work requests fit.
    ///
    /// # Errors
    /// `Provider` with `ENOMEM` (librpma's provider answer to a full queue).
    #[inline]
    pub(crate) fn check(&self, op: &'static str, n: usize) -> Result<()> {
        if n as u64 > self.free() {
            return Err(Error::provider(op, libc::ENOMEM).with_detail("send queue is full"));
        }
        Ok(())
    }

    /// The verbs `wr_id` of the `k`-th work request posted from now on.
    #[inline]
    pub(crate) const fn id(&self, k: usize) -> u64 {
        (self.tail + k as u64) & self.mask
    }

    /// Records the next posted work request (call after the post succeeded, in order).
    #[inline]
    pub(crate) fn push<'m>(&mut self, wr_id: u64, mrs: impl Iterator<Item = &'m VerbsMr>) {
        let slot = (self.tail & self.mask) as usize;
        self.wr_ids[slot] = wr_id;
        self.pins.set(slot, mrs);
        self.tail += 1;
    }

    /// Retires the work request in slot `idx` and all before it; returns its user `wr_id`.
    #[inline]
    pub(crate) fn complete(&mut self, idx: u64) -> Option<u64> {
        if idx > self.mask {
            return None;
        }
        let off = idx.wrapping_sub(self.head) & self.mask;
        if off >= self.tail - self.head {
            return None;
        }
        let end = self.head + off + 1;
        let mut s = self.head;
        while s < end {
            self.pins.clear((s & self.mask) as usize);
            s += 1;
        }
        self.head = end;
        Some(self.wr_ids[idx as usize])
    }

    /// The queue pair was destroyed: no region is in use by it any more.
    pub(crate) fn release_pins(&self) {
        self.pins.table.release_all();
    }

    /// The queue pair could not be destroyed: the regions in use stay pinned (never freed),
    /// reported as leaked.
    pub(crate) fn report_leaks(&self, why: &dyn std::fmt::Display) {
        self.pins.table.report_leaks(why);
    }
}

/// A receive queue's (or shared receive queue's) slots: receives complete in any order.
#[derive(Debug)]
pub(crate) struct RecvRing {
    wr_ids: Box<[u64]>,
    busy: Box<[bool]>,
    pins: SlotPins,
    /// Free slots (a stack; preallocated to the ring's size).
    free: Vec<u32>,
}

impl RecvRing {
    /// A ring of `size` slots whose receives use at most `max_sge` regions each.
    pub(crate) fn new(size: u32, max_sge: u32) -> Self {
        let cap = size.max(1);
        Self {
            wr_ids: vec![0; cap as usize].into(),
            busy: vec![false; cap as usize].into(),
            pins: SlotPins::new(cap as usize, max_sge),
            free: (0..cap).rev().collect(),
        }
    }

    /// Checks that `n` receives fit.
    ///
    /// # Errors
    /// `Provider` with `ENOMEM`.
    #[inline]
    pub(crate) fn check(&self, op: &'static str, n: usize) -> Result<()> {
        if n > self.free.len() {
            return Err(Error::provider(op, libc::ENOMEM).with_detail("receive queue is full"));
        }
        Ok(())
    }

    /// The verbs `wr_id` of the `k`-th receive posted from now on (after [`RecvRing::check`]).
    #[inline]
    pub(crate) fn id(&self, k: usize) -> u64 {
        RECV_BIT | u64::from(self.free[self.free.len() - 1 - k])
    }

    /// Records the next posted receive (call after the post succeeded, in order).
    #[inline]
    pub(crate) fn push<'m>(&mut self, wr_id: u64, mrs: impl Iterator<Item = &'m VerbsMr>) {
        let Some(slot) = self.free.pop() else { return };
        let slot = slot as usize;
        self.wr_ids[slot] = wr_id;
        self.busy[slot] = true;
        self.pins.set(slot, mrs);
    }

    /// Retires the receive in the slot of verbs `wr_id`; returns its user `wr_id`.
    #[inline]
    pub(crate) fn complete(&mut self, verbs_wr_id: u64) -> Option<u64> {
        let idx = u32::try_from(verbs_wr_id & !RECV_BIT).ok()?;
        let slot = idx as usize;
        if !*self.busy.get(slot)? {
            return None;
        }
        self.busy[slot] = false;
        self.pins.clear(slot);
        self.free.push(idx);
        Some(self.wr_ids[slot])
    }

    /// As [`SendRing::release_pins`].
    pub(crate) fn release_pins(&self) {
        self.pins.table.release_all();
    }

    /// As [`SendRing::report_leaks`].
    pub(crate) fn report_leaks(&self, why: &dyn std::fmt::Display) {
        self.pins.table.report_leaks(why);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(r: &mut SendRing, wr_id: u64) -> Result<u64> {
        r.check("t", 1)?;
        let id = r.id(0);
        r.push(wr_id, std::iter::empty());
        Ok(id)
    }

    #[test]
    fn send_ring_counts_the_configured_depth() {
        let mut r = SendRing::new(3, 1);
        for i in 0..3 {
            post(&mut r, 100 + i).unwrap();
        }
        assert_eq!(post(&mut r, 9).unwrap_err().errno(), Some(libc::ENOMEM));
        // A completion of the third request retires the two unsignaled ones before it.
        assert_eq!(r.complete(2), Some(102));
        assert_eq!(r.free(), 3);
        for i in 0..3 {
            post(&mut r, 200 + i).unwrap();
        }
        assert!(post(&mut r, 9).is_err());
        // Slots wrap around (4 of them for a depth of 3): the request with wr_id 200 is in
        // slot 3.
        assert_eq!(r.complete(3), Some(200));
        assert_eq!(r.complete(3), None, "already retired");
        assert_eq!(r.complete(7), None, "out of range");
    }

    #[test]
    fn send_ring_chain_ids_are_consecutive_slots() {
        let mut r = SendRing::new(4, 1);
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
    fn recv_ring_completes_in_any_order() {
        let mut r = RecvRing::new(2, 1);
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

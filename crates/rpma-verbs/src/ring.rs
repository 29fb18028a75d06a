//! Per-queue slot tables: they keep each posted work request's memory region alive until the
//! request is retired and translate the verbs `wr_id` (a slot number) back to the user's.
//!
//! Preallocated at queue creation: posting and polling allocate nothing and lock only the one
//! queue involved.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rpma_core::{Error, Result};

use crate::mr::VerbsMr;

/// Set in the verbs `wr_id` of receive work requests.
pub(crate) const RECV_BIT: u64 = 1 << 63;
/// Set in the verbs `wr_id` of a flush posted as an RDMA Read on a device with native flush (a
/// persistent flush, docs/native-ops.md): its completion is reported as a flush, as every other
/// flush on that device.
pub(crate) const FLUSH_READ_BIT: u64 = 1 << 62;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Slot {
    wr_id: u64,
    mr: Option<Arc<VerbsMr>>,
    busy: bool,
}

impl Slot {
    const fn empty() -> Self {
        Self { wr_id: 0, mr: None, busy: false }
    }
}

/// Abandons the regions held by `slots` (work requests not retired) and keeps the ring alive
/// forever: their queue pair could not be destroyed, so the device may still use them (V4).
fn abandon_slots<T: Send + Sync + 'static>(ring: &Arc<T>, slots: &[Slot], why: &dyn std::fmt::Display) {
    for mr in slots.iter().filter_map(|s| s.mr.as_ref()) {
        mr.abandon(why);
    }
    std::mem::forget(Arc::clone(ring));
}

struct SendInner {
    slots: Box<[Slot]>,
    /// Sequence number of the oldest unretired work request.
    head: u64,
    /// Sequence number of the next work request.
    tail: u64,
}

/// A send queue's slots: work requests complete in posting order, and a completion retires its
/// work request and every (unsignaled) one posted before it.
pub(crate) struct SendRing {
    inner: Mutex<SendInner>,
    cap: u64,
}

impl SendRing {
    pub(crate) fn new(size: u32) -> Self {
        let cap = size.max(1) as usize;
        let slots = (0..cap).map(|_| Slot::empty()).collect();
        Self { inner: Mutex::new(SendInner { slots, head: 0, tail: 0 }), cap: cap as u64 }
    }

    /// Takes the next slot and calls `post` with its verbs `wr_id` under the queue's lock (so
    /// slots are posted in sequence order); the slot is kept only if `post` succeeds.
    pub(crate) fn post(
        &self,
        op: &'static str,
        wr_id: u64,
        mr: Option<&Arc<VerbsMr>>,
        post: impl FnOnce(u64) -> Result<()>,
    ) -> Result<()> {
        let mut g = lock(&self.inner);
        if g.tail - g.head >= self.cap {
            return Err(Error::provider(op, libc::ENOMEM).with_detail("send queue is full"));
        }
        let idx = g.tail % self.cap;
        post(idx)?;
        let t = g.tail;
        let slot = &mut g.slots[(t % self.cap) as usize];
        slot.wr_id = wr_id;
        slot.mr = mr.map(Arc::clone);
        g.tail += 1;
        Ok(())
    }

    /// The queue pair could not be destroyed: leaks the ring with the regions its unretired
    /// work requests reference (they are reported as leaked).
    pub(crate) fn abandon(self: &Arc<Self>, why: &dyn std::fmt::Display) {
        let g = lock(&self.inner);
        abandon_slots(self, &g.slots, why);
    }

    /// Retires the work request in slot `idx` and all before it; returns its user `wr_id`.
    pub(crate) fn complete(&self, idx: u64) -> Option<u64> {
        if idx >= self.cap {
            return None;
        }
        let mut g = lock(&self.inner);
        let inflight = g.tail - g.head;
        let off = (idx + self.cap - g.head % self.cap) % self.cap;
        if off >= inflight {
            return None;
        }
        let seq = g.head + off;
        let wr_id = g.slots[idx as usize].wr_id;
        let head = g.head;
        for s in head..=seq {
            g.slots[(s % self.cap) as usize].mr = None;
        }
        g.head = seq + 1;
        Some(wr_id)
    }
}

struct RecvInner {
    slots: Box<[Slot]>,
    free: Vec<u32>,
}

/// A receive queue's (or shared receive queue's) slots: receives complete in any order.
pub(crate) struct RecvRing {
    inner: Mutex<RecvInner>,
}

impl RecvRing {
    pub(crate) fn new(size: u32) -> Self {
        let cap = size.max(1);
        let slots = (0..cap).map(|_| Slot::empty()).collect();
        let free = (0..cap).rev().collect();
        Self { inner: Mutex::new(RecvInner { slots, free }) }
    }

    /// Takes a free slot and calls `post` with its verbs `wr_id` (the slot is returned if
    /// `post` fails).
    pub(crate) fn post(
        &self,
        op: &'static str,
        wr_id: u64,
        mr: Option<&Arc<VerbsMr>>,
        post: impl FnOnce(u64) -> Result<()>,
    ) -> Result<()> {
        let mut g = lock(&self.inner);
        let Some(idx) = g.free.pop() else {
            return Err(Error::provider(op, libc::ENOMEM).with_detail("receive queue is full"));
        };
        if let Err(e) = post(RECV_BIT | u64::from(idx)) {
            g.free.push(idx);
            return Err(e);
        }
        let slot = &mut g.slots[idx as usize];
        slot.wr_id = wr_id;
        slot.mr = mr.map(Arc::clone);
        slot.busy = true;
        Ok(())
    }

    /// As [`SendRing::abandon`], for the receives posted and not completed.
    pub(crate) fn abandon(self: &Arc<Self>, why: &dyn std::fmt::Display) {
        let g = lock(&self.inner);
        abandon_slots(self, &g.slots, why);
    }

    /// Retires the receive in the slot of verbs `wr_id`; returns its user `wr_id`.
    pub(crate) fn complete(&self, verbs_wr_id: u64) -> Option<u64> {
        let idx = u32::try_from(verbs_wr_id & !RECV_BIT).ok()?;
        let mut g = lock(&self.inner);
        let slot = g.slots.get_mut(idx as usize)?;
        if !slot.busy {
            return None;
        }
        slot.busy = false;
        let mr = slot.mr.take();
        let wr_id = slot.wr_id;
        g.free.push(idx);
        drop(g);
        drop(mr);
        Some(wr_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(_: u64) -> Result<()> {
        Ok(())
    }

    #[test]
    fn send_ring_counts_the_configured_depth() {
        let r = SendRing::new(3);
        for i in 0..3 {
            r.post("t", 100 + i, None, ok).unwrap();
        }
        let e = r.post("t", 9, None, ok).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOMEM));
        // A completion of the third request retires the two unsignaled ones before it.
        assert_eq!(r.complete(2), Some(102));
        for i in 0..3 {
            r.post("t", 200 + i, None, ok).unwrap();
        }
        assert!(r.post("t", 9, None, ok).is_err());
        // Slots wrap around: the request in slot 0 is now the one with wr_id 200.
        assert_eq!(r.complete(0), Some(200));
        assert_eq!(r.complete(0), None, "already retired");
        assert_eq!(r.complete(7), None, "out of range");
    }

    #[test]
    fn send_ring_keeps_no_slot_for_a_failed_post() {
        let r = SendRing::new(1);
        let e = r.post("t", 1, None, |_| Err(Error::provider("t", libc::EINVAL))).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EINVAL));
        r.post("t", 2, None, ok).unwrap();
        assert_eq!(r.complete(0), Some(2));
    }

    #[test]
    fn recv_ring_completes_in_any_order() {
        let r = RecvRing::new(2);
        let mut ids = Vec::new();
        r.post("t", 10, None, |id| {
            ids.push(id);
            Ok(())
        })
        .unwrap();
        r.post("t", 11, None, |id| {
            ids.push(id);
            Ok(())
        })
        .unwrap();
        assert!(ids.iter().all(|id| id & RECV_BIT != 0));
        assert_eq!(r.post("t", 12, None, ok).unwrap_err().errno(), Some(libc::ENOMEM));
        assert_eq!(r.complete(ids[1]), Some(11));
        assert_eq!(r.complete(ids[1]), None, "not in flight");
        assert_eq!(r.complete(ids[0]), Some(10));
        assert_eq!(r.complete(RECV_BIT | 5), None, "unknown slot");
        r.post("t", 13, None, ok).unwrap();
    }
}

//! Keeping a region registered while the device may use it, without a reference count per
//! work request (rule V4 of docs/memory.md).
//!
//! A queue's bookkeeping (one thread at a time, rule V6) keeps a small table of the regions its
//! work requests use: one [`Pin`] per (queue, region) pair, made the first time the queue uses
//! the region and shared with the region. Only the queue's owner writes a pin (plain stores, no
//! atomic read-modify-write, no lock):
//! - a queue whose work requests complete in posting order (a send queue, a connection's own
//!   receive queue) numbers them; the pin keeps one past the number of the last one that used
//!   the region ([`PinTable::mark`]), and the queue publishes how many it has retired
//!   ([`PinTable::retire`], one store per completion whatever the regions): the region is in use
//!   while its mark is above that count;
//! - a shared receive queue (completions in any order) counts its receives in flight on the
//!   region ([`PinTable::take`], [`PinTable::put`]).
//!
//! A region that is dropped or deregistered while one of its pins says it is in use is *parked*
//! in its protection domain instead: it is deregistered, and its memory freed, when no pin says
//! so any more (checked when a queue retires work and when a queue pair is destroyed).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// What a pin needs of the region it keeps registered (`VerbsMr` is one).
pub(crate) trait Pinned {
    /// The region's process-unique id (from 1).
    fn pin_id(&self) -> u64;
    /// The region's address and length, for a leak report.
    fn pin_span(&self) -> (u64, usize);
    /// Records the pin of a queue that starts using the region.
    fn attach_pin(&self, pin: Arc<Pin>);
}

/// A queue's use of one region.
#[derive(Debug)]
pub(crate) struct Pin {
    /// In-order queues: one past the number of the last work request that used the region.
    mark: AtomicU64,
    /// In-order queues: how many of the queue's work requests are retired (shared by the
    /// queue's pins; `u64::MAX` once the queue pair is destroyed).
    retired: Arc<AtomicU64>,
    /// Shared receive queues: receives in flight on the region.
    inflight: AtomicU64,
    /// The region was deregistered: the pin can be reused for another region once idle.
    gone: AtomicBool,
    /// The region, for the leak report of a queue pair that could not be destroyed.
    addr: u64,
    len: usize,
}

impl Pin {
    fn new(mr: &impl Pinned, retired: &Arc<AtomicU64>) -> Self {
        let (addr, len) = mr.pin_span();
        Self { addr, len, ..Self::of_nothing(retired) }
    }

    /// A pin of no region: never marked, never busy.
    fn of_nothing(retired: &Arc<AtomicU64>) -> Self {
        Self {
            mark: AtomicU64::new(0),
            retired: Arc::clone(retired),
            inflight: AtomicU64::new(0),
            gone: AtomicBool::new(false),
            addr: 0,
            len: 0,
        }
    }

    /// Whether a work request of the queue still uses the region. Acquire: a region owner who
    /// sees the work retired sees everything the queue did before (the completion was polled).
    pub(crate) fn busy(&self) -> bool {
        self.inflight.load(Ordering::Acquire) != 0
            || self.mark.load(Ordering::Acquire) > self.retired.load(Ordering::Acquire)
    }

    /// Whether the pin's queue was destroyed (released whole): it never says busy again.
    pub(crate) fn released(&self) -> bool {
        self.retired.load(Ordering::Acquire) == u64::MAX && self.inflight.load(Ordering::Acquire) == 0
    }

    /// Marks the region deregistered.
    pub(crate) fn set_gone(&self) {
        self.gone.store(true, Ordering::Release);
    }
}

/// Index of a pin in a [`PinTable`].
pub(crate) type PinIdx = u32;

/// A queue's pins (owned by the queue's single owner).
#[derive(Debug)]
pub(crate) struct PinTable {
    /// (region id, pin).
    entries: Vec<(u64, Arc<Pin>)>,
    /// The entry used last (most operations use the same region as the one before).
    last: usize,
    /// In-order queues: work requests retired (published to the pins).
    retired: Arc<AtomicU64>,
    /// In-order queues: the pin marked last (most operations use the region of the one
    /// before): a compare and a store, no index; cloned only when another region comes. Until
    /// then a pin of no region (id 0: region ids start at 1).
    hot: (u64, Arc<Pin>),
}

impl Default for PinTable {
    fn default() -> Self {
        let retired = Arc::new(AtomicU64::new(0));
        let none = Arc::new(Pin::of_nothing(&retired));
        Self { entries: Vec::new(), last: 0, retired, hot: (0, none) }
    }
}

impl PinTable {
    /// The entry of `mr`, made on its first use.
    #[inline]
    fn entry(&mut self, mr: &impl Pinned) -> &Arc<Pin> {
        let id = mr.pin_id();
        let i = match self.entries.get(self.last) {
            Some((e, _)) if *e == id => self.last,
            _ => self.find_or_add(mr),
        };
        self.last = i;
        &self.entries[i].1
    }

    /// In-order queues: the work requests numbered below `upto` use `mr` (single writer: a
    /// store; the region reaches another thread only through a synchronising hand-over after
    /// the post that borrowed it).
    #[inline(always)]
    pub(crate) fn mark(&mut self, mr: &impl Pinned, upto: u64) {
        let (id, pin) = &self.hot;
        if *id == mr.pin_id() {
            pin.mark.store(upto, Ordering::Relaxed);
        } else {
            self.mark_cold(mr, upto);
        }
    }

    #[cold]
    #[inline(never)]
    fn mark_cold(&mut self, mr: &impl Pinned, upto: u64) {
        let id = mr.pin_id();
        let pin = Arc::clone(self.entry(mr));
        pin.mark.store(upto, Ordering::Relaxed);
        self.hot = (id, pin);
    }

    /// In-order queues: the work requests numbered below `upto` are retired. Release: pairs
    /// with [`Pin::busy`].
    #[inline]
    pub(crate) fn retire(&self, upto: u64) {
        self.retired.store(upto, Ordering::Release);
    }

    /// Shared receive queues: counts one more receive on `mr`; returns the pin's index (for
    /// [`PinTable::put`]).
    #[inline]
    pub(crate) fn take(&mut self, mr: &impl Pinned) -> PinIdx {
        let p = self.entry(mr);
        p.inflight.store(p.inflight.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        self.last as PinIdx
    }

    /// Shared receive queues: retires one receive counted by [`PinTable::take`].
    #[inline]
    pub(crate) fn put(&self, idx: PinIdx) {
        if let Some((_, p)) = self.entries.get(idx as usize) {
            let n = p.inflight.load(Ordering::Relaxed);
            p.inflight.store(n.saturating_sub(1), Ordering::Release);
        }
    }

    #[cold]
    fn find_or_add(&mut self, mr: &impl Pinned) -> usize {
        let id = mr.pin_id();
        if let Some(i) = self.entries.iter().position(|(e, _)| *e == id) {
            return i;
        }
        let pin = Arc::new(Pin::new(mr, &self.retired));
        mr.attach_pin(Arc::clone(&pin));
        // Reuse the entry of a deregistered region no work request uses any more.
        let reuse = self.entries.iter().position(|(_, p)| p.gone.load(Ordering::Acquire) && !p.busy());
        match reuse {
            Some(i) => {
                self.entries[i] = (id, pin);
                i
            }
            None => {
                self.entries.push((id, pin));
                self.entries.len() - 1
            }
        }
    }

    /// The queue pair was destroyed: the device no longer uses any region for it.
    pub(crate) fn release_all(&self) {
        self.retired.store(u64::MAX, Ordering::Release);
        for (_, p) in &self.entries {
            p.inflight.store(0, Ordering::Release);
        }
    }

    /// The queue pair could not be destroyed: reports every region it may still use as leaked
    /// (their pins stay as they are, so they are never deregistered or freed).
    pub(crate) fn report_leaks(&self, why: &dyn std::fmt::Display) {
        for (_, p) in self.entries.iter().filter(|(_, p)| p.busy()) {
            crate::leak::region(p.addr, p.len, why);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin() -> Pin {
        Pin::of_nothing(&Arc::new(AtomicU64::new(0)))
    }

    #[test]
    fn pin_in_order_marks() {
        let p = pin();
        assert!(!p.busy());
        p.mark.store(3, Ordering::Relaxed);
        assert!(p.busy(), "work requests 0..3 use it, none retired");
        p.retired.store(2, Ordering::Release);
        assert!(p.busy());
        p.retired.store(3, Ordering::Release);
        assert!(!p.busy());
        p.retired.store(u64::MAX, Ordering::Release);
        p.mark.store(10, Ordering::Relaxed);
        assert!(!p.busy(), "a destroyed queue uses nothing");
    }

    #[test]
    fn pin_counts_shared_receives() {
        let p = pin();
        p.inflight.store(2, Ordering::Relaxed);
        assert!(p.busy());
        p.inflight.store(0, Ordering::Relaxed);
        assert!(!p.busy());
    }
}

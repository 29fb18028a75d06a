//! Keeping a region registered while the device may use it, without a reference count per
//! work request (rule V4 of docs/memory.md).
//!
//! A queue's bookkeeping (one thread at a time, rule V6) keeps a small table of the regions its
//! work requests use: one [`Pin`] per (queue, region) pair, made the first time the queue uses
//! the region and shared with the region. A pin counts the queue's work requests in flight on
//! the region; only the queue's owner writes it (a plain load and store, no atomic
//! read-modify-write, no lock). A region that is dropped or deregistered while one of its pins
//! counts work requests is *parked* in its protection domain instead: it is deregistered, and
//! its memory freed, when the pins come back to zero (checked when a queue retires work and
//! when a queue pair is destroyed).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::mr::VerbsMr;

/// A queue's work requests in flight on one region.
#[derive(Debug)]
pub(crate) struct Pin {
    /// Work requests in flight; written only by the owner of the queue (single writer).
    inflight: AtomicU64,
    /// The region was deregistered: the pin can be reused for another region once idle.
    gone: AtomicBool,
    /// The region, for the leak report of a queue pair that could not be destroyed.
    addr: u64,
    len: usize,
}

impl Pin {
    fn new(mr: &VerbsMr) -> Self {
        Self { inflight: AtomicU64::new(0), gone: AtomicBool::new(false), addr: mr.addr_raw(), len: mr.len_raw() }
    }

    /// Whether a work request of the queue still uses the region.
    pub(crate) fn busy(&self) -> bool {
        self.inflight.load(Ordering::Acquire) != 0
    }

    /// Marks the region deregistered.
    pub(crate) fn set_gone(&self) {
        self.gone.store(true, Ordering::Release);
    }

    /// Adds one work request (single writer: load and store).
    #[inline]
    fn take(&self) {
        let n = self.inflight.load(Ordering::Relaxed);
        self.inflight.store(n + 1, Ordering::Relaxed);
    }

    /// Retires one work request (single writer). Release: a region owner who then sees the
    /// count fall sees everything the queue did before (the completion was polled).
    #[inline]
    fn put(&self) {
        let n = self.inflight.load(Ordering::Relaxed);
        self.inflight.store(n.saturating_sub(1), Ordering::Release);
    }
}

/// Index of a pin in a [`PinTable`].
pub(crate) type PinIdx = u32;

/// A queue's pins (owned by the queue's single owner).
#[derive(Debug, Default)]
pub(crate) struct PinTable {
    /// (region id, pin).
    entries: Vec<(u64, Arc<Pin>)>,
    /// The entry used last (most operations use the same region as the one before).
    last: usize,
}

impl PinTable {
    /// Counts one more work request on `mr`; returns the pin's index (for [`PinTable::put`]).
    #[inline]
    pub(crate) fn take(&mut self, mr: &VerbsMr) -> PinIdx {
        let id = mr.id();
        let i = match self.entries.get(self.last) {
            Some((e, _)) if *e == id => self.last,
            _ => self.find_or_add(mr),
        };
        self.entries[i].1.take();
        self.last = i;
        i as PinIdx
    }

    #[cold]
    fn find_or_add(&mut self, mr: &VerbsMr) -> usize {
        let id = mr.id();
        if let Some(i) = self.entries.iter().position(|(e, _)| *e == id) {
            return i;
        }
        let pin = Arc::new(Pin::new(mr));
        mr.attach(Arc::clone(&pin));
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

    /// Retires one work request counted by [`PinTable::take`].
    #[inline]
    pub(crate) fn put(&self, idx: PinIdx) {
        if let Some((_, p)) = self.entries.get(idx as usize) {
            p.put();
        }
    }

    /// The queue pair was destroyed: the device no longer uses any region for it.
    pub(crate) fn release_all(&self) {
        for (_, p) in &self.entries {
            p.inflight.store(0, Ordering::Release);
        }
    }

    /// The queue pair could not be destroyed: reports every region it may still use as leaked
    /// (their pins stay counted, so they are never deregistered or freed).
    pub(crate) fn report_leaks(&self, why: &dyn std::fmt::Display) {
        for (_, p) in self.entries.iter().filter(|(_, p)| p.busy()) {
            crate::leak::region(p.addr, p.len, why);
        }
    }
}

/// Regions dropped while in use, waiting for their pins to fall to zero.
#[derive(Debug)]
pub(crate) struct Parked {
    regions: Mutex<Vec<VerbsMr>>,
    count: AtomicUsize,
}

/// The process's parked regions.
pub(crate) static PARKED: Parked = Parked { regions: Mutex::new(Vec::new()), count: AtomicUsize::new(0) };

impl Parked {
    /// Keeps `mr` until no queue uses it.
    pub(crate) fn park(&self, mr: VerbsMr) {
        let mut g = self.regions.lock().unwrap_or_else(PoisonError::into_inner);
        g.push(mr);
        self.count.store(g.len(), Ordering::Release);
    }

    /// Whether a region is parked (cheap: one load, checked after work is retired).
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) != 0
    }

    /// Deregisters and frees every parked region no queue uses any more. Taken out of the
    /// list under the lock, dropped (deregistered) after it.
    pub(crate) fn sweep(&self) {
        let done: Vec<VerbsMr> = {
            let mut g = self.regions.lock().unwrap_or_else(PoisonError::into_inner);
            let (idle, busy): (Vec<_>, Vec<_>) = g.drain(..).partition(|m| !m.busy());
            *g = busy;
            self.count.store(g.len(), Ordering::Release);
            idle
        };
        drop(done);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_counts_single_writer() {
        let p = Pin { inflight: AtomicU64::new(0), gone: AtomicBool::new(false), addr: 0, len: 0 };
        assert!(!p.busy());
        p.take();
        p.take();
        assert!(p.busy());
        p.put();
        assert!(p.busy());
        p.put();
        assert!(!p.busy());
        p.put();
        assert!(!p.busy(), "never below zero");
    }
}

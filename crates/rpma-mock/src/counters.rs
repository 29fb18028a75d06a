//! Live-object counters: the mock counts every resource it creates so tests can prove that
//! nothing leaks (no QP, CQ, MR, channel, ... left behind after an error path).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A kind of mock resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Protection domains.
    Pd,
    /// Memory regions.
    Mr,
    /// Completion queues.
    Cq,
    /// Completion or CM event channels (each holds one fd, once it was asked for).
    Channel,
    /// Queue pairs (with their CM identifiers).
    Qp,
    /// Shared receive queues.
    Srq,
    /// Listening endpoints.
    Listener,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Self; 7] = [Self::Pd, Self::Mr, Self::Cq, Self::Channel, Self::Qp, Self::Srq, Self::Listener];
}

/// Counts of live resources by kind.
#[derive(Debug, Default)]
pub struct Counters {
    live: [AtomicUsize; 7],
}

/// A snapshot of the live resources of a fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct LiveCounts {
    /// Protection domains.
    pub pds: usize,
    /// Memory regions.
    pub mrs: usize,
    /// Completion queues.
    pub cqs: usize,
    /// Event and completion channels.
    pub channels: usize,
    /// Queue pairs.
    pub qps: usize,
    /// Shared receive queues.
    pub srqs: usize,
    /// Listeners.
    pub listeners: usize,
}

impl LiveCounts {
    /// Whether no resource is live.
    #[must_use]
    pub fn is_zero(&self) -> bool {
        *self == Self::default()
    }
}

impl Counters {
    pub(crate) fn snapshot(&self) -> LiveCounts {
        let g = |k: Kind| self.live[k as usize].load(Ordering::SeqCst);
        LiveCounts {
            pds: g(Kind::Pd),
            mrs: g(Kind::Mr),
            cqs: g(Kind::Cq),
            channels: g(Kind::Channel),
            qps: g(Kind::Qp),
            srqs: g(Kind::Srq),
            listeners: g(Kind::Listener),
        }
    }
}

/// A guard counting one live resource until dropped.
#[derive(Debug)]
pub(crate) struct Live {
    counters: Arc<Counters>,
    kind: Kind,
}

impl Live {
    pub(crate) fn new(counters: &Arc<Counters>, kind: Kind) -> Self {
        counters.live[kind as usize].fetch_add(1, Ordering::SeqCst);
        Self { counters: Arc::clone(counters), kind }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.counters.live[self.kind as usize].fetch_sub(1, Ordering::SeqCst);
    }
}

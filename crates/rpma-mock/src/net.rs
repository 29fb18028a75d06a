//! The network between a fabric's devices: the links a test cut between two of them (a
//! partition, both ways or one way) and the connections it carries, so that a partition can
//! end the connections that cross it and a test can drop one connection.
//!
//! Off the data path: the connection manager's calls consult it (a request that cannot reach
//! the listener is never delivered; an accept whose answer cannot reach the requester leaves
//! the requester without its ESTABLISHED), and a partition loses the connections between the
//! two sides at once (RC's retries would end them the same way, after the retry timeout). A
//! silent link keeps them instead, and the deferred mode leaves their work waiting, unanswered,
//! as rxe leaves a peer that lost its power: nothing completes until the link heals.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

/// A queue pair as the network sees it (implemented by the queue pairs, `qp/mod.rs`). The
/// network reaches the connections it carries through this trait only, so it sits below them.
pub(crate) trait Connection: Send + Sync {
    /// The index of its device.
    fn node(&self) -> usize;
    /// The other end of its established connection, if neither side closed it yet.
    fn live_peer(&self) -> Option<Arc<dyn Connection>>;
    /// Loses the connection: both ends see LOST, their waiting work is flushed.
    fn lose(&self);
    /// Puts it back on its fabric's list if work waits (a silent link healed).
    fn resume(self: Arc<Self>);
}

/// The identity of a connection (its address, compared only).
fn id(c: &Arc<dyn Connection>) -> *const () {
    Arc::as_ptr(c).cast::<()>()
}

/// Which way a partition drops packets ([`MockFabric::partition`](crate::MockFabric::partition)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Direction {
    /// Both ways.
    Both,
    /// From the first device to the second only (the second's packets still reach the first).
    OneWay,
}

#[derive(Default)]
pub(crate) struct Net {
    /// Whether any link is cut (the connection manager's one load when none is).
    any: AtomicBool,
    /// The cut links, `(from, to)` device indices: packets from `from` to `to` are dropped.
    cut: Mutex<Vec<(usize, usize)>>,
    /// Whether any link is silent (the deferred mode's one load when none is).
    any_silent: AtomicBool,
    /// The silent links (both ways, each pair once, lower index first): cut, but the
    /// connections across them are kept, their work waiting unanswered until the link heals.
    silent: Mutex<Vec<(usize, usize)>>,
    /// The queue pairs made on the fabric (for partitions and `drop_connection`).
    qps: Mutex<Vec<Weak<dyn Connection>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Net {
    /// Whether packets from device `from` to device `to` are dropped.
    pub(crate) fn dropped(&self, from: usize, to: usize) -> bool {
        self.any.load(Ordering::Acquire) && lock(&self.cut).contains(&(from, to))
    }

    /// A queue pair was made.
    pub(crate) fn add_qp(&self, qp: Weak<dyn Connection>) {
        let mut g = lock(&self.qps);
        // Dead entries go when the list doubles: amortized constant per queue pair.
        if g.len() >= 64 && g.len().is_power_of_two() {
            g.retain(|w| w.strong_count() > 0);
        }
        g.push(qp);
    }

    /// The live, established connections, each once (by its side made first), in the order
    /// they were made.
    pub(crate) fn connections(&self) -> Vec<Arc<dyn Connection>> {
        let g = lock(&self.qps);
        let live: Vec<Arc<dyn Connection>> = g.iter().filter_map(Weak::upgrade).collect();
        drop(g);
        let mut seen: Vec<*const ()> = Vec::new();
        let mut out = Vec::new();
        for q in live {
            let Some(r) = q.live_peer() else { continue };
            if seen.contains(&id(&r)) {
                continue;
            }
            seen.push(id(&q));
            out.push(q);
        }
        out
    }

    /// Cuts the link between devices `a` and `b` (`dir`), and loses the connections between
    /// them. Returns how many were lost.
    pub(crate) fn partition(&self, a: usize, b: usize, dir: Direction) -> usize {
        {
            let mut g = lock(&self.cut);
            for link in [(a, b), (b, a)].into_iter().take(if dir == Direction::Both { 2 } else { 1 }) {
                if !g.contains(&link) {
                    g.push(link);
                }
            }
            self.any.store(true, Ordering::Release);
        }
        let mut lost = 0;
        for q in self.connections() {
            let Some(r) = q.live_peer() else { continue };
            let (x, y) = (q.node(), r.node());
            if (x, y) == (a, b) || (x, y) == (b, a) {
                q.lose();
                lost += 1;
            }
        }
        lost
    }

    /// Makes the link between devices `a` and `b` silent (both ways): cut for new connections,
    /// and the established ones across it kept, their work left waiting (the deferred mode
    /// executes none of it) until the link heals. Returns how many connections cross it.
    pub(crate) fn silence(&self, a: usize, b: usize) -> usize {
        {
            let mut g = lock(&self.cut);
            for link in [(a, b), (b, a)] {
                if !g.contains(&link) {
                    g.push(link);
                }
            }
            self.any.store(true, Ordering::Release);
        }
        {
            let mut g = lock(&self.silent);
            let pair = (a.min(b), a.max(b));
            if !g.contains(&pair) {
                g.push(pair);
            }
            self.any_silent.store(true, Ordering::Release);
        }
        self.connections()
            .iter()
            .filter(|q| {
                q.live_peer().is_some_and(|r| (q.node().min(r.node()), q.node().max(r.node())) == (a.min(b), a.max(b)))
            })
            .count()
    }

    /// Whether the link between devices `a` and `b` is silent.
    pub(crate) fn is_silent(&self, a: usize, b: usize) -> bool {
        self.any_silent.load(Ordering::Acquire) && lock(&self.silent).contains(&(a.min(b), a.max(b)))
    }

    /// Mends the link between `a` and `b` (both ways); the work waiting on a silent link goes
    /// on.
    pub(crate) fn heal(&self, a: usize, b: usize) {
        {
            let mut g = lock(&self.cut);
            g.retain(|&l| l != (a, b) && l != (b, a));
            self.any.store(!g.is_empty(), Ordering::Release);
        }
        let mut g = lock(&self.silent);
        g.retain(|&l| l != (a.min(b), a.max(b)));
        self.any_silent.store(!g.is_empty(), Ordering::Release);
        drop(g);
        self.resume_waiting();
    }

    /// Mends every link.
    pub(crate) fn heal_all(&self) {
        {
            let mut g = lock(&self.cut);
            g.clear();
            self.any.store(false, Ordering::Release);
        }
        lock(&self.silent).clear();
        self.any_silent.store(false, Ordering::Release);
        self.resume_waiting();
    }

    /// Puts every queue pair with work waiting back on its fabric's list (a silent link healed).
    fn resume_waiting(&self) {
        let qps: Vec<Arc<dyn Connection>> = lock(&self.qps).iter().filter_map(Weak::upgrade).collect();
        for q in qps {
            q.resume();
        }
    }
}

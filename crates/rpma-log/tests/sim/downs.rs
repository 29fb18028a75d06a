//! A writer loses a replica only to a fault or to another writer: the check of its health
//! events against the faults the nemesis injected and the replicas' promises.

use std::time::Instant;

use rpma::mock::MockFabric;
use rpma_log::{Health, Log};

use crate::world::{lock, Shared};

/// A `Down` with no fault or takeover behind it yet: the step it was seen at, the writer's name,
/// the replica, the writer, since when the replica was up, and the reason.
pub type Unexplained = (u64, String, usize, usize, Instant, String);

/// A writer loses a replica only to a fault or to another writer: each `Down` of a replica it
/// had up follows a fault that touched the replica or the writer since it was up, or a change of
/// the replica's promise (another writer's takeover, a restart blank), looked for again
/// [`SETTLE`] steps after the `Down` (a takeover drops the old writer's connection before it
/// records its promise). A replica lost otherwise (its connection killed by the writer's own
/// second takeover, say) is a violation.
pub struct Downs {
    /// Per replica: since when the writer has had it up (it began to connect or catch it up
    /// then), if it is up.
    up_since: Vec<Option<Instant>>,
    /// Since when each replica has been connecting or catching up.
    since: Vec<Instant>,
}

/// Steps after which a takeover that began before a `Down` has recorded its promise.
pub const SETTLE: u64 = 1000;

impl Downs {
    pub fn new() -> Self {
        Self { up_since: Vec::new(), since: Vec::new() }
    }

    /// A new log of the writer, whose open began at `began`: what it found down is its
    /// report's.
    pub fn opened(&mut self, log: &mut Log<MockFabric>, began: Instant) {
        drop(log.health_events());
        self.up_since =
            log.health().iter().map(|h| matches!(h, Health::Up | Health::Lagging).then_some(began)).collect();
        self.since = vec![began; self.up_since.len()];
    }

    pub fn look(&mut self, sh: &Shared, log: &mut Log<MockFabric>, name: &str, w: usize) {
        for e in log.health_events() {
            let r = e.replica;
            match e.health {
                Health::Down => {
                    if let Some(since) = self.up_since[r].take() {
                        if !sh.touched_since(r, w, since) {
                            let why = e.reason.unwrap_or_default();
                            lock(&sh.unexplained).push((sh.sim.steps(), name.to_owned(), r, w, since, why));
                        }
                    }
                    self.since[r] = e.at;
                }
                Health::CatchingUp => self.since[r] = e.at,
                Health::Up | Health::Lagging if self.up_since[r].is_none() => self.up_since[r] = Some(self.since[r]),
                _ => {}
            }
        }
    }
}

/// Holds the downs older than [`SETTLE`] steps (all of them if `all`) against the promises.
pub fn settle(sh: &Shared, all: bool) {
    let steps = sh.sim.steps();
    let due: Vec<_> = {
        let mut g = lock(&sh.unexplained);
        let (due, young) = g.drain(..).partition(|(at, ..)| all || at + SETTLE <= steps);
        *g = young;
        due
    };
    for (at, name, r, w, since, why) in due {
        if !sh.touched_since(r, w, since) {
            sh.violation(format!(
                "{name}: r{r} went down (\"{why}\") at step {at} with no fault on it or on the writer since it was \
                 up, and no other writer took it over (its promise has not changed since)"
            ));
        }
    }
}

//! What a seed decides before the run: the cluster's configuration and the nemesis's plan of
//! faults (which the shrinker cuts down to the faults a violation needs).

use std::fmt;

use rpma::mock::{Direction, Unflushed};
use rpma_log::{Broken, FlushMode, Quorum, Wait};

/// The cluster of one run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Replicas.
    pub n: usize,
    pub quorum: Quorum,
    pub flush: FlushMode,
    /// Writer processes at once (each opens, appends, syncs, truncates, reconnects, ...).
    pub writers: usize,
    /// The writers share one writer id.
    pub same_id: bool,
    /// The writers reconnect through the log's own thread.
    pub background: bool,
    /// Rules switched off (a mutant).
    pub broken: Broken,
    /// Steps of the faulty phase; then every fault heals and one writer must make progress.
    pub chaos_steps: u64,
    /// Each replica region's ring bytes.
    pub ring: usize,
    /// What a fresh region holds before it is formatted (the seed of its bytes).
    pub junk: u64,
    /// How the writers wait for completions (drawn apart from the rest: the other draws of a
    /// seed are those of the seed before the waits were drawn).
    pub wait: Wait,
    /// Every entry's payload this long (a workload of fixed-size records, whose records of two
    /// writers fall at the same positions), or random.
    pub entry_len: Option<usize>,
}

/// A node of the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Node {
    Writer(usize),
    Replica(usize),
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Writer(w) => write!(f, "w{w}"),
            Self::Replica(r) => write!(f, "r{r}"),
        }
    }
}

/// A fault the nemesis injects.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Replica `r`'s node loses power (its unflushed bytes as `how` says; a DRAM replica
    /// loses everything) or its process is killed (`Kept`); it restarts `down` steps later.
    Crash { r: usize, how: Unflushed, down: u64 },
    /// Replica `r`'s node loses power the next time its process reaches the scheduling point
    /// `point` ("persist": between a store and its write-back; "accept": a takeover done, not
    /// answered), then as [`Fault::Crash`].
    CrashAt { r: usize, point: &'static str, how: Unflushed, down: u64 },
    /// Replica `r` restarts without its memory: formatted anew (an operator's reformat, or a
    /// DRAM replica's restart), `down` steps later.
    Amnesia { r: usize, down: u64 },
    /// The link between `a` and `b` is cut (`dir`) for `steps` steps.
    Partition { a: Node, b: Node, dir: Direction, steps: u64 },
    /// The `k`-th live connection (modulo their number) is lost.
    DropConnection { k: usize },
    /// Writer `w`'s process is killed; a new one starts `down` steps later.
    KillWriter { w: usize, down: u64 },
    /// Writer `w` stops for `us` µs of virtual time (a paused leader).
    Freeze { w: usize, us: u64 },
}

/// A fault and the step it falls at.
#[derive(Clone, Debug)]
pub struct Planned {
    pub at: u64,
    pub fault: Fault,
}

impl fmt::Display for Planned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "step {}: {:?}", self.at, self.fault)
    }
}

/// The configuration and the plan of `seed` (`broken`: the mutant under test, if any).
pub fn draw(seed: u64, broken: Broken) -> (Config, Vec<Planned>) {
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x5157_AB1E);
    let n = if rng.u8(..4) == 0 { 5 } else { 3 };
    let quorum = match rng.u8(..8) {
        0 => Quorum::All,
        1 => Quorum::K(1),
        2 if n == 5 => Quorum::K(2),
        _ => Quorum::Majority,
    };
    let mut flush = if rng.bool() { FlushMode::Persistent } else { FlushMode::Visibility };
    // A rule of persistence is switched off: its loss shows in the persistent mode only; the
    // amnesia rule's, where every crash loses a replica's memory. The pad filler's comparison
    // needs replicas that keep what they held across crashes.
    if broken.epoch_block_checksum
        || broken.sync_flush_visibility
        || broken.ack_before_flush
        || broken.commit_word_ahead
        || broken.compare_pad_filler
        || broken.kept_history_unflushed
    {
        flush = FlushMode::Persistent;
    }
    if broken.blank_replicas_vote {
        flush = FlushMode::Visibility;
    }
    let cfg = Config {
        n,
        quorum,
        flush,
        // The read quorum's rule is broken by opens racing each other, the tail's epoch by a
        // fenced writer's records beyond a later one's history, the repair's comparison by
        // repairs racing failovers: three writers.
        writers: if rng.u8(..3) == 0
            || broken.repair_before_read_quorum
            || broken.tail_any_epoch
            || broken.compare_pad_filler
        {
            3
        } else {
            2
        },
        same_id: rng.u8(..3) == 0,
        // The reconnect thread's race needs the thread: always on when that rule is off.
        background: rng.u8(..3) == 0 || broken.reconnect_beside_the_thread,
        broken,
        chaos_steps: 2500 + rng.u64(..2500),
        // Small enough to wrap often (the pad filler's comparison needs many pads); the blank
        // vote's loss needs histories longer than a few entries.
        ring: match rng.u8(..3) {
            _ if broken.compare_pad_filler => 640,
            _ if broken.blank_replicas_vote => 2048,
            0 => 640,
            1 => 1024,
            _ => 2048,
        },
        junk: rng.u64(..),
        wait: if broken.sleep_without_repoll || fastrand::Rng::with_seed(seed ^ 0x51EE_9000).bool() {
            Wait::Sleep
        } else {
            Wait::Spin
        },
        entry_len: None,
    };
    // A blank replica's vote loses an entry only after several faults in a row (two replicas
    // restarting blank around partitions and a writer's kill: seed 8262 needs seven).
    let faults = if broken.blank_replicas_vote { 8 } else { 3 } + rng.usize(..10);
    let mut plan: Vec<Planned> = (0..faults)
        .map(|_| {
            let at = rng.u64(..cfg.chaos_steps);
            let r = rng.usize(..n);
            let w = rng.usize(..cfg.writers);
            let node = |rng: &mut fastrand::Rng| {
                if rng.u8(..3) == 0 {
                    Node::Writer(rng.usize(..cfg.writers))
                } else {
                    Node::Replica(rng.usize(..n))
                }
            };
            let how = match rng.u8(..3) {
                0 => Unflushed::Lost,
                1 => Unflushed::Kept,
                _ => Unflushed::Torn { seed: rng.u64(..) },
            };
            let fault = match rng.u8(..13) {
                0..=1 => Fault::Crash { r, how, down: rng.u64(..800) },
                2 => {
                    let point = ["persist", "accept", "reg_mr"][rng.usize(..3)];
                    Fault::CrashAt { r, point, how, down: rng.u64(..800) }
                }
                3 => Fault::Amnesia { r, down: rng.u64(..800) },
                4..=6 => {
                    let a = node(&mut rng);
                    let mut b = node(&mut rng);
                    if a == b {
                        b = if a == Node::Replica(0) { Node::Replica(1) } else { Node::Replica(0) };
                    }
                    let dir = if rng.u8(..3) == 0 { Direction::OneWay } else { Direction::Both };
                    Fault::Partition { a, b, dir, steps: rng.u64(..1500) }
                }
                7 | 8 => Fault::DropConnection { k: rng.usize(..16) },
                9 | 10 => Fault::KillWriter { w, down: rng.u64(..600) },
                11 => Fault::Freeze { w, us: rng.u64(..20_000) },
                _ => Fault::Crash { r, how, down: rng.u64(..800) },
            };
            Planned { at, fault }
        })
        .collect();
    plan.sort_by_key(|p| p.at);
    // Drawn last, so that the plans of the seeds before it stay as they were. The tail epoch's
    // loss needs a fenced writer's records at the positions and lsns that follow a later
    // writer's history: records of one size.
    let mut cfg = cfg;
    cfg.entry_len = (rng.u8(..4) == 0 || broken.tail_any_epoch).then_some(64);
    (cfg, plan)
}

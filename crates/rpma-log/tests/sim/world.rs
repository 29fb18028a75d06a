//! One run of the simulation: the cluster (replica and writer processes as actors of a
//! simulated fabric), the nemesis applying its plan, then the calm in which one writer must make
//! progress (liveness), and what the checker found.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rpma::mock::sim::{ActorId, Sim, Step};
use rpma::mock::{MockDevice, MockFabric, PersistentMemory, Unflushed};
use rpma::Memory;
use rpma_log::{FlushMode, Quorum};

use crate::check::Checker;
use crate::downs::{settle, Unexplained, SETTLE};
use crate::nodes::{final_writer, spawn_replica, spawn_writer};
use crate::plan::{Config, Fault, Node, Planned};

/// How long the calm may take before one writer's open and sync must have succeeded.
const LIVENESS_STEPS: u64 = 200_000;

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub fn replica_ip(r: usize) -> String {
    format!("10.0.1.{}", r + 1)
}

pub fn writer_ip(w: usize) -> String {
    format!("10.0.0.{}", w + 1)
}

/// What a run found.
#[derive(Debug, Default)]
pub struct Outcome {
    pub violations: Vec<String>,
    /// The faults and the writers' milestones, with their virtual times.
    pub history: Vec<String>,
    pub steps: u64,
    pub acked: usize,
    pub syncs: u64,
    pub recoveries: u64,
    pub faults: usize,
}

/// The shared state of a run: the checker and the history (never locked across a scheduling
/// point).
pub struct Shared {
    pub sim: Sim,
    pub checker: Mutex<Checker>,
    pub history: Mutex<Vec<String>>,
    /// Each replica's promised epoch, as its process last read its header (each change, a
    /// takeover or a restart blank, touches the replica).
    pub promised: Vec<AtomicU64>,
    /// The faults that touched a node (a crash, a partition, a dropped connection, a pause, a
    /// change of a replica's promise), with their virtual times.
    pub touched: Mutex<Vec<(Instant, Node)>>,
    /// Downs with no fault or takeover behind them yet: (step, writer's name, replica, writer,
    /// since when the replica was up, reason) ([`Downs`]).
    pub unexplained: Mutex<Vec<Unexplained>>,
}

impl Shared {
    /// A fault touched `node`.
    pub fn touch(&self, node: Node) {
        lock(&self.touched).push((self.sim.now(), node));
    }

    /// Whether a fault touched replica `r` or writer `w` at `since` or later.
    pub fn touched_since(&self, r: usize, w: usize, since: Instant) -> bool {
        lock(&self.touched).iter().any(|&(at, n)| at >= since && (n == Node::Replica(r) || n == Node::Writer(w)))
    }
}

impl Shared {
    pub fn note(&self, what: String) {
        lock(&self.history).push(format!("{:>10.3?} {what}", self.sim.elapsed()));
    }

    pub fn violation(&self, what: String) {
        self.note(format!("VIOLATION {what}"));
        lock(&self.checker).violations.push(what);
    }
}

/// A replica process and what the nemesis knows of it.
struct ReplicaSlot {
    actor: Option<ActorId>,
    /// Restarted without its memory and not repaired since (read from its header by its
    /// actor): it counts against the amnesia the guarantee allows (fewer than q).
    blank: Arc<AtomicBool>,
    /// Down until this step, to restart with this memory (`None`: formatted anew).
    restart: Option<(u64, Option<Memory>)>,
}

struct WriterSlot {
    actor: Option<ActorId>,
    generation: u64,
    restart_at: Option<u64>,
}

/// One run of `seed` with `cfg` and `plan`.
pub fn run(seed: u64, cfg: &Config, plan: &[Planned]) -> Outcome {
    let sim = Sim::new(seed);
    let mut b = MockFabric::builder();
    for w in 0..cfg.writers + 1 {
        b = b.device(&format!("w{w}"), &[writer_ip(w).as_str()]);
    }
    for r in 0..cfg.n {
        b = b.device(&format!("r{r}"), &[replica_ip(r).as_str()]);
    }
    let fabric = b
        .persistent_memory(PersistentMemory::All)
        .cm_timeout(Duration::from_millis(2))
        .seed(seed)
        .simulation(&sim)
        .build();
    let shared = Arc::new(Shared {
        sim: sim.clone(),
        checker: Mutex::new(Checker::default()),
        history: Mutex::new(Vec::new()),
        promised: (0..cfg.n).map(|_| AtomicU64::new(0)).collect(),
        touched: Mutex::new(Vec::new()),
        unexplained: Mutex::new(Vec::new()),
    });
    let q = cfg.quorum_size();
    let mut replicas: Vec<ReplicaSlot> = (0..cfg.n)
        .map(|r| {
            let blank = Arc::new(AtomicBool::new(false));
            let actor = spawn_replica(&shared, &fabric, cfg, r, None, &blank, true);
            ReplicaSlot { actor, blank, restart: None }
        })
        .collect();
    let mut writers: Vec<WriterSlot> = (0..cfg.writers)
        .map(|w| WriterSlot { actor: spawn_writer(&shared, &fabric, cfg, seed, w, 0), generation: 0, restart_at: None })
        .collect();
    let mut heals: Vec<(u64, Node, Node)> = Vec::new();
    // Crashes armed for a scheduling point: (replica, point, how, down).
    let mut armed: Vec<(usize, &'static str, Unflushed, u64)> = Vec::new();
    let mut next = 0;
    let mut faults = 0;
    let dev = |node: Node| -> MockDevice {
        let name = node.to_string();
        fabric.devices().iter().find(|d| d.name() == name).expect("a node's device").clone()
    };
    for step in 0..cfg.chaos_steps {
        while next < plan.len() && plan[next].at <= step {
            let p = &plan[next];
            next += 1;
            let applied = match &p.fault {
                Fault::Crash { r, how, down } => {
                    let amnesia = cfg.flush == FlushMode::Visibility;
                    crash(&shared, &fabric, &mut replicas, q, *r, *how, amnesia, step + down)
                }
                Fault::CrashAt { r, point, how, down } => {
                    armed.push((*r, point, *how, *down));
                    false
                }
                Fault::Amnesia { r, down } => {
                    crash(&shared, &fabric, &mut replicas, q, *r, Unflushed::Kept, true, step + down)
                }
                Fault::Partition { a, b, dir, steps } => {
                    let lost = fabric.partition(&dev(*a), &dev(*b), *dir).unwrap_or(0);
                    shared.touch(*a);
                    shared.touch(*b);
                    heals.push((step + steps, *a, *b));
                    shared.note(format!("partition {a} / {b} ({dir:?}) for {steps} steps: {lost} connections lost"));
                    true
                }
                Fault::DropConnection { k } => {
                    let n = fabric.connections();
                    n > 0 && {
                        let d = fabric.drop_connection(k % n);
                        for name in d.iter().flat_map(|(x, y)| [x, y]) {
                            let i: usize = name[1..].parse().unwrap_or(0);
                            shared.touch(if name.starts_with('r') { Node::Replica(i) } else { Node::Writer(i) });
                        }
                        shared.note(format!("connection dropped: {d:?}"));
                        true
                    }
                }
                Fault::KillWriter { w, down } => match writers[*w].actor.take() {
                    Some(a) if !sim.is_done(a) => {
                        sim.kill(a);
                        writers[*w].restart_at = Some(step + down);
                        shared.note(format!("w{w} killed, back in {down} steps"));
                        true
                    }
                    other => {
                        writers[*w].actor = other;
                        false
                    }
                },
                Fault::Freeze { w, us } => match writers[*w].actor {
                    Some(a) if !sim.is_done(a) => {
                        sim.freeze(a, Duration::from_micros(*us));
                        shared.touch(Node::Writer(*w));
                        shared.note(format!("w{w} paused for {us} µs"));
                        true
                    }
                    _ => false,
                },
            };
            faults += usize::from(applied);
        }
        heals.retain(|&(at, a, b)| {
            if at <= step {
                fabric.heal(&dev(a), &dev(b));
                shared.note(format!("healed {a} / {b}"));
                false
            } else {
                true
            }
        });
        restart_due(&shared, &fabric, cfg, &mut replicas, Some(step));
        for (w, slot) in writers.iter_mut().enumerate() {
            if slot.restart_at.is_some_and(|at| at <= step) {
                slot.restart_at = None;
                slot.generation += 1;
                slot.actor = spawn_writer(&shared, &fabric, cfg, seed, w, slot.generation);
            }
        }
        if step % 256 == 0 {
            settle(&shared, false);
        }
        let taken = sim.step();
        if let Step::Actor { id, at } = taken {
            if let Some(k) = armed.iter().position(|(r, p, ..)| replicas[*r].actor == Some(id) && *p == at) {
                let (r, point, how, down) = armed.remove(k);
                let amnesia = cfg.flush == FlushMode::Visibility;
                if crash(&shared, &fabric, &mut replicas, q, r, how, amnesia, step + down) {
                    faults += 1;
                    shared.note(format!("(r{r}'s crash fell at its scheduling point {point})"));
                }
            }
        }
        if taken == Step::Idle || !lock(&shared.checker).violations.is_empty() {
            break;
        }
    }
    // The faults stop: what went down unexplained settles while the writers go on.
    fabric.heal_all();
    sim.run_until(SETTLE, || false);
    settle(&shared, false);
    // The calm: every link mended, every replica back, the writers gone but one new one, which
    // must open and make an entry durable within a bounded number of steps.
    if lock(&shared.checker).violations.is_empty() {
        fabric.heal_all();
        restart_due(&shared, &fabric, cfg, &mut replicas, None);
        let chaos: Vec<ActorId> = writers.iter_mut().filter_map(|w| w.actor.take()).collect();
        for &a in &chaos {
            sim.kill(a);
        }
        // The writers end; the replicas finish what they were answering; the last downs settle.
        sim.run_until(LIVENESS_STEPS, || chaos.iter().all(|&a| sim.is_done(a)));
        sim.run_until(SETTLE, || false);
        settle(&shared, true);
        shared.note("calm: links mended, replicas back, writers stopped".into());
        let done = Arc::new(AtomicBool::new(false));
        let d = Arc::clone(&done);
        let sh = Arc::clone(&shared);
        let f = fabric.clone();
        let c = cfg.clone();
        let _ = sim.spawn("final", move || final_writer(&sh, &f, &c, &d));
        let live = sim
            .run_until(LIVENESS_STEPS, || done.load(Ordering::Acquire) || !lock(&shared.checker).violations.is_empty());
        if !live {
            shared.violation(format!(
                "liveness: with every replica up and one writer, no open and sync succeeded within {LIVENESS_STEPS} steps"
            ));
        }
    }
    if std::env::var_os("SIM_TRACE").is_some() {
        for l in sim.trace() {
            println!("trace {l}");
        }
    }
    for (name, msg) in sim.panics() {
        shared.violation(format!("{name} panicked: {msg}"));
    }
    if !sim.finish(LIVENESS_STEPS) {
        shared.violation("the actors did not end when killed".into());
    }
    let history = lock(&shared.history).clone();
    let c = lock(&shared.checker);
    Outcome {
        violations: c.violations.clone(),
        history,
        steps: sim.steps(),
        acked: c.acknowledged(),
        syncs: c.syncs,
        recoveries: c.recoveries,
        faults,
    }
}

impl Config {
    pub fn quorum_size(&self) -> usize {
        match self.quorum {
            Quorum::All => self.n,
            Quorum::K(k) => k,
            _ => self.n / 2 + 1,
        }
    }
}

/// Cuts replica `r`'s node (`how`) and kills its process; it restarts at `back` with what its
/// region kept, or blank if `amnesia` (if the amnesia allowed, fewer than q replicas blank at
/// once, is not used up; otherwise the fault is skipped).
#[allow(clippy::too_many_arguments)]
fn crash(
    shared: &Shared,
    fabric: &MockFabric,
    replicas: &mut [ReplicaSlot],
    q: usize,
    r: usize,
    how: Unflushed,
    amnesia: bool,
    back: u64,
) -> bool {
    let Some(actor) = replicas[r].actor else { return false };
    if amnesia {
        let blank = replicas.iter().filter(|s| s.blank.load(Ordering::Acquire)).count()
            + replicas.iter().filter(|s| matches!(s.restart, Some((_, None)))).count();
        if blank + 1 >= q {
            return false;
        }
    }
    let dev = fabric.devices().iter().find(|d| d.name() == format!("r{r}")).expect("replica device").clone();
    let Ok(mut cut) = fabric.power_cut_with(&dev, how) else { return false };
    shared.touch(Node::Replica(r));
    shared.sim.kill(actor);
    replicas[r].actor = None;
    let memory = if amnesia { None } else { cut.regions().first().map(|x| x.rkey()).and_then(|k| cut.take(k)) };
    shared.note(format!(
        "r{r} {} ({how}), back at step {back}",
        if amnesia { "crashed and restarts blank" } else { "crashed" }
    ));
    replicas[r].restart = Some((back, memory));
    true
}

/// Restarts the replicas whose time came (all of them if `step` is `None`).
fn restart_due(
    shared: &Arc<Shared>,
    fabric: &MockFabric,
    cfg: &Config,
    replicas: &mut [ReplicaSlot],
    step: Option<u64>,
) {
    for (r, slot) in replicas.iter_mut().enumerate() {
        let due = slot.restart.as_ref().is_some_and(|(at, _)| step.map_or(true, |s| *at <= s));
        if !due {
            continue;
        }
        let (_, memory) = slot.restart.take().expect("due");
        let blank = memory.is_none();
        if blank {
            slot.blank.store(true, Ordering::Release);
        }
        let flag = Arc::clone(&slot.blank);
        slot.actor = spawn_replica(shared, fabric, cfg, r, memory, &flag, false);
        shared.note(format!("r{r} restarted{}", if blank { " blank" } else { "" }));
    }
}

//! Deterministic simulation: the real code of a protocol (its writers, its servers, their
//! threads) run on a mock fabric one step at a time, in an order drawn from a seed, on a
//! virtual clock, so that a history that breaks the protocol replays exactly from its seed
//! (docs/simulation.md).
//!
//! ```
//! use rpma::mock::sim::Sim;
//! use rpma::mock::MockFabric;
//!
//! let sim = Sim::new(42);
//! let fabric = MockFabric::builder().device("a", &["10.0.0.1"]).simulation(&sim).build();
//! let a = sim.spawn("a", move || { /* the code of one actor, on the fabric */ drop(fabric) })?;
//! while !sim.is_done(a) {
//!     sim.step();
//! }
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! - **Actors** are threads started by [`Sim::spawn`] (or by the fabric's runtime,
//!   [`Transport::runtime`](rpma_core::Transport::runtime), from inside an actor: a protocol's
//!   own threads are actors too). Only one runs at a time: from one *scheduling point* to the
//!   next. The scheduling points are the fabric's calls (post, poll, connect, accept,
//!   disconnect, register, deregister, persist, the waits for events) and the runtime's
//!   pause, park and join.
//! - **The fabric** runs in the deferred mode with no thread of its own: a work request waits
//!   in its send queue until the simulation executes it, one per step; a connection's work
//!   executes in posting order (RC), connections interleave as the seed says.
//! - **Time** is virtual: each step adds [`Sim::quantum`]; when nothing can run before a
//!   deadline (every actor waits, no work is queued), the clock jumps to it. The runtime's
//!   [`now`](rpma_core::runtime::Runtime::now) is this clock, and so are the fabric's timeouts.
//! - **The controller** is the thread that calls [`Sim::step`]: it chooses the next step
//!   (an actor's, or a work request's execution, or a timer) from the seed, and may inject
//!   faults between steps: [`MockFabric::power_cut_with`](crate::MockFabric::power_cut_with),
//!   [`MockFabric::partition`](crate::MockFabric::partition),
//!   [`MockFabric::drop_connection`](crate::MockFabric::drop_connection), [`Sim::kill`],
//!   [`Sim::freeze`].
//!
//! Code that wants to be simulated takes its clock, pauses and threads from the runtime
//! (`rpma_core::runtime`'s rules) and holds no lock across a call into the fabric.

mod sched;

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::Waker;
use std::time::{Duration, Instant};

use rpma_core::runtime::{Join, JoinHandle, Runtime};

pub use sched::ActorId;
pub(crate) use sched::Sched;
use sched::Status;

use crate::engine::Engine;

/// The steps [`Sim::trace`] keeps.
const TRACE: usize = 4096;

/// What one [`Sim::step`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// Actor `id` ran from one scheduling point to the next (`at`: where it stopped).
    Actor {
        /// The actor.
        id: ActorId,
        /// The scheduling point it stopped at ("post", "poll", "connect", "wait", ...).
        at: &'static str,
    },
    /// One work request of a send queue executed (its bytes landed, or were read or flushed,
    /// and its completion was queued).
    Executed,
    /// A timer of the fabric fired (a disconnect's DREQ timing out).
    Timer,
    /// Nothing could run before this much virtual time passed: the clock jumped.
    Jumped(Duration),
    /// Nothing can ever run: every actor ended or waits without a deadline, and no work is
    /// queued.
    Idle,
}

/// One entry of the trace (formatted only when the trace is read).
#[derive(Clone, Debug)]
enum What {
    /// A note of the controller or a protocol.
    Note(String),
    /// An actor's step, to the scheduling point it stopped at.
    Actor(ActorId, &'static str),
    /// A work request executed.
    Executed(crate::engine::StepDone),
}

#[derive(Clone, Debug)]
struct Entry {
    at: Duration,
    what: What,
}

/// A deterministic simulation (see the module documentation). Cheap to clone (a handle).
#[derive(Clone)]
pub struct Sim {
    pub(crate) inner: Arc<SimInner>,
}

pub(crate) struct SimInner {
    pub(crate) sched: Arc<Sched>,
    rng: Mutex<fastrand::Rng>,
    /// The engines of the fabrics in the simulation (each runs its fabric's work and timers).
    engines: Mutex<Vec<Weak<Engine>>>,
    trace: Mutex<VecDeque<Entry>>,
    quantum: Duration,
    steps: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim").field("steps", &self.steps()).field("elapsed", &self.elapsed()).finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Sim {
    /// A simulation whose choices are drawn from `seed`, with a quantum of 1 µs.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self::with_quantum(seed, Duration::from_micros(1))
    }

    /// A simulation whose clock moves `quantum` per step.
    #[must_use]
    pub fn with_quantum(seed: u64, quantum: Duration) -> Self {
        Self {
            inner: Arc::new(SimInner {
                sched: Sched::new(),
                rng: Mutex::new(fastrand::Rng::with_seed(seed)),
                engines: Mutex::new(Vec::new()),
                trace: Mutex::new(VecDeque::with_capacity(TRACE)),
                quantum,
                steps: std::sync::atomic::AtomicU64::new(0),
            }),
        }
    }

    /// The clock moves this much per step.
    #[must_use]
    pub fn quantum(&self) -> Duration {
        self.inner.quantum
    }

    /// The runtime of the simulation's fabrics: its clock, pauses, parks and actors.
    #[must_use]
    pub fn runtime(&self) -> &dyn Runtime {
        &*self.inner
    }

    /// A fabric built with [`MockFabricBuilder::simulation`](crate::MockFabricBuilder::simulation)
    /// joins the simulation through its engine: its work requests and timers become steps.
    pub(crate) fn attach(&self, engine: &Arc<Engine>) {
        lock(&self.inner.engines).push(Arc::downgrade(engine));
    }

    /// Starts actor `name` running `f`; it runs when a step first chooses it.
    ///
    /// # Errors
    /// The error of creating its thread.
    pub fn spawn(&self, name: &str, f: impl FnOnce() + Send + 'static) -> io::Result<ActorId> {
        let id = self.inner.sched.spawn(name, Box::new(f))?;
        self.note(format!("spawn {name} (actor {id})"));
        Ok(id)
    }

    /// The virtual clock.
    #[must_use]
    pub fn now(&self) -> Instant {
        self.inner.sched.now()
    }

    /// The virtual time since the simulation began.
    #[must_use]
    pub fn elapsed(&self) -> Duration {
        self.inner.sched.lock().now
    }

    /// The steps taken so far.
    #[must_use]
    pub fn steps(&self) -> u64 {
        self.inner.steps.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Adds `what` to the trace (a controller's fault, a protocol's milestone).
    pub fn note(&self, what: impl Into<String>) {
        self.record(What::Note(what.into()));
    }

    fn record(&self, what: What) {
        let at = self.elapsed();
        let mut t = lock(&self.inner.trace);
        if t.len() == TRACE {
            t.pop_front();
        }
        t.push_back(Entry { at, what });
    }

    /// The last steps and notes, oldest first, each with its virtual time.
    #[must_use]
    pub fn trace(&self) -> Vec<String> {
        let entries: Vec<Entry> = lock(&self.inner.trace).iter().cloned().collect();
        entries
            .into_iter()
            .map(|e| {
                let what = match e.what {
                    What::Note(n) => n,
                    What::Actor(a, at) => format!("{}: {at}", self.name(a)),
                    What::Executed(x) => x.to_string(),
                };
                format!("{:>12.3?} {what}", e.at)
            })
            .collect()
    }

    /// Kills actor `a`: it unwinds at its next scheduling point (dropping what it holds, as a
    /// killed process's resources are released), and is run until it ends.
    pub fn kill(&self, a: ActorId) {
        self.inner.sched.kill(a);
        self.note(format!("kill {}", self.name(a)));
    }

    /// Does not run actor `a` for `span` of virtual time (a paused process: a GC pause, a
    /// stopped VM). Its deadlines pass meanwhile.
    pub fn freeze(&self, a: ActorId, span: Duration) {
        let mut g = self.inner.sched.lock();
        let until = g.now + span;
        if let Some(actor) = g.actors.get_mut(a) {
            actor.frozen_until = Some(until);
        }
        drop(g);
        self.note(format!("freeze {} for {span:?}", self.name(a)));
    }

    /// Whether actor `a` has ended.
    #[must_use]
    pub fn is_done(&self, a: ActorId) -> bool {
        self.inner.sched.lock().actors.get(a).map_or(true, |x| x.status == Status::Done)
    }

    /// Actor `a`'s name.
    #[must_use]
    pub fn name(&self, a: ActorId) -> String {
        self.inner.sched.lock().actors.get(a).map_or_else(|| format!("actor {a}"), |x| x.name.clone())
    }

    /// The actors that panicked (other than by [`Sim::kill`]), with their messages.
    #[must_use]
    pub fn panics(&self) -> Vec<(String, String)> {
        let g = self.inner.sched.lock();
        g.actors.iter().filter_map(|a| a.panic.clone().map(|p| (a.name.clone(), p))).collect()
    }

    /// The fabric changed (an event or completion queued, a fault injected): waiting actors
    /// look again.
    pub(crate) fn touch(&self) {
        self.inner.sched.touch();
    }

    /// A wait of the current actor until `deadline` or a change of the fabric; `false` (no
    /// wait) if the current thread is not an actor.
    pub(crate) fn wait(&self, deadline: Option<Instant>, at: &'static str) -> bool {
        match sched::current() {
            Some((s, me)) => {
                s.wait(me, deadline, at);
                true
            }
            None => false,
        }
    }

    fn engines(&self) -> Vec<Arc<Engine>> {
        let mut g = lock(&self.inner.engines);
        g.retain(|w| w.strong_count() > 0);
        g.iter().filter_map(Weak::upgrade).collect()
    }

    /// Takes one step: runs an actor that can run, executes a queued work request, or fires a
    /// due timer, chosen from the seed; or, if none can, moves the clock to the next deadline.
    pub fn step(&self) -> Step {
        self.inner.steps.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let engines = self.engines();
        let now = self.now();
        // The candidates, in a deterministic order: actors by id, then each fabric's queues
        // with work, then its due timers.
        let actors: Vec<ActorId> = {
            let g = self.inner.sched.lock();
            (0..g.actors.len()).filter(|&a| Sched::runnable(&g, a)).collect()
        };
        let work: Vec<(usize, usize)> =
            engines.iter().enumerate().flat_map(|(f, e)| (0..e.sim_ready()).map(move |q| (f, q))).collect();
        let timers: Vec<usize> = (0..engines.len()).filter(|&f| engines[f].sim_timer_due(now)).collect();
        let total = actors.len() + work.len() + timers.len();
        if total == 0 {
            let g = self.inner.sched.lock();
            let next = Sched::next_wake(&g);
            drop(g);
            let timer = engines.iter().filter_map(|e| e.sim_next_timer()).min();
            let next = match (next, timer.map(|t| t.saturating_duration_since(self.inner.sched.base))) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            return match next {
                Some(t) => {
                    let mut g = self.inner.sched.lock();
                    let jump = t.saturating_sub(g.now);
                    g.now = t.max(g.now);
                    Step::Jumped(jump)
                }
                None => Step::Idle,
            };
        }
        let pick = lock(&self.inner.rng).usize(..total);
        self.inner.sched.lock().now += self.inner.quantum;
        if pick < actors.len() {
            let a = actors[pick];
            self.inner.sched.run(a);
            let at = self.inner.sched.lock().actors[a].at;
            self.record(What::Actor(a, at));
            Step::Actor { id: a, at }
        } else if pick < actors.len() + work.len() {
            let (f, q) = work[pick - actors.len()];
            if let Some(what) = engines[f].sim_progress(q) {
                self.record(What::Executed(what));
            }
            self.touch();
            Step::Executed
        } else {
            let f = timers[pick - actors.len() - work.len()];
            engines[f].sim_fire_timer(now);
            self.note("timer");
            self.touch();
            Step::Timer
        }
    }

    /// Steps until `done` holds (checked before each step) or `max` steps were taken; returns
    /// whether `done` held. [`Step::Idle`] ends it too.
    pub fn run_until(&self, max: u64, mut done: impl FnMut() -> bool) -> bool {
        for _ in 0..max {
            if done() {
                return true;
            }
            if self.step() == Step::Idle {
                return done();
            }
        }
        done()
    }

    /// Kills every actor still running and steps until all ended (at most `max` steps).
    /// Returns whether they did.
    pub fn finish(&self, max: u64) -> bool {
        let live: Vec<ActorId> = {
            let g = self.inner.sched.lock();
            (0..g.actors.len()).filter(|&a| g.actors[a].status != Status::Done).collect()
        };
        for a in live {
            self.inner.sched.kill(a);
        }
        let sched = Arc::clone(&self.inner.sched);
        self.run_until(max, || sched.lock().actors.iter().all(|a| a.status == Status::Done))
    }
}

impl Runtime for SimInner {
    fn now(&self) -> Instant {
        self.sched.now()
    }

    fn pause(&self, until: Instant) {
        if let Some((s, me)) = sched::current() {
            s.wait(me, Some(until), "pause");
        }
    }

    fn park(&self, until: Option<Instant>) {
        if let Some((s, me)) = sched::current() {
            s.park(me, until);
        }
    }

    fn waker(&self) -> Waker {
        match sched::current() {
            Some((s, me)) => sched::waker_for(&s, me),
            None => Waker::from(Arc::new(sched::NoWake)),
        }
    }

    fn spawn(&self, name: &str, f: Box<dyn FnOnce() + Send>) -> io::Result<JoinHandle> {
        let id = self.sched.spawn(name, f)?;
        Ok(JoinHandle::new(Box::new(ActorJoin { sched: Arc::clone(&self.sched), id })))
    }
}

/// The join handle of an actor started through the runtime.
struct ActorJoin {
    sched: Arc<Sched>,
    id: ActorId,
}

impl Join for ActorJoin {
    fn join(self: Box<Self>) -> std::thread::Result<()> {
        if let Some((s, me)) = sched::current() {
            s.join(me, self.id);
        }
        match self.sched.lock().actors[self.id].panic.clone() {
            Some(p) => Err(Box::new(p)),
            None => Ok(()),
        }
    }

    fn is_finished(&self) -> bool {
        self.sched.lock().actors[self.id].status == Status::Done
    }
}

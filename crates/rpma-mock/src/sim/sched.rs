//! The simulation's scheduler: actors (threads that take turns, one at a time), the baton
//! that passes between them and the controller, and the virtual clock.
//!
//! Every actor is an OS thread, but only the holder of the baton runs; the others are parked at
//! a *scheduling point* (a call into the fabric, a pause, a park, a join). The controller (the
//! thread that calls [`Sim::step`](super::Sim::step)) hands the baton to one actor, which runs
//! to its next scheduling point and hands it back. No actor is ever parked while it holds a
//! lock another could need: scheduling points sit at the entries of the fabric's calls and in
//! the runtime's waits, where the mock holds none.

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

/// How long an actor may run without reaching a scheduling point before the controller gives up
/// on it (real time).
const STUCK: Duration = Duration::from_secs(60);

/// The payload an actor unwinds with when it is killed ([`Sim::kill`](super::Sim::kill)).
pub(crate) struct Killed;

/// An actor's identity in its simulation.
pub type ActorId = usize;

/// What an actor waits for at its scheduling point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    /// Started, not run yet.
    Starting,
    /// Runs (holds the baton).
    Running,
    /// At a scheduling point, ready to go on.
    Ready,
    /// Nothing to do before `until` unless the fabric changes (its generation moves past `gen`).
    Waiting { until: Option<Duration>, gen: u64 },
    /// Parked until `until` or its waker.
    Parked { until: Option<Duration> },
    /// Joining another actor.
    Joining { target: ActorId },
    /// Ended (returned, killed or panicked).
    Done,
}

pub(crate) struct Actor {
    pub(crate) name: String,
    thread: Option<Thread>,
    pub(crate) status: Status,
    /// Unwind at the next scheduling point.
    kill: bool,
    /// The park token (a waker was woken while it was not parked).
    woken: bool,
    /// Not scheduled before this time (a paused process).
    pub(crate) frozen_until: Option<Duration>,
    /// The message of a panic that was not a kill.
    pub(crate) panic: Option<String>,
    /// The label of its last scheduling point.
    pub(crate) at: &'static str,
}

pub(crate) struct State {
    /// Virtual time since `base`.
    pub(crate) now: Duration,
    /// Moves whenever the fabric's state changes (a completion, a connection event, a request,
    /// a fault): a waiting actor is worth running again.
    pub(crate) gen: u64,
    /// The actor holding the baton (`None`: the controller).
    running: Option<ActorId>,
    pub(crate) actors: Vec<Actor>,
    /// The controller's thread, unparked when an actor hands the baton back.
    controller: Option<Thread>,
}

/// The scheduler of one simulation.
pub(crate) struct Sched {
    state: Mutex<State>,
    /// Time zero of the virtual clock.
    pub(crate) base: Instant,
}

thread_local! {
    /// The simulation and actor of the current thread, if it is an actor.
    static CURRENT: std::cell::RefCell<Option<(Weak<Sched>, ActorId)>> = const { std::cell::RefCell::new(None) };
}

/// The current thread's simulation and actor.
pub(crate) fn current() -> Option<(Arc<Sched>, ActorId)> {
    CURRENT.with(|c| c.borrow().as_ref().and_then(|(w, a)| w.upgrade().map(|s| (s, *a))))
}

fn describe(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic".to_owned()
    }
}

impl Sched {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                now: Duration::ZERO,
                gen: 0,
                running: None,
                actors: Vec::new(),
                controller: None,
            }),
            base: Instant::now(),
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The virtual clock.
    pub(crate) fn now(&self) -> Instant {
        self.base + self.lock().now
    }

    fn since_base(&self, t: Instant) -> Duration {
        t.saturating_duration_since(self.base)
    }

    /// The fabric changed: waiting actors may go on.
    pub(crate) fn touch(&self) {
        self.lock().gen += 1;
    }

    /// Starts actor `name` running `f` (it runs when the controller first hands it the baton).
    pub(crate) fn spawn(self: &Arc<Self>, name: &str, f: Box<dyn FnOnce() + Send>) -> std::io::Result<ActorId> {
        let id = {
            let mut g = self.lock();
            g.actors.push(Actor {
                name: name.to_owned(),
                thread: None,
                status: Status::Starting,
                kill: false,
                woken: false,
                frozen_until: None,
                panic: None,
                at: "start",
            });
            g.actors.len() - 1
        };
        let me = Arc::downgrade(self);
        let sched = Arc::clone(self);
        let t = thread::Builder::new().name(format!("sim-{name}")).spawn(move || {
            CURRENT.with(|c| *c.borrow_mut() = Some((me, id)));
            sched.wait_for_baton(id);
            let killed_before = sched.lock().actors[id].kill;
            let r = if killed_before { Ok(()) } else { panic::catch_unwind(AssertUnwindSafe(f)) };
            let mut g = sched.lock();
            if let Err(p) = r {
                if !p.is::<Killed>() {
                    g.actors[id].panic = Some(describe(&*p));
                }
            }
            g.actors[id].status = Status::Done;
            g.running = None;
            if let Some(c) = &g.controller {
                c.unpark();
            }
            CURRENT.with(|c| *c.borrow_mut() = None);
        });
        match t {
            Ok(h) => {
                self.lock().actors[id].thread = Some(h.thread().clone());
                Ok(id)
            }
            Err(e) => {
                self.lock().actors[id].status = Status::Done;
                Err(e)
            }
        }
    }

    /// Parks the calling actor's thread until it holds the baton.
    fn wait_for_baton(&self, me: ActorId) {
        let mut g = self.lock();
        while g.running != Some(me) {
            drop(g);
            thread::park();
            g = self.lock();
        }
    }

    /// A scheduling point of actor `me`: hands the baton back with `status` and waits to be
    /// run again; a killed actor unwinds then (unless it is already unwinding).
    pub(crate) fn yield_as(&self, me: ActorId, status: Status, at: &'static str) {
        {
            let mut g = self.lock();
            let a = &mut g.actors[me];
            a.status = status;
            a.at = at;
            g.running = None;
            if let Some(c) = &g.controller {
                c.unpark();
            }
        }
        self.wait_for_baton(me);
        let kill = self.lock().actors[me].kill;
        if kill && !thread::panicking() {
            panic::resume_unwind(Box::new(Killed));
        }
    }

    /// A scheduling point of the current thread, if it is an actor of a simulation.
    pub(crate) fn point(at: &'static str) {
        if let Some((s, me)) = current() {
            s.yield_as(me, Status::Ready, at);
        }
    }

    /// Waits of the current actor: nothing to do before `until` unless the fabric changes.
    pub(crate) fn wait(&self, me: ActorId, until: Option<Instant>, at: &'static str) {
        let gen = self.lock().gen;
        self.yield_as(me, Status::Waiting { until: until.map(|t| self.since_base(t)), gen }, at);
    }

    /// Parks the current actor until `until` or its waker.
    pub(crate) fn park(&self, me: ActorId, until: Option<Instant>) {
        let token = std::mem::take(&mut self.lock().actors[me].woken);
        let status = if token { Status::Ready } else { Status::Parked { until: until.map(|t| self.since_base(t)) } };
        self.yield_as(me, status, "park");
        self.lock().actors[me].woken = false;
    }

    /// Wakes actor `a`'s park (now, or its next one).
    pub(crate) fn wake(&self, a: ActorId) {
        let mut g = self.lock();
        if let Some(actor) = g.actors.get_mut(a) {
            actor.woken = true;
        }
    }

    /// Waits, as actor `me`, for actor `target` to end.
    pub(crate) fn join(&self, me: ActorId, target: ActorId) {
        while self.lock().actors[target].status != Status::Done {
            self.yield_as(me, Status::Joining { target }, "join");
        }
    }

    /// Marks actor `a` to unwind at its next scheduling point (and makes it runnable).
    pub(crate) fn kill(&self, a: ActorId) {
        let mut g = self.lock();
        if let Some(actor) = g.actors.get_mut(a) {
            actor.kill = true;
            actor.frozen_until = None;
            if actor.status != Status::Done {
                actor.status = Status::Ready;
            }
        }
    }

    /// Whether actor `a` may run now.
    pub(crate) fn runnable(g: &State, a: ActorId) -> bool {
        let actor = &g.actors[a];
        if actor.frozen_until.is_some_and(|t| t > g.now) {
            return false;
        }
        match actor.status {
            Status::Starting | Status::Ready => true,
            Status::Running | Status::Done => false,
            Status::Waiting { until, gen } => gen != g.gen || until.is_some_and(|t| t <= g.now),
            Status::Parked { until } => actor.woken || until.is_some_and(|t| t <= g.now),
            Status::Joining { target } => g.actors[target].status == Status::Done,
        }
    }

    /// The earliest time an actor that cannot run now may run without the fabric changing.
    pub(crate) fn next_wake(g: &State) -> Option<Duration> {
        g.actors
            .iter()
            .filter(|a| a.status != Status::Done)
            .filter_map(|a| {
                let own = match a.status {
                    Status::Waiting { until, .. } | Status::Parked { until } => until,
                    _ => None,
                };
                match (a.frozen_until.filter(|t| *t > g.now), own) {
                    (Some(f), Some(o)) => Some(f.max(o)),
                    (Some(f), None) => Some(f),
                    (None, o) => o,
                }
            })
            .filter(|t| *t > g.now)
            .min()
    }

    /// Runs actor `a` until its next scheduling point (the controller's side of the baton).
    ///
    /// # Panics
    /// If the actor does not reach one within [`STUCK`] of real time: it blocks outside the
    /// simulation (a lock held across a call into the fabric, a real sleep or channel), which
    /// would hang every actor.
    pub(crate) fn run(&self, a: ActorId) {
        let mut g = self.lock();
        g.controller = Some(thread::current());
        g.running = Some(a);
        g.actors[a].status = Status::Running;
        if let Some(t) = &g.actors[a].thread {
            t.unpark();
        }
        let start = Instant::now();
        while g.running.is_some() {
            drop(g);
            thread::park_timeout(Duration::from_millis(100));
            g = self.lock();
            if g.running.is_some() && start.elapsed() > STUCK {
                let name = g.actors[a].name.clone();
                drop(g);
                panic!(
                    "simulation: actor {name} ran {STUCK:?} of real time without reaching a scheduling point: it \
                     blocks outside the simulation (a lock held across a call into the fabric, a real sleep, a \
                     channel or a thread of its own)"
                );
            }
        }
    }
}

/// A waker that ends one actor's park.
pub(crate) struct ActorWaker {
    pub(crate) sched: Weak<Sched>,
    pub(crate) actor: ActorId,
}

impl Wake for ActorWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(s) = self.sched.upgrade() {
            s.wake(self.actor);
        }
    }
}

/// A waker that wakes nobody (asked for outside an actor).
pub(crate) struct NoWake;

impl Wake for NoWake {
    fn wake(self: Arc<Self>) {}
}

/// A waker for actor `actor`.
pub(crate) fn waker_for(sched: &Arc<Sched>, actor: ActorId) -> Waker {
    Waker::from(Arc::new(ActorWaker { sched: Arc::downgrade(sched), actor }))
}

//! The fabric's progress engine: the queue pairs whose deferred work waits to run, and the
//! timers of the connection manager (a disconnect's DREQ timing out), served by one thread per
//! fabric, started the first time it is needed.
//!
//! The thread holds no strong reference to the fabric, and holds a queue pair only while it runs
//! that queue pair's work or timer, one at a time, marked as `holding`. A queue pair being torn
//! down is first forgotten ([`Engine::forget`]): taken off the lists, and waited for if the
//! thread holds it, so the thread never holds a torn-down queue pair, and dropping the last
//! handle of a connection frees it at once, on its owner's thread (nothing stays live behind a
//! deleted connection). The thread stops once the fabric is gone (`Engine::shutdown`, from the
//! fabric's drop).

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use rpma_core::{Error, Result};

const EAGAIN: i32 = 11;

/// A queue pair as the engine serves it: its deferred work and its CM timer (implemented by
/// the queue pairs, `qp/deferred.rs`). The engine and the completion queues that progress
/// their connections through it reach queue pairs only through this trait, so they sit below
/// them.
pub(crate) trait Progress: Send + Sync {
    /// Executes the queue pair's own waiting work requests in order: all of them if `drain`,
    /// else up to the first piece of a torn write. Returns whether anything executed.
    fn progress_own(self: Arc<Self>, drain: bool) -> bool;
    /// Progresses both send queues of its connection (a poll or a wait of one of its CQs).
    fn progress_conn(self: Arc<Self>, drain: bool);
    /// It was taken off the engine's list of queue pairs with work: a later post schedules it
    /// again.
    fn unscheduled(&self);
    /// Puts it back on the engine's list if work still waits.
    fn reschedule_if_waiting(self: Arc<Self>);
    /// Its CM timer fired.
    fn cm_timer_fired(&self);
    /// Executes its first waiting work request (or one piece of a torn write) and says what
    /// it was (a simulation's step); `None` if nothing executed.
    fn progress_one(self: Arc<Self>) -> Option<StepDone>;
}

/// A work request a simulation's step executed, as its trace shows it.
#[derive(Clone, Debug)]
pub(crate) struct StepDone {
    /// The device of the queue pair that posted it.
    pub(crate) device: String,
    pub(crate) qp_num: u32,
    pub(crate) op: rpma_core::transport::SendOp,
    pub(crate) len: usize,
    /// A read followed by the write that passed it.
    pub(crate) and_write: bool,
}

impl std::fmt::Display for StepDone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} qp {:#x}: {:?} of {} bytes", self.device, self.qp_num, self.op, self.len)?;
        if self.and_write {
            f.write_str(", and the write behind it")?;
        }
        Ok(())
    }
}

/// The identity of a queue pair in the engine's lists (its address, compared only).
fn id(w: &Weak<dyn Progress>) -> usize {
    w.as_ptr().cast::<()>() as usize
}

#[derive(Default)]
struct State {
    /// Queue pairs with deferred work, each at most once (`QpShared`'s `scheduled` flag).
    ready: Vec<Weak<dyn Progress>>,
    /// CM timers: when, and whose.
    timers: Vec<(Instant, Weak<dyn Progress>)>,
    /// The queue pair the thread holds now.
    holding: Option<usize>,
    /// The thread runs.
    running: bool,
    /// The fabric is gone: the thread ends.
    shutdown: bool,
}

/// The state shared by a fabric and its progress thread.
pub(crate) struct Engine {
    state: Mutex<State>,
    cv: Condvar,
    /// How long deferred work waits before the thread runs it (`None`: the thread never does).
    background: Option<Duration>,
    /// Simulated: no thread; a simulation's steps run the work and fire the timers.
    simulated: bool,
}

impl Engine {
    pub(crate) fn new(background: Option<Duration>, simulated: bool) -> Self {
        Self { state: Mutex::new(State::default()), cv: Condvar::new(), background, simulated }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts the thread if it does not run, so that work handed over later is served.
    ///
    /// # Errors
    /// `Provider` (`EAGAIN`, as `pthread_create`) naming `op` if the thread cannot be started.
    pub(crate) fn ensure_thread(self: &Arc<Self>, op: &'static str) -> Result<()> {
        let mut g = self.lock();
        if g.running || self.simulated {
            return Ok(());
        }
        let me = Arc::clone(self);
        std::thread::Builder::new().name("rpma-mock-progress".to_owned()).spawn(move || me.run()).map_err(|e| {
            Error::provider(op, e.raw_os_error().unwrap_or(EAGAIN))
                .with_detail(&format!("cannot start the mock fabric's progress thread: {e}"))
        })?;
        g.running = true;
        Ok(())
    }

    /// Queues `qp`'s deferred work (the caller set its `scheduled` flag).
    pub(crate) fn schedule(&self, qp: Weak<dyn Progress>) {
        self.lock().ready.push(qp);
        self.cv.notify_all();
    }

    /// One progress step of every queue pair with deferred work (`MockFabric::progress`):
    /// each executes its waiting work requests up to the first piece of a torn write and goes
    /// back on the list if work still waits. Returns whether anything executed.
    pub(crate) fn progress_ready(&self) -> bool {
        let ready = std::mem::take(&mut self.lock().ready);
        let mut ran = false;
        for q in ready.iter().filter_map(Weak::upgrade) {
            q.unscheduled();
            ran |= Arc::clone(&q).progress_own(false);
            q.reschedule_if_waiting();
        }
        ran
    }

    /// Fires `qp`'s CM timer at `at` (the fabric's clock; the thread must run:
    /// [`Engine::ensure_thread`]).
    pub(crate) fn timer(&self, at: Instant, qp: Weak<dyn Progress>) {
        self.lock().timers.push((at, qp));
        self.cv.notify_all();
    }

    /// Simulation: how many queue pairs have deferred work (the dead ones dropped).
    pub(crate) fn sim_ready(&self) -> usize {
        let mut g = self.lock();
        g.ready.retain(|w| w.strong_count() > 0);
        g.ready.len()
    }

    /// Simulation: executes one work request of the `i`-th queue pair with deferred work,
    /// which stays on the list while work waits. Says what executed.
    pub(crate) fn sim_progress(&self, i: usize) -> Option<StepDone> {
        let w = {
            let mut g = self.lock();
            if i >= g.ready.len() {
                return None;
            }
            g.ready.remove(i)
        };
        let q = w.upgrade()?;
        q.unscheduled();
        let what = Arc::clone(&q).progress_one();
        q.reschedule_if_waiting();
        what
    }

    /// Simulation: whether a timer is due at `now`.
    pub(crate) fn sim_timer_due(&self, now: Instant) -> bool {
        self.lock().timers.iter().any(|(at, _)| *at <= now)
    }

    /// Simulation: when the next timer is due.
    pub(crate) fn sim_next_timer(&self) -> Option<Instant> {
        self.lock().timers.iter().map(|(at, _)| *at).min()
    }

    /// Simulation: fires the first timer due at `now`.
    pub(crate) fn sim_fire_timer(&self, now: Instant) {
        let w = {
            let mut g = self.lock();
            let Some(i) = g.timers.iter().position(|(at, _)| *at <= now) else { return };
            g.timers.remove(i).1
        };
        if let Some(q) = w.upgrade() {
            q.cm_timer_fired();
        }
    }

    /// Forgets `qp` (being torn down; it schedules nothing any more): takes it off the lists and
    /// waits until the thread does not hold it. Called by its owner, holding no lock.
    pub(crate) fn forget<P: Progress>(&self, qp: &Arc<P>) {
        let me = Arc::as_ptr(qp).cast::<()>() as usize;
        let mut g = self.lock();
        g.ready.retain(|w| id(w) != me);
        g.timers.retain(|(_, w)| id(w) != me);
        while g.holding == Some(me) {
            g = self.cv.wait(g).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Ends the thread (the fabric is gone).
    pub(crate) fn shutdown(&self) {
        self.lock().shutdown = true;
        self.cv.notify_all();
    }

    /// Runs `f` on the queue pair `w` names, if it is alive, holding it meanwhile (`g` is the
    /// engine's lock, released while `f` runs and taken again).
    fn hold<'a>(
        &'a self,
        mut g: MutexGuard<'a, State>,
        w: &Weak<dyn Progress>,
        f: impl FnOnce(Arc<dyn Progress>),
    ) -> MutexGuard<'a, State> {
        let Some(q) = w.upgrade() else { return g };
        g.holding = Some(id(w));
        drop(g);
        // `f` takes the handle and drops it before the mark: whoever waits in `forget` holds
        // the last one.
        f(q);
        let mut g = self.lock();
        g.holding = None;
        self.cv.notify_all();
        g
    }

    /// The thread: fires the timers when due, and runs deferred work about `self.background`
    /// after it was handed over (never, if `None`), one queue pair at a time.
    fn run(&self) {
        let background = self.background;
        let mut delayed = false;
        let mut g = self.lock();
        loop {
            if g.shutdown {
                g.running = false;
                return;
            }
            let now = Instant::now();
            if let Some(i) = g.timers.iter().position(|(at, _)| *at <= now) {
                let (_, w) = g.timers.swap_remove(i);
                g = self.hold(g, &w, |q| q.cm_timer_fired());
                continue;
            }
            if let (Some(delay), false) = (background, g.ready.is_empty()) {
                if !delayed {
                    // The work waits its delay; what comes meanwhile runs with it.
                    drop(g);
                    std::thread::sleep(delay);
                    delayed = true;
                    g = self.lock();
                    continue;
                }
                if let Some(w) = g.ready.pop() {
                    g = self.hold(g, &w, |q| {
                        q.unscheduled();
                        q.progress_own(true);
                    });
                }
                continue;
            }
            delayed = false;
            let wait = g
                .timers
                .iter()
                .map(|(at, _)| at.saturating_duration_since(now))
                .min()
                .unwrap_or(Duration::from_secs(3600));
            g = self.cv.wait_timeout(g, wait).unwrap_or_else(PoisonError::into_inner).0;
        }
    }
}

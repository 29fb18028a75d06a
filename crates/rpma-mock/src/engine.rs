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

use crate::qp::{cm_timer_fired, progress_qp, unscheduled, QpShared};

const EAGAIN: i32 = 11;

/// The identity of a queue pair in the engine's lists (its address, compared only).
fn id(w: &Weak<QpShared>) -> usize {
    w.as_ptr() as usize
}

#[derive(Default)]
struct State {
    /// Queue pairs with deferred work, each at most once (`QpShared`'s `scheduled` flag).
    ready: Vec<Weak<QpShared>>,
    /// CM timers: when, and whose.
    timers: Vec<(Instant, Weak<QpShared>)>,
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
}

impl Engine {
    pub(crate) fn new(background: Option<Duration>) -> Self {
        Self { state: Mutex::new(State::default()), cv: Condvar::new(), background }
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
        if g.running {
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
    pub(crate) fn schedule(&self, qp: Weak<QpShared>) {
        self.lock().ready.push(qp);
        self.cv.notify_all();
    }

    /// Takes the queue pairs with deferred work (for `MockFabric::progress`).
    pub(crate) fn take_ready(&self) -> Vec<Weak<QpShared>> {
        std::mem::take(&mut self.lock().ready)
    }

    /// Fires `qp`'s CM timer after `after` (the thread must run: [`Engine::ensure_thread`]).
    pub(crate) fn timer(&self, after: Duration, qp: Weak<QpShared>) {
        let at = Instant::now().checked_add(after).unwrap_or_else(Instant::now);
        self.lock().timers.push((at, qp));
        self.cv.notify_all();
    }

    /// Forgets `qp` (being torn down; it schedules nothing any more): takes it off the lists and
    /// waits until the thread does not hold it. Called by its owner, holding no lock.
    pub(crate) fn forget(&self, qp: &Arc<QpShared>) {
        let me = Arc::as_ptr(qp) as usize;
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
        w: &Weak<QpShared>,
        f: impl FnOnce(&Arc<QpShared>),
    ) -> MutexGuard<'a, State> {
        let Some(q) = w.upgrade() else { return g };
        g.holding = Some(id(w));
        drop(g);
        f(&q);
        // Released before the mark: whoever waits in `forget` holds the last handle.
        drop(q);
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
                g = self.hold(g, &w, |q| cm_timer_fired(q));
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
                        unscheduled(q);
                        progress_qp(q, true);
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

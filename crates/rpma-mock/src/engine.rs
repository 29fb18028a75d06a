//! The fabric's progress engine: the queue pairs whose deferred work waits to run, and the
//! timers of the connection manager (a disconnect's DREQ timing out), served by one thread per
//! fabric, started the first time it is needed.
//!
//! The thread holds no strong reference to the fabric or a queue pair between two pieces of work:
//! it stops once the fabric is gone (`Engine::shutdown`, from the fabric's drop), and a queue pair
//! dropped meanwhile is skipped.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use rpma_core::{Error, Result};

use crate::qp::{cm_timer_fired, progress_qp, unscheduled, QpShared};

const EAGAIN: i32 = 11;

#[derive(Default)]
struct State {
    /// Queue pairs with deferred work, each at most once (`QpShared`'s `scheduled` flag).
    ready: Vec<Weak<QpShared>>,
    /// CM timers: when, and whose.
    timers: Vec<(Instant, Weak<QpShared>)>,
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

    /// Ends the thread (the fabric is gone).
    pub(crate) fn shutdown(&self) {
        self.lock().shutdown = true;
        self.cv.notify_all();
    }

    /// The thread: runs deferred work about `self.background` after it was handed over (never, if
    /// `None`) and fires the timers when due.
    fn run(&self) {
        let background = self.background;
        let mut g = self.lock();
        loop {
            if g.shutdown {
                g.running = false;
                return;
            }
            let now = Instant::now();
            let (due, later): (Vec<_>, Vec<_>) = g.timers.drain(..).partition(|(at, _)| *at <= now);
            g.timers = later;
            if !due.is_empty() {
                drop(g);
                for (_, q) in &due {
                    if let Some(q) = q.upgrade() {
                        cm_timer_fired(&q);
                    }
                }
                g = self.lock();
                continue;
            }
            if let (Some(delay), false) = (background, g.ready.is_empty()) {
                // The work waits its delay (what comes meanwhile runs with it), then runs whole.
                drop(g);
                std::thread::sleep(delay);
                let work = self.take_ready();
                for q in work.iter().filter_map(Weak::upgrade) {
                    unscheduled(&q);
                    progress_qp(&q, true);
                }
                g = self.lock();
                continue;
            }
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

//! The fabric's progress engine: the queue pairs whose deferred work waits to run, served by one
//! thread per fabric, started the first time it is needed.
//!
//! The thread holds no strong reference to the fabric or a queue pair between two pieces of work:
//! it stops once the fabric is gone (`Engine::shutdown`, from the fabric's drop), and a queue pair
//! dropped meanwhile is skipped.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use rpma_core::{Error, Result};

use crate::qp::{progress_qp, unscheduled, QpShared};

const EAGAIN: i32 = 11;

#[derive(Default)]
struct State {
    /// Queue pairs with deferred work, each at most once (`QpShared`'s `scheduled` flag).
    ready: Vec<Weak<QpShared>>,
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

    /// Ends the thread (the fabric is gone).
    pub(crate) fn shutdown(&self) {
        self.lock().shutdown = true;
        self.cv.notify_all();
    }

    /// The thread: runs deferred work about `self.background` after it was handed over (never,
    /// if `None`).
    fn run(&self) {
        let background = self.background;
        let mut g = self.lock();
        loop {
            if g.shutdown {
                g.running = false;
                return;
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
            g = self.cv.wait(g).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

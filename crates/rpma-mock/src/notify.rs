//! Event queues (CM event channels, completion channels, a listener's requests) whose file
//! descriptor exists only once asked for.
//!
//! A blocking wait sleeps on a condition variable, so a queue nobody asks the fd of costs no fd
//! at all (1000 connections fit in the default limit of 1024 fds). Asked for, the fd is one
//! `eventfd`, readable while an event is pending, so `poll`/`epoll` work on it exactly as on a
//! completion or CM event channel; `O_NONBLOCK` set on it by the user makes the waits
//! non-blocking. Each push writes the eventfd once (an edge for edge-triggered `epoll`, as the
//! byte of a channel), and taking the last pending event reads it back to zero.
//!
//! If the eventfd cannot be created (`EMFILE`), the queue hands out its fabric's *broken-channel
//! fd* instead (made with the fabric, always readable), and its waits fail with the errno from
//! then on: the caller polls, wakes and gets the error, never a hang.

use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::sys::eventfd::{EfdFlags, EventFd};

use crate::counters::Live;

/// How often a blocking wait that must also run deferred work wakes to run it.
const PROGRESS_TICK: Duration = Duration::from_millis(1);

struct State<E> {
    queue: VecDeque<E>,
    /// The eventfd's counter is not zero (written since it was last read back).
    signalled: bool,
    /// The errno of a failed creation of the eventfd: every wait fails with it.
    broken: Option<i32>,
}

/// A queue of events with a lazily created fd (see the module documentation).
pub(crate) struct Notifier<E> {
    state: Mutex<State<E>>,
    cv: Condvar,
    fd: OnceLock<EventFd>,
    /// The fabric's broken-channel fd.
    broken_fd: Arc<EventFd>,
    /// The simulation the fabric runs in: a push moves its generation (waiting actors look
    /// again), and a wait is a scheduling point on its clock.
    sim: Option<crate::sim::Sim>,
    _live: Live,
}

impl<E> Notifier<E> {
    /// A queue without fd; `broken_fd` is handed out if its own cannot be created.
    pub(crate) fn new(live: Live, broken_fd: Arc<EventFd>, sim: Option<crate::sim::Sim>) -> Self {
        Self {
            state: Mutex::new(State { queue: VecDeque::new(), signalled: false, broken: None }),
            cv: Condvar::new(),
            fd: OnceLock::new(),
            broken_fd,
            sim,
            _live: live,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<E>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn push(&self, e: E) {
        let mut g = self.lock();
        g.queue.push_back(e);
        if let Some(fd) = self.fd.get() {
            // Never blocks: the counter cannot reach its maximum with bounded event sources.
            let _ = fd.write(1);
            g.signalled = true;
        }
        drop(g);
        self.cv.notify_all();
        if let Some(s) = &self.sim {
            s.touch();
        }
    }

    /// Whether the user made the fd non-blocking (no fd: blocking).
    fn nonblocking(&self) -> bool {
        self.fd.get().is_some_and(|fd| {
            fcntl(fd.as_raw_fd(), FcntlArg::F_GETFL)
                .is_ok_and(|fl| OFlag::from_bits_truncate(fl).contains(OFlag::O_NONBLOCK))
        })
    }

    /// Takes the next event: waits for one unless the fd is non-blocking (then `Ok(None)`).
    /// `progress` (deferred mode) runs before each look and every millisecond while waiting:
    /// the work whose completion is awaited may still have to execute.
    pub(crate) fn pop_with(&self, progress: Option<&dyn Fn()>) -> std::io::Result<Option<E>> {
        self.pop_until(progress, None)
    }

    /// [`Notifier::pop_with`] waiting until `deadline` at most, whatever the fd's mode (and
    /// without making the fd): `Ok(None)` if nothing came by then.
    pub(crate) fn pop_until(
        &self,
        progress: Option<&dyn Fn()>,
        deadline: Option<Instant>,
    ) -> std::io::Result<Option<E>> {
        let nonblocking = deadline.is_none() && self.nonblocking();
        if let Some(p) = progress {
            p();
        }
        if let Some(sim) = &self.sim {
            return self.pop_simulated(sim, nonblocking, deadline);
        }
        let mut g = self.lock();
        loop {
            if let Some(taken) = self.take(&mut g) {
                return taken.map(Some);
            }
            if nonblocking {
                return Ok(None);
            }
            let left = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Ok(None),
                },
            };
            g = match (progress, left) {
                (None, None) => self.cv.wait(g).unwrap_or_else(PoisonError::into_inner),
                (None, Some(left)) => self.cv.wait_timeout(g, left).unwrap_or_else(PoisonError::into_inner).0,
                (Some(p), left) => {
                    let tick = left.map_or(PROGRESS_TICK, |l| l.min(PROGRESS_TICK));
                    let (g, _) = self.cv.wait_timeout(g, tick).unwrap_or_else(PoisonError::into_inner);
                    drop(g);
                    p();
                    self.lock()
                }
            };
        }
    }

    /// The next event, or the errno of a broken channel; `None` if the queue is empty. Taking the
    /// last event reads the eventfd back to zero.
    fn take(&self, g: &mut State<E>) -> Option<std::io::Result<E>> {
        if let Some(errno) = g.broken {
            return Some(Err(std::io::Error::from_raw_os_error(errno)));
        }
        let e = g.queue.pop_front()?;
        if g.queue.is_empty() && g.signalled {
            if let Some(fd) = self.fd.get() {
                // The counter is not zero: the read returns at once.
                let _ = fd.read();
            }
            g.signalled = false;
        }
        Some(Ok(e))
    }

    /// [`Notifier::pop_until`] in a simulation: each look that finds nothing is a scheduling
    /// point of the waiting actor, on the simulation's clock.
    fn pop_simulated(
        &self,
        sim: &crate::sim::Sim,
        nonblocking: bool,
        deadline: Option<Instant>,
    ) -> std::io::Result<Option<E>> {
        loop {
            if let Some(taken) = self.take(&mut self.lock()) {
                return taken.map(Some);
            }
            if nonblocking || deadline.is_some_and(|d| sim.now() >= d) {
                return Ok(None);
            }
            if !sim.wait(deadline, "wait") {
                // Not an actor of the simulation: nothing could make progress while it waits.
                return Ok(None);
            }
        }
    }

    /// The fd, created now if it was never asked for.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        if let Some(fd) = self.fd.get() {
            return fd.as_fd();
        }
        let mut g = self.lock();
        if self.fd.get().is_none() && g.broken.is_none() {
            match EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC) {
                Ok(fd) => {
                    if !g.queue.is_empty() {
                        let _ = fd.write(1);
                        g.signalled = true;
                    }
                    let _ = self.fd.set(fd);
                }
                Err(e) => {
                    rpma_core::rpma_log!(Error, "mock: cannot create a channel's fd ({e}); its waits fail from now on");
                    g.broken = Some(e as i32);
                    drop(g);
                    self.cv.notify_all();
                }
            }
        }
        self.fd.get().map_or_else(|| self.broken_fd.as_fd(), AsFd::as_fd)
    }

    /// Drains every pending event without blocking.
    pub(crate) fn drain(&self) -> Vec<E> {
        let mut g = self.lock();
        if g.signalled {
            if let Some(fd) = self.fd.get() {
                let _ = fd.read();
            }
            g.signalled = false;
        }
        g.queue.drain(..).collect()
    }
}

impl<E> std::fmt::Debug for Notifier<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier").field("fd", &self.fd.get().map(AsRawFd::as_raw_fd)).finish_non_exhaustive()
    }
}

/// The fabric's broken-channel fd: readable forever (its counter is never read).
///
/// # Errors
/// The errno of `eventfd`.
pub(crate) fn broken_channel_fd() -> nix::Result<Arc<EventFd>> {
    EventFd::from_value_and_flags(1, EfdFlags::EFD_CLOEXEC).map(Arc::new)
}

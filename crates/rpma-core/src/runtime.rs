//! Where code built on rpma takes its time, its pauses and its threads: the transport's
//! [`Runtime`].
//!
//! A protocol written on rpma (a replicated log, a lease, a failure detector) waits: for a
//! completion until a deadline, for a connection attempt's backoff, for a request from another
//! thread. If it takes the time from [`Instant::now`], spins with `std::thread::yield_now` and
//! starts threads with `std::thread::spawn`, it can only be tested in real time, where the
//! interleavings that break it are rare and never replay. Taken from
//! [`Transport::runtime`](crate::Transport::runtime) instead, the same code runs unchanged on
//! real devices ([`StdRuntime`]: the real clock and real threads) and under a deterministic
//! simulation (the mock fabric's `rpma_mock::sim`: a virtual clock, and one thread at a time in
//! an order drawn from a seed, so that a failing history replays from its seed).
//!
//! The rules for code that wants to be simulated: read the time with [`Runtime::now`]; when a
//! poll finds nothing, call [`Runtime::pause`] with the deadline; block a thread only in
//! [`Runtime::park`] (woken by [`Runtime::waker`]) or in rpma's own waits; start threads with
//! [`Runtime::spawn`] and join them through the [`JoinHandle`] it gives; hold no lock across
//! any of these.

use std::fmt;
use std::io;
use std::sync::Arc;
use std::task::{Wake, Waker};
use std::thread::{self, Thread};
use std::time::Instant;

/// A source of time, pauses, parking and threads (see the module documentation).
pub trait Runtime: Send + Sync + 'static {
    /// The time deadlines are measured against.
    fn now(&self) -> Instant;

    /// The calling thread polled and found nothing to do, and has nothing to do before `until`
    /// unless the transport's state changes (a completion, a connection event, a request).
    /// [`StdRuntime`]: `std::thread::yield_now` (the caller spins); a simulation: a scheduling
    /// point.
    fn pause(&self, until: Instant);

    /// Blocks the calling thread until `until` (`None`: without a deadline) or until a waker
    /// from [`Runtime::waker`] taken on this thread is woken, whichever comes first. It may
    /// return earlier (as `std::thread::park_timeout` may): callers check what they wait for.
    fn park(&self, until: Option<Instant>);

    /// A waker that ends the calling thread's [`Runtime::park`] (now, or the next one if it is
    /// not parked).
    fn waker(&self) -> Waker;

    /// Starts a thread named `name` running `f`.
    ///
    /// # Errors
    /// The error of creating the thread.
    fn spawn(&self, name: &str, f: Box<dyn FnOnce() + Send>) -> io::Result<JoinHandle>;
}

/// What a runtime's thread gives its [`JoinHandle`].
pub trait Join: Send {
    /// Waits for the thread to end; `Err` with its panic's payload if it panicked.
    ///
    /// # Errors
    /// The payload of the thread's panic.
    fn join(self: Box<Self>) -> thread::Result<()>;
    /// Whether the thread has ended.
    fn is_finished(&self) -> bool;
}

/// A thread started by [`Runtime::spawn`].
pub struct JoinHandle {
    inner: Box<dyn Join>,
}

impl JoinHandle {
    /// A handle over a runtime's own thread.
    #[must_use]
    pub fn new(inner: Box<dyn Join>) -> Self {
        Self { inner }
    }

    /// Waits for the thread to end (in a simulation, letting the others run meanwhile).
    ///
    /// # Errors
    /// The payload of the thread's panic.
    pub fn join(self) -> thread::Result<()> {
        self.inner.join()
    }

    /// Whether the thread has ended.
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.inner.is_finished()
    }
}

impl fmt::Debug for JoinHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle").field("finished", &self.is_finished()).finish()
    }
}

/// The real clock and real threads: what every transport gives unless it simulates.
#[derive(Clone, Copy, Debug, Default)]
pub struct StdRuntime;

/// Unparks one thread.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

impl Join for thread::JoinHandle<()> {
    fn join(self: Box<Self>) -> thread::Result<()> {
        (*self).join()
    }

    fn is_finished(&self) -> bool {
        thread::JoinHandle::is_finished(self)
    }
}

impl Runtime for StdRuntime {
    #[inline]
    fn now(&self) -> Instant {
        Instant::now()
    }

    #[inline]
    fn pause(&self, _until: Instant) {
        thread::yield_now();
    }

    fn park(&self, until: Option<Instant>) {
        match until {
            None => thread::park(),
            Some(t) => {
                if let Some(left) = t.checked_duration_since(Instant::now()) {
                    thread::park_timeout(left);
                }
            }
        }
    }

    fn waker(&self) -> Waker {
        Waker::from(Arc::new(Unpark(thread::current())))
    }

    fn spawn(&self, name: &str, f: Box<dyn FnOnce() + Send>) -> io::Result<JoinHandle> {
        let t = thread::Builder::new().name(name.to_owned()).spawn(f)?;
        Ok(JoinHandle::new(Box::new(t)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    #[test]
    fn a_parked_thread_is_woken_by_its_waker_and_joined() {
        let rt = StdRuntime;
        let flag = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let f = Arc::clone(&flag);
        let h = rt
            .spawn(
                "park-test",
                Box::new(move || {
                    tx.send(StdRuntime.waker()).unwrap();
                    while !f.load(Ordering::Acquire) {
                        StdRuntime.park(Some(Instant::now() + Duration::from_secs(30)));
                    }
                }),
            )
            .unwrap();
        let waker = rx.recv().unwrap();
        flag.store(true, Ordering::Release);
        waker.wake();
        h.join().unwrap();
    }

    #[test]
    fn park_returns_at_its_deadline() {
        let t = Instant::now();
        StdRuntime.park(Some(t + Duration::from_millis(20)));
        // Parking may end early (spuriously), never much later than asked.
        assert!(t.elapsed() < Duration::from_secs(10));
        StdRuntime.park(Some(t));
    }
}

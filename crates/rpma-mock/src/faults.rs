//! Fault injection: make the N-th backend call fail with a chosen errno.
//!
//! Every provider call the mock makes on behalf of a public operation (`ibv_post_send`,
//! `rdma_connect`, `ibv_create_cq`, ...) passes through [`Faults::check`] with the name of the
//! libibverbs/librdmacm function it stands for. Counting is off until a plan is armed, so the
//! data path pays one relaxed load when nothing is injected.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use rpma_core::{Error, Result};

/// The fault-injection state of a fabric.
#[derive(Debug, Default)]
pub struct Faults {
    armed: AtomicBool,
    calls: AtomicU64,
    fail_at: AtomicU64,
    errno: AtomicI32,
    only: Mutex<Option<&'static str>>,
    log: Mutex<Vec<&'static str>>,
    record: AtomicBool,
    also: Mutex<Option<Also>>,
}

/// A second fault, counted on the calls of one name only (see [`Faults::also_fail`]).
#[derive(Debug)]
struct Also {
    name: &'static str,
    nth: u64,
    errno: i32,
    calls: u64,
}

impl Faults {
    /// Starts counting calls (of every name, or only of `only`), failing none. The count so far
    /// is reset.
    pub fn count_calls(&self, only: Option<&'static str>) {
        self.arm(0, 0, only);
    }

    /// Makes the `nth` call (1-based, counted from now; of the name `only` if given) fail with
    /// `errno`. Calls after it succeed again.
    pub fn fail_nth(&self, nth: u64, errno: i32, only: Option<&'static str>) {
        self.arm(nth, errno, only);
    }

    /// Adds a second fault to the plan armed by [`Faults::fail_nth`] or [`Faults::count_calls`]
    /// (arming again drops it): the `nth` call (1-based, counted from now) **of `name`** fails
    /// with `errno`, whatever the first plan counts. With two faults in one operation (a step
    /// fails, then a cleanup step fails too) the caller must see the first error.
    pub fn also_fail(&self, nth: u64, errno: i32, name: &'static str) {
        *self.also.lock().unwrap_or_else(PoisonError::into_inner) = Some(Also { name, nth, errno, calls: 0 });
    }

    fn arm(&self, nth: u64, errno: i32, only: Option<&'static str>) {
        *self.also.lock().unwrap_or_else(PoisonError::into_inner) = None;
        *self.only.lock().unwrap_or_else(PoisonError::into_inner) = only;
        self.log.lock().unwrap_or_else(PoisonError::into_inner).clear();
        self.calls.store(0, Ordering::SeqCst);
        self.fail_at.store(nth, Ordering::SeqCst);
        self.errno.store(errno, Ordering::SeqCst);
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Also records the name of every counted call (see [`Faults::recorded`]).
    pub fn record_names(&self, on: bool) {
        self.record.store(on, Ordering::SeqCst);
    }

    /// The names of the counted calls since arming, in order (if recording).
    #[must_use]
    pub fn recorded(&self) -> Vec<&'static str> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Stops counting and injecting.
    pub fn disarm(&self) {
        self.armed.store(false, Ordering::SeqCst);
    }

    /// Calls counted since arming.
    #[must_use]
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// Passes a provider call named `name`, or fails it if it is the chosen one.
    ///
    /// # Errors
    /// `Provider` with the chosen errno for the chosen call.
    #[inline]
    pub fn check(&self, name: &'static str) -> Result<()> {
        if !self.armed.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.check_slow(name)
    }

    #[cold]
    fn check_slow(&self, name: &'static str) -> Result<()> {
        let first = self.check_first(name);
        let second = self.check_also(name);
        first.and(second)
    }

    fn check_also(&self, name: &'static str) -> Result<()> {
        let mut g = self.also.lock().unwrap_or_else(PoisonError::into_inner);
        match g.as_mut() {
            Some(a) if a.name == name => {
                a.calls += 1;
                if a.calls == a.nth {
                    return Err(Error::provider(name, a.errno).with_detail("injected second fault"));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn check_first(&self, name: &'static str) -> Result<()> {
        if let Some(only) = *self.only.lock().unwrap_or_else(PoisonError::into_inner) {
            if only != name {
                return Ok(());
            }
        }
        if self.record.load(Ordering::SeqCst) {
            self.log.lock().unwrap_or_else(PoisonError::into_inner).push(name);
        }
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if n == self.fail_at.load(Ordering::SeqCst) {
            let errno = self.errno.load(Ordering::SeqCst);
            return Err(Error::provider(name, errno).with_detail("injected fault"));
        }
        Ok(())
    }
}

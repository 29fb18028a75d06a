//! Timeouts of the waits of a connection or an endpoint: a limit set once, applied to every
//! wait, so that a lost peer cannot hang a task.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use rpma_core::{Error, ErrorKind, Result};
use tokio::time::Sleep;

/// The limit of every wait of one object: none, or a duration (stored in nanoseconds, 0: none).
#[derive(Debug, Default)]
pub(crate) struct Limit(AtomicU64);

impl Limit {
    /// Sets the limit (`None`: wait as long as it takes).
    ///
    /// # Errors
    /// `InvalidInput` for a zero duration, outside a tokio runtime, or on a runtime without timers.
    pub(crate) fn set(&self, op: &'static str, limit: Option<Duration>) -> Result<()> {
        let nanos = match limit {
            None => 0,
            Some(d) if d.is_zero() => {
                return Err(Error::invalid_input(op, "the timeout is zero (to give up at once, drop the future)"));
            }
            Some(d) => {
                check_timers(op)?;
                u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
            }
        };
        self.0.store(nanos, Ordering::Relaxed);
        Ok(())
    }

    /// The limit, if any.
    pub(crate) fn get(&self) -> Option<Duration> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            n => Some(Duration::from_nanos(n)),
        }
    }
}

/// Fails unless the current tokio runtime has timers (tokio panics when a timer is made on a
/// runtime without them; the panic is caught and reported).
fn check_timers(op: &'static str) -> Result<()> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(Error::invalid_input(op, "not called from a tokio runtime"));
    }
    match catch_unwind(AssertUnwindSafe(|| drop(tokio::time::sleep(Duration::from_secs(1))))) {
        Ok(()) => Ok(()),
        Err(_) => Err(Error::invalid_input(
            op,
            "the tokio runtime has timers disabled (build it with enable_time or enable_all)",
        )),
    }
}

/// The deadline of one wait: started the first time the wait would sleep, so a wait that never
/// sleeps makes no timer.
#[derive(Debug, Default)]
pub(crate) struct Deadline {
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Deadline {
    /// Polls the deadline of a wait limited to `limit`: `Ready(err)` once it passed, `err`
    /// being the error of kind `kind` (`NoCompletion`, `NoEvent`) saying what timed out.
    pub(crate) fn poll(
        &mut self,
        cx: &mut Context<'_>,
        limit: Option<Duration>,
        op: &'static str,
        kind: ErrorKind,
        what: &str,
    ) -> Poll<Error> {
        let Some(limit) = limit else { return Poll::Pending };
        let sleep = self.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => {
                Poll::Ready(Error::new(kind, op).with_detail(&format!("timed out after {limit:?} {what}")))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

//! The one wait loop of a connection's completions: every future that waits for something the
//! CQs bring (its operation's completion, a free send-queue slot, an unclaimed completion) runs
//! it with a check of its own.
//!
//! One round, under the connection's lock: the check; if it finds nothing, a poll of the CQs
//! (routing what comes, waking the futures it belongs to) and the check again. If still nothing,
//! the future sleeps until one of: a completion channel becomes readable (its event is then
//! taken, which re-arms the CQ, and the round starts over: a CQ is re-armed before it is polled,
//! so no completion is missed), another future routes something to it (the check registered
//! the task's waker), or the connection's timeout passes.
//!
//! Each wait holds its own readiness futures (`AsyncFd::readable`), which tokio wakes all
//! together, so any number of futures of any number of tasks may wait at once, and dropping any
//! of them wakes nobody else's duty away.

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::task::{Poll, Waker};

use rpma_core::{ErrorKind, Result, Transport};
use tokio::io::unix::AsyncFdReadyGuard;

use crate::channel::Which;
use crate::conn::AsyncConn;
use crate::fd::{io_error, Watched};
use crate::state::Inner;
use crate::timeout::Deadline;

/// What one poll of a wait found.
enum Woke<'a, R> {
    Done(R),
    Readable(Which, AsyncFdReadyGuard<'a, Watched>),
}

impl<T: Transport> AsyncConn<T> {
    /// Runs rounds of `check` until it returns something. `check` gets the connection's state
    /// and the waker to register if it finds nothing; `what` names the wait in a timeout's
    /// error ("waiting for ...").
    ///
    /// # Errors
    /// What `check` returns; as [`Cq::poll`](rpma_core::Cq::poll) and
    /// [`Cq::wait`](rpma_core::Cq::wait); [`NoCompletion`](ErrorKind::NoCompletion) when the
    /// connection's timeout passes.
    pub(crate) async fn wait_for<R>(
        &self,
        op: &'static str,
        what: &str,
        mut check: impl FnMut(&mut Inner<T>, &Waker) -> Option<Result<R>>,
    ) -> Result<R> {
        let mut deadline = Deadline::default();
        loop {
            let woke = {
                let mut main = pin!(self.channels.main.readable());
                let mut receive = pin!(async {
                    match &self.channels.receive {
                        Some(fd) => fd.readable().await,
                        None => std::future::pending().await,
                    }
                });
                poll_fn(|cx| {
                    {
                        let mut inner = self.lock();
                        if let Some(r) = check(&mut inner, cx.waker()) {
                            return Poll::Ready(r.map(Woke::Done));
                        }
                        let Inner { conn, dispatch } = &mut *inner;
                        match dispatch.drive(conn) {
                            Ok(0) => {}
                            Ok(_) => {
                                if let Some(r) = check(&mut inner, cx.waker()) {
                                    return Poll::Ready(r.map(Woke::Done));
                                }
                            }
                            Err(e) => return Poll::Ready(Err(e)),
                        }
                    }
                    if let Poll::Ready(r) = main.as_mut().poll(cx) {
                        return Poll::Ready(r.map(|g| Woke::Readable(Which::Main, g)).map_err(|e| io_error(op, &e)));
                    }
                    if let Poll::Ready(r) = receive.as_mut().poll(cx) {
                        return Poll::Ready(r.map(|g| Woke::Readable(Which::Receive, g)).map_err(|e| io_error(op, &e)));
                    }
                    deadline.poll(cx, self.limit.get(), op, ErrorKind::NoCompletion, what).map(Err)
                })
                .await?
            };
            match woke {
                Woke::Done(r) => return Ok(r),
                Woke::Readable(which, mut guard) => {
                    let inner = self.lock();
                    self.channels.take(&inner.conn, which, &mut guard)?;
                }
            }
        }
    }
}

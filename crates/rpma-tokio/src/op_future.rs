//! The future of one awaited operation ([`AsyncConn::post`] and the operation methods).
//!
//! Its first poll takes the straight path in place, under one lock and with no allocation: a
//! free send-queue slot, the post, a poll of the CQs, and the completion if it is already there
//! (the mock completes one-sided operations as they are posted; a fast device may too), in
//! which case the operation never took a dispatcher slot ([`Dispatch::begin`]). Only
//! an operation that has to wait (for a slot or for its completion) moves on to the waiting
//! machinery of wait.rs, boxed then, which sleeps on the completion channels.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use rpma_core::op::Operation;
use rpma_core::{CompletionFlags, Error, ErrorKind, Result, Transport, Wc};

use crate::conn::AsyncConn;
#[cfg(doc)]
use crate::dispatch::Dispatch;
use crate::slot::{checked, AnyOp, InFlight};
use crate::state::Inner;

/// A wait of the slow path.
type Waiting<'a> = Pin<Box<dyn Future<Output = Result<Wc>> + Send + 'a>>;

enum State<'a, T: Transport> {
    /// Not polled yet: nothing posted.
    Start(AnyOp<'a, T>),
    /// Waiting for a slot or the completion (the future owns what must be released if it is
    /// dropped: the operation not yet posted, or the slot of the posted one).
    Waiting(Waiting<'a>),
    /// Returned its result.
    Done,
}

/// The future of one operation: posts it when first polled and resolves to *its* completion
/// ([`AsyncConn::post`] has the rules: backpressure, errors, cancellation).
///
/// `Send` and `Unpin`; dropping it at any point is safe (before the post nothing is posted;
/// after it the operation goes on and its completion is discarded).
#[must_use = "an operation is posted when its future is first polled: .await it"]
pub struct OpFuture<'a, T: Transport> {
    conn: &'a AsyncConn<T>,
    state: State<'a, T>,
}

impl<T: Transport> fmt::Debug for OpFuture<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Start(op) => op.kind().name(),
            State::Waiting(_) => "waiting",
            State::Done => "done",
        };
        f.debug_struct("OpFuture").field("state", &state).finish_non_exhaustive()
    }
}

impl<'a, T: Transport> OpFuture<'a, T> {
    pub(crate) const fn new(conn: &'a AsyncConn<T>, op: AnyOp<'a, T>) -> Self {
        Self { conn, state: State::Start(op) }
    }
}

/// The straight path: `Ok(Ok(wc))` completed at once, `Ok(Err(flight))` posted and in flight,
/// `Err(op)` not posted (no free slot).
type Straight<'a, T> = std::result::Result<std::result::Result<Wc, InFlight<'a, T>>, AnyOp<'a, T>>;

fn straight<'a, T: Transport>(conn: &'a AsyncConn<T>, op: AnyOp<'a, T>) -> Result<Straight<'a, T>> {
    let sq = op.kind().uses_send_queue();
    let op_name = op.kind().name();
    let mut inner = conn.lock();
    if sq && inner.conn.sq_free() == 0 {
        return Ok(Err(op));
    }
    let token = inner.dispatch.begin(sq)?;
    if let Err(e) = inner.conn.post(op.flags(CompletionFlags::ALWAYS).context(token)) {
        inner.dispatch.cancel();
        return Err(e);
    }
    let Inner { conn: c, dispatch } = &mut *inner;
    let polled = dispatch.drive(c);
    match dispatch.finish() {
        None => Err(Error::new(ErrorKind::Other, op_name).with_detail("the dispatcher lost the operation")),
        Some(Ok(wc)) => Ok(Ok(Ok(wc))),
        Some(Err(key)) => {
            drop(inner);
            // From here the slot is the future's: a failed poll (or a drop) orphans it.
            let flight = InFlight { state: &conn.state, key: Some(key) };
            polled?;
            Ok(Ok(Err(flight)))
        }
    }
}

impl<T: Transport> Future for OpFuture<'_, T> {
    type Output = Result<Wc>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Wc>> {
        let this = self.get_mut();
        let conn = this.conn;
        loop {
            match std::mem::replace(&mut this.state, State::Done) {
                State::Start(op) => {
                    let name = op.kind().name();
                    match straight(conn, op) {
                        Err(e) => return Poll::Ready(Err(e)),
                        Ok(Ok(Ok(wc))) => return Poll::Ready(checked(name, wc)),
                        Ok(Ok(Err(flight))) => this.state = State::Waiting(Box::pin(conn.complete(name, flight))),
                        Ok(Err(op)) => {
                            let sq = op.kind().uses_send_queue();
                            this.state = State::Waiting(Box::pin(conn.post_waiting(name, sq, op)));
                        }
                    }
                }
                State::Waiting(mut wait) => {
                    return match wait.as_mut().poll(cx) {
                        Poll::Ready(r) => Poll::Ready(r),
                        Poll::Pending => {
                            this.state = State::Waiting(wait);
                            Poll::Pending
                        }
                    };
                }
                State::Done => {
                    return Poll::Ready(Err(Error::invalid_input(
                        "OpFuture::poll",
                        "the operation's future was polled after it returned its result",
                    )));
                }
            }
        }
    }
}

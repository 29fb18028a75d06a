//! What an awaited operation holds while it waits: its dispatcher slot ([`InFlight`]), its
//! registration as a waiter for a free send-queue slot or a completion ([`Waiter`]), and the
//! steps of posting it ([`has_slot`], [`start`], [`checked`]).

use std::task::Waker;

use rpma_core::op::AnyKind;
use rpma_core::{CompletionFlags, Error, ErrorKind, Op, Result, Transport, Wc};

use crate::state::{Inner, State};

/// An operation of any kind, as an awaited operation holds it.
pub(crate) type AnyOp<'a, T> = Op<AnyKind<'a, T>>;

/// The slot of an operation in flight, orphaned if its future is dropped before taking the
/// completion.
pub(crate) struct InFlight<'c, T: Transport> {
    pub(crate) state: &'c State<T>,
    pub(crate) key: Option<usize>,
}

impl<T: Transport> Drop for InFlight<'_, T> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.state.lock().dispatch.forget(key);
        }
    }
}

/// A registration as a waiter for a free send-queue slot, removed when dropped.
pub(crate) struct Waiter<'c, T: Transport> {
    state: &'c State<T>,
    key: Option<usize>,
}

impl<'c, T: Transport> Waiter<'c, T> {
    pub(crate) const fn new(state: &'c State<T>) -> Self {
        Self { state, key: None }
    }

    /// Registers `waker` (under the lock the caller holds).
    pub(crate) fn register(&mut self, inner: &mut Inner<T>, waker: &Waker) {
        self.key = Some(inner.dispatch.wait(self.key, waker));
    }

    /// Unregisters (under the lock the caller holds).
    pub(crate) fn done(&mut self, inner: &mut Inner<T>) {
        if let Some(k) = self.key.take() {
            inner.dispatch.unwait(k);
        }
    }
}

impl<T: Transport> Drop for Waiter<'_, T> {
    fn drop(&mut self) {
        if let Some(k) = self.key.take() {
            self.state.lock().dispatch.unwait(k);
        }
    }
}

/// Whether a send-queue operation needing `need` free slots can be posted now: `Some(Ok)` yes,
/// `None` not yet (a completion of an operation in flight will free slots), `Some(Err)` never
/// (nothing this API awaits is in flight to free a slot).
///
/// A signaled operation needs one slot. An unsignaled one needs two: its own and one left for
/// the signaled operation that will retire it; so the queue never fills with unsignaled
/// operations that nothing could retire.
pub(crate) fn has_slot<T: Transport>(inner: &Inner<T>, op: &'static str, need: u32) -> Option<Result<()>> {
    if inner.conn.sq_free() >= need {
        return Some(Ok(()));
    }
    if inner.dispatch.sq_inflight() > 0 {
        return None;
    }
    let detail = if need > 1 {
        "an unsignaled operation needs two free send-queue slots (its own, and one for the signaled operation \
         that retires it), and no operation awaited through this connection is in flight to free one: \
         await a signaled operation first"
    } else {
        "the send queue is full and no operation awaited through this connection is in flight to free a slot \
         (it holds operations posted through with_conn whose completions nobody polls, or unsignaled ones)"
    };
    Some(Err(Error::new(ErrorKind::WouldBlock, op).with_detail(detail)))
}

/// Posts `op` (signaled) with a dispatcher slot of its own; the caller checked the send
/// queue. Returns the slot's key.
#[inline]
pub(crate) fn start<T: Transport>(inner: &mut Inner<T>, op: AnyOp<'_, T>, sq: bool) -> Result<usize> {
    let (key, token) = inner.dispatch.open(sq)?;
    if let Err(e) = inner.conn.post(op.flags(CompletionFlags::ALWAYS).context(token)) {
        inner.dispatch.abort(key);
        return Err(e);
    }
    Ok(key)
}

/// `wc` if it succeeded, else the error saying how it failed.
#[inline]
pub(crate) fn checked(op: &'static str, wc: Wc) -> Result<Wc> {
    if wc.is_success() {
        Ok(wc)
    } else {
        Err(failed(op, &wc))
    }
}

/// The error of a completion that did not succeed.
pub(crate) fn failed(op: &'static str, wc: &Wc) -> Error {
    Error::new(ErrorKind::Provider, op).with_detail(&format!(
        "the operation completed with status {:?} (ibv_wc_status {}, vendor error {:#x})",
        wc.status(),
        wc.status().raw(),
        wc.vendor_err()
    ))
}

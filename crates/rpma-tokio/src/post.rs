//! Per-operation futures: post an [`Op`] and await *its* completion, with send-queue
//! backpressure (a full send queue waits for completions, it is not an error).
//!
//! An awaited operation goes through two steps inside one future: waiting for a free
//! send-queue slot (if [`Conn::sq_free`](rpma_core::Conn::sq_free) is 0), then, posted with a
//! token of its own as its `op_context`, waiting for its completion. Dropping the future at any
//! point is safe: before the post nothing was posted; after it the operation's slot is orphaned
//! and its completion discarded when it arrives (docs/async.md, "Cancellation").

use std::task::Waker;

use rpma_core::{
    CompletionFlags, Error, ErrorKind, FlushType, LocalSlice, RemoteAt, RemoteSlice, Result, Transport, Wc,
};

use crate::conn::{AsyncConn, Inner};
use crate::op::Op;
use crate::op_future::OpFuture;

/// The slot of an operation in flight, orphaned if its future is dropped before taking the
/// completion.
pub(crate) struct InFlight<'c, T: Transport> {
    pub(crate) conn: &'c AsyncConn<T>,
    pub(crate) key: Option<usize>,
}

impl<T: Transport> Drop for InFlight<'_, T> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.conn.lock().dispatch.forget(key);
        }
    }
}

/// A registration as a waiter for a free send-queue slot, removed when dropped.
pub(crate) struct Waiter<'c, T: Transport> {
    conn: &'c AsyncConn<T>,
    key: Option<usize>,
}

impl<'c, T: Transport> Waiter<'c, T> {
    pub(crate) const fn new(conn: &'c AsyncConn<T>) -> Self {
        Self { conn, key: None }
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
            self.conn.lock().dispatch.unwait(k);
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
    Some(Err(Error::new(ErrorKind::Again, op).with_detail(detail)))
}

/// Posts `op` (signaled) with a dispatcher slot of its own; the caller checked the send
/// queue. Returns the slot's key.
#[inline]
pub(crate) fn start<T: Transport>(inner: &mut Inner<T>, op: Op<'_, T>, sq: bool) -> Result<usize> {
    let (key, token) = inner.dispatch.open(sq)?;
    if let Err(e) = op.post_on(&inner.conn, CompletionFlags::ALWAYS, token) {
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

impl<T: Transport> AsyncConn<T> {
    /// The future of `op`: posts it when first polled and resolves to its completion.
    /// Nothing is posted until then (a future dropped unpolled posts nothing).
    ///
    /// The operation is posted signaled ([`CompletionFlags::ALWAYS`]) with a context of its
    /// own (a token with [`TOKEN_TAG`](crate::TOKEN_TAG) in its top byte), by which its
    /// completion is told from the others. If the send queue is full
    /// ([`Conn::sq_free`](rpma_core::Conn::sq_free) is 0), the future first waits until a
    /// completion frees a slot (backpressure). Receives go to the receive queue, which has no
    /// such wait: a full one is an error of the post.
    ///
    /// **Cancellation**: dropping the future before the post posts nothing; dropping it after
    /// the post leaves the operation running: its memory stays registered and allocated until
    /// its completion (the backend holds it), and the completion is discarded when it arrives.
    ///
    /// # Errors
    /// The future fails as [`Post::post`](rpma_core::Post::post) /
    /// [`Recv::post`](rpma_core::Recv::post) (bad arguments are [`Inval`](ErrorKind::Inval),
    /// nothing is posted);
    /// [`Provider`](ErrorKind::Provider) if the operation completed with an error status (the
    /// detail names it: e.g. `WrFlushErr` when the connection failed or was closed,
    /// `RemAccessErr` when the remote region is gone or refuses the access);
    /// [`Again`](ErrorKind::Again) if the send queue is full and nothing awaited through this
    /// connection is in flight to free a slot (it holds only unsignaled operations);
    /// [`NoCompletion`](ErrorKind::NoCompletion) when the connection's timeout
    /// ([`AsyncConn::set_timeout`]) passes; as [`Cq::poll`](rpma_core::Cq::poll) and
    /// [`Cq::wait`](rpma_core::Cq::wait).
    pub const fn post<'a>(&'a self, op: Op<'a, T>) -> OpFuture<'a, T> {
        OpFuture::new(self, op)
    }

    /// The slow path of [`OpFuture`]: waits for a free send-queue slot if `op` needs one,
    /// posts it, waits for its completion.
    pub(crate) async fn post_waiting(&self, name: &'static str, sq: bool, op: Op<'_, T>) -> Result<Wc> {
        let mut op = Some(op);
        let mut waiter = Waiter::new(self);
        let mut flight = InFlight { conn: self, key: None };
        let wc = self
            .wait_for(name, "waiting for the operation's completion", |inner, waker| {
                if let Some(key) = flight.key {
                    let wc = inner.dispatch.take(key, waker)?;
                    flight.key = None;
                    return Some(Ok(wc));
                }
                if sq {
                    match has_slot(inner, name, 1) {
                        Some(Ok(())) => waiter.done(inner),
                        Some(Err(e)) => return Some(Err(e)),
                        None => {
                            waiter.register(inner, waker);
                            return None;
                        }
                    }
                }
                match start(inner, op.take()?, sq) {
                    // The completion may be there already: the next round polls for it.
                    Ok(key) => flight.key = Some(key),
                    Err(e) => return Some(Err(e)),
                }
                None
            })
            .await?;
        checked(name, wc)
    }

    /// The slow path of [`OpFuture`] once the operation is posted: waits for its completion
    /// (the slot `flight` holds, orphaned if the wait is dropped).
    pub(crate) async fn complete(&self, name: &'static str, mut flight: InFlight<'_, T>) -> Result<Wc> {
        let wc = self
            .wait_for(name, "waiting for the operation's completion", |inner, waker| {
                let wc = inner.dispatch.take(flight.key?, waker)?;
                flight.key = None;
                Some(Ok(wc))
            })
            .await?;
        checked(name, wc)
    }

    /// Posts `op` unsignaled ([`CompletionFlags::ON_ERROR`]) with context `context`, waiting
    /// for two free send-queue slots first (backpressure: its own, and one kept for the
    /// signaled operation that will retire it), and returns once it is posted.
    ///
    /// Such an operation has no completion of its own to await: it is retired by the
    /// completion of a later signaled operation of the connection ("write unsignaled, then
    /// await a flush"); if it fails, its error completion (with `context`) is unclaimed:
    /// [`AsyncConn::next_wc`] and [`AsyncConn::completions`] return it. Its memory is held
    /// until it is retired. A receive cannot be posted unsignaled.
    ///
    /// Cancellation: dropping the future before it returns posts nothing.
    ///
    /// # Errors
    /// As [`AsyncConn::post`] before the completion ([`Again`](ErrorKind::Again) if fewer
    /// than two slots are free and nothing awaited is in flight to free them);
    /// [`Inval`](ErrorKind::Inval) for a receive.
    pub async fn post_unsignaled(&self, op: Op<'_, T>, context: u64) -> Result<()> {
        let name = op.name();
        if !op.uses_send_queue() {
            return Err(Error::inval(name, "a receive always completes: await it with AsyncConn::post"));
        }
        let mut op = Some(op);
        let mut waiter = Waiter::new(self);
        self.wait_for(name, "waiting for a free send-queue slot", |inner, waker| match has_slot(inner, name, 2) {
            Some(Ok(())) => {
                waiter.done(inner);
                Some(op.take()?.post_on(&inner.conn, CompletionFlags::ON_ERROR, context))
            }
            Some(Err(e)) => Some(Err(e)),
            None => {
                waiter.register(inner, waker);
                None
            }
        })
        .await
    }

    /// The future of an RDMA Write of `src` at `dst` ([`Op::write`], [`AsyncConn::post`]).
    ///
    /// # Errors
    /// The future fails as [`AsyncConn::post`]'s.
    pub const fn write<'a>(&'a self, dst: RemoteAt<'a>, src: LocalSlice<'a, T>) -> OpFuture<'a, T> {
        self.post(Op::write(dst, src))
    }

    /// The future of an RDMA Read of `dst.len()` bytes at `src` into `dst` ([`Op::read`]).
    ///
    /// # Errors
    /// The future fails as [`AsyncConn::post`]'s.
    pub const fn read<'a>(&'a self, dst: LocalSlice<'a, T>, src: RemoteAt<'a>) -> OpFuture<'a, T> {
        self.post(Op::read(dst, src))
    }

    /// The future of a flush of `dst` ([`Op::flush`]).
    ///
    /// # Errors
    /// As [`AsyncConn::post`]; [`NoSupp`](ErrorKind::NoSupp) for a persistent flush the remote
    /// peer did not declare support for.
    pub const fn flush<'a>(&'a self, dst: RemoteSlice<'a>, flush_type: FlushType) -> OpFuture<'a, T> {
        self.post(Op::flush(dst, flush_type))
    }

    /// The future of an atomic write of `value` at `dst` ([`Op::atomic_write`]).
    ///
    /// # Errors
    /// The future fails as [`AsyncConn::post`]'s.
    pub const fn atomic_write<'a>(&'a self, dst: RemoteAt<'a>, value: [u8; 8]) -> OpFuture<'a, T> {
        self.post(Op::atomic_write(dst, value))
    }

    /// The future of a send of `src` ([`Op::send`]): it completes once the peer has received
    /// it.
    ///
    /// # Errors
    /// The future fails as [`AsyncConn::post`]'s.
    pub const fn send<'a>(&'a self, src: LocalSlice<'a, T>) -> OpFuture<'a, T> {
        self.post(Op::send(src))
    }

    /// The future of a receive buffer ([`Op::recv`]): it completes when a message landed in
    /// it, the completion's [`byte_len`](Wc::byte_len) saying how many bytes came.
    ///
    /// # Errors
    /// The future fails as [`AsyncConn::post`]'s.
    pub const fn recv<'a>(&'a self, dst: LocalSlice<'a, T>) -> OpFuture<'a, T> {
        self.post(Op::recv(dst))
    }
}

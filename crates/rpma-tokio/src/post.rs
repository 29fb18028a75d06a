//! Per-operation futures: post an [`Op`] (rpma-core's operation value, `rpma::op`) and await
//! *its* completion, with send-queue backpressure (a full send queue waits for completions, it
//! is not an error).
//!
//! An awaited operation goes through two steps inside one future: waiting for a free
//! send-queue slot (if [`Conn::sq_free`](rpma_core::Conn::sq_free) is 0), then, posted with a
//! token of its own as its `op_context`, waiting for its completion. Dropping the future at any
//! point is safe: before the post nothing was posted; after it the operation's slot is orphaned
//! and its completion discarded when it arrives (docs/async.md, "Cancellation").

use rpma_core::op::{self, Operation};
use rpma_core::{CompletionFlags, FlushType, LocalSlice, Op, RemoteAt, RemoteSlice, Result, Transport, Wc};

use crate::conn::AsyncConn;
use crate::op_future::OpFuture;
use crate::slot::{checked, has_slot, start, AnyOp, InFlight, Waiter};

impl<T: Transport> AsyncConn<T> {
    /// The future of `op`: posts it when first polled and resolves to its completion.
    /// Nothing is posted until then (a future dropped unpolled posts nothing).
    ///
    /// The operation is posted signaled ([`CompletionFlags::ALWAYS`]) with a context of its
    /// own (a token with [`TOKEN_TAG`](crate::TOKEN_TAG) in its top byte), by which its
    /// completion is told from the others: the flags and context `op` carries are not used. If the send queue is full
    /// ([`Conn::sq_free`](rpma_core::Conn::sq_free) is 0), the future first waits until a
    /// completion frees a slot (backpressure). Receives go to the receive queue, which has no
    /// such wait: a full one is an error of the post.
    ///
    /// **Cancellation**: dropping the future before the post posts nothing; dropping it after
    /// the post leaves the operation running: its memory stays registered and allocated until
    /// its completion (the backend holds it), and the completion is discarded when it arrives.
    ///
    /// # Errors
    /// The future fails as [`Conn::post`](rpma_core::Conn::post) (bad arguments are
    /// [`InvalidInput`](rpma_core::ErrorKind::InvalidInput), nothing is posted);
    /// [`Provider`](rpma_core::ErrorKind::Provider) if the operation completed with an error status
    /// (the detail names it: e.g. `WrFlushErr` when the connection failed or was closed,
    /// `RemAccessErr` when the remote region is gone or refuses the access);
    /// [`WouldBlock`](rpma_core::ErrorKind::WouldBlock) if the send queue is full and nothing
    /// awaited through this connection is in flight to free a slot (it holds only unsignaled
    /// operations); [`NoCompletion`](rpma_core::ErrorKind::NoCompletion) when the connection's
    /// timeout ([`AsyncConn::set_timeout`]) passes; as [`Cq::poll`](rpma_core::Cq::poll) and
    /// [`Cq::wait`](rpma_core::Cq::wait).
    pub fn post<'a, K: Operation<'a, T>>(&'a self, op: Op<K>) -> OpFuture<'a, T> {
        OpFuture::new(self, K::into_any(op))
    }

    /// The slow path of [`OpFuture`]: waits for a free send-queue slot if `op` needs one,
    /// posts it, waits for its completion.
    pub(crate) async fn post_waiting(&self, name: &'static str, sq: bool, op: AnyOp<'_, T>) -> Result<Wc> {
        let mut op = Some(op);
        let mut waiter = Waiter::new(&self.state);
        let mut flight = InFlight { state: &self.state, key: None };
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

    /// Posts `op` unsignaled ([`CompletionFlags::ON_ERROR`], whatever flags it carries) with its
    /// context, waiting
    /// for two free send-queue slots first (backpressure: its own, and one kept for the
    /// signaled operation that will retire it), and returns once it is posted.
    ///
    /// Such an operation has no completion of its own to await: it is retired by the
    /// completion of a later signaled operation of the connection ("write unsignaled, then
    /// await a flush"); if it fails, its error completion (with `context`) is unclaimed:
    /// [`AsyncConn::next_wc`] and [`AsyncConn::completions`] return it. Its memory is held
    /// until it is retired. A receive cannot be posted unsignaled: it has no completion flags,
    /// so `post_unsignaled(op::recv(..))` does not compile.
    ///
    /// Cancellation: dropping the future before it returns posts nothing.
    ///
    /// # Errors
    /// As [`AsyncConn::post`] before the completion
    /// ([`WouldBlock`](rpma_core::ErrorKind::WouldBlock) if fewer than two slots are free and
    /// nothing awaited is in flight to free them).
    pub async fn post_unsignaled<'a, K>(&self, op: Op<K>) -> Result<()>
    where
        K: Operation<'a, T, Flags = CompletionFlags>,
    {
        let name = op.kind().name();
        let mut op = Some(op.flags(CompletionFlags::ON_ERROR));
        let mut waiter = Waiter::new(&self.state);
        self.wait_for(name, "waiting for a free send-queue slot", |inner, waker| match has_slot(inner, name, 2) {
            Some(Ok(())) => {
                waiter.done(inner);
                Some(inner.conn.post(op.take()?))
            }
            Some(Err(e)) => Some(Err(e)),
            None => {
                waiter.register(inner, waker);
                None
            }
        })
        .await
    }

    /// The future of an RDMA Write of `src` at `dst` ([`op::write`], [`AsyncConn::post`]).
    ///
    /// # Errors
    /// The future fails as [`AsyncConn::post`]'s.
    pub fn write<'a>(&'a self, dst: RemoteAt<'a>, src: LocalSlice<'a, T>) -> OpFuture<'a, T> {
        self.post(op::write(dst, src))
    }

    /// The future of an RDMA Read of `dst.len()` bytes at `src` into `dst` ([`op::read`]).
    ///
    /// # Errors
    /// The future fails as [`AsyncConn::post`]'s.
    pub fn read<'a>(&'a self, dst: LocalSlice<'a, T>, src: RemoteAt<'a>) -> OpFuture<'a, T> {
        self.post(op::read(dst, src))
    }

    /// The future of a flush of `dst` ([`op::flush`]).
    ///
    /// # Errors
    /// As [`AsyncConn::post`]; [`Unsupported`](rpma_core::ErrorKind::Unsupported) for a persistent
    /// flush the remote peer did not declare support for.
    pub fn flush<'a>(&'a self, dst: RemoteSlice<'a>, flush_type: FlushType) -> OpFuture<'a, T> {
        self.post(op::flush(dst, flush_type))
    }

    /// The future of an atomic write of `value` at `dst` ([`op::atomic_write`]).
    ///
    /// # Errors
    /// The future fails as [`AsyncConn::post`]'s.
    pub fn atomic_write<'a>(&'a self, dst: RemoteAt<'a>, value: [u8; 8]) -> OpFuture<'a, T> {
        self.post(op::atomic_write(dst, value))
    }

    /// The future of a send of `src` ([`op::send`]): it completes once the peer has received
    /// it.
    ///
    /// # Errors
    /// The future fails as [`AsyncConn::post`]'s.
    pub fn send<'a>(&'a self, src: LocalSlice<'a, T>) -> OpFuture<'a, T> {
        self.post(op::send(src))
    }

    /// The future of a receive buffer ([`op::recv`]): it completes when a message landed in
    /// it, the completion's [`byte_len`](Wc::byte_len) saying how many bytes came.
    ///
    /// # Errors
    /// The future fails as [`AsyncConn::post`]'s.
    pub fn recv<'a>(&'a self, dst: LocalSlice<'a, T>) -> OpFuture<'a, T> {
        self.post(op::recv(dst))
    }
}

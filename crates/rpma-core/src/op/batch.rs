//! Batches: several operations of one queue posted as one chain, with one doorbell.
//!
//! A batch is filled on the stack (no allocation) with operations built as usual, each
//! validated when it is pushed; [`Batch::post`] hands the whole chain to the backend in one
//! `ibv_post_send` (receives: one `ibv_post_recv`). A chain is posted whole or not at all.

use std::fmt;

use arrayvec::ArrayVec;

use crate::conn::{Conn, Srq};
use crate::error::{Error, Result};
use crate::transport::{QpBackend, RecvWr, SendWr, Transport};
use crate::types::CompletionFlags;

use super::operation::{send_wr, Operation};
use super::recv::{PostRecv, Recv, RecvQueue};
use super::value::{Op, Post};

/// How many operations a [`Batch`] or [`RecvBatch`] holds unless told otherwise.
pub const DEFAULT_BATCH: usize = 16;

/// Operations on one connection's send queue, posted together with one doorbell
/// ([`Conn::batch`]).
///
/// ```ignore
/// let mut b = conn.batch();
/// b.push(conn.write(remote.at(0), src.slice(0..4096)).flags(CompletionFlags::ON_ERROR))?;
/// b.push(conn.flush(remote.slice(0..4096), FlushType::Persistent).context(7))?;
/// b.post()?; // one doorbell; one completion (context 7) retires both
/// ```
///
/// **Ordering**: the operations are executed as if posted one by one, in push order, with the
/// same guarantees: RDMA Writes and Sends are placed in order; a Read or Flush is not
/// started before earlier Writes to the same connection are placed (what makes "write;
/// flush" persist the write); an atomic write is fenced behind earlier Reads and Flushes
/// ("write; flush; atomic write; flush"). Completions of one connection's send queue appear
/// in posting order.
///
/// **Signalling and send-queue slots**: each operation keeps its own
/// [`flags`](Op::flags); [`Batch::signal_last`] posts every operation but the last
/// unsignaled (only the last completes, and its completion retires the whole chain: one
/// completion per batch). Every operation takes a send-queue slot until it is retired (its own
/// completion, or a later one's); a chain longer than [`Conn::sq_free`] is refused whole.
///
/// `N` (default [`DEFAULT_BATCH`]) is the capacity; the batch lives on the stack.
pub struct Batch<'c, T: Transport, const N: usize = DEFAULT_BATCH> {
    conn: &'c Conn<T>,
    wrs: ArrayVec<SendWr<'c, T>, N>,
    signal_last: bool,
}

impl<T: Transport, const N: usize> fmt::Debug for Batch<'_, T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("len", &self.wrs.len())
            .field("capacity", &N)
            .field("signal_last", &self.signal_last)
            .finish_non_exhaustive()
    }
}

impl<T: Transport> Conn<T> {
    /// An empty batch of up to [`DEFAULT_BATCH`] operations on this connection (for another
    /// capacity: `Batch::<_, 64>::new(&conn)`).
    pub fn batch(&self) -> Batch<'_, T> {
        Batch::new(self)
    }
}

impl<'c, T: Transport, const N: usize> Batch<'c, T, N> {
    /// An empty batch on `conn`.
    #[must_use]
    pub fn new(conn: &'c Conn<T>) -> Self {
        Self { conn, wrs: ArrayVec::new(), signal_last: false }
    }

    /// Validates `op` (as its own `post` would) and appends it.
    ///
    /// # Errors
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) if the batch is full, `op` was made on
    /// another connection, or any argument is invalid (see [`Conn::post`]); the batch is unchanged
    /// then. [`Unsupported`](crate::ErrorKind::Unsupported) as [`Conn::post`].
    #[inline(always)]
    pub fn push<K>(&mut self, op: Post<'c, T, K>) -> Result<&mut Self>
    where
        K: Operation<'c, T, Flags = CompletionFlags>,
    {
        const OP: &str = "Batch::push";
        if self.wrs.is_full() {
            return Err(Error::invalid_input(OP, "the batch is full").with_detail(&format!("capacity {N}")));
        }
        if !std::ptr::eq(op.on, self.conn) {
            return Err(Error::invalid_input(OP, "the operation was made on another connection"));
        }
        let (wr, _) = send_wr(op, self.conn)?;
        self.wrs.push(wr);
        Ok(self)
    }

    /// Validates the operation value `op` against the batch's connection (as
    /// [`Conn::post`] would) and appends it.
    ///
    /// # Errors
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) if the batch is full or any argument is
    /// invalid (see [`Conn::post`]), or it is a receive in an [`AnyKind`](super::AnyKind); the
    /// batch is unchanged then. [`Unsupported`](crate::ErrorKind::Unsupported) as
    /// [`Conn::post`].
    #[inline(always)]
    pub fn push_op<K>(&mut self, op: Op<K>) -> Result<&mut Self>
    where
        K: Operation<'c, T, Flags = CompletionFlags>,
    {
        if self.wrs.is_full() {
            return Err(
                Error::invalid_input("Batch::push_op", "the batch is full").with_detail(&format!("capacity {N}"))
            );
        }
        let (wr, _) = send_wr(op, self.conn)?;
        self.wrs.push(wr);
        Ok(self)
    }

    /// Posts every operation but the last unsignaled, whatever their flags: only the last one
    /// completes (or a failed one), and its completion retires the whole chain. A mode of the
    /// batch: it stays on for every later post of this batch.
    pub fn signal_last(&mut self) -> &mut Self {
        self.signal_last = true;
        self
    }

    /// Operations in the batch.
    #[must_use]
    pub fn len(&self) -> usize {
        self.wrs.len()
    }

    /// Whether the batch is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.wrs.is_empty()
    }

    /// Removes every operation.
    pub fn clear(&mut self) {
        self.wrs.clear();
    }

    /// Posts the operations as one chain, with one doorbell, and empties the batch. An empty
    /// batch posts nothing.
    ///
    /// # Errors
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) if the chain is longer than the send-queue
    /// slots free now ([`Conn::sq_free`]); [`Provider`](crate::ErrorKind::Provider) if posting
    /// fails (e.g. the connection is not established). Either way nothing was posted and the batch
    /// keeps its operations.
    pub fn post(&mut self) -> Result<()> {
        const OP: &str = "Batch::post";
        let n = self.wrs.len();
        if n == 0 {
            return Ok(());
        }
        let free = self.conn.sq_free() as usize;
        if n > free {
            return Err(Error::invalid_input(OP, "the chain is longer than the free send-queue slots")
                .with_detail(&format!("{n} operations, {free} free slots")));
        }
        if self.signal_last {
            let last = n - 1;
            for wr in &mut self.wrs[..last] {
                wr.signaled = false;
            }
            self.wrs[last].signaled = true;
        }
        self.conn.qp().post_send(&self.wrs).map_err(|e| e.in_op(OP))?;
        self.wrs.clear();
        Ok(())
    }
}

/// Receive buffers of one queue, posted together with one doorbell ([`Conn::recv_batch`],
/// [`Srq::recv_batch`](crate::Srq::recv_batch)).
pub struct RecvBatch<'c, T: Transport, const N: usize = DEFAULT_BATCH> {
    queue: RecvQueue<'c, T>,
    wrs: ArrayVec<RecvWr<'c, T>, N>,
}

impl<T: Transport, const N: usize> fmt::Debug for RecvBatch<'_, T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecvBatch").field("len", &self.wrs.len()).field("capacity", &N).finish_non_exhaustive()
    }
}

impl<T: Transport> Conn<T> {
    /// An empty batch of up to [`DEFAULT_BATCH`] receives on this connection.
    pub fn recv_batch(&self) -> RecvBatch<'_, T> {
        RecvBatch { queue: RecvQueue::Conn(self), wrs: ArrayVec::new() }
    }
}

impl<T: Transport> Srq<T> {
    /// An empty batch of up to [`DEFAULT_BATCH`] receives on this shared receive queue.
    pub fn recv_batch(&self) -> RecvBatch<'_, T> {
        RecvBatch { queue: RecvQueue::Srq(self), wrs: ArrayVec::new() }
    }
}

impl<'c, T: Transport, const N: usize> RecvBatch<'c, T, N> {
    /// An empty batch on `conn`'s receive queue.
    #[must_use]
    pub fn new(conn: &'c Conn<T>) -> Self {
        Self { queue: RecvQueue::Conn(conn), wrs: ArrayVec::new() }
    }

    /// Validates `recv` (as its own `post` would) and appends it.
    ///
    /// # Errors
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) if the batch is full, `recv` is for another
    /// queue, or its buffer is invalid (see [`PostRecv::post`](Op::post)); the batch is unchanged
    /// then.
    pub fn push(&mut self, recv: PostRecv<'c, T>) -> Result<&mut Self> {
        const OP: &str = "RecvBatch::push";
        if self.wrs.is_full() {
            return Err(Error::invalid_input(OP, "the batch is full").with_detail(&format!("capacity {N}")));
        }
        if !recv.on.same(&self.queue) {
            return Err(Error::invalid_input(OP, "the receive is for another queue"));
        }
        let wr = recv.on.work_request(&recv)?;
        self.wrs.push(wr);
        Ok(self)
    }

    /// Validates the receive `op` against the batch's queue (as its post there would) and
    /// appends it.
    ///
    /// # Errors
    /// As [`RecvBatch::push`].
    pub fn push_op(&mut self, op: Op<Recv<'c, T>>) -> Result<&mut Self> {
        let queue = self.queue;
        self.push(op.on(queue))
    }

    /// Receives in the batch.
    #[must_use]
    pub fn len(&self) -> usize {
        self.wrs.len()
    }

    /// Whether the batch is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.wrs.is_empty()
    }

    /// Posts the receives as one chain, with one doorbell, and empties the batch.
    ///
    /// # Errors
    /// [`Provider`](crate::ErrorKind::Provider) if posting fails (the queue has fewer free
    /// entries than the batch: `ENOMEM`; a connection using an SRQ has no receive queue of its
    /// own); nothing was posted then and the batch keeps its receives.
    pub fn post(&mut self) -> Result<()> {
        if self.wrs.is_empty() {
            return Ok(());
        }
        self.queue.post(&self.wrs).map_err(|e| e.in_op("RecvBatch::post"))?;
        self.wrs.clear();
        Ok(())
    }
}

//! A connection whose events, completions and operations are awaited.

use std::future::{poll_fn, Future};
use std::sync::MutexGuard;
use std::task::Poll;
use std::time::Duration;

use rpma_core::{Conn, ConnEvent, ConnReq, Error, ErrorKind, PeerCfg, Result, Transport, Wc};
use tokio::io::unix::AsyncFd;

use crate::channel::Channels;
use crate::fd::{io_error, watch, Watched};
use crate::slot::Waiter;
use crate::state::{Inner, State};
use crate::timeout::{Deadline, Limit};

/// A connection ([`Conn`]) on a tokio runtime: its operations, completions and CM events are
/// awaited.
///
/// `Send + Sync`: its methods take `&self` and their futures are `Send`, so one connection may
/// serve many futures of one task at once (`tokio::join!` of several operations: a queue depth
/// above one), or, behind an `Arc`, several tasks of a multi-threaded runtime. The connection
/// itself is `Send` but not `Sync` (docs/decisions.md #26): it lives behind a lock, taken for
/// each post and each poll of the CQs (uncontended when one task drives the connection: one
/// atomic operation each way) and never held across an await.
#[derive(Debug)]
pub struct AsyncConn<T: Transport> {
    pub(crate) state: State<T>,
    events: AsyncFd<Watched>,
    pub(crate) channels: Channels,
    pub(crate) limit: Limit,
}

/// What [`AsyncConn::next`] found first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// A connection event.
    Event(ConnEvent),
    /// An unclaimed completion (see [`AsyncConn::next_wc`]).
    Completion(Wc),
}

/// Connects (or accepts) `req` with private data `pdata` and awaits
/// [`ConnEvent::Established`].
///
/// # Errors
/// As [`ConnReq::connect`] and [`AsyncConn::new`]; [`Other`](ErrorKind::Other) naming the
/// event if the first event is not `Established` (e.g. the peer rejected the request).
pub async fn connect<T: Transport>(req: ConnReq<T>, pdata: Option<&[u8]>) -> Result<AsyncConn<T>> {
    let conn = AsyncConn::new(req.connect(pdata)?)?;
    established(conn).await
}

/// [`connect`], giving up after `timeout` (the connection is deleted then).
///
/// # Errors
/// As [`connect`]; [`NoEvent`](ErrorKind::NoEvent) if no event came in time;
/// [`InvalidInput`](ErrorKind::InvalidInput) for a zero timeout or a runtime without timers.
pub async fn connect_timeout<T: Transport>(
    req: ConnReq<T>,
    pdata: Option<&[u8]>,
    timeout: Duration,
) -> Result<AsyncConn<T>> {
    // The timeout is checked before the request is consumed.
    Limit::default().set("tokio::connect_timeout", Some(timeout))?;
    let conn = AsyncConn::new(req.connect(pdata)?)?;
    conn.set_timeout(Some(timeout))?;
    let conn = established(conn).await?;
    conn.set_timeout(None)?;
    Ok(conn)
}

async fn established<T: Transport>(conn: AsyncConn<T>) -> Result<AsyncConn<T>> {
    match conn.next_event().await? {
        ConnEvent::Established => Ok(conn),
        ev => Err(Error::new(ErrorKind::Other, "tokio::connect")
            .with_detail(&format!("the connection was not established: {}", ev.as_str()))),
    }
}

impl<T: Transport> AsyncConn<T> {
    /// Watches `conn`'s CM event fd and its completion channels (the main CQ's and the receive
    /// CQ's, or the shared one; all made non-blocking) on the current tokio runtime.
    ///
    /// # Errors
    /// [`InvalidInput`](ErrorKind::InvalidInput) outside a tokio runtime with IO enabled;
    /// [`Provider`](ErrorKind::Provider) if an fd cannot be made non-blocking or registered.
    pub fn new(conn: Conn<T>) -> Result<Self> {
        conn.set_nonblocking(true)?;
        let events = watch("AsyncConn::new", conn.event_fd())?;
        let channels = Channels::new(&conn)?;
        Ok(Self { state: State::new(conn), events, channels, limit: Limit::default() })
    }

    /// The connection and its dispatcher, locked ([`State::lock`]).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner<T>> {
        self.state.lock()
    }

    /// Runs `f` on the connection, under its lock: to post operations whose completions are
    /// taken with [`AsyncConn::next_wc`] (or not at all: unsignaled ones), or to read its
    /// properties (private data, QP number, ...).
    ///
    /// Inside `f`, do not poll the connection's CQs nor wait on them (that would take the
    /// completions of awaited operations away from their futures: they would wait until the
    /// timeout), give operations no context with [`TOKEN_TAG`](crate::TOKEN_TAG) in its top
    /// byte, and call no method of this `AsyncConn` (its lock is held: that would deadlock).
    pub fn with_conn<R>(&self, f: impl FnOnce(&Conn<T>) -> R) -> R {
        f(&self.lock().conn)
    }

    /// The private data the peer sent ([`Conn::private_data`]), copied out from under the
    /// connection's lock.
    #[must_use]
    pub fn private_data(&self) -> Vec<u8> {
        self.lock().conn.private_data().to_vec()
    }

    /// Records the remote peer's configuration ([`Conn::apply_remote_peer_cfg`]): whether it
    /// writes directly to persistent memory, which a persistent flush needs.
    pub fn apply_remote_peer_cfg(&self, pcfg: &PeerCfg) {
        self.lock().conn.apply_remote_peer_cfg(pcfg);
    }

    /// The QP number ([`Conn::qp_num`]).
    #[must_use]
    pub fn qp_num(&self) -> u32 {
        self.lock().conn.qp_num()
    }

    /// Starts disconnecting ([`Conn::disconnect`]); await [`AsyncConn::next_event`] for
    /// [`ConnEvent::Closed`].
    ///
    /// # Errors
    /// As [`Conn::disconnect`].
    pub fn disconnect(&self) -> Result<()> {
        self.lock().conn.disconnect()
    }

    /// Send-queue slots free now ([`Conn::sq_free`]).
    #[must_use]
    pub fn sq_free(&self) -> u32 {
        self.lock().conn.sq_free()
    }

    /// Operations posted through this connection's async API whose completion has not been
    /// taken yet: awaited ones, and those whose future was dropped (their completions are
    /// discarded as they arrive).
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.lock().dispatch.slots()
    }

    /// Limits every later wait of this connection (an operation's completion, a free
    /// send-queue slot, a completion, an event) to `timeout`; `None` (the default) waits as
    /// long as it takes. A wait that times out fails with
    /// [`NoCompletion`](ErrorKind::NoCompletion) (completions, slots) or
    /// [`NoEvent`](ErrorKind::NoEvent) (events) and the detail "timed out after ...", and is
    /// dropped as if cancelled: an operation in flight goes on, and its completion is
    /// discarded.
    ///
    /// # Errors
    /// [`InvalidInput`](ErrorKind::InvalidInput) for a zero timeout, outside a tokio runtime, or on
    /// a runtime without timers (`enable_time`).
    pub fn set_timeout(&self, timeout: Option<Duration>) -> Result<()> {
        self.limit.set("AsyncConn::set_timeout", timeout)
    }

    /// The limit of every wait ([`AsyncConn::set_timeout`]).
    #[must_use]
    pub fn timeout(&self) -> Option<Duration> {
        self.limit.get()
    }

    /// The next connection event (`rpma_conn_next_event`).
    ///
    /// Cancel-safe: an event is taken only when the future completes.
    ///
    /// # Errors
    /// As [`Conn::next_event`]; [`NoEvent`](ErrorKind::NoEvent) when the connection's timeout
    /// passes (never otherwise: it waits instead).
    pub async fn next_event(&self) -> Result<ConnEvent> {
        const OP: &str = "AsyncConn::next_event";
        let mut deadline = Deadline::default();
        loop {
            let mut readable = std::pin::pin!(self.events.readable());
            let mut guard = poll_fn(|cx| {
                if let Poll::Ready(r) = readable.as_mut().poll(cx) {
                    return Poll::Ready(r.map_err(|e| io_error(OP, &e)));
                }
                deadline.poll(cx, self.limit.get(), OP, ErrorKind::NoEvent, "waiting for a connection event").map(Err)
            })
            .await?;
            match self.lock().conn.next_event() {
                Err(e) if e.kind() == ErrorKind::NoEvent => guard.clear_ready(),
                r => return r.map_err(|e| e.in_op(OP)),
            }
        }
    }

    /// The next *unclaimed* completion: of an operation posted through
    /// [`AsyncConn::with_conn`], or the error completion of an unsignaled one. The completions
    /// of operations posted through [`AsyncConn::post`] go to their own futures, never here.
    /// Receive completions of the connection's own receive CQ count as well.
    ///
    /// Cancel-safe: a completion is taken only when the future completes.
    ///
    /// # Errors
    /// As [`Cq::poll`](rpma_core::Cq::poll) and [`Cq::wait`](rpma_core::Cq::wait);
    /// [`NoCompletion`](ErrorKind::NoCompletion) when the connection's timeout passes.
    pub async fn next_wc(&self) -> Result<Wc> {
        let mut waiter = Waiter::new(&self.state);
        self.wait_for("AsyncConn::next_wc", "waiting for a completion", |inner, waker| {
            match inner.dispatch.pop_unclaimed() {
                Some(wc) => {
                    waiter.done(inner);
                    Some(Ok(wc))
                }
                None => {
                    waiter.register(inner, waker);
                    None
                }
            }
        })
        .await
    }

    /// Whichever comes first: a connection event or an unclaimed completion (completions
    /// first if both are there).
    ///
    /// Cancel-safe, as [`AsyncConn::next_event`] and [`AsyncConn::next_wc`].
    ///
    /// # Errors
    /// As those two.
    pub async fn next(&self) -> Result<Next> {
        tokio::select! {
            biased;
            r = self.next_wc() => r.map(Next::Completion),
            r = self.next_event() => r.map(Next::Event),
        }
    }

    /// The connection back, with the unclaimed completions not taken yet (its fds stay
    /// non-blocking). Operations whose futures were dropped may still complete: their
    /// completions, with [`TOKEN_TAG`](crate::TOKEN_TAG) in the top byte of their `wr_id`, then
    /// show on the CQ like any other.
    #[must_use]
    pub fn into_inner(self) -> (Conn<T>, Vec<Wc>) {
        let Self { state, events, channels, limit: _ } = self;
        drop((events, channels));
        let mut inner = state.into_inner();
        let unclaimed = std::iter::from_fn(|| inner.dispatch.pop_unclaimed()).collect();
        (inner.conn, unclaimed)
    }
}

//! A connection whose events and completions are awaited.

use rpma_core::{Conn, ConnEvent, ConnReq, Error, ErrorKind, Result, Transport, Wc};
use tokio::io::unix::AsyncFd;

use crate::fd::{io_error, watch, Watched};

/// A connection ([`Conn`]) on a tokio runtime: its CM events and its main CQ's completions are
/// awaited. `Send` (not `Sync`, as the connection): its methods take `&mut self`, so their
/// futures are `Send`.
#[derive(Debug)]
pub struct AsyncConn<T: Transport> {
    events: AsyncFd<Watched>,
    cq: AsyncFd<Watched>,
    conn: Conn<T>,
}

/// What [`AsyncConn::next`] found first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// A connection event.
    Event(ConnEvent),
    /// A completion of the main CQ.
    Completion(Wc),
}

/// Connects (or accepts) `req` with private data `pdata` and awaits
/// [`ConnEvent::Established`].
///
/// # Errors
/// As [`ConnReq::connect`] and [`AsyncConn::new`]; [`Unknown`](ErrorKind::Unknown) naming the
/// event if the first event is not `Established` (e.g. the peer rejected the request).
pub async fn connect<T: Transport>(req: ConnReq<T>, pdata: Option<&[u8]>) -> Result<AsyncConn<T>> {
    let mut conn = AsyncConn::new(req.connect(pdata)?)?;
    match conn.next_event().await? {
        ConnEvent::Established => Ok(conn),
        ev => Err(Error::new(ErrorKind::Unknown, "rpma_conn_req_connect")
            .with_detail(&format!("the connection was not established: {}", ev.as_str()))),
    }
}

impl<T: Transport> AsyncConn<T> {
    /// Watches `conn`'s CM event fd and its main CQ's completion channel (both made
    /// non-blocking) on the current tokio runtime.
    ///
    /// # Errors
    /// [`Inval`](ErrorKind::Inval) outside a tokio runtime with IO enabled, or for a connection
    /// with a shared completion channel (not supported here yet); [`Provider`](ErrorKind::Provider)
    /// if an fd cannot be made non-blocking or registered.
    pub fn new(conn: Conn<T>) -> Result<Self> {
        if conn.cq().is_channel_shared() {
            return Err(Error::inval("AsyncConn::new", "a shared completion channel is not supported yet"));
        }
        conn.set_nonblocking(true)?;
        conn.cq().set_nonblocking(true)?;
        let events = watch("rpma_conn_get_event_fd", conn.event_fd())?;
        let cq = watch("rpma_cq_get_fd", conn.cq().fd())?;
        Ok(Self { events, cq, conn })
    }

    /// The connection: post operations through it as usual.
    #[must_use]
    pub const fn conn(&self) -> &Conn<T> {
        &self.conn
    }

    /// The next connection event (`rpma_conn_next_event`).
    ///
    /// Cancel-safe: an event is taken only when the future completes.
    ///
    /// # Errors
    /// As [`Conn::next_event`] (never [`NoEvent`](ErrorKind::NoEvent): it waits instead).
    pub async fn next_event(&mut self) -> Result<ConnEvent> {
        loop {
            let mut guard = self.events.readable().await.map_err(|e| io_error("rpma_conn_next_event", &e))?;
            match self.conn.next_event() {
                Err(e) if e.kind() == ErrorKind::NoEvent => guard.clear_ready(),
                r => return r,
            }
        }
    }

    /// The next completion of the main CQ.
    ///
    /// Cancel-safe: a completion is taken only when the future completes.
    ///
    /// # Errors
    /// As [`Cq::poll`](rpma_core::Cq::poll) and [`Cq::wait`](rpma_core::Cq::wait).
    pub async fn next_wc(&mut self) -> Result<Wc> {
        loop {
            if let Some(wc) = self.conn.cq().next_wc()? {
                return Ok(wc);
            }
            self.completion_event().await?;
        }
    }

    /// Whichever comes first: a connection event or a completion.
    ///
    /// Cancel-safe, as [`AsyncConn::next_event`] and [`AsyncConn::next_wc`].
    ///
    /// # Errors
    /// As those two.
    pub async fn next(&mut self) -> Result<Next> {
        loop {
            if let Some(wc) = self.conn.cq().next_wc()? {
                return Ok(Next::Completion(wc));
            }
            match self.conn.next_event() {
                Err(e) if e.kind() == ErrorKind::NoEvent => {}
                r => return r.map(Next::Event),
            }
            tokio::select! {
                r = self.cq.readable() => {
                    let mut guard = r.map_err(|e| io_error("rpma_cq_wait", &e))?;
                    take_event(&self.conn, &mut guard)?;
                }
                r = self.events.readable() => {
                    let mut guard = r.map_err(|e| io_error("rpma_conn_next_event", &e))?;
                    // The event itself is taken at the top of the loop; a spurious wake-up
                    // clears the readiness there by finding nothing.
                    match self.conn.next_event() {
                        Err(e) if e.kind() == ErrorKind::NoEvent => guard.clear_ready(),
                        r => return r.map(Next::Event),
                    }
                }
            }
        }
    }

    /// Waits until the completion channel has an event and takes it (acked, the CQ re-armed).
    async fn completion_event(&mut self) -> Result<()> {
        let mut guard = self.cq.readable().await.map_err(|e| io_error("rpma_cq_wait", &e))?;
        take_event(&self.conn, &mut guard)
    }

    /// The connection back (its fds stay non-blocking).
    #[must_use]
    pub fn into_inner(self) -> Conn<T> {
        let Self { events, cq, conn } = self;
        drop((events, cq));
        conn
    }
}

/// Takes a pending completion event (acks it, re-arms the CQ); none pending clears the
/// readiness so the next wait sleeps.
fn take_event<T: Transport>(conn: &Conn<T>, guard: &mut tokio::io::unix::AsyncFdReadyGuard<'_, Watched>) -> Result<()> {
    match conn.cq().wait() {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NoCompletion => {
            guard.clear_ready();
            Ok(())
        }
        Err(e) => Err(e),
    }
}

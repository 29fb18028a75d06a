//! The completion channels of a connection, watched for readiness: the main CQ's own channel
//! and the receive CQ's, or the one channel both share.

use rpma_core::{Conn, ErrorKind, Result, Transport};
use tokio::io::unix::{AsyncFd, AsyncFdReadyGuard};

use crate::fd::{watch, Watched};

/// Which channel became readable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Which {
    /// The main CQ's channel, or the shared one.
    Main,
    /// The receive CQ's own channel.
    Receive,
}

/// A connection's completion channels (made non-blocking) on the tokio reactor.
#[derive(Debug)]
pub(crate) struct Channels {
    /// The main CQ's channel, or the channel it shares with the receive CQ.
    pub(crate) main: AsyncFd<Watched>,
    /// The receive CQ's own channel (a receive CQ without a shared channel).
    pub(crate) receive: Option<AsyncFd<Watched>>,
    shared: bool,
}

impl Channels {
    /// Watches `conn`'s completion channels, made non-blocking.
    ///
    /// # Errors
    /// As [`watch`]; [`Provider`](ErrorKind::Provider) if an fd cannot be made non-blocking.
    pub(crate) fn new<T: Transport>(conn: &Conn<T>) -> Result<Self> {
        // Made for `AsyncConn::new`, the call that reports its errors.
        const OP: &str = "AsyncConn::new";
        if let Ok(fd) = conn.compl_fd() {
            conn.set_nonblocking(true)?;
            return Ok(Self { main: watch(OP, fd)?, receive: None, shared: true });
        }
        conn.cq().set_nonblocking(true)?;
        let main = watch(OP, conn.cq().fd())?;
        let receive = match conn.rcq() {
            Some(rcq) => {
                rcq.set_nonblocking(true)?;
                Some(watch(OP, rcq.fd())?)
            }
            None => None,
        };
        Ok(Self { main, receive, shared: false })
    }

    /// Takes the pending completion event of channel `which` (acks it and re-arms its CQ); if
    /// none is pending, clears the readiness `guard` reported so the next wait sleeps.
    ///
    /// # Errors
    /// As [`Cq::wait`](rpma_core::Cq::wait) and [`Conn::wait`] (never
    /// [`NoCompletion`](ErrorKind::NoCompletion)).
    pub(crate) fn take<T: Transport>(
        &self,
        conn: &Conn<T>,
        which: Which,
        guard: &mut AsyncFdReadyGuard<'_, Watched>,
    ) -> Result<()> {
        let r = match (self.shared, which) {
            (true, _) => conn.wait().map(drop),
            (false, Which::Main) => conn.cq().wait(),
            (false, Which::Receive) => match conn.rcq() {
                Some(rcq) => rcq.wait(),
                None => Ok(()),
            },
        };
        match r {
            Err(e) if e.kind() == ErrorKind::NoCompletion => {
                guard.clear_ready();
                Ok(())
            }
            r => r,
        }
    }
}

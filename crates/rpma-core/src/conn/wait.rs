//! Waits with a deadline, and non-blocking fds.
//!
//! Every blocking wait of the API also comes with a timeout: [`Ep::next_conn_req_timeout`],
//! [`Conn::next_event_timeout`], [`Cq::wait_timeout`], [`Conn::wait_timeout`], so a lost peer
//! cannot hang a thread. Each polls its fd (`poll(2)`) until an event can be taken or the
//! deadline passes, then reports what the non-blocking call reports when nothing is pending
//! ([`NoEvent`](ErrorKind::NoEvent) for connection events, [`NoCompletion`](ErrorKind::NoCompletion)
//! for completion events), with a detail saying it timed out. `set_nonblocking` makes the fds
//! themselves non-blocking, for an event loop (the fds are `AsFd`).

use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use crate::error::{Error, ErrorKind, Result};
use crate::transport::{CmBackend, CqBackend, ListenerBackend, Transport};
use crate::types::ConnEvent;
use crate::wc::Wc;

use super::cfg::ConnCfg;
use super::{Conn, ConnReq, Cq, Ep};

/// The status flags of `fd` (`fcntl(F_GETFL)`).
fn get_flags(op: &'static str, fd: BorrowedFd<'_>) -> Result<OFlag> {
    let flags = fcntl(std::os::fd::AsRawFd::as_raw_fd(&fd), FcntlArg::F_GETFL)
        .map_err(|e| Error::provider(op, e as i32).with_detail("fcntl(F_GETFL)"))?;
    Ok(OFlag::from_bits_truncate(flags))
}

/// Sets the status flags of `fd` (`fcntl(F_SETFL)`).
fn set_flags(op: &'static str, fd: BorrowedFd<'_>, flags: OFlag) -> Result<()> {
    fcntl(std::os::fd::AsRawFd::as_raw_fd(&fd), FcntlArg::F_SETFL(flags))
        .map_err(|e| Error::provider(op, e as i32).with_detail("fcntl(F_SETFL)"))?;
    Ok(())
}

/// Sets or clears `O_NONBLOCK` on `fd`.
///
/// # Errors
/// `Provider` with the errno of `fcntl`.
pub(crate) fn set_nonblocking(op: &'static str, fd: BorrowedFd<'_>, on: bool) -> Result<()> {
    let mut flags = get_flags(op, fd)?;
    flags.set(OFlag::O_NONBLOCK, on);
    set_flags(op, fd, flags)
}

/// `InvalidInput` for a zero timeout.
fn zero_timeout(op: &'static str) -> Error {
    Error::invalid_input(op, "the timeout is zero (set the fd non-blocking to poll without waiting)")
}

/// A backend's own timed wait that found nothing (`empty`): says it timed out, as the fd
/// path does.
fn timed_out(e: Error, empty: ErrorKind, timeout: Duration) -> Error {
    if e.kind() == empty {
        e.with_detail(&format!("timed out after {timeout:?}"))
    } else {
        e
    }
}

/// Polls `fd` (`poll(2)`) until it is readable, then calls `attempt` with `fd` non-blocking,
/// until `attempt` returns something other than `empty` (the kind that means "nothing
/// pending") or `timeout` passes.
///
/// A readable fd is the contract of every fd here (`conn::mio`), so the fd is polled first: a
/// wake costs `poll`, then the attempt's own calls, and `fcntl(F_GETFL)` once. A blocking fd is
/// made non-blocking only around an attempt (another reader may have taken the event since the
/// poll), and restored before the next poll; a non-blocking one is left alone.
fn with_deadline<R>(
    op: &'static str,
    fd: BorrowedFd<'_>,
    timeout: Duration,
    empty: ErrorKind,
    mut attempt: impl FnMut() -> Result<R>,
) -> Result<R> {
    if timeout.is_zero() {
        return Err(zero_timeout(op));
    }
    let deadline = Instant::now().checked_add(timeout);
    let flags = get_flags(op, fd)?;
    let blocking = !flags.contains(OFlag::O_NONBLOCK);
    loop {
        let left = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(Instant::now()));
        if left.is_zero() {
            return Err(Error::new(empty, op).with_detail(&format!("timed out after {timeout:?}")));
        }
        // Rounded up to a millisecond: never a busy loop of zero-length polls.
        let ms = u32::try_from(left.as_millis().max(1)).unwrap_or(u32::MAX);
        let pt = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
        match poll(&mut [PollFd::new(fd, PollFlags::POLLIN)], pt) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(Error::provider(op, e as i32).with_detail("poll")),
        }
        let r = if blocking {
            set_flags(op, fd, flags | OFlag::O_NONBLOCK)?;
            let r = attempt();
            // The attempt's own result matters more than a failure to restore the flag.
            let _ = set_flags(op, fd, flags);
            r
        } else {
            attempt()
        };
        match r {
            Err(e) if e.kind() == empty => {}
            other => return other,
        }
    }
}

impl<T: Transport> Ep<T> {
    /// [`Ep::next_conn_req`] waiting at most `timeout`.
    ///
    /// # Errors
    /// [`NoEvent`](ErrorKind::NoEvent) if no request came in time;
    /// [`InvalidInput`](ErrorKind::InvalidInput) for a zero timeout; as [`Ep::next_conn_req`]
    /// otherwise.
    pub fn next_conn_req_timeout(&self, cfg: Option<&ConnCfg<T>>, timeout: Duration) -> Result<ConnReq<T>> {
        const OP: &str = "Ep::next_conn_req_timeout";
        if timeout.is_zero() {
            return Err(zero_timeout(OP));
        }
        match self.take_request(cfg, |l, qc| l.next_request_timeout(qc, timeout)) {
            Some(taken) => taken.map_err(|e| timed_out(e, ErrorKind::NoEvent, timeout)),
            None => with_deadline(OP, self.fd(), timeout, ErrorKind::NoEvent, || self.next_conn_req(cfg)),
        }
        .map_err(|e| e.in_op(OP))
    }

    /// Makes the endpoint's fd non-blocking (`on`) or blocking: [`Ep::next_conn_req`] then
    /// returns [`NoEvent`](ErrorKind::NoEvent) instead of waiting.
    ///
    /// # Errors
    /// [`Provider`](ErrorKind::Provider) if `fcntl` fails.
    pub fn set_nonblocking(&self, on: bool) -> Result<()> {
        set_nonblocking("Ep::set_nonblocking", self.fd(), on)
    }
}

impl<T: Transport> Conn<T> {
    /// [`Conn::next_event`] waiting at most `timeout`.
    ///
    /// # Errors
    /// [`NoEvent`](ErrorKind::NoEvent) if no event came in time;
    /// [`InvalidInput`](ErrorKind::InvalidInput) for a zero timeout; as [`Conn::next_event`]
    /// otherwise.
    pub fn next_event_timeout(&self, timeout: Duration) -> Result<ConnEvent> {
        const OP: &str = "Conn::next_event_timeout";
        if timeout.is_zero() {
            return Err(zero_timeout(OP));
        }
        match self.qp().next_event_timeout(timeout) {
            Some(taken) => self.take_event(taken.map_err(|e| timed_out(e, ErrorKind::NoEvent, timeout))),
            None => with_deadline(OP, self.event_fd(), timeout, ErrorKind::NoEvent, || self.next_event()),
        }
        .map_err(|e| e.in_op(OP))
    }

    /// [`Conn::wait`] waiting at most `timeout`.
    ///
    /// # Errors
    /// [`NoCompletion`](ErrorKind::NoCompletion) if no completion event came in time;
    /// [`InvalidInput`](ErrorKind::InvalidInput) for a zero timeout; as [`Conn::wait`] otherwise.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<(Cq<'_, T>, bool)> {
        const OP: &str = "Conn::wait_timeout";
        let fd = self.compl_fd().map_err(|e| e.in_op(OP))?;
        with_deadline(OP, fd, timeout, ErrorKind::NoCompletion, || self.wait()).map_err(|e| e.in_op(OP))
    }

    /// Makes the connection's CM event fd (and its shared completion channel's fd, if any)
    /// non-blocking (`on`) or blocking.
    ///
    /// # Errors
    /// [`Provider`](ErrorKind::Provider) if `fcntl` fails.
    pub fn set_nonblocking(&self, on: bool) -> Result<()> {
        const OP: &str = "Conn::set_nonblocking";
        set_nonblocking(OP, self.event_fd(), on)?;
        match self.compl_fd() {
            Ok(fd) => set_nonblocking(OP, fd, on),
            Err(_) => Ok(()),
        }
    }
}

impl<T: Transport> Cq<'_, T> {
    /// [`Cq::wait`] waiting at most `timeout`.
    ///
    /// # Errors
    /// [`NoCompletion`](ErrorKind::NoCompletion) if no completion event came in time;
    /// [`InvalidInput`](ErrorKind::InvalidInput) for a zero timeout; as [`Cq::wait`] otherwise.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<()> {
        const OP: &str = "Cq::wait_timeout";
        if timeout.is_zero() {
            return Err(zero_timeout(OP));
        }
        if self.shared {
            return Err(Error::new(ErrorKind::SharedChannel, OP));
        }
        match self.cq.wait_timeout(timeout) {
            Some(r) => r.map_err(|e| timed_out(e, ErrorKind::NoCompletion, timeout)),
            None => with_deadline(OP, self.fd(), timeout, ErrorKind::NoCompletion, || self.wait()),
        }
        .map_err(|e| e.in_op(OP))
    }

    /// Makes the CQ's completion-channel fd non-blocking (`on`) or blocking.
    ///
    /// # Errors
    /// [`Provider`](ErrorKind::Provider) if `fcntl` fails.
    pub fn set_nonblocking(&self, on: bool) -> Result<()> {
        set_nonblocking("Cq::set_nonblocking", self.fd(), on)
    }

    /// The next completion, sleeping until one comes (at most `timeout`; `None`: no limit):
    /// polls, and while the queue is empty waits for a completion event ([`Cq::wait`] or
    /// [`Cq::wait_timeout`]) and polls again. Use it instead of a polling loop where a thread
    /// may sleep; keep [`Cq::next_wc`] for busy polling.
    ///
    /// ```
    /// # fn f<T: rpma_core::Transport>(conn: &rpma_core::Conn<T>) -> rpma_core::Result<()> {
    /// let wc = conn.cq().wait_next(Some(std::time::Duration::from_secs(5)))?;
    /// assert!(wc.is_success());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`NoCompletion`](ErrorKind::NoCompletion) if none came within `timeout` (or the fd is
    /// non-blocking and none is pending); [`SharedChannel`](ErrorKind::SharedChannel) if the
    /// channel is shared (wait with [`Conn::wait_timeout`](crate::Conn::wait_timeout));
    /// [`InvalidInput`](ErrorKind::InvalidInput) for a zero timeout; as [`Cq::poll`] otherwise.
    pub fn wait_next(&self, timeout: Option<Duration>) -> Result<Wc> {
        const OP: &str = "Cq::wait_next";
        if timeout.is_some_and(|t| t.is_zero()) {
            return Err(zero_timeout(OP));
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(wc) = self.next_wc()? {
                return Ok(wc);
            }
            // The CQ stays armed between waits, so a completion queued after the poll above
            // still raises the event this wait takes.
            match deadline {
                None => self.wait(),
                Some(d) => match d.checked_duration_since(Instant::now()).filter(|left| !left.is_zero()) {
                    Some(left) => self.wait_timeout(left),
                    None => Err(Error::new(ErrorKind::NoCompletion, OP)
                        .with_detail(&format!("timed out after {:?}", timeout.unwrap_or_default()))),
                },
            }
            .map_err(|e| e.in_op(OP))?;
        }
    }
}

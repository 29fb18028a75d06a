//! librpma's blocking waits (`rpma_cq_wait`, `rpma_conn_wait`, `rpma_conn_next_event`) on an
//! object behind a handle's lock, without holding the lock while the wait sleeps.
//!
//! A wait sleeps in `poll(2)` on the object's fd with the lock released, so other threads post
//! and poll meanwhile; when the fd becomes readable it takes the lock and, if the fd is still
//! readable (no other thread took the event first), takes the event with the backend's
//! blocking call, which returns at once: every taker of an event holds the lock. The fd's
//! flags are never changed. On a non-blocking fd the wait is one non-blocking call under the
//! lock, as librpma's.
//!
//! The mock runs its deferred work (`RPMA_MOCK_MODE=deferred`) inside waits and polls: on the
//! mock the sleep ends every [`Backend::WAIT_TICK`](crate::backend::Backend::WAIT_TICK) and
//! the wait runs a wait of a microsecond under the lock, which runs that work.

use std::os::fd::{BorrowedFd, RawFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use rpma_core::{Error, ErrorKind};

use crate::{code, CResult};

/// How long the wait run under the lock on a backend with a tick lasts.
pub(crate) const ATTEMPT: Duration = Duration::from_micros(1);

/// What one turn of a wait under the lock came to.
pub(crate) enum Turn<R> {
    /// The wait is over, with this result.
    Done(R),
    /// Nothing could be taken: sleep until this fd is readable.
    Sleep(RawFd),
}

/// One turn of a wait on `fd`, under the lock: `once` (the backend's blocking call) if the fd
/// is non-blocking or readable; else, on a backend with a tick, `attempt` (a wait of
/// [`ATTEMPT`]), whose `empty` kind means nothing came; else sleep.
///
/// # Errors
/// What `once` or `attempt` returns, as a librpma code.
pub(crate) fn turn<R>(
    fd: RawFd,
    tick: Option<Duration>,
    empty: ErrorKind,
    once: impl FnOnce() -> rpma_core::Result<R>,
    attempt: impl FnOnce() -> rpma_core::Result<R>,
) -> CResult<Turn<R>> {
    if is_nonblocking(fd) || ready(fd, PollTimeout::ZERO)? {
        return once().map(Turn::Done).map_err(code);
    }
    if tick.is_some() {
        match attempt() {
            Err(e) if e.kind() == empty => {}
            r => return r.map(Turn::Done).map_err(code),
        }
    }
    Ok(Turn::Sleep(fd))
}

/// A blocking wait: runs `locked` (one [`turn`] with the lock held, released when it returns)
/// until it is done, sleeping without the lock in between until the fd it names is readable
/// (at most `tick`, if any).
///
/// # Errors
/// What a turn returns; `RPMA_E_PROVIDER` if `poll(2)` fails.
pub(crate) fn blocking<R>(tick: Option<Duration>, mut locked: impl FnMut() -> CResult<Turn<R>>) -> CResult<R> {
    let timeout = tick.map_or(PollTimeout::NONE, |t| {
        PollTimeout::try_from(u32::try_from(t.as_millis().max(1)).unwrap_or(u32::MAX)).unwrap_or(PollTimeout::MAX)
    });
    loop {
        match locked()? {
            Turn::Done(r) => return Ok(r),
            Turn::Sleep(fd) => {
                ready(fd, timeout)?;
            }
        }
    }
}

/// Whether `fd` has `O_NONBLOCK` (librpma's waits then do not block).
pub(crate) fn is_nonblocking(fd: RawFd) -> bool {
    fcntl(fd, FcntlArg::F_GETFL).is_ok_and(|f| OFlag::from_bits_truncate(f).contains(OFlag::O_NONBLOCK))
}

/// Whether `fd` is readable (or in error: the backend's call then reports it) within
/// `timeout`; an interrupted `poll` counts as not ready.
fn ready(fd: RawFd, timeout: PollTimeout) -> CResult<bool> {
    // SAFETY: [C2] `fd` is the fd of an object behind a live handle (a handle is not deleted
    // while another thread uses it: librpma's rule, docs/capi.md); it stays open for this call.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let mut fds = [PollFd::new(borrowed, PollFlags::POLLIN)];
    match poll(&mut fds, timeout) {
        Ok(n) => Ok(n > 0),
        Err(Errno::EINTR) => Ok(false),
        Err(e) => Err(code(Error::provider("poll", e as i32))),
    }
}

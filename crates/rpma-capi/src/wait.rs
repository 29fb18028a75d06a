//! librpma's blocking waits (`rpma_cq_wait`, `rpma_conn_wait`, `rpma_conn_next_event`) on an
//! object behind a handle's lock, without holding the lock while the wait sleeps.
//!
//! (`rpma_cq_wait` and `rpma_conn_wait` on verbs need none of this: they take the event
//! outside the lock, with thread-safe libibverbs calls, `rpma_verbs::CqEvents` and
//! `rpma_verbs::SharedCqEvents`.)
//!
//! A wait sleeps in `poll(2)` on the object's fd with the lock released, so other threads post
//! and poll meanwhile; when the fd becomes readable it takes the lock and, if the fd is still
//! readable (no other thread took the event first), takes the event with the backend's
//! blocking call, which returns at once: every taker of an event holds the lock. The fd's
//! flags are never changed. On a non-blocking fd the wait is one non-blocking call under the
//! lock, as librpma's (after a `poll(2)` that does not sleep).
//!
//! On the mock the fds become readable without anyone calling into the mock: the fabric of
//! `RPMA_BACKEND=mock` has background progress, also in its deferred mode
//! (`RPMA_MOCK_MODE=deferred`, tests/c_programs.rs runs the waits there).

use std::os::fd::{BorrowedFd, RawFd};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use rpma_core::Error;

use crate::ffi::{code, CResult};

/// What one turn of a wait under the lock came to.
pub(crate) enum Turn<R> {
    /// The wait is over, with this result.
    Done(R),
    /// Nothing could be taken: sleep until this fd is readable.
    Sleep(RawFd),
}

/// One turn of a wait on `fd`, under the lock: `once` (the backend's blocking call) if the fd
/// is readable (every taker of an event holds the lock, so the event is still there) or
/// non-blocking (it returns at once); else sleep. Readable is asked first: a wait whose event
/// has come costs one `poll(2)` more than librpma's, not two.
///
/// # Errors
/// What `once` returns, as a librpma code; `RPMA_E_PROVIDER` if `poll(2)` fails.
pub(crate) fn turn<R>(fd: RawFd, once: impl FnOnce() -> rpma_core::Result<R>) -> CResult<Turn<R>> {
    if ready(fd, PollTimeout::ZERO)? || is_nonblocking(fd) {
        return once().map(Turn::Done).map_err(code);
    }
    Ok(Turn::Sleep(fd))
}

/// A blocking wait: runs `locked` (one [`turn`] with the lock held, released when it returns)
/// until it is done, sleeping without the lock in between until the fd it names is readable.
///
/// # Errors
/// What a turn returns; `RPMA_E_PROVIDER` if `poll(2)` fails.
pub(crate) fn blocking<R>(mut locked: impl FnMut() -> CResult<Turn<R>>) -> CResult<R> {
    loop {
        match locked()? {
            Turn::Done(r) => return Ok(r),
            Turn::Sleep(fd) => {
                ready(fd, PollTimeout::NONE)?;
            }
        }
    }
}

/// Whether `fd` has `O_NONBLOCK` (librpma's waits then do not block).
fn is_nonblocking(fd: RawFd) -> bool {
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

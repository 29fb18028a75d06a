//! Watching an fd that an rpma object owns.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::panic::{catch_unwind, AssertUnwindSafe};

use rpma_core::{Error, ErrorKind, Result};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// A duplicate of an fd an rpma object owns, registered with tokio. The duplicate shares the
/// file description (epoll reports its readiness) and is owned here, so it stays open as long as
/// tokio watches it, whatever happens to the object.
pub(crate) type Watched = OwnedFd;

/// Registers a duplicate of `fd` for readiness with the current tokio runtime.
///
/// # Errors
/// [`InvalidInput`](ErrorKind::InvalidInput) outside a tokio runtime or on one without IO enabled
/// (tokio panics there; the panic is caught and reported); [`Provider`](ErrorKind::Provider) if the
/// fd cannot be duplicated or registered.
pub(crate) fn watch(op: &'static str, fd: BorrowedFd<'_>) -> Result<AsyncFd<Watched>> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(Error::invalid_input(op, "not called from a tokio runtime"));
    }
    let owned = fd.try_clone_to_owned().map_err(|e| io_error(op, &e))?;
    // `AsyncFd::with_interest` is deprecated because a generic inner value may close its fd while
    // tokio still watches it; an `OwnedFd` cannot (it closes it only when the `AsyncFd` drops it,
    // after deregistering), which is the I/O safety the deprecation asks for.
    #[allow(deprecated)]
    let registered = catch_unwind(AssertUnwindSafe(|| AsyncFd::with_interest(owned, Interest::READABLE)));
    match registered {
        Ok(r) => r.map_err(|e| io_error(op, &e)),
        Err(_) => {
            Err(Error::invalid_input(op, "the tokio runtime has IO disabled (build it with enable_io or enable_all)"))
        }
    }
}

/// An IO error of tokio as an rpma error.
pub(crate) fn io_error(op: &'static str, e: &io::Error) -> Error {
    match e.raw_os_error() {
        Some(errno) => Error::provider(op, errno),
        None => Error::new(ErrorKind::Other, op),
    }
    .with_detail(&e.to_string())
}

//! Event queues with a real file descriptor: readable while an event is pending, so poll/epoll
//! work on the mock exactly as on a completion or CM event channel.

use std::collections::VecDeque;
use std::io::{ErrorKind as IoKind, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Mutex, PoisonError};

use crate::counters::Live;

const ENOMEM: i32 = 12;

/// A queue of events whose fd carries one byte per pending event.
///
/// The consumer side of the socket pair is the fd users see: if they set `O_NONBLOCK` on it,
/// [`Notifier::pop`] stops blocking and returns `Ok(None)` when nothing is pending.
pub(crate) struct Notifier<E> {
    tx: UnixStream,
    rx: UnixStream,
    queue: Mutex<VecDeque<E>>,
    _live: Live,
}

impl<E> Notifier<E> {
    pub(crate) fn new(live: Live) -> std::io::Result<Self> {
        let (tx, rx) = UnixStream::pair()?;
        tx.set_nonblocking(true)?;
        Ok(Self { tx, rx, queue: Mutex::new(VecDeque::new()), _live: live })
    }

    pub(crate) fn push(&self, e: E) {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner).push_back(e);
        // One byte per event; a full socket buffer (never reached by the bounded event sources)
        // only delays readiness.
        let _ = (&self.tx).write(&[1]);
    }

    /// Takes the next event: blocks on the fd unless it is non-blocking (then `Ok(None)`).
    pub(crate) fn pop(&self) -> std::io::Result<Option<E>> {
        let mut b = [0u8; 1];
        loop {
            match (&self.rx).read(&mut b) {
                Ok(1) => break,
                Ok(_) => return Err(std::io::Error::from(IoKind::UnexpectedEof)),
                Err(e) if e.kind() == IoKind::Interrupted => {}
                Err(e) if e.kind() == IoKind::WouldBlock => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        Ok(self.queue.lock().unwrap_or_else(PoisonError::into_inner).pop_front())
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.rx.as_fd()
    }

    /// Drains every pending event without blocking.
    pub(crate) fn drain(&self) -> Vec<E> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner).drain(..).collect()
    }
}

impl<E> std::fmt::Debug for Notifier<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier").finish_non_exhaustive()
    }
}

pub(crate) fn new_notifier<E>(live: Live, op: &'static str) -> rpma_core::Result<Notifier<E>> {
    Notifier::new(live).map_err(|e| rpma_core::Error::provider(op, e.raw_os_error().unwrap_or(ENOMEM)))
}

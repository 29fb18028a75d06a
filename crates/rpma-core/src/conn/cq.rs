//! Completion queues, borrowed from a connection or a shared receive queue.

use std::fmt;
use std::marker::PhantomData;
use std::os::fd::{AsFd, BorrowedFd};

use crate::error::{Error, ErrorKind, Result};
use crate::transport::{CqBackend, Transport};
use crate::wc::Wc;

/// A completion queue (`struct rpma_cq`), borrowed from its connection or shared RQ.
///
/// `Copy`, neither `Send` nor `Sync`: it is polled on the thread that holds its connection
/// (polling retires the connection's operations, bookkeeping that thread owns). The receive
/// CQ of a shared receive queue may be polled from several threads: each takes it from the
/// [`Srq`](crate::Srq) (`Send + Sync`) itself.
pub struct Cq<'a, T: Transport> {
    pub(super) cq: &'a T::Cq,
    pub(super) shared: bool,
    pub(super) _local: PhantomData<*const ()>,
}

impl<T: Transport> fmt::Debug for Cq<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cq").field("shared_channel", &self.shared).finish_non_exhaustive()
    }
}

impl<T: Transport> Clone for Cq<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Transport> Copy for Cq<'_, T> {}

impl<'a, T: Transport> Cq<'a, T> {
    /// `rpma_cq_get_fd`: the fd of the CQ's completion channel (the shared channel's fd if it
    /// is shared). It becomes readable when a completion event is pending; set `O_NONBLOCK` on
    /// it to make [`Cq::wait`] non-blocking.
    #[must_use]
    pub fn fd(&self) -> BorrowedFd<'a> {
        self.cq.fd()
    }

    /// Whether the CQ's completion channel is shared with the connection's other CQ (wait on
    /// it with [`Conn::wait`](crate::Conn::wait), not [`Cq::wait`]).
    #[must_use]
    pub const fn is_shared(&self) -> bool {
        self.shared
    }

    /// `rpma_cq_wait`: waits for a completion event, acks it and re-arms the CQ. Afterwards
    /// drain the CQ with [`Cq::poll`] (a wait may also be spurious).
    ///
    /// # Errors
    /// [`SharedChannel`](crate::ErrorKind::SharedChannel) if the channel is shared (use
    /// [`Conn::wait`](crate::Conn::wait)); [`NoCompletion`](crate::ErrorKind::NoCompletion) if no event can be had
    /// (non-blocking fd); [`Provider`](crate::ErrorKind::Provider) if re-arming fails.
    pub fn wait(&self) -> Result<()> {
        if self.shared {
            return Err(Error::new(ErrorKind::SharedChannel, "Cq::wait"));
        }
        self.cq.wait().map_err(|e| e.in_op("Cq::wait"))
    }

    /// `rpma_cq_get_wc`: polls up to `wc.len()` completions into `wc` and returns how many
    /// (`0`: the queue is empty; librpma's `RPMA_E_NO_COMPLETION`).
    ///
    /// # Errors
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) if `wc` is empty (`num_entries < 1`);
    /// [`Provider`](crate::ErrorKind::Provider) if polling fails;
    /// [`Other`](crate::ErrorKind::Other) if the provider reports more entries than asked.
    #[doc(alias = "rpma_cq_get_wc")]
    #[inline(always)]
    pub fn poll(&self, wc: &mut [Wc]) -> Result<usize> {
        if wc.is_empty() {
            return Err(Error::invalid_input("Cq::poll", "num_entries < 1"));
        }
        polled(self.cq.poll(wc), wc.len())
    }

    /// Polls one completion (`rpma_cq_get_wc` with `num_entries == 1`): `None` if the queue is
    /// empty.
    ///
    /// # Errors
    /// As [`Cq::poll`].
    #[doc(alias = "rpma_cq_get_wc")]
    #[inline]
    pub fn next_wc(&self) -> Result<Option<Wc>> {
        let mut wc = [Wc::EMPTY];
        Ok((self.poll(&mut wc)? == 1).then_some(wc[0]))
    }

    /// Whether the CQ's channel is shared with the connection's other CQ.
    #[must_use]
    pub const fn is_channel_shared(&self) -> bool {
        self.shared
    }

    /// The backend's CQ object (part of the backend contract, [`crate::transport`], which is
    /// not semver-stable).
    #[must_use]
    pub const fn backend(&self) -> &'a T::Cq {
        self.cq
    }
}

/// `rpma_cq_get_wc`'s mapping of a poll result for `asked` entries: none → `Ok(0)` (librpma's
/// `NoCompletion`); more than asked (a misbehaving provider) → `Other`; a failure → its kind.
#[inline]
fn polled(r: Result<usize>, asked: usize) -> Result<usize> {
    const OP: &str = "Cq::poll";
    match r {
        Ok(n) if n <= asked => Ok(n),
        Ok(_) => Err(Error::new(ErrorKind::Other, OP).with_detail("provider returned too many entries")),
        Err(e) => Err(e.in_op(OP)),
    }
}

impl<T: Transport> AsFd for Cq<'_, T> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.cq.fd()
    }
}

#[cfg(test)]
#[allow(non_snake_case)]
mod tests {
    use super::polled;
    use crate::error::{Error, ErrorKind};

    /// librpma's `get_wc__poll_cq_more_data` with the provider returning more entries than
    /// asked: no backend can be made to do that, so the guard is tested on its own.
    #[test]
    fn cq_get_wc__poll_cq_more_than_asked_E_UNKNOWN() {
        for (asked, got) in [(1, 2), (4, 5), (4, usize::MAX)] {
            let e = polled(Ok(got), asked).expect_err("more entries than asked must fail");
            assert_eq!((e.kind(), e.op()), (ErrorKind::Other, "Cq::poll"));
        }
        assert_eq!(polled(Ok(4), 4), Ok(4));
        assert_eq!(polled(Ok(1), 4), Ok(1));
        assert_eq!(polled(Ok(0), 4), Ok(0));
        let e = polled(Err(Error::provider("ibv_poll_cq", 5)), 4).expect_err("a failed poll");
        assert_eq!((e.kind(), e.op(), e.errno()), (ErrorKind::Provider, "Cq::poll", Some(5)));
    }
}

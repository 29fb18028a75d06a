//! A `mio` event source (feature `mio`): the runtime-agnostic way to watch rpma-rs's fds.
//!
//! An endpoint (its connection requests), a connection (its CM events) and a completion queue
//! (its completion channel, the shared one if the channel is shared) register with a
//! `mio::Registry` as any `mio` source: `registry.register(&mut ep, token, Interest::READABLE)`.
//! Readiness is edge-triggered: when the fd reports readable, take what is pending with the
//! non-blocking call until it reports nothing (`next_conn_req`, `next_event`: `NoEvent`;
//! `Cq::wait`: `NoCompletion`, then poll the CQ empty), after making the fd non-blocking
//! (`set_nonblocking(true)`). This is what async runtimes other than tokio (smol, async-io,
//! glommio, ...) build on; rpma-tokio does the same with `AsyncFd`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use mio::event::Source;
use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};

use crate::transport::Transport;

use super::{Conn, Cq, Ep};

/// `Source` through the fd `fd` names.
macro_rules! source_by_fd {
    ($ty:ty, $($lt:lifetime)?, $fd:expr, $what:literal) => {
        #[doc = concat!("Registers ", $what, " for readiness (feature `mio`).")]
        impl<$($lt,)? T: Transport> Source for $ty {
            fn register(&mut self, registry: &Registry, token: Token, interests: Interest) -> io::Result<()> {
                let fd: BorrowedFd<'_> = $fd(&*self);
                SourceFd(&fd.as_raw_fd()).register(registry, token, interests)
            }

            fn reregister(&mut self, registry: &Registry, token: Token, interests: Interest) -> io::Result<()> {
                let fd: BorrowedFd<'_> = $fd(&*self);
                SourceFd(&fd.as_raw_fd()).reregister(registry, token, interests)
            }

            fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
                let fd: BorrowedFd<'_> = $fd(&*self);
                SourceFd(&fd.as_raw_fd()).deregister(registry)
            }
        }
    };
}

source_by_fd!(Ep<T>, , Ep::fd, "the endpoint's fd (`rpma_ep_get_fd`: a connection request is pending)");
source_by_fd!(Conn<T>, , Conn::event_fd, "the connection's CM event fd (`rpma_conn_get_event_fd`: an event is pending)");
source_by_fd!(
    Cq<'a, T>,
    'a,
    Cq::fd,
    "the CQ's completion channel (`rpma_cq_get_fd`, the shared channel if it is shared: a completion event is pending)"
);

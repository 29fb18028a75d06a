//! Listening endpoints.

use std::fmt;
use std::os::fd::{AsFd, BorrowedFd};

use crate::error::Result;
use crate::peer::Peer;
use crate::trace::{ConnTrace, EpTrace, Step};
use crate::transport::{ListenerBackend, QueueConfig, Transport};

use super::cfg::ConnCfg;
use super::req::queue_config;
use super::ConnReq;
use super::OpLimits;

/// A listening endpoint (`struct rpma_ep`), the passive side's source of connection requests.
///
/// `Send + Sync`, but used by one thread at a time in practice (librpma's rule;
/// `next_conn_req` takes `&self` but the event channel is one stream).
pub struct Ep<T: Transport> {
    listener: Option<T::Listener>,
    peer: Peer<T>,
    trace: EpTrace,
}

impl<T: Transport> fmt::Debug for Ep<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ep").finish_non_exhaustive()
    }
}

impl<T: Transport> Ep<T> {
    /// `rpma_ep_listen`: listens for connection requests on `addr:port`.
    ///
    /// # Errors
    /// [`Provider`](crate::ErrorKind::Provider) if the address cannot be translated, bound or listened
    /// on (e.g. the port is taken); [`OutOfMemory`](crate::ErrorKind::OutOfMemory).
    pub fn listen(peer: &Peer<T>, addr: &str, port: &str) -> Result<Self> {
        let l = peer
            .transport()
            .listen(&peer.inner.pd, addr, port)
            .map_err(|e| e.in_op("Ep::listen").with_context(&format!("listening on {addr}:{port}")))?;
        rpma_log!(Notice in "Ep::listen", "Waiting for incoming connection on {addr}:{port}");
        Ok(Self { listener: Some(l), peer: peer.clone(), trace: EpTrace::new(addr, port) })
    }

    fn listener(&self) -> &T::Listener {
        self.listener.as_ref().expect("listener present until shutdown")
    }

    /// `rpma_ep_get_fd`: the fd of the endpoint's event channel (set `O_NONBLOCK` to make
    /// [`Ep::next_conn_req`] non-blocking; usable with poll/epoll).
    #[must_use]
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.listener().fd()
    }

    /// `rpma_ep_next_conn_req`: takes the next incoming connection request and builds its
    /// queues per `cfg` (`None`: defaults).
    ///
    /// # Errors
    /// [`NoEvent`](crate::ErrorKind::NoEvent) if none is pending and the fd is non-blocking;
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) if the next event is not a connection
    /// request, `cfg`'s SRQ was created on another peer than the endpoint's (another protection
    /// domain, or another device), `cfg` combines a shared completion channel with an SRQ that has
    /// its own receive CQ, a queue size exceeds the device's limit, the retry count exceeds 7 or
    /// the ACK timeout is outside 1..=31 (a request refused for `cfg` stays pending);
    /// [`Provider`](crate::ErrorKind::Provider) if getting the event or building the queues fails;
    /// [`OutOfMemory`](crate::ErrorKind::OutOfMemory).
    pub fn next_conn_req(&self, cfg: Option<&ConnCfg<T>>) -> Result<ConnReq<T>> {
        self.take_request(cfg, |l, qc| Some(l.next_request(qc))).unwrap_or_else(|| unreachable!("taken"))
    }

    /// A request taken by `take` from the backend (`None`: `take` does not wait that way),
    /// with its queues per `cfg`, validated first.
    pub(super) fn take_request(
        &self,
        cfg: Option<&ConnCfg<T>>,
        take: impl FnOnce(&T::Listener, &QueueConfig<'_, T>) -> Option<Result<T::Qp>>,
    ) -> Option<Result<ConnReq<T>>> {
        const OP: &str = "Ep::next_conn_req";
        let srq = cfg.and_then(ConnCfg::srq).cloned();
        let qc = match queue_config(OP, &self.peer, cfg, &srq) {
            Ok(qc) => qc,
            Err(e) => return Some(Err(e)),
        };
        let shared = qc.shared_channel;
        let limits = OpLimits::of(&qc, &self.peer.inner.caps);
        let qp = match take(self.listener(), &qc)? {
            Ok(qp) => qp,
            Err(e) => return Some(Err(e.in_op(OP))),
        };
        // The span begins with the request taken (no span for each attempt of a non-blocking
        // endpoint that finds none).
        let trace = ConnTrace::passive(&self.peer, &self.trace);
        trace.attach::<T>(&qp);
        trace.step(Step::Received);
        Some(Ok(ConnReq {
            qp: Some(qp),
            shared,
            incoming: true,
            limits,
            _not_sync: std::marker::PhantomData,
            srq,
            peer: self.peer.clone(),
            trace,
        }))
    }

    /// `rpma_ep_shutdown`: stops listening. Existing connections are not affected. (Dropping
    /// the endpoint does the same, logging a failure.)
    ///
    /// # Errors
    /// [`Provider`](crate::ErrorKind::Provider) if destroying the listening identifier fails; the
    /// endpoint is gone all the same (docs/decisions.md #10).
    pub fn shutdown(mut self) -> Result<()> {
        self.listener.take().map_or(Ok(()), |l| l.shutdown().map_err(|e| e.in_op("Ep::shutdown")))
    }
}

impl<T: Transport> AsFd for Ep<T> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd()
    }
}

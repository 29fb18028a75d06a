//! An endpoint whose connection requests are awaited.

use std::future::{poll_fn, Future};
use std::task::Poll;
use std::time::Duration;

use rpma_core::{ConnCfg, ConnReq, Ep, ErrorKind, Result, Transport};
use tokio::io::unix::AsyncFd;

use crate::fd::{io_error, watch, Watched};
use crate::timeout::{Deadline, Limit};

/// An endpoint ([`Ep`]) on a tokio runtime. `Send`.
#[derive(Debug)]
pub struct AsyncEp<T: Transport> {
    fd: AsyncFd<Watched>,
    limit: Limit,
    ep: Ep<T>,
}

impl<T: Transport> AsyncEp<T> {
    /// Watches `ep`'s fd (made non-blocking) on the current tokio runtime.
    ///
    /// # Errors
    /// [`InvalidInput`](ErrorKind::InvalidInput) outside a tokio runtime with IO enabled;
    /// [`Provider`](ErrorKind::Provider) if the fd cannot be made non-blocking or registered.
    pub fn new(ep: Ep<T>) -> Result<Self> {
        ep.set_nonblocking(true)?;
        Ok(Self { fd: watch("AsyncEp::new", ep.fd())?, limit: Limit::default(), ep })
    }

    /// The endpoint.
    #[must_use]
    pub const fn ep(&self) -> &Ep<T> {
        &self.ep
    }

    /// Limits every later [`AsyncEp::accept`] to `timeout` (`None`, the default: no limit);
    /// one that times out fails with [`NoEvent`](ErrorKind::NoEvent).
    ///
    /// # Errors
    /// [`InvalidInput`](ErrorKind::InvalidInput) for a zero timeout, outside a tokio runtime, or on
    /// a runtime without timers.
    pub fn set_timeout(&self, timeout: Option<Duration>) -> Result<()> {
        self.limit.set("AsyncEp::set_timeout", timeout)
    }

    /// The next connection request (`rpma_ep_next_conn_req`), built with `cfg`.
    ///
    /// Cancel-safe: a request is taken only when the future completes.
    ///
    /// # Errors
    /// As [`Ep::next_conn_req`]; [`NoEvent`](ErrorKind::NoEvent) when the endpoint's timeout
    /// passes (never otherwise: it waits instead).
    pub async fn accept(&mut self, cfg: Option<&ConnCfg<T>>) -> Result<ConnReq<T>> {
        const OP: &str = "AsyncEp::accept";
        let mut deadline = Deadline::default();
        loop {
            let mut readable = std::pin::pin!(self.fd.readable());
            let mut guard = poll_fn(|cx| {
                if let Poll::Ready(r) = readable.as_mut().poll(cx) {
                    return Poll::Ready(r.map_err(|e| io_error(OP, &e)));
                }
                deadline.poll(cx, self.limit.get(), OP, ErrorKind::NoEvent, "waiting for a connection request").map(Err)
            })
            .await?;
            match self.ep.next_conn_req(cfg) {
                Err(e) if e.kind() == ErrorKind::NoEvent => guard.clear_ready(),
                r => return r.map_err(|e| e.in_op(OP)),
            }
        }
    }

    /// The endpoint back (its fd stays non-blocking).
    #[must_use]
    pub fn into_inner(self) -> Ep<T> {
        let Self { fd, limit: _, ep } = self;
        drop(fd);
        ep
    }
}

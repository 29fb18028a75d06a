//! An endpoint whose connection requests are awaited.

use rpma_core::{ConnCfg, ConnReq, Ep, ErrorKind, Result, Transport};
use tokio::io::unix::AsyncFd;

use crate::fd::{io_error, watch, Watched};

/// An endpoint ([`Ep`]) on a tokio runtime. `Send`.
#[derive(Debug)]
pub struct AsyncEp<T: Transport> {
    fd: AsyncFd<Watched>,
    ep: Ep<T>,
}

impl<T: Transport> AsyncEp<T> {
    /// Watches `ep`'s fd (made non-blocking) on the current tokio runtime.
    ///
    /// # Errors
    /// [`Inval`](ErrorKind::Inval) outside a tokio runtime with IO enabled;
    /// [`Provider`](ErrorKind::Provider) if the fd cannot be made non-blocking or registered.
    pub fn new(ep: Ep<T>) -> Result<Self> {
        ep.set_nonblocking(true)?;
        Ok(Self { fd: watch("rpma_ep_get_fd", ep.fd())?, ep })
    }

    /// The endpoint.
    #[must_use]
    pub const fn ep(&self) -> &Ep<T> {
        &self.ep
    }

    /// The next connection request (`rpma_ep_next_conn_req`), built with `cfg`.
    ///
    /// Cancel-safe: a request is taken only when the future completes.
    ///
    /// # Errors
    /// As [`Ep::next_conn_req`] (never [`NoEvent`](ErrorKind::NoEvent): it waits instead).
    pub async fn accept(&mut self, cfg: Option<&ConnCfg<T>>) -> Result<ConnReq<T>> {
        loop {
            let mut guard = self.fd.readable().await.map_err(|e| io_error("rpma_ep_next_conn_req", &e))?;
            match self.ep.next_conn_req(cfg) {
                Err(e) if e.kind() == ErrorKind::NoEvent => guard.clear_ready(),
                r => return r,
            }
        }
    }

    /// The endpoint back (its fd stays non-blocking).
    #[must_use]
    pub fn into_inner(self) -> Ep<T> {
        let Self { fd, ep } = self;
        drop(fd);
        ep
    }
}

//! Unclaimed completions as a [`Stream`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;
use rpma_core::{Result, Transport, Wc};

use crate::conn::AsyncConn;

/// The unclaimed completions of a connection as a [`Stream`] ([`AsyncConn::completions`]):
/// each item is what [`AsyncConn::next_wc`] returns. The stream never ends; an error (a failed
/// poll, the connection's timeout) is an item, after which it may be polled again.
///
/// Dropping it at any point loses nothing: a completion is taken only when it is yielded.
pub struct Completions<'a, T: Transport> {
    conn: &'a AsyncConn<T>,
    /// The wait in progress, once the CQs had nothing to give at once.
    wait: Option<Pin<Box<dyn Future<Output = Result<Wc>> + Send + 'a>>>,
}

impl<T: Transport> fmt::Debug for Completions<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Completions").field("waiting", &self.wait.is_some()).finish_non_exhaustive()
    }
}

impl<T: Transport> AsyncConn<T> {
    /// The unclaimed completions (those [`AsyncConn::next_wc`] returns) as a
    /// [`Stream`](futures_core::Stream).
    pub const fn completions(&self) -> Completions<'_, T> {
        Completions { conn: self, wait: None }
    }
}

impl<'a, T: Transport> Stream for Completions<'a, T> {
    type Item = Result<Wc>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let conn: &'a AsyncConn<T> = this.conn;
        if this.wait.is_none() {
            // What is queued already needs no wait (nor its allocation).
            if let Some(wc) = conn.lock().dispatch.pop_unclaimed() {
                return Poll::Ready(Some(Ok(wc)));
            }
        }
        let wait = this.wait.get_or_insert_with(|| Box::pin(conn.next_wc()));
        match wait.as_mut().poll(cx) {
            Poll::Ready(r) => {
                this.wait = None;
                Poll::Ready(Some(r))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

//! What a completion queue reports of the completions it returns (the `tracing` feature): the
//! count of [`Conn::stats`](crate::Conn::stats) and the `rpma.failed_completion` events.
//!
//! Each backend CQ keeps a [`CqTrace`] and reports to it from inside its poll, where it holds
//! the completion it has just written anyway: a check there costs the poll a load and a branch
//! per completion and an add, where the same check in rpma-core, after the backend's poll
//! returned, would also keep the completion array and the connection alive across that call
//! (registers saved and restored on every poll). Without the feature a `CqTrace` is
//! zero-sized and its methods empty.

use crate::wc::Wc;

#[cfg(feature = "tracing")]
pub use on::CqTrace;

#[cfg(not(feature = "tracing"))]
pub use off::CqTrace;

#[cfg(feature = "tracing")]
mod on {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;

    use tracing::Span;

    use super::Wc;

    /// What a backend CQ reports of its completions (part of the backend contract,
    /// [`crate::transport`]): [`CqTrace::polled`] with the number of completions each poll
    /// returned, [`CqTrace::completed`] with each of them. rpma-core attaches the CQ to its
    /// connection's span and reads the counts for [`Conn::stats`](crate::Conn::stats).
    ///
    /// The counts are kept without read-modify-write instructions (a poll must not pay for a
    /// locked add): a CQ polled from several threads at once (a shared receive queue's,
    /// which belongs to no connection) may miss some.
    #[derive(Debug, Default)]
    pub struct CqTrace {
        completions: AtomicU64,
        errors: AtomicU64,
        span: OnceLock<Span>,
    }

    impl CqTrace {
        /// A CQ's trace, attached to no connection yet.
        #[must_use]
        pub const fn new() -> Self {
            Self { completions: AtomicU64::new(0), errors: AtomicU64::new(0), span: OnceLock::new() }
        }

        /// Counts the `n` completions a poll returned.
        #[inline(always)]
        pub fn polled(&self, n: usize) {
            let c = &self.completions;
            c.store(c.load(Ordering::Relaxed).wrapping_add(n as u64), Ordering::Relaxed);
        }

        /// Reports `wc`, a completion the poll returns, if it failed: a test of its status.
        /// Of a failed one only what a provider always writes is read (status, `wr_id`,
        /// `qp_num`, `vendor_err`; not the opcode, undefined in an error completion: rule V7
        /// of docs/memory.md).
        #[inline(always)]
        pub fn completed(&self, wc: &Wc) {
            if !wc.is_success() {
                self.failed(wc);
            }
        }

        #[cold]
        #[inline(never)]
        fn failed(&self, w: &Wc) {
            let e = &self.errors;
            e.store(e.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
            let parent = self.span.get().and_then(Span::id);
            tracing::warn!(
                name: "rpma.failed_completion",
                target: "rpma",
                parent: parent,
                status = ?w.status(),
                status_raw = w.status().raw(),
                wr_id = w.wr_id(),
                qp_num = w.qp_num(),
                vendor_err = w.vendor_err(),
            );
        }

        /// Makes `span` the parent of this CQ's events (the first one attached stays).
        pub(crate) fn attach(&self, span: &Span) {
            let _ = self.span.set(span.clone());
        }

        /// The completions and failed completions counted so far.
        pub(crate) fn counts(&self) -> (u64, u64) {
            (self.completions.load(Ordering::Relaxed), self.errors.load(Ordering::Relaxed))
        }
    }
}

#[cfg(not(feature = "tracing"))]
mod off {
    use super::Wc;

    /// What a backend CQ reports of its completions (part of the backend contract,
    /// [`crate::transport`]): nothing without the `tracing` feature (zero-sized, its methods
    /// empty).
    #[derive(Debug, Default)]
    pub struct CqTrace;

    impl CqTrace {
        /// A CQ's trace.
        #[must_use]
        pub const fn new() -> Self {
            Self
        }

        /// Counts the `n` completions a poll returned (nothing without the feature).
        #[inline(always)]
        pub const fn polled(&self, _n: usize) {}

        /// Reports `wc` if it failed (nothing without the feature).
        #[inline(always)]
        pub const fn completed(&self, _wc: &Wc) {}
    }
}

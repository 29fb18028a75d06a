//! What a completion queue reports of the completions it returns (the `tracing` feature): the
//! `rpma.failed_completion` events and the error count of [`Conn::stats`](crate::Conn::stats).
//!
//! Each backend CQ keeps a [`CqTrace`] and reports to it from inside its poll, where it holds
//! the completion it has just written anyway: a check there costs the poll a test and a branch
//! per completion, where the same check in rpma-core, after the backend's poll returned, would
//! also keep the completion array and the connection alive across that call (registers saved
//! and restored on every poll). Without the feature a `CqTrace` is zero-sized and its methods
//! empty.

use crate::wc::Wc;

#[cfg(feature = "tracing")]
pub use on::CqTrace;

#[cfg(not(feature = "tracing"))]
pub use off::CqTrace;

#[cfg(feature = "tracing")]
mod on {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, OnceLock};

    use tracing::Span;

    use super::Wc;

    /// What a backend CQ reports of its completions (part of the backend contract,
    /// [`crate::transport`]): [`CqTrace::completed`] with each completion a poll returns.
    /// rpma-core attaches the CQ to its connection's span and reads the error count for
    /// [`Conn::stats`](crate::Conn::stats).
    #[derive(Debug, Default)]
    pub struct CqTrace {
        errors: AtomicU64,
        /// The connection's span and who it is (its `conn` text), once attached.
        owner: OnceLock<(Span, Arc<str>)>,
    }

    impl CqTrace {
        /// Whether a [`CqTrace`] reports anything (the `tracing` feature): a backend may fold
        /// a completion's status into a test of its own under `if CqTrace::ENABLED`, where that
        /// lays its poll out better, and call [`CqTrace::completed`] off its common path.
        pub const ENABLED: bool = true;

        /// A CQ's trace, attached to no connection yet.
        #[must_use]
        pub const fn new() -> Self {
            Self { errors: AtomicU64::new(0), owner: OnceLock::new() }
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

        /// The cold path of a failed completion: the count of
        /// [`ConnStats::errors`](crate::ConnStats) and a `rpma.failed_completion` event, which
        /// names its connection itself (`conn`): a filter at `WARN` drops the `INFO` span.
        #[cold]
        #[inline(never)]
        fn failed(&self, w: &Wc) {
            self.errors.fetch_add(1, Ordering::Relaxed);
            let owner = self.owner.get();
            let parent = owner.and_then(|(span, _)| span.id());
            let conn = owner.map(|(_, conn)| &**conn);
            tracing::warn!(
                name: "rpma.failed_completion",
                target: "rpma",
                parent: parent,
                conn,
                status = ?w.status(),
                status_raw = w.status().raw(),
                wr_id = w.wr_id(),
                qp_num = w.qp_num(),
                vendor_err = w.vendor_err(),
                "completion failed"
            );
        }

        /// Makes `span` the parent of this CQ's events and `conn` the connection they name
        /// (the first one attached stays).
        pub(crate) fn attach(&self, span: &Span, conn: &Arc<str>) {
            let _ = self.owner.set((span.clone(), Arc::clone(conn)));
        }

        /// The failed completions counted so far.
        pub(crate) fn errors(&self) -> u64 {
            self.errors.load(Ordering::Relaxed)
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
        /// Whether a [`CqTrace`] reports anything: not without the feature.
        pub const ENABLED: bool = false;

        /// A CQ's trace.
        #[must_use]
        pub const fn new() -> Self {
            Self
        }

        /// Reports `wc` if it failed (nothing without the feature).
        #[inline(always)]
        pub const fn completed(&self, _wc: &Wc) {}
    }
}

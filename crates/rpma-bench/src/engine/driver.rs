//! What a client thread drives through each phase: its connections on the synchronous API
//! (`Vec<Lane>`, in `client.rs`) or on the async one (`AsyncLanes`, in `async_lane.rs`).

use std::sync::atomic::AtomicU64;
use std::time::Instant;

use anyhow::Result;
use hdrhistogram::Histogram;

use super::lane::Stop;
use crate::op::Op;

/// A thread's phase: operations completed, start, end.
pub(super) type Span = (u64, Instant, Instant);

/// One phase of a run (its warm-up or its measurement) as a client thread drives it: the
/// operation, when the phase ends, and where what it measures goes.
pub(super) struct Phase<'a> {
    /// The operation.
    pub(super) op: Op,
    /// Its size.
    pub(super) size: usize,
    /// Operations per signaled batch (`Plan::signal_every`; the async API signals every one).
    pub(super) every: usize,
    /// When the phase ends: after a count of operations per connection, or at a time.
    pub(super) stop: Stop,
    /// Whether latencies are recorded (the measurement) or not (the warm-up).
    pub(super) record: bool,
    /// The thread's latencies.
    pub(super) hist: &'a mut Histogram<u64>,
    /// Operations completed by the thread, published as it goes (the progress bar).
    pub(super) done: &'a AtomicU64,
}

/// A client thread's connections, driven through the synchronous API (`Vec<Lane>`) or the
/// async one (`--async`: `AsyncLanes`).
pub(super) trait Driver {
    /// Runs one phase (see `client::drive`).
    fn drive(&mut self, phase: Phase<'_>) -> Result<Span>;

    /// Ends every connection.
    fn finish(self) -> Result<()>;
}

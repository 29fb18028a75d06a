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

/// A client thread's connections, driven through the synchronous API (`Vec<Lane>`) or the
/// async one (`--async`: `AsyncLanes`).
pub(super) trait Driver {
    /// Runs one phase (see `client::drive`).
    #[allow(clippy::too_many_arguments)]
    fn drive(
        &mut self,
        op: Op,
        size: usize,
        every: usize,
        stop: Stop,
        hist: &mut Histogram<u64>,
        record: bool,
        done: &AtomicU64,
    ) -> Result<Span>;

    /// Ends every connection.
    fn finish(self) -> Result<()>;
}

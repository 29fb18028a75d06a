//! Waiting on file descriptors under the transport's runtime: in poll(2) on the real clock, or,
//! on a simulated runtime, by its pauses (which last until the fabric changes or the deadline).

use std::time::Instant;

use nix::poll::{poll, PollFd, PollTimeout};
use rpma::runtime::Runtime;

/// Whether `rt`'s clock is the real one ([`Instant::now`]): then the writer may block in
/// poll(2) with a timeout measured on it. A simulated runtime's clock stands still between its
/// scheduling points (and is ahead of or behind the real one), so a reading of it falls
/// between two readings of the real clock only by chance, and never twice in a row.
pub(super) fn real_clock(rt: &dyn Runtime) -> bool {
    (0..2).all(|_| {
        let before = Instant::now();
        let t = rt.now();
        before <= t && t <= Instant::now()
    })
}

/// Waits until one of `fds` is readable or `deadline` passes (then `Ok(0)`): in poll(2) on the
/// real clock, by the runtime's pauses on a simulated one.
///
/// # Errors
/// poll(2)'s (`EINTR` included: the caller looks again).
pub(super) fn readable(rt: &dyn Runtime, fds: &mut [PollFd<'_>], deadline: Instant) -> nix::Result<i32> {
    if real_clock(rt) {
        // Rounded up to whole milliseconds: poll(2) does not return before the deadline
        // unless an fd is readable.
        let left = deadline.saturating_duration_since(rt.now()).as_nanos().div_ceil(1_000_000);
        return poll(fds, PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX));
    }
    loop {
        match poll(fds, PollTimeout::ZERO) {
            Ok(0) if rt.now() < deadline => rt.pause(deadline),
            r => return r,
        }
    }
}

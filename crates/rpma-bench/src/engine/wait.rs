//! Bounded waits: every wait of the benchmark (completions, connection events, a byte a peer
//! writes) ends after `--timeout` without progress, with an error naming the wait, so a lost
//! peer cannot hang a phase.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rpma::{Conn, ConnEvent, Ep, ErrorKind, Transport};

/// The server stopped waiting because the client side failed first (loopback): not an error of
/// its own.
#[derive(Debug)]
pub(super) struct ClientGaveUp;

impl std::fmt::Display for ClientGaveUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the client gave up")
    }
}

impl std::error::Error for ClientGaveUp {}

/// Idle polls between clock reads (a clock read per empty poll would cost the hot loop).
const CHECK_EVERY: u32 = 1024;

/// Counts a polling loop's empty rounds and fails once they have lasted `limit`.
pub(super) struct Idle {
    limit: Duration,
    spins: u32,
    since: Option<Instant>,
}

impl Idle {
    pub(super) const fn new(limit: Duration) -> Self {
        Self { limit, spins: 0, since: None }
    }

    /// Something happened: the wait starts over.
    #[inline]
    pub(super) fn progress(&mut self) {
        self.spins = 0;
        self.since = None;
    }

    /// An empty round; fails (with `what`, e.g. "client: waiting for the echo of send of 8 B")
    /// once the rounds since the last progress have lasted the limit.
    #[inline]
    pub(super) fn tick(&mut self, what: impl FnOnce() -> String) -> Result<()> {
        self.spins = self.spins.wrapping_add(1);
        if self.spins % CHECK_EVERY != 0 {
            return Ok(());
        }
        let now = Instant::now();
        match self.since {
            None => self.since = Some(now),
            Some(t) if now.duration_since(t) >= self.limit => bail!(timed_out(&what(), self.limit)),
            Some(_) => {}
        }
        Ok(())
    }
}

/// The message of a wait that ran out of time.
pub(super) fn timed_out(what: &str, limit: Duration) -> String {
    format!("{what}: nothing came for {} s (--timeout): the peer stopped answering", secs(limit))
}

fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0}")
    } else {
        format!("{s}")
    }
}

/// The connection's next event, waiting at most `limit` for it (`Conn::next_event_timeout`).
pub(super) fn next_event<T: Transport>(conn: &Conn<T>, limit: Duration, what: &str) -> Result<ConnEvent> {
    match conn.next_event_timeout(limit) {
        Err(e) if e.kind() == ErrorKind::NoEvent => bail!(timed_out(what, limit)),
        r => r.with_context(|| what.to_owned()),
    }
}

/// Waits until `ep` has a connection request, giving up ([`ClientGaveUp`]) once `abort` says
/// the client side failed (loopback).
pub(super) fn conn_request<T: Transport>(ep: &Ep<T>, abort: &AtomicBool) -> Result<()> {
    loop {
        if abort.load(Ordering::Acquire) {
            return Err(ClientGaveUp.into());
        }
        let mut fds = [nix::poll::PollFd::new(ep.as_fd(), nix::poll::PollFlags::POLLIN)];
        if nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(100u16)).context("polling the endpoint")? > 0 {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_rounds_time_out_and_progress_starts_them_over() {
        let mut idle = Idle::new(Duration::from_millis(20));
        let t = Instant::now();
        let e = loop {
            if let Err(e) = idle.tick(|| "client: waiting for the echo".into()) {
                break e.to_string();
            }
        };
        assert!(t.elapsed() >= Duration::from_millis(20));
        assert!(e.starts_with("client: waiting for the echo: nothing came for 0.02 s (--timeout)"), "{e}");
        idle.progress();
        assert!(idle.tick(|| unreachable!()).is_ok());
        assert_eq!(
            timed_out("w", Duration::from_secs(30)),
            "w: nothing came for 30 s (--timeout): the peer stopped answering"
        );
    }
}

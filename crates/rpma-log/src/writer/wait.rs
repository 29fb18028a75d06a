//! The writer's waits: what it does when a poll of the completion queues it waits on found
//! nothing ([`Wait`]).
//!
//! [`Wait::Sleep`] takes a completion event only once its queue is drained, as the sleeping
//! servers of `rpma bench --sleep-when-idle` (and C librpma's) do: a sleep in poll(2) that sees a
//! channel readable only notes it; the waiting loop polls the queues; the next time they are
//! found empty the event is taken, which re-arms the queue, and the loop polls them once more
//! before it sleeps again. Taken so, an event costs one wake-up, and the queue stays unarmed
//! while the writer polls it (its completions raise no second event).
//!
//! Why no completion is missed: a queue is always either armed (created armed, re-armed by
//! each event taken) or has an event pending on its channel (the completion that fired it
//! disarmed it), until the writer takes that event. So a sleep in poll(2) after a poll found the
//! queue empty ends at the next completion: an armed queue raises an event for it, and a pending
//! event leaves the fd readable, so poll(2) returns at once. The one window is between the last
//! poll and the re-arming inside the taking of the event: a completion queued then finds the
//! queue unarmed and raises nothing. Hence the poll after taking events, before any sleep
//! (`Broken::sleep_without_repoll` skips it; the simulator catches the replica marked down
//! without a fault that follows).

use std::time::Instant;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags};
use rpma::{ErrorKind, Transport};

use super::clock;
use super::{Log, Wait};

impl<T: Transport> Log<T> {
    /// One step of a wait until `deadline` for the completions of replica `only` (`Some`) or of
    /// every replica with work in flight (`None`), after a poll of their queues found nothing:
    /// [`Wait::Spin`]: the runtime's pause; [`Wait::Sleep`]: the events a previous step saw
    /// are taken (and the step returns: the caller polls the queues again), or else the writer
    /// sleeps until a channel is readable or the deadline (see the module documentation). A
    /// replica whose channel fails is marked down.
    pub(super) fn idle(&mut self, deadline: Instant, only: Option<usize>) {
        if self.opts.wait == Wait::Spin {
            self.peer.runtime().pause(deadline);
            return;
        }
        if self.take_events(only) && !self.opts.rules_off().sleep_without_repoll {
            // A completion between the caller's poll and the re-arming raised no event.
            return;
        }
        let waited = self.waited(only);
        let rt = self.peer.runtime();
        let mut fds: Vec<PollFd<'_>> = waited
            .iter()
            .filter_map(|&i| self.slots[i].conn.as_ref())
            .map(|c| PollFd::new(c.cq().fd(), PollFlags::POLLIN))
            .collect();
        if fds.is_empty() {
            rt.pause(deadline);
            return;
        }
        let slept = clock::readable(rt, &mut fds, deadline);
        match slept {
            Ok(_) | Err(Errno::EINTR) => {}
            // No sleep this time (the caller polls again and comes back).
            Err(_) => {
                rt.pause(deadline);
                return;
            }
        }
        let ready: Vec<bool> = fds.iter().map(|f| f.any().unwrap_or(false)).collect();
        drop(fds);
        for (&i, r) in waited.iter().zip(ready) {
            self.slots[i].event |= r;
        }
    }

    /// Takes the completion events earlier sleeps saw on the channels of replica `only`
    /// (`Some`) or of every replica, which re-arms their queues; whether it took any (then the
    /// caller polls the queues before it sleeps: a completion between its last poll and the
    /// re-arming raised no event). A replica whose channel fails is marked down.
    pub(crate) fn take_events(&mut self, only: Option<usize>) -> bool {
        let range = only.map_or(0..self.slots.len(), |i| i..i + 1);
        let mut took = false;
        for i in range {
            if !std::mem::take(&mut self.slots[i].event) {
                continue;
            }
            let Some(conn) = self.slots[i].conn.as_ref() else { continue };
            // Acks the event and re-arms the queue (non-blocking fd: an event gone is no wait).
            match conn.cq().wait() {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NoCompletion => {}
                Err(e) => self.mark_down(i, format!("taking a completion event: {e}")),
            }
            took = true;
        }
        took
    }

    /// The replicas a sleep waits on: `only`, or every one connected with work in flight.
    pub(crate) fn waited(&self, only: Option<usize>) -> Vec<usize> {
        let range = only.map_or(0..self.slots.len(), |i| i..i + 1);
        range.filter(|&i| self.slots[i].conn.is_some() && (only.is_some() || self.slots[i].inflight > 0)).collect()
    }

    /// The fd of replica `i`'s completion channel (readable while an event is pending), if it is
    /// connected.
    #[cfg(feature = "tokio")]
    pub(crate) fn channel_fd(&self, i: usize) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.slots[i].conn.as_ref().map(|c| c.cq().fd())
    }

    /// A sleep saw replica `i`'s channel readable: its event is taken by the next
    /// [`Log::take_events`].
    #[cfg(feature = "tokio")]
    pub(crate) fn saw_event(&mut self, i: usize) {
        self.slots[i].event = true;
    }
}

//! The dispatcher of a connection's completions: which awaited operation each one belongs to.
//!
//! Every operation posted through the async API gets a slot in a slab and a *token*, its
//! `op_context` (`wr_id`): [`TOKEN_TAG`] in the top byte, a 24-bit sequence number and the slot's
//! key. Polling the CQs routes a completion whose `wr_id` is the token of a live slot to that
//! slot (and wakes the future awaiting it); any other completion (an operation posted outside
//! the async API, a failed unsignaled one) goes to the *unclaimed* queue that
//! [`AsyncConn::next_wc`](crate::AsyncConn::next_wc) and the completion stream read.
//!
//! A future dropped after posting leaves its slot *orphaned*: the slot stays taken (its token
//! cannot be given to another operation) until the completion arrives, which is then discarded
//! and frees the slot. Every signaled operation completes exactly once (successfully, or
//! flushed with an error when the queue pair fails), so no slot leaks and no completion is
//! routed to a later operation.

use std::collections::VecDeque;
use std::task::Waker;

use rpma_core::{Conn, Cq, Error, ErrorKind, Result, Transport, Wc};
use slab::Slab;

/// The top byte of every token (`wr_id`) of an operation posted through the async API.
/// Operations posted through [`AsyncConn::with_conn`](crate::AsyncConn::with_conn) should not use
/// contexts with this top byte: such a completion matching a token in flight would be taken for
/// that operation's.
pub const TOKEN_TAG: u64 = 0xA5 << 56;
const TAG_MASK: u64 = 0xFF << 56;
const SEQ_MASK: u32 = 0x00FF_FFFF;
const KEY_MASK: u64 = 0xFFFF_FFFF;

/// Completions taken from a CQ per poll call.
const POLL_BATCH: usize = 16;

/// Where an awaited operation is.
#[derive(Debug)]
enum State {
    /// Posted; the waker of the future awaiting it, once it went pending.
    Waiting(Option<Waker>),
    /// Completed; not yet taken by its future.
    Done(Wc),
    /// Posted, and its future was dropped: the completion is discarded when it arrives.
    Orphan,
}

#[derive(Debug)]
struct Slot {
    token: u64,
    /// Whether the operation holds a send-queue slot (everything but a receive).
    sq: bool,
    state: State,
}

/// The routing state of one connection; lives under the connection's lock with the `Conn`.
#[derive(Debug, Default)]
pub(crate) struct Dispatch {
    ops: Slab<Slot>,
    seq: u32,
    /// Signaled send-queue operations of this API in flight (orphans included): what a future
    /// waiting for a free send-queue slot can count on.
    sq_inflight: usize,
    unclaimed: VecDeque<Wc>,
    /// Futures waiting for a free send-queue slot or an unclaimed completion: woken whenever a
    /// poll took completions.
    waiters: Slab<Option<Waker>>,
}

impl Dispatch {
    /// Takes a slot for an operation about to be posted and returns its key and token.
    ///
    /// # Errors
    /// `NoMem` if the slab's key no longer fits the token (more than 2^32 operations in flight).
    pub(crate) fn open(&mut self, sq: bool, waker: &Waker) -> Result<(usize, u64)> {
        let entry = self.ops.vacant_entry();
        let key = entry.key();
        let Ok(k32) = u32::try_from(key) else {
            return Err(Error::new(ErrorKind::NoMem, "AsyncConn::post").with_detail("too many operations in flight"));
        };
        self.seq = self.seq.wrapping_add(1) & SEQ_MASK;
        let token = TOKEN_TAG | (u64::from(self.seq) << 32) | u64::from(k32);
        entry.insert(Slot { token, sq, state: State::Waiting(Some(waker.clone())) });
        if sq {
            self.sq_inflight += 1;
        }
        Ok((key, token))
    }

    /// Gives back the slot of an operation whose post failed (nothing will complete).
    pub(crate) fn abort(&mut self, key: usize) {
        if let Some(slot) = self.ops.try_remove(key) {
            if slot.sq {
                self.sq_inflight -= 1;
            }
        }
    }

    /// The completion of `key` if it arrived (the slot is freed); otherwise `waker` is the
    /// one to wake when it does.
    pub(crate) fn take(&mut self, key: usize, waker: &Waker) -> Option<Wc> {
        let slot = self.ops.get_mut(key)?;
        match &mut slot.state {
            State::Done(wc) => {
                let wc = *wc;
                self.ops.remove(key);
                Some(wc)
            }
            State::Waiting(w) => {
                match w {
                    Some(w) if w.will_wake(waker) => {}
                    _ => *w = Some(waker.clone()),
                }
                None
            }
            State::Orphan => None,
        }
    }

    /// The future of `key` went away: a completed slot is freed, a pending one orphaned.
    pub(crate) fn forget(&mut self, key: usize) {
        let Some(slot) = self.ops.get_mut(key) else { return };
        match slot.state {
            State::Done(_) => {
                self.ops.remove(key);
            }
            State::Waiting(_) | State::Orphan => slot.state = State::Orphan,
        }
    }

    /// Signaled send-queue operations of this API in flight.
    pub(crate) const fn sq_inflight(&self) -> usize {
        self.sq_inflight
    }

    /// Operations of this API in flight (orphans included) or completed and not yet taken.
    pub(crate) fn slots(&self) -> usize {
        self.ops.len()
    }

    /// The oldest unclaimed completion.
    pub(crate) fn pop_unclaimed(&mut self) -> Option<Wc> {
        self.unclaimed.pop_front()
    }

    /// Registers (or refreshes) a waiter; returns its key.
    pub(crate) fn wait(&mut self, key: Option<usize>, waker: &Waker) -> usize {
        match key.and_then(|k| self.waiters.get_mut(k).map(|w| (k, w))) {
            Some((k, w)) => {
                match w {
                    Some(w) if w.will_wake(waker) => {}
                    _ => *w = Some(waker.clone()),
                }
                k
            }
            None => self.waiters.insert(Some(waker.clone())),
        }
    }

    /// Removes a waiter.
    pub(crate) fn unwait(&mut self, key: usize) {
        self.waiters.try_remove(key);
    }

    fn wake_waiters(&mut self) {
        for (_, w) in &mut self.waiters {
            if let Some(w) = w.take() {
                w.wake();
            }
        }
    }

    /// Routes one completion.
    fn route(&mut self, wc: Wc) {
        if wc.wr_id & TAG_MASK == TOKEN_TAG {
            let key = (wc.wr_id & KEY_MASK) as usize;
            if let Some(slot) = self.ops.get_mut(key) {
                if slot.token == wc.wr_id && !matches!(slot.state, State::Done(_)) {
                    if slot.sq {
                        self.sq_inflight -= 1;
                    }
                    match std::mem::replace(&mut slot.state, State::Done(wc)) {
                        State::Waiting(Some(w)) => w.wake(),
                        State::Orphan => {
                            self.ops.remove(key);
                        }
                        State::Waiting(None) | State::Done(_) => {}
                    }
                    return;
                }
            }
        }
        self.unclaimed.push_back(wc);
    }

    /// Polls `cq` empty, routing what it returns; returns how many completions it took.
    fn drain<T: Transport>(&mut self, cq: Cq<'_, T>) -> Result<usize> {
        let mut wcs = [Wc::EMPTY; POLL_BATCH];
        let mut total = 0;
        loop {
            let n = cq.poll(&mut wcs)?;
            for wc in &wcs[..n] {
                self.route(*wc);
            }
            total += n;
            if n < POLL_BATCH {
                return Ok(total);
            }
        }
    }

    /// Polls the connection's CQs (the main one and its own receive CQ, if any) empty, routing
    /// every completion; wakes the waiters if anything was taken (send-queue slots were freed
    /// or unclaimed completions arrived). Returns how many completions were taken.
    ///
    /// # Errors
    /// As [`Cq::poll`].
    pub(crate) fn drive<T: Transport>(&mut self, conn: &Conn<T>) -> Result<usize> {
        let mut n = self.drain(conn.cq())?;
        if let Some(rcq) = conn.rcq() {
            n += self.drain(rcq)?;
        }
        if n > 0 {
            self.wake_waiters();
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn wc(wr_id: u64) -> Wc {
        Wc { wr_id, ..Wc::EMPTY }
    }

    #[test]
    fn completions_go_to_their_slot_or_the_unclaimed_queue() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut d = Dispatch::default();
        let (a, ta) = d.open(true, &waker).unwrap();
        let (b, tb) = d.open(false, &waker).unwrap();
        assert_ne!(ta, tb);
        assert_eq!(d.sq_inflight(), 1);
        assert_eq!(d.take(a, &waker), None);
        d.route(wc(7));
        d.route(wc(tb));
        assert_eq!(count.0.load(Ordering::Relaxed), 1, "b's waker woken");
        assert_eq!(d.take(b, &waker).map(|w| w.wr_id), Some(tb));
        // A token of no live slot (a stale or made-up one) is not taken for anyone's.
        d.route(wc(tb));
        d.route(wc(ta ^ (1 << 32)));
        d.route(wc(ta));
        assert_eq!(d.sq_inflight(), 0);
        assert_eq!(d.take(a, &waker).map(|w| w.wr_id), Some(ta));
        assert_eq!(d.slots(), 0);
        let unclaimed: Vec<u64> = std::iter::from_fn(|| d.pop_unclaimed()).map(|w| w.wr_id).collect();
        assert_eq!(unclaimed, [7, tb, ta ^ (1 << 32)]);
    }

    #[test]
    fn an_orphan_keeps_its_slot_until_its_completion_and_drops_it() {
        let waker = Waker::from(Arc::new(Count(AtomicUsize::new(0))));
        let mut d = Dispatch::default();
        let (a, ta) = d.open(true, &waker).unwrap();
        d.forget(a);
        // A new operation cannot take the orphan's key or token.
        let (b, tb) = d.open(true, &waker).unwrap();
        assert_ne!(a, b);
        assert_eq!(d.sq_inflight(), 2);
        d.route(wc(ta));
        assert_eq!((d.slots(), d.sq_inflight()), (1, 1));
        assert!(d.pop_unclaimed().is_none(), "the orphan's completion is discarded");
        // Completed, then forgotten before taken: freed at once.
        d.route(wc(tb));
        d.forget(b);
        assert_eq!(d.slots(), 0);
        // A failed post gives its slot back.
        let (c, _) = d.open(true, &waker).unwrap();
        d.abort(c);
        assert_eq!((d.slots(), d.sq_inflight()), (0, 0));
    }
}

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
#[derive(Debug)]
pub(crate) struct Dispatch {
    /// Where polls put completions (kept, not made per poll).
    buf: [Wc; POLL_BATCH],
    ops: Slab<Slot>,
    seq: u32,
    /// Signaled send-queue operations of this API in flight (orphans included): what a future
    /// waiting for a free send-queue slot can count on.
    sq_inflight: usize,
    unclaimed: VecDeque<Wc>,
    /// Futures waiting for a free send-queue slot or an unclaimed completion: woken whenever a
    /// poll took completions.
    waiters: Slab<Option<Waker>>,
    /// The operation on the straight path ([`Dispatch::begin`]): posted with the token of the
    /// slab's next vacant key, its slot not taken yet.
    straight: Option<Straight>,
    /// Orphans whose completion came while an operation was on the straight path: freed after
    /// it (freeing them then would change the slab's next vacant key).
    deferred: Vec<usize>,
}

/// The operation on the straight path.
#[derive(Debug)]
struct Straight {
    key: usize,
    token: u64,
    sq: bool,
    done: Option<Wc>,
}

impl Default for Dispatch {
    fn default() -> Self {
        Self {
            buf: [Wc::EMPTY; POLL_BATCH],
            ops: Slab::new(),
            seq: 0,
            sq_inflight: 0,
            unclaimed: VecDeque::new(),
            waiters: Slab::new(),
            straight: None,
            deferred: Vec::new(),
        }
    }
}

impl Dispatch {
    /// The token of a new operation whose slot will have key `key`.
    ///
    /// # Errors
    /// `OutOfMemory` if the key no longer fits the token (more than 2^32 operations in flight).
    #[inline]
    fn token(&mut self, key: usize) -> Result<u64> {
        let Ok(k32) = u32::try_from(key) else {
            return Err(
                Error::new(ErrorKind::OutOfMemory, "AsyncConn::post").with_detail("too many operations in flight")
            );
        };
        self.seq = self.seq.wrapping_add(1) & SEQ_MASK;
        Ok(TOKEN_TAG | (u64::from(self.seq) << 32) | u64::from(k32))
    }

    /// Takes a slot for an operation about to be posted and returns its key and token.
    ///
    /// No waker is registered yet: the future registers one with [`Dispatch::take`] only if the
    /// completion is not there when it first looks.
    ///
    /// # Errors
    /// As [`Dispatch::token`].
    #[inline]
    pub(crate) fn open(&mut self, sq: bool) -> Result<(usize, u64)> {
        let key = self.ops.vacant_key();
        let token = self.token(key)?;
        self.ops.insert(Slot { token, sq, state: State::Waiting(None) });
        if sq {
            self.sq_inflight += 1;
        }
        Ok((key, token))
    }

    /// Starts the straight path of an operation about to be posted: returns its token, for the
    /// slab's next vacant key, without taking the slot. [`Dispatch::finish`] then either hands
    /// the completion over (it came in the poll right after the post: the slab was not
    /// touched) or takes the slot. The caller holds the connection's lock throughout, and
    /// nothing but [`Dispatch::drive`] runs in between (which defers freeing orphans), so the
    /// slab's next vacant key is still that key then.
    ///
    /// # Errors
    /// As [`Dispatch::token`].
    #[inline]
    pub(crate) fn begin(&mut self, sq: bool) -> Result<u64> {
        let key = self.ops.vacant_key();
        let token = self.token(key)?;
        self.straight = Some(Straight { key, token, sq, done: None });
        Ok(token)
    }

    /// The post of the straight path failed: nothing is in flight.
    pub(crate) fn cancel(&mut self) {
        self.straight = None;
        self.free_deferred();
    }

    /// Ends the straight path: `Some(Ok(wc))` its completion came, `Some(Err(key))` it is in
    /// flight, in the slot `key`; `None` if no straight path was begun.
    #[inline]
    pub(crate) fn finish(&mut self) -> Option<std::result::Result<Wc, usize>> {
        let st = self.straight.take()?;
        let r = match st.done {
            Some(wc) => Ok(wc),
            None => {
                let key = self.ops.insert(Slot { token: st.token, sq: st.sq, state: State::Waiting(None) });
                debug_assert_eq!(key, st.key, "the slab's next vacant key moved on the straight path");
                if st.sq {
                    self.sq_inflight += 1;
                }
                Err(key)
            }
        };
        self.free_deferred();
        Some(r)
    }

    fn free_deferred(&mut self) {
        while let Some(key) = self.deferred.pop() {
            self.ops.try_remove(key);
        }
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

    #[inline]
    fn wake_waiters(&mut self) {
        if self.waiters.is_empty() {
            return;
        }
        for (_, w) in &mut self.waiters {
            if let Some(w) = w.take() {
                w.wake();
            }
        }
    }

    /// Routes one completion.
    #[inline]
    fn route(&mut self, wc: Wc) {
        if wc.wr_id() & TAG_MASK == TOKEN_TAG {
            if let Some(st) = &mut self.straight {
                if st.token == wc.wr_id() && st.done.is_none() {
                    st.done = Some(wc);
                    return;
                }
            }
            let key = (wc.wr_id() & KEY_MASK) as usize;
            if let Some(slot) = self.ops.get_mut(key) {
                if slot.token == wc.wr_id() && !matches!(slot.state, State::Done(_)) {
                    if slot.sq {
                        self.sq_inflight -= 1;
                    }
                    match std::mem::replace(&mut slot.state, State::Done(wc)) {
                        State::Waiting(Some(w)) => w.wake(),
                        State::Orphan if self.straight.is_some() => self.deferred.push(key),
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
    #[inline]
    fn drain<T: Transport>(&mut self, cq: Cq<'_, T>) -> Result<usize> {
        let mut total = 0;
        loop {
            let n = cq.poll(&mut self.buf)?;
            for i in 0..n {
                let wc = self.buf[i];
                self.route(wc);
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
    #[inline]
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
        Wc::EMPTY.with_wr_id(wr_id)
    }

    #[test]
    fn completions_go_to_their_slot_or_the_unclaimed_queue() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut d = Dispatch::default();
        let (a, ta) = d.open(true).unwrap();
        let (b, tb) = d.open(false).unwrap();
        assert_ne!(ta, tb);
        assert_eq!(d.sq_inflight(), 1);
        assert_eq!(d.take(a, &waker), None);
        assert_eq!(d.take(b, &waker), None);
        d.route(wc(7));
        d.route(wc(tb));
        assert_eq!(count.0.load(Ordering::Relaxed), 1, "b's waker woken");
        assert_eq!(d.take(b, &waker).map(|w| w.wr_id()), Some(tb));
        // A token of no live slot (a stale or made-up one) is not taken for anyone's.
        d.route(wc(tb));
        d.route(wc(ta ^ (1 << 32)));
        d.route(wc(ta));
        assert_eq!(d.sq_inflight(), 0);
        assert_eq!(d.take(a, &waker).map(|w| w.wr_id()), Some(ta));
        assert_eq!(d.slots(), 0);
        let unclaimed: Vec<u64> = std::iter::from_fn(|| d.pop_unclaimed()).map(|w| w.wr_id()).collect();
        assert_eq!(unclaimed, [7, tb, ta ^ (1 << 32)]);
    }

    #[test]
    fn the_straight_path_takes_no_slot_unless_the_operation_stays_in_flight() {
        let waker = Waker::from(Arc::new(Count(AtomicUsize::new(0))));
        let mut d = Dispatch::default();
        // An orphan whose completion comes while another operation is on the straight path.
        let (o, to) = d.open(true).unwrap();
        d.forget(o);
        let t = d.begin(true).unwrap();
        assert_eq!(t & KEY_MASK, 1, "the next vacant key");
        d.route(wc(to));
        d.route(wc(t));
        assert_eq!(d.finish().unwrap().map(|w| w.wr_id()), Ok(t), "completed on the straight path");
        assert_eq!((d.slots(), d.sq_inflight()), (0, 0), "no slot taken; the orphan freed after");
        // Not completed: the slot is taken at the key of the token.
        let t = d.begin(true).unwrap();
        let key = d.finish().unwrap().unwrap_err();
        assert!(d.finish().is_none(), "nothing begun");
        assert_eq!((key as u64, d.sq_inflight()), (t & KEY_MASK, 1));
        assert_eq!(d.take(key, &waker), None);
        d.route(wc(t));
        assert_eq!(d.take(key, &waker).map(|w| w.wr_id()), Some(t));
        // A failed post takes nothing.
        d.begin(false).unwrap();
        d.cancel();
        assert_eq!((d.slots(), d.sq_inflight()), (0, 0));
        assert!(d.pop_unclaimed().is_none());
    }

    #[test]
    fn an_orphan_keeps_its_slot_until_its_completion_and_drops_it() {
        let mut d = Dispatch::default();
        let (a, ta) = d.open(true).unwrap();
        d.forget(a);
        // A new operation cannot take the orphan's key or token.
        let (b, tb) = d.open(true).unwrap();
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
        let (c, _) = d.open(true).unwrap();
        d.abort(c);
        assert_eq!((d.slots(), d.sq_inflight()), (0, 0));
    }
}

//! The send queue's bookkeeping on the posting thread: its slots, the completions made while
//! posting, and the remote region the last one-sided operation reached.
//!
//! A queue pair is used by one thread at a time (the transport contract; `MockQp` is `!Sync`),
//! so nothing here takes a lock or makes a read-modify-write on memory another connection's
//! thread writes.

use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, Weak};

use rpma_core::transport::SendWr;
use rpma_core::{Capabilities, WcOpcode, WcStatus};

use super::responder::{execute, execute_fast};
use super::{MockQp, QpShared, CONNECTED};
use crate::fabric::MockFabric;
use crate::mem::MrShared;
use crate::pd::MrTable;

impl QpShared {
    /// Takes `n` send-queue slots for the immediate path, all or none; the sequence number
    /// before the first. `None` if they are not free, and always in the deferred mode (its
    /// `fast_slots` is 0): the caller's cold path then sorts out which.
    /// Only the posting thread writes `posted` (a load and a store, no read-modify-write);
    /// `retired` is written by polling, on the same thread.
    #[inline]
    pub(super) fn take_slots(&self, n: u64) -> Option<u64> {
        self.take_slots_of(n, self.fast_slots.load(Ordering::Relaxed))
    }

    /// [`QpShared::take_slots`] out of a queue of `size` slots.
    #[inline]
    pub(super) fn take_slots_of(&self, n: u64, size: u64) -> Option<u64> {
        let p = self.posted.load(Ordering::Relaxed);
        let retired = self.send_cq.retired();
        if p.saturating_sub(retired) + n > size {
            return None;
        }
        self.posted.store(p + n, Ordering::Release);
        Some(p)
    }

    /// Completes a work request on the posting thread, while it is posted (see
    /// `QpShared::complete`): through the CQ's own ring.
    #[inline(always)]
    pub(super) fn complete_own(&self, wr_id: u64, status: WcStatus, opcode: WcOpcode, signaled: bool, seq: u64) {
        if status != WcStatus::Success {
            self.to_error();
        } else if !signaled {
            return;
        }
        self.send_cq.push_own(wr_id, status, opcode, self.qp_num, seq);
    }
}

/// The remote region the last one-sided operation reached, by rkey: later operations on it
/// skip the responder's table (a lock shared by every connection to that peer). The cache
/// holds the region weakly: a deregistration waits until no operation holds the region (mem.rs,
/// `quiesce`), so each operation holds it only while it copies (its reference count, on the
/// region's own cache line), and an upgrade after the deregistration took it back fails.
/// Reading it writes its borrow flag: it sits on a cache line of its own, away from whatever
/// the queue pair's owner places next to it.
#[derive(Default)]
#[repr(align(64))]
pub(super) struct TargetCache(RefCell<Option<(u32, Weak<MrShared>)>>);

impl TargetCache {
    /// Executes the remote part of `wr` (one-sided) at the responder whose registrations are
    /// `table`, reaching the region through the cache.
    #[inline(always)]
    pub(super) fn execute(
        &self,
        table: &MrTable,
        wr: &SendWr<'_, MockFabric>,
        caps: &Capabilities,
        from: u32,
    ) -> WcStatus {
        let Some(rb) = wr.remote else {
            return execute(wr, None, caps, from);
        };
        if let Some((k, w)) = &*self.0.borrow() {
            if *k == rb.rkey {
                if let Some(m) = w.upgrade() {
                    return execute_fast(wr, &m, caps, from);
                }
            }
        }
        self.miss(table, wr, rb.rkey, caps, from)
    }

    /// Looks `rkey` up in the table (a read lock) and caches what it names.
    #[cold]
    #[inline(never)]
    fn miss(
        &self,
        table: &MrTable,
        wr: &SendWr<'_, MockFabric>,
        rkey: u32,
        caps: &Capabilities,
        from: u32,
    ) -> WcStatus {
        let m = table.read().unwrap_or_else(PoisonError::into_inner).get(&rkey).cloned();
        *self.0.borrow_mut() = m.as_ref().map(|m| (rkey, Arc::downgrade(m)));
        execute(wr, m.as_deref(), caps, from)
    }
}

impl MockQp {
    /// Posts a one-sided work request (read, write, atomic write, flush) whose send-queue slot
    /// `seq` was taken: only the target's registrations are involved. Once the remote QP is
    /// gone this QP is in the error state (its teardown hangs up this side), so the state
    /// decides as the remote QP's liveness would.
    #[inline(always)]
    pub(super) fn post_one_sided(&self, wr: &SendWr<'_, MockFabric>, seq: u64, opcode: WcOpcode) {
        let s = &self.shared;
        let status = match (s.state(), s.remote_mrs.get()) {
            (CONNECTED, Some(table)) => self.target_cache.execute(table, wr, &s.pd.caps, s.qp_num),
            _ => WcStatus::WrFlushErr,
        };
        s.complete_own(wr.wr_id, status, opcode, wr.signaled, seq);
    }
}

//! The send queue's bookkeeping on the posting thread: its slots, the completions made while
//! posting, and the remote region the last one-sided operation reached.
//!
//! A queue pair is used by one thread at a time (the transport contract; `MockQp` is `!Sync`),
//! so nothing here takes a lock or makes a read-modify-write on memory another connection's
//! thread writes.

use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, Weak};

use rpma_core::{Wc, WcOpcode, WcStatus};

use super::QpShared;
use crate::mem::MrShared;
use crate::MrTable;

impl QpShared {
    /// Takes `n` send-queue slots, all or none; the sequence number before the first.
    /// Only the posting thread writes `posted` (a load and a store, no read-modify-write);
    /// `retired` is written by polling, on the same thread.
    #[inline]
    pub(super) fn take_slots(&self, n: u64) -> Option<u64> {
        let p = self.posted.load(Ordering::Relaxed);
        let retired = self.send_cq.retired();
        if p.saturating_sub(retired) + n > self.sq_size {
            return None;
        }
        self.posted.store(p + n, Ordering::Release);
        Some(p)
    }

    /// Completes a work request on the posting thread, while it is posted (see
    /// `QpShared::complete`): through the CQ's own ring.
    #[inline]
    pub(super) fn complete_own(&self, wr_id: u64, status: WcStatus, opcode: WcOpcode, signaled: bool, seq: u64) {
        if status != WcStatus::Success {
            self.to_error();
        } else if !signaled {
            return;
        }
        let wc = Wc { wr_id, status, opcode, vendor_err: 0, byte_len: 0, imm_data: None, qp_num: self.qp_num };
        self.send_cq.push_own(wc, seq);
    }
}

/// The remote region the last one-sided operation reached, by rkey: later operations on it
/// skip the responder's table (a lock shared by every connection to that peer).
#[derive(Default)]
pub(super) struct TargetCache(RefCell<Option<(u32, Weak<MrShared>)>>);

impl TargetCache {
    /// The region `rkey` names in the responder's `table`, through the cache.
    pub(super) fn get(&self, table: &MrTable, rkey: u32) -> Option<Arc<MrShared>> {
        if let Some((k, w)) = &*self.0.borrow() {
            if *k == rkey {
                if let Some(m) = w.upgrade() {
                    return Some(m);
                }
            }
        }
        let m = table.read().unwrap_or_else(PoisonError::into_inner).get(&rkey).cloned()?;
        *self.0.borrow_mut() = Some((rkey, Arc::downgrade(&m)));
        Some(m)
    }
}

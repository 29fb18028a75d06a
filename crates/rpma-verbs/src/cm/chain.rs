//! Chains, what the send and receive queues (`SendQueue`, `RecvQueue`, `VerbsSrq`) share when
//! they post: verbs work requests linked into a chain in a queue's scratch buffers, how many of
//! a chain a provider took, the error of a failed post, and the regions a work request pins in
//! its slot. Each queue turns its own work requests into verbs ones and calls its provider
//! function itself.
//!
//! A chain goes down in one `ibv_post_send` (or, when it holds a native flush or atomic write,
//! one `ibv_wr_start` .. `ibv_wr_complete` of the extended QP). Everything that could make a
//! provider refuse one of its work requests (queue room, scatter-gather entries, inline size)
//! was checked before, so a chain is posted whole; if a provider still stops in the middle
//! (`ibv_post_send` reports the first work request it refused), the ones before it are posted
//! and recorded, and the error says how many.

use rdma_sys as ffi;
use rpma_core::transport::Local;
use rpma_core::Error;

use crate::mr::VerbsMr;
use crate::Verbs;

/// A verbs work request that links into a chain (`ibv_send_wr`, `ibv_recv_wr`).
pub(super) trait Linked: Sized {
    fn num_sge(&self) -> i32;
    fn link(&mut self, sg_list: *mut ffi::ibv_sge, next: *mut Self);
}

macro_rules! linked {
    ($($wr:ty),*) => {$(
        impl Linked for $wr {
            fn num_sge(&self) -> i32 {
                self.num_sge
            }
            fn link(&mut self, sg_list: *mut ffi::ibv_sge, next: *mut Self) {
                self.sg_list = sg_list;
                self.next = next;
            }
        }
    )*};
}
linked!(ffi::ibv_send_wr, ffi::ibv_recv_wr);

/// Links `wrs` into a chain, each to its run of `sges` (pushed in the same order, `num_sge` of
/// them each); returns its first work request. The chain stays valid while neither vector
/// changes.
pub(super) fn link<W: Linked>(wrs: &mut [W], sges: &mut [ffi::ibv_sge]) -> *mut W {
    let n = wrs.len();
    let base = wrs.as_mut_ptr();
    let sg = sges.as_mut_ptr();
    let mut at = 0usize;
    for i in 0..n {
        // SAFETY: [V2] `i < n` and `at + num_sge <= sges.len()` (the entries were pushed in this
        // order), so every pointer stays inside its slice.
        unsafe {
            let w = &mut *base.add(i);
            let list = if w.num_sge() > 0 { sg.add(at) } else { std::ptr::null_mut() };
            at += w.num_sge() as usize;
            w.link(list, if i + 1 < n { base.add(i + 1) } else { std::ptr::null_mut() });
        }
    }
    base
}

/// How many of the `n` work requests of the chain at `base` a provider took: all if it
/// returned 0, else those before the one it pointed `bad` at (none if it pointed at none).
pub(super) fn posted<W>(r: i32, base: *mut W, bad: *mut W, n: usize) -> usize {
    if r == 0 {
        n
    } else if bad.is_null() {
        0
    } else {
        // SAFETY: [V2] the provider points `bad` at the element of the chain it refused.
        usize::try_from(unsafe { bad.offset_from(base) }).unwrap_or(0).min(n)
    }
}

/// The regions a work request uses (what its slot pins).
#[inline]
pub(super) fn regions<'m>(local: &Local<'m, Verbs>) -> impl Iterator<Item = &'m VerbsMr> + 'm {
    let l = *local;
    (0..l.pieces_len()).filter_map(move |i| l.piece(i)).map(|b| &**b.mr)
}

#[cold]
#[inline(never)]
pub(super) fn post_failed(op: &'static str, r: i32) -> Error {
    Error::provider(op, crate::sys::ret_errno(r))
}

/// The error of a chain of `n` work requests (`what`) whose post returned `r` after `posted`
/// of them were taken.
#[cold]
#[inline(never)]
pub(super) fn chain_failed(op: &'static str, r: i32, posted: usize, n: usize, what: &str) -> Error {
    let e = post_failed(op, r);
    if posted > 0 {
        e.with_detail(&format!("{posted} of {n} {what} were posted"))
    } else {
        e
    }
}

//! Shared receive queues: `struct rpma_srq` and `rpma_srq_*`.

use std::ffi::{c_int, c_void};

use parking_lot::Mutex;
use rpma_core::{op, Srq};

use crate::backend::{on_backend, Backed, Backend, SrqType};
use crate::cq::RpmaCq;
use crate::ffi::{code, guard, handle, nonnull, put, take, E_INVAL};
use crate::mr::RpmaMrLocal;
use crate::peer::RpmaPeer;
use crate::srq_cfg::RpmaSrqCfg;

/// `struct rpma_srq`: the shared RQ, behind a lock that `rpma_srq_recv` and its receive CQ's
/// functions hold (several threads may post to it and poll its CQ), and the handle of its
/// receive CQ.
pub struct RpmaSrq {
    pub(crate) srq: Backed<SrqType>,
    rcq: RpmaCq,
}

/// `rpma_srq_new`: `cfg` NULL means the defaults.
///
/// # Safety
/// C1, C2: `peer` is NULL or live; `cfg` is NULL or live; `srq_ptr` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_srq_new(peer: *mut RpmaPeer, cfg: *mut RpmaSrqCfg, srq_ptr: *mut *mut RpmaSrq) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let p = unsafe { handle(peer) }?;
        nonnull(srq_ptr)?;
        // SAFETY: [C2] the caller's configuration or NULL.
        let cfg = unsafe { cfg.as_ref() }.map(RpmaSrqCfg::cfg);
        let srq =
            on_backend!(&p.peer, |T, peer| T::wrap::<SrqType>(Mutex::new(Srq::new(peer, cfg.as_ref()).map_err(code)?)));
        let b = Box::into_raw(Box::new(RpmaSrq { srq, rcq: RpmaCq::of_srq(std::ptr::null()) }));
        // The CQ's pointer derives from the raw pointer `b` (no reference to the box is kept);
        // SAFETY: [C2] b is the live, unaliased allocation just made.
        unsafe { (*b).rcq = RpmaCq::of_srq(std::ptr::addr_of!((*b).srq)) };
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(srq_ptr, b) };
        Ok(())
    })
}

/// `rpma_srq_delete`: frees the handle and NULLs `*srq_ptr`, success or not. (Connections
/// still using the shared RQ keep it alive; librpma required it to outlive them.)
///
/// # Safety
/// C1, C2: `srq_ptr` is NULL or a slot holding NULL or a live shared RQ.
#[no_mangle]
pub unsafe extern "C" fn rpma_srq_delete(srq_ptr: *mut *mut RpmaSrq) -> c_int {
    guard(|| {
        // SAFETY: [C1, C2] the caller's slot.
        match unsafe { take(srq_ptr) }? {
            Some(s) => {
                let RpmaSrq { srq, .. } = *s;
                on_backend!(srq, |T, srq| srq.into_inner().delete().map_err(code))
            }
            None => Ok(()),
        }
    })
}

/// `rpma_srq_recv`: a receive buffer shared by the connections using the shared RQ; `dst`
/// NULL with `offset == len == 0` posts a zero-length one.
///
/// # Safety
/// C2: `srq` and `dst` are NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rpma_srq_recv(
    srq: *mut RpmaSrq,
    dst: *mut RpmaMrLocal,
    offset: usize,
    len: usize,
    op_context: *const c_void,
) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let h = unsafe { handle(srq) }?;
        on_backend!(&h.srq, |T, lock s| {
            let op = if dst.is_null() {
                if offset != 0 || len != 0 {
                    return Err(E_INVAL);
                }
                op::recv_empty()
            } else {
                // SAFETY: [C2] the caller's handle.
                let d = unsafe { handle(dst) }?;
                let end = offset.checked_add(len).ok_or(E_INVAL)?;
                op::recv(T::get(&d.mr)?.slice(offset..end))
            };
            s.post(op.context(op_context as u64)).map_err(code)
        })
    })
}

/// `rpma_srq_get_rcq`: the shared RQ's receive CQ, or NULL if it was made with `rcq_size` 0.
///
/// # Safety
/// C1, C2: `srq` is NULL or live; `rcq_ptr` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_srq_get_rcq(srq: *const RpmaSrq, rcq_ptr: *mut *mut RpmaCq) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let s = unsafe { handle(srq) }?;
        nonnull(rcq_ptr)?;
        let has = on_backend!(&s.srq, |T, lock srq| srq.rcq().is_some());
        let p = if has { std::ptr::addr_of!(s.rcq).cast_mut() } else { std::ptr::null_mut() };
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(rcq_ptr, p) };
        Ok(())
    })
}

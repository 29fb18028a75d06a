//! Shared RQ configurations: `struct rpma_srq_cfg` and `rpma_srq_cfg_*`.

use std::ffi::c_int;
use std::sync::atomic::{AtomicU32, Ordering};

use rpma_core::SrqCfg;

use crate::ffi::{give, guard, handle, nonnull, put, take};

/// `struct rpma_srq_cfg`: its sizes, read and written atomically.
pub struct RpmaSrqCfg {
    rq_size: AtomicU32,
    rcq_size: AtomicU32,
}

impl RpmaSrqCfg {
    /// The configuration as rpma-core takes it.
    pub(crate) fn cfg(&self) -> SrqCfg {
        SrqCfg::new()
            .with_rq_size(self.rq_size.load(Ordering::Acquire))
            .with_rcq_size(self.rcq_size.load(Ordering::Acquire))
    }
}

/// `rpma_srq_cfg_new`: sizes of 20 and 20 (librpma's code; its man page said 100).
///
/// # Safety
/// C1: `cfg_ptr` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_srq_cfg_new(cfg_ptr: *mut *mut RpmaSrqCfg) -> c_int {
    guard(|| {
        nonnull(cfg_ptr)?;
        let d = SrqCfg::new();
        let c = RpmaSrqCfg { rq_size: AtomicU32::new(d.rq_size()), rcq_size: AtomicU32::new(d.rcq_size()) };
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { give(cfg_ptr, c) };
        Ok(())
    })
}

/// `rpma_srq_cfg_delete`.
///
/// # Safety
/// C1, C2: `cfg_ptr` is NULL or a slot holding NULL or a live configuration.
#[no_mangle]
pub unsafe extern "C" fn rpma_srq_cfg_delete(cfg_ptr: *mut *mut RpmaSrqCfg) -> c_int {
    // SAFETY: [C1, C2] the caller's slot.
    guard(|| unsafe { take(cfg_ptr) }.map(drop))
}

u32_setting!(RpmaSrqCfg, rq_size, rpma_srq_cfg_set_rq_size, rpma_srq_cfg_get_rq_size);
u32_setting!(RpmaSrqCfg, rcq_size, rpma_srq_cfg_set_rcq_size, rpma_srq_cfg_get_rcq_size);

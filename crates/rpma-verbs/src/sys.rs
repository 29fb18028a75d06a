//! Small helpers around the C calls.

use rdma_sys as ffi;

/// The extended context of an open device context (libibverbs' static inline
/// `verbs_get_ctx`), or `None` for a provider without one.
///
/// rdma-sys 0.3's own `verbs_get_ctx` compares `abi_compat` with `u32::MAX`, but rdma-core
/// marks an extended context with `UINTPTR_MAX` (`__VERBS_ABI_IS_EXTENDED`), so its wrappers of
/// the extended verbs (`ibv_query_device_ex`, `ibv_create_qp_ex`, ...) always take their legacy
/// fallback on 64-bit hosts: `ibv_query_device_ex` then reports no extended capability at all
/// (no `device_cap_flags_ex`, no ODP). rpma-verbs uses these instead.
///
/// # Safety
/// `ctx` is an open device context.
unsafe fn verbs_ctx(ctx: *mut ffi::ibv_context) -> Option<*mut ffi::verbs_context> {
    // SAFETY: [V1] an open context; `abi_compat` is a plain pointer-sized member.
    let abi = unsafe { (*ctx).abi_compat } as usize;
    if abi != usize::MAX && abi != u32::MAX as usize {
        return None;
    }
    // SAFETY: [V1] an extended context is the last member of a `verbs_context` (container_of);
    // members added by later rdma-core versions are prepended, so offsets from the end hold.
    Some(unsafe { ctx.cast::<u8>().sub(std::mem::offset_of!(ffi::verbs_context, context)) }.cast())
}

/// `ibv_query_device_ex(ctx, NULL, attr)` as the static inline of verbs.h does it: the
/// provider's `query_device_ex` when the context has it, else (or when it answers
/// `EOPNOTSUPP`/`ENOSYS`) the legacy `ibv_query_device` into `orig_attr`. Returns 0 or an errno.
///
/// # Safety
/// `ctx` is an open device context; `attr` points to a writable, zeroed attribute struct.
pub(crate) unsafe fn query_device_ex(ctx: *mut ffi::ibv_context, attr: *mut ffi::ibv_device_attr_ex) -> i32 {
    // SAFETY: [V1] per the contract; the op is read only when the provider's context is large
    // enough to have it (`sz`), and called with the size of the struct we pass.
    unsafe {
        if let Some(v) = verbs_ctx(ctx) {
            let needed = size_of::<ffi::verbs_context>() - std::mem::offset_of!(ffi::verbs_context, query_device_ex);
            if (*v).sz >= needed {
                if let Some(f) = (*v).query_device_ex {
                    let r = f(ctx, std::ptr::null(), attr, size_of::<ffi::ibv_device_attr_ex>());
                    if r != libc::EOPNOTSUPP && r != libc::ENOSYS {
                        return r;
                    }
                }
            }
        }
        attr.write_bytes(0, 1);
        ffi::ibv_query_device(ctx, &mut (*attr).orig_attr)
    }
}

/// `ibv_create_qp_ex` as the static inline of verbs.h does it (see [`verbs_ctx`]); null with
/// `errno` set on failure.
///
/// # Safety
/// `ctx` is an open device context; `attr` is a valid, initialised attribute struct whose
/// objects (PD, CQs, SRQ) are alive.
pub(crate) unsafe fn create_qp_ex(ctx: *mut ffi::ibv_context, attr: *mut ffi::ibv_qp_init_attr_ex) -> *mut ffi::ibv_qp {
    // SAFETY: [V1] per the contract, as in `query_device_ex`.
    unsafe {
        if let Some(v) = verbs_ctx(ctx) {
            let needed = size_of::<ffi::verbs_context>() - std::mem::offset_of!(ffi::verbs_context, create_qp_ex);
            if (*v).sz >= needed {
                if let Some(f) = (*v).create_qp_ex {
                    return f(ctx, attr);
                }
            }
        }
        *libc::__errno_location() = libc::EOPNOTSUPP;
        std::ptr::null_mut()
    }
}

/// The calling thread's `errno` (set by the failed librdmacm/libibverbs call just made); `EIO`
/// if none is set.
pub(crate) fn errno() -> i32 {
    match std::io::Error::last_os_error().raw_os_error() {
        Some(0) | None => libc::EIO,
        Some(e) => e,
    }
}

/// The errno of a verbs call that returns it directly (positive) or negated, or `-1` with
/// `errno` set.
pub(crate) fn ret_errno(r: i32) -> i32 {
    if r == -1 {
        errno()
    } else {
        r.abs()
    }
}

/// A provider call that creates or does something: `call!(name, fail, call)`. With feature
/// `fault-injection`, an armed check ([`crate::faults`]) makes it fail without being made: the
/// expression is then `fail` (what the C function returns on failure; `errno` is set to the
/// injected value). Without the feature this is just `call`.
macro_rules! call {
    ($name:literal, $fail:expr, $call:expr) => {{
        #[cfg(feature = "fault-injection")]
        let r = if $crate::faults::check($name).is_some() { $fail } else { $call };
        #[cfg(not(feature = "fault-injection"))]
        let r = $call;
        r
    }};
}

/// A provider call that releases something: `release!(name, fail, call)`. It is always made;
/// with feature `fault-injection` an armed check then reports it as failed (`fail`, `errno`
/// set), see [`crate::faults`]. Without the feature this is just `call`.
/// `release!(Kind: name, fail, call)` also counts one `Kind` released when the call itself
/// returned 0 (before any injected failure: the resource is gone either way).
macro_rules! release {
    ($name:literal, $fail:expr, $call:expr) => {{
        let r = $call;
        #[cfg(feature = "fault-injection")]
        let r = if $crate::faults::check($name).is_some() { $fail } else { r };
        r
    }};
    ($res:ident: $name:literal, $fail:expr, $call:expr) => {{
        let r = $call;
        $crate::sys::track!($res, -1, if r == 0);
        #[cfg(feature = "fault-injection")]
        let r = if $crate::faults::check($name).is_some() { $fail } else { r };
        r
    }};
}

/// Counts a resource created (`track!(Kind, 1)`) or released (`track!(Kind, -1)`) with feature
/// `fault-injection`; nothing without it.
/// `track!(Kind, delta, if cond)` counts only when `cond` holds (evaluated only with the feature).
macro_rules! track {
    ($res:ident, $delta:expr) => {
        #[cfg(feature = "fault-injection")]
        $crate::faults::track($crate::faults::Resource::$res, $delta);
    };
    ($res:ident, $delta:expr, if $cond:expr) => {
        #[cfg(feature = "fault-injection")]
        if $cond {
            $crate::faults::track($crate::faults::Resource::$res, $delta);
        }
    };
}

pub(crate) use {call, release, track};

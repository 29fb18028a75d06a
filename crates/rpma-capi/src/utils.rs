//! `rpma_utils_*`: the device of an address, whether a device is ODP-capable, and the
//! description of a connection event.

use std::ffi::{c_char, c_int, CStr};

use rpma_core::{ContextType, Device};

use crate::backend::device::{device, ibv_context, remember};
use rpma_facade::any::AnyTransport;

use crate::backend::{chosen, not_of_this_library, on_backend, Backed, DeviceType};
use crate::ffi::{code, cstr, guard, nonnull, put, E_INVAL};

/// `rpma_utils_get_ibv_context`: the device of a local (`type` 0) or remote (1) address.
///
/// # Safety
/// C1: `addr` is NULL or a NUL-terminated string; `ibv_ctx_ptr` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_utils_get_ibv_context(
    addr: *const c_char,
    type_: c_int,
    ibv_ctx_ptr: *mut *mut ibv_context,
) -> c_int {
    guard(|| {
        nonnull(ibv_ctx_ptr)?;
        let kind = match type_ {
            0 => ContextType::Local,
            1 => ContextType::Remote,
            _ => return Err(E_INVAL),
        };
        // SAFETY: [C1] the caller's address string.
        let addr = unsafe { cstr(addr) }?;
        let ctx = match chosen()? {
            AnyTransport::Mock(f) => {
                let dev = Device::lookup(f, addr, kind).map_err(code)?;
                let name = dev.name();
                let same = |d: &Backed<DeviceType>| matches!(d, Backed::Mock(m) if m.name() == name);
                remember(0, Backed::Mock(dev), same).0
            }
            #[cfg(feature = "verbs")]
            AnyTransport::Verbs(v) => {
                let dev = Device::lookup(v, addr, kind).map_err(code)?;
                let raw = dev.backend().as_raw() as usize;
                // A context seen before keeps its first device (and that one's reference on it).
                remember(raw, Backed::Verbs(dev), |_| false).0
            }
            #[allow(unreachable_patterns)]
            _ => not_of_this_library(),
        };
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(ibv_ctx_ptr, ctx as *mut ibv_context) };
        Ok(())
    })
}

/// `rpma_utils_ibv_context_is_odp_capable`.
///
/// # Safety
/// C1: `is_odp_capable` is NULL or writable; `ibv_ctx` is NULL or a context
/// `rpma_peer_new` accepts (docs/capi.md).
#[no_mangle]
pub unsafe extern "C" fn rpma_utils_ibv_context_is_odp_capable(
    ibv_ctx: *mut ibv_context,
    is_odp_capable: *mut c_int,
) -> c_int {
    guard(|| {
        nonnull(is_odp_capable)?;
        let d = device(ibv_ctx)?;
        let odp = on_backend!(d, |T, d| d.is_odp_capable().map_err(code)?);
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(is_odp_capable, c_int::from(odp)) };
        Ok(())
    })
}

/// `rpma_utils_conn_event_2str`: the description of an `enum rpma_conn_event` value.
#[no_mangle]
pub extern "C" fn rpma_utils_conn_event_2str(conn_event: c_int) -> *const c_char {
    let s: &'static CStr = match conn_event {
        -1 => c"Undefined connection event",
        0 => c"Connection established",
        1 => c"Connection closed",
        2 => c"Connection lost",
        3 => c"Connection rejected",
        4 => c"Connection unreachable",
        _ => c"Unsupported connection event",
    };
    s.as_ptr()
}

//! Device contexts (`struct ibv_context *`) and the device functions `rpma_utils_*`.
//!
//! On the mock, a context is a pointer to an object of this library, one per device for the
//! life of the process. On verbs, it is the real `struct ibv_context *` librdmacm opened for
//! the device: the one `rpma_utils_get_ibv_context` hands out, or any other of
//! `rdma_get_devices`'s list. Every device this library has seen is kept until the process
//! exits (as librdmacm keeps its contexts), so a context handed out stays valid.

use std::ffi::{c_char, c_int};

use parking_lot::Mutex;
use rpma_core::{ContextType, Device};

use super::{with_backend, Backend, By, Chosen, DeviceF};
use crate::{code, cstr, guard, nonnull, put, CResult, E_INVAL};

/// `struct ibv_context`: opaque to this library's C side (on verbs, libibverbs' own).
#[allow(non_camel_case_types)]
#[repr(C)]
pub struct ibv_context {
    _opaque: [u8; 0],
}

/// A device this library has seen: the context pointer C gets, and the device.
struct Known {
    ctx: usize,
    dev: &'static By<DeviceF>,
}

static DEVICES: Mutex<Vec<Known>> = Mutex::new(Vec::new());

/// The known device whose context is `ctx`.
fn known(ctx: usize) -> Option<&'static By<DeviceF>> {
    let devs = DEVICES.lock();
    devs.iter().find(|k| k.ctx == ctx).map(|k| k.dev)
}

/// Remembers `dev` under `ctx` (the first device remembered under a context wins) and returns
/// the one kept. `ctx` 0 (the mock) is the address of the kept object.
fn remember(ctx: usize, dev: By<DeviceF>, same: impl Fn(&By<DeviceF>) -> bool) -> (usize, &'static By<DeviceF>) {
    let mut devs = DEVICES.lock();
    if let Some(k) = devs.iter().find(|k| (ctx != 0 && k.ctx == ctx) || (ctx == 0 && same(k.dev))) {
        return (k.ctx, k.dev);
    }
    // One object per device for the life of the process, as librdmacm's contexts.
    let d: &'static By<DeviceF> = Box::leak(Box::new(dev));
    let ctx = if ctx == 0 { std::ptr::from_ref(d) as usize } else { ctx };
    devs.push(Known { ctx, dev: d });
    (ctx, d)
}

/// The device behind an `ibv_context *`: one this library handed out, or on verbs any context
/// of librdmacm's device list; `RPMA_E_INVAL` for NULL or any other pointer.
pub(crate) fn device(ctx: *const ibv_context) -> CResult<&'static By<DeviceF>> {
    nonnull(ctx)?;
    if let Some(d) = known(ctx as usize) {
        return Ok(d);
    }
    match super::chosen()? {
        Chosen::Mock(_) => {}
        #[cfg(feature = "verbs")]
        Chosen::Verbs(v) => {
            if let Some(d) = rpma_verbs::VerbsDevice::from_rdma_cm_context(ctx.cast()).map_err(code)? {
                let dev = <rpma_verbs::Verbs as Backend>::wrap::<DeviceF>(Device::from_backend(v, d));
                return Ok(remember(ctx as usize, dev, |_| false).1);
            }
            rpma_core::rpma_log!(
                Error,
                "struct ibv_context * {ctx:p} is not a device context of librdmacm (use one from \
                 rpma_utils_get_ibv_context or rdma_get_devices; a context opened with ibv_open_device \
                 cannot serve RDMA CM's queue pairs)"
            );
        }
    }
    Err(E_INVAL)
}

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
        let ctx = match super::chosen()? {
            Chosen::Mock(f) => {
                let dev = Device::lookup(f, addr, kind).map_err(code)?;
                let name = dev.name();
                let same = |d: &By<DeviceF>| matches!(d, By::Mock(m) if m.name() == name);
                remember(0, By::Mock(dev), same).0
            }
            #[cfg(feature = "verbs")]
            Chosen::Verbs(v) => {
                let dev = Device::lookup(v, addr, kind).map_err(code)?;
                let raw = dev.backend().as_raw() as usize;
                // A context seen before keeps its first device (and that one's reference on it).
                remember(raw, By::Verbs(dev), |_| false).0
            }
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
        let odp = with_backend!(d.kind(), T => T::get(d)?.is_odp_capable().map_err(code)?);
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(is_odp_capable, c_int::from(odp)) };
        Ok(())
    })
}

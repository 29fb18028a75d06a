//! Device contexts (`struct ibv_context *`): the devices this library has handed out or been
//! given (`rpma_utils_get_ibv_context`, `rpma_peer_new`; crate::utils exports them).
//!
//! On the mock, a context is a pointer to an object of this library, one per device for the
//! life of the process. On verbs, it is the real `struct ibv_context *` librdmacm opened for
//! the device: the one `rpma_utils_get_ibv_context` hands out, or any other of
//! `rdma_get_devices`'s list. Every device this library has seen is kept until the process
//! exits (as librdmacm keeps its contexts), so a context handed out stays valid.

use parking_lot::Mutex;

use rpma_facade::any::AnyTransport;

use super::{chosen, not_of_this_library, Backed, DeviceType};
use crate::ffi::{nonnull, CResult, E_INVAL};

/// `struct ibv_context`: opaque to this library's C side (on verbs, libibverbs' own).
#[allow(non_camel_case_types)]
#[repr(C)]
pub struct ibv_context {
    _opaque: [u8; 0],
}

/// A device this library has seen: the context pointer C gets, and the device.
struct Known {
    ctx: usize,
    dev: &'static Backed<DeviceType>,
}

static DEVICES: Mutex<Vec<Known>> = Mutex::new(Vec::new());

/// The known device whose context is `ctx`.
fn known(ctx: usize) -> Option<&'static Backed<DeviceType>> {
    let devs = DEVICES.lock();
    devs.iter().find(|k| k.ctx == ctx).map(|k| k.dev)
}

/// Remembers `dev` under `ctx` (the first device remembered under a context wins) and returns
/// the one kept. `ctx` 0 (the mock) is the address of the kept object.
pub(crate) fn remember(
    ctx: usize,
    dev: Backed<DeviceType>,
    same: impl Fn(&Backed<DeviceType>) -> bool,
) -> (usize, &'static Backed<DeviceType>) {
    let mut devs = DEVICES.lock();
    if let Some(k) = devs.iter().find(|k| (ctx != 0 && k.ctx == ctx) || (ctx == 0 && same(k.dev))) {
        return (k.ctx, k.dev);
    }
    // One object per device for the life of the process, as librdmacm's contexts.
    let d: &'static Backed<DeviceType> = Box::leak(Box::new(dev));
    let ctx = if ctx == 0 { std::ptr::from_ref(d) as usize } else { ctx };
    devs.push(Known { ctx, dev: d });
    (ctx, d)
}

/// The device behind an `ibv_context *`: one this library handed out, or on verbs any context
/// of librdmacm's device list; `RPMA_E_INVAL` for NULL or any other pointer.
pub(crate) fn device(ctx: *const ibv_context) -> CResult<&'static Backed<DeviceType>> {
    nonnull(ctx)?;
    if let Some(d) = known(ctx as usize) {
        return Ok(d);
    }
    match chosen()? {
        AnyTransport::Mock(_) => {}
        #[cfg(feature = "verbs")]
        AnyTransport::Verbs(v) => {
            if let Some(d) = rpma_verbs::VerbsDevice::from_rdma_cm_context(ctx.cast()).map_err(crate::ffi::code)? {
                let dev =
                    <rpma_verbs::Verbs as super::Backend>::wrap::<DeviceType>(rpma_core::Device::from_backend(v, d));
                return Ok(remember(ctx as usize, dev, |_| false).1);
            }
            rpma_core::rpma_log!(
                Error,
                "struct ibv_context * {ctx:p} is not a device context of librdmacm (use one from \
                 rpma_utils_get_ibv_context or rdma_get_devices; a context opened with ibv_open_device \
                 cannot serve RDMA CM's queue pairs)"
            );
        }
        #[allow(unreachable_patterns)]
        _ => not_of_this_library(),
    }
    Err(E_INVAL)
}

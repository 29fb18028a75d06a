//! The backend chosen by `RPMA_BACKEND`, and the device functions `rpma_utils_*`.

use std::ffi::{c_char, c_int};
use std::sync::{Mutex, OnceLock, PoisonError};

use rpma_core::{rpma_log, ContextType, Device};
use rpma_mock::MockFabric;

use crate::{code, cstr, guard, nonnull, put, CResult, E_INVAL};

/// The transport of every handle (the one backend built in so far).
pub(crate) type M = MockFabric;

/// `struct ibv_context`: opaque to this library. On the mock it is a [`CDevice`].
#[allow(non_camel_case_types)]
#[repr(C)]
pub struct ibv_context {
    _opaque: [u8; 0],
}

/// What an `ibv_context *` handed out on the mock points to.
pub(crate) struct CDevice {
    pub(crate) dev: Device<M>,
}

static BACKEND: OnceLock<Result<M, String>> = OnceLock::new();
static DEVICES: Mutex<Vec<&'static CDevice>> = Mutex::new(Vec::new());

fn choose() -> Result<M, String> {
    match std::env::var("RPMA_BACKEND") {
        Ok(name) if name == "mock" => Ok(MockFabric::new()),
        Ok(name) if name == "verbs" => {
            Err("RPMA_BACKEND=verbs: the verbs backend is not built into this librpma yet (use RPMA_BACKEND=mock)"
                .to_owned())
        }
        Err(std::env::VarError::NotPresent) => Err(
            "RPMA_BACKEND is unset and its default, verbs, is not built into this librpma yet (use RPMA_BACKEND=mock)"
                .to_owned(),
        ),
        Ok(name) => Err(format!("RPMA_BACKEND={name}: unknown backend (known: verbs, mock)")),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err("RPMA_BACKEND is not UTF-8: unknown backend (known: verbs, mock)".to_owned())
        }
    }
}

/// The process's fabric; `RPMA_E_PROVIDER` (and an ERROR log line) if `RPMA_BACKEND` names no
/// usable backend.
pub(crate) fn fabric() -> CResult<&'static M> {
    match BACKEND.get_or_init(choose) {
        Ok(f) => Ok(f),
        Err(msg) => {
            rpma_log!(Error, "{msg}");
            Err(rpma_core::ErrorKind::Provider.code())
        }
    }
}

/// The device behind an `ibv_context *` this library handed out; `RPMA_E_INVAL` for NULL or
/// for any other pointer.
pub(crate) fn device(ctx: *const ibv_context) -> CResult<&'static CDevice> {
    nonnull(ctx)?;
    let devs = DEVICES.lock().unwrap_or_else(PoisonError::into_inner);
    devs.iter().copied().find(|d| std::ptr::eq(std::ptr::from_ref(*d).cast(), ctx)).ok_or(E_INVAL)
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
        let dev = Device::lookup(fabric()?, addr, kind).map_err(code)?;
        let mut devs = DEVICES.lock().unwrap_or_else(PoisonError::into_inner);
        let name = dev.name();
        let found = match devs.iter().find(|d| d.dev.name() == name) {
            Some(d) => *d,
            None => {
                // One object per device for the life of the process, as librdmacm's contexts.
                let d: &'static CDevice = Box::leak(Box::new(CDevice { dev }));
                devs.push(d);
                d
            }
        };
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(ibv_ctx_ptr, std::ptr::from_ref(found).cast_mut().cast()) };
        Ok(())
    })
}

/// `rpma_utils_ibv_context_is_odp_capable`.
///
/// # Safety
/// C1: `is_odp_capable` is NULL or writable; `ibv_ctx` is NULL or a context from
/// `rpma_utils_get_ibv_context`.
#[no_mangle]
pub unsafe extern "C" fn rpma_utils_ibv_context_is_odp_capable(
    ibv_ctx: *mut ibv_context,
    is_odp_capable: *mut c_int,
) -> c_int {
    guard(|| {
        nonnull(is_odp_capable)?;
        let d = device(ibv_ctx)?;
        let odp = d.dev.is_odp_capable().map_err(code)?;
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(is_odp_capable, c_int::from(odp)) };
        Ok(())
    })
}

//! Endpoints: `struct rpma_ep` and `rpma_ep_listen`, `rpma_ep_shutdown`, `rpma_ep_get_fd`,
//! `rpma_ep_next_conn_req`.

use std::ffi::{c_char, c_int};
use std::os::fd::AsRawFd;

use parking_lot::Mutex;
use rpma_core::Ep;

use crate::backend::{on_backend, Backed, Backend, EpType, ReqType};
use crate::conn_cfg::{cfg_or_default, refused, RpmaConnCfg};
use crate::conn_req::RpmaConnReq;
use crate::ffi::{code, cstr, give, guard, handle, nonnull, put, take};
use crate::peer::RpmaPeer;

/// `struct rpma_ep`.
pub struct RpmaEp {
    ep: Backed<EpType>,
}

/// `rpma_ep_listen`.
///
/// # Safety
/// C1/C2: `peer` is NULL or live; `addr`, `port` are NULL or NUL-terminated; `ep_ptr` is NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_ep_listen(
    peer: *mut RpmaPeer,
    addr: *const c_char,
    port: *const c_char,
    ep_ptr: *mut *mut RpmaEp,
) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let p = unsafe { handle(peer) }?;
        // SAFETY: [C1] the caller's strings.
        let (addr, port) = unsafe { (cstr(addr)?, cstr(port)?) };
        nonnull(ep_ptr)?;
        let ep = on_backend!(&p.peer, |T, peer| T::wrap::<EpType>(Ep::listen(peer, addr, port).map_err(code)?));
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { give(ep_ptr, RpmaEp { ep }) };
        Ok(())
    })
}

/// `rpma_ep_shutdown`: frees the endpoint and NULLs `*ep_ptr`, even when that fails.
///
/// # Safety
/// C1/C2: `ep_ptr` is NULL or a slot holding NULL or a live endpoint.
#[no_mangle]
pub unsafe extern "C" fn rpma_ep_shutdown(ep_ptr: *mut *mut RpmaEp) -> c_int {
    guard(|| {
        // SAFETY: [C1, C2] the caller's slot.
        match unsafe { take(ep_ptr) }? {
            Some(e) => on_backend!(e.ep, |T, ep| ep.shutdown().map_err(code)),
            None => Ok(()),
        }
    })
}

/// `rpma_ep_get_fd`.
///
/// # Safety
/// C1/C2: `ep` is NULL or live; `fd` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_ep_get_fd(ep: *const RpmaEp, fd: *mut c_int) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let e = unsafe { handle(ep) }?;
        nonnull(fd)?;
        let raw = on_backend!(&e.ep, |T, ep| ep.fd().as_raw_fd());
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(fd, raw) };
        Ok(())
    })
}

/// `rpma_ep_next_conn_req`.
///
/// # Safety
/// C1/C2: `ep` is NULL or live; `cfg` is NULL or live; `req_ptr` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_ep_next_conn_req(
    ep: *mut RpmaEp,
    cfg_: *const RpmaConnCfg,
    req_ptr: *mut *mut RpmaConnReq,
) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let e = unsafe { handle(ep) }?;
        nonnull(req_ptr)?;
        let req = on_backend!(&e.ep, |T, ep| {
            // SAFETY: [C2] the caller's configuration or NULL.
            let cfg = unsafe { cfg_or_default::<T>(cfg_) }?;
            let req = ep.next_conn_req(cfg.as_ref());
            // SAFETY: [C2] as above.
            let req = req.map_err(|e| unsafe { refused::<T>(cfg_, "rpma_ep_next_conn_req", e) })?;
            T::wrap::<ReqType>(Mutex::new(req))
        });
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { give(req_ptr, RpmaConnReq { req }) };
        Ok(())
    })
}

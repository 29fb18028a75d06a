//! Connection requests: `struct rpma_conn_req` and `rpma_conn_req_new`,
//! `rpma_conn_req_connect`, `rpma_conn_req_delete`, `rpma_conn_req_recv`,
//! `rpma_conn_req_get_private_data`.

use std::ffi::{c_char, c_int, c_void};

use parking_lot::Mutex;
use rpma_core::ConnReq;

use crate::backend::{on_backend, Backed, Backend, ReqType};
use crate::conn::RpmaConn;
use crate::conn_cfg::{cfg_or_default, refused, RpmaConnCfg};
use crate::ffi::{code, cstr, give, guard, handle, nonnull, put, take, E_INVAL};
use crate::log::guard_deferring_log;
use crate::mr::RpmaMrLocal;
use crate::peer::RpmaPeer;
use crate::private_data::rpma_conn_private_data;

/// `struct rpma_conn_req`: the request behind a lock (`rpma_conn_req_recv` is thread-safe
/// in librpma; rpma-core's request is not `Sync`).
pub struct RpmaConnReq {
    pub(crate) req: Backed<ReqType>,
}

/// `rpma_conn_req_new`.
///
/// # Safety
/// C1/C2: `peer` is NULL or live; `addr`, `port` are NULL or NUL-terminated; `cfg` is NULL or
/// live; `req_ptr` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_req_new(
    peer: *mut RpmaPeer,
    addr: *const c_char,
    port: *const c_char,
    cfg_: *const RpmaConnCfg,
    req_ptr: *mut *mut RpmaConnReq,
) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let p = unsafe { handle(peer) }?;
        // SAFETY: [C1] the caller's strings.
        let (addr, port) = unsafe { (cstr(addr)?, cstr(port)?) };
        nonnull(req_ptr)?;
        let req = on_backend!(&p.peer, |T, peer| {
            // SAFETY: [C2] the caller's configuration or NULL.
            let cfg = unsafe { cfg_or_default::<T>(cfg_) }?;
            let req = ConnReq::new(peer, addr, port, cfg.as_ref());
            // SAFETY: [C2] as above.
            let req = req.map_err(|e| unsafe { refused::<T>(cfg_, "rpma_conn_req_new", e) })?;
            T::wrap::<ReqType>(Mutex::new(req))
        });
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { give(req_ptr, RpmaConnReq { req }) };
        Ok(())
    })
}

/// `rpma_conn_req_connect`: consumes the request (`*req_ptr` becomes NULL, success or not);
/// an invalid `conn_ptr` or `pdata` deletes (an incoming one: rejects) it.
///
/// # Safety
/// C1/C2: `req_ptr` is NULL or a slot holding NULL or a live request; `pdata` is NULL or a
/// readable struct whose `ptr` is readable for `len` bytes; `conn_ptr` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_req_connect(
    req_ptr: *mut *mut RpmaConnReq,
    pdata: *const rpma_conn_private_data,
    conn_ptr: *mut *mut RpmaConn,
) -> c_int {
    guard(|| {
        // SAFETY: [C1, C2] the caller's slot.
        let req = unsafe { take(req_ptr) }?.ok_or(E_INVAL)?;
        // SAFETY: [C1] pdata is NULL or readable, its bytes for the call.
        let bytes = unsafe { rpma_conn_private_data::bytes(pdata) };
        let RpmaConnReq { req } = *req;
        on_backend!(req, |T, req| {
            let req = req.into_inner();
            let bytes = match bytes {
                Ok(b) if !conn_ptr.is_null() => b,
                _ => {
                    let _ = req.delete();
                    return Err(E_INVAL);
                }
            };
            let conn = req.connect(bytes).map_err(code)?;
            // SAFETY: [C1] checked non-NULL out-parameter.
            unsafe { put(conn_ptr, RpmaConn::boxed(conn)) };
            Ok(())
        })
    })
}

/// `rpma_conn_req_delete`.
///
/// # Safety
/// C1/C2: `req_ptr` is NULL or a slot holding NULL or a live request.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_req_delete(req_ptr: *mut *mut RpmaConnReq) -> c_int {
    guard(|| {
        // SAFETY: [C1, C2] the caller's slot.
        match unsafe { take(req_ptr) }? {
            Some(r) => {
                let RpmaConnReq { req } = *r;
                on_backend!(req, |T, req| req.into_inner().delete().map_err(code))
            }
            None => Ok(()),
        }
    })
}

/// `rpma_conn_req_recv`: a receive buffer ready before the connection is established.
///
/// # Safety
/// C2: `req` and `dst` are NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_req_recv(
    req: *mut RpmaConnReq,
    dst: *mut RpmaMrLocal,
    offset: usize,
    len: usize,
    op_context: *const c_void,
) -> c_int {
    guard_deferring_log(|| {
        // SAFETY: [C2] the caller's handles.
        let (r, d) = unsafe { (handle(req)?, handle(dst)?) };
        let end = offset.checked_add(len).ok_or(E_INVAL)?;
        on_backend!(&r.req, |T, lock req| {
            let dst = T::get(&d.mr)?.slice(offset..end);
            req.recv(dst).context(op_context as u64).post().map_err(code)
        })
    })
}

/// `rpma_conn_req_get_private_data`: valid until the request is connected or deleted.
///
/// # Safety
/// C1/C2: `req` is NULL or live; `pdata` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_req_get_private_data(
    req: *const RpmaConnReq,
    pdata: *mut rpma_conn_private_data,
) -> c_int {
    guard_deferring_log(|| {
        // SAFETY: [C2] the caller's handle.
        let r = unsafe { handle(req) }?;
        nonnull(pdata)?;
        // The bytes it points to are the request's, live until it is connected or deleted,
        // and read-only to C (librpma.h).
        let pd = on_backend!(&r.req, |T, lock req| rpma_conn_private_data::of(req.private_data()));
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(pdata, pd) };
        Ok(())
    })
}

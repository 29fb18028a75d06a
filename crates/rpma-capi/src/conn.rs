//! Connections: `struct rpma_conn` and the `rpma_conn_*` functions (events, fds, CQs, the
//! shared channel's wait, private data, the remote peer's configuration, disconnect, delete).
//! The data path on a connection is in crate::ops, its CQs in crate::cq.

use std::ffi::c_int;
use std::os::fd::AsRawFd;

use parking_lot::Mutex;
use rpma_core::Conn;

use crate::backend::{lock, on_backend, Backed, Backend, ConnType};
use crate::cq::RpmaCq;
use crate::ffi::{code, guard, handle, nonnull, put, take, E_PROVIDER};
use crate::log::guard_deferring_log;
use crate::peer_cfg::RpmaPeerCfg;
use crate::private_data::rpma_conn_private_data;
use crate::wait::{blocking, turn};

/// `struct rpma_conn`: the connection, behind a lock that every function taking the
/// connection or one of its CQs holds (librpma documents the data path, `rpma_cq_get_wc`,
/// `rpma_cq_wait` and `rpma_conn_next_event` as thread-safe; rpma-core's connection is not
/// `Sync`), and its two CQ handles.
pub struct RpmaConn {
    pub(crate) conn: Backed<ConnType>,
    cq: RpmaCq,
    rcq: RpmaCq,
}

impl RpmaConn {
    /// Boxes `conn` and points its CQ handles at it.
    pub(crate) fn boxed<T: Backend>(conn: Conn<T>) -> *mut Self {
        let null = std::ptr::null();
        let b = Box::into_raw(Box::new(Self {
            conn: T::wrap::<ConnType>(Mutex::new(conn)),
            cq: RpmaCq::of_conn(null, false),
            rcq: RpmaCq::of_conn(null, true),
        }));
        // Every pointer derives from the raw pointer `b` (no reference to the box is kept);
        // SAFETY: [C2] b is the live, unaliased allocation just made.
        unsafe {
            let c: *const Backed<ConnType> = std::ptr::addr_of!((*b).conn);
            (*b).cq = RpmaCq::of_conn(c, false);
            (*b).rcq = RpmaCq::of_conn(c, true);
        }
        b
    }
}

/// `rpma_conn_next_event`.
///
/// # Safety
/// C1/C2: `conn` is NULL or live; `event` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_next_event(conn: *mut RpmaConn, event: *mut c_int) -> c_int {
    guard_deferring_log(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { handle(conn) }?;
        nonnull(event)?;
        let ev = on_backend!(&c.conn, |T, m| {
            blocking(|| {
                let c = lock(m);
                turn(c.event_fd().as_raw_fd(), || c.next_event())
            })?
        });
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(event, ev as c_int) };
        Ok(())
    })
}

/// `rpma_conn_get_event_fd`.
///
/// # Safety
/// C1/C2: `conn` is NULL or live; `fd` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_get_event_fd(conn: *const RpmaConn, fd: *mut c_int) -> c_int {
    guard_deferring_log(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { handle(conn) }?;
        nonnull(fd)?;
        // SAFETY: [C1] checked non-NULL out-parameter.
        let raw = on_backend!(&c.conn, |T, lock c| c.event_fd().as_raw_fd());
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(fd, raw) };
        Ok(())
    })
}

/// `rpma_conn_get_compl_fd`: `RPMA_E_NOT_SHARED_CHNL` unless the channel is shared.
///
/// # Safety
/// C1/C2: `conn` is NULL or live; `fd` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_get_compl_fd(conn: *const RpmaConn, fd: *mut c_int) -> c_int {
    guard_deferring_log(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { handle(conn) }?;
        nonnull(fd)?;
        let raw = on_backend!(&c.conn, |T, lock c| c.compl_fd().map_err(code)?.as_raw_fd());
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(fd, raw) };
        Ok(())
    })
}

/// `rpma_conn_get_cq`.
///
/// # Safety
/// C1/C2: `conn` is NULL or live; `cq_ptr` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_get_cq(conn: *const RpmaConn, cq_ptr: *mut *mut RpmaCq) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { handle(conn) }?;
        nonnull(cq_ptr)?;
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(cq_ptr, std::ptr::addr_of!(c.cq).cast_mut()) };
        Ok(())
    })
}

/// `rpma_conn_get_rcq`: NULL when the connection has no receive CQ.
///
/// # Safety
/// C1/C2: `conn` is NULL or live; `rcq_ptr` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_get_rcq(conn: *const RpmaConn, rcq_ptr: *mut *mut RpmaCq) -> c_int {
    guard_deferring_log(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { handle(conn) }?;
        nonnull(rcq_ptr)?;
        let has = on_backend!(&c.conn, |T, lock c| c.rcq().is_some());
        let p = if has { std::ptr::addr_of!(c.rcq).cast_mut() } else { std::ptr::null_mut() };
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(rcq_ptr, p) };
        Ok(())
    })
}

/// `rpma_conn_wait`: waits on the shared completion channel and tells which CQ to drain.
///
/// # Safety
/// C1/C2: `conn` is NULL or live; `cq` is NULL or writable; `is_rcq` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_wait(
    conn: *mut RpmaConn,
    flags: c_int,
    cq: *mut *mut RpmaCq,
    is_rcq: *mut bool,
) -> c_int {
    let _ = flags; // reserved by librpma
    guard_deferring_log(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { handle(conn) }?;
        nonnull(cq)?;
        let waited = on_backend!(&c.conn, |T, m| {
            // On verbs the event is taken outside the lock, as librpma does (thread-safe
            // libibverbs calls); on the mock the wait sleeps without the lock, then takes it.
            let unlocked = {
                let c = lock(m);
                // No shared channel: RPMA_E_NOT_SHARED_CHNL, as before any wait.
                c.compl_fd().map_err(code).map(|_| T::unlocked_conn_wait(&c))
            };
            match unlocked {
                Err(e) => Err(e),
                // SAFETY: [C2] the handle, and with it its connection, lives until this call
                // returns.
                Ok(Some(w)) => unsafe { w.wait() }.map_err(code),
                Ok(None) => blocking(|| {
                    let c = lock(m);
                    let fd = c.compl_fd().map_err(code)?.as_raw_fd();
                    turn(fd, || c.wait().map(|(_, rcq)| rcq))
                }),
            }
        });
        let rcq = match waited {
            Ok(rcq) => rcq,
            Err(e) => {
                if e == E_PROVIDER {
                    // The CQ's event was taken but re-arming it failed: as librpma's code,
                    // no CQ to drain.
                    // SAFETY: [C1] checked non-NULL out-parameter.
                    unsafe { put(cq, std::ptr::null_mut()) };
                }
                return Err(e);
            }
        };
        let h = if rcq { std::ptr::addr_of!(c.rcq) } else { std::ptr::addr_of!(c.cq) };
        // SAFETY: [C1] checked non-NULL out-parameters (is_rcq is optional).
        unsafe {
            put(cq, h.cast_mut());
            if !is_rcq.is_null() {
                put(is_rcq, rcq);
            }
        }
        Ok(())
    })
}

/// `rpma_conn_disconnect`.
///
/// # Safety
/// C2: `conn` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_disconnect(conn: *mut RpmaConn) -> c_int {
    guard_deferring_log(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { handle(conn) }?;
        on_backend!(&c.conn, |T, lock c| c.disconnect().map_err(code))
    })
}

/// `rpma_conn_delete`: frees the connection (and its CQ handles) and NULLs `*conn_ptr`, even
/// when a step fails.
///
/// # Safety
/// C1/C2: `conn_ptr` is NULL or a slot holding NULL or a live connection.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_delete(conn_ptr: *mut *mut RpmaConn) -> c_int {
    guard(|| {
        // SAFETY: [C1, C2] the caller's slot.
        match unsafe { take(conn_ptr) }? {
            Some(c) => {
                let RpmaConn { conn, .. } = *c;
                on_backend!(conn, |T, conn| conn.into_inner().delete().map_err(code))
            }
            None => Ok(()),
        }
    })
}

/// `rpma_conn_get_private_data`: owned by the connection until `rpma_conn_delete`.
///
/// # Safety
/// C1/C2: `conn` is NULL or live; `pdata` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_get_private_data(
    conn: *const RpmaConn,
    pdata: *mut rpma_conn_private_data,
) -> c_int {
    guard_deferring_log(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { handle(conn) }?;
        nonnull(pdata)?;
        let pd = on_backend!(&c.conn, |T, lock c| rpma_conn_private_data::of(c.private_data()));
        // SAFETY: [C1] checked non-NULL out-parameter; the bytes it points to are the
        // connection's (set once, at ESTABLISHED), live until rpma_conn_delete, and read-only
        // to C (librpma.h).
        unsafe { put(pdata, pd) };
        Ok(())
    })
}

/// `rpma_conn_apply_remote_peer_cfg`.
///
/// # Safety
/// C2: `conn` and `pcfg` are NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_apply_remote_peer_cfg(conn: *mut RpmaConn, pcfg: *const RpmaPeerCfg) -> c_int {
    guard_deferring_log(|| {
        // SAFETY: [C2] the caller's handles.
        let (c, p) = unsafe { (handle(conn)?, handle(pcfg)?) };
        let cfg = p.cfg();
        on_backend!(&c.conn, |T, lock conn| {
            conn.apply_remote_peer_cfg(&cfg);
        });
        Ok(())
    })
}

/// `rpma_conn_get_qp_num`.
///
/// # Safety
/// C1/C2: `conn` is NULL or live; `qp_num` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_get_qp_num(conn: *const RpmaConn, qp_num: *mut u32) -> c_int {
    guard_deferring_log(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { handle(conn) }?;
        nonnull(qp_num)?;
        // SAFETY: [C1] checked non-NULL out-parameter.
        let n = on_backend!(&c.conn, |T, lock c| c.qp_num());
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(qp_num, n) };
        Ok(())
    })
}

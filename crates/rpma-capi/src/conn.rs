//! Endpoints, connection requests, connections and completion queues.

use std::ffi::{c_char, c_int, c_void};
use std::os::fd::AsRawFd;

use parking_lot::{Mutex, MutexGuard};
use rpma_core::transport::Transport;
use rpma_core::{Conn, ConnReq, Cq, Ep, Wc};

use crate::backend::{with_backend, Backend, By, ConnF, EpF, Kind, ReqF, SrqF};
use crate::cfg::{cfg_or_default, RpmaConnCfg};
use crate::mr::RpmaMrLocal;
use crate::peer::{RpmaPeer, RpmaPeerCfg};
use crate::wait::{blocking, turn};
use crate::{
    code, cstr, give, guard, guard_deferring_log, handle, nonnull, put, take, CResult, E_INVAL, E_NO_COMPLETION,
    E_PROVIDER, E_UNKNOWN,
};

/// `struct rpma_conn_private_data`.
#[allow(non_camel_case_types)]
#[repr(C)]
pub struct rpma_conn_private_data {
    /// The bytes (NULL when there are none).
    pub ptr: *mut c_void,
    /// Their number.
    pub len: u8,
}

impl rpma_conn_private_data {
    /// A view of `bytes`, which live as long as the object they belong to (librpma's rule).
    /// The `*mut` is librpma's type only: the bytes are Rust-owned and shared, and C reads
    /// them only (include/librpma.h says so; rule C1), never writes through `ptr`.
    fn of(bytes: &[u8]) -> Self {
        if bytes.is_empty() {
            Self { ptr: std::ptr::null_mut(), len: 0 }
        } else {
            // Private data is at most 255 bytes by type; a longer buffer is cut to what the
            // struct can describe.
            Self { ptr: bytes.as_ptr().cast_mut().cast(), len: u8::try_from(bytes.len()).unwrap_or(u8::MAX) }
        }
    }
}

/// `struct rpma_ep`.
pub struct RpmaEp {
    ep: By<EpF>,
}

/// `struct rpma_conn_req`: the request behind a lock (`rpma_conn_req_recv` is thread-safe
/// in librpma; rpma-core's request is not `Sync`).
pub struct RpmaConnReq {
    req: By<ReqF>,
}

/// Locks `m`, the lock of a request, connection or shared RQ handle.
///
/// `parking_lot`'s lock, not `std`'s: on the data path (every post and poll of the C API takes
/// it) its uncontended lock and unlock are one compare-and-swap each, without `std`'s poison
/// bookkeeping; a panic caught at the C boundary (which only a bug can raise) leaves the object
/// as it is, as a poisoned `std` lock taken over would.
#[inline(always)]
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock()
}

/// `struct rpma_cq`: the main or the receive CQ of a connection, or the receive CQ of a shared
/// RQ. It lives inside its owner ([`RpmaConn`], [`RpmaSrq`](crate::srq::RpmaSrq)) and points
/// back at the owner's object, which never moves (the owner is boxed).
pub struct RpmaCq {
    owner: CqOwner,
}

enum CqOwner {
    Conn { conn: *const By<ConnF>, rcq: bool },
    Srq(*const By<SrqF>),
}

impl RpmaCq {
    /// The receive CQ of the shared RQ at `srq` (which must not move while this handle lives).
    pub(crate) const fn of_srq(srq: *const By<SrqF>) -> Self {
        Self { owner: CqOwner::Srq(srq) }
    }

    /// The backend of the CQ's owner.
    ///
    /// # Safety
    /// C2: as for [`RpmaCq::with`].
    unsafe fn kind(&self) -> Kind {
        match self.owner {
            // SAFETY: [C2] the connection outlives the CQ handles inside it.
            CqOwner::Conn { conn, .. } => unsafe { &*conn }.kind(),
            // SAFETY: [C2] the shared RQ outlives the CQ handle inside it.
            CqOwner::Srq(srq) => unsafe { &*srq }.kind(),
        }
    }

    /// Runs `f` on the CQ with its owner's lock held.
    ///
    /// # Safety
    /// C2: the CQ handle is used only while its owner lives (librpma's rule: a CQ is its
    /// connection's or shared RQ's and goes with `rpma_conn_delete` / `rpma_srq_delete`).
    #[inline(always)]
    unsafe fn with<T: Backend, R>(&self, f: impl FnOnce(&Cq<'_, T>) -> CResult<R>) -> CResult<R> {
        // The owner locked first, then its CQ taken: `f` has one call site (and is inlined into
        // it, so a poll on verbs runs in the entry point's frame).
        let owner = match self.owner {
            // SAFETY: [C2] the connection outlives the CQ handles inside it.
            CqOwner::Conn { conn, rcq } => Locked::Conn(lock(T::get(unsafe { &*conn })?), rcq),
            // SAFETY: [C2] the shared RQ outlives the CQ handle inside it.
            CqOwner::Srq(srq) => Locked::Srq(lock(T::get(unsafe { &*srq })?)),
        };
        let q = match &owner {
            Locked::Conn(conn, false) => conn.cq(),
            Locked::Conn(conn, true) => conn.rcq().ok_or(E_UNKNOWN)?,
            Locked::Srq(srq) => srq.rcq().ok_or(E_UNKNOWN)?,
        };
        f(&q)
    }
}

/// A CQ's owner, locked (see [`RpmaCq::with`]); the flag: the connection's receive CQ.
enum Locked<'a, T: Transport> {
    Conn(MutexGuard<'a, Conn<T>>, bool),
    Srq(MutexGuard<'a, rpma_core::Srq<T>>),
}

/// `struct rpma_conn`: the connection, behind a lock that every function taking the
/// connection or one of its CQs holds (librpma documents the data path, `rpma_cq_get_wc`,
/// `rpma_cq_wait` and `rpma_conn_next_event` as thread-safe; rpma-core's connection is not
/// `Sync`), and its two CQ handles.
pub struct RpmaConn {
    pub(crate) conn: By<ConnF>,
    cq: RpmaCq,
    rcq: RpmaCq,
}

impl RpmaConn {
    /// Boxes `conn` and points its CQ handles at it.
    fn boxed<T: Backend>(conn: Conn<T>) -> *mut Self {
        let null = std::ptr::null();
        let b = Box::into_raw(Box::new(Self {
            conn: T::wrap::<ConnF>(Mutex::new(conn)),
            cq: RpmaCq { owner: CqOwner::Conn { conn: null, rcq: false } },
            rcq: RpmaCq { owner: CqOwner::Conn { conn: null, rcq: true } },
        }));
        // Every pointer derives from the raw pointer `b` (no reference to the box is kept);
        // SAFETY: [C2] b is the live, unaliased allocation just made.
        unsafe {
            let c: *const By<ConnF> = std::ptr::addr_of!((*b).conn);
            (*b).cq.owner = CqOwner::Conn { conn: c, rcq: false };
            (*b).rcq.owner = CqOwner::Conn { conn: c, rcq: true };
        }
        b
    }
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
        let ep =
            with_backend!(p.peer.kind(), T => T::wrap::<EpF>(Ep::listen(T::get(&p.peer)?, addr, port).map_err(code)?));
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
            Some(e) => with_backend!(e.ep.kind(), T => T::take(e.ep)?.shutdown().map_err(code)),
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
        // SAFETY: [C1] checked non-NULL out-parameter.
        let raw = with_backend!(e.ep.kind(), T => T::get(&e.ep)?.fd().as_raw_fd());
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
    cfg: *const RpmaConnCfg,
    req_ptr: *mut *mut RpmaConnReq,
) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let e = unsafe { handle(ep) }?;
        nonnull(req_ptr)?;
        let req = with_backend!(e.ep.kind(), T => {
            // SAFETY: [C2] the caller's configuration or NULL.
            let cfg = unsafe { cfg_or_default::<T>(cfg) }?;
            T::wrap::<ReqF>(Mutex::new(T::get(&e.ep)?.next_conn_req(cfg.as_ref()).map_err(code)?))
        });
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { give(req_ptr, RpmaConnReq { req }) };
        Ok(())
    })
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
    cfg: *const RpmaConnCfg,
    req_ptr: *mut *mut RpmaConnReq,
) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let p = unsafe { handle(peer) }?;
        // SAFETY: [C1] the caller's strings.
        let (addr, port) = unsafe { (cstr(addr)?, cstr(port)?) };
        nonnull(req_ptr)?;
        let req = with_backend!(p.peer.kind(), T => {
            // SAFETY: [C2] the caller's configuration or NULL.
            let cfg = unsafe { cfg_or_default::<T>(cfg) }?;
            let req = ConnReq::new(T::get(&p.peer)?, addr, port, cfg.as_ref()).map_err(code)?;
            T::wrap::<ReqF>(Mutex::new(req))
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
        // SAFETY: [C1] pdata is NULL or readable.
        let pd = unsafe { pdata.as_ref() };
        let bytes = match pd {
            None => Ok(None),
            Some(p) if p.ptr.is_null() || p.len == 0 => Err(E_INVAL),
            Some(p) => {
                // SAFETY: [C1] ptr is readable for len bytes for the call.
                let b = unsafe { std::slice::from_raw_parts(p.ptr.cast::<u8>().cast_const(), usize::from(p.len)) };
                Ok(Some(b))
            }
        };
        with_backend!(req.req.kind(), T => {
            let req = T::take(req.req)?.into_inner();
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
            Some(r) => with_backend!(r.req.kind(), T => {
                T::take(r.req)?.into_inner().delete().map_err(code)
            }),
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
        with_backend!(r.req.kind(), T => {
            let dst = T::get(&d.mr)?.slice(offset..end);
            lock(T::get(&r.req)?).recv(dst).context(op_context as u64).post().map_err(code)
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
        // SAFETY: [C1] checked non-NULL out-parameter; the bytes it points to are the
        // request's, live until it is connected or deleted, and read-only to C (librpma.h).
        let pd = with_backend!(r.req.kind(), T => rpma_conn_private_data::of(lock(T::get(&r.req)?).private_data()));
        // SAFETY: [C1] as above.
        unsafe { put(pdata, pd) };
        Ok(())
    })
}

/// The connection behind `conn`.
///
/// # Safety
/// C2: `conn` is NULL or live.
unsafe fn conn<'a>(conn: *const RpmaConn) -> CResult<&'a RpmaConn> {
    // SAFETY: [C2] the caller's handle.
    unsafe { handle(conn) }
}

/// `rpma_conn_next_event`.
///
/// # Safety
/// C1/C2: `conn` is NULL or live; `event` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_next_event(conn_: *mut RpmaConn, event: *mut c_int) -> c_int {
    guard_deferring_log(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { conn(conn_) }?;
        nonnull(event)?;
        let ev = with_backend!(c.conn.kind(), T => {
            let m = T::get(&c.conn)?;
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
pub unsafe extern "C" fn rpma_conn_get_event_fd(conn_: *const RpmaConn, fd: *mut c_int) -> c_int {
    guard_deferring_log(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { conn(conn_) }?;
        nonnull(fd)?;
        // SAFETY: [C1] checked non-NULL out-parameter.
        let raw = with_backend!(c.conn.kind(), T => lock(T::get(&c.conn)?).event_fd().as_raw_fd());
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
pub unsafe extern "C" fn rpma_conn_get_compl_fd(conn_: *const RpmaConn, fd: *mut c_int) -> c_int {
    guard_deferring_log(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { conn(conn_) }?;
        nonnull(fd)?;
        let raw = with_backend!(c.conn.kind(), T => lock(T::get(&c.conn)?).compl_fd().map_err(code)?.as_raw_fd());
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
pub unsafe extern "C" fn rpma_conn_get_cq(conn_: *const RpmaConn, cq_ptr: *mut *mut RpmaCq) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { conn(conn_) }?;
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
pub unsafe extern "C" fn rpma_conn_get_rcq(conn_: *const RpmaConn, rcq_ptr: *mut *mut RpmaCq) -> c_int {
    guard_deferring_log(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { conn(conn_) }?;
        nonnull(rcq_ptr)?;
        let has = with_backend!(c.conn.kind(), T => lock(T::get(&c.conn)?).rcq().is_some());
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
    conn_: *mut RpmaConn,
    flags: c_int,
    cq: *mut *mut RpmaCq,
    is_rcq: *mut bool,
) -> c_int {
    let _ = flags; // reserved by librpma
    guard_deferring_log(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { conn(conn_) }?;
        nonnull(cq)?;
        let waited = with_backend!(c.conn.kind(), T => {
            let m = T::get(&c.conn)?;
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
pub unsafe extern "C" fn rpma_conn_disconnect(conn_: *mut RpmaConn) -> c_int {
    guard_deferring_log(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { conn(conn_) }?;
        with_backend!(c.conn.kind(), T => lock(T::get(&c.conn)?).disconnect().map_err(code))
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
                with_backend!(conn.kind(), T => {
                    T::take(conn)?.into_inner().delete().map_err(code)
                })
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
    conn_: *const RpmaConn,
    pdata: *mut rpma_conn_private_data,
) -> c_int {
    guard_deferring_log(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { conn(conn_) }?;
        nonnull(pdata)?;
        let pd = with_backend!(c.conn.kind(), T => rpma_conn_private_data::of(lock(T::get(&c.conn)?).private_data()));
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
pub unsafe extern "C" fn rpma_conn_apply_remote_peer_cfg(conn_: *mut RpmaConn, pcfg: *const RpmaPeerCfg) -> c_int {
    guard_deferring_log(|| {
        // SAFETY: [C2] the caller's handles.
        let (c, p) = unsafe { (conn(conn_)?, handle(pcfg)?) };
        with_backend!(c.conn.kind(), T => lock(T::get(&c.conn)?).apply_remote_peer_cfg(&p.cfg()));
        Ok(())
    })
}

/// `rpma_conn_get_qp_num`.
///
/// # Safety
/// C1/C2: `conn` is NULL or live; `qp_num` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_get_qp_num(conn_: *const RpmaConn, qp_num: *mut u32) -> c_int {
    guard_deferring_log(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { conn(conn_) }?;
        nonnull(qp_num)?;
        // SAFETY: [C1] checked non-NULL out-parameter.
        let n = with_backend!(c.conn.kind(), T => lock(T::get(&c.conn)?).qp_num());
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(qp_num, n) };
        Ok(())
    })
}

/// Runs `f` on the CQ behind `cq` with its owner's lock held.
///
/// # Safety
/// C2: `cq` is NULL or a CQ handle of a live connection or shared RQ.
#[inline(always)]
unsafe fn with_cq<T: Backend, R>(cq: &RpmaCq, f: impl FnOnce(&Cq<'_, T>) -> CResult<R>) -> CResult<R> {
    // SAFETY: [C2] the caller's handle, inside a live connection or shared RQ.
    unsafe { cq.with(f) }
}

/// The CQ behind `cq` and the backend of its owner.
///
/// # Safety
/// C2: `cq` is NULL or a CQ handle of a live connection or shared RQ.
unsafe fn cq_handle<'a>(cq: *const RpmaCq) -> CResult<(&'a RpmaCq, Kind)> {
    // SAFETY: [C2] the caller's handle.
    let q = unsafe { handle(cq) }?;
    // SAFETY: [C2] inside a live connection or shared RQ.
    Ok((q, unsafe { q.kind() }))
}

/// `rpma_cq_get_fd`.
///
/// # Safety
/// C1/C2: `cq` is NULL or live; `fd` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_cq_get_fd(cq_: *const RpmaCq, fd: *mut c_int) -> c_int {
    guard_deferring_log(|| {
        // SAFETY: [C2] the caller's handle.
        let (cq, kind) = unsafe { cq_handle(cq_) }?;
        // SAFETY: [C2] as above.
        let raw = with_backend!(kind, T => unsafe { with_cq::<T, _>(cq, |q| Ok(q.fd().as_raw_fd())) }?);
        nonnull(fd)?;
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(fd, raw) };
        Ok(())
    })
}

/// `rpma_cq_wait`: sleeps without the owner's lock (other threads post and poll while this
/// one waits). On verbs it takes the event as librpma does, outside the lock (libibverbs' calls
/// are thread-safe); on the mock it sleeps in `poll(2)` and takes the event under the lock
/// ([`crate::wait`]).
///
/// # Safety
/// C2: `cq` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rpma_cq_wait(cq_: *mut RpmaCq) -> c_int {
    guard_deferring_log(|| {
        // SAFETY: [C2] the caller's handle.
        let (cq, kind) = unsafe { cq_handle(cq_) }?;
        with_backend!(kind, T => {
            // SAFETY: [C2] as above.
            let unlocked = unsafe {
                with_cq::<T, _>(cq, |q| {
                    if q.is_shared() {
                        // `wait` refuses it at once (librpma: RPMA_E_SHARED_CHANNEL).
                        return q.wait().map(|()| None).map_err(code);
                    }
                    Ok(T::unlocked_wait(q))
                })
            }?;
            if let Some(w) = unlocked {
                // SAFETY: [C2] the handle, and with it its CQ, lives until this call returns.
                return unsafe { w.wait() }.map_err(code);
            }
            // (The channel is not shared: refused above.)
            // SAFETY: [C2] the caller's handle.
            blocking(|| unsafe { with_cq::<T, _>(cq, |q| turn(q.fd().as_raw_fd(), || q.wait())) })
        })
    })
}

/// `rpma_cq_get_wc`: up to `num_entries` completions into `wc` (`struct ibv_wc`, the layout of
/// [`Wc`]); `RPMA_E_NO_COMPLETION` if there is none.
///
/// # Safety
/// C1/C2: `cq` is NULL or live; `wc` is NULL or writable for `num_entries` entries;
/// `num_entries_got` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_cq_get_wc(
    cq_: *mut RpmaCq,
    num_entries: c_int,
    wc: *mut Wc,
    num_entries_got: *mut c_int,
) -> c_int {
    guard(|| {
        // librpma's checks, all before anything else: every one is `RPMA_E_INVAL`. One entry
        // (the common case) takes one compare; any other count is checked apart.
        if wc.is_null() || (num_entries != 1 && (num_entries < 1 || num_entries_got.is_null())) {
            return Err(E_INVAL);
        }
        let n = num_entries.unsigned_abs() as usize;
        // SAFETY: [C1, V7] wc is writable for num_entries entries of struct ibv_wc, whose layout
        // Wc has (rpma_core::WC_LAYOUT); every bit pattern is a valid Wc. The caller's array may
        // be uninitialised: no entry is read before the backend wrote it, and of an entry the
        // provider wrote only `wr_id`, which every completion has, is read (V7).
        let wc = unsafe { std::slice::from_raw_parts_mut(wc, n) };
        // SAFETY: [C2] the caller's handle.
        let (cq, kind) = unsafe { cq_handle(cq_) }?;
        let got = with_backend!(kind, T => {
            // SAFETY: [C2] as above.
            unsafe { with_cq::<T, _>(cq, |q| q.poll(wc).map_err(code)) }?
        });
        if got == 0 {
            return Err(E_NO_COMPLETION);
        }
        if !num_entries_got.is_null() {
            // SAFETY: [C1] non-NULL out-parameter. `got <= num_entries` (rpma-core refuses a
            // backend's larger answer), so the cast to `c_int` is exact.
            unsafe { put(num_entries_got, got as c_int) };
        }
        Ok(())
    })
}

/// The locks above make the handles `Sync` only if what they hold may move between threads.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Conn<rpma_mock::MockFabric>>();
    send::<ConnReq<rpma_mock::MockFabric>>();
    send::<rpma_core::Srq<rpma_mock::MockFabric>>();
    #[cfg(feature = "verbs")]
    {
        send::<Conn<rpma_verbs::Verbs>>();
        send::<ConnReq<rpma_verbs::Verbs>>();
        send::<rpma_core::Srq<rpma_verbs::Verbs>>();
    }
};

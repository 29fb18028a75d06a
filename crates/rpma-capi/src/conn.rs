//! Endpoints, connection requests, connections and completion queues.

use std::ffi::{c_char, c_int, c_void};
use std::os::fd::AsRawFd;

use rpma_core::{Conn, ConnReq, Cq, Ep, Srq, Wc};

use crate::backend::M;
use crate::cfg::{cfg_or_default, RpmaConnCfg};
use crate::mr::RpmaMrLocal;
use crate::peer::{RpmaPeer, RpmaPeerCfg};
use crate::{code, cstr, give, guard, handle, nonnull, put, take, CResult, E_INVAL, E_NO_COMPLETION, E_UNKNOWN};

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
    ep: Ep<M>,
}

/// `struct rpma_conn_req`.
pub struct RpmaConnReq {
    req: ConnReq<M>,
}

/// `struct rpma_cq`: the main or the receive CQ of a connection, or the receive CQ of a shared
/// RQ. It lives inside its owner ([`RpmaConn`], [`RpmaSrq`](crate::srq::RpmaSrq)) and points
/// back at the owner's object, which never moves (the owner is boxed).
pub struct RpmaCq {
    owner: CqOwner,
}

enum CqOwner {
    Conn { conn: *const Conn<M>, rcq: bool },
    Srq(*const Srq<M>),
}

impl RpmaCq {
    /// The receive CQ of the shared RQ at `srq` (which must not move while this handle lives).
    pub(crate) const fn of_srq(srq: *const Srq<M>) -> Self {
        Self { owner: CqOwner::Srq(srq) }
    }

    /// The CQ.
    ///
    /// # Safety
    /// C2: the CQ handle is used only while its owner lives (librpma's rule: a CQ is its
    /// connection's or shared RQ's and goes with `rpma_conn_delete` / `rpma_srq_delete`).
    unsafe fn cq(&self) -> CResult<Cq<'_, M>> {
        match self.owner {
            CqOwner::Conn { conn, rcq } => {
                // SAFETY: [C2] the connection outlives the CQ handles inside it.
                let conn = unsafe { &*conn };
                if rcq {
                    conn.rcq().ok_or(E_UNKNOWN)
                } else {
                    Ok(conn.cq())
                }
            }
            CqOwner::Srq(srq) => {
                // SAFETY: [C2] the shared RQ outlives the CQ handle inside it.
                let srq = unsafe { &*srq };
                srq.rcq().ok_or(E_UNKNOWN)
            }
        }
    }
}

/// `struct rpma_conn`: the connection and its two CQ handles.
pub struct RpmaConn {
    pub(crate) conn: Conn<M>,
    cq: RpmaCq,
    rcq: RpmaCq,
}

impl RpmaConn {
    /// Boxes `conn` and points its CQ handles at it.
    fn boxed(conn: Conn<M>) -> *mut Self {
        let null = std::ptr::null();
        let mut b = Box::new(Self {
            conn,
            cq: RpmaCq { owner: CqOwner::Conn { conn: null, rcq: false } },
            rcq: RpmaCq { owner: CqOwner::Conn { conn: null, rcq: true } },
        });
        let c: *const Conn<M> = std::ptr::addr_of!(b.conn);
        b.cq.owner = CqOwner::Conn { conn: c, rcq: false };
        b.rcq.owner = CqOwner::Conn { conn: c, rcq: true };
        Box::into_raw(b)
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
        let ep = Ep::listen(&p.peer, addr, port).map_err(code)?;
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
            Some(e) => e.ep.shutdown().map_err(code),
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
        unsafe { put(fd, e.ep.fd().as_raw_fd()) };
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
        // SAFETY: [C2] the caller's configuration or NULL.
        let cfg = unsafe { cfg_or_default(cfg) };
        let req = e.ep.next_conn_req(cfg.as_ref()).map_err(code)?;
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
        // SAFETY: [C2] the caller's configuration or NULL.
        let cfg = unsafe { cfg_or_default(cfg) };
        let req = ConnReq::new(&p.peer, addr, port, cfg.as_ref()).map_err(code)?;
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
        let bytes = match bytes {
            Ok(b) if !conn_ptr.is_null() => b,
            _ => {
                let _ = req.req.delete();
                return Err(E_INVAL);
            }
        };
        let conn = req.req.connect(bytes).map_err(code)?;
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(conn_ptr, RpmaConn::boxed(conn)) };
        Ok(())
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
            Some(r) => r.req.delete().map_err(code),
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
    guard(|| {
        // SAFETY: [C2] the caller's handles.
        let (r, d) = unsafe { (handle(req)?, handle(dst)?) };
        let end = offset.checked_add(len).ok_or(E_INVAL)?;
        r.req.recv(d.mr.slice(offset..end)).context(op_context as u64).post().map_err(code)
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
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let r = unsafe { handle(req) }?;
        nonnull(pdata)?;
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(pdata, rpma_conn_private_data::of(r.req.private_data())) };
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
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { conn(conn_) }?;
        nonnull(event)?;
        let ev = c.conn.next_event().map_err(code)?;
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
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { conn(conn_) }?;
        nonnull(fd)?;
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(fd, c.conn.event_fd().as_raw_fd()) };
        Ok(())
    })
}

/// `rpma_conn_get_compl_fd`: `RPMA_E_NOT_SHARED_CHNL` unless the channel is shared.
///
/// # Safety
/// C1/C2: `conn` is NULL or live; `fd` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_get_compl_fd(conn_: *const RpmaConn, fd: *mut c_int) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { conn(conn_) }?;
        nonnull(fd)?;
        let raw = c.conn.compl_fd().map_err(code)?.as_raw_fd();
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
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { conn(conn_) }?;
        nonnull(rcq_ptr)?;
        let p = if c.conn.rcq().is_some() { std::ptr::addr_of!(c.rcq).cast_mut() } else { std::ptr::null_mut() };
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
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { conn(conn_) }?;
        nonnull(cq)?;
        let (_, rcq) = c.conn.wait().map_err(code)?;
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
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { conn(conn_) }?;
        c.conn.disconnect().map_err(code)
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
                conn.delete().map_err(code)
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
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { conn(conn_) }?;
        nonnull(pdata)?;
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(pdata, rpma_conn_private_data::of(c.conn.private_data())) };
        Ok(())
    })
}

/// `rpma_conn_apply_remote_peer_cfg`.
///
/// # Safety
/// C2: `conn` and `pcfg` are NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_apply_remote_peer_cfg(conn_: *mut RpmaConn, pcfg: *const RpmaPeerCfg) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handles.
        let (c, p) = unsafe { (conn(conn_)?, handle(pcfg)?) };
        c.conn.apply_remote_peer_cfg(&p.cfg());
        Ok(())
    })
}

/// `rpma_conn_get_qp_num`.
///
/// # Safety
/// C1/C2: `conn` is NULL or live; `qp_num` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_get_qp_num(conn_: *const RpmaConn, qp_num: *mut u32) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { conn(conn_) }?;
        nonnull(qp_num)?;
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(qp_num, c.conn.qp_num()) };
        Ok(())
    })
}

/// The CQ behind `cq`.
///
/// # Safety
/// C2: `cq` is NULL or a CQ handle of a live connection.
unsafe fn cq<'a>(cq: *const RpmaCq) -> CResult<Cq<'a, M>> {
    // SAFETY: [C2] the caller's handle, inside a live connection.
    unsafe { handle(cq)?.cq() }
}

/// `rpma_cq_get_fd`.
///
/// # Safety
/// C1/C2: `cq` is NULL or live; `fd` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_cq_get_fd(cq_: *const RpmaCq, fd: *mut c_int) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let q = unsafe { cq(cq_) }?;
        nonnull(fd)?;
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(fd, q.fd().as_raw_fd()) };
        Ok(())
    })
}

/// `rpma_cq_wait`.
///
/// # Safety
/// C2: `cq` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rpma_cq_wait(cq_: *mut RpmaCq) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let q = unsafe { cq(cq_) }?;
        q.wait().map_err(code)
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
        let n = usize::try_from(num_entries).ok().filter(|n| *n >= 1).ok_or(E_INVAL)?;
        // SAFETY: [C2] the caller's handle.
        let q = unsafe { cq(cq_) }?;
        nonnull(wc)?;
        if n > 1 && num_entries_got.is_null() {
            return Err(E_INVAL);
        }
        // SAFETY: [C1] wc is writable for num_entries entries of struct ibv_wc, whose layout
        // Wc has (rpma_core::WC_LAYOUT); every bit pattern is a valid Wc.
        let entries = unsafe { std::slice::from_raw_parts_mut(wc, n) };
        let got = q.poll(entries).map_err(code)?;
        if got == 0 {
            return Err(E_NO_COMPLETION);
        }
        if !num_entries_got.is_null() {
            // SAFETY: [C1] non-NULL out-parameter; got <= num_entries fits in c_int.
            unsafe { put(num_entries_got, c_int::try_from(got).map_err(|_| E_UNKNOWN)?) };
        }
        Ok(())
    })
}

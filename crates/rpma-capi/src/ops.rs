//! The data path: `rpma_read`, `rpma_write`, `rpma_write_with_imm`, `rpma_atomic_write`,
//! `rpma_flush`, `rpma_send`, `rpma_send_with_imm`, `rpma_recv`.
//!
//! librpma's NULL rules are checked here (the zero-byte forms: both regions NULL and every
//! offset and length 0) while each function builds its operation as a value (`rpma_core::op`);
//! one post function ([`post`], [`post_recv`] for receives) hands it to rpma-core, which checks
//! flags, ranges against both regions and the flush gating, before posting.

use std::ffi::{c_char, c_int, c_void};

use rpma_core::op::{self, Op, Operation, Recv};
use rpma_core::{CompletionFlags, Conn, FlushType, LocalSlice, MrRemote, Transport};

use crate::backend::{on_backend, Backend};
use crate::conn::RpmaConn;
use crate::ffi::{code, guard, handle, nonnull, CResult, E_INVAL, E_NOSUPP};
use crate::log::librpma_log;
use crate::mr::{RpmaMrLocal, RpmaMrRemote};

/// `flags`: 0 is invalid; any other value is kept (only `RPMA_F_COMPLETION_ALWAYS`'s second
/// bit decides whether the operation is signaled).
fn flags(flags: c_int) -> CResult<CompletionFlags> {
    if flags == 0 {
        return Err(E_INVAL);
    }
    Ok(CompletionFlags::from_bits_retain(u32::from_ne_bytes(flags.to_ne_bytes())))
}

/// `[offset, offset + len)` of a local region.
fn local<T: Backend>(mr: &RpmaMrLocal, offset: usize, len: usize) -> CResult<LocalSlice<'_, T>> {
    let end = offset.checked_add(len).ok_or(E_INVAL)?;
    Ok(T::get(&mr.mr)?.slice(offset..end))
}

/// Posts `op` on `c` with the call's flags and context: the one post of every function here
/// but the receives ([`post_recv`]). Each function builds its operation as a value
/// (`rpma_core::op`, its immediate data set by [`with_imm`]) and posts it here; rpma-core
/// validates it against the connection.
///
/// A function whose operation has two shapes (the zero-byte form, or one piece) builds and
/// posts it in each arm of its match rather than once after it: each arm then inlines a post
/// whose local side is known, and builds its work request without choosing between the two at
/// run time (one post after the match: 3 instructions more a post on the mock,
/// `scripts/bench-capi.sh`; ~20 on verbs, docs/capi.md).
#[inline(always)]
fn post<'a, T: Transport, K>(c: &Conn<T>, op: Op<K>, f: CompletionFlags, ctx: *const c_void) -> CResult
where
    K: Operation<'a, T, Flags = CompletionFlags>,
{
    c.post(op.flags(f).context(ctx as u64)).map_err(code)
}

/// Posts the receive `op` on `c` with the call's context (see [`post`]).
#[inline(always)]
fn post_recv<T: Transport>(c: &Conn<T>, op: Op<Recv<'_, T>>, ctx: *const c_void) -> CResult {
    c.post(op.context(ctx as u64)).map_err(code)
}

/// A write or send `op` with the immediate data `imm`, if any (`rpma_write_with_imm`,
/// `rpma_send_with_imm`).
#[inline(always)]
fn with_imm<K: Imm>(op: Op<K>, imm: Option<u32>) -> Op<K> {
    match imm {
        None => op,
        Some(imm) => K::imm(op, imm),
    }
}

/// The operations that carry immediate data (`Op::imm` on writes and sends).
trait Imm: Sized {
    fn imm(op: Op<Self>, imm: u32) -> Op<Self>;
}

impl<T: Transport> Imm for op::Write<'_, T> {
    #[inline(always)]
    fn imm(op: Op<Self>, imm: u32) -> Op<Self> {
        op.imm(imm)
    }
}

impl<T: Transport> Imm for op::Message<'_, T> {
    #[inline(always)]
    fn imm(op: Op<Self>, imm: u32) -> Op<Self> {
        op.imm(imm)
    }
}

/// Which form an operation with a local and a remote region takes: `None` for the zero-byte
/// form (both NULL, every offset and the length 0), else both handles.
///
/// # Safety
/// C2: `l` and `r` are NULL or live.
unsafe fn pair<'a>(
    l: *const RpmaMrLocal,
    r: *const RpmaMrRemote,
    zero: bool,
) -> CResult<Option<(&'a RpmaMrLocal, &'a RpmaMrRemote)>> {
    match (l.is_null(), r.is_null()) {
        (true, true) if zero => Ok(None),
        // SAFETY: [C2] the caller's handles, both non-NULL.
        (false, false) => Ok(Some(unsafe { (handle(l)?, handle(r)?) })),
        _ => Err(E_INVAL),
    }
}

/// `rpma_read`: `len` bytes at `src_offset` of the remote region into `dst` at `dst_offset`.
///
/// # Safety
/// C2: `conn`, `dst` and `src` are NULL or live.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn rpma_read(
    conn: *mut RpmaConn,
    dst: *mut RpmaMrLocal,
    dst_offset: usize,
    src: *const RpmaMrRemote,
    src_offset: usize,
    len: usize,
    flags_: c_int,
    op_context: *const c_void,
) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let h = unsafe { handle(conn) }?;
        on_backend!(&h.conn, |T, lock c| {
            let f = flags(flags_)?;
            // SAFETY: [C2] the caller's handles.
            match unsafe { pair(dst, src, dst_offset == 0 && src_offset == 0 && len == 0) }? {
                None => post(&c, op::read_empty(), f, op_context),
                Some((d, s)) => post(&c, op::read(local::<T>(d, dst_offset, len)?, s.mr.at(src_offset)), f, op_context),
            }
        })
    })
}

/// The body of `rpma_write` and `rpma_write_with_imm`.
///
/// # Safety
/// C2: `conn`, `dst` and `src` are NULL or live.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn write(
    conn: *mut RpmaConn,
    dst: *const RpmaMrRemote,
    dst_offset: usize,
    src: *const RpmaMrLocal,
    src_offset: usize,
    len: usize,
    flags_: c_int,
    imm: Option<u32>,
    op_context: *const c_void,
) -> CResult {
    // SAFETY: [C2] the caller's handle.
    let h = unsafe { handle(conn) }?;
    on_backend!(&h.conn, |T, lock c| {
        let f = flags(flags_)?;
        // SAFETY: [C2] the caller's handles.
        match unsafe { pair(src, dst, dst_offset == 0 && src_offset == 0 && len == 0) }? {
            None => post(&c, with_imm(op::write_empty(), imm), f, op_context),
            Some((s, d)) => {
                let op = op::write(d.mr.at(dst_offset), local::<T>(s, src_offset, len)?);
                post(&c, with_imm(op, imm), f, op_context)
            }
        }
    })
}

/// `rpma_write`: `len` bytes of `src` at `src_offset` to the remote region at `dst_offset`.
///
/// # Safety
/// C2: `conn`, `dst` and `src` are NULL or live.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn rpma_write(
    conn: *mut RpmaConn,
    dst: *mut RpmaMrRemote,
    dst_offset: usize,
    src: *const RpmaMrLocal,
    src_offset: usize,
    len: usize,
    flags_: c_int,
    op_context: *const c_void,
) -> c_int {
    // SAFETY: [C2] forwarded handles.
    guard(|| unsafe { write(conn, dst, dst_offset, src, src_offset, len, flags_, None, op_context) })
}

/// `rpma_write_with_imm`: as `rpma_write`, with immediate data (host order) that consumes a
/// receive at the peer.
///
/// # Safety
/// C2: `conn`, `dst` and `src` are NULL or live.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn rpma_write_with_imm(
    conn: *mut RpmaConn,
    dst: *mut RpmaMrRemote,
    dst_offset: usize,
    src: *const RpmaMrLocal,
    src_offset: usize,
    len: usize,
    flags_: c_int,
    imm: u32,
    op_context: *const c_void,
) -> c_int {
    // SAFETY: [C2] forwarded handles.
    guard(|| unsafe { write(conn, dst, dst_offset, src, src_offset, len, flags_, Some(imm), op_context) })
}

/// `rpma_atomic_write`: the 8 bytes at `src` to the remote region at `dst_offset` (a multiple
/// of 8).
///
/// # Safety
/// C1/C2: `conn` and `dst` are NULL or live; `src` is NULL or readable for 8 bytes.
#[no_mangle]
pub unsafe extern "C" fn rpma_atomic_write(
    conn: *mut RpmaConn,
    dst: *mut RpmaMrRemote,
    dst_offset: usize,
    src: *const c_char,
    flags_: c_int,
    op_context: *const c_void,
) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handles.
        let (h, d) = unsafe { (handle(conn)?, handle(dst)?) };
        on_backend!(&h.conn, |T, lock c| {
            nonnull(src)?;
            let f = flags(flags_)?;
            let mut value = [0u8; 8];
            // SAFETY: [C1] src is readable for 8 bytes (`const char src[8]`).
            unsafe { std::ptr::copy_nonoverlapping(src.cast::<u8>(), value.as_mut_ptr(), 8) };
            post(&c, op::atomic_write(d.mr.at(dst_offset), value), f, op_context)
        })
    })
}

/// `rpma_flush`: makes `[dst_offset, dst_offset + len)` of the remote region visible (`type`
/// 1) or persistent (0).
///
/// # Safety
/// C2: `conn` and `dst` are NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rpma_flush(
    conn: *mut RpmaConn,
    dst: *mut RpmaMrRemote,
    dst_offset: usize,
    len: usize,
    type_: c_int,
    flags_: c_int,
    op_context: *const c_void,
) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handles.
        let (h, d) = unsafe { (handle(conn)?, handle(dst)?) };
        on_backend!(&h.conn, |T, lock c| {
            let f = flags(flags_)?;
            let t = match type_ {
                0 => FlushType::Persistent,
                1 => FlushType::Visibility,
                _ => return Err(E_INVAL),
            };
            let end = dst_offset.checked_add(len).ok_or(E_INVAL)?;
            post(&c, op::flush(d.mr.slice(dst_offset..end), t), f, op_context).inspect_err(|&e| {
                if e == E_NOSUPP {
                    log_refused_flush(&c, &d.mr, t);
                }
            })
        })
    })
}

/// librpma's ERROR line for a flush it refuses (`RPMA_E_NOSUPP`), in its order: a persistent
/// flush on a connection whose remote peer was not declared to write directly to PMem, then a
/// remote region registered without the flush's usage.
#[cold]
#[inline(never)]
fn log_refused_flush<T: Transport>(conn: &Conn<T>, mr: &MrRemote, t: FlushType) {
    const FN: &str = "rpma_flush";
    if t == FlushType::Persistent && !conn.direct_write_to_pmem() {
        librpma_log!(
            Error,
            FN,
            "Connection does not support flush to persistency. Check if the remote node supports direct write \
             to persistent memory."
        );
    } else if !mr.usage().contains(t.required_usage()) {
        match t {
            FlushType::Persistent => {
                librpma_log!(Error, FN, "The remote memory region does not support flushing to persistency");
            }
            FlushType::Visibility => {
                librpma_log!(Error, FN, "The remote memory region does not support flushing to global visibility");
            }
        }
    }
}

/// The body of `rpma_send` and `rpma_send_with_imm`.
///
/// # Safety
/// C2: `conn` and `src` are NULL or live.
#[inline(always)]
unsafe fn send(
    conn: *mut RpmaConn,
    src: *const RpmaMrLocal,
    offset: usize,
    len: usize,
    flags_: c_int,
    imm: Option<u32>,
    op_context: *const c_void,
) -> CResult {
    // SAFETY: [C2] the caller's handle.
    let h = unsafe { handle(conn) }?;
    on_backend!(&h.conn, |T, lock c| {
        let f = flags(flags_)?;
        if src.is_null() {
            if offset != 0 || len != 0 {
                return Err(E_INVAL);
            }
            return post(&c, with_imm(op::send_empty(), imm), f, op_context);
        }
        // SAFETY: [C2] the caller's handle.
        let op = op::send(local::<T>(unsafe { handle(src) }?, offset, len)?);
        post(&c, with_imm(op, imm), f, op_context)
    })
}

/// `rpma_send`.
///
/// # Safety
/// C2: `conn` and `src` are NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rpma_send(
    conn: *mut RpmaConn,
    src: *const RpmaMrLocal,
    offset: usize,
    len: usize,
    flags_: c_int,
    op_context: *const c_void,
) -> c_int {
    // SAFETY: [C2] forwarded handles.
    guard(|| unsafe { send(conn, src, offset, len, flags_, None, op_context) })
}

/// `rpma_send_with_imm`.
///
/// # Safety
/// C2: `conn` and `src` are NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rpma_send_with_imm(
    conn: *mut RpmaConn,
    src: *const RpmaMrLocal,
    offset: usize,
    len: usize,
    flags_: c_int,
    imm: u32,
    op_context: *const c_void,
) -> c_int {
    // SAFETY: [C2] forwarded handles.
    guard(|| unsafe { send(conn, src, offset, len, flags_, Some(imm), op_context) })
}

/// `rpma_recv`.
///
/// # Safety
/// C2: `conn` and `dst` are NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rpma_recv(
    conn: *mut RpmaConn,
    dst: *mut RpmaMrLocal,
    offset: usize,
    len: usize,
    op_context: *const c_void,
) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let h = unsafe { handle(conn) }?;
        on_backend!(&h.conn, |T, lock c| {
            if dst.is_null() {
                if offset != 0 || len != 0 {
                    return Err(E_INVAL);
                }
                return post_recv(&c, op::recv_empty(), op_context);
            }
            // SAFETY: [C2] the caller's handle.
            post_recv(&c, op::recv(local::<T>(unsafe { handle(dst) }?, offset, len)?), op_context)
        })
    })
}

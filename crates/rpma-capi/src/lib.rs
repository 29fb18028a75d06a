//! # rpma-capi: librpma's C ABI on rpma-rs
//!
//! Builds `librpma.so` (SONAME `librpma.so.0`, every `rpma_*` symbol under the version node
//! `LIBRPMA_1.0`, as Debian's librpma0 exports them), with the signatures,
//! return codes and out-parameter behaviour of librpma 1.3. The header is
//! `include/librpma.h`; `docs/capi.md` lists how this library differs from C librpma.
//!
//! Every exported body runs inside [`std::panic::catch_unwind`]: a panic becomes
//! `RPMA_E_UNKNOWN`, never an unwind across the C boundary. Opaque handles are `Box` pointers to
//! Rust objects; the delete functions take `T **`, free the object and store NULL, so a second
//! delete through the same pointer is a no-op returning 0, as in librpma.
//!
//! The backend is chosen at run time by `RPMA_BACKEND` (read once, at first use): `verbs` (the
//! default) is rpma-verbs, over libibverbs and librdmacm (cargo feature `verbs`, on by
//! default); `mock` is the in-process mock fabric of rpma-mock. With an unknown name, or
//! `verbs` in a library built without it, every function that needs a backend fails with
//! `RPMA_E_PROVIDER` and one ERROR log line naming the problem. See the `backend` module for
//! how handles hold their backend's objects.
//!
//! Unsafe code follows docs/memory.md; the C-ABI rules are C1 (pointers from C), C2 (handles
//! from C) and C3 (function pointers from C).

#[macro_use]
mod setting;
mod backend;
mod cfg;
mod conn;
mod log;
mod mr;
mod ops;
mod peer;
mod srq;
mod wait;

use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use rpma_core::{Error, ErrorKind};

/// `RPMA_E_UNKNOWN`.
pub(crate) const E_UNKNOWN: c_int = ErrorKind::Unknown.code();
/// `RPMA_E_INVAL`.
pub(crate) const E_INVAL: c_int = ErrorKind::Inval.code();
/// `RPMA_E_PROVIDER`.
pub(crate) const E_PROVIDER: c_int = ErrorKind::Provider.code();
/// `RPMA_E_NO_COMPLETION`.
pub(crate) const E_NO_COMPLETION: c_int = ErrorKind::NoCompletion.code();

/// The result of an exported body: `Err` holds the `RPMA_E_*` code to return.
pub(crate) type CResult<T = ()> = Result<T, c_int>;

/// Maps a Rust error to its librpma code.
#[allow(clippy::needless_pass_by_value)] // used as `map_err(code)`
pub(crate) fn code(e: Error) -> c_int {
    if let (Some(call), Some(errno)) = (e.failed_call(), e.errno()) {
        // librpma logs every failed provider call it makes, with the call and its errno, at
        // ERROR level through the log function (issue 35).
        log_provider_failure(&e, call, errno);
    }
    e.code()
}

/// The ERROR line librpma writes when a provider call fails: `<call>() failed: <strerror>`,
/// reported from the librpma function that made the call.
#[cold]
#[inline(never)]
fn log_provider_failure(e: &Error, call: &str, errno: c_int) {
    if rpma_core::log::enabled(rpma_core::log::LogLevel::Error) {
        let why = std::io::Error::from_raw_os_error(errno);
        // The OS's text without Rust's " (os error N)".
        let why = why.to_string();
        let why = why.split(" (os error").next().unwrap_or_default();
        rpma_core::log::emit(
            rpma_core::log::LogLevel::Error,
            file!(),
            line!(),
            e.op(),
            format_args!("{call}() failed: {why}"),
        );
    }
}

/// Runs an exported body: 0 on success, its code on failure, `RPMA_E_UNKNOWN` on a panic.
pub(crate) fn guard(body: impl FnOnce() -> CResult) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => 0,
        Ok(Err(code)) => code,
        Err(_) => E_UNKNOWN,
    }
}

/// [`guard`] for a function that may log while it holds a handle's lock (a connection's
/// `rpma_conn_disconnect` and `rpma_conn_next_event` log at NOTICE level): the messages for the
/// C log function are held back until the body returned, every lock released, so a log
/// function may call back into the same handle (issue 32; librpma has no such lock). See
/// [`log::Defer`].
pub(crate) fn guard_deferring_log(body: impl FnOnce() -> CResult) -> c_int {
    let _held = log::Defer::new();
    guard(body)
}

/// `Err(RPMA_E_INVAL)` if `p` is NULL.
pub(crate) fn nonnull<T>(p: *const T) -> CResult {
    if p.is_null() {
        Err(E_INVAL)
    } else {
        Ok(())
    }
}

/// The handle behind `p`, or `RPMA_E_INVAL` if it is NULL.
///
/// # Safety
/// C2: `p` is NULL or a handle this library returned and the caller has not deleted, used as
/// librpma documents (no concurrent delete).
pub(crate) unsafe fn handle<'a, T>(p: *const T) -> CResult<&'a T> {
    // SAFETY: [C2] non-NULL handles point to live objects this library boxed.
    unsafe { p.as_ref() }.ok_or(E_INVAL)
}

/// Writes `v` to the out-parameter `p` (already checked non-NULL).
///
/// # Safety
/// C1: `p` is valid for a write of a `T` (librpma's contract for its out-parameters).
pub(crate) unsafe fn put<T>(p: *mut T, v: T) {
    // SAFETY: [C1] the caller passed a writable, aligned out-parameter.
    unsafe { p.write(v) };
}

/// A C string argument as UTF-8; NULL or not UTF-8 → `RPMA_E_INVAL`.
///
/// # Safety
/// C1: `p` is NULL or a NUL-terminated string that lives for the call.
pub(crate) unsafe fn cstr<'a>(p: *const c_char) -> CResult<&'a str> {
    nonnull(p)?;
    // SAFETY: [C1] a non-NULL string argument is NUL-terminated and valid for the call.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|_| E_INVAL)
}

/// Takes the object out of a `T **` handle slot and stores NULL there: `Ok(None)` if the slot
/// holds NULL, `RPMA_E_INVAL` if the slot pointer itself is NULL.
///
/// # Safety
/// C1 for `pp` (a readable, writable `T *` slot); C2 for `*pp` (a handle of this library, not
/// deleted yet and used by no other thread).
pub(crate) unsafe fn take<T>(pp: *mut *mut T) -> CResult<Option<Box<T>>> {
    nonnull(pp)?;
    // SAFETY: [C1] pp is a valid slot.
    let p = unsafe { pp.read() };
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: [C1] pp is a valid slot; NULL it before the object goes away.
    unsafe { pp.write(std::ptr::null_mut()) };
    // SAFETY: [C2] p came from Box::into_raw in this library and is deleted only here.
    Ok(Some(unsafe { Box::from_raw(p) }))
}

/// Boxes `v` and stores the handle in the out-parameter `pp` (already checked non-NULL).
///
/// # Safety
/// C1: `pp` is valid for a write.
pub(crate) unsafe fn give<T>(pp: *mut *mut T, v: T) {
    // SAFETY: [C1] as for `put`.
    unsafe { put(pp, Box::into_raw(Box::new(v))) };
}

/// `rpma_err_2str`: the description of an `RPMA_E_*` code ("Unknown error" for any other).
#[no_mangle]
pub extern "C" fn rpma_err_2str(ret: c_int) -> *const c_char {
    let s: &'static CStr = match ret {
        0 => c"Success",
        -100_001 => c"Not supported",
        -100_002 => c"Provider error occurred",
        -100_003 => c"Out of memory",
        -100_004 => c"Invalid argument",
        -100_005 => c"No next completion available",
        -100_006 => c"No next event available",
        -100_007 => c"Temporary error, try again",
        -100_008 => c"Completion channel is shared",
        -100_009 => c"Completion channel is not shared",
        _ => c"Unknown error",
    };
    s.as_ptr()
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

/// Gives every exported function the default version `LIBRPMA_1.0` (the version script names
/// the node and hides everything else; rustc's own script would leave the names unversioned).
macro_rules! symver {
    ($($name:ident),+ $(,)?) => {
        std::arch::global_asm!(concat!($(".symver ", stringify!($name), ", ", stringify!($name), "@@LIBRPMA_1.0\n"),+));
    };
}

symver!(
    rpma_err_2str,
    rpma_utils_conn_event_2str,
    rpma_log_set_function,
    rpma_log_set_threshold,
    rpma_log_get_threshold,
    rpma_utils_get_ibv_context,
    rpma_utils_ibv_context_is_odp_capable,
    rpma_peer_new,
    rpma_peer_delete,
    rpma_peer_cfg_new,
    rpma_peer_cfg_delete,
    rpma_peer_cfg_set_direct_write_to_pmem,
    rpma_peer_cfg_get_direct_write_to_pmem,
    rpma_peer_cfg_get_descriptor,
    rpma_peer_cfg_get_descriptor_size,
    rpma_peer_cfg_from_descriptor,
    rpma_mr_reg,
    rpma_mr_dereg,
    rpma_mr_get_descriptor,
    rpma_mr_get_descriptor_size,
    rpma_mr_get_ptr,
    rpma_mr_get_size,
    rpma_mr_remote_from_descriptor,
    rpma_mr_remote_get_size,
    rpma_mr_remote_get_flush_type,
    rpma_mr_remote_delete,
    rpma_conn_cfg_new,
    rpma_conn_cfg_delete,
    rpma_conn_cfg_set_timeout,
    rpma_conn_cfg_get_timeout,
    rpma_conn_cfg_set_cq_size,
    rpma_conn_cfg_get_cq_size,
    rpma_conn_cfg_set_rcq_size,
    rpma_conn_cfg_get_rcq_size,
    rpma_conn_cfg_set_sq_size,
    rpma_conn_cfg_get_sq_size,
    rpma_conn_cfg_set_rq_size,
    rpma_conn_cfg_get_rq_size,
    rpma_conn_cfg_set_compl_channel,
    rpma_conn_cfg_get_compl_channel,
    rpma_ep_listen,
    rpma_ep_shutdown,
    rpma_ep_get_fd,
    rpma_ep_next_conn_req,
    rpma_conn_req_new,
    rpma_conn_req_connect,
    rpma_conn_req_delete,
    rpma_conn_req_recv,
    rpma_conn_req_get_private_data,
    rpma_conn_next_event,
    rpma_conn_get_event_fd,
    rpma_conn_get_compl_fd,
    rpma_conn_get_cq,
    rpma_conn_get_rcq,
    rpma_conn_disconnect,
    rpma_conn_delete,
    rpma_conn_get_private_data,
    rpma_conn_apply_remote_peer_cfg,
    rpma_conn_wait,
    rpma_conn_get_qp_num,
    rpma_read,
    rpma_write,
    rpma_write_with_imm,
    rpma_atomic_write,
    rpma_flush,
    rpma_send,
    rpma_send_with_imm,
    rpma_recv,
    rpma_cq_get_fd,
    rpma_cq_wait,
    rpma_cq_get_wc,
    rpma_mr_advise,
    rpma_conn_cfg_set_srq,
    rpma_conn_cfg_get_srq,
    rpma_srq_cfg_new,
    rpma_srq_cfg_delete,
    rpma_srq_cfg_set_rq_size,
    rpma_srq_cfg_get_rq_size,
    rpma_srq_cfg_set_rcq_size,
    rpma_srq_cfg_get_rcq_size,
    rpma_srq_new,
    rpma_srq_delete,
    rpma_srq_recv,
    rpma_srq_get_rcq,
);

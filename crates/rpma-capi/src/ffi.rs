//! The C boundary: the `RPMA_E_*` codes, the guard every exported body runs in, and the
//! conversions of C's pointers (handles, out-parameters, strings, `T **` slots).

use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use rpma_core::librpma;
use rpma_core::Error;

/// `RPMA_E_UNKNOWN`.
pub(crate) const E_UNKNOWN: c_int = librpma::RPMA_E_UNKNOWN;
/// `RPMA_E_NOSUPP`.
pub(crate) const E_NOSUPP: c_int = librpma::RPMA_E_NOSUPP;
/// `RPMA_E_INVAL`.
pub(crate) const E_INVAL: c_int = librpma::RPMA_E_INVAL;
/// `RPMA_E_PROVIDER`.
pub(crate) const E_PROVIDER: c_int = librpma::RPMA_E_PROVIDER;
/// `RPMA_E_NO_COMPLETION`.
pub(crate) const E_NO_COMPLETION: c_int = librpma::RPMA_E_NO_COMPLETION;

/// The result of an exported body: `Err` holds the `RPMA_E_*` code to return.
pub(crate) type CResult<T = ()> = Result<T, c_int>;

/// Maps a Rust error to its librpma code.
#[allow(clippy::needless_pass_by_value)] // used as `map_err(code)`
pub(crate) fn code(e: Error) -> c_int {
    if let (Some(call), Some(errno)) = (e.failed_call(), e.errno()) {
        // librpma logs every failed provider call it makes, with the call and its errno, at
        // ERROR level through the log function.
        log_provider_failure(&e, call, errno);
    }
    librpma::code(e.kind())
}

/// The librpma function of `name` (the Rust item of an error or a log record, e.g.
/// `Conn::read`), or `name` itself when it has none (a provider call, a module path, a C name).
pub(crate) fn c_name(name: &'static str) -> &'static str {
    librpma::c_function(name).unwrap_or(name)
}

/// The ERROR line librpma writes when a provider call fails: `<call>() failed: <strerror>`,
/// reported from the librpma function that made the call (the C name of the error's Rust item).
#[cold]
#[inline(never)]
fn log_provider_failure(e: &Error, call: &'static str, errno: c_int) {
    if rpma_core::logging::enabled(rpma_core::logging::LogLevel::Error) {
        let why = std::io::Error::from_raw_os_error(errno);
        // The OS's text without Rust's " (os error N)".
        let why = why.to_string();
        let why = why.split(" (os error").next().unwrap_or_default();
        rpma_core::logging::emit(
            rpma_core::logging::LogLevel::Error,
            file!(),
            line!(),
            c_name(e.op()),
            format_args!("{}() failed: {why}", c_name(call)),
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

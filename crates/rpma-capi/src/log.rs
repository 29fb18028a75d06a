//! Logging: `rpma_log_set_function`, `rpma_log_set_threshold`, `rpma_log_get_threshold`.
//!
//! The thresholds are rpma-core's (`rpma_core::log`). The default log function of this library
//! writes to stderr, in librpma's line format, the messages at or below the auxiliary
//! threshold and, since there is no syslog destination here, every ERROR and FATAL message
//! that passes the primary threshold (docs/capi.md).

use std::ffi::{c_char, c_int, CString};
use std::io::Write as _;
use std::panic::catch_unwind;
use std::sync::Arc;

use rpma_core::log::{self as rlog, LogLevel, LogRecord, Threshold};

use crate::{code, guard, nonnull, put, CResult};

/// librpma's `rpma_log_function`: `(level, file_name, line_no, function_name, format, ...)`.
pub type RpmaLogFunction = unsafe extern "C" fn(
    level: c_int,
    file_name: *const c_char,
    line_no: c_int,
    function_name: *const c_char,
    message_format: *const c_char,
    ...
);

/// Installs the default C log function when the library is loaded, as C librpma does in its
/// constructor, so that no exported function tests for it on every call (the data path
/// included). The loader runs the functions of `.init_array` before any of ours can be called.
#[used]
#[link_section = ".init_array"]
static INSTALL_DEFAULT: extern "C" fn() = install_default;

extern "C" fn install_default() {
    // Nothing may unwind out of a constructor. Installing a function does not panic; if it did,
    // messages would go to rpma-core's default (the `log` crate, which a C program does not
    // read) until the program installs its own function.
    let _ = catch_unwind(|| rlog::set_function(Some(Arc::new(default_function))));
}

fn default_function(rec: &LogRecord<'_>) {
    let aux = rlog::threshold(Threshold::Aux);
    let to_stderr = (aux != LogLevel::Disabled && rec.level <= aux) || rec.level <= LogLevel::Error;
    if to_stderr && rec.level != LogLevel::Disabled {
        let line = format!("{}{}: {}: {}: {}\n", rec.level.tag(), rec.file, rec.line, rec.function, rec.message);
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
}

/// A C string of `s` with any interior NUL cut off.
fn c_string(s: &str) -> CString {
    let end = s.find('\0').unwrap_or(s.len());
    CString::new(&s[..end]).unwrap_or_default()
}

/// `rpma_log_set_function`: installs `log_function`, or with NULL
/// (`RPMA_LOG_USE_DEFAULT_FUNCTION`) the default one.
#[no_mangle]
pub extern "C" fn rpma_log_set_function(log_function: Option<RpmaLogFunction>) -> c_int {
    guard(|| {
        let Some(f) = log_function else {
            rlog::set_function(Some(Arc::new(default_function)));
            return Ok(());
        };
        rlog::set_function(Some(Arc::new(move |rec: &LogRecord<'_>| {
            let file = c_string(rec.file);
            let func = c_string(rec.function);
            let msg = c_string(&rec.message.to_string());
            let line = c_int::try_from(rec.line).unwrap_or(c_int::MAX);
            // SAFETY: [C3] `f` is the caller's rpma_log_function, which takes a printf format
            // and its arguments: "%s" with one NUL-terminated string; every pointer lives for
            // the call.
            unsafe { f(rec.level as c_int, file.as_ptr(), line, func.as_ptr(), c"%s".as_ptr(), msg.as_ptr()) };
        })));
        Ok(())
    })
}

fn threshold(t: c_int) -> CResult<Threshold> {
    Threshold::try_from(t).map_err(code)
}

/// `rpma_log_set_threshold`.
#[no_mangle]
pub extern "C" fn rpma_log_set_threshold(threshold_: c_int, level: c_int) -> c_int {
    guard(|| {
        let t = threshold(threshold_)?;
        let l = LogLevel::try_from(level).map_err(code)?;
        rlog::set_threshold(t, l).map_err(code)
    })
}

/// `rpma_log_get_threshold`.
#[no_mangle]
pub extern "C" fn rpma_log_get_threshold(threshold_: c_int, level: *mut c_int) -> c_int {
    guard(|| {
        let t = threshold(threshold_)?;
        nonnull(level)?;
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(level, rlog::threshold(t) as c_int) };
        Ok(())
    })
}

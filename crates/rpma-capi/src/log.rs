//! Logging: `rpma_log_set_function`, `rpma_log_set_threshold`, `rpma_log_get_threshold`.
//!
//! The thresholds are rpma-core's (`rpma_core::logging`). The default log function of this library
//! writes to stderr, in librpma's line format, the messages at or below the auxiliary
//! threshold and, since there is no syslog destination here, every ERROR and FATAL message
//! that passes the primary threshold (docs/capi.md).

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, CString};
use std::io::Write as _;
use std::panic::catch_unwind;
use std::sync::Arc;

use rpma_core::logging::{self as rlog, LogLevel, LogRecord, Threshold};

use crate::ffi::{c_name, code, guard, nonnull, put, CResult};

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

/// Writes a line to stderr; its function is the librpma function of the record's Rust item
/// ([`c_name`]), as librpma names it.
fn default_function(rec: &LogRecord<'_>) {
    let aux = rlog::threshold(Threshold::Aux);
    let to_stderr = (aux != LogLevel::Disabled && rec.level <= aux) || rec.level <= LogLevel::Error;
    if to_stderr && rec.level != LogLevel::Disabled {
        let func = c_name(rec.function);
        let line = format!("{}{}: {}: {}: {}\n", rec.level.tag(), rec.file, rec.line, func, rec.message);
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
}

/// Logs a message as librpma logs it from its function `$func` (an `rpma_*` name): at
/// `$level` (a [`LogLevel`] variant), through the log function, if the level passes the
/// primary threshold. For the lines librpma writes itself (a refused argument, an INFO line);
/// a failed provider call is logged by [`crate::ffi::code`].
macro_rules! librpma_log {
    ($level:ident, $func:expr, $($arg:tt)+) => {
        if ::rpma_core::logging::enabled(::rpma_core::logging::LogLevel::$level) {
            ::rpma_core::logging::emit(
                ::rpma_core::logging::LogLevel::$level,
                file!(),
                line!(),
                $func,
                format_args!($($arg)+),
            );
        }
    };
}
pub(crate) use librpma_log;

/// A C string of `s` with any interior NUL cut off.
fn c_string(s: &str) -> CString {
    let end = s.find('\0').unwrap_or(s.len());
    CString::new(&s[..end]).unwrap_or_default()
}

/// A message for a C log function, held back while this thread holds a handle's lock.
struct Held {
    f: RpmaLogFunction,
    level: c_int,
    file: CString,
    line: c_int,
    func: CString,
    msg: CString,
}

impl Held {
    fn call(&self) {
        // The message ends with a newline, as librpma's (its macros append "\n" to the format):
        // a log function that prints the format as it comes ends its lines as with librpma.
        // SAFETY: [C3] `f` is the caller's rpma_log_function, which takes a printf format and
        // its arguments: "%s\n" with one NUL-terminated string; every pointer lives for the call.
        unsafe {
            (self.f)(self.level, self.file.as_ptr(), self.line, self.func.as_ptr(), c"%s\n".as_ptr(), self.msg.as_ptr())
        };
    }
}

thread_local! {
    /// How many [`Defer`]s of this thread live: while any does, messages for a C log function
    /// wait in [`HELD`].
    static DEFERRING: Cell<u32> = const { Cell::new(0) };
    /// The messages held back, in order.
    static HELD: RefCell<Vec<Held>> = const { RefCell::new(Vec::new()) };
}

/// While it lives, this thread's messages for a C log function are held back; dropping the last
/// one calls the function with each, in order. An exported function that may log with a
/// handle's lock held makes one before it takes the lock and drops it after releasing it
/// ([`crate::guard_deferring_log`]), so the C function never runs under the lock and may call
/// back into the same handle (a `parking_lot` lock is not reentrant: that would deadlock).
/// The data path (the posts and `rpma_cq_get_wc`) does not pay for it: the only messages it
/// can log are ERRORs of the verbs backend (docs/capi.md).
pub(crate) struct Defer(());

impl Defer {
    pub(crate) fn new() -> Self {
        // (`try_with`: during the thread's teardown nothing is held back; no panic out of FFI.)
        let _ = DEFERRING.try_with(|d| d.set(d.get() + 1));
        Self(())
    }
}

impl Drop for Defer {
    fn drop(&mut self) {
        let left = DEFERRING
            .try_with(|d| {
                let n = d.get().saturating_sub(1);
                d.set(n);
                n
            })
            .unwrap_or(0);
        if left > 0 {
            return;
        }
        // The function may log again (through a call that holds back its own messages and
        // calls it for them before returning); nothing of HELD is borrowed while it runs.
        // (`try_with`: during the thread's teardown HELD may be gone, and with it nothing held;
        // a panic here would abort, out of every catch_unwind.)
        while let Some(batch) = HELD
            .try_with(|h| {
                let mut h = h.borrow_mut();
                (!h.is_empty()).then(|| std::mem::take(&mut *h))
            })
            .ok()
            .flatten()
        {
            for m in &batch {
                m.call();
            }
        }
    }
}

/// [`guard`](crate::ffi::guard) for a function that may log while it holds a handle's lock (a connection's
/// `rpma_conn_disconnect` and `rpma_conn_next_event` log at NOTICE level): the messages for the
/// C log function are held back until the body returned, every lock released, so a log
/// function may call back into the same handle (librpma has no such lock). See
/// [`Defer`].
pub(crate) fn guard_deferring_log(body: impl FnOnce() -> CResult) -> c_int {
    let _held = Defer::new();
    guard(body)
}

/// `rpma_log_set_function`: installs `log_function`, or with NULL
/// (`RPMA_LOG_USE_DEFAULT_FUNCTION`) the default one.
///
/// The function may call any librpma function, also on the handle whose call is logging: the
/// functions that log while they hold a handle's lock (`rpma_conn_disconnect`,
/// `rpma_conn_next_event`, the waits, ...) call it after releasing the lock. One exception, the
/// data path: the messages logged inside a post or `rpma_cq_get_wc` (the ERROR line of a failed
/// provider call such as `ibv_post_send`, the verbs backend's unknown completion or region whose
/// deferred deregistration failed, the mock's WARNING of a cross-process outbox filling up)
/// reach it with that connection's lock held, and it must not call a function on that
/// connection then.
#[no_mangle]
pub extern "C" fn rpma_log_set_function(log_function: Option<RpmaLogFunction>) -> c_int {
    guard(|| {
        let Some(f) = log_function else {
            rlog::set_function(Some(Arc::new(default_function)));
            return Ok(());
        };
        rlog::set_function(Some(Arc::new(move |rec: &LogRecord<'_>| {
            let m = Held {
                f,
                level: rec.level as c_int,
                file: c_string(rec.file),
                line: c_int::try_from(rec.line).unwrap_or(c_int::MAX),
                func: c_string(c_name(rec.function)),
                msg: c_string(&rec.message.to_string()),
            };
            // (`try_with`: a message logged while the thread's locals are being destroyed is
            // not held back; HELD lives while a `Defer` counted in DEFERRING does.)
            if DEFERRING.try_with(Cell::get).is_ok_and(|n| n > 0) {
                let _ = HELD.try_with(|h| h.borrow_mut().push(m));
            } else {
                m.call();
            }
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

//! Logging: librpma's two thresholds and replaceable log function, bridged to the `log` crate.
//!
//! Messages above the primary threshold ([`Threshold::Primary`]) never reach the log function.
//! The auxiliary threshold is a hint for the log function (librpma's default function used it
//! for stderr). The default function of rpma-rs forwards every message to the [`log`] facade
//! (target `"rpma"`), so any `log`- or `tracing`-compatible subscriber receives them; this
//! replaces librpma's syslog + stderr default (a decision of the port: libraries should not
//! write to syslog or stderr by themselves). [`set_function`] installs a custom function.
//!
//! Defaults, as in librpma: primary `Warning` and aux `Disabled` in release builds, primary
//! `Debug` and aux `Warning` in debug builds (docs/decisions.md #20).

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, RwLock};

use crate::error::{Error, Result};

/// `enum rpma_log_level`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// `RPMA_LOG_DISABLED` (-1).
    Disabled = -1,
    /// `RPMA_LOG_LEVEL_FATAL` (0).
    Fatal = 0,
    /// `RPMA_LOG_LEVEL_ERROR` (1).
    Error = 1,
    /// `RPMA_LOG_LEVEL_WARNING` (2).
    Warning = 2,
    /// `RPMA_LOG_LEVEL_NOTICE` (3).
    Notice = 3,
    /// `RPMA_LOG_LEVEL_INFO` (4).
    Info = 4,
    /// `RPMA_LOG_LEVEL_DEBUG` (5).
    Debug = 5,
}

impl LogLevel {
    const ALL: [Self; 7] =
        [Self::Disabled, Self::Fatal, Self::Error, Self::Warning, Self::Notice, Self::Info, Self::Debug];

    fn from_i32(v: i32) -> Option<Self> {
        Self::ALL.into_iter().find(|l| *l as i32 == v)
    }

    /// librpma's tag for the level in its default stderr format (e.g. `"*WARN*  "`).
    #[must_use]
    pub const fn tag(self) -> &'static str {
        match self {
            Self::Disabled => "",
            Self::Fatal => "*FATAL* ",
            Self::Error => "*ERROR* ",
            Self::Warning => "*WARN*  ",
            Self::Notice => "*NOTE*  ",
            Self::Info => "*INFO*  ",
            Self::Debug => "*DEBUG* ",
        }
    }
}

impl TryFrom<i32> for LogLevel {
    type Error = Error;
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) outside -1..=5.
    fn try_from(v: i32) -> Result<Self> {
        Self::from_i32(v).ok_or_else(|| Error::invalid_input("LogLevel::try_from", "level outside -1..5"))
    }
}

/// `enum rpma_log_threshold`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Threshold {
    /// `RPMA_LOG_THRESHOLD` (0): messages above it are dropped.
    Primary = 0,
    /// `RPMA_LOG_THRESHOLD_AUX` (1): a hint for the log function.
    Aux = 1,
}

impl TryFrom<i32> for Threshold {
    type Error = Error;
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) unless 0 or 1.
    fn try_from(v: i32) -> Result<Self> {
        match v {
            0 => Ok(Self::Primary),
            1 => Ok(Self::Aux),
            _ => Err(Error::invalid_input("Threshold::try_from", "threshold is neither PRIMARY nor AUX")),
        }
    }
}

/// One log message as handed to a log function.
#[derive(Clone, Copy, Debug)]
pub struct LogRecord<'a> {
    /// The message's level.
    pub level: LogLevel,
    /// Source file of the message.
    pub file: &'static str,
    /// Source line.
    pub line: u32,
    /// The Rust item that logs (e.g. `Ep::listen`, `ConnReq::drop`), or the module path of the
    /// line. rpma-capi gives a C log function the librpma function of the item
    /// ([`crate::librpma::c_function`]), so the lines librpma also writes name its function.
    pub function: &'static str,
    /// The formatted message.
    pub message: &'a std::fmt::Arguments<'a>,
}

/// A log function (librpma's `rpma_log_function`); it must be thread-safe.
pub type LogFunction = Arc<dyn Fn(&LogRecord<'_>) + Send + Sync>;

const DEFAULT_PRIMARY: LogLevel = if cfg!(debug_assertions) { LogLevel::Debug } else { LogLevel::Warning };
const DEFAULT_AUX: LogLevel = if cfg!(debug_assertions) { LogLevel::Warning } else { LogLevel::Disabled };

static THRESHOLDS: [AtomicI32; 2] = [AtomicI32::new(DEFAULT_PRIMARY as i32), AtomicI32::new(DEFAULT_AUX as i32)];
static FUNCTION: RwLock<Option<LogFunction>> = RwLock::new(None);

/// `rpma_log_set_threshold`.
///
/// # Errors
/// None with typed arguments: an invalid threshold or level cannot be expressed (the raw C values
/// are rejected by `Threshold::try_from` / `LogLevel::try_from` with `InvalidInput`). librpma's
/// `RPMA_E_AGAIN` cannot happen here (atomics are always available).
pub fn set_threshold(threshold: Threshold, level: LogLevel) -> Result<()> {
    THRESHOLDS[threshold as usize].store(level as i32, Ordering::Relaxed);
    Ok(())
}

/// `rpma_log_get_threshold`.
#[must_use]
pub fn threshold(threshold: Threshold) -> LogLevel {
    LogLevel::from_i32(THRESHOLDS[threshold as usize].load(Ordering::Relaxed)).unwrap_or(LogLevel::Disabled)
}

/// `rpma_log_set_function`: installs `function`, or with `None`
/// (`RPMA_LOG_USE_DEFAULT_FUNCTION`) the default one, which forwards to the `log` facade.
pub fn set_function(function: Option<LogFunction>) {
    let mut g = FUNCTION.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    *g = function;
}

/// Whether a message of `level` passes the primary threshold.
#[must_use]
pub fn enabled(level: LogLevel) -> bool {
    level != LogLevel::Disabled && (level as i32) <= THRESHOLDS[0].load(Ordering::Relaxed)
}

/// Emits a message (used through the crate's `rpma_log!` macro; public for backends).
pub fn emit(level: LogLevel, file: &'static str, line: u32, function: &'static str, message: std::fmt::Arguments<'_>) {
    if !enabled(level) {
        return;
    }
    let rec = LogRecord { level, file, line, function, message: &message };
    let f = FUNCTION.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    match f {
        Some(f) => f(&rec),
        None => default_function(&rec),
    }
}

fn default_function(rec: &LogRecord<'_>) {
    let lvl = match rec.level {
        LogLevel::Disabled => return,
        LogLevel::Fatal | LogLevel::Error => ::log::Level::Error,
        LogLevel::Warning => ::log::Level::Warn,
        LogLevel::Notice | LogLevel::Info => ::log::Level::Info,
        LogLevel::Debug => ::log::Level::Debug,
    };
    ::log::logger().log(
        &::log::Record::builder()
            .args(*rec.message)
            .level(lvl)
            .target("rpma")
            .file_static(Some(rec.file))
            .line(Some(rec.line))
            .module_path_static(Some(rec.function))
            .build(),
    );
}

/// Logs through rpma's log function if the level passes the primary threshold; the record's
/// function is the Rust module, or with `in "Peer::new"` the Rust item that logs (for a line
/// librpma also writes, the item's librpma function is what a C log function of rpma-capi then
/// sees, as with librpma: [`LogRecord::function`](crate::logging::LogRecord::function)).
#[macro_export]
macro_rules! rpma_log {
    ($lvl:ident in $func:expr, $($arg:tt)+) => {
        if $crate::logging::enabled($crate::logging::LogLevel::$lvl) {
            $crate::logging::emit($crate::logging::LogLevel::$lvl, file!(), line!(), $func, format_args!($($arg)+));
        }
    };
    ($lvl:ident, $($arg:tt)+) => {
        if $crate::logging::enabled($crate::logging::LogLevel::$lvl) {
            $crate::logging::emit($crate::logging::LogLevel::$lvl, file!(), line!(), module_path!(), format_args!($($arg)+));
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn raw_conversions() {
        assert_eq!(LogLevel::try_from(-2).unwrap_err().kind(), ErrorKind::InvalidInput);
        assert_eq!(LogLevel::try_from(6).unwrap_err().kind(), ErrorKind::InvalidInput);
        assert_eq!(LogLevel::try_from(2).unwrap(), LogLevel::Warning);
        assert_eq!(Threshold::try_from(2).unwrap_err().kind(), ErrorKind::InvalidInput);
        assert_eq!(Threshold::try_from(-1).unwrap_err().kind(), ErrorKind::InvalidInput);
        assert_eq!(Threshold::try_from(1).unwrap(), Threshold::Aux);
    }
}

//! Writing the command's output as command-line tools do: a write to stdout that fails is an
//! error the caller returns (never a panic, as `println!` does), and [`exit_code`] turns it into
//! the exit status: a reader that went away (`EPIPE`, e.g. `rpma demo | head -1`) ends the
//! command quietly with status 0, any other write failure (e.g. `>/dev/full`) is a one-line error
//! and status 1. Usage errors ([`UsageError`]) exit 2, as clap's do.

use std::fmt;
use std::io::{self, Write};
use std::process::ExitCode;

use rpma_scenarios::stderr::err_line;
use rpma_scenarios::usage::UsageError;

/// Stdout could not be written.
#[derive(Debug)]
pub(crate) struct OutputError(pub io::Error);

impl fmt::Display for OutputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The cause follows in `{:#}` (the source).
        f.write_str("writing to stdout")
    }
}

impl std::error::Error for OutputError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// Writes `args` and a newline to stdout.
///
/// # Errors
/// An [`OutputError`] if stdout cannot be written.
pub(crate) fn line(args: fmt::Arguments<'_>) -> anyhow::Result<()> {
    let mut o = io::stdout().lock();
    o.write_fmt(args).and_then(|()| o.write_all(b"\n")).map_err(|e| OutputError(e).into())
}

/// Writes `s` as is to stdout.
///
/// # Errors
/// An [`OutputError`] if stdout cannot be written.
pub(crate) fn text(s: &str) -> anyhow::Result<()> {
    io::stdout().lock().write_all(s.as_bytes()).map_err(|e| OutputError(e).into())
}

/// Flushes stdout (what is buffered reaches the reader or fails here, not silently at exit).
///
/// # Errors
/// An [`OutputError`] if stdout cannot be written.
pub(crate) fn flush() -> anyhow::Result<()> {
    io::stdout().lock().flush().map_err(|e| OutputError(e).into())
}

/// `println!` that returns an [`OutputError`] instead of panicking: `outln!(...)?`.
#[macro_export]
macro_rules! outln {
    ($($t:tt)*) => {
        $crate::out::line(format_args!($($t)*))
    };
}

/// Whether `e` comes from writing to a reader that went away (`EPIPE`).
#[must_use]
pub(crate) fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<io::Error>().is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe))
}

/// The exit status of a command's result, with the error (if any) on stderr in one line,
/// prefixed `rpma: `: 0 (quietly) on a closed pipe, 2 for a [`UsageError`] (which points to
/// `{command} --help`, e.g. `rpma log bench --help`), 1 otherwise.
#[must_use]
pub(crate) fn exit_code(r: anyhow::Result<ExitCode>, command: &str) -> ExitCode {
    let r = r.and_then(|code| flush().map(|()| code));
    match r {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            let msg = format!("{e:#}").replace('\n', " ");
            if e.downcast_ref::<UsageError>().is_some() {
                err_line(format_args!("rpma: {msg} (see '{command} --help')"));
                ExitCode::from(2)
            } else {
                err_line(format_args!("rpma: error: {msg}"));
                ExitCode::FAILURE
            }
        }
    }
}

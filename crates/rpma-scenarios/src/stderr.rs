//! Lines on stderr that never fail: a note or an error for the person at the terminal, written
//! where nothing is left to report a failing stderr to (`eprintln!` would panic).

use std::fmt;
use std::io::{self, Write};

/// Writes one line to stderr; a stderr that cannot be written is ignored (there is nowhere
/// left to report it).
pub fn err_line(args: fmt::Arguments<'_>) {
    let mut e = io::stderr().lock();
    let _ = e.write_fmt(args).and_then(|()| e.write_all(b"\n"));
}

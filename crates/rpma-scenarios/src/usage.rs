//! Usage errors: a command line that cannot run, which the `rpma` command reports with exit
//! status 2 (as clap's own usage errors) and a pointer to the command's `--help`. The checks of
//! the arguments (here, in the benchmark and in the command) return them; the command turns
//! them into its exit status.

use std::fmt;

/// A command line that cannot run (exit status 2, as clap's own usage errors).
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Wraps an error of the arguments' checks as a [`UsageError`] (its causes on one line).
#[must_use]
pub fn usage(e: &anyhow::Error) -> anyhow::Error {
    UsageError(format!("{e:#}")).into()
}

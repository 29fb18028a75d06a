//! The events of the deferred mode a crash point can fall after.

use std::fmt;

/// The kind of an event a crash point falls after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A work request was posted (it waits in its send queue).
    Post,
    /// A work request executed at its target (its bytes landed, or were read or flushed).
    Execute,
    /// A completion was queued to a completion queue (a poll can now see it).
    Complete,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Post => "a post",
            Self::Execute => "an execution at the target",
            Self::Complete => "a completion",
        })
    }
}

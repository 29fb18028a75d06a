//! The `rpma` command.
fn main() {}

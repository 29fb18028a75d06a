//! # rpma-cli: the `rpma` command as a library
//!
//! The `rpma` binary is the front door of rpma-rs:
//!
//! - `rpma demo` runs every scenario below in one process on the in-memory mock fabric (server
//!   and client as threads) and prints what was written, flushed, read and received;
//! - `rpma devices` shows what rpma needs to know about the RDMA devices (capabilities, limits,
//!   addresses);
//! - `rpma server` / `rpma client` run one side of a scenario so that two processes talk: over
//!   verbs (two machines too; the other side may be the C program built from librpma's example
//!   of the same number), or over the mock's cross-process mode on one host (as
//!   `rpma demo --two-process` does).
//!
//! The scenarios (librpma's examples) and the toolkit the command's parts share are the crate
//! `rpma-scenarios`; here are the benchmark ([`bench`](mod@bench)), the device information
//! ([`devices`]), the `rpma log` command ([`log_cmd`]) and the command's output ([`out`]).
// One module maps `--file` (an `unsafe` call of rpma-mem, rule M5); everything else is safe.
#![deny(unsafe_code)]

pub mod bench;
pub mod devices;
pub mod file_map;
pub mod log_cmd;
pub mod out;

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
//!   of the same number), or over the mock's cross-process mode on one host ([`processes`] runs
//!   both, as `rpma demo --two-process` does).
//!
//! The library exposes the same pieces so tests (and fault sweeps) can drive them directly:
//! [`scenarios`] has one module per librpma example (01 to 13, plus the SRQ ping-pong and the
//! shared completion channel variants), each with a `server` and a `client` function generic over
//! any [`rpma::Transport`] that return a report, and a `demo` function that runs both sides in one
//! process and checks what each side saw against the other. [`backend`] selects the transport
//! from the command line (shared with [`bench`](mod@bench), the data-path benchmark), [`devices`] gathers
//! device information, and [`native`] says whether flushes and atomic writes went native or
//! emulated.
//!
//! Every scenario keeps the data flow and the private-data layout of the librpma example it
//! follows: the 28-byte `common_data` container ([`pdata::CommonData`]) with the memory
//! region descriptor, the optional peer-configuration descriptor and the data offset, in native
//! byte order; the same message slots, offsets, sizes and operation contexts.
// One module maps `--file` (an `unsafe` call of rpma-mem, rule M5); everything else is safe.
#![deny(unsafe_code)]

pub mod args;
pub mod backend;
pub mod bench;
pub mod devices;
pub mod file_map;
pub mod log_cmd;
pub mod native;
pub mod out;
pub mod pdata;
pub mod processes;
pub mod scenarios;

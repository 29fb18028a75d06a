//! Programs that must not compile against rpma-rs, and the compiler's reasons (trybuild):
//!
//! - `tests/compile_fail/`: the backend contract (`rpma::transport`) is public, and safe code
//!   cannot misuse it (a connection's queue pair cannot be ended through `Conn::backend()`, a
//!   work request cannot be forged outside rpma-core);
//! - `tests/compile_fail_op/`: an operation value refuses, at compile time, what its kind cannot
//!   carry (an immediate value on a read; a receive posted unsignaled), in the synchronous and
//!   the asynchronous API.
//!
//! `cargo test -p rpma-compile-fail`; `TRYBUILD=overwrite` rewrites the expected messages
//! (`*.stderr`) after a deliberate change.
#![forbid(unsafe_code)]

//! The conformance suite: plain functions generic over a [`Backend`], one per librpma behaviour
//! and one per ERRORS rule, named `<function>__<condition>` after librpma's own unit tests.
//!
//! Each backend's test binary (`tests/mock.rs`, later `tests/verbs.rs`) builds the same list
//! with [`all`] and runs it with libtest-mimic. Cases that depend on what a backend can do read
//! [`Backend::caps`] and assert the behaviour of *that* path (native or emulated); no case passes
//! by testing nothing.
#![allow(dead_code)]

pub mod harness;

mod batch;
mod cfg;
mod conn;
mod mr;
mod ops;
mod stress;
mod timeout;
mod untrusted;
mod utils;

pub use harness::{Backend, Case};

/// Every conformance case, in a stable order.
pub fn all<B: Backend>() -> Vec<Case<B>> {
    let mut v = Vec::new();
    v.extend(utils::cases::<B>());
    v.extend(cfg::cases::<B>());
    v.extend(mr::cases::<B>());
    v.extend(conn::cases::<B>());
    v.extend(ops::cases::<B>());
    v.extend(batch::cases::<B>());
    v.extend(timeout::cases::<B>());
    v.extend(untrusted::cases::<B>());
    v.extend(stress::cases::<B>());
    v
}

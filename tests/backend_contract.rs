//! The backend contract (`rpma::transport`) is public, and safe code cannot misuse it: these
//! programs must not compile (each file says why), and the compiler must refuse them for that
//! reason (the expected messages are in `tests/compile_fail/*.stderr`).
#![allow(missing_docs)]

#[test]
fn backend_contract_refuses_unsound_calls() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile_fail/*.rs");
}

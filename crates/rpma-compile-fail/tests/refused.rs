//! Each program under `tests/compile_fail*/` must fail to compile, with the compiler's message
//! in the `.stderr` file beside it (each program says why it must not compile):
//! `compile_fail/` the backend contract, `compile_fail_op/` the operation values.
#![allow(missing_docs)]

#[test]
fn programs_that_misuse_the_api_do_not_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile_fail/*.rs");
    t.compile_fail("tests/compile_fail_op/*.rs");
}

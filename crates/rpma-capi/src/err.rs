//! `rpma_err_2str`: the description of an `RPMA_E_*` code.

use std::ffi::{c_char, c_int};

/// `rpma_err_2str`: the description of an `RPMA_E_*` code ("Unknown error" for any other), as
/// `rpma_core::librpma::err_2str` gives it.
#[no_mangle]
pub extern "C" fn rpma_err_2str(ret: c_int) -> *const c_char {
    rpma_core::librpma::err_2str(ret).as_ptr()
}

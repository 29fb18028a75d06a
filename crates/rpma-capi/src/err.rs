//! `rpma_err_2str`: the description of an `RPMA_E_*` code.

use std::ffi::{c_char, c_int, CStr};

/// `rpma_err_2str`: the description of an `RPMA_E_*` code ("Unknown error" for any other).
#[no_mangle]
pub extern "C" fn rpma_err_2str(ret: c_int) -> *const c_char {
    let s: &'static CStr = match ret {
        0 => c"Success",
        -100_001 => c"Not supported",
        -100_002 => c"Provider error occurred",
        -100_003 => c"Out of memory",
        -100_004 => c"Invalid argument",
        -100_005 => c"No next completion available",
        -100_006 => c"No next event available",
        -100_007 => c"Temporary error, try again",
        -100_008 => c"Completion channel is shared",
        -100_009 => c"Completion channel is not shared",
        _ => c"Unknown error",
    };
    s.as_ptr()
}

//! librpma's C names for what rpma-rs names in Rust, in one place: the `RPMA_E_*` code of each
//! [`ErrorKind`](crate::ErrorKind), its macro name and `rpma_err_2str` string ([`code`],
//! [`kind`], [`macro_name`], [`err_2str`]), and the librpma function of each Rust item
//! ([`c_function`], [`rust_item`], [`FUNCTIONS`]).
//!
//! rpma-capi (librpma.so for C programs) returns these codes and names these functions in its
//! log lines; a Rust program needs them only to talk to C code or to read librpma's logs.
//!
//! ```
//! use rpma::librpma;
//! use rpma::ErrorKind;
//!
//! assert_eq!(librpma::code(ErrorKind::InvalidInput), librpma::RPMA_E_INVAL);
//! assert_eq!(librpma::kind(-100_004), Some(ErrorKind::InvalidInput));
//! assert_eq!(librpma::err_2str(librpma::RPMA_E_INVAL), c"Invalid argument");
//! assert_eq!(librpma::c_function("Conn::read"), Some("rpma_read"));
//! assert_eq!(librpma::rust_item("rpma_utils_get_ibv_context"), Some("Device::lookup"));
//! ```

mod codes;
mod functions;

pub use codes::{
    code, err_2str, kind, macro_name, RPMA_E_AGAIN, RPMA_E_INVAL, RPMA_E_NOMEM, RPMA_E_NOSUPP, RPMA_E_NOT_SHARED_CHNL,
    RPMA_E_NO_COMPLETION, RPMA_E_NO_EVENT, RPMA_E_PROVIDER, RPMA_E_SHARED_CHANNEL, RPMA_E_UNKNOWN,
};
pub use functions::{c_function, rust_item, FUNCTIONS};

//! The `RPMA_E_*` codes: the value, macro name and `rpma_err_2str` string of each
//! [`ErrorKind`].

use std::ffi::CStr;

use crate::error::ErrorKind;

/// `RPMA_E_UNKNOWN`: [`ErrorKind::Other`].
pub const RPMA_E_UNKNOWN: i32 = -100_000;
/// `RPMA_E_NOSUPP`: [`ErrorKind::Unsupported`].
pub const RPMA_E_NOSUPP: i32 = -100_001;
/// `RPMA_E_PROVIDER`: [`ErrorKind::Provider`].
pub const RPMA_E_PROVIDER: i32 = -100_002;
/// `RPMA_E_NOMEM`: [`ErrorKind::OutOfMemory`].
pub const RPMA_E_NOMEM: i32 = -100_003;
/// `RPMA_E_INVAL`: [`ErrorKind::InvalidInput`].
pub const RPMA_E_INVAL: i32 = -100_004;
/// `RPMA_E_NO_COMPLETION`: [`ErrorKind::NoCompletion`].
pub const RPMA_E_NO_COMPLETION: i32 = -100_005;
/// `RPMA_E_NO_EVENT`: [`ErrorKind::NoEvent`].
pub const RPMA_E_NO_EVENT: i32 = -100_006;
/// `RPMA_E_AGAIN`: [`ErrorKind::WouldBlock`].
pub const RPMA_E_AGAIN: i32 = -100_007;
/// `RPMA_E_SHARED_CHANNEL`: [`ErrorKind::SharedChannel`].
pub const RPMA_E_SHARED_CHANNEL: i32 = -100_008;
/// `RPMA_E_NOT_SHARED_CHNL`: [`ErrorKind::NotSharedChannel`].
pub const RPMA_E_NOT_SHARED_CHNL: i32 = -100_009;

/// Each kind's code, macro name and `rpma_err_2str` string (librpma 1.0 - 1.3).
const CODES: [(ErrorKind, i32, &str, &CStr); 10] = [
    (ErrorKind::Other, RPMA_E_UNKNOWN, "RPMA_E_UNKNOWN", c"Unknown error"),
    (ErrorKind::Unsupported, RPMA_E_NOSUPP, "RPMA_E_NOSUPP", c"Not supported"),
    (ErrorKind::Provider, RPMA_E_PROVIDER, "RPMA_E_PROVIDER", c"Provider error occurred"),
    (ErrorKind::OutOfMemory, RPMA_E_NOMEM, "RPMA_E_NOMEM", c"Out of memory"),
    (ErrorKind::InvalidInput, RPMA_E_INVAL, "RPMA_E_INVAL", c"Invalid argument"),
    (ErrorKind::NoCompletion, RPMA_E_NO_COMPLETION, "RPMA_E_NO_COMPLETION", c"No next completion available"),
    (ErrorKind::NoEvent, RPMA_E_NO_EVENT, "RPMA_E_NO_EVENT", c"No next event available"),
    (ErrorKind::WouldBlock, RPMA_E_AGAIN, "RPMA_E_AGAIN", c"Temporary error, try again"),
    (ErrorKind::SharedChannel, RPMA_E_SHARED_CHANNEL, "RPMA_E_SHARED_CHANNEL", c"Completion channel is shared"),
    (
        ErrorKind::NotSharedChannel,
        RPMA_E_NOT_SHARED_CHNL,
        "RPMA_E_NOT_SHARED_CHNL",
        c"Completion channel is not shared",
    ),
];

/// The row of `kind` in [`CODES`].
const fn row(kind: ErrorKind) -> usize {
    match kind {
        ErrorKind::Other => 0,
        ErrorKind::Unsupported => 1,
        ErrorKind::Provider => 2,
        ErrorKind::OutOfMemory => 3,
        ErrorKind::InvalidInput => 4,
        ErrorKind::NoCompletion => 5,
        ErrorKind::NoEvent => 6,
        ErrorKind::WouldBlock => 7,
        ErrorKind::SharedChannel => 8,
        ErrorKind::NotSharedChannel => 9,
    }
}

/// The `RPMA_E_*` value librpma returns for an error of `kind`.
#[must_use]
pub const fn code(kind: ErrorKind) -> i32 {
    CODES[row(kind)].1
}

/// The kind of an `RPMA_E_*` value, or `None` for any other integer.
#[must_use]
pub fn kind(code: i32) -> Option<ErrorKind> {
    CODES.iter().find(|r| r.1 == code).map(|r| r.0)
}

/// The C macro of `kind`'s code, e.g. `"RPMA_E_INVAL"`.
#[must_use]
pub const fn macro_name(kind: ErrorKind) -> &'static str {
    CODES[row(kind)].2
}

/// What librpma's `rpma_err_2str()` returns for any return value of a librpma function: `0` is
/// `"Success"`, an `RPMA_E_*` value gets its string, anything else is `"Unknown error"`.
#[doc(alias = "rpma_err_2str")]
#[must_use]
pub fn err_2str(code: i32) -> &'static CStr {
    if code == 0 {
        return c"Success";
    }
    CODES.iter().find(|r| r.1 == code).map_or(c"Unknown error", |r| r.3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_maps_to_its_code_and_back() {
        let expected = [
            (ErrorKind::Other, -100_000, "RPMA_E_UNKNOWN", c"Unknown error"),
            (ErrorKind::Unsupported, -100_001, "RPMA_E_NOSUPP", c"Not supported"),
            (ErrorKind::Provider, -100_002, "RPMA_E_PROVIDER", c"Provider error occurred"),
            (ErrorKind::OutOfMemory, -100_003, "RPMA_E_NOMEM", c"Out of memory"),
            (ErrorKind::InvalidInput, -100_004, "RPMA_E_INVAL", c"Invalid argument"),
            (ErrorKind::NoCompletion, -100_005, "RPMA_E_NO_COMPLETION", c"No next completion available"),
            (ErrorKind::NoEvent, -100_006, "RPMA_E_NO_EVENT", c"No next event available"),
            (ErrorKind::WouldBlock, -100_007, "RPMA_E_AGAIN", c"Temporary error, try again"),
            (ErrorKind::SharedChannel, -100_008, "RPMA_E_SHARED_CHANNEL", c"Completion channel is shared"),
            (ErrorKind::NotSharedChannel, -100_009, "RPMA_E_NOT_SHARED_CHNL", c"Completion channel is not shared"),
        ];
        assert_eq!(expected.len(), ErrorKind::ALL.len());
        for (k, c, name, s) in expected {
            assert_eq!(code(k), c, "{k:?}");
            assert_eq!(kind(c), Some(k), "{c}");
            assert_eq!(macro_name(k), name, "{k:?}");
            assert_eq!(err_2str(c), s, "{c}");
        }
        for k in ErrorKind::ALL {
            assert_eq!(kind(code(k)), Some(k), "{k:?}");
        }
    }

    #[test]
    fn other_values() {
        assert_eq!(err_2str(0), c"Success");
        assert_eq!(err_2str(-1), c"Unknown error");
        assert_eq!(err_2str(-100_010), c"Unknown error");
        assert_eq!(kind(0), None);
        assert_eq!(kind(1), None);
        assert_eq!(kind(-100_010), None);
    }

    proptest::proptest! {
        #[test]
        fn err_2str_is_total(c in proptest::prelude::any::<i32>()) {
            let s = err_2str(c);
            match kind(c) {
                Some(k) => proptest::prop_assert_eq!(s, CODES[row(k)].3),
                None if c == 0 => proptest::prop_assert_eq!(s, c"Success"),
                None => proptest::prop_assert_eq!(s, c"Unknown error"),
            }
        }
    }
}

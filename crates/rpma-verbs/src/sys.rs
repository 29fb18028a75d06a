//! Small helpers around the C calls.

/// The calling thread's `errno` (set by the failed librdmacm/libibverbs call just made); `EIO`
/// if none is set.
pub(crate) fn errno() -> i32 {
    match std::io::Error::last_os_error().raw_os_error() {
        Some(0) | None => libc::EIO,
        Some(e) => e,
    }
}

/// The errno of a verbs call that returns it directly (positive) or negated, or `-1` with
/// `errno` set.
pub(crate) fn ret_errno(r: i32) -> i32 {
    if r == -1 {
        errno()
    } else {
        r.abs()
    }
}

/// A provider call that creates or does something: `call!(name, fail, call)`. With feature
/// `fault-injection`, an armed check ([`crate::faults`]) makes it fail without being made: the
/// expression is then `fail` (what the C function returns on failure; `errno` is set to the
/// injected value). Without the feature this is just `call`.
macro_rules! call {
    ($name:literal, $fail:expr, $call:expr) => {{
        #[cfg(feature = "fault-injection")]
        let r = if $crate::faults::check($name).is_some() { $fail } else { $call };
        #[cfg(not(feature = "fault-injection"))]
        let r = $call;
        r
    }};
}

/// A provider call that releases something: `release!(name, fail, call)`. It is always made;
/// with feature `fault-injection` an armed check then reports it as failed (`fail`, `errno`
/// set), see [`crate::faults`]. Without the feature this is just `call`.
/// `release!(Kind: name, fail, call)` also counts one `Kind` released when the call itself
/// returned 0 (before any injected failure: the resource is gone either way).
macro_rules! release {
    ($name:literal, $fail:expr, $call:expr) => {{
        let r = $call;
        #[cfg(feature = "fault-injection")]
        let r = if $crate::faults::check($name).is_some() { $fail } else { r };
        r
    }};
    ($res:ident: $name:literal, $fail:expr, $call:expr) => {{
        let r = $call;
        $crate::sys::track!($res, -1, if r == 0);
        #[cfg(feature = "fault-injection")]
        let r = if $crate::faults::check($name).is_some() { $fail } else { r };
        r
    }};
}

/// Counts a resource created (`track!(Kind, 1)`) or released (`track!(Kind, -1)`) with feature
/// `fault-injection`; nothing without it.
/// `track!(Kind, delta, if cond)` counts only when `cond` holds (evaluated only with the feature).
macro_rules! track {
    ($res:ident, $delta:expr) => {
        #[cfg(feature = "fault-injection")]
        $crate::faults::track($crate::faults::Resource::$res, $delta);
    };
    ($res:ident, $delta:expr, if $cond:expr) => {
        #[cfg(feature = "fault-injection")]
        if $cond {
            $crate::faults::track($crate::faults::Resource::$res, $delta);
        }
    };
}

pub(crate) use {call, release, track};

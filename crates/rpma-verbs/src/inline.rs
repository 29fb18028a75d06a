//! The inline data a device takes per send work request. `ibv_query_device` does not say it:
//! providers refuse a QP asking for more than they support (`EINVAL`), so it is probed once per
//! device with throw-away QPs and cached.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};

use rdma_sys as ffi;

/// Most inline bytes asked for by the probe.
const PROBE_MAX: u32 = 4096;

/// The largest `max_inline_data` a QP of the device `name` can be created with (at least the
/// `floor` this crate needs itself, which every QP is created with anyway).
pub(crate) fn max_inline(ctx: *mut ffi::ibv_context, name: &str, floor: u32) -> u32 {
    static CACHE: OnceLock<Mutex<HashMap<String, u32>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(v) = cache.lock().unwrap_or_else(PoisonError::into_inner).get(name) {
        return *v;
    }
    // Binary search for the largest size a QP accepts.
    let (mut lo, mut hi) = (floor, PROBE_MAX);
    if probe(ctx, hi) {
        lo = hi;
    } else {
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if probe(ctx, mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
    }
    cache.lock().unwrap_or_else(PoisonError::into_inner).insert(name.to_owned(), lo);
    lo
}

/// Whether an RC QP with `inline` bytes of inline data can be created.
fn probe(ctx: *mut ffi::ibv_context, inline: u32) -> bool {
    crate::probe::probe_qp(ctx, |a| a.cap.max_inline_data = inline, |_| true)
}

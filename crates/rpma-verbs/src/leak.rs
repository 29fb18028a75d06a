//! The leak report: what this crate abandoned on purpose because releasing it failed.
//!
//! Memory whose deregistration failed may still be read or written by the device, so it is
//! never freed or unmapped (rule M1 of docs/memory.md); a queue pair that could not be destroyed
//! may still execute its posted work requests, so the regions they reference, its CQs, CM id and
//! event channel, its SRQ and its PD (hence the device context) are kept forever (rules V1, V4).
//! Each such leak is logged at level `Error` through rpma-core's log function and counted here,
//! for the life of the process; with the `tracing` feature it is also an `ERROR` event
//! `rpma.leak`, "resource leaked" (target `rpma`, in the current span) with the fields `what` (`region` or `qp`),
//! `addr` and `len` (a region) or `qp_num` (a queue pair), and `why`.

use std::sync::atomic::{AtomicU64, Ordering};

static REGIONS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);
static QPS: AtomicU64 = AtomicU64::new(0);

/// The counts of what was leaked since the process started (they only grow).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Leaks {
    /// Memory regions whose bytes are kept because deregistering them failed, or because a
    /// queue pair that could not be destroyed may still use them.
    pub regions: u64,
    /// The bytes of those regions.
    pub bytes: u64,
    /// Queue pairs that could not be destroyed (with their CQs, CM id, event channel and PD).
    pub qps: u64,
}

/// The leak report of the process (see the module docs).
#[must_use]
pub fn leaks() -> Leaks {
    Leaks {
        regions: REGIONS.load(Ordering::SeqCst),
        bytes: BYTES.load(Ordering::SeqCst),
        qps: QPS.load(Ordering::SeqCst),
    }
}

/// Reports a region of `len` bytes leaked (`why`: what failed).
pub(crate) fn region(addr: u64, len: usize, why: &dyn std::fmt::Display) {
    REGIONS.fetch_add(1, Ordering::SeqCst);
    BYTES.fetch_add(len as u64, Ordering::SeqCst);
    #[cfg(feature = "tracing")]
    tracing::error!(name: "rpma.leak", target: "rpma", what = "region", addr, len, why = %why, "resource leaked");
    rpma_core::rpma_log!(Error, "leaking memory region {addr:#x} ({len} bytes): {why}");
}

/// Reports a queue pair leaked (`why`: what failed).
pub(crate) fn qp(qp_num: u32, why: &dyn std::fmt::Display) {
    QPS.fetch_add(1, Ordering::SeqCst);
    #[cfg(feature = "tracing")]
    tracing::error!(name: "rpma.leak", target: "rpma", what = "qp", qp_num, why = %why, "resource leaked");
    rpma_core::rpma_log!(Error, "leaking queue pair {qp_num} with its CQs, CM id and protection domain: {why}");
}

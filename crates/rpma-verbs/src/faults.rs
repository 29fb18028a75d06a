//! Fault injection over the provider calls and live-resource counters (feature
//! `fault-injection`, off by default; without it none of this is compiled and every call site
//! is the plain C call).
//!
//! Every librdmacm/libibverbs call of this crate that can fail, and `mmap`/`munmap`, goes
//! through a check:
//! - [`count_calls`] tells how many checked calls were made since the last [`reset`] (and
//!   [`calls`] which ones, in order), so a test can count the calls of a flow;
//! - [`fail_nth`] arms the check: the n-th checked call from now fails with the given errno.
//!   A call that *creates or does* something (`rdma_create_id`, `ibv_reg_mr`, `rdma_connect`,
//!   `ibv_post_send`, `ibv_poll_cq`, ...) is then **not made**: its wrapper returns what the C
//!   call returns on failure (null, `-1`, the errno, a negative count, `MAP_FAILED`) with
//!   `errno` set. A call that *releases* something (`ibv_dereg_mr`, `ibv_destroy_qp`, `ibv_destroy_cq`,
//!   `rdma_destroy_id`, `rdma_ack_cm_event`, `ibv_dealloc_pd`, `munmap`, ...) is made all the
//!   same and then reported as failed: a release that is not made leaks by construction (and
//!   an unacked CM event makes `rdma_destroy_id` wait forever), so failing it this way tests
//!   the caller's error path while keeping the counters exact.
//! - [`live`] counts the live resources this crate created (PDs, MRs, CQs, completion
//!   channels, SRQs, QPs, CM ids, CM event channels, address lists, file mappings), so a test
//!   can check nothing leaked; [`open_fds`] counts the process's open fds.
//!
//! The state is process-global (atomics and one mutex taken only by the check itself): a test
//! using it must run its flows on one thread, one at a time (a `harness = false` test or
//! `--test-threads=1`), or the counts mix. The data path (post, poll) goes through the check
//! too, so with this feature it takes that mutex: never enable it in production builds.
//!
//! ```no_run
//! use rpma_verbs::faults;
//! faults::reset();
//! // ... run the flow once ...
//! let n = faults::count_calls();
//! for k in 1..=n {
//!     faults::fail_nth(k, libc::EIO);
//!     // ... run the flow again: it must fail ...
//!     assert!(faults::fired().is_some());
//!     faults::disarm();
//!     assert!(faults::live().is_zero());
//! }
//! ```

use std::sync::atomic::{AtomicI32, AtomicIsize, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// A kind of resource counted by [`live`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Resource {
    /// Protection domains (`ibv_alloc_pd`).
    Pd,
    /// Memory registrations (`ibv_reg_mr`).
    Mr,
    /// Completion queues (`ibv_create_cq`).
    Cq,
    /// Completion channels (`ibv_create_comp_channel`).
    CompChannel,
    /// Shared receive queues (`ibv_create_srq`).
    Srq,
    /// Queue pairs (`rdma_create_qp`).
    Qp,
    /// CM identifiers (`rdma_create_id`, and those librdmacm creates for incoming requests).
    CmId,
    /// CM event channels (`rdma_create_event_channel`).
    EventChannel,
    /// `rdma_getaddrinfo` results.
    AddrInfo,
}

impl Resource {
    /// Every kind, in the order of [`Live::counts`].
    pub const ALL: [Self; 9] = [
        Self::Pd,
        Self::Mr,
        Self::Cq,
        Self::CompChannel,
        Self::Srq,
        Self::Qp,
        Self::CmId,
        Self::EventChannel,
        Self::AddrInfo,
    ];

    const fn index(self) -> usize {
        self as usize
    }
}

/// A snapshot of the live-resource counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Live {
    /// The count of each kind, in the order of [`Resource::ALL`].
    pub counts: [isize; 9],
}

impl Live {
    /// The count of one kind.
    #[must_use]
    pub const fn get(&self, r: Resource) -> isize {
        self.counts[r.index()]
    }

    /// Whether every count is zero.
    #[must_use]
    pub fn is_zero(&self) -> bool {
        self.counts.iter().all(|&c| c == 0)
    }
}

impl std::fmt::Display for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        for r in Resource::ALL {
            let c = self.get(r);
            if c != 0 {
                write!(f, "{}{r:?}={c}", if first { "" } else { " " })?;
                first = false;
            }
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

static LIVE: [AtomicIsize; 9] = [const { AtomicIsize::new(0) }; 9];
/// Checked calls since the last reset/arming.
static CALLS: AtomicU64 = AtomicU64::new(0);
/// The call number to fail (0: disarmed).
static FAIL_AT: AtomicU64 = AtomicU64::new(0);
static FAIL_ERRNO: AtomicI32 = AtomicI32::new(0);

struct Record {
    names: Vec<&'static str>,
    fired: Option<(u64, &'static str)>,
    /// Armed by [`fail_next`]: the next call of this name fails.
    fail_name: Option<&'static str>,
}

/// [`calls`] keeps at most this many names (the count goes on).
const MAX_RECORDED: usize = 1 << 20;

static RECORD: Mutex<Record> = Mutex::new(Record { names: Vec::new(), fired: None, fail_name: None });

fn record() -> MutexGuard<'static, Record> {
    RECORD.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Disarms, zeroes the call count and forgets the recorded calls (the live counters are kept).
pub fn reset() {
    FAIL_AT.store(0, Ordering::SeqCst);
    CALLS.store(0, Ordering::SeqCst);
    let mut r = record();
    r.names.clear();
    r.fired = None;
    r.fail_name = None;
}

/// The number of checked calls since the last [`reset`] or [`fail_nth`].
#[must_use]
pub fn count_calls() -> u64 {
    CALLS.load(Ordering::SeqCst)
}

/// The names of the checked calls since the last [`reset`] or [`fail_nth`], in order (the
/// first 2^20 of them).
#[must_use]
pub fn calls() -> Vec<&'static str> {
    record().names.clone()
}

/// Resets the count (as [`reset`]) and arms the check: the `n`-th checked call from now
/// (1-based) fails with `errno` (see the module docs for what failing means). `n == 0` disarms.
pub fn fail_nth(n: u64, errno: i32) {
    reset();
    FAIL_ERRNO.store(errno, Ordering::SeqCst);
    FAIL_AT.store(n, Ordering::SeqCst);
}

/// Resets the count (as [`reset`]) and arms the check by name: the next checked call named
/// `name` (e.g. `"ibv_dereg_mr"`) fails with `errno`, once.
pub fn fail_next(name: &'static str, errno: i32) {
    reset();
    FAIL_ERRNO.store(errno, Ordering::SeqCst);
    record().fail_name = Some(name);
}

/// Disarms the check (the count goes on).
pub fn disarm() {
    FAIL_AT.store(0, Ordering::SeqCst);
    record().fail_name = None;
}

/// The armed failure that was injected since arming, if any: (call number, call name).
#[must_use]
pub fn fired() -> Option<(u64, &'static str)> {
    record().fired
}

/// The live-resource counters.
#[must_use]
pub fn live() -> Live {
    Live { counts: std::array::from_fn(|i| LIVE[i].load(Ordering::SeqCst)) }
}

/// The number of open file descriptors of the process (entries of `/proc/self/fd`, minus the
/// one used to list them).
///
/// # Errors
/// The error of reading `/proc/self/fd`.
pub fn open_fds() -> std::io::Result<usize> {
    let n = std::fs::read_dir("/proc/self/fd")?.count();
    Ok(n.saturating_sub(1))
}

/// The check of one call: `Some(errno)` if this call is the armed one.
pub(crate) fn check(name: &'static str) -> Option<i32> {
    let n = CALLS.fetch_add(1, Ordering::SeqCst) + 1;
    let mut r = record();
    if r.names.len() < MAX_RECORDED {
        r.names.push(name);
    }
    if FAIL_AT.load(Ordering::SeqCst) == n || r.fail_name == Some(name) {
        r.fail_name = None;
        r.fired = Some((n, name));
        drop(r);
        let e = FAIL_ERRNO.load(Ordering::SeqCst);
        set_errno(e);
        return Some(e);
    }
    None
}

fn set_errno(e: i32) {
    // SAFETY: [V2] `__errno_location` returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e };
}

/// Counts a resource created (`+1`) or released (`-1`).
pub(crate) fn track(r: Resource, delta: isize) {
    LIVE[r.index()].fetch_add(delta, Ordering::SeqCst);
}

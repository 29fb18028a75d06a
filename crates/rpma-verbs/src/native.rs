//! Native RDMA Flush and Atomic Write: run-time detection, the policy that forbids their
//! emulation, and counters of the work requests posted either way.
//!
//! ## Detection (librpma 1.3's rules, decided at run time)
//! librpma 1.3 decides at *compile time* whether its libibverbs knows the native verbs
//! (`NATIVE_FLUSH_SUPPORTED`, `NATIVE_ATOMIC_WRITE_SUPPORTED`), then at run time:
//! 1. a peer supports native flush when the device's `device_cap_flags_ex` has both
//!    `IB_UVERBS_DEVICE_FLUSH_GLOBAL` and `IB_UVERBS_DEVICE_FLUSH_PERSISTENT` (bits 38, 39), and
//!    native atomic write when it has `IB_UVERBS_DEVICE_ATOMIC_WRITE` (bit 40);
//! 2. its QPs are then created with `IBV_QP_EX_WITH_FLUSH` / `IBV_QP_EX_WITH_ATOMIC_WRITE`, and
//!    regions registered for a flush usage get `IBV_ACCESS_FLUSH_GLOBAL` /
//!    `IBV_ACCESS_FLUSH_PERSISTENT` instead of `IBV_ACCESS_REMOTE_READ`;
//! 3. an operation goes native when the QP's `wr_flush` / `wr_atomic_write` function pointer
//!    is set, else it is emulated (flush: an 8-byte RDMA Read after the writes; atomic write: a
//!    fenced inline 8-byte RDMA Write).
//!
//! rpma-verbs replaces the compile-time half with a run-time probe, so that one binary takes
//! the native paths whether it was built against rdma-core 44 headers (which have neither
//! `ibv_wr_flush` nor the flush bits) or 56 headers, and whichever rdma-core the process loads:
//! when the kernel reports a capability bit, it creates one throw-away RC QP on the device with
//! the corresponding send-ops flag. A provider that does not know the flag rejects the QP
//! (rdma-core before 45 for `IBV_QP_EX_WITH_FLUSH`), and a provider that accepts it has the
//! function pointer in its `ibv_qp_ex` (the struct only ever grows at its end, so `wr_flush` is
//! the pointer right after `wr_atomic_write`, checked against the 56 headers when built with
//! them). The answer is kept per device name for the life of the process. The kernel bits alone
//! are not enough: rdma-core 44 on a 6.2+ kernel sees them but cannot post the verbs.
//!
//! A protection domain takes its native flags from this probe, never from the capabilities it is
//! handed (`Transport::alloc_pd` is public: safe code may pass any): those may turn a native verb
//! off (the PD then emulates it), never on where the probe did not find it.
//!
//! Rule 3 also holds per connection: a QP whose function pointer is unexpectedly null falls
//! back to the emulation, as in librpma (and is counted as emulated).
//!
//! ## Policy: native only
//! [`set_native_only`] (or `RPMA_VERBS_NATIVE_ONLY=flush,atomic_write` in the environment, read
//! at the first device lookup) makes an operation that would be emulated fail with `Unsupported`
//! instead, with a message naming the device and what it lacks: for a caller to whom the
//! emulation's semantics are not enough (e.g. an atomic write that must be one IBTA Atomic
//! Write), and for tests that must prove the native path ran.
//!
//! ## Persistent flushes
//! On a QP with native flush a persistent flush is native `IBV_FLUSH_PERSISTENT`, as in
//! librpma 1.3, unless the process chose [`PersistentFlush::Read`] ([`set_persistent_flush`],
//! `RPMA_VERBS_PERSISTENT_FLUSH=read`); docs/native-ops.md, "The persistent flush rule".
//!
//! ## Counters
//! [`op_counts`] counts the flushes and atomic writes this process posted, native and emulated.
//! With `RPMA_VERBS_OP_COUNTS=<file>` in the environment, each process that looked up a device
//! appends one line with its counts to that file when it exits (`scripts/test-verbs.sh` sums
//! them up and prints `native flush: N`, `native atomic write: N`).

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rdma_sys as ffi;

/// `IBV_QP_EX_WITH_FLUSH` (rdma-core 45+; not in the 44 headers).
pub(crate) const IBV_QP_EX_WITH_FLUSH: u64 = 1 << 11;
/// `IBV_QP_EX_WITH_ATOMIC_WRITE`.
pub(crate) const IBV_QP_EX_WITH_ATOMIC_WRITE: u64 = 1 << 12;

// The device's bits in `device_cap_flags_ex` (detection, rule 1 above).
const IB_UVERBS_DEVICE_FLUSH_GLOBAL: u64 = 1 << 38;
const IB_UVERBS_DEVICE_FLUSH_PERSISTENT: u64 = 1 << 39;
const IB_UVERBS_DEVICE_ATOMIC_WRITE: u64 = 1 << 40;

/// `ibv_qp_ex::wr_flush` (rdma-core 45+).
pub(crate) type WrFlushFn = unsafe extern "C" fn(*mut ffi::ibv_qp_ex, u32, u64, usize, u8, u8);

/// The offset of `wr_flush` in `struct ibv_qp_ex`: right after `wr_atomic_write`, its last
/// member in rdma-core 44.
pub(crate) const WR_FLUSH_OFFSET: usize = std::mem::offset_of!(ffi::ibv_qp_ex, wr_atomic_write) + size_of::<usize>();

#[cfg(rpma_native_flush)]
const _: () = assert!(WR_FLUSH_OFFSET == std::mem::offset_of!(ffi::ibv_qp_ex, wr_flush));
#[cfg(not(rpma_native_flush))]
const _: () = assert!(WR_FLUSH_OFFSET == size_of::<ffi::ibv_qp_ex>());

/// `wr_flush` of an extended QP created with `IBV_QP_EX_WITH_FLUSH`.
///
/// # Safety
/// `qpx` is a live extended QP whose provider accepted `IBV_QP_EX_WITH_FLUSH` (so its
/// `ibv_qp_ex` has the member, rdma-core 45+).
pub(crate) unsafe fn wr_flush(qpx: *mut ffi::ibv_qp_ex) -> Option<WrFlushFn> {
    // SAFETY: [V2] per the contract the struct has a function pointer (or null) at this offset;
    // `Option<fn>` has the layout of a nullable C function pointer.
    unsafe { qpx.cast::<u8>().add(WR_FLUSH_OFFSET).cast::<Option<WrFlushFn>>().read() }
}

/// What the provider of a device accepts, given its kernel bits: (native flush, native atomic
/// write).
fn provider_support(ctx: *mut ffi::ibv_context, name: &str, flush: bool, atomic_write: bool) -> (bool, bool) {
    let v = (flush && probe(ctx, IBV_QP_EX_WITH_FLUSH), atomic_write && probe(ctx, IBV_QP_EX_WITH_ATOMIC_WRITE));
    rpma_core::rpma_log!(
        Info,
        "{name}: native flush {}, native atomic write {} (device bits: flush {flush}, atomic write {atomic_write}; \
         provider probed)",
        v.0,
        v.1
    );
    v
}

/// Whether the provider accepts an RC QP with `send_op` in its send-ops flags and fills in the
/// matching function pointer (crate::probe).
fn probe(ctx: *mut ffi::ibv_context, send_op: u64) -> bool {
    crate::probe::probe_qp(
        ctx,
        |a| {
            a.comp_mask |= ffi::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.0;
            a.send_ops_flags = u64::from(ffi::ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_RDMA_WRITE.0) | send_op;
        },
        |qp| {
            // SAFETY: [V1] a QP just created with send-ops flags, so an extended QP; `wr_flush` is
            // read only after the provider accepted IBV_QP_EX_WITH_FLUSH.
            unsafe {
                let qpx = ffi::ibv_qp_to_qp_ex(qp);
                !qpx.is_null()
                    && if send_op == IBV_QP_EX_WITH_FLUSH {
                        wr_flush(qpx).is_some()
                    } else {
                        (*qpx).wr_atomic_write.is_some()
                    }
            }
        },
    )
}

/// (native flush, native atomic write) of the device `name` (context `ctx`): its kernel bits
/// (`device_cap_flags_ex`, asked for with `cap_flags_ex` on the device's first call) confirmed by
/// the provider. Found once per device and kept for the life of the process, so every caller
/// (the capability query, every protection domain) has the same answer; nothing a caller passes
/// can widen it, and it alone lets a queue pair be created with `IBV_QP_EX_WITH_FLUSH`, whose
/// `wr_flush` is then read ([`wr_flush`]).
///
/// # Errors
/// As `cap_flags_ex` (the device query); nothing is kept then.
pub(crate) fn detect(
    ctx: *mut ffi::ibv_context,
    name: &str,
    cap_flags_ex: impl FnOnce() -> rpma_core::Result<u64>,
) -> rpma_core::Result<(bool, bool)> {
    static CACHE: OnceLock<Mutex<HashMap<String, (bool, bool)>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(v) = cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(name) {
        return Ok(*v);
    }
    let flags = cap_flags_ex()?;
    let flush = flags & IB_UVERBS_DEVICE_FLUSH_GLOBAL != 0 && flags & IB_UVERBS_DEVICE_FLUSH_PERSISTENT != 0;
    let aw = flags & IB_UVERBS_DEVICE_ATOMIC_WRITE != 0;
    let v = if flush || aw { provider_support(ctx, name, flush, aw) } else { (false, false) };
    Ok(*cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner).entry(name.to_owned()).or_insert(v))
}

// ------------------------------------------------------------------ policy

static ONLY_FLUSH: AtomicBool = AtomicBool::new(false);
static ONLY_ATOMIC_WRITE: AtomicBool = AtomicBool::new(false);

/// Which operations must not be emulated: see [`set_native_only`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NativeOnly {
    /// A flush on a device without native flush fails with `Unsupported` (no RDMA Read emulation).
    pub flush: bool,
    /// An atomic write on a device without native atomic write fails with `Unsupported` (no fenced
    /// inline write).
    pub atomic_write: bool,
}

/// Sets, for the whole process, which operations must be native: such an operation on a
/// connection whose device lacks the native verb fails with `Unsupported` at post time, naming the
/// device, instead of being emulated. Default: none (librpma's behaviour). The environment
/// variable `RPMA_VERBS_NATIVE_ONLY` (`flush`, `atomic_write`, comma-separated) sets it at the
/// first device lookup; a later call overrides it.
pub fn set_native_only(only: NativeOnly) {
    init_env();
    ONLY_FLUSH.store(only.flush, Ordering::Relaxed);
    ONLY_ATOMIC_WRITE.store(only.atomic_write, Ordering::Relaxed);
}

/// The current policy, see [`set_native_only`].
#[must_use]
pub fn native_only() -> NativeOnly {
    init_env();
    NativeOnly { flush: ONLY_FLUSH.load(Ordering::Relaxed), atomic_write: ONLY_ATOMIC_WRITE.load(Ordering::Relaxed) }
}

/// How a persistent flush goes on a connection whose QP has native flush (`wr_flush`): see
/// [`set_persistent_flush`] and docs/native-ops.md, "The persistent flush rule".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum PersistentFlush {
    /// Native `IBV_FLUSH_PERSISTENT` (librpma 1.3's rule; the default). The target region must
    /// have been registered with `IBV_ACCESS_FLUSH_PERSISTENT`, which the kernel grants on
    /// persistent memory only: into a region on DRAM the flush completes with a remote access
    /// error (`IBV_WC_REM_ACCESS_ERR`), never a silent success.
    #[default]
    Native,
    /// An 8-byte RDMA Read after the writes (librpma's Appliance Persistency Method), as on a
    /// device without native flush: persistent only where the target's configuration says
    /// writes go straight to pmem (`direct_write_to_pmem`, checked by rpma-core). An explicit
    /// opt-in, for targets registered without `IBV_ACCESS_FLUSH_PERSISTENT` (DRAM, librpma 1.2).
    Read,
}

static PERSISTENT_READ: AtomicBool = AtomicBool::new(false);

/// Sets, for the whole process, how persistent flushes go on connections with native flush
/// (default [`PersistentFlush::Native`]). The environment variable
/// `RPMA_VERBS_PERSISTENT_FLUSH` (`native` or `read`) sets it at the first device lookup; a later
/// call overrides it. On a connection without native flush every flush is the RDMA Read.
pub fn set_persistent_flush(how: PersistentFlush) {
    init_env();
    PERSISTENT_READ.store(how == PersistentFlush::Read, Ordering::Relaxed);
}

/// The current rule for persistent flushes, see [`set_persistent_flush`].
#[must_use]
pub fn persistent_flush() -> PersistentFlush {
    init_env();
    if PERSISTENT_READ.load(Ordering::Relaxed) {
        PersistentFlush::Read
    } else {
        PersistentFlush::Native
    }
}

/// Whether persistent flushes on a native-flush QP are RDMA Reads (read without initialising
/// the policy: every device lookup did).
#[inline(always)]
pub(crate) fn persistent_read() -> bool {
    PERSISTENT_READ.load(Ordering::Relaxed)
}

/// Whether flushes must be native (the policy of [`native_only`], read without initialising
/// it: every device lookup did, and a queue pair needs a device).
#[inline(always)]
pub(crate) fn only_flush() -> bool {
    ONLY_FLUSH.load(Ordering::Relaxed)
}

/// Reads `RPMA_VERBS_NATIVE_ONLY` and `RPMA_VERBS_OP_COUNTS` once (called by every device
/// lookup and by the policy functions).
pub(crate) fn init_env() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        if let Ok(v) = std::env::var("RPMA_VERBS_NATIVE_ONLY") {
            for w in v.split(',').map(str::trim) {
                match w {
                    "flush" => ONLY_FLUSH.store(true, Ordering::Relaxed),
                    "atomic_write" => ONLY_ATOMIC_WRITE.store(true, Ordering::Relaxed),
                    "" => {}
                    _ => rpma_core::rpma_log!(Warning, "RPMA_VERBS_NATIVE_ONLY: unknown operation '{w}' ignored"),
                }
            }
        }
        if let Ok(v) = std::env::var("RPMA_VERBS_PERSISTENT_FLUSH") {
            match v.trim() {
                "read" => PERSISTENT_READ.store(true, Ordering::Relaxed),
                "native" | "" => PERSISTENT_READ.store(false, Ordering::Relaxed),
                w => rpma_core::rpma_log!(
                    Warning,
                    "RPMA_VERBS_PERSISTENT_FLUSH: unknown rule '{w}' ignored (native, read)"
                ),
            }
        }
        if std::env::var_os("RPMA_VERBS_OP_COUNTS").is_some() {
            // SAFETY: [V2] registers a plain `extern "C" fn()` that only reads atomics and the
            // environment and writes a file.
            unsafe {
                libc::atexit(report_at_exit);
            }
        }
    });
}

// ------------------------------------------------------------------ counters

/// One thread's counters, indexed by [`Counted`]: written only by their thread (a plain load
/// and store, no atomic read-modify-write on the data path), read by [`op_counts`].
#[derive(Default)]
struct ThreadCounts([AtomicU64; 6]);

/// Every thread's counters (kept after the thread ends: the counts are the process's).
static THREADS: Mutex<Vec<Arc<ThreadCounts>>> = Mutex::new(Vec::new());
/// Counts of threads whose thread-local storage is already gone.
static LATE: ThreadCounts = ThreadCounts([const { AtomicU64::new(0) }; 6]);

thread_local! {
    static MINE: Arc<ThreadCounts> = {
        let c = Arc::new(ThreadCounts::default());
        THREADS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(Arc::clone(&c));
        c
    };
}

/// Flushes and atomic writes this process posted (successfully) through rpma-verbs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpCounts {
    /// Native flushes (`ibv_wr_flush`), to visibility or persistence.
    pub flush_native: u64,
    /// Of `flush_native`, the persistent ones (`IBV_FLUSH_PERSISTENT`).
    pub flush_persistent_native: u64,
    /// Flushes emulated (an 8-byte RDMA Read) because the device or QP has no native flush.
    pub flush_emulated: u64,
    /// Persistent flushes on a connection with native flush posted as RDMA Reads because the
    /// process chose [`PersistentFlush::Read`], counted apart from `flush_emulated`.
    pub flush_persistent_read: u64,
    /// Native atomic writes (`ibv_wr_atomic_write`).
    pub atomic_write_native: u64,
    /// Emulated atomic writes (a fenced inline 8-byte RDMA Write).
    pub atomic_write_emulated: u64,
}

/// The counts so far, see [`OpCounts`].
#[must_use]
pub fn op_counts() -> OpCounts {
    let mut sum = [0u64; 6];
    let threads = THREADS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    for t in threads.iter().map(|t| &**t).chain(std::iter::once(&LATE)) {
        for (s, c) in sum.iter_mut().zip(&t.0) {
            *s += c.load(Ordering::Acquire);
        }
    }
    OpCounts {
        flush_native: sum[Counted::FlushNative as usize] + sum[Counted::FlushPersistentNative as usize],
        flush_persistent_native: sum[Counted::FlushPersistentNative as usize],
        flush_emulated: sum[Counted::FlushEmulated as usize],
        flush_persistent_read: sum[Counted::FlushPersistentRead as usize],
        atomic_write_native: sum[Counted::AtomicWriteNative as usize],
        atomic_write_emulated: sum[Counted::AtomicWriteEmulated as usize],
    }
}

/// Which counter a posted operation adds to.
#[derive(Clone, Copy)]
#[repr(usize)]
pub(crate) enum Counted {
    FlushNative,
    FlushEmulated,
    FlushPersistentRead,
    AtomicWriteNative,
    AtomicWriteEmulated,
    FlushPersistentNative,
}

#[inline]
pub(crate) fn count(c: Counted) {
    let i = c as usize;
    let counted = MINE.try_with(|t| {
        let a = &t.0[i];
        a.store(a.load(Ordering::Relaxed) + 1, Ordering::Release);
    });
    if counted.is_err() {
        LATE.0[i].fetch_add(1, Ordering::AcqRel);
    }
}

extern "C" fn report_at_exit() {
    let Some(path) = std::env::var_os("RPMA_VERBS_OP_COUNTS") else {
        return;
    };
    let c = op_counts();
    let exe = std::env::current_exe().ok().and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    let line = format!(
        "pid={} exe={} flush_native={} flush_persistent_native={} flush_emulated={} flush_persistent_read={} \
         atomic_write_native={} atomic_write_emulated={}\n",
        std::process::id(),
        exe.unwrap_or_default(),
        c.flush_native,
        c.flush_persistent_native,
        c.flush_emulated,
        c.flush_persistent_read,
        c.atomic_write_native,
        c.atomic_write_emulated
    );
    // one write(2) of one short line with O_APPEND: lines of concurrent processes do not mix
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = f.write_all(line.as_bytes());
    }
}

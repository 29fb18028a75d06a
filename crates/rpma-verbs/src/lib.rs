//! # rpma-verbs: the RDMA transport of rpma-rs over libibverbs and librdmacm
//!
//! [`Verbs`] implements rpma-core's [`Transport`] on real RDMA devices (InfiniBand, RoCE, iWARP,
//! Soft-RoCE), doing on the wire what librpma 1.3 does (docs/semantics.md): RDMA CM connection
//! setup with private data on both sides, one CM event channel per connection, CQs with their
//! completion channels (per CQ or shared), optional receive CQ and shared receive queue, and
//! the operations mapped to work requests as librpma maps them (atomic write natively when the
//! device reports IBTA 1.5 Atomic Write, else a fenced 8-byte inline write; flush natively when
//! the provider has `ibv_wr_flush` and the device reports both flush types, else an 8-byte
//! RDMA Read after the writes, the Appliance Persistency Method).
//!
//! ## Why `rdma-sys`
//! `rdma-sys` generates complete bindings from the system headers of rdma-core (verbs *and*
//! RDMA CM, including shared receive queues, extended QPs and `ibv_advise_mr`) and wraps the
//! static-inline verbs (`ibv_post_send`, `ibv_poll_cq`, `ibv_req_notify_cq`, ...). The safe
//! `sideway` crate lacks shared receive queues, which librpma's API exposes, so this crate
//! writes its own thin safe layer instead. All `unsafe` of rpma-rs lives here; every block says
//! why it is sound, naming the rule of docs/memory.md it relies on (`// SAFETY: [V1] ...`).
//!
//! ## Ownership and lifetimes
//! - A device context comes from librdmacm, which opens it for the first CM id bound to the
//!   device and closes it once the device is gone (hot removal, driver unload) and no CM id
//!   refers to it any more (`ucma_get_device`/`ucma_put_device` in rdma-core's `cma.c`). A
//!   [`VerbsDevice`] therefore keeps the CM id of its lookup (bound to the device) alive in an
//!   `Arc`, and every object made on the device holds the device handle through its PD: the
//!   context stays open as long as any of them exists (rule V1 of docs/memory.md). librpma's
//!   `rpma_utils_get_ibv_context` destroys that id at once and relies on the context outliving
//!   it, which is only true while the device is not removed.
//! - A [`VerbsPd`] owns the protection domain; every memory region, SRQ, listener and QP holds
//!   an `Arc` of it, so the PD is deallocated only after all of them.
//! - A [`VerbsMr`] owns its bytes (heap, page-aligned, or a shared file mapping) and
//!   deregisters the region before freeing them. If `ibv_dereg_mr` fails the device may still
//!   access them: they are leaked (never freed or unmapped), the error is returned by `dereg`
//!   (logged by a drop) and the leak logged and counted ([`leaks`]). A region used by a work
//!   request stays registered and allocated until the request is retired (its completion, or a
//!   later signaled completion of the same send queue, is polled, as the hardware retires
//!   them): each queue counts its requests in flight per region in a pin it shares with the
//!   region, written only by the queue's owner thread (no atomic read-modify-write, no
//!   reference count per request); a region dropped while a pin counts requests is parked and
//!   deregistered once they are retired or their QP destroyed (module `pin`, rules V4 and V6
//!   of docs/memory.md). A QP is destroyed with `ibv_destroy_qp` (whose result
//!   `rdma_destroy_qp` would ignore); if that fails, the QP may still run its work requests, so
//!   the regions it pins, its CQs and channels, CM id, event channel, SRQ and PD (hence the
//!   device context) are leaked, never released, and the error is returned and reported as
//!   above.
//! - A QP holds an `Arc` of its SRQ; its CQs and completion channels are destroyed after the QP
//!   and before its CM identifier's event channel, in the order the verbs API requires.
//!
//! ## Thread safety
//! libibverbs and librdmacm are thread-safe. A connection's queue pair is `Send` but not `Sync`
//! (as rpma-core's `Conn`): its slot rings, pins and chain buffers belong to the thread holding
//! it (rule V6), so posting and polling take no lock, allocate nothing in the steady state and
//! touch no reference count; a chain of work requests goes down with one doorbell. A shared
//! receive queue's ring is shared by its connections, behind its lock. Posting beyond the
//! configured `sq_size`/`rq_size` fails with `ENOMEM` as the mock does, whatever size the
//! provider rounded the queue up to.
//!
//! ## Fork
//! The first device lookup makes `fork()` safe for registered memory (rule V5 of
//! docs/memory.md): nothing to do if `ibv_is_fork_initialized()` says the kernel copies pinned
//! pages on fork (`IBV_FORK_UNNEEDED`, Linux 5.13+) or fork support is on already
//! (`RDMAV_FORK_SAFE=1`, or the application called `ibv_fork_init`); else it calls
//! `ibv_fork_init()`. [`fork_safety`] tells which applies. After `fork()` the parent keeps using
//! all its rpma objects; the child must neither use nor drop any of them (it should `exec` or
//! `_exit`); it sees its own copy of private registered memory (`Unneeded`) or none of it
//! (`Enabled`: an access faults), while shared file mappings stay shared. See docs/memory.md,
//! "Fork".
//!
//! ## Logging
//! Every message goes through rpma-core's log module (`rpma_log!`), so librpma's threshold and
//! log function (`rpma_core::logging`) govern them with the rest of rpma-rs.
//!
//! ## Non-blocking fds
//! As with librpma, set `O_NONBLOCK` on an endpoint's, connection's or completion channel's fd
//! to make the corresponding wait return `NoEvent`/`NoCompletion` instead of blocking.
//!
//! ## Capabilities
//! Native atomic write: `IB_UVERBS_DEVICE_ATOMIC_WRITE` in the extended device capabilities and
//! a provider that accepts `IBV_QP_EX_WITH_ATOMIC_WRITE`. Native flush: both
//! `IB_UVERBS_DEVICE_FLUSH_*` bits and a provider that accepts `IBV_QP_EX_WITH_FLUSH` (rdma-core
//! 45+), probed at run time whatever rdma-core headers this crate was built with; see
//! [`set_native_only`] (no emulation), [`op_counts`] (native and emulated operations posted) and
//! docs/native-ops.md. ODP: the device's RC ODP
//! read and write support. `advise_mr` is reported where ODP is (prefetching only applies to
//! on-demand-paged regions); elsewhere `ibv_advise_mr` fails with `EOPNOTSUPP` → `Unsupported`.
//! `max_inline_data` is probed once per device (the largest inline size a QP can be created
//! with; `ibv_query_device` does not report it); `max_sge` and `max_sge_rd` are the device's.
//!
//! ## Fault injection (tests only)
//! With feature `fault-injection` (off by default; the facade's `verbs` feature does not enable
//! it, its `verbs-fault-injection` feature does) every provider call that can fail goes through
//! a check that a test can arm to fail the n-th call, and live-resource counters are kept: see
//! the `faults` module. Without the feature the call sites are the plain C calls.

// The slot rings index by masked numbers of up to 2^32 slots and `Wc` is laid out as a 64-bit
// `struct ibv_wc`: 64-bit targets only.
#[cfg(not(target_pointer_width = "64"))]
compile_error!("rpma-verbs builds for 64-bit targets only");

mod cm;
#[cfg(feature = "fault-injection")]
pub mod faults;
mod inline;
mod leak;
mod mr;
mod native;
mod pin;
mod probe;
mod provider;
mod ring;
mod sys;

use std::ffi::CStr;
use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

use rdma_sys as ffi;
use rpma_core::transport::{QueueConfig, Transport};
use rpma_core::{Capabilities, ContextType, Error, Result, Usage};
use rpma_mem::Memory;

use crate::sys::{call, release, track};

pub use cm::{CqEvents, SharedCqEvents, VerbsCq, VerbsListener, VerbsQp, VerbsSrq};
pub use leak::{leaks, Leaks};
pub use mr::VerbsMr;
pub use native::{
    native_only, op_counts, persistent_flush, set_native_only, set_persistent_flush, NativeOnly, OpCounts,
    PersistentFlush,
};

/// The inline data size of every QP (librpma's `RPMA_MAX_INLINE_DATA`): room for the emulated
/// atomic write.
pub(crate) const MAX_INLINE_DATA: u32 = 8;

/// The libibverbs + librdmacm transport. A unit handle: cheap to clone, nothing to set up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Verbs;

impl Verbs {
    /// The transport.
    #[must_use]
    pub const fn new() -> Self {
        Self
    }
}

/// What `fork()` does to the memory this process registered (`ibv_is_fork_initialized`), see
/// the crate docs, section "fork".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForkSafety {
    /// The kernel copies the pages pinned by registrations into the child at `fork()` (Linux
    /// 5.13 and later, `IBV_FORK_UNNEEDED`): the parent's registrations keep their pages; the
    /// child gets private copies of private memory (a shared mapping stays shared).
    Unneeded,
    /// `ibv_fork_init()` is in effect (`IBV_FORK_ENABLED`): registered ranges are not mapped in
    /// the child at all (`MADV_DONTFORK`); the parent's registrations keep their pages.
    Enabled,
    /// Neither (`IBV_FORK_DISABLED`): after `fork()`, the parent's first write to a registered
    /// page moves it to a new page the device does not see. Only when `ibv_fork_init()` could
    /// not be called in time (something registered memory before rpma-verbs' first lookup).
    Disabled,
}

/// The fork safety of the process now (`ibv_is_fork_initialized`).
#[must_use]
pub fn fork_safety() -> ForkSafety {
    // SAFETY: [V2] no arguments; it reads libibverbs' global state, under its own lock.
    match unsafe { ffi::ibv_is_fork_initialized() } {
        ffi::IBV_FORK_UNNEEDED => ForkSafety::Unneeded,
        ffi::IBV_FORK_ENABLED => ForkSafety::Enabled,
        _ => ForkSafety::Disabled,
    }
}

/// Makes `fork()` safe for registered memory, once per process, before rpma-verbs' first
/// registration (rule V5): nothing if the kernel copies pinned pages on fork or fork support is
/// already on (`RDMAV_FORK_SAFE`, or the application called `ibv_fork_init`); else
/// `ibv_fork_init()`. Called by every device lookup (a registration needs a device).
pub(crate) fn fork_setup() -> ForkSafety {
    static DONE: OnceLock<ForkSafety> = OnceLock::new();
    *DONE.get_or_init(|| {
        if fork_safety() != ForkSafety::Disabled {
            return fork_safety();
        }
        // SAFETY: [V2] no arguments; [V5] called before this crate registers any memory.
        let r = unsafe { ffi::ibv_fork_init() };
        if r != 0 {
            rpma_core::rpma_log!(
                Warning,
                "ibv_fork_init failed (errno {r}): memory registered before rpma-verbs' first device lookup; \
                 fork() is unsafe for registered memory in this process"
            );
        }
        fork_safety()
    })
}

/// A device context, as librdmacm opened it, kept open by the CM id of the lookup.
///
/// librdmacm owns the context: it opens it when the first CM id binds to the device and closes
/// it when the device was removed and the last CM id bound to it is destroyed. The handle
/// therefore holds (in an `Arc` shared by its clones) the CM id its lookup bound to the device;
/// every PD holds a device handle, and every region, CQ, SRQ, listener and QP holds its PD, so
/// the context outlives all of them (rule V1 of docs/memory.md).
#[derive(Clone)]
pub struct VerbsDevice {
    ctx: NonNull<ffi::ibv_context>,
    port: u8,
    /// librdmacm's reference on the context: the CM id bound to this device by the lookup, or
    /// the device list the context was found in ([`VerbsDevice::from_rdma_cm_context`]).
    _anchor: Arc<Anchor>,
}

/// What keeps librdmacm's reference on a device context (held, never read).
#[allow(dead_code)]
enum Anchor {
    /// A CM id bound to the device (`ucma_get_device` on bind, `ucma_put_device` on destroy).
    Id(cm::CmId),
    /// A list from `rdma_get_devices` (a reference on every device in it until
    /// `rdma_free_devices`).
    List(cm::DeviceList),
}

// SAFETY: [V3] an `ibv_context` is thread-safe (libibverbs serialises what needs it); [V1] it
// stays open while `_anchor` lives. `Anchor` is only kept alive, never used.
unsafe impl Send for VerbsDevice {}
// SAFETY: [V3] as above; the handle is only read.
unsafe impl Sync for VerbsDevice {}

impl std::fmt::Debug for VerbsDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsDevice").field("name", &self.name()).field("port", &self.port).finish()
    }
}

impl PartialEq for VerbsDevice {
    fn eq(&self, other: &Self) -> bool {
        self.ctx == other.ctx
    }
}

impl VerbsDevice {
    /// The device name (e.g. `rxe0`, `mlx5_0`).
    #[must_use]
    pub fn name(&self) -> String {
        // SAFETY: [V1] the context stays open while `_anchor` (librdmacm's reference) lives.
        unsafe { context_name(self.ctx.as_ptr()) }
    }

    pub(crate) const fn ctx(&self) -> *mut ffi::ibv_context {
        self.ctx.as_ptr()
    }

    /// The `struct ibv_context *` librdmacm opened for the device (what librpma's
    /// `rpma_utils_get_ibv_context` hands out). It stays open while this handle, a clone of it
    /// or anything made on the device lives. A C program may use it with libibverbs (queries,
    /// its own objects) but must not close it.
    #[must_use]
    pub const fn as_raw(&self) -> *mut ffi::ibv_context {
        self.ctx.as_ptr()
    }

    /// The device of `ctx` if it is one of the contexts librdmacm opened (one of
    /// `rdma_get_devices`'s, as every context `rpma_utils_get_ibv_context` hands out is); `None`
    /// for any other pointer (e.g. a context a program opened itself with `ibv_open_device`,
    /// whose protection domains RDMA CM's queue pairs cannot use). `ctx` is compared with the
    /// list, never dereferenced unless it is in it. The handle keeps the list (librdmacm's
    /// reference on the context); its port is the device's first.
    ///
    /// # Errors
    /// `Provider` if librdmacm cannot list its devices.
    pub fn from_rdma_cm_context(ctx: *const std::ffi::c_void) -> Result<Option<Self>> {
        fork_setup();
        native::init_env();
        let list = cm::DeviceList::get()?;
        let Some(ctx) = list.iter().find(|c| std::ptr::eq(c.as_ptr().cast_const().cast(), ctx)) else {
            return Ok(None);
        };
        Ok(Some(Self { ctx, port: 1, _anchor: Arc::new(Anchor::List(list)) }))
    }

    fn is_iwarp(&self) -> bool {
        // SAFETY: [V1] see `name`.
        unsafe {
            let dev = (*self.ctx.as_ptr()).device;
            !dev.is_null() && (*dev).transport_type == ffi::ibv_transport_type::IBV_TRANSPORT_IWARP
        }
    }
}

/// The name of the device `ctx` was opened on (empty if it has none).
///
/// # Safety
/// `ctx` is an open device context (rule V1).
pub(crate) unsafe fn context_name(ctx: *mut ffi::ibv_context) -> String {
    // SAFETY: [V1] `ctx` is open (the caller's promise); `device` points to the device it was
    // opened on (kept by the open context) and `name` is a NUL-terminated array inside it.
    unsafe {
        let dev = (*ctx).device;
        if dev.is_null() {
            return String::new();
        }
        CStr::from_ptr((*dev).name.as_ptr()).to_string_lossy().into_owned()
    }
}

/// A protection domain on a device, plus the device's capabilities.
pub struct VerbsPd {
    pd: NonNull<ffi::ibv_pd>,
    dev: VerbsDevice,
    caps: Capabilities,
}

// SAFETY: [V3] a PD is only used as an argument of thread-safe verbs calls.
unsafe impl Send for VerbsPd {}
// SAFETY: [V3] as above.
unsafe impl Sync for VerbsPd {}

impl std::fmt::Debug for VerbsPd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsPd").field("dev", &self.dev).finish_non_exhaustive()
    }
}

impl Drop for VerbsPd {
    fn drop(&mut self) {
        // SAFETY: [V1] every object created in this PD holds an `Arc` of it, so none is left.
        let r = release!(Pd: "ibv_dealloc_pd", sys::errno(), unsafe { ffi::ibv_dealloc_pd(self.pd.as_ptr()) });
        if r != 0 {
            rpma_core::rpma_log!(Error, "ibv_dealloc_pd failed: errno {r}");
        }
    }
}

impl VerbsPd {
    pub(crate) const fn as_ptr(&self) -> *mut ffi::ibv_pd {
        self.pd.as_ptr()
    }

    pub(crate) const fn caps(&self) -> &Capabilities {
        &self.caps
    }

    pub(crate) const fn device(&self) -> &VerbsDevice {
        &self.dev
    }
}

impl Transport for Verbs {
    type Device = VerbsDevice;
    type Pd = VerbsPd;
    type Mr = VerbsMr;
    type Cq = VerbsCq;
    type Srq = VerbsSrq;
    type Listener = VerbsListener;
    type Qp = VerbsQp;

    fn name(&self) -> &'static str {
        "verbs"
    }

    fn lookup_device(&self, addr: &str, kind: ContextType) -> Result<VerbsDevice> {
        cm::lookup_device(addr, kind)
    }

    fn capabilities(&self, dev: &VerbsDevice) -> Result<Capabilities> {
        query_caps(dev)
    }

    fn device_name(&self, dev: &VerbsDevice) -> String {
        dev.name()
    }

    /// The PD's native flush and atomic write are the device's own (probed once per device,
    /// crate::native), narrowed by `caps` (`false` there: emulated), never widened; whether the
    /// device is iWARP is the device's. The rest of `caps` is taken as given.
    fn alloc_pd(&self, dev: &VerbsDevice, caps: &Capabilities) -> Result<VerbsPd> {
        let (flush, atomic_write) = native_support(dev)?;
        let mut caps = caps.clone();
        caps.native_flush &= flush;
        caps.native_atomic_write &= atomic_write;
        caps.iwarp = dev.is_iwarp();
        // SAFETY: [V1] the context is open while `dev` lives (see `VerbsDevice`); the PD keeps
        // a clone of `dev`.
        let pd = call!("ibv_alloc_pd", std::ptr::null_mut(), unsafe { ffi::ibv_alloc_pd(dev.ctx()) });
        // The errno as reported: rpma-core maps ENOMEM to OutOfMemory (as `rpma_peer_new`).
        let pd = NonNull::new(pd).ok_or_else(|| Error::provider("ibv_alloc_pd", sys::errno()))?;
        track!(Pd, 1);
        Ok(VerbsPd { pd, dev: dev.clone(), caps })
    }

    fn reg_mr(&self, pd: &Arc<VerbsPd>, memory: Memory, usage: Usage) -> Result<VerbsMr> {
        mr::reg_mr(pd, memory, usage)
    }

    fn create_srq(&self, pd: &Arc<VerbsPd>, rq_size: u32, rcq_size: u32) -> Result<VerbsSrq> {
        cm::create_srq(pd, rq_size, rcq_size)
    }

    fn listen(&self, pd: &Arc<VerbsPd>, addr: &str, port: &str) -> Result<VerbsListener> {
        cm::listen(pd, addr, port)
    }

    fn connect_request(
        &self,
        pd: &Arc<VerbsPd>,
        addr: &str,
        port: &str,
        cfg: &QueueConfig<'_, Self>,
    ) -> Result<VerbsQp> {
        cm::connect_request(pd, addr, port, cfg)
    }
}

/// `ibv_query_device_ex`.
fn query_device_ex(dev: &VerbsDevice) -> Result<ffi::ibv_device_attr_ex> {
    let mut attr = std::mem::MaybeUninit::<ffi::ibv_device_attr_ex>::zeroed();
    // SAFETY: [V2] the context is open; `attr` is a zeroed, writable attribute struct of the size the
    // wrapper passes on; a null input is allowed.
    let r = call!("ibv_query_device_ex", sys::errno(), unsafe { sys::query_device_ex(dev.ctx(), attr.as_mut_ptr()) });
    if r != 0 {
        return Err(Error::provider("ibv_query_device_ex", r.abs()));
    }
    // SAFETY: [V2] the struct was zero-initialised (a valid value for this plain C struct) and filled.
    Ok(unsafe { attr.assume_init() })
}

/// (native flush, native atomic write) of the device, as this crate probed it (crate::native).
fn native_support(dev: &VerbsDevice) -> Result<(bool, bool)> {
    native::detect(dev.ctx(), &dev.name(), || query_device_ex(dev).map(|a| a.device_cap_flags_ex))
}

/// `ibv_query_device_ex` + `ibv_query_port`, mapped to [`Capabilities`].
fn query_caps(dev: &VerbsDevice) -> Result<Capabilities> {
    let attr = query_device_ex(dev)?;
    let mut port = std::mem::MaybeUninit::<ffi::ibv_port_attr>::zeroed();
    // SAFETY: [V2] as above, for the port attributes of the port the CM bound the address to.
    let r = call!("ibv_query_port", sys::errno(), unsafe {
        ffi::___ibv_query_port(dev.ctx(), dev.port.max(1), port.as_mut_ptr())
    });
    if r != 0 {
        return Err(Error::provider("ibv_query_port", r.abs()));
    }
    // SAFETY: [V2] zero-initialised and filled by the provider.
    let port = unsafe { port.assume_init() };
    let flags = attr.device_cap_flags_ex;
    let odp_general = attr.odp_caps.general_caps & u64::from(ffi::ibv_odp_general_caps::IBV_ODP_SUPPORT.0) != 0;
    let rc_odp = attr.odp_caps.per_transport_caps.rc_odp_caps;
    let rw = ffi::ibv_odp_transport_cap_bits::IBV_ODP_SUPPORT_READ.0
        | ffi::ibv_odp_transport_cap_bits::IBV_ODP_SUPPORT_WRITE.0;
    let odp = odp_general && rc_odp & rw == rw;
    let mut caps = Capabilities::roce_defaults();
    (caps.native_flush, caps.native_atomic_write) = native::detect(dev.ctx(), &dev.name(), || Ok(flags))?;
    caps.odp = odp;
    caps.advise_mr = odp;
    caps.iwarp = dev.is_iwarp();
    caps.max_qp_wr = u32::try_from(attr.orig_attr.max_qp_wr).unwrap_or(0);
    caps.max_cqe = u32::try_from(attr.orig_attr.max_cqe).unwrap_or(0);
    caps.max_srq_wr = u32::try_from(attr.orig_attr.max_srq_wr).unwrap_or(0);
    caps.max_inline_data = inline::max_inline(dev.ctx(), &dev.name(), MAX_INLINE_DATA);
    caps.max_sge = u32::try_from(attr.orig_attr.max_sge).unwrap_or(1).max(1);
    caps.max_sge_rd = u32::try_from(attr.orig_attr.max_sge_rd).unwrap_or(0);
    if caps.max_sge_rd == 0 {
        caps.max_sge_rd = caps.max_sge;
    }
    caps.max_msg_size = u64::from(port.max_msg_sz);
    Ok(caps)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On the device of `RPMA_TEST_ADDR` (skipped without `RPMA_TEST_DEVICE`, as on a host
    /// without RDMA; scripts/test-verbs.sh runs it in the guest): a PD's native flush and atomic
    /// write are the device's own probe, narrowed by the capabilities it is given, never widened;
    /// whether the device is iWARP is the device's.
    #[test]
    fn alloc_pd_native_ops_are_the_probes_narrowed_never_widened() {
        let Some(name) = std::env::var("RPMA_TEST_DEVICE").ok().filter(|d| !d.is_empty()) else {
            eprintln!("skipped: RPMA_TEST_DEVICE unset (scripts/test-verbs.sh runs this on a device)");
            return;
        };
        let addr = std::env::var("RPMA_TEST_ADDR").expect("RPMA_TEST_DEVICE is set but RPMA_TEST_ADDR is not");
        let t = Verbs::new();
        let dev = t.lookup_device(&addr, ContextType::Local).expect("lookup of RPMA_TEST_ADDR");
        assert_eq!(dev.name(), name);
        let probed = t.capabilities(&dev).expect("capabilities");
        for (flush, atomic_write) in [(false, false), (true, false), (false, true), (true, true)] {
            let mut given = probed.clone();
            (given.native_flush, given.native_atomic_write, given.iwarp) = (flush, atomic_write, !probed.iwarp);
            let pd = t.alloc_pd(&dev, &given).expect("alloc_pd");
            let c = pd.caps();
            assert_eq!(c.native_flush, flush && probed.native_flush, "given {given:?}, probed {probed:?}");
            assert_eq!(c.native_atomic_write, atomic_write && probed.native_atomic_write, "given {given:?}");
            assert_eq!(c.iwarp, probed.iwarp);
        }
    }
}

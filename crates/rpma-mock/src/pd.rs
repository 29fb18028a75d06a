//! Protection domains and registrations: [`MockPd`] with its table of regions by rkey, and
//! [`MockMr`], a registered region's handle (`ibv_reg_mr`, `ibv_dereg_mr`). The region itself
//! (its bytes, access rights and copies) is `mem.rs`'s.
//!
//! Only regions a peer may reach are entered in the PD's rkey table; a local-only region is
//! held by its handle alone, which is what lets rpma-core hand out a plain `&mut [u8]` to it
//! (rule M3). Deregistering a file-mapped region (`rpma_mem::MapOptions`) syncs the whole
//! region to its file.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};

use rpma_core::transport::MrBackend;
use rpma_core::{Advice, Capabilities, Error, ErrorKind, Result, Usage};
use rpma_mem::{Memory, MemoryKind, VolatileSlice};

use crate::counters::{Kind, Live};
use crate::device::MockDevice;
use crate::durable::{is_persistent, Durable};
use crate::fabric::FabricInner;
use crate::mem::{quiesce, Access, MrShared, QUIESCE_LIMIT};
use crate::power::PowerModel;

/// The registrations of a protection domain by rkey; a connected QP holds its peer's table.
pub(crate) type MrTable = std::sync::RwLock<std::collections::BTreeMap<u32, Arc<MrShared>>>;

/// The mock's protection domain.
pub struct MockPd {
    pub(crate) fabric: Arc<FabricInner>,
    pub(crate) dev: MockDevice,
    pub(crate) caps: Capabilities,
    /// The registrations by rkey (an entry is removed when its region is deregistered).
    pub(crate) mrs: Arc<MrTable>,
    /// The boot of its node it was made in (the persistence model; 0 without it).
    boot: u64,
    _live: Live,
}

/// `ibv_alloc_pd`: a protection domain on `dev` of `fabric`.
pub(crate) fn alloc_pd(fabric: &Arc<FabricInner>, dev: &MockDevice, caps: &Capabilities) -> Result<MockPd> {
    // rpma-core maps the errno (ENOMEM → OutOfMemory, 0 → Other).
    fabric.faults.check("ibv_alloc_pd")?;
    // A new protection domain on a node whose power was cut boots it again.
    let boot = fabric.power.as_ref().map_or(0, |p| p.boot(dev.index));
    Ok(MockPd {
        fabric: Arc::clone(fabric),
        dev: dev.clone(),
        caps: caps.clone(),
        mrs: Arc::new(std::sync::RwLock::new(std::collections::BTreeMap::new())),
        boot,
        _live: fabric.live(Kind::Pd),
    })
}

impl MockPd {
    /// `Err` if the node's power was cut since the PD was made (the persistence model): `op`
    /// then refuses, as on a dead node.
    pub(crate) fn alive(&self, op: &'static str) -> Result<()> {
        match &self.fabric.power {
            Some(p) if p.dead(self.dev.index, self.boot) => Err(PowerModel::dead_error(op, &self.dev.name)),
            _ => Ok(()),
        }
    }
}

impl std::fmt::Debug for MockPd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockPd").field("dev", &self.dev.name).finish_non_exhaustive()
    }
}

/// A registered region of the mock: owns its bytes; dropping it deregisters it (remote accesses
/// by its rkey then fail with a remote access error). [`MrBackend::dereg`] gives the memory back
/// once no peer-side access that started before can still reach it (it waits for the copy in
/// progress), so it defers (`Ok(None)`) only if an access outlasts 30 s (a bound against a bug).
pub struct MockMr {
    shared: Option<Arc<MrShared>>,
    pd: Arc<MockPd>,
}

impl std::fmt::Debug for MockMr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockMr").field("addr", &self.shared().addr).field("len", &self.shared().len).finish()
    }
}

/// The `ibv_reg_mr` call(s) of a registration: as librpma
/// (docs/semantics.md#registration-and-on-demand-paging), a registration failing with `EOPNOTSUPP`
/// on an ODP-capable device is retried once with `IBV_ACCESS_ON_DEMAND` (the mock's regions behave
/// the same either way).
fn register(f: &FabricInner, odp_capable: bool) -> Result<()> {
    const EOPNOTSUPP: i32 = 95;
    match f.faults.check("ibv_reg_mr") {
        Err(e) if odp_capable && e.errno() == Some(EOPNOTSUPP) => f.faults.check("ibv_reg_mr"),
        r => r,
    }
}

pub(crate) fn reg_mr(pd: &Arc<MockPd>, memory: Memory, usage: Usage) -> Result<MockMr> {
    let f = &pd.fabric;
    register(f, pd.caps.odp)?;
    let len = memory.len();
    let base = f.next_addr(len);
    let addr = match memory.kind() {
        MemoryKind::Heap | MemoryKind::Vec | MemoryKind::Boxed => base + 16,
        // Page-aligned allocations and mappings: the base is page-aligned.
        _ => base,
    };
    let mut access = Access::of(usage, pd.caps.native_flush, pd.caps.iwarp);
    // The model covers the regions a peer can reach (a local-only region is its owner's alone,
    // lent as a plain slice, which the model's weak reference would forbid: rule M3).
    let model = f.power.as_ref().filter(|p| access.remote() && is_persistent(p.scope, &memory));
    access.fast_write &= model.is_none();
    let shared = Arc::new(MrShared {
        addr,
        len,
        rkey: f.next_num(),
        access,
        valid: AtomicBool::new(true),
        durable: model.map(|_| Durable::of(memory.volatile())),
        data: memory,
        _live: f.live(Kind::Mr),
    });
    if let Some(p) = model {
        p.add_region(pd.dev.index, &shared);
    }
    if access.remote() {
        pd.mrs.write().unwrap_or_else(PoisonError::into_inner).insert(shared.rkey, Arc::clone(&shared));
    }
    Ok(MockMr { shared: Some(shared), pd: Arc::clone(pd) })
}

impl MockMr {
    /// The region (present until deregistration).
    #[inline]
    pub(crate) fn shared(&self) -> &Arc<MrShared> {
        self.shared.as_ref().expect("region present until deregistered")
    }

    /// Takes the region out of the rkey table (once) and marks it invalid: no peer-side access
    /// starts on it any more. One that looked it up before still holds it (its own `Arc`).
    fn unpublish(&self, mr: &MrShared) {
        mr.valid.store(false, Ordering::SeqCst);
        // Also after a power cut, which made the region invalid but left it in the table (the
        // removal is idempotent; rkeys are never reused).
        if mr.access.remote() {
            self.pd.mrs.write().unwrap_or_else(PoisonError::into_inner).remove(&mr.rkey);
        }
    }
}

/// Syncs a file-mapped region to its file (deregistration).
fn persist_all(mr: &MrShared) -> Result<()> {
    mr.persist(0, mr.len).map_err(|e| {
        Error::provider("ibv_dereg_mr", e.errno().unwrap_or(5))
            .with_detail(&format!("syncing the region to its file: {e}"))
    })
}

impl Drop for MockMr {
    fn drop(&mut self) {
        // No wait here: a peer-side access still copying keeps the memory alive (its `Arc`),
        // which is then freed by whoever lets go last.
        if let Some(shared) = self.shared.take() {
            self.unpublish(&shared);
            if let Err(e) = persist_all(&shared) {
                rpma_core::rpma_log!(Error, "{e}");
            }
        }
    }
}

impl MrBackend for MockMr {
    fn addr(&self) -> u64 {
        self.shared().addr
    }

    #[inline]
    fn len(&self) -> usize {
        self.shared().len
    }

    fn rkey(&self) -> u32 {
        self.shared().rkey
    }

    fn memory(&self) -> VolatileSlice<'_> {
        self.shared().data.volatile()
    }

    fn memory_mut(&mut self) -> Option<&mut Memory> {
        // Rule M3: never while a peer may reach the bytes (nor while anyone else holds them).
        if self.shared().access.remote() {
            return None;
        }
        self.shared.as_mut().and_then(Arc::get_mut).map(|s| &mut s.data)
    }

    fn persist(&self, offset: usize, len: usize) -> Result<()> {
        if self.pd.fabric.sim.is_some() {
            // Before the write-back: a simulation may cut the node's power between a store and
            // its persist.
            crate::sim::Sched::point("persist");
        }
        let s = self.shared();
        s.make_durable(offset, len);
        s.persist(offset, len).map_err(|e| {
            Error::provider("msync", e.errno().unwrap_or(5)).with_detail(&format!("persisting the region's range: {e}"))
        })
    }

    fn advise(&self, offset: usize, len: usize, advice: Advice, flags: u32) -> Result<()> {
        if offset.checked_add(len).map_or(true, |end| end > self.shared().len) {
            return Err(Error::invalid_input("ibv_advise_mr", "range outside the region"));
        }
        self.pd.fabric.faults.check("ibv_advise_mr").map_err(|e| match e.errno() {
            Some(95) => Error::failed(ErrorKind::Unsupported, "ibv_advise_mr", 95),
            Some(e @ (14 | 22)) => Error::failed(ErrorKind::InvalidInput, "ibv_advise_mr", e),
            _ => e,
        })?;
        if !self.pd.caps.advise_mr {
            return Err(Error::new(ErrorKind::Unsupported, "ibv_advise_mr"));
        }
        if flags & !Advice::FLAG_FLUSH != 0 {
            return Err(Error::invalid_input("ibv_advise_mr", "unknown advise flags"));
        }
        if advice == Advice::PrefetchWrite && !self.shared().access.local_write {
            return Err(Error::invalid_input("ibv_advise_mr", "PREFETCH_WRITE needs a locally writable region"));
        }
        Ok(())
    }

    fn dereg(mut self) -> Result<Option<Memory>> {
        if self.pd.fabric.sim.is_some() {
            crate::sim::Sched::point("dereg");
        }
        let r = self.pd.fabric.faults.check("ibv_dereg_mr");
        let shared = self.shared.take().expect("region present until deregistered");
        self.unpublish(&shared);
        // No peer-side access can start now; wait for those that did before: the
        // memory comes back only once nothing of the mock can reach it, so a caller may free or
        // reuse it at once (rpma-capi's `rpma_mr_dereg` returns 0 then, rule C1). The file is
        // synced after the last write landed.
        let (w, data) = match quiesce(shared) {
            Ok(s) => (persist_all(&s), Some(s.data)),
            Err(s) => {
                rpma_core::rpma_log!(
                    Error,
                    "ibv_dereg_mr: a peer still reaches the region after {QUIESCE_LIMIT:?}; its memory is \
                     freed when the access ends"
                );
                (persist_all(&s), None)
            }
        };
        r.and(w)?;
        Ok(data)
    }
}

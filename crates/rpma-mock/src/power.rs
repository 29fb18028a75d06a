//! The persistence model: what each persistent region of a node would keep through a power cut,
//! and the cut itself (docs/persistence.md).
//!
//! Off by default: a fabric built without
//! [`MockFabricBuilder::persistent_memory`](crate::MockFabricBuilder::persistent_memory) has no
//! [`PowerModel`] and its data path does not look for one (the model's bookkeeping lives on the
//! cold paths: registration, connection setup, flushes at the responder, the owner's
//! [`persist`](rpma_core::MrLocal::persist), and the deferred mode's queues for crash points).
//!
//! With the model on, a *persistent* region ([`PersistentMemory`], `durable.rs`) keeps two states: what peers
//! and its owner see (its memory, where every write lands at once), and a **durable image**,
//! what would survive a power cut. Only these copy bytes into the image: a persistent flush
//! executed at the responder (native, or emulated by an RDMA Read: librpma's APM, which
//! rpma-core allows only towards a peer with `direct_write_to_pmem`) over the range it covers,
//! and the owner's persist call on a range. A write's completion, an atomic write and a flush
//! to visibility do not. A flush executes after the writes posted before it on its connection
//! (RC order, in either mode), so it makes those durable and not the ones posted after it.
//!
//! [`MockFabric::power_cut`](crate::MockFabric::power_cut) cuts a node (a mock device): its
//! connections are lost for their peers, its regions refuse every further access, its
//! protection domains can make nothing more (a new peer on the device is the node rebooted), and
//! each persistent region comes back as a fresh [`Memory`] holding the durable image, with the
//! bytes written and not made durable treated as [`Unflushed`] says.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use rpma_core::{Error, Result};
use rpma_mem::Memory;

use crate::device::MockDevice;
use crate::durable::{PersistentMemory, Unflushed};
use crate::event::Event;
use crate::mem::MrShared;

/// What a node's endpoints do when its power is cut: a queue pair loses its connection, a
/// listener stops taking requests. The model reaches them through this trait only, so it sits
/// below the queue pairs it cuts.
pub(crate) trait PowerLoss: Send + Sync {
    /// The node's power was cut.
    fn power_lost(&self);
}

const OP: &str = "MockFabric::power_cut";

/// A persistent region brought back by a power cut.
pub struct Recovered {
    rkey: u32,
    addr: u64,
    memory: Memory,
}

impl Recovered {
    /// The rkey the region had (its descriptor's, [`MrLocal::descriptor`](rpma_core::MrLocal::descriptor)).
    #[must_use]
    pub const fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The address the region was registered at.
    #[must_use]
    pub const fn addr(&self) -> u64 {
        self.addr
    }

    /// What the region holds after the cut.
    #[must_use]
    pub const fn memory(&self) -> &Memory {
        &self.memory
    }

    /// The memory, to register again on the rebooted node (a new peer on the same device).
    #[must_use]
    pub fn into_memory(self) -> Memory {
        self.memory
    }
}

impl fmt::Debug for Recovered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recovered")
            .field("rkey", &self.rkey)
            .field("addr", &self.addr)
            .field("len", &self.memory.len())
            .finish()
    }
}

/// What a power cut left: each persistent region of the node, in registration order.
#[derive(Debug)]
pub struct PowerCut {
    device: String,
    unflushed: Unflushed,
    regions: Vec<Recovered>,
}

impl PowerCut {
    /// The device (node) whose power was cut.
    #[must_use]
    pub fn device(&self) -> &str {
        &self.device
    }

    /// The policy the cut applied to bytes not made durable (with its seed if torn).
    #[must_use]
    pub const fn unflushed(&self) -> Unflushed {
        self.unflushed
    }

    /// The persistent regions the node had, in registration order.
    #[must_use]
    pub fn regions(&self) -> &[Recovered] {
        &self.regions
    }

    /// The region that had `rkey`, taken out of the report.
    pub fn take(&mut self, rkey: u32) -> Option<Memory> {
        let i = self.regions.iter().position(|r| r.rkey == rkey)?;
        Some(self.regions.remove(i).memory)
    }

    /// The regions, in registration order.
    #[must_use]
    pub fn into_regions(self) -> Vec<Recovered> {
        self.regions
    }
}

/// A node's objects the model must reach at a cut.
#[derive(Default)]
struct NodeState {
    /// Persistent regions, in registration order.
    regions: Vec<Weak<MrShared>>,
    /// Queue pairs made on the node.
    qps: Vec<Weak<dyn PowerLoss>>,
    /// Listening endpoints of the node.
    listeners: Vec<Weak<dyn PowerLoss>>,
    /// Incremented by every cut: a protection domain made before it is dead.
    boot: u64,
    /// Cut, and nothing made on it since.
    off: bool,
}

/// A power cut armed to happen right after an event of the deferred mode.
struct Arm {
    node: usize,
    /// The cut follows event number `after` (1-based; `u64::MAX`: only count).
    after: u64,
    /// The kinds of the events seen so far, in order (for the report).
    last: Option<Event>,
    /// The cut, once it happened.
    cut: Option<Result<PowerCut>>,
}

/// The persistence model of a fabric (present only when it is on).
pub(crate) struct PowerModel {
    pub(crate) scope: PersistentMemory,
    pub(crate) unflushed: Unflushed,
    nodes: Box<[Mutex<NodeState>]>,
    /// Events counted while armed.
    events: AtomicU64,
    /// Whether events are counted (one load on the deferred mode's paths when the model is on).
    armed: AtomicBool,
    arm: Mutex<Option<Arm>>,
}

impl PowerModel {
    pub(crate) fn new(scope: PersistentMemory, unflushed: Unflushed, nodes: usize) -> Self {
        Self {
            scope,
            unflushed,
            nodes: (0..nodes).map(|_| Mutex::new(NodeState::default())).collect(),
            events: AtomicU64::new(0),
            armed: AtomicBool::new(false),
            arm: Mutex::new(None),
        }
    }

    fn node(&self, index: usize) -> MutexGuard<'_, NodeState> {
        self.nodes[index].lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A protection domain is made on `node`: the node is on (booted again if it was cut).
    /// Returns its boot number.
    pub(crate) fn boot(&self, node: usize) -> u64 {
        let mut n = self.node(node);
        n.off = false;
        n.boot
    }

    /// Whether a protection domain made at `boot` on `node` died in a cut since.
    pub(crate) fn dead(&self, node: usize, boot: u64) -> bool {
        self.node(node).boot != boot
    }

    /// The error of an operation on a protection domain that died in a cut.
    pub(crate) fn dead_error(op: &'static str, device: &str) -> Error {
        Error::provider(op, 19).with_detail(&format!(
            "device {device} lost power (MockFabric::power_cut); make a new peer on it to use the rebooted node"
        ))
    }

    /// A persistent region registered on `node`.
    pub(crate) fn add_region(&self, node: usize, mr: &Arc<MrShared>) {
        let mut n = self.node(node);
        n.regions.retain(|w| w.strong_count() > 0);
        n.regions.push(Arc::downgrade(mr));
    }

    /// A queue pair made on `node`.
    pub(crate) fn add_qp(&self, node: usize, qp: Weak<dyn PowerLoss>) {
        let mut n = self.node(node);
        n.qps.retain(|w| w.strong_count() > 0);
        n.qps.push(qp);
    }

    /// A listening endpoint made on `node`.
    pub(crate) fn add_listener(&self, node: usize, l: Weak<dyn PowerLoss>) {
        let mut n = self.node(node);
        n.listeners.retain(|w| w.strong_count() > 0);
        n.listeners.push(l);
    }

    /// Cuts the power of `node` (named `device`) now, with the policy `unflushed`.
    pub(crate) fn cut(&self, node: usize, device: &str, unflushed: Unflushed) -> Result<PowerCut> {
        let (regions, qps, listeners) = {
            let mut n = self.node(node);
            if n.off {
                return Err(Error::invalid_input(
                    OP,
                    &format!(
                        "the power of device {device} is already cut: nothing was made on it since (a new peer \
                         on it reboots the node)"
                    ),
                ));
            }
            let regions: Vec<Arc<MrShared>> =
                n.regions.iter().filter_map(Weak::upgrade).filter(|mr| mr.valid.load(Ordering::Acquire)).collect();
            if regions.is_empty() {
                return Err(Error::invalid_input(
                    OP,
                    &format!(
                        "device {device} holds no persistent region (the model's persistent memory: {:?}, \
                         regions a peer can reach): nothing would survive the cut; to end its connections use \
                         MockQp::cut_link",
                        self.scope
                    ),
                ));
            }
            n.off = true;
            n.boot += 1;
            n.regions.clear();
            (regions, std::mem::take(&mut n.qps), std::mem::take(&mut n.listeners))
        };
        // Its endpoints take no more requests, and their addresses are free for the rebooted node.
        for l in listeners.iter().filter_map(Weak::upgrade) {
            l.power_lost();
        }
        let seed = unflushed.seed().unwrap_or(0);
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut out = Vec::with_capacity(regions.len());
        for mr in &regions {
            // No access starts on the region any more (every execution checks `valid`).
            mr.valid.store(false, Ordering::SeqCst);
            let bytes = mr.recover(unflushed, &mut rng);
            let memory = Memory::from_vec(bytes);
            out.push(Recovered { rkey: mr.rkey, addr: mr.addr, memory });
        }
        for qp in qps.iter().filter_map(Weak::upgrade) {
            qp.power_lost();
        }
        Ok(PowerCut { device: device.to_owned(), unflushed, regions: out })
    }

    /// Arms a cut of `node` right after event `after` (1-based), counting from now; `u64::MAX`
    /// only counts.
    pub(crate) fn arm(&self, node: usize, after: u64) {
        self.events.store(0, Ordering::SeqCst);
        *self.arm.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arm { node, after, last: None, cut: None });
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Ends the count: the events seen, the kind of the last, and the cut if it happened.
    pub(crate) fn disarm(&self) -> (u64, Option<Event>, Option<Result<PowerCut>>) {
        self.armed.store(false, Ordering::SeqCst);
        let arm = self.arm.lock().unwrap_or_else(PoisonError::into_inner).take();
        let n = self.events.load(Ordering::SeqCst);
        arm.map_or((n, None, None), |a| (n, a.last, a.cut))
    }

    /// An event happened (deferred mode; called with no lock of the mock held): counted while
    /// armed, and the armed cut made right after its event.
    pub(crate) fn event(&self, kind: Event, devices: &[MockDevice]) {
        if !self.armed.load(Ordering::Acquire) {
            return;
        }
        let n = self.events.fetch_add(1, Ordering::SeqCst) + 1;
        let fire = {
            let mut g = self.arm.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(a) = g.as_mut() else { return };
            if a.cut.is_some() {
                return;
            }
            a.last = Some(kind);
            (a.after == n).then_some(a.node)
        };
        if let Some(node) = fire {
            let cut = self.cut(node, devices[node].name(), self.unflushed);
            if let Some(a) = self.arm.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
                a.cut = Some(cut);
            }
        }
    }
}

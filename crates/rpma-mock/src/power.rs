//! The persistence model: what each persistent region of a node would keep through a power cut,
//! and the cut itself (docs/persistence.md).
//!
//! Off by default: a fabric built without [`MockFabricBuilder::persistent_memory`] has no
//! [`PowerModel`] and its data path does not look for one (the model's bookkeeping lives on the
//! cold paths: registration, connection setup, flushes at the responder, the owner's
//! [`persist`](rpma_core::MrLocal::persist), and the deferred mode's queues for crash points).
//!
//! With the model on, a *persistent* region ([`PersistentMemory`]) keeps two states: what peers
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
use rpma_mem::{Memory, MemoryKind, VolatileSlice};

use crate::mem::MrShared;
use crate::qp::{ListenerShared, QpShared};

/// The cache line the torn policy decides on.
pub const LINE: usize = 64;

const OP: &str = "MockFabric::power_cut";

/// Which registered regions the persistence model treats as persistent memory
/// ([`MockFabricBuilder::persistent_memory`](crate::MockFabricBuilder::persistent_memory)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PersistentMemory {
    /// Regions on a devdax mapping or a `MAP_SYNC` file mapping (what is persistent on a real
    /// node); any other memory is DRAM and comes back from a power cut as nothing.
    Mappings,
    /// Every region registered on the fabric, whatever its memory (a test's stand-in for pmem).
    All,
}

/// What a power cut does to bytes that were written (and maybe acknowledged) but not made
/// durable ([`MockFabricBuilder::unflushed`](crate::MockFabricBuilder::unflushed)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unflushed {
    /// All lost: a region comes back exactly as it was last made durable (the default, and the
    /// strictest: a missing flush always shows).
    Lost,
    /// All kept: a region comes back as its peers last saw it (a platform whose CPU caches and
    /// NIC buffers are inside the persistence domain, e.g. eADR).
    Kept,
    /// Torn: each 64-byte line ([`LINE`], by memory address) independently old (durable) or new
    /// (as last seen), drawn from `seed`, so the case replays; an aligned 8-byte write never
    /// tears (it lies inside one line).
    Torn {
        /// The seed of the draws (printed with every cut and every crash point).
        seed: u64,
    },
}

impl fmt::Display for Unflushed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Lost => f.write_str("unflushed bytes lost"),
            Self::Kept => f.write_str("unflushed bytes kept"),
            Self::Torn { seed } => write!(f, "unflushed bytes torn per 64-byte line, seed {seed:#x}"),
        }
    }
}

/// The most remote writes a region notes for the next RDMA Read (APM) before it notes their
/// envelope instead (a write-only stream stays bounded; docs/persistence.md).
const NOTED: usize = 1024;

/// The durable image of a persistent region, and the remote writes executed on it since the
/// last RDMA Read (what a read after them makes durable: APM).
pub(crate) struct Durable {
    state: Mutex<DurableState>,
}

struct DurableState {
    image: Box<[u8]>,
    /// `(offset, len)` of the remote writes since the last read, adjacent ones merged.
    noted: Vec<(usize, usize)>,
}

impl Durable {
    /// A region's image when it is registered: its bytes then (memory that held data before,
    /// e.g. a region brought back by a power cut, holds it durably).
    pub(crate) fn of(visible: VolatileSlice<'_>) -> Self {
        Self { state: Mutex::new(DurableState { image: visible.to_vec().into_boxed_slice(), noted: Vec::new() }) }
    }

    fn lock(&self) -> MutexGuard<'_, DurableState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Copies `[offset, offset + len)` of what is seen now into the image (clamped to the
    /// region: the caller checked the range).
    pub(crate) fn make_durable(&self, visible: VolatileSlice<'_>, offset: usize, len: usize) {
        copy_in(&mut self.lock().image, visible, offset, len);
    }

    /// A remote write of `[offset, offset + len)` executed.
    fn note_write(&self, offset: usize, len: usize) {
        let noted = &mut self.lock().noted;
        // Merged with the last range when it touches or overlaps it (a log's appends, a slot
        // written again).
        if let Some((o, l)) = noted.last_mut().filter(|(o, l)| offset <= *o + *l && *o <= offset + len) {
            let end = (*o + *l).max(offset + len);
            *o = (*o).min(offset);
            *l = end - *o;
        } else if noted.len() >= NOTED {
            let start = noted.iter().map(|r| r.0).min().unwrap_or(offset).min(offset);
            let end = noted.iter().map(|r| r.0 + r.1).max().unwrap_or(0).max(offset + len);
            noted.clear();
            noted.push((start, end - start));
        } else {
            noted.push((offset, len));
        }
    }

    /// An RDMA Read executed: the writes noted before it are durable (APM).
    fn read_after_writes(&self, visible: VolatileSlice<'_>) {
        let mut g = self.lock();
        let noted = std::mem::take(&mut g.noted);
        for (offset, len) in noted {
            copy_in(&mut g.image, visible, offset, len);
        }
    }

    /// What the region holds after a power cut under `unflushed`; `rng` draws the torn lines.
    fn recover(&self, visible: VolatileSlice<'_>, unflushed: Unflushed, rng: &mut fastrand::Rng) -> Vec<u8> {
        let image = &self.lock().image;
        match unflushed {
            Unflushed::Lost => image.to_vec(),
            Unflushed::Kept => visible.to_vec(),
            Unflushed::Torn { .. } => {
                let now = visible.to_vec();
                let mut out = image.to_vec();
                // Lines by memory address: the first may be shorter.
                let mut at = 0;
                let first = LINE - (visible.as_ptr() as usize % LINE);
                while at < out.len() {
                    let n = if at == 0 { first.min(out.len()) } else { LINE.min(out.len() - at) };
                    if rng.bool() {
                        out[at..at + n].copy_from_slice(&now[at..at + n]);
                    }
                    at += n;
                }
                out
            }
        }
    }
}

/// Copies `[offset, offset + len)` of `visible` into `image`, clamped to it.
fn copy_in(image: &mut [u8], visible: VolatileSlice<'_>, offset: usize, len: usize) {
    let end = offset.saturating_add(len).min(image.len());
    if offset < end {
        visible.read(offset, &mut image[offset..end]).expect("a range inside the region");
    }
}

/// Whether a region on `memory` is persistent under `scope`.
pub(crate) fn is_persistent(scope: PersistentMemory, memory: &Memory) -> bool {
    match scope {
        PersistentMemory::All => true,
        PersistentMemory::Mappings => memory.kind() == MemoryKind::DevDax || memory.is_map_sync(),
    }
}

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
    qps: Vec<Weak<QpShared>>,
    /// Listening endpoints of the node.
    listeners: Vec<Weak<ListenerShared>>,
    /// Incremented by every cut: a protection domain made before it is dead.
    boot: u64,
    /// Cut, and nothing made on it since.
    off: bool,
}

/// The kind of an event a crash point falls after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A work request was posted (it waits in its send queue).
    Post,
    /// A work request executed at its target (its bytes landed, or were read or flushed).
    Execute,
    /// A completion was queued to a completion queue (a poll can now see it).
    Complete,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Post => "a post",
            Self::Execute => "an execution at the target",
            Self::Complete => "a completion",
        })
    }
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
    pub(crate) fn add_qp(&self, node: usize, qp: &Arc<QpShared>) {
        let mut n = self.node(node);
        n.qps.retain(|w| w.strong_count() > 0);
        n.qps.push(Arc::downgrade(qp));
    }

    /// A listening endpoint made on `node`.
    pub(crate) fn add_listener(&self, node: usize, l: &Arc<ListenerShared>) {
        let mut n = self.node(node);
        n.listeners.retain(|w| w.strong_count() > 0);
        n.listeners.push(Arc::downgrade(l));
    }

    /// Cuts the power of `node` (named `device`) now, with the policy `unflushed`.
    pub(crate) fn cut(&self, node: usize, device: &str, unflushed: Unflushed) -> Result<PowerCut> {
        let (regions, qps, listeners) = {
            let mut n = self.node(node);
            if n.off {
                return Err(Error::inval(
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
                return Err(Error::inval(
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
            l.dead.store(true, Ordering::Release);
        }
        let seed = match unflushed {
            Unflushed::Torn { seed } => seed,
            _ => 0,
        };
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
            qp.lose();
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
    pub(crate) fn event(&self, kind: Event, devices: &[crate::MockDevice]) {
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

impl MrShared {
    /// What the region holds after a power cut (its durable image under `unflushed`; a region
    /// outside the model keeps nothing: zeroes).
    fn recover(&self, unflushed: Unflushed, rng: &mut fastrand::Rng) -> Vec<u8> {
        let visible = self.bytes(0, self.len);
        self.durable.as_ref().map_or_else(|| vec![0; self.len], |d| d.recover(visible, unflushed, rng))
    }

    /// Makes `[offset, offset + len)` durable (a persistent flush at the responder, the
    /// owner's persist), if the region is in the model.
    #[inline]
    pub(crate) fn make_durable(&self, offset: usize, len: usize) {
        if let Some(d) = &self.durable {
            d.make_durable(self.bytes(0, self.len), offset, len);
        }
    }

    /// A remote write (or atomic write) of `[offset, offset + len)` executed, if the region is
    /// in the model (a later RDMA Read at it makes it durable, APM).
    #[inline]
    pub(crate) fn note_write(&self, offset: usize, len: usize) {
        if let Some(d) = &self.durable {
            d.note_write(offset, len);
        }
    }

    /// An RDMA Read executed at the region, if it is in the model: the remote writes executed
    /// on it before are durable (librpma's APM: a read after writes, towards a node with direct
    /// write to pmem).
    #[inline]
    pub(crate) fn read_after_writes(&self) {
        if let Some(d) = &self.durable {
            d.read_after_writes(self.bytes(0, self.len));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(bytes: &[u8]) -> Memory {
        let m = Memory::page_aligned(bytes.len()).unwrap();
        m.volatile().write(0, bytes).unwrap();
        m
    }

    #[test]
    fn durable_image_follows_make_durable_only() {
        let m = region(&[1; 256]);
        let d = Durable::of(m.volatile());
        m.volatile().write(0, &[2; 256]).unwrap();
        d.make_durable(m.volatile(), 64, 64);
        let mut rng = fastrand::Rng::with_seed(1);
        let lost = d.recover(m.volatile(), Unflushed::Lost, &mut rng);
        assert_eq!(&lost[..64], &[1; 64]);
        assert_eq!(&lost[64..128], &[2; 64]);
        assert_eq!(&lost[128..], &[1; 128]);
        assert_eq!(d.recover(m.volatile(), Unflushed::Kept, &mut rng), vec![2; 256]);
    }

    #[test]
    fn torn_lines_are_whole_and_replay_per_seed() {
        let m = region(&[0; 4096]);
        let d = Durable::of(m.volatile());
        m.volatile().fill(0xFF);
        let draw = |seed| d.recover(m.volatile(), Unflushed::Torn { seed }, &mut fastrand::Rng::with_seed(seed));
        let a = draw(7);
        assert_eq!(a, draw(7), "the same seed tears the same lines");
        assert_ne!(a, draw(8), "another seed tears others (64 lines: equal by chance with p = 2^-64)");
        for line in a.chunks(LINE) {
            assert!(line.iter().all(|&b| b == line[0]), "a line is all old or all new: {line:?}");
        }
        assert!(a.contains(&0) && a.contains(&0xFF), "some lines old, some new");
    }
}

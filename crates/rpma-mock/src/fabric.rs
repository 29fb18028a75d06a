//! The fabric: the state its parts share ([`FabricInner`]: devices, identifiers, configuration,
//! progress engine, listeners, persistence model, network, simulation) and its public handle,
//! [`MockFabric`], with what a test does to a fabric: inject faults, cut a node's power, cut or
//! silence a link, drop a connection. Making a fabric is `builder.rs`'s.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use rpma_core::{Error, Result};

use crate::config::{ExecutionSettings, Mode};
use crate::counters::{Counters, Kind, Live, LiveCounts};
use crate::device::MockDevice;
use crate::durable::Unflushed;
use crate::engine::Engine;
use crate::event::Event;
use crate::faults::Faults;
use crate::net::{Direction, Net};
use crate::notify::Notifier;
use crate::power::{PowerCut, PowerModel};
use crate::sim::Sim;
use crate::Listeners;

const EINVAL: i32 = 22;

/// The state a fabric's parts share: held by its handles ([`MockFabric`]) and by everything made
/// on it (protection domains, completion queues, queue pairs, listeners).
pub(crate) struct FabricInner {
    pub(crate) devices: Vec<MockDevice>,
    /// The endpoints listening on it, by address.
    pub(crate) listeners: Listeners,
    pub(crate) next_num: AtomicU32,
    pub(crate) next_addr: AtomicU64,
    pub(crate) next_id: AtomicU64,
    pub(crate) seed: u64,
    pub(crate) ordered: bool,
    pub(crate) counters: Arc<Counters>,
    pub(crate) faults: Faults,
    pub(crate) execution: ExecutionSettings,
    /// A bad configuration, reported by every device lookup.
    pub(crate) config_error: Option<Error>,
    /// Handed out by a channel whose own fd cannot be created (`notify.rs`).
    pub(crate) broken_fd: Option<Arc<nix::sys::eventfd::EventFd>>,
    pub(crate) engine: Arc<Engine>,
    /// The rendezvous directory of the cross-process mode (`None`: this process only).
    pub(crate) rendezvous: Option<PathBuf>,
    /// Connections go through the rendezvous directory even to a listener of this process.
    pub(crate) always_wire: bool,
    /// The persistence model (`None`: off).
    pub(crate) power: Option<PowerModel>,
    /// The links between devices, and the connections they carry.
    pub(crate) net: Net,
    /// The simulation the fabric runs in (`None`: real time, real threads).
    pub(crate) sim: Option<Sim>,
}

impl Drop for FabricInner {
    fn drop(&mut self) {
        self.engine.shutdown();
    }
}

impl FabricInner {
    /// The fabric's clock: the simulation's, or the real one.
    pub(crate) fn now(&self) -> std::time::Instant {
        match &self.sim {
            Some(s) => s.now(),
            None => std::time::Instant::now(),
        }
    }

    /// The runtime of code on this fabric.
    pub(crate) fn runtime(&self) -> &dyn rpma_core::runtime::Runtime {
        match &self.sim {
            Some(s) => s.runtime(),
            None => &rpma_core::runtime::StdRuntime,
        }
    }

    /// An event of the deferred mode, for crash points (no lock of the mock held).
    #[inline]
    pub(crate) fn event(&self, kind: Event) {
        if let Some(p) = &self.power {
            p.event(kind, &self.devices);
        }
    }

    pub(crate) fn live(&self, kind: Kind) -> Live {
        Live::new(&self.counters, kind)
    }

    /// A queue of the fabric (one of its channels, counted by `live`).
    ///
    /// # Errors
    /// `Provider` naming `op` if the fabric has no broken-channel fd (then it reports its
    /// configuration error at its first device lookup, and nothing reaches this).
    pub(crate) fn notifier<E>(&self, live: Live, op: &'static str) -> Result<Notifier<E>> {
        match &self.broken_fd {
            Some(fd) => Ok(Notifier::new(live, Arc::clone(fd), self.sim.clone())),
            None => Err(Error::provider(op, nix::errno::Errno::EMFILE as i32).with_detail("the fabric has no fd")),
        }
    }

    /// A fresh QP number, key or similar 24/32-bit identifier.
    pub(crate) fn next_num(&self) -> u32 {
        self.next_num.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// A fresh, page-aligned fake virtual address range of `len` bytes (with a guard page).
    pub(crate) fn next_addr(&self, len: usize) -> u64 {
        let pages = (len as u64).div_ceil(4096) + 1;
        self.next_addr.fetch_add(pages * 4096, Ordering::Relaxed)
    }

    pub(crate) fn owner(&self, addr: &str) -> Option<&MockDevice> {
        self.devices.iter().find(|d| d.addrs.iter().any(|a| a == addr))
    }

    /// The error of provider call `call` of a lookup of `addr`, which no device owns.
    #[cold]
    #[inline(never)]
    pub(crate) fn no_device(&self, call: &'static str, addr: &str) -> Error {
        let owned: Vec<&str> = self.devices.iter().flat_map(|d| d.addrs.iter().map(String::as_str)).collect();
        Error::no_device(call, addr, &owned)
    }

    /// `rdma_getaddrinfo`-like check of an address and port.
    pub(crate) fn resolve(&self, addr: &str, port: &str) -> Result<(MockDevice, u16)> {
        let port: u16 = port.parse().map_err(|_| {
            Error::provider("rdma_getaddrinfo", EINVAL)
                .with_detail("the port is not a number: give it as a number from 0 to 65535 (no service names)")
        })?;
        let dev = self.owner(addr).ok_or_else(|| self.no_device("rdma_resolve_addr", addr))?;
        Ok((dev.clone(), port))
    }
}

/// An in-memory RDMA fabric: the mock [`Transport`](rpma_core::Transport). Cheap to clone (a
/// handle); fabrics are isolated from each other, so tests may run in parallel, each on its own
/// fabric.
#[derive(Clone)]
pub struct MockFabric {
    pub(crate) inner: Arc<FabricInner>,
}

impl std::fmt::Debug for MockFabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockFabric").field("devices", &self.inner.devices).finish_non_exhaustive()
    }
}

impl MockFabric {
    /// The fabric's mode.
    #[must_use]
    pub fn mode(&self) -> Mode {
        self.inner.execution.mode
    }

    /// The rendezvous directory of the cross-process mode, if the fabric reaches other
    /// processes ([`MockFabricBuilder::rendezvous`](crate::MockFabricBuilder::rendezvous)).
    #[must_use]
    pub fn rendezvous_dir(&self) -> Option<&std::path::Path> {
        self.inner.rendezvous.as_deref()
    }

    /// Deferred mode: one progress step of every connection with waiting work: each send queue
    /// executes its waiting work requests in order, up to the first piece of a torn write (see
    /// [`MockFabricBuilder::tearing`](crate::MockFabricBuilder::tearing)) or a message waiting
    /// for a receive. Returns whether anything executed (always `false` in the immediate mode).
    pub fn progress(&self) -> bool {
        self.inner.engine.progress_ready()
    }

    /// The fabric's devices.
    #[must_use]
    pub fn devices(&self) -> &[MockDevice] {
        &self.inner.devices
    }

    /// Fault injection.
    #[must_use]
    pub fn faults(&self) -> &Faults {
        &self.inner.faults
    }

    /// Delivers a raw CM event other than a connection request to the endpoint listening on
    /// `addr:port` (to test [`Ep::next_conn_req`](rpma_core::Ep::next_conn_req) on such an
    /// event). Returns `false` if nothing listens there.
    pub fn inject_listener_event(&self, addr: &str, port: u16, ev: rpma_core::transport::CmEvent) -> bool {
        self.inner.listeners.get(addr, port).map(|l| l.inject(ev)).is_some()
    }

    /// Cuts the power of the node `device` (docs/persistence.md): its connections are lost for
    /// their peers (as a dead node: [`ConnEvent::Lost`](rpma_core::ConnEvent::Lost), work
    /// waiting flushed), its regions refuse every further access, its peers can make nothing
    /// more, and each of its persistent regions comes back in the report as a fresh
    /// [`Memory`](rpma_mem::Memory) holding what was made durable, plus the bytes not made
    /// durable as the builder's [`Unflushed`] policy says. A new peer on the device is the node
    /// rebooted: register the memory again there.
    ///
    /// # Errors
    /// [`InvalidInput`](rpma_core::ErrorKind::InvalidInput) if the fabric has no persistence model
    /// ([`MockFabricBuilder::persistent_memory`](crate::MockFabricBuilder::persistent_memory)),
    /// if the device is not the fabric's, if it holds no persistent region (nothing would
    /// survive), or if its power is already cut (nothing was made on it since). Nothing is
    /// disturbed then.
    pub fn power_cut(&self, device: &MockDevice) -> Result<PowerCut> {
        const OP: &str = "MockFabric::power_cut";
        let Some(p) = &self.inner.power else {
            return Err(Error::invalid_input(
                OP,
                "the fabric has no persistence model: build it with MockFabricBuilder::persistent_memory",
            ));
        };
        if self.inner.devices.get(device.index) != Some(device) {
            return Err(Error::invalid_input(
                OP,
                &format!(
                    "device {} is not a device of this fabric (its devices: {:?})",
                    device.name,
                    self.inner.devices.iter().map(MockDevice::name).collect::<Vec<_>>()
                ),
            ));
        }
        p.cut(device.index, &device.name, p.unflushed)
    }

    /// [`MockFabric::power_cut`] with the policy `unflushed` for this cut instead of the
    /// builder's (a simulation's nemesis draws one per cut: a process killed keeps its memory,
    /// `Kept`; a node's power lost, `Lost` or `Torn`).
    ///
    /// # Errors
    /// As [`MockFabric::power_cut`].
    pub fn power_cut_with(&self, device: &MockDevice, unflushed: Unflushed) -> Result<PowerCut> {
        const OP: &str = "MockFabric::power_cut";
        let Some(p) = &self.inner.power else {
            return Err(Error::invalid_input(
                OP,
                "the fabric has no persistence model: build it with MockFabricBuilder::persistent_memory",
            ));
        };
        self.check_device(OP, device)?;
        let cut = p.cut(device.index, &device.name, unflushed);
        self.touched();
        cut
    }

    /// `InvalidInput` naming `op` if `device` is not one of this fabric's.
    fn check_device(&self, op: &'static str, device: &MockDevice) -> Result<()> {
        if self.inner.devices.get(device.index) == Some(device) {
            return Ok(());
        }
        Err(Error::invalid_input(
            op,
            &format!(
                "device {} is not a device of this fabric (its devices: {:?})",
                device.name,
                self.inner.devices.iter().map(MockDevice::name).collect::<Vec<_>>()
            ),
        ))
    }

    /// A fault changed the fabric: a simulation's waiting actors look again.
    fn touched(&self) {
        if let Some(s) = &self.inner.sim {
            s.touch();
        }
    }

    /// Cuts the link between devices `a` and `b` (a network partition; docs/simulation.md):
    /// packets between them are dropped, both ways or, with [`Direction::OneWay`], from `a` to
    /// `b` only. Their established connections are lost at once (both ends see
    /// [`ConnEvent::Lost`](rpma_core::ConnEvent::Lost), work waiting is flushed: as RC's retries
    /// end them); a connection request across the cut is never delivered, and an accept whose
    /// answer crosses it never reaches the requester (which gives up after its timeout), so
    /// with a one-way cut a listener may accept a connection its requester never sees. Other
    /// devices are not affected. Returns how many connections were lost.
    ///
    /// # Errors
    /// `InvalidInput` if a device is not the fabric's, or both are the same.
    pub fn partition(&self, a: &MockDevice, b: &MockDevice, direction: Direction) -> Result<usize> {
        const OP: &str = "MockFabric::partition";
        self.check_device(OP, a)?;
        self.check_device(OP, b)?;
        if a.index == b.index {
            return Err(Error::invalid_input(OP, &format!("a partition needs two devices, {} is given twice", a.name)));
        }
        let lost = self.inner.net.partition(a.index, b.index, direction);
        self.touched();
        Ok(lost)
    }

    /// Makes the link between devices `a` and `b` silent, as a peer whose node lost its power
    /// is to rxe: nothing crosses it either way, and the connections across it are **not**
    /// lost: no event, no error completion; their work waits unanswered (the deferred mode
    /// executes none of it) until [`MockFabric::heal`] mends the link, when it goes on. A
    /// connection request across it is never delivered. Connections to another process (the
    /// cross-process mode) are not affected. Returns how many connections cross the link.
    ///
    /// # Errors
    /// `InvalidInput` if a device is not the fabric's, both are the same, or the fabric is in
    /// the immediate mode (which executes work inside `post`: it cannot leave it waiting).
    pub fn silence(&self, a: &MockDevice, b: &MockDevice) -> Result<usize> {
        const OP: &str = "MockFabric::silence";
        self.check_device(OP, a)?;
        self.check_device(OP, b)?;
        if a.index == b.index {
            return Err(Error::invalid_input(
                OP,
                &format!("a silent link needs two devices, {} is given twice", a.name),
            ));
        }
        if self.inner.execution.mode != Mode::Deferred {
            return Err(Error::invalid_input(
                OP,
                "a silent link needs the deferred mode (MockFabricBuilder::mode(Mode::Deferred)): the immediate mode \
                 executes work inside post and cannot leave it waiting",
            ));
        }
        let n = self.inner.net.silence(a.index, b.index);
        self.touched();
        Ok(n)
    }

    /// Mends the link between `a` and `b` (both ways): new connections cross it again
    /// (connections lost stay lost; the work waiting on a silent link goes on).
    pub fn heal(&self, a: &MockDevice, b: &MockDevice) {
        self.inner.net.heal(a.index, b.index);
        self.touched();
    }

    /// Mends every link [`MockFabric::partition`] cut.
    pub fn heal_all(&self) {
        self.inner.net.heal_all();
        self.touched();
    }

    /// The established connections (each counted once), in the order they were made.
    #[must_use]
    pub fn connections(&self) -> usize {
        self.inner.net.connections().len()
    }

    /// Loses the `k`-th established connection (in [`MockFabric::connections`]'s order): both
    /// ends see [`ConnEvent::Lost`](rpma_core::ConnEvent::Lost) and their waiting work is
    /// flushed, as [`MockQp::cut_link`](crate::MockQp::cut_link) does. Returns the two devices'
    /// names, or `None` if there is no such connection.
    pub fn drop_connection(&self, k: usize) -> Option<(String, String)> {
        let c = self.inner.net.connections().into_iter().nth(k)?;
        let peer = c.live_peer()?;
        let names = (self.inner.devices[c.node()].name.clone(), self.inner.devices[peer.node()].name.clone());
        c.lose();
        self.touched();
        Some(names)
    }

    /// Live resources (PDs, MRs, CQs, channels, QPs, SRQs, listeners).
    #[must_use]
    pub fn live(&self) -> LiveCounts {
        self.inner.counters.snapshot()
    }
}

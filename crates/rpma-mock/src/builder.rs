//! The fabric's builder: devices, capabilities, receive order, mode, tearing, background
//! progress, CM timeout, rendezvous directory, persistence model and simulation, checked when the
//! fabric is built.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::Arc;
use std::time::Duration;

use rpma_core::{Capabilities, Error, Result};

use crate::config::ExecutionSettings;
use crate::config::{Mode, DEFAULT_CM_TIMEOUT, DEFAULT_PROGRESS_DELAY};
use crate::counters::Counters;
use crate::device::MockDevice;
use crate::durable::{PersistentMemory, Unflushed};
use crate::engine::Engine;
use crate::fabric::{FabricInner, MockFabric};
use crate::faults::Faults;
use crate::{config, net, notify, power, sim};

/// Builds a [`MockFabric`].
#[derive(Debug, Clone)]
pub struct MockFabricBuilder {
    devices: Vec<(String, Vec<String>)>,
    caps: Capabilities,
    seed: u64,
    ordered: bool,
    mode: Option<Mode>,
    tearing: Option<usize>,
    background: Option<Duration>,
    cm_timeout: Duration,
    rendezvous: Option<PathBuf>,
    always_wire: bool,
    pub(crate) persistent: Option<PersistentMemory>,
    pub(crate) unflushed: Unflushed,
    sim: Option<sim::Sim>,
}

impl Default for MockFabricBuilder {
    fn default() -> Self {
        Self {
            devices: Vec::new(),
            caps: default_caps(),
            seed: 0x5EED_0F4D_4D41,
            ordered: false,
            mode: None,
            tearing: None,
            background: Some(DEFAULT_PROGRESS_DELAY),
            cm_timeout: DEFAULT_CM_TIMEOUT,
            rendezvous: None,
            always_wire: false,
            persistent: None,
            unflushed: Unflushed::Lost,
            sim: None,
        }
    }
}

fn default_caps() -> Capabilities {
    let mut c = Capabilities::roce_defaults();
    c.advise_mr = true;
    c
}

impl MockFabricBuilder {
    /// Adds a device owning `addrs`. Without any, the fabric has `mock0` owning `127.0.0.1`,
    /// `::1`, `localhost` and `10.77.0.1`.
    #[must_use]
    pub fn device(mut self, name: &str, addrs: &[&str]) -> Self {
        self.devices.push((name.to_owned(), addrs.iter().map(|a| (*a).to_owned()).collect()));
        self
    }

    /// The capabilities every device reports (default: those of a RoCE device without native
    /// flush, native atomic write or ODP).
    #[must_use]
    pub fn capabilities(mut self, caps: Capabilities) -> Self {
        self.caps = caps;
        self
    }

    /// Toggles native flush and native atomic write.
    #[must_use]
    pub fn native(mut self, flush: bool, atomic_write: bool) -> Self {
        self.caps.native_flush = flush;
        self.caps.native_atomic_write = atomic_write;
        self
    }

    /// Toggles on-demand paging support.
    #[must_use]
    pub fn odp(mut self, odp: bool) -> Self {
        self.caps.odp = odp;
        self
    }

    /// The seed of the receive-buffer choice (unordered receives are reproducible per seed).
    #[must_use]
    pub const fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Match messages to receive buffers in posting order (FIFO, like hardware in practice)
    /// instead of at random. librpma promises no order; keep the default to test that.
    #[must_use]
    pub const fn ordered_receives(mut self, ordered: bool) -> Self {
        self.ordered = ordered;
        self
    }

    /// When operations execute ([`Mode`]). Without this, the mode is read from the environment
    /// variable [`MODE_ENV`](crate::MODE_ENV) (`RPMA_MOCK_MODE=immediate|deferred`) when the
    /// fabric is built, and is [`Mode::Immediate`] if it is unset.
    #[must_use]
    pub const fn mode(mut self, mode: Mode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// Deferred mode: remote writes longer than `bytes` land in pieces of at most `bytes` (split
    /// at the multiples of `bytes` of the remote address, e.g. 8), one piece per progress step,
    /// in a random order (seeded, [`MockFabricBuilder::seed`]); the write completes after its
    /// last piece. Between two steps the target shows some pieces new and the others old, as a
    /// NIC may place a message's data in any order. Atomic writes are never torn.
    /// Tearing needs [`Mode::Deferred`] and `bytes > 0` (otherwise building fails).
    #[must_use]
    pub const fn tearing(mut self, bytes: usize) -> Self {
        self.tearing = Some(bytes);
        self
    }

    /// Deferred mode: work left waiting runs on the fabric's progress thread about `delay` after
    /// it was posted (default [`DEFAULT_PROGRESS_DELAY`]), so code waiting in `poll(2)`/`epoll`
    /// on a completion fd sees its completions without calling into the mock. `None`: no
    /// background progress; work runs only in polls and waits of its connection and in
    /// [`MockFabric::progress`], deterministically (a thread blocked in `poll(2)` on an fd then
    /// waits until another thread progresses the work).
    #[must_use]
    pub const fn background_progress(mut self, delay: Option<Duration>) -> Self {
        self.background = delay;
        self
    }

    /// How long a side that called `disconnect` first waits for its peer to disconnect too
    /// before it gets [`ConnEvent::Closed`](rpma_core::ConnEvent::Closed) anyway (RDMA CM's DREQ
    /// timeout; default [`DEFAULT_CM_TIMEOUT`], 1 s). Must not be zero.
    #[must_use]
    pub const fn cm_timeout(mut self, timeout: Duration) -> Self {
        self.cm_timeout = timeout;
        self
    }

    /// The cross-process mode: listening endpoints also publish a socket in `dir`, and a
    /// connection to an address and port nobody listens on in this process goes there, to a
    /// process whose fabric uses the same directory (see the crate documentation). Without this,
    /// the directory is read from [`RENDEZVOUS_ENV`](crate::RENDEZVOUS_ENV) when the fabric is
    /// built; unset, the fabric reaches no other process.
    /// [`default_rendezvous_dir`](crate::default_rendezvous_dir) is a private per-user choice.
    #[must_use]
    pub fn rendezvous(mut self, dir: impl Into<PathBuf>) -> Self {
        self.rendezvous = Some(dir.into());
        self
    }

    /// Cross-process mode: connections go through the rendezvous directory's sockets even when
    /// the listener is in this process, so that one process exercises everything two processes
    /// do (the conformance suite runs this way). Needs a rendezvous directory.
    #[must_use]
    pub const fn always_through_rendezvous(mut self, yes: bool) -> Self {
        self.always_wire = yes;
        self
    }

    /// Turns the persistence model on (docs/persistence.md): the regions `which` selects keep,
    /// besides what peers see, what would survive a power cut of their node
    /// ([`MockFabric::power_cut`], [`CrashPoints`](crate::CrashPoints)). Off by default, and then
    /// free: the data path does not look for it.
    #[must_use]
    pub const fn persistent_memory(mut self, which: PersistentMemory) -> Self {
        self.persistent = Some(which);
        self
    }

    /// What a power cut does to bytes written and not made durable (default
    /// [`Unflushed::Lost`]). Needs [`MockFabricBuilder::persistent_memory`] (for
    /// [`CrashPoints`](crate::CrashPoints), which turns the model on itself, it is enough alone).
    #[must_use]
    pub const fn unflushed(mut self, policy: Unflushed) -> Self {
        self.unflushed = policy;
        self
    }

    /// Runs the fabric in the simulation `sim` ([`sim`]): the deferred mode with no thread of
    /// its own (no background progress, timers on the simulation's clock), its work requests
    /// executed one per step of the simulation, its waits and its
    /// [`runtime`](rpma_core::Transport::runtime) the simulation's.
    #[must_use]
    pub fn simulation(mut self, sim: &sim::Sim) -> Self {
        self.sim = Some(sim.clone());
        self.mode = Some(Mode::Deferred);
        self.background = None;
        self
    }

    /// Builds the fabric, or reports a bad configuration.
    ///
    /// # Errors
    /// [`InvalidInput`](rpma_core::ErrorKind::InvalidInput) if [`MODE_ENV`](crate::MODE_ENV) names
    /// no mode (when [`MockFabricBuilder::mode`] was not called), for tearing outside the deferred
    /// mode or in pieces of 0 bytes, for a zero CM timeout, for an empty rendezvous directory
    /// (given, or [`RENDEZVOUS_ENV`](crate::RENDEZVOUS_ENV) set to nothing), or for
    /// [`always_through_rendezvous`](MockFabricBuilder::always_through_rendezvous) without one;
    /// `Provider` if the fabric's own fd cannot be created (`EMFILE`).
    pub fn try_build(self) -> Result<MockFabric> {
        let f = self.build();
        match &f.inner.config_error {
            Some(e) => Err(e.clone()),
            None => Ok(f),
        }
    }

    /// Builds the fabric. A bad configuration (see [`MockFabricBuilder::try_build`]) does not
    /// panic: the fabric reports it as the error of its first device lookup (so of the first
    /// `Device::lookup`), and nothing can be made on it.
    #[must_use]
    pub fn build(self) -> MockFabric {
        let (execution, mut config_error) =
            match ExecutionSettings::resolve(self.mode, self.tearing, self.background, self.cm_timeout) {
                Ok(e) => (e, None),
                Err(e) => (ExecutionSettings::fallback(), Some(e)),
            };
        let rendezvous = match self.rendezvous.map_or_else(config::rendezvous_from_env, |d| Ok(Some(d))) {
            Ok(d) => d,
            Err(e) => {
                config_error.get_or_insert(e);
                None
            }
        };
        if rendezvous.as_ref().is_some_and(|d| d.as_os_str().is_empty()) {
            config_error.get_or_insert_with(|| {
                Error::invalid_input(config::CONFIG_OP, "the mock's rendezvous directory is an empty path")
            });
        }
        if self.always_wire && rendezvous.is_none() {
            config_error.get_or_insert_with(|| {
                Error::invalid_input(config::CONFIG_OP, "always_through_rendezvous needs a rendezvous directory")
            });
        }
        let broken_fd = match notify::broken_channel_fd() {
            Ok(fd) => Some(fd),
            Err(e) => {
                config_error.get_or_insert_with(|| {
                    Error::provider(config::CONFIG_OP, e as i32)
                        .with_detail("cannot create the fabric's broken-channel fd")
                });
                None
            }
        };
        let mut devices = self.devices;
        if devices.is_empty() {
            devices.push((
                "mock0".to_owned(),
                ["127.0.0.1", "::1", "localhost", "10.77.0.1"].iter().map(|s| (*s).to_owned()).collect(),
            ));
        }
        let devices = devices
            .into_iter()
            .enumerate()
            .map(|(index, (name, addrs))| MockDevice { name, addrs, caps: self.caps.clone(), index })
            .collect::<Vec<_>>();
        let power = self.persistent.map(|scope| power::PowerModel::new(scope, self.unflushed, devices.len()));
        let simulated = self.sim.is_some();
        let fabric = MockFabric {
            inner: Arc::new(FabricInner {
                devices,
                listeners: Default::default(),
                next_num: AtomicU32::new(0x11),
                next_addr: AtomicU64::new(0x7f3a_0000_0000),
                next_id: AtomicU64::new(1),
                seed: self.seed,
                ordered: self.ordered,
                counters: Arc::new(Counters::default()),
                faults: Faults::default(),
                engine: Arc::new(Engine::new(execution.background, simulated)),
                execution,
                config_error,
                broken_fd,
                rendezvous,
                always_wire: self.always_wire,
                power,
                net: net::Net::default(),
                sim: self.sim.clone(),
            }),
        };
        if let Some(s) = &self.sim {
            s.attach(&fabric.inner.engine);
        }
        fabric
    }
}

impl Default for MockFabric {
    fn default() -> Self {
        Self::new()
    }
}

impl MockFabric {
    /// A fabric with the default device `mock0` (addresses `127.0.0.1`, `::1`, `localhost`,
    /// `10.77.0.1`) and default capabilities.
    #[must_use]
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// [`MockFabric::new`], reporting a bad configuration (`RPMA_MOCK_MODE`) at once.
    ///
    /// # Errors
    /// As [`MockFabricBuilder::try_build`].
    pub fn try_new() -> Result<Self> {
        Self::builder().try_build()
    }

    /// A default fabric in `mode` (whatever the environment says).
    #[must_use]
    pub fn with_mode(mode: Mode) -> Self {
        Self::builder().mode(mode).build()
    }

    /// A builder for a configured fabric.
    #[must_use]
    pub fn builder() -> MockFabricBuilder {
        MockFabricBuilder::default()
    }
}

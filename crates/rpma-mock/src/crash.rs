//! Crash points: a user's scenario run once per event, with a power cut right after that event,
//! and the user's check after each "reboot" (docs/persistence.md).

use std::fmt;

use crate::builder::MockFabricBuilder;
use crate::config::Mode;
use crate::device::MockDevice;
use crate::durable::{PersistentMemory, Unflushed};
use crate::event::Event;
use crate::fabric::MockFabric;
use crate::power::PowerCut;

/// One crash point: a power cut right after event number `index` of `of`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CrashPoint {
    /// The event the cut follows (1-based).
    pub index: u64,
    /// The events of the whole scenario (its counting run).
    pub of: u64,
    /// The kind of the event the cut follows.
    pub after: Option<Event>,
    /// What the cut did to bytes not made durable (with the seed of a torn cut).
    pub unflushed: Unflushed,
}

impl fmt::Display for CrashPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "crash point {} of {}", self.index, self.of)?;
        if let Some(e) = self.after {
            write!(f, " (right after {e})")?;
        }
        write!(f, ", {}", self.unflushed)
    }
}

/// What a check gets after a crash point: the fabric (the cut node rebooted: a new peer on its
/// device works), the point, and what the node's persistent regions held after the cut.
#[derive(Debug)]
#[non_exhaustive]
pub struct Reboot {
    /// The fabric the scenario ran on.
    pub fabric: MockFabric,
    /// Where the power was cut.
    pub point: CrashPoint,
    /// The node's persistent regions after the cut.
    pub cut: PowerCut,
}

/// The crash points run and what their checks found.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CrashReport {
    /// The crash points checked (events × seeds).
    pub points: u64,
    /// The events of the scenario.
    pub events: u64,
    /// The points whose check failed, in order ([`CrashPoints::run_all`]; empty from
    /// [`CrashPoints::run`], which stops at the first).
    pub violations: Vec<CrashFailure>,
}

/// The first crash point whose check failed, or why the points could not be run.
#[derive(Clone, Debug)]
pub struct CrashFailure {
    /// The crash point (`None`: the exploration itself failed, e.g. an unknown device).
    pub point: Option<CrashPoint>,
    /// The check's message, or why.
    pub message: String,
}

impl fmt::Display for CrashFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.point {
            Some(p) => write!(f, "{p}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for CrashFailure {}

/// Runs a scenario under every crash point of one node.
///
/// The scenario runs on a fresh fabric from the builder, in [`Mode::Deferred`] with no
/// background progress (so the same scenario makes the same events in the same order), with
/// the persistence model on ([`PersistentMemory::All`] unless the builder says otherwise). The
/// events are the deferred mode's: a post, an execution at the target, a completion queued.
/// A first run counts them; then, for each event `i`, a run with the node's power cut right
/// after event `i`, and the check with what the node's persistent regions held.
///
/// After the cut the scenario goes on against a dead node: its operations fail (their
/// completions are errors, the connections are lost) and it should record, as it goes, what it
/// was told is durable (its acknowledgements), which the check compares with the regions.
///
/// A writer on node `app` writes 8 bytes into a region of node `pm` and persists them; every
/// cut of `pm`'s power must leave them there once the flush completed:
///
/// ```
/// use rpma::mock::{ConnReq, CrashPoints, Device, Ep, MockFabric, Peer, Reboot};
/// use rpma::{CompletionFlags, ContextType, FlushType, PeerCfg, Usage};
/// use rpma::descriptor::Offer;
///
/// /// Whether the write was acknowledged: its persistent flush completed.
/// fn persist(fabric: &MockFabric) -> rpma::Result<bool> {
///     let pm = Peer::new(&Device::lookup(fabric, "10.0.0.2", ContextType::Local)?)?;
///     let region = pm.alloc_mr(4096, Usage::WRITE_DST | Usage::FLUSH_TYPES)?;
///     let ep = Ep::listen(&pm, "10.0.0.2", "7204")?;
///     let app = Peer::new(&Device::lookup(fabric, "10.0.0.1", ContextType::Local)?)?;
///     let src = app.alloc_mr(8, Usage::WRITE_SRC)?;
///     src.write(0, b"durable!")?;
///     let conn = ConnReq::new(&app, "10.0.0.2", "7204", None)?.connect(None)?;
///     let offer = Offer::encode(&region, &PeerCfg::new().with_direct_write_to_pmem(true));
///     let _server = ep.next_conn_req(None)?.connect(Some(&offer))?;
///     conn.next_event()?;
///     let remote = Offer::decode(conn.private_data())?.apply_to(&conn);
///     conn.write(remote.at(0), src.slice(..)).flags(CompletionFlags::ON_ERROR).post()?;
///     conn.flush(remote.slice(0..8), FlushType::Persistent).post()?;
///     loop {
///         if let Some(wc) = conn.cq().next_wc()? {
///             return Ok(wc.is_success());
///         }
///     }
/// }
///
/// /// After the cut: an acknowledged write is in `pm`'s region.
/// fn check(reboot: Reboot, acked: bool) -> Result<(), String> {
///     let mut bytes = [0; 8];
///     if let Some(region) = reboot.cut.regions().first() {
///         region.memory().volatile().read(0, &mut bytes).map_err(|e| e.to_string())?;
///     }
///     if acked && &bytes != b"durable!" {
///         return Err(format!("acknowledged, then lost: {bytes:?}"));
///     }
///     Ok(())
/// }
///
/// let fabric = MockFabric::builder().device("pm", &["10.0.0.2"]).device("app", &["10.0.0.1"]);
/// let report = CrashPoints::new(fabric, "pm").run(|f| persist(f).unwrap_or(false), check)?;
/// assert!(report.points > 1 && report.violations.is_empty(), "{report:?}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct CrashPoints {
    builder: MockFabricBuilder,
    device: String,
    seeds: u64,
    only: Option<u64>,
}

impl CrashPoints {
    /// Crash points of the node `device` (a device of the builder's fabric).
    #[must_use]
    pub fn new(builder: MockFabricBuilder, device: &str) -> Self {
        Self { builder, device: device.to_owned(), seeds: 1, only: None }
    }

    /// With a torn policy ([`Unflushed::Torn`], [`Unflushed::TornLines`]), runs each crash point with `n` seeds (the builder's seed, then
    /// the next ones); other policies draw nothing and run each point once.
    #[must_use]
    pub const fn seeds(mut self, n: u64) -> Self {
        self.seeds = if n == 0 { 1 } else { n };
        self
    }

    /// Runs only crash point `index` (to replay a failure).
    #[must_use]
    pub const fn only(mut self, index: u64) -> Self {
        self.only = Some(index);
        self
    }

    fn fabric(&self, seed_offset: u64) -> Result<MockFabric, CrashFailure> {
        let mut b = self.builder.clone().mode(Mode::Deferred).background_progress(None);
        if b.persistent.is_none() {
            b = b.persistent_memory(PersistentMemory::All);
        }
        if let Some(seed) = b.unflushed.seed() {
            let policy = b.unflushed.with_seed(seed.wrapping_add(seed_offset));
            b = b.unflushed(policy);
        }
        b.try_build().map_err(|e| CrashFailure { point: None, message: format!("building the fabric: {e}") })
    }

    fn node(&self, fabric: &MockFabric) -> Result<usize, CrashFailure> {
        fabric.devices().iter().position(|d| d.name() == self.device).ok_or_else(|| CrashFailure {
            point: None,
            message: format!(
                "the fabric has no device named {:?} (its devices: {:?})",
                self.device,
                fabric.devices().iter().map(MockDevice::name).collect::<Vec<_>>()
            ),
        })
    }

    /// Runs `scenario` once to count its events, then once per crash point, calling `check`
    /// after each; stops at the first point whose check fails.
    ///
    /// # Errors
    /// The first failing point ([`CrashFailure`] with the check's message, the point and the
    /// seed), or a failure of the exploration itself: an unknown device, a scenario without
    /// events, a crash point the scenario did not reach in its run (it is not deterministic), a
    /// cut that failed (e.g. the node held no persistent region then).
    pub fn run<S>(
        &self,
        scenario: impl FnMut(&MockFabric) -> S,
        check: impl FnMut(Reboot, S) -> Result<(), String>,
    ) -> Result<CrashReport, CrashFailure> {
        self.explore(scenario, check, false)
    }

    /// [`CrashPoints::run`] through every crash point: the report lists each point whose check
    /// failed ([`CrashReport::violations`]).
    ///
    /// # Errors
    /// A failure of the exploration itself, as for [`CrashPoints::run`].
    pub fn run_all<S>(
        &self,
        scenario: impl FnMut(&MockFabric) -> S,
        check: impl FnMut(Reboot, S) -> Result<(), String>,
    ) -> Result<CrashReport, CrashFailure> {
        self.explore(scenario, check, true)
    }

    fn explore<S>(
        &self,
        mut scenario: impl FnMut(&MockFabric) -> S,
        mut check: impl FnMut(Reboot, S) -> Result<(), String>,
        keep_going: bool,
    ) -> Result<CrashReport, CrashFailure> {
        let fabric = self.fabric(0)?;
        let node = self.node(&fabric)?;
        let model = fabric.inner.power.as_ref().expect("the persistence model is on");
        model.arm(node, u64::MAX);
        let _ = scenario(&fabric);
        let (events, _, _) = model.disarm();
        if events == 0 {
            return Err(CrashFailure {
                point: None,
                message: "the scenario made no event (nothing was posted)".into(),
            });
        }
        let seeds = if self.builder.unflushed.seed().is_some() { self.seeds } else { 1 };
        let points: Vec<u64> = match self.only {
            Some(i) if i == 0 || i > events => {
                return Err(CrashFailure {
                    point: None,
                    message: format!("crash point {i} is outside the scenario's events 1..={events}"),
                })
            }
            Some(i) => vec![i],
            None => (1..=events).collect(),
        };
        let mut checked = 0;
        let mut violations = Vec::new();
        for &index in &points {
            for s in 0..seeds {
                let fabric = self.fabric(s)?;
                let model = fabric.inner.power.as_ref().expect("the persistence model is on");
                let unflushed = model.unflushed;
                model.arm(node, index);
                let state = scenario(&fabric);
                let (seen, after, cut) = model.disarm();
                let point = CrashPoint { index, of: events, after, unflushed };
                let cut = match cut {
                    Some(Ok(c)) => c,
                    Some(Err(e)) => {
                        return Err(CrashFailure { point: Some(point), message: format!("the cut failed: {e}") })
                    }
                    None => {
                        return Err(CrashFailure {
                            point: Some(point),
                            message: format!(
                                "the crash point is past the last event: this run made {seen} events, the counting \
                                 run {events} (is the scenario deterministic?)"
                            ),
                        })
                    }
                };
                checked += 1;
                if let Err(message) = check(Reboot { fabric, point, cut }, state) {
                    let failure = CrashFailure { point: Some(point), message };
                    if !keep_going {
                        return Err(failure);
                    }
                    violations.push(failure);
                }
            }
        }
        Ok(CrashReport { points: checked, events, violations })
    }
}

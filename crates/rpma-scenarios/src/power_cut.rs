//! `rpma demo --power-cut`: the persistence scenarios (04, 05, 07, 09) under every crash point of
//! the server's node, on the mock's persistence model (docs/persistence.md).
//!
//! The server and the client are threads, each on a node of its own (mock devices `server`, at
//! the demo's address, and `client`); the server's memory is a file in a fresh directory per run
//! (mapped: what the examples call PMem). The client records what it was told is durable as it
//! goes ([`Promise`]); after the power cut of the server's node, each promise must hold in what
//! the server's region kept. Each crash point runs with the bytes not made durable lost, then torn
//! per 64-byte line under several seeds.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use rpma::mock::{CrashFailure, CrashPoints, MockFabric, MockFabricBuilder, Reboot, Unflushed};

use super::common::MapFile;
use super::promise::{Promise, Promises};
use super::{run_pair, ClientOpts, Scenario, ServerOpts};

/// The scenarios a power cut tests: those whose client makes the server's memory durable.
pub const SCENARIOS: [Scenario; 4] =
    [Scenario::WriteToPersistent, Scenario::FlushToPersistent, Scenario::AtomicWrite, Scenario::FlushToPersistentGpspm];

/// The server's address (its node is the device `server`).
const SERVER_ADDR: &str = "127.0.0.1";
/// The client's node (the device `client`, the first: a client's lookup of a remote address
/// goes through it).
const CLIENT_ADDR: &str = "10.77.0.200";
const PORT: &str = "7290";
/// The seeds of the torn policy per crash point.
const TORN_SEEDS: u64 = 3;

/// What the crash points of one scenario found.
#[derive(Debug)]
pub struct Outcome {
    /// The crash points run (events × policies and seeds).
    pub points: u64,
    /// The events of one run of the scenario.
    pub events: u64,
    /// The promises checked against a recovered region, over all points.
    pub promises: u64,
    /// The points whose check failed.
    pub violations: Vec<CrashFailure>,
}

fn fabric(unflushed: Unflushed) -> MockFabricBuilder {
    MockFabric::builder().device("client", &[CLIENT_ADDR]).device("server", &[SERVER_ADDR]).unflushed(unflushed)
}

/// Runs `s` once per crash point of the server's node under each policy, with the runs' files
/// in `dir`, mapped by `map_file`.
///
/// # Errors
/// If `s` is not a persistence scenario, or the exploration itself fails (a scenario without
/// events, a directory that cannot be made).
pub fn run(s: Scenario, dir: &Path, map_file: MapFile) -> Result<Outcome> {
    anyhow::ensure!(SCENARIOS.contains(&s), "{} makes nothing durable: --power-cut runs 04, 05, 07 and 09", s.name());
    let runs = AtomicU64::new(0);
    let checked = AtomicU64::new(0);
    let mut out = Outcome { points: 0, events: 0, promises: 0, violations: Vec::new() };
    for (unflushed, seeds) in [(Unflushed::Lost, 1), (Unflushed::Torn { seed: 0x5EED_C0DE }, TORN_SEEDS)] {
        let explore = CrashPoints::new(fabric(unflushed), "server").seeds(seeds);
        let report = explore
            .run_all(
                |f| {
                    let n = runs.fetch_add(1, Ordering::Relaxed);
                    one_run(s, f, &dir.join(format!("{}-{n}", s.name())), map_file)
                },
                |reboot, promises| check(&reboot, &promises?, &checked),
            )
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        out.points += report.points;
        out.events = report.events;
        out.violations.extend(report.violations);
    }
    out.promises = checked.load(Ordering::Relaxed);
    Ok(out)
}

/// One run of `s` on `f`, the server's file in `dir`: the promises its client recorded (the
/// run itself may fail after a power cut, as it should).
fn one_run(s: Scenario, f: &MockFabric, dir: &Path, map_file: MapFile) -> Result<Vec<Promise>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let mut so = ServerOpts::new(SERVER_ADDR, PORT);
    so.file = Some(PathBuf::from(dir).join("server.pmem"));
    so.file_create = true;
    so.map_file = Some(map_file);
    so.direct_write_to_pmem = true;
    let mut co = ClientOpts::new(SERVER_ADDR, PORT);
    co.words = ["rpma", "appends", "atomically"].map(String::from).to_vec();
    co.retries = 2;
    co.retry_delay = Duration::from_millis(10);
    let promises = Promises::default();
    co.promises = Some(promises.clone());
    let (fs, fc) = (f.clone(), f.clone());
    // A run cut short by the power cut fails; what it promised until then is the result.
    let _ =
        run_pair(move |ready| s.server(&fs, &ServerOpts { ready, ..so }), vec![Box::new(move || s.client(&fc, &co))]);
    let _ = std::fs::remove_dir_all(dir);
    Ok(promises.take())
}

/// Every promise holds in the server's region as the power cut left it.
fn check(reboot: &Reboot, promises: &[Promise], checked: &AtomicU64) -> Result<(), String> {
    let region = reboot.cut.regions().first().ok_or("the server's region did not come back")?.memory().to_vec();
    for p in promises {
        p.check(&region)?;
        checked.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// The lines `rpma demo --power-cut` prints for one scenario (its files in `dir`, mapped by
/// `map_file`).
///
/// # Errors
/// As [`run`].
pub fn lines(s: Scenario, dir: &Path, map_file: MapFile) -> Result<(bool, Vec<String>)> {
    let o = run(s, dir, map_file).with_context(|| format!("{} under power cuts", s.name()))?;
    let mut v = vec![format!(
        "crash points: {} ({} events, each with unflushed bytes lost and torn under {TORN_SEEDS} seeds), promises \
         checked: {}, violations: {}",
        o.points,
        o.events,
        o.promises,
        o.violations.len()
    )];
    if let Some(first) = o.violations.first() {
        v.push(format!("first violation: {first}"));
    }
    Ok((o.violations.is_empty(), v))
}

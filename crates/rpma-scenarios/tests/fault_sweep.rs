//! Every scenario on the mock with each provider call failed in turn.
//!
//! For each scenario a clean run on a fresh fabric counts the provider calls both sides make
//! (N); then, for k = 1..=N, a run on a fresh fabric fails call k with `EIO`. Every run must end
//! (bounded by [`RUN_TIMEOUT`]: a side still waiting then is a hang), no side may panic, a run
//! in which the fault fired must end with an error (except for the calls
//! [`tolerated_failure`] accepts), and afterwards every mock resource must be released and the process must hold
//! the file descriptors it held before.
//!
//! The two sides run in threads of this process, so the order of their calls, and the number of
//! polls while waiting, varies from run to run: call k is not the same call in every run, and a
//! run may make fewer than k calls (then nothing fails and the run must succeed).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use rpma::mock::MockFabric;
use rpma_scenarios::{ClientOpts, Ready, Scenario, ServerOpts, Stop};

/// How long one run (both sides) may take.
/// (Longer than the scenarios' `ESTABLISH_TIMEOUT`, which a side whose peer died while
/// connecting may need to wait out.)
const RUN_TIMEOUT: Duration = Duration::from_secs(20);
/// `EIO`.
const EIO: i32 = 5;

/// Whether the failure of call `at` of `calls` (the names of a run's provider calls, in order)
/// is one the scenarios tolerate by design, so that the run may still succeed.
///
/// These are `rdma_destroy_id` calls not made by a connection's teardown:
/// - the destruction of the temporary CM ID with which `rpma_utils_get_ibv_context`
///   (`Device::lookup`, run by every side first) finds the device: librpma ignores its failure
///   (docs/semantics.md#device-lookup: a failure of the final `rdma_destroy_id` is ignored), and so
///   does the mock;
/// - the teardown of a connection attempt the server rejected or did not hear (it was not
///   listening yet, or already gone): `common::connect` drops such an attempt with `let _ =` and
///   tries again, as the attempt has failed anyway.
///
/// A connection's teardown destroys its CM ID right after its CQ (`ibv_destroy_cq`); that
/// failure must be reported. The sides' calls interleave, so this is recognized by the call
/// just before, which is the same side's call in the teardown in practice. Every other failed
/// call must make the run fail.
fn tolerated_failure(calls: &[&str], at: usize) -> bool {
    calls[at] == "rdma_destroy_id" && at > 0 && calls[at - 1] != "ibv_destroy_cq"
}

/// One test at a time: the file descriptor check counts the whole process's descriptors.
static SERIAL: Mutex<()> = Mutex::new(());

fn server_opts(s: Scenario, dir: &std::path::Path) -> ServerOpts {
    let mut o = ServerOpts::new("127.0.0.1", "7204");
    o.file_create = true;
    match s {
        Scenario::ReadToPersistent
        | Scenario::WriteToPersistent
        | Scenario::FlushToPersistentGpspm
        | Scenario::FlushToPersistentGpspmSharedChannel
        | Scenario::AtomicWrite => o.file = Some(dir.join("pmem")),
        Scenario::FlushToPersistent => {
            o.file = Some(dir.join("pmem"));
            o.direct_write_to_pmem = true;
        }
        Scenario::MultipleConnections
        | Scenario::MultipleConnectionsSharedChannel
        | Scenario::MessagesPingPongWithSrq => o.clients = 2,
        _ => {}
    }
    o
}

fn client_opts(s: Scenario) -> ClientOpts {
    let mut o = ClientOpts::new("127.0.0.1", "7204");
    o.retries = 3;
    o.retry_delay = Duration::from_millis(5);
    o.rounds = 2;
    match s {
        Scenario::AtomicWrite => o.words = vec!["hello".into(), "rdma".into()],
        Scenario::SendWithImm => {
            o.words = vec!["msg".into()];
            o.imm = 77;
        }
        Scenario::MultipleConnections | Scenario::MultipleConnectionsSharedChannel => o.name = Some("sweep".into()),
        _ => {}
    }
    o
}

fn clients(s: Scenario) -> usize {
    if matches!(
        s,
        Scenario::MultipleConnections | Scenario::MultipleConnectionsSharedChannel | Scenario::MessagesPingPongWithSrq
    ) {
        2
    } else {
        1
    }
}

/// How a run ended.
#[derive(Debug)]
struct Outcome {
    /// Each side's error (or panic), by side name; empty = success.
    errors: Vec<(String, String)>,
}

/// The number of open file descriptors of this process.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(Iterator::count).unwrap_or(0)
}

/// Runs `s` on `f`: the server in a thread, then (once it listens) its clients in threads. `Err`
/// if a side did not end within [`RUN_TIMEOUT`].
fn run(s: Scenario, f: &MockFabric, dir: &std::path::Path) -> Result<Outcome, String> {
    let deadline = Instant::now() + RUN_TIMEOUT;
    let (tx, rx) = mpsc::channel::<(String, Result<(), String>)>();
    let (ready_tx, ready_rx) = mpsc::channel();
    let spawn = |name: String, work: Box<dyn FnOnce() -> anyhow::Result<()> + Send>| {
        let tx = tx.clone();
        thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                let r = match catch_unwind(AssertUnwindSafe(work)) {
                    Ok(r) => r.map_err(|e| format!("{e:#}")),
                    Err(p) => Err(format!(
                        "PANIC: {}",
                        p.downcast_ref::<&str>()
                            .map(ToString::to_string)
                            .or_else(|| p.downcast_ref::<String>().cloned())
                            .unwrap_or_default()
                    )),
                };
                let _ = tx.send((name, r));
            })
            .expect("spawning a side");
    };
    let mut so = server_opts(s, dir);
    so.ready = Ready::from_sender(ready_tx);
    // Clients that failed before connecting leave the server waiting for them: it is told to
    // stop then (what a person would do with Ctrl-C).
    let stop = Stop::new();
    so.stop = stop.clone();
    let fs = f.clone();
    spawn("server".into(), Box::new(move || s.server(&fs, &so).map(drop)));
    let mut sides = 1;
    // The clients start once the server listens; a server failing before that ends the run.
    let mut results = Vec::new();
    loop {
        if ready_rx.try_recv().is_ok() {
            for i in 0..clients(s) {
                let fc = f.clone();
                let co = client_opts(s);
                spawn(format!("client{i}"), Box::new(move || s.client(&fc, &co).map(drop)));
                sides += 1;
            }
            break;
        }
        match rx.recv_timeout(Duration::from_millis(1)) {
            Ok(r) => {
                results.push(r);
                break;
            }
            Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
            Err(_) => return Err("the server neither listened nor ended".into()),
        }
    }
    drop(tx);
    while results.len() < sides {
        // All clients ended, or one failed (the server may be waiting for its request while
        // another client waits for the server).
        if results.iter().all(|(n, _)| n != "server")
            && (results.len() == sides - 1 || results.iter().any(|(_, r)| r.is_err()))
        {
            stop.request();
        }
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(r) => results.push(r),
            Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
            Err(_) => {
                let done: Vec<&str> = results.iter().map(|(n, _)| n.as_str()).collect();
                return Err(format!("hung: {} of {sides} sides ended ({done:?}): {results:?}", results.len()));
            }
        }
    }
    let errors = results.into_iter().filter_map(|(n, r)| r.err().map(|e| (n, e))).collect();
    Ok(Outcome { errors })
}

/// The sweep of one scenario; returns (N, runs whose fault fired).
fn sweep(s: Scenario) -> (u64, u64) {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let name = s.name();
    let started = Instant::now();
    let fds = open_fds();

    let dir = tempfile::tempdir().unwrap();
    let f = MockFabric::new();
    f.faults().count_calls(None);
    let clean = run(s, &f, dir.path()).unwrap_or_else(|e| panic!("{name}: clean run: {e}"));
    let n = f.faults().calls();
    f.faults().disarm();
    assert!(clean.errors.is_empty(), "{name}: clean run failed: {:?}", clean.errors);
    assert!(f.live().is_zero(), "{name}: clean run leaked {:?}", f.live());
    drop(f);
    assert!(n > 0, "{name}: no provider call to fail");
    assert_eq!(open_fds(), fds, "{name}: the clean run leaked file descriptors");

    let (mut fired, mut tolerated) = (0, 0);
    let mut bad = Vec::new();
    for k in 1..=n {
        let dir = tempfile::tempdir().unwrap();
        let f = MockFabric::new();
        f.faults().record_names(true);
        f.faults().fail_nth(k, EIO, None);
        let out = run(s, &f, dir.path()).unwrap_or_else(|e| {
            let calls = f.faults().recorded();
            let at = k as usize - 1;
            let end = (at + 1).min(calls.len());
            panic!("{name}: call {k} failed: {e}; calls up to it: {:?}", &calls[end.saturating_sub(7)..end])
        });
        let names = f.faults().recorded();
        f.faults().disarm();
        let at = k as usize - 1;
        let failed = names.get(at).copied();
        for (side, e) in &out.errors {
            if e.starts_with("PANIC") {
                bad.push(format!("call {k} ({failed:?}): the {side} panicked: {e}"));
            }
        }
        match failed {
            // The run made fewer than k calls: nothing failed.
            None if out.errors.is_empty() => {}
            None => bad.push(format!("no fault at {k}, yet {:?}", out.errors)),
            Some(call) => {
                fired += 1;
                if out.errors.is_empty() {
                    if tolerated_failure(&names, at) {
                        tolerated += 1;
                    } else {
                        bad.push(format!(
                            "call {k} ({call}) failed, yet the scenario succeeded: {:?}",
                            &names[at.saturating_sub(4)..at]
                        ));
                    }
                }
            }
        }
        if !f.live().is_zero() {
            bad.push(format!("call {k} ({failed:?}) failed: leaked {:?}", f.live()));
        }
        drop(f);
        let now = open_fds();
        if now != fds {
            bad.push(format!("call {k} ({failed:?}) failed: {now} file descriptors open, {fds} before"));
        }
    }
    assert!(bad.is_empty(), "{name}: {} bad runs of {n}:\n{}", bad.len(), bad.join("\n"));
    println!(
        "{name}: N = {n} provider calls, {n} runs, {fired} with the fault fired ({tolerated} tolerated), {:?}",
        started.elapsed()
    );
    (n, fired)
}

macro_rules! sweeps {
    ($($t:ident: $s:ident,)*) => {$(
        #[test]
        fn $t() {
            let (n, fired) = sweep(Scenario::$s);
            assert!(n > 0 && fired > 0);
        }
    )*};
}

sweeps! {
    s01_connection: Connection,
    s02_read_to_volatile: ReadToVolatile,
    s03_read_to_persistent: ReadToPersistent,
    s04_write_to_persistent: WriteToPersistent,
    s05_flush_to_persistent: FlushToPersistent,
    s06_multiple_connections: MultipleConnections,
    s07_atomic_write: AtomicWrite,
    s08_messages_ping_pong: MessagesPingPong,
    s09_flush_to_persistent_gpspm: FlushToPersistentGpspm,
    s10_send_with_imm: SendWithImm,
    s11_write_with_imm: WriteWithImm,
    s12_receive_completion_queue: ReceiveCompletionQueue,
    s13_messages_ping_pong_with_srq: MessagesPingPongWithSrq,
    srq_ping_pong: SrqPingPong,
    shared_channel: SharedChannel,
    s06scch_multiple_connections: MultipleConnectionsSharedChannel,
    s09scch_flush_to_persistent_gpspm: FlushToPersistentGpspmSharedChannel,
}

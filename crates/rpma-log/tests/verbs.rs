//! The log on a real RDMA device (rxe in the Soft-RoCE VM: scripts/test-verbs.sh), the replicas'
//! regions on persistent memory (`RPMA_TEST_PMEM`, a devdax device: 2 MiB slots 32 to 37):
//!
//! - process kills: three replica processes (this binary again, `child_replica`), each on its
//!   own slot of the devdax device, one of them SIGKILLed at random (seeded) moments of a stream
//!   of appends and syncs and restarted on its region; the writer goes on with the other two,
//!   reconnects and catches the replica up ([`Log::maintain`]); in the end every replica process
//!   is killed and restarted and a new writer recovers everything acknowledged;
//! - fencing: a writer still running after a new writer's recovery cannot change any replica's
//!   log (its syncs fail, its reconnects are refused, and the regions' bytes do not move).
//!
//! Without `RPMA_TEST_DEVICE` the tests are not asked for: they are listed as ignored, with one
//! line saying so (so `cargo test --workspace --all-features` passes on hosts without RDMA, and
//! counts nothing as passed); with it set, a missing `RPMA_TEST_ADDR` or `RPMA_TEST_PMEM` fails
//! them, naming what is missing. `cargo test -p rpma-log --features verbs --test verbs` is meant
//! for the VM (scripts/test-verbs.sh).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use rpma::mem::{MapOptions, MapSync, MemoryKind};
use rpma::verbs::{set_persistent_flush, PersistentFlush, Verbs};
use rpma::{ContextType, Device, Memory, Peer};
use rpma_log::{FlushMode, Health, Log, LogError, LogOptions, Quorum, Replica, ReplicaAddr, ReplicaOptions};

const LOG_ID: u64 = 0x5EED_7E5B;
/// A replica's region: one 2 MiB slot of the devdax device.
const REGION: usize = 2 << 20;
/// The first slot (tests/verbs.rs of the facade uses 0-3, interop 4-11, the CLI's tests 16-31).
const SLOT_KILLS: u64 = 32;
const SLOT_FENCING: u64 = 35;
const SLOT_ENV: &str = "RPMA_LOG_CHILD_SLOT";
const PORT_ENV: &str = "RPMA_LOG_CHILD_PORT";
const FORMAT_ENV: &str = "RPMA_LOG_CHILD_FORMAT";

/// The device's address and the devdax device, or a failure naming what is missing.
fn env() -> (String, PathBuf) {
    let need = |v: &str| {
        std::env::var(v).ok().filter(|s| !s.is_empty()).unwrap_or_else(|| {
            panic!(
                "{v} is not set: these tests need an RDMA device and a devdax device (run them in the Soft-RoCE VM: \
                 SOFTROCE_PMEM=256M scripts/test-verbs.sh)"
            )
        })
    };
    need("RPMA_TEST_DEVICE");
    (need("RPMA_TEST_ADDR"), PathBuf::from(need("RPMA_TEST_PMEM")))
}

/// 2 MiB slot `slot` of the devdax device.
fn pmem_slot(path: &Path, slot: u64) -> Memory {
    let opts = MapOptions::new().offset(slot << 21).len(REGION).map_sync(MapSync::Never);
    // SAFETY: [M5] nobody truncates a devdax device (it has a fixed size); [M3] no slice of this
    // memory is made while it is registered (the tests read it through `volatile()` copies).
    let m = unsafe { opts.map(path) }.unwrap_or_else(|e| panic!("RPMA_TEST_PMEM={path:?}: {e}"));
    assert_eq!(m.kind(), MemoryKind::DevDax, "RPMA_TEST_PMEM={path:?} is not a devdax device");
    m
}

fn peer(t: &Verbs, addr: &str, ctx: ContextType) -> Peer<Verbs> {
    Peer::new(&Device::lookup(t, addr, ctx).unwrap_or_else(|e| panic!("the device of {addr}: {e}"))).expect("peer")
}

/// The payload of entry `lsn` (its size varies).
fn payload(lsn: u64) -> Vec<u8> {
    let len = 8 + (lsn as usize * 13) % 90;
    (0..len).map(|k| (lsn as u8).wrapping_mul(31).wrapping_add(k as u8)).collect()
}

/// A replica process, killed (SIGKILL) when dropped.
struct ReplicaProcess(Child);

impl ReplicaProcess {
    /// This binary again, serving on `port` the region in `slot` (formatted if `format`);
    /// returns once it listens.
    fn start(slot: u64, port: u16, format: bool) -> Self {
        let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
        cmd.args(["--ignored", "--exact", "child_replica", "--nocapture", "--test-threads=1", "-q"])
            .env(SLOT_ENV, slot.to_string())
            .env(PORT_ENV, port.to_string())
            // the region is on pmem: native persistent flushes (the registration asks for them)
            .env("RPMA_VERBS_PERSISTENT_FLUSH", "native")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if format {
            cmd.env(FORMAT_ENV, "1");
        }
        let mut child = cmd.spawn().expect("start a replica process");
        let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        loop {
            line.clear();
            let n = out.read_line(&mut line).expect("the replica's output");
            assert!(n > 0, "the replica process on port {port} ended before it listened");
            if line.starts_with("listening") {
                break;
            }
        }
        std::thread::spawn(move || for _ in out.lines().map_while(Result::ok) {});
        Self(child)
    }

    fn kill(mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for ReplicaProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn process_kill_of_pmem_replicas_on_rxe_reconnect_and_catch_up_lose_nothing_acknowledged() {
    let (addr, _pmem) = env();
    set_persistent_flush(PersistentFlush::Native);
    let seed: u64 = std::env::var("RPMA_LOG_KILL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(36);
    let base = 7660u16;
    let mut procs: Vec<Option<ReplicaProcess>> =
        (0..3u16).map(|i| Some(ReplicaProcess::start(SLOT_KILLS + u64::from(i), base + i, true))).collect();
    let set: Vec<ReplicaAddr> = (0..3u16).map(|i| ReplicaAddr::new(&addr, &(base + i).to_string())).collect();
    let t = Verbs::new();
    let writer = peer(&t, &addr, ContextType::Remote);
    // A killed replica's connection gets no answer: the writer marks it down when its send queue
    // runs low and a drain finds nothing completed within the timeout.
    let secs = std::env::var("RPMA_LOG_KILL_TIMEOUT").ok().and_then(|s| s.parse().ok()).unwrap_or(4);
    let opts = LogOptions::new(LOG_ID)
        .quorum(Quorum::Majority)
        .flush(FlushMode::Persistent)
        .timeout(Duration::from_secs(secs));
    let (mut log, report) = Log::open(&writer, &set, opts.clone()).expect("open");
    assert_eq!(report.next_lsn, 0, "the regions were formatted");

    // The random moments, from a seed printed on failure.
    let mut rng = fastrand::Rng::with_seed(seed);
    let total = 1200u64;
    let (mut acked, mut kills, mut rejoins, mut since, mut lsn) = (0u64, 0, 0, 0u64, 0u64);
    let mut next_kill = 100 + rng.u64(..200);
    let mut group = 1 + rng.u64(..32);
    // The replica killed, and the lsn at which its process is started again.
    let mut killed: Option<(usize, u64)> = None;
    let mut restarted: Option<usize> = None;
    // Whether the writer has seen the killed replica go down: until it has, its health may
    // still read `Up` (a dead replica is found when its connection ends or a drain fails).
    let mut noticed = false;
    // The writer's health events so far, for the messages.
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(600);
    // The appends go on until `total`, until two kills, and until every replica is back up (a
    // killed replica is found by the drain of its full send queue, two operations a sync: how
    // many appends that takes depends on the groups).
    while lsn < total || kills < 2 || killed.is_some() || restarted.is_some() {
        assert!(Instant::now() < deadline, "seed {seed}: lsn {lsn}; {:?}; {seen:?}", log.health());
        assert_eq!(log.append(&payload(lsn)).unwrap_or_else(|e| panic!("append {lsn} (seed {seed}): {e}")), lsn);
        lsn += 1;
        since += 1;
        if since >= group {
            // Every sync returns: a majority is up whatever the killed replica does.
            acked = log
                .sync(lsn - 1)
                .unwrap_or_else(|e| panic!("sync to {lsn} (seed {seed}): {e}; {:?}; {seen:?}", log.health()));
            assert_eq!(acked, lsn);
            since = 0;
            group = 1 + rng.u64(..32);
        }
        log.maintain();
        let events = log.health_events();
        if let Some(i) = killed.map(|(i, _)| i).or(restarted) {
            noticed |= events.iter().any(|e| e.replica == i && e.health == Health::Down);
        }
        seen.extend(events);
        if let Some(i) = restarted {
            if noticed && log.health()[i] == Health::Up {
                rejoins += 1;
                restarted = None;
                next_kill = lsn + 100 + rng.u64(..300);
            }
        }
        if let Some((i, at)) = killed {
            if lsn >= at {
                let port = base + u16::try_from(i).unwrap_or(0);
                procs[i] = Some(ReplicaProcess::start(SLOT_KILLS + i as u64, port, false));
                killed = None;
                restarted = Some(i);
            }
        } else if restarted.is_none() && lsn >= next_kill && (lsn < total || kills < 2) {
            // SIGKILL one replica process between two appends (its writes and commits in
            // flight); the writer goes on with the other two, then the process is restarted on
            // its region and the writer's maintain reconnects and catches it up.
            let i = rng.u64(..3) as usize;
            procs[i].take().expect("the replica runs").kill();
            noticed = false;
            kills += 1;
            killed = Some((i, lsn + 1 + rng.u64(..200)));
        }
    }
    acked = acked.max(log.sync_all().expect("the last sync"));
    assert!(kills >= 2 && rejoins == kills, "seed {seed}: {kills} kills, {rejoins} rejoins");
    drop(log);

    // Every replica process killed and restarted on its region: a new writer recovers.
    for p in &mut procs {
        p.take().expect("the replica runs").kill();
    }
    let _procs: Vec<ReplicaProcess> =
        (0..3u16).map(|i| ReplicaProcess::start(SLOT_KILLS + u64::from(i), base + i, false)).collect();
    let (log2, report) = Log::open(&writer, &set, opts).expect("open after the kills");
    assert!(report.next_lsn >= acked, "seed {seed}: {acked} acknowledged, {} recovered", report.next_lsn);
    assert_eq!(report.head_lsn, 0);
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    for l in 0..report.next_lsn {
        assert_eq!(log2.read(l).expect("read"), payload(l), "seed {seed}: entry {l}");
    }
    eprintln!(
        "verbs process kill: seed {seed}: {kills} replica processes killed and caught up, {acked} acknowledged, {} \
         recovered, lost 0",
        report.next_lsn
    );
}

fn fencing_on_rxe_an_old_writer_cannot_change_any_replica_after_a_new_writers_recovery() {
    let (addr, pmem) = env();
    set_persistent_flush(PersistentFlush::Native);
    let t = Verbs::new();
    let base = 7670u16;
    // The replicas serve in threads of this process; a second mapping of each slot lets the
    // test read what the region holds at any time.
    let mut handles = Vec::new();
    let mut views = Vec::new();
    for i in 0..3u16 {
        let slot = SLOT_FENCING + u64::from(i);
        let p = peer(&t, &addr, ContextType::Local);
        let r = Replica::format(&p, pmem_slot(&pmem, slot), LOG_ID)
            .expect("format")
            .with_options(ReplicaOptions::default().with_poll_interval(Duration::from_millis(5)))
            .listen(&addr, &(base + i).to_string())
            .expect("listen");
        handles.push(r.spawn());
        views.push(pmem_slot(&pmem, slot));
    }
    let set: Vec<ReplicaAddr> = (0..3u16).map(|i| ReplicaAddr::new(&addr, &(base + i).to_string())).collect();
    let opts = LogOptions::new(LOG_ID).quorum(Quorum::Majority).timeout(Duration::from_secs(10));

    let wa = peer(&t, &addr, ContextType::Remote);
    let (mut old, _) = Log::open(&wa, &set, opts.clone().writer_id(1)).expect("the old writer opens");
    for l in 0..40 {
        old.append(&payload(l)).expect("append");
    }
    assert_eq!(old.sync_all().expect("sync"), 40);
    for l in 40..45 {
        old.append(&payload(l)).expect("append"); // posted, not synced: may or may not survive
    }

    let wb = peer(&t, &addr, ContextType::Remote);
    let (mut new, report) = Log::open(&wb, &set, opts.writer_id(2)).expect("the new writer recovers");
    assert!(report.next_lsn >= 40, "{report:?}");
    assert_eq!(report.repaired.len(), 3, "every replica taken over: {report:?}");
    let recovered = report.next_lsn;
    let before: Vec<Vec<u8>> = views.iter().map(Memory::to_vec).collect();

    // The old writer goes on: its writes, commits and reads reach no region (each replica
    // disconnected and destroyed its queue pair), so its sync fails; its reconnects (old epoch)
    // are refused.
    for l in 45..80 {
        match old.append(&payload(l)) {
            Ok(_) | Err(LogError::NoQuorum { .. }) => {}
            Err(e) => panic!("the old writer's append {l}: {e}"),
        }
    }
    match old.sync_all() {
        Err(LogError::NoQuorum { up, .. }) => assert!(up < 2, "{up} replicas up for the old writer"),
        other => panic!("the old writer's sync after the takeover: {other:?}"),
    }
    // Its reconnects, with its own (old) epoch, are refused; a replica it still believes
    // connected is not reconnected, and stays fenced.
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        old.maintain();
        std::thread::sleep(Duration::from_millis(20));
    }
    for i in 0..3 {
        if old.health()[i] == Health::Down {
            let e = old.reconnect(i).expect_err("the old writer reconnected after the takeover");
            assert!(e.to_string().contains("fenced"), "replica {i}: {e}");
        }
    }
    for l in 80..90 {
        let _ = old.append(&payload(l));
    }
    assert!(old.sync_all().is_err(), "the old writer synced after the takeover");
    eprintln!("verbs fencing: the old writer's view of the replicas: {:?}", old.health());
    for (i, v) in views.iter().enumerate() {
        assert!(
            v.to_vec() == before[i],
            "replica {i}'s region changed after the takeover, with only the old writer active"
        );
    }
    drop(old);

    // The new writer goes on over the same replicas and reads back the history.
    for l in recovered..recovered + 20 {
        assert_eq!(new.append(&payload(l)).expect("the new writer appends"), l);
    }
    assert_eq!(new.sync_all().expect("the new writer syncs"), recovered + 20);
    for l in 0..recovered + 20 {
        assert_eq!(new.read(l).expect("read"), payload(l), "entry {l}");
    }
    drop(new);
    for h in handles {
        h.stop().expect("a replica stops");
    }
    eprintln!("verbs fencing: {recovered} entries recovered by the new writer; the old writer changed no region");
}

/// A replica process of the process kill test (this binary run with `--ignored --exact
/// child_replica`).
fn child_replica() {
    let (addr, pmem) = env();
    let slot: u64 = std::env::var(SLOT_ENV).expect("RPMA_LOG_CHILD_SLOT unset").parse().expect("a slot");
    let port = std::env::var(PORT_ENV).expect("RPMA_LOG_CHILD_PORT unset");
    let t = Verbs::new();
    let p = peer(&t, &addr, ContextType::Local);
    let memory = pmem_slot(&pmem, slot);
    let replica = if std::env::var_os(FORMAT_ENV).is_some() {
        Replica::format(&p, memory, LOG_ID).expect("format")
    } else {
        Replica::open(&p, memory, LOG_ID).expect("open the log the region holds")
    };
    let mut replica = replica
        .with_options(ReplicaOptions::default().with_poll_interval(Duration::from_millis(5)))
        .listen(&addr, &port)
        .expect("listen");
    let mut out = std::io::stdout();
    writeln!(out, "listening").expect("stdout");
    out.flush().expect("stdout");
    // Killed by the parent.
    replica.serve(&AtomicBool::new(false)).expect("serve");
}

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let asked = std::env::var("RPMA_TEST_DEVICE").is_ok_and(|d| !d.is_empty());
    if !asked {
        eprintln!("rpma-log verbs tests: RPMA_TEST_DEVICE is not set: not asked for, listed as ignored");
    }
    let test = |name: &'static str, f: fn()| {
        libtest_mimic::Trial::test(name, move || {
            f();
            Ok(())
        })
    };
    let trials = vec![
        test(
            "process_kill_of_pmem_replicas_on_rxe_reconnect_and_catch_up_lose_nothing_acknowledged",
            process_kill_of_pmem_replicas_on_rxe_reconnect_and_catch_up_lose_nothing_acknowledged,
        )
        .with_ignored_flag(!asked),
        test(
            "fencing_on_rxe_an_old_writer_cannot_change_any_replica_after_a_new_writers_recovery",
            fencing_on_rxe_an_old_writer_cannot_change_any_replica_after_a_new_writers_recovery,
        )
        .with_ignored_flag(!asked),
        test("child_replica", child_replica).with_ignored_flag(true),
    ];
    libtest_mimic::run(&args, trials).exit();
}

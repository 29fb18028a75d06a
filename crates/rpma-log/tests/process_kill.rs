//! Process kills: three replicas as processes on the mock's cross-process mode, each on a file
//! (a shared mapping: what reached its memory survives the process), SIGKILLed at random (seeded)
//! moments of a stream of appends and syncs, restarted on the same file, reconnected and caught
//! up by the writer ([`Log::maintain`]); in the end every replica is killed and restarted and a
//! new writer recovers: nothing acknowledged is lost, and the entries are the ones appended.
//!
//! The replica processes are this test binary run again with `--ignored --exact
//! child_replica` and `RPMA_LOG_CHILD_*` set; run directly, that child fails.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use rpma::mem::MapOptions;
use rpma::mock::{Device, MockFabric, Peer};
use rpma::{ContextType, Memory};
use rpma_log::{Health, Log, LogError, LogOptions, Quorum, Replica, ReplicaAddr, ReplicaOptions};

const LOG_ID: u64 = 0x5EED_0036;
const ADDR: &str = "127.0.0.1";
const REGION: usize = 256 * 1024;
const DIR_ENV: &str = "RPMA_LOG_CHILD_DIR";
const PORT_ENV: &str = "RPMA_LOG_CHILD_PORT";
const FILE_ENV: &str = "RPMA_LOG_CHILD_FILE";
const DEADLINE: Duration = Duration::from_secs(20);

fn fabric(dir: &Path) -> MockFabric {
    MockFabric::builder().rendezvous(dir).try_build().expect("a cross-process fabric")
}

fn peer(f: &MockFabric) -> Peer {
    Peer::new(&Device::lookup(f, ADDR, ContextType::Local).expect("device")).expect("peer")
}

/// The payload of entry `lsn` (its size varies, so the ring wraps at odd places).
fn payload(lsn: u64) -> Vec<u8> {
    let len = 8 + (lsn as usize * 13) % 90;
    (0..len).map(|k| (lsn as u8).wrapping_mul(31).wrapping_add(k as u8)).collect()
}

/// A replica process, killed (SIGKILL) when dropped.
struct ReplicaProcess(Child);

impl ReplicaProcess {
    /// This binary again, serving replica `port` on `file`; returns once it listens.
    fn start(dir: &Path, port: u16, file: &Path) -> Self {
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args(["--ignored", "--exact", "child_replica", "--nocapture", "--test-threads=1", "-q"])
            .env(DIR_ENV, dir)
            .env(PORT_ENV, port.to_string())
            .env(FILE_ENV, file)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start a replica process");
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
        // Its further output (none expected) is drained on a thread of its own.
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

/// Replica `i`'s process, killed after the writer's health events were last taken, ends up
/// with the writer reconnected to its new process and caught up. Its health may still read
/// `Up` here: the writer notices a dead replica only when its connection ends or a work request
/// fails (with a majority quorum the syncs do not wait for it), so the wait is for a `Down`
/// event first (a reconnect may follow it within one `maintain`), then for `Up`.
fn bring_back(log: &mut Log<MockFabric>, i: usize) {
    let deadline = Instant::now() + DEADLINE;
    let mut noticed = false;
    let mut seen = Vec::new();
    while !noticed || log.health()[i] != Health::Up {
        log.maintain();
        let events = log.health_events();
        noticed |= events.iter().any(|e| e.replica == i && e.health == Health::Down);
        seen.extend(events);
        assert!(Instant::now() < deadline, "replica {i} not back within {DEADLINE:?}: {seen:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Appends entry `lsn`; a full ring is synced (what it acknowledges goes to `acked`) and its
/// prefix truncated first.
fn append(log: &mut Log<MockFabric>, lsn: u64, acked: &mut u64, seed: u64) {
    loop {
        match log.append(&payload(lsn)) {
            Ok(l) => {
                assert_eq!(l, lsn, "seed {seed}");
                return;
            }
            Err(LogError::Full { .. }) => {
                *acked = log.sync_all().unwrap_or_else(|e| panic!("a sync before truncating (seed {seed}): {e}"));
                log.truncate_prefix(*acked).unwrap_or_else(|e| panic!("truncation (seed {seed}): {e}"));
            }
            Err(e) => panic!("append {lsn} (seed {seed}): {e}"),
        }
    }
}

fn appends_with_kills(seed: u64) {
    let t = tempfile::tempdir().expect("a temporary directory");
    let rv = t.path().join("rv");
    let base = 7700 + u16::try_from(seed % 50).unwrap_or(0) * 4;
    let files: Vec<PathBuf> = (0..3).map(|i| t.path().join(format!("replica{i}.log"))).collect();
    let mut procs: Vec<Option<ReplicaProcess>> =
        (0..3u16).map(|i| Some(ReplicaProcess::start(&rv, base + i, &files[usize::from(i)]))).collect();
    let set: Vec<ReplicaAddr> = (0..3u16).map(|i| ReplicaAddr::new(ADDR, &(base + i).to_string())).collect();
    let f = fabric(&rv);
    let writer = peer(&f);
    let opts = LogOptions::new(LOG_ID).quorum(Quorum::Majority).timeout(Duration::from_secs(5));
    let (mut log, report) = Log::open(&writer, &set, opts.clone()).expect("open");
    assert_eq!(report.next_lsn, 0);

    // The test's random moments, from a seed printed on failure.
    let mut rng = fastrand::Rng::with_seed(seed);
    let total = 3000u64;
    let mut acked = 0u64;
    let mut kills = 0;
    let mut next_kill = 50 + rng.u64(..300);
    let mut group = 1 + rng.u64(..32);
    let mut since = 0;
    let mut lsn = 0u64;
    while lsn < total {
        append(&mut log, lsn, &mut acked, seed);
        lsn += 1;
        since += 1;
        if since >= group {
            // Every sync returns: a majority is up whatever one killed replica does.
            acked = log.sync(lsn - 1).unwrap_or_else(|e| panic!("sync to {lsn} (seed {seed}): {e}"));
            assert_eq!(acked, lsn);
            since = 0;
            group = 1 + rng.u64(..32);
        }
        if lsn == next_kill {
            // SIGKILL one replica, between any two appends (its writes and commits in flight),
            // go on with the other two for a while, then restart it on its file.
            let i = rng.u64(..3) as usize;
            let _ = log.health_events();
            procs[i].take().expect("the replica runs").kill();
            kills += 1;
            let run_without = rng.u64(..200);
            for _ in 0..run_without {
                if lsn >= total {
                    break;
                }
                append(&mut log, lsn, &mut acked, seed);
                lsn += 1;
                if rng.u64(..8) == 0 {
                    acked = log.sync(lsn - 1).expect("sync while a replica is down");
                }
            }
            procs[i] = Some(ReplicaProcess::start(&rv, base + u16::try_from(i).unwrap_or(0), &files[i]));
            bring_back(&mut log, i);
            next_kill = lsn + 50 + rng.u64(..300);
        }
    }
    acked = acked.max(log.sync_all().expect("the last sync"));
    assert!(kills >= 3, "seed {seed}: {kills} kills");
    drop(log);

    // Every replica killed and restarted: a new writer recovers everything acknowledged.
    for p in &mut procs {
        p.take().expect("the replica runs").kill();
    }
    let _procs: Vec<ReplicaProcess> =
        (0..3u16).map(|i| ReplicaProcess::start(&rv, base + i, &files[usize::from(i)])).collect();
    let (log2, report) = Log::open(&writer, &set, opts).expect("open after the kills");
    assert!(report.next_lsn >= acked, "seed {seed}: {acked} acknowledged, {} recovered", report.next_lsn);
    assert!(report.epoch >= 2);
    for l in report.head_lsn..report.next_lsn {
        assert_eq!(log2.read(l).expect("read"), payload(l), "seed {seed}: entry {l}");
    }
    assert!(report.head_lsn < acked, "seed {seed}: something acknowledged is left to read");
    eprintln!(
        "process_kill: seed {seed}: {kills} replica processes killed, {acked} acknowledged, {} recovered, lost 0",
        report.next_lsn
    );
}

#[test]
fn process_kill_reconnect_and_catch_up_lose_nothing_acknowledged() {
    let seeds: Vec<u64> = match std::env::var("RPMA_LOG_KILL_SEEDS") {
        Ok(s) => s.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        Err(_) => vec![1, 2, 3],
    };
    for seed in seeds {
        appends_with_kills(seed);
    }
}

#[test]
#[ignore = "a child process of process_kill_reconnect_and_catch_up_lose_nothing_acknowledged"]
fn child_replica() {
    let dir = PathBuf::from(std::env::var_os(DIR_ENV).expect("a replica process: RPMA_LOG_CHILD_DIR unset"));
    let port = std::env::var(PORT_ENV).expect("a replica process: RPMA_LOG_CHILD_PORT unset");
    let file = PathBuf::from(std::env::var_os(FILE_ENV).expect("a replica process: RPMA_LOG_CHILD_FILE unset"));
    let f = fabric(&dir);
    let p = peer(&f);
    // SAFETY: [M5] the file is this test's own, in its private temporary directory: nothing
    // truncates it while it is mapped, and only this process (its region) writes it.
    let memory: Memory = unsafe { MapOptions::new().len(REGION).create(true).map(&file) }.expect("map the file");
    let mut head = [0u8; 8];
    memory.volatile().read(0, &mut head).expect("read the header");
    let replica = if head == [0; 8] {
        Replica::format(&p, memory, LOG_ID).expect("format")
    } else {
        Replica::open(&p, memory, LOG_ID).expect("open the log the file holds")
    };
    let mut replica = replica
        .with_options(ReplicaOptions::default().with_poll_interval(Duration::from_millis(1)))
        .listen(ADDR, &port)
        .expect("listen");
    let mut out = std::io::stdout();
    writeln!(out, "listening").expect("stdout");
    out.flush().expect("stdout");
    // Killed by the parent.
    replica.serve(&AtomicBool::new(false)).expect("serve");
}

//! A replicated log on the in-memory mock fabric: three replicas (each its own node), a writer
//! appending with group commit to a majority, one replica's power cut and the replica brought
//! back (rebooted with what its region kept, caught up by the writer), then a writer failover:
//! a new writer recovers every acknowledged entry and fences the old one.
//!
//! ```sh
//! cargo run -p rpma-log --example replicated_log
//! ```
//!
//! Ends with `replicated_log: OK` (exit 0), or says what failed (exit 1).

use std::error::Error;
use std::process::ExitCode;
use std::time::Instant;

use rpma::mock::{Device, MockFabric, Peer, PersistentMemory};
use rpma::{ContextType, Memory};
use rpma_log::{check_region, Log, LogError, LogOptions, Quorum, Replica, ReplicaAddr, ReplicaHandle};

const LOG_ID: u64 = 0x0001_0C00;
const PORT: &str = "7600";
const REGION: usize = 1 << 20;

type Res<T> = Result<T, Box<dyn Error>>;

fn ip(i: usize) -> String {
    format!("10.0.1.{}", i + 1)
}

fn peer(fabric: &MockFabric, addr: &str) -> Res<Peer> {
    Ok(Peer::new(&Device::lookup(fabric, addr, ContextType::Local)?)?)
}

/// Replica `i`: a new log, or the memory it had.
fn serve(fabric: &MockFabric, i: usize, memory: Option<Memory>) -> Res<ReplicaHandle> {
    let p = peer(fabric, &ip(i))?;
    let r = match memory {
        None => Replica::format(&p, Memory::page_aligned(REGION)?, LOG_ID)?,
        Some(m) => Replica::open(&p, m, LOG_ID)?,
    };
    Ok(r.listen(&ip(i), PORT)?.spawn())
}

fn entry(lsn: u64) -> [u8; 64] {
    let mut e = [(lsn as u8).wrapping_mul(7); 64];
    e[..8].copy_from_slice(&lsn.to_le_bytes());
    e
}

fn fabric(model: bool) -> MockFabric {
    let mut b = MockFabric::builder().device("writer", &["10.0.0.1"]);
    for i in 0..3 {
        b = b.device(&format!("r{i}"), &[ip(i).as_str()]);
    }
    if model {
        b = b.persistent_memory(PersistentMemory::All);
    }
    b.build()
}

/// Appends of 64 B with a sync every 64 (group commit) and a truncation every 1024: synced
/// appends per second.
fn group_commit(log: &mut Log<MockFabric>, n: u64) -> Res<f64> {
    let first = log.next_lsn();
    let t = Instant::now();
    for lsn in first..first + n {
        log.append(&entry(lsn))?;
        if lsn % 64 == 63 {
            log.sync(lsn)?;
        }
        if lsn % 1024 == 1023 {
            log.truncate_prefix(log.durable_lsn())?;
        }
    }
    log.sync_all()?;
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

fn run() -> Res<()> {
    {
        // Without the persistence model (the mock's fast path).
        let fabric = fabric(false);
        let _replicas: Vec<ReplicaHandle> = (0..3).map(|i| serve(&fabric, i, None)).collect::<Res<_>>()?;
        let set: Vec<ReplicaAddr> = (0..3).map(|i| ReplicaAddr::new(&ip(i), PORT)).collect();
        let (mut log, _) = Log::open(&peer(&fabric, "10.0.0.1")?, &set, LogOptions::new(LOG_ID))?;
        let rate = group_commit(&mut log, 1 << 16)?;
        println!("group commit, 64 B, majority of 3, no persistence model: {rate:.0} synced appends/s");
    }
    let fabric = fabric(true);
    let mut replicas: Vec<Option<ReplicaHandle>> =
        (0..3).map(|i| serve(&fabric, i, None).map(Some)).collect::<Res<_>>()?;
    let set: Vec<ReplicaAddr> = (0..3).map(|i| ReplicaAddr::new(&ip(i), PORT)).collect();
    let writer = peer(&fabric, "10.0.0.1")?;
    let opts = LogOptions::new(LOG_ID).quorum(Quorum::Majority);

    let (mut log, report) = Log::open(&writer, &set, opts.clone())?;
    println!("writer 1: epoch {}, recovered {} entries", report.epoch, report.next_lsn);
    // Appends with group commit: one batch (writes and a flush) per replica for each 64 appends.
    let n = 4096u64;
    let rate = group_commit(&mut log, n)?;
    println!(
        "writer 1: {n} appends of 64 B synced to a majority of 3 (persistence model on), {rate:.0} synced appends/s"
    );

    // Replica 2's node loses power; the writer goes on with the other two.
    let dev = Device::lookup(&fabric, &ip(2), ContextType::Local)?;
    let cut = fabric.power_cut(dev.backend())?;
    if let Some(h) = replicas[2].take() {
        h.kill();
    }
    for lsn in n..n + 100 {
        log.append(&entry(lsn))?;
    }
    let durable = log.sync_all()?;
    println!("replica 2 lost power; writer 1 synced to {durable} on the others: {:?}", log.health());
    for e in log.health_events() {
        println!("  health: replica {} {:?} {}", e.replica, e.health, e.reason.unwrap_or_default());
    }
    // It reboots with what its region kept, and the writer catches it up.
    let kept = cut.into_regions().pop().ok_or("the replica's region did not come back")?.into_memory();
    let before = check_region(&kept.to_vec())?;
    replicas[2] = Some(serve(&fabric, 2, Some(kept))?);
    log.reconnect(2)?;
    println!(
        "replica 2 rebooted holding entries {}..{}, caught up to {}: {:?}",
        before.head_lsn,
        before.next_lsn,
        log.durable_on(2),
        log.health()
    );

    // A new writer takes over: it recovers every acknowledged entry and fences the old one.
    let (log2, report) = Log::open(&writer, &set, opts)?;
    println!(
        "writer 2: epoch {}, recovered entries {}..{} from replica {:?}, repaired {:?}",
        report.epoch, report.head_lsn, report.next_lsn, report.source, report.repaired
    );
    if report.next_lsn < durable {
        return Err(format!("{durable} entries were acknowledged, {} recovered", report.next_lsn).into());
    }
    for lsn in report.head_lsn..report.next_lsn {
        if log2.read(lsn)? != entry(lsn) {
            return Err(format!("entry {lsn} differs").into());
        }
    }
    log.append(b"from the fenced writer")?;
    match log.sync_all() {
        Err(LogError::NoQuorum { .. }) => println!("writer 1 is fenced: its sync fails"),
        other => return Err(format!("the fenced writer's sync: {other:?}").into()),
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => {
            println!("replicated_log: OK");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("replicated_log: {e}");
            ExitCode::FAILURE
        }
    }
}

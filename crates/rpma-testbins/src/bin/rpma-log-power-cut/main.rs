//! The guest side of `scripts/softroce/log-power-cut.sh` (docs/log.md, "On rxe in the VM").
//!
//! Three replicas are `rpma log serve --backend verbs --pmem DEVDAX --file-offset i*SIZE --size
//! SIZE` processes on separate regions of the devdax device; this tool is the writer and the
//! checker.
//!
//! `rpma-log-power-cut regions DEVDAX SIZE ACKED`: before the replicas start, after a boot,
//! reads each of the 3 regions (plain CPU loads of the devdax mapping) and checks it as a
//! recovery would ([`rpma_log::check_region`]: header, every committed record's checksum,
//! position and lsn); every committed entry must be the one the writer appended at its lsn
//! ([`payload`]), and the acknowledged entries `0..ACKED` must be committed on a majority (2)
//! of the regions. Prints one `REGION i: ...` line per region and `REGIONS: acknowledged A,
//! on a majority M, lost L, bad B`; exits 1 if L + B > 0.
//!
//! `rpma-log-power-cut write ADDR:PORT,... ACKED SEED [--check-only]`: the writer. Opens the log
//! (the takeover and recovery of a new writer, majority quorum, persistent flushes) and checks
//! what it recovered: every entry `0..ACKED` is there and is the one appended at its lsn, and so
//! is every other entry recovered. Prints `CHECK: acknowledged A, recovered N (head H, epoch E),
//! lost L, bad B`. Then (without `--check-only`) it appends entries of 8 to 100 bytes, synced
//! in groups of 1 to 32 (seeded by SEED), and prints `START n` (the first lsn it appends) and
//! then `ACK n` after each sync (every entry below `n` is acknowledged), until the host cuts the
//! power; `DONE` if the ring is full (no truncation: every acknowledged entry stays checkable).
//! Exits 1 if L + B > 0, 2 on other errors.
//!
//! `rpma-log-power-cut cluster-write ...`: a writer of `scripts/test-cluster.sh`'s nemesis run
//! (the `cluster` module).

#![forbid(unsafe_code)]

use std::process::ExitCode;

#[cfg(feature = "verbs")]
mod cluster;

/// The log id of the power-cut runs.
#[cfg(feature = "verbs")]
const LOG_ID: u64 = 0x5250_4d41_4c4f_4743;
/// Replicas in the set.
const REPLICAS: usize = 3;
/// Replicas an acknowledged entry is on (majority of 3).
const QUORUM: usize = 2;

/// The payload of entry `lsn`: 8 to 100 bytes, its lsn first, then bytes derived from it.
fn payload(lsn: u64) -> Vec<u8> {
    let len = 8 + (lsn.wrapping_mul(13) % 93) as usize;
    let mut p: Vec<u8> = (0..len).map(|k| (lsn as u8).wrapping_mul(31).wrapping_add(k as u8 ^ 0x5a)).collect();
    p[..8].copy_from_slice(&lsn.to_le_bytes());
    p
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let result = match args.get(1).map(String::as_str) {
        Some("regions") if args.len() == 5 => regions(&args[2], &args[3], &args[4]),
        #[cfg(feature = "verbs")]
        Some("write") if args.len() == 5 || (args.len() == 6 && args[5] == "--check-only") => {
            writer::run(&args[2], &args[3], &args[4], args.len() == 6)
        }
        #[cfg(feature = "verbs")]
        Some("cluster-write") => cluster::run(&args[2..]),
        #[cfg(not(feature = "verbs"))]
        Some("write" | "cluster-write") => Err("built without the verbs feature (cargo build --features verbs)".to_owned()),
        _ => Err("usage: rpma-log-power-cut regions DEVDAX SIZE ACKED | write ADDR:PORT,... ACKED SEED [--check-only] | cluster-write REPLICAS TAG SEED TIMEOUT_MS [--check-only] [--broken RULE,...]"
            .to_owned()),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rpma-log-power-cut: {e}");
            ExitCode::from(2)
        }
    }
}

fn parse<T: std::str::FromStr>(what: &str, s: &str) -> Result<T, String> {
    s.parse().map_err(|_| format!("bad {what} `{s}`"))
}

/// The replicas of `ADDR:PORT,...`.
#[cfg(feature = "verbs")]
fn replica_set(replicas: &str) -> Result<Vec<rpma_log::ReplicaAddr>, String> {
    replicas
        .split(',')
        .map(|r| r.rsplit_once(':').map(|(a, p)| rpma_log::ReplicaAddr::new(a, p)).ok_or(format!("bad replica `{r}`")))
        .collect()
}

/// `regions`: the offline check of the 3 regions.
fn regions(path: &str, size: &str, acked: &str) -> Result<ExitCode, String> {
    let size = rpma_bench::parse_size(size)?;
    let acked: u64 = parse("ACKED", acked)?;
    let (mut covering, mut bad) = (0usize, 0u64);
    for i in 0..REPLICAS {
        let offset = (i * size) as u64;
        let mem = rpma_testbins::pmem::map(std::path::Path::new(path), offset, size)
            .map_err(|e| format!("mapping region {i} of {path}: {e}"))?;
        let bytes = mem.to_vec();
        match rpma_log::check_region(&bytes) {
            Ok(c) => {
                let wrong: Vec<u64> =
                    c.entries.iter().filter(|(lsn, p)| *p != payload(*lsn)).map(|(lsn, _)| *lsn).collect();
                bad += wrong.len() as u64;
                if let Some(l) = wrong.first() {
                    eprintln!("REGION {i}: entry {l} is not the one appended ({} such entries)", wrong.len());
                }
                let covers = c.next_lsn >= acked && c.head_lsn == 0;
                covering += usize::from(covers);
                println!(
                    "REGION {i}: log {:#x}, epoch {} (promised {}), committed entries {}..{}{}",
                    c.log_id,
                    c.commit_epoch,
                    c.promised,
                    c.head_lsn,
                    c.next_lsn,
                    if covers { "" } else { " (does not cover the acknowledged ones)" }
                );
            }
            Err(e) => {
                // A region that fails its check is one replica's loss; the majority decides.
                println!("REGION {i}: fails its check: {e}");
                bad += 1;
            }
        }
    }
    let lost = if acked > 0 && covering < QUORUM { acked } else { 0 };
    println!(
        "REGIONS: acknowledged {acked}, on a majority {}, lost {lost}, bad {bad}",
        covering >= QUORUM || acked == 0
    );
    Ok(if lost + bad == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

#[cfg(feature = "verbs")]
mod writer {
    use std::io::Write as _;
    use std::process::ExitCode;
    use std::time::Duration;

    use rpma::verbs::Verbs;
    use rpma::{ContextType, Device, Peer};
    use rpma_log::{FlushMode, Log, LogError, LogOptions, Quorum};

    use super::{parse, payload, replica_set, LOG_ID};

    pub fn run(replicas: &str, acked: &str, seed: &str, check_only: bool) -> Result<ExitCode, String> {
        let acked: u64 = parse("ACKED", acked)?;
        let seed: u64 = parse("SEED", seed)?;
        let set = replica_set(replicas)?;
        let t = Verbs::new();
        let dev = Device::lookup(&t, &set[0].addr, ContextType::Remote).map_err(|e| format!("Device::lookup: {e}"))?;
        let peer = Peer::new(&dev).map_err(|e| format!("Peer::new: {e}"))?;
        let opts = LogOptions::new(LOG_ID)
            .quorum(Quorum::Majority)
            .flush(FlushMode::Persistent)
            .timeout(Duration::from_secs(30));
        let (mut log, report) = Log::open(&peer, &set, opts).map_err(|e| format!("opening the log: {e}"))?;
        // Acknowledged entries outside the recovered range [head, next) are lost.
        let (head, next) = (report.head_lsn, report.next_lsn.max(report.head_lsn));
        let mut lost = head.min(acked) + acked.saturating_sub(next);
        let mut bad = 0u64;
        for lsn in report.head_lsn..report.next_lsn {
            match log.read(lsn) {
                Ok(p) if p == payload(lsn) => {}
                other => {
                    if bad < 5 {
                        eprintln!("BAD entry {lsn}: {other:?}");
                    }
                    bad += 1;
                    lost += u64::from(lsn < acked);
                }
            }
        }
        for (i, why) in &report.rejected {
            eprintln!("REJECTED replica {i}: {why}");
        }
        bad += report.rejected.len() as u64;
        println!(
            "CHECK: acknowledged {acked}, recovered {} (head {}, epoch {}, repaired {:?}, down {:?}), lost {lost}, bad {bad}",
            report.next_lsn, report.head_lsn, report.epoch, report.repaired, report.down
        );
        if lost + bad > 0 {
            return Ok(ExitCode::FAILURE);
        }
        if check_only {
            return Ok(ExitCode::SUCCESS);
        }
        let out = std::io::stdout();
        let say = |line: std::fmt::Arguments<'_>| {
            let mut o = out.lock();
            let _ = writeln!(o, "{line}");
            let _ = o.flush();
        };
        say(format_args!("START {}", report.next_lsn));
        // The group sizes of the writers, from their seed.
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut lsn = report.next_lsn;
        loop {
            let group = rng.u64(1..=32);
            for _ in 0..group {
                match log.append(&payload(lsn)) {
                    Ok(l) if l == lsn => lsn += 1,
                    Ok(l) => return Err(format!("append: lsn {l}, expected {lsn}")),
                    Err(LogError::Full { .. }) => {
                        let n = log.sync_all().map_err(|e| format!("sync: {e}"))?;
                        say(format_args!("ACK {n}"));
                        say(format_args!("DONE: the ring is full at lsn {lsn}"));
                        return Ok(ExitCode::SUCCESS);
                    }
                    Err(e) => return Err(format!("append {lsn}: {e}")),
                }
            }
            let n = log.sync(lsn - 1).map_err(|e| format!("sync to {lsn}: {e}"))?;
            say(format_args!("ACK {n}"));
        }
    }
}

//! Crash consistency across a writer failover, at every crash point: an old writer appends and
//! syncs, leaves appends it never synced on the replicas, then a new writer recovers (repairing
//! the replicas to the committed history and fencing the old writer), appends its own entries
//! at the same lsns, syncs; the old writer tries again and is refused. A power cut of one
//! replica's node falls after each event of the whole run (the recovery and repair included);
//! then a third writer recovers. No acknowledged entry of either writer is lost, no entry is
//! visible that no commit record covered, every entry is the one its writer wrote, and the old
//! writer's entries after the failover never appear.

mod common;

use std::time::Duration;

use common::{addrs, builder, start, writer_peer, LOG_ID};
use rpma::mock::{CrashPoints, MockFabric, Reboot, Unflushed};
use rpma_log::{Log, LogOptions, Quorum, ReplicaHandle};

const LEN: usize = rpma_log::HEADER_SIZE + 1024;

/// Entry `lsn` of writer `w` (1 or 2).
fn entry(w: u8, lsn: u64) -> Vec<u8> {
    let mut v = common::payload(lsn);
    v[0] = w;
    v
}

#[derive(Default)]
struct Outcome {
    /// The old writer's acknowledged position, and the next lsn at its last sync call.
    acked1: u64,
    covered1: u64,
    /// Where the new writer's entries start (its recovered position), if it opened.
    start2: Option<u64>,
    acked2: u64,
    covered2: u64,
    handles: Vec<Option<ReplicaHandle>>,
}

fn options(n: usize) -> LogOptions {
    let q = if n == 3 { Quorum::Majority } else { Quorum::All };
    LogOptions::new(LOG_ID).quorum(q).timeout(Duration::from_secs(2))
}

fn scenario(fabric: &MockFabric, n: usize) -> Outcome {
    let mut out = Outcome::default();
    for i in 0..n {
        match start(fabric, i, None, LEN) {
            Ok(h) => out.handles.push(Some(h)),
            Err(_) => return out,
        }
    }
    let Ok((mut old, _)) = Log::open(&writer_peer(fabric), &addrs(n), options(n)) else { return out };
    for lsn in 0..3 {
        if old.append(&entry(1, lsn)).is_err() {
            return out;
        }
    }
    out.covered1 = old.next_lsn();
    if let Ok(d) = old.sync_all() {
        out.acked1 = d;
    } else {
        return out;
    }
    // Posted, never committed.
    for lsn in 3..5 {
        let _ = old.append(&entry(1, lsn));
    }
    let Ok((mut new, report)) = Log::open(&writer_peer(fabric), &addrs(n), options(n)) else { return out };
    out.start2 = Some(report.next_lsn);
    for round in 0..2 {
        for _ in 0..2 {
            let lsn = new.next_lsn();
            if new.append(&entry(2, lsn)).is_err() {
                return out;
            }
        }
        out.covered2 = new.next_lsn();
        match new.sync_all() {
            Ok(d) => out.acked2 = d,
            Err(_) => return out,
        }
        if round == 0 {
            // The old writer goes on: fenced.
            let lsn = old.next_lsn();
            let _ = old.append(&entry(1, lsn));
            let _ = old.sync_all();
        }
    }
    out
}

fn check(reboot: Reboot, mut out: Outcome, n: usize) -> Result<(), String> {
    let cut: usize = reboot.cut.device().trim_start_matches('r').parse().map_err(|_| "not a replica node")?;
    let memory = reboot.cut.into_regions().pop().ok_or("the replica's region did not come back")?.into_memory();
    if let Some(h) = out.handles.get_mut(cut).and_then(Option::take) {
        h.kill();
    }
    let _rebooted = start(&reboot.fabric, cut, Some(memory), LEN).map_err(|e| format!("rebooting: {e}"))?;
    let (log, report) =
        Log::open(&writer_peer(&reboot.fabric), &addrs(n), options(n)).map_err(|e| format!("recovery: {e}"))?;
    if !report.rejected.is_empty() {
        return Err(format!("committed entries fail validation: {:?}", report.rejected));
    }
    let acked = out.acked1.max(out.acked2);
    if report.next_lsn < acked {
        return Err(format!("{acked} entries were acknowledged, recovery kept {}", report.next_lsn));
    }
    let covered = out.covered1.max(out.covered2);
    if report.next_lsn > covered {
        return Err(format!("lsn {} is visible, no commit record covered it", report.next_lsn - 1));
    }
    for lsn in report.head_lsn..report.next_lsn {
        let got = log.read(lsn).map_err(|e| format!("reading {lsn}: {e}"))?;
        let writer = match out.start2 {
            Some(s) if lsn >= s => 2,
            _ => 1,
        };
        if got != entry(writer, lsn) {
            return Err(format!("lsn {lsn} is not writer {writer}'s entry (first byte {})", got[0]));
        }
    }
    Ok(())
}

fn prove(n: usize, node: &str) {
    let mut points = 0;
    for (policy, seeds) in [(Unflushed::Lost, 1), (Unflushed::Kept, 1), (Unflushed::Torn { seed: 0xFA11_0CE5 }, 4)] {
        let report = CrashPoints::new(builder(n).unflushed(policy), node)
            .seeds(seeds)
            .run_all(|f| scenario(f, n), |r, o| check(r, o, n))
            .unwrap_or_else(|e| panic!("{n} replicas, cut {node}, {policy:?}: the exploration failed: {e}"));
        if let Some(v) = report.violations.first() {
            panic!("{n} replicas, cut {node}: {} violations, the first: {v}", report.violations.len());
        }
        points += report.points;
    }
    eprintln!("failover, {n} replicas, cut {node}: {points} crash points, no violation");
    assert!(points > 100, "too few crash points ({points})");
}

#[test]
fn crash_during_failover_recovery_and_fencing_one_replica() {
    prove(1, "r0");
}

#[test]
fn crash_during_failover_recovery_and_fencing_three_replicas_majority() {
    prove(3, "r1");
}

//! Crash consistency of the log at every crash point (docs/persistence.md): a short run of
//! appends, syncs and a truncation, with the power of one replica's node cut right after each
//! event of the run; then the node reboots with what its region kept, and a new writer
//! recovers. At every point: no entry that `sync` acknowledged is lost (on the log, and in the
//! cut replica's history as far as the writer saw its sync complete there), no entry that no
//! sync posted is visible, no committed record fails its checksum. With a deliberately broken
//! writer (the sync's flush to visibility only, the acknowledgement taken before the flush, the
//! commit word ahead of the flushed records), the exploration finds violations.

mod common;

use std::time::Duration;

use common::{addrs, builder, payload, start, writer_peer, LOG_ID};
use rpma::mock::{CrashPoints, MockFabric, Reboot, Unflushed};
use rpma_log::{check_region, Broken, Log, LogOptions, Quorum, ReplicaHandle};

/// A small ring, so that the run wraps it.
const LEN: usize = rpma_log::HEADER_SIZE + 512;

/// What a run was told, and the replicas still serving.
struct Outcome {
    /// The durable position the last successful sync returned.
    acked: u64,
    /// The next lsn when the last sync was called: entries from it on were never posted (an
    /// append posts nothing; a sync writes what was appended before it).
    posted: u64,
    /// The highest truncation point asked for.
    truncated: u64,
    /// Per replica, the durable position the writer saw complete there (its sync's flush).
    on_replica: Vec<u64>,
    handles: Vec<Option<ReplicaHandle>>,
}

fn quorum(n: usize) -> Quorum {
    if n == 3 {
        Quorum::Majority
    } else {
        Quorum::All
    }
}

/// A deliberately broken writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bug {
    /// The sync's flush to visibility only.
    SyncVisibility,
    /// The sync acknowledged on its write's completion, before its flush.
    AckBeforeFlush,
    /// The commit word carrying the sync's own position, ahead of its records' flush.
    CommitWordAhead,
}

fn options(n: usize, bug: Option<Bug>) -> LogOptions {
    let mut broken = Broken::none();
    broken.sync_flush_visibility = bug == Some(Bug::SyncVisibility);
    broken.ack_before_flush = bug == Some(Bug::AckBeforeFlush);
    broken.commit_word_ahead = bug == Some(Bug::CommitWordAhead);
    LogOptions::new(LOG_ID).quorum(quorum(n)).timeout(Duration::from_secs(2)).broken(broken)
}

fn scenario(fabric: &MockFabric, n: usize, bug: Option<Bug>) -> Outcome {
    let mut out = Outcome { acked: 0, posted: 0, truncated: 0, on_replica: vec![0; n], handles: Vec::new() };
    for i in 0..n {
        match start(fabric, i, None, LEN) {
            Ok(h) => out.handles.push(Some(h)),
            Err(_) => return out,
        }
    }
    let Ok((mut log, _)) = Log::open(&writer_peer(fabric), &addrs(n), options(n, bug)) else { return out };
    // (appends, then a sync; a negative count: truncate_prefix to the durable position).
    let steps: [i32; 6] = [2, 1, -1, 3, 2, 0];
    let mut next = 0u64;
    for (k, &step) in steps.iter().enumerate() {
        if step < 0 {
            out.truncated = out.truncated.max(log.durable_lsn());
            if log.truncate_prefix(log.durable_lsn()).is_err() {
                return out;
            }
            continue;
        }
        for _ in 0..step {
            if log.append(&payload(next)).is_err() {
                return out;
            }
            next += 1;
        }
        if k + 1 == steps.len() {
            // The last appends are never synced.
            if log.append(&payload(next)).is_err() {
                return out;
            }
            break;
        }
        out.posted = log.next_lsn();
        match log.sync_all() {
            Ok(d) => {
                out.acked = d;
                for (i, v) in out.on_replica.iter_mut().enumerate() {
                    *v = log.durable_on(i);
                }
            }
            Err(_) => return out,
        }
    }
    out
}

fn node_index(device: &str) -> usize {
    device.trim_start_matches('r').parse().expect("a replica node")
}

fn check(reboot: Reboot, mut out: Outcome, n: usize) -> Result<(), String> {
    let cut = node_index(reboot.cut.device());
    let memory = reboot.cut.into_regions().pop().ok_or("the replica's region did not come back")?.into_memory();
    // What the cut replica kept, on its own.
    let kept = check_region(&memory.to_vec()).map_err(|e| format!("the cut replica's region: {e}"))?;
    if kept.next_lsn < out.on_replica[cut] {
        return Err(format!(
            "the writer saw the sync up to lsn {} complete on replica {cut}; its history kept up to {}",
            out.on_replica[cut], kept.next_lsn
        ));
    }
    if kept.next_lsn > out.posted {
        return Err(format!("replica {cut}'s history holds lsn {} that no sync posted", kept.next_lsn - 1));
    }
    for (lsn, p) in &kept.entries {
        if *p != payload(*lsn) {
            return Err(format!("replica {cut}'s history holds an entry {lsn} with other bytes"));
        }
    }
    // The node reboots; a new writer recovers.
    if let Some(h) = out.handles.get_mut(cut).and_then(Option::take) {
        h.kill();
    }
    let _rebooted = start(&reboot.fabric, cut, Some(memory), LEN).map_err(|e| format!("rebooting: {e}"))?;
    let (log, report) = Log::open(&writer_peer(&reboot.fabric), &addrs(n), options(n, None))
        .map_err(|e| format!("recovery failed: {e}"))?;
    if !report.rejected.is_empty() {
        return Err(format!("recovery found committed entries that fail validation: {:?}", report.rejected));
    }
    if report.next_lsn < out.acked {
        return Err(format!("{} entries were acknowledged, recovery kept {}", out.acked, report.next_lsn));
    }
    if report.next_lsn > out.posted {
        return Err(format!("recovery shows lsn {} that no sync posted", report.next_lsn - 1));
    }
    if report.head_lsn > out.truncated {
        return Err(format!("recovery starts at lsn {}, only {} were truncated", report.head_lsn, out.truncated));
    }
    for lsn in report.head_lsn..report.next_lsn {
        let got = log.read(lsn).map_err(|e| format!("reading lsn {lsn}: {e}"))?;
        if got != payload(lsn) {
            return Err(format!("recovered entry {lsn} has other bytes"));
        }
    }
    Ok(())
}

fn explore(n: usize, node: &str, policy: Unflushed, seeds: u64, bug: Option<Bug>) -> rpma::mock::CrashReport {
    CrashPoints::new(builder(n).unflushed(policy), node)
        .seeds(seeds)
        .run_all(|f| scenario(f, n, bug), |r, o| check(r, o, n))
        .unwrap_or_else(|e| panic!("{n} replicas, cut {node}, {policy:?}: the exploration failed: {e}"))
}

fn prove(n: usize, node: &str) {
    let mut points = 0;
    for (policy, seeds) in [(Unflushed::Lost, 1), (Unflushed::Kept, 1), (Unflushed::Torn { seed: 0x10C0_FFEE }, 8)] {
        let report = explore(n, node, policy, seeds, None);
        if let Some(v) = report.violations.first() {
            panic!("{n} replicas, cut {node}: {} violations, the first: {v}", report.violations.len());
        }
        points += report.points;
    }
    eprintln!("{n} replicas, cut {node}: {points} crash points, no violation");
    assert!(points > 50, "too few crash points ({points}): the scenario did not run");
}

#[test]
fn crash_at_every_point_one_replica_recovers_every_acknowledged_entry() {
    prove(1, "r0");
}

#[test]
fn crash_at_every_point_two_replicas_recover_every_acknowledged_entry() {
    prove(2, "r1");
}

#[test]
fn crash_at_every_point_three_replicas_majority_recover_every_acknowledged_entry() {
    prove(3, "r0");
}

#[test]
fn crash_at_every_point_three_replicas_majority_cut_of_the_last_replica() {
    prove(3, "r2");
}

/// The exploration of a broken writer must find a violation; returns the first.
fn finds(n: usize, policy: Unflushed, seeds: u64, bug: Bug) -> rpma::mock::CrashFailure {
    let report = explore(n, "r0", policy, seeds, Some(bug));
    let first = report.violations.first().cloned().unwrap_or_else(|| {
        panic!("{n} replicas, {policy:?}, {bug:?}: the broken writer passed {} crash points", report.points)
    });
    eprintln!(
        "{n} replicas, {policy:?}, {bug:?}: {} violations of {} points; the first: {first}",
        report.violations.len(),
        report.points
    );
    first
}

#[test]
fn crash_exploration_finds_the_sync_flushed_to_visibility_only() {
    for n in [1, 2, 3] {
        let first = finds(n, Unflushed::Lost, 1, Bug::SyncVisibility);
        assert!(first.message.contains("saw the sync") || first.message.contains("acknowledged"), "{first}");
    }
}

#[test]
fn crash_exploration_finds_the_acknowledgement_before_the_flush() {
    for n in [1, 2, 3] {
        let first = finds(n, Unflushed::Lost, 1, Bug::AckBeforeFlush);
        assert!(first.message.contains("saw the sync") || first.message.contains("acknowledged"), "{first}");
    }
}

#[test]
fn crash_exploration_finds_the_commit_word_ahead_of_the_flushed_records() {
    for n in [1, 3] {
        let first = finds(n, Unflushed::Torn { seed: 5 }, 4, Bug::CommitWordAhead);
        assert!(first.message.contains("corrupt committed entries"), "{first}");
    }
}

//! Crash consistency across a writer failover, at every crash point: an old writer appends and
//! syncs, leaves appends it never synced, then a new writer recovers (repairing the replicas to
//! the chosen history and fencing the old writer), appends its own entries at the same lsns,
//! syncs; the old writer tries again and is refused. A power cut of one replica's node falls
//! after each event of the whole run (the recovery and repair included); then a third writer
//! recovers. No acknowledged entry of either writer is lost, no entry is visible that no sync
//! posted, every entry is the one its writer wrote, and the old writer's entries after the
//! failover never appear. A second run leaves the old writer's records beyond the new writer's
//! history on a replica the new writer catches up later: its tail ends at them (they are of
//! another epoch than the one installed there).

mod common;

use std::time::Duration;

use common::{addrs, builder, start, writer_peer, LOG_ID};
use rpma::mock::{CrashPoints, MockFabric, Reboot, Unflushed};
use rpma_log::{Broken, Log, LogOptions, Quorum, ReplicaHandle};

const LEN: usize = rpma_log::HEADER_SIZE + 1024;

/// Entry `lsn` of writer `w` (1 or 2).
fn entry(w: u8, lsn: u64) -> Vec<u8> {
    let mut v = common::payload(lsn);
    v[0] = w;
    v
}

#[derive(Default)]
struct Outcome {
    /// The old writer's acknowledged position, and the next lsn at its last sync call (no sync
    /// posted the entries from it on).
    acked1: u64,
    posted1: u64,
    /// Where the new writer's entries start (its recovered position), if it opened.
    start2: Option<u64>,
    acked2: u64,
    posted2: u64,
    /// The highest truncation point asked for.
    truncated: u64,
    handles: Vec<Option<ReplicaHandle>>,
}

fn options(n: usize) -> LogOptions {
    let q = if n == 3 { Quorum::Majority } else { Quorum::All };
    LogOptions::new(LOG_ID).quorum(q).timeout(Duration::from_secs(2))
}

/// Replicas `0..n` serving fresh regions (their handles in `out`); false if one could not start.
fn start_all(fabric: &MockFabric, n: usize, out: &mut Outcome) -> bool {
    for i in 0..n {
        match start(fabric, i, None, LEN) {
            Ok(h) => out.handles.push(Some(h)),
            Err(_) => return false,
        }
    }
    true
}

fn scenario(fabric: &MockFabric, n: usize) -> Outcome {
    let mut out = Outcome::default();
    if !start_all(fabric, n, &mut out) {
        return out;
    }
    let Ok((mut old, _)) = Log::open(&writer_peer(fabric), &addrs(n), options(n)) else { return out };
    for lsn in 0..3 {
        if old.append(&entry(1, lsn)).is_err() {
            return out;
        }
    }
    out.posted1 = old.next_lsn();
    if let Ok(d) = old.sync_all() {
        out.acked1 = d;
    } else {
        return out;
    }
    // Appended, never synced: never posted.
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
        out.posted2 = new.next_lsn();
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

fn check(reboot: Reboot, out: Outcome, n: usize) -> Result<(), String> {
    check_with(reboot, out, n, options(n))
}

/// [`check`] with the recovery's options `opts`.
fn check_with(reboot: Reboot, mut out: Outcome, n: usize, opts: LogOptions) -> Result<(), String> {
    let cut: usize = reboot.cut.device().trim_start_matches('r').parse().map_err(|_| "not a replica node")?;
    let memory = reboot.cut.into_regions().pop().ok_or("the replica's region did not come back")?.into_memory();
    if let Some(h) = out.handles.get_mut(cut).and_then(Option::take) {
        h.kill();
    }
    let _rebooted = start(&reboot.fabric, cut, Some(memory), LEN).map_err(|e| format!("rebooting: {e}"))?;
    check_serving_with(&reboot.fabric, out, n, opts)
}

/// A new writer recovers from the replicas serving now.
fn check_serving(fabric: &MockFabric, out: Outcome, n: usize) -> Result<(), String> {
    check_serving_with(fabric, out, n, options(n))
}

/// [`check_serving`] with the recovery's options `opts`.
fn check_serving_with(fabric: &MockFabric, out: Outcome, n: usize, opts: LogOptions) -> Result<(), String> {
    let (log, report) = Log::open(&writer_peer(fabric), &addrs(n), opts).map_err(|e| format!("recovery: {e}"))?;
    if !report.rejected.is_empty() {
        return Err(format!("committed entries fail validation: {:?}", report.rejected));
    }
    let acked = out.acked1.max(out.acked2);
    if report.next_lsn < acked {
        return Err(format!("{acked} entries were acknowledged, recovery kept {}", report.next_lsn));
    }
    let posted = out.posted1.max(out.posted2);
    if report.next_lsn > posted {
        return Err(format!("lsn {} is visible, no sync posted it", report.next_lsn - 1));
    }
    if report.head_lsn > out.truncated {
        return Err(format!("recovery starts at lsn {}, only {} were truncated", report.head_lsn, out.truncated));
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

/// Writer `w` appends `k` entries and syncs them; false if that failed.
fn sync(log: &mut Log<MockFabric>, out: &mut Outcome, w: u8, k: u64) -> bool {
    for _ in 0..k {
        let lsn = log.next_lsn();
        if log.append(&entry(w, lsn)).is_err() {
            return false;
        }
    }
    if w == 1 {
        out.posted1 = log.next_lsn();
    } else {
        out.posted2 = log.next_lsn();
    }
    match log.sync_all() {
        Ok(d) if w == 1 => out.acked1 = d,
        Ok(d) => out.acked2 = d,
        Err(_) => return false,
    }
    true
}

/// The old writer's records beyond the new writer's history on replica 0, in the old writer's
/// epoch: W1 acknowledges 0..3 on all three replicas; r1 and r2 stop and W1 syncs 3..8 to r0
/// alone (no quorum: never acknowledged; in r0's tail); r0 stops, r1 and r2 come back, W2 opens
/// without r0 (the history 0..3), acknowledges 3..5 on r1 and r2; r0 comes back and W2 catches
/// it up (its records from its commit word rewritten up to W2's tail, then W2's commit and
/// epoch); W2 acknowledges 5 on all three. W2's entries have the sizes of W1's at the same
/// lsns, so W1's records 5..8 lie exactly where r0's tail goes on, with the lsns that follow:
/// only their epoch ends the tail there. The crash points fall on r0's node (a bystander region
/// keeps it a node with memory while r0 is stopped).
fn scenario_fenced_tail(fabric: &MockFabric, broken: Broken) -> (Outcome, Option<rpma::mock::MrLocal>) {
    let n = 3;
    let (mut out, bystander) = (Outcome::default(), common::bystander(fabric, 0));
    if !start_all(fabric, n, &mut out) {
        return (out, bystander);
    }
    let opts = options(n).broken(broken);
    let Ok((mut w1, _)) = Log::open(&writer_peer(fabric), &addrs(n), opts.clone()) else { return (out, bystander) };
    if !sync(&mut w1, &mut out, 1, 3) {
        return (out, bystander);
    }
    let Some(kept) = common::stop_replicas(&mut out.handles, &[1, 2]) else { return (out, bystander) };
    w1.refresh_health();
    let _ = sync(&mut w1, &mut out, 1, 5);
    drop(w1);
    let Some(Ok(m0)) = out.handles[0].take().map(ReplicaHandle::stop) else { return (out, bystander) };
    if !common::restart_replicas(fabric, &mut out.handles, &[1, 2], kept, LEN) {
        return (out, bystander);
    }
    let Ok((mut w2, report)) = Log::open(&writer_peer(fabric), &addrs(n), opts) else { return (out, bystander) };
    out.start2 = Some(report.next_lsn);
    if !sync(&mut w2, &mut out, 2, 2) {
        return (out, bystander);
    }
    match start(fabric, 0, Some(m0), LEN) {
        Ok(h) => out.handles[0] = Some(h),
        Err(_) => return (out, bystander),
    }
    if w2.reconnect(0).is_ok() {
        let _ = sync(&mut w2, &mut out, 2, 1);
    }
    (out, bystander)
}

/// Explores the crash points of r0's node in [`scenario_fenced_tail`]; returns the points and the
/// first violation, if any.
fn explore_fenced_tail(broken: Broken, policies: &[(Unflushed, u64)]) -> (u64, Option<String>) {
    let mut points = 0;
    for &(policy, seeds) in policies {
        let report = CrashPoints::new(builder(3).unflushed(policy), "r0")
            .seeds(seeds)
            .run_all(
                |f| scenario_fenced_tail(f, broken),
                |r, (o, _bystander)| {
                    // The recovery that checks is one of the (maybe broken) writers too.
                    let opts = options(3).broken(broken);
                    if r.cut.regions().len() < 2 {
                        return check_serving_with(&r.fabric, o, 3, opts);
                    }
                    check_with(r, o, 3, opts)
                },
            )
            .unwrap_or_else(|e| panic!("{policy:?}: the exploration failed: {e}"));
        points += report.points;
        if let Some(v) = report.violations.first() {
            return (points, Some(format!("{} violations ({policy:?}), the first: {v}", report.violations.len())));
        }
    }
    (points, None)
}

#[test]
fn crash_of_a_replica_holding_a_fenced_writers_records_beyond_the_history() {
    let policies = [(Unflushed::Lost, 1), (Unflushed::Kept, 1), (Unflushed::Torn { seed: 0x7A11_E90C }, 4)];
    let (points, violation) = explore_fenced_tail(Broken::none(), &policies);
    if let Some(v) = violation {
        panic!("{v}");
    }
    eprintln!("fenced writer's tail, 3 replicas, cut r0: {points} crash points, no violation");
    assert!(points > 100, "too few crash points ({points})");
}

#[test]
fn crash_exploration_finds_a_tail_that_takes_any_epoch() {
    let mut broken = Broken::none();
    broken.tail_any_epoch = true;
    let (points, violation) = explore_fenced_tail(broken, &[(Unflushed::Lost, 1)]);
    let v = violation.unwrap_or_else(|| panic!("the broken recovery passed {points} crash points"));
    eprintln!("tail of any epoch: {v}");
    assert!(v.contains("is not writer 2's entry"), "{v}");
}

/// A replica that missed a truncation comes back: it is stopped (its region's memory kept) while
/// the writer syncs and truncates on the others, then restarted; the writer reconnects it, which
/// empties it at the new head and copies the retained entries; then a new writer takes over.
/// The crash points fall on that replica's node, which keeps a bystander region registered so
/// that a cut while the replica is stopped is a cut too (the replica, restarted after it,
/// serves on the rebooted node).
fn scenario_lagging(fabric: &MockFabric) -> (Outcome, Option<rpma::mock::MrLocal>) {
    let n = 3;
    let (mut out, bystander) = (Outcome::default(), common::bystander(fabric, 0));
    if !start_all(fabric, n, &mut out) {
        return (out, bystander);
    }
    let Ok((mut w1, _)) = Log::open(&writer_peer(fabric), &addrs(n), options(n)) else { return (out, bystander) };
    if !sync(&mut w1, &mut out, 1, 2) {
        return (out, bystander);
    }
    // r0 stops and misses appends and a truncation. (If its node was cut already, the run ends:
    // a cut region is not handed back in order.)
    w1.refresh_health();
    if w1.health()[0] == rpma_log::Health::Down {
        return (out, bystander);
    }
    let Some(Ok(m0)) = out.handles[0].take().map(ReplicaHandle::stop) else { return (out, bystander) };
    w1.refresh_health();
    if !sync(&mut w1, &mut out, 1, 3) {
        return (out, bystander);
    }
    out.truncated = w1.durable_lsn();
    if w1.truncate_prefix(w1.durable_lsn()).is_err() {
        return (out, bystander);
    }
    match start(fabric, 0, Some(m0), LEN) {
        Ok(h) => out.handles[0] = Some(h),
        Err(_) => return (out, bystander),
    }
    if w1.reconnect(0).is_err() || !sync(&mut w1, &mut out, 1, 2) {
        return (out, bystander);
    }
    let Ok((mut w2, report)) = Log::open(&writer_peer(fabric), &addrs(n), options(n)) else { return (out, bystander) };
    out.start2 = Some(report.next_lsn);
    let _ = sync(&mut w2, &mut out, 2, 2);
    (out, bystander)
}

#[test]
fn crash_of_a_replica_that_missed_a_truncation_while_it_is_caught_up_and_recovered() {
    let mut points = 0;
    for (policy, seeds) in [(Unflushed::Lost, 1), (Unflushed::Kept, 1), (Unflushed::Torn { seed: 0x1A66_ED00 }, 4)] {
        let report = CrashPoints::new(builder(3).unflushed(policy), "r0")
            .seeds(seeds)
            .run_all(scenario_lagging, |r, (o, _bystander)| {
                if r.cut.regions().len() < 2 {
                    // The cut fell while the replica was stopped: it was restarted on the rebooted
                    // node after it (or the run ended there); recover with what serves.
                    return check_serving(&r.fabric, o, 3);
                }
                check(r, o, 3)
            })
            .unwrap_or_else(|e| panic!("{policy:?}: the exploration failed: {e}"));
        if let Some(v) = report.violations.first() {
            panic!("{} violations, the first: {v}", report.violations.len());
        }
        points += report.points;
    }
    eprintln!("lagging replica, 3 replicas, cut r0: {points} crash points, no violation");
    assert!(points > 100, "too few crash points ({points})");
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

//! The full copy of a replica whose head is beyond the writer's: a writer's truncation reached
//! one replica only (the others were down, the truncation failed), then a new writer took the
//! log over without that replica and went on; when it comes back, its head is beyond the
//! writer's and the part of the ring it dropped is in the writer's history. The writer empties
//! it, moves its head back and copies its whole live range, then lets it rejoin. At every crash
//! point of that replica's node (the full copy included), the replica's region is a valid log
//! holding only records that were copied, and a new writer recovers everything acknowledged.

mod common;

use std::time::{Duration, Instant};

use common::{addrs, builder, payload, start, writer_peer, LOG_ID};
use rpma::mock::{CrashPoints, MockFabric, MrLocal, PersistentMemory, Reboot, Unflushed};
use rpma_log::{check_region, Health, Log, LogError, LogOptions, Quorum, ReplicaHandle};

/// A small ring: the run's entries take most of it.
const LEN: usize = rpma_log::HEADER_SIZE + 1024;

fn options() -> LogOptions {
    LogOptions::new(LOG_ID).quorum(Quorum::Majority).timeout(Duration::from_secs(2))
}

#[derive(Default)]
struct Outcome {
    /// The highest durable position a sync returned, and the next lsn at the last sync call (no
    /// sync posted the entries from it on).
    acked: u64,
    posted: u64,
    /// The truncation point the first writer asked for (it reached replica 0 only).
    truncated: u64,
    /// Whether the second writer's reconnect of replica 0 (the full copy) returned Ok.
    copied: bool,
    /// The second writer's epoch.
    epoch2: u64,
    /// Replica 0's position as the second writer knows it after its last sync.
    durable_on_0: u64,
    handles: Vec<Option<ReplicaHandle>>,
}

/// An entry the first writer commits on replica 0 alone, after its failed truncation.
fn unacked(lsn: u64) -> Vec<u8> {
    let mut v = payload(lsn + 40);
    v[0] = 0xEE;
    v
}

fn sync(log: &mut Log<MockFabric>, out: &mut Outcome, k: u64) -> bool {
    for _ in 0..k {
        let lsn = log.next_lsn();
        if log.append(&payload(lsn)).is_err() {
            return false;
        }
    }
    out.posted = out.posted.max(log.next_lsn());
    match log.sync_all() {
        Ok(d) => {
            out.acked = out.acked.max(d);
            true
        }
        Err(_) => false,
    }
}

/// The run. `reconnect` brings replica 0 back (the full copy); it returns whether it did.
fn scenario(
    fabric: &MockFabric,
    mut reconnect: impl FnMut(&mut Log<MockFabric>) -> bool,
) -> (Outcome, Option<MrLocal>) {
    let mut out = Outcome::default();
    // Replica 0's node keeps a region registered while the replica is stopped, so that a power
    // cut then is a cut too.
    let bystander = common::bystander(fabric, 0);
    for i in 0..3 {
        match start(fabric, i, None, LEN) {
            Ok(h) => out.handles.push(Some(h)),
            Err(_) => return (out, bystander),
        }
    }
    let Ok((mut w1, _)) = Log::open(&writer_peer(fabric), &addrs(3), options()) else { return (out, bystander) };
    if !sync(&mut w1, &mut out, 4) {
        return (out, bystander);
    }
    // Replicas 1 and 2 stop; the truncation reaches replica 0 alone and fails for want of a
    // quorum.
    let Some(kept) = common::stop_replicas(&mut out.handles, &[1, 2]) else { return (out, bystander) };
    w1.refresh_health();
    out.truncated = w1.durable_lsn();
    match w1.truncate_prefix(w1.durable_lsn()) {
        Err(LogError::NoQuorum { .. }) => {}
        _ => return (out, bystander),
    }
    // It goes on alone on replica 0 and syncs entries there that wrap its ring (over the space of
    // the entries it truncated there): in replica 0's history (its tail), never acknowledged.
    for _ in 0..10 {
        let lsn = w1.next_lsn();
        if w1.append(&unacked(lsn)).is_err() {
            break;
        }
    }
    out.posted = w1.next_lsn();
    let _ = w1.sync_all();
    drop(w1);
    // Replica 0 stops; 1 and 2 come back; a new writer takes over without 0 and goes on.
    let Some(Ok(m0)) = out.handles[0].take().map(ReplicaHandle::stop) else { return (out, bystander) };
    if !common::restart_replicas(fabric, &mut out.handles, &[1, 2], kept, LEN) {
        return (out, bystander);
    }
    let Ok((mut w2, report)) = Log::open(&writer_peer(fabric), &addrs(3), options()) else { return (out, bystander) };
    out.epoch2 = report.epoch;
    if report.head_lsn != 0 || !sync(&mut w2, &mut out, 3) {
        return (out, bystander);
    }
    // Replica 0 comes back with its head beyond the writer's: a full copy.
    match start(fabric, 0, Some(m0), LEN) {
        Ok(h) => out.handles[0] = Some(h),
        Err(_) => return (out, bystander),
    }
    out.copied = reconnect(&mut w2);
    if sync(&mut w2, &mut out, 2) {
        out.durable_on_0 = w2.durable_on(0);
    }
    (out, bystander)
}

/// What replica 0's region holds, on its own: a valid log (nothing committed that was not
/// copied: no torn or stale record, no range longer than the ring) whose history's entries are
/// ones appended at their lsns, up to at most what a sync posted; once the second writer's epoch
/// is installed there (the full copy's last step), only the second writer's history.
fn check_replica_0(bytes: &[u8], out: &Outcome) -> Result<(), String> {
    let c = check_region(bytes).map_err(|e| format!("replica 0's region: {e}"))?;
    if c.next_lsn > out.posted {
        return Err(format!("replica 0's history holds lsn {} that no sync posted", c.next_lsn - 1));
    }
    for (lsn, data) in &c.entries {
        if *data != payload(*lsn) && ((out.epoch2 != 0 && c.commit_epoch >= out.epoch2) || *data != unacked(*lsn)) {
            return Err(format!("replica 0 holds lsn {lsn} with bytes that were never appended there"));
        }
    }
    Ok(())
}

/// A new writer recovers from the replicas serving now: everything acknowledged, nothing that no
/// sync posted, each entry's bytes.
fn recover(fabric: &MockFabric, out: &Outcome) -> Result<(), String> {
    let (log, report) = Log::open(&writer_peer(fabric), &addrs(3), options()).map_err(|e| format!("recovery: {e}"))?;
    if !report.rejected.is_empty() {
        return Err(format!("committed entries fail validation: {:?}", report.rejected));
    }
    if report.next_lsn < out.acked {
        return Err(format!("{} entries were acknowledged, recovery kept {}", out.acked, report.next_lsn));
    }
    if report.next_lsn > out.posted {
        return Err(format!("lsn {} is visible, no sync posted it", report.next_lsn - 1));
    }
    if report.head_lsn > out.truncated {
        return Err(format!("recovery starts at lsn {}, only {} were truncated", report.head_lsn, out.truncated));
    }
    for lsn in report.head_lsn..report.next_lsn {
        if log.read(lsn).map_err(|e| format!("reading {lsn}: {e}"))? != payload(lsn) {
            return Err(format!("lsn {lsn} is not the entry appended at it"));
        }
    }
    Ok(())
}

#[test]
fn full_copy_brings_back_a_replica_beyond_the_truncation_point() {
    let fabric = builder(3).persistent_memory(PersistentMemory::All).build();
    let (out, _bystander) = scenario(&fabric, |log| {
        assert_eq!(log.health()[0], Health::Down);
        // `maintain` brings it back (it used to stay down with "needs a full copy").
        let t0 = Instant::now();
        while log.health()[0] != Health::Up {
            assert!(
                t0.elapsed() < Duration::from_secs(3),
                "not back after {:?}: {:?}",
                t0.elapsed(),
                log.health_events()
            );
            log.maintain();
            std::thread::sleep(Duration::from_millis(1));
        }
        let events = log.health_events();
        assert!(events.iter().any(|e| e.replica == 0 && e.health == Health::CatchingUp), "{events:?}");
        assert_eq!(log.durable_on(0), log.next_lsn(), "the full copy did not commit the writer's whole history");
        true
    });
    assert!(out.copied);
    assert_eq!((out.truncated, out.acked, out.durable_on_0), (4, 9, 9));
    let mut handles = out.handles;
    let m0 = handles[0].take().unwrap().stop().unwrap();
    let c = check_region(&m0.to_vec()).unwrap();
    // The truncation that reached it alone is undone: it holds the writer's whole history.
    assert_eq!((c.head_lsn, c.next_lsn), (0, 9));
    assert_eq!(c.entries, (0..9).map(|l| (l, payload(l))).collect::<Vec<_>>());
    // And it is a replica like the others for a new writer.
    handles[0] = Some(start(&fabric, 0, Some(m0), LEN).unwrap());
    let (log, report) = Log::open(&writer_peer(&fabric), &addrs(3), options().quorum(Quorum::All)).unwrap();
    assert_eq!((report.head_lsn, report.next_lsn, report.repaired.len()), (0, 9, 3), "{report:?}");
    assert!(report.full_copies.is_empty(), "{report:?}");
    drop(log);
}

#[test]
fn recovery_takes_a_truncation_that_reached_one_replica_without_a_full_copy() {
    // The same run, but replica 0 comes back only when a third writer opens: recovery takes the
    // truncation that reached replica 0 (its head is a record boundary of the history), so no
    // full copy is needed there.
    let fabric = builder(3).persistent_memory(PersistentMemory::All).build();
    let (out, _bystander) = scenario(&fabric, |_| false);
    let (log, report) = Log::open(&writer_peer(&fabric), &addrs(3), options().quorum(Quorum::All)).unwrap();
    assert_eq!((report.head_lsn, report.next_lsn), (4, out.acked), "{report:?}");
    assert!(report.full_copies.is_empty() && report.down.is_empty(), "{report:?}");
    drop(log);
    drop(out);
}

#[test]
fn crash_during_full_copy_of_a_replica_beyond_the_truncation_point() {
    let mut points = 0;
    let mut copied = 0;
    for (policy, seeds) in [(Unflushed::Lost, 1), (Unflushed::Kept, 1), (Unflushed::Torn { seed: 0xF0_11C0 }, 2)] {
        let mut explore = CrashPoints::new(builder(3).unflushed(policy), "r0").seeds(seeds);
        // RPMA_LOG_CRASH_POINT=k replays one crash point.
        if let Some(k) = std::env::var("RPMA_LOG_CRASH_POINT").ok().and_then(|v| v.parse().ok()) {
            explore = explore.only(k);
        }
        let report = explore
            .run_all(
                |f| scenario(f, |log| log.reconnect(0).is_ok()),
                |r: Reboot, (mut out, _bystander)| {
                    copied += u64::from(out.copied);
                    if r.cut.regions().len() < 2 {
                        // The cut fell while replica 0 was stopped: it was restarted on the
                        // rebooted node after it (or the run ended there).
                        return recover(&r.fabric, &out);
                    }
                    let memory = r.cut.into_regions().pop().ok_or("no region came back")?.into_memory();
                    check_replica_0(&memory.to_vec(), &out)?;
                    if let Some(h) = out.handles[0].take() {
                        h.kill();
                    }
                    let _rebooted = start(&r.fabric, 0, Some(memory), LEN).map_err(|e| format!("rebooting: {e}"))?;
                    recover(&r.fabric, &out)
                },
            )
            .unwrap_or_else(|e| panic!("{policy:?}: the exploration failed: {e}"));
        if let Some(v) = report.violations.first() {
            panic!("{} violations, the first: {v}", report.violations.len());
        }
        points += report.points;
    }
    eprintln!(
        "full copy, 3 replicas, cut r0: {points} crash points (the full copy returned in {copied} runs), no violation"
    );
    assert!(points > 100, "too few crash points ({points})");
    assert!(copied > 0 && copied < points, "the cuts never fell before or after the full copy ({copied} of {points})");
}

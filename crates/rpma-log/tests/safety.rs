//! The ways a review broke "no entry acknowledged by `sync` is ever lost", each as the scenario
//! that broke it, on the mock (docs/log.md, "Safety: the rules and why they hold"). The
//! simulator (`tests/sim.rs`) finds each of them by itself when its rule is switched off; these
//! are the same histories, written out by hand.

mod common;

use std::time::Duration;

use common::{addrs, builder, payload, replica_ip, start, start_replacement, writer_peer, LOG_ID};
use rpma::mock::{Device, MockFabric, PersistentMemory};
use rpma::ContextType;
use rpma_log::{FlushMode, Log, LogError, LogOptions, Quorum, ReplicaHandle};

const LEN: usize = 64 * 1024;

fn fabric(n: usize) -> MockFabric {
    builder(n).persistent_memory(PersistentMemory::All).build()
}

fn opts() -> LogOptions {
    LogOptions::new(LOG_ID).quorum(Quorum::Majority).timeout(Duration::from_millis(500))
}

/// Stops replica `i` (it is unreachable) and gives back its region as it is.
fn away(handle: ReplicaHandle) -> rpma::Memory {
    handle.stop().unwrap()
}

/// Cuts replica `i`'s node and gives back its region as the cut left it.
fn cut(fabric: &MockFabric, i: usize, handle: ReplicaHandle) -> rpma::Memory {
    let dev = Device::lookup(fabric, &replica_ip(i), ContextType::Local).unwrap();
    let cut = fabric.power_cut(dev.backend()).unwrap();
    handle.kill();
    cut.into_regions().pop().expect("the replica's region").into_memory()
}

/// Every entry of `0..n` is in the log `w` recovered, with its bytes.
fn assert_holds(log: &Log<MockFabric>, n: u64, what: &str) {
    assert!(log.next_lsn() >= n, "{what}: {n} entries acknowledged, {} recovered", log.next_lsn());
    for lsn in 0..n {
        assert_eq!(log.read(lsn).unwrap(), payload(lsn), "{what}: entry {lsn}");
    }
}

/// n = 3, majority. W1 acknowledges 0..5 on r0 and r1 while r2 lags empty; r1 goes down; W2
/// takes r0 and r2 over but reads only r2's header (r0's read fails); W2 must not install its
/// epoch anywhere. Then W3 recovers from r0 and r2: every acknowledged entry is there.
#[test]
fn a_failed_open_repairs_nothing_before_it_read_a_quorum_of_headers() {
    let fabric = fabric(3);
    let mut h: Vec<Option<ReplicaHandle>> = (0..3).map(|i| Some(start(&fabric, i, None, LEN).unwrap())).collect();
    let (mut w1, _) = Log::open(&writer_peer(&fabric), &addrs(3), opts()).unwrap();
    let m2 = cut(&fabric, 2, h[2].take().unwrap());
    for lsn in 0..5 {
        w1.append(&payload(lsn)).unwrap();
    }
    assert_eq!(w1.sync_all().unwrap(), 5);
    h[2] = Some(start(&fabric, 2, Some(m2), LEN).unwrap());
    let m1 = cut(&fabric, 1, h[1].take().unwrap());
    // W2's first RDMA post is the read of r0's header: it fails.
    fabric.faults().fail_nth(1, 5, Some("ibv_post_send"));
    let w2 = Log::open(&writer_peer(&fabric), &addrs(3), opts());
    fabric.faults().count_calls(Some("nothing"));
    assert!(matches!(w2, Err(LogError::NoQuorum { .. })), "W2 opened with one header read: {w2:?}");
    drop(w1);
    let (w3, report) = Log::open(&writer_peer(&fabric), &addrs(3), opts()).unwrap();
    assert_holds(&w3, 5, &format!("W3 after W2's failed open ({report:?})"));
    drop(w3);
    drop(m1);
}

/// Two writers configured with the same writer id: the second open must take an epoch above
/// the first's, and the first writer, fenced, must not come back through `reconnect` and
/// replace what the second acknowledged.
#[test]
fn two_writers_with_one_writer_id_never_share_an_epoch() {
    let fabric = fabric(3);
    let _h: Vec<ReplicaHandle> = (0..3).map(|i| start(&fabric, i, None, LEN).unwrap()).collect();
    let same = opts().writer_id(7);
    let (mut w1, _) = Log::open(&writer_peer(&fabric), &addrs(3), same.clone()).unwrap();
    for lsn in 0..3 {
        w1.append(&payload(lsn)).unwrap();
    }
    w1.sync_all().unwrap();
    w1.append(b"W1's unacknowledged entry").unwrap();
    let (mut w2, report) = Log::open(&writer_peer(&fabric), &addrs(3), same).unwrap();
    assert!(report.epoch > w1.epoch(), "W2 took epoch {} with W1 at {}", report.epoch, w1.epoch());
    for lsn in 3..5 {
        assert_eq!(w2.append(&payload(lsn)).unwrap(), lsn);
    }
    assert_eq!(w2.sync_all().unwrap(), 5);
    // W1 notices and tries to come back within its own epoch.
    let _ = w1.sync_all();
    let back = w1.maintain();
    assert!(back.is_empty(), "the fenced writer reconnected to {back:?}");
    let _ = w1.sync_all();
    drop(w1);
    drop(w2);
    let (w3, report) = Log::open(&writer_peer(&fabric), &addrs(3), opts()).unwrap();
    assert_holds(&w3, 5, &format!("W3 after two writers of one id ({report:?})"));
}

/// Visibility, n = 3, majority: acknowledged on r0 and r1 (r2 down); r1 restarts without its
/// memory; r0 is unreachable; a new writer on r1 and r2 must not recover (r1 does not vote),
/// and once r0 is back every acknowledged entry is there. With the rule off
/// (`blank_replicas_vote`) the new writer recovers an empty history from r1 and r2.
#[test]
fn a_replica_that_lost_its_memory_does_not_vote() {
    blank_vote(rpma_log::Broken::none());
    let mut broken = rpma_log::Broken::none();
    broken.blank_replicas_vote = true;
    let lost = std::panic::catch_unwind(|| blank_vote(broken));
    assert!(lost.is_err(), "with blank_replicas_vote the history is recovered all the same");
}

fn blank_vote(broken: rpma_log::Broken) {
    let fabric = fabric(3);
    let mut h: Vec<Option<ReplicaHandle>> = (0..3).map(|i| Some(start(&fabric, i, None, LEN).unwrap())).collect();
    let vis = opts().flush(FlushMode::Visibility).broken(broken);
    let (mut w1, _) = Log::open(&writer_peer(&fabric), &addrs(3), vis.clone()).unwrap();
    let m2 = away(h[2].take().unwrap());
    for lsn in 0..5 {
        w1.append(&payload(lsn)).unwrap();
    }
    assert_eq!(w1.sync_all().unwrap(), 5);
    drop(w1);
    // r1 restarts blank (a DRAM replica's process restarted), r2 comes back lagging, r0 is away.
    let _m1 = cut(&fabric, 1, h[1].take().unwrap());
    h[1] = Some(start_replacement(&fabric, 1, LEN).unwrap());
    h[2] = Some(start(&fabric, 2, Some(m2), LEN).unwrap());
    let m0 = away(h[0].take().unwrap());
    let w2 = Log::open(&writer_peer(&fabric), &addrs(3), vis.clone());
    assert!(matches!(w2, Err(LogError::NoQuorum { .. })), "a writer recovered with a blank replica's vote: {w2:?}");
    h[0] = Some(start(&fabric, 0, Some(m0), LEN).unwrap());
    let (w3, report) = Log::open(&writer_peer(&fabric), &addrs(3), vis).unwrap();
    assert_holds(&w3, 5, &format!("W3 once r0 is back ({report:?})"));
}

/// A writer fenced by a new writer's takeover must not be taken back by a replica that lost its
/// memory (its promise is gone with it): its reconnect is refused.
#[test]
fn a_fenced_writer_is_not_taken_back_by_a_replica_that_lost_its_memory() {
    let fabric = fabric(3);
    let mut h: Vec<Option<ReplicaHandle>> = (0..3).map(|i| Some(start(&fabric, i, None, LEN).unwrap())).collect();
    let vis = opts().flush(FlushMode::Visibility).quorum(Quorum::K(1));
    let (mut w1, _) = Log::open(&writer_peer(&fabric), &addrs(3), vis.clone()).unwrap();
    w1.append(&payload(0)).unwrap();
    w1.sync_all().unwrap();
    let (mut w2, _) = Log::open(&writer_peer(&fabric), &addrs(3), vis).unwrap();
    w2.append(&payload(1)).unwrap();
    assert_eq!(w2.sync_all().unwrap(), 2);
    // r1 restarts blank; the fenced W1 tries to come back there.
    let _m1 = cut(&fabric, 1, h[1].take().unwrap());
    h[1] = Some(start_replacement(&fabric, 1, LEN).unwrap());
    let _ = w1.append(b"W1 after the takeover");
    let _ = w1.sync_all();
    assert!(w1.health().iter().all(|h| *h == rpma_log::Health::Down), "{:?}", w1.health());
    let r = w1.reconnect(1);
    assert!(r.is_err(), "the fenced writer was taken back by the blank replica");
    drop(w1);
    drop(w2);
}

/// A writer's connection request that fails on its way into the replica (here: the replica's
/// queue pair cannot be built; on rxe, a writer that gave up and destroyed its side first) is
/// that writer's loss: the replica serves the next writer (a replica once died of it in the
/// cluster's nemesis run, `scripts/test-cluster.sh`).
#[test]
fn a_replica_serves_on_after_an_incoming_request_failed() {
    let fabric = fabric(1);
    let h = start(&fabric, 0, None, LEN).unwrap();
    // The first queue pair is the writer's own; the second, the replica's for its request.
    fabric.faults().fail_nth(2, 22, Some("rdma_create_qp"));
    let first = Log::open(&writer_peer(&fabric), &addrs(1), opts().quorum(Quorum::All));
    fabric.faults().count_calls(Some("nothing"));
    assert!(first.is_err(), "the open whose request failed in the replica: {first:?}");
    let (mut log, _) = Log::open(&writer_peer(&fabric), &addrs(1), opts().quorum(Quorum::All))
        .expect("the replica serves the next writer");
    log.append(&payload(0)).unwrap();
    assert_eq!(log.sync_all().unwrap(), 1);
    assert!(!h.is_finished(), "the replica stopped serving");
}

/// n = 3, majority, a ring of 1024 bytes. W1 acknowledges lsn 0..9 (ending 72 bytes before the
/// ring's end) on all three and truncates below 5 there; with r0 and r2 away it appends lsn 9 (a
/// pad, then the entry at the next lap, 1024) and truncates below 9, which records head 1024 on
/// r1 alone (no quorum). W2
/// opens on r0 and r2 and acknowledges its own lsn 9 (72 bytes: at 952, before the ring's end)
/// and lsn 10 (at 1024). W3 reads all three: r1's head 1024 is a record boundary of W2's history,
/// but there it is lsn 10, not the lsn 9 r1's truncation named; taking it as a truncation dropped
/// W2's acknowledged lsn 9 (found by the simulator).
#[test]
fn a_truncation_of_another_history_does_not_cut_the_chosen_one() {
    let fabric = fabric(3);
    let len = rpma_log::HEADER_SIZE + 1024;
    let mut h: Vec<Option<ReplicaHandle>> = (0..3).map(|i| Some(start(&fabric, i, None, len).unwrap())).collect();
    let entry = |lsn: u64, n: usize| vec![lsn as u8; n];
    let (mut w1, _) = Log::open(&writer_peer(&fabric), &addrs(3), opts()).unwrap();
    for lsn in 0..9 {
        w1.append(&entry(lsn, if lsn < 8 { 64 } else { 80 })).unwrap();
    }
    assert_eq!(w1.sync_all().unwrap(), 9);
    w1.truncate_prefix(5).unwrap();
    let m0 = away(h[0].take().unwrap());
    let m2 = away(h[2].take().unwrap());
    w1.refresh_health();
    w1.append(&entry(0xA9, 64)).unwrap();
    assert!(matches!(w1.truncate_prefix(9), Err(LogError::NoQuorum { .. })));
    drop(w1);
    let m1 = away(h[1].take().unwrap());
    h[0] = Some(start(&fabric, 0, Some(m0), len).unwrap());
    h[2] = Some(start(&fabric, 2, Some(m2), len).unwrap());
    let (mut w2, report) = Log::open(&writer_peer(&fabric), &addrs(3), opts()).unwrap();
    assert_eq!((report.head_lsn, report.next_lsn), (5, 9), "{report:?}");
    w2.append(&entry(0xB9, 32)).unwrap();
    w2.append(&entry(0xBA, 64)).unwrap();
    assert_eq!(w2.sync_all().unwrap(), 11);
    drop(w2);
    h[1] = Some(start(&fabric, 1, Some(m1), len).unwrap());
    let (w3, report) = Log::open(&writer_peer(&fabric), &addrs(3), opts()).unwrap();
    assert_eq!((report.head_lsn, report.next_lsn), (5, 11), "{report:?}");
    assert_eq!(w3.read(9).unwrap(), entry(0xB9, 32), "W2's acknowledged lsn 9");
    assert_eq!(w3.read(10).unwrap(), entry(0xBA, 64));
}

/// The fence persists nothing: what the fenced writer wrote last may be in a replica's memory
/// only, and a new writer that keeps it makes it durable before it commits over it (rule 9).
/// Here W1 flushes to visibility only, so every record it synced is in the replicas' memory and
/// not durable; W2 (persistent) takes the log over, keeps them, and acknowledges 5..8; then every
/// replica's node loses power (unflushed bytes lost) and W3 recovers: W2's acknowledged entries
/// are there. With the rule off (`kept_history_unflushed`) the kept records vanish and take
/// W2's acknowledged entries with them.
#[test]
fn a_new_writer_makes_durable_what_it_keeps_of_a_fenced_writers_history() {
    let run = |broken: rpma_log::Broken| -> Result<(), String> {
        let fabric = fabric(3);
        let mut h: Vec<Option<ReplicaHandle>> = (0..3).map(|i| Some(start(&fabric, i, None, LEN).unwrap())).collect();
        let (mut w1, _) = Log::open(&writer_peer(&fabric), &addrs(3), opts().flush(FlushMode::Visibility)).unwrap();
        for lsn in 0..5 {
            w1.append(&payload(lsn)).unwrap();
        }
        assert_eq!(w1.sync_all().unwrap(), 5);
        let (mut w2, _) = Log::open(&writer_peer(&fabric), &addrs(3), opts().broken(broken)).unwrap();
        assert_eq!(w2.next_lsn(), 5, "W2 keeps W1's history");
        for lsn in 5..8 {
            w2.append(&payload(lsn)).unwrap();
        }
        assert_eq!(w2.sync_all().unwrap(), 8);
        drop((w1, w2));
        let regions: Vec<rpma::Memory> = (0..3).map(|i| cut(&fabric, i, h[i].take().unwrap())).collect();
        let fabric2 = self::fabric(3);
        let _h: Vec<ReplicaHandle> =
            regions.into_iter().enumerate().map(|(i, m)| start(&fabric2, i, Some(m), LEN).unwrap()).collect();
        let (w3, report) =
            Log::open(&writer_peer(&fabric2), &addrs(3), opts()).map_err(|e| format!("W3 cannot open: {e}"))?;
        if w3.next_lsn() < 8 {
            return Err(format!("W2 acknowledged 5..8, W3 recovered {} entries ({report:?})", w3.next_lsn()));
        }
        for lsn in 0..8 {
            assert_eq!(w3.read(lsn).unwrap(), payload(lsn), "entry {lsn}");
        }
        Ok(())
    };
    run(rpma_log::Broken::none()).unwrap();
    let mut broken = rpma_log::Broken::none();
    broken.kept_history_unflushed = true;
    let e = run(broken).expect_err("with the kept history unflushed, a power cut loses W2's acknowledged entries");
    println!("kept_history_unflushed: {e}");
}

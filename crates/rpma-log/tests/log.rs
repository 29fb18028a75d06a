//! The log on the mock: appends, group commit, reads, the ring, quorum, fencing, reconnect and
//! bad input.

mod common;

use std::time::Duration;

use common::{addrs, builder, payload, start, writer_peer, LOG_ID};
use rpma::mock::{Device, MockFabric, Mode, PersistentMemory};
use rpma::{ContextType, Memory};
use rpma_log::{
    check_region, FlushMode, Health, Log, LogError, LogOptions, Quorum, Replica, ReplicaAddr, ReplicaHandle, Standby,
    Wait, MIN_CAPACITY,
};

const LEN: usize = 64 * 1024;

/// Whether this file runs as tests/log_sleep.rs's module: the same tests with the writer
/// sleeping on its completion channels, on the mock in its deferred mode with writes landing 8
/// bytes a step (a poll of the writer executes one step, the fabric's progress thread the rest
/// about 2 ms later: the writer sleeps in poll(2) until their completions wake it).
fn sleeping() -> bool {
    module_path!().starts_with("log_sleep")
}

fn opts(quorum: Quorum) -> LogOptions {
    let wait = if sleeping() { Wait::Sleep } else { Wait::Spin };
    LogOptions::new(LOG_ID).quorum(quorum).timeout(Duration::from_secs(2)).wait(wait)
}

fn fabric(n: usize) -> MockFabric {
    let b = builder(n).persistent_memory(PersistentMemory::All);
    if sleeping() {
        b.mode(Mode::Deferred).tearing(8).build()
    } else {
        b.build()
    }
}

/// [`fabric`] in the immediate mode whichever the waits: for the tests that count what each
/// replica completed by the time a sync returns (in the deferred mode a replica outside the
/// quorum, or beside one that failed, may not have completed yet).
fn immediate_fabric(n: usize) -> MockFabric {
    builder(n).persistent_memory(PersistentMemory::All).build()
}

#[test]
fn appends_synced_on_three_replicas_recover_in_a_new_writer() {
    let fabric = fabric(3);
    let handles: Vec<_> = (0..3).map(|i| start(&fabric, i, None, LEN).unwrap()).collect();
    let (mut log, report) = Log::open(&writer_peer(&fabric), &addrs(3), opts(Quorum::All)).unwrap();
    assert_eq!((report.next_lsn, report.repaired.len()), (0, 3));
    for lsn in 0..50 {
        assert_eq!(log.append(&payload(lsn)).unwrap(), lsn);
        if lsn % 7 == 6 {
            assert_eq!(log.sync(lsn).unwrap(), lsn + 1);
        }
    }
    assert_eq!(log.sync_all().unwrap(), 50);
    assert_eq!(log.health(), vec![Health::Up; 3]);
    for lsn in 0..50 {
        assert_eq!(log.read(lsn).unwrap(), payload(lsn));
    }
    let epoch = log.epoch();
    drop(log);
    let (log2, report) = Log::open(&writer_peer(&fabric), &addrs(3), opts(Quorum::Majority)).unwrap();
    assert!(report.epoch > epoch, "a new writer's epoch {} is not above {epoch}", report.epoch);
    assert_eq!(report.next_lsn, 50);
    assert!(report.rejected.is_empty() && report.down.is_empty(), "{report:?}");
    for lsn in 0..50 {
        assert_eq!(log2.read(lsn).unwrap(), payload(lsn));
    }
    drop(log2);
    for h in handles {
        let m = h.stop().unwrap();
        let c = check_region(&m.to_vec()).unwrap();
        assert_eq!(c.next_lsn, 50);
        assert_eq!(c.entries.len(), 50);
    }
}

/// A sync writes the records and flushes them; the commit word follows now and then (when the
/// durable position moved more than an eighth of the ring), so most acknowledged records lie in
/// the replicas' tails, and a recovery reads them there.
#[test]
fn acknowledged_records_beyond_the_commit_word_are_recovered_from_the_tail() {
    let fabric = immediate_fabric(3);
    let handles: Vec<_> = (0..3).map(|i| start(&fabric, i, None, LEN).unwrap()).collect();
    let (mut log, _) = Log::open(&writer_peer(&fabric), &addrs(3), opts(Quorum::Majority)).unwrap();
    let eighth = log.capacity() / 8;
    let mut bytes = 0;
    let mut lsn = 0;
    while bytes < 3 * eighth {
        let p = payload(lsn);
        bytes += rpma_log::record_size(p.len());
        log.append(&p).unwrap();
        if lsn % 5 == 4 {
            log.sync(lsn).unwrap();
        }
        lsn += 1;
    }
    assert_eq!(log.sync_all().unwrap(), lsn);
    drop(log);
    let memories: Vec<Memory> = handles.into_iter().map(|h| h.stop().unwrap()).collect();
    for m in &memories {
        let c = check_region(&m.to_vec()).unwrap();
        assert_eq!((c.head_lsn, c.next_lsn), (0, lsn), "the history");
        // The commit word moved (twice at least) and trails the history.
        let committed: u64 =
            c.entries[..c.committed_lsn as usize].iter().map(|e| rpma_log::record_size(e.1.len())).sum();
        let tail: u64 = c.entries[c.committed_lsn as usize..].iter().map(|e| rpma_log::record_size(e.1.len())).sum();
        assert!(committed >= 2 * eighth && tail > 0, "committed {committed} bytes, tail {tail} ({c:?})");
        assert!(tail <= eighth + 5 * 200, "a tail of {tail} bytes: the commit word lags more than an eighth");
    }
    let _handles: Vec<_> =
        memories.into_iter().enumerate().map(|(i, m)| start(&fabric, i, Some(m), LEN).unwrap()).collect();
    let (log, report) = Log::open(&writer_peer(&fabric), &addrs(3), opts(Quorum::Majority)).unwrap();
    assert_eq!((report.head_lsn, report.next_lsn), (0, lsn), "{report:?}");
    for l in 0..lsn {
        assert_eq!(log.read(l).unwrap(), payload(l));
    }
}

#[test]
fn unsynced_appends_are_truncated_by_recovery() {
    let fabric = fabric(1);
    let h = start(&fabric, 0, None, LEN).unwrap();
    let (mut log, _) = Log::open(&writer_peer(&fabric), &addrs(1), opts(Quorum::All)).unwrap();
    for lsn in 0..5 {
        log.append(&payload(lsn)).unwrap();
    }
    log.sync(4).unwrap();
    for lsn in 5..9 {
        log.append(&payload(lsn)).unwrap();
    }
    drop(log);
    let (log, report) = Log::open(&writer_peer(&fabric), &addrs(1), opts(Quorum::All)).unwrap();
    assert_eq!(report.next_lsn, 5, "entries never synced (never posted) are visible: {report:?}");
    assert!(matches!(log.read(5), Err(LogError::NoEntry { lsn: 5, .. })));
    drop(log);
    drop(h);
}

#[test]
fn the_ring_wraps_after_truncate_prefix_and_recovers() {
    let fabric = fabric(2);
    let small = rpma_log::HEADER_SIZE + 1024;
    let handles: Vec<_> = (0..2).map(|i| start(&fabric, i, None, small).unwrap()).collect();
    let (mut log, _) = Log::open(&writer_peer(&fabric), &addrs(2), opts(Quorum::All)).unwrap();
    assert_eq!(log.capacity(), 1024);
    let mut lsn = 0;
    for round in 0..12 {
        let first = lsn;
        loop {
            match log.append(&payload(lsn)) {
                Ok(l) => {
                    assert_eq!(l, lsn);
                    lsn += 1;
                }
                Err(LogError::Full { .. }) => break,
                Err(e) => panic!("round {round}: {e}"),
            }
        }
        assert!(lsn > first, "round {round}: nothing fitted");
        log.sync_all().unwrap();
        // Keep the last two entries, truncate the rest.
        log.truncate_prefix(lsn - 2).unwrap();
        assert!(matches!(log.read(lsn - 3), Err(LogError::NoEntry { .. })));
        assert_eq!(log.read(lsn - 1).unwrap(), payload(lsn - 1));
    }
    drop(log);
    let (log, report) = Log::open(&writer_peer(&fabric), &addrs(2), opts(Quorum::All)).unwrap();
    assert_eq!((report.head_lsn, report.next_lsn), (lsn - 2, lsn), "{report:?}");
    assert_eq!(log.read(lsn - 2).unwrap(), payload(lsn - 2));
    assert_eq!(log.read(lsn - 1).unwrap(), payload(lsn - 1));
    drop(log);
    drop(handles);
}

#[test]
fn quorum_majority_of_three_goes_on_with_one_replica_dead() {
    let fabric = fabric(3);
    let mut handles: Vec<_> = (0..3).map(|i| Some(start(&fabric, i, None, LEN).unwrap())).collect();
    let (mut log, _) = Log::open(&writer_peer(&fabric), &addrs(3), opts(Quorum::Majority)).unwrap();
    for lsn in 0..10 {
        log.append(&payload(lsn)).unwrap();
    }
    log.sync_all().unwrap();
    let dev = Device::lookup(&fabric, &common::replica_ip(2), ContextType::Local).unwrap();
    let cut = fabric.power_cut(dev.backend()).unwrap();
    handles[2].take().unwrap().kill();
    for lsn in 10..30 {
        log.append(&payload(lsn)).unwrap();
        assert_eq!(log.sync(lsn).unwrap(), lsn + 1);
    }
    assert_eq!(log.health()[2], Health::Down);
    let events = log.health_events();
    assert!(
        events.iter().any(|e| e.replica == 2 && e.health == Health::Down && e.reason.is_some()),
        "no Down event for the dead replica: {events:?}"
    );
    // It comes back with what it had made durable, and catches up.
    let memory = cut.into_regions().pop().unwrap().into_memory();
    handles[2] = Some(start(&fabric, 2, Some(memory), LEN).unwrap());
    log.reconnect(2).unwrap();
    assert_eq!(log.health()[2], Health::Up);
    assert_eq!(log.durable_on(2), 30);
    let events = log.health_events();
    assert!(events.iter().any(|e| e.replica == 2 && e.health == Health::CatchingUp), "{events:?}");
    log.append(&payload(30)).unwrap();
    log.sync_all().unwrap();
    drop(log);
    let m = handles[2].take().unwrap().stop().unwrap();
    let c = check_region(&m.to_vec()).unwrap();
    // Caught up to 30; the last sync's majority may be the two others (in the deferred mode
    // this replica may not have run it before the writer left).
    assert!(c.next_lsn == 30 || c.next_lsn == 31, "{}", c.next_lsn);
    for (lsn, p) in c.entries {
        assert_eq!(p, payload(lsn));
    }
}

#[test]
fn quorum_all_fails_sync_clearly_with_one_replica_dead() {
    let fabric = immediate_fabric(3);
    let handles: Vec<_> = (0..3).map(|i| start(&fabric, i, None, LEN).unwrap()).collect();
    let (mut log, _) = Log::open(&writer_peer(&fabric), &addrs(3), opts(Quorum::All)).unwrap();
    log.append(b"before").unwrap();
    log.sync_all().unwrap();
    let dev = Device::lookup(&fabric, &common::replica_ip(1), ContextType::Local).unwrap();
    let _cut = fabric.power_cut(dev.backend()).unwrap();
    log.append(b"after").unwrap();
    match log.sync_all() {
        Err(LogError::NoQuorum { up, needed, detail }) => {
            assert_eq!((up, needed), (2, 3));
            assert!(detail.contains(&common::replica_ip(1)), "the reason does not name the replica: {detail}");
        }
        other => panic!("sync with a replica of All dead: {other:?}"),
    }
    assert_eq!(log.durable_lsn(), 1);
    drop(log);
    drop(handles);
}

#[test]
fn open_needs_a_quorum_of_replicas_up_and_recovery_one_meeting_every_write_quorum() {
    let fabric = fabric(3);
    let _h0 = start(&fabric, 0, None, LEN).unwrap();
    match Log::open(&writer_peer(&fabric), &addrs(3), opts(Quorum::Majority)) {
        Err(LogError::NoQuorum { up: 1, needed: 2, detail }) => {
            assert!(detail.contains(&common::replica_ip(1)) && detail.contains(&common::replica_ip(2)), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    // A quorum of 1 out of 3 may have acknowledged an entry on any one replica: recovery reads
    // all three.
    assert!(matches!(
        Log::open(&writer_peer(&fabric), &addrs(3), opts(Quorum::K(1))),
        Err(LogError::NoQuorum { up: 1, needed: 3, .. })
    ));
    let _h1 = start(&fabric, 1, None, LEN).unwrap();
    let (mut log, report) = Log::open(&writer_peer(&fabric), &addrs(3), opts(Quorum::Majority)).unwrap();
    assert_eq!(report.down.len(), 1);
    assert_eq!(log.health(), vec![Health::Up, Health::Up, Health::Down]);
    log.append(b"two of three").unwrap();
    assert_eq!(log.sync_all().unwrap(), 1);
}

#[test]
fn fencing_an_old_writer_cannot_change_any_replica_after_a_new_writers_recovery() {
    let fabric = fabric(3);
    let handles: Vec<_> = (0..3).map(|i| start(&fabric, i, None, LEN).unwrap()).collect();
    let (mut old, _) = Log::open(&writer_peer(&fabric), &addrs(3), opts(Quorum::Majority)).unwrap();
    for lsn in 0..4 {
        old.append(&payload(lsn)).unwrap();
    }
    old.sync_all().unwrap();
    let (mut new, report) = Log::open(&writer_peer(&fabric), &addrs(3), opts(Quorum::Majority)).unwrap();
    assert_eq!(report.next_lsn, 4);
    assert!(new.epoch() > old.epoch());
    new.append(b"new writer's entry").unwrap();
    new.sync_all().unwrap();
    // The old writer goes on: its writes reach no replica (their rkeys died), its sync fails.
    let marker = b"OLD WRITER AFTER FENCING";
    let r = old.append(marker);
    assert!(r.is_ok() || matches!(r, Err(LogError::NoQuorum { .. })));
    assert!(matches!(old.sync_all(), Err(LogError::NoQuorum { up: 0, .. })), "the fenced writer's sync succeeded");
    // Its reconnect within its own epoch is refused.
    assert!(matches!(old.reconnect(0), Err(LogError::NoQuorum { .. })));
    new.append(b"after").unwrap();
    assert_eq!(new.sync_all().unwrap(), 6);
    drop(old);
    drop(new);
    // Every replica was repaired by the new writer's open (4 entries); a majority has its two
    // syncs (in the deferred mode the third may not have run them before the writer left).
    let mut complete = 0;
    for h in handles {
        let m = h.stop().unwrap();
        let bytes = m.to_vec();
        assert!(!bytes.windows(marker.len()).any(|w| w == marker), "the fenced writer's bytes reached a replica");
        let c = check_region(&bytes).unwrap();
        assert!(c.next_lsn >= 4, "a replica lost the recovered history: {}", c.next_lsn);
        if c.next_lsn > 4 {
            assert_eq!(c.entries[4].1, b"new writer's entry");
        }
        complete += usize::from(c.next_lsn == 6);
    }
    assert!(complete >= 2, "only {complete} replicas hold the new writer's two syncs");
}

#[test]
fn bad_input_gets_clear_errors() {
    let fabric = fabric(2);
    let handles: Vec<_> = (0..2).map(|i| start(&fabric, i, None, rpma_log::HEADER_SIZE + 1024).unwrap()).collect();
    let w = writer_peer(&fabric);
    // Quorum larger than the set, an empty set, duplicates.
    assert!(matches!(Log::open(&w, &addrs(2), opts(Quorum::K(3))), Err(LogError::Invalid(_))));
    assert!(matches!(Log::open(&w, &addrs(2), opts(Quorum::K(0))), Err(LogError::Invalid(_))));
    assert!(matches!(Log::open(&w, &[], opts(Quorum::All)), Err(LogError::Invalid(_))));
    let dup = vec![addrs(1)[0].clone(), addrs(1)[0].clone()];
    assert!(matches!(Log::open(&w, &dup, opts(Quorum::All)), Err(LogError::Invalid(m)) if m.contains("twice")));
    // Another log id.
    match Log::open(&w, &addrs(2), LogOptions::new(LOG_ID + 1)) {
        Err(LogError::WrongLogId { expected, found, .. }) => assert_eq!((expected, found), (LOG_ID + 1, LOG_ID)),
        other => panic!("{other:?}"),
    }
    // An entry larger than the log.
    let (mut log, _) = Log::open(&w, &addrs(2), opts(Quorum::All)).unwrap();
    match log.append(&vec![0u8; 1024]) {
        Err(LogError::EntryTooLarge { len: 1024, capacity: 1024, .. }) => {}
        other => panic!("{other:?}"),
    }
    // Sync of an lsn never appended, read of one never appended.
    assert!(matches!(log.sync(0), Err(LogError::NoEntry { .. })));
    assert!(matches!(log.read(0), Err(LogError::NoEntry { .. })));
    assert!(matches!(log.reconnect(7), Err(LogError::Invalid(_))));
    log.append(b"x").unwrap();
    // Truncation below an entry appended but not synced: not durable yet, sync first.
    let e = log.truncate_prefix(1).expect_err("truncating an unsynced entry");
    assert!(matches!(e, LogError::NotDurable { lsn: 1, first: 0, durable: 0, next: 1 }), "{e:?}");
    let t = e.to_string();
    assert!(t.contains("lsn 1 is not durable yet") && t.contains("sync first"), "{t}");
    assert!(!t.contains("not in the log"), "{t}");
    // Beyond what was appended: not in the log.
    assert!(matches!(log.truncate_prefix(2), Err(LogError::NoEntry { lsn: 2, first: 0, next: 1 })));
    log.sync_all().unwrap();
    log.truncate_prefix(1).unwrap();
    drop(log);
    drop(handles);
}

#[test]
fn bad_regions_are_refused_by_the_replica() {
    let fabric = fabric(1);
    let p = common::peer(&fabric, &common::replica_ip(0));
    // Too small.
    let small = Memory::page_aligned(rpma_log::HEADER_SIZE + MIN_CAPACITY as usize - 8).unwrap();
    assert!(matches!(Replica::format(&p, small, LOG_ID), Err(LogError::Capacity { .. })));
    // Not a log, a corrupt header, another log id.
    assert!(matches!(
        Replica::open(&p, Memory::page_aligned(4096).unwrap(), LOG_ID),
        Err(LogError::CorruptHeader { .. })
    ));
    let r = Replica::format(&p, Memory::page_aligned(4096).unwrap(), LOG_ID).unwrap();
    let m = r.into_memory().unwrap();
    let good = m.to_vec();
    assert!(matches!(Replica::open(&p, Memory::from_vec(good.clone()), LOG_ID + 1), Err(LogError::WrongLogId { .. })));
    // The static block's bytes (magic, log id, checksum) and a commit epoch above the promise.
    for at in [0, 20, 56, 130] {
        let mut bad = good.clone();
        bad[at] ^= 0x40;
        match Replica::open(&p, Memory::from_vec(bad), LOG_ID) {
            Err(LogError::CorruptHeader { detail, .. }) => assert!(!detail.is_empty()),
            other => panic!("byte {at} flipped: {other:?}"),
        }
    }
    let r = Replica::open(&p, Memory::from_vec(good), LOG_ID).unwrap();
    assert_eq!(r.state().unwrap().capacity, 4096 - rpma_log::HEADER_SIZE as u64);
}

#[test]
fn a_persistent_writer_refuses_a_replica_without_direct_write_to_pmem_and_visibility_takes_it() {
    let fabric = fabric(1);
    let p = common::peer(&fabric, &common::replica_ip(0));
    let r = Replica::format(&p, Memory::page_aligned(LEN).unwrap(), LOG_ID)
        .unwrap()
        .with_options(common::fast().with_direct_write_to_pmem(false))
        .listen(&common::replica_ip(0), common::PORT)
        .unwrap()
        .spawn();
    let w = writer_peer(&fabric);
    match Log::open(&w, &addrs(1), opts(Quorum::All)) {
        Err(LogError::NoQuorum { detail, .. }) => assert!(detail.contains("persistent"), "{detail}"),
        other => panic!("{other:?}"),
    }
    let (mut log, _) = Log::open(&w, &addrs(1), opts(Quorum::All).flush(FlushMode::Visibility)).unwrap();
    log.append(b"in memory").unwrap();
    assert_eq!(log.sync_all().unwrap(), 1);
    drop(log);
    drop(r);
}

#[test]
fn a_replica_set_entry_that_is_not_listening_is_down_not_a_hang() {
    let fabric = fabric(3);
    let _h: Vec<_> = (0..2).map(|i| start(&fabric, i, None, LEN).unwrap()).collect();
    let mut set = addrs(2);
    set.push(ReplicaAddr::new(&common::replica_ip(2), "7999"));
    let t0 = std::time::Instant::now();
    let (log, report) = Log::open(&writer_peer(&fabric), &set, opts(Quorum::Majority)).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(1), "opening took {:?}", t0.elapsed());
    assert_eq!(report.down.len(), 1);
    assert_eq!(log.health()[2], Health::Down);
}

#[test]
fn recover_repairs_a_replica_whose_history_diverged_from_the_quorums() {
    let fabric = immediate_fabric(3);
    let mut h: Vec<_> = (0..3).map(|i| Some(start(&fabric, i, None, LEN).unwrap())).collect();
    // W1 commits two entries on r0 alone (r1 and r2 are stopped): its sync fails, unacknowledged.
    let (mut w1, _) = Log::open(&writer_peer(&fabric), &addrs(3), opts(Quorum::Majority)).unwrap();
    let m1 = h[1].take().unwrap().stop().unwrap();
    let m2 = h[2].take().unwrap().stop().unwrap();
    w1.append(b"W1 entry 0, committed on r0 alone").unwrap();
    w1.append(b"W1 entry 1, committed on r0 alone").unwrap();
    assert!(matches!(w1.sync_all(), Err(LogError::NoQuorum { up: 1, needed: 2, .. })));
    assert_eq!(w1.durable_on(0), 2, "r0 did not complete W1's commit");
    drop(w1);
    // W2 opens on r1 and r2 (r0 stopped), commits its own entries at the same lsns.
    let m0 = h[0].take().unwrap().stop().unwrap();
    assert_eq!(check_region(&m0.to_vec()).unwrap().next_lsn, 2);
    h[1] = Some(start(&fabric, 1, Some(m1), LEN).unwrap());
    h[2] = Some(start(&fabric, 2, Some(m2), LEN).unwrap());
    let (mut w2, report) = Log::open(&writer_peer(&fabric), &addrs(3), opts(Quorum::Majority)).unwrap();
    assert_eq!((report.next_lsn, report.down.len()), (0, 1));
    for k in 0..3u8 {
        w2.append(&[b'2', k]).unwrap();
    }
    assert_eq!(w2.sync_all().unwrap(), 3);
    drop(w2);
    // W3 sees r0's commit of a lower epoch and the quorum's of a higher one: it keeps W2's
    // history and repairs r0 (its diverging commit lowered, W2's entries copied).
    h[0] = Some(start(&fabric, 0, Some(m0), LEN).unwrap());
    let (mut w3, report) = Log::open(&writer_peer(&fabric), &addrs(3), opts(Quorum::All)).unwrap();
    assert_eq!(report.next_lsn, 3);
    assert_ne!(report.source, Some(0), "the history was taken from the replica of the lower epoch");
    assert_eq!(report.repaired.len(), 3, "{report:?}");
    for k in 0..3u8 {
        assert_eq!(w3.read(u64::from(k)).unwrap(), [b'2', k]);
    }
    w3.append(b"W3").unwrap();
    w3.sync_all().unwrap();
    drop(w3);
    for (i, handle) in h.into_iter().enumerate() {
        let c = check_region(&handle.unwrap().stop().unwrap().to_vec()).unwrap();
        let got: Vec<Vec<u8>> = c.entries.into_iter().map(|e| e.1).collect();
        let want = vec![vec![b'2', 0], vec![b'2', 1], vec![b'2', 2], b"W3".to_vec()];
        assert_eq!(got, want, "replica {i}");
    }
}

#[test]
fn a_peer_answering_garbage_is_down_not_a_panic() {
    let magic_then_zeroes: Vec<u8> = b"RPMALOGR".iter().copied().chain([0u8; 60]).collect();
    for garbage in [vec![0xABu8; 70], magic_then_zeroes] {
        let fabric = fabric(2);
        let _h = start(&fabric, 0, None, LEN).unwrap();
        // r1 is not a replica: a plain rpma server accepting with bytes of its own.
        let p = common::peer(&fabric, &common::replica_ip(1));
        let ep = rpma::mock::Ep::listen(&p, &common::replica_ip(1), common::PORT).unwrap();
        let fake = std::thread::spawn(move || {
            let req = ep.next_conn_req(None).unwrap();
            req.connect(Some(&garbage)).unwrap()
        });
        match Log::open(&writer_peer(&fabric), &addrs(2), opts(Quorum::All)) {
            Err(LogError::NoQuorum { up: 1, needed: 2, detail }) => {
                assert!(detail.contains("not an rpma-log reply"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
        drop(fake.join().unwrap());
    }
}

#[test]
fn reconnect_with_backoff_brings_a_rebooted_replica_back() {
    let fabric = fabric(3);
    let mut handles: Vec<_> = (0..3).map(|i| Some(start(&fabric, i, None, LEN).unwrap())).collect();
    let (mut log, _) = Log::open(&writer_peer(&fabric), &addrs(3), opts(Quorum::Majority)).unwrap();
    for lsn in 0..5 {
        log.append(&payload(lsn)).unwrap();
    }
    log.sync_all().unwrap();
    let dev = Device::lookup(&fabric, &common::replica_ip(1), ContextType::Local).unwrap();
    let cut = fabric.power_cut(dev.backend()).unwrap();
    handles[1].take().unwrap().kill();
    // Seen at once, tried, failed: then not tried again before its backoff.
    assert_eq!(log.maintain(), Vec::<usize>::new());
    assert_eq!(log.health()[1], Health::Down);
    let events = log.health_events();
    let failures = |ev: &[rpma_log::HealthEvent]| {
        ev.iter()
            .filter(|e| e.replica == 1 && e.reason.as_deref().is_some_and(|r| r.starts_with("reconnecting")))
            .count()
    };
    assert_eq!(failures(&events), 1, "{events:?}");
    assert_eq!(log.maintain(), Vec::<usize>::new());
    assert_eq!(failures(&log.health_events()), 0, "tried again within its backoff");
    for lsn in 5..10 {
        log.append(&payload(lsn)).unwrap();
    }
    log.sync_all().unwrap();
    // The node reboots; maintain brings it back within the backoff's reach.
    let memory = cut.into_regions().pop().unwrap().into_memory();
    handles[1] = Some(start(&fabric, 1, Some(memory), LEN).unwrap());
    let t0 = std::time::Instant::now();
    while log.health()[1] != Health::Up {
        assert!(t0.elapsed() < Duration::from_secs(3), "not back after {:?}", t0.elapsed());
        log.maintain();
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(log.durable_on(1), 10);
    drop(log);
    let c = check_region(&handles[1].take().unwrap().stop().unwrap().to_vec()).unwrap();
    assert_eq!(c.next_lsn, 10);
}

#[test]
fn reconnect_in_background_brings_a_rebooted_replica_back_without_maintain() {
    let fabric = fabric(3);
    let mut handles: Vec<_> = (0..3).map(|i| Some(start(&fabric, i, None, LEN).unwrap())).collect();
    let o = opts(Quorum::Majority).reconnect_in_background(true);
    let (mut log, _) = Log::open(&writer_peer(&fabric), &addrs(3), o).unwrap();
    let mut next = 0;
    let mut round = |log: &mut Log<MockFabric>| {
        for _ in 0..5 {
            log.append(&payload(next)).unwrap();
            next += 1;
        }
        log.sync_all().unwrap()
    };
    round(&mut log);
    let dev = Device::lookup(&fabric, &common::replica_ip(1), ContextType::Local).unwrap();
    let cut = fabric.power_cut(dev.backend()).unwrap();
    handles[1].take().unwrap().kill();
    // The writer learns it from its completions; the thread tries, fails, backs off.
    round(&mut log);
    assert_eq!(log.health()[1], Health::Down);
    std::thread::sleep(Duration::from_millis(30));
    round(&mut log);
    let events = log.health_events();
    assert!(
        events.iter().any(|e| e.replica == 1 && e.reason.as_deref().is_some_and(|r| r.starts_with("reconnecting"))),
        "no failed attempt of the thread reported: {events:?}"
    );
    // The node reboots: the thread connects it again, the writer's next syncs catch it up.
    let memory = cut.into_regions().pop().unwrap().into_memory();
    handles[1] = Some(start(&fabric, 1, Some(memory), LEN).unwrap());
    let t0 = std::time::Instant::now();
    while log.health()[1] != Health::Up {
        assert!(t0.elapsed() < Duration::from_secs(5), "not back after {:?}: {:?}", t0.elapsed(), log.health_events());
        std::thread::sleep(Duration::from_millis(2));
        round(&mut log);
    }
    assert_eq!(log.durable_on(1), log.next_lsn());
    let n = log.next_lsn();
    // Dropping the log ends its thread (joined): the replica's memory comes back at once.
    let t0 = std::time::Instant::now();
    drop(log);
    assert!(t0.elapsed() < Duration::from_secs(1), "dropping took {:?}", t0.elapsed());
    let c = check_region(&handles[1].take().unwrap().stop().unwrap().to_vec()).unwrap();
    assert_eq!(c.next_lsn, n);
}

/// `LogOptions::ack_timeout` and `retry_count` reach the writer's connections: values in range open
/// the log; a value out of range fails the open with the connection's `InvalidInput` naming it, not
/// with "no quorum" (the same rule for every replica).
#[test]
fn connection_retry_settings_reach_the_writers_connections() {
    let fabric = fabric(3);
    let _handles: Vec<_> = (0..3).map(|i| start(&fabric, i, None, LEN).unwrap()).collect();
    let (mut log, _) =
        Log::open(&writer_peer(&fabric), &addrs(3), opts(Quorum::Majority).ack_timeout(16).retry_count(2)).unwrap();
    assert_eq!(log.append(&payload(0)).unwrap(), 0);
    assert_eq!(log.sync(0).unwrap(), 1);
    drop(log);
    for bad in [opts(Quorum::Majority).ack_timeout(32), opts(Quorum::Majority).retry_count(8)] {
        let e = Log::open(&writer_peer(&fabric), &addrs(3), bad).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, LogError::Rpma(ref r) if r.kind() == rpma::ErrorKind::InvalidInput), "{text}");
        assert!(text.contains("ack_timeout") || text.contains("retry_count"), "{text}");
    }
}

/// A sync whose batch (the records' write and their flush) fails on one replica, the provider
/// refusing its post: with a majority the sync goes on with the other two and that replica is
/// down, with a reason, until `reconnect` catches it up; with `All` the sync fails with
/// `NoQuorum` naming it. Either way a new writer recovers every entry a sync acknowledged.
#[test]
fn a_sync_that_fails_on_one_replica_goes_on_with_its_quorum_or_fails_naming_it() {
    for quorum in [Quorum::Majority, Quorum::All] {
        let fabric = immediate_fabric(3);
        let _h: Vec<_> = (0..3).map(|i| start(&fabric, i, None, LEN).unwrap()).collect();
        let (mut log, _) = Log::open(&writer_peer(&fabric), &addrs(3), opts(quorum)).unwrap();
        for lsn in 0..5 {
            log.append(&payload(lsn)).unwrap();
        }
        assert_eq!(log.sync_all().unwrap(), 5);
        for lsn in 5..10 {
            log.append(&payload(lsn)).unwrap();
        }
        // The sync posts one batch per replica: the second post is replica 1's.
        fabric.faults().fail_nth(2, 5, Some("ibv_post_send"));
        let r = log.sync_all();
        fabric.faults().disarm();
        assert_eq!(log.health()[1], Health::Down, "{quorum:?}: its post failed: {:?}", log.health());
        assert!(log.health_events().iter().any(|e| e.replica == 1 && e.health == Health::Down && e.reason.is_some()));
        match (quorum, r) {
            (Quorum::Majority, Ok(d)) => assert_eq!(d, 10),
            (Quorum::All, Err(LogError::NoQuorum { up, needed, detail })) => {
                assert_eq!((up, needed), (2, 3));
                assert!(detail.contains(&common::replica_ip(1)), "the reason does not name the replica: {detail}");
                assert_eq!(log.durable_lsn(), 5);
            }
            (q, r) => panic!("{q:?}: a sync with one replica's post failing: {r:?}"),
        }
        log.reconnect(1).unwrap();
        assert_eq!(log.health()[1], Health::Up);
        assert_eq!(log.sync_all().unwrap(), 10);
        drop(log);
        let (log, _) = Log::open(&writer_peer(&fabric), &addrs(3), opts(quorum)).unwrap();
        assert_eq!(log.next_lsn(), 10, "{quorum:?}");
        for lsn in 0..10 {
            assert_eq!(log.read(lsn).unwrap(), payload(lsn), "{quorum:?}: entry {lsn}");
        }
    }
}

/// Three replicas serving, and a writer that synced entries 0..10 on them (the one a standby
/// takes over from).
fn a_running_writer() -> (MockFabric, Vec<ReplicaHandle>, Log<MockFabric>) {
    let fabric = fabric(3);
    let handles: Vec<_> = (0..3).map(|i| start(&fabric, i, None, LEN).unwrap()).collect();
    let (mut log, _) = Log::open(&writer_peer(&fabric), &addrs(3), opts(Quorum::Majority)).unwrap();
    for lsn in 0..10 {
        log.append(&payload(lsn)).unwrap();
    }
    assert_eq!(log.sync_all().unwrap(), 10);
    (fabric, handles, log)
}

/// A writer standing by makes its buffers ahead (`Standby::for_region`): its takeover uses them
/// and registers two regions fewer than a plain open (the connections' own count the same); a
/// standby of another ring size is not used; a region without room for a ring is refused.
#[test]
fn a_standby_writers_takeover_uses_its_buffers() {
    let (fabric, _handles, _log) = a_running_writer();
    let regs = |open: &dyn Fn() -> Log<MockFabric>| {
        fabric.faults().count_calls(Some("ibv_reg_mr"));
        let log = open();
        let n = fabric.faults().calls();
        fabric.faults().disarm();
        (log, n)
    };
    let peer = writer_peer(&fabric);
    let (plain, plain_regs) = regs(&|| Log::open(&peer, &addrs(3), opts(Quorum::Majority)).unwrap().0);
    drop(plain);
    let (mut standby, standby_regs) = regs(&|| {
        let s = Standby::for_region(&peer, LEN).unwrap();
        assert_eq!(s.capacity(), (LEN - rpma_log::HEADER_SIZE) as u64);
        fabric.faults().count_calls(Some("ibv_reg_mr"));
        Log::open_standby(s, &peer, &addrs(3), opts(Quorum::Majority)).unwrap().0
    });
    assert_eq!(plain_regs, standby_regs + 2, "plain open {plain_regs} registrations, standby's {standby_regs}");
    for lsn in 0..10 {
        assert_eq!(standby.read(lsn).unwrap(), payload(lsn));
    }
    let lsn = standby.append(&payload(10)).unwrap();
    assert_eq!(standby.sync(lsn).unwrap(), 11);
    drop(standby);
    // Buffers of another size are not used: the open allocates its own.
    let (other, other_regs) = regs(&|| {
        let s = Standby::for_region(&peer, 2 * LEN).unwrap();
        fabric.faults().count_calls(Some("ibv_reg_mr"));
        Log::open_standby(s, &peer, &addrs(3), opts(Quorum::Majority)).unwrap().0
    });
    assert_eq!(other_regs, plain_regs);
    assert_eq!(other.read(10).unwrap(), payload(10));
    let e = Standby::for_region(&peer, rpma_log::HEADER_SIZE + 8).unwrap_err();
    assert!(matches!(e, LogError::Capacity { .. }), "{e}");
}

/// A writer standing by makes its connection requests ahead too (`Standby::with_requests`) and
/// knows the epoch it takes over from (`LogOptions::after_epoch`): its takeover resolves no
/// address (every request was made before) and needs one round (no replica refuses it), takes
/// the log over, and goes on; a replica not among the standby's gets its request at the
/// takeover. Without the epoch, the first round asks for epoch 1 and is refused.
#[test]
fn a_standby_writers_takeover_sends_the_requests_it_made_ahead() {
    let (fabric, _handles, mut log) = a_running_writer();
    let peer = writer_peer(&fabric);
    let resolved = |standby: Standby<MockFabric>, after: u64| {
        fabric.faults().count_calls(Some("rdma_resolve_addr"));
        let o = opts(Quorum::Majority).after_epoch(after);
        let (log, report) = Log::open_standby(standby, &peer, &addrs(3), o).unwrap();
        let n = fabric.faults().calls();
        fabric.faults().disarm();
        (log, report, n)
    };
    let s = Standby::for_region(&peer, LEN).unwrap().with_requests(&peer, &addrs(3), &opts(Quorum::Majority)).unwrap();
    assert_eq!(s.requests(), 3);
    let (mut next, report, n) = resolved(s, log.epoch());
    assert_eq!(n, 0, "the takeover resolved {n} addresses: {report:?}");
    assert_eq!(report.epoch, log.epoch() + 1);
    assert_eq!(report.repaired.len(), 3, "{report:?}");
    // The old writer is fenced.
    log.append(b"after the takeover").unwrap();
    assert!(log.sync_all().is_err());
    let lsn = next.append(&payload(10)).unwrap();
    assert_eq!(next.sync(lsn).unwrap(), 11);
    drop(next);
    // Requests made ahead for two replicas of three: the third's is made at the takeover.
    let s =
        Standby::for_region(&peer, LEN).unwrap().with_requests(&peer, &addrs(3)[..2], &opts(Quorum::Majority)).unwrap();
    let (next, report, n) = resolved(s, 2);
    assert_eq!((n, report.epoch), (1, 3));
    assert_eq!(next.read(10).unwrap(), payload(10));
    drop(next);
    // Without the epoch: a first round refused (epoch 1), a second one made anew.
    let s = Standby::for_region(&peer, LEN).unwrap().with_requests(&peer, &addrs(3), &opts(Quorum::Majority)).unwrap();
    let (_, report, n) = resolved(s, 0);
    assert_eq!((n, report.epoch), (3, 4));
}

/// A region formatted again (`Replica::format`, a new log of the same id) holds nothing of the
/// log it held: a recovery must not take the old log's records beyond the new writer's tail as
/// its own, though they carry the epochs, positions and lsns the new log's first writers give
/// theirs (identical entries at identical places, as a benchmark run twice writes them).
#[test]
fn a_region_formatted_again_gives_back_nothing_of_its_old_log() {
    let fabric = fabric(3);
    let mut handles: Vec<Option<ReplicaHandle>> = (0..3).map(|i| Some(start(&fabric, i, None, LEN).unwrap())).collect();
    let entry = [7u8; 64];
    let (mut log, _) = Log::open(&writer_peer(&fabric), &addrs(3), opts(Quorum::Majority)).unwrap();
    for _ in 0..200 {
        log.append(&entry).unwrap();
    }
    assert_eq!(log.sync_all().unwrap(), 200);
    drop(log);
    let memories = common::stop_replicas(&mut handles, &[0, 1, 2]).unwrap();
    for (i, m) in memories.into_iter().enumerate() {
        let p = common::peer(&fabric, &common::replica_ip(i));
        let r = Replica::format(&p, m, LOG_ID).unwrap().with_options(common::fast());
        handles[i] = Some(r.listen(&common::replica_ip(i), common::PORT).unwrap().spawn());
    }
    let (mut log, report) = Log::open(&writer_peer(&fabric), &addrs(3), opts(Quorum::Majority)).unwrap();
    assert_eq!(report.next_lsn, 0);
    for _ in 0..10 {
        log.append(&entry).unwrap();
    }
    assert_eq!(log.sync_all().unwrap(), 10);
    drop(log);
    let (_log, report) = Log::open(&writer_peer(&fabric), &addrs(3), opts(Quorum::Majority)).unwrap();
    assert_eq!(report.next_lsn, 10, "the old log's entries came back: {report:?}");
}

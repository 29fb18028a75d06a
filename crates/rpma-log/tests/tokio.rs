//! The async writer (`rpma_log::tokio::Log`, feature `tokio`) on the mock: the log's calls
//! awaited from tasks, a recovery by a new async writer, and no runtime thread blocked while
//! the writer waits.
#![cfg(feature = "tokio")]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{addrs, builder, payload, start, writer_peer, LOG_ID};
use rpma::mock::{Mode, PersistentMemory};
use rpma_log::{check_region, Health, LogError, LogOptions, Quorum, ReplicaAddr};

const LEN: usize = 64 * 1024;

/// A task that counts the milliseconds it sleeps through: it runs only while the runtime's
/// thread is free.
fn ticker() -> (Arc<AtomicU64>, tokio::task::JoinHandle<()>) {
    let ticks = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&ticks);
    let ticker = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(1)).await;
            counter.fetch_add(1, Ordering::Relaxed);
        }
    });
    (ticks, ticker)
}

fn opts() -> LogOptions {
    LogOptions::new(LOG_ID).quorum(Quorum::Majority).timeout(Duration::from_secs(2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_log_appends_syncs_reads_truncates_and_a_new_writer_recovers() {
    let fabric = builder(3).persistent_memory(PersistentMemory::All).build();
    let handles: Vec<_> = (0..3).map(|i| start(&fabric, i, None, LEN).unwrap()).collect();
    let (mut log, report) = rpma_log::tokio::Log::open(&writer_peer(&fabric), &addrs(3), opts()).await.unwrap();
    assert_eq!(report.next_lsn, 0);
    for lsn in 0..100u64 {
        assert_eq!(log.append(&payload(lsn)).unwrap(), lsn);
        if lsn % 10 == 9 {
            assert_eq!(log.sync(lsn).await.unwrap(), lsn + 1);
        }
    }
    assert_eq!(log.sync_all().await.unwrap(), 100);
    for lsn in 0..100 {
        assert_eq!(log.read(lsn).unwrap(), payload(lsn));
    }
    log.truncate_prefix(40).await.unwrap();
    assert!(matches!(log.read(39), Err(LogError::NoEntry { lsn: 39, first: 40, .. })));
    assert_eq!(log.sync(99).await.unwrap(), 100);
    // What does not wait, on the writer; what does, on the blocking pool.
    assert_eq!(log.writer().unwrap().health(), vec![Health::Up; 3]);
    assert_eq!(log.blocking(|l| l.maintain()).await.unwrap(), Vec::<usize>::new());
    log.close().await.unwrap();

    let (mut log, report) = rpma_log::tokio::Log::open(&writer_peer(&fabric), &addrs(3), opts()).await.unwrap();
    assert_eq!((report.head_lsn, report.next_lsn), (40, 100));
    assert_eq!(log.read(40).unwrap(), payload(40));
    let lsn = log.append(&payload(100)).unwrap();
    assert_eq!(log.sync(lsn).await.unwrap(), 101);
    log.close().await.unwrap();
    for h in handles {
        let c = check_region(&h.stop().unwrap().to_vec()).unwrap();
        assert_eq!((c.head_lsn, c.next_lsn), (40, 101));
    }
}

/// A sync whose completions come later (the mock's deferred mode: its progress thread
/// completes the work about 2 ms after it is posted, and writes land in 8-byte pieces) awaits
/// the completion channels: the one runtime thread runs another task meanwhile, and every sync
/// completes with its entries durable.
#[tokio::test(flavor = "current_thread")]
async fn tokio_log_sync_awaits_the_completion_channels_without_blocking_the_runtime_thread() {
    let fabric = builder(3).persistent_memory(PersistentMemory::All).mode(Mode::Deferred).tearing(8).build();
    let handles: Vec<_> = (0..3).map(|i| start(&fabric, i, None, LEN).unwrap()).collect();
    let (mut log, _) = rpma_log::tokio::Log::open(&writer_peer(&fabric), &addrs(3), opts()).await.unwrap();
    let (ticks, ticker) = ticker();
    let t0 = Instant::now();
    for lsn in 0..50u64 {
        log.append(&payload(lsn)).unwrap();
        assert_eq!(log.sync(lsn).await.unwrap(), lsn + 1);
    }
    let took = t0.elapsed();
    ticker.abort();
    // 50 syncs of about 2 ms each: a blocking wait would have left the ticker at 0.
    let n = ticks.load(Ordering::Relaxed);
    assert!(n >= 20, "the ticker ran {n} times in {took:?}: the runtime thread was blocked");
    log.close().await.unwrap();
    for h in handles {
        let c = check_region(&h.stop().unwrap().to_vec()).unwrap();
        assert_eq!(c.next_lsn, 50);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn tokio_log_waits_without_blocking_the_runtime_thread() {
    let fabric = builder(3).persistent_memory(PersistentMemory::All).build();
    let _r0 = start(&fabric, 0, None, LEN).unwrap();
    // Replica 1's address is an endpoint that never answers a connection request: the writer
    // waits for it until its timeout.
    let p = common::peer(&fabric, &common::replica_ip(1));
    let _silent = rpma::mock::Ep::listen(&p, &common::replica_ip(1), common::PORT).unwrap();
    let set = [addrs(1)[0].clone(), ReplicaAddr::new(&common::replica_ip(1), common::PORT)];
    let (ticks, ticker) = ticker();
    let t0 = Instant::now();
    let o = LogOptions::new(LOG_ID).quorum(Quorum::All).timeout(Duration::from_millis(300));
    let r = rpma_log::tokio::Log::open(&writer_peer(&fabric), &set, o).await;
    let waited = t0.elapsed();
    ticker.abort();
    assert!(matches!(r, Err(LogError::NoQuorum { up: 1, needed: 2, .. })), "{r:?}");
    assert!(waited >= Duration::from_millis(300), "the writer did not wait for the silent replica ({waited:?})");
    // The one runtime thread ran the ticker all along (a blocking open would leave it at 0).
    let n = ticks.load(Ordering::Relaxed);
    assert!(n >= 50, "the ticker ran {n} times in {waited:?}: the runtime thread was blocked");
}

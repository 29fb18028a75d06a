//! The async writer (`rpma_log::tokio::Log`, feature `tokio`) on the mock: the log's calls
//! awaited from tasks, a recovery by a new async writer, and no runtime thread blocked while
//! the writer waits.
#![cfg(feature = "tokio")]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{addrs, builder, payload, start, writer_peer, LOG_ID};
use rpma::mock::PersistentMemory;
use rpma_log::{check_region, Health, LogError, LogOptions, Quorum, ReplicaAddr};

const LEN: usize = 64 * 1024;

fn opts() -> LogOptions {
    LogOptions::new(LOG_ID).quorum(Quorum::Majority).timeout(Duration::from_secs(2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_log_appends_syncs_reads_truncates_and_a_new_writer_recovers() {
    let fabric = builder(3).persistent_memory(PersistentMemory::All).build();
    let handles: Vec<_> = (0..3).map(|i| start(&fabric, i, None, LEN).unwrap()).collect();
    let (log, report) = rpma_log::tokio::Log::open(&writer_peer(&fabric), &addrs(3), opts()).await.unwrap();
    assert_eq!(report.next_lsn, 0);
    let log = Arc::new(log);
    // Tasks append concurrently; each gets its own lsn.
    let tasks: Vec<_> = (0..4)
        .map(|t| {
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let mut lsns = Vec::new();
                for k in 0..25u64 {
                    let lsn = log.append(format!("task {t} entry {k}")).await.unwrap();
                    lsns.push((lsn, format!("task {t} entry {k}")));
                }
                lsns
            })
        })
        .collect();
    let mut written = Vec::new();
    for t in tasks {
        written.extend(t.await.unwrap());
    }
    written.sort();
    assert_eq!(written.iter().map(|w| w.0).collect::<Vec<_>>(), (0..100).collect::<Vec<_>>());
    assert_eq!(log.sync_all().await.unwrap(), 100);
    for (lsn, data) in &written {
        assert_eq!(log.read(*lsn).await.unwrap(), data.as_bytes());
    }
    log.truncate_prefix(40).await.unwrap();
    assert!(matches!(log.read(39).await, Err(LogError::NoEntry { lsn: 39, first: 40, .. })));
    assert_eq!(log.sync(99).await.unwrap(), 100);
    // The calls the async face does not wrap.
    assert_eq!(log.with(|l| l.health()).await.unwrap(), vec![Health::Up; 3]);
    let log = Arc::try_unwrap(log).unwrap();
    log.close().await.unwrap();

    let (log, report) = rpma_log::tokio::Log::open(&writer_peer(&fabric), &addrs(3), opts()).await.unwrap();
    assert_eq!((report.head_lsn, report.next_lsn), (40, 100));
    assert_eq!(log.read(40).await.unwrap(), written[40].1.as_bytes());
    let lsn = log.append(payload(100)).await.unwrap();
    assert_eq!(log.sync(lsn).await.unwrap(), 101);
    log.close().await.unwrap();
    for h in handles {
        let c = check_region(&h.stop().unwrap().to_vec()).unwrap();
        assert_eq!((c.head_lsn, c.next_lsn), (40, 101));
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
    let ticks = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&ticks);
    let ticker = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(1)).await;
            counter.fetch_add(1, Ordering::Relaxed);
        }
    });
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

//! The async writer (`rpma_log::tokio::Log`) next to the sync one, in one run on the mock: three
//! replicas (threads), majority, persistent, 64-byte entries. Prints synced appends per second
//! at queue depth 1 (append, then sync) and with group commit of 128 (128 appends, then one
//! sync), for the sync API and for the async face with each sync awaited.
//!
//! `cargo run --release -p rpma-log --features tokio --example tokio_face [-- SECONDS]`

use std::time::{Duration, Instant};

use rpma::mock::{Device, MockFabric, Peer};
use rpma::{ContextType, Memory};
use rpma_log::{Log, LogOptions, Quorum, Replica, ReplicaAddr, ReplicaHandle, ReplicaOptions};

const LOG_ID: u64 = 0x70_C10;
const ENTRY: [u8; 64] = [0x5A; 64];
const GROUP: u64 = 128;

fn peer(fabric: &MockFabric, ip: &str) -> Peer {
    Peer::new(&Device::lookup(fabric, ip, ContextType::Local).expect("device")).expect("peer")
}

fn replicas(fabric: &MockFabric) -> (Vec<ReplicaHandle>, Vec<ReplicaAddr>) {
    let mut handles = Vec::new();
    let mut addrs = Vec::new();
    for i in 0..3 {
        let ip = format!("10.0.1.{}", i + 1);
        let r = Replica::format(&peer(fabric, &ip), Memory::page_aligned(8 << 20).expect("memory"), LOG_ID)
            .expect("format")
            .with_options(ReplicaOptions::default().with_poll_interval(Duration::from_millis(5)));
        handles.push(r.listen(&ip, "7600").expect("listen").spawn());
        addrs.push(ReplicaAddr::new(&ip, "7600"));
    }
    (handles, addrs)
}

fn fabric() -> MockFabric {
    let mut b = MockFabric::builder().device("writer", &["10.0.0.1"]);
    for i in 0..3 {
        b = b.device(&format!("r{i}"), &[format!("10.0.1.{}", i + 1).as_str()]);
    }
    b.build()
}

/// Appends `k` entries and syncs them; truncates when the ring is half full.
fn group(log: &mut Log<MockFabric>, k: u64) -> u64 {
    for _ in 0..k {
        log.append(&ENTRY).expect("append");
    }
    log.sync_all().expect("sync");
    truncate_if_half_full(log);
    k
}

fn truncate_if_half_full(log: &mut Log<MockFabric>) {
    let d = log.durable_lsn();
    if (d - log.head_lsn()) * rpma_log::record_size(ENTRY.len()) > log.capacity() / 2 {
        log.truncate_prefix(d).expect("truncate");
    }
}

/// Synced appends and seconds, summed over the slices of one way of appending.
#[derive(Default, Clone, Copy)]
struct Tally {
    n: u64,
    secs: f64,
}

impl Tally {
    fn add(&mut self, n: u64, t0: Instant) {
        self.n += n;
        self.secs += t0.elapsed().as_secs_f64();
    }

    fn rate(self) -> f64 {
        self.n as f64 / self.secs
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let opts = || LogOptions::new(LOG_ID).quorum(Quorum::Majority);
    // A log for each face, each on its own fabric; the faces take turns in slices of a tenth of
    // the time, so that a change of the machine's load touches them alike.
    let fs = fabric();
    let (hs, addrs) = replicas(&fs);
    let (mut log, _) = Log::open(&peer(&fs, "10.0.0.1"), &addrs, opts())?;
    let fa = fabric();
    let (ha, addrs) = replicas(&fa);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (mut alog, _) = rt.block_on(rpma_log::tokio::Log::open(&peer(&fa, "10.0.0.1"), &addrs, opts()))?;
    let slice = secs / 10.0;
    // [queue depth 1, group] × [sync API, async face].
    let mut t = [[Tally::default(); 2]; 2];
    for _ in 0..10 {
        for (row, k) in [(0, 1), (1, GROUP)] {
            let t0 = Instant::now();
            let mut n = 0;
            while t0.elapsed().as_secs_f64() < slice {
                n += group(&mut log, k);
            }
            t[row][0].add(n, t0);
            let t0 = Instant::now();
            let n = rt.block_on(async {
                let mut n = 0;
                while t0.elapsed().as_secs_f64() < slice {
                    for _ in 0..k {
                        alog.append(&ENTRY)?;
                    }
                    alog.sync_all().await?;
                    let w = alog.writer()?;
                    let d = w.durable_lsn();
                    if (d - w.head_lsn()) * rpma_log::record_size(ENTRY.len()) > w.capacity() / 2 {
                        alog.truncate_prefix(d).await?;
                    }
                    n += k;
                }
                Ok::<u64, rpma_log::LogError>(n)
            })?;
            t[row][1].add(n, t0);
        }
    }
    drop(log);
    rt.block_on(alog.close())?;
    for h in hs.into_iter().chain(ha) {
        h.stop()?;
    }
    println!("synced 64-byte appends/s, 3 replicas, majority, mock, one writer ({secs} s each way, in turns):");
    for (row, name) in [(0, "queue depth 1"), (1, "group commit of 128")] {
        let base = t[row][0].rate();
        println!(
            "  {name:<20} sync API {base:>10.0} | async face, each sync awaited {:>10.0} ({:.2}x)",
            t[row][1].rate(),
            t[row][1].rate() / base
        );
    }
    Ok(())
}

//! `rpma log bench --mode failover`: a new writer takes the log over from a running one, again
//! and again, and each takeover is timed phase by phase (the open's [`OpenPhases`], then the
//! new writer's first acknowledged sync), against the queue-depth-1 sync of the same run.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rpma::{Peer, Transport};
use rpma_log::{Log, LogError, LogOptions, OpenPhases, ReplicaAddr, Standby};

use super::handshake::Floor;
use super::options::LogBenchArgs;
use super::report::{median, FailoverResult};

/// The queue-depth-1 syncs timed before the takeovers, the run's unit of latency.
const REFERENCE_SYNCS: u64 = 200;

/// The ring bytes a failover of `fill` bytes of history with entries of `size` bytes needs: the
/// history and the reference syncs' entries.
pub(super) fn ring_bytes(fill: usize, size: usize) -> u64 {
    let record = rpma_log::record_size(size);
    (entries(fill as u64, record) + REFERENCE_SYNCS + 1).saturating_mul(record)
}

/// The entries of a history of `fill` bytes of records of `record` bytes (at least one).
fn entries(fill: u64, record: u64) -> u64 {
    (fill / record).max(1)
}

/// Takes the log over `a.takeovers` times from `log`, each new writer from the previous one,
/// with `a.fill` bytes of history (the log is truncated, then filled, first), each after a round
/// of bare handshakes of `floor` if given; returns the last writer and the result.
///
/// # Errors
/// A log operation that fails.
pub(super) fn measure<T: Transport>(
    peer: &Peer<T>,
    set: &[ReplicaAddr],
    opts: &LogOptions,
    mut log: Log<T>,
    a: &LogBenchArgs,
    payload: &[u8],
    mut floor: Option<&mut Floor<T>>,
) -> Result<(Log<T>, FailoverResult)> {
    log.sync_all().context("a sync before truncating")?;
    log.truncate_prefix(log.next_lsn()).context("emptying the log before filling it")?;
    let record = rpma_log::record_size(payload.len());
    let entries = entries(a.fill as u64, record);
    for _ in 0..entries {
        log.append(payload).map_err(|e| fill_error(e, a.fill, log.capacity()))?;
    }
    log.sync_all().context("syncing the history")?;
    let mut sync_ns = Vec::new();
    for _ in 0..REFERENCE_SYNCS {
        let s = Instant::now();
        let lsn = log.append(payload).context("an append")?;
        log.sync(lsn).context("a sync")?;
        sync_ns.push(nanos(s.elapsed()));
    }
    log.truncate_prefix(log.next_lsn() - entries).context("keeping the history's size")?;
    let mut phases: Vec<OpenPhases> = Vec::new();
    let mut first_sync: Vec<u64> = Vec::new();
    for _ in 0..a.takeovers {
        // A writer standing by made its buffers and its connection requests before.
        let standby = if a.standby {
            let region = usize::try_from(log.capacity()).context("the ring's size")? + rpma_log::HEADER_SIZE;
            let s = Standby::for_region(peer, region)
                .and_then(|s| s.with_requests(peer, set, opts))
                .context("the standby writer's buffers and connection requests")?;
            Some(s)
        } else {
            None
        };
        if let Some(f) = floor.as_deref_mut() {
            f.round().context("a bare handshake")?;
        }
        // The old writer stays alive through the takeover, as a writer that was cut off would.
        let (mut next, report) = match standby {
            // It follows the writer: it knows the epoch it takes over from.
            Some(s) => Log::open_standby(s, peer, set, opts.clone().after_epoch(log.epoch())),
            None => Log::open(peer, set, opts.clone()),
        }
        .context("a new writer's open")?;
        let s = Instant::now();
        let lsn = next.append(payload).context("the new writer's first append")?;
        next.sync(lsn).context("the new writer's first sync")?;
        first_sync.push(nanos(s.elapsed()));
        phases.push(report.phases);
        drop(log);
        next.truncate_prefix(next.head_lsn() + 1).context("keeping the history's size")?;
        log = next;
    }
    let of = |f: fn(&OpenPhases) -> Duration| median(phases.iter().map(|p| nanos(f(p))).collect()).unwrap_or(0);
    let totals: Vec<u64> = phases.iter().zip(&first_sync).map(|(p, f)| nanos(p.total()) + f).collect();
    let takeover_ns = median(totals).unwrap_or(0);
    let sync_p50_ns = median(sync_ns).unwrap_or(0);
    Ok((
        log,
        FailoverResult {
            standby: a.standby,
            replicas: set.len(),
            history_bytes: entries * record,
            takeovers: a.takeovers,
            sync_p50_ns,
            connect_ns: of(|p| p.connect),
            buffers_ns: of(|p| p.buffers),
            headers_ns: of(|p| p.headers),
            history_ns: of(|p| p.history),
            repair_ns: of(|p| p.repair),
            first_sync_ns: median(first_sync).unwrap_or(0),
            takeover_ns,
            takeover_in_syncs: takeover_ns as f64 / sync_p50_ns.max(1) as f64,
            handshake_ns: None,
            handshake_in_syncs: None,
            takeover_in_handshakes: None,
        },
    ))
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A history of `--fill` bytes that does not fit the ring gets the fix.
#[cold]
fn fill_error(e: LogError, fill: usize, capacity: u64) -> anyhow::Error {
    if matches!(e, LogError::Full { .. }) {
        anyhow::anyhow!("--fill {fill}: the ring holds {capacity} bytes; ask for less, or a larger --region")
    } else {
        anyhow::Error::new(e).context("filling the history")
    }
}

//! The client side: drives the lanes of each thread through every run and turns what they
//! measured into the report's results.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use rpma::{Peer, Transport, Wc};

use super::lane::*;
use super::progress::*;
use super::protocol::*;
use crate::bench::report::{Baseline, Latency, RunResult};
use crate::bench::{Amount, Op, Plan};
use crate::native::{OpCounts, OpPath};

/// Runs one phase on a thread's lanes; returns the operations completed and the time taken.
/// `every` operations make a signaled batch (`Plan::signal_every`).
#[allow(clippy::too_many_arguments)]
pub(super) fn drive<T: Transport>(
    lanes: &mut [Lane<T>],
    op: Op,
    size: usize,
    every: usize,
    stop: Stop,
    hist: &mut Histogram<u64>,
    record: bool,
    progress: &Progress,
) -> Result<(u64, Duration)> {
    let mut wcs = [Wc::EMPTY; WC_BATCH];
    if matches!(stop, Stop::Count(0)) {
        return Ok((0, Duration::ZERO));
    }
    if op == Op::WritePingpong {
        for lane in lanes.iter_mut() {
            lane.pingpong_begin(size, &mut wcs)?;
        }
    }
    let mut posted = vec![0u64; lanes.len()];
    let mut total = 0u64;
    let mut unreported = 0u64;
    let start = Instant::now();
    let elapsed = loop {
        let mut busy = false;
        for (lane, posted) in lanes.iter_mut().zip(posted.iter_mut()) {
            while lane.inflight < lane.qd {
                let at = Instant::now();
                let (more, last) = match stop {
                    Stop::Count(n) => (*posted < n, *posted + 1 == n),
                    Stop::Until(t) => (at < t, false),
                };
                if !more {
                    if lane.open > 0 {
                        // Time is up with unsignaled operations in flight: one more, signaled,
                        // retires them.
                        lane.post(op, size, at, true)?;
                        *posted += 1;
                    }
                    break;
                }
                lane.post(op, size, at, last || lane.open + 1 >= every)?;
                *posted += 1;
            }
            if lane.inflight > 0 {
                busy = true;
                let d = lane.poll(op, size, hist, record, &mut wcs)?;
                total += d;
                unreported += d;
            }
        }
        if unreported >= 256 || !busy {
            progress.done.fetch_add(unreported, Ordering::Relaxed);
            unreported = 0;
        }
        if !busy {
            break start.elapsed();
        }
    };
    if op == Op::WritePingpong {
        for lane in lanes.iter_mut() {
            lane.pingpong_end(size, &mut wcs)?;
        }
    }
    Ok((total, elapsed))
}

/// A run's totals over its client threads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Totals {
    /// Operations completed by all threads.
    pub(super) ops: u64,
    /// The longest thread's time, in seconds (the run's wall time).
    pub(super) secs: f64,
    /// Operations per second: the sum of each thread's own rate (its operations over its own
    /// time), so a thread that finishes its count early is not charged the slowest thread's time.
    pub(super) rate: f64,
}

impl Totals {
    /// The totals of the threads' `(operations, time)`.
    pub(super) fn of(threads: &[(u64, Duration)]) -> Self {
        let ops = threads.iter().map(|t| t.0).sum();
        let secs = threads.iter().map(|t| t.1).max().unwrap_or_default().as_secs_f64().max(1e-9);
        let rate = threads.iter().map(|&(n, t)| n as f64 / t.as_secs_f64().max(1e-9)).sum();
        Self { ops, secs, rate }
    }
}

/// A run's `(operations, time)` of each thread and the threads' merged latencies.
type PerRun = (Vec<(u64, Duration)>, Histogram<u64>);

/// Per thread and run: operations, time, latencies.
pub(super) type Measured = (u64, Duration, Histogram<u64>);

#[allow(clippy::too_many_arguments)]
pub(super) fn client_thread<T: Transport>(
    mut lanes: Vec<Lane<T>>,
    plan: &Plan,
    runs: &[(Op, usize)],
    barrier: &Barrier,
    failed: &AtomicBool,
    progress: &Progress,
) -> Result<Vec<Measured>> {
    let mut out = Vec::with_capacity(runs.len());
    let mut error = None;
    for &(op, size) in runs {
        let mut hist = new_histogram();
        // Warm-up, then the measurement; every thread starts each phase together. Every thread
        // (and the coordinator) passes both barriers of every run, even after a failure.
        barrier.wait();
        let skip = failed.load(Ordering::Acquire);
        let warm = if skip {
            Ok((0, Duration::ZERO))
        } else {
            drive(&mut lanes, op, size, plan.signal_every(op), Stop::Count(plan.warmup), &mut hist, false, progress)
        };
        barrier.wait();
        if skip {
            continue;
        }
        let r = warm.and_then(|_| {
            let stop = match plan.amount {
                Amount::Iters(n) => Stop::Count(n),
                Amount::Duration(d) => Stop::Until(Instant::now() + d),
            };
            drive(&mut lanes, op, size, plan.signal_every(op), stop, &mut hist, true, progress)
        });
        match r {
            Ok((n, t)) => out.push((n, t, hist)),
            Err(e) => {
                failed.store(true, Ordering::Release);
                error = Some(e);
            }
        }
    }
    if let Some(e) = error {
        return Err(e);
    }
    if failed.load(Ordering::Acquire) {
        bail!("another client thread failed");
    }
    for lane in lanes {
        lane.finish()?;
    }
    Ok(out)
}

pub(super) fn memcpy_baseline(size: usize, ops: u64) -> f64 {
    let src = vec![0x5Au8; size];
    let mut dst = vec![0u8; size];
    let budget = Duration::from_millis(200);
    // Batches of copies between clock reads, so the clock does not dominate small sizes.
    let batch = (1usize << 20).div_ceil(size).clamp(1, 1024) as u64;
    let start = Instant::now();
    let mut n = 0u64;
    while n < ops.max(16) && (n < 16 || start.elapsed() < budget) {
        for _ in 0..batch {
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&mut dst);
        }
        n += batch;
    }
    (n as f64 * size as f64) / start.elapsed().as_secs_f64() / 1e9
}

/// Runs the client side of every run on `conns` connections to `addr:port`.
pub(super) fn run_client<T: Transport>(peer: &Peer<T>, plan: &Plan, addr: &str, port: u16) -> Result<Vec<RunResult>> {
    let runs: Vec<(Op, usize)> = plan.ops.iter().flat_map(|op| plan.sizes.iter().map(move |s| (*op, *s))).collect();
    let max = plan.max_size();
    let mut per_thread: Vec<Vec<Lane<T>>> = (0..plan.threads).map(|_| Vec::new()).collect();
    for i in 0..plan.conns {
        let lane = connect(peer, addr, port, max, plan.qd)?;
        per_thread[i % plan.threads].push(lane);
    }
    let barrier = Barrier::new(plan.threads + 1);
    let mut counts: Vec<Option<OpCounts>> = Vec::with_capacity(runs.len() + 1);
    let failed = AtomicBool::new(false);
    let progress = Progress { run: AtomicUsize::new(0), done: AtomicU64::new(0), finished: AtomicBool::new(false) };
    let measured: Vec<Result<Vec<Measured>>> = std::thread::scope(|sc| {
        let handles: Vec<_> = per_thread
            .into_iter()
            .map(|lanes| {
                let (runs, barrier, failed, progress) = (&runs, &barrier, &failed, &progress);
                sc.spawn(move || client_thread(lanes, plan, runs, barrier, failed, progress))
            })
            .collect();
        let monitor = sc.spawn(|| show_progress(plan, &runs, &progress));
        // The coordinator takes part in the barriers to move the progress to each run, and
        // reads the backend's flush and atomic-write counters as each measurement starts
        // (every thread has finished the run's warm-up and the previous run).
        for i in 0..runs.len() {
            progress.done.store(0, Ordering::Relaxed);
            progress.run.store(i, Ordering::Release);
            barrier.wait();
            barrier.wait();
            counts.push(crate::backend::op_counts::<T>());
        }
        let results =
            handles.into_iter().map(|h| h.join().unwrap_or_else(|_| bail!("a client thread panicked"))).collect();
        counts.push(crate::backend::op_counts::<T>());
        progress.finished.store(true, Ordering::Release);
        let _ = monitor.join();
        results
    });
    // Per run: every thread's operations and time, and the threads' merged latencies.
    let mut per_run: Vec<PerRun> = runs.iter().map(|_| (Vec::with_capacity(plan.threads), new_histogram())).collect();
    for m in measured {
        for (acc, (n, t, h)) in per_run.iter_mut().zip(m?) {
            acc.0.push((n, t));
            acc.1.add(&h).context("merging latency histograms")?;
        }
    }
    let mut results = Vec::with_capacity(runs.len());
    for (i, (&(op, size), (threads, hist))) in runs.iter().zip(per_run).enumerate() {
        let Totals { ops, secs, rate } = Totals::of(&threads);
        if ops == 0 {
            bail!("{} of {size} B: no operation completed in the run (a longer --duration?)", op.name());
        }
        let path = op_path(
            op,
            ops,
            peer.capabilities(),
            counts.get(i).copied().flatten(),
            counts.get(i + 1).copied().flatten(),
        );
        let gb_s = rate * size as f64 / 1e9;
        let baseline = plan.baseline.then(|| {
            let m = memcpy_baseline(size, ops);
            Baseline { gb_s: m, ratio: if m > 0.0 { gb_s / m } else { 0.0 } }
        });
        results.push(RunResult {
            op: op.name(),
            size,
            qd: plan.qd,
            conns: plan.conns,
            threads: plan.threads,
            ops,
            elapsed_s: secs,
            latency_kind: if op.is_half_round_trip() { "half_round_trip" } else { "completion" },
            latency_ns: Latency::of(&hist),
            mb_s: rate * size as f64 / 1e6,
            gb_s,
            msg_rate: rate,
            baseline,
            op_path: path,
        });
    }
    Ok(results)
}

/// Whether a run's flushes or atomic writes went native: from the backend's counters between
/// the start of its measurement and the start of the next run's (so the next run's warm-up,
/// whose operations take the same path, counts too), else (the mock) the device's capabilities.
/// `None` for an operation that posts neither.
pub(super) fn op_path(
    op: Op,
    ops: u64,
    caps: &rpma::Capabilities,
    before: Option<OpCounts>,
    after: Option<OpCounts>,
) -> Option<OpPath> {
    let counts = match (before, after) {
        (Some(b), Some(a)) => a.since(b),
        _ => OpCounts::by_capabilities(
            caps,
            if op.flushes() { ops } else { 0 },
            if op.atomic_writes() { ops } else { 0 },
        ),
    };
    if op.flushes() {
        counts.flush()
    } else if op.atomic_writes() {
        counts.atomic_write()
    } else {
        None
    }
}

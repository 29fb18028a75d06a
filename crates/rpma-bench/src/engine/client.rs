//! The client side: drives the lanes of each thread through every run and turns what they
//! measured into the report's results.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use rpma::{Peer, Transport, Wc};

use super::async_lane::AsyncLanes;
use super::driver::{Driver, Phase, Span};
use super::lane::*;
use super::progress::*;
use super::protocol::*;
use super::wait::Idle;
use crate::flush_rule::FlushRule;
use crate::footprint::Footprint;
use crate::op::Op;
use crate::plan::{Amount, Plan};
use crate::report::{Baseline, Latency, RunResult};
use rpma_scenarios::native::{op_counts, OpCounts, OpPath};

/// Runs one phase on a thread's lanes; returns the operations completed and when the thread's
/// phase started and ended. The phase's `every` operations make a signaled batch
/// (`Plan::signal_every`).
pub(super) fn drive<T: Transport>(lanes: &mut [Lane<T>], phase: Phase<'_>) -> Result<Span> {
    let Phase { op, size, every, stop, record, hist, done } = phase;
    let mut wcs = [Wc::EMPTY; WC_BATCH];
    if matches!(stop, Stop::Count(0)) {
        let now = Instant::now();
        return Ok((0, now, now));
    }
    if op == Op::WritePingpong {
        for lane in lanes.iter_mut() {
            lane.pingpong_begin(size, &mut wcs)?;
        }
    }
    let mut posted = vec![0u64; lanes.len()];
    let mut idle = Idle::new(lanes.first().map_or(Duration::from_secs(30), |l| l.timeout));
    let mut total = 0u64;
    let mut unreported = 0u64;
    let start = Instant::now();
    let end = loop {
        let mut busy = false;
        let before = total;
        for (lane, posted) in lanes.iter_mut().zip(posted.iter_mut()) {
            while lane.inflight < lane.qd {
                // Each post reads the clock itself, right before posting; here it is read only
                // for a phase of a given duration.
                if lane.shape.batch > 1 {
                    // Chains of `--batch` operations. As single operations, one completion per
                    // `every` (`--cq-mod`): a chain is signaled (its last operation) when it
                    // reaches the mark, when it is the phase's last, or when the next chain would
                    // not fit in the queue (so a completion always comes to free it).
                    let left = match stop {
                        Stop::Count(n) => n - *posted,
                        Stop::Until(t) => u64::from(Instant::now() < t) * u64::MAX,
                    };
                    let k = lane.shape.batch.min(usize::try_from(left).unwrap_or(usize::MAX));
                    let room = lane.qd - lane.inflight;
                    if k == 0 || room < k {
                        if k == 0 && lane.open > 0 {
                            // Time is up with unsignaled chains in flight: one signaled
                            // operation retires them.
                            lane.post_last(op, size)?;
                            *posted += 1;
                        }
                        break;
                    }
                    let last = left <= k as u64;
                    let signaled = last || lane.open + k >= every || room - k < k;
                    lane.post_chain(op, size, k, signaled)?;
                    *posted += k as u64;
                    continue;
                }
                let until = match stop {
                    Stop::Count(n) => {
                        // Single operations up to a count, the common run: as many as the
                        // queue takes in one call (`Lane::post_run`: the lane's counters in
                        // registers, the operation's shape and offsets decided once).
                        let mut p = *posted;
                        if lane.plain(op) {
                            if p < n && lane.inflight + 1 == lane.qd {
                                // Room for one (always at --qd 1): the post inlined here, so
                                // that no return from a call lies between it and the poll
                                // that times it.
                                lane.post_plain(op, size, p + 1 == n || lane.open + 1 >= every, lane.span(op))?;
                                p += 1;
                            } else {
                                p = lane.post_run(op, size, every, p, n)?;
                            }
                        } else {
                            while lane.inflight < lane.qd && p < n {
                                lane.post_general(op, size, p + 1 == n || lane.open + 1 >= every)?;
                                p += 1;
                            }
                        }
                        *posted = p;
                        break;
                    }
                    Stop::Until(t) => t,
                };
                if Instant::now() >= until {
                    if lane.open > 0 {
                        // Time is up with unsignaled operations in flight: one more, signaled,
                        // retires them.
                        lane.post_last(op, size)?;
                        *posted += 1;
                    }
                    break;
                }
                lane.post(op, size, lane.open + 1 >= every)?;
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
            done.fetch_add(unreported, Ordering::Relaxed);
            unreported = 0;
        }
        if !busy {
            break Instant::now();
        }
        if total == before {
            idle.tick(|| {
                let what = match op {
                    Op::WritePingpong => "the pong of",
                    _ if op.is_ping_pong() => "the echo of",
                    _ => "the completion of",
                };
                format!("client: waiting for {what} {} of {size} B", op.name())
            })?;
        } else {
            idle.progress();
        }
    };
    if op == Op::WritePingpong {
        for lane in lanes.iter_mut() {
            lane.pingpong_end(size, &mut wcs)?;
        }
    }
    Ok((total, start, end))
}

/// A run's totals over its client threads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Totals {
    /// Operations completed by all threads.
    pub(super) ops: u64,
    /// The phase's wall time, in seconds: from the first thread's start to the last thread's
    /// end.
    pub(super) secs: f64,
    /// Operations per second: all operations over the phase's wall time (neither the slowest
    /// thread's own time, which misses threads started earlier, nor a sum of the threads' own
    /// rates, which counts threads that share a core twice).
    pub(super) rate: f64,
}

impl Totals {
    /// The totals of the threads' phases.
    pub(super) fn of(threads: &[Span]) -> Self {
        let ops = threads.iter().map(|t| t.0).sum();
        let secs = match (threads.iter().map(|t| t.1).min(), threads.iter().map(|t| t.2).max()) {
            (Some(first), Some(last)) => last.saturating_duration_since(first).as_secs_f64(),
            _ => 0.0,
        }
        .max(1e-9);
        Self { ops, secs, rate: ops as f64 / secs }
    }
}

/// A run's phase on each thread and the threads' merged latencies.
type PerRun = (Vec<Span>, Histogram<u64>);

/// Per thread and run: the phase and its latencies.
pub(super) type Measured = (Span, Histogram<u64>);

impl<T: Transport> Driver for Vec<Lane<T>> {
    fn drive(&mut self, phase: Phase<'_>) -> Result<Span> {
        drive(self, phase)
    }

    fn finish(self) -> Result<()> {
        for lane in self {
            lane.finish()?;
        }
        Ok(())
    }
}

/// The two points of every run where the client threads and the coordinator meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Gate {
    /// Before the warm-up.
    Warmup,
    /// Before the measurement.
    Measure,
}

/// Runs every run on a thread's connections (`lanes`: an error if they could not be set up,
/// which fails the thread's runs while it still passes every barrier).
pub(super) fn client_thread<D: Driver>(
    lanes: Result<D>,
    plan: &Plan,
    runs: &[(Op, usize)],
    gate: &dyn Fn(usize, Gate),
    failed: &AtomicBool,
    progress: &Progress,
) -> Result<Vec<Measured>> {
    let mut out = Vec::with_capacity(runs.len());
    let mut error = None;
    let mut lanes = match lanes {
        Ok(l) => Some(l),
        Err(e) => {
            failed.store(true, Ordering::Release);
            error = Some(e);
            None
        }
    };
    for (i, &(op, size)) in runs.iter().enumerate() {
        let done = &progress.runs[i].done;
        let mut hist = new_histogram();
        // Warm-up, then the measurement; every thread starts each phase together. Every thread
        // (and the coordinator) passes both gates of every run, even after a failure.
        gate(i, Gate::Warmup);
        let skip = failed.load(Ordering::Acquire);
        let warm = match (&mut lanes, skip) {
            (Some(lanes), false) => lanes.drive(Phase {
                op,
                size,
                every: plan.signal_every(op),
                stop: Stop::Count(plan.warmup),
                record: false,
                hist: &mut hist,
                done,
            }),
            _ => Ok((0, Instant::now(), Instant::now())),
        };
        gate(i, Gate::Measure);
        let Some(lanes) = lanes.as_mut().filter(|_| !skip) else {
            continue;
        };
        let r = warm.and_then(|_| {
            let stop = match plan.amount {
                Amount::Iters(n) => Stop::Count(n),
                Amount::Duration(d) => Stop::Until(Instant::now() + d),
            };
            lanes.drive(Phase { op, size, every: plan.signal_every(op), stop, record: true, hist: &mut hist, done })
        });
        match r {
            Ok(span) => out.push((span, hist)),
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
    if let Some(lanes) = lanes {
        lanes.finish()?;
    }
    Ok(out)
}

/// The largest power of two (up to 4096) both addresses are multiples of.
pub(super) fn common_alignment(a: usize, b: usize) -> usize {
    1usize << (a | b | 4096).trailing_zeros()
}

/// A memcpy of `size` bytes between two page-aligned buffers (a pair of `vec!`s may sit a few
/// bytes out of step, which sends memcpy down a slow path on some CPUs): its GB/s and the
/// alignment the two buffers share.
pub(super) fn memcpy_baseline(size: usize, ops: u64) -> Result<(f64, usize)> {
    let mut src = rpma::Memory::page_aligned(size).context("the memcpy baseline's source")?;
    let mut dst = rpma::Memory::page_aligned(size).context("the memcpy baseline's destination")?;
    src.as_mut_slice().fill(SOURCE_BYTE);
    let src = src.as_slice();
    let dst = dst.as_mut_slice();
    let align = common_alignment(src.as_ptr() as usize, dst.as_ptr() as usize);
    let budget = Duration::from_millis(200);
    // Batches of copies between clock reads, so the clock does not dominate small sizes.
    let batch = (1usize << 20).div_ceil(size).clamp(1, 1024) as u64;
    let start = Instant::now();
    let mut n = 0u64;
    while n < ops.max(16) && (n < 16 || start.elapsed() < budget) {
        for _ in 0..batch {
            dst.copy_from_slice(std::hint::black_box(src));
            std::hint::black_box(&mut *dst);
        }
        n += batch;
    }
    Ok(((n as f64 * size as f64) / start.elapsed().as_secs_f64() / 1e9, align))
}

/// Runs the client side of every run on `conns` connections to `addr:port`.
pub(super) fn run_client<T: Transport>(peer: &Peer<T>, plan: &Plan, addr: &str, port: u16) -> Result<Vec<RunResult>> {
    // (op, size) runs; an operation that flushes runs once per `--persistent-flush` rule, the
    // rule set at the run's first gate (every thread has ended the previous run)
    let mut runs: Vec<(Op, usize)> = Vec::new();
    let mut rules: Vec<Option<FlushRule>> = Vec::new();
    for &op in &plan.ops {
        for &size in &plan.sizes {
            if op.flushes() && !plan.flush_rules.is_empty() {
                for &rule in &plan.flush_rules {
                    runs.push((op, size));
                    rules.push(Some(rule));
                }
            } else {
                runs.push((op, size));
                rules.push(None);
            }
        }
    }
    let footprint = Footprint::of(plan);
    let mut per_thread: Vec<Vec<Lane<T>>> = (0..plan.threads).map(|_| Vec::new()).collect();
    for i in 0..plan.conns {
        let shape = Shape {
            batch: plan.batch,
            sge: plan.sge,
            inline: if plan.inline { plan.max_size() } else { 0 },
            retry: plan.retry,
        };
        let mut lane = connect(peer, addr, port, &footprint, plan.timeout, shape)?;
        lane.clock = plan.latency;
        per_thread[i % plan.threads].push(lane);
    }
    let failed = AtomicBool::new(false);
    let progress = Progress::new(runs.len());
    let counts: RefCell<Vec<Option<OpCounts>>> = RefCell::new(Vec::with_capacity(runs.len()));
    // The coordinator's part at each gate: moves the progress to the run once every thread has
    // started it (the previous run has ended everywhere), and reads the backend's flush and
    // atomic-write counters as each measurement starts (every thread has finished the run's
    // warm-up and the previous run).
    // The counts as each run's measurement ends: at the next run's first gate (before its
    // warm-up, whose operations may take another path) and after the last run.
    let ends: RefCell<Vec<Option<OpCounts>>> = RefCell::new(Vec::with_capacity(runs.len()));
    let coordinate = |i: usize, gate: Gate| match gate {
        Gate::Warmup => {
            if i > 0 {
                ends.borrow_mut().push(op_counts::<T>());
            }
            if let Some(rule) = rules[i] {
                rule.apply::<T>();
            }
            progress.begin(i, Instant::now());
        }
        Gate::Measure => {
            progress.measure(i, Instant::now());
            counts.borrow_mut().push(op_counts::<T>());
        }
    };
    let thread = |lanes: Vec<Lane<T>>, gate: &dyn Fn(usize, Gate)| {
        if plan.async_api {
            client_thread(AsyncLanes::new(lanes), plan, &runs, gate, &failed, &progress)
        } else {
            client_thread(Ok(lanes), plan, &runs, gate, &failed, &progress)
        }
    };
    let measured: Vec<Result<Vec<Measured>>> = if plan.threads == 1 && !shown(plan) {
        // One client thread and nothing to show: the calling thread is the client, and the
        // process stays single-threaded (as C benchmarks are: glibc then skips the
        // cancellation-point bookkeeping of every system call, e.g. the doorbell of rxe).
        let lanes = per_thread.pop().unwrap_or_default();
        let r = thread(lanes, &coordinate);
        ends.borrow_mut().push(op_counts::<T>());
        vec![r]
    } else {
        let barrier = Barrier::new(plan.threads + 1);
        let meet = |_: usize, _: Gate| {
            barrier.wait();
        };
        std::thread::scope(|sc| {
            let handles: Vec<_> = per_thread
                .into_iter()
                .map(|lanes| {
                    let (thread, meet) = (&thread, &meet);
                    sc.spawn(move || thread(lanes, meet))
                })
                .collect();
            let monitor = sc.spawn(|| show_progress(plan, &runs, &progress));
            for i in 0..runs.len() {
                barrier.wait();
                coordinate(i, Gate::Warmup);
                barrier.wait();
                coordinate(i, Gate::Measure);
            }
            let results =
                handles.into_iter().map(|h| h.join().unwrap_or_else(|_| bail!("a client thread panicked"))).collect();
            ends.borrow_mut().push(op_counts::<T>());
            progress.finished.store(true, Ordering::Release);
            let _ = monitor.join();
            results
        })
    };
    let counts = counts.into_inner();
    let ends = ends.into_inner();
    // Per run: every thread's operations and time, and the threads' merged latencies.
    let mut per_run: Vec<PerRun> = runs.iter().map(|_| (Vec::with_capacity(plan.threads), new_histogram())).collect();
    for m in measured {
        for (acc, (span, h)) in per_run.iter_mut().zip(m?) {
            acc.0.push(span);
            acc.1.add(&h).context("merging latency histograms")?;
        }
    }
    let mut results = Vec::with_capacity(runs.len());
    for (i, (&(op, size), (threads, hist))) in runs.iter().zip(per_run).enumerate() {
        let Totals { ops, secs, rate } = Totals::of(&threads);
        if ops == 0 {
            bail!("{} of {size} B: no operation completed in the run (a longer --duration?)", op.name());
        }
        let path =
            op_path(op, ops, peer.capabilities(), counts.get(i).copied().flatten(), ends.get(i).copied().flatten());
        let gb_s = rate * size as f64 / 1e9;
        let baseline = if plan.baseline {
            let (m, align) = memcpy_baseline(size, ops)?;
            Some(Baseline { gb_s: m, ratio: if m > 0.0 { gb_s / m } else { 0.0 }, align })
        } else {
            None
        };
        results.push(RunResult {
            op: op.name(),
            size,
            qd: plan.qd,
            conns: plan.conns,
            threads: plan.threads,
            batch: plan.batch,
            sge: plan.sge,
            inline: plan.inline,
            api: if plan.async_api { "async" } else { "sync" },
            ops,
            elapsed_s: secs,
            latency_kind: match (plan.latency, op.is_half_round_trip()) {
                (false, _) => "none",
                (true, true) => "half_round_trip",
                (true, false) => "completion",
            },
            latency_ns: plan.latency.then(|| Latency::of(&hist)),
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

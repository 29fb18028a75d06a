//! `rpma log bench`: a writer against replicas of its own or served elsewhere, measured mode by
//! mode (and, with `--baseline`, alternating with the hand-written baseline).

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use nix::time::{clock_gettime, ClockId};
use rpma::any::WithTransport;
use rpma::{Memory, Peer, Transport, Usage};
use rpma_log::{
    FlushMode, Log, LogError, LogOptions, Quorum, Replica, ReplicaAddr, ReplicaHandle, ReplicaOptions, Wait,
};

use rpma_bench::Latency;
use rpma_scenarios::backend::{dispatch, dispatch_between_processes};
use rpma_scenarios::common::{client_peer, server_peer, FileSource, Mem, MemFile};

use super::options::*;
use super::report::*;
use super::{baseline, failover, handshake};

fn check_bench(a: &LogBenchArgs) -> Result<()> {
    if a.modes.is_empty() {
        bail!("--mode names nothing to measure");
    }
    if a.iters == 0 {
        bail!("--iters must be at least 1");
    }
    if a.group == 0 {
        bail!("--group must be at least 1");
    }
    if a.size == 0 {
        bail!("--size must be at least 1 byte");
    }
    if a.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    if a.modes.contains(&Mode::Failover) && a.takeovers == 0 {
        bail!("--takeovers must be at least 1");
    }
    if a.modes.contains(&Mode::Failover) && a.baseline {
        bail!("--mode failover has no hand-written baseline: its unit is the run's own qd-1 sync");
    }
    if (a.baseline || a.pmem.is_some()) && !matches!(a.replicas, Replicas::SelfHosted(_)) {
        bail!("--baseline and --pmem need replicas of this process (--replicas N)");
    }
    let n = match &a.replicas {
        Replicas::SelfHosted(n) => {
            let min = rpma_log::HEADER_SIZE as u64 + rpma_log::MIN_CAPACITY;
            if (a.region as u64) < min {
                bail!("--region {}: at least {min} bytes", a.region);
            }
            let room = (a.region - rpma_log::HEADER_SIZE) as u64;
            let need = rpma_log::record_size(a.size).saturating_mul(2 * a.group as u64);
            if need > room {
                bail!(
                    "--region {} holds a ring of {room} bytes: two groups of {} entries of {} bytes need {need}",
                    a.region,
                    a.group,
                    a.size
                );
            }
            if a.modes.contains(&Mode::Failover) {
                let need = failover::ring_bytes(a.fill, a.size);
                if need > room {
                    bail!(
                        "--fill {}: with the qd-1 syncs timed beside it, the failover's history needs {need} ring bytes, \
                         --region {} holds {room}",
                        a.fill,
                        a.region
                    );
                }
            }
            if usize::from(a.port) + n - 1 > usize::from(u16::MAX) {
                bail!("--port {}: {n} replicas need ports up to {}", a.port, usize::from(a.port) + n - 1);
            }
            *n
        }
        Replicas::Remote(list) => {
            for (i, r) in list.iter().enumerate() {
                if list[..i].contains(r) {
                    bail!("--replicas names {r} twice");
                }
            }
            list.len()
        }
    };
    if let Quorum::K(k) = a.quorum {
        if k > n {
            bail!("--quorum {k}: the set has {n} replica(s)");
        }
    }
    Ok(())
}

/// `rpma log bench`: measures and returns the report.
///
/// # Errors
/// Bad arguments (usage errors), replicas that cannot be served or reached, or a log operation
/// that fails during the measurement.
pub(crate) fn bench(a: &LogBenchArgs) -> Result<LogBenchReport> {
    check_bench(a).map_err(|e| rpma_scenarios::usage::usage(&e))?;
    match a.replicas {
        Replicas::SelfHosted(_) => dispatch(a.backend, Bench(a)),
        Replicas::Remote(_) => dispatch_between_processes(a.backend, Bench(a)),
    }
}

struct Bench<'a>(&'a LogBenchArgs);

impl WithTransport for Bench<'_> {
    type Output = Result<LogBenchReport>;
    fn run<T: Transport>(self, t: T) -> Result<LogBenchReport> {
        let a = self.0;
        // The locks on the --pmem ranges, held until the replicas have stopped.
        let mut held: Vec<MemFile> = Vec::new();
        let mut handles: Vec<ReplicaHandle> = Vec::new();
        let set: Vec<ReplicaAddr> = match &a.replicas {
            Replicas::SelfHosted(n) => {
                let mut set = Vec::new();
                for i in 0..*n {
                    let port = (usize::from(a.port) + i).to_string();
                    let peer = server_peer(&t, &a.addr)?;
                    let (memory, file) = self_hosted_memory(&peer, a, i)?;
                    held.extend(file);
                    let r = Replica::format(&peer, memory, a.log_id)?
                        .with_options(ReplicaOptions::default().with_poll_interval(Duration::from_millis(5)))
                        .listen(&a.addr, &port)
                        .with_context(|| format!("replica {i} listening on {}:{port}", a.addr))?;
                    handles.push(r.spawn());
                    set.push(ReplicaAddr::new(&a.addr, &port));
                }
                set
            }
            Replicas::Remote(list) => list.clone(),
        };
        let r = measure(&t, a, &set);
        for h in handles {
            // The replicas' own failures matter only if the measurement succeeded.
            let stopped = h.stop();
            if r.is_ok() {
                stopped.context("a replica of this process")?;
            }
        }
        r
    }
}

/// Self-hosted region `i` (the replicas' `0..n`, the baseline's `n..2n`): DRAM, or `--pmem` at
/// `i` times `--region` rounded up to 2 MiB (a devdax device maps at multiples of its alignment,
/// 2 MiB by default), with the file holding the lock on that range (to be kept while the memory
/// is used).
/// What self-hosted regions on `--pmem` are aligned to.
const PMEM_STRIDE: usize = 2 << 20;

fn self_hosted_memory<T: Transport>(peer: &Peer<T>, a: &LogBenchArgs, i: usize) -> Result<(Memory, Option<MemFile>)> {
    let Some(path) = &a.pmem else {
        let m =
            Memory::page_aligned(a.region).with_context(|| format!("allocating region {i}'s {} bytes", a.region))?;
        return Ok((m, None));
    };
    let src = FileSource {
        path,
        create: false,
        map: Some(crate::file_map::map_file),
        offset: (i * a.region.next_multiple_of(PMEM_STRIDE)) as u64,
        pmem: true,
    };
    Mem::file(peer, src, a.region, Usage::READ_SRC | Usage::WRITE_DST, 0)?.into_memory()
}

/// The error of opening the log; a replica that refused persistent flushes (no direct write
/// to pmem) gets the command's fix.
#[cold]
fn open_error(e: LogError, flush: Flush) -> anyhow::Error {
    let refused = flush == Flush::Persistent
        && matches!(&e, LogError::NoQuorum { detail, .. } if detail.contains("persistent flushes are impossible"));
    if refused {
        anyhow::anyhow!(
            "opening the log: {e}; with rpma log bench: --flush visibility, or a replica whose writes reach \
             persistence (rpma log serve --pmem)"
        )
    } else {
        anyhow::Error::new(e).context("opening the log")
    }
}

/// The CPU time the calling thread has taken (clock_gettime(2), `CLOCK_THREAD_CPUTIME_ID`: the
/// scheduler's own count, in nanoseconds; getrusage(2)'s `RUSAGE_THREAD` splits it into user
/// and system time by ticks and never lowers what it reported, so that a short measurement
/// may read no time at all).
///
/// # Errors
/// The errno of clock_gettime(2).
fn thread_cpu() -> Result<Duration> {
    let t = clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).context("clock_gettime(CLOCK_THREAD_CPUTIME_ID)")?;
    Ok(Duration::from(t))
}

fn measure<T: Transport>(t: &T, a: &LogBenchArgs, set: &[ReplicaAddr]) -> Result<LogBenchReport> {
    let peer = client_peer(t, &set[0].addr)?;
    let flush = match a.flush {
        Flush::Persistent => FlushMode::Persistent,
        Flush::Visibility => FlushMode::Visibility,
    };
    let wait = match a.wait {
        WaitArg::Spin => Wait::Spin,
        WaitArg::Sleep => Wait::Sleep,
    };
    let opts =
        LogOptions::new(a.log_id).quorum(a.quorum).flush(flush).timeout(Duration::from_secs_f64(a.timeout)).wait(wait);
    let (mut log, _report) = Log::open(&peer, set, opts.clone()).map_err(|e| open_error(e, a.flush))?;
    let quorum = match a.quorum {
        Quorum::All => set.len(),
        Quorum::K(k) => k,
        _ => set.len() / 2 + 1,
    };
    let payload: Vec<u8> = (0..a.size).map(|k| (k as u8).wrapping_mul(31).wrapping_add(7)).collect();
    let flush_name = match a.flush {
        Flush::Persistent => "persistent",
        Flush::Visibility => "visibility",
    };
    // The locks on the baseline's --pmem ranges, held until the baseline is dropped.
    let mut held: Vec<MemFile> = Vec::new();
    let mut base = if a.baseline {
        let mut memories = Vec::new();
        for i in set.len()..2 * set.len() {
            let (memory, file) = self_hosted_memory(&peer, a, i)?;
            memories.push(memory);
            held.extend(file);
        }
        let ft = match a.flush {
            Flush::Persistent => rpma::FlushType::Persistent,
            Flush::Visibility => rpma::FlushType::Visibility,
        };
        let port = a.port.checked_add(set.len() as u16).context("--port: no room for the baseline's ports")?;
        let setup = (a.size, quorum, ft, Duration::from_secs_f64(a.timeout));
        Some(baseline::Baseline::connect(t, &peer, &a.addr, port, memories, setup)?)
    } else {
        None
    };
    let result = |mode: Mode,
                  (group, syncs, truncations): (usize, u64, u64),
                  (secs, cpu): (f64, Duration),
                  hist: &Histogram<u64>,
                  wait: WaitArg| {
        let rate = a.iters as f64 / secs;
        LogResult {
            mode: mode.name(),
            replicas: set.len(),
            quorum,
            flush: flush_name,
            size: a.size,
            group,
            appends: a.iters,
            syncs,
            elapsed_s: secs,
            synced_appends_per_s: rate,
            mb_s: rate * a.size as f64 / 1e6,
            truncations,
            latency_ns: Latency::of(hist),
            wait: wait.name(),
            cpu_ns_per_append: cpu.as_nanos() as f64 / a.iters as f64,
        }
    };
    let mut results = Vec::new();
    let mut baseline_results = Vec::new();
    let mut failovers = Vec::new();
    for _ in 0..a.rounds {
        for &mode in &a.modes {
            if mode == Mode::Failover {
                // Replicas of this process: bare handshakes with servers of this process too,
                // on the ports after the baseline's.
                let mut floor = match a.replicas {
                    Replicas::SelfHosted(n) => {
                        let port = a.port.checked_add(2 * n as u16).context("--port: no room after the replicas' and the baseline's ports for the bare handshakes' servers")?;
                        let timeout = Duration::from_secs_f64(a.timeout);
                        Some(handshake::Floor::start(t, &peer, (&a.addr, port), n, timeout)?)
                    }
                    Replicas::Remote(_) => None,
                };
                let (next, mut r) = failover::measure(&peer, set, &opts, log, a, &payload, floor.as_mut())?;
                log = next;
                if let Some(f) = floor {
                    r.with_handshake(f.finish()?);
                }
                failovers.push(r);
                continue;
            }
            let group = if mode == Mode::Qd1 { 1 } else { a.group };
            let mut run = Run { log: &mut log, payload: &payload, group, truncations: 0 };
            run.appends(a.warmup)?;
            run.truncations = 0;
            let mut hist = Histogram::<u64>::new_with_bounds(1, HIST_MAX_NS, 3).context("a histogram")?;
            let cpu0 = thread_cpu()?;
            let t0 = Instant::now();
            let mut done = 0u64;
            let mut syncs = 0u64;
            while done < a.iters {
                let n = (a.iters - done).min(group as u64);
                let s = Instant::now();
                run.appends(n)?;
                hist.saturating_record(u64::try_from(s.elapsed().as_nanos()).unwrap_or(u64::MAX).max(1));
                done += n;
                syncs += 1;
            }
            let secs = t0.elapsed().as_secs_f64();
            let cpu = thread_cpu()?.saturating_sub(cpu0);
            results.push(result(mode, (group, syncs, run.truncations), (secs, cpu), &hist, a.wait));
            if let Some(b) = base.as_mut() {
                b.run(mode, a.warmup, group, &mut |_| {})?;
                let mut hist = Histogram::<u64>::new_with_bounds(1, HIST_MAX_NS, 3).context("a histogram")?;
                let cpu0 = thread_cpu()?;
                let t0 = Instant::now();
                b.run(mode, a.iters, group, &mut |ns| hist.saturating_record(ns))?;
                let secs = t0.elapsed().as_secs_f64();
                let cpu = thread_cpu()?.saturating_sub(cpu0);
                let syncs = if mode == Mode::Qd1 { a.iters } else { 0 };
                baseline_results.push(result(mode, (group, syncs, 0), (secs, cpu), &hist, WaitArg::Spin));
            }
        }
    }
    let ratios = if a.baseline { ratios(&a.modes, &results, &baseline_results) } else { Vec::new() };
    Ok(LogBenchReport {
        schema: SCHEMA_VERSION,
        backend: a.backend.name(),
        self_hosted: matches!(a.replicas, Replicas::SelfHosted(_)),
        replicas: set.iter().map(ToString::to_string).collect(),
        capacity: log.capacity(),
        results,
        baseline: baseline_results,
        ratios,
        failovers,
    })
}

struct Run<'a, T: Transport> {
    log: &'a mut Log<T>,
    payload: &'a [u8],
    group: usize,
    truncations: u64,
}

impl<T: Transport> Run<'_, T> {
    /// `n` appends with a sync after every `group` of them and after the last; a full ring is
    /// truncated to the durable position (everything appended is synced first).
    fn appends(&mut self, n: u64) -> Result<()> {
        let mut since = 0;
        for _ in 0..n {
            let lsn = match self.log.append(self.payload) {
                Ok(l) => l,
                Err(LogError::Full { .. }) => {
                    self.log.sync_all().context("a sync before truncating")?;
                    self.log.truncate_prefix(self.log.durable_lsn()).context("truncating the log's prefix")?;
                    self.truncations += 1;
                    self.log.append(self.payload).context("an append after truncating")?
                }
                Err(e) => return Err(anyhow::Error::new(e).context("an append")),
            };
            since += 1;
            if since == self.group {
                self.log.sync(lsn).context("a sync")?;
                since = 0;
            }
        }
        if since > 0 {
            self.log.sync_all().context("a sync")?;
        }
        Ok(())
    }
}

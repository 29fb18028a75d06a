//! `rpma log`: the replicated persistent log of `rpma-log` (docs/log.md) from the command line.
//!
//! - `rpma log serve` runs one replica: it owns a region (`--pmem PATH`, `--file PATH` or DRAM of
//!   `--size` bytes, set up by the scenarios' [`Mem`]), formats
//!   it as an empty log (or opens the log it already holds) and answers writers' connection
//!   requests on `--addr`:`--port` until it is killed (or `--duration` ends).
//! - `rpma log bench` runs a writer against `--replicas ADDR:PORT,...` (replicas served by `rpma
//!   log serve`), or against `--replicas N` (1 to 3) replicas it serves itself in threads of
//!   this process, and measures append + sync at queue depth 1 (`qd1`: latency percentiles) and
//!   pipelined appends with one sync per `--group` appends (`group-commit`: group commit), as a
//!   table or JSON (`--json`; each result has `synced_appends_per_s`). With `--baseline` it
//!   measures, in the same process and against regions of its own, the same work written by
//!   hand with the plain rpma API (`log_cmd/baseline.rs`), each mode alternating with the log's for
//!   `--rounds` rounds, and reports the ratios of the medians (issue 36, "Speed").

mod baseline;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use rpma::any::WithTransport;
use rpma::{Memory, Peer, Transport, Usage};
use rpma_log::{FlushMode, Log, LogError, LogOptions, Quorum, Replica, ReplicaAddr, ReplicaHandle, ReplicaOptions};
use serde::Serialize;

use crate::args;
use crate::backend::{dispatch, dispatch_between_processes, BackendKind};
use crate::bench::{parse_size, Latency};
use crate::outln;
use crate::scenarios::common::{client_peer, server_peer, FileSource, Mem, MemFile};

/// The log id `rpma log serve` and `rpma log bench` use unless `--log-id` says otherwise.
pub const DEFAULT_LOG_ID: u64 = 0x5250_4d41_4c4f_4701;
/// The default port of `rpma log serve` (and the first of `rpma log bench`'s own replicas).
pub const DEFAULT_PORT: u16 = 7480;
/// The default region size of a replica (64 MiB).
pub const DEFAULT_REGION: usize = 64 << 20;
/// The most replicas `rpma log bench` serves itself.
pub const MAX_SELF_HOSTED: usize = 3;
/// The longest latency recorded exactly (60 s; longer ones are recorded as 60 s).
const HIST_MAX_NS: u64 = 60_000_000_000;
/// The version of `rpma log bench --json`'s schema (docs/cli.md).
pub const SCHEMA_VERSION: u32 = 1;

/// Arguments of `rpma log`.
#[derive(Debug, clap::Args)]
pub struct LogArgs {
    /// What to run (`None`: a usage error naming the commands).
    #[command(subcommand)]
    pub cmd: Option<LogCmd>,
}

/// `rpma log`'s subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum LogCmd {
    /// Run a replica of a log: own a region (--pmem, --file, or DRAM), format it as an empty
    /// log or open the log it holds, and serve writers on --addr:--port until killed.
    Serve(ServeArgs),
    /// Run a writer against replicas (--replicas ADDR:PORT,... served by `rpma log serve`, or
    /// --replicas N served by this process in threads) and measure append + sync at queue
    /// depth 1 and pipelined appends with group commit.
    Bench(LogBenchArgs),
}

/// A log id: decimal, or hexadecimal with `0x`.
fn log_id(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let v = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).map_err(|e| format!("`{s}`: {e}")),
        None => args::u64_arg(t),
    }?;
    if v == 0 {
        return Err(format!("`{s}`: a log id is not 0"));
    }
    Ok(v)
}

/// Arguments of `rpma log serve`.
#[derive(Clone, Debug, clap::Args)]
pub struct ServeArgs {
    /// The transport: RDMA (verbs), or the mock, whose processes meet through its rendezvous
    /// directory on this host (`RPMA_MOCK_RENDEZVOUS`, else a private directory of this user).
    #[arg(long, value_enum, default_value_t = BackendKind::Mock)]
    pub backend: BackendKind,
    /// The address to listen on (of an RDMA interface for verbs).
    #[arg(long)]
    pub addr: String,
    /// The port to listen on (1 to 65535).
    #[arg(long, default_value_t = DEFAULT_PORT, value_parser = args::port, allow_negative_numbers = true)]
    pub port: u16,
    /// Keep the log in this persistent memory: a devdax device or a file of a DAX file system
    /// (mapped with MAP_SYNC; anything else is refused). The replica tells writers that their
    /// writes reach persistence directly.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["file", "file_create"])]
    pub pmem: Option<PathBuf>,
    /// Keep the log in this file (a shared mapping: what writers write lands in the file). It
    /// must exist and be --size bytes long, unless --file-create. While the replica runs, no
    /// other program may truncate or write the file.
    #[arg(long, value_name = "PATH")]
    pub file: Option<PathBuf>,
    /// Create the --file if it is missing and extend it with zeros if it is too short.
    #[arg(long, requires = "file")]
    pub file_create: bool,
    /// Where the region starts in the --file or --pmem (bytes; a multiple of the page size, or
    /// of the devdax device's alignment).
    #[arg(long, value_name = "BYTES", default_value_t = 0, value_parser = args::u64_arg, allow_negative_numbers = true)]
    pub file_offset: u64,
    /// The region's bytes (a 256-byte header, the rest is the ring; suffixes K, M, G), in DRAM
    /// without --pmem or --file.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_REGION, value_parser = parse_size, allow_negative_numbers = true)]
    pub size: usize,
    /// The log's id (decimal or 0x...): writers of another log are refused.
    #[arg(long, default_value_t = DEFAULT_LOG_ID, value_parser = log_id)]
    pub log_id: u64,
    /// Format the region as an empty log even if it holds one (or holds anything else).
    #[arg(long)]
    pub format: bool,
    /// Tell writers that their writes reach persistence directly (implied by --pmem), so that
    /// they may flush to persistence: without it only `--flush visibility` writers are served.
    #[arg(long)]
    pub direct_pmem_write: bool,
    /// Serve for this many seconds, then stop in order (default: until killed).
    #[arg(long, value_parser = args::seconds, allow_negative_numbers = true)]
    pub duration: Option<f64>,
}

/// `--replicas`: a count of replicas this process serves, or the addresses of replicas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Replicas {
    /// Served by `rpma log bench` itself, in threads (1 to [`MAX_SELF_HOSTED`]).
    SelfHosted(usize),
    /// Served elsewhere (`rpma log serve`).
    Remote(Vec<ReplicaAddr>),
}

/// Parses `--replicas`: `N` (1 to 3) or `ADDR:PORT,ADDR:PORT,...`.
///
/// # Errors
/// A count outside 1..=3, an address without a port or with a bad one, an empty list.
pub fn parse_replicas(s: &str) -> Result<Replicas, String> {
    let t = s.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        let n: usize = t.parse().map_err(|e| format!("`{s}`: {e}"))?;
        if n == 0 || n > MAX_SELF_HOSTED {
            return Err(format!("`{s}`: this process serves 1 to {MAX_SELF_HOSTED} replicas itself"));
        }
        return Ok(Replicas::SelfHosted(n));
    }
    let mut list = Vec::new();
    for item in t.split(',') {
        let item = item.trim();
        let Some((addr, port)) = item.rsplit_once(':') else {
            return Err(format!("`{item}`: expected ADDR:PORT (or a count of replicas, 1 to {MAX_SELF_HOSTED})"));
        };
        if addr.is_empty() {
            return Err(format!("`{item}`: an empty address"));
        }
        let port = args::port(port).map_err(|e| format!("`{item}`: {e}"))?;
        list.push(ReplicaAddr::new(addr, &port.to_string()));
    }
    Ok(Replicas::Remote(list))
}

/// A quorum: `all`, `majority` or a count.
fn parse_quorum(s: &str) -> Result<Quorum, String> {
    match s.trim() {
        "all" => Ok(Quorum::All),
        "majority" => Ok(Quorum::Majority),
        n => match args::usize_arg(n) {
            Ok(k) if k >= 1 => Ok(Quorum::K(k)),
            _ => Err(format!("`{s}`: expected all, majority or a count of replicas (1 or more)")),
        },
    }
}

/// What durable means for `rpma log bench`'s writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Flush {
    /// Persistent flushes (the replicas must announce direct write to persistence).
    Persistent,
    /// Flushes to visibility (DRAM replicas).
    Visibility,
}

/// A measurement of `rpma log bench`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Mode {
    /// Append + sync of one entry at a time (queue depth 1): latency and rate.
    Qd1,
    /// Appends pipelined, one sync per --group appends (group commit): rate.
    GroupCommit,
}

impl Mode {
    /// The name in reports.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Qd1 => "qd1",
            Self::GroupCommit => "group-commit",
        }
    }
}

/// Arguments of `rpma log bench`.
#[derive(Clone, Debug, clap::Args)]
pub struct LogBenchArgs {
    /// The transport. On the mock, replicas given by address are reached across processes
    /// (the rendezvous directory, as `rpma log serve --backend mock`).
    #[arg(long, value_enum, default_value_t = BackendKind::Mock)]
    pub backend: BackendKind,
    /// The replicas: `N` (1 to 3) served by this process in threads on --addr, ports --port,
    /// --port + 1, ...; or `ADDR:PORT,...` served by `rpma log serve`.
    #[arg(long, default_value = "3", value_parser = parse_replicas)]
    pub replicas: Replicas,
    /// The entries' payload bytes (suffixes K, M, G).
    #[arg(long, default_value_t = 64, value_parser = parse_size, allow_negative_numbers = true)]
    pub size: usize,
    /// What to measure (comma-separated).
    #[arg(long = "mode", value_enum, value_delimiter = ',', default_value = "qd1,group-commit")]
    pub modes: Vec<Mode>,
    /// Appends measured per mode (after the warm-up).
    #[arg(long, default_value_t = 200_000, value_parser = args::u64_arg, allow_negative_numbers = true)]
    pub iters: u64,
    /// Unmeasured appends before each mode.
    #[arg(long, default_value_t = 1000, value_parser = args::u64_arg, allow_negative_numbers = true)]
    pub warmup: u64,
    /// group-commit: appends per sync.
    #[arg(long, default_value_t = 128, value_parser = args::usize_arg, allow_negative_numbers = true)]
    pub group: usize,
    /// The quorum of each sync: all, majority or a count.
    #[arg(long, default_value = "majority", value_parser = parse_quorum)]
    pub quorum: Quorum,
    /// What durable means.
    #[arg(long, value_enum, default_value_t = Flush::Persistent)]
    pub flush: Flush,
    /// The log's id (decimal or 0x...).
    #[arg(long, default_value_t = DEFAULT_LOG_ID, value_parser = log_id)]
    pub log_id: u64,
    /// Self-hosted replicas: the address they listen on (verbs: of an RDMA interface).
    #[arg(long, default_value = "127.0.0.1")]
    pub addr: String,
    /// Self-hosted replicas: the first one's port.
    #[arg(long, default_value_t = DEFAULT_PORT, value_parser = args::port, allow_negative_numbers = true)]
    pub port: u16,
    /// Self-hosted replicas: each one's region (DRAM; suffixes K, M, G).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_REGION, value_parser = parse_size, allow_negative_numbers = true)]
    pub region: usize,
    /// Seconds the writer waits for a replica (connection, completions) before it fails.
    #[arg(long, default_value_t = 10.0, value_parser = args::seconds, allow_negative_numbers = true)]
    pub timeout: f64,
    /// Self-hosted replicas (and the baseline's regions): on this persistent memory (a devdax
    /// device or a file of a DAX file system), region i at i * --region, instead of DRAM.
    #[arg(long, value_name = "PATH")]
    pub pmem: Option<PathBuf>,
    /// Also measure the hand-written baseline (the plain rpma API, regions of this process on
    /// ports after the replicas'), alternating with the log mode by mode, and report the ratios.
    #[arg(long)]
    pub baseline: bool,
    /// Rounds of the measurements (each mode once per round, the log's then the baseline's);
    /// the ratios are of the medians of the rounds.
    #[arg(long, default_value_t = 1, value_parser = args::u64_arg, allow_negative_numbers = true)]
    pub rounds: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The result of one mode.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LogResult {
    /// `"qd1"` or `"group-commit"`.
    pub mode: &'static str,
    /// Replicas in the set.
    pub replicas: usize,
    /// Replicas each sync waits for.
    pub quorum: usize,
    /// `"persistent"` or `"visibility"`.
    pub flush: &'static str,
    /// Payload bytes per entry.
    pub size: usize,
    /// Appends per sync (1 for `qd1`).
    pub group: usize,
    /// Appends measured.
    pub appends: u64,
    /// Syncs measured.
    pub syncs: u64,
    /// Measured time, seconds.
    pub elapsed_s: f64,
    /// Appends made durable on a quorum per second.
    pub synced_appends_per_s: f64,
    /// Payload bandwidth, MB/s (10^6 bytes per second).
    pub mb_s: f64,
    /// Truncations of the log's prefix during the measurement (the ring was full).
    pub truncations: u64,
    /// `qd1`: each append + sync, nanoseconds; `group-commit`: each group's appends and sync.
    pub latency_ns: Latency,
}

/// `rpma log bench`'s report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LogBenchReport {
    /// [`SCHEMA_VERSION`].
    pub schema: u32,
    /// `"mock"` or `"verbs"`.
    pub backend: &'static str,
    /// Whether this process served the replicas.
    pub self_hosted: bool,
    /// The replicas' addresses.
    pub replicas: Vec<String>,
    /// The ring's bytes.
    pub capacity: u64,
    /// One per mode and round, in the order run.
    pub results: Vec<LogResult>,
    /// `--baseline`: the hand-written baseline's results, one per mode and round.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub baseline: Vec<LogResult>,
    /// `--baseline`: per mode, the medians of the rounds and their ratios.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ratios: Vec<Ratio>,
}

/// The log against its hand-written baseline, one mode, medians of the rounds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Ratio {
    /// `"qd1"` or `"group-commit"`.
    pub mode: &'static str,
    /// Rounds.
    pub rounds: usize,
    /// The log's median p50 latency, nanoseconds (`qd1`: of an append + sync).
    pub log_p50_ns: u64,
    /// The baseline's median p50 latency, nanoseconds.
    pub baseline_p50_ns: u64,
    /// The log's median rate (synced appends per second).
    pub log_per_s: f64,
    /// The baseline's median rate (`qd1`: appends + commits per second; `group-commit`: writes
    /// to every replica per second).
    pub baseline_per_s: f64,
    /// `log_p50_ns / baseline_p50_ns`: what an append + sync costs over the hand-written one.
    pub latency_ratio: f64,
    /// `log_per_s / baseline_per_s`.
    pub rate_ratio: f64,
}

impl LogBenchReport {
    /// Writes the report as a table, or as JSON with `json`.
    ///
    /// # Errors
    /// If `out` fails.
    pub fn write(&self, json: bool, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        if json {
            serde_json::to_writer_pretty(&mut *out, self)?;
            return writeln!(out);
        }
        let hosted = if self.self_hosted { "served by this process" } else { "remote" };
        writeln!(
            out,
            "rpma log bench: {} backend, {} replica(s) ({hosted}: {}), ring of {} bytes",
            self.backend,
            self.replicas.len(),
            self.replicas.join(", "),
            self.capacity
        )?;
        writeln!(
            out,
            "{:<13} {:>8} {:>6} {:>6} {:>10} {:>11} {:>16} {:>9} {:>9} {:>9} {:>9}",
            "mode",
            "replicas",
            "quorum",
            "size",
            "appends",
            "group",
            "synced_appends/s",
            "p50_ns",
            "p99_ns",
            "mean_ns",
            "max_ns"
        )?;
        for r in self.results.iter().chain(&self.baseline) {
            writeln!(
                out,
                "{:<13} {:>8} {:>6} {:>6} {:>10} {:>11} {:>16.0} {:>9} {:>9} {:>9.0} {:>9}",
                if self.baseline.iter().any(|b| std::ptr::eq(b, r)) {
                    format!("{}*", r.mode)
                } else {
                    r.mode.to_owned()
                },
                r.replicas,
                r.quorum,
                r.size,
                r.appends,
                r.group,
                r.synced_appends_per_s,
                r.latency_ns.p50,
                r.latency_ns.p99,
                r.latency_ns.mean,
                r.latency_ns.max
            )?;
        }
        if !self.baseline.is_empty() {
            writeln!(out, "(* the hand-written baseline)")?;
        }
        for q in &self.ratios {
            writeln!(
                out,
                "{}: log / baseline over {} rounds (medians): p50 {} / {} ns = {:.3}; rate {:.0} / {:.0} per s = {:.3}",
                q.mode,
                q.rounds,
                q.log_p50_ns,
                q.baseline_p50_ns,
                q.latency_ratio,
                q.log_per_s,
                q.baseline_per_s,
                q.rate_ratio
            )?;
        }
        Ok(())
    }
}

/// Runs `rpma log`.
///
/// # Errors
/// As [`serve`] and [`bench()`]; bad arguments are usage errors.
pub fn run(a: LogArgs) -> Result<()> {
    match a.cmd {
        None => Err(crate::out::usage(&anyhow::anyhow!("`rpma log` needs a command: serve or bench"))),
        Some(LogCmd::Serve(s)) => serve(&s),
        Some(LogCmd::Bench(b)) => {
            let report = bench(&b)?;
            let mut out = std::io::stdout().lock();
            report.write(b.json, &mut out).context("writing the report")
        }
    }
}

// ---------------------------------------------------------------- serve

struct Serve<'a>(&'a ServeArgs);

impl WithTransport for Serve<'_> {
    type Output = Result<()>;
    fn run<T: Transport>(self, t: T) -> Result<()> {
        let a = self.0;
        let peer = server_peer(&t, &a.addr)?;
        let pmem = a.pmem.is_some();
        let (memory, file) = region(&peer, a)?;
        let replica = if a.format || header_is_blank(&memory)? {
            Replica::format(&peer, memory, a.log_id)?
        } else {
            Replica::open(&peer, memory, a.log_id).context("the region holds no valid log (--format formats it)")?
        };
        let direct = pmem || a.direct_pmem_write;
        let opts = ReplicaOptions::default().with_direct_write_to_pmem(direct);
        let mut replica = replica.with_options(opts).listen(&a.addr, &a.port.to_string())?;
        let st = replica.state()?;
        let place = file.as_ref().map_or_else(|| "DRAM".to_owned(), |f| f.path().display().to_string());
        outln!(
            "rpma log serve: log {:#x} on {}:{}, region of {} bytes in {place} ({}), ring {} bytes, entries at \
             {}..{} (epoch {}), direct write to persistence: {}",
            a.log_id,
            a.addr,
            a.port,
            a.size,
            if a.format { "formatted" } else { "opened or formatted" },
            st.capacity,
            st.head,
            st.commit,
            st.commit_epoch,
            if direct { "yes" } else { "no" }
        )?;
        crate::out::flush()?;
        let stop = Arc::new(AtomicBool::new(false));
        if let Some(secs) = a.duration {
            let flag = Arc::clone(&stop);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs_f64(secs));
                flag.store(true, Ordering::Release);
            });
        }
        replica.serve(&stop)?;
        let takeovers = replica.takeovers();
        let st = replica.state()?;
        replica.into_memory().context("giving the region back")?;
        drop(file);
        outln!(
            "rpma log serve: stopped after {takeovers} writer takeover(s); committed position {} (epoch {})",
            st.commit,
            st.commit_epoch
        )?;
        Ok(())
    }
}

/// The replica's memory: the --pmem or --file mapping (through the scenarios' [`Mem`]), or DRAM.
fn region<T: Transport>(peer: &Peer<T>, a: &ServeArgs) -> Result<(Memory, Option<MemFile>)> {
    let path = a.pmem.as_ref().or(a.file.as_ref());
    let Some(path) = path else {
        return Ok((Memory::page_aligned(a.size).with_context(|| format!("allocating {} bytes", a.size))?, None));
    };
    let src = FileSource {
        path,
        create: a.file_create,
        map: Some(crate::file_map::map_file),
        offset: a.file_offset,
        pmem: a.pmem.is_some(),
    };
    Mem::file(peer, src, a.size, Usage::READ_SRC | Usage::WRITE_DST, 0)?.into_memory()
}

/// Whether the region's header area is all zeros (a new file or device range: formatted).
fn header_is_blank(m: &Memory) -> Result<bool> {
    let mut h = vec![0u8; rpma_log::HEADER_SIZE.min(m.len())];
    m.volatile().read(0, &mut h)?;
    Ok(h.iter().all(|&b| b == 0))
}

/// `rpma log serve`.
///
/// # Errors
/// Bad arguments (usage errors), a region that cannot be had or holds something else than an
/// empty region or this log, or a failing endpoint.
pub fn serve(a: &ServeArgs) -> Result<()> {
    check_serve(a).map_err(|e| crate::out::usage(&e))?;
    dispatch_between_processes(a.backend, Serve(a))
}

fn check_serve(a: &ServeArgs) -> Result<()> {
    if a.file_offset != 0 && a.file.is_none() && a.pmem.is_none() {
        bail!("--file-offset needs --file or --pmem");
    }
    let min = rpma_log::HEADER_SIZE as u64 + rpma_log::MIN_CAPACITY;
    if (a.size as u64) < min {
        bail!(
            "--size {}: a replica's region holds a {}-byte header and a ring of at least {} bytes",
            a.size,
            rpma_log::HEADER_SIZE,
            rpma_log::MIN_CAPACITY
        );
    }
    if let Some(d) = a.duration {
        if d <= 0.0 {
            bail!("--duration must be positive");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- bench

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
pub fn bench(a: &LogBenchArgs) -> Result<LogBenchReport> {
    check_bench(a).map_err(|e| crate::out::usage(&e))?;
    match a.replicas {
        Replicas::SelfHosted(_) => dispatch(a.backend, Bench(a)),
        Replicas::Remote(_) => dispatch_between_processes(a.backend, Bench(a)),
    }
}

/// [`bench()`] on `transport` (whatever `--backend` says): for tests.
///
/// # Errors
/// As [`bench()`].
pub fn bench_on<T: Transport>(transport: T, a: &LogBenchArgs) -> Result<LogBenchReport> {
    check_bench(a).map_err(|e| crate::out::usage(&e))?;
    Bench(a).run(transport)
}

struct Bench<'a>(&'a LogBenchArgs);

impl WithTransport for Bench<'_> {
    type Output = Result<LogBenchReport>;
    fn run<T: Transport>(self, t: T) -> Result<LogBenchReport> {
        let a = self.0;
        let mut handles: Vec<ReplicaHandle> = Vec::new();
        let set: Vec<ReplicaAddr> = match &a.replicas {
            Replicas::SelfHosted(n) => {
                let mut set = Vec::new();
                for i in 0..*n {
                    let port = (usize::from(a.port) + i).to_string();
                    let peer = server_peer(&t, &a.addr)?;
                    let memory = self_hosted_memory(&peer, a, i)?;
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
/// `i * --region`.
fn self_hosted_memory<T: Transport>(peer: &Peer<T>, a: &LogBenchArgs, i: usize) -> Result<Memory> {
    let Some(path) = &a.pmem else {
        return Memory::page_aligned(a.region).with_context(|| format!("allocating region {i}'s {} bytes", a.region));
    };
    let src = FileSource {
        path,
        create: false,
        map: Some(crate::file_map::map_file),
        offset: (i * a.region) as u64,
        pmem: true,
    };
    let (memory, _file) = Mem::file(peer, src, a.region, Usage::READ_SRC | Usage::WRITE_DST, 0)?.into_memory()?;
    Ok(memory)
}

fn measure<T: Transport>(t: &T, a: &LogBenchArgs, set: &[ReplicaAddr]) -> Result<LogBenchReport> {
    let peer = client_peer(t, &set[0].addr)?;
    let flush = match a.flush {
        Flush::Persistent => FlushMode::Persistent,
        Flush::Visibility => FlushMode::Visibility,
    };
    let opts = LogOptions::new(a.log_id).quorum(a.quorum).flush(flush).timeout(Duration::from_secs_f64(a.timeout));
    let (mut log, _report) = Log::open(&peer, set, opts).context("opening the log")?;
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
    let mut base = if a.baseline {
        let memories =
            (set.len()..2 * set.len()).map(|i| self_hosted_memory(&peer, a, i)).collect::<Result<Vec<_>>>()?;
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
    let result = |mode: Mode, group: usize, syncs: u64, secs: f64, truncations: u64, hist: &Histogram<u64>| {
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
        }
    };
    let mut results = Vec::new();
    let mut baseline_results = Vec::new();
    for _ in 0..a.rounds {
        for &mode in &a.modes {
            let group = if mode == Mode::Qd1 { 1 } else { a.group };
            let mut run = Run { log: &mut log, payload: &payload, group, truncations: 0 };
            run.appends(a.warmup)?;
            run.truncations = 0;
            let mut hist = Histogram::<u64>::new_with_bounds(1, HIST_MAX_NS, 3).context("a histogram")?;
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
            results.push(result(mode, group, syncs, secs, run.truncations, &hist));
            if let Some(b) = base.as_mut() {
                b.run(mode, a.warmup, group, &mut |_| {})?;
                let mut hist = Histogram::<u64>::new_with_bounds(1, HIST_MAX_NS, 3).context("a histogram")?;
                let t0 = Instant::now();
                b.run(mode, a.iters, group, &mut |ns| hist.saturating_record(ns))?;
                let secs = t0.elapsed().as_secs_f64();
                let syncs = if mode == Mode::Qd1 { a.iters } else { 0 };
                baseline_results.push(result(mode, group, syncs, secs, 0, &hist));
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
    })
}

/// The median of `v` (the upper one of an even count).
fn median<X: Copy + PartialOrd>(mut v: Vec<X>) -> Option<X> {
    v.sort_by(|x, y| x.partial_cmp(y).unwrap_or(std::cmp::Ordering::Equal));
    v.get(v.len() / 2).copied()
}

/// Per mode, the medians of the rounds of the log and of the baseline, and their ratios.
fn ratios(modes: &[Mode], log: &[LogResult], base: &[LogResult]) -> Vec<Ratio> {
    let mut out = Vec::new();
    for m in modes {
        let of = |rs: &[LogResult]| -> Vec<LogResult> { rs.iter().filter(|r| r.mode == m.name()).cloned().collect() };
        let (l, b) = (of(log), of(base));
        let (Some(lp), Some(bp), Some(lr), Some(br)) = (
            median(l.iter().map(|r| r.latency_ns.p50).collect()),
            median(b.iter().map(|r| r.latency_ns.p50).collect()),
            median(l.iter().map(|r| r.synced_appends_per_s).collect()),
            median(b.iter().map(|r| r.synced_appends_per_s).collect()),
        ) else {
            continue;
        };
        out.push(Ratio {
            mode: m.name(),
            rounds: l.len(),
            log_p50_ns: lp,
            baseline_p50_ns: bp,
            log_per_s: lr,
            baseline_per_s: br,
            latency_ratio: lp as f64 / bp.max(1) as f64,
            rate_ratio: lr / br,
        });
    }
    out
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

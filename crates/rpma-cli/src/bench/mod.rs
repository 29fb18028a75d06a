//! `rpma bench`: a perftest-class benchmark of the data path.
//!
//! Operations: `read`, `write`, `write-flush` (a write followed by a flush, librpma's APM way to
//! make data persistent), `flush` alone, `atomic-write`, and the message ping-pongs `send`,
//! `send-imm` and `write-imm` (the server echoes every message with a send of the same size),
//! and `write-pingpong` (client and server write into each other's memory in turn).
//! For each operation and message size the benchmark keeps `--qd` operations in flight on each
//! of `--conns` connections driven by `--threads` client threads, for `--iters` operations per
//! connection or `--duration` seconds, after `--warmup` unrecorded operations, and reports
//! latency percentiles (hdrhistogram), bandwidth and message rate, as a table, JSON
//! (`--json`, schema in `docs/bench.md`) or CSV (`--csv`).
//!
//! Latency is measured per operation from posting to its completion: for one-sided operations
//! (`latency_kind` `"completion"`) that is the time until the completion is polled; for the
//! ping-pongs (`"half_round_trip"`) half the time until the echo is received, as perftest's
//! `ib_send_lat` reports it, and for `write-pingpong` half the time from posting a write until
//! the peer's answering write has arrived in local memory, as `ib_write_lat`. One-sided
//! operations are signaled selectively (`--cq-mod`, as perftest's bandwidth tests).
//!
//! Backends: `--backend mock` runs server and client as threads of one process on the in-memory
//! fabric; `--backend verbs` (a build with the `verbs` feature) runs both sides in one process
//! over the RDMA device owning `--addr`, or one side per process with `--server` (listening on
//! `--addr`/`--port`) and `--connect ADDR:PORT`.

mod engine;
pub mod footprint;
mod report;

use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::args;
use crate::backend::{dispatch, BackendKind, WithTransport};

pub use footprint::Footprint;
pub use report::{BenchReport, Latency, OutputFormat, RunResult};

/// The largest message size accepted (1 GiB).
pub const MAX_SIZE: usize = 1 << 30;
/// The largest queue depth accepted.
pub const MAX_QD: usize = 4096;
/// The default port of the benchmark's server.
pub const DEFAULT_PORT: u16 = 7471;
/// The default `--cq-mod` (perftest's default).
pub const DEFAULT_CQ_MOD: usize = 100;
/// The default `--timeout`, seconds.
pub const DEFAULT_TIMEOUT_S: f64 = 30.0;

/// An operation the benchmark measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Op {
    /// RDMA Read from the server's memory (`rpma_read`).
    Read,
    /// RDMA Write to the server's memory (`rpma_write`).
    Write,
    /// A write followed by a persistent flush of the same range (`rpma_write` + `rpma_flush`).
    WriteFlush,
    /// A persistent flush alone (`rpma_flush`).
    Flush,
    /// An 8-byte atomic write (`rpma_atomic_write`).
    AtomicWrite,
    /// Send/receive ping-pong (`rpma_send` + `rpma_recv`).
    Send,
    /// Send-with-immediate ping-pong (`rpma_send_with_imm`).
    SendImm,
    /// Write-with-immediate ping-pong (`rpma_write_with_imm`, echoed with a send).
    WriteImm,
    /// RDMA Write ping-pong as perftest's `ib_write_lat`: client and server alternately write
    /// the message into each other's memory and each polls its own memory for its arrival.
    WritePingpong,
}

impl Op {
    /// The name used on the command line and in reports.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::WriteFlush => "write-flush",
            Self::Flush => "flush",
            Self::AtomicWrite => "atomic-write",
            Self::Send => "send",
            Self::SendImm => "send-imm",
            Self::WriteImm => "write-imm",
            Self::WritePingpong => "write-pingpong",
        }
    }

    /// Whether the operation is a message ping-pong (the server takes part).
    #[must_use]
    pub const fn is_ping_pong(self) -> bool {
        matches!(self, Self::Send | Self::SendImm | Self::WriteImm)
    }

    /// Whether the latency reported is half a round trip (the ping-pongs), not the time to a
    /// completion.
    #[must_use]
    pub const fn is_half_round_trip(self) -> bool {
        self.is_ping_pong() || matches!(self, Self::WritePingpong)
    }

    /// Whether the operation posts a flush (`write-flush`, `flush`).
    #[must_use]
    pub const fn flushes(self) -> bool {
        matches!(self, Self::WriteFlush | Self::Flush)
    }

    /// Whether the operation is an atomic write.
    #[must_use]
    pub const fn atomic_writes(self) -> bool {
        matches!(self, Self::AtomicWrite)
    }

    /// Whether the operation is one-sided with one completion per operation, so it may be
    /// signaled selectively (`--cq-mod`).
    #[must_use]
    pub const fn is_selectively_signaled(self) -> bool {
        matches!(self, Self::Read | Self::Write | Self::WriteFlush | Self::Flush | Self::AtomicWrite)
    }
}

/// Arguments of `rpma bench`.
#[derive(Clone, Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("amount").args(["iters", "duration"])))]
#[command(group(clap::ArgGroup::new("sizes").args(["size", "sweep"])))]
#[command(group(clap::ArgGroup::new("format").args(["json", "csv"])))]
pub struct BenchArgs {
    /// The transport.
    #[arg(long, value_enum, default_value_t = BackendKind::Mock)]
    pub backend: BackendKind,
    /// Operations to measure (comma-separated).
    #[arg(long = "op", value_enum, value_delimiter = ',', default_value = "write")]
    pub ops: Vec<Op>,
    /// Message sizes in bytes (comma-separated; suffixes K, M, G are powers of 1024).
    #[arg(long, value_delimiter = ',', value_parser = parse_size, default_value = "8", allow_negative_numbers = true)]
    pub size: Vec<usize>,
    /// A sweep of sizes MIN..MAX: MIN, 2*MIN, 4*MIN, ... up to MAX (e.g. `8..1M`).
    #[arg(long, value_parser = parse_sweep)]
    pub sweep: Option<Sweep>,
    /// Operations per connection (after the warm-up).
    #[arg(long, value_parser = args::u64_arg, allow_negative_numbers = true)]
    pub iters: Option<u64>,
    /// Seconds to run each operation and size instead of a count.
    #[arg(long, value_parser = args::seconds, allow_negative_numbers = true)]
    pub duration: Option<f64>,
    /// Unrecorded operations per connection before measuring.
    #[arg(long, default_value_t = 100, value_parser = args::u64_arg, allow_negative_numbers = true)]
    pub warmup: u64,
    /// Operations in flight per connection.
    #[arg(long, default_value_t = 1, value_parser = args::usize_arg, allow_negative_numbers = true)]
    pub qd: usize,
    /// Connections.
    #[arg(long, default_value_t = 1, value_parser = args::usize_arg, allow_negative_numbers = true)]
    pub conns: usize,
    /// Client threads (each drives `conns / threads` connections; at most `conns`).
    #[arg(long, default_value_t = 1, value_parser = args::usize_arg, allow_negative_numbers = true)]
    pub threads: usize,
    /// Signal only every N-th one-sided operation (the others post unsignaled and are retired
    /// by the next signaled completion), as perftest's `--cq-mod`; capped at `--qd`.
    #[arg(long, default_value_t = DEFAULT_CQ_MOD, value_parser = args::usize_arg, allow_negative_numbers = true)]
    pub cq_mod: usize,
    /// Post one-sided operations N at a time as one chain with one doorbell (`Batch`); the last
    /// operation of each chain is signaled and retires the chain (`--cq-mod` does not apply).
    /// At most `--qd` and 64 (32 for write-flush: two work requests each).
    #[arg(long, default_value_t = 1, value_parser = args::usize_arg, allow_negative_numbers = true)]
    pub batch: usize,
    /// Each operation's local side in N scatter-gather pieces (reads, writes, sends; at most the
    /// device's `max_sge` and the size).
    #[arg(long, default_value_t = 1, value_parser = args::usize_arg, allow_negative_numbers = true)]
    pub sge: usize,
    /// Writes and sends carry their bytes inline, copied from plain memory at post time (no
    /// registered source; sizes at most the device's `max_inline_data`).
    #[arg(long)]
    pub inline: bool,
    /// The server busy-polls (never yields nor sleeps), as perftest's server does.
    #[arg(long)]
    pub busy_poll: bool,
    /// The server sleeps in the kernel as soon as its CQ is empty (no spinning, no yielding
    /// first; not in a write ping-pong, where it watches its memory): for a guest of one CPU,
    /// where a spinning server takes turns with the client (scripts/bench-softroce.sh under
    /// `SOFTROCE_ACCEL=icount`).
    #[arg(long, conflicts_with = "busy_poll")]
    pub sleep_when_idle: bool,
    /// Seconds any wait (a completion, a connection event, a byte the peer writes) may last
    /// without progress before the run fails naming it: a lost peer cannot hang a phase.
    #[arg(long, default_value_t = DEFAULT_TIMEOUT_S, value_parser = args::seconds, allow_negative_numbers = true)]
    pub timeout: f64,
    /// The address to listen on (server, loopback); for the mock, any of its addresses.
    #[arg(long, default_value = "127.0.0.1")]
    pub addr: String,
    /// The port to listen on (1 to 65535: the rpma API cannot tell which port 0 would pick).
    #[arg(long, default_value_t = DEFAULT_PORT, value_parser = args::port, allow_negative_numbers = true)]
    pub port: u16,
    /// Run only the server side: serve `--conns` connections, then exit (on the mock, a client
    /// process reaches it through the rendezvous directory, `RPMA_MOCK_RENDEZVOUS`).
    #[arg(long, conflicts_with = "connect")]
    pub server: bool,
    /// Run only the client side, connecting to a `rpma bench --server` at ADDR:PORT.
    #[arg(long, value_name = "ADDR:PORT")]
    pub connect: Option<String>,
    /// Post and await every operation through the async API (`rpma::tokio`) on a
    /// current-thread tokio runtime per client thread: `--qd` futures per connection, each a
    /// loop of one operation and its await (one-sided operations; every one signaled).
    #[arg(long = "async")]
    pub async_api: bool,
    /// Also measure a memcpy of the same size in the same run.
    #[arg(long)]
    pub baseline: bool,
    /// Time no operation: measure only the message rate and bandwidth (over the phase's wall
    /// time), as perftest's bandwidth tests do; no latency is reported. With `--iters` no clock
    /// is read per operation (a `--duration` run still reads it to know when to stop). For
    /// rates at which reading the clock costs as much as an operation (the mock).
    #[arg(long)]
    pub no_latency: bool,
    /// The server's target region on persistent memory: a devdax device or a file of a DAX
    /// file system (`MAP_SYNC` required), from `--file-offset` (server and loopback; verbs).
    #[arg(long, value_name = "PATH")]
    pub pmem: Option<std::path::PathBuf>,
    /// Where the target region starts in `--pmem` (bytes; a multiple of its alignment).
    #[arg(long, value_name = "BYTES", default_value_t = 0, value_parser = args::u64_arg, allow_negative_numbers = true)]
    pub file_offset: u64,
    /// How persistent flushes go on a device with native flush, one run per rule for the
    /// operations that flush, side by side (`native`: `IBV_FLUSH_PERSISTENT`, the target must be
    /// pmem; `read`: the RDMA Read; comma-separated; client and loopback; verbs). Default: the
    /// process's rule (`RPMA_VERBS_PERSISTENT_FLUSH`).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub persistent_flush: Vec<FlushRule>,
    /// Print JSON (schema in docs/bench.md).
    #[arg(long)]
    pub json: bool,
    /// Print CSV (one header line, one line per run).
    #[arg(long)]
    pub csv: bool,
    /// Never show a progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

/// How a persistent flush goes on a device with native flush (`--persistent-flush`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FlushRule {
    /// Native `IBV_FLUSH_PERSISTENT` (rpma-verbs' default).
    Native,
    /// The RDMA Read (APM).
    Read,
}

/// A size sweep `MIN..MAX` (powers of two times MIN).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sweep {
    /// The first size.
    pub min: usize,
    /// The upper bound (included if reached by doubling).
    pub max: usize,
}

impl Sweep {
    /// The sizes of the sweep.
    #[must_use]
    pub fn sizes(self) -> Vec<usize> {
        std::iter::successors(Some(self.min), |s| s.checked_mul(2)).take_while(|s| *s <= self.max).collect()
    }
}

/// Parses a size: a number of bytes with an optional K, M or G suffix (powers of 1024; a
/// trailing `B` or `iB` is accepted).
///
/// # Errors
/// If it is not such a number, is 0 or exceeds [`MAX_SIZE`].
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let t = t.strip_suffix("iB").or_else(|| t.strip_suffix('B')).unwrap_or(t);
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1usize << 10),
        Some((i, 'm' | 'M')) => (&t[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    if num.trim_start().starts_with('-') {
        return Err(format!("`{s}` is negative: a message size is at least 1 byte"));
    }
    let n: usize = num.parse().map_err(|_| format!("`{s}` is not a size (a number with an optional K, M or G)"))?;
    let size = n.checked_mul(mult).ok_or_else(|| format!("size `{s}` is too large"))?;
    if size == 0 {
        return Err("a message size must be at least 1 byte".to_owned());
    }
    if size > MAX_SIZE {
        return Err(format!("size `{s}` exceeds the maximum of 1G"));
    }
    Ok(size)
}

/// Parses a sweep `MIN..MAX`.
///
/// # Errors
/// If either bound is not a size or MIN > MAX.
pub fn parse_sweep(s: &str) -> Result<Sweep, String> {
    let (a, b) = s.split_once("..").ok_or_else(|| format!("`{s}` is not a sweep MIN..MAX (e.g. 8..1M)"))?;
    let (min, max) = (parse_size(a)?, parse_size(b)?);
    if min > max {
        return Err(format!("sweep `{s}`: MIN is larger than MAX"));
    }
    Ok(Sweep { min, max })
}

/// How long each measurement runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Amount {
    /// A number of operations per connection.
    Iters(u64),
    /// A time.
    Duration(Duration),
}

/// Which side(s) this process runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// Server and client in one process.
    Loopback,
    /// The server only.
    Server,
    /// The client only, connecting to `addr:port`.
    Client {
        /// The server's address.
        addr: String,
        /// The server's port.
        port: u16,
    },
}

/// Validated benchmark settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The operations, in order.
    pub ops: Vec<Op>,
    /// The sizes, in order.
    pub sizes: Vec<usize>,
    /// How long each run lasts.
    pub amount: Amount,
    /// Warm-up operations per connection.
    pub warmup: u64,
    /// Queue depth per connection.
    pub qd: usize,
    /// Connections.
    pub conns: usize,
    /// Client threads.
    pub threads: usize,
    /// Signal every `cq_mod`-th one-sided operation (at most `qd` in effect).
    pub cq_mod: usize,
    /// One-sided operations posted per chain (1: one by one).
    pub batch: usize,
    /// Scatter-gather pieces of each operation's local side.
    pub sge: usize,
    /// Writes and sends inline.
    pub inline: bool,
    /// The server never yields nor sleeps while polling.
    pub busy_poll: bool,
    /// The server sleeps as soon as it is idle.
    pub sleep_when_idle: bool,
    /// How long any wait may last without progress.
    pub timeout: Duration,
    /// The listening address (server and loopback).
    pub addr: String,
    /// The listening port.
    pub port: u16,
    /// The side(s) to run.
    pub role: Role,
    /// Measure a memcpy baseline too.
    pub baseline: bool,
    /// Read the clock per (signaled) operation and report latency (not `--no-latency`).
    pub latency: bool,
    /// Show a progress bar (if stderr is a terminal).
    pub progress: bool,
    /// The server's target region on this persistent memory, from this offset (`--pmem`).
    pub pmem: Option<(std::path::PathBuf, u64)>,
    /// The persistent flush rules to run the flushing operations under, one run each (empty:
    /// the process's rule).
    pub flush_rules: Vec<FlushRule>,
    /// Drive the operations through the async API (`--async`).
    pub async_api: bool,
}

impl Plan {
    /// The largest message size.
    #[must_use]
    pub fn max_size(&self) -> usize {
        self.sizes.iter().copied().max().unwrap_or(8)
    }

    /// How many operations of `op` make one signaled batch: `cq_mod` capped at the queue depth
    /// for the one-sided operations, 1 for the others.
    #[must_use]
    pub fn signal_every(&self, op: Op) -> usize {
        if op.is_selectively_signaled() {
            self.cq_mod.min(self.qd).max(1)
        } else {
            1
        }
    }
}

/// Checks the arguments and turns them into a [`Plan`].
///
/// # Errors
/// For any inconsistent or out-of-range argument, with a message naming it.
pub fn plan(args: &BenchArgs) -> Result<Plan> {
    let mut ops = Vec::new();
    for op in &args.ops {
        if !ops.contains(op) {
            ops.push(*op);
        }
    }
    if ops.is_empty() {
        bail!("--op: give at least one operation");
    }
    let sizes = match args.sweep {
        Some(s) => s.sizes(),
        None => args.size.clone(),
    };
    if sizes.is_empty() {
        bail!("--size: give at least one size");
    }
    if let Some(bad) = sizes.iter().find(|s| **s == 0 || **s > MAX_SIZE) {
        bail!("--size: {bad} is outside 1..=1G");
    }
    if ops.contains(&Op::AtomicWrite) && sizes.iter().any(|s| *s != 8) {
        bail!("--op atomic-write moves exactly 8 bytes: run it with --size 8 only");
    }
    let amount = match (args.iters, args.duration) {
        (Some(_), Some(_)) => bail!("--iters and --duration exclude each other"),
        (Some(0), None) => bail!("--iters must be at least 1"),
        (Some(n), None) => Amount::Iters(n),
        (None, Some(d)) if !(d.is_finite() && d > 0.0 && d <= 86_400.0) => {
            bail!("--duration must be a number of seconds in (0, 86400]")
        }
        (None, Some(d)) => Amount::Duration(Duration::from_secs_f64(d)),
        (None, None) => Amount::Iters(10_000),
    };
    if args.qd == 0 || args.qd > MAX_QD {
        bail!("--qd must be in 1..={MAX_QD}");
    }
    if args.cq_mod == 0 || args.cq_mod > MAX_QD {
        bail!("--cq-mod must be in 1..={MAX_QD}");
    }
    if !(args.timeout.is_finite() && args.timeout > 0.0 && args.timeout <= 86_400.0) {
        bail!("--timeout must be a number of seconds in (0, 86400]");
    }
    check_shape(args, &ops, &sizes)?;
    if args.async_api {
        check_async(args, &ops)?;
    }
    if ops.contains(&Op::WritePingpong) && args.qd != 1 {
        bail!("--op write-pingpong exchanges one message at a time: run it with --qd 1");
    }
    if args.conns == 0 || args.conns > 1024 {
        bail!("--conns must be in 1..=1024");
    }
    if args.threads == 0 || args.threads > args.conns {
        bail!("--threads must be in 1..=--conns ({})", args.conns);
    }
    if args.json && args.csv {
        bail!("--json and --csv exclude each other");
    }
    if args.addr.is_empty() {
        bail!("--addr must not be empty");
    }
    let role = match (args.server, &args.connect) {
        (true, Some(_)) => bail!("--server and --connect exclude each other"),
        (true, None) => Role::Server,
        (false, Some(target)) => {
            let (addr, port) = parse_target(target)?;
            Role::Client { addr, port }
        }
        (false, None) => Role::Loopback,
    };
    let mut flush_rules = Vec::new();
    for r in &args.persistent_flush {
        if !flush_rules.contains(r) {
            flush_rules.push(*r);
        }
    }
    if args.backend != BackendKind::Verbs && (args.pmem.is_some() || !flush_rules.is_empty()) {
        bail!("--pmem and --persistent-flush are for --backend verbs");
    }
    if args.pmem.is_some() && matches!(role, Role::Client { .. }) {
        bail!("--pmem places the server's region: give it to the server (or a loopback run)");
    }
    Ok(Plan {
        pmem: args.pmem.clone().map(|p| (p, args.file_offset)),
        flush_rules,
        ops,
        sizes,
        amount,
        warmup: args.warmup,
        qd: args.qd,
        conns: args.conns,
        threads: args.threads,
        cq_mod: args.cq_mod,
        batch: args.batch,
        sge: args.sge,
        inline: args.inline,
        busy_poll: args.busy_poll,
        sleep_when_idle: args.sleep_when_idle,
        timeout: Duration::from_secs_f64(args.timeout),
        addr: args.addr.clone(),
        port: args.port,
        role,
        baseline: args.baseline,
        latency: !args.no_latency,
        progress: !args.no_progress,
        async_api: args.async_api,
    })
}

/// The most operations of one chain (`--batch`).
pub const MAX_BATCH: usize = 64;
/// The most scatter-gather pieces of one operation (`--sge`; the device may allow fewer).
pub const MAX_SGE: usize = 32;
/// The most pieces of one chain (`--batch` × `--sge`).
pub const MAX_CHAIN_PIECES: usize = 256;

/// `--batch`, `--sge` and `--inline` against the operations, sizes and queue depth.
fn check_shape(args: &BenchArgs, ops: &[Op], sizes: &[usize]) -> Result<()> {
    let (batch, sge) = (args.batch, args.sge);
    let max_batch = if ops.contains(&Op::WriteFlush) { MAX_BATCH / 2 } else { MAX_BATCH };
    if batch == 0 || batch > max_batch {
        bail!("--batch must be in 1..={max_batch}");
    }
    if batch > args.qd {
        bail!("--batch {batch} exceeds --qd {}: a chain is at most the operations in flight", args.qd);
    }
    if let Some(op) = ops.iter().find(|op| batch > 1 && !op.is_selectively_signaled()) {
        bail!(
            "--batch applies to one-sided operations (read, write, write-flush, flush, atomic-write), not {}",
            op.name()
        );
    }
    if sge == 0 || sge > MAX_SGE {
        bail!("--sge must be in 1..={MAX_SGE}");
    }
    if let Some(op) = ops.iter().find(|op| sge > 1 && matches!(op, Op::Flush | Op::AtomicWrite | Op::WritePingpong)) {
        bail!("--sge splits the local side of an operation: {} has none to split", op.name());
    }
    if let Some(s) = sizes.iter().find(|s| **s < sge) {
        bail!("--sge {sge}: a size of {s} B cannot be split into {sge} non-empty pieces");
    }
    if batch * sge > MAX_CHAIN_PIECES {
        bail!("--batch × --sge must be at most {MAX_CHAIN_PIECES}");
    }
    if args.inline {
        if let Some(op) =
            ops.iter().find(|op| !matches!(op, Op::Write | Op::WriteFlush | Op::Send | Op::SendImm | Op::WriteImm))
        {
            bail!(
                "--inline applies to writes and sends (write, write-flush, send, send-imm, write-imm), not {}",
                op.name()
            );
        }
        if sge > 1 {
            bail!("--inline and --sge exclude each other: inline data is one piece of plain memory");
        }
    }
    Ok(())
}

/// `--async` against the operations and the shape: one-sided operations, one at a time.
fn check_async(args: &BenchArgs, ops: &[Op]) -> Result<()> {
    if let Some(op) = ops.iter().find(|op| !engine::ASYNC_OPS.contains(op)) {
        bail!(
            "--async measures the one-sided operations ({}), not {}",
            engine::ASYNC_OPS.map(Op::name).join(", "),
            op.name()
        );
    }
    if args.batch > 1 || args.sge > 1 || args.inline {
        bail!("--async posts each operation on its own from one registered piece: no --batch, --sge or --inline");
    }
    if args.server {
        bail!("--async is the client's way of posting: the server (--server) has no use for it");
    }
    Ok(())
}

/// Parses `ADDR:PORT` (an IPv6 address in brackets: `[fe80::1]:7471`).
///
/// # Errors
/// If there is no port or it is not a number in 1..=65535.
pub fn parse_target(s: &str) -> Result<(String, u16)> {
    let (addr, port) = s.rsplit_once(':').with_context(|| format!("--connect `{s}`: expected ADDR:PORT"))?;
    let addr = addr.strip_prefix('[').and_then(|a| a.strip_suffix(']')).unwrap_or(addr);
    let port = args::port(port).map_err(|e| anyhow::anyhow!("--connect `{s}`: {e}"))?;
    if addr.is_empty() {
        bail!("--connect `{s}`: expected ADDR:PORT with a non-empty address and a port in 1..=65535");
    }
    Ok((addr.to_owned(), port))
}

/// The format `args` ask for.
#[must_use]
pub const fn format(args: &BenchArgs) -> OutputFormat {
    if args.json {
        OutputFormat::Json
    } else if args.csv {
        OutputFormat::Csv
    } else {
        OutputFormat::Table
    }
}

struct Work<'a>(&'a Plan, BackendKind);

impl WithTransport for Work<'_> {
    type Output = BenchReport;
    fn run<T: rpma::Transport>(self, transport: T) -> Result<BenchReport> {
        // Before anything is allocated: a run that cannot fit is refused, not swapped or killed.
        footprint::check_fits(self.0, footprint::mem_available())?;
        engine::run(&transport, self.0, self.1)
    }
}

/// Runs the benchmark `args` describe and returns its report (empty for `--server`).
///
/// # Errors
/// Invalid arguments, an unavailable backend, or any failure of a connection or an operation.
pub fn measure(args: &BenchArgs) -> Result<BenchReport> {
    let plan = plan(args).map_err(|e| crate::out::usage(&e))?;
    if plan.role == Role::Loopback {
        dispatch(args.backend, Work(&plan, args.backend))
    } else {
        // Two processes: the mock meets its peer through its rendezvous directory.
        crate::backend::dispatch_between_processes(args.backend, Work(&plan, args.backend))
    }
}

/// Runs the benchmark `args` describe on `transport` (whatever `--backend` says): for tests, e.g.
/// on a mock fabric with faults armed.
///
/// # Errors
/// As [`measure`].
pub fn measure_on<T: rpma::Transport>(transport: T, args: &BenchArgs) -> Result<BenchReport> {
    let plan = plan(args).map_err(|e| crate::out::usage(&e))?;
    Work(&plan, args.backend).run(transport)
}

/// `rpma bench`: runs the benchmark and prints its report on stdout.
///
/// # Errors
/// As [`measure`], or if stdout cannot be written.
pub fn run(args: &BenchArgs) -> Result<()> {
    let report = measure(args)?;
    if args.server {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    report.write(format(args), &mut out).context("writing the report")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn args(line: &[&str]) -> Result<BenchArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("bench").chain(line.iter().copied())).map(|c| c.args)
    }

    fn plan_of(line: &[&str]) -> Result<Plan> {
        plan(&args(line)?)
    }

    fn err_of(line: &[&str]) -> String {
        match args(line) {
            Ok(a) => plan(&a).expect_err("the plan must be rejected").to_string(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert!(parse_size("0").unwrap_err().contains("at least 1 byte"));
        assert!(parse_size("2G").unwrap_err().contains("maximum"));
        assert!(parse_size("abc").unwrap_err().contains("not a size"));
        assert!(parse_size("").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999999999999K").is_err());
    }

    #[test]
    fn sweeps_double_up_to_max() {
        assert_eq!(parse_sweep("8..64").map(Sweep::sizes), Ok(vec![8, 16, 32, 64]));
        assert_eq!(parse_sweep("8..1M").map(|s| s.sizes().len()), Ok(18));
        assert_eq!(parse_sweep("3..20").map(Sweep::sizes), Ok(vec![3, 6, 12]));
        assert_eq!(parse_sweep("8..8").map(Sweep::sizes), Ok(vec![8]));
        assert!(parse_sweep("64..8").unwrap_err().contains("larger"));
        assert!(parse_sweep("8-64").unwrap_err().contains("MIN..MAX"));
    }

    #[test]
    fn defaults_make_a_loopback_write_plan() {
        let p = plan_of(&[]).unwrap();
        assert_eq!(p.ops, vec![Op::Write]);
        assert_eq!(p.sizes, vec![8]);
        assert_eq!(p.amount, Amount::Iters(10_000));
        assert_eq!((p.qd, p.conns, p.threads), (1, 1, 1));
        assert_eq!((p.cq_mod, p.busy_poll), (DEFAULT_CQ_MOD, false));
        assert_eq!(p.signal_every(Op::Write), 1, "capped at --qd");
        assert_eq!(p.role, Role::Loopback);
    }

    #[test]
    fn lists_and_sweeps_are_read() {
        let p = plan_of(&["--op", "read,write,send,read", "--size", "8,64,4K", "--iters", "5"]).unwrap();
        assert_eq!(p.ops, vec![Op::Read, Op::Write, Op::Send]);
        assert_eq!(p.sizes, vec![8, 64, 4096]);
        assert_eq!(p.amount, Amount::Iters(5));
        let p = plan_of(&["--sweep", "8..64", "--duration", "0.5"]).unwrap();
        assert_eq!(p.sizes, vec![8, 16, 32, 64]);
        assert_eq!(p.amount, Amount::Duration(Duration::from_millis(500)));
    }

    #[test]
    fn conflicting_options_are_rejected() {
        assert!(err_of(&["--size", "8", "--sweep", "8..64"]).contains("cannot be used with"));
        assert!(err_of(&["--iters", "5", "--duration", "1"]).contains("cannot be used with"));
        assert!(err_of(&["--json", "--csv"]).contains("cannot be used with"));
        assert!(err_of(&["--server", "--connect", "10.0.0.1:7471"]).contains("cannot be used with"));
    }

    #[test]
    fn out_of_range_values_are_rejected() {
        assert!(err_of(&["--iters", "0"]).contains("--iters"));
        assert!(err_of(&["--duration", "0"]).contains("--duration"));
        assert!(err_of(&["--duration=-1"]).contains("--duration"));
        assert!(err_of(&["--duration", "NaN"]).contains("--duration"));
        assert!(err_of(&["--qd", "0"]).contains("--qd"));
        assert!(err_of(&["--qd", "5000"]).contains("--qd"));
        assert!(err_of(&["--conns", "0"]).contains("--conns"));
        assert!(err_of(&["--conns", "2", "--threads", "3"]).contains("--threads"));
        assert!(err_of(&["--threads", "0"]).contains("--threads"));
        assert!(err_of(&["--size", "0"]).contains("at least 1 byte"));
        assert!(err_of(&["--op", "teleport"]).contains("invalid value"));
        assert!(err_of(&["--addr", ""]).contains("--addr"));
        assert!(err_of(&["--cq-mod", "0"]).contains("--cq-mod"));
        assert!(err_of(&["--cq-mod", "5000"]).contains("--cq-mod"));
        assert!(err_of(&["--timeout", "0"]).contains("--timeout"));
        assert!(err_of(&["--timeout", "inf"]).contains("--timeout"));
        assert_eq!(plan_of(&[]).unwrap().timeout, Duration::from_secs(30));
        assert_eq!(plan_of(&["--timeout", "0.5"]).unwrap().timeout, Duration::from_millis(500));
    }

    #[test]
    fn selective_signaling_is_capped_and_one_sided_only() {
        let p = plan_of(&["--qd", "128", "--cq-mod", "100"]).unwrap();
        assert_eq!(p.signal_every(Op::Write), 100);
        assert_eq!(p.signal_every(Op::Read), 100);
        assert_eq!(p.signal_every(Op::Send), 1);
        assert_eq!(p.signal_every(Op::WritePingpong), 1);
        let p = plan_of(&["--qd", "16", "--cq-mod", "100"]).unwrap();
        assert_eq!(p.signal_every(Op::Write), 16);
    }

    #[test]
    fn write_pingpong_needs_qd_1() {
        assert!(err_of(&["--op", "write-pingpong", "--qd", "2"]).contains("--qd 1"));
        let p = plan_of(&["--op", "write-pingpong", "--busy-poll"]).unwrap();
        assert!(p.busy_poll && !p.sleep_when_idle);
        assert!(plan_of(&["--sleep-when-idle"]).unwrap().sleep_when_idle);
        assert!(err_of(&["--busy-poll", "--sleep-when-idle"]).contains("cannot be used with"));
        assert!(Op::WritePingpong.is_half_round_trip() && !Op::WritePingpong.is_ping_pong());
    }

    #[test]
    fn atomic_write_needs_size_8() {
        assert!(err_of(&["--op", "atomic-write", "--size", "8,64"]).contains("exactly 8 bytes"));
        assert!(plan_of(&["--op", "atomic-write", "--size", "8"]).is_ok());
    }

    #[test]
    fn roles_follow_server_and_connect() {
        let p = plan_of(&["--backend", "verbs", "--server", "--addr", "10.77.0.1"]).unwrap();
        assert_eq!(p.role, Role::Server);
        let p = plan_of(&["--backend", "verbs", "--connect", "10.77.0.1:7000"]).unwrap();
        assert_eq!(p.role, Role::Client { addr: "10.77.0.1".into(), port: 7000 });
        let p = plan_of(&["--backend", "verbs", "--connect", "[fe80::1]:7000"]).unwrap();
        assert_eq!(p.role, Role::Client { addr: "fe80::1".into(), port: 7000 });
        assert_eq!(plan_of(&["--server"]).unwrap().role, Role::Server);
        assert!(err_of(&["--backend", "verbs", "--connect", "10.77.0.1"]).contains("ADDR:PORT"));
        assert!(err_of(&["--backend", "verbs", "--connect", "10.77.0.1:x"]).contains("not a port"));
        assert!(err_of(&["--backend", "verbs", "--connect", ":7000"]).contains("non-empty"));
    }

    #[test]
    fn formats_follow_flags() {
        assert_eq!(format(&args(&[]).unwrap()), OutputFormat::Table);
        assert_eq!(format(&args(&["--json"]).unwrap()), OutputFormat::Json);
        assert_eq!(format(&args(&["--csv"]).unwrap()), OutputFormat::Csv);
    }
}

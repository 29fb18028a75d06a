//! `rpma log`'s command line: its subcommands and their arguments.

use std::path::PathBuf;

use anyhow::Result;
use rpma::any::Backend;
use rpma_log::{Quorum, ReplicaAddr};

use rpma_bench::parse_size;
use rpma_scenarios::{args, backend};

/// The log id `rpma log serve` and `rpma log bench` use unless `--log-id` says otherwise.
pub(crate) const DEFAULT_LOG_ID: u64 = 0x5250_4d41_4c4f_4701;
/// The default port of `rpma log serve` (and the first of `rpma log bench`'s own replicas).
pub(crate) const DEFAULT_PORT: u16 = 7480;
/// The default region size of a replica (64 MiB).
pub(crate) const DEFAULT_REGION: usize = 64 << 20;
/// The most replicas `rpma log bench` serves itself.
pub(crate) const MAX_SELF_HOSTED: usize = 3;
/// The longest latency recorded exactly (60 s; longer ones are recorded as 60 s).
pub(super) const HIST_MAX_NS: u64 = 60_000_000_000;
/// The version of `rpma log bench --json`'s schema (docs/cli.md).
pub(crate) const SCHEMA_VERSION: u32 = 1;

/// Arguments of `rpma log`.
#[derive(Debug, clap::Args)]
pub(crate) struct LogArgs {
    /// What to run (`None`: a usage error naming the commands).
    #[command(subcommand)]
    pub(crate) cmd: Option<LogCmd>,
}

/// `rpma log`'s subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum LogCmd {
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
pub(crate) struct ServeArgs {
    /// The transport: RDMA (verbs), or the mock, whose processes meet through its rendezvous
    /// directory on this host (`RPMA_MOCK_RENDEZVOUS`, else a private directory of this user).
    #[arg(long, value_parser = backend::parser(), default_value_t = Backend::Mock)]
    pub(crate) backend: Backend,
    /// The address to listen on (of an RDMA interface for verbs).
    #[arg(long)]
    pub(crate) addr: String,
    /// The port to listen on (1 to 65535).
    #[arg(long, default_value_t = DEFAULT_PORT, value_parser = args::port, allow_negative_numbers = true)]
    pub(crate) port: u16,
    /// Keep the log in this persistent memory: a devdax device or a file of a DAX file system
    /// (mapped with MAP_SYNC; anything else is refused). The replica tells writers that their
    /// writes reach persistence directly.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["file", "file_create"])]
    pub(crate) pmem: Option<PathBuf>,
    /// Keep the log in this file (a shared mapping: what writers write lands in the file). It
    /// must exist and be --size bytes long, unless --file-create. While the replica runs, no
    /// other program may truncate or write the file.
    #[arg(long, value_name = "PATH")]
    pub(crate) file: Option<PathBuf>,
    /// Create the --file if it is missing and extend it with zeros if it is too short (once
    /// this replica holds its range of the file; it never shortens the file).
    #[arg(long, requires = "file")]
    pub(crate) file_create: bool,
    /// Where the region starts in the --file or --pmem (bytes; a multiple of the page size, or
    /// of the devdax device's alignment).
    #[arg(long, value_name = "BYTES", default_value_t = 0, value_parser = args::u64_arg, allow_negative_numbers = true)]
    pub(crate) file_offset: u64,
    /// The region's bytes (a 256-byte header, the rest is the ring; suffixes K, M, G), in DRAM
    /// without --pmem or --file.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_REGION, value_parser = parse_size, allow_negative_numbers = true)]
    pub(crate) size: usize,
    /// The log's id (decimal or 0x...): writers of another log are refused.
    #[arg(long, default_value_t = DEFAULT_LOG_ID, value_parser = log_id)]
    pub(crate) log_id: u64,
    /// Format the region as a replica of a new, empty log (every replica of a new log, once),
    /// even if it holds one (or anything else). Without it, a region that holds the log is
    /// opened, and a blank one (DRAM, or an all-zero range) is formatted as a replacement of a
    /// replica that lost its region: it votes in recoveries once a writer has repaired it.
    #[arg(long)]
    pub(crate) format: bool,
    /// Tell writers that their writes reach persistence directly (implied by --pmem), so that
    /// they may flush to persistence: without it only `--flush visibility` writers are served.
    #[arg(long)]
    pub(crate) direct_pmem_write: bool,
    /// Serve for this many seconds, then stop in order (default: until killed).
    #[arg(long, value_parser = args::seconds, allow_negative_numbers = true)]
    pub(crate) duration: Option<f64>,
}

/// `--replicas`: a count of replicas this process serves, or the addresses of replicas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Replicas {
    /// Served by `rpma log bench` itself, in threads (1 to [`MAX_SELF_HOSTED`]).
    SelfHosted(usize),
    /// Served elsewhere (`rpma log serve`).
    Remote(Vec<ReplicaAddr>),
}

/// Parses `--replicas`: `N` (1 to 3) or `ADDR:PORT,ADDR:PORT,...`.
///
/// # Errors
/// A count outside 1..=3, an address without a port or with a bad one, an empty list.
pub(crate) fn parse_replicas(s: &str) -> Result<Replicas, String> {
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
pub(crate) enum Flush {
    /// Persistent flushes (the replicas must announce direct write to persistence).
    Persistent,
    /// Flushes to visibility (DRAM replicas).
    Visibility,
}

/// How `rpma log bench`'s writer waits for completions ([`rpma_log::Wait`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum WaitArg {
    /// Busy polling (the log's default).
    Spin,
    /// Sleeping in poll(2) on the replicas' completion channels.
    Sleep,
}

impl WaitArg {
    /// The name in reports.
    #[must_use]
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Self::Spin => "spin",
            Self::Sleep => "sleep",
        }
    }
}

/// A measurement of `rpma log bench`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub(crate) enum Mode {
    /// Append + sync of one entry at a time (queue depth 1): latency and rate.
    Qd1,
    /// Appends pipelined, one sync per --group appends (group commit): rate.
    GroupCommit,
    /// A new writer takes the log (--fill bytes of history) over from the running one,
    /// --takeovers times: each phase of the takeover, and the whole of it in queue-depth-1 syncs
    /// of the same run.
    Failover,
}

impl Mode {
    /// The name in reports.
    #[must_use]
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Self::Qd1 => "qd1",
            Self::GroupCommit => "group-commit",
            Self::Failover => "failover",
        }
    }
}

/// Arguments of `rpma log bench`.
#[derive(Clone, Debug, clap::Args)]
pub(crate) struct LogBenchArgs {
    /// The transport. On the mock, replicas given by address are reached across processes
    /// (the rendezvous directory, as `rpma log serve --backend mock`).
    #[arg(long, value_parser = backend::parser(), default_value_t = Backend::Mock)]
    pub(crate) backend: Backend,
    /// The replicas: `N` (1 to 3) served by this process in threads on --addr, ports --port,
    /// --port + 1, ...; or `ADDR:PORT,...` served by `rpma log serve`.
    #[arg(long, default_value = "3", value_parser = parse_replicas)]
    pub(crate) replicas: Replicas,
    /// The entries' payload bytes (suffixes K, M, G).
    #[arg(long, default_value_t = 64, value_parser = parse_size, allow_negative_numbers = true)]
    pub(crate) size: usize,
    /// What to measure (comma-separated).
    #[arg(long = "mode", value_enum, value_delimiter = ',', default_value = "qd1,group-commit")]
    pub(crate) modes: Vec<Mode>,
    /// Appends measured per mode (after the warm-up).
    #[arg(long, default_value_t = 200_000, value_parser = args::u64_arg, allow_negative_numbers = true)]
    pub(crate) iters: u64,
    /// Unmeasured appends before each mode.
    #[arg(long, default_value_t = 1000, value_parser = args::u64_arg, allow_negative_numbers = true)]
    pub(crate) warmup: u64,
    /// group-commit: appends per sync.
    #[arg(long, default_value_t = 128, value_parser = args::usize_arg, allow_negative_numbers = true)]
    pub(crate) group: usize,
    /// failover: the history a new writer takes over (bytes of records; suffixes K, M, G).
    #[arg(long, value_name = "BYTES", default_value_t = 512 << 10, value_parser = parse_size, allow_negative_numbers = true)]
    pub(crate) fill: usize,
    /// failover: takeovers measured.
    #[arg(long, default_value_t = 10, value_parser = args::u64_arg, allow_negative_numbers = true)]
    pub(crate) takeovers: u64,
    /// failover: each new writer stands by with its buffers made before the takeover
    /// (`rpma_log::Standby`), as a hot standby would.
    #[arg(long)]
    pub(crate) standby: bool,
    /// The quorum of each sync: all, majority or a count.
    #[arg(long, default_value = "majority", value_parser = parse_quorum)]
    pub(crate) quorum: Quorum,
    /// What durable means.
    #[arg(long, value_enum, default_value_t = Flush::Persistent)]
    pub(crate) flush: Flush,
    /// How the writer waits for its replicas' completions: busy polling, or sleeping on their
    /// completion channels (the CPU time it takes per synced append is reported either way).
    #[arg(long, value_enum, default_value_t = WaitArg::Spin)]
    pub(crate) wait: WaitArg,
    /// The log's id (decimal or 0x...).
    #[arg(long, default_value_t = DEFAULT_LOG_ID, value_parser = log_id)]
    pub(crate) log_id: u64,
    /// Self-hosted replicas: the address they listen on (verbs: of an RDMA interface).
    #[arg(long, default_value = "127.0.0.1")]
    pub(crate) addr: String,
    /// Self-hosted replicas: the first one's port.
    #[arg(long, default_value_t = DEFAULT_PORT, value_parser = args::port, allow_negative_numbers = true)]
    pub(crate) port: u16,
    /// Self-hosted replicas: each one's region (DRAM; suffixes K, M, G).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_REGION, value_parser = parse_size, allow_negative_numbers = true)]
    pub(crate) region: usize,
    /// Seconds the writer waits for a replica (connection, completions) before it fails.
    #[arg(long, default_value_t = 10.0, value_parser = args::seconds, allow_negative_numbers = true)]
    pub(crate) timeout: f64,
    /// Self-hosted replicas (and the baseline's regions): on this persistent memory (a devdax
    /// device or a file of a DAX file system), region i at i * --region, instead of DRAM.
    #[arg(long, value_name = "PATH")]
    pub(crate) pmem: Option<PathBuf>,
    /// Also measure the hand-written baseline (the plain rpma API, regions of this process on
    /// ports after the replicas'), alternating with the log mode by mode, and report the ratios.
    #[arg(long)]
    pub(crate) baseline: bool,
    /// Rounds of the measurements (each mode once per round, the log's then the baseline's);
    /// the ratios are of the medians of the rounds.
    #[arg(long, default_value_t = 1, value_parser = args::u64_arg, allow_negative_numbers = true)]
    pub(crate) rounds: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

//! The arguments of `rpma bench` as the command line gives them (checked into a
//! [`Plan`](super::plan::Plan) by [`plan`](super::plan::plan)).

use rpma::any::Backend;
use rpma_scenarios::{args, backend};

use super::flush_rule::FlushRule;
use super::op::Op;
use super::report::OutputFormat;
use super::sizes::{parse_size, parse_sweep, Sweep};

/// The default port of the benchmark's server.
pub const DEFAULT_PORT: u16 = 7471;
/// The default `--cq-mod` (perftest's default).
pub const DEFAULT_CQ_MOD: usize = 100;
/// The default `--timeout`, seconds.
pub const DEFAULT_TIMEOUT_S: f64 = 30.0;

/// Arguments of `rpma bench`.
#[derive(Clone, Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("amount").args(["iters", "duration"])))]
#[command(group(clap::ArgGroup::new("sizes").args(["size", "sweep"])))]
#[command(group(clap::ArgGroup::new("format").args(["json", "csv"])))]
pub struct BenchArgs {
    /// The transport.
    #[arg(long, value_parser = backend::parser(), default_value_t = Backend::Mock)]
    pub backend: Backend,
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
    /// How many times a connection's queue pair retransmits an operation the peer does not
    /// acknowledge before it fails it and the connection breaks (`ConnCfg::with_retry_count`,
    /// 0..=7; default 7, librpma's). On IB/RoCE the connecting side's value serves both queue
    /// pairs.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub retry_count: Option<u8>,
    /// The local ACK timeout of a connection's queue pair as an exponent: it waits about
    /// 4.096 us * 2^N for an acknowledgement before it retransmits (`ConnCfg::with_ack_timeout`,
    /// 1..=31; default: the connection manager's, as librpma). A dead peer is given up after
    /// about (retry count + 1) * 4.096 us * 2^N.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub ack_timeout: Option<u8>,
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

/// `rpma bench`'s arguments parsed from `line` (the words after `bench`), for the tests of the
/// modules that take them.
#[cfg(test)]
pub(crate) fn parse(line: &[&str]) -> Result<BenchArgs, clap::Error> {
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: BenchArgs,
    }

    Cli::try_parse_from(std::iter::once("bench").chain(line.iter().copied())).map(|c| c.args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &[&str]) -> Result<BenchArgs, clap::Error> {
        parse(line)
    }

    #[test]
    fn formats_follow_flags() {
        assert_eq!(format(&args(&[]).unwrap()), OutputFormat::Table);
        assert_eq!(format(&args(&["--json"]).unwrap()), OutputFormat::Json);
        assert_eq!(format(&args(&["--csv"]).unwrap()), OutputFormat::Csv);
    }
}

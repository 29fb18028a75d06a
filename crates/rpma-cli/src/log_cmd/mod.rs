//! `rpma log`: the replicated persistent log of `rpma-log` (docs/log.md) from the command line.
//!
//! - `rpma log serve` runs one replica: it owns a region (`--pmem PATH`, `--file PATH` or DRAM of
//!   `--size` bytes, set up by the scenarios' [`Mem`](rpma_scenarios::common::Mem)), formats
//!   it as an empty log (or opens the log it already holds) and answers writers' connection
//!   requests on `--addr`:`--port` until it is killed (or `--duration` ends).
//! - `rpma log bench` runs a writer against `--replicas ADDR:PORT,...` (replicas served by `rpma
//!   log serve`), or against `--replicas N` (1 to 3) replicas it serves itself in threads of
//!   this process, and measures append + sync at queue depth 1 (`qd1`: latency percentiles) and
//!   pipelined appends with one sync per `--group` appends (`group-commit`: group commit), as a
//!   table or JSON (`--json`; each result has `synced_appends_per_s`, and the writer thread's CPU
//!   time per synced append, `cpu_ns_per_append`, with the writer spinning or, `--wait sleep`,
//!   sleeping on the completion channels). With `--baseline` it
//!   measures, in the same process and against regions of its own, the same work written by
//!   hand with the plain rpma API (`log_cmd/baseline.rs`), each mode alternating with the log's for
//!   `--rounds` rounds, and reports the ratios of the medians. `--mode failover` has new writers
//!   take the log over from the running one (`--takeovers` times, `--fill` bytes of history) and
//!   reports each phase of a takeover and the whole in queue-depth-1 syncs of the same run.
//!
//! One file a concept: the command line (`options`), the replica (`serve`), the writer's
//! measurement (`bench`), the takeovers' (`failover`), the hand-written baseline (`baseline`) and
//! the report (`report`).

mod baseline;
mod bench;
mod failover;
mod handshake;
mod options;
mod report;
mod serve;

use anyhow::{Context, Result};

pub(crate) use options::LogArgs;

use bench::bench;
use options::LogCmd;
use serve::serve;

/// Runs `rpma log`.
///
/// # Errors
/// As [`serve`] and [`bench()`]; bad arguments are usage errors.
pub(crate) fn run(a: LogArgs) -> Result<()> {
    match a.cmd {
        None => Err(rpma_scenarios::usage::usage(&anyhow::anyhow!("`rpma log` needs a command: serve or bench"))),
        Some(LogCmd::Serve(s)) => serve(&s),
        Some(LogCmd::Bench(b)) => {
            let report = bench(&b)?;
            let mut out = std::io::stdout().lock();
            report.write(b.json, &mut out).context("writing the report")
        }
    }
}

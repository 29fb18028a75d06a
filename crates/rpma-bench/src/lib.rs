//! # rpma-bench: the engine of `rpma bench`, a perftest-class benchmark of the data path
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
//!
//! [`BenchArgs`] are the benchmark's arguments as the `rpma` command's `bench` subcommand takes
//! them (clap); [`plan()`] checks them into a [`Plan`], [`measure`] runs it and returns a
//! [`BenchReport`], which [`BenchReport::write`] prints as a table, JSON or CSV. The report's
//! JSON schema is in `docs/bench.md`.
#![forbid(unsafe_code)]

mod args;
mod engine;
mod flush_rule;
pub mod footprint;
mod op;
mod plan;
mod report;
mod sizes;

use anyhow::Result;
use rpma::any::{Backend, WithTransport};
use rpma_scenarios::backend::{dispatch, dispatch_between_processes};
use rpma_scenarios::common::MapFile;
use rpma_scenarios::usage::usage;

pub use args::{format, BenchArgs, DEFAULT_CQ_MOD, DEFAULT_PORT, DEFAULT_TIMEOUT_S};
pub use flush_rule::FlushRule;
pub use footprint::Footprint;
pub use op::{Op, ASYNC_OPS};
pub use plan::{parse_target, plan, Amount, Plan, Role, MAX_BATCH, MAX_CHAIN_PIECES, MAX_QD, MAX_SGE};
pub use report::{BenchReport, Latency, OutputFormat, RunResult};
pub use sizes::{parse_size, parse_sweep, Sweep, MAX_SIZE};

struct Work<'a>(&'a Plan, Backend, Option<MapFile>);

impl WithTransport for Work<'_> {
    type Output = Result<BenchReport>;
    fn run<T: rpma::Transport>(self, transport: T) -> Result<BenchReport> {
        // Before anything is allocated: a run that cannot fit is refused, not swapped or killed.
        footprint::check_fits(self.0, footprint::mem_available())?;
        engine::run(&transport, self.0, self.1, self.2)
    }
}

/// Runs the benchmark `args` describe and returns its report (empty for `--server`). A server's
/// `--pmem` is mapped by `map` (the program's own: mapping a file is `unsafe`, rule M5 of
/// `docs/memory.md`); without one, `--pmem` fails the run.
///
/// # Errors
/// Invalid arguments (a [`UsageError`](rpma_scenarios::usage::UsageError)), an unavailable
/// backend, or any failure of a connection or an operation.
pub fn measure(args: &BenchArgs, map: Option<MapFile>) -> Result<BenchReport> {
    let plan = plan(args).map_err(|e| usage(&e))?;
    if plan.role == Role::Loopback {
        dispatch(args.backend, Work(&plan, args.backend, map))
    } else {
        // Two processes: the mock meets its peer through its rendezvous directory.
        dispatch_between_processes(args.backend, Work(&plan, args.backend, map))
    }
}

/// Runs the benchmark `args` describe on `transport` (whatever `--backend` says): for tests, e.g.
/// on a mock fabric with faults armed.
///
/// # Errors
/// As [`measure`].
pub fn measure_on<T: rpma::Transport>(transport: T, args: &BenchArgs, map: Option<MapFile>) -> Result<BenchReport> {
    let plan = plan(args).map_err(|e| usage(&e))?;
    Work(&plan, args.backend, map).run(transport)
}

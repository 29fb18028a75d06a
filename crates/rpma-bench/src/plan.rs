//! The benchmark's settings, checked: [`plan`] turns [`BenchArgs`] into a [`Plan`] or refuses
//! them naming the argument at fault.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use rpma::any::Backend;
use rpma::{ConnCfg, Transport};

use super::args::BenchArgs;
use super::flush_rule::FlushRule;
use super::op::{Op, ASYNC_OPS};
use super::sizes::MAX_SIZE;
use rpma_scenarios::args;

/// The largest queue depth accepted.
pub const MAX_QD: usize = 4096;

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
    /// The connections' retry count and ACK timeout.
    pub retry: Retry,
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

/// How long the benchmark's connections retry before they give up on a peer (`--retry-count`,
/// `--ack-timeout`; `None`: [`ConnCfg`]'s default). The values are passed on as they are:
/// rpma-core checks them when a connection request is made, so an out-of-range value fails the
/// first connection (or, on a `--server`, the first request that comes) with rpma's message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retry {
    /// `ConnCfg::with_retry_count`.
    pub count: Option<u8>,
    /// `ConnCfg::with_ack_timeout`.
    pub ack_timeout: Option<u8>,
}

impl Retry {
    /// `cfg` with these settings.
    #[must_use]
    pub fn apply<T: Transport>(self, cfg: ConnCfg<T>) -> ConnCfg<T> {
        let cfg = match self.count {
            Some(n) => cfg.with_retry_count(n),
            None => cfg,
        };
        match self.ack_timeout {
            Some(n) => cfg.with_ack_timeout(n),
            None => cfg,
        }
    }
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
    if ops.contains(&Op::Connect) {
        check_connect(args, &ops)?;
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
    if args.backend != Backend::Verbs && (args.pmem.is_some() || !flush_rules.is_empty()) {
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
        retry: Retry { count: args.retry_count, ack_timeout: args.ack_timeout },
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
    if let Some(op) = ops.iter().find(|op| !ASYNC_OPS.contains(op)) {
        bail!("--async measures the one-sided operations ({}), not {}", ASYNC_OPS.map(Op::name).join(", "), op.name());
    }
    if args.batch > 1 || args.sge > 1 || args.inline {
        bail!("--async posts each operation on its own from one registered piece: no --batch, --sge or --inline");
    }
    if args.server {
        bail!("--async is the client's way of posting: the server (--server) has no use for it");
    }
    Ok(())
}

/// `--op connect` alone, one connection at a time: nothing that shapes operations applies.
fn check_connect(args: &BenchArgs, ops: &[Op]) -> Result<()> {
    if ops.len() > 1 {
        bail!("--op connect measures connection setup: run it on its own, not with other operations");
    }
    let shaped = [
        (args.qd != 1, "--qd"),
        (args.conns != 1, "--conns"),
        (args.threads != 1, "--threads"),
        (args.batch != 1, "--batch"),
        (args.sge != 1, "--sge"),
        (args.inline, "--inline"),
        (args.async_api, "--async"),
        (args.baseline, "--baseline"),
    ];
    if let Some((_, name)) = shaped.iter().find(|(given, _)| *given) {
        bail!("--op connect sets up one connection at a time and posts nothing: {name} does not apply");
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{parse as args, DEFAULT_CQ_MOD};

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

    /// `--retry-count` and `--ack-timeout` reach the plan as given (rpma-core checks their
    /// ranges when a connection is made) and the connection configuration as its settings.
    #[test]
    fn retry_count_and_ack_timeout_are_passed_on() {
        assert_eq!(plan_of(&[]).unwrap().retry, Retry::default());
        let p = plan_of(&["--retry-count", "0", "--ack-timeout", "14"]).unwrap();
        assert_eq!(p.retry, Retry { count: Some(0), ack_timeout: Some(14) });
        let cfg = p.retry.apply(ConnCfg::<rpma::mock::MockFabric>::new());
        assert_eq!((cfg.retry_count(), cfg.ack_timeout()), (0, Some(14)));
        let cfg = Retry::default().apply(ConnCfg::<rpma::mock::MockFabric>::new());
        assert_eq!(
            (cfg.retry_count(), cfg.ack_timeout()),
            (ConnCfg::<rpma::mock::MockFabric>::DEFAULT_RETRY_COUNT, None)
        );
        assert_eq!(plan_of(&["--retry-count", "8"]).unwrap().retry.count, Some(8), "checked by rpma-core");
        assert!(err_of(&["--retry-count", "256"]).contains("--retry-count"));
        assert!(err_of(&["--ack-timeout=-1"]).contains("--ack-timeout"));
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
}

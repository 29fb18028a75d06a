//! # rpma-cli: the `rpma` command
//!
//! The front door of rpma-rs; `rpma --help`, `rpma <command> --help` and docs/cli.md say how to
//! use it:
//!
//! - `rpma demo` runs every scenario in one process on the in-memory mock fabric (server and
//!   client as threads) and prints what was written, flushed, read and received;
//! - `rpma devices` shows what rpma needs to know about the RDMA devices (capabilities, limits,
//!   addresses);
//! - `rpma server` / `rpma client` run one side of a scenario so that two processes talk: over
//!   verbs (two machines too; the other side may be the C program built from librpma's example
//!   of the same number), or over the mock's cross-process mode on one host (as
//!   `rpma demo --two-process` does);
//! - `rpma scenarios` lists the scenarios, `rpma bench` benchmarks the data path, `rpma log`
//!   serves and measures the replicated log.
//!
//! The crate is the command alone: its arguments (clap), its output and the dispatch to the
//! crates that do the work: the scenarios (librpma's examples) and their toolkit are
//! `rpma-scenarios`, the benchmark's engine is `rpma-bench`, the replicated log is `rpma-log`.
//! Here are the device information (`devices`), the `rpma log` command (`log_cmd`: a replica's
//! serving loop, and the writer's measurement with its hand-written baseline), the command's
//! output (`out`) and its one `unsafe` call (`file_map`: mapping a `--file`).
// One module maps `--file` (an `unsafe` call of rpma-mem, rule M5); everything else is safe.
#![deny(unsafe_code)]

mod devices;
mod file_map;
mod log_cmd;
mod out;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, CommandFactory, Parser, Subcommand};
use devices::DeviceInfo;
use rpma::any::{AnyTransport, Backend, WithTransport};
use rpma_scenarios::backend::{self, dispatch, dispatch_between_processes};
use rpma_scenarios::stderr::err_line;
use rpma_scenarios::usage::usage;
use rpma_scenarios::{ClientOpts, Scenario, ServerOpts, SrqRcq, ALL};

/// `rpma --version`: the version and the backends this binary has. The facade's features decide
/// them (a workspace build may give it verbs though this crate's `verbs` feature is off), so they
/// are asked of the facade, not of this crate's features.
const VERSION: &str = match (Backend::Mock.is_compiled_in(), Backend::Verbs.is_compiled_in()) {
    (true, true) => concat!(env!("CARGO_PKG_VERSION"), " (backends: mock, verbs)"),
    (true, false) => concat!(env!("CARGO_PKG_VERSION"), " (backends: mock)"),
    (false, true) => concat!(env!("CARGO_PKG_VERSION"), " (backends: verbs)"),
    (false, false) => concat!(env!("CARGO_PKG_VERSION"), " (backends: none)"),
};

const AFTER_HELP: &str = "\
Start here:
  rpma demo                      every librpma example, server and client in this process (mock)
  rpma demo -s atomic-write      one scenario
  rpma scenarios                 what each scenario does
  rpma devices                   devices and what they can do (--json for scripts)
  rpma bench --op write,read     the data path's latency and bandwidth (see `rpma bench --help`)
  rpma log bench --replicas 3    the replicated log: append + sync latency, group commit (rpma-log)

Two processes on the mock (one host; RPMA_MOCK_RENDEZVOUS or a private directory):
  rpma server --backend mock --addr 127.0.0.1 --scenario messages-ping-pong
  rpma client --backend mock --addr 127.0.0.1 --scenario messages-ping-pong
Two processes over RDMA (a build with `--features verbs`):
  rpma server --backend verbs --addr 10.77.0.1 --scenario flush-to-persistent --file /mnt/pmem/f --file-create --direct-pmem-write
  rpma client --backend verbs --addr 10.77.0.1 --scenario flush-to-persistent
Either side may be the C program of the librpma example with the same number.";

/// rpma: remote persistent memory access over RDMA (librpma's API in Rust).
///
/// Runs librpma's examples as scenarios (in one process on the in-memory mock fabric, or as
/// two processes over RDMA), shows what the RDMA devices can do, and benchmarks the data path.
#[derive(Parser, Debug)]
#[command(name = "rpma", version = VERSION, subcommand_required = true, after_help = AFTER_HELP)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run every scenario (or those named) in this process on the mock fabric, server and
    /// client(s) as threads, and report what each side wrote, flushed, read and received.
    ///
    /// Each scenario checks what one side saw against what the other did, and what reached
    /// the server's file for the persistent ones. Exits non-zero if any scenario fails.
    Demo(DemoArgs),
    /// Show the RDMA devices: addresses, ports and their state, GIDs, maximum message size,
    /// on-demand paging, native atomic write and flush, queue and SRQ limits.
    Devices(DevicesArgs),
    /// Run the server side of a scenario (listens on --addr:--port).
    Server(ServerArgs),
    /// Run the client side of a scenario (connects to --addr:--port).
    Client(ClientArgs),
    /// List the scenarios and the librpma example each follows.
    Scenarios,
    /// Benchmark the data path (read, write, flush, atomic write, send/recv ping-pongs):
    /// latency percentiles, bandwidth and message rate, as a table, JSON or CSV.
    Bench(rpma_bench::BenchArgs),
    /// The replicated persistent log (rpma-log): `rpma log serve` runs a replica, `rpma log
    /// bench` a writer measuring append + sync and group commit (docs/log.md).
    Log(log_cmd::LogArgs),
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// Run only this scenario (repeatable; a name or the example's number, e.g. 07).
    #[arg(short, long = "scenario", value_name = "NAME")]
    scenarios: Vec<Scenario>,
    /// Keep the scenarios' files (the servers' "persistent" memory) in this directory instead
    /// of a temporary one removed at the end.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Give the mock device native flush and native atomic write (by default it has neither,
    /// so both are emulated); each report says which path its flushes and atomic writes took.
    #[arg(long)]
    native: bool,
    /// Run each scenario as processes: `rpma server` and its `rpma client`(s), connected through
    /// the mock's cross-process mode (a private rendezvous directory of this run), each
    /// scenario bounded by 60 s.
    #[arg(long, conflicts_with = "native")]
    two_process: bool,
    /// Run the persistence scenarios (04, 05, 07, 09) under every crash point of the server's
    /// node on the mock's persistence model: the power is cut right after each event, and what
    /// the client was told is durable must be in what the server's memory kept (unflushed bytes
    /// lost, then torn per 64-byte line; docs/persistence.md). Exits 1 on any violation.
    #[arg(long, conflicts_with_all = ["native", "two_process"])]
    power_cut: bool,
}

#[derive(Args, Debug)]
struct DevicesArgs {
    /// Print JSON (an array of devices) instead of text.
    #[arg(long)]
    json: bool,
    /// The backend whose devices to show.
    #[arg(long, value_parser = backend::parser(), default_value_t = Backend::Mock)]
    backend: Backend,
    /// Query only the device owning this local IP address (verbs).
    #[arg(long)]
    addr: Option<String>,
}

#[derive(Args, Debug)]
struct Conn {
    /// The scenario to run (see `rpma scenarios`; a name or the example's number).
    #[arg(short, long, value_name = "NAME")]
    scenario: Scenario,
    /// The transport: RDMA (verbs), or the mock, whose server and client processes meet through
    /// its rendezvous directory on this host (`RPMA_MOCK_RENDEZVOUS`, else a private directory
    /// of this user).
    #[arg(long, value_parser = backend::parser(), default_value_t = Backend::Verbs)]
    backend: Backend,
    /// The server's IP address (an address of an RDMA interface; RDMA CM does not route
    /// 127.0.0.1).
    #[arg(long)]
    addr: String,
    /// The server's port (1 to 65535: the rpma API cannot tell which port 0 would pick).
    #[arg(long, default_value_t = 7204, value_parser = rpma_scenarios::args::port, allow_negative_numbers = true)]
    port: u16,
    /// Use this file as the side's memory (the first bytes hold the examples' signature):
    /// read-to-persistent, write-to-persistent, flush-to-persistent, atomic-write and
    /// flush-to-persistent-gpspm(-shared-channel). It must exist and be long enough, unless --file-create. The
    /// memory is a shared mapping of the file (MAP_SYNC where the file system offers it), so a
    /// peer's writes and flushes land in the file itself. While rpma runs, no other program may
    /// truncate or write the file.
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
    /// Create the --file if it is missing and extend it with zeros if it is too short (once
    /// this side holds its range of the file: see --pmem; it never shortens the file).
    #[arg(long, requires = "file")]
    file_create: bool,
    /// Use this persistent memory as the side's memory, as --file does: a devdax device
    /// (/dev/daxN.M) or a file of a DAX file system (mapped with MAP_SYNC; anything else is
    /// refused). Its range (--file-offset, the side's size) is locked, as a --file's is: a second
    /// server on the same range is refused. The server of flush-to-persistent declares direct write to PMem.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["file", "file_create"])]
    pmem: Option<PathBuf>,
    /// Where the side's memory starts in the --file or --pmem (bytes; a multiple of the page
    /// size, or of the devdax device's alignment, 2 MiB usually).
    #[arg(long, value_name = "BYTES", default_value_t = 0, value_parser = rpma_scenarios::args::u64_arg, allow_negative_numbers = true)]
    file_offset: u64,
}

impl Conn {
    /// `--pmem` is `--file` that must be persistent memory.
    fn take_pmem(&mut self) {
        if let Some(p) = self.pmem.take() {
            self.file = Some(p);
        }
    }
}

#[derive(Args, Debug)]
struct ServerArgs {
    #[command(flatten)]
    conn: Conn,
    /// flush-to-persistent: declare that writes land directly in persistent memory, so the
    /// client flushes with the PERSISTENT type (needs --file).
    #[arg(long)]
    direct_pmem_write: bool,
    /// multiple-connections(-shared-channel), messages-ping-pong-with-srq: how many clients to serve (1 to 10).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=10))]
    clients: u16,
    /// srq-ping-pong: where receive completions land.
    #[arg(long, value_enum, default_value_t = SrqRcq::Srq)]
    srq_rcq: SrqRcq,
}

#[derive(Args, Debug)]
struct ClientArgs {
    #[command(flatten)]
    conn: Conn,
    /// atomic-write: a word to append to the server's log (repeatable); send-with-imm: the
    /// message (without it, a 0-byte send carries only the immediate data).
    #[arg(long = "word", value_name = "WORD")]
    words: Vec<String>,
    /// send-with-imm, write-with-imm: the immediate data (0 to 4294967295).
    #[arg(long, default_value_t = 1234, value_parser = rpma_scenarios::args::u32_arg, allow_negative_numbers = true)]
    imm: u32,
    /// Ping-pong scenarios: the first value sent.
    #[arg(long, default_value_t = 0, value_parser = rpma_scenarios::args::u64_arg, allow_negative_numbers = true)]
    counter: u64,
    /// Ping-pong scenarios: the number of round trips.
    #[arg(long, default_value_t = 3, value_parser = rpma_scenarios::args::u64_arg, allow_negative_numbers = true)]
    rounds: u64,
    /// multiple-connections: the name to expose (at most 31 bytes are sent).
    #[arg(long)]
    name: Option<String>,
    /// Connection attempts repeated when the server rejects or cannot be reached yet.
    #[arg(long, default_value_t = 10, value_parser = rpma_scenarios::args::u32_arg, allow_negative_numbers = true)]
    retries: u32,
    /// Milliseconds between connection attempts.
    #[arg(long, default_value_t = 500, value_name = "MS", value_parser = rpma_scenarios::args::u64_arg, allow_negative_numbers = true)]
    retry_delay: u64,
}

fn uses_file(s: Scenario) -> bool {
    matches!(
        s,
        Scenario::ReadToPersistent
            | Scenario::WriteToPersistent
            | Scenario::FlushToPersistent
            | Scenario::AtomicWrite
            | Scenario::FlushToPersistentGpspm
            | Scenario::FlushToPersistentGpspmSharedChannel
    )
}

fn check_conn(c: &Conn, server: bool) -> Result<()> {
    if c.pmem.is_some() && !uses_file(c.scenario) {
        bail!("--pmem is not used by {} (see `rpma server --help`)", c.scenario.name());
    }
    if c.file_offset != 0 && c.file.is_none() && c.pmem.is_none() {
        bail!("--file-offset needs --file or --pmem");
    }
    if c.file.is_some() && !uses_file(c.scenario) {
        bail!("--file is not used by {} (see `rpma server --help`)", c.scenario.name());
    }
    if c.file.is_some() && c.scenario == Scenario::AtomicWrite && !server {
        bail!("--file is used by the atomic-write server only");
    }
    Ok(())
}

/// Before connecting anything: a file that cannot serve is refused (a run-time error, exit 1:
/// the arguments agree, the file system does not).
fn check_file(c: &Conn, server: bool) -> Result<()> {
    if let (Some(path), Some(len)) = (&c.file, c.scenario.file_len(server)) {
        rpma_scenarios::common::check_file(path, len, c.file_create)?;
    }
    Ok(())
}

struct Server(Scenario, ServerOpts);
impl WithTransport for Server {
    type Output = Result<Vec<String>>;
    fn run<T: rpma::Transport>(self, t: T) -> Result<Vec<String>> {
        Ok(self.0.server(&t, &self.1)?.lines())
    }
}

struct Client(Scenario, ClientOpts);
impl WithTransport for Client {
    type Output = Result<Vec<String>>;
    fn run<T: rpma::Transport>(self, t: T) -> Result<Vec<String>> {
        Ok(self.0.client(&t, &self.1)?.lines())
    }
}

fn server(mut a: ServerArgs) -> Result<ExitCode> {
    check_server(&a).map_err(|e| usage(&e))?;
    let pmem = a.conn.pmem.is_some();
    a.conn.take_pmem();
    check_file(&a.conn, true)?;
    let s = a.conn.scenario;
    let mut o = ServerOpts::new(&a.conn.addr, &a.conn.port.to_string());
    o.file = a.conn.file;
    o.file_create = a.conn.file_create;
    o.map_file = Some(file_map::map_file);
    o.file_offset = a.conn.file_offset;
    o.pmem = pmem;
    o.direct_write_to_pmem = a.direct_pmem_write || (pmem && s == Scenario::FlushToPersistent);
    o.clients = usize::from(a.clients);
    o.srq_rcq = a.srq_rcq;
    outln!("{} server ({}) on {}:{}", s.name(), s.example(), o.addr, o.port)?;
    for l in dispatch_between_processes(a.conn.backend, Server(s, o))? {
        outln!("  {l}")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The server's arguments against each other (a usage error if they disagree).
fn check_server(a: &ServerArgs) -> Result<()> {
    check_conn(&a.conn, true)?;
    let s = a.conn.scenario;
    if a.direct_pmem_write && s != Scenario::FlushToPersistent {
        bail!("--direct-pmem-write is used by flush-to-persistent only");
    }
    if a.clients != 1
        && !matches!(
            s,
            Scenario::MultipleConnections
                | Scenario::MultipleConnectionsSharedChannel
                | Scenario::MessagesPingPongWithSrq
        )
    {
        bail!("--clients is used by multiple-connections(-shared-channel) and messages-ping-pong-with-srq only");
    }
    Ok(())
}

/// The client's arguments against each other (a usage error if they disagree).
fn check_client(a: &ClientArgs) -> Result<()> {
    check_conn(&a.conn, false)?;
    let s = a.conn.scenario;
    if s == Scenario::AtomicWrite && a.words.is_empty() {
        bail!("atomic-write needs at least one --word");
    }
    if !a.words.is_empty() && !matches!(s, Scenario::AtomicWrite | Scenario::SendWithImm) {
        bail!("--word is used by atomic-write and send-with-imm only");
    }
    if a.rounds == 0 && s.is_ping_pong() {
        bail!("--rounds must be at least 1");
    }
    Ok(())
}

fn client(mut a: ClientArgs) -> Result<ExitCode> {
    check_client(&a).map_err(|e| usage(&e))?;
    let pmem = a.conn.pmem.is_some();
    a.conn.take_pmem();
    check_file(&a.conn, false)?;
    let s = a.conn.scenario;
    let mut o = ClientOpts::new(&a.conn.addr, &a.conn.port.to_string());
    o.file = a.conn.file;
    o.file_create = a.conn.file_create;
    o.map_file = Some(file_map::map_file);
    o.file_offset = a.conn.file_offset;
    o.pmem = pmem;
    o.words = a.words;
    o.imm = a.imm;
    o.counter = a.counter;
    o.rounds = a.rounds;
    o.name = a.name;
    o.retries = a.retries;
    o.retry_delay = Duration::from_millis(a.retry_delay);
    outln!("{} client ({}) to {}:{}", s.name(), s.example(), o.addr, o.port)?;
    for l in dispatch_between_processes(a.conn.backend, Client(s, o))? {
        outln!("  {l}")?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(feature = "mock")]
fn demo(a: DemoArgs) -> Result<ExitCode> {
    use rpma_scenarios::DemoEnv;

    let list: Vec<Scenario> = if a.scenarios.is_empty() { ALL.to_vec() } else { a.scenarios };
    let tmp;
    let dir = match a.dir {
        Some(d) => {
            std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
            d
        }
        None => {
            tmp = tempfile::Builder::new().prefix("rpma-demo").tempdir().context("creating a temporary directory")?;
            tmp.path().to_path_buf()
        }
    };
    if a.two_process {
        return demo_processes(&list, &dir);
    }
    if a.power_cut {
        let list = if list.len() == ALL.len() { rpma_scenarios::power_cut::SCENARIOS.to_vec() } else { list };
        return demo_power_cut(&list, &dir);
    }
    let native = if a.native { "with" } else { "without" };
    let fabric = || rpma::mock::MockFabric::builder().native(a.native, a.native).try_build();
    // A bad RPMA_MOCK_MODE ends the demo before any scenario runs.
    let mode = fabric().context("the mock fabric")?.mode();
    outln!(
        "rpma demo: {} scenario(s) on the in-memory mock fabric ({mode} mode, {native} native flush and atomic \
         write), server and client(s) as threads\n",
        list.len()
    )?;
    let mut failed = Vec::new();
    for s in &list {
        // A fresh fabric per scenario: nothing of one run can leak into the next.
        let fabric = fabric().context("the mock fabric")?;
        let env = DemoEnv::new(&dir, file_map::map_file);
        let r = s.demo(&fabric, &env);
        let verdict = if r.is_ok() { "PASS" } else { "FAIL" };
        outln!("{:<40} {:<42} {verdict}", s.name(), format!("({})", s.example()))?;
        match r {
            Ok(lines) => {
                for l in lines {
                    outln!("    {l}")?;
                }
            }
            Err(e) => {
                outln!("    error: {}", one_line(&e))?;
                err_line(format_args!("rpma: {} failed: {}", s.name(), one_line(&e)));
                failed.push(s.name());
            }
        }
        outln!("")?;
    }
    demo_summary(list.len(), &failed)
}

/// `rpma demo --two-process`: each scenario as `rpma server` and `rpma client` processes of this
/// binary on the mock's cross-process mode, meeting in a rendezvous directory of this run.
#[cfg(feature = "mock")]
fn demo_processes(list: &[Scenario], dir: &std::path::Path) -> Result<ExitCode> {
    use rpma_scenarios::processes::Launch;

    // A bad RPMA_MOCK_MODE ends the demo before any process starts.
    let mode = rpma::mock::MockFabric::try_new().context("the mock fabric")?.mode();
    let rv = tempfile::Builder::new().prefix("rpma-rendezvous").tempdir().context("creating a rendezvous directory")?;
    let launch = Launch {
        program: std::env::current_exe().context("the path of this rpma")?,
        backend: "mock".to_owned(),
        addr: "127.0.0.1".to_owned(),
        env: vec![(rpma::mock::RENDEZVOUS_ENV.to_owned(), rv.path().join("rv").into_os_string())],
        timeout: Duration::from_secs(60),
    };
    outln!(
        "rpma demo: {} scenario(s) on the mock fabric's cross-process mode ({mode} mode), server and client(s) \
         as processes meeting in {}\n",
        list.len(),
        rv.path().display()
    )?;
    let mut failed = Vec::new();
    for (i, s) in list.iter().enumerate() {
        let sdir = dir.join(s.name());
        std::fs::create_dir_all(&sdir).with_context(|| format!("creating {}", sdir.display()))?;
        let port = 7204 + u16::try_from(i).unwrap_or(0);
        let (ok, report) = launch.run(*s, port, &sdir)?;
        let verdict = if ok { "PASS" } else { "FAIL" };
        outln!("{:<40} {:<42} {verdict}", s.name(), format!("({})", s.example()))?;
        for l in report.lines() {
            outln!("    {l}")?;
        }
        if !ok {
            err_line(format_args!("rpma: {} failed as processes", s.name()));
            failed.push(s.name());
        }
        outln!("")?;
    }
    demo_summary(list.len(), &failed)
}

/// `rpma demo --power-cut`: each persistence scenario under every crash point of its server's
/// node (rpma_scenarios::power_cut).
#[cfg(feature = "mock")]
fn demo_power_cut(list: &[Scenario], dir: &std::path::Path) -> Result<ExitCode> {
    outln!(
        "rpma demo --power-cut: {} scenario(s) on the mock's persistence model, the server's node cut after every \
         event (deferred mode)\n",
        list.len()
    )?;
    let mut failed = Vec::new();
    for s in list {
        let r = rpma_scenarios::power_cut::lines(*s, dir, file_map::map_file);
        let verdict = if matches!(r, Ok((true, _))) { "PASS" } else { "FAIL" };
        outln!("{:<40} {:<42} {verdict}", s.name(), format!("({})", s.example()))?;
        match r {
            Ok((_, lines)) => {
                for l in lines {
                    outln!("    {l}")?;
                }
            }
            Err(e) => outln!("    error: {}", one_line(&e))?,
        }
        if verdict == "FAIL" {
            err_line(format_args!("rpma: {} failed under power cuts", s.name()));
            failed.push(s.name());
        }
        outln!("")?;
    }
    demo_summary(list.len(), &failed)
}

/// The demo's last line, and its exit code: 1 if any scenario failed (named on stderr).
#[cfg(feature = "mock")]
fn demo_summary(total: usize, failed: &[String]) -> Result<ExitCode> {
    outln!("{} passed, {} failed", total - failed.len(), failed.len())?;
    if failed.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        err_line(format_args!("rpma: failed: {}", failed.join(", ")));
        Ok(ExitCode::FAILURE)
    }
}

#[cfg(not(feature = "mock"))]
fn demo(_a: DemoArgs) -> Result<ExitCode> {
    bail!("`rpma demo` runs on the mock fabric: rebuild with the `mock` feature (the default)")
}

struct Query(String);
impl WithTransport for Query {
    type Output = Result<(String, devices::CapsInfo)>;
    fn run<T: rpma::Transport>(self, t: T) -> Self::Output {
        devices::query(&t, &self.0)
    }
}

fn devices_cmd(a: &DevicesArgs) -> Result<ExitCode> {
    let devs: Vec<DeviceInfo> = match a.backend {
        Backend::Mock => mock_devices(a.addr.as_deref())?,
        Backend::Verbs => {
            let mut devs = devices::sysfs_devices(std::path::Path::new("/sys"));
            if let Some(addr) = &a.addr {
                let (name, caps) = dispatch(Backend::Verbs, Query(addr.clone()))?;
                devs.retain(|d| d.name == name);
                if devs.is_empty() {
                    devs.push(DeviceInfo {
                        backend: "verbs".into(),
                        name,
                        addresses: vec![addr.clone()],
                        ports: Vec::new(),
                        capabilities: None,
                        note: None,
                    });
                }
                devs[0].capabilities = Some(caps);
            } else {
                for d in &mut devs {
                    match d.addresses.first() {
                        Some(addr) => match dispatch(Backend::Verbs, Query(addr.clone())) {
                            Ok((_, caps)) => d.capabilities = Some(caps),
                            Err(e) => d.note = Some(one_line(&e)),
                        },
                        None => d.note = Some("no IP address on its network interfaces".into()),
                    }
                }
            }
            devs
        }
        other => bail!("rpma devices cannot list the devices of the {other} backend"),
    };
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&devs)?)?;
    } else {
        out::text(&devices::render(&devs))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn mock_devices(addr: Option<&str>) -> Result<Vec<DeviceInfo>> {
    let mut devs = match Backend::Mock.open()? {
        #[cfg(feature = "mock")]
        AnyTransport::Mock(fabric) => devices::mock_devices(&fabric),
        other => bail!("the mock backend opened as {}", other.backend()),
    };
    if let Some(addr) = addr {
        devs.retain(|d| d.addresses.iter().any(|a| a == addr));
        if devs.is_empty() {
            bail!("no mock device owns {addr}");
        }
    }
    Ok(devs)
}

fn scenarios_cmd() -> Result<ExitCode> {
    outln!("{:<40} {:<42} what flows", "scenario", "librpma example")?;
    for s in ALL {
        let about = clap::ValueEnum::to_possible_value(&s)
            .and_then(|v| v.get_help().map(ToString::to_string))
            .unwrap_or_default();
        let about = about.split_once(": ").map_or(about.as_str(), |(_, a)| a).to_owned();
        outln!("{:<40} {:<42} {about}", s.name(), s.example())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `rpma bench`: runs the benchmark and prints its report on stdout (a `--server` prints none).
fn bench(args: &rpma_bench::BenchArgs) -> Result<ExitCode> {
    let report = rpma_bench::measure(args, Some(file_map::map_file))?;
    if !args.server {
        let mut out = std::io::stdout().lock();
        report.write(rpma_bench::format(args), &mut out).context("writing the report")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// An error and its causes on one line.
fn one_line(e: &anyhow::Error) -> String {
    format!("{e:#}").replace('\n', " ")
}

/// The command a command line runs, as its help is asked for: `rpma`, then each word of the
/// line that names a subcommand of the one before (`rpma log bench` for `rpma log bench
/// --bogus`), up to the first that does not.
fn command_of(args: impl IntoIterator<Item = std::ffi::OsString>) -> String {
    let mut cmd = Cli::command();
    let mut path = cmd.get_name().to_owned();
    for arg in args.into_iter().skip(1) {
        let Some(sub) = arg.to_str().and_then(|a| cmd.find_subcommand(a)).cloned() else { break };
        path.push(' ');
        path.push_str(sub.get_name());
        cmd = sub;
    }
    path
}

fn main() -> ExitCode {
    let command = command_of(std::env::args_os());
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind as K;
            if matches!(e.kind(), K::DisplayHelp | K::DisplayVersion) {
                // Help on a closed pipe or a full device: nothing more to say, as for any output.
                let text = e.render().to_string();
                return out::exit_code(out::text(&text).map(|()| ExitCode::SUCCESS), &command);
            }
            let msg = if matches!(e.kind(), K::DisplayHelpOnMissingArgumentOrSubcommand | K::MissingSubcommand) {
                "a command is required: demo, devices, server, client, scenarios, bench or log".to_owned()
            } else {
                // clap's message without its usage block, on one line.
                let text = e.render().to_string();
                let lines: Vec<&str> = text.lines().take_while(|l| !l.trim().is_empty()).map(str::trim).collect();
                lines.join(" ").trim_start_matches("error: ").to_owned()
            };
            err_line(format_args!("rpma: {msg} (see '{command} --help')"));
            return ExitCode::from(2);
        }
    };
    let r = match cli.cmd {
        Cmd::Demo(a) => demo(a),
        Cmd::Devices(a) => devices_cmd(&a),
        Cmd::Server(a) => server(a),
        Cmd::Client(a) => client(a),
        Cmd::Scenarios => scenarios_cmd(),
        Cmd::Bench(a) => bench(&a),
        Cmd::Log(a) => log_cmd::run(a).map(|()| ExitCode::SUCCESS),
    };
    out::exit_code(r, &command)
}

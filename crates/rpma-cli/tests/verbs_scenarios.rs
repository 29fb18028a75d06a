//! Every `rpma` scenario on a real RDMA device, twice: in one process (the scenario's `demo`:
//! server and clients in threads on `rpma::verbs::Verbs`, each side checked against the other)
//! and as separate processes of the built `rpma` binary (`rpma server`, then `rpma client`s).
//! Besides, 06scch and 09scch run against C peers (`c_peer::*`: `tests/interop/scch.c`, compiled
//! here against the system's librpma), C server with `rpma client` and `rpma server` with C
//! clients (tests/interop/README.md).
//!
//! The device and address come from `RPMA_TEST_DEVICE` and `RPMA_TEST_ADDR` (the Soft-RoCE VM
//! of `scripts/softroce/run.sh` exports `rxe0` and `10.77.0.1`; `scripts/test-verbs.sh` runs this
//! binary there). Without `RPMA_TEST_DEVICE` the binary prints one line saying the tests were
//! skipped and succeeds (so `cargo test --all-features` passes on hosts without RDMA); with it
//! set, a missing address or a device that is not there fails the run.
#![allow(missing_docs)]

#[path = "../../../tests/interop/cc.rs"]
mod cc;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::thread;
use std::time::Duration;

use libtest_mimic::{Arguments, Failed, Trial};
use rpma::verbs::{Device, Verbs};
use rpma::ContextType;
use rpma_scenarios::common::{hello_bytes, FLUSH_ID, HELLO_STR_OFFSET, HELLO_STR_SIZE, SIGNATURE};
use rpma_scenarios::processes::{self, scenario_args, Launch, Proc};
use rpma_scenarios::s06_multiple_connections::MAX_NAME_SIZE;
use rpma_scenarios::s09_flush_to_persistent_gpspm::{encode_response, FlushRequest};
use rpma_scenarios::{DemoEnv, Scenario, ALL};

/// How long one scenario may take (either way of running it) before it counts as hung.
const TIMEOUT: Duration = Duration::from_secs(120);

struct Env {
    addr: String,
    next_port: AtomicU32,
}

impl Env {
    fn port(&self) -> String {
        self.next_port.fetch_add(1, Ordering::Relaxed).to_string()
    }
}

/// Checks the environment and the device: `Ok(None)` = skip, `Err` = fail loudly.
fn env(listing: bool) -> Result<Option<Env>, String> {
    let dev = std::env::var("RPMA_TEST_DEVICE").ok().filter(|d| !d.is_empty());
    let addr = std::env::var("RPMA_TEST_ADDR").ok().filter(|a| !a.is_empty());
    let Some(dev) = dev else {
        return Ok(None);
    };
    if listing {
        return Ok(None);
    }
    let Some(addr) = addr else {
        return Err(format!("RPMA_TEST_DEVICE={dev} is set but RPMA_TEST_ADDR is not"));
    };
    let d = Device::lookup(&Verbs::new(), &addr, ContextType::Local)
        .map_err(|e| format!("no RDMA device owns {addr} (RPMA_TEST_ADDR): {e}"))?;
    if d.name() != dev {
        return Err(format!("{addr} belongs to device {}, not RPMA_TEST_DEVICE={dev}", d.name()));
    }
    eprintln!("CLI scenarios on {dev} ({addr})");
    // Distinct ports per run (and apart from tests/verbs.rs) so that consecutive runs do not
    // meet each other's leftovers, below the ephemeral range (32768..) from which a device
    // lookup's CM id, kept alive with the device, takes its port.
    let base = 31_000 + (std::process::id() % 15) * 100;
    Ok(Some(Env { addr, next_port: AtomicU32::new(base) }))
}

/// `--file` as librpma's examples map it (`pmem_map_file`): the registered memory is the file
/// (what the `rpma` command does too, with its own `map_file`).
fn map_file(
    path: &Path,
    offset: u64,
    len: usize,
    create: bool,
    _pmem: bool,
) -> Result<rpma::Memory, rpma::mem::MemError> {
    // SAFETY: [M5] the demo's files are in this test's own temporary directory; nothing
    // truncates or writes them while they are mapped.
    unsafe { rpma::mem::MapOptions::new().create(create).offset(offset).len(len).map(path) }
}

/// Both sides in this process (the scenario's demo), bounded by [`TIMEOUT`].
fn in_process(s: Scenario, env: &Env) -> Result<(), Failed> {
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let denv = DemoEnv { addr: env.addr.clone(), port: env.port(), dir: dir.path().to_path_buf(), map_file };
    let (tx, rx) = mpsc::channel();
    thread::Builder::new()
        .name(s.name())
        .spawn(move || {
            let _ = tx.send(s.demo(&Verbs::new(), &denv).map_err(|e| format!("{e:#}")));
        })
        .map_err(|e| format!("spawning the demo thread: {e}"))?;
    match rx.recv_timeout(TIMEOUT) {
        Ok(Ok(lines)) => {
            if lines.is_empty() {
                return Err("the demo reported nothing".into());
            }
            // The flushes and atomic writes of 05 and 07 are counted by rpma-verbs (native or
            // emulated depends on the profile; the counters are process-wide, so other trials
            // running meanwhile may make them "mixed").
            let counted = lines.iter().any(|l| l.starts_with("client: path: ") && l.ends_with("counted by rpma-verbs"));
            if matches!(s, Scenario::FlushToPersistent | Scenario::AtomicWrite) && !counted {
                return Err(format!("{}: no path counted by rpma-verbs in {lines:?}", s.name()).into());
            }
            for l in lines {
                println!("  {l}");
            }
            Ok(())
        }
        Ok(Err(e)) => Err(format!("{}: {e}", s.name()).into()),
        // A hung demo thread cannot be stopped; the process ends after the other trials.
        Err(_) => Err(format!("{}: no result after {TIMEOUT:?} (hung)", s.name()).into()),
    }
}

/// A process of the `rpma` binary with its output going to a file.
fn spawn(name: &str, dir: &Path, args: &[String]) -> Result<Proc, Failed> {
    spawn_program(name, dir, Path::new(env!("CARGO_BIN_EXE_rpma")), args)
}

/// A process of `program` with its output going to a file.
fn spawn_program(name: &str, dir: &Path, program: &Path, args: &[String]) -> Result<Proc, Failed> {
    Proc::spawn(name, dir, program, args, &[]).map_err(|e| format!("{e:#}").into())
}

/// Waits for every process, each bounded by [`TIMEOUT`] (killed when hung): whether all exited
/// 0, and every process's status and output.
fn wait_all(procs: &mut [Proc]) -> Result<(bool, String), Failed> {
    processes::wait_all(procs, TIMEOUT).map_err(|e| format!("{e:#}").into())
}

/// `rpma server` and then `rpma client`(s) as processes, each bounded by [`TIMEOUT`] (killed when
/// hung); both outputs are shown on failure.
fn two_processes(s: Scenario, env: &Env) -> Result<(), Failed> {
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let port: u16 = env.port().parse().map_err(|e| format!("port: {e}"))?;
    let launch = Launch {
        program: PathBuf::from(env!("CARGO_BIN_EXE_rpma")),
        backend: "verbs".to_owned(),
        addr: env.addr.clone(),
        env: Vec::new(),
        timeout: TIMEOUT,
    };
    let (ok, report) = launch.run(s, port, dir.path()).map_err(|e| format!("{e:#}"))?;
    if ok {
        print!("{report}");
        Ok(())
    } else {
        Err(format!("{} as two processes failed:\n{report}", s.name()).into())
    }
}

// ------------------------------------------------------------------ pmem

/// `RPMA_TEST_PMEM` (scripts/softroce/README.md, "Persistent memory"), or `None` when unset
/// (the pmem trials are not asked for: they say so).
fn test_pmem() -> Option<String> {
    let p = std::env::var("RPMA_TEST_PMEM").ok().filter(|p| !p.is_empty());
    if p.is_none() {
        println!("RPMA_TEST_PMEM unset: no pmem trial (SOFTROCE_PMEM=256M scripts/test-verbs.sh runs them)");
    }
    p
}

/// `s` as `rpma server --pmem RPMA_TEST_PMEM --file-offset slot * 2 MiB` and its client; the
/// server's region is on the devdax device (persistent flushes native where the device has
/// native flush: the client runs under the default rule).
fn pmem_two_processes(s: Scenario, slot: u64, env: &Env) -> Result<(), Failed> {
    let Some(pmem) = test_pmem() else { return Ok(()) };
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let port: u16 = env.port().parse().map_err(|e| format!("port: {e}"))?;
    let launch = Launch {
        program: PathBuf::from(env!("CARGO_BIN_EXE_rpma")),
        backend: "verbs".to_owned(),
        addr: env.addr.clone(),
        env: vec![("RPMA_VERBS_PERSISTENT_FLUSH".into(), "native".into())],
        timeout: TIMEOUT,
    };
    let (_, cargs, clients) = scenario_args(s, dir.path());
    let sargs = ["--pmem".to_owned(), pmem, "--file-offset".into(), (slot << 21).to_string()].to_vec();
    let (ok, report) = launch.run_with(s, port, dir.path(), sargs, &cargs, clients).map_err(|e| format!("{e:#}"))?;
    if ok {
        print!("{report}");
        Ok(())
    } else {
        Err(format!("{} on pmem failed:\n{report}", s.name()).into())
    }
}

/// Bad input to `--pmem`: a character device that is not devdax, a misaligned offset, a file on
/// a file system without DAX, a range another server holds: each a clear error, exit 1.
fn pmem_bad_input(env: &Env) -> Result<(), Failed> {
    let rpma = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rpma"))
            .args(["server", "--backend", "verbs", "--addr", &env.addr, "--port", &env.port()])
            .args(["--scenario", "write-to-persistent"])
            .args(args)
            .output()
            .map_err(|e| format!("rpma: {e}"))?;
        Ok::<_, Failed>((out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned()))
    };
    let expect = |args: &[&str], want: &str| -> Result<(), Failed> {
        let (code, err) = rpma(args)?;
        if code != Some(1) || !err.contains(want) {
            return Err(format!("rpma server {args:?}: exit {code:?}, stderr {err:?}; expected {want:?}").into());
        }
        println!("  rpma server {}: {}", args.join(" "), err.trim());
        Ok(())
    };
    expect(&["--pmem", "/dev/null"], "not a devdax device")?;
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let f = dir.path().join("plain");
    std::fs::write(&f, vec![0u8; 1 << 20]).map_err(|e| format!("{e}"))?;
    expect(&["--pmem", &f.display().to_string()], "not persistent memory")?;
    let Some(pmem) = test_pmem() else { return Ok(()) };
    expect(&["--pmem", &pmem, "--file-offset", "4096"], "alignment")?;
    // a range in use: a process holding slot 30 of the device (OFD lock), then a server there
    let holder = std::fs::OpenOptions::new().read(true).write(true).open(&pmem).map_err(|e| format!("{e}"))?;
    let lock = nix::libc::flock {
        l_type: nix::libc::F_WRLCK as i16,
        l_whence: nix::libc::SEEK_SET as i16,
        l_start: 30 << 21,
        l_len: 2 << 20,
        l_pid: 0,
    };
    nix::fcntl::fcntl(std::os::fd::AsRawFd::as_raw_fd(&holder), nix::fcntl::FcntlArg::F_OFD_SETLK(&lock))
        .map_err(|e| format!("lock: {e}"))?;
    // The holder is named: this test's own process.
    let holder_is_named = format!("in use by process {} (", std::process::id());
    expect(&["--pmem", &pmem, "--file-offset", &(30u64 << 21).to_string()], &holder_is_named)?;
    Ok(())
}

// ------------------------------------------------------------------ rpma bench, two processes

/// `rpma bench --server` and a client as two processes on the device, the server in `mode`
/// (`--busy-poll` or `--sleep-when-idle`: the latter sleeps in poll(2) on its CQ's and its
/// connection's fds between messages): a send ping-pong, whose every echo wakes the server, and
/// writes; the client's CSV rows must name both runs with every operation done.
fn bench_two_processes(mode: &str, env: &Env) -> Result<(), Failed> {
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let port = env.port();
    let common = |side: &[&str]| -> Vec<String> {
        let mut a: Vec<String> =
            ["bench", "--backend", "verbs", "--qd", "1", "--timeout", "60", "--no-progress"].map(String::from).to_vec();
        a.extend(side.iter().map(|s| (*s).to_owned()));
        a
    };
    let server = spawn("server", dir.path(), &common(&["--server", "--addr", &env.addr, "--port", &port, mode]))?;
    let deadline = std::time::Instant::now() + TIMEOUT;
    while !server.output().contains("serving 1 connection") {
        if std::time::Instant::now() > deadline {
            return Err(format!("the bench server did not listen: {}", server.output()).into());
        }
        thread::sleep(Duration::from_millis(50));
    }
    let target = format!("{}:{port}", env.addr);
    let client_args = common(&["--connect", &target, "--op", "send,write", "--size", "8", "--iters", "300", "--csv"]);
    let client = spawn("client", dir.path(), &client_args)?;
    let mut procs = [server, client];
    let (ok, report) = wait_all(&mut procs)?;
    if !ok {
        return Err(format!("rpma bench {mode} as two processes failed:\n{report}").into());
    }
    let out = procs[1].output();
    for op in ["send", "write"] {
        let row = out.lines().find(|l| l.starts_with("verbs,") && l.split(',').nth(2) == Some(op));
        let Some(row) = row else {
            return Err(format!("no CSV row for {op} in the client's output:\n{out}").into());
        };
        if row.split(',').nth(7) != Some("300") {
            return Err(format!("{op}: not 300 operations done: {row}").into());
        }
    }
    Ok(())
}

// ------------------------------------------------------------------ C peer of 05 on pmem

/// The C peers of flush-to-persistent on pmem (`tests/interop/ex05.c`), compiled once.
static C_EX05: OnceLock<Result<PathBuf, String>> = OnceLock::new();

fn c_ex05() -> Result<PathBuf, Failed> {
    C_EX05
        .get_or_init(|| {
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop/ex05.c");
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-peers");
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let exe = dir.join(format!("ex05-{}", std::process::id()));
            cc::build(&src, &exe, &["-Werror"])?;
            Ok(exe)
        })
        .clone()
        .map_err(Failed::from)
}

/// The flow of librpma's example 05 between the system's C librpma (`ex05.c`) and the `rpma`
/// command, the server's memory on `RPMA_TEST_PMEM` either way: a C server on the devdax device
/// and `rpma client`, or `rpma server --pmem` and a C client. The client's persistent flush is
/// native where the device has native flush (librpma 1.3 on debian13; the `rpma` client under
/// the default rule), and the bytes it wrote are what the server then holds.
fn c_peer_05_pmem(c: CSide, env: &Env) -> Result<(), Failed> {
    let Some(pmem) = test_pmem() else { return Ok(()) };
    let exe = c_ex05()?;
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let d = dir.path();
    let port = env.port();
    let slot = if matches!(c, CSide::Server) { 24u64 } else { 25 };
    let offset = (slot << 21).to_string();
    let rpma = |cmd: &str, extra: &[&str]| {
        let mut a = vec![cmd.to_owned(), "--backend".into(), "verbs".into(), "--addr".into(), env.addr.clone()];
        a.extend(["--port".into(), port.clone(), "--scenario".into(), "flush-to-persistent".into()]);
        a.extend(extra.iter().map(ToString::to_string));
        a
    };
    let native = [("RPMA_VERBS_PERSISTENT_FLUSH".to_owned(), std::ffi::OsString::from("native"))];
    let mut procs = Vec::new();
    match c {
        CSide::Server => {
            let a = ["server05".to_owned(), env.addr.clone(), port.clone(), pmem, offset];
            procs.push(spawn_program("C server05", d, &exe, &a)?);
            let a = rpma("client", &["--retries", "100", "--retry-delay", "200"]);
            let rpma_exe = Path::new(env!("CARGO_BIN_EXE_rpma"));
            procs.push(Proc::spawn("rpma client", d, rpma_exe, &a, &native).map_err(|e| format!("{e:#}"))?);
        }
        CSide::Client => {
            procs.push(spawn("rpma server", d, &rpma("server", &["--pmem", &pmem, "--file-offset", &offset]))?);
            let a = ["client05".to_owned(), env.addr.clone(), port.clone()];
            procs.push(spawn_program("C client05", d, &exe, &a)?);
        }
    }
    let (ok, report) = wait_all(&mut procs)?;
    let want = match c {
        CSide::Server => ["NEW Hello world!", "(Persistent)"],
        CSide::Client => ["new value \"Hello from C librpma!\"", "FLUSHED PERSISTENT"],
    };
    if !ok || !want.iter().all(|w| report.contains(w)) {
        return Err(format!("05 on pmem, C {c:?}: expected {want:?}\n{report}").into());
    }
    print!("{report}");
    Ok(())
}

// ------------------------------------------------------------------ C peers (06scch, 09scch)

/// The C peers of the shared-channel scenarios (`tests/interop/scch.c`), compiled once.
static C_SCCH: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// Compiles `tests/interop/scch.c` with `cc … -lrpma -libverbs -lrdmacm` against the system's
/// librpma (in the VM: the guest's); the path of the executable.
fn c_scch() -> Result<PathBuf, Failed> {
    C_SCCH.get_or_init(build_c_scch).clone().map_err(Failed::from)
}

fn build_c_scch() -> Result<PathBuf, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop/scch.c");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-peers");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let exe = dir.join(format!("scch-{}", std::process::id()));
    cc::build(&src, &exe, &["-Werror"])?;
    Ok(exe)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The values of the lines `TAG VALUE` of a C peer's output (`TAG` may hold spaces: the last
/// word is the value).
fn tagged(out: &str, tag: &str) -> Vec<String> {
    out.lines()
        .filter(|l| l.starts_with(tag) && l.len() > tag.len() && l.as_bytes()[tag.len()] == b' ')
        .filter_map(|l| l.rsplit(' ').next().map(str::to_owned))
        .collect()
}

/// Which side is the C program.
#[derive(Clone, Copy, Debug)]
enum CSide {
    Server,
    Client,
}

/// The names the clients of 06scch expose.
const NAMES: [&str; 2] = ["Alice", "Bob"];

/// A C peer of 06scch/09scch (`c_scch`) against the `rpma` command's other side; every byte that
/// crossed the wire is compared with what the other side put there.
fn c_peer(s: Scenario, c: CSide, env: &Env) -> Result<(), Failed> {
    let exe = c_scch()?;
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let port = env.port();
    let rpma = |cmd: &str, extra: &[&str]| {
        let mut a = vec![cmd.to_owned(), "--backend".into(), "verbs".into(), "--addr".into(), env.addr.clone()];
        a.extend(["--port".into(), port.clone(), "--scenario".into(), s.name()]);
        a.extend(extra.iter().map(ToString::to_string));
        a
    };
    let cargs = |role: &str, extra: &[&str]| {
        let mut a = vec![role.to_owned(), env.addr.clone(), port.clone()];
        a.extend(extra.iter().map(ToString::to_string));
        a
    };
    let retry = ["--retries", "100", "--retry-delay", "200"];
    let file = dir.path().join("server.pmem");
    let file_s = file.display().to_string();
    let mut procs = Vec::new();
    let d = dir.path();
    match (s, c) {
        (Scenario::MultipleConnectionsSharedChannel, CSide::Server) => {
            procs.push(spawn_program("C server06", d, &exe, &cargs("server06", &["2"]))?);
            for n in NAMES {
                let a = rpma("client", &[&["--name", n][..], &retry].concat());
                procs.push(spawn(&format!("rpma client {n}"), d, &a)?);
            }
        }
        (Scenario::MultipleConnectionsSharedChannel, CSide::Client) => {
            procs.push(spawn("rpma server", d, &rpma("server", &["--clients", "2"]))?);
            for n in NAMES {
                procs.push(spawn_program(&format!("C client06 {n}"), d, &exe, &cargs("client06", &[n]))?);
            }
        }
        (Scenario::FlushToPersistentGpspmSharedChannel, CSide::Server) => {
            procs.push(spawn_program("C server09", d, &exe, &cargs("server09", &[]))?);
            procs.push(spawn("rpma client", d, &rpma("client", &retry))?);
        }
        (Scenario::FlushToPersistentGpspmSharedChannel, CSide::Client) => {
            procs.push(spawn("rpma server", d, &rpma("server", &["--file", &file_s, "--file-create"]))?);
            procs.push(spawn_program("C client09", d, &exe, &cargs("client09", &[]))?);
        }
        _ => return Err(format!("no C peer for {}", s.name()).into()),
    }
    let (ok, report) = wait_all(&mut procs)?;
    let fail = |what: String| -> Result<(), Failed> { Err(format!("{}: {what}\n{report}", s.name()).into()) };
    if !ok {
        return fail("a process failed".into());
    }
    let outs: Vec<String> = procs.iter().map(Proc::output).collect();
    let hello = hello_bytes(0)[HELLO_STR_OFFSET..].to_vec();
    match (s, c) {
        (Scenario::MultipleConnectionsSharedChannel, CSide::Server) => {
            // The C server read each rpma client's 32-byte region: its name, then zeros.
            let mut got = tagged(&outs[0], "NAME 0");
            got.extend(tagged(&outs[0], "NAME 1"));
            got.sort();
            let mut want: Vec<String> = NAMES
                .iter()
                .map(|n| {
                    let mut b = n.as_bytes().to_vec();
                    b.resize(MAX_NAME_SIZE, 0);
                    hex(&b)
                })
                .collect();
            want.sort();
            if got != want {
                return fail(format!("the C server read {got:?}, expected {want:?}"));
            }
        }
        (Scenario::MultipleConnectionsSharedChannel, CSide::Client) => {
            let mut got: Vec<String> = outs[0]
                .lines()
                .filter_map(|l| l.split_once(": read the name \"")?.1.split_once('"').map(|(n, _)| n.to_owned()))
                .collect();
            got.sort_unstable();
            if got != NAMES {
                return fail(format!("the rpma server read {got:?}, expected {NAMES:?}"));
            }
            for (i, n) in NAMES.iter().enumerate() {
                let mut b = n.as_bytes().to_vec();
                b.resize(MAX_NAME_SIZE, 0);
                if tagged(&outs[1 + i], "EXPOSED") != [hex(&b)] {
                    return fail(format!("the C client {n} did not expose {}", hex(&b)));
                }
            }
        }
        (Scenario::FlushToPersistentGpspmSharedChannel, CSide::Server) => {
            // The C server's memory is DRAM at data_offset 0.
            let want = FlushRequest { offset: 0, length: HELLO_STR_SIZE as u64, op_context: FLUSH_ID }.encode();
            if tagged(&outs[0], "REQUEST") != [hex(&want)] {
                return fail(format!("the C server did not receive the request {}", hex(&want)));
            }
            if tagged(&outs[0], "DATA") != [hex(&hello)] {
                return fail("the C server's memory does not hold the rpma client's hello string".into());
            }
            if !outs[1].contains(&format!("flush response op_context {FLUSH_ID:#x}")) {
                return fail("the rpma client did not report the response".into());
            }
        }
        (Scenario::FlushToPersistentGpspmSharedChannel, CSide::Client) => {
            let want = encode_response(FLUSH_ID);
            if tagged(&outs[1], "RESPONSE") != [hex(&want)] {
                return fail(format!("the C client did not receive the response {}", hex(&want)));
            }
            let off = SIGNATURE.len();
            let line =
                format!("flush request {{offset: {off:#x}, length: {HELLO_STR_SIZE:#x}, op_context: {FLUSH_ID:#x}}}");
            if !outs[0].contains(&line) {
                return fail(format!("the rpma server did not report {line:?}"));
            }
            let bytes = std::fs::read(&file).map_err(|e| format!("{file_s}: {e}"))?;
            if bytes.get(..off) != Some(SIGNATURE) || bytes.get(off..off + HELLO_STR_SIZE) != Some(&hello[..]) {
                return fail(format!("{file_s} does not hold the signature and the C client's hello string"));
            }
        }
        _ => {}
    }
    print!("{report}");
    Ok(())
}

fn main() {
    let mut args = Arguments::from_args();
    let env = match env(args.list) {
        Ok(Some(e)) => Some(Arc::new(e)),
        Ok(None) if args.list => None,
        Ok(None) => {
            println!("verbs CLI scenarios skipped: RPMA_TEST_DEVICE unset (run them with scripts/test-verbs.sh)");
            return;
        }
        Err(e) => {
            eprintln!("verbs CLI scenarios cannot run: {e}");
            std::process::exit(2);
        }
    };
    // One scenario at a time unless asked otherwise: the soft device is slow and shared.
    args.test_threads.get_or_insert(1);
    let mut trials = Vec::new();
    for s in ALL {
        for (how, f) in
            [("in_process", in_process as fn(Scenario, &Env) -> Result<(), Failed>), ("two_processes", two_processes)]
        {
            let e = env.clone();
            trials.push(Trial::test(format!("{how}::{}", s.name()), move || {
                let e = e.ok_or_else(|| Failed::from("no device (listing only)"))?;
                f(s, &e)
            }));
        }
    }
    for s in [Scenario::MultipleConnectionsSharedChannel, Scenario::FlushToPersistentGpspmSharedChannel] {
        for (name, c) in [("c_server_rpma_client", CSide::Server), ("rpma_server_c_client", CSide::Client)] {
            let e = env.clone();
            trials.push(Trial::test(format!("c_peer::{}::{name}", s.name()), move || {
                let e = e.ok_or_else(|| Failed::from("no device (listing only)"))?;
                c_peer(s, c, &e)
            }));
        }
    }
    // the persistence scenarios with the server on pmem (RPMA_TEST_PMEM; `rpma server --pmem`)
    for (slot, s) in [
        Scenario::WriteToPersistent,
        Scenario::FlushToPersistent,
        Scenario::AtomicWrite,
        Scenario::FlushToPersistentGpspm,
    ]
    .into_iter()
    .enumerate()
    {
        let e = env.clone();
        trials.push(Trial::test(format!("pmem::two_processes::{}", s.name()), move || {
            let e = e.ok_or_else(|| Failed::from("no device (listing only)"))?;
            pmem_two_processes(s, 16 + slot as u64, &e)
        }));
    }
    for (name, c) in [("c_server_rpma_client", CSide::Server), ("rpma_server_c_client", CSide::Client)] {
        let e = env.clone();
        trials.push(Trial::test(format!("c_peer::pmem::flush-to-persistent::{name}"), move || {
            let e = e.ok_or_else(|| Failed::from("no device (listing only)"))?;
            c_peer_05_pmem(c, &e)
        }));
    }
    let e = env.clone();
    trials.push(Trial::test("pmem::bad_input", move || {
        let e = e.ok_or_else(|| Failed::from("no device (listing only)"))?;
        pmem_bad_input(&e)
    }));
    for mode in ["--busy-poll", "--sleep-when-idle"] {
        let e = env.clone();
        trials.push(Trial::test(format!("bench::two_processes::server{mode}"), move || {
            let e = e.ok_or_else(|| Failed::from("no device (listing only)"))?;
            bench_two_processes(mode, &e)
        }));
    }
    let conclusion = libtest_mimic::run(&args, trials);
    if let Some(Ok(exe)) = C_SCCH.get() {
        let _ = std::fs::remove_file(exe);
    }
    conclusion.exit();
}

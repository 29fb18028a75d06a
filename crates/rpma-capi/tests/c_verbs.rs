//! The C programs of tests/c on a real RDMA device, with `RPMA_BACKEND=verbs` (or unset, the
//! default): the device named by `RPMA_TEST_DEVICE`, owning `RPMA_TEST_ADDR` (the Soft-RoCE VM
//! of scripts/test-verbs.sh exports `rxe0` and `10.77.0.1`). The client/server program e2e.c
//! also runs as two processes, each side on this librpma or on the system's (Debian's
//! librpma0): the same binary, with `LD_LIBRARY_PATH` pointing at this library or not.
//!
//! Without `RPMA_TEST_DEVICE` the binary prints one line saying the tests were skipped and
//! succeeds (as tests/verbs.rs, so that `cargo test` passes on hosts without RDMA); with it
//! set, a missing address, a device that is not there or a missing system librpma fails the
//! run. The tests run one at a time (one device, distinct ports).

mod common;

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use libtest_mimic::{Arguments, Failed, Trial};

use common::{command, compile, compile_with, show, work_dir};

/// How long a program may run (TCG in the VM is slow).
const TIMEOUT: Duration = Duration::from_secs(180);

/// Debian's librpma, which the interop tests run one side on.
const SYSTEM_LIBRPMA: &str = "/usr/lib/x86_64-linux-gnu/librpma.so.0";

/// The device under test.
struct Env {
    dev: String,
    addr: String,
    /// The first port of this run; each test adds its own offset.
    port: u32,
}

impl Env {
    /// `cmd` set up for the device: address, device name and a port of this run.
    fn on_device<'c>(&self, cmd: &'c mut Command, port: u32) -> &'c mut Command {
        cmd.env("RPMA_TEST_ADDR", &self.addr)
            .env("RPMA_TEST_DEVICE", &self.dev)
            .env("RPMA_TEST_PORT", (self.port + port).to_string())
    }
}

/// Waits for `child` at most [`TIMEOUT`]; kills it after that.
fn wait(what: &str, mut child: Child) -> Result<Output, Failed> {
    let t0 = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return child.wait_with_output().map_err(|e| format!("{what}: {e}").into()),
            Ok(None) if t0.elapsed() < TIMEOUT => std::thread::sleep(Duration::from_millis(50)),
            Ok(None) => {
                let _ = child.kill();
                let out = child.wait_with_output().map_err(|e| format!("{what}: {e}"))?;
                return Err(show(&format!("{what}: killed after {TIMEOUT:?}"), &out).into());
            }
            Err(e) => return Err(format!("{what}: {e}").into()),
        }
    }
}

/// Runs `cmd` to its end (at most [`TIMEOUT`]); `Err` unless it succeeded and printed `ok`.
fn run_ok(what: &str, cmd: &mut Command, ok: &str) -> Result<Output, Failed> {
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| format!("{what}: {e}"))?;
    let out = wait(what, child)?;
    if !out.status.success() || !String::from_utf8_lossy(&out.stdout).contains(ok) {
        return Err(show(what, &out).into());
    }
    Ok(out)
}

/// A program of tests/c in one process on this library, verbs chosen by `backend`.
fn one_process(
    env: &Env,
    name: &str,
    src: &str,
    own_header: bool,
    backend: Option<&str>,
    port: u32,
) -> Result<(), Failed> {
    let dir = work_dir(&format!("verbs-{name}"));
    let exe = compile(&dir, src, own_header);
    let what = format!("{src} on {} (RPMA_BACKEND={backend:?})", env.dev);
    run_ok(&what, env.on_device(&mut command(Some(&dir), &exe, backend), port), ": OK").map(drop)
}

/// Which librpma a side runs on.
#[derive(Clone, Copy, Debug)]
enum Lib {
    /// This one (`LD_LIBRARY_PATH`), with `RPMA_BACKEND=verbs`.
    Ours,
    /// The system's (Debian's librpma0).
    System,
}

impl Lib {
    fn dir(self, ours: &Path) -> Option<&Path> {
        match self {
            Self::Ours => Some(ours),
            Self::System => None,
        }
    }
}

/// e2e.c as two processes: the server on `server`'s librpma, then the client on `client`'s.
fn two_processes(env: &Env, name: &str, server: Lib, client: Lib, port: u32) -> Result<(), Failed> {
    let dir = work_dir(&format!("verbs-{name}"));
    let exe = compile(&dir, "e2e.c", true);
    let backend = |l: Lib| matches!(l, Lib::Ours).then_some("verbs");
    let mut s = command(server.dir(&dir), &exe, backend(server));
    env.on_device(&mut s, port).arg("server").stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut s = s.spawn().map_err(|e| format!("start the server: {e}"))?;
    // The server says when it listens; its other lines are kept for the report.
    let stdout = s.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("e2e: listening") {
                let _ = tx.send(());
            }
            lines.push(line);
        }
        lines
    });
    let what = format!("e2e server ({server:?} librpma) and client ({client:?} librpma) on {}", env.dev);
    let client_out = match rx.recv_timeout(TIMEOUT) {
        Ok(()) => {
            let mut c = command(client.dir(&dir), &exe, backend(client));
            run_ok(&format!("{what}: client"), env.on_device(&mut c, port).arg("client"), "e2e client: OK")
        }
        Err(_) => Err(format!("{what}: the server did not listen").into()),
    };
    if client_out.is_err() {
        let _ = s.kill();
    }
    let server_out = wait(&format!("{what}: server"), s)?;
    let server_lines = reader.join().unwrap_or_default().join("\n");
    let report = || {
        format!(
            "server: {}\n--- server stdout\n{server_lines}\n--- server stderr\n{}",
            server_out.status,
            String::from_utf8_lossy(&server_out.stderr)
        )
    };
    client_out.map_err(|e| format!("{}\n{}", e.message().unwrap_or_default(), report()))?;
    if !server_out.status.success() || !server_lines.contains("e2e server: OK") {
        return Err(format!("{what}\n{}", report()).into());
    }
    Ok(())
}

/// Each side loads the library it should: backend.c fails on this library with an unknown
/// `RPMA_BACKEND` (it reads the variable) and succeeds on the system's (which does not).
fn each_side_loads_its_librpma(env: &Env) -> Result<(), Failed> {
    let dir = work_dir("verbs-which");
    let exe = compile(&dir, "backend.c", true);
    let mut ours = command(Some(&dir), &exe, Some("bogus"));
    let out = run_ok("backend.c on this librpma", env.on_device(&mut ours, 0), "-100002 -100002 untouched")?;
    if !String::from_utf8_lossy(&out.stderr).contains("unknown backend") {
        return Err(show("backend.c on this librpma: no ERROR line", &out).into());
    }
    let mut system = command(None, &exe, Some("bogus"));
    run_ok("backend.c on the system's librpma", env.on_device(&mut system, 0), "0 0 set").map(drop)
}

/// A test on the device.
type Case = dyn FnOnce(&Env) -> Result<(), Failed> + Send;

/// The device under test, or why the run cannot go on (`Ok(None)`: not asked to run).
fn device() -> Result<Option<Env>, String> {
    let Some(dev) = std::env::var("RPMA_TEST_DEVICE").ok().filter(|d| !d.is_empty()) else {
        return Ok(None);
    };
    let addr = std::env::var("RPMA_TEST_ADDR")
        .ok()
        .filter(|a| !a.is_empty())
        .ok_or_else(|| format!("RPMA_TEST_DEVICE={dev} is set but RPMA_TEST_ADDR is not"))?;
    let sys = PathBuf::from("/sys/class/infiniband").join(&dev);
    if !sys.exists() {
        return Err(format!("RPMA_TEST_DEVICE={dev}: no such RDMA device ({} is missing)", sys.display()));
    }
    if !Path::new(SYSTEM_LIBRPMA).exists() {
        return Err(format!("{SYSTEM_LIBRPMA} is missing (apt-get install librpma-dev): the interop tests need it"));
    }
    // Distinct ports per run, below the ephemeral range (32768..).
    let port = 21000 + (std::process::id() % 500) * 20;
    Ok(Some(Env { dev, addr, port }))
}

fn main() {
    let mut args = Arguments::from_args();
    args.test_threads = Some(1);
    let env = match device() {
        Ok(Some(env)) => std::sync::Arc::new(env),
        Ok(None) => {
            println!("C tests on verbs skipped: RPMA_TEST_DEVICE unset (run them with scripts/test-verbs.sh)");
            return;
        }
        Err(e) => {
            eprintln!("C tests on verbs cannot run: {e}");
            std::process::exit(2);
        }
    };
    let mut tests = Vec::new();
    let mut add = |name: &'static str, f: Box<Case>| {
        let env = std::sync::Arc::clone(&env);
        tests.push(Trial::test(name, move || f(&env)));
    };
    add(
        "ibv_context_is_libibverbs_own",
        Box::new(|e| {
            let dir = work_dir("verbs-ctx");
            let exe = compile_with(&dir, "verbs_ctx.c", true, &["-libverbs", "-lrdmacm"]);
            run_ok("verbs_ctx.c", e.on_device(&mut command(Some(&dir), &exe, Some("verbs")), 0), "verbs_ctx: OK")
                .map(drop)
        }),
    );
    add("e2e_threads_verbs_by_default", Box::new(|e| one_process(e, "e2e", "e2e.c", true, None, 1)));
    add("errors", Box::new(|e| one_process(e, "errors", "errors.c", true, Some("verbs"), 2)));
    add("more", Box::new(|e| one_process(e, "more", "more.c", true, Some("verbs"), 3)));
    add("dereg", Box::new(|e| one_process(e, "dereg", "dereg.c", true, Some("verbs"), 4)));
    add("threads", Box::new(|e| one_process(e, "threads", "threads.c", true, Some("verbs"), 5)));
    // rxe has no ibv_advise_mr: the failure is logged as librpma logs it.
    add(
        "provider_log",
        Box::new(|e| {
            let dir = work_dir("provider-log-verbs");
            let exe = compile(&dir, "provider_log.c", true);
            let mut cmd = command(Some(&dir), &exe, Some("verbs"));
            cmd.env("PROVIDER_LOG_ADVISE", "fails");
            run_ok("provider_log.c", e.on_device(&mut cmd, 10), "provider_log: OK").map(drop)
        }),
    );
    // The refusals and INFO lines librpma logs: the same program passes on this library and on
    // Debian's librpma (the lines it expects are librpma's own).
    add("refusal_log", Box::new(|e| one_process(e, "refusal-log", "refusal_log.c", true, Some("verbs"), 11)));
    add(
        "refusal_log_system_librpma",
        Box::new(|e| {
            let dir = work_dir("verbs-refusal-log-system");
            let exe = compile(&dir, "refusal_log.c", true);
            let what = "refusal_log.c on the system's librpma";
            run_ok(what, e.on_device(&mut command(None, &exe, None), 12), "refusal_log: OK").map(drop)
        }),
    );
    add("abi_debian_header", Box::new(|e| one_process(e, "abi", "abi.c", false, Some("verbs"), 6)));
    add("each_side_loads_its_librpma", Box::new(each_side_loads_its_librpma));
    add("e2e_two_processes", Box::new(|e| two_processes(e, "e2e-2p", Lib::Ours, Lib::Ours, 7)));
    add(
        "e2e_client_ours_server_system_librpma",
        Box::new(|e| two_processes(e, "e2e-srv-sys", Lib::System, Lib::Ours, 8)),
    );
    add(
        "e2e_client_system_librpma_server_ours",
        Box::new(|e| two_processes(e, "e2e-cli-sys", Lib::Ours, Lib::System, 9)),
    );
    libtest_mimic::run(&args, tests).exit();
}

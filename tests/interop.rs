//! Wire interop with the C librpma, and process death, on a real RDMA device (the verbs backend).
//!
//! * **Interop pairs**: the protocol of `tests/interop/README.md`, run by a server and a client
//!   in separate processes: the C peer (`tests/interop/peer.c`, compiled here with `cc` against
//!   the system's librpma) and the Rust peer (`tests/interop/rust_peer.rs`, this test binary
//!   started again with `RPMA_INTEROP_PEER=server|client`), in all four combinations. Each peer
//!   verifies what the other did to its memory and exits non-zero on any mismatch.
//! * **Process death**: a peer process (this binary again) is killed with SIGKILL while
//!   connected; the surviving side must see [`ConnEvent::Lost`] or [`ConnEvent::Closed`] within
//!   a bound. Both ways: the client dies, the server dies.
//!
//! Needs `RPMA_TEST_DEVICE` and `RPMA_TEST_ADDR` (the Soft-RoCE VM of `scripts/test-verbs.sh`
//! sets them). Without `RPMA_TEST_DEVICE` every test is reported as ignored, with one line
//! saying why; with it, a missing device, address, compiler or librpma fails the tests.
#![allow(missing_docs)]

#[path = "interop/cc.rs"]
mod cc;
#[path = "interop/rust_peer.rs"]
mod rust_peer;

use std::io::{BufRead, BufReader, Read};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use libtest_mimic::{Arguments, Failed, Trial};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use rpma::{Conn, ConnEvent, ConnReq, ContextType, Device, Ep, Peer};

type T = rpma::verbs::Verbs;

fn transport() -> T {
    rpma::verbs::Verbs::new()
}

/// Role of a child process started from this binary.
const PEER_ENV: &str = "RPMA_INTEROP_PEER";
const ADDR_ENV: &str = "RPMA_INTEROP_ADDR";
const PORT_ENV: &str = "RPMA_INTEROP_PORT";

/// The server must listen within this time (TCG guests are slow).
const LISTEN_TIMEOUT: Duration = Duration::from_secs(60);
/// A whole interop pair must finish within this time.
const PAIR_TIMEOUT: Duration = Duration::from_secs(180);
/// After one peer failed, the other gets this long to exit before it is killed.
const GRACE: Duration = Duration::from_secs(10);
/// The survivor must see the death of its peer within this time.
const DEATH_BOUND: Duration = Duration::from_secs(30);
/// A peer that should be killed exits by itself after this long.
const HOLD_LIMIT: Duration = Duration::from_secs(120);

fn main() -> ExitCode {
    if let Ok(role) = std::env::var(PEER_ENV) {
        return peer_main(&role);
    }
    let args = Arguments::from_args();
    let device = std::env::var("RPMA_TEST_DEVICE").ok().filter(|d| !d.is_empty());
    let mut trials = vec![
        Trial::test("device_is_RPMA_TEST_DEVICE", device_check),
        Trial::test("pair_c_server_c_client", || pair(Side::C, Side::C, 7361)),
        Trial::test("pair_c_server_rust_client", || pair(Side::C, Side::Rust, 7362)),
        Trial::test("pair_rust_server_c_client", || pair(Side::Rust, Side::C, 7363)),
        Trial::test("pair_rust_server_rust_client", || pair(Side::Rust, Side::Rust, 7364)),
        // the server's region on pmem (RPMA_TEST_PMEM), persistent flushes native where the
        // device has native flush (docs/native-ops.md, "The persistent flush rule")
        Trial::test("pmem_pair_c_server_c_client", || pmem_pair(Side::C, Side::C, 7367, 4)),
        Trial::test("pmem_pair_c_server_rust_client", || pmem_pair(Side::C, Side::Rust, 7368, 5)),
        Trial::test("pmem_pair_rust_server_c_client", || pmem_pair(Side::Rust, Side::C, 7369, 6)),
        Trial::test("pmem_pair_rust_server_rust_client", || pmem_pair(Side::Rust, Side::Rust, 7370, 7)),
        Trial::test("process_death_client_killed_server_sees_it", || client_dies(7365)),
        Trial::test("process_death_server_killed_client_sees_it", || server_dies(7366)),
    ];
    if device.is_none() {
        eprintln!(
            "interop: skipped: RPMA_TEST_DEVICE is not set (scripts/test-verbs.sh runs these tests in a Soft-RoCE VM)"
        );
        trials = trials.into_iter().map(|t| t.with_ignored_flag(true)).collect();
    }
    let conclusion = libtest_mimic::run(&args, trials);
    if let Some(Ok(exe)) = C_PEER.get() {
        let _ = std::fs::remove_file(exe);
    }
    conclusion.exit_code()
}

/// The device and address under test: set, or a loud failure.
fn target() -> Result<(String, String), Failed> {
    let get = |name: &str| match std::env::var(name) {
        Ok(v) if !v.is_empty() => Ok(v),
        _ => Err(Failed::from(format!("{name} is not set (the device under test and its IPv4 address)"))),
    };
    Ok((get("RPMA_TEST_DEVICE")?, get("RPMA_TEST_ADDR")?))
}

/// RPMA_TEST_ADDR belongs to the device RPMA_TEST_DEVICE names.
fn device_check() -> Result<(), Failed> {
    let (device, addr) = target()?;
    let dev = Device::lookup(&transport(), &addr, ContextType::Local)
        .map_err(|e| format!("no RDMA device has the address {addr} (RPMA_TEST_DEVICE={device}): {e}"))?;
    if dev.name() != device {
        return Err(format!("the address {addr} is on device {}, RPMA_TEST_DEVICE is {device}", dev.name()).into());
    }
    Ok(())
}

// ------------------------------------------------------------------ child roles

fn peer_main(role: &str) -> ExitCode {
    let addr = std::env::var(ADDR_ENV).unwrap_or_default();
    let port = std::env::var(PORT_ENV).unwrap_or_default();
    let t = transport();
    let result = match role {
        "server" => rust_peer::server(&t, &addr, &port),
        "client" => rust_peer::client(&t, &addr, &port),
        "hold-server" => hold_server(&t, &addr, &port),
        "hold-client" => hold_client(&t, &addr, &port),
        _ => Err(format!("unknown {PEER_ENV} role {role:?}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rust-{role}: FAIL {e}");
            ExitCode::FAILURE
        }
    }
}

/// Polls `fd` for input, at most `timeout`.
fn wait_readable(fd: impl AsFd, timeout: Duration, what: &str) -> Result<(), String> {
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)) {
        Ok(0) => Err(format!("{what}: nothing within {timeout:?}")),
        Ok(_) => Ok(()),
        Err(e) => Err(format!("{what}: poll: {e}")),
    }
}

/// The next connection event, waiting at most `timeout`.
fn next_event_within(conn: &Conn<T>, timeout: Duration) -> Result<ConnEvent, String> {
    wait_readable(conn.event_fd(), timeout, "connection event")?;
    conn.next_event().map_err(|e| format!("Conn::next_event: {e}"))
}

fn accept_one(ep: &Ep<T>) -> Result<Conn<T>, String> {
    wait_readable(ep.fd(), LISTEN_TIMEOUT, "connection request")?;
    let req = ep.next_conn_req(None).map_err(|e| format!("Ep::next_conn_req: {e}"))?;
    let conn = req.connect(None).map_err(|e| format!("ConnReq::connect: {e}"))?;
    match next_event_within(&conn, LISTEN_TIMEOUT)? {
        ConnEvent::Established => Ok(conn),
        ev => Err(format!("connection event {ev:?}, expected Established")),
    }
}

fn connect_one(peer: &Peer<T>, addr: &str, port: &str) -> Result<Conn<T>, String> {
    let req = ConnReq::new(peer, addr, port, None).map_err(|e| format!("ConnReq::new: {e}"))?;
    let conn = req.connect(None).map_err(|e| format!("ConnReq::connect: {e}"))?;
    match next_event_within(&conn, LISTEN_TIMEOUT)? {
        ConnEvent::Established => Ok(conn),
        ev => Err(format!("connection event {ev:?}, expected Established")),
    }
}

fn new_peer(t: &T, addr: &str, kind: ContextType) -> Result<Peer<T>, String> {
    let dev = Device::lookup(t, addr, kind).map_err(|e| format!("Device::lookup({addr}): {e}"))?;
    Peer::new(&dev).map_err(|e| format!("Peer::new: {e}"))
}

/// Connected and waiting to be killed: holds the connection, never exits cleanly.
fn hold<C>(conn: C) -> Result<(), String> {
    println!("CONNECTED");
    thread::sleep(HOLD_LIMIT);
    drop(conn);
    Err(format!("not killed within {HOLD_LIMIT:?}"))
}

fn hold_server(t: &T, addr: &str, port: &str) -> Result<(), String> {
    let peer = new_peer(t, addr, ContextType::Local)?;
    let ep = Ep::listen(&peer, addr, port).map_err(|e| format!("Ep::listen: {e}"))?;
    println!("LISTENING");
    let conn = accept_one(&ep)?;
    hold((conn, ep))
}

fn hold_client(t: &T, addr: &str, port: &str) -> Result<(), String> {
    let peer = new_peer(t, addr, ContextType::Remote)?;
    let conn = connect_one(&peer, addr, port)?;
    hold(conn)
}

// ------------------------------------------------------------------ child processes

/// A child process whose stdout lines are streamed and whose whole output is kept.
struct Proc {
    name: String,
    child: Child,
    lines: Receiver<String>,
    log: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

impl Proc {
    fn spawn(name: &str, mut cmd: Command) -> Result<Self, String> {
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| format!("{name}: cannot start {cmd:?}: {e}"))?;
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().expect("piped stdout");
        let err = child.stderr.take().expect("piped stderr");
        let reader = |stream: Box<dyn Read + Send>, tx: Option<mpsc::Sender<String>>| {
            let log = Arc::clone(&log);
            thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    log.lock().expect("log").push_str(&format!("{line}\n"));
                    if let Some(tx) = &tx {
                        let _ = tx.send(line);
                    }
                }
            })
        };
        let readers = vec![reader(Box::new(out), Some(tx)), reader(Box::new(err), None)];
        Ok(Self { name: name.to_owned(), child, lines, log, readers, status: None })
    }

    /// Waits until the child prints `want` on a line of its own.
    fn wait_line(&self, want: &str, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line == want => return Ok(()),
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!("{} did not print {want:?} within {timeout:?}", self.name))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(format!("{} ended its output before printing {want:?}", self.name))
                }
            }
        }
    }

    fn poll_exit(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    fn kill(&mut self) {
        if self.poll_exit().is_none() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
    }

    /// Kills the child if it still runs, and returns its status and whole output.
    fn finish(mut self) -> String {
        self.kill();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let status = self.status.map_or_else(|| "unknown".to_owned(), |s| s.to_string());
        let log = self.log.lock().expect("log");
        format!("---- {} ({status}) ----\n{log}", self.name)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

// ------------------------------------------------------------------ the C peer

/// The C peer, compiled once (deleted when the tests are done).
static C_PEER: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// Compiles `tests/interop/peer.c` once; the path of the executable.
fn c_peer() -> Result<PathBuf, Failed> {
    C_PEER.get_or_init(build_c_peer).clone().map_err(Failed::from)
}

/// A directory this process can write: the target dir's tmp (shared with the Soft-RoCE VM when
/// the target dir is in the work tree), else a fresh one in the temporary directory.
fn scratch_dir() -> Result<PathBuf, String> {
    let candidates = [
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("interop"),
        std::env::temp_dir().join(format!("rpma-interop-{}", std::process::id())),
    ];
    let mut why = Vec::new();
    for dir in candidates {
        let probe = dir.join(format!(".probe-{}", std::process::id()));
        match std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&probe, b"")) {
            Ok(()) => {
                let _ = std::fs::remove_file(&probe);
                return Ok(dir);
            }
            Err(e) => why.push(format!("{}: {e}", dir.display())),
        }
    }
    Err(format!("no writable directory for the C peer ({})", why.join("; ")))
}

fn build_c_peer() -> Result<PathBuf, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/peer.c");
    let exe = scratch_dir()?.join(format!("peer-c-{}", std::process::id()));
    cc::build(&src, &exe, &[])?;
    Ok(exe)
}

// ------------------------------------------------------------------ interop pairs

#[derive(Clone, Copy, Debug)]
enum Side {
    C,
    Rust,
}

fn peer_cmd(side: Side, role: &str, addr: &str, port: u16) -> Result<Command, Failed> {
    Ok(match side {
        Side::C => {
            let mut cmd = Command::new(c_peer()?);
            cmd.args([role, addr, &port.to_string()]);
            cmd
        }
        Side::Rust => self_cmd(role, addr, port)?,
    })
}

fn self_cmd(role: &str, addr: &str, port: u16) -> Result<Command, Failed> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.env(PEER_ENV, role).env(ADDR_ENV, addr).env(PORT_ENV, port.to_string());
    Ok(cmd)
}

/// Runs a server and a client of the protocol; both must exit 0.
fn pair(server: Side, client: Side, port: u16) -> Result<(), Failed> {
    let (_, addr) = target()?;
    let s_cmd = peer_cmd(server, "server", &addr, port)?;
    let c_cmd = peer_cmd(client, "client", &addr, port)?;
    run_pair(server, client, s_cmd, c_cmd)
}

/// [`pair`] with the server's data region on slot `slot` (2 MiB) of `RPMA_TEST_PMEM`, with
/// persistent usage and a persistent flush in WRITE-PERS (no `RPMA_INTEROP_NO_PERSISTENT`), the
/// Rust peers under the default persistent flush rule (native where the device has native
/// flush). Without `RPMA_TEST_PMEM` it says so and checks nothing (not asked for).
fn pmem_pair(server: Side, client: Side, port: u16, slot: u64) -> Result<(), Failed> {
    let Some(pmem) = std::env::var("RPMA_TEST_PMEM").ok().filter(|p| !p.is_empty()) else {
        eprintln!("RPMA_TEST_PMEM unset: no pmem pair (SOFTROCE_PMEM=256M scripts/test-verbs.sh runs them)");
        return Ok(());
    };
    let (_, addr) = target()?;
    let mut s_cmd = peer_cmd(server, "server", &addr, port)?;
    let mut c_cmd = peer_cmd(client, "client", &addr, port)?;
    for cmd in [&mut s_cmd, &mut c_cmd] {
        cmd.env_remove("RPMA_INTEROP_NO_PERSISTENT")
            .env("RPMA_VERBS_PERSISTENT_FLUSH", "native")
            .env("RPMA_INTEROP_PMEM", &pmem)
            .env("RPMA_INTEROP_PMEM_OFFSET", (slot << 21).to_string());
    }
    run_pair(server, client, s_cmd, c_cmd)
}

fn run_pair(server: Side, client: Side, s_cmd: Command, c_cmd: Command) -> Result<(), Failed> {
    let mut s = Proc::spawn(&format!("{server:?} server"), s_cmd)?;
    if let Err(e) = s.wait_line("LISTENING", LISTEN_TIMEOUT) {
        return Err(format!("{e}\n{}", s.finish()).into());
    }
    let mut c = Proc::spawn(&format!("{client:?} client"), c_cmd)?;
    let mut deadline = Instant::now() + PAIR_TIMEOUT;
    let mut timed_out = false;
    loop {
        let (ss, cs) = (s.poll_exit(), c.poll_exit());
        if let (Some(ss), Some(cs)) = (ss, cs) {
            if ss.success() && cs.success() {
                return Ok(());
            }
            break;
        }
        if [ss, cs].iter().flatten().any(|st| !st.success()) {
            deadline = deadline.min(Instant::now() + GRACE);
        }
        if Instant::now() >= deadline {
            timed_out = true;
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let failed = [s.poll_exit(), c.poll_exit()].iter().flatten().any(|st| !st.success());
    let what = match (failed, timed_out) {
        (true, true) => "failed (the other peer was killed after the grace period)",
        (true, false) => "failed",
        (false, _) => "timed out (both peers killed)",
    };
    Err(format!("{server:?} server + {client:?} client {what}\n{}{}", s.finish(), c.finish()).into())
}

// ------------------------------------------------------------------ process death

fn expect_peer_gone(conn: &Conn<T>, victim: Proc) -> Result<(), Failed> {
    let mut victim = victim;
    let killed = Instant::now();
    victim.kill();
    let log = victim.finish();
    let ev = next_event_within(conn, DEATH_BOUND).map_err(|e| format!("after SIGKILL of the peer: {e}\n{log}"))?;
    match ev {
        ConnEvent::Lost | ConnEvent::Closed => {
            println!("survivor saw {ev:?} {:?} after SIGKILL of the peer", killed.elapsed());
            Ok(())
        }
        other => Err(format!("after SIGKILL of the peer: event {other:?}, expected Lost or Closed\n{log}").into()),
    }
}

/// The client process dies; the server (this process) sees it.
fn client_dies(port: u16) -> Result<(), Failed> {
    let (_, addr) = target()?;
    let t = transport();
    let peer = new_peer(&t, &addr, ContextType::Local)?;
    let ep = Ep::listen(&peer, &addr, &port.to_string()).map_err(|e| format!("Ep::listen: {e}"))?;
    let child = Proc::spawn("hold-client", self_cmd("hold-client", &addr, port)?)?;
    let conn = match accept_one(&ep) {
        Ok(c) => c,
        Err(e) => return Err(format!("{e}\n{}", child.finish()).into()),
    };
    if let Err(e) = child.wait_line("CONNECTED", LISTEN_TIMEOUT) {
        return Err(format!("{e}\n{}", child.finish()).into());
    }
    expect_peer_gone(&conn, child)?;
    conn.disconnect().map_err(|e| format!("Conn::disconnect after the peer died: {e}"))?;
    conn.delete().map_err(|e| format!("Conn::delete after the peer died: {e}"))?;
    ep.shutdown().map_err(|e| format!("Ep::shutdown: {e}"))?;
    Ok(())
}

/// The server process dies; the client (this process) sees it.
fn server_dies(port: u16) -> Result<(), Failed> {
    let (_, addr) = target()?;
    let t = transport();
    let child = Proc::spawn("hold-server", self_cmd("hold-server", &addr, port)?)?;
    if let Err(e) = child.wait_line("LISTENING", LISTEN_TIMEOUT) {
        return Err(format!("{e}\n{}", child.finish()).into());
    }
    let peer = new_peer(&t, &addr, ContextType::Remote)?;
    let conn = match connect_one(&peer, &addr, &port.to_string()) {
        Ok(c) => c,
        Err(e) => return Err(format!("{e}\n{}", child.finish()).into()),
    };
    if let Err(e) = child.wait_line("CONNECTED", LISTEN_TIMEOUT) {
        return Err(format!("{e}\n{}", child.finish()).into());
    }
    expect_peer_gone(&conn, child)?;
    conn.disconnect().map_err(|e| format!("Conn::disconnect after the peer died: {e}"))?;
    conn.delete().map_err(|e| format!("Conn::delete after the peer died: {e}"))?;
    Ok(())
}

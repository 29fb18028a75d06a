//! Fault sweep of the verbs transport on a real RDMA device.
//!
//! One client/server flow on one thread — device lookup, two peers, a file-mapped (on tmpfs,
//! see `file_dir`) and two page-aligned regions, listen, connection request with a receive posted, connect/accept,
//! ESTABLISHED on both sides, write + flush + read + send/recv with their completions (through
//! the completion channels), disconnect both ways, and the release of everything — is run once
//! to count its provider calls (N, through `rpma_verbs::faults`, feature `verbs-fault-injection`;
//! the memory itself is mapped and allocated by rpma-mem, whose calls are not counted). Then for
//! every k in 1..=N the flow runs again with call k failing with `EIO` (then the whole sweep
//! again with `ENOMEM`), and the test checks:
//! - the injected failure fired at a call of the flow and surfaced: the flow returned an error
//!   of the kind documented for that call (or, for a release made in a `Drop`, an error was
//!   logged);
//! - no panic and no hang: every wait is a `poll(2)` with a deadline, and a watchdog aborts the
//!   run if one iteration takes more than two minutes;
//! - after the teardown, the live-resource counters of `rpma_verbs::faults` are back to what they
//!   were and the process has as many open fds as before — unless the failed call is a release
//!   after which the device may still reach what it held (`ibv_destroy_qp`, `ibv_dereg_mr`):
//!   rpma-verbs then abandons it on purpose (docs/decisions.md, "Failed releases leak"), which
//!   must show in `rpma::verbs::leaks()` (one QP, or one region, more), and what is left becomes
//!   the baseline of the next runs;
//! - the peer of a connection that got that far sees CLOSED, LOST, REJECTED or UNREACHABLE, or
//!   an error — within the deadline.
//!
//! After the sweep, three cases check the leak paths and the device context's lifetime
//! precisely: `dereg_failure_leaks_the_region` (a failed `ibv_dereg_mr`, by `dereg` and by a
//! drop of a file-mapped region: the error returned, the leak counted with its bytes and
//! logged, the file still mapped in /proc/self/maps),
//! `destroy_qp_failure_leaks_the_queue_pair` (the QP, the region of its posted receive and its
//! flush buffer counted, the registration kept after the user's `dereg`) and
//! `device_context_outlives_its_objects` (the CM id of a device lookup lives as long as a region
//! made on the device).
//!
//! The fault state is process-global, so this is a `harness = false` test running everything
//! on its main thread. Like tests/verbs.rs: without `RPMA_TEST_DEVICE` it prints one line and
//! succeeds; with it set, a missing `RPMA_TEST_ADDR` or a device that does not own that address
//! fails the run. Run it with scripts/test-verbs.sh (Soft-RoCE VM).
#![allow(missing_docs)]

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rpma::mem::MapOptions;
use rpma::verbs::{faults, leaks, Conn, ConnReq, Cq, Device, Ep, MrLocal, Peer, Verbs};
use rpma::{ConnEvent, ContextType, ErrorKind, FlushType, MrRemote, Usage};

/// How long one wait for an event or a completion may take.
const WAIT: Duration = Duration::from_secs(20);
/// How long one iteration (flow + teardown) may take before the watchdog aborts the run.
const ITERATION_LIMIT: Duration = Duration::from_secs(120);
/// The errnos injected: a sweep with each.
const INJECTED: [nix::errno::Errno; 2] = [nix::errno::Errno::EIO, nix::errno::Errno::ENOMEM];

/// Error-level log records (rpma-core's default log function forwards rpma-verbs' messages to
/// `log`).
static ERRORS: AtomicUsize = AtomicUsize::new(0);
/// The error-level messages about leaks (`leaking ...`).
static LEAK_LINES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

struct CountErrors;

impl log::Log for CountErrors {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Error
    }
    fn log(&self, r: &log::Record<'_>) {
        if r.level() <= log::Level::Error {
            ERRORS.fetch_add(1, Ordering::SeqCst);
            let msg = r.args().to_string();
            if msg.starts_with("leaking") {
                LEAK_LINES.lock().unwrap().push(msg);
            }
            if std::env::var_os("RPMA_FAULTS_VERBOSE").is_some() {
                eprintln!("  logged: {}", r.args());
            }
        }
    }
    fn flush(&self) {}
}

/// Why a flow stopped (the fields are read through `Debug` in the failure messages).
#[derive(Debug)]
#[allow(dead_code)]
enum Failure {
    /// An rpma call failed.
    Rpma(&'static str, rpma::Error),
    /// Mapping the file failed (rpma-mem; no provider call).
    Mem(&'static str, rpma::mem::MemError),
    /// A wait ran out of time (a hang).
    Timeout(&'static str),
    /// Something other than expected came back.
    Unexpected(&'static str, String),
}

type Flow<T> = Result<T, Failure>;

trait Step<T> {
    fn at(self, step: &'static str) -> Flow<T>;
}

impl<T> Step<T> for rpma::Result<T> {
    fn at(self, step: &'static str) -> Flow<T> {
        self.map_err(|e| Failure::Rpma(step, e))
    }
}

/// Everything a flow may leave behind when it stops early.
#[derive(Default)]
struct State {
    speer: Option<Peer>,
    cpeer: Option<Peer>,
    smr: Option<MrLocal>,
    srecv: Option<MrLocal>,
    cmr: Option<MrLocal>,
    ep: Option<Ep>,
    client: Option<Conn>,
    server: Option<Conn>,
    /// The connection already took its terminal event (CLOSED, ...).
    client_done: bool,
    server_done: bool,
}

fn set_nonblocking(fd: BorrowedFd<'_>) {
    let raw = fd.as_raw_fd();
    let flags = nix::fcntl::fcntl(raw, nix::fcntl::FcntlArg::F_GETFL).expect("F_GETFL");
    let flags = nix::fcntl::OFlag::from_bits_retain(flags) | nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(raw, nix::fcntl::FcntlArg::F_SETFL(flags)).expect("F_SETFL O_NONBLOCK");
}

/// Waits until `fd` is readable, for at most `WAIT`.
fn readable(fd: BorrowedFd<'_>, step: &'static str) -> Flow<()> {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Failure::Timeout(step));
        }
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [nix::poll::PollFd::new(fd, nix::poll::PollFlags::POLLIN)];
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => {}
            Ok(_) => return Ok(()),
            Err(e) => return Err(Failure::Unexpected(step, format!("poll: {e}"))),
        }
    }
}

/// The next connection event (one `rdma_get_cm_event` once the fd is readable).
fn next_event(c: &Conn, step: &'static str) -> Flow<ConnEvent> {
    readable(c.event_fd(), step)?;
    c.next_event().at(step)
}

fn expect_event(c: &Conn, want: ConnEvent, step: &'static str) -> Flow<()> {
    match next_event(c, step)? {
        e if e == want => Ok(()),
        e => Err(Failure::Unexpected(step, format!("{e:?} instead of {want:?}"))),
    }
}

/// One completion: wait for the channel's event, then poll once.
fn completion(cq: Cq<'_>, wr_id: u64, step: &'static str) -> Flow<rpma::Wc> {
    readable(cq.fd(), step)?;
    cq.wait().at(step)?;
    let wc = cq.next_wc().at(step)?.ok_or(Failure::Unexpected(step, "an empty CQ after its event".into()))?;
    if wc.wr_id() != wr_id || !wc.is_success() {
        return Err(Failure::Unexpected(step, format!("{wc:?} (wanted wr_id {wr_id}, success)")));
    }
    Ok(wc)
}

const PATTERN: [u8; 64] = {
    let mut p = [0u8; 64];
    let mut i = 0;
    while i < 64 {
        p[i] = (i as u8).wrapping_mul(37) ^ 0xA5;
        i += 1;
    }
    p
};

/// The whole flow; every object goes into `st` as soon as it exists, so that a failure leaves
/// the rest to `teardown`. On success `st` is empty again.
fn flow(st: &mut State, addr: &str, port: &str, file: &std::path::Path) -> Flow<()> {
    let t = Verbs::new();
    let dev = Device::lookup(&t, addr, ContextType::Local).at("device lookup")?;
    st.speer = Some(Peer::new(&dev).at("server peer")?);
    st.cpeer = Some(Peer::new(&dev).at("client peer")?);
    let (speer, cpeer) = (st.speer.as_ref().unwrap(), st.cpeer.as_ref().unwrap());
    // SAFETY: [M5] the file is private to this test process; nothing truncates it while mapped.
    let mapped = unsafe { MapOptions::new().create(true).len(4096).map(file) }
        .map_err(|e| Failure::Mem("server mr (file)", e))?;
    st.smr = Some(
        speer
            .reg_mr(mapped, Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_VISIBILITY)
            .at("server mr (file)")?,
    );
    st.srecv = Some(speer.alloc_mr(64, Usage::RECV).at("server recv mr")?);
    st.cmr = Some(cpeer.alloc_mr(4096, Usage::WRITE_SRC | Usage::READ_DST | Usage::SEND).at("client mr")?);
    let (smr, srecv, cmr) = (st.smr.as_ref().unwrap(), st.srecv.as_ref().unwrap(), st.cmr.as_ref().unwrap());
    let remote = MrRemote::from_descriptor(&smr.descriptor()).at("descriptor")?;

    st.ep = Some(Ep::listen(speer, addr, port).at("server listen")?);
    let ep = st.ep.as_ref().unwrap();
    set_nonblocking(ep.fd());
    let req = ConnReq::new(cpeer, addr, port, None).at("client conn_req_new")?;
    st.client = Some(req.connect(Some(b"faults")).at("client connect")?);
    let client = st.client.as_ref().unwrap();
    set_nonblocking(client.event_fd());
    set_nonblocking(client.cq().fd());
    readable(ep.fd(), "server next_conn_req")?;
    let sreq = ep.next_conn_req(None).at("server next_conn_req")?;
    // The CM pads private data (to 56 bytes on IB/RoCE).
    if !sreq.private_data().starts_with(b"faults") {
        return Err(Failure::Unexpected("server next_conn_req", format!("private data {:?}", sreq.private_data())));
    }
    sreq.recv(srecv.slice(0..64)).context(40).post().at("server conn_req recv")?;
    st.server = Some(sreq.connect(None).at("server accept")?);
    let server = st.server.as_ref().unwrap();
    set_nonblocking(server.event_fd());
    set_nonblocking(server.cq().fd());
    expect_event(client, ConnEvent::Established, "client established")?;
    expect_event(server, ConnEvent::Established, "server established")?;

    cmr.write(0, &PATTERN).at("client fill")?;
    client.write(remote.at(0), cmr.slice(0..64)).context(1).post().at("client write")?;
    completion(client.cq(), 1, "client write completion")?;
    client.flush(remote.slice(0..64), FlushType::Visibility).context(2).post().at("client flush")?;
    completion(client.cq(), 2, "client flush completion")?;
    client.read(cmr.slice(64..128), remote.at(0)).context(3).post().at("client read")?;
    completion(client.cq(), 3, "client read completion")?;
    if cmr.to_vec(64, 64).at("client read back")? != PATTERN {
        return Err(Failure::Unexpected("client read", "bytes differ from what was written".into()));
    }
    client.send(cmr.slice(0..16)).context(4).post().at("client send")?;
    completion(client.cq(), 4, "client send completion")?;
    let wc = completion(server.cq(), 40, "server recv completion")?;
    if wc.byte_len() != 16 || srecv.to_vec(0, 16).at("server recv bytes")? != PATTERN[..16] {
        return Err(Failure::Unexpected("server recv", format!("{wc:?} or bytes differ")));
    }

    client.disconnect().at("client disconnect")?;
    expect_event(server, ConnEvent::Closed, "server closed")?;
    st.server_done = true;
    server.disconnect().at("server disconnect")?;
    expect_event(client, ConnEvent::Closed, "client closed")?;
    st.client_done = true;

    st.client.take().unwrap().delete().at("client delete")?;
    st.server.take().unwrap().delete().at("server delete")?;
    st.ep.take().unwrap().shutdown().at("server ep shutdown")?;
    st.cmr.take().unwrap().dereg().at("client mr dereg")?;
    st.srecv.take().unwrap().dereg().at("server recv mr dereg")?;
    st.smr.take().unwrap().dereg().at("server mr dereg")?;
    st.cpeer.take().unwrap().delete().at("client peer delete")?;
    st.speer.take().unwrap().delete().at("server peer delete")?;
    Ok(())
}

/// Takes events until a terminal one; Ok(description) or a timeout.
fn drain(c: &Conn, who: &'static str) -> Flow<String> {
    loop {
        match next_event(c, who) {
            Ok(ConnEvent::Established) => {}
            Ok(e) => return Ok(format!("{e:?}")),
            Err(Failure::Rpma(_, e)) => return Ok(format!("error {:?}", e.kind())),
            Err(f) => return Err(f),
        }
    }
}

/// Releases what a stopped flow left: the connection of the side that failed first (the
/// client's if `client_failed`), then the other side's, after checking that it sees its end.
/// Returns how many releases reported an error and what the other side saw.
fn teardown(st: &mut State, client_failed: bool) -> Flow<(usize, Vec<String>)> {
    let mut errors = 0;
    let mut seen = Vec::new();
    let mut note = |r: rpma::Result<()>| errors += usize::from(r.is_err());
    if client_failed {
        // Deleting the client destroys its id, which sends a DREQ if it got connected.
        if let Some(client) = st.client.take() {
            note(client.delete());
        }
        if let Some(server) = st.server.take() {
            if !st.server_done {
                seen.push(format!("server: {}", drain(&server, "server end")?));
            }
            note(server.delete());
        }
    } else if let Some(server) = st.server.take() {
        note(server.delete());
    }
    if let Some(ep) = st.ep.take() {
        note(ep.shutdown());
    }
    if let Some(client) = st.client.take() {
        if !st.client_done {
            seen.push(format!("client: {}", drain(&client, "client end")?));
        }
        note(client.delete());
    }
    for mr in [st.cmr.take(), st.srecv.take(), st.smr.take()].into_iter().flatten() {
        note(mr.dereg().map(drop));
    }
    for p in [st.cpeer.take(), st.speer.take()].into_iter().flatten() {
        note(p.delete());
    }
    Ok((errors, seen))
}

/// The kind an injected errno surfaces as, by call (docs/errors.md): a provider failure is
/// `Provider`; a failed wait for a completion event is `NoCompletion` (librpma's `rpma_cq_wait`);
/// `ENOMEM` from `ibv_alloc_pd` is `OutOfMemory` (`rpma_peer_new`). (Memory is mapped and allocated
/// by rpma-mem, whose calls are not injection points.)
fn expected_kind(call: &str, errno: nix::errno::Errno) -> ErrorKind {
    match (call, errno) {
        ("ibv_get_cq_event", _) => ErrorKind::NoCompletion,
        ("ibv_alloc_pd", nix::errno::Errno::ENOMEM) => ErrorKind::OutOfMemory,
        _ => ErrorKind::Provider,
    }
}

/// The environment: `Ok(None)` = skip, `Err` = fail loudly.
fn environment() -> Result<Option<String>, String> {
    let Some(dev) = std::env::var("RPMA_TEST_DEVICE").ok().filter(|d| !d.is_empty()) else {
        return Ok(None);
    };
    let Some(addr) = std::env::var("RPMA_TEST_ADDR").ok().filter(|a| !a.is_empty()) else {
        return Err(format!("RPMA_TEST_DEVICE={dev} is set but RPMA_TEST_ADDR is not"));
    };
    let d = Device::lookup(&Verbs::new(), &addr, ContextType::Local)
        .map_err(|e| format!("no RDMA device owns {addr} (RPMA_TEST_ADDR): {e}"))?;
    if d.name() != dev {
        return Err(format!("{addr} belongs to device {}, not RPMA_TEST_DEVICE={dev}", d.name()));
    }
    Ok(Some(addr))
}

/// Where the test's files are mapped: a tmpfs (`/dev/shm`, else the temporary directory).
/// Since Linux 6.5 the kernel refuses a long-term writable pin (`ibv_reg_mr` of a region the
/// device writes) of a shared file mapping whose file system tracks dirty pages (ext4, xfs, the
/// VM's 9p share under `target/`): `EFAULT`. tmpfs (shmem) needs no dirty tracking.
fn file_dir() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("verbs fault sweep FAILED: {msg}");
    std::process::exit(1);
}

fn main() {
    // libtest-style arguments are accepted and ignored except for listing.
    if std::env::args().any(|a| a == "--list") {
        for t in [
            "verbs_fault_sweep",
            "dereg_failure_leaks_the_region",
            "destroy_qp_failure_leaks_the_queue_pair",
            "device_context_outlives_its_objects",
        ] {
            println!("{t}: test");
        }
        return;
    }
    let addr = match environment() {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("verbs fault sweep skipped: RPMA_TEST_DEVICE unset (run it with scripts/test-verbs.sh)");
            return;
        }
        Err(e) => {
            eprintln!("verbs fault sweep cannot run: {e}");
            std::process::exit(2);
        }
    };
    log::set_logger(&CountErrors).expect("logger");
    log::set_max_level(log::LevelFilter::Error);

    let file = file_dir().join(format!("verbs_faults.{}", std::process::id()));
    // Below the ephemeral range (32768..), from which a device lookup's CM id takes its port.
    let base = 2_000 + (std::process::id() % 20) * 400;
    let mut next_port = base;
    let mut port = || {
        next_port += 1;
        next_port.to_string()
    };

    // Watchdog: a hang anywhere (even inside a provider call) fails the run instead of blocking.
    static ITERATION: AtomicU64 = AtomicU64::new(0);
    static STARTED_MS: AtomicU64 = AtomicU64::new(0);
    let t0 = Instant::now();
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_secs(1));
        let started = STARTED_MS.load(Ordering::SeqCst);
        let now = t0.elapsed().as_millis() as u64;
        if started != 0 && now.saturating_sub(started) > ITERATION_LIMIT.as_millis() as u64 {
            eprintln!(
                "verbs fault sweep FAILED: iteration {} hangs (over {} s; armed failure fired: {:?})",
                ITERATION.load(Ordering::SeqCst),
                ITERATION_LIMIT.as_secs(),
                faults::fired()
            );
            std::process::exit(3);
        }
    });
    let begin = |k: u64| {
        ITERATION.store(k, Ordering::SeqCst);
        STARTED_MS.store(t0.elapsed().as_millis() as u64 + 1, Ordering::SeqCst);
    };

    // Warm-up (librdmacm opens its device contexts once per process), then the counted run.
    let clean_run = |port: String, what: &str| -> Vec<&'static str> {
        let mut st = State::default();
        faults::reset();
        if let Err(f) = flow(&mut st, &addr, &port, &file) {
            fail(&format!("{what} run without faults: {f:?}"));
        }
        let calls = faults::calls();
        if !faults::live().is_zero() {
            fail(&format!("{what} run leaves live resources: {}", faults::live()));
        }
        calls
    };
    begin(u64::MAX);
    clean_run(port(), "warm-up");
    let fds = faults::open_fds().expect("/proc/self/fd");
    let calls = clean_run(port(), "counting");
    let again = clean_run(port(), "second counting");
    if calls != again {
        fail(&format!("the flow's provider calls differ between two runs:\n{calls:?}\n{again:?}"));
    }
    if faults::open_fds().expect("/proc/self/fd") != fds {
        fail("fds leak in a run without faults");
    }
    let n = calls.len() as u64;
    let mut distinct: BTreeMap<&str, usize> = BTreeMap::new();
    for c in &calls {
        *distinct.entry(c).or_default() += 1;
    }
    println!(
        "verbs fault sweep on {addr}: the flow makes N = {n} checked provider calls ({} distinct):",
        distinct.len()
    );
    for (c, k) in &distinct {
        println!("  {c} x{k}");
    }
    if ERRORS.load(Ordering::SeqCst) != 0 {
        fail("errors were logged by runs without faults");
    }

    let started = Instant::now();
    // What is live (and the open fds) before a run; it only changes by a documented leak.
    let (mut base_live, mut base_fds) = (faults::live(), fds);
    let mut documented_leaks: BTreeMap<String, usize> = BTreeMap::new();
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    let mut peer_seen: BTreeMap<String, usize> = BTreeMap::new();
    for (k, errno) in INJECTED.iter().flat_map(|&e| (1..=n).map(move |k| (k, e))) {
        begin(k);
        let logged_before = ERRORS.load(Ordering::SeqCst);
        let leaks_before = leaks();
        let mut st = State::default();
        faults::fail_nth(k, errno as i32);
        let r = flow(&mut st, &addr, &port(), &file);
        let fired = faults::fired();
        faults::disarm();
        let Some((at, call)) = fired else {
            fail(&format!("k={k}: the armed failure never fired (flow result {r:?})"));
        };
        if at != k || call != calls[(k - 1) as usize] {
            fail(&format!("k={k}: fired at call {at} ({call}), expected {}", calls[(k - 1) as usize]));
        }
        let client_failed = matches!(&r, Err(Failure::Rpma(step, _)) if step.starts_with("client"));
        let (released_errors, seen) = match teardown(&mut st, client_failed) {
            Ok(x) => x,
            Err(f) => fail(&format!("k={k} ({call}): teardown: {f:?} (flow result {r:?})")),
        };
        let logged = ERRORS.load(Ordering::SeqCst) - logged_before;
        let outcome = match &r {
            Err(Failure::Rpma(step, e)) => {
                let want = expected_kind(call, errno);
                if e.kind() != want {
                    fail(&format!("k={k} ({call}): {step} failed with {:?}, expected {want:?}: {e}", e.kind()));
                }
                format!("{call} {errno:?} -> {step}: {:?}", e.kind())
            }
            Err(f @ (Failure::Timeout(_) | Failure::Unexpected(..) | Failure::Mem(..))) => {
                fail(&format!("k={k} ({call}): {f:?}"));
            }
            Ok(()) if logged > 0 || released_errors > 0 => format!("{call} {errno:?} -> logged by a drop"),
            Ok(()) => fail(&format!("k={k} ({call}): the flow succeeded and nothing reported the failure")),
        };
        let live = faults::live();
        let now = faults::open_fds().expect("/proc/self/fd");
        let leaked = leaks();
        if leaked == leaks_before {
            if live != base_live {
                fail(&format!("k={k} ({call}): leaked after teardown: {live}, {base_live} before ({outcome})"));
            }
            if now != base_fds {
                fail(&format!("k={k} ({call}): {now} open fds after teardown, {base_fds} before ({outcome})"));
            }
        } else {
            // Abandoned on purpose: only after a failed release the device may outlive, and
            // exactly what that release held.
            let (qps, regions) = (leaked.qps - leaks_before.qps, leaked.regions - leaks_before.regions);
            let kept: Vec<String> = faults::Resource::ALL
                .iter()
                .map(|&r| (r, live.get(r) - base_live.get(r)))
                .filter(|&(_, d)| d != 0)
                .map(|(r, d)| format!("{r:?}{d:+}"))
                .collect();
            let kept = if kept.is_empty() { "nothing".to_owned() } else { kept.join(" ") };
            let documented = match call {
                // The QP's CQs, channels, CM id, event channel, PD (with the device's lookup id)
                // and the regions its work requests held.
                "ibv_destroy_qp" => qps == 1,
                // The registration is gone; only its memory is kept (no live resource).
                "ibv_dereg_mr" => qps == 0 && regions == 1 && kept == "nothing",
                _ => false,
            };
            if !documented {
                fail(&format!(
                    "k={k} ({call}): {qps} QP(s) and {regions} region(s) leaked, which no failure of {call} \
                     documents ({outcome}; live {live})"
                ));
            }
            *documented_leaks
                .entry(format!("{call}: {qps} QP(s), {regions} region(s); resources kept: {kept}"))
                .or_default() += 1;
            (base_live, base_fds) = (live, now);
        }
        for s in seen {
            *peer_seen.entry(s).or_default() += 1;
        }
        *outcomes.entry(outcome).or_default() += 1;
    }
    STARTED_MS.store(0, Ordering::SeqCst);
    let _ = std::fs::remove_file(&file);
    println!("outcomes (failed call -> where it surfaced: kind):");
    for (o, c) in &outcomes {
        println!("  {o} x{c}");
    }
    println!("what the other side saw:");
    for (s, c) in &peer_seen {
        println!("  {s} x{c}");
    }
    println!("abandoned on purpose after a failed release (rpma::verbs::leaks):");
    for (s, c) in &documented_leaks {
        println!("  {s} x{c}");
    }
    println!(
        "verbs fault sweep: {n} injection points x {} errnos, all failed cleanly (no leaked resource or fd but \
         those of the {} documented leaks, no hang) in {:.1} s",
        INJECTED.len(),
        documented_leaks.values().sum::<usize>(),
        started.elapsed().as_secs_f64()
    );
    println!("test verbs_fault_sweep ... ok");
    let cases: [(&str, Case); 3] = [
        ("dereg_failure_leaks_the_region", dereg_failure_leaks_the_region),
        ("destroy_qp_failure_leaks_the_queue_pair", destroy_qp_failure_leaks_the_queue_pair),
        ("device_context_outlives_its_objects", device_context_outlives_its_objects),
    ];
    for (name, case) in cases {
        begin(0);
        faults::reset();
        if let Err(e) = case(&addr, &mut port) {
            fail(&format!("{name}: {e}"));
        }
        println!("test {name} ... ok");
    }
    STARTED_MS.store(0, Ordering::SeqCst);
    println!("test result: ok. {} passed; 0 failed; 0 ignored; 0 measured; 0 filtered out", 1 + cases.len());
}

/// A case after the sweep: (address, next free port) -> Ok or what went wrong.
type Case = fn(&str, &mut dyn FnMut() -> String) -> Result<(), String>;

fn check(cond: bool, what: &str) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(what.to_owned())
    }
}

fn leak_lines() -> usize {
    LEAK_LINES.lock().unwrap().len()
}

fn leak_lines_since(n: usize) -> Vec<String> {
    LEAK_LINES.lock().unwrap()[n..].to_vec()
}

fn eio() -> i32 {
    nix::errno::Errno::EIO as i32
}

/// The line of /proc/self/maps whose range holds `addr`, if any.
fn mapping_at(addr: u64) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    maps.lines()
        .find(|l| {
            let range = l.split_whitespace().next().unwrap_or("");
            let Some((lo, hi)) = range.split_once('-') else { return false };
            let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16)) else { return false };
            (lo..hi).contains(&addr)
        })
        .map(str::to_owned)
}

/// A failed `ibv_dereg_mr` (by `dereg` and by a drop): the region's bytes are leaked, never
/// freed or unmapped (a file mapping stays mapped), the failure is returned or logged, and the
/// leak is counted and logged.
fn dereg_failure_leaks_the_region(addr: &str, _port: &mut dyn FnMut() -> String) -> Result<(), String> {
    let e = |what: &'static str| move |e: rpma::Error| format!("{what}: {e}");
    let dev = Device::lookup(&Verbs::new(), addr, ContextType::Local).map_err(e("lookup"))?;
    let peer = Peer::new(&dev).map_err(e("peer"))?;
    let mr = peer.alloc_mr(8192, Usage::WRITE_DST | Usage::READ_SRC).map_err(e("alloc_mr"))?;
    mr.write(0, b"kept").map_err(e("write"))?;
    let before = leaks();
    let lines = leak_lines();
    faults::fail_next("ibv_dereg_mr", eio());
    let r = mr.dereg();
    faults::disarm();
    check(faults::fired().map(|f| f.1) == Some("ibv_dereg_mr"), "the injected failure did not fire")?;
    match r {
        Err(err) if err.kind() == ErrorKind::Provider => {}
        other => return Err(format!("dereg returned {other:?}, expected a provider error")),
    }
    let after = leaks();
    check(after.regions == before.regions + 1 && after.bytes == before.bytes + 8192, "leak not counted")?;
    let logged = leak_lines_since(lines);
    check(logged.len() == 1 && logged[0].contains("8192 bytes"), &format!("leak not logged: {logged:?}"))?;

    // A file-mapped region dropped without `dereg`: the mapping is never unmapped (rpma-mem
    // maps it, so no counter of rpma-verbs sees it: /proc/self/maps does).
    let file = file_dir().join(format!("verbs_leak.{}", std::process::id()));
    // SAFETY: [M5] the file is private to this test process; nothing truncates it while mapped
    // (it stays mapped for good: only its name is removed below).
    let mapped = unsafe { MapOptions::new().create(true).len(4096).map(&file) }
        .map_err(|err| format!("mapping {}: {err}", file.display()))?;
    let fmr = peer.reg_mr(mapped, Usage::WRITE_DST).map_err(e("reg_mr file"))?;
    let base = fmr.addr();
    let path = file.to_string_lossy().into_owned();
    let shows_file = |l: &Option<String>| l.as_deref().is_some_and(|l| l.contains(path.as_str()));
    check(shows_file(&mapping_at(base)), &format!("the file is not mapped at {base:#x}: {:?}", mapping_at(base)))?;
    faults::fail_next("ibv_dereg_mr", eio());
    drop(fmr);
    faults::disarm();
    let maps_line = mapping_at(base);
    let _ = std::fs::remove_file(&file);
    check(faults::fired().map(|f| f.1) == Some("ibv_dereg_mr"), "the injected failure did not fire (drop)")?;
    check(shows_file(&maps_line), &format!("a leaked mapping was unmapped: {maps_line:?} at {base:#x}"))?;
    let again = leaks();
    check(again.regions == after.regions + 1 && again.bytes == after.bytes + 4096, "drop: leak not counted")?;
    let logged = leak_lines_since(lines);
    check(logged.len() == 2 && logged[1].contains("4096 bytes"), &format!("drop: leak not logged: {logged:?}"))?;
    peer.delete().map_err(e("peer delete"))
}

/// A failed `ibv_destroy_qp`: `delete` reports it, the QP is counted as leaked, and the region
/// of the receive it still has posted stays registered (and its bytes allocated) after the
/// user deregistered it, as does the connection's flush buffer.
fn destroy_qp_failure_leaks_the_queue_pair(addr: &str, port: &mut dyn FnMut() -> String) -> Result<(), String> {
    let e = |what: &'static str| move |e: rpma::Error| format!("{what}: {e}");
    let f = |f: Failure| format!("{f:?}");
    let port = port();
    let dev = Device::lookup(&Verbs::new(), addr, ContextType::Local).map_err(e("lookup"))?;
    let speer = Peer::new(&dev).map_err(e("server peer"))?;
    let cpeer = Peer::new(&dev).map_err(e("client peer"))?;
    let srecv = speer.alloc_mr(64, Usage::RECV).map_err(e("recv mr"))?;
    let ep = Ep::listen(&speer, addr, &port).map_err(e("listen"))?;
    set_nonblocking(ep.fd());
    let client = ConnReq::new(&cpeer, addr, &port, None).and_then(|r| r.connect(None)).map_err(e("client connect"))?;
    set_nonblocking(client.event_fd());
    readable(ep.fd(), "next_conn_req").map_err(f)?;
    let sreq = ep.next_conn_req(None).map_err(e("next_conn_req"))?;
    sreq.recv(srecv.slice(0..64)).context(9).post().map_err(e("recv"))?;
    let server = sreq.connect(None).map_err(e("accept"))?;
    set_nonblocking(server.event_fd());
    expect_event(&client, ConnEvent::Established, "client established").map_err(f)?;
    expect_event(&server, ConnEvent::Established, "server established").map_err(f)?;
    client.disconnect().map_err(e("client disconnect"))?;
    expect_event(&server, ConnEvent::Closed, "server closed").map_err(f)?;
    server.disconnect().map_err(e("server disconnect"))?;
    expect_event(&client, ConnEvent::Closed, "client closed").map_err(f)?;

    // Every QP has an 8-byte flush buffer (with native flush too: persistent flushes are RDMA
    // Reads, docs/native-ops.md).
    let before = leaks();
    let lines = leak_lines();
    faults::fail_next("ibv_destroy_qp", eio());
    let r = server.delete();
    faults::disarm();
    check(faults::fired().map(|f| f.1) == Some("ibv_destroy_qp"), "the injected failure did not fire")?;
    match r {
        Err(err) if err.kind() == ErrorKind::Provider => {}
        other => return Err(format!("delete returned {other:?}, expected a provider error")),
    }
    let after = leaks();
    check(after.qps == before.qps + 1, "QP leak not counted")?;
    check(
        after.regions == before.regions + 2 && after.bytes == before.bytes + 64 + 8,
        &format!("regions of the leaked QP not counted: {before:?} -> {after:?}"),
    )?;
    check(leak_lines_since(lines).iter().any(|l| l.contains("queue pair")), "QP leak not logged")?;
    // The user's handle goes; the registration stays (the leaked receive still references it):
    // `dereg` gives no memory back.
    let mrs = faults::live().get(faults::Resource::Mr);
    match srecv.dereg() {
        Ok(None) => {}
        other => return Err(format!("dereg of the leaked receive's region returned {other:?}, expected Ok(None)")),
    }
    check(faults::live().get(faults::Resource::Mr) == mrs, "a region of a leaked QP was deregistered")?;
    client.delete().map_err(e("client delete"))?;
    ep.shutdown().map_err(e("shutdown"))?;
    cpeer.delete().map_err(e("client peer delete"))?;
    speer.delete().map_err(e("server peer delete"))
}

/// librdmacm closes a device context once the device is gone and no CM id refers to it; a
/// device handle keeps the CM id of its lookup, and everything made on the device keeps the
/// handle. (Removing the rxe device while the test runs is not possible: rxe cannot
/// disassociate user contexts, so the removal would wait for this process.)
fn device_context_outlives_its_objects(addr: &str, _port: &mut dyn FnMut() -> String) -> Result<(), String> {
    let e = |what: &'static str| move |e: rpma::Error| format!("{what}: {e}");
    let ids = || faults::live().get(faults::Resource::CmId);
    let base = ids();
    let dev = Device::lookup(&Verbs::new(), addr, ContextType::Local).map_err(e("lookup"))?;
    check(ids() == base + 1, "the device handle holds no CM id")?;
    let peer = Peer::new(&dev).map_err(e("peer"))?;
    let mr = peer.alloc_mr(4096, Usage::WRITE_DST).map_err(e("alloc_mr"))?;
    drop(dev);
    peer.delete().map_err(e("peer delete"))?;
    check(ids() == base + 1, "the CM id went before the region made on its device")?;
    mr.dereg().map_err(e("dereg"))?;
    check(ids() == base, "the CM id outlived the last object of its device")?;
    Ok(())
}

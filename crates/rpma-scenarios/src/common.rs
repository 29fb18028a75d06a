//! What librpma's `examples/common` provides, on the rpma API: peers by address, connecting
//! and accepting with private data, waiting for close, waiting for completions, the "hello"
//! structure and memory backed by a file with a signature check.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use super::{file_lock, Stop};
use anyhow::{anyhow, bail, ensure, Context, Result};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use rpma::mem::MemError;
use rpma::{
    Conn, ConnCfg, ConnEvent, ConnReq, ContextType, Cq, Device, Ep, Memory, MrLocal, Peer, Transport, Usage, Wc,
    WcOpcode, WcStatus,
};

/// `KILOBYTE`.
pub const KILOBYTE: usize = 1024;
/// `HELLO_STR_SIZE`: the string field of `struct hello_t`.
pub const HELLO_STR_SIZE: usize = 1024;
/// `offsetof(struct hello_t, str)` (after the 4-byte `enum lang_t`).
pub const HELLO_STR_OFFSET: usize = 4;
/// `sizeof(struct hello_t)`.
pub const HELLO_T_SIZE: usize = HELLO_STR_OFFSET + HELLO_STR_SIZE;
/// The signature marking initialized file content (`SIGNATURE_STR` with its NUL).
pub const SIGNATURE: &[u8] = b"RPMA_EXAMPLE_SIG\0";
/// The operation context of the flushes of examples 05, 07 and 09 (`FLUSH_ID`).
pub const FLUSH_ID: u64 = 0xF01D;
/// The strings of `struct hello_t` by language (`en`, `es`).
pub const HELLO_STR: [&str; 2] = ["Hello world!", "\u{a1}Hola Mundo!"];

/// `server_peer_via_address`: a peer on the device owning `addr`.
///
/// # Errors
/// If no device owns `addr` or the peer cannot be created.
pub fn server_peer<T: Transport>(t: &T, addr: &str) -> Result<Peer<T>> {
    let dev = Device::lookup(t, addr, ContextType::Local).with_context(|| format!("no RDMA device owns {addr}"))?;
    Ok(Peer::new(&dev)?)
}

/// `client_peer_via_address`: a peer on the device routing to `addr`.
///
/// # Errors
/// If `addr` cannot be resolved or the peer cannot be created.
pub fn client_peer<T: Transport>(t: &T, addr: &str) -> Result<Peer<T>> {
    let dev = Device::lookup(t, addr, ContextType::Remote).with_context(|| format!("cannot reach {addr}"))?;
    Ok(Peer::new(&dev)?)
}

/// `client_connect`: connects to `addr:port` with `pdata` and waits for ESTABLISHED. A request
/// the server rejected or could not be reached (not listening yet) is retried `retries` times,
/// `delay` apart.
///
/// # Errors
/// If the connection cannot be made.
pub fn connect<T: Transport>(
    peer: &Peer<T>,
    addr: &str,
    port: &str,
    cfg: Option<&ConnCfg<T>>,
    pdata: Option<&[u8]>,
    retries: u32,
    delay: Duration,
) -> Result<Conn<T>> {
    let from_env = link_settings(cfg)?;
    let cfg = from_env.as_ref().or(cfg);
    let mut attempt = 0;
    loop {
        let conn = ConnReq::new(peer, addr, port, cfg)?.connect(pdata)?;
        match next_event_within(&conn, establish_timeout())? {
            ConnEvent::Established => return Ok(conn),
            ev @ (ConnEvent::Rejected | ConnEvent::Unreachable) if attempt < retries => {
                attempt += 1;
                let _ = conn.delete();
                let _ = ev;
                thread::sleep(delay);
            }
            ev => bail!("connecting to {addr}:{port}: {}", not_established(ev)),
        }
    }
}

/// `cfg` (or the default configuration) with the retry settings of the environment, if it sets
/// any: `RPMA_ACK_TIMEOUT` (the local ACK timeout exponent, [`ConnCfg::with_ack_timeout`]) and
/// `RPMA_RETRY_COUNT` ([`ConnCfg::with_retry_count`]). A link that loses packets wants a short
/// ACK timeout: with the connection manager's, a lost packet costs about 2 s on rxe
/// (scripts/test-cluster.sh runs the scenarios under loss so). `None` when neither is set.
///
/// # Errors
/// If a variable is set to something other than a number 0..=255 (the range is the
/// connection's to check).
pub fn link_settings<T: Transport>(cfg: Option<&ConnCfg<T>>) -> Result<Option<ConnCfg<T>>> {
    let var = |name: &str| -> Result<Option<u8>> {
        std::env::var(name)
            .ok()
            .map(|v| v.parse().with_context(|| format!("{name}={v}: not a number 0..=255")))
            .transpose()
    };
    let (ack, retry) = (var("RPMA_ACK_TIMEOUT")?, var("RPMA_RETRY_COUNT")?);
    if ack.is_none() && retry.is_none() {
        return Ok(None);
    }
    let mut c = cfg.cloned().unwrap_or_default();
    if let Some(n) = ack {
        c = c.with_ack_timeout(n);
    }
    if let Some(n) = retry {
        c = c.with_retry_count(n);
    }
    Ok(Some(c))
}

/// What a client knows when its connection is not established: a rejection comes from a
/// server that runs (its own output says why), an unreachable one from no server at all.
#[must_use]
pub fn not_established(ev: ConnEvent) -> String {
    match ev {
        ConnEvent::Rejected => {
            format!("{ev}: the server received the request and refused it (a server error or a request it does not accept: the server's output says which)")
        }
        ConnEvent::Unreachable => {
            format!("{ev}: no server answered (not running or not listening yet, or another address or port)")
        }
        ev => ev.to_string(),
    }
}

/// `server_accept_connection` with a hook to pre-post receives on the request
/// (`rpma_conn_req_recv`) before accepting: takes the next request, accepts it with `pdata`
/// and waits for ESTABLISHED. With an armed `stop`, waiting for the request ends when it is
/// raised.
///
/// # Errors
/// If the request cannot be taken or accepted, the connection is not established, or `stop`
/// was raised first.
pub fn accept<T: Transport>(
    ep: &Ep<T>,
    stop: &Stop,
    cfg: Option<&ConnCfg<T>>,
    pdata: Option<&[u8]>,
    prepost: impl FnOnce(&ConnReq<T>) -> Result<()>,
) -> Result<Conn<T>> {
    if stop.is_armed() {
        wait_for_request(ep, stop)?;
    }
    let from_env = link_settings(cfg)?;
    let req = ep.next_conn_req(from_env.as_ref().or(cfg))?;
    if let Err(e) = prepost(&req) {
        let _ = req.delete();
        return Err(e);
    }
    let conn = req.connect(pdata)?;
    match next_event_within(&conn, establish_timeout())? {
        ConnEvent::Established => Ok(conn),
        ev => bail!("rpma_conn_next_event returned an unexpected event: {ev}"),
    }
}

/// How long connecting and accepting wait for the connection's first event (ESTABLISHED, or
/// why not) by default: a peer that dies while the connection is being set up may leave no
/// event at all.
pub const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(5);

/// How long connecting and accepting wait for the connection's first event:
/// `RPMA_ESTABLISH_TIMEOUT_MS` if set (a link that loses packets needs more than the default: a
/// lost connection-manager message is sent again after about 4 s on RoCE), else
/// [`ESTABLISH_TIMEOUT`].
pub fn establish_timeout() -> Duration {
    std::env::var("RPMA_ESTABLISH_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(ESTABLISH_TIMEOUT, Duration::from_millis)
}

/// The connection's next event, if one comes within `timeout`.
///
/// # Errors
/// If polling or taking the event fails, or none came in time.
pub fn next_event_within<T: Transport>(conn: &Conn<T>, timeout: Duration) -> Result<ConnEvent> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        if let Some(ev) = poll_event(conn, PollTimeout::from(ms))? {
            return Ok(ev);
        }
        ensure!(!left.is_zero(), "no connection event within {timeout:?}");
    }
}

/// The connection's next event if its event fd becomes readable within `wait` (one `poll(2)`;
/// `PollTimeout::ZERO`: only if one is pending).
///
/// # Errors
/// If polling or taking the event fails.
pub fn poll_event<T: Transport>(conn: &Conn<T>, wait: PollTimeout) -> Result<Option<ConnEvent>> {
    let mut fds = [PollFd::new(conn.event_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, wait) {
        Ok(n) if n > 0 => Ok(Some(conn.next_event()?)),
        Ok(_) | Err(nix::errno::Errno::EINTR) => Ok(None),
        Err(e) => Err(e).context("polling the connection's events"),
    }
}

/// Waits until the endpoint has an event pending, checking `stop` every 10 ms.
fn wait_for_request<T: Transport>(ep: &Ep<T>, stop: &Stop) -> Result<()> {
    loop {
        let mut fds = [PollFd::new(ep.fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(10u8)) {
            Ok(n) if n > 0 => return Ok(()),
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e).context("polling the endpoint"),
        }
        ensure!(!stop.is_requested(), "stopped while waiting for a connection request");
    }
}

/// `common_wait_for_conn_close_and_disconnect`: waits for the peer to close, then disconnects
/// and deletes the connection.
///
/// # Errors
/// If the next event is not CLOSED or tearing down fails.
pub fn wait_close_and_disconnect<T: Transport>(conn: Conn<T>) -> Result<()> {
    let ev = conn.next_event()?;
    ensure!(ev == ConnEvent::Closed, "rpma_conn_next_event returned an unexpected event: {ev}");
    conn.disconnect()?;
    conn.delete()?;
    Ok(())
}

/// `common_disconnect_and_wait_for_conn_close`: disconnects, waits for CLOSED and deletes.
///
/// # Errors
/// If disconnecting fails or the next event is not CLOSED.
pub fn disconnect_and_wait_close<T: Transport>(conn: Conn<T>) -> Result<()> {
    conn.disconnect()?;
    let ev = conn.next_event()?;
    ensure!(ev == ConnEvent::Closed, "rpma_conn_next_event returned an unexpected event: {ev}");
    conn.delete()?;
    Ok(())
}

/// Waits on `cq` (`rpma_cq_wait` + `rpma_cq_get_wc`) until one completion arrives.
///
/// # Errors
/// If waiting or polling fails.
pub fn next_wc<T: Transport>(cq: &Cq<'_, T>) -> Result<Wc> {
    loop {
        if let Some(wc) = cq.next_wc()? {
            return Ok(wc);
        }
        cq.wait()?;
    }
}

/// As [`next_wc`], but also watches the connection's CM events: when the peer goes away while
/// this side waits (a CQ that is not the connection's own, like an SRQ's, is not flushed when the
/// connection breaks), the wait ends with an error naming the event instead of lasting forever.
/// Completions delivered before the event are still returned first (and the event is then left
/// for the caller's teardown).
///
/// # Errors
/// If waiting or polling fails, or the connection reported an event and no completion is left.
pub fn next_wc_or_event<T: Transport>(cq: &Cq<'_, T>, conn: &Conn<T>) -> Result<Wc> {
    let mut event_pending = false;
    loop {
        if let Some(wc) = cq.next_wc()? {
            return Ok(wc);
        }
        if event_pending {
            let ev = conn.next_event()?;
            bail!("the connection reported {ev} while waiting for a completion");
        }
        event_pending = wait_or_event(cq, &[conn])?.is_some();
    }
}

/// Waits for a completion event of `cq` (then `rpma_cq_wait`; returns `None`) or a pending CM
/// event of any of `conns` (returns the connection's index; the event is not taken).
///
/// # Errors
/// If polling or waiting fails.
pub fn wait_or_event<T: Transport>(cq: &Cq<'_, T>, conns: &[&Conn<T>]) -> Result<Option<usize>> {
    let mut fds = vec![PollFd::new(cq.fd(), PollFlags::POLLIN)];
    fds.extend(conns.iter().map(|c| PollFd::new(c.event_fd(), PollFlags::POLLIN)));
    loop {
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e).context("polling the completion channel and the connections"),
        }
        let ready: Vec<bool> = fds.iter().map(|f| f.revents().is_some_and(|r| !r.is_empty())).collect();
        if ready[0] {
            cq.wait()?;
            return Ok(None);
        }
        if let Some(i) = ready[1..].iter().position(|r| *r) {
            return Ok(Some(i));
        }
    }
}

/// Takes every completion `cq` holds now, without waiting.
///
/// # Errors
/// If polling fails or a completion is not successful.
pub fn drain<T: Transport>(cq: &Cq<'_, T>) -> Result<usize> {
    let mut n = 0;
    while let Some(wc) = cq.next_wc()? {
        check_wc(&wc, wc.opcode())?;
        n += 1;
    }
    Ok(n)
}

/// Checks that `wc` is successful and of the `expected` opcode.
///
/// # Errors
/// If not.
pub fn check_wc(wc: &Wc, expected: WcOpcode) -> Result<()> {
    ensure!(wc.status() == WcStatus::Success, "{:?} completed with {:?}", wc.opcode(), wc.status());
    ensure!(wc.opcode() == expected, "unexpected completion opcode ({:?} != {expected:?})", wc.opcode());
    Ok(())
}

/// `wait_and_validate_completion`: the next completion of `cq`, checked for success and opcode.
///
/// # Errors
/// If waiting fails or the completion is not the expected one.
pub fn wait_wc<T: Transport>(cq: &Cq<'_, T>, expected: WcOpcode) -> Result<Wc> {
    let wc = next_wc(cq)?;
    check_wc(&wc, expected)?;
    Ok(wc)
}

/// The next completion of `cq`, which must be a successful flush: a native flush completes as
/// [`WcOpcode::Flush`], an emulated one (APM) as the [`WcOpcode::RdmaRead`] it is made of.
///
/// # Errors
/// If waiting fails or the completion is not a successful flush.
pub fn wait_flush<T: Transport>(cq: &Cq<'_, T>) -> Result<Wc> {
    let wc = next_wc(cq)?;
    ensure!(wc.status() == WcStatus::Success, "rpma_flush completed with {:?}", wc.status());
    ensure!(matches!(wc.opcode(), WcOpcode::Flush | WcOpcode::RdmaRead), "unexpected flush opcode {:?}", wc.opcode());
    Ok(wc)
}

/// Waits on a connection's shared completion channel (`rpma_conn_wait`) and polls whichever CQ
/// it reports until a completion arrives; returns it and whether it came from the receive CQ.
///
/// # Errors
/// If waiting or polling fails.
pub fn next_wc_shared<T: Transport>(conn: &Conn<T>) -> Result<(Wc, bool)> {
    for (cq, is_rcq) in [(Some(conn.cq()), false), (conn.rcq(), true)] {
        if let Some(wc) = cq.map(|cq| cq.next_wc()).transpose()?.flatten() {
            return Ok((wc, is_rcq));
        }
    }
    loop {
        let (cq, is_rcq) = conn.wait()?;
        if let Some(wc) = cq.next_wc()? {
            return Ok((wc, is_rcq));
        }
    }
}

/// The C string at the start of `b` (up to the first NUL), lossily decoded.
#[must_use]
pub fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// `write_hello_str`: `struct hello_t` in language `lang` (0 = en, 1 = es).
#[must_use]
pub fn hello_bytes(lang: u32) -> Vec<u8> {
    let mut b = vec![0u8; HELLO_T_SIZE];
    let lang = lang % 2;
    b[..4].copy_from_slice(&lang.to_ne_bytes());
    let s = HELLO_STR[lang as usize].as_bytes();
    b[HELLO_STR_OFFSET..HELLO_STR_OFFSET + s.len()].copy_from_slice(s);
    b
}

/// `translate`: the hello structure at `offset` of `mr` switched to the next language;
/// returns the new string.
///
/// # Errors
/// If the region is too small.
pub fn translate<T: Transport>(mr: &MrLocal<T>, offset: usize) -> Result<String> {
    let mut lang = [0u8; 4];
    mr.read(offset, &mut lang)?;
    let next = hello_bytes(u32::from_ne_bytes(lang).wrapping_add(1));
    mr.write(offset, &next)?;
    Ok(cstr(&next[HELLO_STR_OFFSET..]))
}

/// Initializes fresh memory: writes at the given offset of the region, returns the bytes written.
pub type InitFn<'a, T> = &'a dyn Fn(&MrLocal<T>, usize) -> Result<usize>;

/// Maps `len` bytes of the file at `path` (creating and extending it if `create`) as memory, so
/// that the registered memory is the file itself (librpma's `pmem_map_file`).
///
/// Mapping a file is `unsafe` (rule M5 of `docs/memory.md`): a program gives its own function,
/// whose promise it makes to its user (the `rpma` command's says that nothing else truncates or
/// writes a `--file` while it runs); without one a `--file` is backed by a
/// copy ([`Mem::file`]).
pub type MapFile =
    fn(path: &Path, offset: u64, len: usize, create: bool, pmem: bool) -> std::result::Result<Memory, MemError>;

/// A side's `--file`: where it is, whether it may be created or extended, and how to map it.
#[derive(Clone, Copy, Debug)]
pub struct FileSource<'a> {
    /// The file.
    pub path: &'a Path,
    /// Create it if it is missing and extend it with zeros if it is too short (`--file-create`);
    /// otherwise it must exist and be long enough.
    pub create: bool,
    /// Map it with this function instead of copying it.
    pub map: Option<MapFile>,
    /// Where the side's memory starts in the file (mapped files only).
    pub offset: u64,
    /// It must be persistent memory (`--pmem`): a devdax device, or a file that maps with
    /// `MAP_SYNC` (a DAX file system); anything else is refused.
    pub pmem: bool,
}

/// Whether the character device `rdev` is a devdax device (sysfs: its subsystem is `dax`).
fn is_devdax(rdev: u64) -> bool {
    let (major, minor) = (nix::sys::stat::major(rdev), nix::sys::stat::minor(rdev));
    std::fs::canonicalize(format!("/sys/dev/char/{major}:{minor}/subsystem"))
        .is_ok_and(|p| p.file_name().is_some_and(|n| n == "dax"))
}

/// The flag that named a side's file: `--pmem` (persistent memory: never created or
/// extended) or `--file`.
const fn flag(pmem: bool) -> &'static str {
    if pmem {
        "--pmem"
    } else {
        "--file"
    }
}

/// What makes a file usable that is missing or too short: `--file-create` for a `--file`; a
/// `--pmem` must be persistent memory that is there already.
const fn remedy(pmem: bool, missing: bool) -> &'static str {
    match (pmem, missing) {
        (true, true) => "give a devdax device or a file of a DAX file system",
        (true, false) => "a --pmem is not extended: give a devdax device or a DAX file system's file that long",
        (false, true) => "--file-create creates it",
        (false, false) => "--file-create extends it",
    }
}

/// Checks that `meta` is a devdax device or a regular file of at least `needed` bytes (or
/// `create`, which extends it); errors name the flag (`pmem`: `--pmem`, else `--file`).
fn check_metadata(path: &Path, meta: &std::fs::Metadata, needed: u64, create: bool, pmem: bool) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let p = path.display();
    let flag = flag(pmem);
    let ft = meta.file_type();
    if ft.is_dir() {
        bail!("{flag} {p} is a directory, not a file");
    }
    if ft.is_char_device() {
        if is_devdax(meta.rdev()) {
            // its size and alignment are checked when it is mapped (sysfs)
            return Ok(());
        }
        bail!("{p} is a character device that is not a devdax device");
    }
    if !ft.is_file() {
        bail!("{flag} {p} is not a regular file");
    }
    if meta.len() < needed && !create {
        bail!("{flag} {p} is {} bytes long, this side needs {needed} bytes ({})", meta.len(), remedy(pmem, false));
    }
    Ok(())
}

/// Checks, without changing anything, that the file at `path` can hold `len` bytes of a side's
/// memory: it exists (or `create`), is a regular file (not a directory, a device, a FIFO or a
/// socket) and is at least `len` bytes long (or `create`, which extends it).
///
/// # Errors
/// Saying which of these it is not.
pub fn check_file(path: &Path, len: usize, create: bool) -> Result<()> {
    check_file_of(path, len, create, false)
}

/// [`check_file`] of the file of `--pmem` (`pmem`) or of `--file`, named so in the errors.
fn check_file_of(path: &Path, len: usize, create: bool, pmem: bool) -> Result<()> {
    let flag = flag(pmem);
    match std::fs::metadata(path) {
        Ok(meta) => check_metadata(path, &meta, len as u64, create, pmem),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("{flag} {} does not exist ({})", path.display(), remedy(pmem, true))
        }
        Err(e) => Err(e).with_context(|| format!("examining {flag} {}", path.display())),
    }
}

/// Opens the file at `path` for `len` bytes of memory from byte `offset` ([`check_file`]),
/// locks that range ([`file_lock::lock_range`]), and only then, holding the lock, checks the
/// file's length and, if `create`, extends it ([`file_lock::extend`]): a side refused the lock
/// leaves the file as it was, and no side ever shortens a file another maps.
fn open_file(path: &Path, offset: u64, len: usize, create: bool, pmem: bool) -> Result<(File, bool)> {
    check_file_of(path, len, create, pmem)?;
    let p = path.display();
    let f =
        OpenOptions::new().read(true).write(true).create(create).open(path).with_context(|| format!("opening {p}"))?;
    file_lock::lock_range(&f, path, offset, len)?;
    // The file opened is the one to check (the path may have changed since), and its length the
    // one it has now that the range is this side's.
    let meta = f.metadata().with_context(|| format!("examining {p}"))?;
    let end = offset.saturating_add(len as u64);
    check_metadata(path, &meta, end, create, pmem)?;
    let devdax = meta.file_type().is_char_device();
    if !devdax && meta.len() < end {
        file_lock::extend(&f, path, end)?;
    }
    Ok((f, devdax))
}

/// The file behind a [`Mem`].
#[derive(Debug)]
struct Backing {
    path: PathBuf,
    file: File,
    /// The registered memory is a mapping of the file (else a copy of it).
    mapped: bool,
    /// The file is a devdax device (no page cache: nothing to sync).
    devdax: bool,
}

/// The file behind memory taken out of a [`Mem`] ([`Mem::into_memory`]): it holds the lock on
/// the file's range until dropped.
#[derive(Debug)]
pub struct MemFile(Backing);

impl MemFile {
    /// The file's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.0.path
    }

    /// Whether the file is a devdax device.
    #[must_use]
    pub const fn is_devdax(&self) -> bool {
        self.0.devdax
    }
}

/// Memory of a scenario: a region and where its user data starts.
#[derive(Debug)]
pub struct Mem<T: Transport> {
    /// The registered region.
    pub mr: MrLocal<T>,
    /// Where the user data starts (after the signature, for a file).
    pub data_offset: usize,
    file: Option<Backing>,
}

impl<T: Transport> Mem<T> {
    /// `common_pmem_map_file_with_signature_check` when `file` is given (the region is the first
    /// `SIGNATURE.len() + size` bytes of the file; uninitialized content, recognized by a missing
    /// signature, is initialized by `init` and persisted, then the signature is written and
    /// persisted), else `size` bytes of page-aligned memory initialized by `init`.
    ///
    /// # Errors
    /// If the file cannot be used ([`check_file`]) or the memory registered.
    pub fn new(
        peer: &Peer<T>,
        file: Option<FileSource<'_>>,
        size: usize,
        usage: Usage,
        init: Option<InitFn<'_, T>>,
    ) -> Result<Self> {
        let Some(src) = file else {
            let mr = peer.alloc_mr(size, usage)?;
            if let Some(init) = init {
                init(&mr, 0)?;
            }
            return Ok(Self { mr, data_offset: 0, file: None });
        };
        let mem = Self::file(peer, src, SIGNATURE.len() + size, usage, SIGNATURE.len())?;
        let mut sig = vec![0u8; SIGNATURE.len()];
        mem.mr.read(0, &mut sig)?;
        if sig != SIGNATURE {
            let n = match init {
                Some(init) => init(&mem.mr, mem.data_offset)?,
                None => {
                    mem.mr.write(mem.data_offset, &[0])?;
                    1
                }
            };
            mem.persist(mem.data_offset, n)?;
            mem.mr.write(0, SIGNATURE)?;
            mem.persist(0, SIGNATURE.len())?;
        }
        Ok(mem)
    }

    /// Registers the first `len` bytes of the file for `usage`, user data at `data_offset`.
    ///
    /// With `src.map` the registered memory is the file's mapping: whatever lands in it (a
    /// peer's write, too) is in the file. Without it (the `rpma` command: it has no safe way to
    /// map a file) the region is a copy of the file's bytes, read once here: what lands in it
    /// reaches the file when this side persists a range ([`Mem::persist`]) or deregisters
    /// ([`Mem::dereg`] writes the whole region back); a peer's flush does not reach the file.
    ///
    /// # Errors
    /// If the file cannot be used ([`check_file`]), read or mapped, or the memory registered.
    pub fn file(peer: &Peer<T>, src: FileSource<'_>, len: usize, usage: Usage, data_offset: usize) -> Result<Self> {
        let p = src.path.display();
        let (file, devdax) = open_file(src.path, src.offset, len, src.create, src.pmem)?;
        let (memory, mapped) = match src.map {
            // open_file created and extended the file as asked.
            Some(map) => (
                map(src.path, src.offset, len, false, src.pmem).map_err(|e| match e {
                    MemError::MapSyncUnsupported { .. } => anyhow!(
                        "--pmem {p}: not persistent memory (neither a devdax device nor a file of a DAX file \
                         system: the kernel refuses MAP_SYNC, so CPU stores would land in the page cache); \
                         nothing was registered"
                    ),
                    e => anyhow!(e).context(format!("mapping {p}")),
                })?,
                true,
            ),
            None if src.offset != 0 || devdax => bail!("{p}: an offset or a devdax device needs a mapping"),
            None => {
                let mut m = Memory::page_aligned(len).with_context(|| format!("allocating {len} bytes for {p}"))?;
                // Not registered yet: a plain slice, filled in place.
                file.read_exact_at(m.as_mut_slice(), 0).with_context(|| format!("reading {p}"))?;
                (m, false)
            }
        };
        let mr = peer.reg_mr(memory, usage).with_context(|| format!("registering {p}"))?;
        Ok(Self { mr, data_offset, file: Some(Backing { path: src.path.to_path_buf(), file, mapped, devdax }) })
    }

    /// Whether the memory is backed by a file ("PMem" in the examples' words).
    #[must_use]
    pub const fn is_pmem(&self) -> bool {
        self.file.is_some()
    }

    /// Whether the registered memory is the file's mapping (not a copy of it).
    #[must_use]
    pub fn is_mapped(&self) -> bool {
        self.file.as_ref().is_some_and(|b| b.mapped)
    }

    /// The backing file, if any.
    #[must_use]
    pub fn path(&self) -> Option<&Path> {
        self.file.as_ref().map(|b| b.path.as_path())
    }

    /// `mem->persist`: makes `[offset, offset + len)` of the region durable in its file now (a
    /// copy writes the range to the file; both `fdatasync` it). A no-op without a file.
    ///
    /// # Errors
    /// If the range is outside the region or the file cannot be written or synced.
    pub fn persist(&self, offset: usize, len: usize) -> Result<()> {
        let Some(b) = &self.file else {
            return Ok(());
        };
        let p = b.path.display();
        if b.mapped {
            // libpmem's pmem_persist: the cache lines written back (devdax, MAP_SYNC) or the
            // pages msynced (rpma_mem::Memory::persist), range checked
            self.mr.persist(offset, len).with_context(|| format!("persisting {p}"))?;
            if b.devdax {
                return Ok(());
            }
        } else {
            let bytes = self.mr.to_vec(offset, len)?;
            b.file.write_all_at(&bytes, offset as u64).with_context(|| format!("writing {p}"))?;
        }
        b.file.sync_data().with_context(|| format!("syncing {p}"))?;
        Ok(())
    }

    /// `rpma_mr_dereg`, then, for a copy of a file, writes the whole region back to the file and
    /// syncs it (a mapping is synced and unmapped by its memory).
    ///
    /// # Errors
    /// If deregistration or the write-back fails.
    pub fn dereg(self) -> Result<()> {
        let memory = self.mr.dereg()?;
        if let Some(b) = self.file.filter(|b| !b.mapped) {
            let p = b.path.display();
            let mut m = memory.with_context(|| format!("{p}: an operation in flight still holds the region"))?;
            b.file.write_all_at(m.as_slice(), 0).with_context(|| format!("writing {p}"))?;
            b.file.sync_data().with_context(|| format!("syncing {p}"))?;
        }
        Ok(())
    }

    /// Deregisters the region and hands its memory to another owner (rpma-log's replica
    /// registers it itself), with the file behind it: the [`MemFile`] holds the lock on the
    /// file's range and must be kept as long as the memory is used. A copy of a file (no
    /// mapping) is refused: what lands in it would not reach the file.
    ///
    /// # Errors
    /// If the memory is a copy of a file, deregistration fails, or an operation still holds it.
    pub fn into_memory(self) -> Result<(Memory, Option<MemFile>)> {
        if let Some(b) = self.file.as_ref().filter(|b| !b.mapped) {
            bail!("{}: the memory is a copy of the file, not its mapping", b.path.display());
        }
        let memory = self.mr.dereg()?.context("an operation in flight still holds the region")?;
        Ok((memory, self.file.map(MemFile)))
    }

    /// The C string at `offset` of the region (at most `max` bytes).
    ///
    /// # Errors
    /// If the range is outside the region.
    pub fn string_at(&self, offset: usize, max: usize) -> Result<String> {
        let max = max.min(self.mr.len().saturating_sub(offset));
        Ok(cstr(&self.mr.to_vec(offset, max)?))
    }
}

/// The C string at `offset` of a side's memory as its file holds it (read back from the file
/// itself, not the region), the memory starting at `file_offset` of the file: read from a
/// regular file, through a new mapping by `map` from a devdax device (which has no `read`).
///
/// # Errors
/// If the file cannot be read or mapped (a devdax device without `map`).
pub fn file_string(path: &Path, file_offset: u64, offset: usize, map: Option<MapFile>) -> Result<String> {
    let mut b = vec![0u8; HELLO_STR_SIZE];
    let meta = std::fs::metadata(path).with_context(|| format!("examining {}", path.display()))?;
    if meta.file_type().is_char_device() {
        let map = map.ok_or_else(|| anyhow!("{} is read through a mapping, and none was given", path.display()))?;
        let m = map(path, file_offset, offset + HELLO_STR_SIZE, false, false)
            .with_context(|| format!("mapping {}", path.display()))?;
        m.volatile().read(offset, &mut b).with_context(|| format!("reading {}", path.display()))?;
    } else {
        let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let n =
            f.read_at(&mut b, file_offset + offset as u64).with_context(|| format!("reading {}", path.display()))?;
        b.truncate(n);
    }
    Ok(cstr(&b))
}

/// The server's region and offset from its `common_data`, checked to hold a `hello_t` string
/// (examples 04 and 05).
///
/// # Errors
/// A descriptor that does not decode, or a region too small past the offset.
pub fn hello_target(cd: &crate::pdata::CommonData) -> Result<(rpma::MrRemote, usize)> {
    let dst = rpma::MrRemote::from_descriptor(&cd.mr_desc)?;
    let offset = usize::from(cd.data_offset);
    ensure!(
        usize::try_from(dst.len())?.saturating_sub(offset) >= HELLO_STR_SIZE,
        "remote memory region size too small for writing the data of the assumed size ({} < {HELLO_STR_SIZE})",
        dst.len().saturating_sub(offset as u64)
    );
    Ok((dst, offset))
}

/// `init_hello`: writes `struct hello_t` in English at `offset`; returns the bytes written.
///
/// # Errors
/// If the region is too small.
pub fn init_hello<T: Transport>(mr: &MrLocal<T>, offset: usize) -> Result<usize> {
    mr.write(offset, &hello_bytes(0)).map_err(|e| anyhow!("init_hello: {e}"))?;
    Ok(HELLO_T_SIZE)
}

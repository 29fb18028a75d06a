//! What librpma's `examples/common` provides, on the rpma API: peers by address, connecting
//! and accepting with private data, waiting for close, waiting for completions, the "hello"
//! structure and memory mapped from a file with a signature check.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::thread;
use std::time::Duration;

use super::Stop;
use anyhow::{anyhow, bail, ensure, Context, Result};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use rpma::generic::{Conn, ConnCfg, ConnReq, Cq, Device, Ep, MrLocal, Peer};
use rpma::{ConnEvent, ContextType, ErrorKind, MrBuffer, Transport, Usage, Wc, WcOpcode, WcStatus};

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
    let mut attempt = 0;
    loop {
        let conn = ConnReq::new(peer, addr, port, cfg)?.connect(pdata)?;
        match next_event_within(&conn, ESTABLISH_TIMEOUT)? {
            ConnEvent::Established => return Ok(conn),
            ev @ (ConnEvent::Rejected | ConnEvent::Unreachable) if attempt < retries => {
                attempt += 1;
                let _ = conn.delete();
                let _ = ev;
                thread::sleep(delay);
            }
            ev => bail!("connecting to {addr}:{port}: {ev}"),
        }
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
    let req = ep.next_conn_req(cfg)?;
    if let Err(e) = prepost(&req) {
        let _ = req.delete();
        return Err(e);
    }
    let conn = req.connect(pdata)?;
    match next_event_within(&conn, ESTABLISH_TIMEOUT)? {
        ConnEvent::Established => Ok(conn),
        ev => bail!("rpma_conn_next_event returned an unexpected event: {ev}"),
    }
}

/// How long connecting and accepting wait for the connection's first event (ESTABLISHED, or
/// why not): a peer that dies while the connection is being set up may leave no event at all.
pub const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(5);

/// The connection's next event, if one comes within `timeout`.
///
/// # Errors
/// If polling or taking the event fails, or none came in time.
pub fn next_event_within<T: Transport>(conn: &Conn<T>, timeout: Duration) -> Result<ConnEvent> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(conn.event_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(n) if n > 0 => return Ok(conn.next_event()?),
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e).context("polling the connection's events"),
        }
        ensure!(!left.is_zero(), "no connection event within {timeout:?}");
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
        match cq.get_wc1() {
            Ok(wc) => return Ok(wc),
            Err(e) if e.kind() == ErrorKind::NoCompletion => cq.wait()?,
            Err(e) => return Err(e.into()),
        }
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
        match cq.get_wc1() {
            Ok(wc) => return Ok(wc),
            Err(e) if e.kind() == ErrorKind::NoCompletion => {}
            Err(e) => return Err(e.into()),
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
    loop {
        match cq.get_wc1() {
            Ok(wc) => {
                check_wc(&wc, wc.opcode)?;
                n += 1;
            }
            Err(e) if e.kind() == ErrorKind::NoCompletion => return Ok(n),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Checks that `wc` is successful and of the `expected` opcode.
///
/// # Errors
/// If not.
pub fn check_wc(wc: &Wc, expected: WcOpcode) -> Result<()> {
    ensure!(wc.status == WcStatus::Success, "{:?} completed with {:?}", wc.opcode, wc.status);
    ensure!(wc.opcode == expected, "unexpected completion opcode ({:?} != {expected:?})", wc.opcode);
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
    ensure!(wc.status == WcStatus::Success, "rpma_flush completed with {:?}", wc.status);
    ensure!(matches!(wc.opcode, WcOpcode::Flush | WcOpcode::RdmaRead), "unexpected flush opcode {:?}", wc.opcode);
    Ok(wc)
}

/// Waits on a connection's shared completion channel (`rpma_conn_wait`) and polls whichever CQ
/// it reports until a completion arrives; returns it and whether it came from the receive CQ.
///
/// # Errors
/// If waiting or polling fails.
pub fn next_wc_shared<T: Transport>(conn: &Conn<T>) -> Result<(Wc, bool)> {
    for (cq, is_rcq) in [(Some(conn.cq()), false), (conn.rcq(), true)] {
        if let Some(cq) = cq {
            match cq.get_wc1() {
                Ok(wc) => return Ok((wc, is_rcq)),
                Err(e) if e.kind() == ErrorKind::NoCompletion => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    loop {
        let (cq, is_rcq) = conn.wait()?;
        match cq.get_wc1() {
            Ok(wc) => return Ok((wc, is_rcq)),
            Err(e) if e.kind() == ErrorKind::NoCompletion => {}
            Err(e) => return Err(e.into()),
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

/// Memory of a scenario: a region and where its user data starts.
#[derive(Debug)]
pub struct Mem<T: Transport> {
    /// The registered region.
    pub mr: MrLocal<T>,
    /// Where the user data starts (after the signature, for a file).
    pub data_offset: usize,
    /// The backing file, if any (then `persist` makes ranges durable).
    pub file: Option<std::path::PathBuf>,
}

impl<T: Transport> Mem<T> {
    /// `common_pmem_map_file_with_signature_check` when `file` is given (the region is the first
    /// `SIGNATURE.len() + size` bytes of the file; uninitialized content, recognized by a missing
    /// signature, is initialized by `init` and persisted, then the signature is written and
    /// persisted), else `size` bytes of page-aligned memory initialized by `init`.
    ///
    /// # Errors
    /// If the file cannot be opened or the memory registered.
    pub fn new(
        peer: &Peer<T>,
        file: Option<&Path>,
        size: usize,
        usage: Usage,
        init: Option<InitFn<'_, T>>,
    ) -> Result<Self> {
        let Some(path) = file else {
            let mr = peer.alloc_mr(size, usage)?;
            if let Some(init) = init {
                init(&mr, 0)?;
            }
            return Ok(Self { mr, data_offset: 0, file: None });
        };
        let len = SIGNATURE.len() + size;
        let mr = peer
            .reg_mr(MrBuffer::File { path: path.to_path_buf(), len }, usage)
            .with_context(|| format!("registering {}", path.display()))?;
        let mem = Self { mr, data_offset: SIGNATURE.len(), file: Some(path.to_path_buf()) };
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

    /// Whether the memory is backed by a file ("PMem" in the examples' words).
    #[must_use]
    pub const fn is_pmem(&self) -> bool {
        self.file.is_some()
    }

    /// `mem->persist`: writes `[offset, offset + len)` of the region to its file now (a no-op
    /// without a file).
    ///
    /// # Errors
    /// If the range is outside the region or the file cannot be written.
    pub fn persist(&self, offset: usize, len: usize) -> Result<()> {
        let Some(path) = &self.file else {
            return Ok(());
        };
        let bytes = self.mr.to_vec(offset, len)?;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        f.write_all_at(&bytes, offset as u64).with_context(|| format!("writing {}", path.display()))?;
        f.sync_data().with_context(|| format!("syncing {}", path.display()))?;
        Ok(())
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

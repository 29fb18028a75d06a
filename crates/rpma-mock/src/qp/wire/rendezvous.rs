//! The rendezvous directory: where a listening endpoint publishes a Unix socket named after its
//! address and port, and where a connecting process looks for it (the connection manager of the
//! cross-process mode).
//!
//! The directory is private to the user: created with mode 0700, and refused if it belongs to
//! another user or grants anything to group or others (a socket there could be someone else's).
//! Each socket is made 0600. A socket left by a process that died (nobody accepts on it) is
//! *stale*: a listener replaces it; a connecting side reports the address unreachable, naming
//! the file. A listener removes its socket when it shuts down.

use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rpma_core::{rpma_log, Error, Result};

use super::frame::{read_frame, Frame, Native};
use super::link::Link;

const EADDRINUSE: i32 = 98;
const EACCES: i32 = 13;

/// How long an accepted socket may take to send its hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(2);

/// The socket of `addr:port` in `dir` (characters a file name should not hold become `_`).
pub(crate) fn socket_path(dir: &Path, addr: &str, port: u16) -> PathBuf {
    let name: String =
        addr.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '-') { c } else { '_' }).collect();
    dir.join(format!("{name}:{port}"))
}

/// Creates `dir` (0700) if needed and checks that it is private to this user.
///
/// # Errors
/// `Provider` (`EACCES`) if it is not a directory, belongs to another user or is open to
/// group or others; the errno of a failed creation.
pub(crate) fn private_dir(dir: &Path, op: &'static str) -> Result<()> {
    // The errno is the error's source (`File exists (os error 17)` follows the message in a
    // report of the chain); an error without one says what it is in the detail.
    let io_err = |e: io::Error, what: &str| match e.raw_os_error() {
        Some(errno) => {
            Error::provider(op, errno).with_detail(&format!("mock rendezvous directory {}: {what}", dir.display()))
        }
        None => Error::provider(op, EACCES)
            .with_detail(&format!("mock rendezvous directory {}: {what}: {e}", dir.display())),
    };
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| io_err(e, "cannot create it"))?;
    let m = std::fs::metadata(dir).map_err(|e| io_err(e, "cannot inspect it"))?;
    let uid = nix::unistd::getuid().as_raw();
    if !m.is_dir() || m.uid() != uid || m.mode() & 0o077 != 0 {
        return Err(Error::provider(op, EACCES).with_detail(&format!(
            "mock rendezvous directory {} is not private (owner {}, mode {:o}; expected a directory of uid {uid}, \
             mode 0700)",
            dir.display(),
            m.uid(),
            m.mode() & 0o7777
        )));
    }
    Ok(())
}

/// Where a published endpoint's connection requests go (the listener, `qp/listener.rs`).
pub(crate) trait ConnectRequests: Send + Sync {
    /// A request came over `link` (not accepted yet) with the private data of its hello.
    fn push_request(&self, link: Arc<Link>, pdata: Box<[u8]>);
}

/// A listening endpoint's socket in the rendezvous directory and the thread accepting on it.
pub(crate) struct Published {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Published {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Published").field("path", &self.path).finish_non_exhaustive()
    }
}

/// Publishes a listener: binds `addr:port`'s socket (replacing a stale one) and accepts
/// connection requests on a thread of its own, each handed to `requests` after its hello.
///
/// # Errors
/// `Provider` `EADDRINUSE` if a live process listens there, the errno of a failed bind or of
/// the directory's checks.
pub(crate) fn publish(
    dir: &Path,
    addr: &str,
    port: u16,
    max_pdata: usize,
    requests: Weak<dyn ConnectRequests>,
) -> Result<Published> {
    const OP: &str = "rdma_bind_addr";
    private_dir(dir, OP)?;
    let path = socket_path(dir, addr, port);
    let fail = |e: io::Error, what: &str| {
        Error::provider(OP, e.raw_os_error().unwrap_or(EACCES)).with_detail(&format!("{what} {}: {e}", path.display()))
    };
    if path.exists() {
        if UnixStream::connect(&path).is_ok() {
            return Err(Error::provider(OP, EADDRINUSE)
                .with_detail(&format!("another process listens on {addr}:{port} ({})", path.display())));
        }
        rpma_log!(Notice, "replacing the stale mock rendezvous socket {}", path.display());
        std::fs::remove_file(&path).map_err(|e| fail(e, "cannot remove the stale socket"))?;
    }
    let listener = UnixListener::bind(&path).map_err(|e| fail(e, "cannot bind"))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(|e| fail(e, "cannot chmod"))?;
    let stop = Arc::new(AtomicBool::new(false));
    let (s, name) = (Arc::clone(&stop), format!("{addr}:{port}"));
    let thread = std::thread::Builder::new()
        .name("rpma-mock-listen".into())
        .spawn(move || accept_loop(&listener, &s, &name, max_pdata, &requests))
        .map_err(|e| {
            let _ = std::fs::remove_file(&path);
            fail(e, "cannot start the accepting thread of")
        })?;
    Ok(Published { path, stop, thread: Some(thread) })
}

impl Drop for Published {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wakes the accepting thread, which sees `stop`.
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn accept_loop(
    listener: &UnixListener,
    stop: &AtomicBool,
    name: &str,
    max_pdata: usize,
    requests: &Weak<dyn ConnectRequests>,
) {
    for conn in listener.incoming() {
        if stop.load(Ordering::Acquire) {
            return;
        }
        let Ok(stream) = conn else { continue };
        match hello(stream, max_pdata) {
            Ok((stream, native, pdata)) => {
                let Some(l) = requests.upgrade() else { return };
                match Link::start(stream, None, native, name.to_owned(), None) {
                    Ok(link) => l.push_request(link, pdata.into_boxed_slice()),
                    Err(e) => rpma_log!(Warning, "mock listener {name}: a connection request is dropped: {e}"),
                }
            }
            Err(e) => rpma_log!(Warning, "mock listener {name}: a connection request is refused: {e}"),
        }
    }
}

/// A socket read against a deadline: each read may wait only for what is left of it, so a peer
/// sending a byte now and then cannot stretch the whole beyond it.
struct Deadline<'a> {
    stream: &'a mut UnixStream,
    at: Instant,
}

impl Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "the hello took longer than its time"));
        }
        self.stream.set_read_timeout(Some(left))?;
        self.stream.read(buf)
    }
}

/// Reads the hello of an accepted socket, within [`HELLO_TIMEOUT`] in all.
fn hello(mut stream: UnixStream, max_pdata: usize) -> io::Result<(UnixStream, Native, Vec<u8>)> {
    let f = read_frame(&mut Deadline { stream: &mut stream, at: Instant::now() + HELLO_TIMEOUT })?;
    stream.set_read_timeout(None)?;
    match f {
        Some(Frame::Hello { native, pdata }) if pdata.len() <= max_pdata => Ok((stream, native, pdata)),
        Some(Frame::Hello { .. }) => Err(io::Error::new(io::ErrorKind::InvalidData, "private data too long")),
        Some(_) => Err(io::Error::new(io::ErrorKind::InvalidData, "the first frame is no hello")),
        None => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed before its hello")),
    }
}

/// Connects to the listener of `addr:port` in `dir`: the socket, or `None` if nobody listens
/// there (no socket, or a stale one: logged with its path).
///
/// # Errors
/// `Provider` with the errno of any other failure (a bad directory included).
pub(crate) fn dial(dir: &Path, addr: &str, port: u16) -> Result<Option<UnixStream>> {
    const OP: &str = "rdma_connect";
    private_dir(dir, OP)?;
    let path = socket_path(dir, addr, port);
    match UnixStream::connect(&path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            rpma_log!(Notice, "nobody listens on {addr}:{port}: {} is a stale mock rendezvous socket", path.display());
            Ok(None)
        }
        Err(e) => Err(Error::provider(OP, e.raw_os_error().unwrap_or(EACCES))
            .with_detail(&format!("cannot reach {}: {e}", path.display()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rendezvous path that is a file: the error names the directory and what failed, and
    /// its source the errno: the chain says it once.
    #[test]
    fn a_directory_that_cannot_be_made_says_why_once() {
        let file = std::env::temp_dir().join(format!("rpma-rendezvous-test-{}", std::process::id()));
        std::fs::write(&file, b"").unwrap();
        let e = private_dir(&file, "Ep::listen").unwrap_err();
        std::fs::remove_file(&file).unwrap();
        let source = std::error::Error::source(&e).expect("the errno").to_string();
        let text = format!("{e}: {source}");
        assert_eq!(e.errno(), Some(17), "{text}");
        assert!(text.contains(&format!("mock rendezvous directory {}: cannot create it", file.display())), "{text}");
        assert_eq!(text.matches("File exists").count(), 1, "{text}");
    }
}

//! Servers sharing one `--file`: a side locks its range of the file before it looks at the
//! file's length or extends it, so a side refused the lock fails with one line naming the file
//! and the holder and leaves the file as it was, and no side ever shortens a file another maps
//! (rule M5 of docs/memory.md: a mapping cut short raises SIGBUS).
#![cfg(feature = "mock")]

use std::io::{BufRead, BufReader, Read};
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use nix::fcntl::{fcntl, FcntlArg};
use nix::libc;

const RPMA: &str = env!("CARGO_BIN_EXE_rpma");

/// Rounds of each race: two servers started at once, on one file.
const ROUNDS: u16 = 20;

const MIB: u64 = 1 << 20;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn len(path: &Path) -> u64 {
    std::fs::metadata(path).expect("the file").len()
}

/// `rpma log serve` on the mock's cross-process mode with `--file path --file-create`, its region
/// of `size` bytes at `offset` of the file.
fn log_serve(rv: &Path, port: u16, path: &Path, size: u64, offset: u64) -> Command {
    let mut c = Command::new(RPMA);
    c.args(["log", "serve", "--backend", "mock", "--addr", "127.0.0.1", "--port", &port.to_string()])
        .arg("--file")
        .arg(path)
        .args(["--file-create", "--size", &size.to_string(), "--file-offset", &offset.to_string()])
        .env("RPMA_MOCK_RENDEZVOUS", rv)
        .env_remove("RUST_BACKTRACE");
    c
}

/// A server process killed when dropped.
struct Server {
    child: Child,
    size: u64,
}

impl Server {
    fn spawn(mut c: Command, size: u64) -> Self {
        let child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("rpma starts");
        Self { child, size }
    }

    /// Its first line: it serves from then on (its region is mapped and registered).
    fn first_line(&mut self) -> String {
        let mut line = String::new();
        BufReader::new(self.child.stdout.as_mut().expect("stdout")).read_line(&mut line).expect("a line");
        line
    }

    fn stderr(&mut self) -> String {
        let mut s = String::new();
        let _ = self.child.stderr.as_mut().expect("stderr").read_to_string(&mut s);
        s
    }

    /// Whether it is still running: a server dies only of a signal here (SIGBUS, were its mapping
    /// cut short).
    fn check_alive(&mut self, what: &str) {
        if let Some(st) = self.child.try_wait().expect("wait") {
            let size = self.size;
            panic!("{what}: the server of {size} bytes ended ({st}): {}", self.stderr());
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The first of `servers` to end (the one refused the lock), within 60 s.
fn first_to_end(servers: &mut [Server; 2], what: &str) -> (usize, ExitStatus) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for (i, s) in servers.iter_mut().enumerate() {
            if let Some(st) = s.child.try_wait().expect("wait") {
                return (i, st);
            }
        }
        assert!(Instant::now() < deadline, "{what}: both servers still run after 60 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The refusal: exit code 1 (not a signal), one line naming the file and the range in use.
fn check_refusal(what: &str, st: ExitStatus, err: &str, path: &Path) {
    assert_eq!(st.code(), Some(1), "{what}: {st} (signal {:?}): {err}", st.signal());
    assert_eq!(err.lines().count(), 1, "{what}: {err:?}");
    assert!(err.contains(&path.display().to_string()) && err.contains("are in use by"), "{what}: {err}");
    assert!(!err.contains("panicked"), "{what}: {err}");
}

/// Takes a write lock on the whole of the file at `path` as the servers do (an open file
/// description lock), held until the returned file is closed.
fn lock_whole_file(path: &Path) -> std::fs::File {
    let f = std::fs::File::options().read(true).write(true).open(path).expect("the file opens");
    let lock =
        libc::flock { l_type: libc::F_WRLCK as i16, l_whence: libc::SEEK_SET as i16, l_start: 0, l_len: 0, l_pid: 0 };
    fcntl(f.as_raw_fd(), FcntlArg::F_OFD_SETLK(&lock)).expect("the test takes the lock");
    f
}

/// A file whose range this process holds: `rpma log serve` and `rpma server` asking to extend it
/// are refused, name this process, and leave the file's length as it was.
#[test]
fn a_range_another_process_holds_is_refused_and_the_file_left_as_it_was() {
    let dir = tempfile::tempdir().expect("a directory");
    let rv = dir.path().join("rv");
    let path = dir.path().join("pool");
    std::fs::write(&path, [0u8; 4096]).expect("the file");
    let _held = lock_whole_file(&path);
    let holder = format!("in use by process {}", std::process::id());
    let mut server = Command::new(RPMA);
    server
        .args(["server", "--backend", "mock", "--addr", "127.0.0.1", "--port", "7611", "-s", "flush-to-persistent"])
        .arg("--file")
        .arg(&path)
        .args(["--file-create", "--file-offset", &MIB.to_string()])
        .env("RPMA_MOCK_RENDEZVOUS", &rv)
        .env_remove("RUST_BACKTRACE");
    for (what, mut cmd) in [("rpma log serve", log_serve(&rv, 7610, &path, MIB, 0)), ("rpma server", server)] {
        let o = cmd.output().expect("rpma runs");
        let err = stderr(&o);
        assert_eq!(len(&path), 4096, "{what} changed the length of a file it could not lock: {err}");
        check_refusal(what, o.status, &err, &path);
        assert!(err.contains(&holder), "{what}: the holder is not named: {err}");
    }
}

/// Two `rpma log serve` on one range of a new file, started at once, asking for 1 MiB and
/// 512 KiB: whichever locks first serves, the other is refused without touching the file, whose
/// length is the winner's while the winner runs (and the winner lives on).
#[test]
fn two_servers_racing_on_one_range_the_loser_leaves_the_file_alone() {
    let dir = tempfile::tempdir().expect("a directory");
    let rv = dir.path().join("rv");
    let mut wins = [0u16; 2];
    for round in 0..ROUNDS {
        let what = format!("round {round}");
        let path = dir.path().join(format!("pool{round}"));
        let port = 7620 + 2 * round;
        let mut servers = [
            Server::spawn(log_serve(&rv, port, &path, MIB, 0), MIB),
            Server::spawn(log_serve(&rv, port + 1, &path, MIB / 2, 0), MIB / 2),
        ];
        let (loser, st) = first_to_end(&mut servers, &what);
        let err = servers[loser].stderr();
        check_refusal(&what, st, &err, &path);
        let winner = &mut servers[1 - loser];
        let line = winner.first_line();
        assert!(line.starts_with("rpma log serve: log"), "{what}: {line}{}", winner.stderr());
        assert_eq!(len(&path), winner.size, "{what}: the file is not the length its server set: {err}");
        winner.check_alive(&what);
        wins[1 - loser] += 1;
    }
    eprintln!("wins: 1 MiB {}, 512 KiB {}", wins[0], wins[1]);
}

/// Two `rpma log serve` on disjoint ranges of a new file (1 MiB at 0, 512 KiB at 1 MiB), started
/// at once: both serve, and the file holds both ranges while they run (the side whose range ends
/// first never shortens the file to its own end).
#[test]
fn two_servers_racing_on_disjoint_ranges_both_keep_their_pages() {
    let dir = tempfile::tempdir().expect("a directory");
    let rv = dir.path().join("rv");
    for round in 0..ROUNDS {
        let what = format!("round {round}");
        let path = dir.path().join(format!("pool{round}"));
        let port = 7660 + 2 * round;
        let mut servers = [
            Server::spawn(log_serve(&rv, port, &path, MIB, 0), MIB),
            Server::spawn(log_serve(&rv, port + 1, &path, MIB / 2, MIB), MIB / 2),
        ];
        for s in &mut servers {
            let line = s.first_line();
            assert!(line.starts_with("rpma log serve: log"), "{what}: {line}{}", s.stderr());
        }
        assert_eq!(len(&path), MIB + MIB / 2, "{what}: the file does not hold both ranges");
        for s in &mut servers {
            s.check_alive(&what);
        }
    }
}

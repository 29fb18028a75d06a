//! # rpma-scenarios: librpma's examples as scenarios
//!
//! One module per example of librpma (01 to 13, plus the SRQ ping-pong and the shared completion
//! channel variants), each with a `server` and a `client` function generic over any
//! [`rpma::Transport`] that return a report, and a `demo` that runs both sides in one process
//! and checks what each side saw against the other. [`Scenario`] names them; the `rpma` command
//! runs them (`rpma demo`, `rpma server`, `rpma client`), and so do the tests and fault sweeps.
//!
//! | scenario | librpma example | what flows |
//! |---|---|---|
//! | `connection` | 01-connection | private data both ways at connect/accept |
//! | `read-to-volatile` | 02-read-to-volatile | client reads the server's string into DRAM |
//! | `read-to-persistent` | 03-read-to-persistent | server reads the client's hello into its (file) memory |
//! | `write-to-persistent` | 04-write-to-persistent | client writes, then reads back 8 bytes (read-after-write) |
//! | `flush-to-persistent` | 05-flush-to-persistent | client writes and flushes (APM; persistent if the server says direct write to PMem) |
//! | `multiple-connections` | 06-multiple-connections | server reads each client's name into its slot |
//! | `multiple-connections-shared-channel` | 06scch-multiple-connections | as 06, the server waiting for completions on each connection's completion channel (`rpma_conn_wait`) |
//! | `atomic-write` | 07-atomic-write | write → flush → atomic write of the log's `used` → flush, per word |
//! | `messages-ping-pong` | 08-messages-ping-pong | send/recv of a counter, server increments |
//! | `flush-to-persistent-gpspm` | 09-flush-to-persistent-GPSPM | write, then a flush request message; the server persists and replies |
//! | `flush-to-persistent-gpspm-shared-channel` | 09scch-flush-to-persistent-GPSPM | as 09 with one completion channel for the CQ and the receive CQ (`rpma_conn_wait`) |
//! | `send-with-imm` | 10-send-with-imm | send with immediate data (0-byte if no word) |
//! | `write-with-imm` | 11-write-with-imm | write with immediate data; the server compares |
//! | `receive-completion-queue` | 12-receive-completion-queue | ping-pong with receives on a separate CQ |
//! | `messages-ping-pong-with-srq` | 13-messages-ping-pong-with-srq | several clients, one shared receive queue |
//! | `srq-ping-pong` | 08srq-simple-messages-ping-pong-with-srq | one connection through an SRQ; receive completions on the SRQ's CQ, the main CQ or the connection's receive CQ |
//! | `shared-channel` | 12scch-receive-completion-queue | as 12 with one completion channel for both CQs (`rpma_conn_wait`) |

//!
//! Every scenario keeps the data flow and the private-data layout of the librpma example it
//! follows: the 28-byte `common_data` container ([`pdata::CommonData`]) with the memory region
//! descriptor, the optional peer-configuration descriptor and the data offset, in native byte
//! order; the same message slots, offsets, sizes and operation contexts.
//!
//! The crate is also the toolkit that the command's other parts (the benchmark `rpma-bench`, the
//! `rpma log` command) share with the scenarios: [`common`] (peers, connections, memory and
//! files as the examples set them up), [`native`] (whether flushes and atomic writes went native
//! or emulated), [`backend`] (`--backend mock|verbs` and running work on the chosen transport),
//! [`args`] (the command line's value parsers), [`usage`] (usage errors, exit status 2),
//! [`stderr`] (notes on stderr) and [`processes`] (a scenario's sides as processes of the
//! `rpma` binary).
//!
//! Nothing here maps a file itself: mapping is `unsafe` (rule M5 of `docs/memory.md`), so a
//! program that wants `--file` mapped gives its own [`common::MapFile`].
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use rpma::Transport;

pub mod args;
pub mod backend;
pub mod common;
mod file_lock;
pub mod native;
pub mod pdata;
#[cfg(feature = "mock")]
pub mod power_cut;
pub mod processes;
pub mod promise;
pub mod s01_connection;
pub mod s02_read_to_volatile;
pub mod s03_read_to_persistent;
pub mod s04_write_to_persistent;
pub mod s05_flush_to_persistent;
pub mod s06_multiple_connections;
pub mod s07_atomic_write;
pub mod s08_messages_ping_pong;
pub mod s09_flush_to_persistent_gpspm;
pub mod s10_send_with_imm;
pub mod s11_write_with_imm;
pub mod s12_receive_completion_queue;
pub mod s13_messages_ping_pong_with_srq;
pub mod srq_ping_pong;
pub mod stderr;
pub mod usage;

/// What a side of a scenario saw, as lines for a person to read.
pub trait Report: std::fmt::Debug + Send {
    /// The report's lines.
    fn lines(&self) -> Vec<String>;
}

/// Tells whoever started the server that it listens (so a client in the same process may
/// connect). Signaling is optional: a no-op when nobody waits.
#[derive(Clone, Debug, Default)]
pub struct Ready(Option<mpsc::Sender<()>>);

impl Ready {
    /// A signal nobody waits for.
    #[must_use]
    pub const fn none() -> Self {
        Self(None)
    }

    /// A signal sent on `tx` (for a caller running the sides itself, like [`run_pair`] does).
    #[must_use]
    pub const fn from_sender(tx: mpsc::Sender<()>) -> Self {
        Self(Some(tx))
    }

    /// Signals that the server listens.
    pub fn signal(&self) {
        if let Some(tx) = &self.0 {
            let _ = tx.send(());
        }
    }
}

/// Asks a server waiting for connection requests to give up (e.g. because its clients failed
/// before connecting). Without a flag (the default) a server waits for its clients forever,
/// like librpma's examples.
#[derive(Clone, Debug, Default)]
pub struct Stop(Option<Arc<AtomicBool>>);

impl Stop {
    /// A flag that [`Stop::request`] raises.
    #[must_use]
    pub fn new() -> Self {
        Self(Some(Arc::new(AtomicBool::new(false))))
    }

    /// Asks the server to stop waiting for connection requests.
    pub fn request(&self) {
        if let Some(f) = &self.0 {
            f.store(true, Ordering::SeqCst);
        }
    }

    /// Whether the server may be asked to stop (then it polls instead of blocking).
    #[must_use]
    pub const fn is_armed(&self) -> bool {
        self.0.is_some()
    }

    /// Whether stopping was requested.
    #[must_use]
    pub fn is_requested(&self) -> bool {
        self.0.as_ref().is_some_and(|f| f.load(Ordering::SeqCst))
    }
}

/// Where receive completions of the SRQ ping-pong land (`08srq`'s third argument).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum SrqRcq {
    /// The SRQ's own receive CQ (`s`, the default).
    #[default]
    Srq,
    /// The connection's main CQ (`m`).
    Main,
    /// The connection's own receive CQ (`r`).
    Conn,
}

/// Options of a scenario's server side.
#[derive(Clone, Debug)]
pub struct ServerOpts {
    /// The address to listen on.
    pub addr: String,
    /// The port to listen on.
    pub port: String,
    /// A file to use as the server's memory (scenarios 03, 04, 05, 07, 09).
    pub file: Option<PathBuf>,
    /// Create the file if missing and extend it if too short (else both are errors).
    pub file_create: bool,
    /// Map the file with this function instead of copying it (see [`common::MapFile`]).
    pub map_file: Option<common::MapFile>,
    /// Where the side's memory starts in the file (`--file-offset`; a multiple of the page size,
    /// or of a devdax device's alignment).
    pub file_offset: u64,
    /// The file must be persistent memory (`--pmem`): a devdax device or a `MAP_SYNC` mapping of
    /// a DAX file system.
    pub pmem: bool,
    /// Declare direct write to PMem in the peer configuration (05).
    pub direct_write_to_pmem: bool,
    /// How many clients to serve (06, 13).
    pub clients: usize,
    /// Where SRQ receive completions land (`srq-ping-pong`).
    pub srq_rcq: SrqRcq,
    /// Signaled once listening.
    pub ready: Ready,
    /// Stops waiting for connection requests when raised.
    pub stop: Stop,
}

impl ServerOpts {
    /// Defaults for `addr:port`: no file (a file given later must exist and is copied, not
    /// mapped), no direct write, one client, SRQ completions on the SRQ's CQ.
    #[must_use]
    pub fn new(addr: &str, port: &str) -> Self {
        Self {
            addr: addr.to_owned(),
            port: port.to_owned(),
            file: None,
            file_create: false,
            map_file: None,
            file_offset: 0,
            pmem: false,
            direct_write_to_pmem: false,
            clients: 1,
            srq_rcq: SrqRcq::Srq,
            ready: Ready::none(),
            stop: Stop::default(),
        }
    }
}

/// Options of a scenario's client side.
#[derive(Clone, Debug)]
pub struct ClientOpts {
    /// The server's address.
    pub addr: String,
    /// The server's port.
    pub port: String,
    /// A file to use as the client's memory (03, 04, 05, 09: the hello structure).
    pub file: Option<PathBuf>,
    /// Create the file if missing and extend it if too short (else both are errors).
    pub file_create: bool,
    /// Map the file with this function instead of copying it (see [`common::MapFile`]).
    pub map_file: Option<common::MapFile>,
    /// Where the side's memory starts in the file (`--file-offset`; a multiple of the page size,
    /// or of a devdax device's alignment).
    pub file_offset: u64,
    /// The file must be persistent memory (`--pmem`): a devdax device or a `MAP_SYNC` mapping of
    /// a DAX file system.
    pub pmem: bool,
    /// Words to append to the remote log (07; the first is the message of 10).
    pub words: Vec<String>,
    /// Immediate data (10, 11).
    pub imm: u32,
    /// The first counter value (08, 12, 13, SRQ, shared channel).
    pub counter: u64,
    /// Round trips (08, 12, 13, SRQ, shared channel).
    pub rounds: u64,
    /// The client's name (06).
    pub name: Option<String>,
    /// Connection attempts repeated when rejected or unreachable.
    pub retries: u32,
    /// The delay between attempts.
    pub retry_delay: Duration,
    /// Where the client records what it was told is durable at the server, as it goes
    /// (`rpma demo --power-cut` checks it against what a power cut left).
    pub promises: Option<promise::Promises>,
}

impl ClientOpts {
    /// Defaults for `addr:port`: no file (a file given later must exist and is copied, not
    /// mapped), no words, imm 0, counter 0, 3 rounds, 10 retries 500 ms apart.
    #[must_use]
    pub fn new(addr: &str, port: &str) -> Self {
        Self {
            addr: addr.to_owned(),
            port: port.to_owned(),
            file: None,
            file_create: false,
            map_file: None,
            file_offset: 0,
            pmem: false,
            words: Vec::new(),
            imm: 0,
            counter: 0,
            rounds: 3,
            name: None,
            retries: 10,
            retry_delay: Duration::from_millis(500),
            promises: None,
        }
    }

    /// Records that the bytes at `offset` of the server's region are durable now.
    pub(crate) fn promise(&self, p: promise::Promise) {
        if let Some(ps) = &self.promises {
            ps.push(p);
        }
    }
}

impl ServerOpts {
    /// The server's file, if any, as the scenarios use it.
    #[must_use]
    pub fn file_source(&self) -> Option<common::FileSource<'_>> {
        let (create, map, offset, pmem) = (self.file_create, self.map_file, self.file_offset, self.pmem);
        self.file.as_deref().map(|path| common::FileSource { path, create, map, offset, pmem })
    }
}

impl ClientOpts {
    /// The client's file, if any, as the scenarios use it.
    #[must_use]
    pub fn file_source(&self) -> Option<common::FileSource<'_>> {
        let (create, map, offset, pmem) = (self.file_create, self.map_file, self.file_offset, self.pmem);
        self.file.as_deref().map(|path| common::FileSource { path, create, map, offset, pmem })
    }
}

/// Where a demo runs: the address and port on the fabric, a directory for files and how to
/// map them.
#[derive(Clone, Debug)]
pub struct DemoEnv {
    /// The server's address.
    pub addr: String,
    /// The server's port.
    pub port: String,
    /// A directory for the scenarios' files.
    pub dir: PathBuf,
    /// Maps the files of `dir` (see [`common::MapFile`]).
    pub map_file: common::MapFile,
}

impl DemoEnv {
    /// `127.0.0.1:7204` with files in `dir`, mapped by `map_file`.
    #[must_use]
    pub fn new(dir: &std::path::Path, map_file: common::MapFile) -> Self {
        Self { addr: "127.0.0.1".into(), port: "7204".into(), dir: dir.to_path_buf(), map_file }
    }

    /// Server options for this environment (files in `dir` are created as needed and mapped:
    /// `dir` is the demo's own, so nothing else truncates them).
    #[must_use]
    pub fn server(&self) -> ServerOpts {
        let mut s = ServerOpts::new(&self.addr, &self.port);
        s.file_create = true;
        s.map_file = Some(self.map_file);
        s
    }

    /// Client options for this environment (short retry delay: the server is in process; files
    /// are created as needed).
    #[must_use]
    pub fn client(&self) -> ClientOpts {
        let mut c = ClientOpts::new(&self.addr, &self.port);
        c.retry_delay = Duration::from_millis(20);
        c.file_create = true;
        c.map_file = Some(self.map_file);
        c
    }
}

/// How long a demo waits for each side.
pub const DEMO_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a demo waits for the server's result once a client failed.
const SERVER_GRACE: Duration = Duration::from_millis(500);

/// A boxed client side for [`run_pair`].
pub type ClientFn<R> = Box<dyn FnOnce() -> Result<R> + Send>;

/// Runs a server and then its clients, each in its own thread: the clients start once the
/// server signals that it listens. Returns the server's and the clients' results.
///
/// # Errors
/// The first failure of a side (with the side named), or a timeout ([`DEMO_TIMEOUT`]).
pub fn run_pair<SR: Send + 'static, CR: Send + 'static>(
    server: impl FnOnce(Ready) -> Result<SR> + Send + 'static,
    clients: Vec<ClientFn<CR>>,
) -> Result<(SR, Vec<CR>)> {
    let (ready_tx, ready_rx) = mpsc::channel();
    let (srv_tx, srv_rx) = mpsc::channel();
    thread::Builder::new()
        .name("server".into())
        .spawn(move || {
            let _ = srv_tx.send(server(Ready(Some(ready_tx))));
        })
        .context("spawning the server thread")?;
    if ready_rx.recv_timeout(DEMO_TIMEOUT).is_err() {
        return Err(match srv_rx.recv_timeout(Duration::from_secs(1)) {
            Ok(Err(e)) => e.context("server"),
            Ok(Ok(_)) => anyhow!("server: ended before listening"),
            Err(_) => anyhow!("server: not listening after {DEMO_TIMEOUT:?}"),
        });
    }
    let mut rxs = Vec::new();
    for (i, c) in clients.into_iter().enumerate() {
        let (tx, rx) = mpsc::channel();
        thread::Builder::new()
            .name(format!("client{i}"))
            .spawn(move || {
                let _ = tx.send(c());
            })
            .context("spawning a client thread")?;
        rxs.push(rx);
    }
    let deadline = Instant::now() + DEMO_TIMEOUT;
    let left = || deadline.saturating_duration_since(Instant::now());
    let mut out = Vec::new();
    for (i, rx) in rxs.into_iter().enumerate() {
        let who = || format!("client #{i}");
        match rx.recv_timeout(left()) {
            Ok(Ok(r)) => out.push(r),
            Ok(Err(e)) => {
                // A failing server is often all a client's error is about (a rejection, a
                // connection closed): say what the server saw if it ended with an error.
                return Err(match srv_rx.recv_timeout(SERVER_GRACE) {
                    Ok(Err(s)) => anyhow!("{}: {e:#}; the server failed: {s:#}", who()),
                    _ => e.context(who()),
                });
            }
            Err(_) => return Err(anyhow!("{}: no result after {DEMO_TIMEOUT:?}", who())),
        }
    }
    let s = srv_rx.recv_timeout(left()).map_err(|_| anyhow!("server: no result after {DEMO_TIMEOUT:?}"))?;
    Ok((s.context("server")?, out))
}

/// The scenarios.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// 01: private data both ways at connect/accept.
    #[value(alias = "01")]
    Connection,
    /// 02: the client reads the server's string into DRAM.
    #[value(alias = "02")]
    ReadToVolatile,
    /// 03: the server reads the client's hello into its (file-backed) memory and persists it.
    #[value(alias = "03")]
    ReadToPersistent,
    /// 04: the client writes its hello and reads 8 bytes back (read-after-write).
    #[value(alias = "04")]
    WriteToPersistent,
    /// 05: the client writes and flushes (persistent if the server declares direct write to PMem).
    #[value(alias = "05")]
    FlushToPersistent,
    /// 06: the server reads each client's name into its slot.
    #[value(alias = "06")]
    MultipleConnections,
    /// 07: write, flush, atomic write of the log's `used`, flush; per word.
    #[value(alias = "07")]
    AtomicWrite,
    /// 08: send/recv of a counter the server increments.
    #[value(alias = "08")]
    MessagesPingPong,
    /// 09: write, then a GPSPM flush request; the server persists and replies.
    #[value(alias = "09")]
    FlushToPersistentGpspm,
    /// 10: send with immediate data.
    #[value(alias = "10")]
    SendWithImm,
    /// 11: write with immediate data.
    #[value(alias = "11")]
    WriteWithImm,
    /// 12: ping-pong with receives on a separate receive CQ.
    #[value(alias = "12")]
    ReceiveCompletionQueue,
    /// 13: ping-pong of several clients through one shared receive queue.
    #[value(alias = "13")]
    MessagesPingPongWithSrq,
    /// 08srq: one connection through an SRQ (`--srq-rcq` picks the CQ).
    #[value(alias = "08srq")]
    SrqPingPong,
    /// 12scch: ping-pong with one completion channel shared by both CQs.
    #[value(alias = "12scch")]
    SharedChannel,
    /// 06scch: as 06, the server waiting for completions on a completion channel.
    #[value(alias = "06scch")]
    MultipleConnectionsSharedChannel,
    /// 09scch: as 09, with one completion channel shared by both CQs.
    #[value(alias = "09scch")]
    FlushToPersistentGpspmSharedChannel,
}

/// Every scenario, in example order.
pub const ALL: [Scenario; 17] = [
    Scenario::Connection,
    Scenario::ReadToVolatile,
    Scenario::ReadToPersistent,
    Scenario::WriteToPersistent,
    Scenario::FlushToPersistent,
    Scenario::MultipleConnections,
    Scenario::AtomicWrite,
    Scenario::MessagesPingPong,
    Scenario::FlushToPersistentGpspm,
    Scenario::SendWithImm,
    Scenario::WriteWithImm,
    Scenario::ReceiveCompletionQueue,
    Scenario::MessagesPingPongWithSrq,
    Scenario::SrqPingPong,
    Scenario::SharedChannel,
    Scenario::MultipleConnectionsSharedChannel,
    Scenario::FlushToPersistentGpspmSharedChannel,
];

fn boxed<R: Report + 'static>(r: Result<R>) -> Result<Box<dyn Report>> {
    r.map(|r| Box::new(r) as Box<dyn Report>)
}

impl Scenario {
    /// The name used on the command line.
    #[must_use]
    pub fn name(self) -> String {
        clap::ValueEnum::to_possible_value(&self).map_or_else(String::new, |v| v.get_name().to_owned())
    }

    /// Whether the client exchanges `--rounds` messages with the server.
    #[must_use]
    pub const fn is_ping_pong(self) -> bool {
        matches!(
            self,
            Self::MessagesPingPong
                | Self::ReceiveCompletionQueue
                | Self::MessagesPingPongWithSrq
                | Self::SrqPingPong
                | Self::SharedChannel
        )
    }

    /// The librpma example it follows.
    #[must_use]
    pub const fn example(self) -> &'static str {
        match self {
            Self::Connection => "01-connection",
            Self::ReadToVolatile => "02-read-to-volatile",
            Self::ReadToPersistent => "03-read-to-persistent",
            Self::WriteToPersistent => "04-write-to-persistent",
            Self::FlushToPersistent => "05-flush-to-persistent",
            Self::MultipleConnections => "06-multiple-connections",
            Self::AtomicWrite => "07-atomic-write",
            Self::MessagesPingPong => "08-messages-ping-pong",
            Self::FlushToPersistentGpspm => "09-flush-to-persistent-GPSPM",
            Self::SendWithImm => "10-send-with-imm",
            Self::WriteWithImm => "11-write-with-imm",
            Self::ReceiveCompletionQueue => "12-receive-completion-queue",
            Self::MessagesPingPongWithSrq => "13-messages-ping-pong-with-srq",
            Self::SrqPingPong => "08srq-simple-messages-ping-pong-with-srq",
            Self::SharedChannel => "12scch-receive-completion-queue",
            Self::MultipleConnectionsSharedChannel => "06scch-multiple-connections",
            Self::FlushToPersistentGpspmSharedChannel => "09scch-flush-to-persistent-GPSPM",
        }
    }

    /// How many bytes of a `--file` the server (`server == true`) or the client side uses, or
    /// `None` if that side takes no file.
    #[must_use]
    pub const fn file_len(self, server: bool) -> Option<usize> {
        use common::{HELLO_STR_SIZE, HELLO_T_SIZE, SIGNATURE};
        match (self, server) {
            (Self::ReadToPersistent | Self::WriteToPersistent | Self::FlushToPersistent, true)
            | (Self::FlushToPersistentGpspm | Self::FlushToPersistentGpspmSharedChannel, true) => {
                Some(SIGNATURE.len() + HELLO_STR_SIZE)
            }
            (Self::ReadToPersistent | Self::WriteToPersistent | Self::FlushToPersistent, false)
            | (Self::FlushToPersistentGpspm | Self::FlushToPersistentGpspmSharedChannel, false) => {
                Some(SIGNATURE.len() + HELLO_T_SIZE)
            }
            (Self::AtomicWrite, true) => Some(s07_atomic_write::LOG_SIZE),
            _ => None,
        }
    }

    /// Runs the server side.
    ///
    /// # Errors
    /// Whatever the scenario's server reports.
    pub fn server<T: Transport>(self, t: &T, o: &ServerOpts) -> Result<Box<dyn Report>> {
        match self {
            Self::Connection => boxed(s01_connection::server(t, o)),
            Self::ReadToVolatile => boxed(s02_read_to_volatile::server(t, o)),
            Self::ReadToPersistent => boxed(s03_read_to_persistent::server(t, o)),
            Self::WriteToPersistent => boxed(s04_write_to_persistent::server(t, o)),
            Self::FlushToPersistent => boxed(s05_flush_to_persistent::server(t, o)),
            Self::MultipleConnections => boxed(s06_multiple_connections::server(t, o, false)),
            Self::MultipleConnectionsSharedChannel => boxed(s06_multiple_connections::server(t, o, true)),
            Self::AtomicWrite => boxed(s07_atomic_write::server(t, o)),
            Self::MessagesPingPong => boxed(s08_messages_ping_pong::server(t, o)),
            Self::FlushToPersistentGpspm => boxed(s09_flush_to_persistent_gpspm::server(t, o, false)),
            Self::SendWithImm => boxed(s10_send_with_imm::server(t, o)),
            Self::WriteWithImm => boxed(s11_write_with_imm::server(t, o)),
            Self::ReceiveCompletionQueue => boxed(s12_receive_completion_queue::server(t, o, false)),
            Self::MessagesPingPongWithSrq => boxed(s13_messages_ping_pong_with_srq::server(t, o)),
            Self::SrqPingPong => boxed(srq_ping_pong::server(t, o)),
            Self::SharedChannel => boxed(s12_receive_completion_queue::server(t, o, true)),
            Self::FlushToPersistentGpspmSharedChannel => boxed(s09_flush_to_persistent_gpspm::server(t, o, true)),
        }
    }

    /// Runs the client side.
    ///
    /// # Errors
    /// Whatever the scenario's client reports.
    pub fn client<T: Transport>(self, t: &T, o: &ClientOpts) -> Result<Box<dyn Report>> {
        match self {
            Self::Connection => boxed(s01_connection::client(t, o)),
            Self::ReadToVolatile => boxed(s02_read_to_volatile::client(t, o)),
            Self::ReadToPersistent => boxed(s03_read_to_persistent::client(t, o)),
            Self::WriteToPersistent => boxed(s04_write_to_persistent::client(t, o)),
            Self::FlushToPersistent => boxed(s05_flush_to_persistent::client(t, o)),
            // 06scch's clients are 06's.
            Self::MultipleConnections | Self::MultipleConnectionsSharedChannel => {
                boxed(s06_multiple_connections::client(t, o))
            }
            Self::AtomicWrite => boxed(s07_atomic_write::client(t, o)),
            Self::MessagesPingPong | Self::SrqPingPong | Self::MessagesPingPongWithSrq => {
                boxed(s08_messages_ping_pong::client(t, o))
            }
            Self::FlushToPersistentGpspm => boxed(s09_flush_to_persistent_gpspm::client(t, o, false)),
            Self::SendWithImm => boxed(s10_send_with_imm::client(t, o)),
            Self::WriteWithImm => boxed(s11_write_with_imm::client(t, o)),
            Self::ReceiveCompletionQueue => boxed(s12_receive_completion_queue::client(t, o, false)),
            Self::SharedChannel => boxed(s12_receive_completion_queue::client(t, o, true)),
            Self::FlushToPersistentGpspmSharedChannel => boxed(s09_flush_to_persistent_gpspm::client(t, o, true)),
        }
    }

    /// Runs both sides in this process on `t` and checks each side against the other; returns
    /// the lines to show.
    ///
    /// # Errors
    /// If a side fails or what one side saw does not match what the other did.
    pub fn demo<T: Transport>(self, t: &T, env: &DemoEnv) -> Result<Vec<String>> {
        match self {
            Self::Connection => s01_connection::demo(t, env),
            Self::ReadToVolatile => s02_read_to_volatile::demo(t, env),
            Self::ReadToPersistent => s03_read_to_persistent::demo(t, env),
            Self::WriteToPersistent => s04_write_to_persistent::demo(t, env),
            Self::FlushToPersistent => s05_flush_to_persistent::demo(t, env),
            Self::MultipleConnections => s06_multiple_connections::demo(t, env, false),
            Self::MultipleConnectionsSharedChannel => s06_multiple_connections::demo(t, env, true),
            Self::AtomicWrite => s07_atomic_write::demo(t, env),
            Self::MessagesPingPong => s08_messages_ping_pong::demo(t, env),
            Self::FlushToPersistentGpspm => s09_flush_to_persistent_gpspm::demo(t, env, false),
            Self::FlushToPersistentGpspmSharedChannel => s09_flush_to_persistent_gpspm::demo(t, env, true),
            Self::SendWithImm => s10_send_with_imm::demo(t, env),
            Self::WriteWithImm => s11_write_with_imm::demo(t, env),
            Self::ReceiveCompletionQueue => s12_receive_completion_queue::demo(t, env, false),
            Self::MessagesPingPongWithSrq => s13_messages_ping_pong_with_srq::demo(t, env),
            Self::SrqPingPong => srq_ping_pong::demo(t, env),
            Self::SharedChannel => s12_receive_completion_queue::demo(t, env, true),
        }
    }
}

/// Prefixes each line of a report with the side's name.
pub(crate) fn side(name: &str, r: &dyn Report) -> Vec<String> {
    r.lines().into_iter().map(|l| format!("{name}: {l}")).collect()
}

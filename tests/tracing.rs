//! The `tracing` feature on the mock: the spans and events of a connection's life, captured by a
//! collecting layer (docs/observability.md), and [`Conn::stats`](rpma::Conn::stats).
//!
//! One client and one server connection in one thread: connect and accept, a successful write
//! (no event), a send received by the server (counted), a write to a region the server
//! deregistered (a `RemAccessErr` completion: one `rpma.failed_completion` event in the client's
//! span), then a disconnect and delete on both sides.
#![allow(missing_docs)]

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rpma::mock::{Conn, ConnReq, Cq, Device, Ep, MockFabric, Peer};
use rpma::{ConnEvent, ContextType, ErrorKind, MrRemote, Usage, Wc, WcOpcode, WcStatus};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{Layer, Registry};

const ADDR: &str = "127.0.0.1";
const PORT: &str = "7391";
const DEADLINE: Duration = Duration::from_secs(10);

type Fields = BTreeMap<String, String>;

/// An event as captured: its name, level, fields and the fields of its span (if any).
#[derive(Clone, Debug)]
struct Seen {
    name: String,
    level: Level,
    fields: Fields,
    span: Option<(String, Fields)>,
}

#[derive(Default)]
struct Log {
    /// Live spans by id: name and fields (values recorded later included).
    spans: HashMap<u64, (String, Fields)>,
    /// Every span created, in order, with its fields as last recorded.
    all_spans: Vec<(u64, String, Fields)>,
    events: Vec<Seen>,
}

struct FieldsOf<'a>(&'a mut Fields);

impl Visit for FieldsOf<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

/// The collecting layer.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Log>>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _ctx: Context<'_, S>) {
        let mut fields = Fields::new();
        attrs.record(&mut FieldsOf(&mut fields));
        let mut log = self.0.lock().unwrap();
        let name = attrs.metadata().name().to_owned();
        log.all_spans.push((id.into_u64(), name.clone(), fields.clone()));
        log.spans.insert(id.into_u64(), (name, fields));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        let mut log = self.0.lock().unwrap();
        let log = &mut *log;
        if let Some((_, fields)) = log.spans.get_mut(&id.into_u64()) {
            values.record(&mut FieldsOf(fields));
            let now = fields.clone();
            if let Some(s) = log.all_spans.iter_mut().rev().find(|s| s.0 == id.into_u64()) {
                s.2 = now;
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::new();
        event.record(&mut FieldsOf(&mut fields));
        let span_id = ctx.event_span(event).map(|s| s.id().into_u64());
        let mut log = self.0.lock().unwrap();
        let span = span_id.and_then(|id| log.spans.get(&id).cloned());
        let m = event.metadata();
        log.events.push(Seen { name: m.name().to_owned(), level: *m.level(), fields, span });
    }

    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        self.0.lock().unwrap().spans.remove(&id.into_u64());
    }
}

fn nonblock(fd: BorrowedFd<'_>) {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let raw = fd.as_raw_fd();
    let fl = OFlag::from_bits_truncate(fcntl(raw, FcntlArg::F_GETFL).expect("F_GETFL"));
    fcntl(raw, FcntlArg::F_SETFL(fl | OFlag::O_NONBLOCK)).expect("F_SETFL");
}

fn next_wc(cq: Cq<'_>) -> Wc {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(wc) = cq.next_wc().expect("poll") {
            return wc;
        }
        assert!(Instant::now() < deadline, "no completion within 10 s");
        std::thread::yield_now();
    }
}

fn next_event(conn: &Conn) -> ConnEvent {
    let deadline = Instant::now() + DEADLINE;
    loop {
        match conn.next_event() {
            Ok(ev) => return ev,
            Err(e) if e.kind() == ErrorKind::NoEvent => {
                assert!(Instant::now() < deadline, "no connection event within 10 s");
                std::thread::yield_now();
            }
            Err(e) => panic!("next_event failed: {e}"),
        }
    }
}

/// What the scenario learnt, to check against the capture.
struct Run {
    device: String,
    client_qp: u32,
    server_qp: u32,
    client_stats: rpma::ConnStats,
    server_stats: rpma::ConnStats,
}

/// Connect, write, send, a failed write, disconnect, delete.
fn scenario() -> Run {
    let f = MockFabric::new();
    let dev = Device::lookup(&f, ADDR, ContextType::Local).expect("device lookup");
    let speer = Peer::new(&dev).expect("server peer");
    let cpeer = Peer::new(&dev).expect("client peer");
    let ep = Ep::listen(&speer, ADDR, PORT).expect("listen");
    nonblock(ep.fd());
    let client = ConnReq::new(&cpeer, ADDR, PORT, None).expect("conn_req_new").connect(None).expect("connect");
    nonblock(client.event_fd());
    let server = ep.next_conn_req(None).expect("next_conn_req").connect(None).expect("accept");
    nonblock(server.event_fd());
    assert_eq!(next_event(&client), ConnEvent::Established);
    assert_eq!(next_event(&server), ConnEvent::Established);

    let src = cpeer.alloc_mr(4096, Usage::WRITE_SRC | Usage::SEND).expect("src");
    let dst = speer.alloc_mr(4096, Usage::WRITE_DST | Usage::RECV).expect("dst");
    let rdst = MrRemote::from_descriptor(&dst.descriptor()).expect("descriptor");
    src.write(0, &[7; 64]).expect("fill src");

    // A successful write: a completion, no event.
    client.write(rdst.at(0), src.slice(0..64)).context(1).post().expect("write");
    let wc = next_wc(client.cq());
    assert_eq!((wc.wr_id(), wc.status(), wc.opcode()), (1, WcStatus::Success, WcOpcode::RdmaWrite));
    assert_eq!(dst.to_vec(0, 64).expect("dst bytes"), [7; 64]);

    // A send the server receives: a completion on each side.
    server.recv(dst.slice(1024..2048)).context(10).post().expect("recv");
    client.send(src.slice(0..24)).context(2).post().expect("send");
    let wc = next_wc(client.cq());
    assert_eq!((wc.wr_id(), wc.status()), (2, WcStatus::Success));
    let wc = next_wc(server.cq());
    assert_eq!((wc.wr_id(), wc.status(), wc.opcode(), wc.byte_len()), (10, WcStatus::Success, WcOpcode::Recv, 24));

    // A write to a region the server deregistered: a failed completion.
    drop(dst);
    client.write(rdst.at(0), src.slice(0..8)).context(3).post().expect("write to a deregistered region");
    let wc = next_wc(client.cq());
    assert_eq!((wc.wr_id(), wc.status(), wc.opcode()), (3, WcStatus::RemAccessErr, WcOpcode::RdmaWrite));

    let run = Run {
        device: dev.name(),
        client_qp: client.qp_num(),
        server_qp: server.qp_num(),
        client_stats: client.stats(),
        server_stats: server.stats(),
    };

    client.disconnect().expect("disconnect");
    assert_eq!(next_event(&server), ConnEvent::Closed);
    assert_eq!(next_event(&client), ConnEvent::Closed);
    server.disconnect().expect("server disconnect");
    client.delete().expect("client delete");
    server.delete().expect("server delete");
    drop(src);
    run
}

fn fields(pairs: &[(&str, &str)]) -> Fields {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

#[test]
fn a_connection_life_in_spans_and_events() {
    let capture = Capture::default();
    let run = tracing::subscriber::with_default(Registry::default().with(capture.clone()), scenario);
    let log = capture.0.lock().unwrap();

    // Two connection spans, with what each side knows.
    let conns: Vec<&Fields> = log.all_spans.iter().filter(|s| s.1 == "rpma.conn").map(|s| &s.2).collect();
    assert_eq!(conns.len(), 2, "spans: {:?}", log.all_spans);
    let client_span = fields(&[
        ("backend", "mock"),
        ("device", &run.device),
        ("side", "active"),
        ("remote", &format!("{ADDR}:{PORT}")),
        ("qp_num", &run.client_qp.to_string()),
    ]);
    let server_span = fields(&[
        ("backend", "mock"),
        ("device", &run.device),
        ("side", "passive"),
        ("local", &format!("{ADDR}:{PORT}")),
        ("qp_num", &run.server_qp.to_string()),
    ]);
    assert_eq!(conns[0], &client_span);
    assert_eq!(conns[1], &server_span);

    // Every event, in order, with the side of its span and its fields.
    let seen: Vec<(&str, Level, Option<&str>, &Fields)> = log
        .events
        .iter()
        .map(|e| {
            (e.name.as_str(), e.level, e.span.as_ref().and_then(|s| s.1.get("side")).map(String::as_str), &e.fields)
        })
        .collect();
    let step = |s: &str| fields(&[("step", s), ("message", "connection step")]);
    let cm = |s: &str| fields(&[("event", s), ("message", "connection event")]);
    let failed = fields(&[
        ("message", "completion failed"),
        ("conn", &format!("{} qp {}: ? -> {ADDR}:{PORT}", run.device, run.client_qp)),
        ("status", "RemAccessErr"),
        ("status_raw", "10"),
        ("wr_id", "3"),
        ("qp_num", &run.client_qp.to_string()),
        ("vendor_err", "0"),
    ]);
    let active = Some("active");
    let passive = Some("passive");
    let expected: Vec<(&str, Level, Option<&str>, Fields)> = vec![
        ("rpma.conn_step", Level::DEBUG, active, step("requested")),
        ("rpma.conn_step", Level::DEBUG, active, step("connect")),
        ("rpma.conn_step", Level::DEBUG, passive, step("received")),
        ("rpma.conn_step", Level::DEBUG, passive, step("accept")),
        ("rpma.cm_event", Level::INFO, active, cm("Connection established")),
        ("rpma.cm_event", Level::INFO, passive, cm("Connection established")),
        ("rpma.failed_completion", Level::WARN, active, failed),
        ("rpma.conn_step", Level::DEBUG, active, step("disconnect")),
        ("rpma.cm_event", Level::INFO, passive, cm("Connection closed")),
        ("rpma.cm_event", Level::INFO, active, cm("Connection closed")),
        ("rpma.conn_step", Level::DEBUG, passive, step("disconnect")),
        ("rpma.conn_step", Level::DEBUG, active, step("delete")),
        ("rpma.conn_step", Level::DEBUG, passive, step("delete")),
    ];
    let expected: Vec<(&str, Level, Option<&str>, &Fields)> =
        expected.iter().map(|(n, l, s, f)| (*n, *l, *s, f)).collect();
    assert_eq!(seen, expected);

    // The error counts: one failed completion on the client (of its write, send and failed
    // write), none on the server (its receive succeeded).
    assert_eq!(run.client_stats.errors, 1, "{:?}", run.client_stats);
    assert_eq!(run.server_stats.errors, 0, "{:?}", run.server_stats);
}

/// A hundred successful writes and their completions: no event, and no error counted.
#[test]
fn no_event_for_successful_completions() {
    let capture = Capture::default();
    tracing::subscriber::with_default(Registry::default().with(capture.clone()), || {
        let f = MockFabric::new();
        let dev = Device::lookup(&f, ADDR, ContextType::Local).expect("device lookup");
        let speer = Peer::new(&dev).expect("server peer");
        let cpeer = Peer::new(&dev).expect("client peer");
        let ep = Ep::listen(&speer, ADDR, PORT).expect("listen");
        nonblock(ep.fd());
        let client = ConnReq::new(&cpeer, ADDR, PORT, None).expect("conn_req_new").connect(None).expect("connect");
        nonblock(client.event_fd());
        let server = ep.next_conn_req(None).expect("next_conn_req").connect(None).expect("accept");
        nonblock(server.event_fd());
        assert_eq!(next_event(&client), ConnEvent::Established);
        let src = cpeer.alloc_mr(64, Usage::WRITE_SRC).expect("src");
        let dst = speer.alloc_mr(64, Usage::WRITE_DST).expect("dst");
        let rdst = MrRemote::from_descriptor(&dst.descriptor()).expect("descriptor");
        let before = capture.0.lock().unwrap().events.len();
        for i in 0..100 {
            client.write(rdst.at(0), src.slice(0..8)).context(i).post().expect("write");
            assert!(next_wc(client.cq()).is_success());
        }
        assert_eq!(capture.0.lock().unwrap().events.len(), before, "an event for a successful operation");
        assert_eq!(client.stats().errors, 0);
    });
}

/// A writer into a buffer the test reads afterwards.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What `tracing_subscriber::fmt` prints of the scenario at `level` and below.
fn fmt_output(level: Level) -> (Run, String) {
    let out = Shared::default();
    let writer = out.clone();
    let subscriber =
        tracing_subscriber::fmt().with_max_level(level).without_time().with_writer(move || writer.clone()).finish();
    let run = tracing::subscriber::with_default(subscriber, scenario);
    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    (run, text)
}

/// The events of docs/observability.md's table: name and message.
fn documented_events() -> Vec<(String, String)> {
    include_str!("../docs/observability.md")
        .lines()
        .filter_map(|l| l.strip_prefix("| event | "))
        .map(|row| {
            let cols: Vec<&str> = row.split(" | ").collect();
            let name = cols[0].split('`').nth(1).expect("a name in backquotes").to_owned();
            (name, cols[1].to_owned())
        })
        .collect()
}

/// The documented messages are what `fmt` prints, and each is the message of its named event
/// in the code.
#[test]
fn fmt_prints_the_documented_messages() {
    let events = documented_events();
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["rpma.conn_step", "rpma.cm_event", "rpma.failed_completion", "rpma.leak"]);
    let (_, text) = fmt_output(Level::DEBUG);
    let sources = [
        include_str!("../crates/rpma-core/src/trace.rs"),
        include_str!("../crates/rpma-core/src/cq_trace.rs"),
        include_str!("../crates/rpma-verbs/src/leak.rs"),
    ];
    for (name, message) in &events {
        // The event's macro call, from its name to its end, holds the message.
        let in_code = sources.iter().any(|src| {
            src.match_indices(&format!("name: \"{name}\"")).any(|(i, _)| {
                src[i..].split_once(");").is_some_and(|(call, _)| call.contains(&format!("\"{message}\"")))
            })
        });
        assert!(in_code, "{name}: no event with the message {message:?} in the code");
        if name != "rpma.leak" {
            assert!(text.contains(&format!("rpma: {message} ")), "{name}: {message:?} not printed:\n{text}");
        }
    }
    assert!(!text.contains("rpma.failed_completion"), "fmt prints no event name:\n{text}");
}

/// With a filter at WARN (`RUST_LOG=rpma=warn`) the connection's INFO span is gone: the failed
/// completion still names its connection.
#[test]
fn a_warning_names_its_connection_without_its_span() {
    let (run, text) = fmt_output(Level::WARN);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "one warning, the failed write:\n{text}");
    assert!(!lines[0].contains("rpma.conn{"), "no span at WARN: {}", lines[0]);
    let conn = format!("conn=\"{} qp {}: ? -> {ADDR}:{PORT}\"", run.device, run.client_qp);
    assert!(lines[0].contains("WARN rpma: completion failed"), "{}", lines[0]);
    assert!(lines[0].contains(&conn), "{conn} not in {}", lines[0]);
}

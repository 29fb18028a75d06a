//! Every scenario on the mock: the in-process demo (both sides checked against each other) and
//! scenario-specific properties (persistence across runs, flush types, limits, bad input).

#![cfg(feature = "mock")]

use std::path::Path;

use rpma::mem::{MapOptions, MemError};
use rpma::mock::MockFabric;
use rpma::{FlushType, Memory};
use rpma_scenarios::{self as sc, run_pair, ClientFn, DemoEnv, Report, Scenario, ServerOpts, SrqRcq};

fn demo(s: Scenario) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let lines = s
        .demo(&MockFabric::new(), &DemoEnv::new(dir.path(), map_file))
        .unwrap_or_else(|e| panic!("{}: {e:#}", s.name()));
    assert!(!lines.is_empty());
    lines
}

#[test]
fn s01_connection() {
    let l = demo(Scenario::Connection);
    assert!(l.iter().any(|l| l.contains("\"Hello server!\"")), "{l:?}");
}

#[test]
fn s02_read_to_volatile() {
    let l = demo(Scenario::ReadToVolatile);
    assert!(l.iter().any(|l| l.contains("read 14 bytes: \"Hello client!\"")), "{l:?}");
}

#[test]
fn s03_read_to_persistent() {
    demo(Scenario::ReadToPersistent);
}

#[test]
fn s04_write_to_persistent() {
    demo(Scenario::WriteToPersistent);
}

#[test]
fn s05_flush_to_persistent() {
    let l = demo(Scenario::FlushToPersistent);
    let want = "client: path: flush emulated (RDMA Read); from the device's capabilities";
    assert!(l.iter().any(|l| l == want), "{l:?}");
}

#[test]
fn s06_multiple_connections() {
    demo(Scenario::MultipleConnections);
}

#[test]
fn s07_atomic_write() {
    let l = demo(Scenario::AtomicWrite);
    let want = "client: path: flush emulated (RDMA Read), atomic write emulated (fenced RDMA Write); \
                from the device's capabilities";
    assert!(l.iter().any(|l| l == want), "{l:?}");
}

/// On a mock device with native flush and atomic write, 05, 07 and 09 report the native path
/// (09 posts no RDMA flush at all: the server persists on request), with the counts.
#[test]
fn flushes_and_atomic_writes_report_the_native_path() {
    use rpma_scenarios::native::{OpCounts, OpPath, Source};
    let dir = tempfile::tempdir().unwrap();
    let e = env(dir.path());
    let t = MockFabric::builder().native(true, true).build();

    let (ts, tc) = (t.clone(), t.clone());
    let mut so = e.server();
    so.file = Some(dir.path().join("05.pmem"));
    so.direct_write_to_pmem = true;
    let co = e.client();
    let (_, c) = run_pair(
        move |ready| sc::s05_flush_to_persistent::server(&ts, &ServerOpts { ready, ..so }),
        one(move || sc::s05_flush_to_persistent::client(&tc, &co)),
    )
    .unwrap();
    assert_eq!(c[0].ops.source, Source::Capabilities);
    assert_eq!(c[0].ops.counts, OpCounts { flush_native: 1, ..OpCounts::default() });
    assert!(c[0].lines().iter().any(|l| l == "path: flush native; from the device's capabilities"));

    let (ts, tc) = (t.clone(), t.clone());
    let so = e.server();
    let mut co = e.client();
    co.words = vec!["a".into(), "b".into(), "c".into()];
    let (_, c) = run_pair(
        move |ready| sc::s07_atomic_write::server(&ts, &ServerOpts { ready, ..so }),
        one(move || sc::s07_atomic_write::client(&tc, &co)),
    )
    .unwrap();
    let n = c[0].ops.counts;
    assert_eq!((n.flush_native, n.atomic_write_native, n.flush_emulated, n.atomic_write_emulated), (6, 3, 0, 0));
    assert_eq!((n.flush(), n.atomic_write()), (Some(OpPath::Native), Some(OpPath::Native)));

    let (ts, tc) = (t.clone(), t);
    let so = e.server();
    let co = e.client();
    let (_, c) = run_pair(
        move |ready| sc::s09_flush_to_persistent_gpspm::server(&ts, &ServerOpts { ready, ..so }, false),
        one(move || sc::s09_flush_to_persistent_gpspm::client(&tc, &co, false)),
    )
    .unwrap();
    assert_eq!(c[0].ops.counts, OpCounts::default());
    assert!(c[0].lines().iter().any(|l| l.contains("GPSPM") && l.contains("no RDMA flush")), "{:?}", c[0].lines());
}

#[test]
fn s08_messages_ping_pong() {
    demo(Scenario::MessagesPingPong);
}

#[test]
fn s09_flush_to_persistent_gpspm() {
    demo(Scenario::FlushToPersistentGpspm);
}

#[test]
fn s10_send_with_imm() {
    let l = demo(Scenario::SendWithImm);
    assert!(l.iter().any(|l| l.contains("(0 bytes) with immediate data 42")), "{l:?}");
}

#[test]
fn s11_write_with_imm() {
    demo(Scenario::WriteWithImm);
}

#[test]
fn s12_receive_completion_queue() {
    demo(Scenario::ReceiveCompletionQueue);
}

#[test]
fn s13_messages_ping_pong_with_srq() {
    demo(Scenario::MessagesPingPongWithSrq);
}

#[test]
fn srq_ping_pong_all_completion_placements() {
    let l = demo(Scenario::SrqPingPong);
    for cq in ["SRQ's receive CQ", "connection's main CQ", "connection's receive CQ"] {
        assert!(l.iter().any(|l| l.contains(cq)), "{cq}: {l:?}");
    }
}

#[test]
fn shared_completion_channel() {
    demo(Scenario::SharedChannel);
}

#[test]
fn s06scch_multiple_connections_shared_channel() {
    let l = demo(Scenario::MultipleConnectionsSharedChannel);
    assert_eq!(l.iter().filter(|l| l.starts_with("server: slot ")).count(), 3, "{l:?}");
}

#[test]
fn s09scch_flush_to_persistent_gpspm_shared_channel() {
    demo(Scenario::FlushToPersistentGpspmSharedChannel);
}

#[test]
fn the_shared_channel_variants_are_reachable_by_their_example_numbers() {
    use clap::ValueEnum;
    assert_eq!(Scenario::from_str("06scch", true), Ok(Scenario::MultipleConnectionsSharedChannel));
    assert_eq!(Scenario::from_str("09scch", true), Ok(Scenario::FlushToPersistentGpspmSharedChannel));
    assert!(sc::ALL.contains(&Scenario::MultipleConnectionsSharedChannel));
    assert!(sc::ALL.contains(&Scenario::FlushToPersistentGpspmSharedChannel));
}

#[test]
fn every_scenario_has_a_distinct_name_and_example() {
    let mut names: Vec<String> = sc::ALL.iter().map(|s| s.name()).collect();
    let mut examples: Vec<&str> = sc::ALL.iter().map(|s| s.example()).collect();
    names.sort();
    names.dedup();
    examples.sort_unstable();
    examples.dedup();
    assert_eq!((names.len(), examples.len()), (17, 17));
}

fn one<R: Send + 'static>(f: impl FnOnce() -> anyhow::Result<R> + Send + 'static) -> Vec<ClientFn<R>> {
    vec![Box::new(f)]
}

fn env(dir: &Path) -> DemoEnv {
    DemoEnv::new(dir, map_file)
}

#[test]
fn s03_the_server_file_keeps_the_value_and_the_client_file_its_translation() {
    let dir = tempfile::tempdir().unwrap();
    let e = env(dir.path());
    let t = MockFabric::new();
    let sfile = dir.path().join("server");
    let cfile = dir.path().join("client");
    let mut sent = Vec::new();
    for round in 0..3 {
        let (ts, tc) = (t.clone(), t.clone());
        let mut so = e.server();
        so.file = Some(sfile.clone());
        let mut co = e.client();
        co.file = Some(cfile.clone());
        let (s, c) = run_pair(
            move |ready| sc::s03_read_to_persistent::server(&ts, &ServerOpts { ready, ..so }),
            one(move || sc::s03_read_to_persistent::client(&tc, &co)),
        )
        .unwrap();
        // The client's file holds the translation of the previous run: languages alternate.
        let expected = ["Hello world!", "\u{a1}Hola Mundo!"][round % 2];
        assert_eq!(c[0].sent, expected, "round {round}");
        assert_eq!(s.new, expected);
        // The server's file holds what the previous run read.
        assert_eq!(s.old, sent.last().map_or("", |v: &String| v.as_str()), "round {round}");
        assert!(s.persisted);
        sent.push(s.new.clone());
    }
}

#[test]
fn s05_without_direct_write_the_flush_is_visibility_and_the_file_waits_for_deregistration() {
    let dir = tempfile::tempdir().unwrap();
    let e = env(dir.path());
    let t = MockFabric::new();
    let (ts, tc) = (t.clone(), t);
    let path = dir.path().join("pmem");
    let mut so = e.server();
    so.file = Some(path.clone());
    so.map_file = None; // a copy of the file: the library's fallback for callers that cannot map
    let co = e.client();
    let (s, c) = run_pair(
        move |ready| sc::s05_flush_to_persistent::server(&ts, &ServerOpts { ready, ..so }),
        one(move || sc::s05_flush_to_persistent::client(&tc, &co)),
    )
    .unwrap();
    assert_eq!(c[0].flush_type, FlushType::Visibility);
    assert_eq!(s.new, "Hello world!");
    // A visibility flush does not make the bytes durable: the file had them only after
    // deregistration.
    assert_eq!(s.in_file.as_deref(), Some(""));
    let file = std::fs::read(&path).unwrap();
    assert_eq!(&file[17..29], b"Hello world!");
}

/// `--file` as librpma's examples map it (`pmem_map_file`): the registered memory is the file
/// (what the `rpma` command does too, with its own `map_file`).
fn map_file(path: &Path, offset: u64, len: usize, create: bool, _pmem: bool) -> Result<Memory, MemError> {
    // SAFETY: [M5] the file is in this test's own temporary directory; nothing truncates it
    // while it is mapped.
    unsafe { MapOptions::new().create(create).offset(offset).len(len).map(path) }
}

#[test]
fn s05_a_persistent_flush_reaches_a_copied_file_only_at_deregistration() {
    // A copy of the file (the library's fallback when no `map_file` is given), written back at
    // deregistration: a peer's persistent flush cannot reach the file before.
    let dir = tempfile::tempdir().unwrap();
    let e = env(dir.path());
    let t = MockFabric::new();
    let (ts, tc) = (t.clone(), t);
    let mut so = e.server();
    so.file = Some(dir.path().join("pmem"));
    so.map_file = None;
    so.direct_write_to_pmem = true;
    let co = e.client();
    let (s, c) = run_pair(
        move |ready| sc::s05_flush_to_persistent::server(&ts, &ServerOpts { ready, ..so }),
        one(move || sc::s05_flush_to_persistent::client(&tc, &co)),
    )
    .unwrap();
    assert_eq!(c[0].flush_type, FlushType::Persistent);
    assert!(!s.mapped);
    assert_eq!(s.in_file.as_deref(), Some(""));
    assert_eq!(s.file_after.as_deref(), Some("Hello world!"));
}

#[test]
fn s05_with_a_mapped_file_the_flushed_bytes_are_in_the_file_before_deregistration() {
    let dir = tempfile::tempdir().unwrap();
    let e = env(dir.path());
    let t = MockFabric::new();
    let (ts, tc) = (t.clone(), t);
    let mut so = e.server();
    so.file = Some(dir.path().join("pmem"));
    so.map_file = Some(map_file);
    so.direct_write_to_pmem = true;
    let mut co = e.client();
    co.file = Some(dir.path().join("client"));
    co.map_file = Some(map_file);
    let (s, c) = run_pair(
        move |ready| sc::s05_flush_to_persistent::server(&ts, &ServerOpts { ready, ..so }),
        one(move || sc::s05_flush_to_persistent::client(&tc, &co)),
    )
    .unwrap();
    assert_eq!(c[0].flush_type, FlushType::Persistent);
    assert!(s.mapped);
    assert_eq!(s.in_file.as_deref(), Some("Hello world!"));
    assert_eq!(s.file_after.as_deref(), Some("Hello world!"));
    // The client's mapped hello was translated in place and persisted.
    let client = std::fs::read(dir.path().join("client")).unwrap();
    assert_eq!(&client[17 + 4..17 + 4 + "\u{a1}Hola Mundo!".len()], "\u{a1}Hola Mundo!".as_bytes());
}

#[test]
fn s03_and_s07_on_mapped_files_keep_their_content_across_runs() {
    let dir = tempfile::tempdir().unwrap();
    let e = env(dir.path());
    let t = MockFabric::new();
    let (sfile, cfile) = (dir.path().join("server"), dir.path().join("client"));
    for (round, expected) in ["Hello world!", "\u{a1}Hola Mundo!"].into_iter().enumerate() {
        let (ts, tc) = (t.clone(), t.clone());
        let mut so = e.server();
        (so.file, so.map_file) = (Some(sfile.clone()), Some(map_file as sc::common::MapFile));
        let mut co = e.client();
        (co.file, co.map_file) = (Some(cfile.clone()), Some(map_file as sc::common::MapFile));
        let (s, c) = run_pair(
            move |ready| sc::s03_read_to_persistent::server(&ts, &ServerOpts { ready, ..so }),
            one(move || sc::s03_read_to_persistent::client(&tc, &co)),
        )
        .unwrap();
        assert_eq!((c[0].sent.as_str(), s.new.as_str()), (expected, expected), "round {round}");
    }
    let log = dir.path().join("log");
    for words in [vec!["one"], vec!["two", "three"]] {
        let (ts, tc) = (t.clone(), t.clone());
        let mut so = e.server();
        (so.file, so.map_file) = (Some(log.clone()), Some(map_file as sc::common::MapFile));
        let mut co = e.client();
        co.words = words.iter().map(ToString::to_string).collect();
        run_pair(
            move |ready| sc::s07_atomic_write::server(&ts, &ServerOpts { ready, ..so }),
            one(move || sc::s07_atomic_write::client(&tc, &co)),
        )
        .unwrap();
    }
    let file = std::fs::read(&log).unwrap();
    assert_eq!(&file[16..30], b"one\0two\0three\0");
}

#[test]
fn a_file_must_exist_and_be_long_enough_unless_created() {
    use sc::common::check_file;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let msg = |r: anyhow::Result<()>| format!("{:#}", r.unwrap_err());
    assert!(msg(check_file(&path, 10, false)).contains("does not exist (--file-create creates it)"));
    check_file(&path, 10, true).unwrap();
    assert!(!path.exists(), "checking changes nothing");
    std::fs::write(&path, b"12345").unwrap();
    assert!(msg(check_file(&path, 10, false)).contains("is 5 bytes long, this side needs 10 bytes"));
    check_file(&path, 5, false).unwrap();
    check_file(&path, 10, true).unwrap();
    assert!(msg(check_file(dir.path(), 1, true)).contains("is a directory"));
    assert!(msg(check_file(Path::new("/dev/null"), 1, true)).contains("not a devdax device"));

    // A scenario refuses such a file (the server fails; the client finds no server).
    let mut so = env(dir.path()).server();
    so.file = Some(path.clone());
    so.file_create = false;
    let err = sc::s04_write_to_persistent::server(&MockFabric::new(), &so).unwrap_err();
    assert!(format!("{err:#}").contains("this side needs 1041 bytes"), "{err:#}");
    // With --file-create the file is extended (and, lacking the signature, initialized).
    so.file_create = true;
    let co = env(dir.path()).client();
    let t = MockFabric::new();
    let (ts, tc) = (t.clone(), t);
    run_pair(
        move |ready| sc::s04_write_to_persistent::server(&ts, &ServerOpts { ready, ..so }),
        one(move || sc::s04_write_to_persistent::client(&tc, &co)),
    )
    .unwrap();
    let file = std::fs::read(&path).unwrap();
    assert_eq!(file.len(), 1041);
    assert_eq!(&file[..17], b"RPMA_EXAMPLE_SIG\0");
}

#[test]
fn s05_a_persistent_flush_to_dram_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let e = env(dir.path());
    let t = MockFabric::new();
    let (ts, tc) = (t.clone(), t);
    let mut so = e.server();
    so.direct_write_to_pmem = true;
    let co = e.client();
    let err = run_pair(
        move |ready| sc::s05_flush_to_persistent::server(&ts, &ServerOpts { ready, ..so }),
        one(move || sc::s05_flush_to_persistent::client(&tc, &co)),
    )
    .unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("client") && msg.contains("Conn::flush"), "{msg}");
}

#[test]
fn s06_ten_clients_and_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let e = env(dir.path());
    let t = MockFabric::new();
    let ts = t.clone();
    let mut so = e.server();
    so.clients = 10;
    let clients: Vec<ClientFn<_>> = (0..10)
        .map(|i| {
            let tc = t.clone();
            let mut co = e.client();
            co.name = Some(format!("client-{i}"));
            Box::new(move || sc::s06_multiple_connections::client(&tc, &co)) as ClientFn<_>
        })
        .collect();
    let (s, _) =
        run_pair(move |ready| sc::s06_multiple_connections::server(&ts, &ServerOpts { ready, ..so }, false), clients)
            .unwrap();
    let mut names = s.names;
    names.sort();
    let mut want: Vec<String> = (0..10).map(|i| format!("client-{i}")).collect();
    want.sort();
    assert_eq!(names, want);

    let mut so = e.server();
    so.clients = 11;
    let err = sc::s06_multiple_connections::server(&MockFabric::new(), &so, false).unwrap_err();
    assert!(format!("{err}").contains("--clients"), "{err}");
}

#[test]
fn s07_the_log_file_accumulates_across_runs() {
    let dir = tempfile::tempdir().unwrap();
    let e = env(dir.path());
    let t = MockFabric::new();
    let path = dir.path().join("log");
    let mut all = Vec::new();
    for words in [vec!["one", "two"], vec!["three"]] {
        let (ts, tc) = (t.clone(), t.clone());
        let mut so = e.server();
        so.file = Some(path.clone());
        let mut co = e.client();
        co.words = words.iter().map(ToString::to_string).collect();
        let (s, c) = run_pair(
            move |ready| sc::s07_atomic_write::server(&ts, &ServerOpts { ready, ..so }),
            one(move || sc::s07_atomic_write::client(&tc, &co)),
        )
        .unwrap();
        all.extend(words.iter().map(ToString::to_string));
        assert_eq!(s.words, all);
        assert_eq!(c[0].flush_type, FlushType::Persistent);
        assert_eq!(s.used, c[0].used_after);
    }
    let file = std::fs::read(&path).unwrap();
    assert_eq!(&file[..8], b"LOG\0\0\0\0\0");
    assert_eq!(&file[16..30], b"one\0two\0three\0");
}

#[test]
fn s07_on_dram_flushes_visibility_and_refuses_no_words_and_a_full_log() {
    let dir = tempfile::tempdir().unwrap();
    let e = env(dir.path());
    let t = MockFabric::new();
    let (ts, tc) = (t.clone(), t.clone());
    let so = e.server();
    let mut co = e.client();
    co.words = vec!["dram".into()];
    let (s, c) = run_pair(
        move |ready| sc::s07_atomic_write::server(&ts, &ServerOpts { ready, ..so }),
        one(move || sc::s07_atomic_write::client(&tc, &co)),
    )
    .unwrap();
    assert_eq!(c[0].flush_type, FlushType::Visibility);
    assert_eq!(s.words, ["dram"]);
    assert!(!s.pmem);

    let err = sc::s07_atomic_write::client(&MockFabric::new(), &e.client()).unwrap_err();
    assert!(format!("{err}").contains("--word"));

    let (ts, tc) = (t.clone(), t);
    let so = e.server();
    let mut co = e.client();
    co.words = vec!["x".repeat(600), "y".repeat(600)];
    let err = run_pair(
        move |ready| sc::s07_atomic_write::server(&ts, &ServerOpts { ready, ..so }),
        one(move || sc::s07_atomic_write::client(&tc, &co)),
    )
    .unwrap_err();
    assert!(format!("{err:#}").contains("Log size exhausted"), "{err:#}");
}

#[test]
fn s08_zero_rounds_sends_only_i_m_done() {
    let dir = tempfile::tempdir().unwrap();
    let e = env(dir.path());
    let t = MockFabric::new();
    let (ts, tc) = (t.clone(), t);
    let so = e.server();
    let mut co = e.client();
    co.rounds = 0;
    let (s, c) = run_pair(
        move |ready| sc::s08_messages_ping_pong::server(&ts, &ServerOpts { ready, ..so }),
        one(move || sc::s08_messages_ping_pong::client(&tc, &co)),
    )
    .unwrap();
    assert!(s.received.is_empty() && c[0].sent.is_empty());
}

#[test]
fn s13_ten_clients_many_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let e = env(dir.path());
    let t = MockFabric::new();
    let ts = t.clone();
    let mut so = e.server();
    so.clients = 10;
    let clients: Vec<ClientFn<_>> = (0..10u64)
        .map(|i| {
            let tc = t.clone();
            let mut co = e.client();
            co.counter = i * 100;
            co.rounds = 25;
            Box::new(move || sc::s13_messages_ping_pong_with_srq::client(&tc, &co)) as ClientFn<_>
        })
        .collect();
    let (s, c) =
        run_pair(move |ready| sc::s13_messages_ping_pong_with_srq::server(&ts, &ServerOpts { ready, ..so }), clients)
            .unwrap();
    assert_eq!(s.received.len(), 10);
    for (i, c) in c.iter().enumerate() {
        sc::s08_messages_ping_pong::check_exchange(c, 25, i as u64 * 100).unwrap();
    }
}

#[test]
fn srq_ping_pong_many_rounds_in_each_placement() {
    for mode in [SrqRcq::Srq, SrqRcq::Main, SrqRcq::Conn] {
        let dir = tempfile::tempdir().unwrap();
        let e = env(dir.path());
        let t = MockFabric::new();
        let (ts, tc) = (t.clone(), t.clone());
        let mut so = e.server();
        so.srq_rcq = mode;
        let mut co = e.client();
        co.rounds = 40;
        let (s, c) = run_pair(
            move |ready| sc::srq_ping_pong::server(&ts, &ServerOpts { ready, ..so }),
            one(move || sc::srq_ping_pong::client(&tc, &co)),
        )
        .unwrap();
        assert_eq!(s.received.len(), 40, "{mode:?}");
        sc::s08_messages_ping_pong::check_exchange(&c[0], 40, 0).unwrap();
    }
}

#[test]
fn s09_shared_channel_variant() {
    let dir = tempfile::tempdir().unwrap();
    let e = env(dir.path());
    let t = MockFabric::new();
    let (ts, tc) = (t.clone(), t);
    let so = e.server();
    let co = e.client();
    let (s, c) = run_pair(
        move |ready| sc::s09_flush_to_persistent_gpspm::server(&ts, &ServerOpts { ready, ..so }, true),
        one(move || sc::s09_flush_to_persistent_gpspm::client(&tc, &co, true)),
    )
    .unwrap();
    assert_eq!(s.new, "Hello world!");
    assert_eq!(s.in_file, None);
    assert_eq!(c[0].response, 0xF01D);
}

#[test]
fn a_client_without_a_server_fails_after_its_retries() {
    let dir = tempfile::tempdir().unwrap();
    let mut co = env(dir.path()).client();
    co.retries = 2;
    let err = Scenario::MessagesPingPong.client(&MockFabric::new(), &co).unwrap_err();
    assert!(format!("{err:#}").contains("unreachable"), "{err:#}");
}

/// A server that fails is visible in the demo's error: the client sees a rejection or a
/// connection that never comes, the server's own error says why.
#[test]
fn a_failing_server_s_error_is_in_the_demo_s_error() {
    const EIO: i32 = 5;
    for s in [Scenario::ReadToPersistent, Scenario::Connection, Scenario::MultipleConnectionsSharedChannel] {
        let dir = tempfile::tempdir().unwrap();
        let f = MockFabric::new();
        f.faults().fail_nth(1, EIO, Some("rdma_accept"));
        let e = s.demo(&f, &DemoEnv::new(dir.path(), map_file)).expect_err("the server's accept failed");
        let msg = format!("{e:#}");
        assert!(msg.contains("the server failed") || msg.starts_with("server"), "{}: {msg}", s.name());
        assert!(msg.contains("injected fault"), "{}: the server's own error is missing: {msg}", s.name());
    }
}

/// `rpma demo --power-cut`'s scenarios under every crash point of the server's node: every
/// promise of the client holds in what the power cut left, and promises were checked (the
/// checks are not vacuous).
#[test]
fn power_cut_every_crash_point_keeps_what_the_client_was_told_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    for s in sc::power_cut::SCENARIOS {
        let o = sc::power_cut::run(s, dir.path(), map_file).unwrap_or_else(|e| panic!("{}: {e:#}", s.name()));
        assert!(o.violations.is_empty(), "{}: {}", s.name(), o.violations[0]);
        assert!(o.events > 0 && o.points >= o.events, "{}: {o:?}", s.name());
        assert!(o.promises > 0, "{}: no promise was ever checked: {o:?}", s.name());
    }
    let e = sc::power_cut::run(Scenario::MessagesPingPong, dir.path(), map_file).expect_err("08 makes nothing durable");
    assert!(e.to_string().contains("--power-cut runs 04, 05, 07 and 09"), "{e}");
}

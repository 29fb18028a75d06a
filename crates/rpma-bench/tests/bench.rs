//! The benchmark on the mock: a short run of every operation produces a report whose JSON has the
//! fields docs/bench.md documents, with values consistent with the run (no timing assertions).
#![cfg(feature = "mock")]

use clap::Parser;
use rpma_bench::{self as bench, BenchArgs, OutputFormat};
use serde_json::Value;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

fn args(line: &[&str]) -> BenchArgs {
    Cli::try_parse_from(std::iter::once("bench").chain(line.iter().copied())).expect("valid arguments").args
}

fn json_of(line: &[&str]) -> Value {
    let report = bench::measure(&args(line), None).expect("the benchmark runs");
    let mut out = Vec::new();
    report.write(OutputFormat::Json, &mut out).expect("JSON output");
    serde_json::from_slice(&out).expect("valid JSON")
}

fn assert_run(r: &Value, op: &str, size: u64, ops: u64) {
    assert_eq!(r["op"], op);
    assert_eq!(r["size"], size);
    assert_eq!(r["ops"], ops, "{r}");
    for k in ["qd", "conns", "threads"] {
        assert!(r[k].as_u64().is_some_and(|v| v >= 1), "{k} in {r}");
    }
    assert!(r["elapsed_s"].as_f64().is_some_and(|v| v > 0.0), "{r}");
    let l = &r["latency_ns"];
    let get = |k: &str| l[k].as_u64().unwrap_or_else(|| panic!("latency_ns.{k} in {r}"));
    let (min, p50, p90, p99, p999, max) = (get("min"), get("p50"), get("p90"), get("p99"), get("p99_9"), get("max"));
    assert!(min >= 1 && min <= p50 && p50 <= p90 && p90 <= p99 && p99 <= p999 && p999 <= max, "{l}");
    assert!(l["mean"].as_f64().is_some_and(|m| m > 0.0), "{l}");
    let (mb, gb, rate, secs) = (
        r["mb_s"].as_f64().unwrap(),
        r["gb_s"].as_f64().unwrap(),
        r["msg_rate"].as_f64().unwrap(),
        r["elapsed_s"].as_f64().unwrap(),
    );
    assert!((mb / 1000.0 - gb).abs() <= gb * 1e-9 + 1e-12, "{r}");
    // The rate is all operations over the phase's wall time, with any number of threads.
    assert!((rate * secs - ops as f64).abs() <= ops as f64 * 1e-6 + 1e-6, "{r}");
    assert!((gb * 1e9 - rate * size as f64).abs() <= gb * 1e3 + 1e-3, "{r}");
    let kind = match op {
        "send" | "send-imm" | "write-imm" | "write-pingpong" => "half_round_trip",
        "connect" => "connection",
        _ => "completion",
    };
    assert_eq!(r["latency_kind"], kind);
}

#[test]
fn every_operation_reports_the_documented_json() {
    let v = json_of(&[
        "--op",
        "read,write,write-flush,flush,send,send-imm,write-imm",
        "--size",
        "8,4K",
        "--iters",
        "50",
        "--warmup",
        "5",
        "--qd",
        "4",
        "--port",
        "7601",
        "--no-progress",
    ]);
    assert_eq!(v["schema"], 6);
    assert_eq!(v["backend"], "mock");
    assert_eq!(v["device"], "mock0");
    assert_eq!(v["op_path_source"], "capabilities");
    // Every run has the field: the mock device has no native flush, and only the flushing
    // operations flush.
    for r in v["results"].as_array().expect("results") {
        let want =
            if matches!(r["op"].as_str(), Some("write-flush" | "flush")) { "emulated".into() } else { Value::Null };
        assert_eq!(r.get("op_path"), Some(&want), "{r}");
    }
    let results = v["results"].as_array().expect("results");
    assert_eq!(results.len(), 14);
    let mut i = 0;
    for op in ["read", "write", "write-flush", "flush", "send", "send-imm", "write-imm"] {
        for size in [8, 4096] {
            assert_run(&results[i], op, size, 50);
            assert_eq!(results[i]["qd"], 4);
            assert!(results[i]["baseline"].is_null());
            i += 1;
        }
    }
}

#[test]
fn atomic_write_with_several_connections_threads_and_a_baseline() {
    let v = json_of(&[
        "--op",
        "atomic-write",
        "--iters",
        "40",
        "--conns",
        "3",
        "--threads",
        "2",
        "--port",
        "7602",
        "--baseline",
        "--no-progress",
    ]);
    let r = &v["results"][0];
    assert_run(r, "atomic-write", 8, 120);
    assert_eq!((r["conns"].as_u64(), r["threads"].as_u64()), (Some(3), Some(2)));
    let b = &r["baseline"];
    assert!(b["gb_s"].as_f64().is_some_and(|g| g > 0.0), "{b}");
    let ratio = b["ratio"].as_f64().unwrap();
    assert!((ratio - r["gb_s"].as_f64().unwrap() / b["gb_s"].as_f64().unwrap()).abs() < 1e-9, "{b}");
    assert_eq!(b["align"], 4096, "the memcpy baseline's buffers are page-aligned: {b}");
}

/// The baseline's own GB/s is printed next to the ratio, in the table and the JSON, for every
/// size (its buffers page-aligned at every size).
#[test]
fn the_baseline_prints_its_own_gb_s_and_is_page_aligned() {
    let a = args(&["--size", "8,64K", "--iters", "20", "--port", "7611", "--baseline", "--no-progress"]);
    let report = bench::measure(&a, None).expect("the benchmark runs");
    for r in &report.results {
        let b = r.baseline.expect("a baseline");
        assert!(b.gb_s > 0.0 && b.align == 4096, "{b:?}");
    }
    let mut out = Vec::new();
    report.write(OutputFormat::Table, &mut out).unwrap();
    let t = String::from_utf8(out).unwrap();
    assert!(t.lines().nth(1).unwrap().contains("memcpy GB/s   ratio"), "{t}");
    let mut out = Vec::new();
    report.write(OutputFormat::Json, &mut out).unwrap();
    let j: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(j["schema"], 6);
    for r in j["results"].as_array().unwrap() {
        assert!(r["baseline"]["gb_s"].as_f64().is_some_and(|g| g > 0.0), "{r}");
        assert_eq!(r["baseline"]["align"], 4096, "{r}");
    }
}

#[test]
fn write_pingpong_runs_and_the_server_returns_to_echoing() {
    // 300 iterations wrap the one-byte ping number; the send and write after it run on the same
    // connections, so the server must have left the ping-pong.
    let v = json_of(&[
        "--op",
        "write-pingpong,send,write",
        "--size",
        "1,8,4K",
        "--iters",
        "300",
        "--warmup",
        "5",
        "--conns",
        "2",
        "--port",
        "7605",
        "--no-progress",
    ]);
    let results = v["results"].as_array().expect("results");
    assert_eq!(results.len(), 9);
    let mut i = 0;
    for op in ["write-pingpong", "send", "write"] {
        for size in [1, 8, 4096] {
            assert_run(&results[i], op, size, 600);
            assert_eq!(results[i]["qd"], 1);
            i += 1;
        }
    }
}

#[test]
fn a_server_that_sleeps_when_idle_echoes_and_ends_its_runs() {
    // --sleep-when-idle: the server waits on its CQ as soon as it is empty; the echoes of a
    // ping-pong and the stop message each wake it.
    let v = json_of(&[
        "--op",
        "send,write",
        "--size",
        "8",
        "--iters",
        "200",
        "--warmup",
        "5",
        "--sleep-when-idle",
        "--port",
        "7660",
        "--no-progress",
    ]);
    let results = v["results"].as_array().expect("results");
    assert_eq!(results.len(), 2);
    assert_run(&results[0], "send", 8, 200);
    assert_run(&results[1], "write", 8, 200);
}

#[test]
fn selective_signaling_counts_every_operation() {
    // 103 is no multiple of the batch (5): the last operation is signaled to retire the rest.
    let v = json_of(&[
        "--op",
        "write,read,write-flush",
        "--size",
        "8",
        "--iters",
        "103",
        "--warmup",
        "7",
        "--qd",
        "16",
        "--cq-mod",
        "5",
        "--port",
        "7606",
        "--no-progress",
    ]);
    for (r, op) in v["results"].as_array().expect("results").iter().zip(["write", "read", "write-flush"]) {
        assert_run(r, op, 8, 103);
    }
    // A time-bound run ends with a signaled operation too.
    let a = args(&[
        "--op",
        "write",
        "--duration",
        "0.05",
        "--qd",
        "32",
        "--cq-mod",
        "100",
        "--port",
        "7607",
        "--no-progress",
    ]);
    let report = bench::measure(&a, None).expect("the benchmark runs");
    assert!(report.results[0].ops > 0);
}

#[test]
fn a_duration_run_and_the_other_formats() {
    let a = args(&["--op", "write", "--duration", "0.05", "--port", "7603", "--no-progress", "--sweep", "8..32"]);
    let report = bench::measure(&a, None).expect("the benchmark runs");
    assert_eq!(report.results.iter().map(|r| r.size).collect::<Vec<_>>(), [8, 16, 32]);
    assert!(report.results.iter().all(|r| r.ops > 0));
    let mut csv = Vec::new();
    report.write(OutputFormat::Csv, &mut csv).unwrap();
    let csv = String::from_utf8(csv).unwrap();
    assert_eq!(csv.lines().count(), 4);
    assert!(csv.lines().nth(1).unwrap().starts_with("mock,mock0,write,8,"));
    let mut table = Vec::new();
    report.write(OutputFormat::Table, &mut table).unwrap();
    assert_eq!(String::from_utf8(table).unwrap().lines().count(), 5);
}

#[test]
fn verbs_needs_its_build_or_device() {
    // Without a device at this address (or without the verbs build) the run fails loudly.
    let e = bench::measure(&args(&["--backend", "verbs", "--addr", "192.0.2.1", "--no-progress"]), None).unwrap_err();
    assert!(!format!("{e:#}").is_empty());
}

/// `--retry-count` and `--ack-timeout` set the connections' retry count and ACK timeout: valid
/// values run; a value out of range fails the run with rpma-core's message naming the item, the
/// value and the range (the rule lives in rpma-core only).
#[test]
fn retry_count_and_ack_timeout_reach_the_connections() {
    let v = json_of(&["--retry-count", "0", "--ack-timeout", "14", "--iters", "10", "--port", "7681", "--no-progress"]);
    assert_run(&v["results"][0], "write", 8, 10);
    for (flag, value, msg) in [
        ("--retry-count", "8", "retry_count 8 is outside 0..=7"),
        ("--ack-timeout", "0", "ack_timeout 0 is outside 1..=31"),
        ("--ack-timeout", "32", "ack_timeout 32 is outside 1..=31"),
    ] {
        let e = bench::measure(&args(&[flag, value, "--iters", "10", "--port", "7682", "--no-progress"]), None)
            .expect_err("out of range");
        assert!(format!("{e:#}").contains(msg), "{flag} {value}: {e:#}");
    }
}

/// In a one-process run a failing server's own error is in the report's error, next to what
/// the client saw (a rejection).
#[test]
fn a_failing_server_s_error_is_in_the_bench_s_error() {
    let f = rpma::mock::MockFabric::new();
    f.faults().fail_nth(1, 5, Some("rdma_accept"));
    let e =
        bench::measure_on(f, &args(&["--iters", "10", "--no-progress"]), None).expect_err("the server's accept failed");
    let msg = format!("{e:#}");
    assert!(msg.contains("the server failed") || msg.starts_with("server"), "{msg}");
    assert!(msg.contains("injected fault"), "the server's own error is missing: {msg}");
}

/// With many threads the message rate is all operations over the phase's wall time (the first
/// thread's start to the last thread's end), not a sum of the threads' own rates.
#[test]
fn the_message_rate_of_many_threads_comes_from_the_phase_s_wall_time() {
    let r = json_of(&["--iters", "2000", "--conns", "8", "--threads", "8", "--no-progress", "--json"]);
    let run = &r["results"][0];
    let (ops, secs, rate) =
        (run["ops"].as_f64().unwrap(), run["elapsed_s"].as_f64().unwrap(), run["msg_rate"].as_f64().unwrap());
    assert_eq!(ops, 16_000.0);
    assert!((rate - ops / secs).abs() <= rate * 1e-9, "rate {rate} is not {ops} ops / {secs} s");
    let mb = run["mb_s"].as_f64().unwrap();
    assert!((mb - rate * 8.0 / 1e6).abs() <= mb * 1e-9, "MB/s {mb} is not the rate {rate} times 8 bytes");
}

#[test]
fn batch_posts_chains_and_counts_every_operation() {
    let v = json_of(&[
        "--op",
        "read,write,write-flush,flush,atomic-write",
        "--size",
        "8",
        "--iters",
        "200",
        "--warmup",
        "16",
        "--qd",
        "32",
        "--batch",
        "16",
        "--port",
        "7631",
        "--no-progress",
    ]);
    for r in v["results"].as_array().expect("results") {
        assert_run(r, r["op"].as_str().unwrap(), 8, 200);
        assert_eq!((r["batch"].as_u64(), r["sge"].as_u64(), r["inline"].as_bool()), (Some(16), Some(1), Some(false)));
    }
}

#[test]
fn sge_and_inline_runs_report_their_shape() {
    let v = json_of(&[
        "--op",
        "read,write,send",
        "--size",
        "64",
        "--iters",
        "40",
        "--warmup",
        "4",
        "--qd",
        "4",
        "--sge",
        "4",
        "--port",
        "7632",
        "--no-progress",
    ]);
    for r in v["results"].as_array().expect("results") {
        assert_run(r, r["op"].as_str().unwrap(), 64, 40);
        assert_eq!(r["sge"], 4);
    }
    let v = json_of(&[
        "--op",
        "write,write-flush,send,write-imm",
        "--size",
        "32",
        "--iters",
        "40",
        "--warmup",
        "4",
        "--qd",
        "4",
        "--inline",
        "--port",
        "7633",
        "--no-progress",
    ]);
    for r in v["results"].as_array().expect("results") {
        assert_run(r, r["op"].as_str().unwrap(), 32, 40);
        assert_eq!(r["inline"], true);
    }
}

#[test]
fn batch_sge_and_inline_refuse_what_they_cannot_do() {
    let cases: &[(&[&str], &str)] = &[
        (&["--batch", "0"], "--batch must be in 1..="),
        (&["--batch", "65", "--qd", "128"], "--batch must be in 1..=64"),
        (&["--op", "write-flush", "--batch", "33", "--qd", "64"], "--batch must be in 1..=32"),
        (&["--batch", "8", "--qd", "4"], "exceeds --qd 4"),
        (&["--op", "send", "--batch", "2", "--qd", "4"], "not send"),
        (&["--sge", "0"], "--sge must be in 1..="),
        (&["--op", "flush", "--sge", "2"], "flush has none to split"),
        (&["--size", "8", "--sge", "9"], "cannot be split into 9"),
        (&["--batch", "64", "--qd", "64", "--sge", "8", "--size", "64"], "at most 256"),
        (&["--op", "read", "--inline"], "not read"),
        (&["--inline", "--sge", "2"], "exclude each other"),
    ];
    for (line, want) in cases {
        let e = bench::plan(&args(line)).expect_err(&format!("{line:?} must be refused"));
        assert!(e.to_string().contains(want), "{line:?}: {e}");
    }
    // The device's inline limit (256 bytes on the mock) is checked when the lane connects.
    let e =
        bench::measure(&args(&["--inline", "--size", "1K", "--iters", "1", "--port", "7634", "--no-progress"]), None)
            .expect_err("inline above the device's limit");
    assert!(format!("{e:#}").contains("inline limit of 256 B"), "{e:#}");
    // What the device cannot do is a usage error (the command exits 2), as an argument out of
    // range is.
    assert!(e.downcast_ref::<rpma_scenarios::usage::UsageError>().is_some(), "{e:#}");
}

#[test]
fn async_runs_every_one_sided_operation_and_reports_it() {
    for (qd, conns, threads, port) in [("1", "1", "1", "7640"), ("4", "3", "2", "7641")] {
        let v = json_of(&[
            "--op",
            "read,write,write-flush,flush,atomic-write",
            "--size",
            "8",
            "--iters",
            "300",
            "--warmup",
            "10",
            "--qd",
            qd,
            "--conns",
            conns,
            "--threads",
            threads,
            "--async",
            "--port",
            port,
            "--no-progress",
        ]);
        let results = v["results"].as_array().expect("results");
        assert_eq!(results.len(), 5);
        let per_conn: u64 = 300;
        for r in results {
            assert_run(r, r["op"].as_str().unwrap(), 8, per_conn * conns.parse::<u64>().unwrap());
            assert_eq!(r["api"], "async", "{r}");
        }
    }
    // A duration run, and the synchronous runs say so.
    let v =
        json_of(&["--op", "write", "--duration", "0.05", "--qd", "2", "--async", "--port", "7642", "--no-progress"]);
    assert!(v["results"][0]["ops"].as_u64().is_some_and(|n| n > 0));
    let v = json_of(&["--op", "write", "--iters", "10", "--port", "7643", "--no-progress"]);
    assert_eq!(v["results"][0]["api"], "sync");
}

#[test]
fn async_refuses_what_it_does_not_measure() {
    let cases: &[(&[&str], &str)] = &[
        (&["--async", "--op", "send"], "not send"),
        (&["--async", "--op", "write-pingpong"], "not write-pingpong"),
        (&["--async", "--batch", "2", "--qd", "2"], "no --batch"),
        (&["--async", "--inline"], "no --batch, --sge or --inline"),
        (&["--async", "--backend", "verbs", "--server"], "server"),
    ];
    for (line, want) in cases {
        let e = bench::plan(&args(line)).expect_err(&format!("{line:?} must be refused"));
        assert!(e.to_string().contains(want), "{line:?}: {e}");
    }
}

/// A `--no-latency` run's result: every count and rate as [`assert_run`] checks them, and no
/// latency.
fn assert_untimed(r: &Value, ops: u64) {
    assert_eq!(r["ops"], ops, "{r}");
    assert_eq!(r["latency_kind"], "none", "{r}");
    assert!(r["latency_ns"].is_null(), "{r}");
    let (rate, secs) = (r["msg_rate"].as_f64().unwrap(), r["elapsed_s"].as_f64().unwrap());
    assert!(secs > 0.0 && (rate * secs - ops as f64).abs() <= ops as f64 * 1e-6 + 1e-6, "{r}");
}

#[test]
fn no_latency_reads_no_clock_per_operation_and_reports_the_rate() {
    let untimed = |line: &[&str]| {
        let v = json_of(&[line, &["--no-latency", "--no-progress"]].concat());
        assert_eq!(v["schema"], 6);
        v["results"].as_array().expect("results").clone()
    };
    // One by one, selectively signaled, the ping-pongs and write-pingpong.
    let r = untimed(&[
        "--op",
        "read,write,write-flush,send,write-imm",
        "--size",
        "8,4K",
        "--iters",
        "200",
        "--qd",
        "4",
        "--cq-mod",
        "2",
        "--port",
        "7650",
    ]);
    assert_eq!(r.len(), 10);
    r.iter().for_each(|r| assert_untimed(r, 200));
    let r = untimed(&["--op", "write-pingpong", "--size", "8", "--iters", "100", "--port", "7651"]);
    assert_untimed(&r[0], 100);
    // Chains, several connections and threads, the async API, and a duration run.
    let r = untimed(&[
        "--op",
        "write",
        "--iters",
        "256",
        "--qd",
        "16",
        "--batch",
        "4",
        "--conns",
        "2",
        "--threads",
        "2",
        "--port",
        "7652",
    ]);
    assert_untimed(&r[0], 512);
    let r = untimed(&["--op", "read,flush", "--iters", "100", "--qd", "2", "--async", "--port", "7653"]);
    r.iter().for_each(|r| assert_untimed(r, 100));
    let r = untimed(&["--op", "write", "--duration", "0.05", "--port", "7654"]);
    assert!(r[0]["ops"].as_u64().is_some_and(|n| n > 0), "{:?}", r[0]);
    assert_untimed(&r[0], r[0]["ops"].as_u64().unwrap());
    let r = untimed(&["--op", "write", "--duration", "0.05", "--async", "--port", "7655"]);
    assert_untimed(&r[0], r[0]["ops"].as_u64().unwrap());
}

#[test]
fn connect_measures_connection_setup_one_connection_at_a_time() {
    let v = json_of(&["--op", "connect", "--iters", "20", "--warmup", "3", "--port", "7670", "--no-progress"]);
    let r = &v["results"][0];
    assert_run(r, "connect", 0, 20);
    assert!(r["msg_rate"].as_f64().is_some_and(|x| x > 0.0), "{r}");
    assert_eq!(v["results"].as_array().map(Vec::len), Some(1));
    // --duration: at least one connection, and the server still ends (its last request says so).
    let v = json_of(&["--op", "connect", "--duration", "0.05", "--warmup", "0", "--port", "7671", "--no-progress"]);
    assert!(v["results"][0]["ops"].as_u64().is_some_and(|n| n >= 1), "{v}");
    for (line, want) in [
        (&["--op", "connect,write"][..], "run it on its own"),
        (&["--op", "connect", "--qd", "2"], "--qd does not apply"),
        (&["--op", "connect", "--conns", "2", "--threads", "2"], "--conns does not apply"),
        (&["--op", "connect", "--async"], "not connect"),
        (&["--op", "connect", "--inline"], "not connect"),
    ] {
        let e = bench::plan(&args(line)).expect_err(&format!("{line:?} must be refused"));
        assert!(e.to_string().contains(want), "{line:?}: {e}");
    }
}

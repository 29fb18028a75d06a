//! `rpma log` on the mock: `rpma log bench` with replicas of its own reports the documented JSON
//! with a positive rate; `rpma log serve` processes and an `rpma log bench` process meet on the
//! mock's cross-process mode; bad arguments are clear usage errors.
#![cfg(feature = "mock")]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

const RPMA: &str = env!("CARGO_BIN_EXE_rpma");

fn check_results(v: &Value, replicas: usize) {
    assert_eq!(v["schema"], 1, "{v}");
    assert_eq!(v["backend"], "mock");
    assert_eq!(v["replicas"].as_array().map(Vec::len), Some(replicas), "{v}");
    let results = v["results"].as_array().expect("results");
    let modes: Vec<&str> = results.iter().filter_map(|r| r["mode"].as_str()).collect();
    assert_eq!(modes, ["qd1", "group-commit"], "{v}");
    for r in results {
        assert_eq!(r["replicas"], replicas as u64, "{r}");
        assert_eq!(r["size"], 64, "{r}");
        assert!(r["synced_appends_per_s"].as_f64().is_some_and(|x| x > 0.0), "{r}");
        assert!(r["elapsed_s"].as_f64().is_some_and(|x| x > 0.0), "{r}");
        assert!(r["cpu_ns_per_append"].as_f64().is_some_and(|x| x >= 0.0), "{r}");
        assert!(matches!(r["wait"].as_str(), Some("spin" | "sleep")), "{r}");
        let l = &r["latency_ns"];
        let get = |k: &str| l[k].as_u64().unwrap_or_else(|| panic!("latency_ns.{k} in {r}"));
        assert!(get("min") >= 1 && get("min") <= get("p50") && get("p50") <= get("p99") && get("p99") <= get("max"));
    }
    let qd1 = &results[0];
    assert_eq!(qd1["group"], 1);
    assert_eq!(qd1["syncs"], qd1["appends"], "{qd1}");
}

#[test]
fn log_bench_on_the_mock_with_three_replicas_of_its_own_reports_json() {
    let out = Command::new(RPMA)
        .args(["log", "bench", "--backend", "mock", "--replicas", "3", "--json", "--iters", "3000", "--port", "7580"])
        .args(["--region", "256K"])
        .output()
        .expect("rpma runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    check_results(&v, 3);
    assert_eq!(v["self_hosted"], true);
    // 3000 appends of 104 ring bytes in a ring of 256 KiB (2520 of them), twice: the
    // ring is truncated on the way.
    let truncations: u64 = v["results"].as_array().unwrap().iter().map(|r| r["truncations"].as_u64().unwrap()).sum();
    assert!(truncations >= 1, "{v}");
}

#[test]
fn log_bench_with_a_sleeping_writer_reports_its_wait_and_cpu_time() {
    let out = Command::new(RPMA)
        .args(["log", "bench", "--backend", "mock", "--replicas", "3", "--json", "--iters", "20000", "--port", "7590"])
        .args(["--region", "1M", "--wait", "sleep"])
        .output()
        .expect("rpma runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    check_results(&v, 3);
    for r in v["results"].as_array().unwrap() {
        assert_eq!(r["wait"], "sleep", "{r}");
        // 20000 appends take the writer's thread some CPU time (counted in nanoseconds).
        assert!(r["cpu_ns_per_append"].as_f64().is_some_and(|x| x > 0.0), "{r}");
    }
}

#[test]
fn log_bench_with_the_baseline_reports_both_in_paired_rounds_and_their_ratios() {
    let out = Command::new(RPMA)
        .args(["log", "bench", "--backend", "mock", "--replicas", "3", "--json", "--iters", "500", "--port", "7570"])
        .args(["--region", "1M", "--baseline", "--rounds", "3", "--quorum", "all", "--warmup", "50"])
        .output()
        .expect("rpma runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let modes = |k: &str| -> Vec<String> {
        v[k].as_array().unwrap_or_else(|| panic!("{k} in {v}")).iter().map(|r| r["mode"].to_string()).collect()
    };
    let three_rounds = ["\"qd1\"", "\"group-commit\""].repeat(3);
    assert_eq!(modes("results"), three_rounds, "{v}");
    assert_eq!(modes("baseline"), three_rounds, "{v}");
    for r in v["baseline"].as_array().unwrap() {
        assert_eq!(r["replicas"], 3, "{r}");
        assert!(r["synced_appends_per_s"].as_f64().is_some_and(|x| x > 0.0), "{r}");
    }
    let ratios = v["ratios"].as_array().expect("ratios");
    assert_eq!(ratios.len(), 2, "{v}");
    for q in ratios {
        assert_eq!(q["rounds"], 3, "{q}");
        let (lp, bp) = (q["log_p50_ns"].as_f64().unwrap(), q["baseline_p50_ns"].as_f64().unwrap());
        let (lr, br) = (q["log_per_s"].as_f64().unwrap(), q["baseline_per_s"].as_f64().unwrap());
        assert!(lp > 0.0 && bp > 0.0 && lr > 0.0 && br > 0.0, "{q}");
        assert!((q["latency_ratio"].as_f64().unwrap() - lp / bp).abs() < 1e-9, "{q}");
        assert!((q["rate_ratio"].as_f64().unwrap() - lr / br).abs() < 1e-9, "{q}");
    }
    // Without --baseline the report has neither.
    let out = Command::new(RPMA)
        .args(["log", "bench", "--backend", "mock", "--replicas", "1", "--json", "--iters", "100", "--port", "7575"])
        .args(["--region", "1M"])
        .output()
        .expect("rpma runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(v.get("baseline").is_none() && v.get("ratios").is_none(), "{v}");
}

/// `--mode failover`: each takeover's phases, and the whole in the run's qd-1 syncs and in bare
/// handshakes.
#[test]
fn log_bench_failover_reports_each_phase_of_the_takeovers() {
    let out = Command::new(RPMA)
        .args(["log", "bench", "--backend", "mock", "--replicas", "3", "--json", "--port", "7565"])
        .args(["--region", "1M", "--mode", "failover", "--takeovers", "3", "--fill", "64K"])
        .output()
        .expect("rpma runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let f = &v["failovers"].as_array().expect("failovers")[0];
    assert_eq!(f["takeovers"], 3, "{f}");
    // 64 KiB of 104-byte records.
    assert_eq!(f["history_bytes"], (64 * 1024 / 104) * 104, "{f}");
    let ns = |k: &str| f[k].as_u64().unwrap_or_else(|| panic!("{k} in {f}"));
    for k in ["sync_p50_ns", "connect_ns", "buffers_ns", "headers_ns", "history_ns", "repair_ns", "first_sync_ns"] {
        assert!(ns(k) > 0, "{k}: {f}");
    }
    assert!(ns("takeover_ns") >= ns("connect_ns") + ns("first_sync_ns"), "{f}");
    let ratio = ns("takeover_ns") as f64 / ns("sync_p50_ns") as f64;
    assert!((f["takeover_in_syncs"].as_f64().unwrap() - ratio).abs() < 1e-6, "{f}");
    assert_eq!(f["standby"], false, "{f}");
    // The floor of `connect`, timed in the same run with servers of the process.
    assert_eq!(f["replicas"], 3, "{f}");
    assert!(ns("handshake_ns") > 0, "{f}");
    let ratio = ns("takeover_ns") as f64 / ns("handshake_ns") as f64;
    assert!((f["takeover_in_handshakes"].as_f64().unwrap() - ratio).abs() < 1e-6, "{f}");
    // Writers standing by: the same takeovers, reported so.
    let out = Command::new(RPMA)
        .args(["log", "bench", "--backend", "mock", "--replicas", "3", "--json", "--port", "7560"])
        .args(["--region", "1M", "--mode", "failover", "--takeovers", "2", "--fill", "16K", "--standby"])
        .output()
        .expect("rpma runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let f = &v["failovers"][0];
    assert_eq!((f["standby"].as_bool(), f["takeovers"].as_u64()), (Some(true), Some(2)), "{f}");
}

#[test]
fn log_bench_arguments_are_checked() {
    let out = Command::new(RPMA).arg("log").output().expect("rpma runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("`rpma log` needs a command: serve or bench"));
    for (args, what) in [
        (&["--replicas", "4"][..], "1 to 3"),
        (&["--replicas", "0"], "1 to 3"),
        (&["--replicas", "10.0.0.1"], "ADDR:PORT"),
        (&["--replicas", "10.0.0.1:7480,10.0.0.1:7480"], "twice"),
        (&["--replicas", "2", "--quorum", "3"], "--quorum 3"),
        (&["--group", "0"], "--group"),
        (&["--replicas", "1", "--region", "4K", "--group", "128"], "--region"),
        (&["--size", "0"], "--size"),
        (&["--rounds", "0"], "--rounds"),
        (&["--replicas", "10.0.0.1:7480", "--baseline"], "--baseline"),
        (&["--replicas", "10.0.0.1:7480", "--pmem", "/dev/dax0.0"], "--pmem"),
        (&["--mode", "failover", "--takeovers", "0"], "--takeovers"),
        (&["--mode", "failover", "--baseline"], "no hand-written baseline"),
        (&["--mode", "failover", "--region", "1M", "--fill", "2M"], "--fill"),
    ] {
        let out = Command::new(RPMA).args(["log", "bench"]).args(args).output().expect("rpma runs");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(what) && !err.contains("panicked"), "{args:?}: {err}");
    }
}

/// A child killed when dropped.
struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `rpma log serve` on the mock's cross-process mode, its first line read (it serves from then on).
fn serve(rv: &std::path::Path, port: u16, file: &std::path::Path, extra: &[&str]) -> (Kill, String) {
    let mut child = Command::new(RPMA)
        .args(["log", "serve", "--backend", "mock", "--addr", "127.0.0.1", "--port", &port.to_string()])
        .arg("--file")
        .arg(file)
        .args(["--file-create", "--size", "1M", "--direct-pmem-write"])
        .args(extra)
        .env("RPMA_MOCK_RENDEZVOUS", rv)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("rpma log serve starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("its first line");
    assert!(line.starts_with("rpma log serve: log"), "{line}");
    (Kill(child), line)
}

fn bench_remote(rv: &std::path::Path, replicas: &str) -> Value {
    let out = Command::new(RPMA)
        .args(["log", "bench", "--backend", "mock", "--replicas", replicas, "--json", "--iters", "500"])
        .args(["--warmup", "10", "--group", "32"])
        .env("RPMA_MOCK_RENDEZVOUS", rv)
        .output()
        .expect("rpma runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[test]
fn log_serve_processes_and_a_writer_process_on_the_mock_cross_process_mode() {
    let dir = tempfile::tempdir().expect("a directory");
    let rv = dir.path().join("rv");
    let files: Vec<_> = (0..3).map(|i| dir.path().join(format!("replica{i}.log"))).collect();
    // A new log: each replica formatted for it.
    let servers: Vec<(Kill, String)> = (0..3).map(|i| serve(&rv, 7590 + i as u16, &files[i], &["--format"])).collect();
    assert!(servers[0].1.contains("entries 0..0 (epoch 0)"), "{}", servers[0].1);
    assert!(servers[0].1.contains("formatted for a new log"), "{}", servers[0].1);
    let replicas = "127.0.0.1:7590,127.0.0.1:7591,127.0.0.1:7592";
    let v = bench_remote(&rv, replicas);
    check_results(&v, 3);
    assert_eq!(v["self_hosted"], false);
    drop(servers);
    // The replicas come back on their files holding what was committed, and a second writer
    // takes the log over and goes on.
    std::thread::sleep(Duration::from_millis(100));
    let servers: Vec<(Kill, String)> = (0..3).map(|i| serve(&rv, 7590 + i as u16, &files[i], &[])).collect();
    // The bench acknowledged 1020 appends (510 per mode); its commit word trails them (moved every
    // eighth of the ring): the line counts the history with its tail.
    for (_, line) in &servers {
        assert!(line.contains("entries 0..1020 (epoch 1)") && line.contains("(opened)"), "the log was kept: {line}");
    }
    let v = bench_remote(&rv, replicas);
    check_results(&v, 3);
}

#[test]
fn log_serve_refuses_a_region_of_another_log_and_a_bad_size() {
    let dir = tempfile::tempdir().expect("a directory");
    let rv = dir.path().join("rv");
    let file = dir.path().join("replica.log");
    drop(serve(&rv, 7595, &file, &[]));
    std::thread::sleep(Duration::from_millis(100));
    let out = Command::new(RPMA)
        .args(["log", "serve", "--backend", "mock", "--addr", "127.0.0.1", "--port", "7595", "--log-id", "7"])
        .arg("--file")
        .arg(&file)
        .args(["--size", "1M", "--duration", "1"])
        .env("RPMA_MOCK_RENDEZVOUS", &rv)
        .output()
        .expect("rpma runs");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("holds log") && err.contains("--format"), "{err}");
    let out =
        Command::new(RPMA).args(["log", "serve", "--addr", "127.0.0.1", "--size", "100"]).output().expect("rpma runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--size 100"));
}

#[test]
fn log_serve_formats_a_blank_region_as_a_replacement_unless_told_it_starts_a_new_log() {
    let dir = tempfile::tempdir().expect("a directory");
    let rv = dir.path().join("rv");
    let file = dir.path().join("replica.log");
    let (_s, line) = serve(&rv, 7597, &file, &[]);
    assert!(line.contains("blank: formatted as a replacement") && line.contains("--format"), "{line}");
}

#[test]
fn a_pmem_that_cannot_serve_is_named_by_its_flag() {
    let dir = tempfile::tempdir().expect("a directory");
    let missing = dir.path().join("missing");
    let plain = dir.path().join("plain");
    std::fs::write(&plain, b"abc").expect("a plain file");
    let bench = Command::new(RPMA).args(["log", "bench", "--pmem"]).arg(&missing).output().expect("rpma runs");
    let serve = Command::new(RPMA)
        .args(["log", "serve", "--addr", "127.0.0.1", "--port", "7599", "--duration", "1", "--pmem"])
        .arg(&plain)
        .output()
        .expect("rpma runs");
    for (out, what) in [
        (bench, format!("--pmem {} does not exist (give a devdax device", missing.display())),
        (serve, format!("--pmem {} is 3 bytes long", plain.display())),
    ] {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(&what), "{err}");
        // Neither command has --file-create, and `log bench` has no --file.
        assert!(!err.contains("--file"), "{err}");
    }
}

#[test]
fn a_replica_without_direct_write_to_pmem_refuses_persistent_flushes_and_names_the_fix() {
    let dir = tempfile::tempdir().expect("a directory");
    let rv = dir.path().join("rv");
    // A DRAM replica of a new log that does not announce direct write to pmem.
    let mut child = Command::new(RPMA)
        .args([
            "log",
            "serve",
            "--backend",
            "mock",
            "--addr",
            "127.0.0.1",
            "--port",
            "7612",
            "--size",
            "1M",
            "--format",
        ])
        .env("RPMA_MOCK_RENDEZVOUS", &rv)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("rpma log serve starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("its first line");
    let _server = Kill(child);
    assert!(line.contains("direct write to persistence: no"), "{line}");
    let bench = |flush: &str| {
        Command::new(RPMA)
            .args(["log", "bench", "--backend", "mock", "--replicas", "127.0.0.1:7612", "--json", "--iters", "20"])
            .args(["--warmup", "0", "--timeout", "5", "--flush", flush])
            .env("RPMA_MOCK_RENDEZVOUS", &rv)
            .output()
            .expect("rpma runs")
    };
    let out = bench("persistent");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("persistent flushes are impossible") && err.contains("--flush visibility"), "{err}");
    // The fix works.
    let out = bench("visibility");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

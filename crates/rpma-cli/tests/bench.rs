//! `rpma bench`, the command: its report on stdout, its exit statuses, and a server and a client
//! as two processes on the mock (the engine's own tests are rpma-bench's).
#![cfg(feature = "mock")]

use std::time::{Duration, Instant};

use serde_json::Value;

/// A result of the report: its operation, size and count (rpma-bench's tests check the rest).
fn assert_ops(r: &Value, op: &str, size: u64, ops: u64) {
    assert_eq!((r["op"].as_str(), r["size"].as_u64(), r["ops"].as_u64()), (Some(op), Some(size), Some(ops)), "{r}");
    assert!(r["msg_rate"].as_f64().is_some_and(|x| x > 0.0), "{r}");
}

#[test]
fn a_client_with_nobody_to_meet_fails_with_status_1() {
    // A mock client whose server is not there (an empty rendezvous directory of its own).
    let dir = tempfile::tempdir().unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_rpma"))
        .args(["bench", "--connect", "127.0.0.1:7491", "--iters", "10", "--no-progress"])
        .env("RPMA_MOCK_RENDEZVOUS", dir.path().join("rv"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("unreachable"), "{err}");
}

#[test]
fn the_help_names_the_retry_settings() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rpma")).args(["bench", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--retry-count <N>") && help.contains("--ack-timeout <N>"), "{help}");
}

#[test]
fn the_rpma_binary_prints_the_json_report() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rpma"))
        .args(["bench", "--op", "write,send", "--size", "64", "--iters", "20", "--port", "7604", "--json"])
        .output()
        .expect("run rpma");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    assert_eq!((v["schema"].as_u64(), v["backend"].as_str()), (Some(6), Some("mock")));
    assert_ops(&v["results"][0], "write", 64, 20);
    assert_ops(&v["results"][1], "send", 64, 20);

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rpma"))
        .args(["bench", "--op", "write-flush,atomic-write", "--size", "8", "--iters", "20", "--port", "7605", "--json"])
        .output()
        .expect("run rpma");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    assert_eq!(v["op_path_source"], "capabilities");
    assert_eq!(
        (v["results"][0]["op"].as_str(), v["results"][0]["op_path"].as_str()),
        (Some("write-flush"), Some("emulated"))
    );
    assert_eq!(
        (v["results"][1]["op"].as_str(), v["results"][1]["op_path"].as_str()),
        (Some("atomic-write"), Some("emulated"))
    );

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rpma"))
        .args(["bench", "--op", "atomic-write", "--size", "16"])
        .output()
        .expect("run rpma");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("exactly 8 bytes"));
}

#[test]
fn what_the_device_cannot_do_is_a_usage_error() {
    // What the device cannot do is a usage error: exit 2, as for an argument out of range.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rpma"))
        .args(["bench", "--inline", "--size", "1K", "--iters", "1", "--port", "7635", "--no-progress"])
        .output()
        .expect("run rpma bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("exceeds the device's inline limit of 256 B (max_inline_data)"), "{stderr}");
}

/// `rpma bench --server` and `rpma bench --connect` as two processes on the mock (its
/// cross-process mode): every operation of several connections, threads and a deep queue
/// completes (a lost completion would end the run at its `--timeout`), and the JSON counts them.
#[test]
fn server_and_client_as_two_processes_on_the_mock() {
    let dir = tempfile::tempdir().unwrap();
    let rv = dir.path().join("rv");
    let bench = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_rpma"))
            .arg("bench")
            .args(args)
            .env("RPMA_MOCK_RENDEZVOUS", &rv)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut server = bench(&["--server", "--conns", "4", "--qd", "16", "--port", "7490", "--timeout", "60"]);
    // The client starts once the server listens (it does not retry an unreachable server): the
    // server says so on stderr.
    let mut err = std::io::BufReader::new(server.stderr.take().expect("piped stderr"));
    let mut first = String::new();
    std::io::BufRead::read_line(&mut err, &mut first).expect("the server's first line");
    if !first.contains("serving") {
        let _ = server.kill();
        let s = server.wait_with_output().unwrap();
        panic!("the server did not start: {first}{}", String::from_utf8_lossy(&s.stdout));
    }
    let client = bench(&[
        "--connect",
        "127.0.0.1:7490",
        "--conns",
        "4",
        "--threads",
        "2",
        "--qd",
        "16",
        "--op",
        "write,read,send,write-flush",
        "--iters",
        "2000",
        "--warmup",
        "10",
        "--no-progress",
        "--json",
        "--timeout",
        "60",
    ]);
    let c = client.wait_with_output().unwrap();
    if !c.status.success() {
        // The server would wait for its connections forever.
        let _ = server.kill();
    }
    let s = server.wait_with_output().unwrap();
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut err, &mut rest);
    let text = |o: &std::process::Output| {
        format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
    };
    let server_text = format!("{}{first}{rest}", String::from_utf8_lossy(&s.stdout));
    assert!(c.status.success() && s.status.success(), "client:\n{}\nserver:\n{server_text}", text(&c));
    let v: Value = serde_json::from_slice(&c.stdout).expect("JSON");
    let runs = v["results"].as_array().unwrap_or_else(|| panic!("results in {v}"));
    assert_eq!(runs.len(), 4, "{v}");
    for (r, op) in runs.iter().zip(["write", "read", "send", "write-flush"]) {
        assert_ops(r, op, 8, 4 * 2000);
    }
}

#[test]
fn connect_server_refuses_a_client_of_operations() {
    // A `--op connect` server and a client of operations: the server names the mismatch.
    let dir = tempfile::tempdir().unwrap();
    // The mock's rendezvous directory must be private.
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let rpma = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_rpma"))
            .env("RPMA_MOCK_RENDEZVOUS", dir.path())
            .args(["bench", "--port", "7672", "--no-progress", "--timeout", "5"])
            .args(extra)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run rpma bench")
    };
    let server = rpma(&["--server", "--op", "connect"]);
    std::thread::sleep(Duration::from_millis(500));
    let client = rpma(&["--connect", "127.0.0.1:7672", "--iters", "5"]).wait_with_output().unwrap();
    let server = server.wait_with_output().unwrap();
    let (c, s) = (String::from_utf8_lossy(&client.stderr), String::from_utf8_lossy(&server.stderr));
    assert!(!client.status.success() && !server.status.success(), "client: {c}\nserver: {s}");
    assert!(s.contains("run the client with --op connect too"), "{s}");
}

#[test]
fn an_oversized_run_is_refused_quickly_with_one_line_and_status_1() {
    let t = Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rpma"))
        .args(["bench", "--op", "send", "--size", "1G", "--qd", "4096", "--conns", "1024", "--threads", "1"])
        .args(["--port", "7622", "--no-progress"])
        .output()
        .expect("run rpma");
    assert!(t.elapsed() < Duration::from_secs(5), "refused in {:?}", t.elapsed());
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("of memory") && err.contains("MemAvailable") && err.contains("--size"), "{err}");
}

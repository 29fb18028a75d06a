//! The `rpma` binary: help, argument errors (one line, exit 2, never a panic), runtime errors
//! (one line, exit 1), `demo`, `devices --json`, `scenarios`.

#![cfg(feature = "mock")]

use std::process::{Command, Output};

fn rpma(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rpma")).args(args).env_remove("RUST_BACKTRACE").output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn help_of_the_command_and_of_every_subcommand() {
    for args in [
        &["--help"][..],
        &["help"],
        &["demo", "--help"],
        &["devices", "--help"],
        &["server", "--help"],
        &["client", "--help"],
        &["scenarios", "--help"],
        &["bench", "--help"],
        &["help", "client"],
    ] {
        let o = rpma(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let out = stdout(&o);
        assert!(out.contains("Usage: rpma"), "{args:?}: {out}");
    }
    let top = stdout(&rpma(&["--help"]));
    for sub in ["demo", "devices", "server", "client", "scenarios", "bench", "rpma demo -s atomic-write"] {
        assert!(top.contains(sub), "{sub} missing from --help");
    }
    let client = stdout(&rpma(&["client", "--help"]));
    for opt in [
        "--scenario",
        "--backend",
        "--addr",
        "--port",
        "--file",
        "--file-create",
        "--word",
        "--imm",
        "--rounds",
        "--retries",
    ] {
        assert!(client.contains(opt), "{opt} missing from client --help");
    }
    let server = stdout(&rpma(&["server", "--help"]));
    for opt in ["--direct-pmem-write", "--clients", "--srq-rcq", "read-to-volatile", "shared-channel"] {
        assert!(server.contains(opt), "{opt} missing from server --help");
    }
    assert!(rpma(&["--version"]).status.success());
}

#[test]
fn bad_arguments_give_one_line_and_exit_code_2() {
    for args in [
        &[][..],
        &["--bogus"],
        &["frobnicate"],
        &["demo", "--scenario", "no-such-scenario"],
        &["demo", "extra"],
        &["server"],
        &["server", "--scenario", "connection"],
        &["server", "-s", "03", "--addr", "10.0.0.1", "--file-create"],
        &["client", "-s", "10", "--addr", "10.0.0.1", "--imm", "4294967296"],
        &["client", "-s", "08", "--addr", "10.0.0.1", "--rounds", "-3"],
        &["client", "-s", "08", "--addr", "10.0.0.1", "--port", "70000"],
        &["server", "-s", "06", "--addr", "10.0.0.1", "--clients", "11"],
        &["devices", "--backend", "infiniband"],
    ] {
        let o = rpma(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err:?}");
        assert!(err.starts_with("rpma: "), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(stdout(&o).is_empty(), "{args:?}");
    }
}

/// A usage error points to the help of the command it was given to, whether clap or the
/// command's own checks refused it.
#[test]
fn usage_errors_point_to_their_commands_help() {
    for (args, help) in [
        (&["--bogus"][..], "(see 'rpma --help')"),
        (&["frobnicate"], "(see 'rpma --help')"),
        (&["bench", "--bogus"], "(see 'rpma bench --help')"),
        (&["bench", "--iters", "0"], "(see 'rpma bench --help')"),
        (&["log"], "(see 'rpma log --help')"),
        (&["log", "bench", "--bogus"], "(see 'rpma log bench --help')"),
        (&["log", "serve"], "(see 'rpma log serve --help')"),
        (&["client", "-s", "08", "--addr", "10.77.0.1", "--rounds", "0"], "(see 'rpma client --help')"),
    ] {
        let o = rpma(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.trim_end().ends_with(help), "{args:?}: {help:?} not at the end of {err}");
    }
}

/// Arguments that parse but do not fit together (or cannot run) are usage errors too: exit 2
/// with a message naming the problem.
#[test]
fn arguments_that_disagree_or_cannot_run_exit_2_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("x").display().to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["server", "-s", "01", "--addr", "10.77.0.1", "--file", &missing], "--file is not used by connection"),
        (vec!["server", "-s", "01", "--addr", "10.77.0.1", "--direct-pmem-write"], "flush-to-persistent only"),
        (vec!["client", "-s", "07", "--addr", "10.77.0.1"], "at least one --word"),
        (vec!["client", "-s", "08", "--addr", "10.77.0.1", "--word", "x"], "--word is used by"),
        (vec!["client", "-s", "08", "--addr", "10.77.0.1", "--rounds", "0"], "--rounds must be at least 1"),
        (vec!["client", "-s", "08", "--addr", "10.77.0.1", "--rounds", "-3"], "`-3` is negative"),
        (vec!["client", "-s", "01", "--addr", "10.77.0.1", "--retries", "-1"], "`-1` is negative"),
        // Port 0 would let the system pick a port nobody could be told.
        (vec!["server", "-s", "01", "--addr", "10.77.0.1", "--port", "0"], "cannot tell which port"),
        (vec!["client", "-s", "01", "--addr", "10.77.0.1", "--port", "seven"], "`seven` is not a port"),
        (vec!["client", "-s", "01", "--addr", "10.77.0.1", "--port", "-1"], "negative"),
        (vec!["bench", "--port", "0"], "cannot tell which port"),
        (vec!["bench", "--port", "65536"], "1..=65535"),
        (vec!["bench", "--connect", "10.0.0.1:0"], "cannot tell which port"),
        (vec!["bench", "--size", "-1"], "`-1` is negative"),
        (vec!["bench", "--size", "8,-64"], "`-64` is negative"),
        (vec!["bench", "--iters", "-5"], "`-5` is negative"),
        (vec!["bench", "--qd", "-1"], "`-1` is negative"),
        (vec!["bench", "--duration", "-1"], "`-1` is negative"),
        // A run of no length is refused rather than reported as a table of zeros.
        (vec!["bench", "--iters", "0"], "--iters must be at least 1"),
        (vec!["bench", "--duration", "0"], "--duration must be"),
        (vec!["bench", "--threads", "2"], "--threads must be in"),
    ];
    for (args, needle) in cases {
        let o = rpma(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err:?}");
        assert!(err.starts_with("rpma: "), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {needle:?} not in {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(stdout(&o).is_empty(), "{args:?}: {}", stdout(&o));
    }
}

#[test]
fn runtime_errors_give_one_line_and_exit_code_1() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("x").display().to_string();
    let short = dir.path().join("short").display().to_string();
    std::fs::write(&short, b"abc").unwrap();
    let tmp = dir.path().display().to_string();
    // An address of no mock device: the verbs backend's, which a binary without it refuses
    // (naming the feature), and one with it tries (and names the address it cannot use).
    let verbs_answer = if binary_has_verbs() { "10.77.0.1" } else { "--features verbs" };
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["devices", "--addr", "192.0.2.1"], "no mock device owns 192.0.2.1"),
        (vec!["client", "-s", "01", "--addr", "10.77.0.1"], verbs_answer),
        (vec!["server", "-s", "03", "--addr", "10.77.0.1", "--file", &missing, "--file-create"], verbs_answer),
        (vec!["client", "-s", "05", "--addr", "10.77.0.1", "--file", &short, "--file-create"], verbs_answer),
        // A --file that cannot serve is refused before anything is connected.
        (vec!["server", "-s", "03", "--addr", "10.77.0.1", "--file", &missing], "does not exist (--file-create"),
        (vec!["server", "-s", "07", "--addr", "10.77.0.1", "--file", &tmp], "is a directory"),
        (vec!["client", "-s", "09", "--addr", "10.77.0.1", "--file", "/dev/null"], "not a devdax device"),
        (
            vec!["server", "-s", "05", "--addr", "10.77.0.1", "--file", &short],
            "is 3 bytes long, this side needs 1041 bytes (--file-create extends it)",
        ),
        (
            vec!["client", "-s", "04", "--addr", "10.77.0.1", "--file", &short],
            "is 3 bytes long, this side needs 1045 bytes",
        ),
    ];
    for (args, needle) in cases {
        let o = rpma(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err:?}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        if needle == "10.77.0.1" {
            assert!(!err.contains("--features verbs"), "a binary with verbs refused it: {args:?}: {err}");
        }
    }
}

/// Whether the binary has the verbs backend, as `rpma --version` says (`rpma 0.1.0 (backends:
/// mock, verbs)`). Not this crate's `verbs` feature: a workspace build unifies the facade's
/// features, so another member (rpma-capi) can give the binary verbs while that feature is off.
fn binary_has_verbs() -> bool {
    let o = rpma(&["--version"]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    let backends = out
        .split_once("(backends: ")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(list, _)| list.split(", ").map(str::to_owned).collect::<Vec<_>>())
        .unwrap_or_else(|| panic!("rpma --version names no backends: {out}"));
    assert!(backends.iter().any(|b| b == "mock"), "this test file runs on a binary with the mock: {out}");
    backends.iter().any(|b| b == "verbs")
}

#[test]
fn version_names_the_backends_of_the_binary() {
    let o = rpma(&["--version"]);
    let out = stdout(&o);
    assert!(out.starts_with(concat!("rpma ", env!("CARGO_PKG_VERSION"), " (backends: mock")), "{out}");
    // This crate's verbs feature gives the binary verbs; without it the binary may still have
    // them (feature unification), so only one way is certain.
    if cfg!(feature = "verbs") {
        assert!(binary_has_verbs(), "{out}");
    }
}

#[test]
fn demo_runs_every_scenario_and_passes() {
    let dir = tempfile::tempdir().unwrap();
    let o = rpma(&["demo", "--dir", dir.path().to_str().unwrap()]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    assert!(out.contains("17 passed, 0 failed"), "{out}");
    assert_eq!(out.matches("PASS").count(), 17, "{out}");
    assert!(!out.contains("FAIL"));
    // The persistent scenarios left their files.
    for f in ["03-server.pmem", "04-server.pmem", "05-server.pmem", "07-log.pmem", "09-server.pmem"] {
        assert!(dir.path().join(f).exists(), "{f}");
    }
}

/// `rpma demo --two-process`: every scenario as `rpma server` and `rpma client` processes on the
/// mock's cross-process mode, in both modes.
#[test]
fn demo_as_processes_passes_every_scenario() {
    for mode in ["immediate", "deferred"] {
        let o = rpma_in_mode(mode, &["demo", "--two-process"]);
        let out = stdout(&o);
        assert!(o.status.success(), "{mode}: {out}\n{}", stderr(&o));
        assert!(out.contains("cross-process mode"), "{out}");
        assert!(out.contains("17 passed, 0 failed"), "{mode}: {out}");
        assert_eq!(out.matches("--- server (exit status: 0)").count(), 17, "{out}");
    }
}

/// `rpma server` and `rpma client` with `--backend mock` as two processes meeting in the
/// rendezvous directory `RPMA_MOCK_RENDEZVOUS` names; a client with nobody to meet gives up
/// with one clear line.
#[test]
fn server_and_client_on_the_mock_as_two_processes() {
    let dir = tempfile::tempdir().unwrap();
    let rv = dir.path().join("rv");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_rpma"))
            .args(args)
            .env("RPMA_MOCK_RENDEZVOUS", &rv)
            .env_remove("RUST_BACKTRACE")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let common = ["--backend", "mock", "--addr", "127.0.0.1", "--port", "7301", "-s", "07"];
    let file = dir.path().join("log.pmem");
    let server = run(&[&["server"][..], &common, &["--file", file.to_str().unwrap(), "--file-create"]].concat());
    let client = run(&[&["client"][..], &common, &["--word", "two", "--word", "processes"]].concat());
    let (s, c) = (server.wait_with_output().unwrap(), client.wait_with_output().unwrap());
    assert!(s.status.success() && c.status.success(), "{}{}\n{}{}", stdout(&s), stderr(&s), stdout(&c), stderr(&c));
    assert!(stdout(&s).contains("processes"), "{}", stdout(&s));
    // Nobody listens: the client's attempts end in one line, exit 1.
    let o = Command::new(env!("CARGO_BIN_EXE_rpma"))
        .args(["client", "--backend", "mock", "--addr", "127.0.0.1", "--port", "7302", "-s", "01", "--retries", "2"])
        .args(["--retry-delay", "10"])
        .env("RPMA_MOCK_RENDEZVOUS", &rv)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(!err.contains("panicked"), "{err}");
}

/// `RPMA_ACK_TIMEOUT` and `RPMA_RETRY_COUNT` reach the scenarios' connections: a value out of
/// range is refused by the connection's own check, naming it; one that is no number, naming the
/// variable; valid ones connect (the mock checks them like every backend, then ignores them).
#[test]
fn retry_settings_from_the_environment_reach_the_scenarios_connections() {
    let dir = tempfile::tempdir().unwrap();
    let rv = dir.path().join("rv");
    let client = |port: &str, env: &[(&str, &str)]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_rpma"));
        c.args(["client", "--backend", "mock", "--addr", "127.0.0.1", "--port", port, "-s", "01"])
            .env("RPMA_MOCK_RENDEZVOUS", &rv)
            .env_remove("RUST_BACKTRACE");
        for (k, v) in env {
            c.env(k, v);
        }
        c
    };
    let o = client("7303", &[("RPMA_ACK_TIMEOUT", "40")]).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("ack_timeout 40"), "{}", stderr(&o));
    let o = client("7303", &[("RPMA_RETRY_COUNT", "9")]).output().unwrap();
    assert!(stderr(&o).contains("retry_count 9"), "{}", stderr(&o));
    let o = client("7303", &[("RPMA_ACK_TIMEOUT", "short")]).output().unwrap();
    assert!(stderr(&o).contains("RPMA_ACK_TIMEOUT=short: not a number"), "{}", stderr(&o));
    let server = Command::new(env!("CARGO_BIN_EXE_rpma"))
        .args(["server", "--backend", "mock", "--addr", "127.0.0.1", "--port", "7304", "-s", "01"])
        .env("RPMA_MOCK_RENDEZVOUS", &rv)
        .env("RPMA_ACK_TIMEOUT", "14")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let c = client("7304", &[("RPMA_ACK_TIMEOUT", "14"), ("RPMA_RETRY_COUNT", "6")]).output().unwrap();
    let s = server.wait_with_output().unwrap();
    assert!(s.status.success() && c.status.success(), "{}{}\n{}{}", stdout(&s), stderr(&s), stdout(&c), stderr(&c));
}

fn rpma_in_mode(mode: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rpma"))
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .env("RPMA_MOCK_MODE", mode)
        .output()
        .unwrap()
}

/// `RPMA_MOCK_MODE=deferred`: every scenario passes with operations executing after post.
#[test]
fn demo_in_the_deferred_mock_mode_passes() {
    let o = rpma_in_mode("deferred", &["demo"]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    assert!(out.contains("(deferred mode,"), "{out}");
    assert!(out.contains("17 passed, 0 failed"), "{out}");
}

/// A bad `RPMA_MOCK_MODE` is one clear line and exit code 1, before anything runs.
#[test]
fn bad_mock_mode_is_one_line_and_exit_code_1() {
    for args in [&["demo"][..], &["devices"], &["bench", "--iters", "10"]] {
        let o = rpma_in_mode("sometimes", args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err:?}");
        assert!(
            err.contains(r#"RPMA_MOCK_MODE="sometimes" is not a mock mode (expected "immediate" or "deferred")"#),
            "{args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(!stdout(&o).contains("PASS"), "{args:?}");
    }
}

#[test]
fn demo_of_chosen_scenarios_by_name_and_number() {
    let o = rpma(&["demo", "-s", "connection", "-s", "07", "--scenario", "12scch"]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("3 passed, 0 failed"), "{out}");
    assert!(out.contains("atomic-write") && out.contains("shared-channel"));
    assert!(out.contains("atomic write emulated (fenced RDMA Write)"), "{out}");
}

#[test]
fn demo_reports_whether_flushes_and_atomic_writes_were_native() {
    for (extra, want) in [
        (None, "client: path: flush emulated (RDMA Read), atomic write emulated"),
        (Some("--native"), "client: path: flush native, atomic write native; from the device's capabilities"),
    ] {
        let mut args = vec!["demo", "-s", "05", "-s", "07", "-s", "09"];
        args.extend(extra);
        let o = rpma(&args);
        let out = stdout(&o);
        assert!(o.status.success(), "{out}");
        assert!(out.contains(want), "{want}: {out}");
        assert!(out.contains("client: path: GPSPM, the server persists on request; no RDMA flush"), "{out}");
        let native = if extra.is_some() { " mode, with native" } else { " mode, without native" };
        assert!(out.contains(native), "{out}");
    }
}

#[test]
fn devices_json_parses_and_describes_the_mock_device() {
    let o = rpma(&["devices", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let devs = v.as_array().unwrap();
    assert_eq!(devs.len(), 1);
    let d = &devs[0];
    assert_eq!(d["name"], "mock0");
    assert_eq!(d["backend"], "mock");
    assert!(d["addresses"].as_array().unwrap().iter().any(|a| a == "127.0.0.1"));
    let c = &d["capabilities"];
    assert_eq!(c["max_msg_size"], 1u64 << 31);
    // The fields of docs/cli.md's schema, with their types.
    for k in ["backend", "name", "addresses", "ports", "capabilities"] {
        assert!(d.get(k).is_some(), "{k}: {d}");
    }
    assert!(d.get("note").is_none(), "note only when the capabilities are missing: {d}");
    for k in ["odp", "native_atomic_write", "native_flush", "advise_mr", "iwarp"] {
        assert!(c[k].is_boolean(), "{k}: {c}");
    }
    for k in ["max_msg_size", "max_srq_wr", "max_qp_wr", "max_cqe", "max_inline_data", "max_private_data_connect"] {
        assert!(c[k].is_u64(), "{k}: {c}");
    }
    assert!(c["max_private_data_accept"].is_u64());
    // The mock's own: neither native flush nor native atomic write.
    assert_eq!(c["native_flush"], false);
    assert_eq!(c["native_atomic_write"], false);
    assert_eq!(c["odp"], false);
    assert_eq!(c["max_srq_wr"], 1 << 14);
}

#[test]
fn devices_text_and_by_address() {
    let o = rpma(&["devices", "--addr", "10.77.0.1"]);
    let out = stdout(&o);
    assert!(o.status.success());
    for s in [
        "mock0 (mock)",
        "max message size:",
        "flush:                emulated (an 8-byte RDMA Read",
        "atomic write:         emulated (",
        "on-demand paging:",
        "SRQ:",
    ] {
        assert!(out.contains(s), "{s}: {out}");
    }
}

#[test]
fn scenarios_lists_all_seventeen() {
    let o = rpma(&["scenarios"]);
    let out = stdout(&o);
    assert!(o.status.success());
    assert_eq!(out.lines().count(), 18, "{out}");
    for s in [
        "01-connection",
        "13-messages-ping-pong-with-srq",
        "08srq-simple",
        "12scch",
        "flush-to-persistent-gpspm",
        "06scch-multiple-connections",
        "09scch-flush-to-persistent-GPSPM",
    ] {
        assert!(out.contains(s), "{s}: {out}");
    }
}

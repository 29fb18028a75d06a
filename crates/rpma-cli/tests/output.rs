//! The `rpma` binary's output on a reader that goes away or a device that is full, for every
//! subcommand: a closed pipe ends the command quietly with status 0 (as `| head -1` expects), a
//! full device (`>/dev/full`) is one line on stderr and status 1; never a panic (status 101).
//! Also: a scenario and a demo directory can be run again (files left by the first run).

#![cfg(feature = "mock")]

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};

/// Every subcommand with arguments that write to stdout (the two-process sides print their
/// first line before they find that the verbs backend is missing from this build).
fn every_subcommand() -> Vec<Vec<&'static str>> {
    vec![
        vec!["demo"],
        vec!["demo", "-s", "07"],
        vec!["devices"],
        vec!["devices", "--json"],
        vec!["scenarios"],
        vec!["bench", "--iters", "200", "--warmup", "10", "--no-progress"],
        vec!["bench", "--iters", "200", "--warmup", "10", "--json"],
        vec!["bench", "--iters", "200", "--warmup", "10", "--csv"],
        vec!["server", "-s", "01", "--addr", "10.77.0.1"],
        vec!["client", "-s", "01", "--addr", "10.77.0.1"],
        vec!["--help"],
        vec!["bench", "--help"],
        vec!["--version"],
    ]
}

fn rpma() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rpma"));
    c.env_remove("RUST_BACKTRACE").stdin(Stdio::null()).stderr(Stdio::piped());
    c
}

fn no_panic(args: &[&str], o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_ne!(o.status.code(), Some(101), "{args:?} panicked: {err}");
    assert!(!err.contains("panicked") && !err.contains("backtrace"), "{args:?}: {err}");
    err
}

#[test]
fn a_pipe_closed_before_the_first_write_ends_every_subcommand_quietly() {
    for args in every_subcommand() {
        let mut child = rpma().args(&args).stdout(Stdio::piped()).spawn().unwrap();
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        let err = no_panic(&args, &o);
        if args[0] == "server" || args[0] == "client" {
            // These print their first line, then fail (no verbs backend or no device here). The
            // child may write that line before this side has closed the pipe: then it goes on to
            // its own error (status 1), else it ends quietly on the closed pipe (status 0).
            assert!(matches!(o.status.code(), Some(0 | 1)), "{args:?}: {err}");
        } else {
            assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
        }
        assert!(!err.contains("Broken pipe") && !err.contains("writing to stdout"), "{args:?}: {err}");
    }
}

#[test]
fn a_pipe_closed_after_the_first_line_ends_every_subcommand_quietly() {
    // `rpma demo | head -1`.
    for args in every_subcommand() {
        let mut child = rpma().args(&args).stdout(Stdio::piped()).spawn().unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
        let o = child.wait_with_output().unwrap();
        let err = no_panic(&args, &o);
        assert!(!first.is_empty() || args[0] == "server" || args[0] == "client", "{args:?}: no first line");
        // Whatever the command had to say after its first line went nowhere: either it ended
        // quietly on the closed pipe, or it had finished writing before the pipe closed and
        // ended with its own status.
        if !err.is_empty() {
            assert!(!err.contains("Broken pipe") && !err.contains("writing to stdout"), "{args:?}: {err}");
        }
    }
}

#[test]
fn a_full_device_is_one_line_and_status_1_for_every_subcommand() {
    if File::open("/dev/full").is_err() {
        eprintln!("no /dev/full: skipped");
        return;
    }
    for args in every_subcommand() {
        let full = OpenOptions::new().write(true).open("/dev/full").unwrap();
        let o = rpma().args(&args).stdout(Stdio::from(full)).output().unwrap();
        let err = no_panic(&args, &o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err:?}");
        assert!(err.starts_with("rpma: error: writing"), "{args:?}: {err}");
        assert!(err.contains("No space left on device"), "{args:?}: {err}");
    }
}

#[test]
fn a_scenario_repeated_in_one_demo_passes() {
    let o =
        rpma().args(["demo", "-s", "07", "-s", "07", "-s", "atomic-write"]).stdout(Stdio::piped()).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("3 passed, 0 failed"), "{out}");
}

#[test]
fn a_demo_directory_can_be_used_again() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    for run in 0..3 {
        let o = rpma().args(["demo", "--dir", d]).stdout(Stdio::piped()).output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "run {run}: {out}{}", String::from_utf8_lossy(&o.stderr));
        assert!(out.contains("17 passed, 0 failed"), "run {run}: {out}");
    }
    // The log of 07 grows run after run, as the example's does, until the demo starts it anew.
    for run in 0..60 {
        let o = rpma().args(["demo", "--dir", d, "-s", "07"]).stdout(Stdio::null()).output().unwrap();
        assert!(o.status.success(), "07 run {run}: {}", String::from_utf8_lossy(&o.stderr));
    }
}

//! `rpma bench` with a thousand connections in the default fd limit of 1024: on the mock a
//! connection needs no fd for its data path nor for its waits (they have deadlines but no fd),
//! so `--conns 1000` runs under `ulimit -n 1024`, in both mock modes.
#![cfg(feature = "mock")]

use std::process::Command;

/// Runs `rpma bench ARGS` under a soft fd limit of 1024 (set by the shell, for this command
/// alone) and `RPMA_MOCK_MODE=mode`; its stdout.
fn bench_under_1024_fds(mode: &str, args: &[&str]) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -n 1024 && [ "$(ulimit -n)" = 1024 ] && exec "$0" "$@""#)
        .arg(env!("CARGO_BIN_EXE_rpma"))
        .args(["bench", "--backend", "mock", "--no-progress", "--csv", "--timeout", "120"])
        .args(args)
        .env("RPMA_MOCK_MODE", mode)
        .output()
        .expect("run rpma bench");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "rpma bench {args:?} ({mode}) failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The CSV row's `ops` column (the header names it).
fn ops(csv: &str) -> u64 {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    let col = header.iter().position(|h| *h == "ops").expect("an ops column");
    let row: Vec<&str> = lines.next().expect("a row").split(',').collect();
    row[col].parse().expect("a count")
}

#[test]
fn a_thousand_connections_run_under_ulimit_n_1024() {
    for mode in ["immediate", "deferred"] {
        for op in ["write-flush", "send"] {
            let out = bench_under_1024_fds(
                mode,
                &["--op", op, "--conns", "1000", "--threads", "2", "--iters", "5", "--warmup", "1"],
            );
            assert_eq!(ops(&out), 5000, "{op} ({mode}):\n{out}");
        }
    }
}

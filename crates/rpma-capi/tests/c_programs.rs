//! C programs against librpma.so: compiled with gcc (against this crate's header, or Debian's
//! for the ABI check), linked with `-lrpma` against the cdylib of this crate and run on the
//! mock (`RPMA_BACKEND=mock`); the choice of the backend (also in a build without the verbs
//! feature); plus the library's SONAME and symbol versions. The same programs run on a
//! device in tests/c_verbs.rs.
//!
//! Needs gcc and libibverbs' headers (`struct ibv_wc`); the ABI test needs Debian's
//! librpma-dev header (.ci/run installs all three).

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use common::{compile, crate_dir, library, profile_dir, run, show, work_dir};

fn run_ok(name: &str, src: &str, own_header: bool) {
    run_ok_with(name, src, own_header, &[]);
}

/// [`run_ok`] with `env` set.
fn run_ok_with(name: &str, src: &str, own_header: bool, env: &[(&str, &str)]) {
    let dir = work_dir(name);
    let exe = compile(&dir, src, own_header);
    let out = common::command_timed(Some(&dir), &exe, Some("mock"))
        .envs(env.iter().copied())
        .output()
        .expect("run the C program");
    assert!(out.status.success(), "{}", show(src, &out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(": OK"), "{}", show(src, &out));
}

#[test]
fn end_to_end_on_the_mock() {
    run_ok("e2e", "e2e.c", true);
}

/// e2e.c as two C processes on the mock: server and client meet through the mock's
/// cross-process mode (`RPMA_MOCK_RENDEZVOUS`, a directory of this test).
#[test]
fn end_to_end_as_two_processes_on_the_mock() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let dir = work_dir("e2e-two-processes");
    let exe = compile(&dir, "e2e.c", true);
    let rv = dir.join("rendezvous");
    let side = |role: &str| {
        let mut c = common::command_timed(Some(&dir), &exe, Some("mock"));
        c.env("RPMA_MOCK_RENDEZVOUS", &rv).env("RPMA_TEST_PORT", "7390").arg(role);
        c
    };
    let mut server = side("server").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start the server");
    let mut lines = BufReader::new(server.stdout.take().expect("piped stdout")).lines();
    let mut seen = Vec::new();
    // The server says when it listens (its first lines; it exits if it fails).
    while !seen.iter().any(|l: &String| l.contains("e2e: listening")) {
        match lines.next() {
            Some(Ok(l)) => seen.push(l),
            _ => {
                let out = server.wait_with_output().expect("the server's output");
                panic!("the server did not listen: {seen:?}\n{}", show("e2e server", &out));
            }
        }
    }
    let client = side("client").output().expect("run the client");
    seen.extend(lines.map_while(Result::ok));
    let server = server.wait_with_output().expect("the server ends");
    assert!(client.status.success(), "{}", show("e2e client", &client));
    assert!(String::from_utf8_lossy(&client.stdout).contains("e2e client: OK"), "{}", show("e2e client", &client));
    assert!(server.status.success(), "{seen:?}\n{}", show("e2e server", &server));
    assert!(seen.iter().any(|l| l.contains("e2e server: OK")), "{seen:?}");
}

/// e2e.c and threads.c on the mock's deferred mode (`RPMA_MOCK_MODE=deferred`: work requests
/// execute after `post`, on the fabric's progress thread): the blocking waits, which sleep in
/// `poll(2)` on the fd, end when that work completes (src/wait.rs).
#[test]
fn blocking_waits_end_on_the_deferred_mock() {
    for (name, src) in [("e2e-deferred", "e2e.c"), ("threads-deferred", "threads.c")] {
        run_ok_with(name, src, true, &[("RPMA_MOCK_MODE", "deferred")]);
    }
}

#[test]
fn two_threads_post_on_one_connection_while_a_third_polls() {
    run_ok("threads", "threads.c", true);
}

#[test]
fn dereg_of_a_region_in_use_fails_and_keeps_the_handle() {
    run_ok("dereg", "dereg.c", true);
}

/// dereg_race.c: a client thread loops 32 MiB writes (+ flush) and reads on the
/// server's region while the server deregisters it and then makes the buffer inaccessible or
/// reuses it: `rpma_mr_dereg` returns 0 only once no access by the peer can touch the buffer
/// any more (no fault, no byte of the reused buffer changed), on the immediate and the deferred
/// mock.
#[test]
fn dereg_returns_0_only_once_no_peer_reaches_the_buffer() {
    run_ok_with("dereg-race", "dereg_race.c", true, &[("RPMA_TEST_ROUNDS", "24")]);
    run_ok_with(
        "dereg-race-deferred",
        "dereg_race.c",
        true,
        &[("RPMA_TEST_ROUNDS", "12"), ("RPMA_MOCK_MODE", "deferred")],
    );
}

/// log_reentry.c: a log function that calls back into the connection whose
/// `rpma_conn_disconnect` / `rpma_conn_next_event` is logging returns (the program's alarm ends
/// a hang after 30 s, status 2), in both mock modes.
#[test]
fn a_log_function_may_call_back_into_the_logging_connection() {
    run_ok("log-reentry", "log_reentry.c", true);
    run_ok_with("log-reentry-deferred", "log_reentry.c", true, &[("RPMA_MOCK_MODE", "deferred")]);
}

/// provider_log.c: a failed provider call is logged through the log function as
/// librpma logs it (an address no device owns).
#[test]
fn a_failed_provider_call_is_logged_as_librpma_logs_it() {
    run_ok("provider-log", "provider_log.c", true);
}

/// refusal_log.c: the arguments librpma refuses with a log line (descriptors too
/// short or without a usage, a shared channel with an SRQ's own receive CQ, the three refused
/// flushes) and its INFO lines (the peer's direct write to PMem) are logged as librpma logs
/// them: level, message and function, one line per call (tests/c_verbs.rs runs it on Debian's
/// librpma too).
#[test]
fn the_refusals_and_info_lines_librpma_logs_are_logged_as_librpma_logs_them() {
    run_ok("refusal-log", "refusal_log.c", true);
}

#[test]
fn bad_arguments_get_librpmas_codes() {
    run_ok("errors", "errors.c", true);
}

#[test]
fn shared_rqs_shared_channels_and_advice() {
    run_ok("more", "more.c", true);
}

/// fault.c with `RPMA_MOCK_FAULT=ibv_req_notify_cq:N` for N = 1, 2, ...: each run fails the
/// N-th arming of a CQ. While connecting, the failing call returns `RPMA_E_PROVIDER` and the
/// program frees what it made (status 3); once it is `rpma_conn_wait`'s re-arming, the wait
/// returns `RPMA_E_PROVIDER` with `*cq` NULL; past every arming, the wait succeeds. Each
/// outcome is seen, in that order, and nothing else happens.
#[test]
fn an_injected_fault_reaches_the_c_program_as_librpma_reports_it() {
    let dir = work_dir("fault");
    let exe = compile(&dir, "fault.c", true);
    let mut outcomes = Vec::new();
    for n in 1..=12 {
        let out = common::command_timed(Some(&dir), &exe, Some("mock"))
            .env("RPMA_MOCK_FAULT", format!("ibv_req_notify_cq:{n}"))
            .output()
            .expect("run fault.c");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let outcome = match (out.status.code(), stdout.as_str()) {
            (Some(3), s) if s.contains("= PROVIDER") => "setup",
            (Some(0), s) if s.contains("fault: wait PROVIDER") => "wait",
            (Some(0), s) if s.contains("fault: wait OK") => "none",
            _ => panic!("RPMA_MOCK_FAULT=ibv_req_notify_cq:{n}: {}", show("fault.c", &out)),
        };
        outcomes.push(outcome);
    }
    let first = |o: &str| outcomes.iter().position(|x| *x == o);
    let (setup, wait, none) = (first("setup"), first("wait"), first("none"));
    assert!(setup.is_some() && wait.is_some() && none.is_some(), "{outcomes:?}");
    assert!(setup < wait && wait < none, "{outcomes:?}");
    assert_eq!(outcomes.iter().filter(|o| **o == "wait").count(), 1, "{outcomes:?}");
    // A malformed plan is an error at the first call, with a log line naming it.
    let out = common::command_timed(Some(&dir), &exe, Some("mock"))
        .env("RPMA_MOCK_FAULT", "ibv_req_notify_cq:0")
        .output()
        .expect("run fault.c");
    assert!(!out.status.success(), "{}", show("fault.c", &out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("RPMA_MOCK_FAULT=ibv_req_notify_cq:0: NTH is not a positive number"), "{stderr}");
}

#[test]
fn a_program_built_against_debians_header_runs_on_this_library() {
    let header = Path::new("/usr/include/librpma.h");
    assert!(header.is_file(), "Debian's librpma-dev header is missing (apt-get install librpma-dev)");
    run_ok("abi", "abi.c", false);
    // It needs the SONAME and found it here (LD_LIBRARY_PATH), not in Debian's librpma0: that
    // one cannot open 127.0.0.1, which the program uses on the mock.
    let exe = profile_dir().join("capi-tests/abi/abi");
    let out = Command::new("readelf").arg("-d").arg(&exe).output().expect("run readelf");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Shared library: [librpma.so.0]"),
        "{}",
        show("readelf", &out)
    );
}

/// Runs backend.c from `dir` with each `(RPMA_BACKEND, stdout, stderr line)`: an empty line
/// means no ERROR line at all.
fn check_backends(dir: &Path, exe: &Path, cases: &[(Option<&str>, &str, &str)]) {
    for (backend, stdout, line) in cases {
        let out = run(dir, exe, *backend);
        let what = format!("backend.c, RPMA_BACKEND={backend:?}");
        assert!(out.status.success(), "{}", show(&what, &out));
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), *stdout, "{}", show(&what, &out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        if line.is_empty() {
            assert!(!stderr.contains("RPMA_BACKEND"), "{}", show(&what, &out));
        } else {
            assert!(stderr.contains("*ERROR*") && stderr.contains(line), "{}", show(&what, &out));
        }
    }
}

#[test]
fn an_unknown_backend_fails_at_first_use_with_a_log_line() {
    let dir = work_dir("backend");
    let exe = compile(&dir, "backend.c", true);
    let p = rpma_core_provider();
    let failed = format!("{p} {p} untouched");
    check_backends(
        &dir,
        &exe,
        &[
            (Some("bogus"), &failed, "RPMA_BACKEND=bogus: unknown backend (known: mock, verbs)"),
            (Some("mock"), "0 0 set", ""),
        ],
    );
}

/// With the verbs backend built in (the default feature), `verbs` and unset choose it: on this
/// host no RDMA device owns 127.0.0.1 (none ever does: rxe cannot bind the loopback), so the
/// lookup fails as a provider error of librdmacm, with no complaint about the choice.
#[test]
fn verbs_is_built_in_and_the_default() {
    let dir = work_dir("backend-verbs");
    let exe = compile(&dir, "backend.c", true);
    let p = rpma_core_provider();
    let failed = format!("{p} {p} untouched");
    check_backends(&dir, &exe, &[(Some("verbs"), &failed, ""), (None, &failed, "")]);
    let out = run(&dir, &exe, None);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("not compiled"), "{}", show("backend.c", &out));
}

/// A library built without the verbs feature (`--no-default-features`, its own target
/// directory) refuses `verbs` and unset with a line saying so, and runs the mock.
#[test]
fn without_the_verbs_feature_verbs_and_unset_fail_with_a_log_line() {
    let profile = profile_dir();
    let target = profile.parent().expect("target directory").join("capi-mock-only");
    let so = common::build_library(&target.join(profile.file_name().expect("profile")), &["--no-default-features"]);
    let out = Command::new("ldd").arg(&so).output().expect("run ldd");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("libibverbs"), "{}", show("ldd", &out));
    let dir = common::work_dir_for("backend-mock-only", &so);
    let exe = compile(&dir, "backend.c", true);
    let p = rpma_core_provider();
    let failed = format!("{p} {p} untouched");
    let built = "the verbs backend is not compiled into this build: rebuild with the cargo feature `verbs` \
                 (`--features verbs`; needs libibverbs-dev, librdmacm-dev and libclang-dev); or use RPMA_BACKEND=mock";
    check_backends(
        &dir,
        &exe,
        &[
            (Some("verbs"), &failed, &format!("RPMA_BACKEND=verbs: {built}")),
            (None, &failed, &format!("RPMA_BACKEND is unset and its default is verbs: {built}")),
            (Some("bogus"), &failed, "RPMA_BACKEND=bogus: unknown backend (known: mock, verbs)"),
            (Some("mock"), "0 0 set", ""),
        ],
    );
}

fn rpma_core_provider() -> i32 {
    -100_002
}

/// The functions include/librpma.h declares.
fn declared() -> BTreeSet<String> {
    let h = std::fs::read_to_string(crate_dir().join("include/librpma.h")).expect("read the header");
    let mut names = BTreeSet::new();
    for line in h.lines() {
        let decl = line.strip_prefix("int ").or_else(|| line.strip_prefix("const char *"));
        if let Some(name) = decl.and_then(|d| d.split('(').next()).filter(|n| n.starts_with("rpma_")) {
            names.insert(name.to_owned());
        }
    }
    names
}

#[test]
fn every_export_is_an_rpma_function_under_librpma_1_0_and_declared() {
    let so = library();
    let out =
        Command::new("nm").args(["-D", "--with-symbol-versions", "--defined-only"]).arg(&so).output().expect("run nm");
    assert!(out.status.success(), "{}", show("nm", &out));
    let mut exported = BTreeSet::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let sym = line.split_whitespace().last().unwrap_or_default();
        if sym == "LIBRPMA_1.0" || sym == "LIBRPMA_1.0@@LIBRPMA_1.0" {
            continue; // the version node itself
        }
        let name = sym.strip_suffix("@@LIBRPMA_1.0").unwrap_or_else(|| panic!("{sym}: not under LIBRPMA_1.0"));
        assert!(name.starts_with("rpma_"), "{sym}: not an rpma_ function");
        exported.insert(name.to_owned());
    }
    assert_eq!(exported, declared(), "exported (left) and declared in include/librpma.h (right) differ");
    assert_eq!(exported.len(), 84, "librpma 1.3 has 84 functions");

    let out = Command::new("readelf").arg("-d").arg(&so).output().expect("run readelf");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Library soname: [librpma.so.0]"),
        "{}",
        show("readelf", &out)
    );
}

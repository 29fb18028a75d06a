//! C programs against librpma.so: compiled with gcc (against this crate's header, or Debian's
//! for the ABI check), linked with `-lrpma` against the cdylib of this crate and run on the
//! mock (`RPMA_BACKEND=mock`); plus the library's SONAME and symbol versions.
//!
//! Needs gcc and libibverbs' headers (`struct ibv_wc`); the ABI test needs Debian's
//! librpma-dev header (.ci/run installs all three).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// `target/<profile>`, where cargo put librpma.so.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/c_programs-<hash>
    exe.parent().and_then(Path::parent).expect("target/<profile>").to_path_buf()
}

/// librpma.so, built first: cargo does not build a cdylib for integration tests, so this
/// runs `cargo build -p rpma-capi` (same target directory and profile) once per test binary.
fn library() -> PathBuf {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let dir = profile_dir();
        let target = dir.parent().expect("target directory");
        let mut cargo = Command::new(env!("CARGO"));
        cargo
            .args(["build", "-q", "-p", "rpma-capi", "--manifest-path"])
            .arg(crate_dir().join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", target);
        if dir.file_name().is_some_and(|n| n == "release") {
            cargo.arg("--release");
        }
        let out = cargo.output().map_err(|e| format!("run cargo: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(show("cargo build -p rpma-capi", &out))
        }
    });
    if let Err(e) = built {
        panic!("{e}");
    }
    let so = profile_dir().join("librpma.so");
    assert!(so.is_file(), "{} is missing after `cargo build -p rpma-capi`", so.display());
    so
}

/// A directory of its own for `name`, with librpma.so and librpma.so.0 (the SONAME the
/// loader looks for) linking to the built library.
fn work_dir(name: &str) -> PathBuf {
    let dir = profile_dir().join("capi-tests").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the test directory");
    let so = library();
    for link in ["librpma.so", "librpma.so.0"] {
        std::os::unix::fs::symlink(&so, dir.join(link)).expect("link librpma.so");
    }
    dir
}

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn show(what: &str, out: &Output) -> String {
    format!(
        "{what}: {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Compiles `tests/c/<src>` into `<dir>/<stem>`; with `own_header`, against include/librpma.h
/// and with -Werror.
fn compile(dir: &Path, src: &str, own_header: bool) -> PathBuf {
    let exe = dir.join(src.trim_end_matches(".c"));
    let mut cc = Command::new("gcc");
    cc.args(["-std=gnu11", "-g", "-Wall", "-Wextra"]);
    if own_header {
        cc.arg("-Werror").arg("-I").arg(crate_dir().join("include"));
    }
    cc.arg(crate_dir().join("tests/c").join(src)).arg("-L").arg(dir).args(["-lrpma", "-lpthread", "-o"]).arg(&exe);
    let out = cc.output().expect("run gcc (is it installed?)");
    assert!(out.status.success(), "{}", show(&format!("gcc {src}"), &out));
    exe
}

fn run(dir: &Path, exe: &Path, backend: Option<&str>) -> Output {
    let mut cmd = Command::new(exe);
    cmd.env("LD_LIBRARY_PATH", dir).env_remove("RPMA_BACKEND");
    if let Some(b) = backend {
        cmd.env("RPMA_BACKEND", b);
    }
    cmd.output().expect("run the C program")
}

fn run_ok(name: &str, src: &str, own_header: bool) {
    let dir = work_dir(name);
    let exe = compile(&dir, src, own_header);
    let out = run(&dir, &exe, Some("mock"));
    assert!(out.status.success(), "{}", show(src, &out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(": OK"), "{}", show(src, &out));
}

#[test]
fn end_to_end_on_the_mock() {
    run_ok("e2e", "e2e.c", true);
}

#[test]
fn two_threads_post_on_one_connection_while_a_third_polls() {
    run_ok("threads", "threads.c", true);
}

#[test]
fn dereg_of_a_region_in_use_fails_and_keeps_the_handle() {
    run_ok("dereg", "dereg.c", true);
}

#[test]
fn bad_arguments_get_librpmas_codes() {
    run_ok("errors", "errors.c", true);
}

#[test]
fn shared_rqs_shared_channels_and_advice() {
    run_ok("more", "more.c", true);
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

#[test]
fn an_unusable_backend_fails_at_first_use_with_a_log_line() {
    let dir = work_dir("backend");
    let exe = compile(&dir, "backend.c", true);
    let provider = rpma_core_provider();
    for (backend, line) in [
        (Some("bogus"), "RPMA_BACKEND=bogus: unknown backend (known: verbs, mock)"),
        (Some("verbs"), "RPMA_BACKEND=verbs: the verbs backend is not built into this librpma yet"),
        (None, "RPMA_BACKEND is unset and its default, verbs, is not built into this librpma yet"),
    ] {
        let out = run(&dir, &exe, backend);
        assert!(out.status.success(), "{}", show("backend", &out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(stdout.trim(), format!("{provider} {provider} untouched"), "{}", show("backend", &out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("*ERROR*") && stderr.contains(line), "{}", show("backend", &out));
    }
    let out = run(&dir, &exe, Some("mock"));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0 0 set", "{}", show("backend", &out));
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

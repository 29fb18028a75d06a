//! What the C-program tests share: the library under test, a directory per program, gcc, and
//! running a program against this library (`LD_LIBRARY_PATH`) or the system's librpma.
#![allow(dead_code)] // each test binary uses part of it

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, PoisonError};

/// `target/<profile>`, where cargo put librpma.so (and where the programs are built).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test>-<hash>
    exe.parent().and_then(Path::parent).expect("target/<profile>").to_path_buf()
}

/// librpma.so: `RPMA_CAPI_LIB` if set (a library built beforehand, e.g. by
/// scripts/test-verbs.sh for the VM, where there is no cargo); else built first: cargo does
/// not build a cdylib for integration tests, so this runs `cargo build -p rpma-capi` (same
/// target directory, profile and default features) once per test binary.
pub fn library() -> PathBuf {
    if let Some(lib) = std::env::var_os("RPMA_CAPI_LIB").filter(|l| !l.is_empty()) {
        let lib = PathBuf::from(lib);
        assert!(lib.is_file(), "RPMA_CAPI_LIB={} is not a file", lib.display());
        return lib;
    }
    build_library(&profile_dir(), &[])
}

/// Builds librpma.so with `cargo build -p rpma-capi EXTRA` into the target directory above
/// `dir` (`<target>/<profile>`), in `dir`'s profile, once per test binary and `dir`.
pub fn build_library(dir: &Path, extra: &[&str]) -> PathBuf {
    /// The builds made so far: (profile directory, outcome).
    type Builds = Vec<(PathBuf, Result<(), String>)>;
    static BUILT: Mutex<Builds> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(PoisonError::into_inner);
    let r = match built.iter().find(|(d, _)| d == dir) {
        Some((_, r)) => r.clone(),
        None => {
            let target = dir.parent().expect("target directory");
            let mut cargo = Command::new(env!("CARGO"));
            cargo
                .args(["build", "-q", "-p", "rpma-capi", "--manifest-path"])
                .arg(crate_dir().join("Cargo.toml"))
                .args(extra)
                .env("CARGO_TARGET_DIR", target);
            if dir.file_name().is_some_and(|n| n == "release") {
                cargo.arg("--release");
            }
            let r = match cargo.output() {
                Err(e) => Err(format!("run cargo: {e}")),
                Ok(out) if out.status.success() => Ok(()),
                Ok(out) => Err(show("cargo build -p rpma-capi", &out)),
            };
            built.push((dir.to_path_buf(), r.clone()));
            r
        }
    };
    if let Err(e) = r {
        panic!("{e}");
    }
    let so = dir.join("librpma.so");
    assert!(so.is_file(), "{} is missing after `cargo build -p rpma-capi`", so.display());
    so
}

/// A directory of its own for `name`, with librpma.so and librpma.so.0 (the SONAME the
/// loader looks for) linking to `so`.
pub fn work_dir_for(name: &str, so: &Path) -> PathBuf {
    let dir = profile_dir().join("capi-tests").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the test directory");
    for link in ["librpma.so", "librpma.so.0"] {
        std::os::unix::fs::symlink(so, dir.join(link)).expect("link librpma.so");
    }
    dir
}

/// [`work_dir_for`] the library under test.
pub fn work_dir(name: &str) -> PathBuf {
    work_dir_for(name, &library())
}

pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn show(what: &str, out: &Output) -> String {
    format!(
        "{what}: {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Compiles `tests/c/<src>` into `<dir>/<stem>`, linked with `-lrpma` from `dir` and `libs`;
/// with `own_header`, against include/librpma.h and with -Werror (else against the system's
/// librpma.h).
pub fn compile_with(dir: &Path, src: &str, own_header: bool, libs: &[&str]) -> PathBuf {
    let exe = dir.join(src.trim_end_matches(".c"));
    let mut cc = Command::new("gcc");
    cc.args(["-std=gnu11", "-g", "-Wall", "-Wextra"]);
    if own_header {
        cc.arg("-Werror").arg("-I").arg(crate_dir().join("include"));
    }
    cc.arg(crate_dir().join("tests/c").join(src))
        .arg("-L")
        .arg(dir)
        .args(["-lrpma", "-lpthread"])
        .args(libs)
        .arg("-o")
        .arg(&exe);
    let out = cc.output().expect("run gcc (is it installed?)");
    assert!(out.status.success(), "{}", show(&format!("gcc {src}"), &out));
    exe
}

/// [`compile_with`] no other library.
pub fn compile(dir: &Path, src: &str, own_header: bool) -> PathBuf {
    compile_with(dir, src, own_header, &[])
}

/// A command for `exe`: on the librpma of `lib_dir` (`LD_LIBRARY_PATH`), or on the system's
/// (`None`); `RPMA_BACKEND` set to `backend` or unset; `RPMA_TEST_ADDR`, `RPMA_TEST_PORT` and
/// `RPMA_TEST_DEVICE` unset (the caller sets them for a device).
pub fn command(lib_dir: Option<&Path>, exe: &Path, backend: Option<&str>) -> Command {
    with_env(Command::new(exe), lib_dir, backend)
}

/// How long a C program on the mock may run before `timeout` (coreutils) ends it.
const MOCK_TIMEOUT_S: &str = "300";

/// [`command`] under `timeout`: a C program on the mock that hangs (a wait that never ends, a
/// lock never released) fails its test with status 124 after [`MOCK_TIMEOUT_S`] seconds
/// instead of holding the suite. Its exit status is the program's otherwise.
pub fn command_timed(lib_dir: Option<&Path>, exe: &Path, backend: Option<&str>) -> Command {
    let mut cmd = Command::new("timeout");
    cmd.args(["--kill-after=10", MOCK_TIMEOUT_S]).arg(exe);
    with_env(cmd, lib_dir, backend)
}

/// `cmd` with the environment of [`command`].
fn with_env(mut cmd: Command, lib_dir: Option<&Path>, backend: Option<&str>) -> Command {
    cmd.env_remove("RPMA_BACKEND")
        .env_remove("RPMA_TEST_ADDR")
        .env_remove("RPMA_TEST_PORT")
        .env_remove("RPMA_TEST_DEVICE");
    match lib_dir {
        Some(d) => cmd.env("LD_LIBRARY_PATH", d),
        None => cmd.env_remove("LD_LIBRARY_PATH"),
    };
    if let Some(b) = backend {
        cmd.env("RPMA_BACKEND", b);
    }
    cmd
}

/// Runs `exe` from `dir` on this library with `backend`.
pub fn run(dir: &Path, exe: &Path, backend: Option<&str>) -> Output {
    command_timed(Some(dir), exe, backend).output().expect("run the C program")
}

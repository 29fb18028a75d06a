//! Compiles a C peer of the interop tests against the system's librpma (in the VM: the guest's),
//! shared by `tests/interop.rs` and rpma-cli's `tests/verbs_scenarios.rs`.

use std::path::Path;
use std::process::Command;

/// `cc -std=gnu11 -O1 -Wall -Wextra [extra...] -o exe src -lrpma -libverbs -lrdmacm` (`CC`
/// overrides `cc`).
///
/// # Errors
/// A message naming the compiler and what is missing if it cannot run or fails.
pub fn build(src: &Path, exe: &Path, extra: &[&str]) -> Result<(), String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let out = Command::new(&cc)
        .args(["-std=gnu11", "-O1", "-Wall", "-Wextra"])
        .args(extra)
        .arg("-o")
        .arg(exe)
        .arg(src)
        .args(["-lrpma", "-libverbs", "-lrdmacm"])
        .output()
        .map_err(|e| format!("cannot run {cc} (a C compiler is needed for the librpma peers): {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cc} {} failed ({}; librpma-dev, libibverbs-dev and librdmacm-dev are needed):\n{}",
            src.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

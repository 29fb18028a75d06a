//! Detects whether the installed rdma-core provides native RDMA Flush (`ibv_wr_flush`, added in
//! rdma-core 45) and exposes it as `cfg(rpma_native_flush)`.

use std::path::PathBuf;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(rpma_native_flush)");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RPMA_VERBS_INCLUDE_DIR");
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(d) = std::env::var_os("RPMA_VERBS_INCLUDE_DIR") {
        dirs.push(d.into());
    }
    dirs.push("/usr/include".into());
    dirs.push("/usr/local/include".into());
    for d in dirs {
        let header = d.join("infiniband").join("verbs.h");
        if let Ok(text) = std::fs::read_to_string(&header) {
            println!("cargo:rerun-if-changed={}", header.display());
            if text.contains("ibv_wr_flush") {
                println!("cargo:rustc-cfg=rpma_native_flush");
            }
            return;
        }
    }
}

//! Links librpma.so with librpma's SONAME and symbol version node.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=librpma.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librpma.so.0");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/librpma.map");
}

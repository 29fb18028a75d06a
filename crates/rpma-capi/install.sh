#!/usr/bin/env bash
# Installs rpma-rs's librpma (release build) under a prefix:
#   <prefix>/lib/librpma.so.0 (+ librpma.so -> librpma.so.0),
#   <prefix>/include/librpma.h, <prefix>/lib/pkgconfig/librpma.pc
# Usage: crates/rpma-capi/install.sh [prefix]   (default /usr/local; run ldconfig after a
# system-wide install). CARGO_TARGET_DIR is honoured.
set -euo pipefail
prefix=${1:-/usr/local}
here=$(cd "$(dirname "$0")" && pwd)
cargo build --release -p rpma-capi --manifest-path "$here/Cargo.toml"
target=${CARGO_TARGET_DIR:-$(cargo metadata --format-version 1 --no-deps --manifest-path "$here/Cargo.toml" |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')}
install -d "$prefix/lib/pkgconfig" "$prefix/include"
install -m 0755 "$target/release/librpma.so" "$prefix/lib/librpma.so.0"
ln -sf librpma.so.0 "$prefix/lib/librpma.so"
install -m 0644 "$here/include/librpma.h" "$prefix/include/librpma.h"
sed "s|@PREFIX@|$prefix|" "$here/librpma.pc.in" >"$prefix/lib/pkgconfig/librpma.pc"
echo "installed librpma (rpma-rs) under $prefix"

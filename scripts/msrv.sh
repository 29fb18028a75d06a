#!/usr/bin/env bash
# The minimum supported Rust version holds: with the Rust that Cargo.toml declares
# (`rust-version`, installed with rustup if missing), the whole workspace and all its targets
# (tests, examples, benches) check with every feature (verbs needs libibverbs-dev, librdmacm-dev
# and libclang-dev), against Cargo.lock as committed (--locked: it must resolve on that Rust),
# and the library tests of every crate but rpma-capi (an FFI library without unit tests) and the
# conformance suite on the mock pass. fuzz/ (a workspace of its own, nightly) is not checked.
#
# Usage: scripts/msrv.sh   (from anywhere)
# Environment: MSRV_TARGET_DIR [target/msrv], its own target directory, so that the older
# compiler does not invalidate the main build.
set -euo pipefail
cd "$(dirname "$0")/.."

msrv=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' Cargo.toml)
if [ -z "$msrv" ]; then
    echo "error: no rust-version = \"...\" line in Cargo.toml" >&2
    exit 1
fi
target_dir=${MSRV_TARGET_DIR:-target/msrv}

if ! rustup run "$msrv" cargo --version >/dev/null 2>&1; then
    echo "Rust $msrv is not installed: rustup toolchain install $msrv --profile minimal"
    if ! env -u RUST_BACKTRACE rustup toolchain install "$msrv" --profile minimal || ! rustup run "$msrv" cargo --version >/dev/null 2>&1; then
        echo "error: the minimum supported Rust $msrv (Cargo.toml's rust-version) could not be installed with rustup: the MSRV is not checked" >&2
        exit 1
    fi
fi
rustup run "$msrv" rustc --version

cargo_msrv() { cargo "+$msrv" "$@" --locked --target-dir "$target_dir"; }

cargo_msrv check --workspace --all-targets --all-features
cargo_msrv test --workspace --exclude rpma-capi --all-features --lib
cargo_msrv test --all-features --test mock

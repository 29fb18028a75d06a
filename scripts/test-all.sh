#!/usr/bin/env bash
# Runs every test of rpma-rs: formatting, lints, the conformance suite on the mock, the per-rule
# and property tests, the examples and doc tests, and the dependency guard of the default build.
# Usage: scripts/test-all.sh   (from anywhere; needs only the Rust toolchain today)
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s ==\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, all features)"
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "dependency guard: the default build pulls in no -sys crate"
if cargo tree -e normal -p rpma --prefix none | grep -E -- '-sys( |$)'; then
    echo "error: the default (mock) build depends on a -sys crate" >&2
    exit 1
fi

step "the facade builds without any backend"
cargo check -q -p rpma --no-default-features

step "tests (conformance suite on the mock, unit, property, doc tests)"
cargo test --workspace --all-features

step "examples run"
cargo run -q --example write_flush_send

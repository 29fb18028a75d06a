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
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --all-features 2>&1 | tee "$log"

step "examples run"
cargo run -q --example write_flush_send

# One closing line for the whole run: the sum over every test binary above.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "\ntests: %d passed, %d failed\n", p, f }' "$log"

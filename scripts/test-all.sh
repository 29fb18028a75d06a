#!/usr/bin/env bash
# Runs every test of rpma-rs: formatting, lints, the conformance suite on the mock (immediate and
# deferred modes), the per-rule and property tests, the examples and doc tests, the dependency
# guard of the default build, and the races on raw memory under ThreadSanitizer and Miri (nightly).
# On Soft-RoCE in a QEMU VM (scripts/test-verbs.sh): the verbs backend's conformance suite, the
# wire interop with the C librpma, the process-death tests and rpma-capi's C programs on verbs;
# on a cluster of four such guests (scripts/test-cluster.sh): rpma across links that fail.
# Usage: scripts/test-all.sh   (from anywhere; the system packages it needs are installed when run
# as root, else named: see scripts/test-verbs.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step's header says how long the previous one took, and the run's time so far (a CI run
# must stay under 45 minutes on two cores: the slow steps are the ones to look at).
last=$SECONDS
step() {
    printf '\n== [%dm%02ds, the last step %d s] %s ==\n' $((SECONDS / 60)) $((SECONDS % 60)) $((SECONDS - last)) "$*"
    last=$SECONDS
}

step "system packages (verbs backend build, C librpma, the Soft-RoCE VM)"
scripts/test-verbs.sh --install-deps

step "cargo fmt --check"
cargo fmt --all -- --check

step "coverage docs: every test cited in docs/errors.md and docs/upstream-tests.md exists"
scripts/check-coverage-docs.sh

step "cargo clippy (all targets, all features; every unsafe block documented)"
cargo clippy --workspace --all-targets --all-features -- -D warnings -D clippy::undocumented_unsafe_blocks

step "cargo doc (all features, no warning)"
RUSTDOCFLAGS="-D warnings" cargo doc -q --workspace --all-features --no-deps

step "the minimum supported Rust version (Cargo.toml's rust-version): the workspace checks, its library tests and the mock's conformance suite pass (scripts/msrv.sh)"
scripts/msrv.sh

step "every SAFETY comment names its rule of docs/memory.md"
if grep -rn --include=*.rs -E '^\s*// SAFETY:' crates src tests | grep -vE '// SAFETY: \[[MVC][0-9]+(, ?[MVC][0-9]+)*\]'; then
    echo "error: a SAFETY comment above does not start with its rule, e.g. // SAFETY: [M2] ..." >&2
    exit 1
fi

step "dependency guard: the default build pulls in no -sys crate"
if cargo tree -e normal -p rpma --prefix none | grep -E -- '-sys( |$)'; then
    echo "error: the default (mock) build depends on a -sys crate" >&2
    exit 1
fi

step "every crate packages for crates.io (metadata, a version on each path dependency; cargo publish --workspace publishes them in dependency order)"
cargo package -q --workspace --no-verify --allow-dirty

step "the facade builds without any backend"
cargo check -q -p rpma --no-default-features

step "tests (conformance suite on the mock, unit, property, doc tests)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --all-features 2>&1 | tee "$log"

step "ThreadSanitizer: threads racing through one VolatileSlice (scripts/tsan.sh, nightly)"
scripts/tsan.sh

step "Miri: rpma-mem's atomic copies and views, rpma-verbs' rings, byte polls racing word writes (scripts/miri.sh, nightly)"
scripts/miri.sh

step "the simulator of rpma-log: seeds under a nemesis for a minute, then every rule switched off must be caught (scripts/sim.sh)"
scripts/sim.sh 60 2>&1 | tee -a "$log"

step "the conformance suite on the mock in its deferred mode (operations complete after post)"
RPMA_MOCK_MODE=deferred cargo test --test mock 2>&1 | tee -a "$log"

step "the conformance suite through the mock's cross-process sockets (every connection over its wire)"
RPMA_TEST_MOCK_WIRE=1 cargo test --test mock 2>&1 | tee -a "$log"

step "tests on Soft-RoCE in a VM (verbs conformance suite, librpma interop, process death)"
# (one power cut of each kind per profile here, to keep a CI run under 45 minutes; test-verbs.sh
# alone makes two on debian13; more with TEST_VERBS_POWER_CUTS)
TEST_VERBS_POWER_CUTS=1 scripts/test-verbs.sh 2>&1 | tee -a "$log"

step "a cluster of four guests: scenarios and C librpma across nodes, loss, a pulled link and a partition, rpma-log under a nemesis of 3 rounds (scripts/test-cluster.sh)"
# (the nemesis's seed is fixed here: a cut of two nodes, a replica that forgets, a failover;
# other seeds and more rounds: CLUSTER_SEED, --long, docs/reliability.md)
CLUSTER_PROFILES=debian12 CLUSTER_ROUNDS=3 CLUSTER_SEED=11 CLUSTER_BUILD=debug timeout 1800 scripts/test-cluster.sh 2>&1 | tee -a "$log"

step "the side-by-side benchmark's C program builds against C librpma, and its script parses"
cbench=$(mktemp -d)
cc -O2 -Wall -Wextra -Werror -o "$cbench/librpma_bench" benches/c/librpma_bench.c -lrpma -libverbs -lrdmacm
"$cbench/librpma_bench" 2>/dev/null && { echo "error: librpma_bench without arguments must fail" >&2; exit 1; }
rm -rf "$cbench"
bash -n scripts/bench-softroce.sh && bash -n scripts/bench-async-softroce.sh

step "the C ABI's instruction count against the Rust API (scripts/bench-capi.sh, mock, callgrind)"
scripts/bench-capi.sh 2000

step "examples run (on the mock; scripts/test-verbs.sh runs the async ones on rxe)"
cargo run -q -p rpma-examples --example write_flush_send
cargo run -q -p rpma-examples --features tokio --example async_echo
cargo run -q -p rpma-examples --features tokio --example async_replicated_write

step "power cuts on the mock: a log at every crash point (docs/persistence.md); the buggy variants must be caught"
cargo run -q -p rpma-examples --example crash_consistency
for bug in visibility no-data-flush; do
    rc=0
    out=$(cargo run -q -p rpma-examples --example crash_consistency -- --buggy "$bug") || rc=$?
    printf '%s\n' "$out" | tail -2
    if [ "$rc" != 1 ]; then
        echo "error: crash_consistency --buggy $bug exited $rc: it must find violations and exit 1" >&2
        exit 1
    fi
done
cargo run -q -p rpma-cli -- demo --power-cut
cargo run -q -p rpma-log --example replicated_log

step "the README's first command: rpma demo; then every scenario as processes (rpma demo --two-process)"
cargo run -q -p rpma-cli -- demo >/dev/null
cargo run -q -p rpma-cli -- demo --two-process >/dev/null
RPMA_MOCK_MODE=deferred cargo run -q -p rpma-cli -- demo --two-process >/dev/null

# One closing line for the whole run: the sum over every test binary above.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "\ntests: %d passed, %d failed\n", p, f }' "$log"
step "all passed"

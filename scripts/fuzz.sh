#!/usr/bin/env bash
# Runs every fuzz target of fuzz/ (cargo-fuzz + libFuzzer, AddressSanitizer) for a bounded time,
# growing the corpus kept in the repository (fuzz/corpus/<target>, minimized after each run so it
# stays small), and prints how many executions ran and how many crashes were found per target.
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#   SECONDS_PER_TARGET  default: $FUZZ_SECS or 60
#   TARGET              default: every target (mr_descriptor, peer_cfg_descriptor, private_data,
#                       op_args)
# Needs cargo-fuzz (`cargo install cargo-fuzz`). cargo-fuzz passes nightly-only flags to rustc;
# on a stable toolchain this script sets RUSTC_BOOTSTRAP=1 for its builds only.
# Exit status: 0 if no target crashed; 1 otherwise (reproducers in fuzz/artifacts/<target>/).
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-${FUZZ_SECS:-60}}
[ $# -gt 0 ] && shift
if ! command -v cargo-fuzz >/dev/null; then
    echo "error: cargo-fuzz is not installed (cargo install cargo-fuzz)" >&2
    exit 2
fi
export RUSTC_BOOTSTRAP=1

if [ $# -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list --fuzz-dir fuzz)
fi

summary=()
failed=0
for t in "${targets[@]}"; do
    printf '\n== fuzz %s for %ss ==\n' "$t" "$secs"
    corpus="fuzz/corpus/$t"
    artifacts="fuzz/artifacts/$t"
    mkdir -p "$corpus" "$artifacts"
    before=$(find "$artifacts" -type f | wc -l)
    log=$(mktemp)
    status=0
    cargo fuzz run --fuzz-dir fuzz "$t" "$corpus" -- \
        -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1 || status=$?
    grep -E '^(#[0-9]+ +(INITED|DONE)|Done [0-9]+ runs|==[0-9]+==ERROR|SUMMARY|thread .* panicked)' "$log" || true
    runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -1)
    crashes=$(( $(find "$artifacts" -type f | wc -l) - before ))
    if [ "$status" -ne 0 ] || [ "$crashes" -gt 0 ]; then
        failed=1
        tail -n 40 "$log"
    fi
    rm -f "$log"
    # Keep the committed corpus small: only inputs that add coverage.
    cargo fuzz cmin --fuzz-dir fuzz "$t" "$corpus" >/dev/null 2>&1 || echo "warning: corpus minimization of $t failed" >&2
    summary+=("$(printf '%-22s %10s executions  %s crash(es)  exit %s  corpus %s files' \
        "$t" "${runs:-?}" "$crashes" "$status" "$(find "$corpus" -type f | wc -l)")")
done

printf '\n== fuzz summary (%ss per target) ==\n' "$secs"
printf '%s\n' "${summary[@]}"
exit "$failed"

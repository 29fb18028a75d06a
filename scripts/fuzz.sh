#!/usr/bin/env bash
# Runs every fuzz target of fuzz/ (cargo-fuzz + libFuzzer, AddressSanitizer) for a bounded time,
# seeded with the corpus kept in the repository (fuzz/corpus/<target>), and prints how many
# executions ran and how many crashes were found per target.
#
# A run leaves the tracked files as they were: libFuzzer writes the inputs it finds into
# fuzz/work/found/<target>, and the committed corpus plus those is minimized into
# fuzz/work/merged/<target> (fuzz/work/ is ignored by git). With --update-corpus the minimized set
# replaces fuzz/corpus/<target> (then commit it).
#
# Usage: scripts/fuzz.sh [--update-corpus] [SECONDS_PER_TARGET] [TARGET...]
#   SECONDS_PER_TARGET  default: $FUZZ_SECS or 60
#   TARGET              default: every target (mr_descriptor, peer_cfg_descriptor, private_data,
#                       op_args)
# Needs cargo-fuzz (`cargo install cargo-fuzz`). cargo-fuzz passes nightly-only flags to rustc;
# on a stable toolchain this script sets RUSTC_BOOTSTRAP=1 for its builds only.
# Exit status: 0 if no target crashed; 1 otherwise (reproducers in fuzz/artifacts/<target>/).
set -euo pipefail
cd "$(dirname "$0")/.."

update=0
if [ "${1:-}" = --update-corpus ]; then
    update=1
    shift
fi
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
    corpus="fuzz/corpus/$t"       # committed: only read, unless --update-corpus
    found="fuzz/work/found/$t"    # what libFuzzer finds (it writes into its first corpus only)
    merged="fuzz/work/merged/$t"  # the committed corpus and the finds, minimized
    artifacts="fuzz/artifacts/$t"
    mkdir -p "$corpus" "$found" "$artifacts"
    before=$(find "$artifacts" -type f | wc -l)
    log=$(mktemp)
    status=0
    cargo fuzz run --fuzz-dir fuzz "$t" "$found" "$corpus" -- \
        -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1 || status=$?
    grep -E '^(#[0-9]+ +(INITED|DONE)|Done [0-9]+ runs|==[0-9]+==ERROR|SUMMARY|thread .* panicked)' "$log" || true
    runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -1)
    crashes=$(( $(find "$artifacts" -type f | wc -l) - before ))
    if [ "$status" -ne 0 ] || [ "$crashes" -gt 0 ]; then
        failed=1
        tail -n 40 "$log"
    fi
    rm -f "$log"
    # Only inputs that add coverage, into a fresh directory (libFuzzer's merge).
    rm -rf "$merged"
    mkdir -p "$merged"
    cargo fuzz run --fuzz-dir fuzz "$t" "$merged" "$corpus" "$found" -- -merge=1 >/dev/null 2>&1 \
        || echo "warning: corpus minimization of $t failed" >&2
    if [ "$update" -eq 1 ] && [ -n "$(ls -A "$merged")" ]; then
        mkdir -p "$corpus"
        find "$corpus" -type f -delete
        cp "$merged"/* "$corpus"/
    fi
    summary+=("$(printf '%-22s %10s executions  %s crash(es)  exit %s  corpus %s files, minimized %s' \
        "$t" "${runs:-?}" "$crashes" "$status" "$(find "$corpus" -type f 2>/dev/null | wc -l)" \
        "$(find "$merged" -type f | wc -l)")")
done

printf '\n== fuzz summary (%ss per target) ==\n' "$secs"
printf '%s\n' "${summary[@]}"
if [ "$update" -eq 0 ]; then
    echo "(fuzz/corpus/ untouched; the minimized corpora are in fuzz/work/merged/: keep them with --update-corpus)"
fi
exit "$failed"

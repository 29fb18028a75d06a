#!/usr/bin/env bash
# Miri over the code of rpma-rs that reaches raw memory without a device, under Stacked Borrows
# and under Tree Borrows:
# - rpma-mem: the atomic copies and VolatileSlice (rule M2 of docs/memory.md), their unit tests
#   and the integration tests volatile, volatile_race, memory and data_path;
# - rpma-verbs: the slot rings and their pins (rules V6, V9), whose tests call no libibverbs;
# - byte accesses racing word-sized accesses to the same bytes, each run with many seeds of
#   Miri's scheduler (-Zmiri-many-seeds): crates/rpma-mem/tests/mixed_size_race.rs (a load_u8
#   poll and reads with partial-word edges against write/copy_to/store_u64 of whole words, byte
#   stores against word reads) and crates/rpma-mock/tests/poll_while_a_peer_writes.rs (the owner
#   of a WRITE_DST region polls volatile().load_u8 while the mock lands a peer's RDMA writes).
# Miri reports data races, racing atomic accesses of different sizes ("mixed-size"), accesses
# outside an allocation, aliasing violations and leaks. Fails on the first report or failed test.
#
# Usage: scripts/miri.sh   (needs the nightly toolchain; its miri and rust-src components are
# added if missing, and if that fails the script prints one `error:` line and exits 1)
# Environment: MIRI_SEEDS [16], seeds of rpma-mem's race test per borrow model;
# MIRI_MOCK_SEEDS [4], seeds of the mock's; MIRIFLAGS, appended to the flags below.
#
# Not run under Miri (it runs no foreign code and, isolated, reaches no file): file and devdax
# mappings, huge pages, /proc, proptest (its failure files), allocations larger than the machine,
# rpma-verbs' other tests (libibverbs); those tests are #[cfg_attr(miri, ignore)], and buffers
# and loops are shrunk under cfg(miri). On 2 cores the stage took 1.5 minutes with target/miri
# built and 2.5 minutes building it (Miri's sysroot already built), and up to 5 minutes while
# other builds loaded the machine; the seeds are chosen to stay under that.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo +nightly miri --version >/dev/null 2>&1; then
    echo "miri: not installed for the nightly toolchain; adding it (rustup component add --toolchain nightly miri rust-src)" >&2
    if ! rustup component add --toolchain nightly miri rust-src >&2 || ! cargo +nightly miri --version >/dev/null 2>&1; then
        echo "error: Miri is not available (rustup component add --toolchain nightly miri rust-src failed): the Miri stage cannot run" >&2
        exit 1
    fi
fi

seeds=${MIRI_SEEDS:-16}
mock_seeds=${MIRI_MOCK_SEEDS:-4}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$SECONDS

# run LABEL FLAGS CARGO-MIRI-TEST-ARGS...: one `cargo miri test`, its output kept in $log; a
# line of counts when it passes, Miri's report (or the failed test) when it does not.
run() {
    local label=$1 flags=$2 t0=$SECONDS
    shift 2
    if ! MIRIFLAGS="$flags ${MIRIFLAGS:-}" cargo +nightly miri test -q "$@" >"$log" 2>&1; then
        echo "miri: $label: FAILED" >&2
        if grep -q '^error: Undefined Behavior\|^error: memory leaked\|^error: unsupported' "$log"; then
            grep -A 40 -m 1 '^error: Undefined Behavior\|^error: memory leaked\|^error: unsupported' "$log" >&2
        else
            tail -n 40 "$log" >&2
        fi
        exit 1
    fi
    # The seeds of -Zmiri-many-seeds run in parallel and their lines interleave: those runs are
    # counted by Miri's "Trying seed: N" (the exit status says that every seed passed).
    awk -v label="$label" -v s=$((SECONDS - t0)) '{ seeds += gsub(/Trying seed: [0-9]+/, "&") }
        /^test result: ok\. [0-9]+ passed; [0-9]+ failed; [0-9]+ ignored/ { r++; p += $4; i += $8 }
        END { what = seeds ? sprintf("%d seeds", seeds) : sprintf("%d runs, %d tests passed, %d ignored", r, p, i)
              printf "miri: %-58s ok: %s (%d s)\n", label, what, s }' "$log"
}

for model in stacked tree; do
    flags=""
    [ "$model" = tree ] && flags="-Zmiri-tree-borrows"
    run "$model: rpma-mem atomic copies, volatile views (unit)" "$flags" \
        -p rpma-mem --lib -- atomic_copy:: volatile::
    run "$model: rpma-mem volatile, volatile_race, memory, data_path" "$flags" \
        -p rpma-mem --test volatile --test volatile_race --test memory --test data_path
    run "$model: rpma-verbs rings and pins" "$flags" -p rpma-verbs --lib -- ring:: pin::
    run "$model: rpma-mem mixed_size_race, seeds 0..$seeds" "$flags -Zmiri-many-seeds=0..$seeds" \
        -p rpma-mem --test mixed_size_race
    run "$model: rpma-mock poll_while_a_peer_writes, seeds 0..$mock_seeds" "$flags -Zmiri-many-seeds=0..$mock_seeds" \
        -p rpma-mock --test poll_while_a_peer_writes
done
echo "miri: clean under Stacked and Tree Borrows ($((SECONDS - start)) s)"

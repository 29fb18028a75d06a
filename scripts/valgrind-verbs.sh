#!/usr/bin/env bash
# Valgrind memcheck of the verbs transport on a real RDMA device: Soft-RoCE (rxe0) inside the
# QEMU VM of scripts/softroce/run.sh, one boot. Runs under memcheck
#   1. tests/verbs.rs, the conformance suite + verbs-only cases (all 291 unless FILTER is given),
#      one case at a time;
#   2. tests/verbs_faults.rs, the fault sweep (every provider call of a full client/server flow
#      failed in turn, with EIO then ENOMEM: the error paths of rpma-verbs).
# Invalid reads/writes, uses of uninitialised values, and definite or indirect leaks fail the
# run (exit 99 from valgrind). Suppressions: scripts/valgrind-verbs.supp (each entry justified
# there; today one, for a kernel-written libibverbs response).
#
# Usage: scripts/valgrind-verbs.sh [FILTER]
#   FILTER  a name filter for tests/verbs.rs (e.g. verbs_only, conn__); default: every case
# Knobs: RPMA_VALGRIND_FAULTS=0 skips the fault sweep; RPMA_STRESS_OPS (default 100 per thread
# here) sizes the stress case; SOFTROCE_* as scripts/softroce/README.md
# (here SOFTROCE_MEM defaults to 2G and SOFTROCE_TIMEOUT to 3600 s).
# Too slow for CI under TCG (valgrind on an emulated CPU): see docs/reliability.md for times.
set -euo pipefail
cd "$(dirname "$0")/.."

# The test executable of one `cargo test --no-run` build.
executable() {
    cargo test -q -p rpma --no-run --message-format=json "$@" |
        python3 -c '
import json, sys
for line in sys.stdin:
    try:
        j = json.loads(line)
    except ValueError:
        continue
    if j.get("reason") == "compiler-artifact" and j.get("executable") and j["target"]["kind"] == ["test"]:
        print(j["executable"])'
}
verbs=$(executable --features verbs --test verbs)
faults=$(executable --features verbs-fault-injection --test verbs_faults)
if [ -z "$verbs" ] || [ -z "$faults" ]; then
    echo "valgrind-verbs: cargo built no test binary" >&2
    exit 1
fi

supp=()
[ ! -f scripts/valgrind-verbs.supp ] || supp=(--suppressions=scripts/valgrind-verbs.supp)

# The VM shares the work tree read-write; a target dir outside it must be shared too.
target_dir=$(cargo metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)
top=$(git rev-parse --show-toplevel 2>/dev/null || pwd -P)
case $(cd "$target_dir" && pwd -P)/ in
    "$top"/*) ;;
    *) export SOFTROCE_RW=${SOFTROCE_RW:+$SOFTROCE_RW:}$target_dir ;;
esac
# The stress case at a size memcheck gets through in minutes (CI size: 3200 per thread).
export RPMA_STRESS_OPS=${RPMA_STRESS_OPS:-100}
export SOFTROCE_MEM=${SOFTROCE_MEM:-2G}
export SOFTROCE_TIMEOUT=${SOFTROCE_TIMEOUT:-3600}

# shellcheck disable=SC2016 # expanded in the guest
exec scripts/softroce/run.sh bash -c '
    verbs=$1 faults=$2 filter=$3 run_faults=$4
    shift 4
    vg=(valgrind -q --tool=memcheck --error-exitcode=99 --leak-check=full
        --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect "$@")
    start=$SECONDS
    printf "\n== memcheck: tests/verbs.rs %s ==\n" "${filter:-(all cases)}"
    "${vg[@]}" "$verbs" --test-threads=1 ${filter:+"$filter"} < /dev/null
    printf "valgrind-verbs: tests/verbs.rs clean under memcheck in %ss\n" $((SECONDS - start))
    if [ "$run_faults" != 0 ]; then
        start=$SECONDS
        printf "\n== memcheck: tests/verbs_faults.rs ==\n"
        "${vg[@]}" "$faults" < /dev/null
        printf "valgrind-verbs: tests/verbs_faults.rs clean under memcheck in %ss\n" $((SECONDS - start))
    fi
' valgrind-verbs "$verbs" "$faults" "${1:-}" "${RPMA_VALGRIND_FAULTS:-1}" "${supp[@]}"

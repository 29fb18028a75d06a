#!/usr/bin/env bash
# Memory and thread checkers over the mock's reliability tests: the multi-threaded stress, the
# untrusted-peer cases, the fault sweeps (every provider call of two full flows failed in turn)
# and the connection state-machine model.
#
# Usage: scripts/valgrind.sh [memcheck|tsan|capi|helgrind|drd]...   (default: memcheck tsan capi)
#   memcheck  valgrind memcheck: invalid reads/writes, uninitialised values, definite and
#             indirect leaks (exit 99 on any error).
#   tsan      ThreadSanitizer (the data-race checker that understands Rust's locks): rebuilds
#             std with -Zsanitizer=thread (needs the rust-src component; on a stable toolchain
#             RUSTC_BOOTSTRAP=1 is set for this build only). Built in $TSAN_TARGET_DIR
#             (default: <target dir>/tsan); the first build takes minutes (std is rebuilt).
#   capi      memcheck over the C programs of crates/rpma-capi (librpma.so on the mock: end to
#             end, bad arguments, shared RQs and channels, Debian's header, and fault.c's error
#             paths under RPMA_MOCK_FAULT), as built by `cargo test -p rpma-capi`.
#   verbs     memcheck over the verbs backend's untrusted-peer and stress cases (and, with
#             VERBS_FILTER=, any other) in the Soft-RoCE VM (scripts/softroce/run.sh; needs
#             libibverbs-dev, librdmacm-dev, libclang-dev, qemu-system-x86).
#   helgrind, drd
#             valgrind's thread checkers. They do not see Rust's std::sync locks (futex-based
#             since Rust 1.62, not pthread), so every access under a Mutex/RwLock is reported
#             as a race: thousands of false positives on any threaded Rust program. Kept for
#             reference (and for C code); tsan is the thread checker of record.
# Sizes under the checkers (environment, defaults in brackets): RPMA_STRESS_OPS [400 per thread],
# PROPTEST_CASES [32]. Suppressions: scripts/valgrind.supp (each entry justified there).
set -euo pipefail
cd "$(dirname "$0")/.."

modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(memcheck tsan capi)
export RPMA_STRESS_OPS=${RPMA_STRESS_OPS:-400}
export PROPTEST_CASES=${PROPTEST_CASES:-32}
tests=(--test mock --test mock_backend --test model)

# Prints "name path" for each test binary built by `cargo test --no-run "$@"`.
binaries() {
    cargo test -q -p rpma "${tests[@]}" --no-run --message-format=json "$@" |
        python3 -c '
import json, sys
for line in sys.stdin:
    try:
        j = json.loads(line)
    except ValueError:
        continue
    if j.get("reason") == "compiler-artifact" and j.get("executable") and j["target"]["kind"] == ["test"]:
        print(j["target"]["name"], j["executable"])'
}

# Runs every checked test under the command prefix "$@"; the binaries come from $bins.
run_all() {
    local mock backend model
    mock=$(awk '$1 == "mock" { print $2 }' <<<"$bins")
    backend=$(awk '$1 == "mock_backend" { print $2 }' <<<"$bins")
    model=$(awk '$1 == "model" { print $2 }' <<<"$bins")
    "$@" "$mock" stress__ --test-threads=1
    "$@" "$mock" untrusted__ --test-threads=2
    "$@" "$backend" fault_sweep__ --test-threads=2
    "$@" "$model" --test-threads=1
}

summary=()
for mode in "${modes[@]}"; do
    printf '\n== %s ==\n' "$mode"
    start=$SECONDS
    case "$mode" in
        memcheck)
            bins=$(binaries)
            run_all valgrind -q --tool=memcheck --error-exitcode=99 --leak-check=full \
                --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
                --suppressions=scripts/valgrind.supp
            ;;
        capi)
            cargo test -q -p rpma-capi
            dir="${CARGO_TARGET_DIR:-target}/debug/capi-tests"
            for prog in e2e errors more dereg threads abi; do
                RPMA_BACKEND=mock LD_LIBRARY_PATH="$dir/$prog" valgrind -q --tool=memcheck --error-exitcode=99 \
                    --leak-check=full --errors-for-leak-kinds=definite,indirect \
                    --show-leak-kinds=definite,indirect --suppressions=scripts/valgrind.supp "$dir/$prog/$prog"
            done
            # The error paths of an injected fault too (tests/c/fault.c; status 3: a setup step
            # failed and the program freed what it made).
            for n in 1 2 3 4 5; do
                rc=0
                RPMA_BACKEND=mock RPMA_MOCK_FAULT="ibv_req_notify_cq:$n" LD_LIBRARY_PATH="$dir/fault" valgrind -q \
                    --tool=memcheck --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect \
                    --show-leak-kinds=definite,indirect --suppressions=scripts/valgrind.supp "$dir/fault/fault" || rc=$?
                if [ "$rc" != 0 ] && [ "$rc" != 3 ]; then
                    echo "valgrind capi: fault.c with RPMA_MOCK_FAULT=ibv_req_notify_cq:$n exited $rc" >&2
                    exit 1
                fi
            done
            ;;
        helgrind | drd)
            bins=$(binaries)
            run_all valgrind -q --tool="$mode" --error-exitcode=99 --suppressions=scripts/valgrind.supp
            ;;
        verbs)
            # The guest sees the repository, not the target directory: copy the binary in.
            bin=$(cargo test -q -p rpma --features verbs --test verbs --no-run --message-format=json |
                sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
            mkdir -p target/valgrind
            cp "$bin" target/valgrind/verbs-test
            for filter in ${VERBS_FILTER:-untrusted__ stress__}; do
                RPMA_STRESS_OPS=${VERBS_STRESS_OPS:-100} RPMA_STRESS_CONNS=4 SOFTROCE_TIMEOUT=${SOFTROCE_TIMEOUT:-900} \
                    scripts/softroce/run.sh /usr/bin/valgrind -q --tool=memcheck --error-exitcode=99 \
                    --leak-check=full --errors-for-leak-kinds=definite,indirect \
                    --show-leak-kinds=definite,indirect --suppressions="$PWD/scripts/valgrind.supp" \
                    "$PWD/target/valgrind/verbs-test" "$filter" --test-threads=1
            done
            ;;
        tsan)
            bins=$(CARGO_TARGET_DIR="${TSAN_TARGET_DIR:-${CARGO_TARGET_DIR:-target}/tsan}" RUSTC_BOOTSTRAP=1 \
                RUSTFLAGS="-Zsanitizer=thread" binaries -Zbuild-std --target "$(rustc -vV | sed -n 's/^host: //p')")
            TSAN_OPTIONS="halt_on_error=1 exitcode=66" run_all env
            ;;
        *)
            echo "unknown mode: $mode" >&2
            exit 2
            ;;
    esac
    summary+=("$(printf '%-9s clean in %ss' "$mode" $((SECONDS - start)))")
done
printf '\n== summary ==\n'
printf '%s\n' "${summary[@]}"

#!/usr/bin/env bash
# Runs the tests of the verbs backend on a real RDMA device: Soft-RoCE (rxe0) inside a QEMU VM
# (scripts/softroce/run.sh), all test binaries in one boot. These are the conformance suite on
# verbs, the wire interop with the C librpma, the process-death tests, rpma-verbs' own tests
# and every `rpma` CLI scenario (crates/rpma-cli/tests/verbs_scenarios.rs). Each binary prints
# libtest's `test result:` line, which scripts/test-all.sh sums up.
#
# Usage: scripts/test-verbs.sh [--install-deps] [TEST ARGS...]
#   --install-deps  only install the missing host packages (as root), then exit
#   TEST ARGS       passed to every test binary (e.g. a name filter, --nocapture)
#
# Missing host packages are installed with apt-get when running as root; otherwise the script
# names them and stops. The VM's own packages (QEMU, the rxe provider, ...) are handled by
# scripts/softroce/run.sh. Knobs: SOFTROCE_* (see scripts/softroce/README.md);
# SOFTROCE_TIMEOUT defaults to 1200 s here.
set -euo pipefail
cd "$(dirname "$0")/.."

# Build: libibverbs/librdmacm headers, pkg-config and libclang (rdma-sys runs bindgen).
# Tests: librpma-dev (the C peer of tests/interop.rs), a C compiler, and the VM's packages.
PACKAGES=(pkg-config libclang-dev libibverbs-dev librdmacm-dev librpma-dev gcc libc6-dev
          ibverbs-providers qemu-system-x86 qemu-system-data iproute2 ibverbs-utils xz-utils)

install_deps() {
    local missing=() p
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -gt 0 ] || return 0
    if [ "$(id -u)" != 0 ]; then
        echo "test-verbs: missing packages: ${missing[*]} (install them as root: apt-get install ${missing[*]})" >&2
        exit 1
    fi
    echo "test-verbs: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2
    apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
}

if [ "${1:-}" = --install-deps ]; then
    install_deps
    exit 0
fi
install_deps

# The test targets of the facade that need the verbs feature ([[test]] entries of Cargo.toml
# with required-features containing "verbs"), plus every test target of rpma-verbs. Those that
# also need "verbs-fault-injection" are built in a build of their own, so that the others run
# without the fault-injection layer.
verbs_tests() { # $1: 1 = the fault-injection ones, 0 = the others
    awk -v fi="$1" '
        /^\[\[test\]\]/ { intest = 1; name = ""; next }
        /^\[/ { intest = 0 }
        intest && /^name *=/ { gsub(/.*= *"|".*/, ""); name = $0 }
        intest && /^required-features *=/ && /"verbs"/ && name != "" && (/"verbs-fault-injection"/ ? 1 : 0) == fi { print name }
    ' Cargo.toml
}
mapfile -t targets < <(verbs_tests 0)
mapfile -t fi_targets < <(verbs_tests 1)
[ ${#targets[@]} -gt 0 ] || { echo "test-verbs: no [[test]] with required-features verbs in Cargo.toml" >&2; exit 1; }
args=()
for t in "${targets[@]}"; do args+=(--test "$t"); done
fi_args=()
for t in "${fi_targets[@]}"; do fi_args+=(--test "$t"); done

target_dir=$(cargo metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)
list=$target_dir/softroce-tests.txt
mkdir -p "$target_dir"
build() {
    # one line per test binary: its package directory (cargo runs tests from there) and path
    cargo test --no-run --message-format=json "$@" |
        grep '"profile":{[^}]*"test":true' |
        sed -n 's/.*"manifest_path":"\([^"]*\)\/Cargo.toml".*"executable":"\([^"]*\)".*/\1\t\2/p'
}
echo "test-verbs: building ${targets[*]} ${fi_targets[*]} (rpma), the tests of rpma-verbs and verbs_scenarios (rpma-cli)" >&2
{
    build -p rpma --features verbs "${args[@]}"
    [ ${#fi_args[@]} -eq 0 ] || build -p rpma --features verbs-fault-injection "${fi_args[@]}"
    build -p rpma-verbs
    # every `rpma` scenario, in one process and as two processes (crates/rpma-cli)
    build -p rpma-cli --features verbs --test verbs_scenarios
} > "$list"
[ -s "$list" ] || { echo "test-verbs: cargo built no test binary" >&2; exit 1; }
echo "test-verbs: $(wc -l < "$list") test binaries; running them in one Soft-RoCE VM" >&2

# The VM shares the work tree read-write; a target dir outside it must be shared too (the tests
# write into CARGO_TARGET_TMPDIR).
top=$(git rev-parse --show-toplevel 2>/dev/null || pwd -P)
case $(cd "$target_dir" && pwd -P)/ in
    "$top"/*) ;;
    *) export SOFTROCE_RW=${SOFTROCE_RW:+$SOFTROCE_RW:}$target_dir ;;
esac
export SOFTROCE_TIMEOUT=${SOFTROCE_TIMEOUT:-1200}

# shellcheck disable=SC2016 # expanded in the guest
exec scripts/softroce/run.sh bash -c '
    list=$1; shift
    failed=()
    tab=$(printf "\t")
    while IFS=$tab read -r -u 3 dir exe; do
        printf "\n== %s (in the VM, RPMA_TEST_DEVICE=%s) ==\n" "${exe##*/}" "$RPMA_TEST_DEVICE"
        (cd "$dir" && "$exe" "$@" < /dev/null) || failed+=("${exe##*/}")
    done 3< "$list"
    if [ ${#failed[@]} -gt 0 ]; then
        echo "test-verbs: FAILED: ${failed[*]}" >&2
        exit 1
    fi
' test-verbs "$list" "$@"

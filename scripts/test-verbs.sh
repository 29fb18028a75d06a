#!/usr/bin/env bash
# Runs the tests of the verbs backend on a real RDMA device: Soft-RoCE (rxe0) inside a QEMU VM
# (scripts/softroce/run.sh), all test binaries in one boot. These are the conformance suite on
# verbs, the wire interop with the C librpma, the process-death tests, rpma-verbs' own tests
# and every `rpma` CLI scenario (crates/rpma-cli/tests/verbs_scenarios.rs), then rpma-tokio's
# cases on the device (tests/tokio_backends.rs) and the async examples (examples/async_*.rs),
# built with --features verbs,tokio, and the C programs of rpma-capi on our librpma.so with
# RPMA_BACKEND=verbs, also against Debian's librpma (crates/rpma-capi/tests/c_verbs.rs; the
# library is built here and found in the guest through RPMA_CAPI_LIB). Each test binary prints
# libtest's `test result:` line, which scripts/test-all.sh sums up; an example fails the run by
# its exit status.
#
# Both guest profiles run, debian12 then debian13 (see run_profile below), unless
# SOFTROCE_PROFILE names one.
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
# Tests: librpma-dev (the C peers of tests/interop.rs and verbs_scenarios), a C compiler, and the VM's packages.
# ndctl: the debian12 guest (the host's /usr) makes the NVDIMM's devdax namespace with it.
# vde2: the link between the guests of a cluster (scripts/softroce/cluster.sh, scripts/test-cluster.sh).
PACKAGES=(pkg-config libclang-dev libibverbs-dev librdmacm-dev librpma-dev gcc libc6-dev
          ibverbs-providers qemu-system-x86 qemu-system-data iproute2 ibverbs-utils xz-utils ndctl vde2)

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
build_examples() {
    # one line per example: its package directory, path, and the word "example" (run without
    # the test arguments; it finds the device in RPMA_TEST_DEVICE/RPMA_TEST_ADDR)
    cargo build --message-format=json "$@" |
        grep '"kind":\["example"\]' |
        sed -n 's/.*"manifest_path":"\([^"]*\)\/Cargo.toml".*"executable":"\([^"]*\)".*/\1\t\2\texample/p'
}
echo "test-verbs: building ${targets[*]} ${fi_targets[*]} (rpma, rpma-log), the tests of rpma-verbs, verbs_scenarios (rpma-cli) and c_verbs (rpma-capi)" >&2
# One set of features for every build below but the fault-injection one (scripts/lib/features.sh).
. scripts/lib/features.sh
# librpma.so with the verbs backend, for c_verbs in the guest, which has no cargo to build it
cargo build -q --workspace --features "$VERBS_FEATURES" --lib
export RPMA_CAPI_LIB=$target_dir/debug/librpma.so
[ -f "$RPMA_CAPI_LIB" ] || { echo "test-verbs: $RPMA_CAPI_LIB was not built" >&2; exit 1; }
{
    # the facade's verbs tests; the replicated log on the device and pmem (rpma-log's `verbs`:
    # replica processes killed, fencing, docs/log.md; it needs the NVDIMM, and fails without it);
    # every `rpma` scenario, in one process and as two processes (rpma-cli's verbs_scenarios);
    # the C programs on our librpma.so (RPMA_BACKEND=verbs), and against Debian's librpma
    # (rpma-capi's c_verbs); rpma-tokio on the device (tokio_backends, docs/async.md)
    build --workspace --features "$VERBS_FEATURES" "${args[@]}" --test tokio_backends --test verbs_scenarios --test c_verbs |
        { if [ -n "${SOFTROCE_PMEM-256M}" ]; then cat; else grep -v '/crates/rpma-log'$'\t' || true; fi; }
    [ ${#fi_args[@]} -eq 0 ] || build --workspace --all-features "${fi_args[@]}"
    build -p rpma-verbs
    # the async examples on the device
    build_examples --workspace --features "$VERBS_FEATURES" --example async_echo --example async_replicated_write
} > "$list"
[ -s "$list" ] || { echo "test-verbs: cargo built no test binary" >&2; exit 1; }
echo "test-verbs: $(wc -l < "$list") binaries (tests and examples); running them in one Soft-RoCE VM" >&2

# The VM shares the work tree read-write; a target dir outside it must be shared too (the tests
# write into CARGO_TARGET_TMPDIR).
top=$(git rev-parse --show-toplevel 2>/dev/null || pwd -P)
case $(cd "$target_dir" && pwd -P)/ in
    "$top"/*) ;;
    *) export SOFTROCE_RW=${SOFTROCE_RW:+$SOFTROCE_RW:}$target_dir ;;
esac
export SOFTROCE_TIMEOUT=${SOFTROCE_TIMEOUT:-1200}
# The guest's emulated NVDIMM (scripts/softroce/README.md, "Persistent memory"): the pmem cases
# (native persistent flush, interop on /dev/dax, rpma server --pmem) run in the same VM. Given
# empty (SOFTROCE_PMEM=), they say they are not asked for and check nothing.
export SOFTROCE_PMEM=${SOFTROCE_PMEM-256M}

# Guest profiles (scripts/softroce/README.md): SOFTROCE_PROFILE names one; unset, both run, one
# VM each, with the same binaries: debian12 (kernel 6.1, rdma-core 44, librpma 1.2: emulated
# flush and atomic write) and debian13 (kernel 6.12, rdma-core 56.1, librpma 1.3.0: native).
if [ -n "${SOFTROCE_PROFILE:-}" ]; then profiles=("$SOFTROCE_PROFILE"); else profiles=(debian12 debian13); fi

# run_profile PROFILE TEST ARGS...: the test binaries in one VM of PROFILE, then the counts of
# native and emulated flushes and atomic writes that every rpma-verbs process wrote at exit
# (RPMA_VERBS_OP_COUNTS). On debian13 a flush or atomic write must never be emulated:
# RPMA_VERBS_NATIVE_ONLY makes an emulated one fail its test (NoSupp), and
# RPMA_TEST_EXPECT_NATIVE makes tests/verbs.rs fail if detection missed the native verbs.
run_profile() {
    local profile=$1; shift
    local counts=$target_dir/softroce-op-counts-$profile.txt t0=$SECONDS rc=0
    rm -f "$counts"
    local native=()
    # (RPMA_INTEROP_NO_PERSISTENT: see tests/interop/peer.c and docs/native-ops.md.
    # RPMA_VERBS_PERSISTENT_FLUSH=read: the tests' regions are on DRAM, where the kernel refuses
    # IBV_ACCESS_FLUSH_PERSISTENT, so their persistent flushes are the APM read by explicit choice;
    # the pmem cases (SOFTROCE_PMEM) run their peers under the default rule, native.)
    [ "$profile" != debian13 ] || native=(RPMA_VERBS_NATIVE_ONLY=flush,atomic_write RPMA_TEST_EXPECT_NATIVE=flush,atomic_write
                                          RPMA_INTEROP_NO_PERSISTENT=1 RPMA_VERBS_PERSISTENT_FLUSH=read)
    if [ "$profile" = debian12 ]; then
        echo "test-verbs: profile debian12: host userspace $(dpkg-query -W -f='${Package} ${Version}, ' libibverbs1 librpma0 2>/dev/null)guest kernel of scripts/softroce/run.sh"
    fi
    # shellcheck disable=SC2016 # expanded in the guest
    env SOFTROCE_PROFILE="$profile" RPMA_VERBS_OP_COUNTS="$counts" "${native[@]}" scripts/softroce/run.sh bash -c '
        profile=$1 list=$2; shift 2
        if [ -e /etc/softroce-packages ]; then
            echo "test-verbs: profile $profile: kernel $(uname -r); guest userspace:" \
                "$(grep -E "^(libc6|libibverbs1|ibverbs-providers|librdmacm1t64|librpma0) " /etc/softroce-packages | tr "\n" ";")"
        else
            echo "test-verbs: profile $profile: kernel $(uname -r)"
        fi
        ibv_devinfo -v 2>/dev/null | grep -m1 device_cap_flags_ex | sed "s/^[[:space:]]*/test-verbs: rxe0 /" || true
        failed=()
        tab=$(printf "\t")
        while IFS=$tab read -r -u 3 dir exe kind; do
            printf "\n== %s (in the VM, profile %s, RPMA_TEST_DEVICE=%s) ==\n" "${exe##*/}" "$profile" "$RPMA_TEST_DEVICE"
            if [ "$kind" = example ]; then
                (cd "$dir" && "$exe" < /dev/null) || failed+=("${exe##*/}")
            else
                (cd "$dir" && "$exe" "$@" < /dev/null) || failed+=("${exe##*/}")
            fi
        done 3< "$list"
        if [ ${#failed[@]} -gt 0 ]; then
            echo "test-verbs: FAILED ($profile): ${failed[*]}" >&2
            exit 1
        fi
    ' test-verbs "$profile" "$list" "$@" || rc=$?
    local fn=0 fpn=0 fe=0 fp=0 an=0 ae=0
    if [ -s "$counts" ]; then
        read -r fn fpn fe fp an ae < <(awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] += kv[2] } }
            END { printf "%d %d %d %d %d %d\n", v["flush_native"], v["flush_persistent_native"], v["flush_emulated"],
                  v["flush_persistent_read"], v["atomic_write_native"], v["atomic_write_emulated"] }' "$counts")
    fi
    echo "test-verbs: profile $profile: $(wc -l < "$counts" 2>/dev/null || echo 0) rpma-verbs processes reported; $((SECONDS - t0)) s"
    echo "native flush: $fn"
    [ -z "${SOFTROCE_PMEM:-}" ] || echo "native persistent flush: $fpn"
    echo "native atomic write: $an"
    echo "emulated flush: $fe"
    echo "persistent flush as RDMA Read (RPMA_VERBS_PERSISTENT_FLUSH=read, native-flush device): $fp"
    echo "emulated atomic write: $ae"
    if [ "$profile" = debian13 ] && [ "$rc" = 0 ]; then
        # (with TEST ARGS, e.g. a name filter, only "nothing emulated": the filter may leave no
        # native operation)
        if { [ $# -eq 0 ] && { [ "$fn" -eq 0 ] || [ "$an" -eq 0 ]; }; } || [ "$fe" -ne 0 ] || [ "$ae" -ne 0 ]; then
            echo "test-verbs: FAILED (debian13): the native paths must be taken, and nothing emulated" >&2
            rc=1
        elif [ -n "${SOFTROCE_PMEM:-}" ] && [ "$fpn" -eq 0 ] && [ $# -eq 0 ]; then
            echo "test-verbs: FAILED (debian13, SOFTROCE_PMEM): no native persistent flush was posted" >&2
            rc=1
        fi
    fi
    return "$rc"
}

status=0
for p in "${profiles[@]}"; do
    run_profile "$p" "$@" || status=1
done
# Power cuts (scripts/softroce/power-cut.sh, docs/reliability.md): a few per profile in a full
# run (TEST_VERBS_POWER_CUTS, default 2 on debian13 and 1 on debian12; 0 skips them).
if [ -n "$SOFTROCE_PMEM" ] && [ $# -eq 0 ] && [ "${TEST_VERBS_POWER_CUTS:-2}" != 0 ]; then
    for p in "${profiles[@]}"; do
        n=${TEST_VERBS_POWER_CUTS:-2}
        [ "$p" = debian13 ] || n=$(( n > 1 ? n / 2 : 1 ))
        echo "test-verbs: power cuts, profile $p: scripts/softroce/power-cut.sh $n"
        SOFTROCE_PROFILE=$p SOFTROCE_PMEM_FILE='' scripts/softroce/power-cut.sh "$n" || status=1
        # the replicated log across power cuts (scripts/softroce/log-power-cut.sh, docs/log.md)
        echo "test-verbs: log power cuts, profile $p: scripts/softroce/log-power-cut.sh $n"
        SOFTROCE_PROFILE=$p SOFTROCE_PMEM_FILE='' scripts/softroce/log-power-cut.sh "$n" || status=1
    done
fi
exit $status

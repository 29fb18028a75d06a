#!/usr/bin/env bash
# scripts/softroce/power-cut.sh [CUTS]: acknowledged persistent writes survive power cuts.
#
# In a Soft-RoCE VM with an emulated NVDIMM (SOFTROCE_PMEM, scripts/softroce/README.md), a client
# writes numbered, checksummed 64-byte records into a server's devdax region, each made
# persistent on its own (an RDMA Write and a persistent flush: native IBV_FLUSH_PERSISTENT on
# debian13, the RDMA Read on debian12), and prints "ACK n" once the flush completed; the host
# reads those lines as they come. At a random moment (seeded: POWER_CUT_SEED, printed) the host
# kills QEMU with SIGKILL, boots again on the same NVDIMM file, and the checker reads the region
# (plain loads of the devdax mapping): every acknowledged record must be intact (checksum,
# number, cycle), none below the highest acknowledged one may be bad. The guest side is the
# `rpma-power-cut` binary of crates/rpma-testbins. What this proves and what it cannot:
# docs/reliability.md, "Power cuts".
#
# Knobs: CUTS (argument, default 10), POWER_CUT_SEED (default: from the clock, printed),
# SOFTROCE_PROFILE (debian12 or debian13, default debian13), POWER_CUT_MIN / POWER_CUT_MAX
# (seconds after the first ACK of a cycle within which the cut falls, default 1 and 6),
# SOFTROCE_PMEM_FILE (default: $SOFTROCE_CACHE/pmem-powercut-PROFILE.img, 64 MiB, apart from
# the tests' NVDIMM). Last line: "power cuts: N, acknowledged: M, lost: L"; exit 0 iff L = 0 and
# every cut happened while records were being acknowledged.
set -euo pipefail
cd "$(dirname "$0")/../.."

cuts=${1:-10}
[[ $cuts =~ ^[0-9]+$ ]] && [ "$cuts" -ge 1 ] || { echo "power-cut: CUTS must be a number >= 1" >&2; exit 2; }
seed=${POWER_CUT_SEED:-$(date +%s)}
[[ $seed =~ ^[0-9]+$ ]] || { echo "power-cut: POWER_CUT_SEED must be a number" >&2; exit 2; }
lo=${POWER_CUT_MIN:-1} hi=${POWER_CUT_MAX:-6}
export SOFTROCE_PROFILE=${SOFTROCE_PROFILE:-debian13}
cache=${SOFTROCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rpma-rs/softroce}
export SOFTROCE_PMEM=64M
export SOFTROCE_PMEM_FILE=${SOFTROCE_PMEM_FILE:-$cache/pmem-powercut-$SOFTROCE_PROFILE.img}
export SOFTROCE_TIMEOUT=${SOFTROCE_TIMEOUT:-300}
RANDOM=$seed
echo "power-cut: profile $SOFTROCE_PROFILE, $cuts cuts, seed $seed (POWER_CUT_SEED=$seed repeats the moments)," \
     "NVDIMM $SOFTROCE_PMEM_FILE"

# The guest runs a copy of the tool in the target dir (shared with the VM): another cargo command
# on the shared target dir may rebuild target/debug/rpma-power-cut without the verbs feature.
target_dir=$(cargo metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)
work=$(mktemp -d "$target_dir/power-cut.XXXXXX")
trap 'rm -rf "$work"' EXIT
tool=$work/rpma-power-cut
for _ in 1 2 3; do
    (. scripts/lib/features.sh && cargo build -q --workspace --features "$VERBS_FEATURES" --bin rpma-power-cut)
    cp "$target_dir/debug/rpma-power-cut" "$tool"
    "$tool" write 2>&1 | grep -q "without the verbs feature" || break
done
if "$tool" write 2>&1 | grep -q "without the verbs feature"; then
    echo "power-cut: could not get rpma-power-cut built with the verbs feature" >&2; exit 1
fi
pidfile=$work/qemu.pid

acked_total=0 lost_total=0 done_cuts=0 prev_cycle=0 prev_acked=-1 bad=0
# guest command of a cycle: check the previous cycle's records, then write this cycle's
guest() { # CYCLE
    # shellcheck disable=SC2016 # expanded in the guest
    echo 'set -e; [ -n "$RPMA_TEST_PMEM" ]; '"$tool"' check "$RPMA_TEST_PMEM" '"$prev_cycle $prev_acked"'; '"$tool"' write "$RPMA_TEST_PMEM" '"$1"
}
for ((cycle = 1; cycle <= cuts + 1; cycle++)); do
    log=$work/cycle-$cycle.log
    : > "$log"
    if [ "$cycle" -le "$cuts" ]; then
        cmd=$(guest "$cycle")
        delay=$((lo + RANDOM % (hi - lo + 1)))$(printf '.%d' $((RANDOM % 10)))
    else            # the last boot only checks
        # shellcheck disable=SC2016
        cmd='set -e; [ -n "$RPMA_TEST_PMEM" ]; '"$tool check \"\$RPMA_TEST_PMEM\" $prev_cycle $prev_acked"
        delay=
    fi
    rm -f "$pidfile"
    SOFTROCE_QEMU_PIDFILE=$pidfile scripts/softroce/run.sh bash -c "$cmd" > "$log" 2> "$work/cycle-$cycle.err" &
    runner=$!
    killed=0
    if [ -n "$delay" ]; then
        # wait for the first ACK, then cut the power after $delay seconds
        t0=$SECONDS
        until grep -q '^ACK ' "$log" 2>/dev/null; do
            if ! kill -0 "$runner" 2>/dev/null || [ $((SECONDS - t0)) -gt 240 ]; then break; fi
            sleep 0.1
        done
        if grep -q '^ACK ' "$log"; then
            sleep "$delay"
            if kill -0 "$runner" 2>/dev/null && [ -s "$pidfile" ]; then
                kill -KILL "$(cat "$pidfile")" 2>/dev/null && killed=1
            fi
        fi
    fi
    rc=0; wait "$runner" || rc=$?
    check=$(grep '^CHECK ' "$log" || true)
    if [ -z "$check" ]; then
        echo "power-cut: cycle $cycle: no CHECK line (runner status $rc)" >&2
        sed 's/^/  | /' "$log" "$work/cycle-$cycle.err" | tail -n 30 >&2
        exit 1
    fi
    lost=$(sed -n 's/.*, lost \([0-9]*\),.*/\1/p' <<< "$check")
    lost_total=$((lost_total + lost))
    echo "power-cut: boot $cycle: $check"
    if [ "$cycle" -le "$cuts" ]; then
        acked=$(grep -c '^ACK ' "$log" || true)
        last=$( (grep '^ACK ' "$log" || true) | tail -n 1 | cut -d' ' -f2)
        last=${last:--1}
        if [ "$killed" != 1 ] || grep -q '^DONE ' "$log"; then
            echo "power-cut: cycle $cycle: the cut did not fall while records were acknowledged (runner status $rc)" >&2
            { grep -v '^ACK ' "$log"; grep -v '^  |' "$work/cycle-$cycle.err"; } | tail -n 15 | sed 's/^/  | /' >&2
            bad=1
        fi
        # the host saw ACK 0..last in order (one line each)
        [ "$acked" = $((last + 1)) ] || { echo "power-cut: cycle $cycle: $acked ACK lines, last $last" >&2; bad=1; }
        echo "power-cut: cycle $cycle: cut ${delay}s after the first ACK (SIGKILL of QEMU); $acked records acknowledged"
        done_cuts=$((done_cuts + killed))
        acked_total=$((acked_total + acked))
        prev_cycle=$cycle prev_acked=$last
    fi
done
echo "power cuts: $done_cuts, acknowledged: $acked_total, lost: $lost_total"
[ "$lost_total" = 0 ] && [ "$bad" = 0 ]

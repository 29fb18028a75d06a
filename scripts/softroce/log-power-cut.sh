#!/usr/bin/env bash
# scripts/softroce/log-power-cut.sh [CUTS]: the replicated log (rpma-log) keeps every acknowledged
# entry across power cuts of the whole node.
#
# In a Soft-RoCE VM with an emulated NVDIMM (SOFTROCE_PMEM, scripts/softroce/README.md), three
# replicas run as `rpma log serve --backend verbs --pmem /dev/dax0.0` processes, each on its own
# region of the devdax device (--file-offset i * REGION, --size REGION), and a writer process
# (`rpma-log-power-cut write`, crates/rpma-testbins/src/bin/rpma-log-power-cut/) takes the log over,
# recovers it, then appends entries and syncs them in random groups (majority quorum, persistent
# flushes: native IBV_FLUSH_PERSISTENT on debian13, the RDMA Read on debian12), printing
# "ACK n" each time a sync returns (entries below n acknowledged). The host reads those lines as
# they come; at a random moment (seeded: LOG_POWER_CUT_SEED, printed) it kills QEMU with
# SIGKILL, boots again on the same NVDIMM file and checks, before anything writes:
#   - each region offline (`rpma-log-power-cut regions`: rpma_log::check_region, every
#     committed entry the one appended at its lsn), and that the acknowledged entries are
#     committed on a majority of the regions;
#   - the recovery of a new writer (`write`: Log::open over the three restarted replicas): every
#     acknowledged entry is there with its bytes, every recovered entry is the one appended.
# Then that writer goes on appending in the same log until the next cut; the last boot only
# checks. Acknowledged entries are never truncated (the regions hold every run: REGION is
# large), so each boot checks all of them.
#
# Knobs: CUTS (argument, default 3), LOG_POWER_CUT_SEED (default: from the clock, printed),
# SOFTROCE_PROFILE (debian12 or debian13, default debian13), LOG_POWER_CUT_MIN / _MAX (seconds
# after the first ACK of a boot within which the cut falls, default 1 and 5),
# SOFTROCE_PMEM_FILE (default $SOFTROCE_CACHE/pmem-logcut-PROFILE.img, 128 MiB, apart from the
# tests' NVDIMM; formatted by the first boot of each run), LOG_POWER_CUT_BINS (a directory holding
# `rpma` and `rpma-log-power-cut` built with the verbs feature: used instead of building them). Last line: "log: replicas 3, power
# cuts N, acknowledged M, lost L" (M: entries acknowledged over all boots; L: acknowledged
# entries some boot's check did not find intact, the most of any boot); exit 0 iff L = 0, no
# check found a bad entry, and every cut fell while entries were being acknowledged.
set -euo pipefail
cd "$(dirname "$0")/../.."

cuts=${1:-3}
[[ $cuts =~ ^[0-9]+$ ]] && [ "$cuts" -ge 1 ] || { echo "log-power-cut: CUTS must be a number >= 1" >&2; exit 2; }
seed=${LOG_POWER_CUT_SEED:-$(date +%s)}
[[ $seed =~ ^[0-9]+$ ]] || { echo "log-power-cut: LOG_POWER_CUT_SEED must be a number" >&2; exit 2; }
lo=${LOG_POWER_CUT_MIN:-1} hi=${LOG_POWER_CUT_MAX:-5}
export SOFTROCE_PROFILE=${SOFTROCE_PROFILE:-debian13}
cache=${SOFTROCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rpma-rs/softroce}
export SOFTROCE_PMEM=128M
export SOFTROCE_PMEM_FILE=${SOFTROCE_PMEM_FILE:-$cache/pmem-logcut-$SOFTROCE_PROFILE.img}
export SOFTROCE_TIMEOUT=${SOFTROCE_TIMEOUT:-300}
region=32M
RANDOM=$seed
echo "log-power-cut: profile $SOFTROCE_PROFILE, 3 replicas on regions of $region of the devdax, $cuts cuts," \
     "seed $seed (LOG_POWER_CUT_SEED=$seed repeats the moments), NVDIMM $SOFTROCE_PMEM_FILE"

# The guest runs copies of the binaries in the target dir (shared with the VM): another cargo
# command on the shared target dir may rebuild them without the verbs feature.
target_dir=$(cargo metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)
top=$(git rev-parse --show-toplevel 2>/dev/null || pwd -P)
case $(cd "$target_dir" && pwd -P)/ in
    "$top"/*) ;;
    *) export SOFTROCE_RW=${SOFTROCE_RW:+$SOFTROCE_RW:}$target_dir ;;
esac
work=$(mktemp -d "$target_dir/log-power-cut.XXXXXX")
trap 'rm -rf "$work"' EXIT
rpma=$work/rpma tool=$work/rpma-log-power-cut
bins=${LOG_POWER_CUT_BINS:-}
for _ in 1 2 3; do
    [ -n "$bins" ] || (. scripts/lib/features.sh &&
        cargo build -q --workspace --features "$VERBS_FEATURES" --bin rpma --bin rpma-log-power-cut)
    cp "${bins:-$target_dir/debug}/rpma" "$rpma"
    cp "${bins:-$target_dir/debug}/rpma-log-power-cut" "$tool"
    "$tool" write x 0 0 2>&1 | grep -q "without the verbs feature" || break
done
if "$tool" write x 0 0 2>&1 | grep -q "without the verbs feature"; then
    echo "log-power-cut: could not get rpma-log-power-cut built with the verbs feature" >&2; exit 1
fi
pidfile=$work/qemu.pid

# guest BOOT ACKED MODE: the guest's command. MODE: format (first boot: format the regions, no
# check), write (check, then write), check (the last boot: check only).
guest() {
    local boot=$1 acked=$2 mode=$3 fmt='' step
    [ "$mode" != format ] || fmt=--format
    # shellcheck disable=SC2016 # $RPMA_TEST_* expanded in the guest
    step='set -e; [ -n "$RPMA_TEST_PMEM" ] || { echo "no RPMA_TEST_PMEM in the guest" >&2; exit 3; }; '
    if [ "$mode" != format ]; then
        step+="$tool regions \"\$RPMA_TEST_PMEM\" $region $acked || true; "
    fi
    # shellcheck disable=SC2016
    step+='reps=; pids=; for i in 0 1 2; do
        port=$((7481 + i))
        '"$rpma"' log serve --backend verbs --addr "$RPMA_TEST_ADDR" --port $port --pmem "$RPMA_TEST_PMEM" \
            --file-offset $((i * '"${region%M}"' * 1048576)) --size '"$region $fmt"' --log-id 0x52504d414c4f4743 \
            > /tmp/replica$i.out 2>&1 &
        pids="$pids $!"
        reps=$reps${reps:+,}$RPMA_TEST_ADDR:$port
    done
    set -- $pids
    for i in 0 1 2; do
        pid=$1; shift
        until grep -q "^rpma log serve: log" /tmp/replica$i.out; do
            kill -0 "$pid" 2>/dev/null || { sed "s/^/REPLICA $i FAILED: /" /tmp/replica$i.out; exit 3; }
            sleep 0.1
        done
        sed "s/^/REPLICA $i: /" /tmp/replica$i.out
    done; '
    if [ "$mode" = check ]; then
        # shellcheck disable=SC2016
        step+="rc=0; $tool write \"\$reps\" $acked $seed$boot --check-only || rc=\$?; "'kill $pids; wait; exit $rc'
    else
        step+="$tool write \"\$reps\" $acked $seed$boot"
    fi
    echo "$step"
}

acked=0 acked_total=0 lost_max=0 bad=0 done_cuts=0
for ((boot = 1; boot <= cuts + 1; boot++)); do
    log=$work/boot-$boot.log
    : > "$log"
    if [ "$boot" = 1 ]; then mode=format; elif [ "$boot" -le "$cuts" ]; then mode=write; else mode=check; fi
    cmd=$(guest "$boot" "$acked" "$mode")
    delay=
    [ "$mode" = check ] || delay=$((lo + RANDOM % (hi - lo + 1)))$(printf '.%d' $((RANDOM % 10)))
    rm -f "$pidfile"
    SOFTROCE_QEMU_PIDFILE=$pidfile scripts/softroce/run.sh bash -c "$cmd" > "$log" 2> "$work/boot-$boot.err" &
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
    show_tail() { { grep -v '^ACK ' "$log"; grep -v '^  |' "$work/boot-$boot.err"; } | tail -n "$1" | sed 's/^/  | /' >&2; }
    if [ "$mode" != format ]; then
        regions=$(grep '^REGIONS: ' "$log" || true)
        check=$(grep '^CHECK: ' "$log" || true)
        if [ -z "$regions" ] || [ -z "$check" ]; then
            echo "log-power-cut: boot $boot: no REGIONS or CHECK line (runner status $rc)" >&2
            show_tail 30
            exit 1
        fi
        grep '^REGION [0-9]' "$log" | sed "s/^/log-power-cut: boot $boot: /"
        echo "log-power-cut: boot $boot: $regions"
        echo "log-power-cut: boot $boot: $check"
        for line in "$regions" "$check"; do
            l=$(sed -n 's/.*, lost \([0-9]*\), bad \([0-9]*\).*/\1/p' <<< "$line")
            b=$(sed -n 's/.*, lost \([0-9]*\), bad \([0-9]*\).*/\2/p' <<< "$line")
            [ "${l:-x}" != x ] && [ "${b:-x}" != x ] || { echo "log-power-cut: boot $boot: unreadable: $line" >&2; exit 1; }
            [ "$l" -le "$lost_max" ] || lost_max=$l
            [ "$b" = 0 ] || bad=1
        done
    fi
    if [ "$mode" != check ]; then
        start=$(sed -n 's/^START \([0-9]*\)$/\1/p' "$log" | head -n 1)
        last=$( (grep '^ACK ' "$log" || true) | tail -n 1 | cut -d' ' -f2)
        if [ -z "$start" ] || [ -z "$last" ]; then
            echo "log-power-cut: boot $boot: the writer acknowledged nothing (runner status $rc)" >&2
            show_tail 30
            exit 1
        fi
        if [ "$killed" != 1 ] || grep -q '^DONE' "$log"; then
            echo "log-power-cut: boot $boot: the cut did not fall while entries were acknowledged (runner status $rc)" >&2
            show_tail 15
            bad=1
        fi
        n=$((last - start))
        echo "log-power-cut: boot $boot: recovered up to $start, cut ${delay}s after the first ACK (SIGKILL of QEMU);" \
             "$n entries acknowledged, up to $last ($(grep -c '^ACK ' "$log") syncs)"
        done_cuts=$((done_cuts + killed))
        acked_total=$((acked_total + n))
        acked=$last
    fi
done
echo "log: replicas 3, power cuts $done_cuts, acknowledged $acked_total, lost $lost_max"
[ "$lost_max" = 0 ] && [ "$bad" = 0 ]

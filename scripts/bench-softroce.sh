#!/usr/bin/env bash
# Compares `rpma bench --backend verbs` with perftest on Soft-RoCE, inside the project's VM
# (scripts/softroce/run.sh: rxe0 on dummy0 at 10.77.0.1, server and client in one guest).
#
#   scripts/bench-softroce.sh                 # build `rpma` with verbs, boot the VM, compare
#   SIZES=8,4096 LAT_ITERS=2000 REPEAT=5 scripts/bench-softroce.sh
#   RPMA_BIN=/path/to/rpma scripts/bench-softroce.sh   # use an already built binary
#
# For each size it prints ours/perftest ratios:
#   read  latency  rpma `read` p50 (post to completion)      / ib_read_lat  t_typical
#   send  latency  rpma `send` p50 (send ping-pong, RTT / 2)  / ib_send_lat  t_typical
#   write latency  rpma `write-pingpong` p50 (RTT / 2)        / ib_write_lat t_typical
#                  (both: client and server write into each other's memory in turn and poll
#                  their own memory for the arrival)
#   write bandwidth rpma `write --qd $BW_QD --cq-mod $CQ_MOD` MB/s
#                                                 / ib_write_bw -t $BW_QD -Q $CQ_MOD BW average
# Every comparison runs REPEAT (default 3) rounds alternating which tool goes first and compares
# medians. Every measurement uses the same size and iteration count for both tools; our server
# busy-polls (`--busy-poll`) as perftest's does. `rpma write` completion latency (no perftest
# counterpart) is printed for reference.
# Targets: latency ratio <= 1.05, bandwidth ratio >= 0.95. The VM is emulated (QEMU TCG), so
# absolute numbers are far from hardware; the ratios compare both programs on the same device.
set -euo pipefail

SIZES=${SIZES:-8,4096,65536}
LAT_ITERS=${LAT_ITERS:-1000}
BW_ITERS=${BW_ITERS:-5000}
BW_QD=${BW_QD:-128}
REPEAT=${REPEAT:-3}
CQ_MOD=${CQ_MOD:-100}
ADDR=10.77.0.1

if [[ "${1:-}" != --in-vm ]]; then
    top=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
    if [[ -z "${RPMA_BIN:-}" ]]; then
        (cd "$top" && cargo build --release -p rpma-cli --features verbs --bin rpma)
        target=${CARGO_TARGET_DIR:-$top/target}
        RPMA_BIN=$(realpath "$target/release/rpma")
    fi
    export SIZES LAT_ITERS BW_ITERS BW_QD CQ_MOD REPEAT RPMA_BIN
    extra=$(dirname "$RPMA_BIN")
    SOFTROCE_RO="${SOFTROCE_RO:+$SOFTROCE_RO:}$extra" exec "$top/scripts/softroce/run.sh" \
        env SIZES="$SIZES" LAT_ITERS="$LAT_ITERS" BW_ITERS="$BW_ITERS" BW_QD="$BW_QD" CQ_MOD="$CQ_MOD" REPEAT="$REPEAT" \
        RPMA_BIN="$RPMA_BIN" \
        bash "$top/scripts/bench-softroce.sh" --in-vm
fi

command -v ib_write_lat >/dev/null || { echo "perftest is not installed (apt-get install perftest)" >&2; exit 1; }
[[ -x "$RPMA_BIN" ]] || { echo "RPMA_BIN=$RPMA_BIN is not an executable" >&2; exit 1; }

port=19000
# perftest NAME SIZE ITERS EXTRA...: runs server and client, prints the client's result line.
perftest() {
    local name=$1 size=$2 iters=$3
    shift 3
    port=$((port + 1))
    "$name" -R -F -p "$port" -s "$size" -n "$iters" "$@" >/tmp/pt-server.log 2>&1 &
    local server=$!
    sleep 1
    local out
    if ! out=$("$name" -R -F -p "$port" -s "$size" -n "$iters" "$@" "$ADDR" 2>&1); then
        echo "$name failed:" >&2
        echo "$out" >&2
        cat /tmp/pt-server.log >&2
        kill "$server" 2>/dev/null || true
        return 1
    fi
    wait "$server" || true
    # The result line starts with the size.
    echo "$out" | awk -v s="$size" '$1 == s { line = $0 } END { print line }'
}

# ours OP SIZE ITERS QD EXTRA...: prints our CSV result line.
ours() {
    local op=$1 size=$2 iters=$3 qd=$4
    shift 4
    port=$((port + 1))
    "$RPMA_BIN" bench --backend verbs --addr "$ADDR" --port "$port" --op "$op" --size "$size" --iters "$iters" \
        --qd "$qd" --warmup 100 --busy-poll --csv --no-progress "$@" | tail -n 1
}

# CSV columns (docs/bench.md): 13 = p50 ns, 18 = MB/s (10^6 bytes).
col() { echo "$1" | cut -d, -f"$2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "n/a" }'; }

# median V...: the median of the values (the lower middle one for an even count).
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# spread A... -- B...: the smallest and largest ratio A[i]/B[i] of the rounds.
spread() {
    local -a a=() b=()
    while [[ $1 != -- ]]; do a+=("$1"); shift; done
    shift
    b=("$@")
    local i out=()
    for i in "${!a[@]}"; do out+=("$(ratio "${a[$i]}" "${b[$i]}")"); done
    printf '%s\n' "${out[@]}" | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%s..%s", lo, hi }'
}

# Each comparison runs REPEAT rounds, alternating which tool goes first, and compares the medians
# of the rounds (the per-round ratio range shows the noise).
printf '%-16s %8s %14s %14s %8s  %s\n' "metric" "size" "rpma" "perftest" "ratio" "rounds (min..max ratio)"
IFS=, read -ra sizes <<<"$SIZES"
for size in "${sizes[@]}"; do
    for pair in read:ib_read_lat send:ib_send_lat write-pingpong:ib_write_lat; do
        op=${pair%%:*} tool=${pair#*:}
        mine=() theirs=()
        for ((round = 0; round < REPEAT; round++)); do
            if ((round % 2)); then
                t=$(perftest "$tool" "$size" "$LAT_ITERS")
                m=$(ours "$op" "$size" "$LAT_ITERS" 1)
            else
                m=$(ours "$op" "$size" "$LAT_ITERS" 1)
                t=$(perftest "$tool" "$size" "$LAT_ITERS")
            fi
            # perftest latency line: bytes iters t_min t_max t_typical ...
            mine+=("$(awk -v ns="$(col "$m" 13)" 'BEGIN { printf "%.2f", ns / 1000 }')")
            theirs+=("$(echo "$t" | awk '{ print $5 }')")
        done
        ours_us=$(median "${mine[@]}") pt_us=$(median "${theirs[@]}")
        printf '%-16s %8s %11s us %11s us %8s  %s\n' "${op%-pingpong} lat p50" "$size" "$ours_us" "$pt_us" \
            "$(ratio "$ours_us" "$pt_us")" "$(spread "${mine[@]}" -- "${theirs[@]}")"
    done
    mine=$(ours write "$size" "$LAT_ITERS" 1)
    ours_us=$(awk -v ns="$(col "$mine" 13)" 'BEGIN { printf "%.2f", ns / 1000 }')
    printf '%-16s %8s %11s us %14s %8s\n' "write compl p50" "$size" "$ours_us" "-" "-"
    # perftest bandwidth line: bytes iters peak avg(MB/s, 2^20 bytes) msgrate(Mpps, 6 decimals).
    # Same size on both sides, so the ratio is taken from the message rates (perftest prints
    # MB/s with 2 decimals only, too coarse for small messages in the VM).
    mine=() theirs=() mibs=() pt_mibs=()
    for ((round = 0; round < REPEAT; round++)); do
        if ((round % 2)); then
            t=$(perftest ib_write_bw "$size" "$BW_ITERS" -t "$BW_QD" -Q "$CQ_MOD")
            m=$(ours write "$size" "$BW_ITERS" "$BW_QD" --cq-mod "$CQ_MOD")
        else
            m=$(ours write "$size" "$BW_ITERS" "$BW_QD" --cq-mod "$CQ_MOD")
            t=$(perftest ib_write_bw "$size" "$BW_ITERS" -t "$BW_QD" -Q "$CQ_MOD")
        fi
        mine+=("$(awk -v r="$(col "$m" 20)" 'BEGIN { printf "%.6f", r / 1e6 }')")
        theirs+=("$(echo "$t" | awk '{ print $5 }')")
        mibs+=("$(awk -v mb="$(col "$m" 18)" 'BEGIN { printf "%.2f", mb * 1e6 / 1048576 }')")
        pt_mibs+=("$(echo "$t" | awk '{ print $4 }')")
    done
    ours_mpps=$(median "${mine[@]}") pt_mpps=$(median "${theirs[@]}")
    printf '%-16s %8s %9s MiB/s %9s MiB/s %8s\n' "write bw" "$size" "$(median "${mibs[@]}")" \
        "$(median "${pt_mibs[@]}")" "$(ratio "$ours_mpps" "$pt_mpps")"
    printf '%-16s %8s %9s Mpps  %9s Mpps  %8s  %s\n' "write msg rate" "$size" "$ours_mpps" "$pt_mpps" \
        "$(ratio "$ours_mpps" "$pt_mpps")" "$(spread "${mine[@]}" -- "${theirs[@]}")"
done

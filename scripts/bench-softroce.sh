#!/usr/bin/env bash
# Compares `rpma bench --backend verbs` with perftest on Soft-RoCE, inside the project's VM
# (scripts/softroce/run.sh: rxe0 on dummy0 at 10.77.0.1, server and client in one guest).
#
#   scripts/bench-softroce.sh                 # build `rpma` with verbs, boot the VM, compare
#   SIZES=8,4096 LAT_ITERS=2000 scripts/bench-softroce.sh
#   RPMA_BIN=/path/to/rpma scripts/bench-softroce.sh   # use an already built binary
#
# For each size it prints ours/perftest ratios:
#   read  latency  rpma `read`  p50 (post to completion)  / ib_read_lat  t_typical  (same metric)
#   send  latency  rpma `send`  p50 (round trip / 2)      / ib_send_lat  t_typical  (same metric)
#   write latency  rpma `write` p50 (post to completion)  / ib_write_lat t_typical  (NOT the same
#                  metric: ib_write_lat is half a write ping-pong, ours waits for the write's
#                  acknowledgement, about a full round trip; shown for reference)
#   write bandwidth rpma `write --qd 128`  MB/s           / ib_write_bw  BW average (tx depth 128)
# Targets: latency ratio <= 1.05, bandwidth ratio >= 0.95. The VM is emulated (QEMU TCG), so
# absolute numbers are far from hardware; the ratios compare both programs on the same device.
set -euo pipefail

SIZES=${SIZES:-8,4096,65536}
LAT_ITERS=${LAT_ITERS:-1000}
BW_ITERS=${BW_ITERS:-5000}
ADDR=10.77.0.1

if [[ "${1:-}" != --in-vm ]]; then
    top=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
    if [[ -z "${RPMA_BIN:-}" ]]; then
        (cd "$top" && cargo build --release -p rpma-cli --features verbs --bin rpma)
        target=${CARGO_TARGET_DIR:-$top/target}
        RPMA_BIN=$(realpath "$target/release/rpma")
    fi
    export SIZES LAT_ITERS BW_ITERS RPMA_BIN
    extra=$(dirname "$RPMA_BIN")
    SOFTROCE_RO="${SOFTROCE_RO:+$SOFTROCE_RO:}$extra" exec "$top/scripts/softroce/run.sh" \
        env SIZES="$SIZES" LAT_ITERS="$LAT_ITERS" BW_ITERS="$BW_ITERS" RPMA_BIN="$RPMA_BIN" \
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

# ours OP SIZE ITERS QD: prints our CSV result line.
ours() {
    port=$((port + 1))
    "$RPMA_BIN" bench --backend verbs --addr "$ADDR" --port "$port" --op "$1" --size "$2" --iters "$3" \
        --qd "$4" --warmup 100 --csv --no-progress | tail -n 1
}

# CSV columns (docs/bench.md): 13 = p50 ns, 18 = MB/s (10^6 bytes).
col() { echo "$1" | cut -d, -f"$2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "n/a" }'; }

printf '%-16s %8s %14s %14s %8s\n' "metric" "size" "rpma" "perftest" "ratio"
IFS=, read -ra sizes <<<"$SIZES"
for size in "${sizes[@]}"; do
    for pair in read:ib_read_lat send:ib_send_lat write:ib_write_lat; do
        op=${pair%%:*} tool=${pair#*:}
        mine=$(ours "$op" "$size" "$LAT_ITERS" 1)
        theirs=$(perftest "$tool" "$size" "$LAT_ITERS")
        # perftest latency line: bytes iters t_min t_max t_typical ...
        ours_us=$(awk -v ns="$(col "$mine" 13)" 'BEGIN { printf "%.2f", ns / 1000 }')
        pt_us=$(echo "$theirs" | awk '{ print $5 }')
        printf '%-16s %8s %11s us %11s us %8s\n' "$op lat p50" "$size" "$ours_us" "$pt_us" "$(ratio "$ours_us" "$pt_us")"
    done
    mine=$(ours write "$size" "$BW_ITERS" 128)
    theirs=$(perftest ib_write_bw "$size" "$BW_ITERS")
    # perftest bandwidth line: bytes iters peak avg(MB/s, 2^20 bytes) msgrate
    ours_mib=$(awk -v mb="$(col "$mine" 18)" 'BEGIN { printf "%.2f", mb * 1e6 / 1048576 }')
    pt_mib=$(echo "$theirs" | awk '{ print $4 }')
    printf '%-16s %8s %9s MiB/s %9s MiB/s %8s\n' "write bw" "$size" "$ours_mib" "$pt_mib" "$(ratio "$ours_mib" "$pt_mib")"
done

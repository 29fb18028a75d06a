#!/usr/bin/env bash
# Compares `rpma bench --backend verbs` with perftest and with C librpma (Debian's librpma-dev,
# through our own C program benches/c/librpma_bench.c) on Soft-RoCE, inside the project's VM
# (scripts/softroce/run.sh: rxe0 on dummy0 at 10.77.0.1, server and client in one guest), all in
# one boot, on the same device, in the same run.
#
#   scripts/bench-softroce.sh                 # build `rpma` with verbs and the C program, compare
#   scripts/bench-softroce.sh --quick         # one round, few iterations: a smoke test (~2 min)
#   SECTIONS=librpma,callgrind REPEAT=9 scripts/bench-softroce.sh
#   RPMA_BIN=/path/to/rpma scripts/bench-softroce.sh   # use an already built binary
#   SOFTROCE_ACCEL=icount SECTIONS=librpma LAT_VARIANTS=send RATE_VARIANTS= REPEAT=3 SERVER_PRIO=none \
#       scripts/bench-softroce.sh             # the send row, both servers at the default priority
#
# Sections (SECTIONS, comma-separated; default all):
#   perftest   ours/perftest: read, send and write ping-pong latency (ib_*_lat t_typical vs our
#              p50; SIZES), write bandwidth and message rate at BW_QD with CQ_MOD
#              (ib_write_bw -t -Q); `rpma write` completion latency for reference
#   librpma    ours/C librpma, 8-byte operations: p50 latency at queue depth 1 of read, write,
#              write-flush and send (ping-pong, half the round trip; ours also with the bytes
#              inline for write, write-flush and send), and the message rate of
#              writes at queue depth 128 (cq-mod 100), ours also with --batch 16 and with
#              --batch 16 --inline (C librpma has neither: each operation is its own doorbell,
#              its data always read from a registered region); for each batch size, perftest's
#              own gain from post lists of that size in the same boot (ib_write_bw -l N against
#              -Q CQ_MOD: what the device gives raw verbs for one doorbell per N writes)
#   capi       our librpma.so (crates/rpma-capi, RPMA_BACKEND=verbs) against Debian's, under the
#              same C program (benches/c/librpma_bench.c, both sides on the library compared,
#              LD_LIBRARY_PATH): the p50 latencies and the message rate of the librpma section,
#              and callgrind's instructions per post and per poll of read, write, flush and send
#              (the target: a C program on our librpma is not slower than on Debian's)
#   setup      connection setup: `rpma bench --op connect` against the C program's
#              `connect` on C librpma, server and client processes each: per connection, the
#              client's request, connect, ESTABLISHED, disconnect, CLOSED and delete, and the
#              server's accept of it; SETUP_ITERS connections (after 100 of warm-up), the p50 of
#              a connection's cycle and the connections per second
#   callgrind  instructions per post and per poll (inclusive, valgrind --tool=callgrind; the
#              output files are kept in CG_DIR, default next to RPMA_BIN) of both
#              programs for read, write, send, recv and flush: every post goes through one
#              non-inlined function and every poll through another in each program (`post_op`,
#              `poll_cq`; recv: `post_recv`), and their inclusive cost is divided by their calls;
#              and the whole client's instructions per operation in the message-rate run (writes
#              at BW_QD, CQ_MOD; the difference of runs of CG_ITERS and 2 CG_ITERS operations)
# LAT_VARIANTS and RATE_VARIANTS pick the librpma section's rows (see below; e.g.
# LAT_VARIANTS= RATE_VARIANTS=1 for the plain message rate alone).
# SOFTROCE_ACCEL=icount: the guest's clock is its instruction count (one vCPU); timings then
# repeat to ~0.1 % within a boot whatever the host's load (docs/bench.md, "The icount clock
# (deterministic timings)"); the servers sleep when idle and run at a real-time priority, so
# an echo runs as soon as its message arrives (SERVER_PRIO=none: at the default priority).
# Every comparison runs REPEAT (default 9) rounds alternating which tool goes first and compares
# the medians; it also prints the median, minimum and maximum of the rounds' own ratios (each
# round's two runs side by side: the paired ratio, steadier under a drifting host load). Targets: latency ratio vs
# C librpma <= 1.00, message rate >= 1.0x C at qd 128 and >= 1.3x with batches of 16,
# instructions per post and per poll <= C's. The VM is emulated (QEMU TCG): absolute numbers are
# far from hardware; the ratios compare the programs on the same device. The last lines are a
# markdown table for docs/bench.md. Exit status: non-zero if any tool fails.
set -euo pipefail
# cg_sum: instructions per call of post_op, post_recv and poll_cq in a callgrind output file.
. "$(dirname "${BASH_SOURCE[0]}")/lib/callgrind.sh"

if [[ "${1:-}" == --quick ]]; then
    shift
    : "${SIZES:=8}" "${LAT_ITERS:=200}" "${BW_ITERS:=2000}" "${REPEAT:=1}" "${CG_ITERS:=200}" "${SETUP_ITERS:=100}"
fi
SIZES=${SIZES:-8,4096,65536}
LAT_ITERS=${LAT_ITERS:-1000}
BW_ITERS=${BW_ITERS:-5000}
BW_QD=${BW_QD:-128}
REPEAT=${REPEAT:-9}
CQ_MOD=${CQ_MOD:-100}
CG_ITERS=${CG_ITERS:-2000}
SETUP_ITERS=${SETUP_ITERS:-500}
SECTIONS=${SECTIONS:-perftest,librpma,setup,callgrind,capi}
# The rows of the librpma section (';'-separated; set and empty: none): latency variants (an
# operation and our optional flag) and message-rate variants (our --batch and optional flag).
LAT_VARIANTS=${LAT_VARIANTS-read;write;write-flush;send;write --inline;write-flush --inline;send --inline}
RATE_VARIANTS=${RATE_VARIANTS-1;16;16 --inline}
IFS=';' read -r -a LAT_LIST <<<"$LAT_VARIANTS"
# SOFTROCE_ACCEL=icount (scripts/softroce/run.sh): the guest's clock counts the instructions it
# executes, one vCPU, so its timings do not depend on the host's load.
ICOUNT=${ICOUNT:-0}
if [[ ${SOFTROCE_ACCEL:-tcg} == icount ]]; then ICOUNT=1; fi
CLOCK=''
# How the servers wait (latency and rate rows): spinning on their CQ, each on its own vCPU; on
# one vCPU (icount) a spinning server would take turns with the client, so both sleep in the
# kernel when idle (ours with --sleep-when-idle, the C one with SERVER_SLEEPS: poll(2) on the
# CQ's and the connection's fds, the completion event taken once the CQ is drained).
# SERVER_PRIO (icount only): rt (default) runs both servers at a real-time priority (chrt -f 1),
# so a server woken by a message runs as soon as the client's system call returns, as on a CPU
# of its own; none leaves them to the default scheduler (CFS), which runs ksoftirqd (woken by
# rxe's completion tasklet) first.
SERVER_PRIO=${SERVER_PRIO:-rt}
case $SERVER_PRIO in
rt | none) ;;
*) echo "SERVER_PRIO=$SERVER_PRIO: rt or none" >&2; exit 2 ;;
esac
SPIN=(--busy-poll) SLEEPY_C=() PRIO=()
if ((ICOUNT)); then
    CLOCK=', icount clock' SPIN=(--sleep-when-idle) SLEEPY_C=(env SERVER_SLEEPS=1)
    if [[ $SERVER_PRIO == rt ]]; then PRIO=(chrt -f 1); else CLOCK+=', servers at the default priority'; fi
fi
IFS=';' read -r -a RATE_LIST <<<"$RATE_VARIANTS"
ADDR=10.77.0.1

if [[ "${1:-}" != --in-vm ]]; then
    top=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
    if [[ -z "${RPMA_BIN:-}" ]]; then
        (cd "$top" && cargo build --release -p rpma-cli --features verbs --bin rpma)
        target=${CARGO_TARGET_DIR:-$top/target}
        RPMA_BIN=$(realpath "$target/release/rpma")
    fi
    extra=$(dirname "$RPMA_BIN")
    C_BIN=$extra/librpma_bench
    CG_DIR=${CG_DIR:-$extra/callgrind}
    mkdir -p "$CG_DIR"
    cc -O2 -g -Wall -Wextra -Werror -o "$C_BIN" "$top/benches/c/librpma_bench.c" -lrpma -libverbs -lrdmacm
    # Our librpma.so under the SONAME the C program asks the loader for.
    CAPI_DIR=$extra/capi
    if [[ ",$SECTIONS," == *",capi,"* ]]; then
        (cd "$top" && cargo build --release -p rpma-capi)
        mkdir -p "$CAPI_DIR"
        cp "${CARGO_TARGET_DIR:-$top/target}/release/librpma.so" "$CAPI_DIR/librpma.so.0"
    fi
    SOFTROCE_RO="${SOFTROCE_RO:+$SOFTROCE_RO:}$extra" SOFTROCE_RW="${SOFTROCE_RW:+$SOFTROCE_RW:}$CG_DIR" \
        exec "$top/scripts/softroce/run.sh" \
        env ICOUNT="$ICOUNT" SERVER_PRIO="$SERVER_PRIO" CAPI_CALLGRIND="${CAPI_CALLGRIND:-1}" LAT_VARIANTS="$LAT_VARIANTS" RATE_VARIANTS="$RATE_VARIANTS" SIZES="$SIZES" LAT_ITERS="$LAT_ITERS" BW_ITERS="$BW_ITERS" BW_QD="$BW_QD" CQ_MOD="$CQ_MOD" REPEAT="$REPEAT" \
        SETUP_ITERS="$SETUP_ITERS" CG_ITERS="$CG_ITERS" SECTIONS="$SECTIONS" RPMA_BIN="$RPMA_BIN" C_BIN="$C_BIN" CG_DIR="$CG_DIR" \
        CAPI_DIR="$CAPI_DIR" bash "$top/scripts/bench-softroce.sh" --in-vm
fi

[[ -x "$RPMA_BIN" ]] || { echo "RPMA_BIN=$RPMA_BIN is not an executable" >&2; exit 1; }
[[ -x "$C_BIN" ]] || { echo "C_BIN=$C_BIN is not an executable" >&2; exit 1; }
section() { [[ ",$SECTIONS," == *",$1,"* ]]; }
if section perftest; then
    command -v ib_write_lat >/dev/null || { echo "perftest is not installed (apt-get install perftest)" >&2; exit 1; }
fi
if section librpma && [[ " ${RATE_LIST[*]} " =~ \ ([2-9]|[1-9][0-9]+)( |\ --) ]]; then
    # The batch rows are read against perftest's own post lists (below).
    command -v ib_write_bw >/dev/null || { echo "perftest is not installed (apt-get install perftest)" >&2; exit 1; }
fi
if section callgrind; then
    command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
fi

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
    # Two processes, as the C program's server and client: the client process has one thread
    # (rxe rings its doorbell with write(2), and glibc's wrapper costs ~45 more instructions
    # in a process that ever had a second thread).
    "${PRIO[@]}" "$RPMA_BIN" bench --backend verbs --server --addr "$ADDR" --port "$port" --qd "$qd" "${SPIN[@]}" \
        --timeout 300 --no-progress >/tmp/rust-server.out 2>/tmp/rust-server.err &
    local server=$! out rc=0
    sleep 1
    out=$(timeout 900 "$RPMA_BIN" bench --backend verbs --connect "$ADDR:$port" --op "$op" --size "$size" \
        --iters "$iters" --qd "$qd" --warmup 100 --timeout 300 --csv --no-progress "$@" 2>/tmp/rust-client.err) || rc=$?
    settle "$rc" "rpma bench $op" "$server" /tmp/rust-server.err "$(cat /tmp/rust-client.err)" || return 1
    echo "$out" | tail -n 1
}

# ours_setup ITERS: `rpma bench --op connect`, server and client processes; prints our CSV line.
ours_setup() {
    port=$((port + 1))
    "${PRIO[@]}" "$RPMA_BIN" bench --backend verbs --server --op connect --addr "$ADDR" --port "$port" \
        --timeout 300 --no-progress >/tmp/rust-server.out 2>/tmp/rust-server.err &
    local server=$! out rc=0
    sleep 1
    out=$(timeout 900 "$RPMA_BIN" bench --backend verbs --connect "$ADDR:$port" --op connect --iters "$1" \
        --warmup 100 --timeout 300 --csv --no-progress 2>/tmp/rust-client.err) || rc=$?
    settle "$rc" "rpma bench connect" "$server" /tmp/rust-server.err "$(cat /tmp/rust-client.err)" || return 1
    echo "$out" | tail -n 1
}

# settle RC WHAT SERVER_PID SERVER_ERR CLIENT_OUTPUT: after a client ran (RC its status), waits
# for its server; if either failed, says which with what they printed, and returns 1.
settle() {
    local rc=$1 what=$2 server=$3 serr=$4 cout=$5
    if ((rc != 0)); then
        echo "$what: the client failed:" >&2
        printf '%s\n' "$cout" "$(cat "$serr")" >&2
        kill "$server" 2>/dev/null || true
        return 1
    fi
    if ! wait "$server"; then
        echo "$what: the server failed:" >&2
        cat "$serr" >&2
        return 1
    fi
}

# CSV columns (docs/bench.md): 13 = p50 ns, 18 = MB/s (10^6 bytes).
col() { echo "$1" | cut -d, -f"$2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "n/a" }'; }

# median V...: the median of the values (the lower middle one for an even count).
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# spread A... -- B...: the rounds' ratios A[i]/B[i], each taken from two runs side by side:
# "MEDIAN [MIN..MAX]". The median of these paired ratios is steadier than the ratio of the two
# medians when the host's load drifts between rounds (both runs of a round see the same load).
spread() {
    local -a a=() b=()
    while [[ $1 != -- ]]; do a+=("$1"); shift; done
    shift
    b=("$@")
    local i out=()
    for i in "${!a[@]}"; do out+=("$(ratio "${a[$i]}" "${b[$i]}")"); done
    printf '%s [%s]' "$(median "${out[@]}")" \
        "$(printf '%s\n' "${out[@]}" | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%s..%s", lo, hi }')"
}

if section perftest; then
# Each comparison runs REPEAT rounds, alternating which tool goes first, and compares the medians
# of the rounds (the per-round ratio range shows the noise).
printf '%-16s %8s %14s %14s %8s  %s\n' "metric" "size" "rpma" "perftest" "ratio" "paired ratio: median [min..max]"
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
fi

# c_run OP SIZE ITERS QD CQMOD [WRAPPER...]: the C librpma server and client; prints the
# client's result line ("op=.. msg_rate=.. p50_ns=.."). Both run under C_ENV (a command prefix,
# e.g. `env LD_LIBRARY_PATH=...` for our librpma.so; empty: Debian's librpma).
C_ENV=()
c_run() {
    local op=$1 size=$2 iters=$3 qd=$4 cqmod=$5
    shift 5
    port=$((port + 1))
    "${PRIO[@]}" "${C_ENV[@]}" "${SLEEPY_C[@]}" "$C_BIN" server "$ADDR" "$port" >/tmp/c-server.out 2>/tmp/c-server.err &
    local server=$! i
    for ((i = 0; i < 300; i++)); do
        grep -q LISTENING /tmp/c-server.out 2>/dev/null && break
        sleep 0.1
    done
    local out rc=0
    out=$(timeout 900 "${C_ENV[@]}" "$@" "$C_BIN" client "$ADDR" "$port" "$op" "$size" "$iters" "$qd" "$cqmod" 2>&1) || rc=$?
    settle "$rc" "librpma_bench $op" "$server" /tmp/c-server.err "$out" || return 1
    echo "$out" | grep '^op='
}
# field LINE KEY: the value of KEY=value in a C result line.
field() { echo "$1" | tr ' ' '\n' | awk -F= -v k="$2" '$1 == k { print $2 }'; }

TABLE=() NOTES=()
if section librpma; then
    echo
    printf '%-22s %14s %14s %8s  %s\n' "vs C librpma (8 B)" "rpma-rs" "C librpma" "ratio" "paired ratio: median [min..max]"
    # Ours plain, and with the 8 bytes inline in the work request where an operation sends
    # data (C librpma cannot: every write and send reads a registered region).
    for variant in "${LAT_LIST[@]}"; do
        read -r op extra <<<"$variant"
        mine=() theirs=()
        for ((round = 0; round < REPEAT; round++)); do
            # shellcheck disable=SC2086 # $extra is one optional flag
            if ((round % 2)); then
                c=$(c_run "$op" 8 "$LAT_ITERS" 1 1)
                m=$(ours "$op" 8 "$LAT_ITERS" 1 $extra)
            else
                m=$(ours "$op" 8 "$LAT_ITERS" 1 $extra)
                c=$(c_run "$op" 8 "$LAT_ITERS" 1 1)
            fi
            mine+=("$(col "$m" 13)")
            theirs+=("$(field "$c" p50_ns)")
        done
        a=$(median "${mine[@]}") b=$(median "${theirs[@]}") sp=$(spread "${mine[@]}" -- "${theirs[@]}")
        label="$op lat p50 qd1${extra:+ inline}"
        printf '%-22s %11s ns %11s ns %8s  %s\n' "$label" "$a" "$b" "$(ratio "$a" "$b")" "$sp"
        TABLE+=("| $op latency p50, qd 1${extra:+, rpma-rs --inline} (ns) | $a | $b | $(ratio "$a" "$b") | $sp |")
    done
    # Ours plain, with --batch 16, and with --batch 16 --inline (C librpma can do neither).
    for variant in "${RATE_LIST[@]}"; do
        read -r batch extra <<<"$variant"
        mine=() theirs=()
        for ((round = 0; round < REPEAT; round++)); do
            # shellcheck disable=SC2086 # $extra is one optional flag
            if ((round % 2)); then
                c=$(c_run write 8 "$BW_ITERS" "$BW_QD" "$CQ_MOD")
                m=$(ours write 8 "$BW_ITERS" "$BW_QD" --cq-mod "$CQ_MOD" --batch "$batch" $extra)
            else
                m=$(ours write 8 "$BW_ITERS" "$BW_QD" --cq-mod "$CQ_MOD" --batch "$batch" $extra)
                c=$(c_run write 8 "$BW_ITERS" "$BW_QD" "$CQ_MOD")
            fi
            mine+=("$(col "$m" 20)")
            theirs+=("$(field "$c" msg_rate)")
        done
        a=$(median "${mine[@]}") b=$(median "${theirs[@]}") sp=$(spread "${mine[@]}" -- "${theirs[@]}")
        what="write rate qd$BW_QD"
        ((batch > 1)) && what+=" b$batch"
        [[ -n $extra ]] && what+=" inline"
        printf '%-22s %10.0f op/s %10.0f op/s %8s  %s\n' "$what" "$a" "$b" "$(ratio "$a" "$b")" "$sp"
        TABLE+=("| write message rate, qd $BW_QD$( ((batch > 1)) && echo ", rpma-rs --batch $batch${extra:+ $extra}") (op/s) | $(printf '%.0f' "$a") | $(printf '%.0f' "$b") | $(ratio "$a" "$b") | $sp |")
    done
    # What the device itself gains from one doorbell per N writes, in the same boot: perftest
    # (raw verbs, no library) with post lists of N (`ib_write_bw -l N`, which signals the last
    # of each list) against its plain run (`-Q CQ_MOD`). Perftest's message rate comes from
    # its own clock (on the icount guest a made-up CPU frequency), so only the ratio of its two
    # runs is read: the --batch rows above, against C, cannot go much past it.
    declare -A seen=()
    for variant in "${RATE_LIST[@]}"; do
        read -r batch _ <<<"$variant"
        ((batch > 1)) && [[ -z ${seen[$batch]:-} ]] || continue
        seen[$batch]=1
        lists=() plain=()
        for ((round = 0; round < REPEAT; round++)); do
            if ((round % 2)); then
                p=$(perftest ib_write_bw 8 "$BW_ITERS" -t "$BW_QD" -Q "$CQ_MOD")
                l=$(perftest ib_write_bw 8 "$BW_ITERS" -t "$BW_QD" -l "$batch")
            else
                l=$(perftest ib_write_bw 8 "$BW_ITERS" -t "$BW_QD" -l "$batch")
                p=$(perftest ib_write_bw 8 "$BW_ITERS" -t "$BW_QD" -Q "$CQ_MOD")
            fi
            lists+=("$(echo "$l" | awk '{ print $5 }')")
            plain+=("$(echo "$p" | awk '{ print $5 }')")
        done
        a=$(median "${lists[@]}") b=$(median "${plain[@]}") sp=$(spread "${lists[@]}" -- "${plain[@]}")
        printf '%-22s %10s Mpps %10s Mpps %8s  %s\n' "perftest -l $batch / -Q" "$a" "$b" "$(ratio "$a" "$b")" "$sp"
        NOTES+=("- perftest's own gain from post lists of $batch (ib_write_bw -l $batch / -Q $CQ_MOD, qd $BW_QD, 8 B, same boot): $(ratio "$a" "$b") of medians, paired $sp")
    done
    unset seen
fi

if section callgrind; then
    # ours_cg OUT QD [VALGRIND ARGS...] -- CLIENT ARGS...: our client (8-byte operations at
    # queue depth QD) under callgrind into OUT, against our server running natively in its own
    # process, as the C one: only the client is counted.
    ours_cg() {
        local out=$1 qd=$2 vg=()
        shift 2
        while [[ $1 != -- ]]; do vg+=("$1"); shift; done
        shift
        port=$((port + 1))
        "$RPMA_BIN" bench --backend verbs --server --addr "$ADDR" --port "$port" --qd "$qd" --busy-poll --timeout 300 \
            --no-progress >/tmp/rust-server.out 2>/tmp/rust-server.err &
        local rserver=$!
        sleep 1
        timeout 1800 valgrind --tool=callgrind "${vg[@]}" --callgrind-out-file="$out" "$RPMA_BIN" bench --backend verbs \
            --connect "$ADDR:$port" --size 8 --qd "$qd" --warmup 100 --timeout 300 --csv --no-progress "$@" \
            >/dev/null 2>/tmp/cg-rust.err || {
            echo "rpma bench under callgrind failed:" >&2
            cat /tmp/cg-rust.err /tmp/rust-server.err >&2
            exit 1
        }
        wait "$rserver" || { echo "rpma bench --server failed:" >&2; cat /tmp/rust-server.err >&2; exit 1; }
    }
    echo
    printf '%-10s %-9s %10s %10s %12s\n' "callgrind" "program" "post Ir" "poll Ir" "polls/compl"
    for op in read write flush send; do
        cg_c=$CG_DIR/c-$op.out cg_r=$CG_DIR/rust-$op.out
        c_run "$op" 8 "$CG_ITERS" 1 1 valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file="$cg_c" >/dev/null
        ours_cg "$cg_r" 1 --dump-instr=yes -- --op "$op" --iters "$CG_ITERS"
        # completions polled by the client: one per operation (qd 1), plus its echo for send
        compl=$((CG_ITERS + 100))
        [[ $op == send ]] && compl=$((2 * compl))
        declare -A per=()
        for prog in c rust; do
            f=$cg_c
            [[ $prog == rust ]] && f=$cg_r
            cg_sum "$f" >/tmp/cg-sum.txt
            while read -r name n ir; do
                per[$prog.$name.n]=$n per[$prog.$name.ir]=$ir
            done </tmp/cg-sum.txt
            post=$(awk -v ir="${per[$prog.post_op.ir]}" -v n="${per[$prog.post_op.n]}" 'BEGIN { if (n) printf "%.0f", ir / n }')
            poll=$(awk -v ir="${per[$prog.poll_cq.ir]}" -v n="${per[$prog.poll_cq.n]}" 'BEGIN { if (n) printf "%.0f", ir / n }')
            ppc=$(awk -v n="${per[$prog.poll_cq.n]}" -v c="$compl" 'BEGIN { printf "%.2f", n / c }')
            per[$prog.post]=$post per[$prog.poll]=$poll
            # per completion: a poll may take several (the ping-pong's send and its echo)
            per[$prog.percompl]=$(awk -v ir="${per[$prog.poll_cq.ir]}" -v c="$compl" 'BEGIN { printf "%.0f", ir / c }')
            printf '%-10s %-9s %10s %10s %12s\n' "$op" "$prog" "$post" "$poll" "$ppc"
            if [[ $op == send ]]; then
                recv=$(awk -v ir="${per[$prog.post_recv.ir]}" -v n="${per[$prog.post_recv.n]}" 'BEGIN { if (n) printf "%.0f", ir / n }')
                per[$prog.recv]=$recv
                printf '%-10s %-9s %10s %10s %12s\n' "recv" "$prog" "$recv" "-" "-"
            fi
        done
        TABLE+=("| instructions per post: $op | ${per[rust.post]} | ${per[c.post]} | $(ratio "${per[rust.post]}" "${per[c.post]}") | - |")
        TABLE+=("| instructions per poll call: $op | ${per[rust.poll]} | ${per[c.poll]} | $(ratio "${per[rust.poll]}" "${per[c.poll]}") | - |")
        if [[ $op == send ]]; then
            TABLE+=("| instructions polling per completion: $op | ${per[rust.percompl]} | ${per[c.percompl]} | $(ratio "${per[rust.percompl]}" "${per[c.percompl]}") | - |")
            TABLE+=("| instructions per post: recv | ${per[rust.recv]} | ${per[c.recv]} | $(ratio "${per[rust.recv]}" "${per[c.recv]}") | - |")
        fi
        unset per
    done
    # The whole client, per operation, in the message-rate run (writes at BW_QD, CQ_MOD): its
    # instructions over CG_ITERS operations more (two runs, N and 2N operations: what is done
    # once, the set-up, cancels), the harness's loop and bookkeeping included, in both programs.
    # cg_total FILE: the instructions a callgrind output file counted.
    cg_total() { awk '/^(summary|totals):/ { print $2; exit }' "$1"; }
    declare -A tot=()
    for n in "$CG_ITERS" "$((2 * CG_ITERS))"; do
        c_run write 8 "$n" "$BW_QD" "$CQ_MOD" valgrind --tool=callgrind --callgrind-out-file="$CG_DIR/c-rate-$n.out" >/dev/null
        ours_cg "$CG_DIR/rust-rate-$n.out" "$BW_QD" -- --op write --iters "$n" --cq-mod "$CQ_MOD"
        tot[c.$n]=$(cg_total "$CG_DIR/c-rate-$n.out") tot[rust.$n]=$(cg_total "$CG_DIR/rust-rate-$n.out")
    done
    for prog in c rust; do
        tot[$prog]=$(awk -v a="${tot[$prog.$CG_ITERS]}" -v b="${tot[$prog.$((2 * CG_ITERS))]}" -v n="$CG_ITERS" \
            'BEGIN { printf "%.0f", (b - a) / n }')
        printf '%-10s %-9s %10s %10s %12s\n' "rate qd$BW_QD" "$prog" "${tot[$prog]}" "(per op," "whole client)"
    done
    TABLE+=("| instructions per operation, whole client, write rate qd $BW_QD | ${tot[rust]} | ${tot[c]} | $(ratio "${tot[rust]}" "${tot[c]}") | - |")
    unset tot
fi

if section setup; then
    echo
    printf '%-22s %14s %14s %8s  %s\n' "connection setup" "rpma-rs" "C librpma" "ratio" "paired ratio: median [min..max]"
    lat_m=() lat_c=() rate_m=() rate_c=()
    for ((round = 0; round < REPEAT; round++)); do
        if ((round % 2)); then
            c=$(c_run connect 0 "$SETUP_ITERS" 1 1)
            m=$(ours_setup "$SETUP_ITERS")
        else
            m=$(ours_setup "$SETUP_ITERS")
            c=$(c_run connect 0 "$SETUP_ITERS" 1 1)
        fi
        lat_m+=("$(col "$m" 13)") lat_c+=("$(field "$c" p50_ns)")
        rate_m+=("$(col "$m" 20)") rate_c+=("$(field "$c" msg_rate)")
    done
    a=$(median "${lat_m[@]}") b=$(median "${lat_c[@]}") sp=$(spread "${lat_m[@]}" -- "${lat_c[@]}")
    printf '%-22s %11s ns %11s ns %8s  %s\n' "setup p50" "$a" "$b" "$(ratio "$a" "$b")" "$sp"
    TABLE+=("| connection setup p50: connect, established, disconnect, closed, delete (ns) | $a | $b | $(ratio "$a" "$b") | $sp |")
    a=$(median "${rate_m[@]}") b=$(median "${rate_c[@]}") sp=$(spread "${rate_m[@]}" -- "${rate_c[@]}")
    printf '%-22s %8.1f conn/s %8.1f conn/s %8s  %s\n' "setup rate" "$a" "$b" "$(ratio "$a" "$b")" "$sp"
    TABLE+=("| connection setup rate (connections/s) | $(printf '%.1f' "$a") | $(printf '%.1f' "$b") | $(ratio "$a" "$b") | $sp |")
fi

CTABLE=()
if section capi; then
    [[ -f $CAPI_DIR/librpma.so.0 ]] || { echo "CAPI_DIR=$CAPI_DIR holds no librpma.so.0" >&2; exit 1; }
    OURS_C=(env LD_LIBRARY_PATH="$CAPI_DIR" RPMA_BACKEND=verbs)
    # The C program must load ours under OURS_C (it reads RPMA_BACKEND; Debian's does not).
    if RPMA_BACKEND=bogus LD_LIBRARY_PATH="$CAPI_DIR" "$C_BIN" client "$ADDR" 1 write 8 1 1 1 >/tmp/capi-probe.out 2>&1 \
        || ! grep -q "unknown backend" /tmp/capi-probe.out; then
        echo "librpma_bench does not load $CAPI_DIR/librpma.so.0:" >&2
        cat /tmp/capi-probe.out >&2
        exit 1
    fi
    # capi_rounds OP ITERS QD CQMOD FIELD: REPEAT rounds of the C program on ours and on
    # Debian's, alternating which goes first; sets `a` and `b` (medians) and `sp` (the spread).
    capi_rounds() {
        local op=$1 iters=$2 qd=$3 cqmod=$4 key=$5 round o d
        mine=() theirs=()
        for ((round = 0; round < REPEAT; round++)); do
            if ((round % 2)); then
                C_ENV=() d=$(c_run "$op" 8 "$iters" "$qd" "$cqmod")
                C_ENV=("${OURS_C[@]}") o=$(c_run "$op" 8 "$iters" "$qd" "$cqmod")
            else
                C_ENV=("${OURS_C[@]}") o=$(c_run "$op" 8 "$iters" "$qd" "$cqmod")
                C_ENV=() d=$(c_run "$op" 8 "$iters" "$qd" "$cqmod")
            fi
            C_ENV=()
            mine+=("$(field "$o" "$key")")
            theirs+=("$(field "$d" "$key")")
        done
        a=$(median "${mine[@]}") b=$(median "${theirs[@]}") sp=$(spread "${mine[@]}" -- "${theirs[@]}")
    }
    echo
    printf '%-22s %14s %14s %8s  %s
' "C program (8 B)" "on rpma-capi" "on librpma" "ratio" "paired ratio: median [min..max]"
    capi_ops=(read write write-flush send)
    for op in "${capi_ops[@]}"; do
        capi_rounds "$op" "$LAT_ITERS" 1 1 p50_ns
        printf '%-22s %11s ns %11s ns %8s  %s
' "$op lat p50 qd1" "$a" "$b" "$(ratio "$a" "$b")" "$sp"
        CTABLE+=("| $op latency p50, qd 1 (ns) | $a | $b | $(ratio "$a" "$b") | $sp |")
    done
    capi_rounds write "$BW_ITERS" "$BW_QD" "$CQ_MOD" msg_rate
    printf '%-22s %10.0f op/s %10.0f op/s %8s  %s
' "write rate qd$BW_QD" "$a" "$b" "$(ratio "$a" "$b")" "$sp"
    CTABLE+=("| write message rate, qd $BW_QD (op/s) | $(printf '%.0f' "$a") | $(printf '%.0f' "$b") | $(ratio "$a" "$b") | $sp |")
    echo
    printf '%-10s %-9s %10s %10s
' "callgrind" "library" "post Ir" "poll Ir"
    cg_ops=(read write flush send)
    # CAPI_CALLGRIND=0: timings only (callgrind under the one-thread icount guest is slow).
    if [[ ${CAPI_CALLGRIND:-1} == 0 ]]; then cg_ops=(); fi
    for op in "${cg_ops[@]}"; do
        declare -A per=()
        for lib in capi librpma; do
            f=$CG_DIR/c-$lib-$op.out
            C_ENV=()
            [[ $lib == capi ]] && C_ENV=("${OURS_C[@]}")
            c_run "$op" 8 "$CG_ITERS" 1 1 valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file="$f" >/dev/null
            C_ENV=()
            cg_sum "$f" >/tmp/cg-sum.txt
            while read -r name n ir; do
                per[$lib.$name]=$(awk -v ir="$ir" -v n="$n" 'BEGIN { if (n) printf "%.0f", ir / n }')
            done </tmp/cg-sum.txt
            printf '%-10s %-9s %10s %10s
' "$op" "$lib" "${per[$lib.post_op]}" "${per[$lib.poll_cq]}"
        done
        CTABLE+=("| instructions per post: $op | ${per[capi.post_op]} | ${per[librpma.post_op]} | $(ratio "${per[capi.post_op]}" "${per[librpma.post_op]}") | - |")
        CTABLE+=("| instructions per poll call: $op | ${per[capi.poll_cq]} | ${per[librpma.poll_cq]} | $(ratio "${per[capi.poll_cq]}" "${per[librpma.poll_cq]}") | - |")
        unset per
    done
    echo
    echo "| the same C program (Soft-RoCE in QEMU TCG$CLOCK, medians of $REPEAT rounds) | on rpma-capi's librpma.so | on C librpma | ratio of medians | paired ratio: median [min..max] |"
    echo "|---|---|---|---|---|"
    printf '%s\n' "${CTABLE[@]}"
fi

if ((${#TABLE[@]})); then
    echo
    echo "| metric (Soft-RoCE in QEMU TCG$CLOCK, medians of $REPEAT rounds) | rpma-rs | C librpma 1.2 | rpma-rs / C, of medians | paired ratio: median [min..max] |"
    echo "|---|---|---|---|---|"
    printf '%s\n' "${TABLE[@]}"
    if ((${#NOTES[@]})); then
        echo
        printf '%s\n' "${NOTES[@]}"
    fi
fi

#!/usr/bin/env bash
# scripts/test-cluster.sh [--long] [--broken RULE]: rpma-rs across real links, on a cluster of four
# Soft-RoCE guests (scripts/softroce/cluster.sh), for each profile (CLUSTER_PROFILES, default
# "debian12 debian13"):
#   1. every scenario with its server on node 1 and its clients on nodes 2 and 3; C librpma
#      across nodes both ways (example 05's flow on the NVDIMM: a C server and `rpma client`,
#      `rpma server --pmem` and a C client);
#   2. packet loss of 1 % and 5 %, and 10 ms delay with reordering, on both ends: write-to-persistent
#      checks its bytes (the ping-pong and the atomic write too with CLUSTER_LOSSY_SCENARIOS=1), and
#      `rpma bench` reports the rate and the p50/p99 latency of write + flush and of the send
#      ping-pong against the lossless link (on debian13 the ping-pong's only: rxe's native flush
#      fails under loss);
#   3. a link pulled, or two nodes partitioned, during a stream of writes: what each side reports,
#      and after how long, through the Rust API (sync and async) and the C library (rpma-capi's
#      librpma.so against the guest's C librpma);
#   4. rpma-log with three replicas on nodes 1-3 (NVDIMM) and writers on node 4 (and node 1 after
#      a failover) under a nemesis (scripts/lib/nemesis.sh): partitions, one-way partitions,
#      power cuts of one node and of two at once, packet loss, a replica that forgets, writer
#      failovers; a checker over the recorded history (every acknowledged entry in every later
#      recovery, never two entries acknowledged at one lsn, liveness). Last line per profile:
#      `cluster: nodes N, partitions P, power cuts C, failovers F, acknowledged A, lost L`;
#   5. failure detection and failover, measured during 4.
# --long runs 30 nemesis rounds instead of CLUSTER_ROUNDS (default 8); --broken RULE gives every
# writer one of rpma-log's rules switched off (rpma-log-power-cut cluster-write --broken) and
# inverts the verdict: the run passes only if the checker finds the loss. CLUSTER_SEED repeats a
# run's nemesis (printed); CLUSTER_EPISODES="cut1 failover ..." runs those episodes in that order
# instead (one case: CLUSTER_PARTS=4 CLUSTER_EPISODES=cut1); CLUSTER_PARTS (default "1 2 3 4")
# picks the parts; CLUSTER_BUILD=debug
# runs debug binaries (quicker to build; the bench's figures are then a debug build's);
# CLUSTER_KEEP=1 keeps the work directory for a post-mortem.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${CLUSTER_ROUNDS:-8} broken=
while [ $# -gt 0 ]; do
    case $1 in
        --long) rounds=30 ;;
        --broken) broken=${2:?--broken needs a rule}; shift ;;
        *) echo "usage: scripts/test-cluster.sh [--long] [--broken RULE]" >&2; exit 2 ;;
    esac
    shift
done
seed=${CLUSTER_SEED:-$(date +%s)}
[[ $seed =~ ^[0-9]+$ ]] || { echo "test-cluster: CLUSTER_SEED must be a number" >&2; exit 2; }
parts=${CLUSTER_PARTS:-1 2 3 4}
C=$PWD/scripts/softroce/cluster.sh

say() { echo "cluster: $*"; }
# gkill NODE PATTERN: SIGTERM to every process on NODE whose command line matches PATTERN (grep's
# basic regex; the guests of debian13 have no pkill)
gkill() {
    # shellcheck disable=SC2016 # expanded in the guest
    "$C" exec "$1" sh -c 'for p in /proc/[0-9]*; do
        [ "${p#/proc/}" != $$ ] && tr "\0" " " < "$p/cmdline" 2>/dev/null | grep -q -- "$0" && kill "${p#/proc/}" 2>/dev/null
    done; true' "$2" >/dev/null 2>&1 || true
}
fail() { echo "cluster: FAILED: $*" >&2; exit 1; }

# The binaries, copied out of cargo's reach (another cargo command on the shared target dir may
# rebuild them without the verbs feature while the guests run them).
target_dir=$(cargo metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)
top=$(git rev-parse --show-toplevel 2>/dev/null || pwd -P)
case $(cd "$target_dir" && pwd -P)/ in
    "$top"/*) ;;
    *) export SOFTROCE_RW=${SOFTROCE_RW:+$SOFTROCE_RW:}$target_dir ;;
esac
# CLUSTER_BUILD: release (default: the bench figures mean something) or debug (quicker to build)
build=${CLUSTER_BUILD:-release}
case $build in
    # (the features of every verbs build of the scripts: scripts/lib/features.sh)
    release) . scripts/lib/features.sh
             cargo build -q --release --workspace --features "$VERBS_FEATURES" --bin rpma --bin rpma-log-power-cut --lib ;;
    debug) . scripts/lib/features.sh
           cargo build -q --workspace --features "$VERBS_FEATURES" --bin rpma --bin rpma-log-power-cut --lib ;;
    *) echo "test-cluster: CLUSTER_BUILD must be release or debug" >&2; exit 2 ;;
esac
work=$(mktemp -d "$target_dir/cluster.XXXXXX")
cp "$target_dir/$build/rpma" "$target_dir/$build/rpma-log-power-cut" "$work/"
# rpma-capi's librpma.so under its SONAME, for part 3's C programs (LD_LIBRARY_PATH)
mkdir "$work/capi" && cp "$target_dir/$build/librpma.so" "$work/capi/librpma.so.0"
R=$work/rpma T=$work/rpma-log-power-cut
# shellcheck source=scripts/lib/nemesis.sh
. scripts/lib/nemesis.sh

# CLUSTER_KEEP=1 keeps the work directory (the nodes' runner logs, jobs' output, the nemesis's
# history) for a post-mortem
cleanup() {
    "$C" down >/dev/null 2>&1 || true
    if [ "${CLUSTER_KEEP:-0}" = 1 ]; then say "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# pair_start PORT SERVER_NODE 'SERVER ARGS' CLIENT_NODES 'CLIENT ARGS': starts `rpma server` and its
# clients on other nodes; prints what pair_end needs (the port, then "node:job" words)
pair_start() {
    local port=$1 sn=$2 sargs=$3 cns=$4 cargs=$5 n jobs
    # shellcheck disable=SC2086 # the argument strings are split on purpose
    jobs="$port $sn:$("$C" spawn "$sn" $R server --addr "$("$C" addr "$sn")" --port "$port" $sargs)"
    for n in $cns; do
        # shellcheck disable=SC2086
        jobs+=" $n:$("$C" spawn "$n" ${PAIR_TIMEOUT:+timeout "$PAIR_TIMEOUT"} $R client --addr "$("$C" addr "$sn")" --port "$port" --retries 200 --retry-delay 100 $cargs)"
    done
    echo "$jobs"
}
# pair_end JOBS: every process of the pair must exit 0 (their output is shown when one does not);
# the server is stopped if a client failed (it would wait for that client for ever)
pair_end() {
    local port j out ok=0 server
    read -r port server j <<< "$1"
    for j in $j; do
        out=$("$C" wait "${j%%:*}" "${j#*:}" 2>&1) || { ok=1; echo "$out" | sed "s/^/  node ${j%%:*}: /" >&2; }
    done
    [ "$ok" = 0 ] || gkill "${server%%:*}" "server --addr [^ ]* --port $port "
    out=$("$C" wait "${server%%:*}" "${server#*:}" 2>&1) && return "$ok"
    # Under loss (LOSSY=1), a lost RTU leaves the server's connection in REP_SENT: a client that
    # is done before the REP is sent again (about 4 s) disconnects first, and the server's first
    # event is CLOSED, not ESTABLISHED (C librpma's rpma_conn_next_event answers the same).
    # The client checked its bytes; the server's side is counted, not failed.
    if [ "$ok" = 0 ] && [ "${LOSSY:-0}" = 1 ] && grep -q "unexpected event: Connection closed" <<< "$out"; then
        LOST_RTU=$((LOST_RTU + 1)); return 0
    fi
    [ "$ok" = 1 ] || echo "$out" | sed "s/^/  node ${server%%:*}: /" >&2
    return 1
}
LOST_RTU=0
pair() { pair_end "$(pair_start "$@")"; }

# scenarios [LABEL]: every scenario across nodes (server on node 1, clients on 2 and 3), four at
# a time
scenarios() {
    local label=${1:-} s port=7600 sargs cargs cns t0=$SECONDS n=0 batch=() names=() k
    for s in connection read-to-volatile read-to-persistent write-to-persistent flush-to-persistent \
             multiple-connections atomic-write messages-ping-pong flush-to-persistent-gpspm send-with-imm \
             write-with-imm receive-completion-queue messages-ping-pong-with-srq srq-ping-pong shared-channel \
             multiple-connections-shared-channel flush-to-persistent-gpspm-shared-channel; do
        port=$((port + 1)); cns=2; cargs=
        sargs="-s $s"
        case $s in
            read-to-persistent|write-to-persistent|flush-to-persistent-gpspm*) sargs+=" --file /tmp/$s.pmem --file-create" ;;
            flush-to-persistent) sargs+=" --pmem /dev/dax0.0 --file-offset $((96 << 20))" ;;
            atomic-write) sargs+=" --pmem /dev/dax0.0 --file-offset $((100 << 20))"; cargs="--word hello --word rdma" ;;
            send-with-imm) cargs="--word msg --imm 77" ;;
            multiple-connections*|messages-ping-pong-with-srq) sargs+=" --clients 2"; cns="2 3" ;;
        esac
        batch+=("$(pair_start "$port" 1 "$sargs" "$cns" "-s $s $cargs")"); names+=("$s")
        if [ ${#batch[@]} = 4 ] || [ "$s" = flush-to-persistent-gpspm-shared-channel ]; then
            for k in "${!batch[@]}"; do
                pair_end "${batch[k]}" || fail "scenario ${names[k]} across nodes${label:+ ($label)}"
                n=$((n + 1))
            done
            batch=(); names=()
        fi
    done
    say "$PROFILE: $n scenarios across nodes passed${label:+ ($label)} in $((SECONDS - t0)) s"
}

# interop: example 05's flow between C librpma and rpma on two nodes, both ways, on the NVDIMM
interop() {
    local ex=$work/ex05-$PROFILE out sj cj
    "$C" exec 1 cc -O2 -Wall -Werror -o "$ex" tests/interop/ex05.c -lrpma -libverbs -lrdmacm ||
        fail "tests/interop/ex05.c does not build against the guest's C librpma"
    sj=$("$C" spawn 1 "$ex" server05 "$("$C" addr 1)" 7700 /dev/dax0.0 $((104 << 20)))
    out=$("$C" exec 2 $R client -s flush-to-persistent --addr "$("$C" addr 1)" --port 7700 --retries 200 --retry-delay 100 2>&1) ||
        fail "rpma client against the C server05: $out"
    out=$("$C" wait 1 "$sj" 2>&1) || fail "C server05: $out"
    grep -q "NEW Hello world!" <<< "$out" || fail "C server05 did not get the rpma client's bytes: $out"
    sj=$("$C" spawn 2 $R server -s flush-to-persistent --addr "$("$C" addr 2)" --port 7701 --pmem /dev/dax0.0 --file-offset $((104 << 20)))
    # the C client has no retries of its own: it is started again while the server is not
    # listening yet (the connection manager rejects a request for no listener)
    local try
    for try in $(seq 1 40); do
        out=$("$C" exec 1 "$ex" client05 "$("$C" addr 2)" 7701 2>&1) && break
        grep -q -i "reject\|unreachable\|refused" <<< "$out" || break
        sleep 0.5
    done
    grep -q "FLUSHED PERSISTENT" <<< "$out" || fail "C client05 against rpma server --pmem (try $try): $out"
    out=$("$C" wait 2 "$sj" 2>&1) || fail "rpma server --pmem against C client05: $out"
    grep -q 'new value "Hello from C librpma!"' <<< "$out" || fail "rpma server did not hold the C client's bytes: $out"
    say "$PROFILE: C librpma across nodes, both ways (example 05 on the NVDIMM): passed"
}

# serving NODE JOB: wait until the `rpma bench --server` job listens (a client that came first
# would be rejected: the connection manager answers a request for no listener with a reject)
serving() {
    local out t0=$SECONDS
    out=$("$C" out "$1" "$2")
    until cat "$out" "${out%.out}.err" 2>/dev/null | grep -q "serving"; do
        [ ! -e "${out%.out}.rc" ] || fail "rpma bench --server on node $1 ended: $(cat "$out" "${out%.out}.err")"
        [ $((SECONDS - t0)) -lt 60 ] || fail "rpma bench --server on node $1 did not listen within 60 s"
        sleep 0.1
    done
}

# bench LABEL: write + flush and the send ping-pong from node 2 to node 1; prints a table row
# per operation (LABEL, rate, p50 and p99 in microseconds)
bench() {
    local label=$1 port=$2 iters=$3 sj out
    # shellcheck disable=SC2086 # the knobs are split on purpose
    sj=$("$C" spawn 1 $R bench --backend verbs --server --addr "$("$C" addr 1)" --port "$port" --qd 1 --timeout 120 --no-progress $BENCH_KNOBS)
    serving 1 "$sj"
    # shellcheck disable=SC2086
    out=$("$C" exec 2 $R bench --backend verbs --connect "$("$C" addr 1):$port" --op "$BENCH_OPS" --size 64 \
        --iters "$iters" --qd 1 --timeout 120 --no-progress --csv $BENCH_KNOBS 2>&1) || fail "rpma bench ($label): $out"
    "$C" wait 1 "$sj" >/dev/null 2>&1 || fail "rpma bench --server ($label)"
    awk -F, -v l="$label" '$1 == "verbs" {
        printf "cluster: %s:   %-34s %-12s %8.0f ops/s   p50 %9.1f us   p99 %9.1f us\n", ENVIRON["PROFILE"], l, $3, $20, $13 / 1000, $15 / 1000 }' <<< "$out"
}

# loss: the scenarios that check their bytes and the bench under loss, delay and reordering
# CLUSTER_BENCH_KNOBS: the benches' retry settings (default: an ACK timeout of 67 ms, which a lossy
# link needs: with the connection manager's default a lost packet costs about a second)
BENCH_KNOBS=${CLUSTER_BENCH_KNOBS---ack-timeout 14}
BENCH_OPS=write-flush,send
loss() {
    # On debian13 (kernel 6.12, native flush) a flush under loss fails through either library
    # (rxe's responder never answers a repeated flush, or answers it with a remote access error;
    # docs/reliability.md): there only the send ping-pong's bench runs, and no scenario.
    local flush=1
    if [ "$PROFILE" = debian13 ]; then
        flush=0 BENCH_OPS=send
        say "$PROFILE: loss: rxe's native flush fails under loss (docs/reliability.md): the send ping-pong's bench only"
    fi
    say "$PROFILE: rpma bench, node 2 -> node 1, 64 bytes, queue depth 1${BENCH_KNOBS:+, $BENCH_KNOBS}:"
    bench "lossless" 7710 300
    local cond port=7711
    # a lost connection-manager message is sent again after about 4 s: the scenarios wait longer
    # than their default 5 s for a connection's first event
    export RPMA_ESTABLISH_TIMEOUT_MS=30000 PAIR_TIMEOUT=180
    local ack=${CLUSTER_SCENARIO_ACK_TIMEOUT:-14}
    [ "$ack" = none ] || export RPMA_ACK_TIMEOUT=$ack
    for cond in "loss 1%" "loss 5%" "delay 10ms 2ms reorder 25% 50%"; do
        # shellcheck disable=SC2086
        "$C" netem 1 $cond && "$C" netem 2 $cond && "$C" netem 3 $cond
        # The scenarios that check their bytes, with an ACK timeout of 67 ms on both sides
        # (RPMA_ACK_TIMEOUT, read by the scenarios; CLUSTER_SCENARIO_ACK_TIMEOUT=none keeps the
        # connection manager's), each client bounded by PAIR_TIMEOUT: write-to-persistent (write,
        # flush, read back) always; the send ping-pong and the atomic write only with
        # CLUSTER_LOSSY_SCENARIOS=1. Under loss rxe's requester sometimes stops for good before
        # a work request marked IBV_SEND_FENCE (debian12's atomic write: a fenced 8-byte write),
        # nothing in flight and nothing to retransmit; C librpma's atomic write stalls the same
        # way (tests/interop/ex05.c's `stream05 ... atomic`; docs/reliability.md). A ping-pong
        # client once waited for ever after its last send under 5 % loss. The bench always runs.
        local scen="write-to-persistent"
        [ "${CLUSTER_LOSSY_SCENARIOS:-0}" != 1 ] || scen+=" messages-ping-pong atomic-write"
        [ "$flush" = 1 ] || scen=
        for s in $scen; do
            local sargs="-s $s" cargs=
            case $s in
                write-to-persistent) sargs+=" --file /tmp/loss.pmem --file-create" ;;
                atomic-write) sargs+=" --pmem /dev/dax0.0 --file-offset $((100 << 20))"; cargs="--word hello --word rdma" ;;
            esac
            port=$((port + 1))
            LOSSY=1 pair "$port" 1 "$sargs" 2 "-s $s $cargs" || fail "$s with $cond"
        done
        port=$((port + 1))
        bench "$cond" "$port" "${CLUSTER_LOSSY_ITERS:-100}"
        "$C" heal
    done
    unset RPMA_ESTABLISH_TIMEOUT_MS PAIR_TIMEOUT RPMA_ACK_TIMEOUT
    BENCH_OPS=write-flush,send
    [ "$flush" = 1 ] || return 0
    local what="write-to-persistent"
    [ "${CLUSTER_LOSSY_SCENARIOS:-0}" != 1 ] || what="write-to-persistent, the send ping-pong and the atomic write"
    say "$PROFILE: loss: every client's bytes right ($what under 1 % and 5 % loss and under delay with reordering, RPMA_ACK_TIMEOUT=$ack); servers that saw CLOSED first (a lost RTU): $LOST_RTU"
}

# no_qp_left: no queue pair of an earlier client is left on node 2 (the next one is recognised by
# its RTS)
no_qp_left() {
    local t=$SECONDS
    while "$C" exec 2 sh -c 'rdma res show qp | grep -q "type RC"' >/dev/null 2>&1; do
        [ $((SECONDS - t)) -lt 90 ] || fail "an earlier RC queue pair stays on node 2"
        sleep 1
    done
}

# sever HOW / unsever HOW: node 2's cable pulled (link) or nodes 1 and 2 partitioned (partition)
# (not named `cut`: a function of that name would replace cut(1) in every script sourced here,
# scripts/lib/nemesis.sh's checker among them)
sever() { if [ "$1" = partition ]; then "$C" partition 2 1; else "$C" link 2 down; fi; }
unsever() { if [ "$1" = partition ]; then "$C" heal; else "$C" link 2 up; fi; }

# link_down PORT WAIT 'RETRY ARGS' [partition|link] [CLIENT ARGS...]: a stream of writes from node 2 to node 1 (both
# sides with RETRY ARGS: rpma bench --retry-count/--ack-timeout); node 2's cable is pulled after
# 3 s (with `partition`: nodes 1 and 2 are partitioned instead, their links up: the connection
# manager's messages then leave and go unanswered): what each side reports and when (the host's
# clock; lines are seen within 0.1 s), waiting up to WAIT seconds: the client must have ended
# by then (0: only reported, after 10 s; forever:N: the client must still be writing after N s,
# and finish its stream once the cut is undone). The client's end includes releasing its
# connection. The server (which keeps waiting for a client that went silent: rxe sends it
# nothing) is given 3 s more once the client ended. CLIENT ARGS go to the client only (--async:
# the same stream through rpma::tokio).
link_down() {
    local port=$1 wait=$2 knobs=$3 how=${4:-link} sj cj t0 tc='' ts='' out_c out_s must=1 what=
    shift $(($# < 4 ? $# : 4))
    what=$([ "$how" = partition ] && echo "partition 2|1" || echo "link down")${1:+ (client $*)}
    case $wait in
        0) must=0; wait=10 ;;
        forever:*) must=forever; wait=${wait#forever:} ;;
    esac
    # shellcheck disable=SC2086 # the knobs are split on purpose
    no_qp_left
    local t
    sj=$("$C" spawn 1 $R bench --backend verbs --server --addr "$("$C" addr 1)" --port "$port" --qd 1 --timeout 120 --no-progress $knobs)
    serving 1 "$sj"
    # shellcheck disable=SC2086
    cj=$("$C" spawn 2 $R bench --backend verbs --connect "$("$C" addr 1):$port" --op write --size 64 --duration 60 \
        --qd 1 --timeout 120 --no-progress $knobs "$@")
    # the client is connected (its queue pair in RTS) and writing, then the cable goes
    t=$SECONDS
    until "$C" exec 2 sh -c 'rdma res show qp | grep -q "type RC state RTS"' >/dev/null 2>&1; do
        [ $((SECONDS - t)) -lt 60 ] || fail "the bench client on node 2 did not connect within 60 s"
        [ ! -e "$("$C" out 2 "$cj" | sed 's/\.out$/.rc/')" ] || fail "the bench client on node 2 ended: $(cat "$("$C" out 2 "$cj" | sed 's/\.out$/.err/')")"
        sleep 0.5
    done
    sleep 2
    # (node 2's packets are dropped first: the client's writes, then its disconnect request, go
    # unanswered; a partition takes two commands in the guests, so the clock starts before them)
    t0=$EPOCHREALTIME
    sever "$how"
    out_c=$("$C" out 2 "$cj") out_s=$("$C" out 1 "$sj")
    while [ -z "$tc" ] || [ -z "$ts" ]; do
        [ -n "$tc" ] || [ ! -e "${out_c%.out}.rc" ] || tc=$EPOCHREALTIME
        [ -n "$ts" ] || [ ! -e "${out_s%.out}.rc" ] || ts=$EPOCHREALTIME
        if awk "BEGIN { exit !($EPOCHREALTIME - $t0 > $wait) }"; then break; fi
        if [ -n "$tc" ] && awk "BEGIN { exit !($EPOCHREALTIME - $tc > 3) }"; then break; fi
        sleep 0.1
    done
    unsever "$how"
    local rc_c rc_s
    rc_c=$(cat "${out_c%.out}.rc" 2>/dev/null || echo "still running after $wait s")
    rc_s=$(cat "${out_s%.out}.rc" 2>/dev/null || echo "still running after $(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $t0 }") s")
    say "$PROFILE: $what (${knobs:-defaults}): client (node 2$([ "$how" = partition ] || echo ", cable pulled")) ended ${tc:+$(awk "BEGIN { printf \"%.1f\", $tc - $t0 }") s after}, status $rc_c:"
    tail -n 2 "${out_c%.out}.err" "$out_c" 2>/dev/null | { grep -v '^==>\|^$' || true; } | sed 's/^/cluster:     /'
    say "$PROFILE: $what (${knobs:-defaults}): server (node 1) ended ${ts:+$(awk "BEGIN { printf \"%.1f\", $ts - $t0 }") s after}, status $rc_s:"
    tail -n 2 "${out_s%.out}.err" "$out_s" 2>/dev/null | { grep -v '^==>\|^$' || true; } | sed 's/^/cluster:     /'
    if grep -q "not established" "${out_c%.out}.err" 2>/dev/null; then
        fail "the client never connected: it cannot tell what a pulled link does"
    fi
    if [ "$must" = 1 ]; then
        [ -n "$tc" ] || fail "the client did not end within $wait s of the $what"
        # a pulled cable: RetryExcErr, or (kernel 6.12's rxe moves its queue pairs to the error
        # state when the port goes down) WrFlushErr; a partition leaves the port up: RetryExcErr
        local want="RetryExcErr"
        [ "$how" = partition ] || want="RetryExcErr\|WrFlushErr"
        grep -q "\($want\)" "${out_c%.out}.err" ||
            fail "the client's writes did not end with $want after the $what (status $rc_c)"
    fi
    if [ "$must" = forever ]; then
        # rxe retries a retry count of 7 for ever (its completer never counts 7 down): the queue
        # pair outlives the cut and the stream goes on once it is undone
        [ -z "$tc" ] || fail "the client ended $(awk "BEGIN { printf \"%.1f\", $tc - $t0 }") s into the $what (status $rc_c): a retry count of 7 is not for ever"
        out_c=$("$C" wait 2 "$cj" 2>&1) || fail "the client did not finish its stream after the $what was undone: $out_c"
        say "$PROFILE: $what (${knobs:-defaults}): the client finished its stream after the cut was undone"
    fi
    # the link back: a new connection works
    t=$SECONDS
    pair $((port + 1)) 1 "-s write-to-persistent --file /tmp/after.pmem --file-create" 2 "-s write-to-persistent" ||
        fail "write-to-persistent after the link came back"
    say "$PROFILE: $what: a new connection's write-to-persistent after the cut was undone took $((SECONDS - t)) s"
    gkill 1 "rpma bench"
    gkill 2 "rpma bench"
}

# c_link_down PORT HOW LIB WAIT: tests/interop/ex05.c's stream05 on node 2 writes and flushes to the
# C server05 on node 1 (the guest's C librpma) through LIB (ours: rpma-capi's librpma.so; c: the
# guest's C librpma), awaiting each completion up to WAIT s; the cable is pulled (HOW link) or
# the nodes partitioned (partition) 2 s into the stream. Prints what the C program saw and sets
# C_SAW to how it ended (WC <status> | POST | NO COMPLETION) and the connection event it saw.
c_link_down() {
    local port=$1 how=$2 lib=$3 wait=$4 sj cj t0 tc='' out env=() what
    what=$([ "$how" = partition ] && echo "partition 2|1" || echo "link down")
    [ "$lib" = c ] || env=(env "LD_LIBRARY_PATH=$work/capi" RPMA_BACKEND=verbs)
    no_qp_left
    sj=$("$C" spawn 1 "$EX" server05 "$("$C" addr 1)" "$port" /dev/dax0.0 $((108 << 20)))
    out=$("$C" out 1 "$sj") t0=$SECONDS
    until grep -q LISTENING "$out" 2>/dev/null; do
        [ ! -e "${out%.out}.rc" ] || fail "C server05 on node 1 ended: $(cat "$out" "${out%.out}.err")"
        [ $((SECONDS - t0)) -lt 60 ] || fail "C server05 on node 1 did not listen within 60 s"
        sleep 0.1
    done
    cj=$("$C" spawn 2 "${env[@]}" "$EX" stream05 "$("$C" addr 1)" "$port" "$wait")
    out=$("$C" out 2 "$cj") t0=$SECONDS
    until grep -q STREAMING "$out" 2>/dev/null; do
        [ ! -e "${out%.out}.rc" ] || fail "C stream05 ($lib) on node 2 ended: $(cat "$out" "${out%.out}.err")"
        [ $((SECONDS - t0)) -lt 60 ] || fail "C stream05 ($lib) on node 2 did not stream within 60 s"
        sleep 0.1
    done
    sleep 2
    t0=$EPOCHREALTIME
    sever "$how"
    while [ ! -e "${out%.out}.rc" ]; do
        awk "BEGIN { exit !($EPOCHREALTIME - $t0 > $wait + 40) }" && break
        sleep 0.1
    done
    [ -e "${out%.out}.rc" ] && tc=$EPOCHREALTIME
    unsever "$how"
    gkill 1 "server05 [^ ]* $port "
    "$C" wait 1 "$sj" >/dev/null 2>&1 || true
    [ -n "$tc" ] || fail "C stream05 ($lib) did not end within $((wait + 40)) s of the $what (its release hangs?)"
    say "$PROFILE: $what, the C library's face ($([ "$lib" = c ] && echo "the guest's C librpma" || echo "rpma-capi's librpma.so"), each completion awaited up to $wait s): stream05 ended $(awk "BEGIN { printf \"%.1f\", $tc - $t0 }") s after, status $(cat "${out%.out}.rc"):"
    grep -v "^STREAMING" "$out" | sed 's/^/cluster:     /'
    grep -q "^DELETED" "$out" || fail "C stream05 ($lib) did not release its connection: $(cat "$out" "${out%.out}.err")"
    C_SAW=$(grep -o "^WC [A-Za-z ]*\|^POST\|^NO COMPLETION" "$out" | head -n 1 | sed 's/ *$//')
    [ -n "$C_SAW" ] || fail "C stream05 ($lib) reported no end: $(cat "$out" "${out%.out}.err")"
    C_SAW+=$(sed -n 's/^EVENT \(.*\) after .*/, then the event \1/p' "$out")
}

# c_face: the C library's face of part 3: rpma-capi's librpma.so answers as the guest's C librpma
# (the C API has no retry setting: librpma's retry count is 7, which rxe retries for ever; a pulled
# cable on kernel 6.12 flushes the queue pairs)
c_face() {
    local how theirs
    EX=$work/ex05-$PROFILE
    "$C" exec 1 cc -O2 -Wall -Werror -o "$EX" tests/interop/ex05.c -lrpma -libverbs -lrdmacm ||
        fail "tests/interop/ex05.c does not build against the guest's C librpma"
    "$C" exec 2 env "LD_LIBRARY_PATH=$work/capi" ldd "$EX" | grep -q "$work/capi/librpma.so.0" ||
        fail "stream05 does not load rpma-capi's librpma.so.0 from $work/capi"
    for how in link partition; do
        c_link_down 7780 "$how" c 8; theirs=$C_SAW
        c_link_down 7782 "$how" ours 8
        if [ "$C_SAW" != "$theirs" ] && [ "$how" = link ]; then
            # kernel 6.12's rxe flushes a queue pair when its port goes down, or leaves it
            # retrying, from one pull to the next (whichever library): both again, once
            say "$PROFILE: $how: the two libraries saw \"$theirs\" (C) and \"$C_SAW\" (ours): both again"
            c_link_down 7784 "$how" c 8; theirs=$C_SAW
            c_link_down 7786 "$how" ours 8
        fi
        [ "$C_SAW" = "$theirs" ] ||
            fail "$how: stream05 on rpma-capi's librpma.so saw \"$C_SAW\", on the guest's C librpma \"$theirs\""
        say "$PROFILE: $how: the C library's face: both libraries: $C_SAW"
    done
}

# the retry settings of part 3's second and third cases: about 3 * 268 ms before RetryExcErr
LINK_KNOBS="--retry-count 2 --ack-timeout 16"
rc=0
for PROFILE in ${CLUSTER_PROFILES:-debian12 debian13}; do
    # blank NVDIMMs: the nemesis's replicas that forget come back on blank regions
    export PROFILE SOFTROCE_PROFILE=$PROFILE SOFTROCE_CLUSTER=$work/$PROFILE SOFTROCE_CLUSTER_FRESH=1
    t_up=$SECONDS
    "$C" up 4
    say "$PROFILE: 4 nodes up in $((SECONDS - t_up)) s"
    for p in $parts; do
        t_part=$SECONDS
        case $p in
            1) scenarios; interop ;;
            2) loss ;;
            # (an ACK timeout of 67 ms with one retry also ended healthy connections on a loaded
            # host: a guest not scheduled for 134 ms missed its ACKs)
            3) link_down 7790 0 ""; link_down 7792 30 "$LINK_KNOBS"; link_down 7794 30 "$LINK_KNOBS" partition
               link_down 7796 30 "$LINK_KNOBS" partition --async
               link_down 7798 forever:10 "--retry-count 7 --ack-timeout 16" partition
               c_face ;;
            4) nemesis_run "$rounds" "$seed" "$broken" || rc=1 ;;
            *) fail "no part $p (CLUSTER_PARTS: 1 2 3 4)" ;;
        esac
        say "$PROFILE: part $p took $((SECONDS - t_part)) s"
    done
    "$C" down
done
exit "$rc"

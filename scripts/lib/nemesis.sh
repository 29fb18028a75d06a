# shellcheck shell=bash
# scripts/lib/nemesis.sh: part 4 of scripts/test-cluster.sh, rpma-log on a cluster under a nemesis.
# Sourced; uses the caller's C (cluster.sh), R (rpma), T (rpma-log-power-cut), PROFILE, say, fail, gkill.
#
# Replicas: `rpma log serve` on nodes 1, 2 and 3 (port 7480), each on a 32 MiB region of its
# node's NVDIMM, at offset 0; after it forgot, on the next blank region (32 or 64 MiB: the
# cluster's NVDIMMs are blank at the start, SOFTROCE_CLUSTER_FRESH=1), which it formats as a
# replacement. Writers:
# `rpma-log-power-cut cluster-write` incarnations, tagged 1, 2, ..., on node 4, or on node 1 after
# a failover (and back). Each nemesis round picks an episode (seeded), then heals and waits for a
# writer to make progress again (liveness):
#   isolate   one replica node partitioned from every other node
#   one-way   the writer's packets to one replica dropped, not the replies' direction
#   failover  the writer partitioned from the two replicas it does not share a node with; a new
#             writer opens on the other writer node; the partition heals and the old writer
#             tries to go on
#   cut1      a power cut of one replica node (restarted on its NVDIMM)
#   cut2      a power cut of two replica nodes at once (no quorum until they are back)
#   loss      5 % packet loss on the writer's node and on a replica's
#   amnesia   with the writer partitioned from replica c, replica a loses its memory (a power
#             cut, back on a blank region); then, with the writer partitioned from replica
#             b, a new writer must refuse to open from a (blank) and c (stale)
# The checker, over the history the host recorded (scripts' view: a line is seen within 0.1 s of
# being printed, so an acknowledgement the host saw before it started a writer happened before
# that writer's recovery began):
#   - every entry an incarnation acknowledged before another one was started is in that one's
#     recovery (if it opened), with the acknowledging incarnation's bytes; and in the final
#     recovery, after every fault healed, every acknowledged entry is;
#   - never two incarnations acknowledge one lsn;
#   - liveness: after each round heals, a writer acknowledges again within 90 s.

NEM_LOG_ID=0x52504d414c4f4743
NEM_PORT=7480
NEM_TIMEOUT_MS=8000
# CLUSTER_LOG_KNOBS: the writers' connection settings (default: an ACK timeout of 268 ms; with the
# connection manager's, 2.1 s on debian12, each packet a loaded link lost cost that long)
NEM_KNOBS=${CLUSTER_LOG_KNOBS---ack-timeout 16}
declare -A NEM_SLOT=()       # replica node -> the offset of its region on the NVDIMM (MiB)
declare -A NEM_OUT=()        # incarnation tag -> its stdout (on the host)
declare -A NEM_NODE=()       # incarnation tag -> its node
NEM_TAGS=0 NEM_W=0 NEM_WNODE=4 NEM_NOTE=
NEM_P=0 NEM_CUTS=0 NEM_F=0 NEM_AMNESIA=0
NEM_DETECT=() NEM_FAILOVER=() NEM_LIVE=() NEM_OPEN=() NEM_OPEN_CONNECT=()

nem_now() { echo "$EPOCHREALTIME"; }
nem_since() { awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $1 }"; }
nem_replicas() { echo "$("$C" addr 1):$NEM_PORT,$("$C" addr 2):$NEM_PORT,$("$C" addr 3):$NEM_PORT"; }
# (grep reads the whole status: with -q it would stop at node 1's line, and under pipefail the
# SIGPIPE of the status's later lines would say "not up")
nem_up() { "$C" status | grep "^node $1 .* up$" >/dev/null; }
# nem_ended TAG: the incarnation has ended: it printed ERROR (its process may linger while the
# kernel finishes releasing a connection to a dead peer), its status is written, or its node is gone
nem_ended() {
    [ -e "${NEM_OUT[$1]%.out}.rc" ] || grep -q '^ERROR ' "${NEM_OUT[$1]}" 2>/dev/null || ! nem_up "${NEM_NODE[$1]}"
}
nem_acks() { local n; n=$(grep -c "^ACK " "${NEM_OUT[$1]}" 2>/dev/null) || true; echo "${n:-0}"; }

# nem_replica I [--format]: start node I's replica on its region and wait until it serves
nem_replica() {
    local i=$1 job out t0=$SECONDS
    job=$("$C" spawn "$i" "$R" log serve --backend verbs --addr "$("$C" addr "$i")" --port "$NEM_PORT" \
        --pmem /dev/dax0.0 --file-offset $((${NEM_SLOT[$i]:-0} << 20)) --size 32M --log-id "$NEM_LOG_ID" ${2:+"$2"})
    out=$("$C" out "$i" "$job")
    until grep -q '^rpma log serve: log' "$out" 2>/dev/null; do
        if [ -e "${out%.out}.rc" ] || [ $((SECONDS - t0)) -gt 60 ]; then
            cat "$out" "${out%.out}.err" >&2 2>/dev/null
            fail "the replica on node $i did not start"
        fi
        sleep 0.1
    done
}

# nem_writer NODE [ARGS]: start an incarnation on NODE; it becomes the current writer. Records,
# for the checker, what every earlier incarnation had acknowledged by then (BEFORE lines).
nem_writer() {
    local node=$1 tag job t; shift
    NEM_TAGS=$((NEM_TAGS + 1)); tag=$NEM_TAGS
    for ((t = 1; t < tag; t++)); do
        echo "BEFORE $tag $t $(nem_start "$t") $(nem_last_ack "$t")" >> "$NEM_DIR/history"
    done
    # shellcheck disable=SC2086 # the knobs are split on purpose
    job=$("$C" spawn "$node" "$T" cluster-write "$(nem_replicas)" "$tag" "$((NEM_SEED + tag))" "$NEM_TIMEOUT_MS" \
        $NEM_KNOBS ${NEM_BROKEN:+--broken "$NEM_BROKEN"} "$@")
    NEM_OUT[$tag]=$("$C" out "$node" "$job")
    NEM_NODE[$tag]=$node
    NEM_W=$tag NEM_WNODE=$node
    echo "INC $tag node $node $*" >> "$NEM_DIR/history"
}
nem_start() { sed -n 's/^START \([0-9]*\) .*$/\1/p' "${NEM_OUT[$1]}" 2>/dev/null | head -n 1; }
nem_last_ack() { { grep '^ACK ' "${NEM_OUT[$1]}" 2>/dev/null || true; } | tail -n 1 | command cut -d' ' -f2; }

# nem_opened TAG [SECONDS]: wait until the incarnation opened (0) or ended without opening (1)
nem_opened() {
    local t0=$SECONDS
    while [ $((SECONDS - t0)) -lt "${2:-90}" ]; do
        if grep -q '^OPENED' "${NEM_OUT[$1]}" 2>/dev/null; then return 0; fi
        if nem_ended "$1"; then return 1; fi
        sleep 0.1
    done
    return 1
}

# nem_stop TAG: end an incarnation that is still running (SIGTERM to it on its node)
nem_stop() {
    nem_ended "$1" && return 0
    gkill "${NEM_NODE[$1]}" "cluster-write [^ ]* $1 "
    local t0=$SECONDS
    until nem_ended "$1" || [ $((SECONDS - t0)) -gt 20 ]; do sleep 0.1; done
}

# nem_progress: after a round healed, a writer acknowledges again (the current one, or new ones
# on the current writer node); records the time it took
nem_progress() {
    local t0; t0=$(nem_now)
    local n0; n0=$(nem_acks "$NEM_W")
    while :; do
        if nem_ended "$NEM_W"; then
            nem_up "$NEM_WNODE" || NEM_WNODE=4
            nem_writer "$NEM_WNODE"; n0=0
        fi
        if [ "$(nem_acks "$NEM_W")" -gt "$n0" ]; then break; fi
        if awk "BEGIN { exit !($EPOCHREALTIME - $t0 > 90) }"; then
            echo "LIVENESS no acknowledgement within 90 s of the heal (round $NEM_ROUND)" >> "$NEM_DIR/history"
            say "$PROFILE: round $NEM_ROUND: no progress within 90 s of the heal (liveness)"
            return 1
        fi
        sleep 0.2
    done
    NEM_LIVE+=("$(nem_since "$t0")")
}

nem_partition() { "$C" partition "$@"; NEM_P=$((NEM_P + 1)); }
nem_restart() { # NODE...: boot the nodes (in parallel) and start their replicas on their NVDIMM
    local i
    for i in "$@"; do "$C" start "$i" >&2 & done
    wait
    for i in "$@"; do
        if ! nem_up "$i"; then
            tail -n 40 "$SOFTROCE_CLUSTER/node-$i/runner.log" 2>/dev/null | sed "s/^/  node $i runner: /" >&2
            fail "node $i did not come back ($("$C" status | grep "^node $i "))"
        fi
        nem_replica "$i"
    done
}
# (not in $(...): a subshell's RANDOM does not advance this shell's, and runs must repeat by seed)
nem_pick() { NEM_R=$((1 + RANDOM % 3)); }                 # a replica node
nem_sleep() { sleep "$((2 + RANDOM % 4)).$((RANDOM % 10))"; }   # an episode's length, 2 to 6 s

ep_isolate() {
    local r j; nem_pick; r=$NEM_R
    for j in 1 2 3 4; do [ "$j" = "$r" ] || nem_partition "$r" "$j"; done
    nem_sleep; "$C" heal
    NEM_NOTE="isolate node $r"
}
ep_one_way() {
    local r; nem_pick; r=$NEM_R
    [ "$r" != "$NEM_WNODE" ] || r=$((r % 3 + 1))
    nem_partition "$NEM_WNODE" "$r" --one-way
    nem_sleep; "$C" heal
    NEM_NOTE="one-way $NEM_WNODE -> $r"
}
ep_failover() {
    local old=$NEM_W from=$NEM_WNODE to t0 j n open=
    to=$([ "$from" = 4 ] && echo 1 || echo 4)
    for j in 2 3; do nem_partition "$from" "$j"; done
    # the clock starts once the old writer is cut off (each filter is a command in a guest)
    t0=$(nem_now)
    sleep 0.5
    nem_writer "$to"
    # the first acknowledgement of a new writer on the other node, the partition still in place
    # (one that could not open is followed by another)
    n=$SECONDS
    until [ "$(nem_acks "$NEM_W")" -gt 0 ] || [ $((SECONDS - n)) -gt 90 ]; do
        ! nem_ended "$NEM_W" || nem_writer "$to"
        sleep 0.1
    done
    if [ "$(nem_acks "$NEM_W")" != 0 ]; then
        NEM_FAILOVER+=("$(nem_since "$t0")")
        # the new writer's open on its own clock (a new process's: no standby, the epoch
        # unknown), from its line `OPEN head H next N epoch E took_us U (connect C ...)`
        local line re='^OPEN head ([0-9]+) next ([0-9]+) .* took_us ([0-9]+) \((connect ([0-9]+)[^)]*)\)'
        line=$(grep -m1 '^OPEN ' "${NEM_OUT[$NEM_W]}" || true)
        if [[ $line =~ $re ]]; then
            NEM_OPEN+=("$(awk -v u="${BASH_REMATCH[3]}" 'BEGIN { printf "%.1f", u / 1000 }')")
            NEM_OPEN_CONNECT+=("$(awk -v u="${BASH_REMATCH[5]}" 'BEGIN { printf "%.1f", u / 1000 }')")
            open="; its open of entries ${BASH_REMATCH[1]}..${BASH_REMATCH[2]}: ${BASH_REMATCH[3]} us (${BASH_REMATCH[4]})"
        fi
    fi
    sleep 1
    "$C" heal
    # the old writer tries to go on: it must be refused (it ends) or, if it still acknowledges,
    # the checker sees two writers at one lsn
    n=$SECONDS
    until nem_ended "$old" || [ $((SECONDS - n)) -gt 30 ]; do sleep 0.1; done
    nem_ended "$old" || nem_stop "$old"
    NEM_F=$((NEM_F + 1))
    NEM_NOTE="failover node $from (writer $old) -> node $to (writer $NEM_W$open)"
}
ep_cut1() {
    local r t0 line; nem_pick; r=$NEM_R
    local tag=$NEM_W seen
    seen=$(grep -c "^HEALTH $((r - 1)) Down" "${NEM_OUT[$tag]}" 2>/dev/null || true)
    "$C" kill "$r"; NEM_CUTS=$((NEM_CUTS + 1))
    t0=$(nem_now)
    # the writer's report of the replica down (if it is still writing on another node)
    if [ "${NEM_NODE[$tag]}" != "$r" ]; then
        local n=$SECONDS
        while [ $((SECONDS - n)) -lt 30 ] && ! nem_ended "$tag"; do
            line=$(grep -c "^HEALTH $((r - 1)) Down" "${NEM_OUT[$tag]}" 2>/dev/null || true)
            if [ "$line" -gt "$seen" ]; then NEM_DETECT+=("$(nem_since "$t0")"); break; fi
            sleep 0.1
        done
    fi
    nem_sleep
    nem_restart "$r"
    NEM_NOTE="power cut of node $r"
}
ep_cut2() {
    local a b; nem_pick; a=$NEM_R; b=$(( (a + RANDOM % 2) % 3 + 1 ))
    "$C" kill "$a" & "$C" kill "$b" & wait
    NEM_CUTS=$((NEM_CUTS + 2))
    nem_sleep
    nem_restart "$a" "$b"
    NEM_NOTE="power cut of nodes $a and $b"
}
ep_loss() {
    local r; nem_pick; r=$NEM_R
    "$C" netem "$NEM_WNODE" loss 5%; [ "$r" = "$NEM_WNODE" ] || "$C" netem "$r" loss 5%
    nem_sleep; "$C" heal
    NEM_NOTE="5 % loss on nodes $NEM_WNODE and $r"
}
ep_amnesia() {
    if [ "$NEM_WNODE" != 4 ]; then ep_failover; fi
    local a b c perm
    perm=("1 2 3" "1 3 2" "2 1 3" "2 3 1" "3 1 2" "3 2 1")
    read -r a b c <<< "${perm[RANDOM % 6]}"
    if [ "${NEM_SLOT[$a]:-0}" -ge 64 ]; then ep_failover; return; fi   # no blank region left on a
    nem_partition 4 "$c"
    local n0; n0=$(nem_acks "$NEM_W") t=$SECONDS
    until [ "$(nem_acks "$NEM_W")" -ge $((n0 + 3)) ] || nem_ended "$NEM_W" || [ $((SECONDS - t)) -gt 30 ]; do sleep 0.1; done
    "$C" kill "$a"; NEM_CUTS=$((NEM_CUTS + 1))
    "$C" start "$a" >/dev/null || fail "node $a did not come back"
    NEM_SLOT[$a]=$(( ${NEM_SLOT[$a]:-0} + 32 ))
    nem_replica "$a"
    # the writer has one replica it may use (b): it fails within its timeout
    t=$SECONDS
    until nem_ended "$NEM_W" || [ $((SECONDS - t)) -gt 60 ]; do sleep 0.1; done
    nem_stop "$NEM_W"
    "$C" heal
    nem_partition 4 "$b"
    nem_writer 4
    local verdict=refused
    if nem_opened "$NEM_W" 60; then verdict=opened; fi
    echo "AMNESIA $NEM_W $verdict" >> "$NEM_DIR/history"
    nem_stop "$NEM_W"
    "$C" heal
    NEM_AMNESIA=$((NEM_AMNESIA + 1))
    NEM_NOTE="amnesia of node $a (stale $c, unreachable $b): the writer $verdict"
}

# nem_check: the checker over the history; prints its verdict, sets NEM_ACKED, NEM_LOST,
# NEM_CONFLICTS, NEM_BAD
nem_check() {
    local t s a
    : > "$NEM_DIR/acks"
    for ((t = 1; t <= NEM_TAGS; t++)); do
        s=$(nem_start "$t"); a=$(nem_last_ack "$t")
        [ -z "$s" ] || [ -z "$a" ] || echo "$t $s $a" >> "$NEM_DIR/acks"
        { grep -E '^(RUN|BAD) ' "${NEM_OUT[$t]}" 2>/dev/null || true; } | sed "s/^/$t /" >> "$NEM_DIR/runs"
    done
    NEM_ACKED=$(awk '{ n += $3 - $2 } END { print n + 0 }' "$NEM_DIR/acks")
    # two incarnations acknowledging one lsn
    NEM_CONFLICTS=$(awk '{ s[NR] = $2; a[NR] = $3; t[NR] = $1 }
        END { for (i = 1; i <= NR; i++) for (j = i + 1; j <= NR; j++) {
                  lo = s[i] > s[j] ? s[i] : s[j]; hi = a[i] < a[j] ? a[i] : a[j]
                  if (lo < hi) { n += hi - lo; printf "CONFLICT writers %d and %d both acknowledged lsns %d..%d\n", t[i], t[j], lo, hi > "/dev/stderr" } }
              print n + 0 }' "$NEM_DIR/acks")
    # every acknowledgement seen before an incarnation started is in its recovery, if it opened
    # (history: BEFORE U T start lastack; runs: U RUN a b T; opened: U)
    : > "$NEM_DIR/opened"
    for ((t = 1; t <= NEM_TAGS; t++)); do
        ! grep -q '^OPENED' "${NEM_OUT[$t]}" 2>/dev/null || echo "$t" >> "$NEM_DIR/opened"
    done
    NEM_LOST=$(awk 'FILENAME == ARGV[1] && $1 == "BEFORE" && NF == 5 && $5 > $4 { nb++; bu[nb] = $2; bt[nb] = $3; bs[nb] = $4; ba[nb] = $5 }
        FILENAME == ARGV[2] && $2 == "RUN" { nr++; ru[nr] = $1; ra[nr] = $3; rb[nr] = $4; rt[nr] = $5 }
        FILENAME == ARGV[3] { did[$1] = 1 }
        END {
            for (i = 1; i <= nb; i++) {
                u = bu[i]; if (!(u in did)) continue
                cov = 0
                for (k = 1; k <= nr; k++) if (ru[k] == u && rt[k] == bt[i]) {
                    lo = ra[k] > bs[i] ? ra[k] : bs[i]; hi = rb[k] < ba[i] ? rb[k] : ba[i]; if (lo < hi) cov += hi - lo }
                miss = ba[i] - bs[i] - cov
                if (miss > 0) {
                    printf "LOST writer %d acknowledged lsns %d..%d; the recovery of writer %d lacks %d of them\n", bt[i], bs[i], ba[i], u, miss > "/dev/stderr"
                    if (miss > lost[bt[i]]) lost[bt[i]] = miss }
            }
            for (t in lost) n += lost[t]; print n + 0 }
        ' "$NEM_DIR/history" "$NEM_DIR/runs" "$NEM_DIR/opened")
    NEM_BAD=$(awk '$2 == "BAD"' "$NEM_DIR/runs" | wc -l)
}

nemesis_run() {
    local rounds=$1 seed=$2 broken=$3 round what
    NEM_SEED=$seed NEM_BROKEN=$broken
    NEM_DIR=$work/nemesis-$PROFILE
    mkdir -p "$NEM_DIR"; : > "$NEM_DIR/history"; : > "$NEM_DIR/runs"
    RANDOM=$seed
    say "$PROFILE: rpma-log under a nemesis: seed $seed (CLUSTER_SEED=$seed repeats it), $rounds rounds${broken:+, writers with $broken switched off}"
    local i
    for i in 1 2 3; do NEM_SLOT[$i]=0; nem_replica "$i" --format; done
    nem_writer 4
    nem_opened "$NEM_W" 60 || fail "the first writer did not open: $(cat "${NEM_OUT[$NEM_W]}")"
    local live=0 episodes=(isolate one_way failover cut1 cut2 loss amnesia) chosen=()
    # CLUSTER_EPISODES: the rounds' episodes, in order (one case: CLUSTER_EPISODES=cut1)
    if [ -n "${CLUSTER_EPISODES:-}" ]; then
        read -r -a chosen <<< "$CLUSTER_EPISODES"
        for what in "${chosen[@]}"; do
            [[ " ${episodes[*]} " == *" $what "* ]] || fail "CLUSTER_EPISODES: no episode $what (${episodes[*]})"
        done
        rounds=${#chosen[@]}
        say "$PROFILE: the rounds' episodes: ${chosen[*]} (CLUSTER_EPISODES)"
    fi
    for ((NEM_ROUND = 1; NEM_ROUND <= rounds; NEM_ROUND++)); do
        if [ ${#chosen[@]} -gt 0 ]; then what=${chosen[NEM_ROUND - 1]}
        elif [ "$NEM_ROUND" = 1 ] && [ -n "$broken" ]; then what=amnesia
        elif [ "$NEM_ROUND" = 2 ]; then what=amnesia          # at least once in every run
        elif [ "$NEM_ROUND" = 3 ]; then what=failover
        else what=${episodes[RANDOM % ${#episodes[@]}]}; fi
        local t0=$SECONDS
        "ep_$what"
        nem_progress || live=1
        say "$PROFILE: round $NEM_ROUND: $NEM_NOTE; writer $NEM_W on node $NEM_WNODE acknowledging again ($((SECONDS - t0)) s)"
    done
    # the end: stop the writer, heal, every node and replica up, then a final recovery that checks
    nem_stop "$NEM_W"
    "$C" heal
    for i in 1 2 3; do nem_up "$i" || nem_restart "$i"; done
    # (a loaded host may make an open run out of its 8 s timeouts: up to three writers try, as a
    # user would; each that fails is shown)
    local try
    for try in 1 2 3; do
        nem_writer 4 --check-only
        nem_opened "$NEM_W" 120 && break
        cat "${NEM_OUT[$NEM_W]}" "${NEM_OUT[$NEM_W]%.out}.err" >&2
        [ "$try" -lt 3 ] || fail "the final recovery did not open (3 writers tried)"
        say "$PROFILE: the final recovery's writer $NEM_W did not open (above); another tries"
        nem_stop "$NEM_W"
    done
    nem_check
    local med
    # med UNIT VALUE...
    med() { local u=$1; shift; printf '%s\n' "$@" | sort -n | awk -v u="$u" 'NF { v[++n] = $1 } END { if (n) printf "min %s, median %s, max %s %s (%d)", v[1], v[int((n + 1) / 2)], v[n], u, n; else printf "none" }'; }
    say "$PROFILE: a replica's node powered off -> the writer reports it down: $(med s "${NEM_DETECT[@]}")"
    say "$PROFILE: writer partitioned -> the new writer's first acknowledged sync: $(med s "${NEM_FAILOVER[@]}")"
    say "$PROFILE: the new writer's open (a new process: no standby, the epoch unknown): $(med ms "${NEM_OPEN[@]}"), of which connect $(med ms "${NEM_OPEN_CONNECT[@]}")"
    say "$PROFILE: a round healed -> a writer acknowledges again: $(med s "${NEM_LIVE[@]}")"
    say "$PROFILE: writers $NEM_TAGS, conflicts $NEM_CONFLICTS, bad entries $NEM_BAD, amnesia refused $(grep -c '^AMNESIA .* refused' "$NEM_DIR/history") of $NEM_AMNESIA"
    echo "cluster: nodes 4, partitions $NEM_P, power cuts $NEM_CUTS, failovers $NEM_F, acknowledged $NEM_ACKED, lost $NEM_LOST"
    # a checker that saw no acknowledgement proved nothing
    [ "$NEM_ACKED" -gt 0 ] || { say "$PROFILE: FAILED: no writer's acknowledgement reached the checker"; return 1; }
    local violated=0
    [ "$NEM_LOST" = 0 ] && [ "$NEM_CONFLICTS" = 0 ] && [ "$NEM_BAD" = 0 ] || violated=1
    if [ -n "$broken" ]; then
        [ "$violated" = 1 ] || { say "$PROFILE: FAILED: the writers with $broken switched off lost nothing the checker saw"; return 1; }
        say "$PROFILE: the checker caught the writers with $broken switched off (seed $seed)"
        return 0
    fi
    [ "$violated" = 0 ] && [ "$live" = 0 ]
}

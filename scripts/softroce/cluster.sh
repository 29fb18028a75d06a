#!/usr/bin/env bash
# scripts/softroce/cluster.sh COMMAND [ARGS...]: a cluster of Soft-RoCE guests on a link of their
# own, and the faults the host injects into it (scripts/softroce/README.md, "A cluster of guests").
#
#   up N                 boot nodes 1..N in parallel (one profile, SOFTROCE_PROFILE) and wait
#                        until each runs its agent; node i is 10.78.0.i on the link, rxe0 on eth0
#   exec I CMD [ARGS]    run CMD on node I as root (the current directory, the host's exported
#                        environment, RPMA_TEST_ADDR = the node's address, CLUSTER_NODE = I,
#                        CLUSTER_ADDRS = every node's address), stream its output, exit with its
#                        status (125: the node went down before CMD ended)
#   spawn I CMD [ARGS]   start CMD on node I in the background; prints its job id
#   wait I JOB           wait for a spawned job: its output, its status (as exec)
#   out I JOB            the path of a job's stdout (to follow it: tail -F)
#   link I down|up       pull or plug node I's cable (QEMU's set_link: the guest loses carrier)
#   netem I ARGS|off     `tc qdisc replace dev eth0 root netem ARGS` on node I (loss 5%, delay
#                        10ms 2ms reorder 25% ...), or remove it
#   partition I J [--one-way]  drop every IP packet from I to J (and from J to I), leaving the
#                        other nodes connected (a drop filter on the receiver's eth0 ingress,
#                        clsact + u32: packets leave their sender as on a wire that loses them; a
#                        drop at the sender's egress would fail rxe's transmit, which rxe then
#                        retries for ever without counting a retry)
#   heal [I]             remove the drop filters and netem of node I (of every node running)
#   kill I               a power cut of node I alone: SIGKILL of its QEMU (its NVDIMM file keeps
#                        what reached it)
#   start I              boot node I again (after kill), on the same NVDIMM file; the jobs the
#                        cut ended have status 137
#   addr I               node I's address
#   status               one line per node: up, down or booting
#   down                 power every node off, stop the link
#
# Knobs: SOFTROCE_CLUSTER (the cluster's directory: state, jobs' output, the link's socket;
# default ${TMPDIR:-/tmp}/rpma-cluster), SOFTROCE_CLUSTER_NET (the link's /24, default 10.78.0),
# SOFTROCE_PMEM (each node's NVDIMM, default 128M, on its own file
# $SOFTROCE_CACHE/pmem-cluster-PROFILE-I.img; SOFTROCE_PMEM=none for none; SOFTROCE_CLUSTER_FRESH=1:
# blank ones, the files made again by `up`), SOFTROCE_MEM (per
# node, default 1G), SOFTROCE_BOOT_TIMEOUT (default 300 s per node), CLUSTER_JOB_TIMEOUT (exec and
# wait give up after it, default 1800 s), and the other SOFTROCE_* knobs of run.sh, which every
# node gets (SOFTROCE_ACCEL, SOFTROCE_PROFILE, ...). A node's runner log is
# $SOFTROCE_CLUSTER/node-I/runner.log; its QEMU monitor's answers are node-I/mon.log.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
LIB=$HERE/lib
# shellcheck source=lib/common.sh
. "$LIB/common.sh"
# shellcheck source=lib/host.sh
. "$LIB/host.sh"
PROG=cluster

DIR=${SOFTROCE_CLUSTER:-${TMPDIR:-/tmp}/rpma-cluster}
NET=${SOFTROCE_CLUSTER_NET:-10.78.0}
[[ $NET =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || die "bad SOFTROCE_CLUSTER_NET '$NET' (three octets, e.g. 10.78.0)"
PROFILE=${SOFTROCE_PROFILE:-debian12}
CACHE=${SOFTROCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rpma-rs/softroce}
JOB_TIMEOUT=${CLUSTER_JOB_TIMEOUT:-1800}

nodes() { cat "$DIR/nodes" 2>/dev/null || echo 0; }
addr() { echo "$NET.$1"; }
# node_dir I: node I's directory, after checking I names a node of the cluster
node_dir() {
    local n; n=$(nodes)
    [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le "$n" ] ||
        die "no node '$1' (the cluster in $DIR has nodes 1..$n; cluster.sh up N first)"
    echo "$DIR/node-$1"
}
# running I: node I's QEMU is alive
running() {
    local d=$DIR/node-$1 pid
    pid=$(cat "$d/qemu.pid" 2>/dev/null) || return 1
    kill -0 "$pid" 2>/dev/null
}
# up_ready I: node I runs its agent
up_ready() { running "$1" && [ -e "$DIR/node-$1/ready" ]; }

# boot I: start node I's runner (run.sh with the agent as its command), detached
boot() {
    local i=$1 d=$DIR/node-$1
    if running "$i"; then die "node $i is running (cluster.sh kill $i first)"; fi
    rm -f "$d/ready" "$d/stop" "$d/qemu.pid"
    mkdir -p "$d/jobs"
    # the jobs the last boot left running or queued ended with it (a power cut): status 137, as
    # SIGKILL; their output stays for whoever reads it
    local f
    for f in "$d/jobs"/*.run "$d/jobs"/*.cmd; do
        [ -e "$f" ] || continue
        [ -e "${f%.*}.rc" ] || echo 137 > "${f%.*}.rc"
        [ "${f##*.}" = run ] || mv "$f" "${f%.cmd}.run"
    done
    [ -p "$d/mon.in" ] || mkfifo "$d/mon.in"
    [ -p "$d/mon.out" ] || mkfifo "$d/mon.out"
    # the monitor's answers: drained while QEMU runs (cat ends when QEMU closes the FIFO)
    setsid bash -c 'exec cat "$1" >> "$2"' _ "$d/mon.out" "$d/mon.log" </dev/null >/dev/null 2>&1 &
    local pmem=()
    if [ "${SOFTROCE_PMEM:-128M}" != none ]; then
        pmem=(SOFTROCE_PMEM="${SOFTROCE_PMEM:-128M}"
              SOFTROCE_PMEM_FILE="$CACHE/pmem-cluster-$PROFILE-$i.img")
    else
        pmem=(-u SOFTROCE_PMEM -u SOFTROCE_PMEM_FILE)
    fi
    # iproute2: `tc` for the fault controls (debian12 guests run the host's; debian13's root gets it)
    env "${pmem[@]}" SOFTROCE_LINK="$DIR/switch" SOFTROCE_GUEST_IP="$(addr "$i")" \
        SOFTROCE_HOSTNAME="node$i" SOFTROCE_MONITOR="$d/mon" SOFTROCE_QEMU_PIDFILE="$d/qemu.pid" \
        SOFTROCE_RW="$DIR${SOFTROCE_RW:+:$SOFTROCE_RW}" SOFTROCE_TIMEOUT="${SOFTROCE_TIMEOUT:-86400}" \
        SOFTROCE_BOOT_TIMEOUT="${SOFTROCE_BOOT_TIMEOUT:-300}" SOFTROCE_PROFILE="$PROFILE" SOFTROCE_SMP="${SOFTROCE_SMP:-2}" \
        SOFTROCE_PACKAGES="${SOFTROCE_PACKAGES:+$SOFTROCE_PACKAGES }iproute2" \
        setsid "$HERE/run.sh" "$LIB/node-agent.sh" "$d" </dev/null >"$d/runner.log" 2>&1 &
    echo $! > "$d/runner.pid"
}

# wait_ready I...: wait until every node I runs its agent; a node whose runner ended is an error
wait_ready() {
    local i left=("$@") t0=$SECONDS limit=$(( ${SOFTROCE_BOOT_TIMEOUT:-300} + 600 ))
    while [ ${#left[@]} -gt 0 ]; do
        local next=()
        for i in "${left[@]}"; do
            if [ -e "$DIR/node-$i/ready" ]; then continue; fi
            if ! kill -0 "$(cat "$DIR/node-$i/runner.pid")" 2>/dev/null; then
                say "node $i did not come up; its runner's log ($DIR/node-$i/runner.log):"
                tail -n 30 "$DIR/node-$i/runner.log" | sed 's/^/  | /' >&2
                exit 125
            fi
            next+=("$i")
        done
        left=("${next[@]}")
        [ ${#left[@]} -eq 0 ] || [ $((SECONDS - t0)) -lt "$limit" ] ||
            die "nodes ${left[*]} did not come up within ${limit}s (see $DIR/node-I/runner.log)"
        [ ${#left[@]} -eq 0 ] || sleep 0.2
    done
}

# check_host N: this host can run N guests (memory, the link's switch)
check_host() {
    local n=$1 mem pmem avail need
    [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 32 ] || die "N must be 1 to 32, not '$n'"
    mem=$(to_mib "${SOFTROCE_MEM:-1G}") || die "bad SOFTROCE_MEM '${SOFTROCE_MEM:-}'"
    pmem=0
    if [ "${SOFTROCE_PMEM:-128M}" != none ]; then
        pmem=$(to_mib "${SOFTROCE_PMEM:-128M}") || die "bad SOFTROCE_PMEM '${SOFTROCE_PMEM:-}'"
    fi
    avail=$(awk '/^MemAvailable:/ { print int($2 / 1024) }' /proc/meminfo)
    need=$(( n * (mem + pmem + 256) ))     # RAM, the NVDIMM's page cache, QEMU itself
    [ "$need" -le $((avail - 512)) ] ||
        die "this host cannot run $n guests: they need about $need MiB ($n x (${mem} MiB RAM + ${pmem} MiB" \
            "NVDIMM + 256 MiB for QEMU)) and $avail MiB are available; use fewer nodes or a smaller SOFTROCE_MEM"
    local cpus; cpus=$(nproc)
    [ "$n" -le $((cpus * 4)) ] ||
        die "this host cannot run $n guests: $cpus CPUs (at most 4 TCG guests per CPU boot in time)"
    command -v vde_switch >/dev/null || apt_install vde2
}

# to_mib SIZE: a size with a K/M/G suffix (binary units) in MiB
to_mib() {
    [[ $1 =~ ^([0-9]+)([KMG]?)$ ]] || return 1
    case ${BASH_REMATCH[2]} in
        K) echo $(( BASH_REMATCH[1] >> 10 )) ;; M|'') echo "${BASH_REMATCH[1]}" ;;
        G) echo $(( BASH_REMATCH[1] << 10 )) ;;
    esac
}

cmd_up() {
    local n=${1:?usage: cluster.sh up N}
    check_host "$n"
    if [ "$(nodes)" != 0 ]; then
        local i
        for i in $(seq 1 "$(nodes)"); do
            ! running "$i" || die "a cluster runs in $DIR (cluster.sh down first, or set SOFTROCE_CLUSTER)"
        done
        stop_switch
    fi
    rm -rf "$DIR"
    mkdir -p "$DIR"
    if [ "${SOFTROCE_CLUSTER_FRESH:-0}" = 1 ]; then
        # blank NVDIMMs (each node's guest makes its devdax namespace again on first boot)
        local f
        for f in "$CACHE"/pmem-cluster-"$PROFILE"-*.img; do
            [ -e "$f" ] || continue
            flock -n "$f" rm -f "$f" || die "$f is in use by another VM (another cluster?)"
        done
    fi
    echo "$n" > "$DIR/nodes"
    echo "$PROFILE" > "$DIR/profile"
    # the link: a switch on a unix socket, QEMU's vde netdevs its only ports
    vde_switch --sock "$DIR/switch" --mode 600 --daemon --pidfile "$DIR/switch.pid" ||
        die "vde_switch did not start"
    local t=0
    until [ -S "$DIR/switch/ctl" ]; do
        t=$((t + 1)); [ $t -le 100 ] || die "vde_switch made no socket in $DIR/switch"
        sleep 0.05
    done
    # the first runner builds the kernel image and the initramfs (once, under a lock the others
    # wait on); the nodes then boot in parallel
    local i
    for i in $(seq 1 "$n"); do boot "$i"; done
    wait_ready $(seq 1 "$n")
    say "nodes 1..$n up ($PROFILE, $NET.1..$NET.$n on the link $DIR/switch)"
}

stop_switch() {
    local pid
    pid=$(cat "$DIR/switch.pid" 2>/dev/null) || return 0
    kill "$pid" 2>/dev/null || true
    rm -f "$DIR/switch.pid"
}

cmd_down() {
    local n i t pid
    n=$(nodes)
    for i in $(seq 1 "$n"); do [ ! -d "$DIR/node-$i" ] || : > "$DIR/node-$i/stop"; done
    for i in $(seq 1 "$n"); do
        pid=$(cat "$DIR/node-$i/runner.pid" 2>/dev/null) || continue
        t=0
        while kill -0 "$pid" 2>/dev/null && [ $t -lt 300 ]; do t=$((t + 1)); sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then
            kill -9 "$(cat "$DIR/node-$i/qemu.pid" 2>/dev/null)" 2>/dev/null || true
            kill "$pid" 2>/dev/null || true
        fi
    done
    stop_switch
}

# job_script I CMD...: the job file's text (run.sh's environment for CMD, on node I)
job_script() {
    local i=$1; shift
    local addrs='' k
    for k in $(seq 1 "$(nodes)"); do addrs+=${addrs:+ }$(addr "$k"); done
    echo "# generated by scripts/softroce/cluster.sh"
    host_env
    printf 'export RPMA_TEST_DEVICE=rxe0 RPMA_TEST_ADDR=%q CLUSTER_NODE=%q CLUSTER_ADDRS=%q\n' \
        "$(addr "$i")" "$i" "$addrs"
    printf 'cd %q || exit 126\n' "$(pwd -P)"
    printf 'exec'; printf ' %q' "$@"; printf '\n'
}

# spawn I CMD...: queue CMD on node I; prints the job id
spawn() {
    local i=$1; shift
    local d; d=$(node_dir "$i")
    up_ready "$i" || die "node $i is not up (cluster.sh status)"
    local id; id=$(date +%s%N)-$$-$RANDOM
    job_script "$i" "$@" > "$d/jobs/$id.tmp"
    mv "$d/jobs/$id.tmp" "$d/jobs/$id.cmd"
    echo "$id"
}

# wait_job I JOB: stream the job's output until its status is written; exits with it
wait_job() {
    local i=$1 id=$2 d; d=$(node_dir "$1")
    local j=$d/jobs/$id t0=$SECONDS tails=()
    [ -e "$j.cmd" ] || [ -e "$j.run" ] || [ -e "$j.rc" ] || die "node $i has no job $id"
    until [ -e "$j.out" ] || [ -e "$j.rc" ]; do
        running "$i" || { say "node $i went down before job $id started"; exit 125; }
        [ $((SECONDS - t0)) -lt "$JOB_TIMEOUT" ] || { say "job $id on node $i did not start within ${JOB_TIMEOUT}s"; exit 124; }
        sleep 0.05
    done
    tail -n +1 -F -s 0.1 "$j.out" 2>/dev/null & tails+=($!)
    tail -n +1 -F -s 0.1 "$j.err" >&2 2>/dev/null & tails+=($!)
    local rc=''
    while [ -z "$rc" ]; do
        if [ -e "$j.rc" ]; then rc=$(cat "$j.rc"); break; fi
        if ! running "$i"; then rc=125; fi
        if [ $((SECONDS - t0)) -ge "$JOB_TIMEOUT" ]; then rc=124; fi
        [ -n "$rc" ] || sleep 0.05
    done
    sleep 0.3                       # the tails' last reads (they poll every 0.1 s)
    kill "${tails[@]}" 2>/dev/null || true
    wait "${tails[@]}" 2>/dev/null || true
    case $rc in
        125) [ -e "$j.rc" ] || say "node $i went down before job $id ended" ;;
        124) [ -e "$j.rc" ] || say "job $id on node $i did not end within ${JOB_TIMEOUT}s (CLUSTER_JOB_TIMEOUT)" ;;
    esac
    return "$rc"
}

# on I CMD...: run a fault control on node I, quietly; its error output on failure
on() {
    local i=$1; shift
    local out rc=0
    out=$(wait_job "$i" "$(spawn "$i" "$@")" 2>&1) || rc=$?
    [ "$rc" = 0 ] || die "node $i: $* failed (status $rc): $out"
}

cmd_partition() {
    local i=${1:?usage: cluster.sh partition I J [--one-way]} j=${2:?usage: cluster.sh partition I J [--one-way]}
    node_dir "$i" >/dev/null; node_dir "$j" >/dev/null
    [ "$i" != "$j" ] || die "a node cannot be partitioned from itself"
    on "$j" tc filter add dev eth0 ingress protocol ip prio 1 u32 match ip src "$(addr "$i")/32" action drop
    if [ "${3:-}" != --one-way ]; then
        on "$i" tc filter add dev eth0 ingress protocol ip prio 1 u32 match ip src "$(addr "$j")/32" action drop
    fi
}

heal_node() {
    on "$1" sh -c 'tc filter del dev eth0 ingress 2>/dev/null; tc qdisc del dev eth0 root 2>/dev/null; true'
}

cmd_heal() {
    local i
    if [ $# -ge 1 ]; then node_dir "$1" >/dev/null; heal_node "$1"; return; fi
    for i in $(seq 1 "$(nodes)"); do ! up_ready "$i" || heal_node "$i"; done
}

cmd_link() {
    local i=${1:?usage: cluster.sh link I down|up} d
    d=$(node_dir "$i")
    running "$i" || die "node $i is not running"
    case ${2:-} in
        down) echo "set_link link0 off" > "$d/mon.in" ;;
        up)   echo "set_link link0 on" > "$d/mon.in" ;;
        *) die "usage: cluster.sh link I down|up" ;;
    esac
}

cmd_kill() {
    local i=${1:?usage: cluster.sh kill I} d pid
    d=$(node_dir "$i")
    pid=$(cat "$d/qemu.pid" 2>/dev/null) || die "node $i has no QEMU"
    kill -9 "$pid" 2>/dev/null || die "node $i is not running"
    # its runner reports the lost guest and ends
    pid=$(cat "$d/runner.pid" 2>/dev/null) || return 0
    local t=0
    while kill -0 "$pid" 2>/dev/null && [ $t -lt 100 ]; do t=$((t + 1)); sleep 0.1; done
}

cmd_status() {
    local i
    for i in $(seq 1 "$(nodes)"); do
        if up_ready "$i"; then echo "node $i $(addr "$i") up"
        elif running "$i"; then echo "node $i $(addr "$i") booting"
        else echo "node $i $(addr "$i") down"; fi
    done
}

main() {
    local c=${1:-}
    [ $# -eq 0 ] || shift
    case $c in
        up) cmd_up "$@" ;;
        down) cmd_down ;;
        exec) [ $# -ge 2 ] || die "usage: cluster.sh exec I CMD [ARGS...]"
              local i=$1; shift; wait_job "$i" "$(spawn "$i" "$@")" ;;
        spawn) [ $# -ge 2 ] || die "usage: cluster.sh spawn I CMD [ARGS...]"; spawn "$@" ;;
        wait) [ $# -eq 2 ] || die "usage: cluster.sh wait I JOB"; wait_job "$1" "$2" ;;
        out) [ $# -eq 2 ] || die "usage: cluster.sh out I JOB"; echo "$(node_dir "$1")/jobs/$2.out" ;;
        link) cmd_link "$@" ;;
        netem) [ $# -ge 2 ] || die "usage: cluster.sh netem I ARGS|off"
               local i=$1; shift
               node_dir "$i" >/dev/null
               if [ "$1" = off ]; then on "$i" sh -c 'tc qdisc del dev eth0 root 2>/dev/null; true'
               else on "$i" tc qdisc replace dev eth0 root netem "$@"; fi ;;
        partition) cmd_partition "$@" ;;
        heal) cmd_heal "$@" ;;
        kill) cmd_kill "$@" ;;
        start) [ $# -eq 1 ] || die "usage: cluster.sh start I"
               node_dir "$1" >/dev/null; boot "$1"; wait_ready "$1" ;;
        addr) [ $# -eq 1 ] || die "usage: cluster.sh addr I"; node_dir "$1" >/dev/null; addr "$1" ;;
        status) cmd_status ;;
        *) die "usage: cluster.sh up N | exec I CMD | spawn I CMD | wait I JOB | out I JOB | link I down|up |" \
               "netem I ARGS|off | partition I J [--one-way] | heal [I] | kill I | start I | addr I | status | down" \
               "(scripts/softroce/README.md)" ;;
    esac
}

main "$@"

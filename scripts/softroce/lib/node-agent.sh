#!/usr/bin/env bash
# scripts/softroce/lib/node-agent.sh DIR: the command a cluster node's guest runs
# (scripts/softroce/cluster.sh starts each node as `run.sh node-agent.sh DIR`).
#
# DIR is the node's directory of the cluster, shared read-write with the guest. The agent says it
# is up by writing DIR/ready (the guest's uptime), then runs every job the host puts in DIR/jobs:
# a script ID.cmd is renamed ID.run and run by bash in the background (jobs run side by side: a
# server and its client on one node, a writer beside a replica), its stdout and stderr going to
# ID.out and ID.err and its exit status, once it ends, to ID.rc (written whole, by a rename). The
# agent ends, and the guest powers off, when DIR/stop appears.
set -u
dir=${1:?usage: node-agent.sh DIR}
jobs=$dir/jobs
mkdir -p "$jobs" || exit 1
cut -d' ' -f1 /proc/uptime > "$dir/ready.tmp" && mv "$dir/ready.tmp" "$dir/ready"
shopt -s nullglob
# a pause without a process per turn: read -t on a FIFO nobody writes
mkfifo /tmp/node-agent.tick && exec 3<>/tmp/node-agent.tick || exit 1
while [ ! -e "$dir/stop" ]; do
    for f in "$jobs"/*.cmd; do
        id=${f%.cmd}
        mv "$f" "$id.run" || continue
        (
            bash "$id.run" </dev/null >"$id.out" 2>"$id.err"
            echo $? > "$id.rc.tmp" && mv "$id.rc.tmp" "$id.rc"
        ) &
    done
    read -r -t 0.1 -u 3 _ || true
done

#!/usr/bin/env bash
# Inside the Soft-RoCE guest (scripts/softroce/run.sh): the synchronous against the async API
# for 8-byte writes, one process (client and server threads on rxe0 at 10.77.0.1), R rounds
# (default 5) alternating; prints each round's message rate (docs/bench.md, "Async").
# Usage: SOFTROCE_RO=$PWD/target/release scripts/softroce/run.sh \
#            bash scripts/bench-async-softroce.sh $PWD/target/release/rpma   (a --features verbs build)
set -euo pipefail
B=${1:?usage: bench-async-softroce.sh path/to/rpma}
for r in $(seq "${R:-5}"); do
    for api in sync async; do
        extra=()
        [ "$api" = async ] && extra=(--async)
        v=$("$B" bench --backend verbs --addr 10.77.0.1 --op write --size 8 --iters "${N:-20000}" --no-progress --csv "${extra[@]}" |
            awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "msg_rate") c = i; next } { print $c }')
        echo "round $r $api $v"
    done
done

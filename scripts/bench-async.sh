#!/usr/bin/env bash
# The async lane against the synchronous one on the mock, in one session (docs/bench.md,
# "Async"): R rounds (default 9) of `rpma bench --backend mock --op write --size 8 --iters N`
# (default 2000000), alternating without and with --async; prints every round's message rate,
# the medians and the best round of each, and their ratios (async / sync). Noise only slows a
# round down, so on a busy host the best rounds are the cleaner comparison.
# Usage: scripts/bench-async.sh [EXTRA BENCH ARGS...]   (B=path/to/rpma skips the release build;
# e.g. scripts/bench-async.sh --qd 16 --cq-mod 1)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${B:-}" ]; then
    cargo build -q --release -p rpma-cli
    B=$(cargo metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)/release/rpma
fi
R=${R:-9}
N=${N:-2000000}

# rate ARGS...: the msg_rate of one run (the CSV column of that name)
rate() {
    "$B" bench --backend mock --op write --size 8 --iters "$N" --no-progress --csv "$@" |
        awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "msg_rate") c = i; next } { print $c }'
}
med() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
best() { printf '%s\n' "$@" | sort -g | tail -1; }
ratio() { awk -v a="$1" -v s="$2" 'BEGIN { printf "%.3f", a / s }'; }

s=(); a=()
for _ in $(seq "$R"); do
    s+=("$(rate "$@")")
    a+=("$(rate --async "$@")")
done
ms=$(med "${s[@]}"); ma=$(med "${a[@]}"); bs=$(best "${s[@]}"); ba=$(best "${a[@]}")
echo "sync:  ${s[*]}"
echo "async: ${a[*]}"
echo "median: sync $ms async $ma ratio $(ratio "$ma" "$ms")"
echo "best:   sync $bs async $ba ratio $(ratio "$ba" "$bs")"

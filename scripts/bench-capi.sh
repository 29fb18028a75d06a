#!/usr/bin/env bash
# What the C ABI (crates/rpma-capi, librpma.so) adds per post and per poll over the Rust API,
# in instructions (valgrind's callgrind: exact, independent of the machine's load), on the
# mock backend:
#   C     crates/rpma-capi/benches/overhead.c on our librpma.so (RPMA_BACKEND=mock): N 8-byte
#         writes, each through post_op() (rpma_write, signaled) and poll_cq() (rpma_cq_get_wc);
#   Rust  rpma bench --backend mock --op write --size 8 --qd 1: the same writes through its
#         post_op and poll_cq (the Rust API).
# Prints the instructions per call of each function for both and the ratio C / Rust (the
# target: at most 1.05).
#
# Usage: scripts/bench-capi.sh [N]   (default 20000; needs gcc and valgrind)
#        TRACING=1 scripts/bench-capi.sh [N]   both programs built with the `tracing` feature
#        (docs/observability.md); use another CARGO_TARGET_DIR to keep both builds.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib/callgrind.sh"

n=${1:-20000}
top=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
target=${CARGO_TARGET_DIR:-$top/target}
capi_features=() cli_features=()
if [ "${TRACING:-0}" = 1 ]; then
    capi_features=(--features rpma-core/tracing) cli_features=(--features rpma/tracing)
fi
(cd "$top" && cargo build -q --release -p rpma-capi "${capi_features[@]}" &&
    cargo build -q --release -p rpma-cli --bin rpma "${cli_features[@]}")
for tool in gcc valgrind; do
    command -v "$tool" >/dev/null || { echo "$tool is not installed" >&2; exit 1; }
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
so=$(realpath -e "$target/release/librpma.so") || { echo "no librpma.so in $target/release" >&2; exit 1; }
ln -s "$so" "$dir/librpma.so"
ln -s "$so" "$dir/librpma.so.0"
gcc -std=gnu11 -O2 -g -Wall -Wextra -Werror -I "$top/crates/rpma-capi/include" \
    "$top/crates/rpma-capi/benches/overhead.c" -L "$dir" -lrpma -lpthread -o "$dir/overhead"

RPMA_BACKEND=mock LD_LIBRARY_PATH=$dir valgrind --tool=callgrind --callgrind-out-file="$dir/c.out" \
    "$dir/overhead" "$n" >/dev/null 2>"$dir/c.err" || { cat "$dir/c.err" >&2; exit 1; }
valgrind --tool=callgrind --callgrind-out-file="$dir/rust.out" "$target/release/rpma" bench --backend mock \
    --op write --size 8 --iters "$n" --qd 1 --warmup 0 --no-progress --csv >/dev/null 2>"$dir/rust.err" ||
    { cat "$dir/rust.err" >&2; exit 1; }

# per FILE FUNCTION: instructions per call of FUNCTION in the callgrind output FILE.
per() {
    cg_sum "$1" | awk -v f="$2" '$1 == f && $2 > 0 { printf "%.1f", $3 / $2; found = 1 } END { if (!found) exit 1 }'
}
printf '%-22s %12s %12s %8s\n' "instructions per call" "C ABI" "Rust API" "C/Rust"
for f in post_op poll_cq; do
    c=$(per "$dir/c.out" "$f") || { echo "no $f in the C program's profile" >&2; exit 1; }
    r=$(per "$dir/rust.out" "$f") || { echo "no $f in rpma bench's profile" >&2; exit 1; }
    printf '%-22s %12s %12s %8s\n' "$f" "$c" "$r" "$(awk -v a="$c" -v b="$r" 'BEGIN { printf "%.3f", a / b }')"
done

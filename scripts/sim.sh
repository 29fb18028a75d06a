#!/usr/bin/env bash
# The deterministic simulator of rpma-log (crates/rpma-log/tests/sim; docs/log.md, "How it is
# proven"): the real writer and replica code as actors of a simulated mock fabric, under a nemesis
# drawn from each seed, every acknowledgement and recovery checked.
#
# Usage:
#   scripts/sim.sh [SECONDS]          seeds SIM_BASE.. (default 0) for SECONDS (default 120), then
#                                     each rule switched off (rpma_log::Broken) must be caught;
#                                     what scripts/test-all.sh runs (with 60)
#   scripts/sim.sh --long [SECONDS]   seeds from a random base for SECONDS (default 3600), no
#                                     mutants: a long hunt (millions of seeds over a few hours on
#                                     a bigger machine); prints the base to replay from
#   SIM_SEED=N scripts/sim.sh --replay   one seed: its history; if it fails, the shrunk plan
# Environment: SIM_BASE (first seed), SIM_MUTANT_SEEDS (the most seeds a mutant may take, 20000),
# SIM_BROKEN (with --replay: the mutant's name), SIM_CONTROL (with --replay and SIM_BROKEN: the
# mutant's configuration and plan with every rule on, which must pass), SIM_TRACE (with --replay:
# every step).
# A failing seed prints its violations, the faults it needs and the history of that run, and
# the command that replays it; the script exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."

run() { cargo test -q --release -p rpma-log --test sim -- "$@" --nocapture --test-threads 1; }

case "${1:-}" in
    --replay)
        [ -n "${SIM_SEED:-}" ] || { echo "error: --replay needs SIM_SEED=<seed>" >&2; exit 1; }
        run replay --include-ignored
        ;;
    --long)
        base=${SIM_BASE:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}000000
        echo "sim: long run from seed $base (SIM_BASE=${base%000000} replays this base)"
        SIM_BASE=$base SIM_SECS=${2:-3600} run simulate
        ;;
    *)
        SIM_SECS=${1:-120} run simulate
        run catches --ignored
        ;;
esac

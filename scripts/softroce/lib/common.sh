# shellcheck shell=bash
# scripts/softroce/lib/common.sh: messages and fatal errors (exit 125: the VM failed).
# Sourced by scripts/softroce/run.sh (see there for the knobs).

PROG=softroce
say()  { echo "$PROG: $*" >&2; }
info() { if [ "${SOFTROCE_VERBOSE:-0}" = 1 ]; then say "$@"; fi; }
die()  { say "$*"; exit 125; }

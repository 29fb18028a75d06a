#!/usr/bin/env bash
# Runs every `rpma` scenario as two processes (server, then client(s)) over the verbs backend on
# Soft-RoCE (rxe0 at 10.77.0.1 inside the QEMU VM of scripts/softroce/run.sh), plus
# `rpma devices --backend verbs`. Exits non-zero if any side of any scenario fails.
#
# Usage: scripts/cli-verbs.sh [SCENARIO...]   (default: all; needs what scripts/test-verbs.sh needs)
set -euo pipefail
cd "$(dirname "$0")/.."

target=${CARGO_TARGET_DIR:-$PWD/target}
cargo build -q -p rpma-cli --features verbs
bin="$target/debug/rpma"
guest="$target/rpma-cli-verbs-guest.sh"
trap 'rm -f "$guest"' EXIT
cat > "$guest" <<GUEST
#!/bin/sh
R="$bin"; A=10.77.0.1; P=7300; T="timeout 120"; failed=""
\$R devices --backend verbs || failed="devices"
for s in ${*:-\$(\$R scenarios | awk 'NR > 1 { print \$1 }')}; do
  sargs=""; cargs=""; two=""; P=\$((P + 1))
  case \$s in
    read-to-persistent|write-to-persistent|flush-to-persistent-gpspm|flush-to-persistent-gpspm-shared-channel) sargs="--file /var/tmp/\$s.pmem --file-create";;
    flush-to-persistent) sargs="--file /var/tmp/\$s.pmem --file-create --direct-pmem-write";;
    atomic-write) sargs="--file /var/tmp/\$s.pmem --file-create"; cargs="--word hello --word rdma";;
    send-with-imm) cargs="--word msg --imm 77";;
    multiple-connections|multiple-connections-shared-channel|messages-ping-pong-with-srq) sargs="--clients 2"; two=1;;
  esac
  echo "== \$s"
  \$T \$R server --addr \$A --port \$P -s \$s \$sargs > /var/tmp/server.out 2>&1 & sp=\$!
  if [ -n "\$two" ]; then \$T \$R client --addr \$A --port \$P -s \$s --retries 100 --retry-delay 200 & c2=\$!; fi
  \$T \$R client --addr \$A --port \$P -s \$s \$cargs --retries 100 --retry-delay 200 || failed="\$failed \$s(client)"
  if [ -n "\$two" ]; then wait \$c2 || failed="\$failed \$s(client 2)"; fi
  wait \$sp || failed="\$failed \$s(server)"
  cat /var/tmp/server.out
done
if [ -n "\$failed" ]; then echo "cli-verbs: FAILED:\$failed"; exit 1; fi
echo "cli-verbs: every scenario passed"
GUEST
chmod +x "$guest"
SOFTROCE_RO="${SOFTROCE_RO:+$SOFTROCE_RO:}$(dirname "$bin"):$(dirname "$guest")" scripts/softroce/run.sh "$guest"

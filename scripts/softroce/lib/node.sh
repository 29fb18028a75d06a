# shellcheck shell=bash
# scripts/softroce/lib/node.sh: the guest as a node of a cluster (scripts/softroce/cluster.sh): a
# NIC on the cluster's link and a monitor the host drives the NIC's link state through.
# Sourced by scripts/softroce/run.sh (see there for the knobs).
#
# The link is a vde_switch on a unix socket of the host (SOFTROCE_LINK, its socket directory):
# frames go from one QEMU to another through it and nowhere else (no tap, no host address).
# The guest puts rxe0 on that NIC (eth0) instead of dummy0, with the address SOFTROCE_GUEST_IP,
# and clsact on it for the partitions' drop filters (lib/guest-init).

NODE_ARGS=()
# node_prepare: checks SOFTROCE_LINK / SOFTROCE_MONITOR and appends QEMU's arguments to
# NODE_ARGS. Reads main's `ip` (the node's address on the link).
node_prepare() {
    if [ -n "${SOFTROCE_LINK:-}" ]; then
        [ -S "$SOFTROCE_LINK/ctl" ] ||
            die "SOFTROCE_LINK $SOFTROCE_LINK is not a vde_switch's socket directory (no socket ctl in it)"
        local last=${ip##*.}
        local mac=${SOFTROCE_LINK_MAC:-52:54:00:78:00:$(printf %02x "$last")}
        [[ $mac =~ ^([0-9a-f]{2}:){5}[0-9a-f]{2}$ ]] || die "bad SOFTROCE_LINK_MAC '$mac'"
        NODE_ARGS+=(-netdev "vde,id=link0,sock=$SOFTROCE_LINK" -device "virtio-net-pci,netdev=link0,mac=$mac")
        echo "${SOFTROCE_HOSTNAME:-node$last}" > "$CTL/link"
        info "cluster node ${SOFTROCE_HOSTNAME:-node$last}: eth0 $ip ($mac) on the link $SOFTROCE_LINK"
    fi
    if [ -n "${SOFTROCE_MONITOR:-}" ]; then
        # QEMU's human monitor on a pair of FIFOs (PATH.in, PATH.out): `set_link link0 off|on`
        [ -p "$SOFTROCE_MONITOR.in" ] && [ -p "$SOFTROCE_MONITOR.out" ] ||
            die "SOFTROCE_MONITOR: $SOFTROCE_MONITOR.in and $SOFTROCE_MONITOR.out must be FIFOs (mkfifo)"
        NODE_ARGS+=(-chardev "pipe,id=mon0,path=$SOFTROCE_MONITOR" -mon "chardev=mon0,mode=readline")
    fi
}

#!/usr/bin/env bash
# scripts/softroce/run.sh CMD [ARGS...]
#
# Runs CMD inside a throw-away QEMU guest with Soft-RoCE, so that the real RDMA
# backend of rpma-rs (libibverbs + librdmacm over the kernel's rxe provider) can
# be tested on a host whose kernel has no RDMA support at all (CI).
#
# The guest boots Debian's stock kernel (the package linux-image-amd64 depends
# on) under QEMU TCG (no KVM needed), loads rdma_rxe/rdma_ucm, creates the
# netdev dummy0 with 10.77.0.1/24 and the Soft-RoCE device rxe0 on top of it,
# and a second one, dummy1 with 10.77.1.1/24 and rxe1 (for tests of two devices).
# It has no network card: nothing it sends can leave it.
#
# The guest sees the host's /usr and /etc read-only (host-built binaries and
# their libraries, e.g. the rxe verbs provider, run unchanged), and the git work
# tree around the current directory (else the current directory; or
# $SOFTROCE_SHARE) read-write at the same path. When CMD is a path outside of
# it (a test binary in a target dir elsewhere), CMD's directory is shared
# read-only too. CMD runs in the current directory as root, with the host's
# exported environment plus RPMA_TEST_DEVICE=rxe0 and RPMA_TEST_ADDR=10.77.0.1
# (RPMA_TEST_DEVICE2=rxe1 and RPMA_TEST_ADDR2=10.77.1.1 for the second device),
# `ulimit -l unlimited` and stdin from /dev/null. Its stdout and stderr are
# streamed to ours. /tmp, /var/tmp and /dev/shm are fresh tmpfs in the guest.
#
# Exit status: CMD's own; 124 = SOFTROCE_TIMEOUT expired (CMD was killed);
# 125 = the VM failed (could not be set up, did not boot, crashed);
# 130/143 = interrupted (SIGINT/SIGTERM). On failure the tail of the guest
# kernel log (or, if the guest never ran CMD, of its console) goes to stderr.
#
# Cargo runner:
#   CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER=$PWD/scripts/softroce/run.sh cargo test
#
# Host: Debian 12 (bookworm) x86_64, merged /usr. As root, missing packages are
# installed with apt-get (apt-get update only when needed). The kernel package
# and busybox-static are fetched with `apt-get download` (never installed) into
# the cache dir, where the boot image and the initramfs are built and kept.
#
# Knobs (environment, all optional):
#   SOFTROCE_PROFILE        debian12 (default: the host's Debian 12 /usr and /etc, its kernel 6.1)
#                           or debian13 (a Debian 13 root as /usr and /etc, kernel 6.12 with native
#                           rxe flush and atomic write; fetched with a private apt configuration
#                           under $SOFTROCE_CACHE/debian13, see README.md)
#   SOFTROCE_CACHE          cache dir (default ${XDG_CACHE_HOME:-$HOME/.cache}/rpma-rs/softroce)
#   SOFTROCE_KERNEL         kernel package to boot (default: linux-image-amd64's dependency,
#                           pinned in the cache on first use)
#   SOFTROCE_SHARE          host dir shared read-write at the same path (default: the top of
#                           the git work tree containing $PWD, else $PWD)
#   SOFTROCE_RO, SOFTROCE_RW  extra ':'-separated host dirs shared read-only / read-write
#   SOFTROCE_MEM            guest RAM (default 1G)
#   SOFTROCE_SMP            guest CPUs (default 2; 1 with SOFTROCE_ACCEL=icount)
#   SOFTROCE_ACCEL          tcg (default), kvm, or icount: TCG on one host thread with
#                           the guest's clock driven by the instructions it executes
#                           (`-icount shift=SOFTROCE_ICOUNT_SHIFT,sleep=off`, default shift 0:
#                           one instruction a nanosecond), so the guest's timings do not
#                           depend on the host's load (docs/bench.md, "The icount clock
#                           (deterministic timings)")
#   SOFTROCE_TIMEOUT        seconds for the VM (boot + CMD): then CMD is killed, and the
#                           exit status is 124 (default 1800)
#   SOFTROCE_BOOT_TIMEOUT   seconds for the guest to reach CMD, then exit 125 (default 180)
#   SOFTROCE_POWEROFF_TIMEOUT  seconds qemu gets to exit once CMD is done, then it is
#                           killed (default 20); CMD's status is kept
#   SOFTROCE_GUEST_IP       address of dummy0 (rxe0), /24 (default 10.77.0.1)
#   SOFTROCE_GUEST_IP2      address of dummy1 (rxe1), /24, outside the first one's (default 10.77.1.1)
#   SOFTROCE_LOG_LINES      lines of guest kernel log printed on failure (default 30)
#   SOFTROCE_PACKAGES       extra host packages CMD needs, installed if missing
#                           (e.g. "rdmacm-utils perftest"; CMD runs the host's /usr)
#   SOFTROCE_APPEND         extra guest kernel command line (e.g. "loglevel=7")
#   SOFTROCE_PMEM           size of an emulated NVDIMM (e.g. 256M; a multiple of 2M): the guest
#                           gets /dev/dax0.0 (a devdax namespace, made with ndctl on first use)
#                           and RPMA_TEST_PMEM=/dev/dax0.0 (see README.md, "Persistent memory")
#   SOFTROCE_PMEM_FILE      the NVDIMM's backing file, kept across VMs (default
#                           $SOFTROCE_CACHE/pmem-PROFILE.img); one VM at a time uses it
#   SOFTROCE_QEMU_PIDFILE   write QEMU's pid there (scripts/softroce/power-cut.sh kills it)
#   SOFTROCE_LINK           a cluster node (scripts/softroce/cluster.sh): a NIC on this vde_switch socket
#                           directory; rxe0 is then on eth0 with SOFTROCE_GUEST_IP instead of dummy0
#   SOFTROCE_LINK_MAC       the NIC's MAC (default 52:54:00:78:00:XX, XX the address's last byte)
#   SOFTROCE_HOSTNAME       the node's host name (default nodeN, N the address's last byte)
#   SOFTROCE_MONITOR        QEMU's monitor on the FIFOs SOFTROCE_MONITOR.in and .out (set_link)
#   SOFTROCE_VERBOSE=1      print progress, the guest console and timings to stderr
set -euo pipefail

# The work is done by the stage files under lib/, sourced here (bash reads a sourced file whole),
# and by main, called from the last line (bash reads a script lazily): editing these files during
# a run cannot break that run.
#   lib/common.sh   say, info, die
#   lib/host.sh     host packages and apt
#   lib/profile.sh  profiles; the Debian 13 guest root
#   lib/image.sh    kernel image and initramfs (its /init: lib/guest-init)
#   lib/shares.sh   host directories shared with the guest
#   lib/pmem.sh     the emulated NVDIMM (SOFTROCE_PMEM)
#   lib/node.sh     a cluster node: the link's NIC and the monitor (SOFTROCE_LINK, SOFTROCE_MONITOR)
#   lib/vm.sh       the command script, qemu, watchdog and report

LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)/lib
for f in common host profile image shares pmem node vm; do
    # shellcheck source=/dev/null
    . "$LIB/$f.sh"
done
unset f

# ipv4_gid ADDR: "ADDR GID" for an IPv4 address (ADDR normalised; GID the tail of its RoCE v2 GID,
# as the guest's sysfs shows it), nothing for anything else
ipv4_gid() {
    local gid=ffff: ip='' o
    [[ $1 =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]] || return 0
    for o in 1 2 3 4; do
        o=$((10#${BASH_REMATCH[o]}))
        [ "$o" -le 255 ] || return 0
        gid+=$(printf '%02x' "$o"); ip+=${ip:+.}$o
    done
    echo "$ip ${gid:0:9}:${gid:9}"
}

main() {
    [ $# -ge 1 ] || { echo "usage: $0 CMD [ARGS...]  (see scripts/softroce/README.md)" >&2; exit 125; }
    local t_start=$EPOCHREALTIME
    CACHE=${SOFTROCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rpma-rs/softroce}
    GUEST_IP=${SOFTROCE_GUEST_IP:-10.77.0.1} GUEST_IP2=${SOFTROCE_GUEST_IP2:-10.77.1.1}
    local mem=${SOFTROCE_MEM:-1G} smp=${SOFTROCE_SMP:-2} accel=()
    # icount runs every vCPU on one host thread, in turns: a guest of two did not finish booting
    # in 8 minutes here (its CPUs wait for each other in turns of 100 ms of guest time).
    if [ "${SOFTROCE_ACCEL:-tcg}" = icount ]; then smp=${SOFTROCE_SMP:-1}; fi
    local timeout=${SOFTROCE_TIMEOUT:-1800} boot_timeout=${SOFTROCE_BOOT_TIMEOUT:-180}
    local off_timeout=${SOFTROCE_POWEROFF_TIMEOUT:-20} log_lines=${SOFTROCE_LOG_LINES:-30}
    local v
    for v in timeout boot_timeout off_timeout log_lines smp; do
        [[ ${!v} =~ ^[0-9]+$ ]] || die "bad value '${!v}' for $v (a number is expected)"
    done
    # the addresses of dummy0 (rxe0) and dummy1 (rxe1), each with its RoCE v2 GID
    local gid ip gid2 ip2
    read -r ip gid <<< "$(ipv4_gid "$GUEST_IP")"
    [ -n "$gid" ] || die "bad SOFTROCE_GUEST_IP '$GUEST_IP' (an IPv4 address is expected)"
    read -r ip2 gid2 <<< "$(ipv4_gid "$GUEST_IP2")"
    [ -n "$gid2" ] || die "bad SOFTROCE_GUEST_IP2 '$GUEST_IP2' (an IPv4 address is expected)"
    [ "${ip%.*}" != "${ip2%.*}" ] || die "SOFTROCE_GUEST_IP2 ($ip2) must be outside the /24 of SOFTROCE_GUEST_IP ($ip)"
    GUEST_IP=$ip GUEST_IP2=$ip2
    case ${SOFTROCE_ACCEL:-tcg} in
        tcg) accel=(-accel "tcg,thread=multi,tb-size=512" -cpu max) ;;
        kvm) accel=(-accel kvm -cpu host) ;;
        icount)
            local shift=${SOFTROCE_ICOUNT_SHIFT:-0}
            [[ $shift =~ ^[0-9]+$ ]] || die "bad value '$shift' for SOFTROCE_ICOUNT_SHIFT (a number is expected)"
            accel=(-accel "tcg,thread=single,tb-size=512" -cpu max -icount "shift=$shift,sleep=off")
            ;;
        *) die "SOFTROCE_ACCEL must be tcg, kvm or icount" ;;
    esac
    local l links=
    for l in bin sbin lib lib32 lib64 libx32; do
        if [ -L "/$l" ]; then links="$links $l"
        elif [ -d "/$l" ]; then die "/$l is not a symlink into /usr: only merged-/usr hosts are supported"; fi
    done

    prepare_guest
    info "profile $PROFILE, kernel $KPKG, image $KIMAGE, initramfs $INITRD${GROOT:+, root $GROOT}"

    CTL=$(mktemp -d "${TMPDIR:-/tmp}/softroce.XXXXXX")
    trap cleanup EXIT
    trap 'say interrupted; exit 130' INT
    trap 'say terminated; exit 143' TERM
    : > "$CTL/stdout"; : > "$CTL/stderr"; : > "$CTL/mounts.unsorted"
    echo "$links" > "$CTL/links"
    echo "$GUEST_IP $gid $GUEST_IP2 $gid2" > "$CTL/net"
    echo "$timeout" > "$CTL/timeout"
    pmem_prepare
    node_prepare

    # shares: control dir, /usr and /etc (ro), extras, $SOFTROCE_SHARE (rw), CMD's dir (ro)
    QEMU_SHARES=(-fsdev "local,id=ctl,path=$CTL,security_model=none"
                 -device "virtio-9p-pci,fsdev=ctl,mount_tag=ctl")
    local tag
    for tag in usr etc; do
        QEMU_SHARES+=(-fsdev "local,id=$tag,path=/$tag,security_model=none,multidevs=remap,readonly=on"
                      -device "virtio-9p-pci,fsdev=$tag,mount_tag=$tag")
    done
    if [ -n "$GROOT" ]; then             # debian13: the guest root's usr and etc
        : > "$CTL/groot"
        for tag in usr etc; do
            QEMU_SHARES+=(-fsdev "local,id=g$tag,path=$GROOT/$tag,security_model=none,multidevs=remap,readonly=on"
                          -device "virtio-9p-pci,fsdev=g$tag,mount_tag=g$tag")
        done
    fi
    NSHARE=0
    local d list
    IFS=: read -ra list <<< "${SOFTROCE_RO:-}"
    for d in "${list[@]}"; do [ -z "$d" ] || add_share ro "$d"; done
    IFS=: read -ra list <<< "${SOFTROCE_RW:-}"
    for d in "${list[@]}"; do [ -z "$d" ] || add_share rw "$d"; done
    local share=${SOFTROCE_SHARE:-}
    if [ -z "$share" ]; then       # default: the git work tree around $PWD (workspace + target dir), or $PWD
        share=$(git rev-parse --show-toplevel 2>/dev/null) || share=
        [ -n "$share" ] || share=$PWD
    fi
    add_share rw "$share"
    WORKDIR=$(pwd -P)
    local cmd=("$@")
    case $1 in
        */*) # a path: make it absolute and physical, and visible in the guest
            local dir
            dir=$(cd "$(dirname -- "$1")" 2>/dev/null && pwd -P) || { say "$1: no such file or directory"; exit 127; }
            cmd[0]=$dir/${1##*/}
            is_shared "$dir" || add_share ro "$dir" ;;
    esac
    is_shared "$WORKDIR" || say "warning: the current directory $WORKDIR is not shared (see SOFTROCE_SHARE)"
    LC_ALL=C sort -k3 "$CTL/mounts.unsorted" > "$CTL/mounts"   # parents before children
    write_cmd "${cmd[@]}"

    run_vm
}

main "$@"

# shellcheck shell=bash
# scripts/softroce/lib/shares.sh: host directories shared with the guest (virtio-9p).
# Sourced by scripts/softroce/run.sh (see there for the knobs).

# add_share MODE PATH: shares PATH read-only (ro) or read-write (rw) at the same path
add_share() {
    local mode=$1 path
    path=$(cd "$2" 2>/dev/null && pwd -P) || die "cannot share $2: not a directory"
    case $path/ in
        /) die "refusing to share / (set SOFTROCE_SHARE to a subdirectory)" ;;
        /usr/*|/etc/*)
            [ "$mode" = ro ] || die "cannot share $path read-write: /usr and /etc are read-only in the guest"
            return 0 ;;
        /proc/*|/sys/*|/dev/*|/run/softroce/*) die "cannot share $path" ;;
    esac
    NSHARE=$((NSHARE + 1))
    local ro=; [ "$mode" = ro ] && ro=,readonly=on
    QEMU_SHARES+=(-fsdev "local,id=s$NSHARE,path=$path,security_model=none,multidevs=remap$ro"
                  -device "virtio-9p-pci,fsdev=s$NSHARE,mount_tag=s$NSHARE")
    printf 's%s %s %s\n' "$NSHARE" "$mode" "$path" >> "$CTL/mounts.unsorted"
}

# is_shared PATH: PATH (physical) is visible in the guest through a share
is_shared() {
    local tag mode path
    case $1/ in /usr/*|/etc/*) return 0 ;; esac
    while read -r tag mode path; do
        case $1/ in "$path"/*) return 0 ;; esac
    done < "$CTL/mounts.unsorted"
    return 1
}

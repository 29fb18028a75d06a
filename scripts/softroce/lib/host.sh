# shellcheck shell=bash
# scripts/softroce/lib/host.sh: host packages and apt: the host's own apt, or the profile's private one.
# Sourced by scripts/softroce/run.sh (see there for the knobs).

# APTOPT: the options of the profile's apt (empty for debian12: the host's own apt; for
# debian13 a private configuration under $PDIR/apt, see set_profile)
APTOPT=()

# apt_update_host: apt-get update of the host's lists (to install host packages)
apt_update_host() {
    say "apt-get update"
    apt-get update -q >&2 || die "apt-get update failed"
}

# apt_update: apt-get update of the profile's lists (kernel and guest root downloads)
apt_update() {
    if [ ${#APTOPT[@]} -eq 0 ]; then apt_update_host; return; fi
    say "apt-get update ($PROFILE lists, private to $PDIR/apt)"
    apt-get "${APTOPT[@]}" update -q 2>&1 | { grep -v 'Download is performed unsandboxed' >&2 || true; }
    [ "${PIPESTATUS[0]}" = 0 ] || die "apt-get update ($PROFILE) failed"
}

# apt_install PKG...: install, running apt-get update first only when needed
apt_install() {
    [ "$(id -u)" = 0 ] || die "missing host packages, run as root: apt-get install --no-install-recommends $*"
    say "installing $*"
    local log; log=$(mktemp)
    local cmd=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends
               -o DPkg::Lock::Timeout=300 "$@")
    if ! "${cmd[@]}" >"$log" 2>&1; then
        apt_update_host
        "${cmd[@]}" >&2 || { rm -f "$log"; die "apt-get install $* failed"; }
    fi
    rm -f "$log"
}

host_packages() {
    local need=()
    command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
    [ -e /usr/share/qemu/qboot.rom ]      || need+=(qemu-system-data)
    command -v rdma >/dev/null             || need+=(iproute2)
    command -v ibv_devinfo >/dev/null      || need+=(ibverbs-utils)
    compgen -G '/usr/lib/*-linux-gnu/libibverbs/librxe-rdmav*.so' >/dev/null || need+=(ibverbs-providers)
    compgen -G '/usr/lib/*-linux-gnu/librdmacm.so.1' >/dev/null || need+=(librdmacm1)
    command -v xz >/dev/null               || need+=(xz-utils)
    local p extra=${SOFTROCE_PACKAGES:-}
    [ -z "${SOFTROCE_PMEM:-}" ] || extra+=" ndctl"   # the guest's devdax namespace (lib/pmem.sh)
    [ "$PROFILE" = debian12 ] || extra=     # debian13: they go into the guest root instead
    for p in $extra; do                     # extra packages for CMD (it runs the host's /usr)
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
    done
    if [ ${#need[@]} -gt 0 ]; then apt_install "${need[@]}"; fi
}

# kernel_package: the kernel package linux-image-amd64 currently depends on
kernel_package() {
    apt-cache "${APTOPT[@]}" depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'
}

# download DIR PKG...: apt-get download into DIR (not installed)
download() {
    local dir=$1; shift
    (cd "$dir" && apt-get "${APTOPT[@]}" download -q "$@" 2>&1) | { grep -v 'Download is performed unsandboxed' >&2 || true; }
}

#!/usr/bin/env bash
# scripts/softroce/run.sh CMD [ARGS...]
#
# Runs CMD inside a throw-away QEMU guest with Soft-RoCE, so that the real RDMA
# backend of rpma-rs (libibverbs + librdmacm over the kernel's rxe provider) can
# be tested on a host whose kernel has no RDMA support at all (CI).
#
# The guest boots Debian's stock kernel (the package linux-image-amd64 depends
# on) under QEMU TCG (no KVM needed), loads rdma_rxe/rdma_ucm, creates the
# netdev dummy0 with 10.77.0.1/24 and the Soft-RoCE device rxe0 on top of it.
# It has no network card: nothing it sends can leave it.
#
# The guest sees the host's /usr and /etc read-only (host-built binaries and
# their libraries, e.g. the rxe verbs provider, run unchanged), and the git work
# tree around the current directory (else the current directory; or
# $SOFTROCE_SHARE) read-write at the same path. When CMD is a path outside of
# it (a test binary in a target dir elsewhere), CMD's directory is shared
# read-only too. CMD runs in the current directory as root, with the host's
# exported environment plus RPMA_TEST_DEVICE=rxe0 and RPMA_TEST_ADDR=10.77.0.1,
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
#   SOFTROCE_SMP            guest CPUs (default 2)
#   SOFTROCE_ACCEL          tcg (default) or kvm
#   SOFTROCE_TIMEOUT        seconds for the VM (boot + CMD): then CMD is killed, and the
#                           exit status is 124 (default 1800)
#   SOFTROCE_BOOT_TIMEOUT   seconds for the guest to reach CMD, then exit 125 (default 180)
#   SOFTROCE_POWEROFF_TIMEOUT  seconds qemu gets to exit once CMD is done, then it is
#                           killed (default 20); CMD's status is kept
#   SOFTROCE_GUEST_IP       address of dummy0, /24 (default 10.77.0.1)
#   SOFTROCE_LOG_LINES      lines of guest kernel log printed on failure (default 30)
#   SOFTROCE_PACKAGES       extra host packages CMD needs, installed if missing
#                           (e.g. "rdmacm-utils perftest"; CMD runs the host's /usr)
#   SOFTROCE_APPEND         extra guest kernel command line (e.g. "loglevel=7")
#   SOFTROCE_VERBOSE=1      print progress, the guest console and timings to stderr
set -euo pipefail

# All the work is done by functions called from the last line: bash reads a
# script lazily, so editing this file during a run cannot break that run.

PROG=softroce
say()  { echo "$PROG: $*" >&2; }
info() { if [ "${SOFTROCE_VERBOSE:-0}" = 1 ]; then say "$@"; fi; }
die()  { say "$*"; exit 125; }

# Modules put in the initramfs (with their dependencies) and loaded
# in this order: virtio + 9p for the shares, crc32 for rxe's ICRC, Soft-RoCE,
# RDMA CM (+ ib_uverbs), dummy for dummy0.
MODULES="virtio_pci 9pnet_virtio 9p crc32_generic rdma_rxe rdma_ucm dummy"

# ------------------------------------------------------------------ apt helpers
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

# ------------------------------------------------------------------ guest init
# The initramfs' /init. Its text is part of the initramfs cache key.
guest_init() {
    cat <<'INIT'
#!/sb/busybox sh
# softroce guest init (generated by scripts/softroce/run.sh)
B=/sb/busybox
C=/run/softroce
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
$B mkdir -p /proc /sys /dev /run /tmp /usr /etc /var/tmp /root $C
$B mount -t proc proc /proc
$B mount -t sysfs sysfs /sys
$B mount -t devtmpfs devtmpfs /dev
CTL_OK=
fail() {
    echo "softroce-init: $*"
    if [ -n "$CTL_OK" ]; then
        echo "$*" > $C/setup-failed.tmp; $B dmesg > $C/dmesg; $B mv $C/setup-failed.tmp $C/setup-failed
    else
        $B dmesg | $B tail -n 40
    fi
    $B sync; $B poweroff -f
}
for m in $($B cat /modules/order); do
    $B insmod /modules/$m.ko || fail "insmod $m failed"
done
O=trans=virtio,version=9p2000.L,msize=512000
$B mount -t 9p -o $O,cache=none ctl $C || fail "cannot mount the control share"
CTL_OK=1
$B mount -t 9p -o $O,ro,cache=loose usr /usr || fail "cannot mount /usr"
$B mount -t 9p -o $O,ro,cache=loose etc /etc || fail "cannot mount /etc"
for l in $($B cat $C/links); do $B ln -s usr/$l /$l; done
$B ln -s /run /var/run
$B mkdir -p /dev/pts /dev/shm
$B mount -t devpts devpts /dev/pts
$B mount -t tmpfs tmpfs /dev/shm
$B mount -t tmpfs tmpfs /tmp
$B mount -t tmpfs tmpfs /var/tmp
while read -r tag mode path; do
    $B mkdir -p "$path" && $B mount -t 9p -o $O,$mode,cache=mmap "$tag" "$path" || fail "cannot mount $path"
done < $C/mounts
$B hostname softroce
read -r IP GID < $C/net
$B ip link set lo up || fail "lo up failed"
[ -e /sys/class/net/dummy0 ] || ip link add dummy0 type dummy || fail "cannot create dummy0"
$B ip addr add $IP/24 dev dummy0 && $B ip link set dummy0 up || fail "dummy0 setup failed"
rdma link add rxe0 type rxe netdev dummy0 || fail "rdma link add rxe0 failed"
# wait (up to 10 s) for the port to be ACTIVE and for the IPv4 GID that RDMA CM needs
P=/sys/class/infiniband/rxe0/ports/1
n=0
until $B grep -q ACTIVE $P/state 2>/dev/null && $B cat $P/gids/* 2>/dev/null | $B grep -q "$GID"; do
    n=$((n + 1)); [ $n -le 500 ] || fail "rxe0 not ACTIVE with GID $GID after 10 s"
    $B usleep 20000
done
if [ -e $C/groot ]; then
    # profile debian13: the Debian 13 root's /usr and /etc replace the host's (used until now
    # for the setup above: ip, rdma)
    $B umount /usr && $B mount -t 9p -o $O,ro,cache=loose gusr /usr || fail "cannot mount the guest root's /usr"
    $B umount /etc && $B mount -t 9p -o $O,ro,cache=loose getc /etc || fail "cannot mount the guest root's /etc"
fi
$B cut -d' ' -f1 /proc/uptime > $C/t_cmd
ulimit -l unlimited
ulimit -n 65536
echo "softroce: running CMD" > /dev/kmsg
/bin/bash $C/cmd.sh </dev/null >>$C/stdout 2>>$C/stderr &
CPID=$!
# guest-side timeout (guest uptime, in seconds): kill everything, keep the kernel log
read -r T < $C/timeout
(
    while [ "$($B cut -d. -f1 /proc/uptime)" -lt "$T" ]; do $B sleep 1; done
    : > $C/timed-out
    echo "softroce: SOFTROCE_TIMEOUT (${T}s) expired: killing CMD" > /dev/kmsg
    $B kill -TERM -1; $B sleep 5; $B kill -KILL -1
) &
WPID=$!
wait $CPID
RC=$?
$B kill $WPID 2>/dev/null
[ -e $C/timed-out ] && RC=124
echo $RC > $C/rc.tmp
echo "softroce: CMD exited with status $RC" > /dev/kmsg
$B cut -d' ' -f1 /proc/uptime > $C/t_end
$B dmesg > $C/dmesg 2>/dev/null
$B mv $C/rc.tmp $C/rc
$B sync
$B poweroff -f
INIT
}

# ------------------------------------------------------------------ kernel + initramfs
# resolve_module NAME: copies module NAME (decompressed) into the initramfs and
# appends it to ORDER, after its dependencies. The kernel package ships no
# modules.dep (its postinst runs depmod), so dependencies are read from each
# module's own modinfo "depends=" field. Built-in modules are skipped.
resolve_module() {
    local name=${1//-/_} path out deps dep
    [ -z "${SEEN[$name]:-}" ] || return 0
    SEEN[$name]=1
    if grep -q "/$name.ko\$" "$MODDIR/modules.builtin.norm" 2>/dev/null; then return 0; fi
    path=${KO[$name]:-}
    [ -n "$path" ] || die "module $name is not in $KPKG"
    out=$ROOT/modules/$name.ko
    case $path in
        *.ko)     cp "$path" "$out" ;;
        *.ko.xz)  xz -dc "$path" > "$out" ;;
        *.ko.gz)  gzip -dc "$path" > "$out" ;;
        *.ko.zst) zstd -qdc "$path" > "$out" ;;
        *) die "unknown module format: $path" ;;
    esac
    deps=$(LC_ALL=C tr '\0' '\n' < "$out" | LC_ALL=C sed -n 's/^depends=//p')
    for dep in ${deps//,/ }; do resolve_module "$dep"; done
    ORDER+=("$name")
}

# prepare_guest: sets KIMAGE and INITRD, fetching and building what is missing
prepare_guest() {
    mkdir -p "$CACHE" || die "cannot create $CACHE"
    exec 9>"$CACHE/.lock"
    flock 9                                    # concurrent runs: one prepares, the others wait
    set_profile
    mkdir -p "$PDIR/debs"
    rm -rf "$CACHE"/build.* "$PDIR"/build.*    # left over by an interrupted build
    host_packages

    local pinned=$PDIR/kernel.pkg
    if [ -n "${SOFTROCE_KERNEL:-}" ]; then KPKG=$SOFTROCE_KERNEL
    elif [ -s "$pinned" ]; then KPKG=$(cat "$pinned")
    else
        KPKG=$(kernel_package)
        [ -n "$KPKG" ] || { apt_update; KPKG=$(kernel_package); }
        [ -n "$KPKG" ] || die "cannot resolve the package linux-image-amd64 depends on"
    fi

    local bbdeb kdeb key
    bbdeb=$(compgen -G "$PDIR/debs/busybox-static_*.deb" | tail -n1 || true)
    kdeb=$(compgen -G "$PDIR/debs/${KPKG}_*.deb" | tail -n1 || true)
    key=$( { guest_init; echo "$MODULES ${kdeb##*/} ${bbdeb##*/}"; } | sha256sum | cut -c1-16)
    KDIR=$CACHE/$KPKG
    INITRD=$KDIR/initrd-$key.gz
    KIMAGE=$(cat "$KDIR/image" 2>/dev/null || true)
    if [ -n "$kdeb" ] && [ -n "$bbdeb" ] && [ -s "$INITRD" ] && [ -n "$KIMAGE" ] && [ -s "$KIMAGE" ]; then
        touch "$INITRD"                         # in use: not stale
        prepare_root
        flock -u 9
        return 0
    fi

    # fetch the missing packages (apt-get download only, nothing is installed)
    local want=()
    [ -n "$kdeb" ] || want+=("$KPKG")
    [ -n "$bbdeb" ] || want+=(busybox-static)
    if [ ${#want[@]} -gt 0 ]; then
        say "downloading ${want[*]} into $PDIR/debs"
        if ! download "$PDIR/debs" "${want[@]}"; then
            apt_update
            if ! download "$PDIR/debs" "${want[@]}" && [ -z "${SOFTROCE_KERNEL:-}" ] && [ -z "$kdeb" ]; then
                # the pinned kernel is gone from the archive: take the current one
                KPKG=$(kernel_package); want=("$KPKG"); [ -n "$bbdeb" ] || want+=(busybox-static)
                download "$PDIR/debs" "${want[@]}" || die "apt-get download ${want[*]} failed"
            fi
        fi
        bbdeb=$(compgen -G "$PDIR/debs/busybox-static_*.deb" | tail -n1 || true)
        kdeb=$(compgen -G "$PDIR/debs/${KPKG}_*.deb" | tail -n1 || true)
        if [ -z "$kdeb" ] || [ -z "$bbdeb" ]; then die "apt-get download ${want[*]} failed"; fi
        key=$( { guest_init; echo "$MODULES ${kdeb##*/} ${bbdeb##*/}"; } | sha256sum | cut -c1-16)
        KDIR=$CACHE/$KPKG
        INITRD=$KDIR/initrd-$key.gz
    fi
    [ -n "${SOFTROCE_KERNEL:-}" ] || echo "$KPKG" > "$pinned"

    say "building the guest kernel image and initramfs from ${kdeb##*/} (once)"
    local tmp; tmp=$(mktemp -d "$CACHE/build.XXXXXX")
    mkdir -p "$KDIR" "$tmp/k" "$tmp/bb"
    dpkg-deb -x "$kdeb" "$tmp/k"
    dpkg-deb -x "$bbdeb" "$tmp/bb"
    local vmlinuz kver off
    vmlinuz=$(compgen -G "$tmp/k/boot/vmlinuz-*" | head -n1) || die "no vmlinuz in ${kdeb##*/}"
    kver=${vmlinuz##*/vmlinuz-}
    MODDIR=$tmp/k/lib/modules/$kver
    [ -d "$MODDIR" ] || MODDIR=$tmp/k/usr/lib/modules/$kver

    # Boot image. QEMU boots an uncompressed ELF vmlinux through its PVH entry
    # point, which skips the kernel's self-decompression (slow under TCG).
    KIMAGE=$KDIR/vmlinuz
    cp "$vmlinuz" "$KDIR/vmlinuz.tmp" && mv "$KDIR/vmlinuz.tmp" "$KDIR/vmlinuz"
    if grep -qs '^CONFIG_PVH=y' "$tmp/k/boot/config-$kver"; then
        off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$vmlinuz" | head -n1 | cut -d: -f1 || true)
        # (tail dies of SIGPIPE when xz stops at the end of the stream: ignore its status)
        if [ -n "$off" ] && { tail -c +$((off + 1)) "$vmlinuz" 2>/dev/null || true; } \
                | xz -dc --single-stream > "$KDIR/vmlinux.tmp" 2>/dev/null \
            && [ "$(head -c4 "$KDIR/vmlinux.tmp" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ]; then
            mv "$KDIR/vmlinux.tmp" "$KDIR/vmlinux"
            KIMAGE=$KDIR/vmlinux
        else
            rm -f "$KDIR/vmlinux.tmp"
            info "no ELF vmlinux could be extracted; booting vmlinuz"
        fi
    fi
    echo "$KIMAGE" > "$KDIR/image"

    # initramfs: static busybox, the modules, /init
    ROOT=$tmp/root
    mkdir -p "$ROOT/sb" "$ROOT/modules"
    local bb=$tmp/bb/bin/busybox; [ -e "$bb" ] || bb=$tmp/bb/usr/bin/busybox   # bookworm / trixie
    cp "$bb" "$ROOT/sb/busybox"
    ORDER=()
    declare -gA KO=() SEEN=()
    local m
    while IFS= read -r m; do
        local b=${m##*/}; b=${b%%.ko*}; KO[${b//-/_}]=$m
    done < <(find "$MODDIR" -name '*.ko*')
    [ ${#KO[@]} -gt 0 ] || die "no kernel modules in ${kdeb##*/}"
    tr - _ < "$MODDIR/modules.builtin" > "$MODDIR/modules.builtin.norm" 2>/dev/null || true
    for m in $MODULES; do resolve_module "$m"; done
    printf '%s\n' "${ORDER[@]}" > "$ROOT/modules/order"
    guest_init > "$ROOT/init"
    chmod 755 "$ROOT/init"
    (cd "$ROOT" && find . | "$bb" cpio -o -H newc 2>/dev/null | gzip -1) > "$INITRD.tmp"
    mv "$INITRD.tmp" "$INITRD"
    rm -rf "$tmp"
    info "initramfs modules: ${ORDER[*]}"
    # initramfs images of other versions of this script, unused for a day
    find "$KDIR" -maxdepth 1 -name 'initrd-*.gz' ! -newer "$INITRD" -mtime +1 -delete 2>/dev/null || true
    prepare_root
    flock -u 9
}

# ------------------------------------------------------------------ profiles
# Packages of the debian13 guest root (plus SOFTROCE_PACKAGES and their dependencies): a shell,
# rdma-core 56 (verbs, CM, the rxe provider, the headers), librpma 1.3 with its headers, and a C
# compiler (tests/interop.rs compiles its C librpma peer in the guest).
ROOT_PACKAGES="bash coreutils dash grep sed mawk findutils libc-bin libc6 libgcc-s1 libibverbs1 ibverbs-providers librdmacm1t64
               ibverbs-utils rdmacm-utils librpma0 librpma-dev libibverbs-dev librdmacm-dev gcc libc6-dev"
# Bumped when the way a root is built changes (part of its cache key).
ROOT_RECIPE=1

# set_profile: PROFILE, PDIR (its cache dir) and APTOPT (its apt configuration)
set_profile() {
    PROFILE=${SOFTROCE_PROFILE:-debian12}
    case $PROFILE in
        debian12) PDIR=$CACHE; APTOPT=() ;;
        debian13)
            PDIR=$CACHE/debian13
            local a=$PDIR/apt
            APTOPT=(-o "Dir::Etc::SourceList=$a/sources.list" -o "Dir::Etc::SourceParts=$a/empty"
                    -o Dir::Etc::Preferences=/nonexistent -o "Dir::Etc::PreferencesParts=$a/empty"
                    -o "Dir::State=$a" -o "Dir::State::Lists=$a/lists" -o "Dir::State::status=$a/status"
                    -o "Dir::Cache=$a/cache" -o "Dir::Cache::archives=$a/archives"
                    -o APT::Architecture=amd64 -o APT::Architectures::=amd64 -o Debug::NoLocking=1
                    -o APT::Install-Recommends=0 -o APT::Get::List-Cleanup=0)
            mkdir -p "$a/lists/partial" "$a/archives/partial" "$a/cache" "$a/empty" || die "cannot create $a"
            [ -e "$a/status" ] || : > "$a/status"   # nothing installed: apt resolves every dependency
            local mirror
            mirror=$( { grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '$2 ~ /\/debian\/?$/ {print $2}';
                        grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | grep -v security |
                            awk '{for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; break}}'; } | head -n1 || true)
            echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] ${mirror:-http://deb.debian.org/debian} trixie main" \
                > "$a/sources.list.tmp" && mv "$a/sources.list.tmp" "$a/sources.list"
            compgen -G "$a/lists/*_Packages*" >/dev/null || apt_update ;;
        *) die "SOFTROCE_PROFILE must be debian12 or debian13, not '$PROFILE'" ;;
    esac
}

# prepare_root: for debian13, sets GROOT to a Debian 13 root (its usr/ and etc/ become the guest's
# /usr and /etc once rxe0 is up), unpacked from the packages of ROOT_PACKAGES and their
# dependencies (dpkg-deb -x: no maintainer scripts run), built once per package list and kept.
GROOT=
prepare_root() {
    [ "$PROFILE" = debian13 ] || return 0
    local req key
    req=$(echo "$ROOT_PACKAGES ${SOFTROCE_PACKAGES:-}" | tr -s ' \n' '\n\n' | sed '/^$/d' | sort -u)
    key=$( { echo "recipe $ROOT_RECIPE"; echo "$req"; } | sha256sum | cut -c1-16)
    GROOT=$PDIR/root-$key
    if [ -e "$GROOT/.complete" ]; then touch "$GROOT/.complete"; return 0; fi
    say "building the Debian 13 guest root from: $(echo "$req" | tr '\n' ' ')(once)"
    # shellcheck disable=SC2086 # word splitting wanted
    local sim
    sim=$(apt-get "${APTOPT[@]}" install -s $req 2>&1) || {
        apt_update
        sim=$(apt-get "${APTOPT[@]}" install -s $req 2>&1) || { echo "$sim" >&2; die "cannot resolve the Debian 13 root's packages"; }
    }
    # shellcheck disable=SC2086
    apt-get "${APTOPT[@]}" install -d -y -q $req 2>&1 | { grep -v -e 'Download is performed unsandboxed' \
        -e '^Reading\|^Suggested\|^Recommended\|^Building\|^Get:\|^Fetched\|^Download complete\|^Need to get\|^After this\|^The following\|^  \|^[0-9]* upgraded' >&2 || true; }
    [ "${PIPESTATUS[0]}" = 0 ] || die "apt-get install --download-only of the Debian 13 root failed"
    local tmp; tmp=$(mktemp -d "$PDIR/build.XXXXXX")
    local pkg ver deb n=0 versions=
    while read -r pkg ver; do
        deb=$PDIR/apt/archives/${pkg}_${ver//:/%3a}_amd64.deb
        [ -e "$deb" ] || deb=$PDIR/apt/archives/${pkg}_${ver//:/%3a}_all.deb
        [ -e "$deb" ] || die "missing $pkg $ver in $PDIR/apt/archives"
        dpkg-deb -x "$deb" "$tmp" || die "cannot unpack ${deb##*/}"
        n=$((n + 1)); versions+="$pkg $ver"$'\n'
    done < <(echo "$sim" | sed -n 's/^Inst \([^ ]*\) (\([^ ]*\) .*/\1 \2/p')
    [ "$n" -gt 0 ] || die "no packages for the Debian 13 root"
    # merged /usr: the guest links /bin, /lib, ... into /usr
    local d
    for d in bin sbin lib lib64; do
        if [ -d "$tmp/$d" ] && [ ! -L "$tmp/$d" ]; then
            mkdir -p "$tmp/usr/$d"; cp -a "$tmp/$d/." "$tmp/usr/$d/"; rm -rf "${tmp:?}/$d"
        fi
    done
    # what maintainer scripts and alternatives would have made
    [ -e "$tmp/usr/bin/sh" ] || ln -s dash "$tmp/usr/bin/sh"
    [ -e "$tmp/usr/bin/cc" ] || ln -s gcc "$tmp/usr/bin/cc"
    [ -e "$tmp/usr/bin/awk" ] || ln -s mawk "$tmp/usr/bin/awk"
    [ -e "$tmp/usr/lib64/ld-linux-x86-64.so.2" ] || die "the Debian 13 root has no /usr/lib64/ld-linux-x86-64.so.2"
    mkdir -p "$tmp/etc"
    for d in passwd group hosts nsswitch.conf; do [ -e "$tmp/etc/$d" ] || cp /etc/$d "$tmp/etc/$d" 2>/dev/null || true; done
    { echo "# softroce guest root, profile debian13 (scripts/softroce/run.sh): $n packages"
      echo "$versions"; } > "$tmp/etc/softroce-packages"
    : > "$tmp/.complete"
    rm -rf "$GROOT"; mv "$tmp" "$GROOT"
    info "Debian 13 root $GROOT: $n packages, $(du -sh "$GROOT" | cut -f1)"
    # roots of other package lists, unused for a week
    find "$PDIR" -maxdepth 1 -name 'root-*' ! -path "$GROOT" ! -newer "$GROOT/.complete" -mtime +7 \
        -exec rm -rf {} + 2>/dev/null || true
}

# ------------------------------------------------------------------ shares
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

# ------------------------------------------------------------------ run
# write_cmd CMD ARGS...: the guest script that runs CMD with the host environment
write_cmd() {
    local name
    {
        echo "# generated by scripts/softroce/run.sh"
        while read -r name; do
            case $name in
                BASH|BASH_*|BASHOPTS|SHELLOPTS|SHLVL|PWD|OLDPWD|HOSTNAME|_|TMPDIR|TMP|TEMP) continue ;;
                SOFTROCE_*|SSH_*|DISPLAY|XAUTHORITY|XDG_RUNTIME_DIR|DBUS_SESSION_BUS_ADDRESS) continue ;;
            esac
            printf 'export %s=%q\n' "$name" "${!name-}"
        done < <(compgen -e)
        printf 'export RPMA_TEST_DEVICE=rxe0 RPMA_TEST_ADDR=%q SOFTROCE_IP=%q\n' "$GUEST_IP" "$GUEST_IP"
        # shellcheck disable=SC2016 # expanded in the guest
        echo '[ -z "${HOME:-}" ] || [ -d "$HOME" ] || mkdir -p "$HOME" 2>/dev/null || true'
        printf 'cd %q || { echo "softroce: %q is not visible in the guest (see SOFTROCE_SHARE)" >&2; exit 126; }\n' \
            "$WORKDIR" "$WORKDIR"
        printf 'exec'; printf ' %q' "$@"; printf '\n'
    } > "$CTL/cmd.sh"
}

QPID=
TAILS=()
CTL=
# stop_qemu: SIGTERM, then SIGKILL if qemu is still there after 2 s
stop_qemu() {
    local n=0
    kill "$QPID" 2>/dev/null || return 0
    while [ $n -lt 20 ] && kill -0 "$QPID" 2>/dev/null; do n=$((n + 1)); sleep 0.1; done
    kill -9 "$QPID" 2>/dev/null || true
}

# shellcheck disable=SC2317 # called through trap
cleanup() {
    if [ -n "$QPID" ]; then stop_qemu; fi
    if [ ${#TAILS[@]} -gt 0 ]; then kill "${TAILS[@]}" 2>/dev/null || true; fi
    if [ -n "$CTL" ]; then rm -rf "$CTL"; fi
}

main() {
    [ $# -ge 1 ] || { echo "usage: $0 CMD [ARGS...]  (see scripts/softroce/README.md)" >&2; exit 125; }
    local t_start=$EPOCHREALTIME
    CACHE=${SOFTROCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rpma-rs/softroce}
    GUEST_IP=${SOFTROCE_GUEST_IP:-10.77.0.1}
    local mem=${SOFTROCE_MEM:-1G} smp=${SOFTROCE_SMP:-2} accel=()
    local timeout=${SOFTROCE_TIMEOUT:-1800} boot_timeout=${SOFTROCE_BOOT_TIMEOUT:-180}
    local off_timeout=${SOFTROCE_POWEROFF_TIMEOUT:-20} log_lines=${SOFTROCE_LOG_LINES:-30}
    local v
    for v in timeout boot_timeout off_timeout log_lines smp; do
        [[ ${!v} =~ ^[0-9]+$ ]] || die "bad value '${!v}' for $v (a number is expected)"
    done
    # the RoCE v2 GID of the address, as the guest's sysfs shows it (tail only)
    local gid='' ip='' o
    if [[ $GUEST_IP =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]]; then
        gid=ffff:
        for o in 1 2 3 4; do
            o=$((10#${BASH_REMATCH[o]}))
            [ "$o" -le 255 ] || gid=''
            [ -z "$gid" ] || { gid+=$(printf '%02x' "$o"); ip+=${ip:+.}$o; }
        done
        [ -z "$gid" ] || gid=${gid:0:9}:${gid:9}
    fi
    [ -n "$gid" ] || die "bad SOFTROCE_GUEST_IP '$GUEST_IP' (an IPv4 address is expected)"
    GUEST_IP=$ip
    case ${SOFTROCE_ACCEL:-tcg} in
        tcg) accel=(-accel "tcg,thread=multi,tb-size=512" -cpu max) ;;
        kvm) accel=(-accel kvm -cpu host) ;;
        *) die "SOFTROCE_ACCEL must be tcg or kvm" ;;
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
    echo "$GUEST_IP $gid" > "$CTL/net"
    echo "$timeout" > "$CTL/timeout"

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

    # qemu (and the tails below) die with us (pdeathsig), even if we are killed with SIGKILL
    local guard=()
    if command -v setpriv >/dev/null; then guard=(setpriv --pdeathsig KILL --); fi
    "${guard[@]}" qemu-system-x86_64 "${accel[@]}" -M q35 -m "$mem" -smp "$smp" \
        -nodefaults -no-user-config -display none -no-reboot -nic none \
        -bios /usr/share/qemu/qboot.rom -serial "file:$CTL/console.log" \
        -kernel "$KIMAGE" -initrd "$INITRD" \
        -append "console=ttyS0 quiet loglevel=4 cryptomgr.notests=1 panic=-1 oops=panic mitigations=off tsc=reliable${SOFTROCE_APPEND:+ $SOFTROCE_APPEND}" \
        "${QEMU_SHARES[@]}" </dev/null >"$CTL/qemu.log" 2>&1 &
    QPID=$!
    info "qemu pid $QPID"
    # stream CMD's output; tail stops once qemu is gone
    "${guard[@]}" tail -n +1 -F -s 0.1 --pid="$QPID" "$CTL/stdout" 2>/dev/null & TAILS+=($!)
    "${guard[@]}" tail -n +1 -F -s 0.1 --pid="$QPID" "$CTL/stderr" >&2 2>/dev/null & TAILS+=($!)

    # watchdog
    local why='' rc=125 t0=$SECONDS t_done=''
    while kill -0 "$QPID" 2>/dev/null; do
        if [ -e "$CTL/rc" ] || [ -e "$CTL/setup-failed" ]; then
            [ -n "$t_done" ] || t_done=$SECONDS
            if [ $((SECONDS - t_done)) -ge "$off_timeout" ]; then
                why="the guest did not power off within ${off_timeout}s; VM killed"; break
            fi
        elif [ ! -e "$CTL/t_cmd" ] && [ $((SECONDS - t0)) -ge "$boot_timeout" ]; then
            why="the guest did not reach CMD within ${boot_timeout}s (SOFTROCE_BOOT_TIMEOUT); VM killed"; break
        elif [ $((SECONDS - t0)) -ge $((timeout + 30)) ]; then   # the guest enforces $timeout itself
            why="timed out after ${timeout}s (SOFTROCE_TIMEOUT) and the guest did not stop; VM killed"
            rc=124; break
        fi
        sleep 0.1
    done
    if [ -n "$why" ]; then stop_qemu; fi
    local qrc=0
    wait "$QPID" 2>/dev/null || qrc=$?      # (2>/dev/null: no "Killed" job notice)
    QPID=
    wait "${TAILS[@]}" 2>/dev/null || true
    TAILS=()

    if [ "${SOFTROCE_VERBOSE:-0}" = 1 ]; then
        { echo "---- guest console ----"; cat "$CTL/console.log" "$CTL/qemu.log" 2>/dev/null; echo "----"; } >&2
        say "guest uptime at CMD start $(cat "$CTL/t_cmd" 2>/dev/null || echo -)s, at CMD end" \
            "$(cat "$CTL/t_end" 2>/dev/null || echo -)s; host wall $(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $t_start }")s"
    fi
    [ -z "$why" ] || say "$why"
    if [ -s "$CTL/rc" ]; then
        rc=$(cat "$CTL/rc")
        [[ $rc =~ ^[0-9]+$ ]] || { say "bad exit status from the guest: $rc"; exit 125; }
        if [ -e "$CTL/timed-out" ]; then
            say "CMD timed out after ${timeout}s (SOFTROCE_TIMEOUT) and was killed; guest kernel log (tail):"
            tail -n "$log_lines" "$CTL/dmesg" 2>/dev/null | sed 's/^/  | /' >&2
        elif [ "$rc" != 0 ]; then
            say "CMD exited with status $rc; guest kernel log (tail):"
            tail -n "$log_lines" "$CTL/dmesg" 2>/dev/null | sed 's/^/  | /' >&2
        fi
        exit "$rc"
    fi
    if [ -s "$CTL/setup-failed" ]; then
        say "guest setup failed: $(cat "$CTL/setup-failed"); guest kernel log (tail):"
        tail -n "$log_lines" "$CTL/dmesg" 2>/dev/null | sed 's/^/  | /' >&2
        say "guest console (tail):"
        tail -n 10 "$CTL/console.log" 2>/dev/null | sed 's/^/  | /' >&2
        exit 125
    fi
    if [ "$rc" = 124 ]; then say "guest console (tail):"
    else say "no exit status from the guest (qemu exit status $qrc); guest console (tail):"; fi
    if [ -s "$CTL/console.log" ]; then tail -n "$log_lines" "$CTL/console.log" | sed 's/^/  | /' >&2
    else echo "  | (empty: the kernel printed nothing)" >&2; fi
    sed 's/^/  qemu: /' "$CTL/qemu.log" >&2 2>/dev/null || true
    exit "$rc"
}

main "$@"

# shellcheck shell=bash
# scripts/softroce/lib/image.sh: the guest kernel image and the initramfs, fetched and built once
# into the cache.
# Sourced by scripts/softroce/run.sh (see there for the knobs).

# Modules put in the initramfs (with their dependencies) and loaded
# in this order: virtio + 9p for the shares, crc32 for rxe's ICRC, Soft-RoCE,
# RDMA CM (+ ib_uverbs), dummy for dummy0. The NVDIMM modules (PMEM_MODULES, lib/pmem.sh) are
# in the initramfs too (modules/order-pmem), loaded only with SOFTROCE_PMEM, and so are the modules of
# a cluster node (LINK_MODULES: modules/order-link, loaded only with SOFTROCE_LINK): the NIC on the
# cluster's link, netem for loss, delay and reordering, clsact + u32 + gact for the partitions.
MODULES="virtio_pci 9pnet_virtio 9p crc32_generic rdma_rxe rdma_ucm dummy"
LINK_MODULES="virtio_net sch_netem sch_ingress cls_u32 act_gact"

# guest_init: the initramfs' /init (lib/guest-init). Its text is part of the initramfs cache key.
guest_init() {
    cat "$LIB/guest-init"
}

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
    key=$( { guest_init; echo "$MODULES / $PMEM_MODULES / $LINK_MODULES ${kdeb##*/} ${bbdeb##*/}"; } | sha256sum | cut -c1-16)
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
        key=$( { guest_init; echo "$MODULES / $PMEM_MODULES / $LINK_MODULES ${kdeb##*/} ${bbdeb##*/}"; } | sha256sum | cut -c1-16)
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
    # the NVDIMM modules (lib/pmem.sh), loaded by the init only with SOFTROCE_PMEM
    local base=("${ORDER[@]}")
    ORDER=()
    for m in $PMEM_MODULES; do resolve_module "$m"; done
    printf '%s\n' "${ORDER[@]}" > "$ROOT/modules/order-pmem"
    base+=(/ "${ORDER[@]}")
    # a cluster node's modules (scripts/softroce/cluster.sh), loaded by the init only with SOFTROCE_LINK
    ORDER=()
    for m in $LINK_MODULES; do resolve_module "$m"; done
    printf '%s\n' "${ORDER[@]}" > "$ROOT/modules/order-link"
    ORDER=("${base[@]}" / "${ORDER[@]}")
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

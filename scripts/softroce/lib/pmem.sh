# shellcheck shell=bash
# scripts/softroce/lib/pmem.sh: an emulated NVDIMM (SOFTROCE_PMEM) backed by a host file that
# outlives the VM. Sourced by scripts/softroce/run.sh (see there for the knobs).
#
# QEMU's `nvdimm` device is described to the guest by an ACPI NFIT, so the guest kernel marks it
# "Persistent Memory" (IORES_DESC_PERSISTENT_MEMORY), which rxe's check for
# IBV_ACCESS_FLUSH_PERSISTENT accepts (`memmap=` would make "legacy" pmem, which it refuses).
# The guest loads the NVDIMM modules and, on first use of a file, makes one devdax namespace on
# it with ndctl (its info block lives in the file, so later boots find /dev/dax0.0 by themselves),
# then exports RPMA_TEST_PMEM=/dev/dax0.0 to CMD.

# The NVDIMM modules (with their dependencies), loaded only with SOFTROCE_PMEM.
PMEM_MODULES="libnvdimm nfit nd_pmem device_dax dax_pmem"

PMEM_FILE=
PMEM_BYTES=0

# to_bytes SIZE: a size with an optional K/M/G/T suffix (binary units) in bytes
to_bytes() {
    local n=$1
    [[ $n =~ ^([0-9]+)([KMGT]?)i?B?$ ]] || return 1
    local v=${BASH_REMATCH[1]} u=${BASH_REMATCH[2]}
    case $u in
        K) v=$((v << 10)) ;; M) v=$((v << 20)) ;; G) v=$((v << 30)) ;; T) v=$((v << 40)) ;;
    esac
    echo "$v"
}

# pmem_prepare: checks SOFTROCE_PMEM / SOFTROCE_PMEM_FILE, creates the backing file on first
# use, locks it for the life of this runner (one VM per file) and appends QEMU's arguments to
# PMEM_ARGS. Reads main's `mem`.
PMEM_ARGS=()
pmem_prepare() {
    [ -n "${SOFTROCE_PMEM:-}" ] || return 0
    PMEM_BYTES=$(to_bytes "$SOFTROCE_PMEM") || die "bad SOFTROCE_PMEM '$SOFTROCE_PMEM' (a size such as 256M is expected)"
    [ $((PMEM_BYTES % (2 << 20))) -eq 0 ] && [ "$PMEM_BYTES" -ge $((16 << 20)) ] ||
        die "SOFTROCE_PMEM must be a multiple of 2M and at least 16M, not '$SOFTROCE_PMEM'"
    local mem_bytes
    mem_bytes=$(to_bytes "$mem") || die "SOFTROCE_PMEM needs SOFTROCE_MEM as a size such as 1G, not '$mem'"
    PMEM_FILE=${SOFTROCE_PMEM_FILE:-$CACHE/pmem-$PROFILE.img}
    mkdir -p "$(dirname "$PMEM_FILE")" || die "cannot create the directory of $PMEM_FILE"
    if [ -z "${SOFTROCE_PMEM_FILE:-}" ]; then
        # the default file: while another VM holds it, the next of pmem-PROFILE-2.img ... -4.img
        # (concurrent runs each get an NVDIMM)
        local n=1 f=$PMEM_FILE
        while [ -e "$f" ] && ! flock -n "$f" true 2>/dev/null && [ $n -lt 4 ]; do
            n=$((n + 1)); f=$CACHE/pmem-$PROFILE-$n.img
        done
        PMEM_FILE=$f
    fi
    if [ ! -e "$PMEM_FILE" ]; then
        truncate -s "$PMEM_BYTES" "$PMEM_FILE.tmp" && mv "$PMEM_FILE.tmp" "$PMEM_FILE" || die "cannot create $PMEM_FILE"
        say "created the NVDIMM file $PMEM_FILE ($SOFTROCE_PMEM; the guest makes a devdax namespace on it)"
    fi
    [ -f "$PMEM_FILE" ] || die "SOFTROCE_PMEM_FILE $PMEM_FILE is not a regular file"
    local size; size=$(stat -c %s "$PMEM_FILE")
    [ "$size" = "$PMEM_BYTES" ] ||
        die "$PMEM_FILE has $size bytes, not SOFTROCE_PMEM=$SOFTROCE_PMEM ($PMEM_BYTES): it holds a namespace;" \
            "remove it or use another SOFTROCE_PMEM_FILE"
    # one VM per file: two guests writing one NVDIMM would corrupt each other (the lock goes with
    # this process and QEMU, its child)
    exec 7>>"$PMEM_FILE"
    flock -n 7 || die "$PMEM_FILE is in use by another VM"
    PMEM_ARGS=(-object "memory-backend-file,id=pm0,share=on,mem-path=$PMEM_FILE,size=$PMEM_BYTES"
               -device nvdimm,id=nv0,memdev=pm0)
    MACHINE_OPTS=,nvdimm=on
    MEM_OPTS=",slots=2,maxmem=$(((mem_bytes + PMEM_BYTES) >> 20))M"
    : > "$CTL/pmem"
    info "NVDIMM: $PMEM_FILE, $SOFTROCE_PMEM"
}

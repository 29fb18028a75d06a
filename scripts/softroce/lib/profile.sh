# shellcheck shell=bash
# scripts/softroce/lib/profile.sh: profiles (debian12, debian13) and the Debian 13 guest root.
# Sourced by scripts/softroce/run.sh (see there for the knobs).

# Packages of the debian13 guest root (plus SOFTROCE_PACKAGES and their dependencies): a shell,
# rdma-core 56 (verbs, CM, the rxe provider, the headers), librpma 1.3 with its headers, and a C
# compiler (tests/interop.rs compiles its C librpma peer in the guest), ndctl (the devdax namespace
# of SOFTROCE_PMEM, lib/pmem.sh).
ROOT_PACKAGES="bash coreutils dash grep sed mawk findutils libc-bin libc6 libgcc-s1 libibverbs1 ibverbs-providers librdmacm1t64
               ibverbs-utils rdmacm-utils librpma0 librpma-dev libibverbs-dev librdmacm-dev gcc libc6-dev ndctl"
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

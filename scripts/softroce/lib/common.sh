# shellcheck shell=bash
# scripts/softroce/lib/common.sh: messages and fatal errors (exit 125: the VM failed), the host environment.
# Sourced by scripts/softroce/run.sh (see there for the knobs).

PROG=softroce
say()  { echo "$PROG: $*" >&2; }
info() { if [ "${SOFTROCE_VERBOSE:-0}" = 1 ]; then say "$@"; fi; }
die()  { say "$*"; exit 125; }

# host_env: `export NAME=VALUE` lines for the host's exported environment, as a command in the
# guest gets it (the shell's own variables, the runner's knobs and the desktop's are left out)
host_env() {
    local name
    while read -r name; do
        case $name in
            BASH|BASH_*|BASHOPTS|SHELLOPTS|SHLVL|PWD|OLDPWD|HOSTNAME|_|TMPDIR|TMP|TEMP) continue ;;
            SOFTROCE_*|SSH_*|DISPLAY|XAUTHORITY|XDG_RUNTIME_DIR|DBUS_SESSION_BUS_ADDRESS) continue ;;
        esac
        printf 'export %s=%q\n' "$name" "${!name-}"
    done < <(compgen -e)
}

# shellcheck shell=bash
# The project's virtualenv (.venv) and the Debian packages the scripts need.
# Sourced by the other scripts:
#   source scripts/venv.sh
#   dlock_venv -e ".[api]" --group example   # makes .venv once, installs, puts .venv/bin first on PATH
#   dlock_apt_install redis-server           # installs Debian packages, saying so on stderr
# Nothing is installed into the system's Python: Debian's refuses it (PEP 668), and as root it
# would change every other program's libraries.

# pip learnt dependency groups (`pip install --group`) in 25.1.
DLOCK_PIP_MIN=25.1
# Everything any script installs: once these are in .venv (scripts/test.sh installs them), a
# script asking for a part of them installs nothing.
DLOCK_VENV_ALL=(-e ".[api,celery,postgres,mysql]" --group dev)

dlock_say() {
    echo "${0##*/}: $*" >&2
}

# Installs Debian packages with apt-get, as root or through a sudo that asks no password.
dlock_apt_install() {
    local sudo=()
    dlock_say "installing Debian packages: $*"
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            dlock_say "not root and no sudo without a password: run  sudo apt-get install $*"
            return 1
        fi
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        dlock_say "no apt-get here: install $* with this system's package manager"
        return 1
    fi
    # dpkg needs ldconfig and start-stop-daemon from the sbin directories, which a
    # non-login PATH (/usr/bin:/bin) lacks.
    if [ -z "${DLOCK_APT_UPDATED:-}" ]; then
        "${sudo[@]}" env PATH="$PATH:/usr/sbin:/sbin" apt-get update -qq || return 1
        DLOCK_APT_UPDATED=1
    fi
    "${sudo[@]}" env PATH="$PATH:/usr/sbin:/sbin" DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq "$@" >/dev/null
}

# Prints the first Python 3.11 or later among $PYTHON, python3, python3.13 ... python.
dlock_find_python() {
    local candidate
    for candidate in ${PYTHON:-} python3 python3.13 python3.12 python3.11 python; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    dlock_say "no Python 3.11 or later found (tried ${PYTHON:+$PYTHON, }python3, python3.13, python3.12, python3.11, python);" \
        "on Debian: apt-get install python3 python3-venv"
    return 1
}

# Makes .venv with the given Python. Debian ships venv's pip bootstrap (ensurepip) in a
# separate package, python3-venv: without it `python3 -m venv` fails, so install it and retry.
dlock_venv_create() {
    local python=$1 version
    "$python" -m venv .venv >/dev/null 2>&1 && return 0
    rm -rf .venv
    version=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    if ! "$python" -c 'import ensurepip' >/dev/null 2>&1 && [ -f /etc/debian_version ]; then
        dlock_say "$python -m venv failed: Debian's python3-venv is missing"
        dlock_apt_install "python$version-venv" || return 1
        "$python" -m venv .venv && return 0
    else
        "$python" -m venv .venv && return 0 # again, to show its error
    fi
    rm -rf .venv
    dlock_say "could not make a virtualenv with $python"
    return 1
}

# Whether .venv has DLOCK_VENV_ALL (since pyproject.toml last changed) and the arguments ask for
# nothing beyond it: the project with any of its extras, and the groups that `dev` includes.
dlock_venv_has_all() {
    grep -qxF "$(cksum <pyproject.toml) ${DLOCK_VENV_ALL[*]}" .venv/.dlock-installed 2>/dev/null || return 1
    local arg
    for arg in "$@"; do
        case "$arg" in
        -e | --group | . | ".["*"]" | dev | test | test-base | lint | typing | matrix | release | docs | example) ;;
        *) return 1 ;;
        esac
    done
}

# dlock_venv PIP_INSTALL_ARGS...: makes .venv (once), upgrades its pip to one that knows
# dependency groups, installs the arguments (skipped when they were installed since
# pyproject.toml last changed), and puts .venv/bin first on PATH.
dlock_venv() {
    local python stamp
    if ! [ -x .venv/bin/python ] || ! .venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        rm -rf .venv
        python=$(dlock_find_python) || return 1
        dlock_say "making the virtualenv .venv with $python ($("$python" --version 2>&1))"
        dlock_venv_create "$python" || return 1
    fi
    if ! .venv/bin/python - "$DLOCK_PIP_MIN" <<'EOF' 2>/dev/null; then
import sys
from importlib.metadata import version
have = tuple(int(part) for part in version("pip").split(".")[:2])
want = tuple(int(part) for part in sys.argv[1].split("."))
sys.exit(have < want)
EOF
        .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade "pip>=$DLOCK_PIP_MIN" || return 1
    fi
    # One line per set of arguments installed since pyproject.toml last changed.
    stamp="$(cksum <pyproject.toml) $*"
    if ! grep -qxF "$stamp" .venv/.dlock-installed 2>/dev/null && ! dlock_venv_has_all "$@"; then
        dlock_say "installing into .venv: $*"
        .venv/bin/python -m pip install --quiet --disable-pip-version-check "$@" || return 1
        grep -sF "$(cksum <pyproject.toml) " .venv/.dlock-installed >.venv/.dlock-installed.new || true
        echo "$stamp" >>.venv/.dlock-installed.new
        mv .venv/.dlock-installed.new .venv/.dlock-installed
    fi
    PATH="$PWD/.venv/bin:$PATH"
    VIRTUAL_ENV="$PWD/.venv"
    export PATH VIRTUAL_ENV
}

# Shared by scripts/demo.sh and scripts/test.sh (sourced, not run): a virtual environment in .venv/ and
# system packages through apt-get. Nothing is downloaded from outside PyPI, Debian and npm.

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.venv"

say() { printf '%s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

# A python3 >= 3.11 with the venv module: $PYTHON if set, else python3 on PATH.
find_python() {
  local python="${PYTHON:-python3}"
  command -v "$python" >/dev/null 2>&1 || die "no $python on PATH: install Python 3.11 or newer (Debian/Ubuntu: apt-get install python3 python3-venv)"
  "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || die "$("$python" -V 2>&1) is too old: profscope needs Python 3.11 or newer (set PYTHON=/path/to/python3.11)"
  "$python" -c 'import ensurepip, venv' 2>/dev/null \
    || die "$python has no venv module: on Debian/Ubuntu run 'sudo apt-get install python3-venv' (or set PYTHON=...)"
  printf '%s\n' "$python"
}

# Creates .venv/ once (never touches the system Python: works where pip refuses with
# externally-managed-environment), then installs the checkout into it in editable mode.
install_into_venv() {
  local what="$1" description="$2"
  if [ ! -x "$VENV/bin/python" ]; then
    local python; python="$(find_python)"
    say "creating a virtual environment in $VENV with $("$python" -V 2>&1) ($(command -v "$python"))"
    "$python" -m venv "$VENV" || die "could not create $VENV"
  fi
  say "installing into $VENV from PyPI: $description"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$REPO$what" \
    || die "pip could not install $description into $VENV (see above)"
}

# apt-get install, as root or through sudo; a clear message where there is no apt-get or no root.
apt_install() {
  local sudo=""
  command -v apt-get >/dev/null 2>&1 \
    || die "'$*' is missing and this system has no apt-get: install it with your package manager, then run again"
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "'$*' is missing: install it as root (apt-get install $*), then run again"
    sudo="sudo"
  fi
  say "installing system packages with apt-get (needs root${sudo:+, asking sudo}): $*"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq "$@" >/dev/null || die "apt-get install $* failed"
}

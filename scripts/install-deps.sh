#!/usr/bin/env bash
# Installs what thunder-c needs to build, test and run. Idempotent:
#   1. Debian 12 packages for the C side (apt-get update, then whatever is missing): the compiler,
#      cmake, ninja, cmocka, oneDNN, cJSON, dlpack (and python3-venv where `-m venv` needs it).
#   2. The project's Python environment `.venv/` at the repo root (Python 3.11), made once and reused,
#      with the exact versions of requirements.txt (torch 2.14.1, torchvision, NumPy, pytest, torchao,
#      transformers, lightning-thunder), then requirements-nodeps.txt with --no-deps (litgpt and what
#      its imports need: their declared requirements would move those pins); pip runs only when either
#      file changed since the last successful install (their copies in .venv/*.installed).
# Uses sudo when not run as root. THUNDER_PYTHON names the interpreter that makes the venv (default:
# python3.11, else python3, which must be 3.11: the pinned torch wheels are built for it).
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS=(build-essential cmake ninja-build pkg-config git
      libcmocka-dev libdnnl-dev libdlpack-dev libcjson-dev liblapacke-dev)
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: Debian packages present"
fi

py="${THUNDER_PYTHON:-}"
if [ -z "$py" ]; then
  py=$(command -v python3.11 || command -v python3 || true)
fi
if [ -z "$py" ] || ! "$py" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "install-deps: need Python 3.11 for .venv (found: ${py:-none}); set THUNDER_PYTHON" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  if ! "$py" -m venv .venv 2>/dev/null; then
    # Debian's python3 needs its venv package for `-m venv`
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-venv python3-dev
    rm -rf .venv
    "$py" -m venv .venv
  fi
fi
if cmp -s requirements.txt .venv/requirements.installed && \
   cmp -s requirements-nodeps.txt .venv/requirements-nodeps.installed; then
  echo "install-deps: .venv up to date ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
else
  echo "install-deps: installing requirements.txt into .venv (torch 2.14.1 takes a few minutes)"
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -r requirements-nodeps.txt
  cp requirements.txt .venv/requirements.installed
  cp requirements-nodeps.txt .venv/requirements-nodeps.installed
fi

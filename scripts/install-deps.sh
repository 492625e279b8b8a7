#!/usr/bin/env bash
# Installs the Debian 12 packages thunder-c needs to build, test and run. Idempotent: it refreshes the
# package lists (apt-get update) and installs what is missing; packages already present are left alone.
# Uses sudo when not run as root.
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config git
      libcmocka-dev libdnnl-dev libdlpack-dev libcjson-dev
      python3 python3-dev python3-numpy python3-pytest python3-torch)
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
  echo "install-deps: all packages present"
fi

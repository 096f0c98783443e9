#!/usr/bin/env bash
# Installs the Debian packages lwopt needs (now or in the next issues), only those missing.
# Uses sudo when not root; when neither works, prints the command to run and fails.
set -euo pipefail

packages=(
    build-essential cmake pkg-config
    luajit libluajit-5.1-dev lua-busted lua-dkjson lua-readline
    openmpi-bin libopenmpi-dev
    iproute2
    libopenblas-dev
    bible-kjv bible-kjv-text
    gnuplot-nox
    python3-numpy python3-regex
)

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
    sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo=(sudo)
else
    echo "deps: missing packages and no root or passwordless sudo; run:" >&2
    echo "    sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"

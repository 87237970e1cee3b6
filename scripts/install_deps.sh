#!/usr/bin/env bash
# Installs the Debian 12 packages strata builds with, when missing. Needs root (or sudo).
set -euo pipefail
PKGS=(cmake ninja-build g++ pkg-config git libdnnl-dev libnuma-dev liburing-dev libzstd-dev
      libcli11-dev libgtest-dev libbenchmark-dev nlohmann-json3-dev libpcre2-dev libfmt-dev
      libcpp-httplib-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then exit 0; fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then SUDO=sudo; else
    echo "strata: missing packages: ${missing[*]} — install them as root (apt-get install -y ${missing[*]})" >&2
    exit 1
  fi
fi
echo "strata: installing ${missing[*]}" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null

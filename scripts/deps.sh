#!/usr/bin/env bash
# Install the Debian packages a target needs, only those missing. Usage: deps.sh build|test|bench
set -euo pipefail
want=(cmake gcc make pkg-config libsodium-dev libyaml-dev libjansson-dev)
case "${1:-build}" in
  test)  want+=(openmpi-bin libopenmpi-dev python3-torch iperf3 iproute2 procps) ;;
  bench) want+=(openmpi-bin libopenmpi-dev python3-torch iperf3 iproute2 procps) ;;
esac
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps: installing ${missing[*]}"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

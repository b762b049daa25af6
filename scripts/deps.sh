#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install the Debian packages a target needs, only those missing (apt is never run when all
# are there). Usage: deps.sh build|test|bench|diloco|format|fuzz|venv
# torch, numpy and mypy come from PyPI into the suite's venv (scripts/venv.sh), not from Debian.
set -euo pipefail
want=(cmake gcc g++ make pkg-config libsodium-dev libssl-dev libzstd-dev libxxhash-dev libyaml-dev
      libjansson-dev python3-dev libucx-dev libpmix-dev)
case "${1:-build}" in
  test)  want+=(openmpi-bin libopenmpi-dev iperf3 iproute2 procps tcpdump
               clang-format clang libfuzzer-14-dev ucx-utils etcd-server) ;;
  format) want=(clang-format) ;;
  # the libFuzzer harnesses (tests/fuzz): clang's fuzzer runtime and sanitizers
  fuzz) want=(cmake make pkg-config libsodium-dev libssl-dev libzstd-dev libxxhash-dev libyaml-dev
              libjansson-dev clang
              libfuzzer-14-dev) ;;
  # ucx-utils: ucx_perftest beside KV transfer's UCX backend (bench/kv/run.sh)
  # slurm-wlm, munge: bench/slurm.sh's one-node Slurm (srun --mpi=pmix)
  bench) want+=(openmpi-bin libopenmpi-dev iperf3 iproute2 procps
                ucx-utils slurm-wlm munge) ;;
  # the emulated sites (torch comes from the venv: scripts/venv.sh)
  diloco) want+=(iproute2 procps) ;;
  # a python3 without venv or ensurepip (Debian's, before python3-venv)
  venv) want=(python3-venv python3-pip) ;;
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

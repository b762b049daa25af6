# SPDX-License-Identifier: Apache-2.0
# bench/common.sh — sourced by the bench scripts that run over `strata netem`: the build
# directory, the --quick / --help arguments, and the root + TUN check, with one wording.
#
#   . "$(dirname "$0")/../common.sh"; bench_init NAME "$@"
#
# sets root, build (absolute), strata, py ($STRATA_PYTHON: the venv of scripts/venv.sh, with numpy and torch) and
# quick (0/1); --help prints the calling script's header comment.
#
#   netem_up PREFIX LIFETIME_S NETEM_UP_ARGS...
#
# brings up `strata netem` as $name (PREFIX and this shell's pid) for at most LIFETIME_S (the
# forwarder removes everything by itself then, even if the script is killed), and on exit kills
# every pid the script put in $pids and takes the emulated WAN down. Needs $strata.

bench_init() {
  local name=$1 arg
  shift
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  build=${BUILD:-$root/build}
  build=$(cd "$build" 2>/dev/null && pwd) ||
    { echo "$name: build dir ${BUILD:-build} is missing (make first)" >&2; exit 1; }
  strata=$build/strata
  py=${STRATA_PYTHON:-/usr/bin/python3}
  quick=0
  for arg in "$@"; do
    case $arg in
      --quick) quick=1 ;;
      -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
      *) echo "$name: unknown argument $arg (--quick, --help)" >&2; exit 2 ;;
    esac
  done
  [ -x "$strata" ] || { echo "$name: $strata is missing (make first)" >&2; exit 1; }
  if [ "$(id -u)" -ne 0 ] || [ ! -c /dev/net/tun ]; then
    echo "$name: needs root and /dev/net/tun (strata netem: network namespaces + TUN)" >&2
    exit 1
  fi
}

netem_cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  "$strata" netem down --name "$name" >/dev/null 2>&1 || true
}

netem_up() {
  name=$1$$
  local lifetime=$2
  shift 2
  pids=()
  trap netem_cleanup EXIT
  trap 'exit 130' INT TERM
  "$strata" netem up --name "$name" --lifetime "$lifetime" "$@" >/dev/null
}

# SPDX-License-Identifier: Apache-2.0
# bench/common.sh — sourced by the bench scripts that run over `strata netem`: the build
# directory, the --quick / --help arguments, and the root + TUN check, with one wording.
#
#   . "$(dirname "$0")/../common.sh"; bench_init NAME "$@"
#
# sets root, build (absolute), strata, py ($STRATA_PYTHON: the venv of scripts/venv.sh, with numpy and torch) and
# quick (0/1); --help prints the calling script's header comment.

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

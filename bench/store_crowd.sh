#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/store_crowd.sh — what ten thousand idle clients cost `strata store` (one epoll loop):
# holds CONNS (default 10000) authenticated idle connections against it, and prints the store
# process's CPU over an idle window and its CPU per request (one client making sequential ADDs)
# without and among the crowd. BASELINE=/path/to/another/strata adds that binary's row (a build
# of an earlier version, say) measured the same way in the same run. Raw output in bench/results/.
# Environment: BUILD (default build), CONNS, REQUESTS (default 5000), IDLE_S (default 10),
# BASELINE.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$root/build}
[[ $BUILD = /* ]] || BUILD=$root/$BUILD
[ -x "$BUILD/strata" ] || { echo "bench/store_crowd.sh: $BUILD/strata not found: build first" >&2; exit 1; }
out=$root/bench/results/store_crowd-$(date -u +%Y-%m-%d_%H%M%S).txt
mkdir -p "$(dirname "$out")"
binaries=("$BUILD/strata")
[ -n "${BASELINE:-}" ] && binaries+=("$BASELINE")
python3 "$root/bench/store_crowd.py" "${CONNS:-10000}" "${REQUESTS:-5000}" "${IDLE_S:-10}" \
  "${binaries[@]}" | tee "$out"

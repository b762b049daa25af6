#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_bench_mpirun.sh BUILD_DIR — the unchanged `strata bench` program under mpirun (Open MPI's
# environment names the ranks): the nccl-tests table, every #wrong 0. Skipped without mpirun.
set -uo pipefail
build=${1:?usage: test_bench_mpirun.sh BUILD_DIR}
strata=$build/strata
[ -x "$strata" ] || { echo "FAIL: $strata not built"; exit 1; }
command -v mpirun >/dev/null || { echo "SKIP test_bench_mpirun: mpirun not installed"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
. "$(dirname "$0")/helpers/bench_table.sh"

status=0
timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 "$strata" bench allreduce \
  -b 8 -e 64K -f 4 -n 2 -w 1 >"$tmp/mpi.out" 2>"$tmp/mpi.err" || status=$?
if [ "$status" = 0 ]; then check_table "$tmp/mpi.out" mpirun 7
else fail "mpirun: exit $status: $(tail -3 "$tmp/mpi.err")"; fi
[ "$failures" = 0 ] && echo "test_bench_mpirun: ok" || echo "test_bench_mpirun: $failures failure(s)"
[ "$failures" = 0 ]

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_bench_mpirun.sh BUILD_DIR — the unchanged `strata bench` program under mpirun with no STRATA_*
# variable: the nccl-tests table, every #wrong 0. In a build with PMIx (libpmix-dev) the ranks find
# their world and rank 0's store through mpirun's PMIx server: every rank logs that it did, a split
# and a second world communicator work (tests/pmix_world.c), only ranks open libpmix (`strata plan`
# under mpirun does not), a job that names its store (STRATA_ADDR) does not use PMIx, and ranks
# that disagree on the secret, or find no PMIx server, fail with the reason instead of hanging.
# Skipped without mpirun.
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
# no configuration: the suite's own STRATA_* variables stay out of the ranks' environment
for name in $(compgen -e | grep '^STRATA_'); do unset "$name"; done
# root in a container, more ranks than cores, mpirun's own traffic on loopback
mpi=(timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none
     --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
sweep=(bench allreduce -b 8 -e 64K -f 4 -n 2 -w 1)

status=0
"${mpi[@]}" -np 4 "$strata" "${sweep[@]}" >"$tmp/mpi.out" 2>"$tmp/mpi.err" || status=$?
if [ "$status" = 0 ]; then check_table "$tmp/mpi.out" mpirun 7
else fail "mpirun -np 4: exit $status: $(tail -3 "$tmp/mpi.err")"; fi

if ! grep -q '^PMIX_FOUND:INTERNAL=1$' "$build/CMakeCache.txt" ||
   grep -q '^STRATA_PMIX:BOOL=OFF$' "$build/CMakeCache.txt"; then
  echo "test_bench_mpirun: built without PMIx (libpmix-dev): the PMIx checks do not apply"
else
  # every rank says where its store came from (STRATA_LOG only makes it speak)
  status=0
  "${mpi[@]}" -np 3 -x STRATA_LOG=info "$strata" "${sweep[@]}" >"$tmp/info.out" \
    2>"$tmp/info.err" || status=$?
  if [ "$status" = 0 ]; then
    check_table "$tmp/info.out" "mpirun (info)" 7
    for rank in 0 1 2; do
      grep -q "PMIx: rank $rank of 3 (namespace .*): store 127.0.0.1:[0-9]* served by rank 0" \
        "$tmp/info.err" || fail "rank $rank: no PMIx line: $(grep PMIx "$tmp/info.err" | head -3)"
      grep -q "rank $rank of 3 ready (job pmix-" "$tmp/info.err" || fail "rank $rank: not job pmix-*"
    done
    # the data connections' addresses came from the peers' PMIx servers, none from the store
    grep -q "PMIx: [1-9][0-9]* peer addresses fetched through PMIx, 0 read from the store" \
      "$tmp/info.err" || fail "no address fetched through PMIx: $(grep PMIx "$tmp/info.err" | tail -3)"
    ! grep -q "not fetched through PMIx" "$tmp/info.err" ||
      fail "an address fell back to the store: $(grep 'not fetched' "$tmp/info.err" | head -1)"
  else fail "mpirun -np 3 (info): exit $status: $(tail -3 "$tmp/info.err")"; fi

  # a split, and the world again after a destroy (a second rendezvous through PMIx)
  status=0
  "${mpi[@]}" -np 4 "$build/tests/pmix_world" >"$tmp/world.out" 2>"$tmp/world.err" || status=$?
  [ "$status" = 0 ] && [ "$(grep -c '^pmix_world: rank [0-3] ok$' "$tmp/world.out")" = 4 ] ||
    fail "pmix_world: exit $status: $(tail -3 "$tmp/world.err")"

  # libpmix is opened by ranks only: never by the planner, even under mpirun
  "${mpi[@]}" -np 1 -x LD_DEBUG=files "$strata" plan --preset metro-2-sites >"$tmp/plan.out" 2>&1 ||
    fail "strata plan under mpirun: $(tail -3 "$tmp/plan.out")"
  ! grep -q 'file=libpmix' "$tmp/plan.out" || fail "strata plan loaded libpmix"
  "${mpi[@]}" -np 2 -x LD_DEBUG=files "$strata" "${sweep[@]}" >"$tmp/ld.out" 2>&1 ||
    fail "mpirun -np 2 (LD_DEBUG): $(tail -3 "$tmp/ld.out")"
  [ "$(grep -c 'file=libpmix.so.2 .*dynamically loaded by' "$tmp/ld.out")" = 2 ] ||
    fail "the 2 ranks did not each open libpmix.so.2"

  # an explicit store wins: no PMIx rendezvous
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  status=0
  "${mpi[@]}" -np 2 -x STRATA_LOG=info -x STRATA_ADDR=127.0.0.1:$port "$strata" "${sweep[@]}" \
    >"$tmp/addr.out" 2>"$tmp/addr.err" || status=$?
  if [ "$status" = 0 ]; then
    check_table "$tmp/addr.out" "mpirun (STRATA_ADDR)" 7
    ! grep -q "PMIx:" "$tmp/addr.err" || fail "STRATA_ADDR set, yet PMIx was used"
  else fail "mpirun -np 2 STRATA_ADDR: exit $status: $(tail -3 "$tmp/addr.err")"; fi

  # PMIx variables without a server (a copied environment): a clear error at once, no hang
  status=0
  PMIX_RANK=0 PMIX_NAMESPACE=gone timeout 20 "$strata" "${sweep[@]}" >"$tmp/gone.out" 2>&1 ||
    status=$?
  [ "$status" != 0 ] && [ "$status" != 124 ] || fail "PMIx without a server: exit $status"
  grep -q "PMIx_Init failed: .* to rendezvous without PMIx set STRATA_ADDR" "$tmp/gone.out" ||
    fail "PMIx without a server: no reason given: $(head -2 "$tmp/gone.out")"

  # rank 0 has a secret of its own, rank 1 none: rank 1 says so and the job ends, well within
  # the store's 30 s wait
  status=0
  SECONDS=0
  "${mpi[@]}" -np 1 env STRATA_SECRET=only-rank-0 "$strata" "${sweep[@]}" : \
    -np 1 "$strata" "${sweep[@]}" >"$tmp/secret.out" 2>"$tmp/secret.err" || status=$?
  [ "$status" != 0 ] || fail "ranks with different secrets: exit 0"
  grep -q "rank 0 has STRATA_SECRET (or STRATA_SECRET_FILE) set and this rank has not" \
    "$tmp/secret.err" || fail "secret mismatch: no reason given: $(tail -3 "$tmp/secret.err")"
  [ "$SECONDS" -lt 25 ] || fail "secret mismatch took ${SECONDS}s"
fi
[ "$failures" = 0 ] && echo "test_bench_mpirun: ok" || echo "test_bench_mpirun: $failures failure(s)"
[ "$failures" = 0 ]

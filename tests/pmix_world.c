// SPDX-License-Identifier: Apache-2.0
/*
 * pmix_world.c — one rank of a job that mpirun starts with nothing configured
 * (tests/test_bench_mpirun.sh): the world communicator from the environment, a split of it, and a
 * world communicator again after a destroy (a new rendezvous through PMIx, a new store), each
 * checked by an allreduce of known values. Prints "pmix_world: rank R ok" and exits 0, or names the
 * step that failed and exits 1.
 */
#include <stdio.h>

#include "strata.h"

static int check_sum(strata_comm *comm, const char *what) {
  int rank = strata_comm_rank(comm), size = strata_comm_size(comm);
  float mine = (float)(rank + 1), sum = 0;
  int status = strata_allreduce(comm, &mine, &sum, 1, STRATA_F32, STRATA_SUM);
  if (status != STRATA_OK || sum != (float)(size * (size + 1) / 2)) {
    fprintf(stderr, "pmix_world: %s: rank %d of %d: sum %g, status %s\n", what, rank, size, sum,
            strata_strerror(status));
    return 1;
  }
  return 0;
}

int main(void) {
  int failed = 0, world_rank = -1;
  for (int round = 0; round < 2 && !failed; round++) {
    strata_comm *world = NULL, *half = NULL;
    int status = strata_comm_init_env(&world);
    if (status != STRATA_OK) {
      fprintf(stderr, "pmix_world: init %d: %s\n", round, strata_strerror(status));
      return 1;
    }
    world_rank = strata_comm_rank(world);
    failed |= check_sum(world, round ? "the world again" : "the world");
    status = strata_comm_split(world, world_rank % 2, world_rank, &half);
    if (status != STRATA_OK) {
      fprintf(stderr, "pmix_world: split: %s\n", strata_strerror(status));
      failed = 1;
    } else {
      failed |= check_sum(half, "a split");
      strata_comm_destroy(half);
    }
    /* rank 0's store, which the splits rendezvous through, goes with its world communicator:
     * every group is built before any rank destroys it */
    if (strata_barrier(world) != STRATA_OK) failed = 1;
    strata_comm_destroy(world);
  }
  if (!failed) printf("pmix_world: rank %d ok\n", world_rank);
  return failed;
}

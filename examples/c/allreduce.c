// SPDX-License-Identifier: Apache-2.0
/*
 * allreduce.c — the smallest strata program: join the job from the environment, sum a vector
 * over every rank, check the result, leave.
 *
 *   strata launch -n 4 -- ./allreduce
 *
 * Every rank contributes x[i] = rank + i; after the allreduce every rank holds
 * sum over ranks = n * i + n * (n - 1) / 2, exact in f32 for these small integers.
 */
#include <stdio.h>
#include <stdlib.h>

#include <strata.h>

enum { COUNT = 1 << 20 }; /* 4 MiB of f32 */

static int fail(const char *what, int status) {
  fprintf(stderr, "allreduce: %s: %s (%s)\n", what, strata_err_name(status),
          strata_strerror(status));
  return 1;
}

int main(void) {
  strata_comm *comm;
  int status = strata_comm_init_env(&comm); /* strata launch, torchrun, mpirun or srun */
  if (status != STRATA_OK) return fail("init", status);
  int rank = strata_comm_rank(comm), n = strata_comm_size(comm);

  float *x = malloc(COUNT * sizeof *x);
  if (!x) return fail("malloc", STRATA_ERR_NO_MEMORY);
  for (int i = 0; i < COUNT; i++) x[i] = (float)(rank + i % 1000);

  status = strata_allreduce(comm, x, x, COUNT, STRATA_F32, STRATA_SUM); /* in place */
  if (status != STRATA_OK) return fail("allreduce", status);

  int wrong = 0;
  for (int i = 0; i < COUNT; i++)
    if (x[i] != (float)(n * (i % 1000) + n * (n - 1) / 2)) wrong++;
  if (wrong) {
    fprintf(stderr, "allreduce: rank %d: %d of %d values wrong\n", rank, wrong, COUNT);
    return 1;
  }
  if (rank == 0)
    printf("allreduce: %d ranks summed %d floats, every value right (peer 1 via %s)\n", n, COUNT,
           n > 1 ? strata_comm_transport_name(comm, 1) : "self");
  free(x);
  status = strata_comm_destroy(comm);
  return status == STRATA_OK ? 0 : fail("destroy", status);
}

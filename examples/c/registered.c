// SPDX-License-Identifier: Apache-2.0
/*
 * registered.c — buffers from strata_mem_alloc: the other ranks of the host read them directly.
 *
 *   strata launch -n 2 -- ./registered
 *
 * Any buffer works with every call; memory from strata_mem_alloc only makes large transfers
 * between ranks of one host cheaper (the receiver copies from the sender's pages, with no system
 * call per message). It comes page-aligned and zero-filled, and is released by strata_mem_free,
 * which may be called before or after strata_comm_destroy. Between hosts it is ordinary memory.
 */
#include <stdio.h>

#include <strata.h>

enum { COUNT = 4 << 20 }; /* 16 MiB of f32 */

static int fail(const char *what, int status) {
  fprintf(stderr, "registered: %s: %s (%s)\n", what, strata_err_name(status),
          strata_strerror(status));
  return 1;
}

int main(void) {
  strata_comm *comm;
  int status = strata_comm_init_env(&comm);
  if (status != STRATA_OK) return fail("init", status);
  int rank = strata_comm_rank(comm), n = strata_comm_size(comm);

  float *grad, *mean;
  status = strata_mem_alloc(COUNT * sizeof(float), (void **)&grad);
  if (status == STRATA_OK) status = strata_mem_alloc(COUNT * sizeof(float), (void **)&mean);
  if (status != STRATA_OK) return fail("strata_mem_alloc", status);
  for (int i = 0; i < COUNT; i++) grad[i] = (float)(2 * rank + (i & 7));

  /* out of place, averaged: mean = sum / n */
  for (int step = 0; step < 3; step++) {
    status = strata_allreduce(comm, grad, mean, COUNT, STRATA_F32, STRATA_AVG);
    if (status != STRATA_OK) return fail("allreduce", status);
  }
  /* mean of 2r + (i & 7) over r = 0..n-1 is (n - 1) + (i & 7), exact in f32 */
  for (int i = 0; i < COUNT; i++)
    if (mean[i] != (float)(n - 1 + (i & 7))) {
      fprintf(stderr, "registered: rank %d: element %d is %g\n", rank, i, (double)mean[i]);
      return 1;
    }
  /* the broadcast root's buffer is the one the others read */
  if (rank == 0)
    for (int i = 0; i < COUNT; i++) grad[i] = 0.5f * (float)(i & 15);
  status = strata_broadcast(comm, grad, grad, COUNT, STRATA_F32, 0);
  if (status != STRATA_OK) return fail("broadcast", status);
  for (int i = 0; i < COUNT; i++)
    if (grad[i] != 0.5f * (float)(i & 15)) {
      fprintf(stderr, "registered: rank %d: broadcast element %d is %g\n", rank, i,
              (double)grad[i]);
      return 1;
    }
  if (rank == 0)
    printf("registered: %d ranks averaged and broadcast %d MiB from strata_mem_alloc, checked\n", n,
           (int)(COUNT * sizeof(float) >> 20));
  status = strata_comm_destroy(comm);
  strata_mem_free(grad);
  strata_mem_free(mean);
  return status == STRATA_OK ? 0 : fail("destroy", status);
}

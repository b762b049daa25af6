// SPDX-License-Identifier: Apache-2.0
/*
 * async.c — non-blocking collectives: start several allreduces, compute while they run, poll one
 * with strata_request_test, wait for the rest.
 *
 *   strata launch -n 4 -- ./async
 *
 * A buffer handed to a non-blocking call belongs to strata until its request completes: this
 * program reads and writes other memory meanwhile, never the buffers in flight. Every request is
 * completed exactly once (wait, or a test that did not return STRATA_ERR_IN_PROGRESS), which
 * also frees it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <strata.h>

enum { BUCKETS = 4, COUNT = 1 << 18 }; /* 4 gradient buckets of 1 MiB each */

static int fail(const char *what, int status) {
  fprintf(stderr, "async: %s: %s (%s)\n", what, strata_err_name(status), strata_strerror(status));
  return 1;
}

int main(void) {
  strata_comm *comm;
  int status = strata_comm_init_env(&comm);
  if (status != STRATA_OK) return fail("init", status);
  int rank = strata_comm_rank(comm), n = strata_comm_size(comm);

  int32_t *bucket[BUCKETS];
  strata_request *req[BUCKETS];
  for (int b = 0; b < BUCKETS; b++) {
    bucket[b] = malloc(COUNT * sizeof(int32_t));
    if (!bucket[b]) return fail("malloc", STRATA_ERR_NO_MEMORY);
    for (int i = 0; i < COUNT; i++) bucket[b][i] = rank * b + i;
    /* returns at once; the progress thread moves the data while we go on */
    status = strata_iallreduce(comm, bucket[b], bucket[b], COUNT, STRATA_I32, STRATA_SUM, &req[b]);
    if (status != STRATA_OK) return fail("iallreduce", status);
  }

  /* Work that touches none of the buckets, polling the first request now and then. */
  double work = 0;
  long polls = 0;
  int first_done = 0;
  for (long i = 1; i <= 20000000; i++) {
    work += 1.0 / (double)i;
    if (!first_done && i % 100000 == 0) {
      polls++;
      status = strata_request_test(req[0]);
      if (status == STRATA_ERR_IN_PROGRESS) continue; /* req[0] is still valid */
      if (status != STRATA_OK) return fail("request_test", status);
      first_done = 1; /* req[0] is completed and freed */
    }
  }
  for (int b = first_done ? 1 : 0; b < BUCKETS; b++) {
    status = strata_request_wait(req[b]); /* completes and frees req[b] */
    if (status != STRATA_OK) return fail("request_wait", status);
  }

  /* sum over ranks r of (r * b + i) = b * n(n-1)/2 + n * i */
  for (int b = 0; b < BUCKETS; b++)
    for (int i = 0; i < COUNT; i++)
      if (bucket[b][i] != b * (n * (n - 1) / 2) + n * i) {
        fprintf(stderr, "async: rank %d: bucket %d element %d is %d\n", rank, b, i, bucket[b][i]);
        return 1;
      }
  if (rank == 0)
    printf(
        "async: %d allreduces of %zu KiB on %d ranks right; the first finished %s "
        "(%ld polls, work %.3f)\n",
        BUCKETS, COUNT * sizeof(int32_t) >> 10, n, first_done ? "during the work" : "after it",
        polls, work);
  for (int b = 0; b < BUCKETS; b++) free(bucket[b]);
  status = strata_comm_destroy(comm);
  return status == STRATA_OK ? 0 : fail("destroy", status);
}

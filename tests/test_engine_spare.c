// SPDX-License-Identifier: Apache-2.0
/*
 * test_engine_spare.c — the communicator's spare operation (api.c, "the spare operation"): a
 * finished collective is kept and taken again by the next call with the same key (schedule
 * parameters, datatype, reduction, buffer sizes), which then runs on other buffers with other
 * values; a call with another key builds anew. Every result is checked, over shared memory and
 * over TCP, 2 and 3 ranks. That concurrent retirement stays sound is test_engine_threads' part
 * (48 requests of one key waited on from 3 threads, under ThreadSanitizer too).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "helpers/ranks.h"

enum { BIG = 4099, ROUNDS = 6 };

static strata_operation *spare(strata_comm *comm) {
  return atomic_load(&comm->spare_op);
}

/* allreduce of `count` ints, sum, out of place or in place, on fresh buffers; every element
 * checked against the closed form. Returns the failures. */
static int allreduce_once(strata_comm *comm, int rank, int n, int count, int in_place, int salt) {
  int *send = malloc(sizeof(int) * (size_t)count), *recv = malloc(sizeof(int) * (size_t)count);
  int bad = 0;
  if (!send || !recv) {
    free(send);
    free(recv);
    return 1;
  }
  for (int i = 0; i < count; i++) send[i] = rank * 1000 + i + salt;
  int rc = in_place ? strata_allreduce(comm, send, send, (uint64_t)count, STRATA_I32, STRATA_SUM)
                    : strata_allreduce(comm, send, recv, (uint64_t)count, STRATA_I32, STRATA_SUM);
  const int *out = in_place ? send : recv;
  for (int i = 0; rc == STRATA_OK && i < count; i++) {
    int want = 1000 * n * (n - 1) / 2 + n * (i + salt);
    if (out[i] != want) {
      if (bad++ < 3)
        fprintf(stderr, "rank %d: allreduce %d (%s) salt %d: [%d] = %d, want %d\n", rank, count,
                in_place ? "in place" : "out of place", salt, i, out[i], want);
    }
  }
  if (rc != STRATA_OK) {
    fprintf(stderr, "rank %d: allreduce: %s\n", rank, strata_strerror(rc));
    bad++;
  }
  free(send);
  free(recv);
  return bad;
}

static int body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)arg;
  if (!comm) {
    fprintf(stderr, "rank %d: init: %s\n", rank, strata_strerror(init_status));
    return 1;
  }
  int failures = 0;
  /* the same key again and again: after the first call the same operation serves every call */
  failures += allreduce_once(comm, rank, n, 2, 0, 0);
  strata_operation *kept = spare(comm);
  if (!kept) {
    fprintf(stderr, "rank %d: no spare after a finished allreduce\n", rank);
    failures++;
  }
  for (int r = 1; r < ROUNDS; r++) {
    failures += allreduce_once(comm, rank, n, 2, 0, r);
    if (spare(comm) != kept) {
      fprintf(stderr, "rank %d: round %d: the spare was not taken again\n", rank, r);
      failures++;
    }
  }
  /* other keys in turn (size, in place, then back): each builds anew and is right */
  for (int r = 0; r < ROUNDS; r++) {
    failures += allreduce_once(comm, rank, n, BIG, r & 1, r);
    failures += allreduce_once(comm, rank, n, 2, r & 1, r + 7);
    failures += allreduce_once(comm, rank, n, BIG, 0, r + 3);
  }
  /* a key that differs only in the datatype (f32 vs i32, both 4 bytes) or the reduction */
  for (int r = 0; r < ROUNDS; r++) {
    float f[BIG], g[BIG];
    for (int i = 0; i < BIG; i++) f[i] = (float)(rank + 1) * (float)(i % 7);
    strata_op op = r & 1 ? STRATA_MAX : STRATA_AVG;
    int rc = strata_allreduce(comm, f, g, BIG, STRATA_F32, op);
    for (int i = 0; rc == STRATA_OK && i < BIG; i++) {
      float want =
          op == STRATA_MAX ? (float)n * (float)(i % 7) : (float)(n + 1) / 2.0f * (float)(i % 7);
      if (g[i] != want) {
        if (failures++ < 3)
          fprintf(stderr, "rank %d: f32 %s [%d] = %g, want %g\n", rank, strata_op_name(op), i,
                  (double)g[i], (double)want);
      }
    }
    if (rc != STRATA_OK) failures++;
    failures += allreduce_once(comm, rank, n, BIG, 0, r);
  }
  /* rooted calls: the root is part of the key */
  for (int r = 0; r < 2 * n; r++) {
    int root = r % n, v[BIG];
    for (int i = 0; i < BIG; i++) v[i] = rank == root ? i * 3 + r : -1;
    int rc = strata_broadcast(comm, v, v, BIG, STRATA_I32, root);
    for (int i = 0; rc == STRATA_OK && i < BIG; i++)
      if (v[i] != i * 3 + r && failures++ < 3)
        fprintf(stderr, "rank %d: broadcast root %d [%d] = %d\n", rank, root, i, v[i]);
    if (rc != STRATA_OK) failures++;
  }
  /* a refused call in between leaves the spare usable */
  if (strata_allreduce(comm, NULL, NULL, 5, STRATA_I32, STRATA_SUM) == STRATA_OK) failures++;
  failures += allreduce_once(comm, rank, n, BIG, 0, 11);
  failures += allreduce_once(comm, rank, n, BIG, 0, 12);
  return failures != 0;
}

int main(void) {
  int failures = 0;
  for (int shm = 1; shm >= 0; shm--) {
    for (int n = 2; n <= 3; n++) {
      strata_test_ranks_opts opts = {.shm = shm, .deadline_s = 60};
      int failed = strata_test_run_ranks(n, &opts, body, NULL);
      if (failed)
        fprintf(stderr, "%s, %d ranks: %d rank(s) failed\n", shm ? "shm" : "tcp", n, failed);
      failures += failed;
    }
  }
  if (failures)
    fprintf(stderr, "test_engine_spare: %d failure(s)\n", failures);
  else
    printf("test_engine_spare: ok\n");
  return failures != 0;
}

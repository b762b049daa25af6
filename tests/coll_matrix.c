// SPDX-License-Identifier: Apache-2.0
/*
 * coll_matrix.c — every collective x dtype x op, in place and out of place, blocking and not,
 * for 1, 2, 3, 4, 5 and 8 ranks (forked processes), over shared memory and over TCP only, with
 * counts 0, 1, 7, one not divisible by the rank count, and one of at least 4 MiB.
 *
 * Every (dtype, op) pair runs at 2 ranks. Past 2 ranks, and in the sanitizer builds
 * (STRATA_TEST_QUICK=1) at every count, the pairs are every op with f32 and every dtype with sum:
 * the schedule, the transport and the buffers of a call depend on the element size, never on the
 * op, so more ranks add schedule shapes, not kernels; the kernel of every pair is
 * test_core_reduce's, which every build runs in full.
 *
 * The dtypes and ops added after the first ten dtypes and five ops (i16, u16; band, bor, bxor)
 * run at 2 ranks only, as one small allreduce per pair: they add kernels, not schedule shapes.
 * A float dtype with a bitwise op must be refused with STRATA_ERR_INVALID_ARG on every rank, and
 * the calls after the refusals still agree.
 *
 * Usage: coll_matrix [shm|tcp] [nranks...]   (no arguments: the whole matrix)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/schedule.h"
#include "helpers/coll_check.h"
#include "helpers/ranks.h"

static const strata_coll colls[] = {
    STRATA_COLL_ALLREDUCE, STRATA_COLL_REDUCE_SCATTER, STRATA_COLL_ALLGATHER, STRATA_COLL_BROADCAST,
    STRATA_COLL_REDUCE,    STRATA_COLL_GATHER,         STRATA_COLL_SCATTER,   STRATA_COLL_ALLTOALL,
};

/* The matrix's dtypes and ops: the first ten dtypes and five ops, as the matrix was sized for.
 * The later ones get small_pairs() and refused_pairs() instead. */
enum { MATRIX_DTYPES = STRATA_I16, MATRIX_OPS = STRATA_BAND };

static int is_reduction(strata_coll c) {
  return c == STRATA_COLL_ALLREDUCE || c == STRATA_COLL_REDUCE_SCATTER || c == STRATA_COLL_REDUCE;
}

static int is_float(int dtype) {
  return dtype == STRATA_F16 || dtype == STRATA_BF16 || dtype == STRATA_F32 || dtype == STRATA_F64;
}

/* Every (dtype, op) pair the matrix leaves out, on 7 elements: i16 and u16 with every op, and
 * every integer dtype with the bitwise ops. */
static int small_pairs(strata_comm *comm, int *cases) {
  int failures = 0;
  for (int dt = 0; dt < STRATA_DTYPE_COUNT; dt++)
    for (int op = 0; op < STRATA_OP_COUNT; op++) {
      if (is_float(dt) || (dt < MATRIX_DTYPES && op < MATRIX_OPS)) continue;
      strata_check_case c = {.coll = STRATA_COLL_ALLREDUCE,
                             .dtype = (strata_dtype)dt,
                             .op = (strata_op)op,
                             .count = 7,
                             .in_place = op % 2,
                             .nonblocking = dt % 2,
                             .algo = STRATA_ALGO_AUTO};
      failures += strata_check_collective(comm, &c);
      (*cases)++;
    }
  return failures;
}

/* A float dtype with a bitwise op: STRATA_ERR_INVALID_ARG from every reducing call, before
 * anything is sent (the calls that follow would not agree otherwise). */
static int refused_pairs(strata_comm *comm, int rank, int *cases) {
  int failures = 0;
  uint64_t send[8] = {0}, recv[8] = {0}; /* room for reduce_scatter's 8 ranks of f64 */
  for (int dt = 0; dt < STRATA_DTYPE_COUNT; dt++)
    for (int op = MATRIX_OPS; op < STRATA_OP_COUNT; op++) {
      if (!is_float(dt) || op == STRATA_AVG) continue;
      strata_dtype d = (strata_dtype)dt;
      strata_request *req = NULL;
      int got[4] = {
          strata_allreduce(comm, send, recv, 1, d, (strata_op)op),
          strata_iallreduce(comm, send, recv, 1, d, (strata_op)op, &req),
          strata_reduce(comm, send, recv, 1, d, (strata_op)op, 0),
          strata_reduce_scatter(comm, send, recv, 1, d, (strata_op)op),
      };
      for (int k = 0; k < 4; k++)
        if (got[k] != STRATA_ERR_INVALID_ARG) {
          fprintf(stderr, "rank %d: %s %s call %d: %s, want STRATA_ERR_INVALID_ARG\n", rank,
                  strata_dtype_name(d), strata_op_name((strata_op)op), k, strata_err_name(got[k]));
          failures++;
        }
      if (req) strata_request_wait(req);
      (*cases)++;
    }
  return failures;
}

/* counts per rank-block; the large one makes the largest buffer of the call >= 4 MiB */
static size_t case_count(strata_coll coll, int which, int n, size_t elem) {
  int blocks =
      coll == STRATA_COLL_ALLREDUCE || coll == STRATA_COLL_BROADCAST || coll == STRATA_COLL_REDUCE
          ? 1
          : n;
  switch (which) {
    case 0:
      return 0;
    case 1:
      return 1;
    case 2:
      return 7;
    case 3:
      return (size_t)(3 * n + 1);
    default:
      return (4u << 20) / elem / (size_t)blocks + 3;
  }
}

/* STRATA_TEST_QUICK=1 (the sanitizer builds): the pairs as past 2 ranks, and the large count
 * only for f32 sum. A fraction of the time under ASan/TSan. */
static int quick_mode(void) {
  const char *v = getenv("STRATA_TEST_QUICK");
  return v && strcmp(v, "0") != 0;
}

static int body(strata_comm *comm, int rank, int n, int init_status, void *arg) {
  (void)arg;
  const int quick = quick_mode();
  if (!comm) {
    fprintf(stderr, "rank %d: init failed: %s\n", rank, strata_strerror(init_status));
    return 1;
  }
  int failures = 0, cases = 0;
  for (size_t ci = 0; ci < sizeof colls / sizeof colls[0]; ci++) {
    strata_coll coll = colls[ci];
    for (int dt = 0; dt < MATRIX_DTYPES; dt++) {
      int nops = is_reduction(coll) ? MATRIX_OPS : 1;
      for (int op = 0; op < nops; op++) {
        for (int which = 0; which < 5; which++) {
          /* the big size: every dtype with sum, every op with f32 (keeps the suite minutes) */
          if (which == 4 && op != STRATA_SUM && dt != STRATA_F32) continue;
          if (which == 4 && quick && !(op == STRATA_SUM && dt == STRATA_F32)) continue;
          if ((quick || n > 2) && op != STRATA_SUM && dt != STRATA_F32) continue;
          size_t count = case_count(coll, which, n, strata_dtype_size((strata_dtype)dt));
          for (int in_place = 0; in_place < 2; in_place++) {
            strata_check_case c = {.coll = coll,
                                   .dtype = (strata_dtype)dt,
                                   .op = (strata_op)op,
                                   .count = count,
                                   .root = (int)((ci + (size_t)which) % (size_t)n),
                                   .in_place = in_place,
                                   .nonblocking = (which + in_place) % 2,
                                   .algo = STRATA_ALGO_AUTO};
            failures += strata_check_collective(comm, &c);
            cases++;
            if (failures > 5) return 1;
          }
        }
      }
    }
  }
  failures += refused_pairs(comm, rank, &cases);
  if (n == 2) failures += small_pairs(comm, &cases);
  /* every algorithm that applies to allreduce, forced through the API */
  for (int algo = STRATA_ALGO_RING; algo < STRATA_ALGO_COUNT; algo++)
    for (int which = 0; which < 5; which++) {
      strata_check_case c = {.coll = STRATA_COLL_ALLREDUCE,
                             .dtype = STRATA_F32,
                             .op = STRATA_SUM,
                             .count = case_count(STRATA_COLL_ALLREDUCE, which, n, 4),
                             .algo = (strata_algo)algo};
      int rc = strata_check_collective(comm, &c);
      failures += rc;
      cases++;
    }
  /* reduce-scatter's second in-place form (recvbuf == sendbuf: the ring's final reduction must
   * wait for the reads of block 0) under every algorithm that builds it */
  for (int algo = STRATA_ALGO_AUTO; algo < STRATA_ALGO_COUNT; algo++) {
    if (algo != STRATA_ALGO_AUTO &&
        !strata_schedule_algo_applies(STRATA_COLL_REDUCE_SCATTER, (strata_algo)algo))
      continue;
    for (int which = 0; which < 5; which++) {
      strata_check_case c = {.coll = STRATA_COLL_REDUCE_SCATTER,
                             .dtype = STRATA_F32,
                             .op = STRATA_SUM,
                             .in_place = 2,
                             .nonblocking = which % 2,
                             .count = case_count(STRATA_COLL_REDUCE_SCATTER, which, n, 4),
                             .algo = (strata_algo)algo};
      failures += strata_check_collective(comm, &c);
      cases++;
    }
  }
  for (int dt = 0; dt < MATRIX_DTYPES; dt++)
    for (int which = 0; which < 5; which++) {
      failures += strata_check_sendrecv_ring(
          comm, (strata_dtype)dt,
          case_count(STRATA_COLL_ALLREDUCE, which, n, strata_dtype_size((strata_dtype)dt)));
      cases++;
    }
  /* several non-blocking operations in flight at once */
  {
    enum { K = 6 };
    float *bufs[K];
    strata_request *reqs[K];
    size_t count = 100003;
    for (int k = 0; k < K; k++) {
      bufs[k] = malloc(count * sizeof(float));
      for (size_t i = 0; i < count; i++) bufs[k][i] = (float)(k + rank + (i % 5));
      if (strata_iallreduce(comm, bufs[k], bufs[k], count, STRATA_F32, STRATA_SUM, &reqs[k]))
        failures++;
    }
    for (int k = K - 1; k >= 0; k--) {
      if (strata_request_wait(reqs[k])) failures++;
      for (size_t i = 0; i < count; i++) {
        float want = (float)(n * (k + (int)(i % 5)) + n * (n - 1) / 2);
        if (bufs[k][i] != want) {
          fprintf(stderr, "rank %d: in-flight allreduce %d element %zu: %g != %g\n", rank, k, i,
                  bufs[k][i], want);
          failures++;
          break;
        }
      }
      free(bufs[k]);
    }
    cases++;
  }
  if (strata_barrier(comm) != STRATA_OK) failures++;
  if (rank == 0) printf("  %d ranks: %d cases, %d failures\n", n, cases, failures);
  return failures != 0;
}

int main(int argc, char **argv) {
  int sizes[] = {1, 2, 3, 4, 5, 8};
  const char *only = argc > 1 ? argv[1] : NULL;
  int failed = 0;
  for (int shm = 1; shm >= 0; shm--) {
    if (only && strcmp(only, shm ? "shm" : "tcp")) continue;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      int n = sizes[i];
      if (argc > 2) {
        int wanted = 0;
        for (int a = 2; a < argc; a++) wanted |= atoi(argv[a]) == n;
        if (!wanted) continue;
      }
      printf("%s, %d ranks\n", shm ? "shared memory" : "tcp", n);
      fflush(stdout);
      strata_test_ranks_opts o = {.shm = shm, .timeout_s = 20, .deadline_s = 400};
      int bad = strata_test_run_ranks(n, &o, body, NULL);
      if (bad) printf("FAILED: %s with %d ranks (%d ranks failed)\n", shm ? "shm" : "tcp", n, bad);
      failed += bad != 0;
    }
  }
  printf("%s\n", failed ? "FAIL" : "PASS");
  return failed != 0;
}

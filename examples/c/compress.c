// SPDX-License-Identifier: Apache-2.0
/*
 * compress.c — fewer bytes on the wire: the same allreduce exact and with int8 compression,
 * the error checked against its bound and the bytes saved read from the statistics.
 *
 *   strata launch -n 4 -- ./compress
 *
 * Compression is per call (strata_coll_args.compress) or for every f32 call of the communicator
 * (STRATA_COMPRESS). It is lossy and f32 only; reductions stay in f32 at every hop. Every rank
 * must ask for the same encoding (it is part of the call's signature). Worth it on a slow link
 * between sites, not inside a host: docs/compression.md.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <strata.h>

enum { COUNT = 1 << 20 };

static int fail(const char *what, int status) {
  fprintf(stderr, "compress: %s: %s (%s)\n", what, strata_err_name(status),
          strata_strerror(status));
  return 1;
}

/* A deterministic value in [-1, 1] per (rank, i), so every rank knows the exact sum. */
static float value(int rank, int i) {
  unsigned h = (unsigned)i * 2654435761u ^ (unsigned)rank * 40503u;
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  return (float)(h & 0xffff) / 32767.5f - 1.0f;
}

int main(void) {
  strata_comm *comm;
  int status = strata_comm_init_env(&comm);
  if (status != STRATA_OK) return fail("init", status);
  int rank = strata_comm_rank(comm), n = strata_comm_size(comm);

  float *x = malloc(COUNT * sizeof *x);
  if (!x) return fail("malloc", STRATA_ERR_NO_MEMORY);
  for (int i = 0; i < COUNT; i++) x[i] = value(rank, i);

  strata_comm_stats before, after;
  strata_comm_get_stats(comm, &before);
  strata_coll_args args = {.coll = STRATA_COLL_ALLREDUCE,
                           .sendbuf = x,
                           .recvbuf = x,
                           .count = COUNT,
                           .dtype = STRATA_F32,
                           .op = STRATA_SUM,
                           .compress = STRATA_COMPRESS_INT8};
  status = strata_collective(comm, &args, NULL);
  if (status != STRATA_OK) return fail("compressed allreduce", status);
  strata_comm_get_stats(comm, &after);

  /* Each quantization errs by at most (max - min) / 510 of its block of 256 values; a value
   * passes through at most 2n of them, at partial sums within [-n, n]: 2n * 2n / 510. */
  double bound = 2.0 * n * (2.0 * n) / 510.0, worst = 0;
  for (int i = 0; i < COUNT; i++) {
    double exact = 0;
    for (int r = 0; r < n; r++) exact += value(r, i);
    double err = fabs((double)x[i] - exact);
    if (err > worst) worst = err;
  }
  if (worst > bound) {
    fprintf(stderr, "compress: rank %d: error %.4f beyond the bound %.4f\n", rank, worst, bound);
    return 1;
  }
  unsigned long long data = after.data_bytes_sent - before.data_bytes_sent;
  unsigned long long wire = after.wire_bytes_sent - before.wire_bytes_sent;
  if (n > 1 && !(wire * 3 < data)) {
    fprintf(stderr, "compress: rank %d: %llu wire bytes for %llu data bytes\n", rank, wire, data);
    return 1;
  }
  if (rank == 0)
    printf(
        "compress: int8 allreduce on %d ranks: max error %.4f (bound %.4f), rank 0 sent %llu "
        "wire bytes for %llu data bytes (%.2fx less)\n",
        n, worst, bound, wire, data, wire ? (double)data / (double)wire : 0.0);
  free(x);
  status = strata_comm_destroy(comm);
  return status == STRATA_OK ? 0 : fail("destroy", status);
}

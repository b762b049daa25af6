// SPDX-License-Identifier: Apache-2.0
/*
 * bench_predict.c — `strata bench --predict` (bench_predict.h): calibrate at start
 * (calibrate.c), print what was measured, predict each row with the host model.
 *
 * Rank 0 prints every figure the model reads, with %.17g so that the double comes back exactly:
 * bench/repredict.c rebuilds the prediction from these lines, and with ranks sharing cores the
 * simulated time is not continuous in them (which rank a shared core serves first can flip with
 * the last digit), so rounded figures would not give the printed prediction back.
 */
#include "bench_predict.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "calibrate.h"
#include "planner.h"

struct bench_predict {
  strata_host_links links;
};

size_t bench_predict_buffer_bytes(void) {
  return (size_t)STRATA_HOST_CALIBRATE_BYTES;
}

static void bench_predict_print(const strata_host_links *l, strata_dtype dtype) {
  int last = STRATA_HOST_CURVE_POINTS - 1;
  char where[64];
  if (l->host_cores > 0)
    snprintf(where, sizeof where, "one host, %d ranks on %d cores", l->nranks, l->host_cores);
  else
    snprintf(where, sizeof where, "%d ranks on several hosts", l->nranks);
  printf(
      "#\n# Model (--predict): %s, %s, algorithm %s, chunk %llu B; measured now: alpha %.17g us,"
      " per-call overhead %.17g us, link %.2f GB/s per transfer, reduce %.2f GB/s (%s), memcpy"
      " %.2f GB/s\n",
      where, l->use_tcp ? "tcp" : "shm single-copy pulls", strata_algo_name(l->algo),
      (unsigned long long)l->chunk_bytes, l->alpha_us, l->op_overhead_us, l->link.gbps[last],
      l->reduce.gbps[last], strata_dtype_name(dtype), l->memcpy.gbps[last]);
  printf("# Model curves (GB/s by bytes moved per rank):");
  for (int i = 0; i <= last; i++)
    printf(" %lluK link %.17g reduce %.17g memcpy %.17g%s",
           (unsigned long long)(strata_host_point_bytes(i) >> 10), l->link.gbps[i],
           l->reduce.gbps[i], l->memcpy.gbps[i], i < last ? ";" : "\n");
  if (strata_host_cores_shared(l))
    printf(
        "# Model: more ranks than cores. The model gives each rank's engine thread a core and\n"
        "# shares them by how many ranks are busy when a step starts; which rank the scheduler\n"
        "# runs is not modelled: expect wider errors than with a core per rank (docs/model.md).\n");
}

bench_predict *bench_predict_setup(strata_comm *comm, strata_dtype dtype, strata_op op, void *a,
                                   void *b, size_t bytes) {
  bench_predict *predict = calloc(1, sizeof *predict);
  /* every rank calibrates, also one that could not allocate: it fails the calibration for all */
  strata_host_links unused;
  int status = calibrate_host(comm, dtype, op, predict ? a : NULL, b, bytes,
                              predict ? &predict->links : &unused);
  int rank = strata_comm_rank(comm);
  if (status != STRATA_OK) {
    if (rank == 0) printf("#\n# Model (--predict): calibration failed, no prediction\n");
    free(predict);
    return NULL;
  }
  if (rank == 0) bench_predict_print(&predict->links, dtype);
  return predict;
}

double bench_predict_time_us(const bench_predict *predict, strata_coll coll, size_t count,
                             size_t type_bytes, int root, uint64_t calls) {
  double time_us = 0;
  if (!predict ||
      strata_host_predict_calls(&predict->links, coll, STRATA_ALGO_AUTO, count,
                                (uint32_t)type_bytes, root, calls > 0 ? calls : 1, &time_us))
    return NAN;
  return time_us;
}

void bench_predict_free(bench_predict *predict) {
  free(predict);
}

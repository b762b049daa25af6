// SPDX-License-Identifier: Apache-2.0
/*
 * bench_predict.h — `strata bench --predict`: the cost model's time for each row of the
 * benchmark, beside the measurement.
 *
 * At start every rank measures the job's links (tools/calibrate.c) on the benchmark's own
 * buffers, and rank 0 prints the figures; each row is then predicted by the host model
 * (src/model/host.h) over the very schedules the engine builds for that call. The benchmark
 * scores the predicted time as it scores the measured one (busbw).
 */
#ifndef STRATA_TOOLS_BENCH_PREDICT_H
#define STRATA_TOOLS_BENCH_PREDICT_H

#include <stddef.h>
#include <stdint.h>

#include "strata.h"

typedef struct bench_predict bench_predict;

/* The smallest size of each of the three buffers bench_predict_setup calibrates on. */
size_t bench_predict_buffer_bytes(void);

/* Collective (every rank calls it, in the same order as its other collectives): calibrates this
 * job's links on buffers a and b (each `bytes` long, at least bench_predict_buffer_bytes(); the
 * benchmark's own, so the pages measured are the pages timed; their contents are overwritten),
 * with the reduction timed on `dtype` and `op`. Rank 0 prints the figures as "# Model" lines.
 * Returns NULL when calibration failed (rank 0 says so) or memory ran out: no prediction then.
 * The result keeps `comm` and the buffers; free it with bench_predict_free before them. */
bench_predict *bench_predict_setup(strata_comm *comm, strata_dtype dtype, strata_op op, void *a,
                                   void *b, size_t bytes);

/* Predicted time (µs) of one out-of-place call of `coll` (count and root as the public API means
 * them, elements of `type_bytes`), as the time per call of `calls` calls in a row (a benchmark's
 * timed loop; 1 with a barrier after each call). NAN when the model has no answer. Local: no
 * rank waits for another. */
double bench_predict_time_us(const bench_predict *predict, strata_coll coll, size_t count,
                             size_t type_bytes, int root, uint64_t calls);

void bench_predict_free(bench_predict *predict);

#endif

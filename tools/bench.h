// SPDX-License-Identifier: Apache-2.0
/*
 * bench.h — `strata bench` as a step of another command: the same options, the same run and the
 * same nccl-tests table on stdout (rank 0), on a communicator the caller already holds, with the
 * rows handed back. `strata doctor` runs its job sweep through it, so what it measures is what
 * `strata bench` measures.
 */
#ifndef STRATA_TOOLS_BENCH_H
#define STRATA_TOOLS_BENCH_H

#include <stddef.h>

#include "strata.h"

/* One size of the run, out of place (the column --predict predicts). */
typedef struct bench_sweep_row {
  size_t bytes;
  double time_us;              /* as -a combines the ranks' times */
  double busbw_gbps;           /* measured */
  double predicted_busbw_gbps; /* the model's, NAN without --predict or without an answer */
  long wrong;                  /* elements wrong over all ranks; -1 not checked */
} bench_sweep_row;

/* Collective: every rank of `comm` calls it with the same argv (argv[0] = "bench", then what
 * `strata bench` takes). Returns the exit status `strata bench` would (0, 1 failed or wrong, 2
 * bad arguments) and, on every rank, the rows in *rows (calloc'd, the caller frees; NULL when
 * none). A failed run has aborted `comm`. */
int bench_sweep(strata_comm *comm, int argc, char **argv, bench_sweep_row **rows,
                size_t *rows_count);

/* `strata bench kv ARGS`: KV transfer prefill -> decode on this host (tools/kv_bench.c, built
 * into the command; argv[0] = "kv"). A program of its own, not a collective: no launcher. */
int strata_kv_bench_main(int argc, char **argv);

#endif

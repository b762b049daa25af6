// SPDX-License-Identifier: Apache-2.0
/*
 * bench_alltoallv.h — the traffic pattern of `strata bench alltoallv` (alltoallv_perf): how many
 * bytes each rank sends each other rank, as nccl-tests' alltoallv.cu decides them.
 *
 * Generated (the default): each rank sends `total` bytes in all, split among the ranks by their
 * distance in rank order ((to - from) mod n), blended with an even split by
 * NCCL_TESTS_ALLTOALLV_SPREAD (0 even, 1 by distance: the default), every share a multiple of
 * 16 bytes. From a file: NCCL_TESTS_ALLTOALLV_MATRIX_FILE names a square matrix of byte counts
 * (row = sender, column = receiver; at least n x n; NCCL_TESTS_ALLTOALLV_MATRIX_SCALE multiplies
 * them; each rounded down to 16 bytes; a file of at most 1 MiB), and -b must equal -e.
 * NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY=1 prints every rank's bytes and bandwidth for each row.
 */
#ifndef STRATA_TOOLS_BENCH_ALLTOALLV_H
#define STRATA_TOOLS_BENCH_ALLTOALLV_H

#include <stddef.h>
#include <stdint.h>

typedef struct bench_alltoallv {
  double spread;   /* generated: 0 even .. 1 by distance */
  uint64_t *bytes; /* from a file: dim x dim byte counts (NULL: generated) */
  int dim;
  double scale;
  int print_summary;
  const char *path;
} bench_alltoallv;

/* Reads the NCCL_TESTS_ALLTOALLV_* variables (and the matrix file). Returns 0, or -1 with the
 * reason in err. */
int bench_alltoallv_load(bench_alltoallv *pattern, char *err, size_t err_len);
void bench_alltoallv_free(bench_alltoallv *pattern);

/* Bytes rank `from` sends rank `to` of n, when each sends `total` in all (generated). */
size_t bench_alltoallv_peer_bytes(const bench_alltoallv *pattern, int from, int to, int n,
                                  size_t total);

/* The most elements any rank sends and receives (nccl-tests' AlltoAllvComputeMaxCounts). */
void bench_alltoallv_max_counts(const bench_alltoallv *pattern, size_t type_bytes, int n,
                                size_t total, size_t *max_send, size_t *max_recv);

/* NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY's lines for one timed row. */
void bench_alltoallv_print_summary(const bench_alltoallv *pattern, int n, size_t total,
                                   double seconds);

#endif

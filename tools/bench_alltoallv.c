// SPDX-License-Identifier: Apache-2.0
/*
 * bench_alltoallv.c — see bench_alltoallv.h. The arithmetic follows nccl-tests' alltoallv.cu so
 * that a row means the same bytes here and there; the matrix reader is strict (a bad value, a
 * ragged row or a matrix smaller than the job is an error, never a guess).
 */
#include "bench_alltoallv.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALLTOALLV_ALIGN_MASK (~(size_t)15)

/* A real from the environment, or `fallback` when unset or not a number; clamped to [lo, hi]. */
static double env_real(const char *name, double fallback, double lo, double hi) {
  const char *text = getenv(name);
  double value = fallback;
  if (text) {
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (!errno && end != text && *end == '\0') value = v;
  }
  return value < lo ? lo : value > hi ? hi : value;
}

/* Counts the values of each line of `text` (blank lines skipped) into rows x cols; -1 when the
 * lines differ in length or a value is not a non-negative number. */
static int matrix_shape(const char *text, int *rows, int *cols, char *err, size_t err_len) {
  *rows = *cols = 0;
  for (const char *line = text; *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    int values = 0;
    for (const char *p = line; p < line + len;) {
      if (isspace((unsigned char)*p)) {
        p++;
        continue;
      }
      char *stop = NULL;
      double v = strtod(p, &stop);
      if (stop == p || v < 0 || !isfinite(v) ||
          (stop < line + len && !isspace((unsigned char)*stop))) {
        snprintf(err, err_len, "row %d value %d is not a byte count", *rows, values);
        return -1;
      }
      values++;
      p = stop;
    }
    if (values && *rows && values != *cols) {
      snprintf(err, err_len, "row %d has %d values, the first row %d", *rows, values, *cols);
      return -1;
    }
    if (values) *cols = values, (*rows)++;
    line += len + (end != NULL);
  }
  return 0;
}

static int matrix_read(bench_alltoallv *pattern, char *err, size_t err_len) {
  FILE *f = fopen(pattern->path, "rb");
  char *text = NULL;
  size_t len = 0;
  if (f) {
    text = malloc(1 << 20);
    len = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
  }
  if (!text) {
    snprintf(err, err_len, "%s: %s", pattern->path, f ? "out of memory" : strerror(errno));
    return -1;
  }
  text[len] = '\0';
  int rows = 0, cols = 0, status = matrix_shape(text, &rows, &cols, err, err_len);
  if (!status && (rows == 0 || rows != cols)) {
    snprintf(err, err_len, "the matrix must be square and not empty (%d x %d)", rows, cols);
    status = -1;
  }
  if (!status && !(pattern->bytes = calloc((size_t)rows * (size_t)cols, sizeof *pattern->bytes)))
    status = -1, snprintf(err, err_len, "out of memory");
  char *p = text;
  for (size_t k = 0; !status && k < (size_t)rows * (size_t)cols; k++) {
    double v = strtod(p, &p) * pattern->scale;
    if (v > 1e18) {
      snprintf(err, err_len, "value %zu times the scale is more than 10^18 bytes", k);
      status = -1;
    }
    pattern->bytes[k] = (uint64_t)v & ALLTOALLV_ALIGN_MASK;
  }
  pattern->dim = rows;
  free(text);
  return status;
}

int bench_alltoallv_load(bench_alltoallv *pattern, char *err, size_t err_len) {
  memset(pattern, 0, sizeof *pattern);
  pattern->spread = env_real("NCCL_TESTS_ALLTOALLV_SPREAD", 1.0, 0.0, 1.0);
  pattern->scale = env_real("NCCL_TESTS_ALLTOALLV_MATRIX_SCALE", 1.0, 0.0, 1e18);
  const char *summary = getenv("NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY");
  pattern->print_summary = summary && atoi(summary) != 0;
  pattern->path = getenv("NCCL_TESTS_ALLTOALLV_MATRIX_FILE");
  if (!pattern->path) return 0;
  int status = matrix_read(pattern, err, err_len);
  if (status) bench_alltoallv_free(pattern);
  return status;
}

void bench_alltoallv_free(bench_alltoallv *pattern) {
  free(pattern->bytes);
  pattern->bytes = NULL;
}

size_t bench_alltoallv_peer_bytes(const bench_alltoallv *pattern, int from, int to, int n,
                                  size_t total) {
  if (pattern->bytes) return (size_t)pattern->bytes[(size_t)from * pattern->dim + to];
  if (n == 1) return total & ALLTOALLV_ALIGN_MASK;
  int distance = (to - from + n) % n;
  double sum_distances = (double)n * (n - 1) / 2;
  double even = (double)total / n, by_distance = distance * (double)total / sum_distances;
  double bytes = (1.0 - pattern->spread) * even + pattern->spread * by_distance;
  return (size_t)bytes & ALLTOALLV_ALIGN_MASK;
}

/* Bytes rank r sends (to != 0: receives) in all. */
static size_t rank_bytes(const bench_alltoallv *pattern, int r, int n, size_t total, int receive) {
  size_t sum = 0;
  for (int peer = 0; peer < n; peer++)
    sum += receive ? bench_alltoallv_peer_bytes(pattern, peer, r, n, total)
                   : bench_alltoallv_peer_bytes(pattern, r, peer, n, total);
  return sum;
}

void bench_alltoallv_max_counts(const bench_alltoallv *pattern, size_t type_bytes, int n,
                                size_t total, size_t *max_send, size_t *max_recv) {
  *max_send = *max_recv = 0;
  for (int r = 0; r < (pattern->bytes ? n : 1); r++) { /* generated: every rank alike */
    size_t send = 0, recv = 0;
    for (int peer = 0; peer < n; peer++) {
      send += bench_alltoallv_peer_bytes(pattern, r, peer, n, total) / type_bytes;
      recv += bench_alltoallv_peer_bytes(pattern, peer, r, n, total) / type_bytes;
    }
    if (send > *max_send) *max_send = send;
    if (recv > *max_recv) *max_recv = recv;
  }
  if (!pattern->bytes) *max_recv = *max_send;
}

void bench_alltoallv_print_summary(const bench_alltoallv *pattern, int n, size_t total,
                                   double seconds) {
  if (pattern->bytes)
    printf(
        "# NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY: mode=matrix nranks=%d matrix_dim=%d scale=%.3f "
        "time_usec=%.2f\n",
        n, pattern->dim, pattern->scale, seconds * 1e6);
  else
    printf(
        "# NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY: mode=generated nranks=%d total_bytes=%zu "
        "spread=%.3f time_usec=%.2f\n",
        n, total, pattern->spread, seconds * 1e6);
  for (int r = 0; r < n; r++) {
    size_t send = rank_bytes(pattern, r, n, total, 0), recv = rank_bytes(pattern, r, n, total, 1);
    double algbw = (double)(send > recv ? send : recv) / 1e9 / seconds;
    printf("#   rank=%d send_bytes=%zu recv_bytes=%zu alg_bw=%.2f bus_bw=%.2f\n", r, send, recv,
           algbw, algbw * (n - 1) / n);
  }
}

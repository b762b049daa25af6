// SPDX-License-Identifier: Apache-2.0
/*
 * util.c — see util.h.
 */
#include "util.h"

#include <stdlib.h>
#include <time.h>

#include "strata.h"

double tool_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double tool_median(double *v, size_t n) {
  if (n == 0) return 0;
  qsort(v, n, sizeof *v, compare_doubles);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void *tool_buffer_alloc(size_t bytes, int registered) {
  void *buffer = NULL;
  if (registered) return strata_mem_alloc(bytes, &buffer) == STRATA_OK ? buffer : NULL;
  return posix_memalign(&buffer, 64, bytes ? bytes : 1) == 0 ? buffer : NULL;
}

void tool_buffer_free(void *buffer, int registered) {
  if (registered)
    strata_mem_free(buffer);
  else
    free(buffer);
}

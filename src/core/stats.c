// SPDX-License-Identifier: Apache-2.0
/*
 * stats.c — order statistics of measured samples, shared by calibration, the planner's measured
 * links and the command-line tools, so every "median" in strata means the same thing.
 */
#include <stdlib.h>

#include "core/core.h"

int strata_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double strata_median(double *v, size_t n) {
  if (n == 0) return 0;
  qsort(v, n, sizeof *v, strata_cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

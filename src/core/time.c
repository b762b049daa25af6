// SPDX-License-Identifier: Apache-2.0
/*
 * time.c — the one clock strata measures with: CLOCK_MONOTONIC, so timeouts and benchmarks never
 * jump when the wall clock is adjusted.
 */
#include <time.h>

#include "core/core.h"

double strata_now_s(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

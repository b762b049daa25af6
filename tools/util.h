// SPDX-License-Identifier: Apache-2.0
/*
 * util.h — small helpers the `strata` command's files share: a clock, a median and buffers for
 * collectives. They sit here, over the public API, because tools/ reaches the runtime only
 * through strata.h (and the planner through planner.h), never through its internal headers.
 */
#ifndef STRATA_TOOLS_UTIL_H
#define STRATA_TOOLS_UTIL_H

#include <stddef.h>

/* Monotonic seconds (CLOCK_MONOTONIC), for timing. */
double tool_now_s(void);

/* The median of v[0..n): the middle value, or the mean of the middle two for an even n; 0 for
 * n == 0. Sorts v in place. */
double tool_median(double *v, size_t n);

/* A buffer for collectives of `bytes` bytes: from strata_mem_alloc when `registered` (ranks of
 * one host then read it directly), else 64-byte aligned from malloc. NULL on failure. Free it
 * with tool_buffer_free and the same flag. */
void *tool_buffer_alloc(size_t bytes, int registered);
void tool_buffer_free(void *buffer, int registered);

#endif

// SPDX-License-Identifier: Apache-2.0
/*
 * core.h — what every layer of libstrata shares: logging, clocks, dtype conversion and the
 * reduction kernels. Nothing here knows about sockets or collectives.
 */
#ifndef STRATA_CORE_CORE_H
#define STRATA_CORE_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "strata.h"

/* ---- logging: one process-wide level, set from the first communicator's config ---- */
/* secret.c: the 32-byte key of a job, Argon2id of its secret salted with its job id (split and
 * elastic communicators salt like the job they came from). Cached per process. STRATA_OK,
 * STRATA_ERR_SYSTEM (libsodium would not start) or STRATA_ERR_NO_MEMORY. */
#define STRATA_SECRET_KEY_BYTES 32
int strata_secret_key(const char *secret, const char *job_id, uint8_t key[STRATA_SECRET_KEY_BYTES]);
/* Warns once per process, when `secret` is empty, that nothing is authenticated and how to fix. */
void strata_secret_warn_once(const char *secret, int rank);

void strata_log_set_level(strata_log_level level);
strata_log_level strata_log_get_level(void);
/* Prints "strata[rank] LEVEL message\n" to stderr. rank < 0 omits it. */
void strata_log_write(strata_log_level level, int rank, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define STRATA_LOG(level, rank, ...)                                                       \
  do {                                                                                     \
    if ((level) <= strata_log_get_level()) strata_log_write((level), (rank), __VA_ARGS__); \
  } while (0)

/* ---- time ---- */
double strata_now_s(void); /* CLOCK_MONOTONIC seconds */

/* ---- samples (stats.c) ---- */
int strata_cmp_double(const void *a, const void *b); /* qsort order of doubles, ascending */
/* The median of v[0..n): the middle one, or the mean of the middle two for an even n; 0 for
 * n == 0. Sorts v. */
double strata_median(double *v, size_t n);

/* ---- half-precision arrays; f32 -> f16/bf16 rounds to nearest even, NaN stays NaN ---- */
/* The scalar conversions are public (strata.h). */
/* The same over arrays (dst and src must not overlap); plain loops the compiler vectorizes. */
void strata_f16_to_f32_array(float *dst, const uint16_t *src, size_t count);
void strata_f32_to_f16_array(uint16_t *dst, const float *src, size_t count);
void strata_bf16_to_f32_array(float *dst, const uint16_t *src, size_t count);
void strata_f32_to_bf16_array(uint16_t *dst, const float *src, size_t count);

/* ---- reductions ---- */
/* dst[i] = a[i] OP b[i] for `count` elements; a or b may equal dst. */
typedef void (*strata_reduce_fn)(void *dst, const void *a, const void *b, size_t count);
/* 1 when (dtype, op) is a defined reduction: both in range, and a bitwise op (band, bor, bxor)
 * only with an integer dtype. The engine refuses other pairs with STRATA_ERR_INVALID_ARG. */
int strata_reduce_defined(strata_dtype dtype, strata_op op);
/* The kernel for (dtype, op); AVG maps to SUM (the engine divides at the end). NULL if the pair
 * is not defined (strata_reduce_defined).
 * Kernels vectorize (the compiler auto-vectorizes plain loops at -O3; f16/bf16 convert through
 * f32 and round to nearest even). */
strata_reduce_fn strata_reduce_kernel(strata_dtype dtype, strata_op op);
/* The same kernel built for one instruction set: "generic" (any CPU of the target) or "avx2"
 * (AVX2 + F16C; NULL when this CPU or build lacks them). For tests and benchmarks. */
strata_reduce_fn strata_reduce_kernel_isa(strata_dtype dtype, strata_op op, const char *isa);
/* buf[i] /= nranks, in place (integer division for integer types). */
void strata_reduce_avg_finish(void *buf, size_t count, strata_dtype dtype, int nranks);

/* ---- memory local peers can map (mem.c; strata_mem_alloc in strata.h) ---- */
typedef struct strata_mem_ref {
  int fd;                /* the region's memfd in this process */
  uint64_t id;           /* never reused within the process */
  uint64_t offset;       /* of the buffer from the region's start */
  uint64_t region_bytes; /* the whole region */
} strata_mem_ref;
/* 1 and *out filled when [ptr, ptr+bytes) lies inside one region from strata_mem_alloc. */
int strata_mem_lookup(const void *ptr, size_t bytes, strata_mem_ref *out);
/* A buffer for collectives: from strata_mem_alloc when `registered`, else 64-byte aligned
 * malloc; NULL on failure. Free it with strata_mem_buffer_free and the same flag. */
void *strata_mem_buffer(size_t bytes, int registered);
void strata_mem_buffer_free(void *ptr, int registered);

#endif

// SPDX-License-Identifier: Apache-2.0
/*
 * reduce_internal.h — what reduce.c shares with reduce_avx2.c: which builds exist and the table
 * of fused AVX2 f16/bf16 kernels and conversions, and the CPU check. Not for use outside
 * src/core.
 */
#ifndef STRATA_CORE_REDUCE_INTERNAL_H
#define STRATA_CORE_REDUCE_INTERNAL_H

#include "core/core.h"

#if defined(__x86_64__) || defined(__i386__)
#define STRATA_REDUCE_HAVE_AVX2 1
#else
#define STRATA_REDUCE_HAVE_AVX2 0
#endif

#if STRATA_REDUCE_HAVE_AVX2
/* [0] f16, [1] bf16; columns indexed by strata_op, sum, prod, min and max set (avg and the
 * bitwise ops NULL). Only for CPUs with AVX2 and F16C. */
extern const strata_reduce_fn strata_reduce_half_avx2_kernels[2][STRATA_OP_COUNT];
/* F16C versions of half.c's array conversions, same bits. */
void strata_f16_to_f32_array_avx2(float *dst, const uint16_t *src, size_t count);
void strata_f32_to_f16_array_avx2(uint16_t *dst, const float *src, size_t count);
void strata_bf16_to_f32_array_avx2(float *dst, const uint16_t *src, size_t count);
void strata_f32_to_bf16_array_avx2(uint16_t *dst, const float *src, size_t count);
#endif

/* 1 when this CPU runs the AVX2 + F16C builds (detected once). */
int strata_reduce_cpu_has_avx2(void);

#endif

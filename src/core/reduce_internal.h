/*
 * reduce_internal.h — what reduce.c shares with reduce_avx2.c: which builds exist and the table
 * of fused AVX2 f16/bf16 kernels. Not for use outside src/core.
 */
#ifndef STRATA_CORE_REDUCE_INTERNAL_H
#define STRATA_CORE_REDUCE_INTERNAL_H

#include "core/core.h"

#if defined(__x86_64__) || defined(__i386__)
#define STRATA_REDUCE_HAVE_AVX2 1
#else
#define STRATA_REDUCE_HAVE_AVX2 0
#endif

enum { STRATA_REDUCE_OPS_WITH_KERNEL = 4 }; /* sum, prod, min, max; avg uses sum */

#if STRATA_REDUCE_HAVE_AVX2
/* [0] f16, [1] bf16; columns sum, prod, min, max. Only for CPUs with AVX2 and F16C. */
extern const strata_reduce_fn strata_reduce_half_avx2_kernels[2][STRATA_REDUCE_OPS_WITH_KERNEL];
#endif

#endif

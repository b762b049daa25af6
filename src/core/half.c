// SPDX-License-Identifier: Apache-2.0
/*
 * half.c — the public f16/bf16 <-> f32 conversions (scalar and array). The bit-level work lives
 * in half_bits.h so the reduction kernels can inline it; see there for the rounding and NaN
 * rules. The array forms are plain loops the compiler vectorizes, or their F16C/AVX2 versions
 * in reduce_avx2.c (same bits) when the CPU has them.
 */
#include "core/core.h"
#include "core/half_bits.h"
#include "core/reduce_internal.h"

#if STRATA_REDUCE_HAVE_AVX2
#define DISPATCH_AVX2(name, dst, src, count) \
  do {                                       \
    if (strata_reduce_cpu_has_avx2()) {      \
      name##_avx2(dst, src, count);          \
      return;                                \
    }                                        \
  } while (0)
#else
#define DISPATCH_AVX2(name, dst, src, count) \
  do {                                       \
  } while (0)
#endif

float strata_f16_to_f32(uint16_t h) {
  return strata_half_to_float_inline(h);
}
uint16_t strata_f32_to_f16(float f) {
  return strata_float_to_half_inline(f);
}
float strata_bf16_to_f32(uint16_t h) {
  return strata_bfloat_to_float_inline(h);
}
uint16_t strata_f32_to_bf16(float f) {
  return strata_float_to_bfloat_inline(f);
}

void strata_f16_to_f32_array(float *restrict dst, const uint16_t *restrict src, size_t count) {
  DISPATCH_AVX2(strata_f16_to_f32_array, dst, src, count);
  for (size_t i = 0; i < count; i++) dst[i] = strata_half_to_float_inline(src[i]);
}

void strata_f32_to_f16_array(uint16_t *restrict dst, const float *restrict src, size_t count) {
  DISPATCH_AVX2(strata_f32_to_f16_array, dst, src, count);
  for (size_t i = 0; i < count; i++) dst[i] = strata_float_to_half_inline(src[i]);
}

void strata_bf16_to_f32_array(float *restrict dst, const uint16_t *restrict src, size_t count) {
  DISPATCH_AVX2(strata_bf16_to_f32_array, dst, src, count);
  for (size_t i = 0; i < count; i++) dst[i] = strata_bfloat_to_float_inline(src[i]);
}

void strata_f32_to_bf16_array(uint16_t *restrict dst, const float *restrict src, size_t count) {
  DISPATCH_AVX2(strata_f32_to_bf16_array, dst, src, count);
  for (size_t i = 0; i < count; i++) dst[i] = strata_float_to_bfloat_inline(src[i]);
}

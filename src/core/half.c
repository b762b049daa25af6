/*
 * half.c — the public f16/bf16 <-> f32 conversions (scalar and array). The bit-level work lives
 * in half_bits.h so the reduction kernels can inline it; see there for the rounding and NaN
 * rules. The array forms are plain loops the compiler vectorizes.
 */
#include "core/core.h"
#include "core/half_bits.h"

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
  for (size_t i = 0; i < count; i++) dst[i] = strata_half_to_float_inline(src[i]);
}

void strata_f32_to_f16_array(uint16_t *restrict dst, const float *restrict src, size_t count) {
  for (size_t i = 0; i < count; i++) dst[i] = strata_float_to_half_inline(src[i]);
}

void strata_bf16_to_f32_array(float *restrict dst, const uint16_t *restrict src, size_t count) {
  for (size_t i = 0; i < count; i++) dst[i] = strata_bfloat_to_float_inline(src[i]);
}

void strata_f32_to_bf16_array(uint16_t *restrict dst, const float *restrict src, size_t count) {
  for (size_t i = 0; i < count; i++) dst[i] = strata_float_to_bfloat_inline(src[i]);
}

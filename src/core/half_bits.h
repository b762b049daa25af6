// SPDX-License-Identifier: Apache-2.0
/*
 * half_bits.h — branch-free f16/bf16 <-> f32 conversions as static inline functions, shared by
 * half.c (the public scalar and array functions) and reduce.c (the f16/bf16 kernels).
 *
 * They are written as selects over integer bit patterns, with no branches and no table, so the
 * compiler vectorizes loops that call them. Semantics, identical to x86 F16C (vcvtph2ps /
 * vcvtps2ph with round-to-nearest-even), which the AVX2 kernels use instead:
 *   - f32 -> f16/bf16 rounds to nearest, ties to even, subnormals included; values at or above
 *     the halfway point past the largest finite value become infinity;
 *   - NaN stays NaN and comes out quiet (the quiet bit set, the top payload bits kept);
 *   - f16/bf16 -> f32 is exact (a signalling NaN is quieted).
 * The subnormal f32 -> f16 path relies on the FPU rounding to nearest even (the C default); never
 * build this file with -ffast-math or a changed rounding mode.
 */
#ifndef STRATA_CORE_HALF_BITS_H
#define STRATA_CORE_HALF_BITS_H

#include <stdint.h>
#include <string.h>

static inline uint32_t strata_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float strata_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* cond ? a : b as bit masks: a plain ternary around a floating-point value makes GCC (with its
 * default -ftrapping-math) keep a branch, which blocks vectorization. */
static inline uint32_t strata_select_u32(int cond, uint32_t a, uint32_t b) {
  uint32_t mask = 0u - (uint32_t)(cond != 0);
  return (a & mask) | (b & ~mask);
}

static inline float strata_half_to_float_inline(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t magnitude = h & 0x7fffu;
  uint32_t normal = (magnitude << 13) + (112u << 23); /* rebias exponent 15 -> 127 */
  uint32_t quiet = (magnitude & 0x3ffu) ? 0x00400000u : 0u;
  uint32_t inf_nan = (magnitude << 13) | 0x7f800000u | quiet;
  /* subnormal: mantissa * 2^-24, exact in f32 */
  uint32_t subnormal = strata_f32_bits((float)(int32_t)magnitude * 0x1p-24f);
  uint32_t out = strata_select_u32(magnitude >= 0x7c00u, inf_nan,
                                   strata_select_u32(magnitude >= 0x0400u, normal, subnormal));
  return strata_bits_f32(out | sign);
}

static inline uint16_t strata_float_to_half_inline(float f) {
  uint32_t x = strata_f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t magnitude = x & 0x7fffffffu;
  uint32_t nan = 0x7e00u | ((magnitude >> 13) & 0x3ffu);
  /* normal: round the 13 dropped bits to nearest even, then rebias 127 -> 15 (a carry out of
   * the mantissa correctly bumps the exponent) */
  uint32_t normal = (magnitude + 0xfffu + ((magnitude >> 13) & 1u) - (112u << 23)) >> 13;
  /* subnormal (below 2^-14): adding 0.5 puts the value's 2^-24 units in the low mantissa bits
   * of 0.5f, and the FPU's own rounding is the round to nearest even we want */
  uint32_t subnormal = strata_f32_bits(strata_bits_f32(magnitude) + 0.5f) - 0x3f000000u;
  uint32_t finite = strata_select_u32(magnitude >= 0x38800000u, normal, subnormal);
  finite = strata_select_u32(magnitude >= 0x477ff000u, 0x7c00u, finite); /* >= 65520: inf */
  uint32_t out = strata_select_u32(magnitude > 0x7f800000u, nan, finite);
  return (uint16_t)(out | sign);
}

static inline float strata_bfloat_to_float_inline(uint16_t h) {
  uint32_t quiet = (h & 0x7fffu) > 0x7f80u ? 0x40u : 0u;
  return strata_bits_f32((uint32_t)(h | quiet) << 16);
}

static inline uint16_t strata_float_to_bfloat_inline(float f) {
  uint32_t x = strata_f32_bits(f);
  uint32_t nan = (x >> 16) | 0x40u;
  /* bf16 keeps f32's exponent range, so one rounding add handles subnormals and overflow */
  uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

#endif

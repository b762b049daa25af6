// SPDX-License-Identifier: Apache-2.0
/*
 * reduce_avx2.c — f16 and bf16 reduction kernels for CPUs with AVX2 and F16C, with conversion,
 * operation and rounding fused in registers, sixteen elements at a time.
 *
 * reduce.c picks these (through strata_reduce_half_avx2_kernels) only after checking the CPU at
 * run time, so every function here carries its own target attribute and this file builds with
 * the baseline flags; on other architectures it is empty. Semantics are exactly those of the
 * generic kernels in reduce_kernels.inc (see reduce.c): widen to f32, operate, round to nearest
 * even; min/max propagate NaN and order signed zeros. The tail (count % 16 elements) goes through
 * a zero-padded copy so it uses the same vector code; dst may be exactly a or b.
 */
#include "core/reduce_internal.h"

#if STRATA_REDUCE_HAVE_AVX2
#include <immintrin.h>
#include <string.h>

#include "core/half_bits.h"

#define AVX2_F16C __attribute__((target("avx2,f16c")))

/* bf16 <-> f32 sixteen at a time. Interleaving with zeros puts each bf16 in the high half of
 * a 32-bit lane, i.e. makes it an f32, but in the order [0-3 8-11] / [4-7 12-15] (unpack works
 * per 128-bit lane); packus_epi32 undoes exactly that order, so no permute is needed. A
 * signalling NaN is not quieted on the way in: every NaN is quieted on the way out. */
AVX2_F16C static inline void load_bf16x16(const uint16_t *p, __m256 *low, __m256 *high) {
  __m256i packed = _mm256_loadu_si256((const __m256i *)p), zero = _mm256_setzero_si256();
  *low = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, packed));
  *high = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, packed));
}

/* f32 -> bf16 bits in the low half of each lane: round to nearest even; a NaN keeps its top
 * mantissa bits, gets the quiet bit and loses the low half first, so the rounding add cannot
 * carry out of it. */
AVX2_F16C static inline __m256i narrow_bf16x8(__m256 v) {
  __m256i x = _mm256_castps_si256(v);
  __m256i quiet_nan = _mm256_and_si256(_mm256_or_si256(x, _mm256_set1_epi32(0x00400000)),
                                       _mm256_set1_epi32((int)0xffff0000u));
  x = _mm256_castps_si256(
      _mm256_blendv_ps(v, _mm256_castsi256_ps(quiet_nan), _mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  return _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), odd),
                           16);
}

AVX2_F16C static inline void store_bf16x16(uint16_t *p, __m256 low, __m256 high) {
  _mm256_storeu_si256((__m256i *)p, _mm256_packus_epi32(narrow_bf16x8(low), narrow_bf16x8(high)));
}

AVX2_F16C static inline void load_f16x16(const uint16_t *p, __m256 *low, __m256 *high) {
  *low = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
  *high = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 8)));
}

AVX2_F16C static inline void store_f16x16(uint16_t *p, __m256 low, __m256 high) {
  _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(low, _MM_FROUND_TO_NEAREST_INT));
  _mm_storeu_si128((__m128i *)(p + 8), _mm256_cvtps_ph(high, _MM_FROUND_TO_NEAREST_INT));
}

AVX2_F16C static inline __m256 op_sum(__m256 x, __m256 y) {
  return _mm256_add_ps(x, y);
}
AVX2_F16C static inline __m256 op_prod(__m256 x, __m256 y) {
  return _mm256_mul_ps(x, y);
}

/* As reduce_min_f32 / reduce_max_f32 in reduce.c: minps both ways round, OR-ed; maxps both ways
 * round, AND-ed, all ones (a quiet NaN) when unordered. */
AVX2_F16C static inline __m256 op_min(__m256 x, __m256 y) {
  return _mm256_or_ps(_mm256_min_ps(x, y), _mm256_min_ps(y, x));
}

AVX2_F16C static inline __m256 op_max(__m256 x, __m256 y) {
  __m256 both = _mm256_and_ps(_mm256_max_ps(x, y), _mm256_max_ps(y, x));
  return _mm256_or_ps(both, _mm256_cmp_ps(x, y, _CMP_UNORD_Q));
}

#define HALF_AVX2_KERNEL(format, op)                                                        \
  AVX2_F16C static void format##_##op##_avx2(void *dst_v, const void *a_v, const void *b_v, \
                                             size_t count) {                                \
    uint16_t *dst = dst_v;                                                                  \
    const uint16_t *a = a_v, *b = b_v;                                                      \
    __m256 a_low, a_high, b_low, b_high;                                                    \
    size_t i = 0;                                                                           \
    for (; i + 16 <= count; i += 16) {                                                      \
      load_##format##x16(a + i, &a_low, &a_high);                                           \
      load_##format##x16(b + i, &b_low, &b_high);                                           \
      store_##format##x16(dst + i, op_##op(a_low, b_low), op_##op(a_high, b_high));         \
    }                                                                                       \
    if (i < count) {                                                                        \
      uint16_t tail_a[16] = {0}, tail_b[16] = {0}, tail_dst[16];                            \
      memcpy(tail_a, a + i, (count - i) * sizeof *a);                                       \
      memcpy(tail_b, b + i, (count - i) * sizeof *b);                                       \
      load_##format##x16(tail_a, &a_low, &a_high);                                          \
      load_##format##x16(tail_b, &b_low, &b_high);                                          \
      store_##format##x16(tail_dst, op_##op(a_low, b_low), op_##op(a_high, b_high));        \
      memcpy(dst + i, tail_dst, (count - i) * sizeof *dst);                                 \
    }                                                                                       \
  }

HALF_AVX2_KERNEL(f16, sum)
HALF_AVX2_KERNEL(f16, prod)
HALF_AVX2_KERNEL(f16, min)
HALF_AVX2_KERNEL(f16, max)
HALF_AVX2_KERNEL(bf16, sum)
HALF_AVX2_KERNEL(bf16, prod)
HALF_AVX2_KERNEL(bf16, min)
HALF_AVX2_KERNEL(bf16, max)

const strata_reduce_fn strata_reduce_half_avx2_kernels[2][STRATA_OP_COUNT] = {
    {[STRATA_SUM] = f16_sum_avx2,
     [STRATA_PROD] = f16_prod_avx2,
     [STRATA_MIN] = f16_min_avx2,
     [STRATA_MAX] = f16_max_avx2},
    {[STRATA_SUM] = bf16_sum_avx2,
     [STRATA_PROD] = bf16_prod_avx2,
     [STRATA_MIN] = bf16_min_avx2,
     [STRATA_MAX] = bf16_max_avx2},
};
/* ---- array conversions for half.c, bit-identical to the scalar ones in half_bits.h ---- */

AVX2_F16C void strata_f16_to_f32_array_avx2(float *dst, const uint16_t *src, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
  for (; i < count; i++) dst[i] = strata_half_to_float_inline(src[i]);
}

AVX2_F16C void strata_f32_to_f16_array_avx2(uint16_t *dst, const float *src, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8)
    _mm_storeu_si128((__m128i *)(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < count; i++) dst[i] = strata_float_to_half_inline(src[i]);
}

AVX2_F16C void strata_bf16_to_f32_array_avx2(float *dst, const uint16_t *src, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m256i wide =
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i))), 16);
    __m256i magnitude = _mm256_and_si256(wide, _mm256_set1_epi32(0x7fffffff));
    __m256i is_nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
    wide = _mm256_or_si256(wide, _mm256_and_si256(is_nan, _mm256_set1_epi32(0x00400000)));
    _mm256_storeu_si256((__m256i *)(dst + i), wide);
  }
  for (; i < count; i++) dst[i] = strata_bfloat_to_float_inline(src[i]);
}

AVX2_F16C void strata_f32_to_bf16_array_avx2(uint16_t *dst, const float *src, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m256i narrow = narrow_bf16x8(_mm256_loadu_ps(src + i));
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(narrow, narrow), 0x08);
    _mm_storeu_si128((__m128i *)(dst + i), _mm256_castsi256_si128(packed));
  }
  for (; i < count; i++) dst[i] = strata_float_to_bfloat_inline(src[i]);
}
#endif

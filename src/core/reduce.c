// SPDX-License-Identifier: Apache-2.0
/*
 * reduce.c — elementwise reduction kernels: dst[i] = a[i] OP b[i] for every dtype and for sum,
 * prod, min and max, and for the integer dtypes also bitwise and, or and xor (avg is sum, then
 * strata_reduce_avg_finish divides once at the end).
 *
 * These run on every byte a reducing collective moves, so they must keep up with memcpy. They
 * are plain loops, compiled twice from reduce_kernels.inc: once for the baseline instruction
 * set (SSE2 on x86-64, whatever the target is elsewhere) and once with AVX2, chosen at run time
 * by strata_reduce_kernel(). The AVX2 f16/bf16 kernels are written with intrinsics in
 * reduce_avx2.c (F16C conversions fused with the operation). No hand-written assembly;
 * `bench/reduce_bench.c` measures them beside memcpy.
 *
 * Semantics (the tests hold every one of these against a scalar reference):
 *   - integers: sum and prod wrap modulo 2^bits, for signed types too (computed unsigned);
 *     band/bor/bxor act on the two's complement bits; floats have no bitwise ops;
 *   - floats: IEEE f32/f64 arithmetic, round to nearest even; f16 and bf16 are widened to f32,
 *     combined, and rounded once to nearest even (for +, * of two narrow values this equals the
 *     correctly rounded narrow result, since f32 has more than 2p+2 bits);
 *   - min/max of floats propagate NaN: if either input is NaN the result is a NaN (its sign and
 *     payload are unspecified; f16/bf16 results are quiet). For everything else they are
 *     commutative bit for bit, signed zeros included: min(-0, +0) = -0 and max(-0, +0) = +0 in
 *     either order, so two ranks that combine the same pair in opposite order (recursive
 *     doubling) get identical results;
 *   - aliasing: dst may be exactly a or b (or both); any other overlap is not allowed.
 * Kernels never allocate, never fail, and touch only count elements of each buffer. They assume
 * the default floating-point environment (round to nearest, no flush-to-zero).
 */
#include "core/core.h"
#include "core/half_bits.h"
#include "core/reduce_internal.h"

#include <stdatomic.h>

#if STRATA_REDUCE_HAVE_AVX2
#include <cpuid.h>
#endif

enum { HALF_BLOCK_ELEMENTS = 256 };

/* "dst[i] depends only on a[i] and b[i]; vectorize without alias checks" (see the .inc). */
#if defined(__clang__)
#define KERNEL_NO_ALIAS_DEPENDENCE _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define KERNEL_NO_ALIAS_DEPENDENCE _Pragma("GCC ivdep")
#else
#define KERNEL_NO_ALIAS_DEPENDENCE
#endif

/* min/max, NaN-propagating and commutative. `x < y ? x : y` is exactly what minps/minsd do
 * (the second operand when unordered or equal), so each half compiles to one instruction; taken
 * both ways round and OR-ed, the two agree bit for bit on ordinary inputs, give -0 for a pair of
 * zeros of opposite sign, and give a NaN (exponent all ones, a nonzero mantissa bit from the NaN
 * input) when either input is NaN. max is the mirror image with AND (+0 wins), which cannot
 * keep a NaN, so an unordered pair forces all ones (a quiet NaN). */
static inline float reduce_min_f32(float x, float y) {
  float first = x < y ? x : y, second = y < x ? y : x;
  return strata_bits_f32(strata_f32_bits(first) | strata_f32_bits(second));
}

static inline float reduce_max_f32(float x, float y) {
  float first = x > y ? x : y, second = y > x ? y : x;
  uint32_t nan = __builtin_isunordered(x, y) ? 0xffffffffu : 0u;
  return strata_bits_f32((strata_f32_bits(first) & strata_f32_bits(second)) | nan);
}

static inline double reduce_min_f64(double x, double y) {
  double first = x < y ? x : y, second = y < x ? y : x;
  uint64_t first_bits, second_bits;
  memcpy(&first_bits, &first, sizeof first_bits);
  memcpy(&second_bits, &second, sizeof second_bits);
  first_bits |= second_bits;
  memcpy(&first, &first_bits, sizeof first);
  return first;
}

static inline double reduce_max_f64(double x, double y) {
  double first = x > y ? x : y, second = y > x ? y : x;
  uint64_t first_bits, second_bits;
  memcpy(&first_bits, &first, sizeof first_bits);
  memcpy(&second_bits, &second, sizeof second_bits);
  first_bits = (first_bits & second_bits) | (__builtin_isunordered(x, y) ? ~0ull : 0ull);
  memcpy(&first, &first_bits, sizeof first);
  return first;
}

/* the baseline build */
#define KERNEL_ATTR
#define KERNEL_SUFFIX generic
#define KERNEL_HALF_ELSEWHERE 0
#include "core/reduce_kernels.inc"
#undef KERNEL_ATTR
#undef KERNEL_SUFFIX
#undef KERNEL_HALF_ELSEWHERE

#if STRATA_REDUCE_HAVE_AVX2
#define KERNEL_ATTR __attribute__((target("avx2,f16c")))
#define KERNEL_SUFFIX avx2
#define KERNEL_HALF_ELSEWHERE 1
#include "core/reduce_kernels.inc"
#undef KERNEL_ATTR
#undef KERNEL_SUFFIX
#undef KERNEL_HALF_ELSEWHERE

static int reduce_cpu_detect_avx2(void) {
  __builtin_cpu_init();
  /* __builtin_cpu_supports("avx2") also checks that the OS saves ymm registers; F16C is read
   * from CPUID directly because not every compiler knows it by name. */
  unsigned eax, ebx, ecx, edx;
  if (!__builtin_cpu_supports("avx2") || !__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
  return (ecx & bit_F16C) != 0;
}

/* Detected once: CPUID can trap to the hypervisor in a VM, and kernels are looked up per call.
 * Racing first callers store the same answer. */
int strata_reduce_cpu_has_avx2(void) {
  static atomic_int cached = -1;
  int has = atomic_load_explicit(&cached, memory_order_relaxed);
  if (has < 0) {
    has = reduce_cpu_detect_avx2();
    atomic_store_explicit(&cached, has, memory_order_relaxed);
  }
  return has;
}
#else
int strata_reduce_cpu_has_avx2(void) {
  return 0;
}
#endif

static int reduce_is_float(strata_dtype dtype) {
  return dtype == STRATA_F16 || dtype == STRATA_BF16 || dtype == STRATA_F32 || dtype == STRATA_F64;
}

int strata_reduce_defined(strata_dtype dtype, strata_op op) {
  if ((int)dtype < 0 || dtype >= STRATA_DTYPE_COUNT || (int)op < 0 || op >= STRATA_OP_COUNT)
    return 0;
  int bitwise = op == STRATA_BAND || op == STRATA_BOR || op == STRATA_BXOR;
  return !(bitwise && reduce_is_float(dtype));
}

strata_reduce_fn strata_reduce_kernel_isa(strata_dtype dtype, strata_op op, const char *isa) {
  if (!strata_reduce_defined(dtype, op) || !isa) return NULL;
  int column = op == STRATA_AVG ? STRATA_SUM : (int)op;
  if (strcmp(isa, "generic") == 0) return kernels_generic[dtype][column];
#if STRATA_REDUCE_HAVE_AVX2
  if (strcmp(isa, "avx2") == 0 && strata_reduce_cpu_has_avx2()) {
    if (dtype == STRATA_F16 || dtype == STRATA_BF16)
      return strata_reduce_half_avx2_kernels[dtype == STRATA_BF16][column];
    return kernels_avx2[dtype][column];
  }
#endif
  return NULL;
}

strata_reduce_fn strata_reduce_kernel(strata_dtype dtype, strata_op op) {
  strata_reduce_fn best = strata_reduce_kernel_isa(dtype, op, "avx2");
  return best ? best : strata_reduce_kernel_isa(dtype, op, "generic");
}

/* ---- avg: one division at the end ---- */

#define DIVIDE_LOOP(type, divisor)                                                \
  do {                                                                            \
    type *values = buf;                                                           \
    for (size_t i = 0; i < count; i++) values[i] = (type)(values[i] / (divisor)); \
  } while (0)

static void avg_finish_half(uint16_t *values, size_t count, float divisor, int is_bf16) {
  float wide[HALF_BLOCK_ELEMENTS];
  for (size_t start = 0; start < count; start += HALF_BLOCK_ELEMENTS) {
    size_t n = count - start < HALF_BLOCK_ELEMENTS ? count - start : HALF_BLOCK_ELEMENTS;
    if (is_bf16)
      strata_bf16_to_f32_array(wide, values + start, n);
    else
      strata_f16_to_f32_array(wide, values + start, n);
    for (size_t i = 0; i < n; i++) wide[i] /= divisor;
    if (is_bf16)
      strata_f32_to_bf16_array(values + start, wide, n);
    else
      strata_f32_to_f16_array(values + start, wide, n);
  }
}

void strata_reduce_avg_finish(void *buf, size_t count, strata_dtype dtype, int nranks) {
  if (!buf || nranks <= 1) return;
  switch (dtype) {
    case STRATA_I8:
      DIVIDE_LOOP(int8_t, nranks);
      break;
    case STRATA_U8:
      DIVIDE_LOOP(uint8_t, (unsigned)nranks);
      break;
    case STRATA_I16:
      DIVIDE_LOOP(int16_t, nranks);
      break;
    case STRATA_U16:
      DIVIDE_LOOP(uint16_t, (unsigned)nranks);
      break;
    case STRATA_I32:
      DIVIDE_LOOP(int32_t, nranks);
      break;
    case STRATA_U32:
      DIVIDE_LOOP(uint32_t, (uint32_t)nranks);
      break;
    case STRATA_I64:
      DIVIDE_LOOP(int64_t, (int64_t)nranks);
      break;
    case STRATA_U64:
      DIVIDE_LOOP(uint64_t, (uint64_t)nranks);
      break;
    case STRATA_F16:
      avg_finish_half(buf, count, (float)nranks, 0);
      break;
    case STRATA_BF16:
      avg_finish_half(buf, count, (float)nranks, 1);
      break;
    case STRATA_F32:
      DIVIDE_LOOP(float, (float)nranks);
      break;
    case STRATA_F64:
      DIVIDE_LOOP(double, (double)nranks);
      break;
    default:
      break;
  }
}

/*
 * reduce.c — elementwise reduction kernels: dst[i] = a[i] OP b[i] for every dtype and for sum,
 * prod, min and max (avg is sum, then strata_reduce_avg_finish divides once at the end).
 *
 * These run on every byte a reducing collective moves, so they must keep up with memcpy. They
 * are plain loops, compiled twice from reduce_kernels.inc: once for the baseline instruction
 * set (SSE2 on x86-64, whatever the target is elsewhere) and once with AVX2 + F16C, chosen at
 * run time by strata_reduce_kernel(). No hand-written assembly; `bench/reduce_bench.c` measures
 * them beside memcpy.
 *
 * Semantics (the tests hold every one of these against a scalar reference):
 *   - integers: sum and prod wrap modulo 2^bits, for signed types too (computed unsigned);
 *   - floats: IEEE f32/f64 arithmetic, round to nearest even; f16 and bf16 are widened to f32,
 *     combined, and rounded once to nearest even (for +, * of two narrow values this equals the
 *     correctly rounded narrow result, since f32 has more than 2p+2 bits);
 *   - min/max of floats propagate NaN: if either input is NaN the result is NaN (a's NaN when a
 *     is one, else b's). They are commutative for everything else, signed zeros included:
 *     min(-0, +0) = -0 and max(-0, +0) = +0 in either order, so two ranks that combine the same
 *     pair in opposite order (recursive doubling) get bit-identical results;
 *   - aliasing: dst may be exactly a or b (or both); any other overlap is not allowed.
 * Kernels never allocate, never fail, and touch only count elements of each buffer. They assume
 * the default floating-point environment (round to nearest, no flush-to-zero).
 */
#include "core/core.h"
#include "core/half_bits.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define REDUCE_HAVE_AVX2 1
#else
#define REDUCE_HAVE_AVX2 0
#endif

enum { REDUCE_OPS_WITH_KERNEL = 4, HALF_BLOCK_ELEMENTS = 256 };

/* min/max with NaN propagation and ordered signed zeros. A NaN y already loses the comparison
 * and is picked; a NaN x needs the last select. Equal inputs (only +-0 can differ while comparing
 * equal) combine bitwise: OR keeps the sign for min, AND drops it for max. */
static inline float reduce_min_f32(float x, float y) {
  float r = x < y ? x : y;
  r = x == y ? strata_bits_f32(strata_f32_bits(x) | strata_f32_bits(y)) : r;
  return x != x ? x : r;
}

static inline float reduce_max_f32(float x, float y) {
  float r = x > y ? x : y;
  r = x == y ? strata_bits_f32(strata_f32_bits(x) & strata_f32_bits(y)) : r;
  return x != x ? x : r;
}

static inline uint64_t reduce_f64_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}

static inline double reduce_bits_f64(uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

static inline double reduce_min_f64(double x, double y) {
  double r = x < y ? x : y;
  r = x == y ? reduce_bits_f64(reduce_f64_bits(x) | reduce_f64_bits(y)) : r;
  return x != x ? x : r;
}

static inline double reduce_max_f64(double x, double y) {
  double r = x > y ? x : y;
  r = x == y ? reduce_bits_f64(reduce_f64_bits(x) & reduce_f64_bits(y)) : r;
  return x != x ? x : r;
}

/* the baseline build */
#define KERNEL_ATTR
#define KERNEL_SUFFIX generic
#define KERNEL_F16C 0
#include "core/reduce_kernels.inc"
#undef KERNEL_ATTR
#undef KERNEL_SUFFIX
#undef KERNEL_F16C

#if REDUCE_HAVE_AVX2
#define KERNEL_ATTR __attribute__((target("avx2,f16c")))
#define KERNEL_SUFFIX avx2
#define KERNEL_F16C 1
#include "core/reduce_kernels.inc"
#undef KERNEL_ATTR
#undef KERNEL_SUFFIX
#undef KERNEL_F16C

static int reduce_cpu_has_avx2(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
}
#else
static int reduce_cpu_has_avx2(void) {
  return 0;
}
#endif

static int reduce_args_valid(strata_dtype dtype, strata_op op) {
  return (int)dtype >= 0 && dtype < STRATA_DTYPE_COUNT && (int)op >= 0 && op < STRATA_OP_COUNT;
}

strata_reduce_fn strata_reduce_kernel_isa(strata_dtype dtype, strata_op op, const char *isa) {
  if (!reduce_args_valid(dtype, op) || !isa) return NULL;
  int column = op == STRATA_AVG ? STRATA_SUM : (int)op;
  if (strcmp(isa, "generic") == 0) return kernels_generic[dtype][column];
#if REDUCE_HAVE_AVX2
  if (strcmp(isa, "avx2") == 0 && reduce_cpu_has_avx2()) return kernels_avx2[dtype][column];
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

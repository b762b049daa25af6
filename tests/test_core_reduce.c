// SPDX-License-Identifier: Apache-2.0
/*
 * test_core_reduce.c — every reduction kernel (dtype x sum/prod/min/max, and band/bor/bxor for the
 * integer dtypes; both instruction-set builds) against a scalar reference written independently
 * of the kernels:
 *   - integers in 64/128-bit arithmetic, wrapped by truncation;
 *   - floats in double, then rounded straight to the element type (f16/bf16 by a table search
 *     with an exact midpoint comparison, ties to even), min/max by explicit branches;
 *   - lengths 0..70 and a few large odd ones, out of place, dst == a, dst == b and all three
 *     the same, with guard elements after dst that must stay untouched;
 *   - strata_reduce_avg_finish for every dtype and a few rank counts;
 *   - no kernel for a float dtype with a bitwise op, and hand-checked wraparound and bit
 *     patterns.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "helpers/check.h"

enum { GUARD_ELEMENTS = 8, MAX_ELEMENT_BYTES = 8 };

/* ---- f16 / bf16 reference: decode by fields, encode by search ---- */

typedef struct narrow_table {
  int mantissa_bits, bias, finite_count;
  double finite[0x8000];
} narrow_table;

static narrow_table f16_table = {10, 15, 0, {0}}, bf16_table = {7, 127, 0, {0}};

static double narrow_decode(const narrow_table *t, uint16_t h) {
  int exponent = (h & 0x7fff) >> t->mantissa_bits, mantissa = h & ((1 << t->mantissa_bits) - 1);
  double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == (0x7fff >> t->mantissa_bits)) return mantissa ? NAN : sign * INFINITY;
  if (exponent == 0) return sign * ldexp(mantissa, 1 - t->bias - t->mantissa_bits);
  return sign * ldexp(mantissa + (1 << t->mantissa_bits), exponent - t->bias - t->mantissa_bits);
}

static void narrow_table_build(narrow_table *t) {
  t->finite_count = 0x7fff >> t->mantissa_bits << t->mantissa_bits;
  for (int h = 0; h < t->finite_count; h++) t->finite[h] = narrow_decode(t, (uint16_t)h);
}

/* NaN comes back as the canonical quiet NaN; callers compare NaN-ness only. */
static uint16_t narrow_encode(const narrow_table *t, double v) {
  int n = t->finite_count;
  if (isnan(v)) return (uint16_t)(n | (1 << (t->mantissa_bits - 1)));
  uint16_t sign = signbit(v) ? 0x8000 : 0;
  double a = fabs(v), beyond = 2 * t->finite[n - 1] - t->finite[n - 2];
  if (a >= beyond) return sign | (uint16_t)n;
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (t->finite[mid] <= a)
      lo = mid;
    else
      hi = mid - 1;
  }
  double next = lo + 1 == n ? beyond : t->finite[lo + 1];
  double midpoint = (t->finite[lo] + next) / 2;
  if (a < midpoint) return sign | (uint16_t)lo;
  if (a > midpoint) return sign | (uint16_t)(lo + 1);
  return sign | (uint16_t)(lo % 2 ? lo + 1 : lo);
}

static const narrow_table *narrow_table_of(strata_dtype dtype) {
  return dtype == STRATA_F16 ? &f16_table : &bf16_table;
}

/* ---- scalar reference ---- */

static double ref_float_op(strata_op op, double x, double y) {
  switch (op) {
    case STRATA_SUM:
      return x + y;
    case STRATA_PROD:
      return x * y;
    case STRATA_MIN:
    case STRATA_MAX:
      if (isnan(x) || isnan(y)) return NAN;
      if (x == 0 && y == 0) { /* -0 is the smaller zero */
        int negative = op == STRATA_MIN ? (signbit(x) || signbit(y)) : (signbit(x) && signbit(y));
        return negative ? -0.0 : 0.0;
      }
      return op == STRATA_MIN ? (x < y ? x : y) : (x > y ? x : y);
    default:
      return NAN;
  }
}

static int op_is_bitwise(int op) {
  return op == STRATA_BAND || op == STRATA_BOR || op == STRATA_BXOR;
}

static int dtype_is_float(int dtype) {
  return dtype == STRATA_F16 || dtype == STRATA_BF16 || dtype == STRATA_F32 || dtype == STRATA_F64;
}

static uint64_t ref_uint_op(strata_op op, uint64_t x, uint64_t y) {
  switch (op) {
    case STRATA_SUM:
      return x + y;
    case STRATA_PROD:
      return (uint64_t)((unsigned __int128)x * y);
    case STRATA_MIN:
      return x < y ? x : y;
    case STRATA_BAND:
      return x & y;
    case STRATA_BOR:
      return x | y;
    case STRATA_BXOR:
      return x ^ y;
    default:
      return x > y ? x : y;
  }
}

static int64_t ref_int_op(strata_op op, int64_t x, int64_t y) {
  switch (op) {
    case STRATA_SUM:
      return (int64_t)((uint64_t)x + (uint64_t)y);
    case STRATA_PROD:
      return (int64_t)(uint64_t)((unsigned __int128)x * (unsigned __int128)y);
    case STRATA_MIN:
      return x < y ? x : y;
    case STRATA_BAND: /* on the 64-bit two's complement: truncation keeps the low bits right */
      return (int64_t)((uint64_t)x & (uint64_t)y);
    case STRATA_BOR:
      return (int64_t)((uint64_t)x | (uint64_t)y);
    case STRATA_BXOR:
      return (int64_t)((uint64_t)x ^ (uint64_t)y);
    default:
      return x > y ? x : y;
  }
}

/* out = x OP y for element i (every pointer points at element i). */
static void ref_element(strata_dtype dtype, strata_op op, const void *x, const void *y, void *out) {
  switch (dtype) {
#define INT_CASE(tag, type, wide, fn)                                                \
  case tag:                                                                          \
    *(type *)out = (type)fn(op, (wide) * (const type *)x, (wide) * (const type *)y); \
    break;
    INT_CASE(STRATA_I8, int8_t, int64_t, ref_int_op)
    INT_CASE(STRATA_U8, uint8_t, uint64_t, ref_uint_op)
    INT_CASE(STRATA_I16, int16_t, int64_t, ref_int_op)
    INT_CASE(STRATA_U16, uint16_t, uint64_t, ref_uint_op)
    INT_CASE(STRATA_I32, int32_t, int64_t, ref_int_op)
    INT_CASE(STRATA_U32, uint32_t, uint64_t, ref_uint_op)
    INT_CASE(STRATA_I64, int64_t, int64_t, ref_int_op)
    INT_CASE(STRATA_U64, uint64_t, uint64_t, ref_uint_op)
#undef INT_CASE
    case STRATA_F16:
    case STRATA_BF16: {
      const narrow_table *t = narrow_table_of(dtype);
      double r = ref_float_op(op, narrow_decode(t, *(const uint16_t *)x),
                              narrow_decode(t, *(const uint16_t *)y));
      *(uint16_t *)out = narrow_encode(t, r);
      break;
    }
    case STRATA_F32:
      *(float *)out = (float)ref_float_op(op, *(const float *)x, *(const float *)y);
      break;
    case STRATA_F64:
      *(double *)out = ref_float_op(op, *(const double *)x, *(const double *)y);
      break;
    default:
      break;
  }
}

static int element_is_nan(strata_dtype dtype, const void *e) {
  switch (dtype) {
    case STRATA_F16:
      return (*(const uint16_t *)e & 0x7fff) > 0x7c00;
    case STRATA_BF16:
      return (*(const uint16_t *)e & 0x7fff) > 0x7f80;
    case STRATA_F32:
      return isnan(*(const float *)e);
    case STRATA_F64:
      return isnan(*(const double *)e);
    default:
      return 0;
  }
}

static int element_equal(strata_dtype dtype, const void *got, const void *want) {
  if (element_is_nan(dtype, want)) return element_is_nan(dtype, got);
  return memcmp(got, want, strata_dtype_size(dtype)) == 0;
}

/* ---- inputs ---- */

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint64_t rng_next(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

/* Mostly ordinary values, sometimes special ones (zeros, infinities, NaN, tiny, huge, ties). */
static void fill_element(strata_dtype dtype, void *e) {
  uint64_t r = rng_next(), pick = rng_next() % 16;
  static const double specials[] = {0.0,   -0.0, INFINITY, -INFINITY, NAN,  1e-40,
                                    -3e-8, 1e30, 65504.0,  1.0,       -1.0, 0.5};
  double v = pick < 3 ? specials[r % (sizeof specials / sizeof specials[0])]
                      : ((double)(int64_t)(r % 20001) - 10000.0) / 64.0;
  switch (dtype) {
    case STRATA_F16:
    case STRATA_BF16: /* random codes cover every class, including NaN and subnormals */
      *(uint16_t *)e = pick < 8 ? (uint16_t)r : narrow_encode(narrow_table_of(dtype), v);
      break;
    case STRATA_F32: {
      uint32_t bits = (uint32_t)r;
      float f = (float)v;
      if (pick == 15) memcpy(&f, &bits, sizeof f);
      *(float *)e = f;
      break;
    }
    case STRATA_F64: {
      double d = v;
      if (pick == 15) memcpy(&d, &r, sizeof d);
      *(double *)e = d;
      break;
    }
    default:
      memcpy(e, &r, strata_dtype_size(dtype));
      break;
  }
}

/* ---- the checks ---- */

typedef enum alias_mode { ALIAS_NONE, ALIAS_DST_A, ALIAS_DST_B, ALIAS_ALL } alias_mode;
static const char *const alias_names[] = {"dst!=a,b", "dst==a", "dst==b", "dst==a==b"};

static void check_kernel(const char *isa, strata_reduce_fn kernel, strata_dtype dtype, strata_op op,
                         size_t count, alias_mode alias) {
  size_t size = strata_dtype_size(dtype), bytes = (count + GUARD_ELEMENTS) * size;
  unsigned char *a = malloc(bytes), *b = malloc(bytes), *dst = malloc(bytes), *want = malloc(bytes);
  if (!a || !b || !dst || !want) abort();
  for (size_t i = 0; i < count + GUARD_ELEMENTS; i++) {
    fill_element(dtype, a + i * size);
    fill_element(dtype, b + i * size);
  }
  if (alias == ALIAS_ALL) memcpy(b, a, bytes);
  memset(dst, 0xa5, bytes);
  for (size_t i = 0; i < count; i++)
    ref_element(dtype, op, a + i * size, b + i * size, want + i * size);
  const void *in_a = a, *in_b = b;
  void *out = dst;
  if (alias == ALIAS_DST_A || alias == ALIAS_ALL) out = a;
  if (alias == ALIAS_DST_B) out = b;
  if (alias == ALIAS_ALL) in_b = a;
  kernel(out, in_a, in_b, count);
  size_t wrong = 0;
  for (size_t i = 0; i < count; i++) {
    const unsigned char *got = (const unsigned char *)out + i * size;
    if (!element_equal(dtype, got, want + i * size) && wrong++ == 0) {
      uint64_t g = 0, w = 0, x = 0, y = 0;
      memcpy(&g, got, size);
      memcpy(&w, want + i * size, size);
      if (alias == ALIAS_NONE || alias == ALIAS_DST_B) memcpy(&x, a + i * size, size);
      if (alias == ALIAS_NONE || alias == ALIAS_DST_A) memcpy(&y, b + i * size, size);
      CHECK(0, "%s %s %s count=%zu %s: element %zu: 0x%llx op 0x%llx = 0x%llx, want 0x%llx", isa,
            strata_dtype_name(dtype), strata_op_name(op), count, alias_names[alias], i,
            (unsigned long long)x, (unsigned long long)y, (unsigned long long)g,
            (unsigned long long)w);
    }
  }
  unsigned char guard[GUARD_ELEMENTS * MAX_ELEMENT_BYTES];
  memset(guard, 0xa5, sizeof guard);
  if (alias == ALIAS_NONE)
    CHECK(memcmp(dst + count * size, guard, GUARD_ELEMENTS * size) == 0,
          "%s %s %s count=%zu wrote past the end", isa, strata_dtype_name(dtype),
          strata_op_name(op), count);
  free(a);
  free(b);
  free(dst);
  free(want);
}

static void check_isa(const char *isa) {
  static const size_t large[] = {255, 256, 257, 4099, 100003};
  for (int d = 0; d < STRATA_DTYPE_COUNT; d++) {
    for (int o = 0; o < STRATA_OP_COUNT; o++) {
      if (o == STRATA_AVG) continue; /* the sum kernel (check_dispatch) */
      strata_reduce_fn kernel = strata_reduce_kernel_isa((strata_dtype)d, (strata_op)o, isa);
      if (dtype_is_float(d) && op_is_bitwise(o)) {
        CHECK(kernel == NULL, "%s has a kernel for %s %s", isa, strata_dtype_name(d),
              strata_op_name(o));
        continue;
      }
      CHECK(kernel != NULL, "%s kernel missing for %s %s", isa, strata_dtype_name(d),
            strata_op_name(o));
      if (!kernel) continue;
      for (int alias = ALIAS_NONE; alias <= ALIAS_ALL; alias++) {
        for (size_t n = 0; n <= 70; n++)
          check_kernel(isa, kernel, (strata_dtype)d, (strata_op)o, n, (alias_mode)alias);
        for (size_t k = 0; k < sizeof large / sizeof large[0]; k++) {
          /* the bitwise kernels are sum's loop with another operator: up to 4099 elements
           * covers their vector body and tails, and keeps this test's time */
          if (op_is_bitwise(o) && large[k] > 4099) continue;
          check_kernel(isa, kernel, (strata_dtype)d, (strata_op)o, large[k], (alias_mode)alias);
        }
      }
    }
  }
}

static void check_dispatch(void) {
  for (int d = 0; d < STRATA_DTYPE_COUNT; d++) {
    strata_reduce_fn sum = strata_reduce_kernel((strata_dtype)d, STRATA_SUM);
    CHECK(sum != NULL && sum == strata_reduce_kernel((strata_dtype)d, STRATA_AVG),
          "avg kernel of %s is not the sum kernel", strata_dtype_name(d));
    for (int o = 0; o < STRATA_OP_COUNT; o++) {
      int defined = !(dtype_is_float(d) && op_is_bitwise(o));
      CHECK(strata_reduce_defined((strata_dtype)d, (strata_op)o) == defined,
            "strata_reduce_defined(%s, %s) != %d", strata_dtype_name(d), strata_op_name(o),
            defined);
      strata_reduce_fn k = strata_reduce_kernel((strata_dtype)d, (strata_op)o);
      CHECK((k != NULL) == defined, "%s %s: kernel %s", strata_dtype_name(d), strata_op_name(o),
            k ? "present" : "missing");
      strata_reduce_fn avx2 = strata_reduce_kernel_isa((strata_dtype)d, (strata_op)o, "avx2");
      CHECK(k == (avx2 ? avx2 : strata_reduce_kernel_isa((strata_dtype)d, (strata_op)o, "generic")),
            "dispatch of %s %s picks neither build", strata_dtype_name(d), strata_op_name(o));
    }
  }
  CHECK(strata_reduce_kernel(STRATA_DTYPE_COUNT, STRATA_SUM) == NULL, "bad dtype accepted");
  CHECK(strata_reduce_kernel((strata_dtype)-1, STRATA_SUM) == NULL, "negative dtype accepted");
  CHECK(strata_reduce_kernel(STRATA_F32, STRATA_OP_COUNT) == NULL, "bad op accepted");
  CHECK(!strata_reduce_defined(STRATA_I32, STRATA_OP_COUNT), "bad op defined");
  CHECK(!strata_reduce_defined(STRATA_DTYPE_COUNT, STRATA_SUM), "bad dtype defined");
  CHECK(!strata_reduce_defined(STRATA_I32, (strata_op)-1), "negative op defined");
  CHECK(strata_reduce_kernel_isa(STRATA_F32, STRATA_SUM, "vax") == NULL, "bad isa accepted");
  CHECK(strata_reduce_kernel_isa(STRATA_F32, STRATA_SUM, NULL) == NULL, "NULL isa accepted");
}

/* ---- avg finish ---- */

static void ref_divide(strata_dtype dtype, const void *x, int n, void *out) {
  switch (dtype) {
    case STRATA_I8:
      *(int8_t *)out = (int8_t)(*(const int8_t *)x / n);
      break;
    case STRATA_U8:
      *(uint8_t *)out = (uint8_t)(*(const uint8_t *)x / n);
      break;
    case STRATA_I16:
      *(int16_t *)out = (int16_t)(*(const int16_t *)x / n);
      break;
    case STRATA_U16:
      *(uint16_t *)out = (uint16_t)(*(const uint16_t *)x / n);
      break;
    case STRATA_I32:
      *(int32_t *)out = (int32_t)(*(const int32_t *)x / n);
      break;
    case STRATA_U32:
      *(uint32_t *)out = *(const uint32_t *)x / (uint32_t)n;
      break;
    case STRATA_I64:
      *(int64_t *)out = *(const int64_t *)x / n;
      break;
    case STRATA_U64:
      *(uint64_t *)out = *(const uint64_t *)x / (uint64_t)n;
      break;
    case STRATA_F16:
    case STRATA_BF16: {
      const narrow_table *t = narrow_table_of(dtype);
      *(uint16_t *)out = narrow_encode(t, narrow_decode(t, *(const uint16_t *)x) / n);
      break;
    }
    case STRATA_F32:
      *(float *)out = (float)((double)*(const float *)x / n);
      break;
    case STRATA_F64:
      *(double *)out = *(const double *)x / n;
      break;
    default:
      break;
  }
}

static void check_avg_finish(void) {
  /* rank counts exact in every element type (bf16 holds integers up to 256 exactly) */
  static const int ranks[] = {1, 2, 3, 5, 7, 8, 100};
  static const size_t counts[] = {0, 1, 7, 255, 256, 1001};
  for (int d = 0; d < STRATA_DTYPE_COUNT; d++)
    for (size_t r = 0; r < sizeof ranks / sizeof ranks[0]; r++)
      for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        strata_dtype dtype = (strata_dtype)d;
        size_t size = strata_dtype_size(dtype), count = counts[c];
        unsigned char *buf = malloc((count + 1) * size), *want = malloc((count + 1) * size);
        if (!buf || !want) abort();
        for (size_t i = 0; i < count; i++) {
          fill_element(dtype, buf + i * size);
          ref_divide(dtype, buf + i * size, ranks[r], want + i * size);
        }
        strata_reduce_avg_finish(buf, count, dtype, ranks[r]);
        for (size_t i = 0; i < count; i++) {
          if (element_equal(dtype, buf + i * size, want + i * size)) continue;
          CHECK(0, "avg_finish %s nranks=%d count=%zu: element %zu wrong", strata_dtype_name(d),
                ranks[r], count, i);
          break;
        }
        free(buf);
        free(want);
      }
  int32_t negative[3] = {-7, 7, -1};
  strata_reduce_avg_finish(negative, 3, STRATA_I32, 2);
  CHECK(negative[0] == -3 && negative[1] == 3 && negative[2] == 0,
        "integer avg must truncate toward zero: %d %d %d", negative[0], negative[1], negative[2]);
  strata_reduce_avg_finish(NULL, 3, STRATA_I32, 2); /* must not crash */
  strata_reduce_avg_finish(negative, 3, STRATA_DTYPE_COUNT, 2);
}

/* Hand-checked values, so a bug shared by kernel and reference still shows. */
static void check_examples(void) {
  int8_t i8a[2] = {127, -128}, i8b[2] = {1, -1};
  strata_reduce_kernel(STRATA_I8, STRATA_SUM)(i8a, i8a, i8b, 2);
  CHECK(i8a[0] == -128 && i8a[1] == 127, "i8 sum must wrap: %d %d", i8a[0], i8a[1]);
  float fa[3] = {-0.0f, 0.0f, NAN}, fb[3] = {0.0f, -0.0f, 1.0f}, out[3];
  strata_reduce_kernel(STRATA_F32, STRATA_MIN)(out, fa, fb, 3);
  CHECK(signbit(out[0]) && signbit(out[1]) && isnan(out[2]), "f32 min of zeros / NaN");
  strata_reduce_kernel(STRATA_F32, STRATA_MAX)(out, fb, fa, 3);
  CHECK(!signbit(out[0]) && !signbit(out[1]) && isnan(out[2]), "f32 max of zeros / NaN");
  uint16_t ha = 0x3c00, hb = 0x1400; /* 1 and 2^-10: one f16 ulp of 1 */
  uint16_t hr;
  strata_reduce_kernel(STRATA_F16, STRATA_SUM)(&hr, &ha, &hb, 1);
  CHECK(hr == 0x3c01, "f16 1 + 2^-10 = 0x%04x, want 0x3c01", hr);
  hb = 0x1000; /* 2^-11: a tie, rounds to even 1.0 */
  strata_reduce_kernel(STRATA_F16, STRATA_SUM)(&hr, &ha, &hb, 1);
  CHECK(hr == 0x3c00, "f16 1 + 2^-11 = 0x%04x, want 0x3c00 (tie to even)", hr);
}

/* 16-bit wraparound by hand: products of 16-bit values overflow int, where C promotes them. */
static void check_examples_16(void) {
  int16_t sa[4] = {32767, -32768, 1000, -2}, sb[4] = {1, -1, 30000, -3};
  strata_reduce_kernel(STRATA_I16, STRATA_SUM)(sa, sa, sb, 4);
  CHECK(sa[0] == -32768 && sa[1] == 32767 && sa[2] == 31000 && sa[3] == -5,
        "i16 sum must wrap: %d %d %d %d", sa[0], sa[1], sa[2], sa[3]);
  int16_t pa[4] = {256, 300, -32768, 181}, pb[4] = {256, 300, -1, 181}, pr[4];
  strata_reduce_kernel(STRATA_I16, STRATA_PROD)(pr, pa, pb, 4);
  /* 65536 -> 0; 90000 - 65536 = 24464; 32768 -> -32768; 32761 fits */
  CHECK(pr[0] == 0 && pr[1] == 24464 && pr[2] == -32768 && pr[3] == 32761,
        "i16 prod must wrap: %d %d %d %d", pr[0], pr[1], pr[2], pr[3]);
  uint16_t ua[3] = {65535, 65535, 40000}, ub[3] = {1, 65535, 2}, ur[3];
  strata_reduce_kernel(STRATA_U16, STRATA_SUM)(ur, ua, ub, 3);
  CHECK(ur[0] == 0 && ur[1] == 65534 && ur[2] == 40002, "u16 sum must wrap: %u %u %u", ur[0], ur[1],
        ur[2]);
  strata_reduce_kernel(STRATA_U16, STRATA_PROD)(ub, ua, ub, 3); /* dst == b */
  /* 65535 * 65535 = 0xfffe0001; 80000 - 65536 = 14464 */
  CHECK(ub[0] == 65535 && ub[1] == 1 && ub[2] == 14464, "u16 prod must wrap: %u %u %u", ub[0],
        ub[1], ub[2]);
  int16_t ma[2] = {-32768, 5}, mb[2] = {32767, -5}, mr[2];
  strata_reduce_kernel(STRATA_I16, STRATA_MIN)(mr, ma, mb, 2);
  CHECK(mr[0] == -32768 && mr[1] == -5, "i16 min: %d %d", mr[0], mr[1]);
  strata_reduce_kernel(STRATA_U16, STRATA_MAX)(ua, ua, ua, 3);
  CHECK(ua[0] == 65535 && ua[2] == 40000, "u16 max of a value with itself");
}

/* Bitwise ops on every integer dtype, bit patterns 0xcc.. and 0xaa.. (and 0x88.., or 0xee..,
 * xor 0x66..), with dst == a, dst == b and a separate dst. */
static void check_examples_bitwise(void) {
  static const strata_dtype ints[] = {STRATA_I8,  STRATA_U8,  STRATA_I16, STRATA_U16,
                                      STRATA_I32, STRATA_U32, STRATA_I64, STRATA_U64};
  static const struct {
    strata_op op;
    unsigned char want;
  } ops[] = {{STRATA_BAND, 0x88}, {STRATA_BOR, 0xee}, {STRATA_BXOR, 0x66}};
  enum { COUNT = 5 };
  for (size_t t = 0; t < sizeof ints / sizeof ints[0]; t++)
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
      for (int alias = ALIAS_NONE; alias <= ALIAS_DST_B; alias++) {
        size_t bytes = COUNT * strata_dtype_size(ints[t]);
        unsigned char a[COUNT * 8], b[COUNT * 8], dst[COUNT * 8], want[COUNT * 8];
        memset(a, 0xcc, bytes);
        memset(b, 0xaa, bytes);
        memset(dst, 0, bytes);
        memset(want, ops[o].want, bytes);
        unsigned char *out = alias == ALIAS_DST_A ? a : alias == ALIAS_DST_B ? b : dst;
        strata_reduce_kernel(ints[t], ops[o].op)(out, a, b, COUNT);
        CHECK(memcmp(out, want, bytes) == 0, "%s %s %s: first byte 0x%02x, want 0x%02x",
              strata_dtype_name(ints[t]), strata_op_name(ops[o].op), alias_names[alias], out[0],
              ops[o].want);
      }
  int8_t x[2] = {-1, -128}, y[2] = {5, 127};
  strata_reduce_kernel(STRATA_I8, STRATA_BAND)(x, x, y, 1);
  strata_reduce_kernel(STRATA_I8, STRATA_BXOR)(x + 1, x + 1, y + 1, 1);
  CHECK(x[0] == 5 && x[1] == -1, "i8 -1 & 5 = %d (want 5), -128 ^ 127 = %d (want -1)", x[0], x[1]);
  int64_t big = INT64_MIN, one = 1;
  strata_reduce_kernel(STRATA_I64, STRATA_BOR)(&big, &big, &one, 1);
  CHECK(big == INT64_MIN + 1, "i64 INT64_MIN | 1");
}

int main(void) {
  narrow_table_build(&f16_table);
  narrow_table_build(&bf16_table);
  check_dispatch();
  check_examples();
  check_examples_16();
  check_examples_bitwise();
  check_isa("generic");
  if (strata_reduce_kernel_isa(STRATA_F32, STRATA_SUM, "avx2"))
    check_isa("avx2");
  else
    printf("test_core_reduce: no AVX2+F16C on this CPU, tested the generic build only\n");
  check_avg_finish();
  if (failures) {
    fprintf(stderr, "test_core_reduce: %d failures\n", failures);
    return 1;
  }
  printf("test_core_reduce: ok\n");
  return 0;
}

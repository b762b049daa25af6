// SPDX-License-Identifier: Apache-2.0
/*
 * test_core_half.c — f16/bf16 <-> f32 conversions against slow, obviously-correct references.
 *
 * - every one of the 65536 f16 and bf16 codes decodes to the value its fields define (computed
 *   with ldexp in double) and survives code -> f32 -> code exactly; NaNs stay NaN, come back
 *   quiet and keep their sign;
 * - f32 -> f16/bf16 is checked against a reference that binary-searches the sorted table of
 *   finite codes for the neighbours lo <= |v| < hi and compares |v| with their midpoint in
 *   double (exact: the midpoint needs one bit more than the narrow format); ties go to the even
 *   code. Inputs: every neighbour, midpoint and midpoint +-1 ulp, plus random f32s;
 * - the array functions give the same bits as the scalar ones.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "helpers/check.h"

typedef struct narrow_format {
  const char *name;
  int mantissa_bits; /* stored mantissa bits: 10 for f16, 7 for bf16 */
  int exponent_bias; /* 15, 127 */
  float (*to_f32)(uint16_t);
  uint16_t (*from_f32)(float);
  void (*to_f32_array)(float *, const uint16_t *, size_t);
  void (*from_f32_array)(uint16_t *, const float *, size_t);
  double finite[0x8000]; /* value of each positive finite code, ascending */
  int finite_count;
} narrow_format;

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint16_t exponent_all_ones(const narrow_format *fmt) {
  return (uint16_t)(0x7fffu >> fmt->mantissa_bits << fmt->mantissa_bits);
}

static int code_is_nan(const narrow_format *fmt, uint16_t h) {
  uint16_t inf = exponent_all_ones(fmt);
  return (h & 0x7fff) > inf;
}

/* The value the code's sign/exponent/mantissa fields define. */
static double reference_decode(const narrow_format *fmt, uint16_t h) {
  int m_bits = fmt->mantissa_bits;
  int exponent = (h & 0x7fff) >> m_bits;
  int mantissa = h & ((1 << m_bits) - 1);
  int max_exponent = 0x7fff >> m_bits;
  double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == max_exponent) return mantissa ? NAN : sign * INFINITY;
  if (exponent == 0) return sign * ldexp(mantissa, 1 - fmt->exponent_bias - m_bits);
  return sign * ldexp(mantissa + (1 << m_bits), exponent - fmt->exponent_bias - m_bits);
}

static void format_build_table(narrow_format *fmt) {
  fmt->finite_count = exponent_all_ones(fmt);
  for (int h = 0; h < fmt->finite_count; h++) fmt->finite[h] = reference_decode(fmt, (uint16_t)h);
}

/* Nearest code, ties to even, by search and an exact midpoint comparison. */
static uint16_t reference_encode(const narrow_format *fmt, float v) {
  uint16_t sign = signbit(v) ? 0x8000 : 0;
  double a = fabs((double)v);
  int n = fmt->finite_count;
  double max = fmt->finite[n - 1];
  double beyond = max + (max - fmt->finite[n - 2]); /* the next step, which is infinity */
  if (a >= beyond) return sign | (uint16_t)n;
  int lo = 0, hi_index = n - 1; /* largest lo with finite[lo] <= a */
  while (lo < hi_index) {
    int mid = (lo + hi_index + 1) / 2;
    if (fmt->finite[mid] <= a)
      lo = mid;
    else
      hi_index = mid - 1;
  }
  int hi = lo + 1; /* == n means infinity */
  double hi_value = hi == n ? beyond : fmt->finite[hi];
  double midpoint = (fmt->finite[lo] + hi_value) / 2;
  if (a == fmt->finite[lo] || a < midpoint) return sign | (uint16_t)lo;
  if (a > midpoint) return sign | (uint16_t)hi;
  return sign | (uint16_t)((lo % 2 == 0) ? lo : hi);
}

static void check_all_codes(const narrow_format *fmt) {
  for (uint32_t code = 0; code < 0x10000; code++) {
    uint16_t h = (uint16_t)code;
    float f = fmt->to_f32(h);
    if (code_is_nan(fmt, h)) {
      uint16_t back = fmt->from_f32(f);
      uint16_t quiet_bit = (uint16_t)(1u << (fmt->mantissa_bits - 1));
      CHECK(isnan(f), "%s 0x%04x decodes to %g, want NaN", fmt->name, h, f);
      CHECK(code_is_nan(fmt, back) && (back & quiet_bit) && (back & 0x8000) == (h & 0x8000),
            "%s NaN 0x%04x came back as 0x%04x", fmt->name, h, back);
      CHECK((bits_of(f) & 0x00400000u) != 0, "%s NaN 0x%04x decodes to signalling f32 0x%08x",
            fmt->name, h, bits_of(f));
      continue;
    }
    double want = reference_decode(fmt, h);
    CHECK((double)f == want && !signbit(f) == !signbit(want), "%s 0x%04x decodes to %a, want %a",
          fmt->name, h, f, want);
    uint16_t back = fmt->from_f32(f);
    CHECK(back == h, "%s 0x%04x -> %a -> 0x%04x", fmt->name, h, f, back);
  }
}

static void check_encode(const narrow_format *fmt, float v) {
  if (isnan(v)) return;
  uint16_t got = fmt->from_f32(v), want = reference_encode(fmt, v);
  CHECK(got == want, "%s(%a = 0x%08x) = 0x%04x, want 0x%04x", fmt->name, v, bits_of(v), got, want);
}

/* Every neighbour of every finite code, its midpoint with the next, and +-1 f32 ulp around. */
static void check_boundaries(const narrow_format *fmt) {
  int n = fmt->finite_count;
  for (int h = 0; h < n; h++) {
    double next = h + 1 < n ? fmt->finite[h + 1] : 2 * fmt->finite[n - 1] - fmt->finite[n - 2];
    float points[3] = {(float)fmt->finite[h], (float)((fmt->finite[h] + next) / 2), 0};
    for (int p = 0; p < 2; p++) {
      float x = points[p];
      if (isinf(x)) continue;
      float around[3] = {x, nextafterf(x, INFINITY), nextafterf(x, 0)};
      for (int k = 0; k < 3; k++) {
        check_encode(fmt, around[k]);
        check_encode(fmt, -around[k]);
      }
    }
  }
  check_encode(fmt, INFINITY);
  check_encode(fmt, -INFINITY);
  check_encode(fmt, 3.4028234663852886e38f);
  CHECK(code_is_nan(fmt, fmt->from_f32(NAN)), "%s(NaN) is not NaN", fmt->name);
  CHECK(code_is_nan(fmt, fmt->from_f32(float_of(0x7f800001u))), "%s(sNaN) is not NaN", fmt->name);
  CHECK(code_is_nan(fmt, fmt->from_f32(float_of(0xff800001u))), "%s(-sNaN) is not NaN", fmt->name);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rng_next(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 16);
}

/* Random bit patterns, and random values with exponents in and around the narrow range. */
static void check_random(const narrow_format *fmt, int samples) {
  enum { BATCH = 4096 };
  static float values[BATCH];
  static uint16_t codes[BATCH];
  static float widened[BATCH];
  for (int done = 0; done < samples; done += BATCH) {
    for (int i = 0; i < BATCH; i++) {
      uint32_t u = rng_next();
      if (i % 2) { /* exponent within bias +-(bias + mantissa + 4) */
        int span = 2 * (fmt->exponent_bias + fmt->mantissa_bits + 4);
        int e = 127 + (int)(rng_next() % (uint32_t)span) - span / 2;
        if (e < 0) e = 0;
        if (e > 254) e = 254;
        u = (u & 0x807fffffu) | ((uint32_t)e << 23);
      }
      values[i] = float_of(u);
      check_encode(fmt, values[i]);
    }
    fmt->from_f32_array(codes, values, BATCH);
    for (int i = 0; i < BATCH; i++)
      CHECK(codes[i] == fmt->from_f32(values[i]), "%s array(%a) = 0x%04x, scalar 0x%04x", fmt->name,
            values[i], codes[i], fmt->from_f32(values[i]));
  }
  static uint16_t all[0x10000];
  static float all_f[0x10000];
  for (uint32_t c = 0; c < 0x10000; c++) all[c] = (uint16_t)c;
  fmt->to_f32_array(all_f, all, 0x10000);
  for (uint32_t c = 0; c < 0x10000; c++) {
    float s = fmt->to_f32(all[c]);
    CHECK(bits_of(all_f[c]) == bits_of(s), "%s to_f32 array(0x%04x) = 0x%08x, scalar 0x%08x",
          fmt->name, c, bits_of(all_f[c]), bits_of(s));
  }
  (void)widened;
}

static narrow_format f16 = {"f16",
                            10,
                            15,
                            strata_f16_to_f32,
                            strata_f32_to_f16,
                            strata_f16_to_f32_array,
                            strata_f32_to_f16_array,
                            {0},
                            0};
static narrow_format bf16 = {"bf16",
                             7,
                             127,
                             strata_bf16_to_f32,
                             strata_f32_to_bf16,
                             strata_bf16_to_f32_array,
                             strata_f32_to_bf16_array,
                             {0},
                             0};

int main(void) {
  narrow_format *formats[] = {&f16, &bf16};
  for (int i = 0; i < 2; i++) {
    format_build_table(formats[i]);
    check_all_codes(formats[i]);
    check_boundaries(formats[i]);
    check_random(formats[i], 1 << 21);
  }
  /* a few hand-checked values */
  CHECK(strata_f32_to_f16(65504.0f) == 0x7bff, "65504 -> f16");
  CHECK(strata_f32_to_f16(65519.99f) == 0x7bff, "65519.99 -> f16");
  CHECK(strata_f32_to_f16(65520.0f) == 0x7c00, "65520 -> f16 inf");
  CHECK(strata_f32_to_f16(0x1p-25f) == 0x0000, "2^-25 -> f16 (tie to even zero)");
  CHECK(strata_f32_to_f16(0x1.8p-24f) == 0x0002, "1.5*2^-24 -> f16 (tie to even 2)");
  CHECK(strata_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00, "1+2^-11 -> f16 (tie to even 1)");
  CHECK(strata_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80, "1+2^-8 -> bf16 (tie to even 1)");
  CHECK(strata_f32_to_bf16(1.0f + 0x1.8p-7f) == 0x3f82, "1+1.5*2^-7 -> bf16 (tie up)");
  CHECK(strata_f32_to_bf16(3.4028234663852886e38f) == 0x7f80, "FLT_MAX -> bf16 inf");
  if (failures) {
    fprintf(stderr, "test_core_half: %d failures\n", failures);
    return 1;
  }
  printf("test_core_half: ok\n");
  return 0;
}

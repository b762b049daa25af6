/*
 * compress.c — the wire encodings of compress.h: bf16/f16 (per value), int8 with a per-block
 * minimum and step, fp8 e4m3 with a per-block power-of-two scale.
 *
 * Why a power of two for fp8: scaling by 2^k changes only exponents, so a block that was decoded
 * and is sent on again (a ring forwarding what it received) re-encodes to exactly the same values.
 * int8 keeps the tightest step ((max − min)/255) for accuracy; re-encoding decoded int8 data can
 * move a value by an ulp of the step, which docs/compression.md states.
 *
 * Never: read or write past n values / wire_bytes bytes, or turn a non-finite input into a
 * finite output.
 */
#include "core/compress.h"

#include <math.h>
#include <string.h>

#include "core/core.h"

int strata_compress_is_lossy(strata_compress c) {
  return c == STRATA_COMPRESS_BF16 || c == STRATA_COMPRESS_F16 || c == STRATA_COMPRESS_INT8 ||
         c == STRATA_COMPRESS_FP8;
}

static uint64_t blocks_of(uint64_t n) {
  return (n + STRATA_COMPRESS_BLOCK - 1) / STRATA_COMPRESS_BLOCK;
}

/* Block header sizes (bytes). */
enum { INT8_HEADER = 8, FP8_HEADER = 4 };

uint64_t strata_compress_wire_bytes(strata_compress c, uint64_t n) {
  switch (c) {
    case STRATA_COMPRESS_BF16:
    case STRATA_COMPRESS_F16:
      return 2 * n;
    case STRATA_COMPRESS_INT8:
      return n + INT8_HEADER * blocks_of(n);
    case STRATA_COMPRESS_FP8:
      return n + FP8_HEADER * blocks_of(n);
    default:
      return 4 * n;
  }
}

double strata_compress_error_bound(strata_compress c, double m) {
  switch (c) {
    case STRATA_COMPRESS_BF16:
      return m * 0x1p-8; /* half an ulp of 8 significant bits, with room for the carry */
    case STRATA_COMPRESS_F16:
      return m * 0x1p-11;
    case STRATA_COMPRESS_INT8:
      return 2 * m / 510.0; /* step/2, the block spanning at most [-m, m] */
    case STRATA_COMPRESS_FP8:
      return m * 0x1p-4 + m / 448.0 * 0x1p-9; /* relative as a normal + subnormal spacing */
    default:
      return 0;
  }
}

/* ---- fp8 e4m3 ---- */
uint8_t strata_f32_to_e4m3(float f) {
  uint32_t bits;
  memcpy(&bits, &f, 4);
  uint8_t sign = (uint8_t)((bits >> 24) & 0x80);
  uint32_t mag = bits & 0x7fffffffu;
  if (mag > 0x7f800000u) return 0x7f; /* NaN */
  float a;
  memcpy(&a, &mag, 4);
  if (a >= 448.0f) return sign | 0x7e; /* saturate: e4m3 has no infinity */
  if (a < 0x1p-6f) {
    /* subnormal: a = m · 2^-9, m in 0..8 (8 is the smallest normal, code 8) */
    return sign | (uint8_t)nearbyintf(a * 0x1p9f);
  }
  /* normal: keep 3 mantissa bits, nearest even; a carry moves into the exponent */
  uint32_t rounded = mag + 0x7ffffu + ((mag >> 20) & 1u);
  uint32_t code = (rounded >> 20) - (120u << 3); /* rebias 127 -> 7 */
  if (code > 0x7e) code = 0x7e;
  return sign | (uint8_t)code;
}

float strata_e4m3_to_f32(uint8_t code) {
  uint32_t exp = (code >> 3) & 0xf, mant = code & 7;
  float v;
  if ((code & 0x7f) == 0x7f)
    v = NAN;
  else if (exp == 0)
    v = ldexpf((float)mant, -9);
  else
    v = ldexpf((float)(8 + mant), (int)exp - 10);
  return (code & 0x80) ? -v : v;
}

static float e4m3_table[256];
static int e4m3_table_ready;

static const float *e4m3_values(void) {
  if (!__atomic_load_n(&e4m3_table_ready, __ATOMIC_ACQUIRE)) {
    for (int i = 0; i < 256; i++) e4m3_table[i] = strata_e4m3_to_f32((uint8_t)i);
    __atomic_store_n(&e4m3_table_ready, 1, __ATOMIC_RELEASE);
  }
  return e4m3_table;
}

/* The smallest power of two s with 448·s >= amax (amax > 0, finite). */
static float fp8_scale(float amax) {
  int e;
  frexpf(amax, &e); /* amax = m·2^e, m in [0.5, 1) */
  int k = e - 9;
  while (ldexpf(448.0f, k) < amax) k++;
  while (ldexpf(448.0f, k - 1) >= amax) k--;
  return ldexpf(1.0f, k);
}

static void fp8_encode_block(const float *v, size_t k, uint8_t *out) {
  float amax = 0;
  int finite = 1;
  for (size_t i = 0; i < k; i++) {
    float a = fabsf(v[i]);
    finite &= isfinite(a) != 0;
    amax = a > amax ? a : amax;
  }
  float scale = !finite ? NAN : amax > 0 ? fp8_scale(amax) : 1.0f;
  memcpy(out, &scale, 4);
  uint8_t *q = out + FP8_HEADER;
  if (!finite) {
    memset(q, 0, k);
    return;
  }
  float inv = 1.0f / scale; /* exact: a power of two */
  for (size_t i = 0; i < k; i++) q[i] = strata_f32_to_e4m3(v[i] * inv);
}

static void fp8_decode_block(const uint8_t *in, size_t k, float *dst) {
  const float *table = e4m3_values();
  float scale;
  memcpy(&scale, in, 4);
  const uint8_t *q = in + FP8_HEADER;
  for (size_t i = 0; i < k; i++) dst[i] = table[q[i]] * scale;
}

/* ---- int8 min/step ---- */
/* What the decoder computes for code q (kept in one place: the step search must agree with it). */
static inline float int8_value(float lo, float step, uint8_t q) {
  float product = (float)q * step;
  __asm__("" : "+x"(product)); /* keep the product rounded: no fused multiply-add */
  return lo + product;
}

/* The smallest step s with lo + 255·s >= hi as the decoder computes it. Choosing the smallest
 * makes re-encoding decoded data find the same step again (its maximum is lo + 255·s, and no
 * smaller step reaches it), so forwarded blocks do not drift. */
static float int8_step(float lo, float hi) {
  if (!(hi > lo)) return 0;
  float s = (float)(((double)hi - (double)lo) / 255.0); /* in double: hi − lo may overflow */
  while (int8_value(lo, s, 255) < hi) s = nextafterf(s, INFINITY);
  for (;;) {
    float smaller = nextafterf(s, 0);
    if (smaller <= 0 || int8_value(lo, smaller, 255) < hi) break;
    s = smaller;
  }
  return s;
}

static void int8_encode_block(const float *v, size_t k, uint8_t *out) {
  float lo = v[0], hi = v[0];
  int finite = 1;
  for (size_t i = 0; i < k; i++) {
    finite &= isfinite(v[i]) != 0;
    lo = v[i] < lo ? v[i] : lo;
    hi = v[i] > hi ? v[i] : hi;
  }
  uint8_t *q = out + INT8_HEADER;
  if (!finite) {
    float nan = NAN;
    memcpy(out, &nan, 4);
    memcpy(out + 4, &nan, 4);
    memset(q, 0, k);
    return;
  }
  float step = int8_step(lo, hi);
  memcpy(out, &lo, 4);
  memcpy(out + 4, &step, 4);
  if (step == 0) {
    memset(q, 0, k);
    return;
  }
  double inv = 1.0 / (double)step;
  for (size_t i = 0; i < k; i++) {
    double x = ((double)v[i] - (double)lo) * inv + 0.5;
    q[i] = (uint8_t)(x >= 255.0 ? 255 : x <= 0 ? 0 : (int)x);
  }
}

static void int8_decode_block(const uint8_t *in, size_t k, float *dst) {
  float lo, step;
  memcpy(&lo, in, 4);
  memcpy(&step, in + 4, 4);
  const uint8_t *q = in + INT8_HEADER;
  for (size_t i = 0; i < k; i++) dst[i] = int8_value(lo, step, q[i]);
}

/* ---- dispatch ---- */
typedef void (*block_encode_fn)(const float *, size_t, uint8_t *);
typedef void (*block_decode_fn)(const uint8_t *, size_t, float *);

static void blocks_encode(const float *src, size_t n, uint8_t *wire, size_t header,
                          block_encode_fn fn) {
  for (size_t at = 0; at < n; at += STRATA_COMPRESS_BLOCK) {
    size_t k = n - at < STRATA_COMPRESS_BLOCK ? n - at : STRATA_COMPRESS_BLOCK;
    fn(src + at, k, wire);
    wire += header + k;
  }
}

static void blocks_decode(const uint8_t *wire, size_t n, float *dst, size_t header,
                          block_decode_fn fn) {
  for (size_t at = 0; at < n; at += STRATA_COMPRESS_BLOCK) {
    size_t k = n - at < STRATA_COMPRESS_BLOCK ? n - at : STRATA_COMPRESS_BLOCK;
    fn(wire, k, dst + at);
    wire += header + k;
  }
}

void strata_compress_encode(strata_compress c, const float *src, size_t n, uint8_t *wire) {
  switch (c) {
    case STRATA_COMPRESS_BF16:
      strata_f32_to_bf16_array((uint16_t *)(void *)wire, src, n);
      break;
    case STRATA_COMPRESS_F16:
      strata_f32_to_f16_array((uint16_t *)(void *)wire, src, n);
      break;
    case STRATA_COMPRESS_INT8:
      blocks_encode(src, n, wire, INT8_HEADER, int8_encode_block);
      break;
    case STRATA_COMPRESS_FP8:
      blocks_encode(src, n, wire, FP8_HEADER, fp8_encode_block);
      break;
    default:
      memcpy(wire, src, 4 * n);
  }
}

void strata_compress_decode(strata_compress c, const uint8_t *wire, size_t n, float *dst) {
  switch (c) {
    case STRATA_COMPRESS_BF16:
      strata_bf16_to_f32_array(dst, (const uint16_t *)(const void *)wire, n);
      break;
    case STRATA_COMPRESS_F16:
      strata_f16_to_f32_array(dst, (const uint16_t *)(const void *)wire, n);
      break;
    case STRATA_COMPRESS_INT8:
      blocks_decode(wire, n, dst, INT8_HEADER, int8_decode_block);
      break;
    case STRATA_COMPRESS_FP8:
      blocks_decode(wire, n, dst, FP8_HEADER, fp8_decode_block);
      break;
    default:
      memcpy(dst, wire, 4 * n);
  }
}

void strata_compress_decode_reduce(strata_compress c, const uint8_t *wire, size_t n,
                                   const float *src, float *dst, strata_reduce_fn reduce) {
  /* one block at a time through a small buffer that stays in L1 */
  float tmp[STRATA_COMPRESS_BLOCK * 8];
  const size_t step = STRATA_COMPRESS_BLOCK * 8;
  for (size_t at = 0; at < n; at += step) {
    size_t k = n - at < step ? n - at : step;
    const uint8_t *w = wire + strata_compress_wire_bytes(c, at); /* at is a block multiple */
    strata_compress_decode(c, w, k, tmp);
    reduce(dst + at, src + at, tmp, k);
  }
}
